//! `farmem bench failover`: what replication costs and what a memory node's
//! loss costs, on the quick start's own job. In one invocation it runs
//! `farmem demo` (PageRank under `farmem run` on a local rack) with one
//! copy and with two, alternating, then with two copies while it SIGKILLs
//! one of the rack's memory nodes halfway through the far run, once per
//! node. Every run must rank bit-identically to its local run.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::cmd::Outcome;

/// Measure replication's price and a node loss's, on `farmem demo`.
#[derive(clap::Args)]
pub struct Args {
    /// Graph size of each demo run (see `farmem demo --size`).
    #[arg(long, default_value = "1GiB")]
    size: String,
    /// Local memory of each far run (see `farmem demo --local`).
    #[arg(long, default_value = "25%")]
    local: String,
    /// Rounds of (one copy, two copies); the medians are compared.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=20))]
    rounds: u32,
    /// Print one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Outcome {
    let mut by_copies: HashMap<u8, Vec<f64>> = HashMap::new();
    for round in 1..=args.rounds {
        for copies in [1u8, 2] {
            eprintln!(
                "farmem: round {round}/{}: {copies} cop{}",
                args.rounds,
                plural(copies)
            );
            let d = finish(demo(&args, copies)?, &format!("{copies} copies"))?;
            by_copies.entry(copies).or_default().push(far_seconds(&d)?);
        }
    }
    let median = |copies: u8| {
        crate::cmd::median(by_copies.get(&copies).map_or(&[][..], Vec::as_slice))
            .unwrap_or(f64::NAN)
    };
    let (one, two) = (median(1), median(2));
    let mut kills = Vec::new();
    for victim in 0..2 {
        eprintln!(
            "farmem: two copies, memory node {} killed halfway",
            victim + 1
        );
        let (d, after) = run_with_kill(&args, victim, Duration::from_secs_f64(two / 2.0))?;
        let seconds = far_seconds(&d)?;
        kills.push(json!({
            "memnode": victim + 1,
            "killed_after_seconds": after.as_secs_f64(),
            "far_seconds": seconds,
            "vs_undisturbed": seconds / two,
            "results_match": d["results_match"],
        }));
    }
    let report = json!({
        "benchmark": "failover",
        "workload": format!("farmem demo --size {} --local {}", args.size, args.local),
        "rounds": args.rounds,
        "far_seconds": {"one_copy": by_copies[&1], "two_copies": by_copies[&2]},
        "replication_price": two / one,
        "kills": kills,
    });
    if args.json {
        println!("{report}");
    } else {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(std::process::ExitCode::SUCCESS)
}

fn plural(n: u8) -> &'static str {
    if n == 1 { "y" } else { "ies" }
}

/// Starts `farmem demo --json` with `copies` copies of each far byte.
fn demo(args: &Args, copies: u8) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("finding the farmem binary")?;
    Command::new(exe)
        .args([
            "demo",
            "--json",
            "--size",
            &args.size,
            "--local",
            &args.local,
        ])
        .arg(format!("--replicas={copies}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting farmem demo")
}

/// Waits for a demo and checks it ranked as its local run did.
fn finish(child: Child, what: &str) -> anyhow::Result<Value> {
    let out = child
        .wait_with_output()
        .context("waiting for farmem demo")?;
    if !out.status.success() {
        bail!("the demo with {what} failed: {}", out.status);
    }
    let d: Value = serde_json::from_slice(&out.stdout).context("reading the demo's JSON")?;
    if d["results_match"] != json!(true) {
        bail!("the demo with {what} ranked differently from its local run: {d}");
    }
    Ok(d)
}

fn far_seconds(d: &Value) -> anyhow::Result<f64> {
    d["far"]["seconds"]
        .as_f64()
        .context("the demo's JSON has no far.seconds")
}

/// Runs the demo with two copies and SIGKILLs the `victim`-th memory node
/// of its rack `after` the far run began (when its memory nodes appear).
fn run_with_kill(args: &Args, victim: usize, after: Duration) -> anyhow::Result<(Value, Duration)> {
    let child = demo(args, 2)?;
    let root = child.id();
    let deadline = Instant::now() + Duration::from_secs(600);
    let nodes = loop {
        let nodes = memnodes_under(root);
        if nodes.len() >= 2 {
            break nodes;
        }
        if Instant::now() > deadline {
            bail!("the demo's far run never started its memory nodes");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let started = Instant::now();
    std::thread::sleep(after);
    // SAFETY: a signal to a process of our own tree.
    unsafe { libc::kill(nodes[victim] as i32, libc::SIGKILL) };
    let killed_after = started.elapsed();
    Ok((finish(child, "a memory node killed")?, killed_after))
}

/// `farmem memnode` processes descending from `root`, oldest first.
fn memnodes_under(root: u32) -> Vec<u32> {
    let mut parent = HashMap::new();
    let mut memnodes = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return memnodes;
    };
    for pid in dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
    {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The parent pid is the second field after the command's closing paren.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parent.insert(pid, ppid);
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if cmdline.split(|&b| b == 0).any(|a| a == b"memnode") {
            memnodes.push(pid);
        }
    }
    let descends = |mut pid: u32| {
        for _ in 0..64 {
            match parent.get(&pid) {
                Some(&p) if p == root => return true,
                Some(&p) if p > 1 => pid = p,
                _ => return false,
            }
        }
        false
    };
    memnodes.retain(|&pid| descends(pid));
    memnodes.sort_unstable();
    memnodes
}
