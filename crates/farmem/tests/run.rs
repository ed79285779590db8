//! `farmem run` end to end: a C program allocating through malloc and mmap
//! runs on far memory under a local limit well below its footprint, with
//! the same output and exit code as without farmem.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

use common::far_memory_unavailable as unavailable;
use common::{compiled_or_skip, installed};

fn farmem() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_farmem"))
}

/// The compiled alloc test, or None (reason printed) where these tests
/// cannot run.
fn alloc_test_or_skip() -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../farmem-preload/tests/c/alloc_test.c");
    compiled_or_skip("alloc-test", &src)
}

/// Compiles `source` as a C program named after `name`; None (reason
/// printed) where these tests cannot run.
fn c_program_or_skip(name: &str, source: &str) -> Option<PathBuf> {
    let src = std::env::temp_dir().join(format!("{name}-{}.c", std::process::id()));
    std::fs::write(&src, source).unwrap();
    let bin = compiled_or_skip(name, &src);
    let _ = std::fs::remove_file(&src);
    bin
}

#[test]
fn c_program_on_far_memory_matches_a_local_run() {
    let Some(bin) = alloc_test_or_skip() else {
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

/// Link compression end to end (issue 23, point 3): a program whose far
/// data is compressible, under eviction, prints the same checksum with
/// pages packed both ways as without, and --stats-json counts the bytes.
#[test]
fn link_compression_keeps_the_programs_data_and_reports_the_link() {
    const WALK: &str = r#"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    size_t n = (size_t)64 << 17; /* 64 MiB of 8-byte words */
    uint64_t *a = malloc(n * 8), sum = 0;
    for (size_t i = 0; i < n; i++) a[i] = i % 977;
    for (int p = 0; p < 2; p++)
        for (size_t i = 0; i < n; i += 8) { sum = sum * 31 + a[i]; a[i] += p; }
    printf("%llu\n", (unsigned long long)sum);
    return 0;
}
"#;
    let Some(bin) = c_program_or_skip("link-walk", WALK) else {
        return;
    };
    let local = Command::new(&bin).output().unwrap();
    assert!(local.status.success());
    for mode in ["lz", "off"] {
        let stats = std::env::temp_dir().join(format!(
            "farmem-link-test-{mode}-{}.json",
            std::process::id()
        ));
        let far = Command::new(farmem())
            .args(["run", "--local-mem", "16MiB", "--link-compression", mode])
            .arg("--stats-json")
            .arg(&stats)
            .arg("--")
            .arg(&bin)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&far.stderr);
        assert_eq!(far.stdout, local.stdout, "{mode}: {stderr}");
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
        let _ = std::fs::remove_file(&stats);
        assert_eq!(report["link_compression"], mode);
        let link = &report["link"];
        let n = |k: &str| link[k].as_u64().unwrap_or(0);
        // The program's 64 MiB went out and came back under eviction.
        assert!(n("write_raw_bytes") >= 48 << 20, "{mode}: {link}");
        assert!(n("read_raw_bytes") >= 48 << 20, "{mode}: {link}");
        assert!(n("frame_bytes_sent") >= n("write_wire_bytes"), "{link}");
        assert_eq!(n("decompress_errors"), 0);
        let ratio = link["compression_ratio"].as_f64().unwrap();
        if mode == "off" {
            assert_eq!(n("read_wire_bytes"), n("read_raw_bytes"));
            assert_eq!(n("write_wire_bytes"), n("write_raw_bytes"));
            assert_eq!(ratio, 1.0);
        } else {
            // Small integers in 8-byte words: LZ4 halves them both ways.
            assert!(
                n("read_wire_bytes") * 10 < n("read_raw_bytes") * 6,
                "{link}"
            );
            assert!(
                n("write_wire_bytes") * 10 < n("write_raw_bytes") * 6,
                "{link}"
            );
            assert!(n("unpacked") > 0 && n("packed_lz") > 0, "{link}");
            assert!(ratio > 1.7, "{link}");
        }
    }
    let _ = std::fs::remove_file(&bin);
}

