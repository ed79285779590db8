//! contrib/systemd cannot rot: each unit's command line is one farmem
//! takes, and a controller and a memory node start from the example
//! configs (their host addresses overridden on the command line, which
//! wins) and stop cleanly on SIGTERM, the units' KillSignal.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::daemon_json;

fn farmem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_farmem"))
}

fn contrib(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../contrib/systemd")
        .join(file)
}

/// The words of `unit`'s ExecStart after the binary, its config file
/// replaced by the example `config` (the unit names where it is installed).
fn exec_start(unit: &str, installed: &str, config: &str) -> Vec<String> {
    let text = std::fs::read_to_string(contrib(unit)).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap_or_else(|| panic!("{unit} has no ExecStart"));
    let mut words = line.split_whitespace();
    assert_eq!(words.next(), Some("/usr/local/bin/farmem"), "{line}");
    let words: Vec<String> = words
        .map(|w| {
            if w == installed {
                contrib(config).to_str().unwrap().to_string()
            } else {
                w.to_string()
            }
        })
        .collect();
    assert!(
        words.iter().any(|w| w.ends_with(config)),
        "{unit} does not read {installed}: {line}"
    );
    words
}

#[test]
fn the_units_command_lines_are_farmems() {
    for (unit, installed, config) in [
        (
            "farmem-controller.service",
            "/etc/farmem/controller.toml",
            "controller.toml",
        ),
        (
            "farmem-memnode@.service",
            "/etc/farmem/memnode-%i.toml",
            "memnode.toml",
        ),
    ] {
        // With --help, farmem parses the whole line (the config's keys
        // too) and stops: an unknown flag or key fails it.
        let out = farmem()
            .args(exec_start(unit, installed, config))
            .arg("--help")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{unit}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// SIGTERM to `child`; whether it exited 0, and its stderr if piped.
fn terminate(child: &mut Child) -> (bool, String) {
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let exit = child.wait().unwrap();
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut stderr).unwrap();
    }
    (exit.success(), stderr)
}

#[test]
fn daemons_start_from_the_example_configs_and_stop_on_sigterm() {
    let dir = std::env::temp_dir().join(format!("farmem-contrib-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state.json");
    let ctl_file = contrib("controller.toml");
    let (mut ctl_daemon, ctl) = daemon_json(&[
        "controller",
        "--config",
        ctl_file.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--state",
        state.to_str().unwrap(),
        "--metrics",
        "127.0.0.1:0",
    ]);
    let ctl = ctl["addr"].as_str().unwrap().to_string();
    let node_file = contrib("memnode.toml");
    let mut node = farmem()
        .args(["memnode", "--config", node_file.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0", "--controller", &ctl])
        .args(["--metrics", "127.0.0.1:0", "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The node's capacity is the example's: the file was read.
    let start = Instant::now();
    let status = loop {
        let out = farmem()
            .args(["status", "--json", "--controller", &ctl])
            .output()
            .unwrap();
        let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if s["nodes_up"] == 1 {
            break s;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "never up: {s}");
        if let Some(exit) = node.try_wait().unwrap() {
            panic!("the memory node exited: {exit}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status["capacity_bytes"], 64u64 << 30, "{status}");
    assert!(state.exists(), "the controller kept no state");
    let (ok, stderr) = terminate(&mut node);
    assert!(ok, "{stderr}");
    assert!(stderr.contains("after telling the controller"), "{stderr}");
    let (ok, _) = terminate(&mut ctl_daemon.0);
    assert!(ok, "the controller did not exit 0 on SIGTERM");
    let _ = std::fs::remove_dir_all(&dir);
}
