//! `farmem eval`: rebuild a paper's evaluation, from simulator runs or real ones. One
//! module per evaluation; they share the flags below.

mod daemon;
mod daemon_real;
mod delay;
mod faults;
mod fig3;
mod unimem;
mod validate;
mod xdm;

use std::path::PathBuf;

use anyhow::Context;
use farmem_sim::Input;
use farmem_sim::eval::study::EvalOptions;
use farmem_workloads::Scale;

use super::Outcome;

/// An evaluation: name, what it reproduces, entry point.
type Eval = (&'static str, &'static str, fn(Args) -> Outcome);

const EVALS: &[Eval] = &[
    (
        "daemon-fig3",
        "DaeMon Fig. 3: local, remote, cache-line, page-free, cache-line+page",
        fig3::run,
    ),
    (
        "daemon",
        "DaeMon §6: schemes x bandwidth x switch latency, sensitivity studies \
         (452 runs, ~8 min on 2 cores; --quick: 230 runs, ~15 s)",
        daemon::run,
    ),
    (
        "daemon-real",
        "DaeMon on the real link: the demo's PageRank, key/value and redis under \
         farmem run, page against daemon engines (and LC, BP, PQ alone) at full, 1/2, 1/4 \
         and 1/8 bandwidth, beside the simulator's prediction and the paper's \
         (hours: at 1/8 of its own bandwidth each kv run takes minutes; --quick: PageRank \
         and kv, page and daemon, one round, ~5 min)",
        daemon_real::run,
    ),
    (
        "unimem",
        "UniMem §4: AMAT and data amplification of the local-cache systems",
        unimem::run,
    ),
    (
        "validate",
        "the simulator against the runtime: each workload's trace replayed under farmem run \
         and simulated as that run was configured, faults and bytes at 25% and 50% local \
         (64 MiB, sort of 100k lines; --quick: 16 MiB, 10k lines, ~5 min)",
        validate::run,
    ),
    (
        "xdm",
        "xDM: workloads x far-memory backends beside the kernel's swap file, zram and zswap \
         at 25% and 50% local (root; ~45 min; --quick: 64 MiB, one round, ~3 min)",
        xdm::run,
    ),
    (
        "delay",
        "ThymesisFlow: delay validation, STREAM, Graph500 BFS/SSSP and redis per injected \
         delay, variance, resilience, MCBN/MCLN contention (~25 min; --quick: ~6 min)",
        delay::run,
    ),
    (
        "faults",
        "chaos soak of the real system: programs checking every far byte while memory \
         nodes are killed, restarted and paused (10 min; --quick: 1 min)",
        faults::run,
    ),
];

#[derive(clap::Args)]
pub struct Args {
    /// Which evaluation (`--list` shows them).
    #[arg(default_value = "daemon-fig3")]
    pub name: String,
    /// Workloads, comma-separated (each evaluation has its paper's default).
    #[arg(long)]
    pub workloads: Option<String>,
    /// Workload size: a factor of the default (0.5, 2) or a footprint (256MiB).
    #[arg(long, default_value = "1")]
    pub scale: String,
    /// A smaller grid that finishes in minutes (for CI and a first look).
    #[arg(long)]
    pub quick: bool,
    /// Directory for CSV, JSON and figures (created if missing).
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub cfg: super::sim::ConfigArgs,
    /// List the evaluations, then exit.
    #[arg(long)]
    pub list: bool,
    /// Print one JSON object on stdout instead of the tables.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub faults: faults::Flags,
    #[command(flatten)]
    pub delay: delay::Flags,
    #[command(flatten)]
    pub daemon_real: daemon_real::Flags,
}

pub fn run(args: Args) -> Outcome {
    if args.list {
        for (n, d, _) in EVALS {
            println!("{n:<14} {d}");
        }
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let Some(eval) = EVALS.iter().find(|e| e.0 == args.name) else {
        anyhow::bail!("unknown evaluation `{}` (`farmem eval --list`)", args.name);
    };
    (eval.2)(args)
}

/// The bar of an evaluation made of program runs, `len` of them.
fn runs_bar(len: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} runs, {elapsed} {msg}")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar
}

/// Says what evaluation `eval` runs next: on its bar, or a line when
/// stderr is not a terminal (a log).
fn step(bar: &indicatif::ProgressBar, eval: &str, what: String) {
    if bar.is_hidden() {
        eprintln!(
            "farmem: eval {eval}: [{}/{}] {what}",
            bar.position() + 1,
            bar.length().unwrap_or(0)
        );
    }
    bar.set_message(what);
}

/// `--workloads`' comma-separated names, each parsed by `parse`.
fn parse_list<T>(list: &str, parse: impl Fn(&str) -> anyhow::Result<T>) -> anyhow::Result<Vec<T>> {
    list.split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .map(parse)
        .collect()
}

/// `w` on local memory, which must end well: the baseline every far run
/// of it (`name`) is checked against.
fn local_run(
    w: &crate::cmd::bench::workload::Workload,
    limit: std::time::Duration,
    name: &str,
) -> anyhow::Result<crate::cmd::bench::measure::Measured> {
    let m = crate::cmd::bench::measure::run(&mut w.program(), Some(limit))?;
    anyhow::ensure!(
        m.outcome() == "ok",
        "{name} on local memory: {}: {}",
        m.outcome(),
        m.stderr_tail
    );
    Ok(m)
}

/// An evaluation's end: its report written to `--out` by `write`, printed
/// as JSON or by `print`, and exit 0 only if `out["pass"]`.
fn finish(
    args: &Args,
    out: &serde_json::Value,
    write: impl FnOnce(&std::path::Path, &serde_json::Value) -> anyhow::Result<()>,
    print: impl FnOnce(&serde_json::Value),
) -> Outcome {
    if let Some(dir) = &args.out {
        write(dir, out)?;
    }
    if args.json {
        println!("{out}");
    } else {
        print(out);
    }
    Ok(if out["pass"] == true {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}

/// The options a paper's plan takes (`farmem_sim::eval::*::plan`).
fn options(args: &Args) -> EvalOptions {
    EvalOptions {
        quick: args.quick,
        workloads: args
            .workloads
            .as_ref()
            .map(|w| w.split(',').map(str::to_string).collect()),
        // Scale 1 is the flag's default: the quick grid picks its own.
        scale: (args.scale != "1").then(|| args.scale.clone()),
        sets: args.cfg.set.clone(),
    }
}

/// Parses `--workloads` and `--scale` into simulator inputs.
fn inputs(workloads: &str, scale: &str) -> anyhow::Result<Vec<Input>> {
    let scale: Scale = scale.parse().context("--scale")?;
    workloads
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .map(|w| {
            if !farmem_workloads::WORKLOADS.iter().any(|x| x.0 == w) {
                anyhow::bail!("unknown workload `{w}`");
            }
            Ok(Input::Workload {
                name: w.to_string(),
                scale,
                seed: 1,
            })
        })
        .collect()
}
