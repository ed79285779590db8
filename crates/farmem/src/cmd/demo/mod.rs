//! `farmem demo`: the quick start's main job.
//!
//! PageRank over a generated graph of about 1 GiB runs twice: once on local
//! memory, then under `farmem run` with a quarter of its measured footprint
//! as local memory and the rest on two memory nodes started on loopback.
//! The ranks of both runs must agree bit for bit; the demo prints time,
//! slowdown, faults and bytes moved side by side.
//!
//! The workload is this binary itself (`farmem demo --worker`), an ordinary
//! program allocating with malloc: under `farmem run` it knows nothing of
//! far memory.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use farmem_core::{ByteSize, Ratio};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use super::Outcome;

pub(crate) mod worker;

/// The quick start: PageRank on local memory, then on far memory.
#[derive(clap::Args)]
pub struct Args {
    /// Size of the graph's arrays (the vertex count is a power of two).
    #[arg(long, default_value = "1GiB")]
    size: ByteSize,
    /// PageRank rounds.
    #[arg(long, default_value_t = 3)]
    iterations: usize,
    /// Local memory of the far run: a share of the footprint the local run
    /// measured (`25%`) or a size (`256MiB`).
    #[arg(long, default_value = "25%")]
    local: String,
    /// Memory nodes to start for the far run.
    #[arg(long, default_value_t = 2)]
    memnodes: usize,
    /// Copies of each far byte, each on another memory node (farmem run
    /// --replicas); default: farmem run's, 2 with two or more nodes.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=8))]
    replicas: Option<u8>,
    /// Print one JSON object on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Run the workload in this process, reporting on stdout (what the two
    /// runs execute).
    #[arg(long, hide = true)]
    worker: bool,
    /// The worker's program (`worker::Kind`): `pagerank`, one of
    /// farmem_workloads's synthetic ones (kv, scan, text, noise), `stream`,
    /// or Graph500's `bfs` and `sssp`, over --size for --iterations passes
    /// (`farmem bench swap --workload`, `farmem eval xdm`, `farmem eval delay`).
    #[arg(long, hide = true, default_value = "pagerank")]
    kind: String,
    /// bfs and sssp: the graph's scale (2^SCALE vertices) instead of the
    /// largest that fits --size.
    #[arg(long, hide = true)]
    graph_scale: Option<u32>,
    /// bfs and sssp: edges per vertex.
    #[arg(long, hide = true, default_value_t = 16)]
    edge_factor: u32,
}

/// Local memory for the far run.
enum LocalMem {
    Share(f64),
    Bytes(u64),
}

fn parse_local(s: &str) -> anyhow::Result<LocalMem> {
    if let Ok(b) = s.parse::<ByteSize>() {
        anyhow::ensure!(b.bytes() > 0, "--local must be positive");
        return Ok(LocalMem::Bytes(b.bytes()));
    }
    let r: Ratio = s
        .parse()
        .with_context(|| format!("--local {s}: expected a share (25%) or a size (256MiB)"))?;
    anyhow::ensure!(
        r.get() > 0.0 && r.get() <= 1.0,
        "--local {s}: a share must be in (0, 100%]"
    );
    Ok(LocalMem::Share(r.get()))
}

/// Vertices (as log2) and in-edges per vertex for a graph of about `bytes`:
/// 4 bytes per edge, 28 per vertex (offsets, out-degrees, two rank arrays).
fn graph_shape(bytes: u64) -> (u32, u32) {
    let scale = if bytes >= 512 << 20 {
        22
    } else {
        (bytes / 256).max(1024).ilog2().min(22)
    };
    let n = 1u64 << scale;
    let ef = (bytes.saturating_sub(28 * n) / (4 * n)).clamp(1, 1 << 16);
    (scale, ef as u32)
}

