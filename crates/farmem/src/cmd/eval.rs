//! `farmem eval`: rebuild a paper's evaluation from simulator runs.

use std::path::PathBuf;

use anyhow::Context;
use farmem_sim::Input;
use farmem_sim::eval::{FIG3_SCHEMES, fig3};
use farmem_workloads::Scale;

use super::Outcome;
use super::sim::{Run, base_config, execute, plan};

/// Evaluations this build can run; the rest come with their schemes.
const EVALS: &[(&str, &str)] = &[(
    "daemon-fig3",
    "DaeMon Fig. 3: local, remote, cache-line, page-free, cache-line+page",
)];
const LATER: &[&str] = &["daemon", "unimem", "kona", "delay", "xdm"];

#[derive(clap::Args)]
pub struct Args {
    /// Which evaluation (`--list` shows them).
    #[arg(default_value = "daemon-fig3")]
    pub name: String,
    /// Workloads, comma-separated (DaeMon-like kernels by default).
    #[arg(long, default_value = "pr,stream,spmv,nw")]
    pub workloads: String,
    /// Workload size: a factor of the default (0.5, 2) or a footprint (256MiB).
    #[arg(long, default_value = "1")]
    pub scale: String,
    #[arg(long, default_value = "daemon")]
    pub preset: String,
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Override a config key for every run (`link.switch_ns=400`).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    #[arg(long)]
    pub list: bool,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> Outcome {
    if args.list {
        for (n, d) in EVALS {
            println!("{n:<14} {d}");
        }
        for n in LATER {
            println!("{n:<14} (not yet: needs its scheme)");
        }
        return Ok(std::process::ExitCode::SUCCESS);
    }
    if args.name != "daemon-fig3" {
        if LATER.contains(&args.name.as_str()) {
            anyhow::bail!(
                "`farmem eval {}` is not available yet: it needs that paper's scheme in the simulator (try `farmem eval daemon-fig3`)",
                args.name
            );
        }
        anyhow::bail!("unknown evaluation `{}` (`farmem eval --list`)", args.name);
    }
    let scale: Scale = args.scale.parse().context("--scale")?;
    let inputs: Vec<Input> = args
        .workloads
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
        .collect::<anyhow::Result<_>>()?;
    for s in &args.set {
        if s.contains(',') {
            anyhow::bail!("--set {s}: sweeps are not supported in eval");
        }
    }
    let base = base_config(&args.preset, args.config.as_ref())?;
    let runs: Vec<Run> = plan(&FIG3_SCHEMES.join(","), &inputs, &args.set)?;
    let results = execute(&base, &runs, args.json)?;
    let f = fig3(&results);
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&serde_json::json!({
                "eval": "daemon-fig3",
                "pass": f.pass(),
                "summary": f,
                "runs": results,
            }))?
        );
    } else {
        println!("DaeMon Fig. 3: execution time normalized to local");
        print!("{:<12}", "workload");
        for s in FIG3_SCHEMES {
            print!(" {s:>16}");
        }
        println!();
        for (w, row) in &f.slowdown {
            print!("{:<12}", w);
            for s in FIG3_SCHEMES {
                print!(" {:>16.2}", row.get(*s).copied().unwrap_or(f64::NAN));
            }
            println!();
        }
        print!("{:<12}", "geomean");
        for s in FIG3_SCHEMES {
            print!(" {:>16.2}", f.geomean.get(*s).copied().unwrap_or(f64::NAN));
        }
        println!("\n");
        for c in &f.checks {
            println!(
                "[{}] {:<44} paper {:<16} measured {:.2}",
                if c.pass { "ok" } else { "FAIL" },
                c.claim,
                c.paper,
                c.measured
            );
        }
    }
    Ok(if f.pass() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    })
}
