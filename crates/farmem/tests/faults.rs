//! `farmem eval faults` end to end on a tiny soak (about 20 s): three
//! memory nodes, two copies, one program, a fault or two. The program goes
//! on (its lost copies made again on the third node) or stops with exit 74
//! when both its copies are gone; it never hangs and never reads a wrong
//! byte, and the eval reports one JSON object.

use std::path::PathBuf;
use std::process::Command;

fn farmem() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_farmem"))
}

/// False (reason printed) without the preload shim or userfaultfd.
fn can_run() -> bool {
    let dir = farmem().parent().map(PathBuf::from).unwrap_or_default();
    if !dir.join("libfarmem_preload.so").is_file() {
        eprintln!("skipping: libfarmem_preload.so is not beside the farmem binary");
        return false;
    }
    // SAFETY: userfaultfd(2) with flags only; the descriptor is closed at once.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC) };
    if fd < 0 {
        eprintln!("skipping: userfaultfd is unavailable");
        return false;
    }
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd as i32) };
    true
}

#[test]
fn a_short_soak_reports_faults_and_never_a_wrong_byte() {
    if !can_run() {
        return;
    }
    let out = Command::new(farmem())
        .args(["eval", "faults", "--json", "--minutes", "0.25"])
        .args(["--memnodes", "3", "--replicas", "2", "--programs", "1"])
        .args(["--size", "24MiB", "--local-mem", "4MiB", "--hang-secs", "6"])
        .args(["--seed", "7"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // 1 would be a program that failed or hung (reported, not hidden).
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(stdout.trim().lines().count(), 1, "{stdout}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["eval"], "faults");
    assert_eq!(v["bytes_mismatched"], 0, "{v}");
    assert!(v["bytes_verified"].as_u64().unwrap() > 0, "{v}");
    assert!(v["faults"]["total"].as_u64().unwrap() >= 1, "{v}");
    let p = &v["programs"];
    let ended: u64 = [
        "finished",
        "stopped_data_lost",
        "refused_no_far_memory",
        "failed",
        "hung",
        "killed_at_end",
    ]
    .iter()
    .map(|k| p[*k].as_u64().unwrap())
    .sum();
    assert_eq!(ended, p["started"].as_u64().unwrap(), "{v}");
    assert_eq!(p["hung"], 0, "{v}");
    assert_eq!(p["failed"], 0, "{v}");
    assert_eq!(v["config"]["memnodes"], 3);
    // The logs, kept when a program failed or hung.
    if let Some(dir) = v["logs"].as_str() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// True when etcd is on PATH; otherwise a skip (a failure under
/// FARMEM_TEST_REQUIRE_PROGRAMS, where scripts/test installed it).
fn etcd_installed() -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join("etcd").is_file()));
    if !found {
        assert!(
            std::env::var_os("FARMEM_TEST_REQUIRE_PROGRAMS").is_none(),
            "etcd is not installed (scripts/test installs etcd-server)"
        );
        eprintln!("skipping: etcd is not installed");
    }
    found
}

/// Two controllers on an etcd the soak starts: the leader is killed (the
/// first fault always is), another takes over, and the program started at
/// the kill finishes; no program fails, hangs or reads a wrong byte.
#[test]
fn a_soak_with_two_controllers_kills_the_leader_and_goes_on() {
    if !can_run() || !etcd_installed() {
        return;
    }
    let out = Command::new(farmem())
        .args(["eval", "faults", "--json", "--minutes", "0.25"])
        .args(["--memnodes", "3", "--replicas", "2", "--programs", "1"])
        .args([
            "--size",
            "24MiB",
            "--local-mem",
            "4MiB",
            "--hang-secs",
            "20",
        ])
        .args(["--seed", "5", "--controllers", "2"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["bytes_mismatched"], 0, "{v}");
    assert_eq!(v["programs"]["failed"], 0, "{v}");
    assert_eq!(v["programs"]["hung"], 0, "{v}");
    let c = &v["controllers"];
    assert_eq!(c["count"], 2, "{v}");
    let kills = c["kills"].as_array().unwrap();
    assert!(!kills.is_empty(), "{v}");
    assert_eq!(c["leader_kills"], kills.len(), "{v}");
    assert_eq!(v["faults"]["leader_kill"], kills.len(), "{v}");
    for k in kills {
        assert!(k["takeover_ms"].is_number(), "no takeover: {v}");
        assert_eq!(k["new_run_exit"], 0, "the run started at the kill: {v}");
    }
    if let Some(dir) = v["logs"].as_str() {
        let _ = std::fs::remove_dir_all(dir);
    }
}
