//! What the integration tests that start daemons share.

// Each test binary uses its own part of this.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A child of this binary, killed with SIGKILL when dropped.
pub struct Daemon(pub Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `farmem ARGS… --json` and returns it with the address it printed.
pub fn daemon(args: &[&str]) -> (Daemon, String) {
    let (d, v) = daemon_json(args);
    let addr = v["addr"].as_str().unwrap().to_string();
    (d, addr)
}

/// Starts `farmem ARGS… --json` and returns it with the object it printed.
/// Its stderr goes to a file, read back only if it printed no object: a
/// daemon that failed to start says why in the test's panic.
pub fn daemon_json(args: &[&str]) -> (Daemon, serde_json::Value) {
    static STARTED: AtomicUsize = AtomicUsize::new(0);
    let log = std::env::temp_dir().join(format!(
        "farmem-test-daemon-{}-{}.stderr",
        std::process::id(),
        STARTED.fetch_add(1, Ordering::Relaxed)
    ));
    let mut child = Command::new(env!("CARGO_BIN_EXE_farmem"))
        .args(args)
        .arg("--json")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let printed: serde_json::Value = match serde_json::from_str(line.trim()) {
        Ok(v) => v,
        Err(e) => {
            // Killed and reaped first, so its stderr is all there.
            drop(Daemon(child));
            let why = std::fs::read_to_string(&log).unwrap_or_default();
            panic!("farmem {args:?} printed {line:?} ({e}); its stderr:\n{why}")
        }
    };
    let _ = std::fs::remove_file(&log);
    (Daemon(child), printed)
}

/// `farmem status --controller CTL --json EXTRA…`, which must succeed, as
/// the object it printed.
pub fn status_json(ctl: &str, extra: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_farmem"))
        .args(["status", "--json", "--controller", ctl])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Why this machine cannot run programs on far memory (no shim built, no
/// userfaultfd), if it cannot.
pub fn far_memory_unavailable() -> Option<String> {
    let farmem = std::path::Path::new(env!("CARGO_BIN_EXE_farmem"));
    let dir = farmem
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
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

/// The path of `program`, or None (a skip) when it is not installed.
/// scripts/test installs the programs these tests drive and sets
/// FARMEM_TEST_REQUIRE_PROGRAMS, so there a missing one fails instead.
pub fn installed(program: &str) -> Option<std::path::PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("FARMEM_TEST_REQUIRE_PROGRAMS").is_none(),
            "{program} is not installed (scripts/test installs it)"
        );
        eprintln!("skipping: {program} is not installed");
    }
    found
}

/// Compiles the C file `src` into a fresh binary; None (reason printed)
/// without userfaultfd or a C compiler.
pub fn compiled_or_skip(name: &str, src: &std::path::Path) -> Option<std::path::PathBuf> {
    if let Some(why) = far_memory_unavailable() {
        eprintln!("skipping: {why}");
        return None;
    }
    // Tests run in parallel and may compile the same program.
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = std::env::temp_dir().join(format!("{name}-{}-{n}", std::process::id()));
    let Ok(status) = std::process::Command::new("cc")
        .args(["-O2", "-Wall", "-pthread", "-o"])
        .arg(&out)
        .arg(src)
        .status()
    else {
        eprintln!("skipping: no C compiler (cc)");
        return None;
    };
    assert!(status.success(), "cc failed on {}", src.display());
    Some(out)
}
