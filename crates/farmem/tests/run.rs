//! `farmem run` end to end: a C program allocating through malloc and mmap
//! runs on far memory under a local limit well below its footprint, with
//! the same output and exit code as without farmem.

use std::path::{Path, PathBuf};
use std::process::Command;

fn farmem() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_farmem"))
}

/// Why the environment cannot run these tests, if it cannot.
fn unavailable() -> Option<String> {
    let dir = farmem().parent().map(Path::to_path_buf).unwrap_or_default();
    if !dir.join("libfarmem_preload.so").is_file()
        && !dir.join("deps/libfarmem_preload.so").is_file()
    {
        return Some(format!(
            "libfarmem_preload.so is not in {} (scripts/test builds it with `cargo build --release -p farmem-preload`)",
            dir.display()
        ));
    }
    // SAFETY: userfaultfd(2) with flags only; the descriptor is closed at once.
    let fd = unsafe {
        let fd = libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | 1);
        if fd >= 0 {
            fd
        } else {
            libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC)
        }
    };
    if fd < 0 {
        return Some(format!(
            "userfaultfd is unavailable: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd as i32) };
    None
}

/// Compiles tests/c/alloc_test.c of farmem-preload; None without a C compiler.
fn alloc_test_binary() -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../farmem-preload/tests/c/alloc_test.c");
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = std::env::temp_dir().join(format!("alloc-test-{}-{n}", std::process::id()));
    let status = Command::new("cc")
        .args(["-O2", "-Wall", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .ok()?;
    assert!(status.success(), "cc failed on {}", src.display());
    Some(out)
}

#[test]
fn c_program_on_far_memory_matches_a_local_run() {
    if let Some(why) = unavailable() {
        eprintln!("skipping: {why}");
        return;
    }
    let Some(bin) = alloc_test_binary() else {
        eprintln!("skipping: no C compiler (cc)");
        return;
    };
    // 8 blocks of 16 MiB = 128 MiB of large allocations against 32 MiB local.
    let local = Command::new(&bin).args(["8", "16"]).output().unwrap();
    assert!(local.status.success(), "local run failed: {local:?}");
    let stats = std::env::temp_dir().join(format!("farmem-run-test-{}.json", std::process::id()));
    let far = Command::new(farmem())
        .args(["run", "--local-mem", "32MiB", "--stats-json"])
        .arg(&stats)
        .arg("--")
        .arg(&bin)
        .args(["8", "16"])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&bin);
    let stderr = String::from_utf8_lossy(&far.stderr);
    assert_eq!(far.status.code(), local.status.code(), "stderr: {stderr}");
    assert_eq!(
        String::from_utf8_lossy(&far.stdout),
        String::from_utf8_lossy(&local.stdout),
        "stderr: {stderr}"
    );
    assert!(String::from_utf8_lossy(&far.stdout).ends_with("ok\n"));
    // farmem's own lines carry its prefix; the program wrote nothing to stderr.
    assert!(
        stderr.lines().all(|l| l.starts_with("farmem: ")),
        "stderr: {stderr}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let _ = std::fs::remove_file(&stats);
    let total = &report["total"];
    let n = |k: &str| total[k].as_u64().unwrap_or(0);
    assert_eq!(report["exit_code"], 0);
    assert_eq!(
        report["processes"].as_array().map(Vec::len),
        Some(1),
        "{report}"
    );
    assert!(n("faults_missing") > 0, "{report}");
    assert!(
        n("pages_evicted_clean") + n("pages_evicted_dirty") > 0,
        "{report}"
    );
    assert!(n("bytes_written_back") > 0, "{report}");
    assert!(
        report["processes"][0]["far_bytes_peak"].as_u64().unwrap() >= 128 << 20,
        "{report}"
    );
}

#[test]
fn exit_codes_and_signals_pass_through() {
    if let Some(why) = unavailable() {
        eprintln!("skipping: {why}");
        return;
    }
    let run = |script: &str| {
        Command::new(farmem())
            .args(["run", "--memnodes", "1", "--", "sh", "-c", script])
            .output()
            .unwrap()
    };
    let out = run("echo hello; echo oops >&2; exit 3");
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("oops\n"), "{stderr}");
    assert!(
        stderr.lines().skip(1).all(|l| l.starts_with("farmem: ")),
        "{stderr}"
    );
    let out = run("kill -TERM $$");
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM));
    // SIGTERM to farmem itself reaches the program, and farmem still
    // reports the program's fate and stops its rack.
    let out = run("kill -TERM $PPID; exec sleep 30");
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM));
}

#[test]
fn missing_command_and_bad_flags_are_clear_errors() {
    let out = Command::new(farmem())
        .args(["run", "--dirty", "word", "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("word"));
    let out = Command::new(farmem()).args(["run"]).output().unwrap();
    assert!(!out.status.success());
}

#[test]
fn unreachable_controller_falls_back_to_local_memory() {
    if let Some(why) = unavailable() {
        eprintln!("skipping: {why}");
        return;
    }
    let Some(bin) = alloc_test_binary() else {
        eprintln!("skipping: no C compiler (cc)");
        return;
    };
    let local = Command::new(&bin).args(["2", "4"]).output().unwrap();
    // Port 1 on loopback: nothing listens, the connection is refused.
    let far = Command::new(farmem())
        .args(["run", "--controller", "127.0.0.1:1", "--"])
        .arg(&bin)
        .args(["2", "4"])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&bin);
    let stderr = String::from_utf8_lossy(&far.stderr);
    assert_eq!(far.status.code(), Some(0), "{stderr}");
    assert_eq!(far.stdout, local.stdout, "{stderr}");
    assert!(
        stderr.contains("farmem: connecting to controller 127.0.0.1:1")
            && stderr.contains("running on local memory only"),
        "{stderr}"
    );
    assert!(
        stderr.lines().all(|l| l.starts_with("farmem: ")),
        "{stderr}"
    );
}
