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
