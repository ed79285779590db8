//! `farmem status` against a live rack: its memory nodes, a client's
//! grants and lease, and a killed node shown down.

use std::process::{Command, Stdio};

mod common;
use common::{Daemon, daemon};
use std::time::{Duration, Instant};

fn farmem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_farmem"))
}

fn status(ctl: &str) -> serde_json::Value {
    common::status_json(ctl, &[])
}

/// Polls `status` until `done` holds (or fails after 20 s).
fn until(ctl: &str, what: &str, done: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let s = status(ctl);
        if done(&s) {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "never {what}: {s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn status_lists_nodes_grants_and_leases_and_shows_a_killed_node_down() {
    if !std::path::Path::new("/proc/sys/vm/unprivileged_userfaultfd").exists() {
        return eprintln!("skipping: no userfaultfd");
    }
    let (_ctl, ctl) = daemon(&[
        "controller",
        "--listen",
        "127.0.0.1:0",
        "--heartbeat-timeout-ms",
        "1000",
    ]);
    let node = |cap: &str| {
        daemon(&[
            "memnode",
            "--listen",
            "127.0.0.1:0",
            "--capacity",
            cap,
            "--controller",
            &ctl,
        ])
    };
    let (mut victim, victim_addr) = node("1GiB");
    let (_other, _) = node("2GiB");
    let s = until(&ctl, "two nodes up", |s| s["nodes_up"] == 2);
    let caps: Vec<u64> = s["node_table"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["capacity_bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(caps.iter().sum::<u64>(), 3 << 30, "{s}");
    // A program holding far memory: its grants and its lease.
    let _program = Daemon(
        farmem()
            .args(["run", "--controller", &ctl, "--local-mem", "4MiB", "--"])
            .arg(env!("CARGO_BIN_EXE_farmem"))
            .args(["demo", "--worker", "--kind", "scan", "--size", "16MiB"])
            .args(["--iterations", "100000"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let s = until(&ctl, "a client with grants", |s| {
        s["clients"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["granted_bytes"].as_u64() >= Some(16 << 20))
        })
    });
    let client = s["clients"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["granted_bytes"].as_u64() >= Some(16 << 20))
        .unwrap();
    assert!(
        client["name"].as_str().unwrap().starts_with("farmem-run-"),
        "{s}"
    );
    assert!(client["grants"].as_u64() >= Some(1));
    assert!(client["lease_ms_left"].as_u64() > Some(0), "{s}");
    // Killed: shown down once its heartbeats are missed.
    let _ = victim.0.kill();
    let _ = victim.0.wait();
    let s = until(&ctl, "the killed node down", |s| s["nodes_up"] == 1);
    let down: Vec<_> = s["node_table"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["up"] == false)
        .collect();
    assert_eq!(down.len(), 1, "{s}");
    assert_eq!(down[0]["addr"], victim_addr.as_str());
    // The table view names it too.
    let table = farmem()
        .args(["status", "--controller", &ctl])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("1 of 2 memory nodes up") && text.contains("DOWN"),
        "{text}"
    );
    // No controller there: a named error.
    let none = farmem()
        .args(["status", "--controller", "127.0.0.1:1"])
        .output()
        .unwrap();
    assert!(!none.status.success());
    assert!(String::from_utf8_lossy(&none.stderr).contains("127.0.0.1:1"));
}

/// SIGTERM on a memory node: it tells the controller before it stops, so
/// the node shows down at once (the controller's heartbeat timeout here is
/// a minute), and says so as it exits 0.
#[test]
fn a_memory_node_stopped_with_sigterm_is_down_at_once_and_says_so() {
    use std::io::{BufRead, BufReader, Read};
    let (_ctl, ctl) = daemon(&[
        "controller",
        "--listen",
        "127.0.0.1:0",
        "--heartbeat-timeout-ms",
        "60000",
    ]);
    let mut node = farmem()
        .args(["memnode", "--listen", "127.0.0.1:0", "--capacity", "1GiB"])
        .args(["--controller", &ctl, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(node.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    until(&ctl, "the node up", |s| s["nodes_up"] == 1);
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(node.id() as i32, libc::SIGTERM) }, 0);
    let started = Instant::now();
    let exit = node.wait().unwrap();
    let mut stderr = String::new();
    node.stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(exit.success(), "{stderr}");
    assert!(
        stderr.contains("stopped on SIGTERM, after telling the controller"),
        "{stderr}"
    );
    let s = status(&ctl);
    assert_eq!(s["nodes_up"], 0, "not down at once: {s}");
    assert!(started.elapsed() < Duration::from_secs(30), "{s}");
}

/// `--config FILE`: a controller and a memory node started from TOML
/// files whose keys are their flags, a flag on the command line winning.
#[test]
fn daemons_start_from_config_files_with_the_command_line_winning() {
    let dir = std::env::temp_dir();
    let ctl_file = dir.join(format!("farmem-ctl-{}.toml", std::process::id()));
    std::fs::write(
        &ctl_file,
        "listen = \"127.0.0.1:0\"\nheartbeat-timeout-ms = \"2s\"\n",
    )
    .unwrap();
    let (_ctl, ctl) = daemon(&["controller", "--config", ctl_file.to_str().unwrap()]);
    let node_file = dir.join(format!("farmem-node-{}.toml", std::process::id()));
    let text = format!(
        "listen = \"127.0.0.1:0\"\ncapacity = \"3GiB\"\ncontroller = \"{ctl}\"\nheartbeat-ms = 100\n"
    );
    std::fs::write(&node_file, text).unwrap();
    let (_node, _) = daemon(&[
        "memnode",
        "--config",
        node_file.to_str().unwrap(),
        "--capacity",
        "2GiB",
    ]);
    let s = until(&ctl, "the node up", |s| s["nodes_up"] == 1);
    assert_eq!(
        s["capacity_bytes"],
        2u64 << 30,
        "the command line's capacity: {s}"
    );
    // A key that is no flag stops the daemon before it starts, naming it.
    std::fs::write(&node_file, "capacty = \"1GiB\"\n").unwrap();
    let out = farmem()
        .args(["memnode", "--config", node_file.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("`capacty` is not a flag of farmem memnode"),
        "{stderr}"
    );
    let _ = std::fs::remove_file(ctl_file);
    let _ = std::fs::remove_file(node_file);
}