/// The names the UniMem issue uses pick the same policy objects the simulator
/// runs (2q is kona-pc, set-assoc is Kona's 4-way), and each keeps every byte.
#[test]
fn each_local_cache_policy_and_fault_path_runs_a_program_under_eviction() {
    let Some(bin) = alloc_test_or_skip() else {
        return;
    };
    // 4 blocks of 8 MiB against 8 MiB local: every policy must evict.
    let local = Command::new(&bin).args(["4", "8"]).output().unwrap();
    assert!(local.status.success(), "local run failed: {local:?}");
    // The last one also has its faults served in the program's own
    // threads (SIGBUS handler) instead of the runtime's; the handlers of
    // the others wait for faults each way they can.
    for (policy, fault_path, wait) in [
        ("filter", "thread", "poll"),
        ("2q", "thread", "spin"),
        ("set-assoc", "thread", "adaptive:20"),
        ("clock", "thread", "hybrid:50"),
        ("lru", "signal", "adaptive"),
    ] {
        let stats = std::env::temp_dir().join(format!(
            "farmem-run-policy-{policy}-{}.json",
            std::process::id()
        ));
        let far = Command::new(farmem())
            .args(["run", "--memnodes", "1", "--local-mem", "8MiB"])
            .args(["--fault-path", fault_path, "--fault-wait", wait])
            .args(["--policy", policy, "--stats-json"])
            .arg(&stats)
            .arg("--")
            .arg(&bin)
            .args(["4", "8"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&far.stderr);
        assert_eq!(
            String::from_utf8_lossy(&far.stdout),
            String::from_utf8_lossy(&local.stdout),
            "{policy}: {stderr}"
        );
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
        let _ = std::fs::remove_file(&stats);
        let n = |k: &str| report["total"][k].as_u64().unwrap_or(0);
        assert!(
            n("pages_evicted_clean") + n("pages_evicted_dirty") > 0,
            "{policy}: {report}"
        );
        let wait = wait.parse::<farmem_runtime::WaitMode>().unwrap();
        assert_eq!(report["fault_wait"], wait.to_string(), "{policy}");
    }
    let _ = std::fs::remove_file(&bin);
    for (flag, bad, says) in [
        ("--policy", "mru", "unknown policy `mru`"),
        ("--fault-wait", "nap", "unknown wait mode `nap`"),
    ] {
        let out = Command::new(farmem())
            .args(["run", flag, bad, "--", "true"])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{stderr}");
    }
}

/// Fault path `signal`: system calls reading into and writing from far
/// pages that are not local (a file, a socket pair, a pipe, stdio), and a
/// thread that blocks every signal, move every byte; without the shim's
/// I/O and signal-mask interposers the first write fails with EFAULT and
/// the masked thread kills the process.
#[test]
fn system_calls_and_masked_threads_work_on_the_signal_path() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../farmem-preload/tests/c/io_test.c");
    let Some(bin) = compiled_or_skip("io-test", &src) else {
        return;
    };
    let local = Command::new(&bin).arg("24").output().unwrap();
    assert!(local.status.success(), "local run failed: {local:?}");
    let stats = std::env::temp_dir().join(format!("farmem-run-io-{}.json", std::process::id()));
    // Three 24 MiB buffers against 12 MiB local, of which the process's
    // own memory takes a share: the touch budget (a quarter of what is left
    // for pages) splits every flat call into pieces.
    let far = Command::new(farmem())
        .args(["run", "--fault-path", "signal", "--local-mem", "12MiB"])
        .arg("--stats-json")
        .arg(&stats)
        .arg("--")
        .arg(&bin)
        .arg("24")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&bin);
    let stderr = String::from_utf8_lossy(&far.stderr);
    assert_eq!(far.status.code(), Some(0), "stderr: {stderr}");
    assert_eq!(
        String::from_utf8_lossy(&far.stdout),
        String::from_utf8_lossy(&local.stdout),
        "stderr: {stderr}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let _ = std::fs::remove_file(&stats);
    let n = |k: &str| report["total"][k].as_u64().unwrap_or(0);
    assert!(n("pages_fetched") > 3 * (24 << 20) / 4096, "{report}");
    assert_eq!(
        (n("fetch_errors"), n("writeback_errors")),
        (0, 0),
        "{report}"
    );

    // The same calls in their _FORTIFY_SOURCE forms.
    let src = src.with_file_name("fortify_test.c");
    let Some(bin) = compiled_or_skip("fortify-test", &src) else {
        return;
    };
    let far = Command::new(farmem())
        .args([
            "run",
            "--fault-path",
            "signal",
            "--local-mem",
            "12MiB",
            "--",
        ])
        .arg(&bin)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&bin);
    let stderr = String::from_utf8_lossy(&far.stderr);
    assert_eq!(far.status.code(), Some(0), "stderr: {stderr}");
    assert_eq!(String::from_utf8_lossy(&far.stdout), "ok\n");
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

/// farmem run's exit status when far memory cannot be had (the shim's too).
const NO_FAR_MEMORY_EXIT: i32 = 70;

