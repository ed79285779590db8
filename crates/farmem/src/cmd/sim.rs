//! `farmem sim`: replay a workload or trace through the simulated hierarchy.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use farmem_sim::eval::study::{Batch, Progress, RunSpec, StudyError, sweep};
use farmem_sim::{ConfigBuilder, Input, SimResult};
use farmem_workloads::Scale;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::Outcome;

#[derive(clap::Args)]
pub struct Args {
    /// Built-in workload to run (`--list` shows them); several,
    /// comma-separated, run at once on one core each.
    #[arg(long, conflicts_with = "trace")]
    pub workload: Option<String>,
    /// Trace file to replay (from `farmem trace gen|capture`); repeat to run
    /// several at once on one core each.
    #[arg(long)]
    pub trace: Vec<PathBuf>,
    /// Data-movement scheme; several, comma-separated, run side by side.
    #[arg(long, default_value = "remote")]
    pub scheme: String,
    #[command(flatten)]
    pub cfg: ConfigArgs,
    /// Outstanding misses per core (shorthand for `--set core.mlp=N`; 1 = blocking loads).
    #[arg(long)]
    pub mlp: Option<u32>,
    /// Workload size: a factor of the default (0.5, 2) or a footprint (256MiB).
    #[arg(long, default_value = "1")]
    pub scale: String,
    /// Seed for the workload's data.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// List workloads, schemes and presets, then exit.
    #[arg(long)]
    pub list: bool,
    /// Print one JSON object on stdout (with a `runs` array for several runs).
    #[arg(long)]
    pub json: bool,
}

/// One run of a sweep: a scheme, an input and the overrides that make its config.
pub type Run = RunSpec;

/// Expands schemes × `--set` values into runs (cartesian product).
pub fn plan(schemes: &str, inputs: &[Input], sets: &[String]) -> anyhow::Result<Vec<Run>> {
    let schemes: Vec<&str> = schemes.split(',').collect();
    sweep(&schemes, inputs, sets).map_err(|e| match e {
        StudyError::NoScheme => anyhow::anyhow!("--scheme: no scheme given"),
        e => e.into(),
    })
}

