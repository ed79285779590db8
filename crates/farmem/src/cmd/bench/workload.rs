//! The program a bench or a batch runs, and the result every run of it
//! must agree on.

use std::ffi::OsString;
use std::process::Command;

use anyhow::Context;
use farmem_core::ByteSize;
use serde_json::Value;

/// A program: a built-in workload (`farmem demo --worker`) or any command.
#[derive(Debug, Clone)]
pub struct Workload {
    pub argv: Vec<OsString>,
    /// The demo's worker, which prints its own result and time.
    pub demo: bool,
}

/// The built-in workloads, as `--workload` and a batch's `workload` take them.
pub const BUILTIN: &str = "pagerank (alias demo), kv, scan, text, noise";

impl Workload {
    /// The demo's worker running `kind` (`demo` or `pagerank`, else a
    /// synthetic kind) over `size` for `iterations`.
    pub fn builtin(kind: &str, size: ByteSize, iterations: usize) -> anyhow::Result<Self> {
        let kind = match kind {
            "demo" | "pagerank" => "pagerank",
            other => {
                other
                    .parse::<farmem_workloads::synthetic::Kind>()
                    .map_err(|e| {
                        anyhow::anyhow!(
                            "workload `{other}`: {e}, or demo; any other program is a command"
                        )
                    })?;
                other
            }
        };
        let exe = std::env::current_exe().context("finding the farmem binary")?;
        let argv = [
            exe.into_os_string(),
            "demo".into(),
            "--worker".into(),
            "--kind".into(),
            kind.into(),
            "--size".into(),
            size.bytes().to_string().into(),
            "--iterations".into(),
            iterations.to_string().into(),
        ];
        Ok(Self {
            argv: argv.to_vec(),
            demo: true,
        })
    }

    /// Any command line (not empty).
    pub fn command(argv: Vec<OsString>) -> Self {
        Self { argv, demo: false }
    }

    /// The command line, for reports.
    pub fn shown(&self) -> String {
        self.argv
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The program, to run as it is.
    pub fn program(&self) -> Command {
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..]);
        cmd
    }

    /// The result to compare across runs and the program's own seconds:
    /// the demo's checksum and time, else a hash of all it printed.
    pub fn result(&self, stdout: &[u8]) -> (Option<String>, Option<f64>) {
        if !self.demo {
            return (Some(format!("{:016x}", fnv1a(stdout))), None);
        }
        let text = String::from_utf8_lossy(stdout);
        let r = text
            .lines()
            .filter_map(|l| l.strip_prefix("result "))
            .find_map(|r| serde_json::from_str::<Value>(r).ok());
        match r {
            Some(r) => (
                r["checksum"].as_str().map(str::to_string),
                r["seconds"].as_f64(),
            ),
            None => (None, None),
        }
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_reports_its_checksum_and_a_command_its_output_hash() {
        let demo = Workload {
            argv: vec!["x".into()],
            demo: true,
        };
        let out = b"progress 1 round 1\nresult {\"seconds\": 1.5, \"checksum\": \"00ab\"}\n";
        assert_eq!(demo.result(out), (Some("00ab".into()), Some(1.5)));
        assert_eq!(demo.result(b"progress 1\nresult {not json"), (None, None));
        let cmd = Workload::command(vec!["x".into()]);
        assert_eq!(cmd.result(b"a"), cmd.result(b"a"));
        assert_ne!(cmd.result(b"a"), cmd.result(b"b"));
    }

    #[test]
    fn builtin_kinds_are_checked() {
        let w = Workload::builtin("demo", ByteSize::mib(8), 2).unwrap();
        assert!(w.demo);
        assert!(
            w.shown()
                .ends_with("demo --worker --kind pagerank --size 8388608 --iterations 2")
        );
        assert!(Workload::builtin("kv", ByteSize::mib(8), 1).is_ok());
        let e = Workload::builtin("quicksort", ByteSize::mib(8), 1).unwrap_err();
        assert!(e.to_string().contains("quicksort"), "{e}");
    }
}
