//! A memory node lost under a running program: `farmem run` on a rack
//! started by hand, its only memory node killed (or killed and restarted on
//! the same address) while the program re-reads its far data. The program
//! must stop with a message naming the node and exit 74, never print a
//! wrong checksum and never hang.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn farmem() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_farmem"))
}

/// Fills MiB of far memory, then checksums it round after round; every
/// round must print the same sum.
const REHASH: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
int main(int argc, char **argv) {
    size_t words = ((size_t)atoi(argv[1]) << 20) / 8;
    int rounds = atoi(argv[2]);
    uint64_t *a = malloc(words * 8);
    if (!a) return 2;
    for (size_t i = 0; i < words; i++) a[i] = i * 0x9E3779B97F4A7C15ull;
    for (int r = 0; r < rounds; r++) {
        uint64_t h = 0xcbf29ce484222325ull;
        for (size_t i = 0; i < words; i++) h = (h ^ a[i]) * 0x100000001b3ull;
        printf("%016llx\n", (unsigned long long)h);
        fflush(stdout);
    }
    return 0;
}
"#;

/// The compiled program, or None (reason printed) without userfaultfd,
/// the preload shim or a C compiler.
fn rehash_or_skip(tag: &str) -> Option<PathBuf> {
    let dir = farmem().parent().map(Path::to_path_buf).unwrap_or_default();
    if !dir.join("libfarmem_preload.so").is_file() {
        eprintln!("skipping: libfarmem_preload.so is not beside the farmem binary");
        return None;
    }
    // SAFETY: userfaultfd(2) with flags only; the descriptor is closed at once.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC) };
    if fd < 0 {
        eprintln!("skipping: userfaultfd is unavailable");
        return None;
    }
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd as i32) };
    let src = std::env::temp_dir().join(format!("rehash-{tag}-{}.c", std::process::id()));
    std::fs::write(&src, REHASH).unwrap();
    let bin = src.with_extension("bin");
    let built = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(&src)
        .status();
    let _ = std::fs::remove_file(&src);
    match built {
        Ok(s) if s.success() => Some(bin),
        Ok(s) => panic!("cc failed: {s}"),
        Err(_) => {
            eprintln!("skipping: no C compiler (cc)");
            None
        }
    }
}

/// A daemon of this binary, killed with SIGKILL when dropped.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `farmem ARGS… --json` and returns it with the address it printed.
fn daemon(args: &[&str]) -> (Daemon, String) {
    let mut child = Command::new(farmem())
        .args(args)
        .arg("--json")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    let addr = v["addr"].as_str().unwrap().to_string();
    (Daemon(child), addr)
}

fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

fn memnode(listen: &str, controller: &str) -> Daemon {
    let args = [
        "memnode",
        "--listen",
        listen,
        "--capacity",
        "4GiB",
        "--controller",
        controller,
    ];
    daemon(&args).0
}

/// Runs the program under `farmem run` on a one-node rack, and once it has
/// printed its first checksum, kills the node (and starts a new one on the
/// same address if `restart`). Returns the expected checksum and the run's
/// exit code, stdout lines and stderr.
fn lose_the_node(restart: bool) -> Option<(String, Option<i32>, Vec<String>, String)> {
    let bin = rehash_or_skip(if restart { "restart" } else { "kill" })?;
    let local = Command::new(&bin).args(["192", "1"]).output().unwrap();
    let expected = String::from_utf8(local.stdout).unwrap().trim().to_string();
    let (_ctl, ctl) = daemon(&["controller", "--listen", "127.0.0.1:0"]);
    let listen = free_port();
    let mut node = memnode(&listen, &ctl);
    let mut run = Command::new(farmem())
        .args(["run", "--controller", &ctl, "--local-mem", "32MiB", "--"])
        .arg(&bin)
        .args(["192", "100000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = run.stderr.take().unwrap();
    let err = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let mut lines = BufReader::new(run.stdout.take().unwrap()).lines();
    let mut out = vec![lines.next().unwrap().unwrap()];
    // SIGKILL, and wait until its port is free.
    let _ = node.0.kill();
    let _ = node.0.wait();
    let _restarted = restart.then(|| memnode(&listen, &ctl));
    let started = Instant::now();
    out.extend(lines.map_while(Result::ok));
    let status = loop {
        if let Some(s) = run.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > Duration::from_secs(120) {
            let _ = run.kill();
            panic!("the program still runs 120 s after its memory node was lost");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = std::fs::remove_file(&bin);
    Some((expected, status.code(), out, err.join().unwrap()))
}

fn assert_stopped_never_wrong(expected: &str, code: Option<i32>, out: &[String], err: &str) {
    assert!(
        out.iter().all(|l| l == expected),
        "a wrong checksum was printed ({expected} expected): {out:?}\n{err}"
    );
    assert_eq!(code, Some(74), "stdout: {out:?}\nstderr: {err}");
    assert!(err.contains("far memory lost"), "{err}");
    assert!(err.contains("memory node 0 at 127.0.0.1:"), "{err}");
    assert!(err.contains("was stopped"), "{err}");
}

#[test]
fn a_killed_memory_node_stops_the_program_with_its_name() {
    let Some((expected, code, out, err)) = lose_the_node(false) else {
        return;
    };
    assert_stopped_never_wrong(&expected, code, &out, &err);
    assert!(err.contains("has not answered"), "{err}");
}

#[test]
fn a_restarted_memory_node_is_refused_not_read_as_zeros() {
    let Some((expected, code, out, err)) = lose_the_node(true) else {
        return;
    };
    assert_stopped_never_wrong(&expected, code, &out, &err);
    assert!(
        err.contains("restarted") || err.contains("has not answered"),
        "{err}"
    );
}