#[test]
fn an_unreachable_controller_stops_the_run_unless_fallback_is_local() {
    let Some(bin) = alloc_test_or_skip() else {
        return;
    };
    let local = Command::new(&bin).args(["2", "4"]).output().unwrap();
    // Port 1 on loopback: nothing listens, the connection is refused.
    let run = |fallback: &[&str]| {
        Command::new(farmem())
            .args(["run", "--controller", "127.0.0.1:1"])
            .args(fallback)
            .arg("--")
            .arg(&bin)
            .args(["2", "4"])
            .output()
            .unwrap()
    };
    let strict = run(&[]);
    let lenient = run(&["--fallback", "local"]);
    let _ = std::fs::remove_file(&bin);
    let stderr = String::from_utf8_lossy(&strict.stderr);
    assert_eq!(strict.status.code(), Some(NO_FAR_MEMORY_EXIT), "{stderr}");
    // The program never ran.
    assert!(strict.stdout.is_empty(), "{stderr}");
    assert!(
        stderr.contains("farmem: error: controller 127.0.0.1:1: cannot connect")
            && stderr.contains("--fallback local"),
        "{stderr}"
    );
    let stderr = String::from_utf8_lossy(&lenient.stderr);
    assert_eq!(lenient.status.code(), Some(0), "{stderr}");
    assert_eq!(lenient.stdout, local.stdout, "{stderr}");
    assert!(
        stderr.contains("farmem: controller 127.0.0.1:1: cannot connect")
            && stderr.contains("on local memory only (--fallback local)"),
        "{stderr}"
    );
    assert!(
        stderr.lines().all(|l| l.starts_with("farmem: ")),
        "{stderr}"
    );
    // An address that is not one is as clear.
    let out = Command::new(farmem())
        .args(["run", "--controller", "no-port-here", "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(NO_FAR_MEMORY_EXIT), "{stderr}");
    assert!(stderr.contains("controller no-port-here"), "{stderr}");
}

#[test]
fn a_local_cache_too_small_to_run_is_refused_with_its_minimum() {
    for size in ["0", "64KiB"] {
        let out = Command::new(farmem())
            .args(["run", "--local-mem", size, "--", "echo", "ran"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(out.stdout.is_empty(), "{stderr}");
        assert!(
            stderr.contains("--local-mem") && stderr.contains("at least 1MiB"),
            "{stderr}"
        );
    }
}

/// A controller and a memory node started by hand as `farmem` processes,
/// both with `--token-file`; stopped on drop.
struct TokenRack {
    controller: String,
    token: PathBuf,
    children: Vec<std::process::Child>,
}

impl TokenRack {
    fn start(name: &str) -> Self {
        let token =
            std::env::temp_dir().join(format!("farmem-{name}-{}.token", std::process::id()));
        std::fs::write(&token, "a shared secret for this test only\n").unwrap();
        let mut rack = Self {
            controller: String::new(),
            token,
            children: Vec::new(),
        };
        let token = rack.token.to_str().unwrap().to_string();
        rack.controller = rack.spawn(&["controller", "--listen", "127.0.0.1:0"], &token);
        rack.spawn(
            &["memnode", "--listen", "127.0.0.1:0", "--capacity", "2GiB"],
            &token,
        );
        rack
    }

    /// Starts `farmem ARGS --token-file TOKEN --json` and returns the
    /// address it announces.
    fn spawn(&mut self, args: &[&str], token: &str) -> String {
        use std::io::BufRead;
        let mut cmd = Command::new(farmem());
        cmd.args(args).args(["--token-file", token, "--json"]);
        if args[0] == "memnode" {
            cmd.args(["--controller", &self.controller]);
        }
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
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

impl Drop for TokenRack {
    fn drop(&mut self) {
        for child in self.children.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.token);
    }
}

#[test]
fn a_rack_with_a_token_serves_farmem_run_only_with_that_token() {
    let Some(bin) = alloc_test_or_skip() else {
        return;
    };
    let rack = TokenRack::start("token");
    let local = Command::new(&bin).args(["8", "16"]).output().unwrap();
    assert!(local.status.success(), "local run failed: {local:?}");
    let wrong = rack.token.with_extension("wrong");
    std::fs::write(&wrong, "not the rack's secret\n").unwrap();
    let stats = rack.token.with_extension("json");
    let run = |extra: &[&std::ffi::OsStr]| {
        Command::new(farmem())
            .args([
                "run",
                "--controller",
                &rack.controller,
                "--local-mem",
                "32MiB",
            ])
            .args(extra)
            .arg("--")
            .arg(&bin)
            .args(["8", "16"])
            .output()
            .unwrap()
    };
    let far = run(&[
        "--token-file".as_ref(),
        rack.token.as_ref(),
        "--stats-json".as_ref(),
        stats.as_ref(),
    ]);
    let anonymous = run(&[]);
    let wrong_token = run(&["--token-file".as_ref(), wrong.as_ref()]);
    let lenient = run(&["--fallback".as_ref(), "local".as_ref()]);
    let _ = std::fs::remove_file(&bin);
    let _ = std::fs::remove_file(&wrong);

    let stderr = String::from_utf8_lossy(&far.stderr);
    assert_eq!(far.status.code(), Some(0), "{stderr}");
    assert_eq!(far.stdout, local.stdout, "{stderr}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let _ = std::fs::remove_file(&stats);
    assert!(
        report["processes"][0]["far_bytes_peak"].as_u64() >= Some(128 << 20),
        "{report}"
    );
    assert!(
        report["total"]["bytes_written_back"].as_u64() > Some(0),
        "{report}"
    );

    for (out, hint) in [
        (&anonymous, "no --token-file given"),
        (&wrong_token, "is --token-file the token"),
    ] {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(NO_FAR_MEMORY_EXIT), "{stderr}");
        assert!(out.stdout.is_empty(), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "controller {}: authentication failed",
                rack.controller
            )) && stderr.contains(hint),
            "{stderr}"
        );
    }
    let stderr = String::from_utf8_lossy(&lenient.stderr);
    assert_eq!(lenient.status.code(), Some(0), "{stderr}");
    assert_eq!(lenient.stdout, local.stdout, "{stderr}");
    assert!(
        stderr.contains("authentication failed") && stderr.contains("on local memory only"),
        "{stderr}"
    );
}

/// The controller is fine for `farmem run`, but a process the program
/// starts cannot reach it (its token file is gone): the shim stops that
/// process before it runs, and the summary says which and why; with
/// --fallback local it runs on local memory and the summary says so.
#[test]
fn a_process_whose_runtime_cannot_start_is_stopped_and_reported() {
    if let Some(why) = unavailable() {
        eprintln!("skipping: {why}");
        return;
    }
    let rack = TokenRack::start("shim");
    let script = "FARMEM_TOKEN_FILE=/nonexistent/farmem.token exec echo ran";
    let run = |fallback: &str| {
        Command::new(farmem())
            .args(["run", "--controller", &rack.controller, "--token-file"])
            .arg(&rack.token)
            .args(["--fallback", fallback, "--", "sh", "-c", script])
            .output()
            .unwrap()
    };
    let strict = run("fail");
    let stderr = String::from_utf8_lossy(&strict.stderr);
    assert_eq!(strict.status.code(), Some(NO_FAR_MEMORY_EXIT), "{stderr}");
    assert!(strict.stdout.is_empty(), "{stderr}");
    assert!(
        stderr.contains("1 process stopped with exit 70 before running")
            && stderr.contains("reading FARMEM_TOKEN_FILE /nonexistent/farmem.token"),
        "{stderr}"
    );
    let lenient = run("local");
    let stderr = String::from_utf8_lossy(&lenient.stderr);
    assert_eq!(lenient.status.code(), Some(0), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&lenient.stdout),
        "ran\n",
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "1 process ran on local memory only (--fallback local): reading FARMEM_TOKEN_FILE"
        ) && stderr.contains("all of it local"),
        "{stderr}"
    );
    // Helpers that fail alike are summed up in one line, not one each.
    let helpers = Command::new(farmem())
        .args(["run", "--controller", &rack.controller, "--token-file"])
        .arg(&rack.token)
        .args(["--fallback", "local", "--", "sh", "-c"])
        .arg("export FARMEM_TOKEN_FILE=/nonexistent/farmem.token; /bin/true; /bin/true; exec echo ran")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&helpers.stderr);
    assert_eq!(helpers.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("3 processes ran on local memory only"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("/nonexistent/farmem.token").count(),
        1,
        "{stderr}"
    );
}

/// A loopback TCP port nobody listens on right now.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The value stored under key `i`: pseudo-random bytes, so a page mixed up
/// with another (or left zero) cannot match.
fn redis_value(i: u64, out: &mut Vec<u8>) {
    out.clear();
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while out.len() < 1000 {
        farmem_core::noise::xorshift64(&mut x);
        // Printable, so a failing comparison prints readably.
        out.extend(x.to_le_bytes().iter().map(|b| b'a' + b % 26));
    }
    out.truncate(1000);
}

/// Minimal RESP over one pipelined connection: enough for SET and GET.
struct Redis {
    w: std::io::BufWriter<std::net::TcpStream>,
    r: std::io::BufReader<std::net::TcpStream>,
}

impl Redis {
    fn connect(port: u16, within: std::time::Duration) -> Self {
        let deadline = std::time::Instant::now() + within;
        loop {
            match std::net::TcpStream::connect(("127.0.0.1", port)) {
                Ok(s) => {
                    let mut c = Self {
                        w: std::io::BufWriter::new(s.try_clone().unwrap()),
                        r: std::io::BufReader::new(s),
                    };
                    c.send(&[b"PING"]);
                    if c.line() == "+PONG" {
                        return c;
                    }
                }
                Err(_) if std::time::Instant::now() < deadline => {}
                Err(e) => panic!("redis-server did not come up on port {port}: {e}"),
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    fn send(&mut self, args: &[&[u8]]) {
        use std::io::Write;
        write!(self.w, "*{}\r\n", args.len()).unwrap();
        for a in args {
            write!(self.w, "${}\r\n", a.len()).unwrap();
            self.w.write_all(a).unwrap();
            self.w.write_all(b"\r\n").unwrap();
        }
    }

    fn line(&mut self) -> String {
        use std::io::{BufRead, Write};
        self.w.flush().unwrap();
        let mut s = String::new();
        self.r.read_line(&mut s).unwrap();
        s.trim_end().to_string()
    }

    /// Reads a bulk-string reply into `out`.
    fn bulk(&mut self, out: &mut Vec<u8>) {
        use std::io::Read;
        let head = self.line();
        let len: usize = head
            .strip_prefix('$')
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("expected a bulk string, got {head:?}"));
        out.resize(len + 2, 0);
        self.r.read_exact(out).unwrap();
        out.truncate(len);
    }
}

#[test]
fn redis_server_keeps_every_value_under_a_small_local_limit() {
    redis_keeps_every_value("thread");
}

/// redis reads requests into and writes replies from far jemalloc arenas,
/// and jemalloc's background thread blocks every signal.
#[test]
fn redis_server_keeps_every_value_on_the_signal_path() {
    redis_keeps_every_value("signal");
}

fn redis_keeps_every_value(fault_path: &str) {
    if let Some(why) = unavailable() {
        eprintln!("skipping: {why}");
        return;
    }
    let Some(redis) = installed("redis-server") else {
        return;
    };
    let port = free_port();
    let stats = std::env::temp_dir().join(format!(
        "farmem-redis-{fault_path}-{}.json",
        std::process::id()
    ));
    let mut server = Command::new(farmem())
        .args(["run", "--fault-path", fault_path, "--local-mem", "48MiB"])
        .arg("--stats-json")
        .arg(&stats)
        .arg("--")
        .arg(redis)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut c = Redis::connect(port, std::time::Duration::from_secs(60));
    // 240k values of 1000 bytes: about 300 MiB in redis, six times the limit.
    const KEYS: u64 = 240_000;
    const BATCH: u64 = 2_000;
    let mut value = Vec::new();
    for start in (0..KEYS).step_by(BATCH as usize) {
        for i in start..start + BATCH {
            redis_value(i, &mut value);
            c.send(&[b"SET", format!("key:{i}").as_bytes(), &value]);
        }
        for _ in 0..BATCH {
            assert_eq!(c.line(), "+OK");
        }
    }
    let mut got = Vec::new();
    let mut wrong = 0u64;
    for start in (0..KEYS).step_by(BATCH as usize) {
        for i in start..start + BATCH {
            c.send(&[b"GET", format!("key:{i}").as_bytes()]);
        }
        for i in start..start + BATCH {
            c.bulk(&mut got);
            redis_value(i, &mut value);
            if got != value {
                wrong += 1;
            }
        }
    }
    assert_eq!(wrong, 0, "values read back differently");
    c.send(&[b"SHUTDOWN", b"NOSAVE"]);
    let _ = c.line();
    let status = server.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let _ = std::fs::remove_file(&stats);
    let total = &report["total"];
    let far_peak = report["processes"][0]["far_bytes_peak"]
        .as_u64()
        .unwrap_or(0);
    // Most of the data set lived in far memory and went through eviction.
    assert!(far_peak >= 200 << 20, "{report}");
    assert!(
        total["bytes_written_back"].as_u64().unwrap() > 100 << 20,
        "{report}"
    );
    assert_eq!(total["writeback_errors"].as_u64(), Some(0), "{report}");
}

/// Builds, indexes and queries a table several times the local limit, all
/// in sqlite's page cache (one large allocation, `-pagecache`).
const SQLITE_SCRIPT: &str = "
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, name TEXT, payload TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000)
INSERT INTO t SELECT x, (x * 7919) % 1000003, printf('name-%07d', (x * 104729) % 200000),
    printf('%.*c', 200, char(65 + x % 26)) FROM c;
CREATE INDEX t_k ON t(k);
CREATE INDEX t_name ON t(name);
SELECT count(*), sum(k), total(length(payload)) FROM t;
SELECT id, k, name FROM t WHERE k BETWEEN 5000 AND 5600 ORDER BY k;
SELECT substr(payload, 1, 1) AS g, count(*), sum(k), min(name) FROM t GROUP BY g ORDER BY g;
SELECT name, id FROM t ORDER BY name LIMIT 5 OFFSET 100000;
UPDATE t SET payload = upper(name) WHERE id % 3 = 0;
SELECT count(*), sum(length(payload)) FROM t WHERE payload LIKE 'NAME-%';
PRAGMA page_count;
PRAGMA integrity_check;
";

#[test]
fn sqlite_results_match_a_run_without_farmem() {
    if let Some(why) = unavailable() {
        eprintln!("skipping: {why}");
        return;
    }
    let Some(sqlite) = installed("sqlite3") else {
        return;
    };
    let run = |far: bool| {
        use std::io::Write;
        let mut cmd = if far {
            let mut c = Command::new(farmem());
            c.args(["run", "--local-mem", "16MiB", "--"]).arg(&sqlite);
            c
        } else {
            Command::new(&sqlite)
        };
        let mut child = cmd
            .args(["-pagecache", "4400", "40000", ":memory:"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(SQLITE_SCRIPT.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let local = run(false);
    assert!(local.status.success(), "{local:?}");
    let far = run(true);
    let stderr = String::from_utf8_lossy(&far.stderr);
    assert_eq!(far.status.code(), Some(0), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&far.stdout),
        String::from_utf8_lossy(&local.stdout)
    );
    let out = String::from_utf8_lossy(&local.stdout);
    // The database really is larger than the local limit (4 KiB pages).
    let pages: u64 = out.lines().rev().nth(1).unwrap().parse().unwrap();
    assert!(pages * 4096 > 2 * (16 << 20), "{pages} pages");
    assert!(out.ends_with("ok\n"));
    // farmem's summary says the page cache went far.
    assert!(stderr.contains("far memory used"), "{stderr}");
}

/// The eval's real programs, `redis` and `sqlite`, through `bench swap`:
/// each under `auto` at a quarter of its footprint prints what it printed
/// on local memory (redis: its data's digest; sqlite: every answer).
#[test]
fn bench_swap_runs_redis_and_sqlite_with_the_local_answers() {
    if let Some(why) = unavailable() {
        eprintln!("skipping: {why}");
        return;
    }
    for (workload, needs) in [("redis", "redis-benchmark"), ("sqlite", "sqlite3")] {
        if installed(needs).is_none() {
            continue;
        }
        let out = Command::new(farmem())
            // Data well past the 16 MiB floor of a share's local memory.
            .args(["bench", "swap", "--workload", workload, "--size", "48MiB"])
            .args(["--iterations", "2", "--rounds", "1", "--json"])
            .args(["--configs", "local,farmem-auto"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{workload}: {stderr}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["results_match"], true, "{workload}: {v}");
        assert_eq!(v["failed_runs"], 0, "{workload}: {v}");
        let far = v["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["config"] == "farmem-auto")
            .unwrap();
        // It did go far: pages were written back and faulted in again,
        // and the report says what went to the pool and what below it.
        assert!(
            far["farmem"]["bytes_written_back"].as_u64().unwrap() > 0,
            "{far}"
        );
        // The cache had part of the limit, never more.
        let room = far["farmem"]["room_pages_mean"].as_u64().unwrap();
        let limit = far["farmem"]["limit_pages"].as_u64().unwrap();
        assert!(room > 0 && room <= limit, "{far}");
        let tiers = &far["farmem"]["tiers"];
        let n = |k: &str| tiers[k].as_u64().unwrap_or_else(|| panic!("{k}: {far}"));
        assert!(n("pool_pages_kept") + n("below_pages_written") > 0, "{far}");
        n("pool_pages_read");
        n("below_pages_read");
    }
}

#[test]
fn demo_ranks_agree_between_local_and_far_memory() {
    if let Some(why) = unavailable() {
        eprintln!("skipping: {why}");
        return;
    }
    let out = Command::new(farmem())
        .args(["demo", "--size", "48MiB", "--iterations", "2", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["results_match"], true, "{v}");
    assert_eq!(v["checksum_local"], v["checksum_far"], "{v}");
    let far = &v["far"];
    // A quarter of the footprint was local: the rest was faulted in.
    assert!(
        far["local_mem_bytes"].as_u64().unwrap()
            < v["local"]["peak_rss_bytes"].as_u64().unwrap() / 2,
        "{v}"
    );
    // (Faults are fewer: fault-around brings in runs of pages per fault.)
    assert!(far["bytes_fetched"].as_u64().unwrap() >= 32 << 20, "{v}");
    assert!(far["faults_missing"].as_u64().unwrap() > 0, "{v}");
    assert!(far["far_bytes_peak"].as_u64().unwrap() >= 40 << 20, "{v}");
}

#[test]
fn a_forked_child_touching_far_memory_fails_loudly_and_the_parent_goes_on() {
    let Some(bin) = c_program_or_skip(
        "fork-touch",
        r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
int main(void) {
    size_t n = 64 << 20;
    unsigned char *p = malloc(n);
    memset(p, 7, n);
    pid_t pid = fork();
    if (pid == 0) {
        unsigned long s = 0;
        for (size_t i = 0; i < n; i += 4096) s += p[i];
        _exit(s == (n / 4096) * 7 ? 0 : 3);
    }
    int st;
    waitpid(pid, &st, 0);
    if (WIFSIGNALED(st)) printf("child signal %d\n", WTERMSIG(st));
    else printf("child exit %d\n", WEXITSTATUS(st));
    unsigned long s = 0;
    for (size_t i = 0; i < n; i += 4096) s += p[i];
    printf("parent %s\n", s == (n / 4096) * 7 ? "ok" : "WRONG");
    return 0;
}
"#,
    ) else {
        return;
    };
    let local = Command::new(&bin).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&local.stdout),
        "child exit 0\nparent ok\n"
    );
    // 64 MiB of far data against 16 MiB local: most of it is remote at the fork.
    let far = Command::new(farmem())
        .args(["run", "--local-mem", "16MiB", "--"])
        .arg(&bin)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&bin);
    let stderr = String::from_utf8_lossy(&far.stderr);
    assert_eq!(far.status.code(), Some(0), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&far.stdout),
        format!("child signal {}\nparent ok\n", libc::SIGSEGV),
        "{stderr}"
    );
    // And the child said why it stopped, once, before the signal.
    assert_eq!(
        stderr.matches("touched far memory it inherited").count(),
        1,
        "{stderr}"
    );
    // (The shim's module is not built for unit tests: its message, made
    // without allocating in the signal handler, is checked here.)
    let line = stderr
        .lines()
        .find(|l| l.starts_with("farmem: a forked child (pid "))
        .unwrap_or_else(|| panic!("{stderr}"));
    let pid = line["farmem: a forked child (pid ".len()..]
        .split(')')
        .next()
        .unwrap();
    assert!(pid.parse::<u32>().is_ok_and(|p| p > 1), "{line}");
    let at = line
        .split("inherited, at 0x")
        .nth(1)
        .unwrap()
        .split(';')
        .next()
        .unwrap();
    assert!(u64::from_str_radix(at, 16).is_ok_and(|a| a > 0), "{line}");
}

/// A program with a SIGBUS handler of its own: far-memory faults are still
/// served by the runtime's handler (fault path `signal`), and a genuine
/// SIGBUS (a file mapping touched past the end of its file) still reaches
/// the program's handler.
#[test]
fn a_programs_own_sigbus_handler_keeps_its_sigbuses_and_far_faults_still_work() {
    let Some(bin) = c_program_or_skip(
        "own-sigbus",
        r#"
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
static sigjmp_buf env;
static volatile int caught;
static void on_bus(int sig, siginfo_t *si, void *ctx) {
    (void)sig; (void)si; (void)ctx;
    caught++;
    siglongjmp(env, 1);
}
int main(void) {
    struct sigaction sa = {0};
    sa.sa_sigaction = on_bus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, 0) != 0) return 2;
    size_t n = 64 << 20;
    unsigned char *p = malloc(n);
    for (size_t i = 0; i < n; i += 4096) p[i] = (i / 4096) % 251;
    char path[] = "/tmp/farmem-sigbus-XXXXXX";
    int fd = mkstemp(path);
    unlink(path);
    volatile char *m = mmap(0, 4096, PROT_READ, MAP_SHARED, fd, 0);
    if (sigsetjmp(env, 1) == 0) {
        (void)m[0];
        puts("no sigbus");
    }
    unsigned long s = 0;
    for (size_t i = 0; i < n; i += 4096) s += p[i];
    printf("caught %d sum %lu\n", caught, s);
    return 0;
}
"#,
    ) else {
        return;
    };
    let local = Command::new(&bin).output().unwrap();
    let local_out = String::from_utf8_lossy(&local.stdout).into_owned();
    assert!(local_out.starts_with("caught 1 sum "), "{local_out}");
    // 64 MiB against 16 MiB local: pages are evicted and faulted back in.
    let far = Command::new(farmem())
        .args([
            "run",
            "--fault-path",
            "signal",
            "--local-mem",
            "16MiB",
            "--",
        ])
        .arg(&bin)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&bin);
    let stderr = String::from_utf8_lossy(&far.stderr);
    assert_eq!(far.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&far.stdout), local_out, "{stderr}");
    assert!(stderr.contains("evicted"), "{stderr}");
}

