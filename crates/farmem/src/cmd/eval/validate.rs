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
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use farmem_core::{ByteSize, PAGE_SIZE};
use farmem_sim::eval::figure::{self, BarChart, Series};
use farmem_sim::{ConfigBuilder, Input};
use farmem_workloads::{Scale, TraceWriter};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{Value, json};

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
/// What is compared: the runtime's counter, the simulator's. Faults are
/// those that fill their page ([`faults_filled`]).
const METRICS: [&str; 3] = ["faults_filled", "bytes_fetched", "bytes_written_back"];
/// Each mechanism's own counters, to name the one that differs.
const MECHANISMS: [(&str, &str); 10] = [
    ("pages_zero_filled", "first touches (zero fill)"),
    ("pages_faulted_around", "fault-around"),
    ("pages_evicted_clean", "eviction (clean pages)"),
    ("pages_evicted_dirty", "eviction (dirty pages)"),
    ("faults_wp", "write tracking (write-protect faults)"),
    (
        "writes_predicted",
        "write prediction (pages installed writable)",
    ),
    ("snapshots", "diff bases kept"),
    ("snapshots_skipped", "diff bases refused (shipped whole)"),
    (
        "snapshots_capped",
        "diff bases refused at the cap (shipped whole)",
    ),
    ("dirty_lines_shipped", "dirty tracking (lines shipped)"),
];
/// The mechanisms each metric moves with: where a metric is off, the one
/// of these whose counter is most off is named. A fault is a first touch,
/// a page evicted before its next touch, or one fault-around did not take;
/// a page ships whole when it was refused a base, and is dirty when it
/// was written after a write-protect fault or installed writable.
const DRIVERS: [(&str, &[&str]); 3] = [
    (
        "faults_filled",
        &[
            "pages_zero_filled",
            "pages_faulted_around",
            "pages_evicted_clean",
            "pages_evicted_dirty",
        ],
    ),
    (
        "bytes_fetched",
        &[
            "pages_zero_filled",
            "pages_faulted_around",
            "pages_evicted_clean",
            "pages_evicted_dirty",
        ],
    ),
    (
        "bytes_written_back",
        &[
            "snapshots",
            "snapshots_skipped",
            "snapshots_capped",
            "writes_predicted",
            "faults_wp",
            "pages_evicted_dirty",
        ],
    ),
];

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
    write_outputs(&dir, &report)?;
    if args.json {
        println!("{report}");
    } else {
        print_table(&report);
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
    let spread = |k: &str| {
        let v: Vec<f64> = runs.iter().map(|r| counter(r, k)).collect();
        let median = crate::cmd::median(&v).unwrap_or(0.0);
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (median, lo.min(median), hi.max(median))
    };
    let rooms: Vec<u64> = runs
        .iter()
        .map(|r| counter(r, "room_pages_mean") as u64)
        .collect();
    anyhow::ensure!(
        rooms.iter().all(|&room| room > 0),
        "{name}: a run reported no room (no far page taken?)"
    );
    let room = spread("room_pages_mean").0 as u64;
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
        let (p, (m, lo, hi)) = (predicted(k), spread(k));
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
            let (m, lo, hi) = spread(k);
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
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let median = crate::cmd::median(&v).unwrap_or(0.0);
        hi - lo > TOLERANCE * median
    })
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

