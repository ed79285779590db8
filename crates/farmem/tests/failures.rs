//! A memory node lost under a running program: `farmem run` on a rack
//! started by hand, a memory node killed (or killed and restarted on the
//! same address) while the program re-reads its far data. With one copy the
//! program must stop with a message naming the node and exit 74; with two
//! it must finish as if nothing happened. Never a wrong checksum, never a
//! hang.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{Daemon, daemon};

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

/// What a run under `farmem run` printed and how it ended.
struct Outcome {
    expected: String,
    code: Option<i32>,
    out: Vec<String>,
    err: String,
}

/// How the rack of [`lose_a_node`] loses its node.
#[derive(Clone, Copy)]
enum Loss {
    Kill,
    KillAndRestart,
}

/// Runs the program under `farmem run` on a rack of `nodes` memory nodes
/// (with `farmem run`'s default copies: 2 on two nodes), and once it has
/// printed its first checksum, SIGKILLs memory node `victim` (and starts a
/// new one on its address for `KillAndRestart`).
fn lose_a_node(nodes: usize, victim: usize, loss: Loss, tag: &str) -> Option<Outcome> {
    lose_nodes(nodes, &[(victim, 1)], loss, 12, tag)
}

/// As [`lose_a_node`], for a program of `rounds` checksums, SIGKILLing
/// each `(victim, after)` once the program has printed `after` checksums.
fn lose_nodes(
    nodes: usize,
    kills: &[(usize, usize)],
    loss: Loss,
    rounds: usize,
    tag: &str,
) -> Option<Outcome> {
    lose_nodes_running(nodes, kills, loss, rounds, tag, &[])
}

/// As [`lose_nodes`], with `run_args` given to `farmem run` too.
fn lose_nodes_running(
    nodes: usize,
    kills: &[(usize, usize)],
    loss: Loss,
    rounds: usize,
    tag: &str,
    run_args: &[&str],
) -> Option<Outcome> {
    let bin = rehash_or_skip(tag)?;
    let local = Command::new(&bin).args(["192", "1"]).output().unwrap();
    let expected = String::from_utf8(local.stdout).unwrap().trim().to_string();
    let (_ctl, ctl) = daemon(&["controller", "--listen", "127.0.0.1:0"]);
    let listens: Vec<String> = (0..nodes).map(|_| free_port()).collect();
    let mut rack: Vec<Daemon> = listens.iter().map(|l| memnode(l, &ctl)).collect();
    let mut run = Command::new(farmem())
        .args(["run", "--controller", &ctl, "--local-mem", "32MiB"])
        .args(run_args)
        .arg("--")
        .arg(&bin)
        .args(["192", &rounds.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = run.stderr.take().unwrap();
    let err = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let mut lines = BufReader::new(run.stdout.take().unwrap()).lines();
    let mut out = Vec::new();
    let mut restarted = Vec::new();
    for (i, &(victim, after)) in kills.iter().enumerate() {
        if i > 0 {
            // Time for the copies the last loss took to be made again
            // before the next: the client gives the node up after 3 s of
            // silence, then copies 384 MiB at the repair's 256 MiB/s; the
            // program's lines alone come faster than that.
            std::thread::sleep(Duration::from_secs(8));
        }
        while out.len() < after {
            match lines.next() {
                Some(Ok(l)) => out.push(l),
                _ => break,
            }
        }
        // SIGKILL, and wait until its port is free.
        let _ = rack[victim].0.kill();
        let _ = rack[victim].0.wait();
        if matches!(loss, Loss::KillAndRestart) {
            restarted.push(memnode(&listens[victim], &ctl));
        }
    }
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
    Some(Outcome {
        expected,
        code: status.code(),
        out,
        err: err.join().unwrap(),
    })
}

fn assert_never_wrong(o: &Outcome) {
    assert!(
        o.out.iter().all(|l| *l == o.expected),
        "a wrong checksum was printed ({} expected): {:?}\n{}",
        o.expected,
        o.out,
        o.err
    );
}

fn assert_stopped_naming_the_node(o: &Outcome) {
    assert_never_wrong(o);
    assert_eq!(o.code, Some(74), "stdout: {:?}\nstderr: {}", o.out, o.err);
    assert!(o.err.contains("far memory lost"), "{}", o.err);
    assert!(o.err.contains("memory node 0 at 127.0.0.1:"), "{}", o.err);
    assert!(o.err.contains("was stopped"), "{}", o.err);
}

#[test]
fn a_killed_memory_node_stops_the_program_with_its_name() {
    let Some(o) = lose_a_node(1, 0, Loss::Kill, "kill") else {
        return;
    };
    assert_stopped_naming_the_node(&o);
    assert!(o.err.contains("has not answered"), "{}", o.err);
}

#[test]
fn a_restarted_memory_node_is_refused_not_read_as_zeros() {
    let Some(o) = lose_a_node(1, 0, Loss::KillAndRestart, "restart") else {
        return;
    };
    assert_stopped_naming_the_node(&o);
    assert!(
        o.err.contains("restarted") || o.err.contains("has not answered"),
        "{}",
        o.err
    );
}

/// With two copies the program finishes, whichever node is lost, and
/// however (a node restarted empty must not be read either).
#[test]
fn with_two_copies_the_program_survives_the_loss_of_either_node() {
    for (victim, loss, tag) in [
        (0, Loss::Kill, "two-0"),
        (1, Loss::Kill, "two-1"),
        (0, Loss::KillAndRestart, "two-restart"),
    ] {
        let Some(o) = lose_a_node(2, victim, loss, tag) else {
            return;
        };
        assert_never_wrong(&o);
        assert_eq!(o.code, Some(0), "node {victim}: {:?}\n{}", o.out, o.err);
        assert_eq!(o.out.len(), 12, "{}", o.err);
        assert!(!o.err.contains("far memory lost"), "{}", o.err);
    }
}

/// With two copies on three nodes, a lost copy is made again from the
/// other, so the program outlives the loss of both nodes it started on,
/// one after the other. `lose_nodes` waits between the losses: the
/// program's lines came faster than the repair once faults got cheaper. A
/// signal that the repair is done, for the test to wait on, would make
/// this independent of time.
#[test]
fn a_lost_copy_is_made_again_before_the_next_loss() {
    let Some(o) = lose_nodes(3, &[(0, 1), (1, 25)], Loss::Kill, 250, "repair") else {
        return;
    };
    assert_never_wrong(&o);
    assert_eq!(o.code, Some(0), "{:?}\n{}", o.out, o.err);
    assert_eq!(o.out.len(), 250, "{}", o.err);
}

/// Erasure-coded (rs:4+2) on six nodes, the program outlives the loss of
/// two of them, one after the other, with no copy made again.
#[test]
fn rs_4_2_survives_two_lost_nodes_of_six() {
    // Few rounds: once a data shard is gone every read rebuilds its pages.
    let kills = [(0, 1), (3, 2)];
    let run_args = ["--redundancy", "rs:4+2"];
    let Some(o) = lose_nodes_running(6, &kills, Loss::Kill, 5, "rs", &run_args) else {
        return;
    };
    assert_never_wrong(&o);
    assert_eq!(o.code, Some(0), "{:?}\n{}", o.out, o.err);
    assert_eq!(o.out.len(), 5, "{}", o.err);
    assert!(!o.err.contains("far memory lost"), "{}", o.err);
}
