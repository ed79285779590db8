//! A local rack for the quick start, benchmarks and `farmem run`: a
//! controller and memory nodes started as child processes of this binary on
//! loopback, stopped (and reaped) when the value is dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

/// Child daemons on loopback.
pub struct LocalRack {
    pub controller: String,
    pub memnodes: Vec<String>,
    children: Vec<Child>,
}

impl LocalRack {
    /// Starts a controller and `memnodes` memory nodes of `capacity` each.
    pub fn start(memnodes: usize, capacity: u64, granularity: u64) -> anyhow::Result<Self> {
        let mut rack = Self {
            controller: String::new(),
            memnodes: Vec::new(),
            children: Vec::new(),
        };
        rack.controller = rack.spawn(
            "controller",
            &[
                "controller",
                "--listen",
                "127.0.0.1:0",
                "--granularity",
                &granularity.to_string(),
                "--json",
            ],
        )?;
        for i in 0..memnodes {
            let ctl = rack.controller.clone();
            let addr = rack.spawn(
                &format!("memnode {}", i + 1),
                &[
                    "memnode",
                    "--listen",
                    "127.0.0.1:0",
                    "--capacity",
                    &capacity.to_string(),
                    "--controller",
                    &ctl,
                    "--json",
                ],
            )?;
            rack.memnodes.push(addr);
        }
        Ok(rack)
    }

    /// Spawns `farmem ARGS…` and waits for the JSON line announcing its
    /// address. What the daemon logs reaches our stderr as `farmem: ROLE: …`
    /// lines, so a program run under `farmem run` keeps its stderr readable.
    fn spawn(&mut self, role: &str, args: &[&str]) -> anyhow::Result<String> {
        let exe = std::env::current_exe().context("finding the farmem binary")?;
        let mut cmd = Command::new(&exe);
        // SAFETY: prctl is async-signal-safe; it makes the daemon die with us
        // even if we are killed without a chance to clean up.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let mut child = cmd
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting `farmem {}`", args[0]))?;
        let stderr = child.stderr.take().expect("stderr was piped");
        let role = role.to_string();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let line = strip_ansi(&line);
                let line = line.strip_prefix("farmem: ").unwrap_or(&line);
                eprintln!("farmem: {role}: {}", line.trim_start());
            }
        });
        let stdout = child.stdout.take().expect("stdout was piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        self.children.push(child);
        let line = rx.recv_timeout(Duration::from_secs(20)).with_context(|| {
            format!(
                "`farmem {}` did not report its address within 20 s",
                args[0]
            )
        })?;
        let v: serde_json::Value = serde_json::from_str(line.trim()).with_context(|| {
            format!(
                "`farmem {}` printed {line:?} instead of its address",
                args[0]
            )
        })?;
        match v.get("addr").and_then(|a| a.as_str()) {
            Some(addr) => Ok(addr.to_string()),
            None => bail!("`farmem {}` printed no address: {line}", args[0]),
        }
    }
}

/// `s` without ANSI escape sequences (log colours).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters… final byte in @..~
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl Drop for LocalRack {
    fn drop(&mut self) {
        // Memory nodes first, each gone before the next stops, the controller
        // last, so no node ever sees its controller vanish.
        for child in self.children.iter_mut().rev() {
            // SAFETY: plain kill(2) on our own child's pid.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
            }
            let deadline = std::time::Instant::now() + Duration::from_secs(3);
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if std::time::Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn colours_are_stripped() {
        assert_eq!(
            super::strip_ansi("\u{1b}[2m2026\u{1b}[0m \u{1b}[33m WARN\u{1b}[0m x"),
            "2026  WARN x"
        );
        assert_eq!(super::strip_ansi("plain"), "plain");
    }
}
