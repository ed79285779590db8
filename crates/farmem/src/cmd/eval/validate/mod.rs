//! `farmem eval validate`: one brain, two bodies, checked. Each workload's
//! trace runs in both: on real memory under `farmem run` (`farmem trace
//! replay`, so the runtime faults on exactly the pages the simulator
//! sees), and in `farmem sim` under scheme `farmem`, configured from that
//! run: its local room, replacement policy, watermarks, fault-around and
//! dirty tracking. The faults, bytes fetched and bytes written back the
//! simulator predicts are set beside the runtime's, at 25% and 50% local:
//! the median over the runs of each, each run simulated at its own room.
//! The runtime's evictor races the program, so a row whose runs differ by
//! more than the tolerance gets more rounds before its median is taken.
//!
//! Where a prediction is off, the row names, for each metric off, the
//! mechanism it moves with whose own counters differ most: first touches
//! (pages filled with zeros), fault-around (pages taken beside a fault)
//! or eviction (pages evicted) for faults and fetches; diff bases (kept,
//! refused, refused at the cap), write prediction or write tracking
//! (write-protect faults) for bytes written back.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::Path;
use std::process::Command;

use anyhow::Context;
use farmem_core::PAGE_SIZE;
use farmem_sim::{ConfigBuilder, Input};
use farmem_workloads::{Scale, TraceWriter};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{Value, json};

mod mechanism;
mod report;

use mechanism::{MECHANISMS, METRICS, differs, ratio};

use super::{Args, Outcome};
use crate::cmd::bench::delay::ProgramRun;
use crate::cmd::bench::measure;
use crate::cmd::bench::workload::Workload;

/// PageRank, random key/value gets and sets, a sequential scan, and a
/// real program.
const DEFAULT_WORKLOADS: &str = "pr,kv-uniform,linreg,sort";
/// Real programs, captured with valgrind's lackey (skipped without it).
const CAPTURED: [&str; 1] = ["sort"];
const SHARES: [f64; 2] = [0.25, 0.5];
/// A prediction within this share of the runs' median, or inside their
/// spread, passes.
const TOLERANCE: f64 = 0.10;
/// Runs whose counts disagree beyond the tolerance get more rounds, up to
/// this many times the asked number.
const MORE_ROUNDS: usize = 3;
/// The replay's buffer goes far; the trace reader's own buffer (1 MiB)
/// stays local, as the simulator has no pages for it.
const THRESHOLD: &str = "2MiB";

/// The runtime's settings both bodies use.
struct Settings {
    policy: String,
    fault_around: u32,
    dirty: &'static str,
    high: f64,
    low: f64,
    evict_batch: usize,
}

impl Settings {
    fn runtime_defaults() -> Self {
        let c = farmem_runtime::Config::default();
        Self {
            policy: c.policy.name().to_string(),
            fault_around: c.fault_around.max_blocks,
            dirty: "line",
            high: c.high_watermark,
            low: c.low_watermark,
            evict_batch: c.evict_batch,
        }
    }
}

/// The workloads `--workloads` names (each a simulator workload or a
/// captured program), and their size: `--scale`, else 64 MiB (16 MiB
/// under `--quick`).
fn workloads(args: &Args) -> anyhow::Result<(Vec<String>, Scale)> {
    let list = args.workloads.as_deref().unwrap_or(DEFAULT_WORKLOADS);
    let scale = match (args.scale.as_str(), args.quick) {
        ("1", true) => "16MiB",
        ("1", false) => "64MiB",
        (s, _) => s,
    };
    let scale: Scale = scale.parse().context("--scale")?;
    let names: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect();
    for w in &names {
        anyhow::ensure!(
            CAPTURED.contains(&w.as_str()) || farmem_workloads::WORKLOADS.iter().any(|x| x.0 == w),
            "unknown workload `{w}`: a simulator workload (`farmem sim --list`) or {}",
            CAPTURED.join(", ")
        );
    }
    Ok((names, scale))
}

