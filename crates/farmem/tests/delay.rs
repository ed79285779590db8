//! A program behind a long injected delay (ThymesisFlow's resilience
//! study: its attach broke at 4 ms) finishes with the answer it computes
//! on local memory, or stops with an error naming the memory node and the
//! delay; it never hangs and never answers wrong.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn farmem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_farmem"))
}

fn userfaultfd_missing() -> bool {
    !std::path::Path::new("/proc/sys/vm/unprivileged_userfaultfd").exists()
}

/// The demo worker's `result` line (its checksum), or None.
fn checksum(stdout: &[u8]) -> Option<String> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("result "))
        .find_map(|r| serde_json::from_str::<serde_json::Value>(r).ok())
        .and_then(|r| r["checksum"].as_str().map(str::to_string))
}

const WORKER: [&str; 8] = [
    "demo",
    "--worker",
    "--kind",
    "scan",
    "--size",
    "8MiB",
    "--iterations",
    "1",
];

/// The worker under `farmem run --delay gap`, stopped (and the test
/// failed) if it hangs.
fn behind(gap: &str) -> std::process::Output {
    let mut child = farmem()
        .args([
            "run",
            "--local-mem",
            "4MiB",
            "--replicas",
            "1",
            "--delay",
            gap,
            "--",
        ])
        .arg(env!("CARGO_BIN_EXE_farmem"))
        .args(WORKER)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(240) {
            let _ = child.kill();
            panic!("farmem run --delay {gap} hung for 240 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// Whether `out` is the stop with an error naming the node and the delay.
fn named_stop(gap: &str, out: &std::process::Output) -> bool {
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() != Some(74) {
        return false;
    }
    assert!(
        stderr.contains("memory node 0 at "),
        "--delay {gap}: {stderr}"
    );
    assert!(
        stderr.contains(&format!("an injected delay of {gap} is in force")),
        "--delay {gap}: the error does not name the delay: {stderr}"
    );
    assert!(
        checksum(&out.stdout).is_none(),
        "--delay {gap}: answered after failing"
    );
    true
}

#[test]
fn a_program_behind_a_long_delay_answers_right_or_names_the_delay() {
    if userfaultfd_missing() {
        return eprintln!("skipping: no userfaultfd");
    }
    let local = farmem().args(WORKER).output().unwrap();
    assert!(local.status.success());
    let want = checksum(&local.stdout).expect("the local run's checksum");
    for gap in ["4ms", "10ms"] {
        let out = behind(gap);
        if !named_stop(gap, &out) {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "--delay {gap}: {stderr}");
            assert_eq!(
                checksum(&out.stdout).as_deref(),
                Some(want.as_str()),
                "--delay {gap}: a different answer\n{stderr}"
            );
        }
    }
    // Every request waits 4 s at the gate, past the node's 3 s deadline.
    let out = behind("4s");
    assert!(
        named_stop("4s", &out),
        "--delay 4s: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_partitioned_link_gives_the_local_answer_and_needs_a_delay() {
    if userfaultfd_missing() {
        return eprintln!("skipping: no userfaultfd");
    }
    let kv = [
        "demo",
        "--worker",
        "--kind",
        "kv",
        "--size",
        "8MiB",
        "--iterations",
        "2",
    ];
    let local = farmem().args(kv).output().unwrap();
    let want = checksum(&local.stdout).expect("the local run's checksum");
    let stats = std::env::temp_dir().join(format!("farmem-partition-{}.json", std::process::id()));
    let out = farmem()
        .args([
            "run",
            "--local-mem",
            "4MiB",
            "--replicas",
            "1",
            "--backend",
            "remote",
        ])
        .args([
            "--delay",
            "rate:100MiB/s",
            "--delay-partition",
            "25%",
            "--stats-json",
        ])
        .arg(&stats)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_farmem"))
        .args(kv)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        checksum(&out.stdout).as_deref(),
        Some(want.as_str()),
        "{stderr}"
    );
    // Its requests passed the gate: faults' reads and write-backs both.
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let _ = std::fs::remove_file(&stats);
    let gate = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|p| p["delay_gate"].as_object().cloned())
        .expect("a process with a delay gate");
    assert!(gate["requests"].as_u64() > Some(100), "{gate:?}");
    // A partition of no delay is refused before anything runs.
    let bad = farmem()
        .args(["run", "--delay-partition", "25%", "--", "true"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--delay"));
}
