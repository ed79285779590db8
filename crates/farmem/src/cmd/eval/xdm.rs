//! `farmem eval xdm`: xDM's question (seed 004 §5) on this machine: for
//! programs that differ in data and access pattern, which far-memory
//! backend serves each best, beside the kernel's own swap. The programs:
//! the demo's PageRank, four synthetic ones, and redis (random GETs from
//! redis-benchmark) and sqlite (scans, lookups, grouping, updates), each
//! sized to the same bytes (`bench/workload.rs`).
//!
//! Each workload at 25% and 50% of its footprint runs under every config
//! of `farmem bench swap` (local; the kernel's swap file, zram and zswap
//! under a cgroup v1 limit; farmem's remote, compressed, auto and file
//! backends at the same local memory), interleaved within each round. Each
//! row also sets `auto` beside the best backend picked by hand. One
//! `farmem bench swap --json` per workload and share does the measuring,
//! so the two never disagree on how; this gathers their medians.

use std::process::{Command, Stdio};

use anyhow::Context;
use farmem_core::ByteSize;
use farmem_workloads::synthetic;
use serde_json::{Value, json};

use super::{Args, Outcome};
use crate::cmd::bench::workload::Workload;

const DEFAULT_WORKLOADS: &str = "pagerank,kv,scan,text,noise,redis,sqlite";
/// Workloads that are real programs, run when installed.
const PROGRAMS: [&str; 2] = ["redis", "sqlite"];
const SHARES: [&str; 2] = ["25%", "50%"];
const KERNEL: [&str; 3] = ["swapfile", "zram", "zswap"];
const AUTO: &str = "farmem-auto";

/// The memory of each workload: 512 MiB times --scale, or the size given
/// (--quick: 64 MiB).
fn size(args: &Args) -> anyhow::Result<u64> {
    const BASE: u64 = 512 << 20;
    if args.quick && args.scale == "1" {
        return Ok(64 << 20);
    }
    if let Ok(b) = args.scale.parse::<ByteSize>() {
        return Ok(b.bytes());
    }
    let f: f64 = args
        .scale
        .parse()
        .with_context(|| format!("--scale {}: a factor (0.5) or a size (256MiB)", args.scale))?;
    anyhow::ensure!(f > 0.0 && f.is_finite(), "--scale must be positive");
    Ok((BASE as f64 * f) as u64)
}

pub fn run(args: Args) -> Outcome {
    let list = args
        .workloads
        .clone()
        .unwrap_or_else(|| DEFAULT_WORKLOADS.into());
    let workloads: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .collect();
    for w in &workloads {
        if *w != "pagerank" && !PROGRAMS.contains(w) {
            w.parse::<synthetic::Kind>()
                .map_err(|e| anyhow::anyhow!("--workloads: {e}, pagerank, redis or sqlite"))?;
        }
    }
    let bytes = size(&args)?;
    let rounds = if args.quick { 1 } else { 2 };
    let iterations = if args.quick { 2 } else { 3 };
    let exe = std::env::current_exe().context("finding the farmem binary")?;
    let mut rows = Vec::new();
    let mut failed = false;
    for w in &workloads {
        // A real program this machine lacks is left out, said so.
        if let Err(e) = Workload::builtin(w, ByteSize(bytes), 1) {
            eprintln!("farmem: xdm: {w} skipped: {e:#}");
            rows.push(json!({"workload": w, "skipped": format!("{e:#}")}));
            continue;
        }
        for share in SHARES {
            eprintln!("farmem: xdm: {w} over {} at {share} local", ByteSize(bytes));
            let out = Command::new(&exe)
                .args(["bench", "swap", "--json", "--workload"])
                .arg(if *w == "pagerank" { "demo" } else { w })
                .args(["--size", &bytes.to_string()])
                .args(["--iterations", &iterations.to_string()])
                .args(["--rounds", &rounds.to_string()])
                .args(["--local", share])
                .args(["--run-timeout", if args.quick { "5m" } else { "20m" }])
                .stderr(Stdio::inherit())
                .output()
                .context("running farmem bench swap")?;
            let report: Value = serde_json::from_slice(&out.stdout)
                .with_context(|| format!("reading bench swap's report for {w} at {share}"))?;
            if let Some(why) = report["skipped"].as_str() {
                return skip(&args, why);
            }
            let row = row(w, share, &report);
            // The kernel running out of memory is a result; farmem failing,
            // or any two runs disagreeing, is not.
            failed |= row["results_match"] != json!(true)
                || !row["farmem_all_ok"].as_bool().unwrap_or(false);
            rows.push(row);
        }
    }
    let report = json!({
        "benchmark": "xdm",
        "what": "each workload at 25% and 50% local under the kernel's swap (cgroup v1 limit) and farmem's backends at the same local memory, interleaved in each round; medians of the rounds; farmem's tiers_median: pages and bytes its compressed pool kept and served, and what went to the tier below",
        "workload_bytes": bytes,
        "rounds": rounds,
        "iterations": iterations,
        "rows": rows,
    });
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join("xdm.json");
        std::fs::write(&path, format!("{report:#}\n"))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        println!("{report}");
    } else {
        print_table(&report);
    }
    Ok(if failed {
        eprintln!(
            "farmem: some runs failed or computed different results (see the rows' `results_match` and `failed_runs`)"
        );
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    })
}

