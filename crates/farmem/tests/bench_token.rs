//! The benches against a rack started by hand with a cluster token: they
//! connect with --token-file, are refused without it, and give back what
//! they allocated.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

fn farmem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_farmem"))
}

/// A controller and one memory node of `capacity`, both with the token in
/// `token`; killed on drop.
struct Rack {
    controller: String,
    token: PathBuf,
    children: Vec<Child>,
}

impl Rack {
    fn start(capacity: &str) -> Self {
        let token = std::env::temp_dir().join(format!("farmem-bench-{}.token", std::process::id()));
        std::fs::write(&token, "the bench rack's secret\n").unwrap();
        let mut rack = Self {
            controller: String::new(),
            token,
            children: Vec::new(),
        };
        rack.controller = rack.spawn(&["controller", "--listen", "127.0.0.1:0"]);
        let ctl = rack.controller.clone();
        rack.spawn(&[
            "memnode",
            "--listen",
            "127.0.0.1:0",
            "--capacity",
            capacity,
            "--controller",
            &ctl,
        ]);
        rack
    }

    /// `farmem ARGS --token-file T --json`; the address it announces.
    fn spawn(&mut self, args: &[&str]) -> String {
        let mut child = farmem()
            .args(args)
            .arg("--token-file")
            .arg(&self.token)
            .arg("--json")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        self.children.push(child);
        let v: serde_json::Value = serde_json::from_str(line.trim())
            .unwrap_or_else(|e| panic!("`farmem {}` printed {line:?}: {e}", args[0]));
        v["addr"].as_str().unwrap().to_string()
    }
}

impl Drop for Rack {
    fn drop(&mut self) {
        for child in self.children.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.token);
    }
}

/// The rack holds 384 MiB and `bench wire` takes 256 MiB: a second run only
/// fits if the first gave its region back.
#[test]
fn bench_wire_uses_the_token_and_gives_its_region_back() {
    let rack = Rack::start("384MiB");
    let wire = |token: bool| {
        let mut cmd = farmem();
        cmd.args(["bench", "wire", "--json", "--iters", "100"])
            .args(["--stream-bytes", "64MiB", "--controller", &rack.controller]);
        if token {
            cmd.arg("--token-file").arg(&rack.token);
        }
        cmd.output().unwrap()
    };
    for run in 1..=2 {
        let out = wire(true);
        assert!(
            out.status.success(),
            "run {run}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v["read4k_us_p50"].as_f64() > Some(0.0), "{v}");
    }
    let out = wire(false);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&rack.controller) && stderr.contains("authentication failed"),
        "{stderr}"
    );
    // Delay's runs give back theirs too: four 128 MiB runs on 384 MiB only
    // fit if each releases its extent.
    let out = farmem()
        .args(["bench", "delay", "--json", "--gaps", "none,none,none,none"])
        .args(["--iters", "10", "--controller", &rack.controller])
        .arg("--token-file")
        .arg(&rack.token)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
