//! `farmem eval unimem`: UniMem §4 (Fig. 9–14) from simulator runs. The
//! plan is `farmem_sim::eval::unimem::plan`; this parses, runs it, and
//! prints or writes the summary.

use std::path::Path;

use anyhow::Context;
use farmem_sim::eval::study::{Batch, RunSpec};
use farmem_sim::eval::unimem::{
    self, CACHE_PERCENTS, PRESET, Point, SYSTEMS, UniMemEval, csv, figures, summarize,
};
use farmem_sim::{Input, SimResult};
use farmem_workloads::Scale;

use super::{Args, options};
use crate::cmd::Outcome;
use crate::cmd::sim::{base_config, run_batch};

/// CPU seconds of one run at scale 1 (unimem preset, scaled caches),
/// measured on the 2-core dev machine in 2026-11. Only for the estimate
/// printed before the runs start; the simulator's speed changes with its
/// code, so the line after the runs gives the real time.
fn cpu_seconds_at_scale_1(input: &Input) -> f64 {
    match input {
        Input::Workload { name, scale, .. } => {
            let per_scale = match name.as_str() {
                "kv-uniform" => 4.2,
                "pr" => 3.9,
                "ycsb-b" => 2.1,
                "etc" => 2.0,
                "ycsb-a" => 1.3,
                "linreg" => 0.3,
                _ => 2.0,
            };
            // A footprint (`--scale 64MiB`) is taken as ~40 MiB per unit,
            // the defaults' middle.
            let factor = match scale {
                Scale::Factor(f) => *f,
                Scale::Footprint(b) => *b as f64 / f64::from(40u32 << 20),
            };
            per_scale * factor
        }
        Input::Multi(v) => v.iter().map(cpu_seconds_at_scale_1).sum(),
        Input::Trace(_) => 2.0,
    }
}

fn human_seconds(s: f64) -> String {
    if s < 90.0 {
        format!("{s:.0} s")
    } else {
        format!("{:.1} min", s / 60.0)
    }
}

pub fn run(args: Args) -> Outcome {
    // `--preset` defaults to DaeMon's for the other evals; this one is UniMem's.
    let preset = if args.cfg.preset == "daemon" {
        PRESET
    } else {
        args.cfg.preset.as_str()
    };
    let plan = unimem::plan(&options(&args))?;
    let base = base_config(preset, args.cfg.config.as_ref())?;
    let points_runs = plan.runs();
    let batch = Batch::new(&base, &points_runs)?;
    let runs: Vec<&RunSpec> = batch.distinct().collect();
    let cpu: f64 = runs.iter().map(|r| cpu_seconds_at_scale_1(&r.input)).sum();
    let longest = runs
        .iter()
        .map(|r| cpu_seconds_at_scale_1(&r.input))
        .fold(0.0, f64::max);
    let threads = rayon::current_num_threads().max(1);
    let n_points = points_runs.len();
    eprintln!(
        "farmem: eval unimem: {} runs for {n_points} points ({} repeat another point's run), scale {}; \
         about {} of CPU, {} on {threads} free cores",
        runs.len(),
        n_points - runs.len(),
        plan.scale,
        human_seconds(cpu),
        human_seconds((cpu / threads as f64).max(longest)),
    );
    let started = std::time::Instant::now();
    let results = run_batch(&batch, args.json)?;
    eprintln!(
        "farmem: eval unimem: {} runs took {}",
        runs.len(),
        human_seconds(started.elapsed().as_secs_f64())
    );
    let points = plan.points(&results);
    let e = summarize(&points);
    let scale = &plan.scale;

    if let Some(dir) = &args.out {
        write_outputs(dir, &e, &points, &results)?;
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&serde_json::json!({
                "eval": "unimem",
                "quick": args.quick,
                "scale": scale,
                "pass": e.pass(),
                "amat_miss_ns": e.amat_miss_ns,
                "data_amplification": e.data_amplification,
                "block_size": e.block_size,
                "host_share": e.host_share,
                "pairs": e.pairs,
                "paper": e.paper,
                "checks": e.checks,
            }))?
        );
    } else {
        print_tables(&e);
    }
    Ok(if e.pass() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    })
}

fn write_outputs(
    dir: &Path,
    e: &UniMemEval,
    points: &[Point],
    results: &[SimResult],
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let write = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))
    };
    write("unimem.csv", csv(points))?;
    write("unimem.json", serde_json::to_string_pretty(e)?)?;
    write("runs.json", serde_json::to_string(results)?)?;
    for (name, fig) in figures(e) {
        let p = dir.join(&name);
        let svg = fig.to_svg()?;
        farmem_sim::eval::figure::write(&p, &svg)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

fn print_tables(e: &UniMemEval) {
    for (title, g) in [
        ("AMAT over LLC misses (ns)", &e.amat_miss_ns),
        (
            "data amplification (remote bytes / working set)",
            &e.data_amplification,
        ),
    ] {
        println!("{title}");
        print!("{:<18} {:<12}", "system", "workload");
        for pc in CACHE_PERCENTS {
            print!(" {:>9}", format!("{pc}%"));
        }
        println!();
        for s in SYSTEMS {
            for (w, row) in g.get(*s).into_iter().flatten() {
                print!("{s:<18} {w:<12}");
                for pc in CACHE_PERCENTS {
                    print!(
                        " {:>9.2}",
                        row.get(&pc.to_string()).copied().unwrap_or(f64::NAN)
                    );
                }
                println!();
            }
        }
        println!();
    }
    println!("{:<72} {:>9} {:>9}", "paper vs ours", "paper", "ours");
    for c in &e.paper {
        // NaN: a number the paper does not give.
        let paper = if c.paper.is_nan() {
            "-".to_string()
        } else {
            format!("{:.3}", c.paper)
        };
        println!("{:<72} {:>9} {:>9.3}", c.what, paper, c.ours);
    }
    println!();
    for c in &e.checks {
        println!(
            "[{}] {:<78} paper {:<28} measured {:.3}",
            if c.pass { "ok" } else { "FAIL" },
            c.claim,
            c.paper,
            c.measured
        );
    }
}