pub fn run(args: Args) -> Outcome {
    anyhow::ensure!(args.iterations >= 1, "--iterations must be at least 1");
    anyhow::ensure!(args.memnodes >= 1, "--memnodes must be at least 1");
    let local = parse_local(&args.local)?;
    if args.worker {
        let kind = worker::Kind::parse(&args.kind, args.graph_scale, args.edge_factor)?;
        return worker::run(kind, args.size.bytes(), args.iterations);
    }
    let say = |s: &str| {
        if !args.json {
            eprintln!("farmem: {s}");
        }
    };
    let preload = ensure_preload(&say)?;
    let exe = std::env::current_exe().context("finding the farmem binary")?;
    let worker_args = |cmd: &mut Command| {
        cmd.arg("demo")
            .arg("--worker")
            .args(["--size", &args.size.bytes().to_string()])
            .args(["--iterations", &args.iterations.to_string()]);
    };
    let (scale, ef) = graph_shape(args.size.bytes());
    say(&format!(
        "PageRank, {} rounds, over a generated graph of 2^{scale} vertices and ~{ef} in-edges each ({})",
        args.iterations, args.size
    ));

    let mut cmd = Command::new(&exe);
    worker_args(&mut cmd);
    let local_run = supervise(cmd, "local", args.iterations, args.json)?;
    let footprint = local_run["peak_rss_bytes"].as_u64().unwrap_or(0);
    let local_mem = match local {
        LocalMem::Bytes(b) => b,
        LocalMem::Share(s) => ((footprint as f64 * s) as u64).max(16 << 20),
    }
    .div_ceil(1 << 20)
        << 20;

    let stats = std::env::temp_dir().join(format!("farmem-demo-{}.json", std::process::id()));
    let mut cmd = Command::new(&exe);
    cmd.env("FARMEM_PRELOAD", &preload)
        .arg("run")
        .args(["--local-mem", &local_mem.to_string()])
        .args(["--memnodes", &args.memnodes.to_string()])
        .args(args.replicas.map(|n| format!("--replicas={n}")))
        .arg("--stats-json")
        .arg(&stats)
        .arg("--")
        .arg(&exe);
    worker_args(&mut cmd);
    let far_run = supervise(cmd, "far", args.iterations, args.json);
    let report: Option<Value> = std::fs::read_to_string(&stats)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let _ = std::fs::remove_file(&stats);
    let far_run = far_run?;
    let report = report.context("the far run wrote no statistics")?;
    let total = &report["total"];
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
    let far_peak: u64 = report["processes"]
        .as_array()
        .map(|ps| ps.iter().map(|p| n(p, "far_bytes_peak")).sum())
        .unwrap_or(0);
    let (t_local, t_far) = (
        local_run["seconds"].as_f64().unwrap_or(f64::NAN),
        far_run["seconds"].as_f64().unwrap_or(f64::NAN),
    );
    let same = local_run["checksum"] == far_run["checksum"];
    let summary = json!({
        "demo": "pagerank",
        "graph": local_run["graph"],
        "iterations": args.iterations,
        "local": {
            "seconds": t_local,
            "peak_rss_bytes": footprint,
        },
        "far": {
            "seconds": t_far,
            "peak_rss_bytes": far_run["peak_rss_bytes"],
            "local_mem_bytes": local_mem,
            "far_bytes_peak": far_peak,
            "memnodes": args.memnodes,
            "faults_missing": n(total, "faults_missing"),
            "faults_wp": n(total, "faults_wp"),
            "bytes_fetched": n(total, "bytes_fetched"),
            "bytes_written_back": n(total, "bytes_written_back"),
            "pages_evicted": n(total, "pages_evicted_clean") + n(total, "pages_evicted_dirty"),
        },
        "slowdown": t_far / t_local,
        "checksum_local": local_run["checksum"],
        "checksum_far": far_run["checksum"],
        "results_match": same,
        "top": local_run["top"],
    });
    if args.json {
        println!("{summary}");
    } else {
        let gib = |b: u64| ByteSize(b).to_string();
        println!();
        println!("{:<22} {:>16} {:>22}", "", "local", "farmem");
        println!(
            "{:<22} {:>16} {:>22}",
            "local memory",
            "all",
            format!(
                "{} ({:.0}%)",
                gib(local_mem),
                100.0 * local_mem as f64 / footprint.max(1) as f64
            )
        );
        println!(
            "{:<22} {:>16} {:>22}",
            "time",
            format!("{t_local:.1} s"),
            format!("{t_far:.1} s ({:.1}x)", t_far / t_local)
        );
        println!(
            "{:<22} {:>16} {:>22}",
            "peak resident",
            gib(footprint),
            gib(far_run["peak_rss_bytes"].as_u64().unwrap_or(0))
        );
        println!("{:<22} {:>16} {:>22}", "in far memory", "-", gib(far_peak));
        println!(
            "{:<22} {:>16} {:>22}",
            "page faults",
            "-",
            format!(
                "{} + {} wp",
                n(total, "faults_missing"),
                n(total, "faults_wp")
            )
        );
        println!(
            "{:<22} {:>16} {:>22}",
            "fetched / written back",
            "-",
            format!(
                "{} / {}",
                gib(n(total, "bytes_fetched")),
                gib(n(total, "bytes_written_back"))
            )
        );
        println!(
            "{:<22} {:>16} {:>22}",
            "ranks checksum",
            local_run["checksum"].as_str().unwrap_or("?"),
            far_run["checksum"].as_str().unwrap_or("?")
        );
        println!();
        println!(
            "(farmem's resident memory includes its copies of written pages, taken to find their dirty cache lines)"
        );
        println!(
            "{}",
            if same {
                "the two runs computed bit-identical ranks"
            } else {
                "the ranks DIFFER between the two runs"
            }
        );
        println!(
            "next: `farmem run --local-mem 256MiB -- PROGRAM` runs your own program this way; `farmem --help` lists the rest"
        );
    }
    anyhow::ensure!(same, "the far run's ranks differ from the local run's");
    Ok(std::process::ExitCode::SUCCESS)
}