/// For each metric off, the mechanism it moves with ([`DRIVERS`]) whose
/// counter is off most (by the log of predicted / measured), those off
/// themselves (outside the tolerance and the runs' spread) first:
/// `{metric: {counter, mechanism, predicted, measured}}`; null when every
/// metric is within.
fn differs(
    metrics: &serde_json::Map<String, Value>,
    mechanisms: &serde_json::Map<String, Value>,
) -> Value {
    let off = |v: &Value| (v["ratio"].as_f64().unwrap_or(1.0).ln()).abs();
    let named: serde_json::Map<String, Value> = DRIVERS
        .iter()
        .filter(|(m, _)| metrics.get(*m).is_some_and(|v| v["within"] != json!(true)))
        .filter_map(|(m, drivers)| {
            // Those off themselves first; on a tie the later, narrower
            // counter (refused at the cap, not refused).
            let rank = |v: &Value| (v["within"] != json!(true), off(v));
            let (k, v) = drivers
                .iter()
                .filter_map(|k| mechanisms.get(*k).map(|v| (*k, v)))
                .max_by(|a, b| {
                    let (a, b) = (rank(a.1), rank(b.1));
                    a.0.cmp(&b.0).then(a.1.total_cmp(&b.1))
                })?;
            let what = MECHANISMS.iter().find(|x| x.0 == k).map_or(k, |x| x.1);
            Some((
                m.to_string(),
                json!({"counter": k, "mechanism": what,
                       "predicted": v["predicted"], "measured": v["measured"]}),
            ))
        })
        .collect();
    if named.is_empty() {
        Value::Null
    } else {
        Value::Object(named)
    }
}

