//! `farmem bench delay`: ThymesisFlow's delay-injection validation (seed 003
//! §IV-B, Figs. 2–3) on farmem's own link: for each injected gap, the 4 KiB
//! read latency a single requester sees and the bandwidth 32 requests in
//! flight reach, and their product (the bandwidth-delay product).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use farmem_core::LatencyHistogram;
use farmem_net::delay::EgressDelay;
use farmem_net::{ClientConfig, Cluster};
use farmem_policy::delay::DelayModel;
use farmem_wire::{Placement, Role};
use rand::{Rng, SeedableRng};

use super::wire::{PAGE, pipelined_reads};
use crate::cmd::Outcome;
use crate::cmd::local::{LocalRack, connect_target};

/// Sweep injected egress delay and measure latency and bandwidth.
///
/// Each gap is a delay model (see --help of `farmem run --delay`): `none`,
/// `20us` (a fixed gap between requests, the paper's PERIOD), `uniform:10us..50us`,
/// `exp:30us`. Starts a local rack unless --controller is given.
#[derive(clap::Args)]
pub struct Args {
    /// Delay models to sweep, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "none,5us,10us,20us,50us,100us,200us"
    )]
    gaps: Vec<DelayModel>,
    /// Use this controller instead of starting a local rack.
    #[arg(long)]
    controller: Option<String>,
    /// File holding the cluster token of --controller's rack (a local rack
    /// makes its own).
    #[arg(long, value_name = "FILE", requires = "controller")]
    token_file: Option<PathBuf>,
    /// Reads per latency measurement.
    #[arg(long, default_value_t = 2000)]
    iters: usize,
    /// Reads in flight for the bandwidth measurement.
    #[arg(long, default_value_t = 32)]
    inflight: usize,
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
    for (i, model) in args.gaps.iter().enumerate() {
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
    let report = serde_json::json!({
        "benchmark": "delay",
        "what": "4 KiB reads from one memory node through an egress delay gate (a request passes once per gap), per gap: synchronous latency and 32-deep pipelined bandwidth, in one run",
        "runs": rows,
    });
    if args.json {
        println!("{report}");
    }
    Ok(std::process::ExitCode::SUCCESS)
}

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
    for _ in 0..args.iters {
        let addr = extent.base + (rng.gen_range(0..pages) * PAGE) as u64;
        let t = Instant::now();
        conn.read(addr, &mut page)?;
        hist.record(t.elapsed());
    }
    // Enough reads for a steady state, few enough that big gaps finish.
    let reads = (args.iters * 4).max(args.inflight * 8) as u64;
    let gbps = pipelined_reads(
        &conn,
        extent.base,
        pages,
        reads * PAGE as u64,
        args.inflight,
    )?;
    let s = hist.summary();
    let row = serde_json::json!({
        "delay": model.to_string(),
        "read4k_us_p50": s.p50_us,
        "read4k_us_mean": s.mean_us,
        "read4k_us_p99": s.p99_us,
        "stream_gbps": gbps,
        "bdp_bytes": gbps * 1e9 * s.mean_us * 1e-6,
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