/// Builds the base config: preset, then file.
/// The simulator configuration flags `farmem sim` and `farmem eval` share.
#[derive(clap::Args)]
pub struct ConfigArgs {
    /// Base configuration: `daemon` (DaeMon Table 2) or `unimem` (UniMem Table 1).
    #[arg(long, default_value = "daemon")]
    pub preset: String,
    /// TOML file layered over the preset.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Override a config key (`link.bw_factor=1/8`); in `farmem sim`,
    /// comma-separated values sweep.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

pub fn base_config(preset: &str, file: Option<&PathBuf>) -> anyhow::Result<ConfigBuilder> {
    let mut b = ConfigBuilder::preset(preset)?;
    if let Some(f) = file {
        b.merge(&ConfigBuilder::file(f)?);
    }
    Ok(b)
}

/// Runs every run in parallel (once per distinct config), with a progress
/// bar on a terminal.
pub fn execute(base: &ConfigBuilder, runs: &[Run], quiet: bool) -> anyhow::Result<Vec<SimResult>> {
    // Every config is checked before any run starts.
    run_batch(&Batch::new(base, runs)?, quiet)
}

/// Runs a checked batch, with a progress bar of its distinct runs on a
/// terminal; one result per run.
pub fn run_batch(batch: &Batch, quiet: bool) -> anyhow::Result<Vec<SimResult>> {
    let bar = ProgressBar::new(batch.distinct_len() as u64);
    if quiet || !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} runs {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    // Records replayed by every run so far, and their rate since the start
    // (wall clock: what a user waiting for a long trace wants to see).
    let records = AtomicU64::new(0);
    let progress = |p: Progress| match p {
        Progress::Records(n) => {
            let total = records.fetch_add(n, Ordering::Relaxed) + n;
            let secs = bar.elapsed().as_secs_f64().max(1e-3);
            bar.set_message(format!(
                "{:.1} M records, {:.1} M records/s",
                total as f64 / 1e6,
                total as f64 / secs / 1e6
            ));
        }
        Progress::RunDone => bar.inc(1),
    };
    let results = batch.run(&progress);
    bar.finish_and_clear();
    Ok(results?)
}

pub fn print_table(results: &[SimResult]) {
    println!(
        "{:<16} {:<12} {:>12} {:>7} {:>9} {:>9} {:>7} {:>12} {:>6} {:>10}  overrides",
        "scheme",
        "workload",
        "sim_ms",
        "ipc",
        "amat_ns",
        "miss_ns",
        "local%",
        "remote_read",
        "link%",
        "Mrec/s"
    );
    for r in results {
        let ov: Vec<String> = r
            .overrides
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        println!(
            "{:<16} {:<12} {:>12.3} {:>7.3} {:>9.2} {:>9.1} {:>7.2} {:>12} {:>6.1} {:>10.2}  {}",
            r.scheme,
            short(&r.workload),
            r.sim_time_ns / 1e6,
            r.ipc,
            r.amat_ns,
            r.amat_miss_ns,
            r.local_hit_ratio * 100.0,
            farmem_core::ByteSize(r.remote_bytes_read).to_string(),
            r.link_utilization * 100.0,
            r.records_per_sec / 1e6,
            ov.join(" ")
        );
    }
}

fn short(s: &str) -> String {
    s.split('+')
        .map(|p| p.rsplit('/').next().unwrap_or(p))
        .collect::<Vec<_>>()
        .join("+")
}

fn list() {
    println!("workloads:");
    for (n, d) in farmem_workloads::WORKLOADS {
        println!("  {n:<12} {d}");
    }
    println!("schemes:");
    for (n, d, _) in farmem_sim::scheme::all() {
        println!("  {n:<16} {d}");
    }
    println!("presets:");
    for (n, _) in farmem_sim::config::PRESETS {
        println!("  {n}");
    }
    println!("models (--set KEY=NAME):");
    for (key, names) in farmem_sim::components::models() {
        println!("  {key:<24} {}", names.join(", "));
    }
}

pub fn run(args: Args) -> Outcome {
    if args.list {
        list();
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let scale: Scale = args.scale.parse().context("--scale")?;
    let mut inputs: Vec<Input> = Vec::new();
    for w in args
        .workload
        .iter()
        .flat_map(|w| w.split(','))
        .map(str::trim)
    {
        if !farmem_workloads::WORKLOADS.iter().any(|x| x.0 == w) {
            anyhow::bail!(
                "unknown workload `{w}` (known: {})",
                farmem_workloads::WORKLOADS
                    .iter()
                    .map(|w| w.0)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        inputs.push(Input::Workload {
            name: w.to_string(),
            scale,
            seed: args.seed,
        });
    }
    inputs.extend(args.trace.iter().cloned().map(Input::Trace));
    let input = match inputs.len() {
        0 => anyhow::bail!(
            "give --workload NAME or --trace FILE (`farmem sim --list` shows workloads)"
        ),
        1 => inputs.remove(0),
        _ => Input::Multi(inputs),
    };
    let base = base_config(&args.cfg.preset, args.cfg.config.as_ref())?;
    let mut sets = args.cfg.set.clone();
    if let Input::Multi(v) = &input
        && !sets.iter().any(|s| s.starts_with("core.count="))
    {
        sets.push(format!("core.count={}", v.len()));
    }
    if let Some(m) = args.mlp {
        sets.push(format!("core.mlp={m}"));
    }
    let runs = plan(&args.scheme, &[input], &sets)?;
    let results = execute(&base, &runs, args.json)?;
    if args.json {
        let out = if results.len() == 1 {
            serde_json::to_string(&results[0])?
        } else {
            serde_json::to_string(&serde_json::json!({ "runs": results }))?
        };
        println!("{out}");
    } else {
        print_table(&results);
    }
    Ok(std::process::ExitCode::SUCCESS)
}