pub fn run(args: Args) -> Outcome {
    let (names, scale) = workloads(&args)?;
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("farmem-validate"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let set = Settings::runtime_defaults();
    let rounds = if args.quick { 2 } else { 3 };
    let mut rows = Vec::new();
    let bar = progress((names.len() * (1 + SHARES.len())) as u64);
    for name in names.iter().map(String::as_str) {
        bar.set_message(format!("{name}: writing its trace"));
        let trace = dir.join(format!("{name}.trace"));
        let footprint = if CAPTURED.contains(&name) {
            match capture(name, &dir, &trace, args.quick) {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("farmem: validate: {name} skipped: {e:#}");
                    rows.push(json!({"workload": name, "skipped": format!("{e:#}")}));
                    bar.inc(1 + SHARES.len() as u64);
                    continue;
                }
            }
        } else {
            write_trace(name, scale, 1, &trace)?
        };
        let local = replay_locally(&trace)?;
        bar.inc(1);
        for share in SHARES {
            bar.set_message(format!("{name} at {:.0}% local", share * 100.0));
            let local_mem = ((footprint as f64 * share) as u64 / PAGE_SIZE).max(1) * PAGE_SIZE;
            rows.push(compare(
                name, share, local_mem, &trace, &local, &set, rounds,
            )?);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let compared = rows.iter().filter(|r| r["skipped"].is_null());
    let all_within = compared.clone().all(|r| r["within"] == json!(true));
    let identical = compared.clone().all(|r| r["identical"] == json!(true));
    let report = json!({
        "eval": "validate",
        "what": "each workload's trace replayed on real memory under `farmem run --backend remote` (rounds: median and spread of each counter; rows whose runs differ by more than the tolerance get more rounds, up to 3x) and simulated under scheme `farmem` configured from each run (its local room, limit, policy, watermarks, fault-around, dirty tracking, eviction batch); the median prediction / median measured per metric, within when inside the tolerance or the runs' spread; faults_filled are the missing faults that filled their page (the runtime's faults_missing less faults_missing_found, those that found their page on its way or in, which the simulator counts as waits: both in each row's runtime_only)",
        "settings": {
            "policy": set.policy, "fault_around": set.fault_around, "dirty": set.dirty,
            "watermarks": {"high": set.high, "low": set.low}, "threshold": THRESHOLD,
        },
        "tolerance": TOLERANCE,
        "rounds": rounds,
        "rounds_max": rounds * MORE_ROUNDS,
        "rows": rows,
        "all_within": all_within,
        "all_identical": identical,
    });
    report::write_outputs(&dir, &report)?;
    if args.json {
        println!("{report}");
    } else {
        report::print_table(&report);
        eprintln!(
            "farmem: validate: CSV, JSON and figure in {}",
            dir.display()
        );
    }
    Ok(if all_within && identical {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    })
}

/// Steps done out of `len`, on stderr when it is a terminal.
fn progress(len: u64) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    bar
}

/// A real program, captured: `farmem trace capture` (valgrind's lackey)
/// records its accesses, `farmem trace compact` lays its pages out from
/// the base. Returns the compacted trace's footprint.
fn capture(name: &str, dir: &Path, trace: &Path, quick: bool) -> anyhow::Result<u64> {
    anyhow::ensure!(name == "sort", "no recipe to capture `{name}`");
    // GNU sort over lines of hex keys, as a log or an index dump sorts.
    let lines: u64 = if quick { 10_000 } else { 100_000 };
    let input = dir.join("sort-input.txt");
    let text: String = (0..lines)
        .map(|i| format!("{:016x} {i}\n", farmem_core::mix64(i)))
        .collect();
    std::fs::write(&input, text).with_context(|| format!("writing {}", input.display()))?;
    let raw = dir.join("sort-raw.trace");
    let exe = std::env::current_exe().context("finding the farmem binary")?;
    let out = Command::new(exe)
        .args(["trace", "capture", "--out"])
        .arg(&raw)
        .args(["--", "sort"])
        .arg(&input)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .context("running farmem trace capture")?;
    anyhow::ensure!(
        out.status.success(),
        "capturing sort: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let h = farmem_workloads::compact::compact(&raw, trace)?;
    // The raw trace is as long as the compacted one and no longer needed.
    let _ = std::fs::remove_file(&raw);
    Ok(h.footprint_bytes())
}

/// Writes `name`'s trace (no page contents: replay starts from zeros, as
/// the simulator's scheme does); returns its footprint in bytes.
fn write_trace(name: &str, scale: Scale, seed: u64, path: &Path) -> anyhow::Result<u64> {
    let mut w = TraceWriter::create(path, name, false)?;
    farmem_workloads::run_workload(name, scale, seed, &mut w)?;
    let h = w.finish()?;
    Ok(h.footprint_bytes())
}

fn replay_argv(trace: &Path) -> anyhow::Result<Vec<OsString>> {
    let exe = std::env::current_exe().context("finding the farmem binary")?;
    Ok(vec![
        exe.into(),
        "trace".into(),
        "replay".into(),
        trace.into(),
        "--json".into(),
    ])
}

/// The replay's checksum on local memory: what every far run must print.
fn replay_locally(trace: &Path) -> anyhow::Result<String> {
    let w = Workload::command(replay_argv(trace)?);
    let m = measure::run(&mut w.program(), None)?;
    anyhow::ensure!(
        m.outcome() == "ok",
        "replaying {} on local memory: {}: {}",
        trace.display(),
        m.outcome(),
        m.stderr_tail
    );
    checksum(&m.stdout).with_context(|| format!("replaying {}: no checksum", trace.display()))
}

fn checksum(stdout: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(stdout.trim_ascii()).ok()?;
    v["checksum"].as_str().map(str::to_string)
}

/// One workload at one share: the runs, the simulation configured from
/// them, and the row comparing them.
fn compare(
    name: &str,
    share: f64,
    local_mem: u64,
    trace: &Path,
    want: &str,
    set: &Settings,
    rounds: usize,
) -> anyhow::Result<Value> {
    let run = || -> anyhow::Result<ProgramRun> {
        let mut run = run_once(local_mem, trace, set)?;
        anyhow::ensure!(
            run.ok(),
            "{name} at {:.0}% under farmem run: {}: {}",
            share * 100.0,
            run.measured.outcome(),
            run.measured.stderr_tail
        );
        faults_filled(&mut run.stats);
        Ok(run)
    };
    let mut runs = (0..rounds)
        .map(|_| run())
        .collect::<anyhow::Result<Vec<_>>>()?;
    // The runtime's evictor races the program, so its counts move between
    // runs: where two runs differ by more than the tolerance, their median
    // is a draw, and more rounds make it a measure.
    while runs.len() < rounds * MORE_ROUNDS
        && disagree(&runs.iter().map(|r| &r.stats).collect::<Vec<_>>())
    {
        runs.push(run()?);
    }
    let identical = runs
        .iter()
        .all(|r| checksum(&r.measured.stdout).as_deref() == Some(want));
    // Each counter's median over the rounds, and its spread.
    let measured = |k: &str| spread(&runs.iter().map(|r| counter(r, k)).collect::<Vec<_>>());
    let rooms: Vec<u64> = runs
        .iter()
        .map(|r| counter(r, "room_pages_mean") as u64)
        .collect();
    anyhow::ensure!(
        rooms.iter().all(|&room| room > 0),
        "{name}: a run reported no room (no far page taken?)"
    );
    let room = measured("room_pages_mean").0 as u64;
    // Each run simulated at its own room: the counts of a loop just past
    // the cache swing with the room (where a window meets the loop), and
    // the rooms of the runs differ by a few percent.
    let sims = rooms
        .iter()
        .map(|&room| simulate(trace, room, local_mem, set))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let predicted = |k: &str| {
        let v: Vec<f64> = sims
            .iter()
            .map(|sim| sim.stats.get(&format!("farmem.{k}")).unwrap_or(0.0))
            .collect();
        crate::cmd::median(&v).unwrap_or(0.0)
    };
    let row = |k: &str| {
        let (p, (m, lo, hi)) = (predicted(k), measured(k));
        let r = ratio(p, m);
        let within = (r - 1.0).abs() <= TOLERANCE || (lo <= p && p <= hi);
        json!({"measured": m, "measured_min": lo, "measured_max": hi,
               "predicted": p, "ratio": r, "within": within})
    };
    let metrics: serde_json::Map<String, Value> =
        METRICS.iter().map(|k| (k.to_string(), row(k))).collect();
    let within = metrics.values().all(|v| v["within"] == json!(true));
    let mechanisms: serde_json::Map<String, Value> = MECHANISMS
        .iter()
        .map(|(k, _)| (k.to_string(), row(k)))
        .collect();
    let differs = differs(&metrics, &mechanisms);
    // The runtime's own fault counts, which the simulator does not predict.
    let runtime_only: serde_json::Map<String, Value> = ["faults_missing", "faults_missing_found"]
        .iter()
        .map(|k| {
            let (m, lo, hi) = measured(k);
            (
                k.to_string(),
                json!({"measured": m, "measured_min": lo, "measured_max": hi}),
            )
        })
        .collect();
    Ok(json!({
        "workload": name,
        "local_share": share,
        "local_mem": local_mem,
        "rounds": runs.len(),
        "room_pages_mean": room,
        "rooms": rooms,
        "limit_pages": runs[0].stats["limit_pages"],
        "seconds": crate::cmd::median(&runs.iter().map(|r| r.measured.seconds).collect::<Vec<_>>()),
        "identical": identical,
        "metrics": metrics,
        "mechanisms": mechanisms,
        "runtime_only": runtime_only,
        "within": within,
        "differs": differs,
    }))
}

/// A run's counter `k` (0 when it has none).
fn counter(run: &ProgramRun, k: &str) -> f64 {
    run.stats[k].as_f64().unwrap_or(0.0)
}

/// Whether runs (their stats) differ by more than the tolerance on a
/// compared counter: (max - min) beyond [`TOLERANCE`] of the median.
fn disagree(stats: &[&Value]) -> bool {
    METRICS.iter().any(|k| {
        let v: Vec<f64> = stats.iter().map(|s| s[k].as_f64().unwrap_or(0.0)).collect();
        let (median, lo, hi) = spread(&v);
        hi - lo > TOLERANCE * median
    })
}

/// The median of `values`, and the least and the most of them (all 0
/// when there are none).
fn spread(values: &[f64]) -> (f64, f64, f64) {
    let median = crate::cmd::median(values).unwrap_or(0.0);
    let lo = values.iter().copied().fold(median, f64::min);
    let hi = values.iter().copied().fold(median, f64::max);
    (median, lo, hi)
}

/// Adds to a run's stats `faults_filled`: its missing faults less those
/// that found their page on its way or already in
/// (`faults_missing_found`: the program touched a page of a window while
/// the handler was still installing it). The simulator counts those as
/// waits on the page, not faults; its `faults_filled` is every fault.
fn faults_filled(stats: &mut Value) {
    let count = |k: &str| stats[k].as_u64().unwrap_or(0);
    let filled = count("faults_missing").saturating_sub(count("faults_missing_found"));
    stats["faults_filled"] = json!(filled);
}

/// The trace replayed under `farmem run` at `local_mem`.
fn run_once(local_mem: u64, trace: &Path, set: &Settings) -> anyhow::Result<ProgramRun> {
    let exe = std::env::current_exe().context("finding the farmem binary")?;
    let mut cmd = Command::new(exe);
    cmd.arg("run")
        .args(["--local-mem", &local_mem.to_string(), "--replicas", "1"])
        .args(["--backend", "remote", "--threshold", THRESHOLD])
        .args(["--policy", &set.policy, "--dirty", set.dirty])
        .args(["--fault-around", &set.fault_around.to_string()]);
    ProgramRun::start(&Workload::command(replay_argv(trace)?), cmd, None)
}

/// The trace under scheme `farmem`, configured as the run was: its room
/// as local memory, its limit, policy, marks, fault-around, dirty mode
/// and eviction batch.
fn simulate(
    trace: &Path,
    room: u64,
    local_mem: u64,
    set: &Settings,
) -> anyhow::Result<farmem_sim::SimResult> {
    let mut b = ConfigBuilder::preset("daemon")?;
    for (k, v) in [
        ("local.size", format!("\"{}\"", room * PAGE_SIZE)),
        ("local.policy", format!("\"{}\"", set.policy)),
        (
            "local.watermarks",
            format!("{{ high = {}, low = {} }}", set.high, set.low),
        ),
        ("runtime.fault_around", set.fault_around.to_string()),
        ("runtime.dirty", format!("\"{}\"", set.dirty)),
        ("runtime.limit", format!("\"{local_mem}\"")),
        ("runtime.evict_batch", set.evict_batch.to_string()),
    ] {
        b.set(k, &v)?;
    }
    Ok(farmem_sim::simulate(
        &b.build()?,
        "farmem",
        &Input::Trace(trace.to_path_buf()),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_apart_by_more_than_the_tolerance_on_a_compared_counter_disagree() {
        let run = |faults: u64, fetched: u64| {
            json!({"faults_filled": faults, "bytes_fetched": fetched,
                   "bytes_written_back": 4096, "pages_evicted_clean": faults * 9})
        };
        let (a, b, c) = (run(100, 8192), run(109, 8192), run(112, 8192));
        assert!(!disagree(&[&a, &b]));
        assert!(disagree(&[&a, &c]));
        // Written back apart by 25%: one compared counter is enough.
        let d = json!({"faults_filled": 100, "bytes_fetched": 8192, "bytes_written_back": 5120});
        assert!(disagree(&[&a, &d]));
        // Counters not compared may differ as they do.
        let e = json!({"faults_filled": 100, "bytes_fetched": 8192,
                       "bytes_written_back": 4096, "pages_evicted_clean": 5});
        assert!(!disagree(&[&a, &e]));
    }

    #[test]
    fn faults_that_found_their_page_are_not_compared() {
        let mut stats = json!({"faults_missing": 300, "faults_missing_found": 19});
        faults_filled(&mut stats);
        assert_eq!(stats["faults_filled"], json!(281));
        assert_eq!(stats["faults_missing"], json!(300));
        // A run that reported none (an older binary) loses nothing.
        let mut stats = json!({"faults_missing": 300});
        faults_filled(&mut stats);
        assert_eq!(stats["faults_filled"], json!(300));
    }
}
