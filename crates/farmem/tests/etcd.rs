//! Controllers keeping their state in etcd (`--state etcd://...`), with
//! leader election: the state survives a restart, a standby refuses and
//! writes nothing, and a program runs through a `kill -9` of the leader.
//! Each test starts an etcd of its own, and skips when etcd is not
//! installed (fails under FARMEM_TEST_REQUIRE_PROGRAMS).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use farmem_controller::local_etcd::EtcdProcess;
use farmem_net::{ClientConfig, ControllerClient, NetError};
use farmem_wire::{ErrorCode, Placement, Role};

fn farmem() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_farmem"))
}

mod common;
use common::{Daemon, daemon_json};

impl Daemon {
    fn kill_9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `farmem ARGS… --json` and waits for the address it prints.
fn daemon(args: &[&str]) -> Daemon {
    let (d, printed) = daemon_json(args);
    assert!(printed["addr"].is_string(), "{args:?} printed {printed}");
    d
}

fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// A controller on `listen` keeping its state in `state`.
fn controller(listen: &str, state: &str) -> Daemon {
    daemon(&[
        "controller",
        "--listen",
        listen,
        "--state",
        state,
        "--granularity",
        "1MiB",
    ])
}

fn memnode(controllers: &str) -> Daemon {
    let listen = free_port();
    daemon(&[
        "memnode",
        "--listen",
        &listen,
        "--capacity",
        "1GiB",
        "--controller",
        controllers,
    ])
}

fn client(name: &str, controllers: &str) -> ControllerClient {
    let cfg = ClientConfig::new(name, Role::Compute);
    ControllerClient::connect(controllers, &cfg).unwrap()
}

fn stats(ctl: &str) -> serde_json::Value {
    let cfg = ClientConfig::new("stats", Role::Compute);
    let json = ControllerClient::connect(ctl, &cfg)
        .and_then(|c| c.stats_json())
        .unwrap();
    serde_json::from_str(&json).unwrap()
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn leads(ctl: &str) -> bool {
    stats(ctl)["standby"] == false
}

#[test]
fn the_state_survives_a_controller_restart_in_etcd() {
    let Some(etcd) = EtcdProcess::start("restart") else {
        return;
    };
    let url = etcd.url("restart").to_string();
    let (a, b) = (free_port(), free_port());
    let mut first = controller(&a, &url);
    wait_for("the first controller to lead", || leads(&a));
    let _node = memnode(&format!("{a},{b}"));
    let c = client("cn-keep", &a);
    let extents = c.alloc(8 << 20, Placement::Default, 1).unwrap();
    assert_eq!(extents.iter().map(|e| e.len).sum::<u64>(), 8 << 20);
    first.kill_9();

    // Another controller, on another port, on the same etcd prefix.
    let _second = controller(&b, &url);
    wait_for("the second controller to lead", || leads(&b));
    let s = stats(&b);
    assert_eq!(s["granted_bytes"], 8 << 20, "{s}");
    assert_eq!(s["nodes"], 1, "{s}");
    assert_eq!(s["takeovers"], 1, "{s}");
    // The memory node follows to the new controller.
    wait_for("the memory node to re-register", || {
        client("cn-look", &b)
            .nodes()
            .is_ok_and(|n| n.len() == 1 && n[0].up)
    });
    // The owner gives its memory back to the new controller.
    let c = client("cn-keep", &b);
    for e in &extents {
        c.release(e.base, e.len).unwrap();
    }
    assert_eq!(stats(&b)["granted_bytes"], 0);
}

#[test]
fn a_standby_refuses_naming_the_leader_and_writes_nothing() {
    let Some(etcd) = EtcdProcess::start("standby") else {
        return;
    };
    let url = etcd.url("standby").to_string();
    let (a, b) = (free_port(), free_port());
    let _leader = controller(&a, &url);
    wait_for("the first controller to lead", || leads(&a));
    let _standby = controller(&b, &url);
    let _node = memnode(&format!("{a},{b}"));
    let etc = etcd.client("standby");
    let before = etc.get(&etc.key("state")).unwrap().unwrap();

    let s = stats(&b);
    assert_eq!(s["standby"], true, "{s}");
    assert_eq!(s["grants"], 0, "a standby shows no table: {s}");
    let refused = client("cn-s", &b).alloc(1 << 20, Placement::Default, 1);
    match refused {
        Err(NetError::Remote {
            code: ErrorCode::NotLeader,
            message,
        }) => {
            assert!(message.contains("not the leader"), "{message}");
            assert!(
                message.contains(&format!("the leader is at {a}")),
                "{message}"
            );
        }
        other => panic!("a standby answered an alloc with {other:?}"),
    }
    assert!(client("cn-s", &b).nodes().is_err());
    // A memory node that knows only the standby cannot register.
    let only_standby = Command::new(farmem())
        .args(["memnode", "--listen", &free_port(), "--capacity", "64MiB"])
        .args(["--controller", &b])
        .output()
        .unwrap();
    assert!(!only_standby.status.success());
    let err = String::from_utf8_lossy(&only_standby.stderr);
    assert!(err.contains("not the leader"), "{err}");
    let after = etc.get(&etc.key("state")).unwrap().unwrap();
    assert_eq!(after.mod_revision, before.mod_revision, "the standby wrote");

    // Given both, a client finds the leader, whichever comes first.
    let c = client("cn-s", &format!("{b},{a}"));
    let e = c.alloc(1 << 20, Placement::Default, 1).unwrap();
    assert_eq!(e[0].len, 1 << 20);
    assert_eq!(stats(&a)["granted_bytes"], 1 << 20);
}

/// Fills MiB of far memory, then checksums it round after round; every
/// round must print the same sum.
const REHASH: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <unistd.h>
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
        usleep(200000);
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
    let src = std::env::temp_dir().join(format!("rehash-etcd-{tag}-{}.c", std::process::id()));
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

/// `farmem run` on a rack of two controllers: the leader is killed -9 once
/// the program printed its first checksum; the program finishes with every
/// checksum right, the memory node follows to the new leader, and a new
/// client allocates there.
#[test]
fn a_program_runs_through_a_kill_9_of_the_leader() {
    let Some(bin) = rehash_or_skip("leader") else {
        return;
    };
    let Some(etcd) = EtcdProcess::start("leader") else {
        return;
    };
    let local = Command::new(&bin).args(["96", "1"]).output().unwrap();
    let expected = String::from_utf8(local.stdout).unwrap().trim().to_string();
    let url = etcd.url("leader").to_string();
    let (a, b) = (free_port(), free_port());
    let mut leader = controller(&a, &url);
    wait_for("the first controller to lead", || leads(&a));
    let _standby = controller(&b, &url);
    let both = format!("{a},{b}");
    let _node = memnode(&both);
    let rounds = 15;
    let mut run = Command::new(farmem())
        .args(["run", "--controller", &both, "--local-mem", "16MiB"])
        .args(["--lease", "2", "--"])
        .arg(&bin)
        .args(["96", &rounds.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = run.stderr.take().unwrap();
    let err = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let mut lines = BufReader::new(run.stdout.take().unwrap()).lines();
    let mut out = vec![lines.next().unwrap().unwrap()];
    leader.kill_9();
    out.extend(lines.map_while(Result::ok));
    let status = run.wait().unwrap();
    let err = err.join().unwrap();
    let _ = std::fs::remove_file(&bin);
    assert!(
        out.iter().all(|l| *l == expected),
        "a wrong checksum ({expected} expected): {out:?}\n{err}"
    );
    assert_eq!(out.len(), rounds, "{err}");
    assert!(status.success(), "{status}: {err}");

    wait_for("the standby to take over", || leads(&b));
    let s = stats(&b);
    assert_eq!(s["takeovers"], 1, "{s}");
    assert_eq!(
        s["grants_reclaimed"], 0,
        "a live program's lease was honoured: {s}"
    );
    let c = client("cn-after", &both);
    let e = c.alloc(4 << 20, Placement::Default, 1).unwrap();
    assert_eq!(e.iter().map(|e| e.len).sum::<u64>(), 4 << 20);
    let nodes = c.nodes().unwrap();
    assert!(nodes.iter().all(|n| n.up), "{nodes:?}");
}