/// One workload at one share: each config's median time, ratio to local
/// and peak RSS, and the best of the kernel's and of farmem's.
fn row(workload: &str, share: &str, r: &Value) -> Value {
    let configs = r["configs"].as_array().cloned().unwrap_or_default();
    let median = |c: &Value| c["wall_seconds"]["median"].as_f64();
    let best = |pick: &dyn Fn(&str) -> bool| {
        configs
            .iter()
            .filter(|c| {
                c["ok"].as_u64() == c["runs"].as_u64() && pick(c["name"].as_str().unwrap_or(""))
            })
            .filter_map(|c| Some((c["name"].as_str()?.to_string(), median(c)?)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    };
    let all_ok = |c: &&Value| c["ok"].as_u64() == c["runs"].as_u64();
    let farmem_all_ok = configs
        .iter()
        .filter(|c| c["name"].as_str().is_some_and(|n| n.starts_with("farmem")))
        .all(|c| all_ok(&c));
    let kernel = best(&|n| KERNEL.contains(&n));
    let farmem = best(&|n| n.starts_with("farmem"));
    let ratio = match (&farmem, &kernel) {
        (Some(f), Some(k)) if k.1 > 0.0 => Some(f.1 / k.1),
        _ => None,
    };
    // `auto` against the best backend chosen by hand for this workload.
    let auto = best(&|n| n == AUTO);
    let single = best(&|n| n.starts_with("farmem") && n != AUTO);
    let auto_ratio = match (&auto, &single) {
        (Some(a), Some(s)) if s.1 > 0.0 => Some(a.1 / s.1),
        _ => None,
    };
    json!({
        "workload": workload,
        "local": share,
        "local_mem_bytes": r["local_mem_bytes"],
        "footprint_bytes": r["footprint_bytes"],
        "results_match": r["results_match"],
        "failed_runs": r["failed_runs"],
        "farmem_all_ok": farmem_all_ok,
        "configs": configs.iter().map(|c| json!({
            "name": c["name"],
            "median_seconds": median(c),
            "ratio_to_local": c["ratio_to_local"],
            "peak_rss_bytes_max": c["peak_rss_bytes_max"],
            "peak_rss_over_limit": c["peak_rss_over_limit"],
            "ok": c["ok"],
            "runs": c["runs"],
            "oom_killed": c["oom_killed"],
            "tiers_median": c["tiers_median"],
        })).collect::<Vec<_>>(),
        "best_kernel": kernel.as_ref().map(|k| json!({"name": k.0, "seconds": k.1})),
        "best_farmem": farmem.as_ref().map(|f| json!({"name": f.0, "seconds": f.1})),
        "best_farmem_to_best_kernel": ratio,
        "best_single_backend": single.as_ref().map(|s| json!({"name": s.0, "seconds": s.1})),
        "auto_to_best_single_backend": auto_ratio,
    })
}

fn print_table(report: &Value) {
    let rows = report["rows"].as_array().cloned().unwrap_or_default();
    let names: Vec<String> = rows
        .iter()
        .find_map(|r| r["configs"].as_array())
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    print!("{:<10} {:>5}", "workload", "local");
    for n in &names {
        print!(" {n:>17}");
    }
    println!(" {:>22} {:>12}", "best farmem / kernel", "auto / best");
    for r in &rows {
        if let Some(why) = r["skipped"].as_str() {
            println!(
                "{:<10} skipped: {why}",
                r["workload"].as_str().unwrap_or("?")
            );
            continue;
        }
        print!(
            "{:<10} {:>5}",
            r["workload"].as_str().unwrap_or("?"),
            r["local"].as_str().unwrap_or("?")
        );
        for n in &names {
            let c = r["configs"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["name"] == n.as_str()));
            match c.and_then(|c| c["median_seconds"].as_f64()) {
                Some(s) => print!(" {s:>16.1}s"),
                None => print!(" {:>17}", "-"),
            }
        }
        match r["best_farmem_to_best_kernel"].as_f64() {
            Some(x) => print!(" {x:>21.2}x"),
            None => print!(" {:>22}", "-"),
        }
        match r["auto_to_best_single_backend"].as_f64() {
            Some(x) => println!(" {x:>11.2}x"),
            None => println!(" {:>12}", "-"),
        }
    }
}

fn skip(args: &Args, why: &str) -> Outcome {
    if args.json {
        println!("{}", json!({"benchmark": "xdm", "skipped": why}));
    } else {
        eprintln!("farmem: eval xdm skipped: {why}");
    }
    Ok(std::process::ExitCode::SUCCESS)
}