/// The row's `differs`, for the table: `metric: mechanism (sim/run)`.
fn differs_text(differs: &Value) -> Option<String> {
    let named = differs.as_object()?;
    fn short(m: &str) -> &str {
        match m {
            "faults_filled" => "faults",
            "bytes_fetched" => "fetched",
            "bytes_written_back" => "written back",
            other => other,
        }
    }
    Some(
        named
            .iter()
            .map(|(m, d)| {
                format!(
                    "{}: {} ({:.0}/{:.0})",
                    short(m),
                    d["mechanism"].as_str().unwrap_or("?"),
                    d["predicted"].as_f64().unwrap_or(0.0),
                    d["measured"].as_f64().unwrap_or(0.0)
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
    )
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

/// predicted / measured; 1 when both are 0, infinite when only the
/// measure is.
fn ratio(predicted: f64, measured: f64) -> f64 {
    if measured == 0.0 {
        if predicted == 0.0 { 1.0 } else { f64::INFINITY }
    } else {
        predicted / measured
    }
}

fn write_outputs(dir: &Path, report: &Value) -> anyhow::Result<()> {
    let path = dir.join("validate.json");
    std::fs::write(&path, format!("{report:#}\n"))
        .with_context(|| format!("writing {}", path.display()))?;
    let rows = report["rows"].as_array().cloned().unwrap_or_default();
    let mut csv = String::from("workload,local_share,metric,measured,predicted,ratio\n");
    let mut groups = Vec::new();
    let mut series: Vec<Series> = METRICS
        .iter()
        .map(|m| Series::new(*m, Vec::new()))
        .collect();
    for r in rows.iter().filter(|r| r["skipped"].is_null()) {
        groups.push(format!(
            "{} {:.0}%",
            r["workload"].as_str().unwrap_or("?"),
            r["local_share"].as_f64().unwrap_or(0.0) * 100.0
        ));
        for (i, m) in METRICS.iter().enumerate() {
            let v = &r["metrics"][m];
            csv.push_str(&format!(
                "{},{},{m},{},{},{}\n",
                r["workload"].as_str().unwrap_or("?"),
                r["local_share"],
                v["measured"],
                v["predicted"],
                v["ratio"]
            ));
            series[i]
                .values
                .push(v["ratio"].as_f64().unwrap_or(f64::NAN));
        }
    }
    let path = dir.join("validate.csv");
    std::fs::write(&path, csv).with_context(|| format!("writing {}", path.display()))?;
    let chart = BarChart {
        title: "farmem sim against farmem run: predicted / measured".into(),
        y_label: "predicted / measured".into(),
        groups,
        series,
        reference: Some(1.0),
    };
    let path: PathBuf = dir.join("validate.svg");
    figure::write(&path, &chart.to_svg()?)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn print_table(report: &Value) {
    println!(
        "{:<12} {:>5} {:>9} | {:>21} | {:>27} | {:>27} | differs",
        "workload",
        "local",
        "room",
        "faults (sim/run)",
        "fetched (sim/run)",
        "written back (sim/run)"
    );
    for r in report["rows"].as_array().into_iter().flatten() {
        if let Some(why) = r["skipped"].as_str() {
            println!(
                "{:<12} skipped: {why}",
                r["workload"].as_str().unwrap_or("?")
            );
            continue;
        }
        let cell = |k: &str| {
            let v = &r["metrics"][k];
            let (p, m) = (
                v["predicted"].as_f64().unwrap_or(0.0),
                v["measured"].as_f64().unwrap_or(0.0),
            );
            if k == "faults_filled" {
                format!("{p:.0}/{m:.0} {:.2}", ratio(p, m))
            } else {
                format!(
                    "{}/{} {:.2}",
                    ByteSize(p as u64),
                    ByteSize(m as u64),
                    ratio(p, m)
                )
            }
        };
        println!(
            "{:<12} {:>4.0}% {:>9} | {:>21} | {:>27} | {:>27} | {}",
            r["workload"].as_str().unwrap_or("?"),
            r["local_share"].as_f64().unwrap_or(0.0) * 100.0,
            r["room_pages_mean"].as_u64().unwrap_or(0),
            cell("faults_filled"),
            cell("bytes_fetched"),
            cell("bytes_written_back"),
            if r["identical"] != json!(true) {
                "OUTPUT DIFFERS".to_string()
            } else {
                differs_text(&r["differs"]).unwrap_or_else(|| "-".into())
            }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(predicted: f64, measured: f64, within: bool) -> Value {
        json!({"predicted": predicted, "measured": measured,
               "ratio": ratio(predicted, measured), "within": within})
    }

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

    #[test]
    fn each_metric_off_names_its_own_mechanism_most_off() {
        let metrics: serde_json::Map<String, Value> = [
            ("faults_filled", entry(100.0, 130.0, false)),
            ("bytes_fetched", entry(100.0, 101.0, true)),
            ("bytes_written_back", entry(75.0, 100.0, false)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let mut mechanisms: serde_json::Map<String, Value> = MECHANISMS
            .iter()
            .map(|(k, _)| (k.to_string(), entry(10.0, 10.0, true)))
            .collect();
        // Off most of all, but inside the runs' spread: named only when
        // no mechanism of the metric is off.
        mechanisms.insert("pages_zero_filled".into(), entry(1.0, 100.0, true));
        mechanisms.insert("pages_evicted_clean".into(), entry(70.0, 100.0, false));
        mechanisms.insert("pages_faulted_around".into(), entry(90.0, 100.0, false));
        mechanisms.insert("snapshots_capped".into(), entry(0.0, 1000.0, false));
        mechanisms.insert("writes_predicted".into(), entry(50.0, 100.0, false));
        let d = differs(&metrics, &mechanisms);
        assert_eq!(d["faults_filled"]["counter"], "pages_evicted_clean");
        assert!(d["bytes_fetched"].is_null());
        // None against some is off without bound.
        assert_eq!(d["bytes_written_back"]["counter"], "snapshots_capped");
        let text = differs_text(&d).unwrap_or_default();
        assert!(
            text.contains("faults: eviction (clean pages) (70/100)"),
            "{text}"
        );

        let within: serde_json::Map<String, Value> = METRICS
            .iter()
            .map(|k| (k.to_string(), entry(1.0, 1.0, true)))
            .collect();
        assert!(differs(&within, &mechanisms).is_null());

        // A metric off with every mechanism inside its spread: the one
        // most off still names where to look.
        for k in ["pages_evicted_clean", "pages_faulted_around"] {
            mechanisms.insert(k.into(), entry(10.0, 10.0, true));
        }
        let d = differs(&metrics, &mechanisms);
        assert_eq!(d["faults_filled"]["counter"], "pages_zero_filled");
        // Refused and refused at the cap alike: the cap is named.
        mechanisms.insert("snapshots_skipped".into(), entry(0.0, 1000.0, false));
        let d = differs(&metrics, &mechanisms);
        assert_eq!(d["bytes_written_back"]["counter"], "snapshots_capped");
    }
}
