//! `farmem bench stripe`: xDM's multi-path access on farmem's own link.
//! Every memory node's path is throttled to the same bandwidth by delay
//! injection (a gate per path, charging each request its bytes), and one
//! program-like stream reads far memory a window at a time, as the fault
//! path's read-ahead does: once with the data on one path, once striped
//! over two (`--redundancy stripe:2`), in the same run. The data read back
//! is checked against what was written. Then the same two layouts under a
//! program: `farmem run --path-delay` of a sequential scan (the demo's
//! `scan` worker) beyond its local memory, with identical results.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use farmem_core::ByteSize;
use farmem_net::{ClientConfig, Cluster, Redundancy, StripeSplit};
use farmem_policy::delay::DelayModel;
use farmem_wire::{Placement, Role};
use rand::{RngCore, SeedableRng};

use crate::cmd::Outcome;
use crate::cmd::local::{LocalRack, connect_target};

/// Stream far memory over each throttled path alone, then striped over two.
///
/// Starts a local rack of two memory nodes granting --size at a time, so
/// a path alone is one grant on one node, unless --controller is given
/// (whose rack needs two memory nodes with room; the bench reports the
/// paths each layout used).
#[derive(clap::Args)]
pub struct Args {
    /// Each path's throttle: a delay model (see `farmem bench delay`), by
    /// default a bandwidth (`rate:BYTES/s`). Given twice, memory node `id`
    /// takes the (`id` modulo 2)-th: paths of different speeds.
    #[arg(long, default_value = "rate:100MiB/s")]
    path_delay: Vec<DelayModel>,
    /// Far memory streamed, a multiple of 2 MiB.
    #[arg(long, default_value = "64MiB")]
    size: ByteSize,
    /// Bytes read per request of the stream (a fault-around window), a
    /// multiple of 4 KiB.
    #[arg(long, default_value = "256KiB")]
    window: ByteSize,
    /// Times the whole size is streamed per layout.
    #[arg(long, default_value_t = 2)]
    passes: u32,
    /// Data the program scans under `farmem run` (0: no program runs).
    #[arg(long, default_value = "128MiB")]
    program_size: ByteSize,
    /// The program's local memory.
    #[arg(long, default_value = "32MiB")]
    program_local: ByteSize,
    /// Use this controller instead of starting a local rack.
    #[arg(long)]
    controller: Option<String>,
    /// File holding the cluster token of --controller's rack (a local rack
    /// makes its own).
    #[arg(long, value_name = "FILE", requires = "controller")]
    token_file: Option<PathBuf>,
    /// Print one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

/// One way of laying the data out, for the program under `farmem run`.
struct Layout {
    name: &'static str,
    redundancy: Redundancy,
}

const LAYOUTS: [Layout; 2] = [
    Layout {
        name: "one path",
        redundancy: Redundancy::Replicas(1),
    },
    Layout {
        name: "stripe:2",
        redundancy: Redundancy::Striped { k: 2 },
    },
];

pub fn run(args: Args) -> Outcome {
    let (size, window) = (args.size.0, args.window.0);
    anyhow::ensure!(
        size > 0 && size.is_multiple_of(2 << 20),
        "--size must be a positive multiple of 2MiB"
    );
    anyhow::ensure!(
        window > 0 && window.is_multiple_of(4096) && window <= size,
        "--window must be a multiple of 4KiB, at most --size"
    );
    anyhow::ensure!(args.passes >= 1, "--passes must be at least 1");
    anyhow::ensure!(
        (1..=2).contains(&args.path_delay.len()),
        "--path-delay: one model for both paths, or one each"
    );
    let (controller, token, _rack) = connect_target(
        args.controller.as_deref(),
        args.token_file.as_deref(),
        || LocalRack::start(2, 3 * size + (256 << 20), size),
    )?;
    let mut data = vec![0u8; size as usize];
    rand::rngs::SmallRng::seed_from_u64(11).fill_bytes(&mut data);
    let bench = Bench {
        args: &args,
        controller: &controller,
        token: &token,
        data: &data,
    };
    let mut rows = bench.alone()?;
    let best_alone = rows.iter().map(mibps).fold(0.0, f64::max);
    rows.push(bench.striped(StripeSplit::Even, "stripe:2, even split")?);
    rows.push(bench.striped(
        StripeSplit::Measured,
        "stripe:2, split by measured bandwidth",
    )?);
    let to_best = |r: &serde_json::Value| {
        (mibps(r) / best_alone.max(f64::MIN_POSITIVE) * 100.0).round() / 100.0
    };
    let (even, measured) = (
        to_best(&rows[rows.len() - 2]),
        to_best(&rows[rows.len() - 1]),
    );
    let program = if args.program_size.0 > 0 {
        Some(programs(&args)?)
    } else {
        None
    };
    let report = serde_json::json!({
        "benchmark": "stripe",
        "what": "one thread reading far memory sequentially a window at a time, every memory node's path behind its own delay gate: the data on each path alone, then striped over both (even split, and split by each path's bandwidth measured when the stripe is made), same run; bytes read back checked",
        "path_delays": args.path_delay.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "size_bytes": size,
        "window_bytes": window,
        "passes": args.passes,
        "runs": rows,
        "even_stripe_to_best_path": even,
        "measured_stripe_to_best_path": measured,
        "program": program,
    });
    if args.json {
        println!("{report}");
    } else {
        eprintln!(
            "farmem: two paths stream {measured:.2}x the faster one alone ({even:.2}x split evenly)"
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}

fn mibps(r: &serde_json::Value) -> f64 {
    r["stream_mib_per_sec"].as_f64().unwrap_or(0.0)
}

/// What every layout's run shares.
struct Bench<'a> {
    args: &'a Args,
    controller: &'a str,
    token: &'a [u8],
    data: &'a [u8],
}

impl Bench<'_> {
    fn connect(&self, redundancy: Redundancy) -> anyhow::Result<Cluster> {
        let cfg = ClientConfig::new("bench-stripe", Role::Compute)
            .with_path_delays(self.args.path_delay.clone())
            .with_token(self.token.to_vec());
        let cluster = Cluster::connect(self.controller, cfg, 2)
            .with_context(|| format!("connecting to {}", self.controller))?;
        cluster.set_redundancy(redundancy);
        Ok(cluster)
    }

    /// Each memory node's path alone: two grants placed round-robin, one
    /// row per node they landed on.
    fn alone(&self) -> anyhow::Result<Vec<serde_json::Value>> {
        let cluster = self.connect(Redundancy::Replicas(1))?;
        let _lease = super::hold_lease(&cluster)?;
        let size = self.data.len() as u64;
        let mut extents = Vec::new();
        for _ in 0..2 {
            let more = cluster
                .allocate(size, Placement::RoundRobin)
                .with_context(|| format!("allocating {}", self.args.size))?;
            extents.extend(more);
        }
        let mut rows = Vec::new();
        let mut nodes_seen = Vec::new();
        let mut result = Ok(());
        for e in &extents {
            if nodes_seen.contains(&e.node) || e.len < size {
                continue;
            }
            nodes_seen.push(e.node);
            let name = format!("memory node {}'s path alone", e.node);
            match self.stream(&cluster, e.base, &name, None) {
                Ok(row) => rows.push(row),
                Err(err) => {
                    result = Err(err);
                    break;
                }
            }
        }
        for e in &extents {
            cluster
                .release(e.base, e.len)
                .with_context(|| format!("giving {} back", ByteSize(e.len)))?;
        }
        result?;
        anyhow::ensure!(
            !rows.is_empty(),
            "no grant of {} on one node",
            self.args.size
        );
        Ok(rows)
    }

    /// The data striped over two paths, split as `split` says.
    fn striped(&self, split: StripeSplit, name: &str) -> anyhow::Result<serde_json::Value> {
        let cluster = self.connect(Redundancy::Striped { k: 2 })?;
        cluster.set_stripe_split(split);
        let _lease = super::hold_lease(&cluster)?;
        let size = self.data.len() as u64;
        let extents = cluster
            .allocate(size, Placement::Default)
            .with_context(|| format!("allocating {} as stripe:2", self.args.size))?;
        let base = extents
            .first()
            .context("the controller granted nothing")?
            .base;
        let contiguous = extents
            .windows(2)
            .all(|w| w[0].base + w[0].len == w[1].base);
        let held: u64 = extents.iter().map(|e| e.len).sum();
        let row = if contiguous && held >= size {
            self.stream(&cluster, base, name, cluster.stripe_chunks(base))
        } else {
            Err(anyhow::anyhow!(
                "the stripes for {name} are not one range of {size} bytes"
            ))
        };
        for e in &extents {
            cluster
                .release(e.base, e.len)
                .with_context(|| format!("giving {} back", ByteSize(e.len)))?;
        }
        row
    }

    /// Writes the data at `base`, then streams it back `passes` times,
    /// checking every byte; a JSON row.
    fn stream(
        &self,
        cluster: &Cluster,
        base: u64,
        name: &str,
        split: Option<Vec<usize>>,
    ) -> anyhow::Result<serde_json::Value> {
        let window = self.args.window.0 as usize;
        let moved = |c: &Cluster| -> Vec<(u32, u64, String)> {
            let gates = c.path_delays();
            gates
                .iter()
                .map(|(n, g)| (*n, g.bytes.get(), g.model().to_string()))
                .collect()
        };
        let before = moved(cluster);
        for (i, chunk) in self.data.chunks(window).enumerate() {
            cluster.write(base + (i * window) as u64, chunk)?;
        }
        let mut buf = vec![0u8; window];
        let start = Instant::now();
        for _ in 0..self.args.passes {
            for (i, chunk) in self.data.chunks(window).enumerate() {
                let got = &mut buf[..chunk.len()];
                cluster.read(base + (i * window) as u64, got)?;
                anyhow::ensure!(
                    got == chunk,
                    "{name}: bytes at offset {} read back differ from those written",
                    i * window
                );
            }
        }
        let secs = start.elapsed().as_secs_f64();
        let streamed = self.data.len() as f64 * f64::from(self.args.passes);
        let mibps = streamed / secs / f64::from(1 << 20);
        if !self.args.json {
            eprintln!("farmem: {name:<42} {mibps:8.1} MiB/s");
        }
        let paths: Vec<serde_json::Value> = moved(cluster)
            .into_iter()
            .filter_map(|(node, bytes, model)| {
                let was = before.iter().find(|b| b.0 == node).map_or(0, |b| b.1);
                (bytes > was).then(|| {
                    serde_json::json!({
                        "node": node,
                        "delay": model,
                        "bytes": bytes - was,
                    })
                })
            })
            .collect();
        Ok(serde_json::json!({
            "layout": name,
            "paths": paths,
            "split": split,
            "stream_mib_per_sec": (mibps * 10.0).round() / 10.0,
            "seconds": (secs * 1000.0).round() / 1000.0,
        }))
    }
}

/// The scan worker under `farmem run --path-delay`, one path then two: wall
/// seconds of each, whose results must match; a JSON object.
fn programs(args: &Args) -> anyhow::Result<serde_json::Value> {
    let mut runs = Vec::new();
    for layout in &LAYOUTS {
        let (wall, secs, checksum) = program(args, layout)?;
        if !args.json {
            eprintln!(
                "farmem: scan under farmem run, {:<9} {secs:6.2} s ({wall:.2} s with the rack's start and stop)",
                layout.name
            );
        }
        runs.push((layout, secs, checksum, wall));
    }
    let same = runs.windows(2).all(|w| w[0].2 == w[1].2);
    anyhow::ensure!(
        same,
        "the scan's results differ between layouts: {runs:?}",
        runs = runs.iter().map(|r| (r.0.name, &r.2)).collect::<Vec<_>>()
    );
    // The scan's own time: the rack's start and stop are no stream.
    let one_to_two = runs[0].1 / runs[1].1.max(f64::MIN_POSITIVE);
    Ok(serde_json::json!({
        "what": format!(
            "farmem demo --worker --kind scan --size {} --iterations 2 under farmem run --local-mem {} --memnodes 2 --path-delay {}",
            args.program_size,
            args.program_local,
            args.path_delay.iter().map(ToString::to_string).collect::<Vec<_>>().join(" --path-delay ")
        ),
        "runs": runs.iter().map(|(l, secs, _, wall)| serde_json::json!({
            "layout": l.name,
            "scan_seconds": (secs * 100.0).round() / 100.0,
            "wall_seconds": (wall * 100.0).round() / 100.0,
        })).collect::<Vec<_>>(),
        "results_match": same,
        "one_path_time_to_two": (one_to_two * 100.0).round() / 100.0,
    }))
}

/// One run of the scan worker under `farmem run` laid out as `layout`:
/// the wall seconds of `farmem run`, the scan's own, and its checksum.
fn program(args: &Args, layout: &Layout) -> anyhow::Result<(f64, f64, String)> {
    let exe = std::env::current_exe().context("finding the farmem binary")?;
    let mut cmd = std::process::Command::new(&exe);
    cmd.args(["run", "--memnodes", "2", "--far-mem", "1GiB"])
        .arg(format!("--local-mem={}", args.program_local));
    for model in &args.path_delay {
        cmd.arg(format!("--path-delay={model}"));
    }
    match layout.redundancy {
        Redundancy::Replicas(n) => cmd.arg(format!("--replicas={n}")),
        r => cmd.arg(format!("--redundancy={r}")),
    };
    if let Some(c) = &args.controller {
        cmd.arg(format!("--controller={c}"));
    }
    if let Some(t) = &args.token_file {
        cmd.arg("--token-file").arg(t);
    }
    cmd.arg("--")
        .arg(&exe)
        .args(["demo", "--worker", "--kind", "scan", "--iterations", "2"])
        .arg(format!("--size={}", args.program_size))
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let start = Instant::now();
    let out = cmd.output().context("running the scan under farmem run")?;
    let secs = start.elapsed().as_secs_f64();
    anyhow::ensure!(
        out.status.success(),
        "the scan under farmem run ({}) failed: {}",
        layout.name,
        out.status
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result: serde_json::Value = stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("result "))
        .context("the scan printed no result")
        .and_then(|r| serde_json::from_str(r).context("reading the scan's result"))?;
    let checksum = result["checksum"]
        .as_str()
        .context("the scan's result has no checksum")?;
    let scan = result["seconds"]
        .as_f64()
        .context("the scan's result has no seconds")?;
    Ok((secs, scan, checksum.to_string()))
}
