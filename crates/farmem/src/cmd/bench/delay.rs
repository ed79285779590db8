//! `farmem bench delay`: ThymesisFlow's delay-injection validation (seed 003
//! §IV-B, Figs. 2–3) on farmem's own link: for each injected gap, the 4 KiB
//! read latency a single requester sees and the bandwidth 32 requests in
//! flight reach, and their product (the bandwidth-delay product).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use farmem_core::{ByteSize, LatencyHistogram};
use farmem_net::delay::EgressDelay;
use farmem_net::{ClientConfig, Cluster};
use farmem_policy::delay::DelayModel;
use farmem_wire::{Placement, Role};
use rand::{Rng, SeedableRng};

use super::measure::{self, StatsFile};
use super::wire::{PAGE, pipelined_reads};
use super::workload::Workload;
use crate::cmd::Outcome;
use crate::cmd::local::{LocalRack, connect_target};

/// Sweep injected egress delay and measure latency and bandwidth.
///
/// Each gap is a delay model (see --help of `farmem run --delay`): `none`,
/// `20us` (a fixed gap between requests, the paper's PERIOD), `uniform:10us..50us`,
/// `exp:30us`. Starts a local rack unless --controller is given.
#[derive(clap::Args)]
pub struct Args {
    /// Delay models to sweep, comma-separated (a `steps:` model keeps its
    /// own commas: `none,steps:0=0,1s=50us`).
    #[arg(
        long,
        default_value = "none,5us,10us,20us,50us,100us,200us,300us,500us,1ms,2ms,5ms"
    )]
    gaps: crate::cmd::DelayModels,
    /// Use this controller instead of starting a local rack.
    #[arg(long)]
    controller: Option<String>,
    /// File holding the cluster token of --controller's rack (a local rack
    /// makes its own).
    #[arg(long, value_name = "FILE", requires = "controller")]
    token_file: Option<PathBuf>,
    /// Reads per latency measurement (fewer at a gap so long that they
    /// would take over half a second).
    #[arg(long, default_value_t = 2000)]
    iters: usize,
    /// Reads in flight for the bandwidth measurement.
    #[arg(long, default_value_t = 32)]
    inflight: usize,
    /// Also run a built-in workload (scan, kv, text, noise, pagerank) under
    /// `farmem run --delay` at every gap, at a quarter of its memory local,
    /// and report its mean remote fault latency from `--stats-json`: what
    /// the injected delay adds to a program's faults.
    #[arg(long, value_name = "WORKLOAD")]
    program: Option<String>,
    /// Memory of --program.
    #[arg(long, default_value = "64MiB")]
    program_size: ByteSize,
    /// Print one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Outcome {
    anyhow::ensure!(args.iters >= 10, "--iters must be at least 10");
    let (controller, token, _rack) = connect_target(
        args.controller.as_deref(),
        args.token_file.as_deref(),
        || LocalRack::start(1, 4 << 30, 128 << 20),
    )?;
    let mut rows = Vec::new();
    for (i, model) in args.gaps.0.iter().enumerate() {
        let delay = Arc::new(EgressDelay::new(model.clone(), i as u64));
        // Same name for every run: each picks up the extent the first granted.
        let cfg = ClientConfig::new("bench-delay", Role::Compute)
            .with_delay(delay.clone())
            .with_token(token.clone());
        let cluster = Cluster::connect(&controller, cfg, 1)
            .with_context(|| format!("connecting to {controller}"))?;
        let _lease = super::hold_lease(&cluster)?;
        let extents = cluster
            .allocate(128 << 20, Placement::Default)
            .with_context(|| format!("allocating 128MiB from the controller at {controller}"))?;
        let row = match extents.first() {
            Some(extent) => one_gap(&args, &cluster, extent, model, &delay),
            None => Err(anyhow::anyhow!(
                "the controller at {controller} granted nothing"
            )),
        };
        // Given back on error too: a shared rack would keep it otherwise.
        let released: Result<Vec<()>, _> = extents
            .iter()
            .map(|e| cluster.release(e.base, e.len))
            .collect();
        rows.push(row?);
        released
            .with_context(|| format!("giving 128MiB back to the controller at {controller}"))?;
    }
    let program = match &args.program {
        Some(w) => Some(program_rows(&args, w)?),
        None => None,
    };
    let validation = validation(&rows);
    if !args.json {
        eprintln!("farmem: {validation}");
    }
    let report = serde_json::json!({
        "benchmark": "delay",
        "what": "4 KiB reads from one memory node through an egress delay gate (a request passes once per gap, its reply held a gap), per gap: synchronous latency and 32-deep pipelined bandwidth, in one run; with --program, a program under farmem run --delay at each gap",
        "runs": rows,
        "validation": validation,
        "program": program,
    });
    if args.json {
        println!("{report}");
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// The fixed gap of `model`, if it has one.
fn gap_ns(model: &DelayModel) -> Option<u64> {
    match model {
        DelayModel::None => Some(0),
        DelayModel::Period { gap_ns } => Some(*gap_ns),
        _ => None,
    }
}

/// The paper's two checks over the fixed gaps: latency linear in the gap
/// (least squares, R^2), and the bandwidth-delay product constant where
/// the gap dominates the link's own latency: gaps of at least five times
/// the undelayed median latency, where a read's `base + gap` is within a
/// fifth of its gap, so the product, `bytes x (1 + base / gap)`, is
/// within about 10% of its mean. The paper's link took about 1 µs, so
/// its whole sweep of 1.2-150 µs was in that regime.
fn validation(rows: &[serde_json::Value]) -> serde_json::Value {
    let pts: Vec<(f64, f64, f64)> = rows
        .iter()
        .filter_map(|r| {
            Some((
                r["gap_us"].as_f64()?,
                r["read4k_us_mean"].as_f64()?,
                r["bdp_bytes"].as_f64()?,
            ))
        })
        .collect();
    let undelayed_p50 = rows
        .iter()
        .find(|r| r["gap_us"].as_f64() == Some(0.0))
        .and_then(|r| r["read4k_us_p50"].as_f64());
    let n = pts.len() as f64;
    if pts.len() < 2 {
        return serde_json::json!({"fixed_gaps": pts.len()});
    }
    let (mx, my) = (
        pts.iter().map(|p| p.0).sum::<f64>() / n,
        pts.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let syy: f64 = pts.iter().map(|p| (p.1 - my).powi(2)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let r2 = if sxx > 0.0 && syy > 0.0 {
        sxy * sxy / (sxx * syy)
    } else {
        0.0
    };
    // The median: one hiccup of the host moves a mean of a few hundred
    // reads by tens of µs, and with it which gaps count.
    let undelayed = undelayed_p50.unwrap_or(my - slope * mx);
    let from = 5.0 * undelayed;
    let bdp: Vec<f64> = pts.iter().filter(|p| p.0 >= from).map(|p| p.2).collect();
    let mean = bdp.iter().sum::<f64>() / bdp.len().max(1) as f64;
    let spread = bdp
        .iter()
        .map(|b| (b / mean - 1.0).abs())
        .fold(0.0, f64::max);
    serde_json::json!({
        "fixed_gaps": pts.len(),
        "latency_fit": {"slope": slope, "intercept_us": my - slope * mx, "r2": r2},
        "bdp": {
            "from_gap_us": from,
            "gaps": bdp.len(),
            "mean_bytes": (!bdp.is_empty()).then_some(mean),
            "max_deviation_from_mean": (!bdp.is_empty()).then_some(spread),
        },
    })
}

/// `workload` under `farmem run --delay` at every gap: its mean remote
/// fault latency, and how much each gap added to the first gap's.
fn program_rows(args: &Args, workload: &str) -> anyhow::Result<serde_json::Value> {
    let w = Workload::builtin(workload, args.program_size, 2)?;
    let local = (args.program_size.bytes() / 4).max(4 << 20);
    let exe = std::env::current_exe().context("finding the farmem binary")?;
    crate::cmd::run::find_preload()?;
    let mut rows = Vec::new();
    let mut results = Vec::new();
    for model in &args.gaps.0 {
        let mut cmd = std::process::Command::new(&exe);
        cmd.arg("run")
            .args(["--local-mem", &local.to_string(), "--replicas", "1"])
            .args(["--delay", &model.to_string()]);
        let (row, result) = program_run(args.json, &w, cmd, model)
            .with_context(|| format!("{workload} under --delay {model}"))?;
        rows.push(row);
        results.push(result);
    }
    let base = rows
        .first()
        .and_then(|r| r["remote_fault_us_mean"].as_f64());
    for r in &mut rows {
        let added = r["remote_fault_us_mean"]
            .as_f64()
            .zip(base)
            .map(|(m, b)| m - b);
        r["added_us"] = serde_json::json!(added);
    }
    Ok(serde_json::json!({
        "workload": w.shown(),
        "local_mem_bytes": local,
        "what": "the program under farmem run --delay GAP at each gap, one run each; added_us: its mean remote fault latency less the first gap's",
        "results_match": results.windows(2).all(|p| p[0] == p[1]) && results.iter().all(Option::is_some),
        "runs": rows,
    }))
}

/// One run of `w` under `run` (`farmem run` and its flags): a JSON row of
/// its remote faults, and its result.
fn program_run(
    quiet: bool,
    w: &Workload,
    run: std::process::Command,
    model: &DelayModel,
) -> anyhow::Result<(serde_json::Value, Option<String>)> {
    let r = ProgramRun::start(w, run, None)?;
    anyhow::ensure!(
        r.ok(),
        "{}: {}",
        r.measured.outcome(),
        r.measured.stderr_tail
    );
    anyhow::ensure!(!r.stats.is_null(), "no statistics");
    let (result, _) = w.result(&r.measured.stdout);
    let mut row = r.fault_row();
    if !quiet {
        eprintln!(
            "farmem: under --delay {:<20} {} remote faults, mean {:8.1} µs in {:.2} s",
            model.to_string(),
            row["remote_faults"],
            row["remote_fault_us_mean"].as_f64().unwrap_or(f64::NAN),
            r.measured.seconds
        );
    }
    row["delay"] = serde_json::json!(model.to_string());
    row["seconds"] = serde_json::json!(r.measured.seconds);
    row["result"] = serde_json::json!(result);
    Ok((row, result))
}

/// A program's run under `farmem run`: how it ended, and its runtime's
/// statistics.
pub struct ProgramRun {
    pub measured: measure::Measured,
    /// `--stats-json` of the process that faulted most (the program, not
    /// a shell); null if the run wrote none.
    pub stats: serde_json::Value,
    /// That process's delay gates (`farmem_net::delay::GateStats`), null
    /// without a delay.
    pub gate: serde_json::Value,
}

impl ProgramRun {
    /// Runs `w` under `run` (`farmem run` and its flags), stopped past
    /// `limit`; a run that fails is a result too.
    pub fn start(
        w: &Workload,
        mut run: std::process::Command,
        limit: Option<std::time::Duration>,
    ) -> anyhow::Result<Self> {
        let file = StatsFile::new("program-run");
        run.arg("--stats-json").arg(&file.0).arg("--").args(&w.argv);
        let measured = measure::run(&mut run, limit)?;
        let process = file
            .read()
            .and_then(|report| {
                report["processes"]
                    .as_array()?
                    .iter()
                    .max_by_key(|p| {
                        p["stats"]["remote_fault_latency"]["count"]
                            .as_u64()
                            .unwrap_or(0)
                    })
                    .cloned()
            })
            .unwrap_or_default();
        let stats = process["stats"].clone();
        let gate = process["delay_gate"].clone();
        Ok(Self {
            measured,
            stats,
            gate,
        })
    }

    pub fn ok(&self) -> bool {
        self.measured.outcome() == "ok"
    }

    /// Its remote faults, the faults that found their page on its way
    /// (fetched by another, or read ahead: the program waits for them
    /// too), and what its requests met at the delay gate: the wait for a
    /// turn (queueing: the link busy) and the hold (the link's latency).
    pub fn fault_row(&self) -> serde_json::Value {
        let (faults, waits) = (
            &self.stats["remote_fault_latency"],
            &self.stats["wait_latency"],
        );
        serde_json::json!({
            "remote_faults": faults["count"],
            "remote_fault_us_mean": faults["mean_us"],
            "remote_fault_us_p50": faults["p50_us"],
            "remote_fault_us_p99": faults["p99_us"],
            // Under each delay in force, where it changed in the run.
            "remote_faults_by_delay": self.stats["remote_fault_latency_by_delay"],
            "waited_faults": waits["count"],
            "waited_fault_us_mean": waits["mean_us"],
            "gate_requests": self.gate["requests"],
            "gate_queued_us_mean": self.gate["queued_us_mean"],
            "gate_held_us_mean": self.gate["held_us_mean"],
            "gate_demand_reads": self.gate["demand_reads"],
            "gate_demand_queued_us_mean": self.gate["demand_queued_us_mean"],
            "gate_demand_round_trip_us_mean": self.gate["demand_round_trip_us_mean"],
            "gate_demand_held_us_mean": self.gate["demand_held_us_mean"],
        })
    }
}

/// Streaming bursts per gap; the bandwidth is their median.
const BURSTS: usize = 3;

/// Latency and bandwidth through one delay gate, on `extent`: a JSON row.
fn one_gap(
    args: &Args,
    cluster: &Cluster,
    extent: &farmem_wire::Extent,
    model: &DelayModel,
    delay: &EgressDelay,
) -> anyhow::Result<serde_json::Value> {
    let conn = cluster.conn_for(extent.base, extent.len)?;
    let pages = (extent.len / PAGE as u64) as usize;
    let hist = LatencyHistogram::new();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
    let mut page = vec![0u8; PAGE];
    // About half a second of gaps at most, and never under 20 reads.
    let gap = gap_ns(model);
    let fit = |n: usize, budget_ns: u64| match gap {
        Some(g) if g > 0 => n.min((budget_ns / g).max(20) as usize),
        _ => n,
    };
    for _ in 0..fit(args.iters, 500_000_000) {
        let addr = extent.base + (rng.gen_range(0..pages) * PAGE) as u64;
        let t = Instant::now();
        conn.read(addr, &mut page)?;
        hist.record(t.elapsed());
    }
    // Enough reads for a steady state, few enough that big gaps finish;
    // in bursts, whose median a hiccup of the host does not move.
    let reads = fit(args.iters * 4, 1_000_000_000).max(args.inflight * 4) as u64;
    let burst = (reads / BURSTS as u64).max(args.inflight as u64 * 2);
    let mut bursts = (0..BURSTS)
        .map(|_| {
            pipelined_reads(
                &conn,
                extent.base,
                pages,
                burst * PAGE as u64,
                args.inflight,
            )
        })
        .collect::<anyhow::Result<Vec<f64>>>()?;
    bursts.sort_by(f64::total_cmp);
    let gbps = bursts[BURSTS / 2];
    let s = hist.summary();
    let row = serde_json::json!({
        "delay": model.to_string(),
        "gap_us": gap.map(|g| g as f64 / 1000.0),
        "read4k_us_p50": s.p50_us,
        "read4k_us_mean": s.mean_us,
        "read4k_us_p99": s.p99_us,
        "stream_gbps": gbps,
        "stream_gbps_bursts": bursts,
        // By the median: one hiccup of this shared host in a few hundred
        // reads moves the mean by tens of µs.
        "bdp_bytes": gbps * 1e9 * s.p50_us * 1e-6,
        "admitted": delay.admitted.get(),
        "injected_wait_ms": delay.waited_ns.get() as f64 / 1e6,
    });
    if !args.json {
        eprintln!(
            "farmem: delay {:<24} read p50 {:8.1} µs  mean {:8.1} µs  stream {:6.3} GB/s",
            model.to_string(),
            s.p50_us,
            s.mean_us,
            gbps
        );
    }
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_fits_latency_and_checks_the_product_where_the_gap_dominates() {
        // Latency 30 µs + the gap; bandwidth one 4 KiB read per gap.
        let rows: Vec<serde_json::Value> = [0.0, 50.0, 120.0, 200.0, 500.0, 1000.0]
            .iter()
            .map(|&g: &f64| {
                let lat = 30.0 + g;
                let gbps = if g > 0.0 { 4096.0 / (g * 1e3) } else { 1.0 };
                serde_json::json!({
                    "gap_us": g,
                    "read4k_us_mean": lat,
                    "read4k_us_p50": lat,
                    "bdp_bytes": gbps * 1e9 * lat * 1e-6,
                })
            })
            .chain([serde_json::json!({"gap_us": null, "read4k_us_mean": 9.0})])
            .collect();
        let v = validation(&rows);
        assert_eq!(v["fixed_gaps"], 6);
        let fit = &v["latency_fit"];
        assert!((fit["slope"].as_f64().unwrap() - 1.0).abs() < 1e-9, "{v}");
        assert!(
            (fit["intercept_us"].as_f64().unwrap() - 30.0).abs() < 1e-6,
            "{v}"
        );
        assert!((fit["r2"].as_f64().unwrap() - 1.0).abs() < 1e-9, "{v}");
        // From 150 µs (five times 30): 4096 x (1 + 30/gap).
        let bdp = &v["bdp"];
        assert_eq!(bdp["gaps"], 3, "{v}");
        assert_eq!(bdp["from_gap_us"], 150.0);
        let spread = bdp["max_deviation_from_mean"].as_f64().unwrap();
        assert!(spread > 0.05 && spread < 0.1, "{v}");
        assert_eq!(validation(&rows[..1])["fixed_gaps"], 1);
    }
}