/// Each process reserves an 8 GiB far heap, more than the one memory node
/// holds for two of them; remote memory is only taken for what a process
/// writes back, so four at once fit and each keeps its own data.
#[test]
fn several_processes_share_a_rack_smaller_than_their_far_heaps() {
    let Some(bin) = alloc_test_or_skip() else {
        return;
    };
    let local = Command::new(&bin).args(["4", "16"]).output().unwrap();
    assert!(local.status.success(), "local run failed: {local:?}");
    let stats = std::env::temp_dir().join(format!("farmem-run-many-{}.json", std::process::id()));
    // Every child's own status counts, not only the last one's.
    let script = "b=\"$0\"; \"$b\" 4 16 & p1=$!; \"$b\" 4 16 & p2=$!; \"$b\" 4 16 & p3=$!; \
                  \"$b\" 4 16 & p4=$!; wait $p1 && wait $p2 && wait $p3 && wait $p4";
    let far = Command::new(farmem())
        .args([
            "run",
            "--memnodes",
            "1",
            "--local-mem",
            "16MiB",
            "--stats-json",
        ])
        .arg(&stats)
        .args(["--", "sh", "-c", script])
        .arg(&bin)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&bin);
    let stderr = String::from_utf8_lossy(&far.stderr);
    assert_eq!(far.status.code(), Some(0), "stderr: {stderr}");
    // The four outputs interleave line by line; as multisets they are four
    // copies of the local run's.
    let mut want: Vec<String> = String::from_utf8_lossy(&local.stdout)
        .lines()
        .flat_map(|l| std::iter::repeat_n(l.to_string(), 4))
        .collect();
    let mut got: Vec<String> = String::from_utf8_lossy(&far.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    want.sort();
    got.sort();
    assert_eq!(got, want, "stderr: {stderr}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let _ = std::fs::remove_file(&stats);
    let processes = report["processes"].as_array().cloned().unwrap_or_default();
    assert_eq!(processes.len(), 4, "{report}");
    for p in &processes {
        assert!(p["far_bytes_peak"].as_u64() >= Some(64 << 20), "{p}");
        assert!(p["stats"]["bytes_written_back"].as_u64() > Some(0), "{p}");
    }
}

/// The rack holds five processes' remote memory (one 256 MiB batch each
/// against 1.25 GiB); seven in a row each write back, so the later ones only
/// fit if every process gives its memory back when it exits.
#[test]
fn exiting_processes_give_their_remote_memory_back() {
    let Some(bin) = alloc_test_or_skip() else {
        return;
    };
    let local = Command::new(&bin).args(["4", "16"]).output().unwrap();
    assert!(local.status.success(), "local run failed: {local:?}");
    let stats = std::env::temp_dir().join(format!("farmem-run-seq-{}.json", std::process::id()));
    // A rack that cannot take more blocks write-back instead of failing,
    // so a regression shows as a timeout here.
    let far = Command::new("timeout")
        .arg("300")
        .arg(farmem())
        .args(["run", "--memnodes", "1", "--far-mem", "256MiB"])
        .args(["--local-mem", "16MiB", "--stats-json"])
        .arg(&stats)
        .args([
            "--",
            "sh",
            "-c",
            "for i in 1 2 3 4 5 6 7; do \"$0\" 4 16 || exit 1; done",
        ])
        .arg(&bin)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&bin);
    let stderr = String::from_utf8_lossy(&far.stderr);
    assert_eq!(far.status.code(), Some(0), "stderr: {stderr}");
    assert_eq!(
        String::from_utf8_lossy(&far.stdout),
        String::from_utf8_lossy(&local.stdout).repeat(7),
        "stderr: {stderr}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let _ = std::fs::remove_file(&stats);
    let processes = report["processes"].as_array().cloned().unwrap_or_default();
    assert_eq!(processes.len(), 7, "{report}");
    for p in &processes {
        assert!(p["stats"]["bytes_written_back"].as_u64() > Some(0), "{p}");
        assert_eq!(p["last_error"], serde_json::Value::Null, "{p}");
    }
}

/// A process killed before it could give its remote memory back: the
/// controller of a shared rack reclaims it once the process's lease runs
/// out, and only its memory (a process that lives keeps renewing).
#[test]
fn a_killed_processs_remote_memory_comes_back_when_its_lease_runs_out() {
    let Some(bin) = c_program_or_skip(
        "killed",
        r#"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(void) {
    size_t n = 64 << 20;
    char *p = malloc(n);
    if (!p) return 2;
    memset(p, 1, n); /* four times the local cache: written back */
    __asm__ volatile("" : : "r"(p) : "memory"); /* the stores happen */
    printf("filled %d\n", p[n / 2] + p[n - 1]);
    fflush(stdout);
    raise(SIGKILL);
    return 0;
}
"#,
    ) else {
        return;
    };
    let controller = farmem_controller::Controller::start(
        farmem_controller::ControllerConfig::new("127.0.0.1:0"),
    )
    .unwrap();
    let ctl = controller.local_addr().to_string();
    let mut m = farmem_memnode::MemNodeConfig::new("127.0.0.1:0", 4 << 30);
    m.controller = Some(ctl.clone());
    m.heartbeat = std::time::Duration::from_millis(100);
    let _memnode = farmem_memnode::MemNode::start(m).unwrap();
    let start = std::time::Instant::now();
    while controller.stats().nodes_up == 0 {
        assert!(
            start.elapsed().as_secs() < 30,
            "the memory node never registered"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let far = Command::new(farmem())
        .args(["run", "--controller", &ctl, "--local-mem", "16MiB"])
        .args(["--lease", "1", "--"])
        .arg(&bin)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&bin);
    let stderr = String::from_utf8_lossy(&far.stderr);
    assert_eq!(far.status.code(), Some(128 + 9), "stderr: {stderr}");
    assert_eq!(String::from_utf8_lossy(&far.stdout), "filled 2\n");
    let start = std::time::Instant::now();
    loop {
        let st = controller.stats();
        if st.granted_bytes == 0 {
            assert!(st.bytes_reclaimed > 0, "{st:?}");
            assert_eq!(st.leases, 0, "{st:?}");
            break;
        }
        assert!(
            start.elapsed().as_secs() < 60,
            "the killed process's memory was never reclaimed: {st:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The checksum in the `result` line a demo worker prints.
fn demo_checksum(out: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().find_map(|l| l.strip_prefix("result "));
    let v: serde_json::Value = serde_json::from_str(line.expect("a result line")).unwrap();
    v["checksum"].as_str().expect("a checksum").to_string()
}

/// `worker` under `farmem run` on one memory node with `local_mem`, LRU
/// (it evicts pages soon after their fault-around brought them in, so
/// kept pages come and go at their fastest) and `extra` flags: checks it
/// gave `local`'s answer and returns its stderr and `--stats-json` report.
fn far_run_matching(
    worker: &[&str],
    local: &std::process::Output,
    local_mem: &str,
    extra: &[&str],
) -> (String, serde_json::Value) {
    let stats = std::env::temp_dir().join(format!(
        "farmem-run-{}-{}.json",
        extra.join("-").replace(['/', ':'], "_"),
        std::process::id()
    ));
    let far = Command::new(farmem())
        .args(["run", "--memnodes", "1", "--local-mem", local_mem])
        .args(["--policy", "lru"])
        .args(extra)
        .arg("--stats-json")
        .arg(&stats)
        .arg("--")
        .arg(farmem())
        .args(worker)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&far.stderr).into_owned();
    assert!(far.status.success(), "{extra:?}: {stderr}");
    assert_eq!(
        demo_checksum(&far),
        demo_checksum(local),
        "{extra:?}: {stderr}"
    );
    let report = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let _ = std::fs::remove_file(&stats);
    (stderr, report)
}

/// The demo's PageRank under `--backend compressed`, on both fault paths:
/// the same ranks as without far memory, pages kept compressed within the
/// limit and the rest on the memory nodes; a backend it does not know is
/// refused by name.
#[test]
fn the_compressed_backend_gives_the_same_ranks_and_reports_its_pool() {
    if let Some(why) = unavailable() {
        eprintln!("skipping: {why}");
        return;
    }
    let worker = ["demo", "--worker", "--size", "48MiB", "--iterations", "2"];
    let local = Command::new(farmem()).args(worker).output().unwrap();
    assert!(local.status.success());
    for fault_path in ["thread", "signal"] {
        let flags = ["--backend", "compressed", "--fault-path", fault_path];
        let (stderr, report) = far_run_matching(&worker, &local, "12MiB", &flags);
        assert!(stderr.contains("farmem: compressed pool: kept"), "{stderr}");
        assert_eq!(report["backend"], "compressed", "{report}");
        assert_eq!(report["dirty"], "line", "{report}");
        let pool = &report["compressed"];
        let n = |k: &str| pool[k].as_u64().unwrap_or(0);
        assert!(n("stored") > 0 && n("hits") > 0, "{fault_path}: {pool}");
        // Within its fifth of the 12 MiB.
        assert!(n("bytes") <= (12 << 20) / 5, "{pool}");
        let t = |k: &str| report["total"][k].as_u64().unwrap_or(0);
        assert!(t("pages_evicted_dirty") > 0, "{report}");
    }
    let out = Command::new(farmem())
        .args(["run", "--backend", "tape", "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unknown backend \"tape\"; expected one of: auto, remote, compressed"),
        "{stderr}"
    );
}

/// `--backend auto` under random access over four times its local memory:
/// the pool's pages are seldom read back, so it is turned off, on both
/// fault paths, and the answer is the one without far memory.
#[test]
fn auto_turns_a_pool_that_does_not_pay_off_and_gives_the_same_answer() {
    if let Some(why) = unavailable() {
        eprintln!("skipping: {why}");
        return;
    }
    let worker = ["demo", "--worker", "--kind", "kv", "--size", "24MiB"];
    let local = Command::new(farmem()).args(worker).output().unwrap();
    assert!(local.status.success());
    for fault_path in ["thread", "signal"] {
        let flags = ["--backend", "auto", "--fault-path", fault_path];
        let (stderr, report) = far_run_matching(&worker, &local, "6MiB", &flags);
        assert!(
            stderr.contains("farmem: auto: the pool was turned off"),
            "{stderr}"
        );
        assert_eq!(report["backend"], "auto", "{report}");
        let pool = &report["compressed"];
        let n = |k: &str| pool[k].as_u64().unwrap_or(0);
        assert!(n("switches") >= 1, "{pool}");
        assert!(n("off_passed") > 0 && n("stored") > 0, "{pool}");
    }
}

/// `--backend file:DIR`: the demo's ranks as without far memory, with no
/// rack at all and nothing left in DIR; a path that cannot hold far memory
/// stops the run before the program starts, naming the path and why.
#[test]
fn a_file_backend_needs_no_rack_and_refuses_what_cannot_hold_far_memory() {
    if let Some(why) = unavailable() {
        eprintln!("skipping: {why}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("farmem-run-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let worker = ["demo", "--worker", "--size", "32MiB", "--iterations", "2"];
    let local = Command::new(farmem()).args(worker).output().unwrap();
    for backend in ["file", "tiered:compressed,file"] {
        let far = Command::new(farmem())
            .args([
                "run",
                "--local-mem",
                "8MiB",
                "--far-mem",
                "256MiB",
                "--backend",
            ])
            .arg(format!("{backend}:{}", dir.display()))
            .arg("--")
            .arg(farmem())
            .args(worker)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&far.stderr);
        assert!(far.status.success(), "{backend}: {stderr}");
        assert_eq!(
            demo_checksum(&far),
            demo_checksum(&local),
            "{backend}: {stderr}"
        );
        assert!(stderr.contains("written back"), "{stderr}");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "{backend}");
    }
    let _ = std::fs::remove_dir(&dir);
    let existing =
        std::env::temp_dir().join(format!("farmem-run-file-{}.keep", std::process::id()));
    std::fs::write(&existing, b"mine").unwrap();
    for (path, why) in [
        ("/nonexistent-dir/far", "opening for direct I/O"),
        ("/dev/shm", "tmpfs"),
        (existing.to_str().unwrap(), "will not overwrite it"),
    ] {
        let out = Command::new(farmem())
            .args([
                "run",
                "--backend",
                &format!("file:{path}"),
                "--",
                "echo",
                "ran",
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(70), "{path}: {stderr}");
        assert!(out.stdout.is_empty(), "{path}: the program must not run");
        assert!(
            stderr.contains(path) && stderr.contains(why),
            "{path}: {stderr}"
        );
    }
    assert_eq!(std::fs::read(&existing).unwrap(), b"mine");
    let _ = std::fs::remove_file(&existing);
}