/// Runs one worker (directly or under `farmem run`), showing its progress,
/// and returns its result object.
fn supervise(
    mut cmd: Command,
    label: &str,
    iterations: usize,
    quiet: bool,
) -> anyhow::Result<Value> {
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(1 + iterations as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("{prefix:>6} [{bar:30}] {pos}/{len} {msg} ({elapsed})")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_prefix(label.to_string());
    bar.set_message("generating the graph");
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting the {label} run"))?;
    // Drain stderr beside stdout so neither pipe fills up.
    let stderr = child.stderr.take().expect("piped");
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut text);
        text
    });
    let mut result = None;
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        let line = line.context("reading the worker's output")?;
        if let Some(rest) = line.strip_prefix("progress ") {
            let mut it = rest.splitn(2, ' ');
            if let Some(done) = it.next().and_then(|d| d.parse::<u64>().ok()) {
                bar.set_position(done);
            }
            bar.set_message(it.next().unwrap_or("").to_string());
        } else if let Some(rest) = line.strip_prefix("result ") {
            result = serde_json::from_str::<Value>(rest).ok();
        }
    }
    let status = child.wait().context("waiting for the worker")?;
    bar.finish_and_clear();
    let errors = errors.join().unwrap_or_default();
    match result {
        Some(r) if status.success() => {
            if !quiet {
                eprintln!(
                    "farmem: {label} run: {:.1} s",
                    r["seconds"].as_f64().unwrap_or(f64::NAN)
                );
            }
            Ok(r)
        }
        _ => bail!("the {label} run failed ({status}):\n{}", errors.trim_end()),
    }
}

/// The LD_PRELOAD shim, built first when running from a source checkout
/// (`cargo run -- demo` builds only the CLI).
fn ensure_preload(say: &dyn Fn(&str)) -> anyhow::Result<PathBuf> {
    if let Ok(p) = super::run::find_preload() {
        return Ok(p);
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
    let exe = std::env::current_exe().context("finding the farmem binary")?;
    let profile = exe
        .parent()
        .and_then(Path::file_name)
        .and_then(|d| d.to_str())
        .unwrap_or("release")
        .to_string();
    if !manifest.is_file() {
        return super::run::find_preload();
    }
    say("building libfarmem_preload.so, the shim `farmem run` loads into programs");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .args(["build", "-p", "farmem-preload", "--manifest-path"])
        .arg(&manifest);
    if profile == "release" {
        build.arg("--release");
    }
    let status = build
        .status()
        .context("running cargo to build farmem-preload")?;
    anyhow::ensure!(
        status.success(),
        "building farmem-preload failed ({status})"
    );
    super::run::find_preload()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_shape_fills_the_requested_size() {
        let (scale, ef) = graph_shape(1 << 30);
        assert_eq!(scale, 22);
        let bytes = (1u64 << scale) * (28 + 4 * u64::from(ef));
        assert!(
            bytes <= 1 << 30 && bytes > (1 << 30) - (16 << 20),
            "{bytes}"
        );
        let (scale, ef) = graph_shape(16 << 20);
        assert_eq!((scale, ef), (16, 57));
        assert_eq!(graph_shape(0), (10, 1));
    }

    #[test]
    fn local_memory_is_a_share_or_a_size() {
        assert!(matches!(parse_local("25%"), Ok(LocalMem::Share(s)) if s == 0.25));
        assert!(matches!(parse_local("256MiB"), Ok(LocalMem::Bytes(b)) if b == 256 << 20));
        assert!(parse_local("0%").is_err());
        assert!(parse_local("150%").is_err());
        assert!(parse_local("lots").is_err());
    }
}
