//! `farmem eval daemon`: DaeMon §6 — the grid of schemes × workloads ×
//! bandwidth factor × switch latency (Fig. 8, 10), and the sensitivity
//! studies: partition ratio (Fig. 11), codec (Fig. 12), background
//! traffic (Fig. 13–14), several cores (Fig. 15, 18), several memory
//! nodes (Fig. 17). The plan is `farmem_sim::eval::daemon::plan`; this
//! parses, runs it, and writes CSV, JSON and SVG figures to `--out`.

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use farmem_sim::SimResult;
use farmem_sim::eval::daemon::{BANDWIDTHS, DaemonEval, DaemonPlan, TimelineRuns, csv, figures};
use farmem_sim::eval::study::Batch;
use farmem_sim::eval::{daemon, figure};

use super::{Args, options};
use crate::cmd::Outcome;
use crate::cmd::sim::{base_config, run_batch};

pub fn run(args: Args) -> Outcome {
    let started = Instant::now();
    let quick = args.quick;
    let plan = daemon::plan(&options(&args))?;
    let base = base_config(&args.cfg.preset, args.cfg.config.as_ref())?;
    let runs = plan.runs();
    let batch = Batch::new(&base, &runs)?;
    eprintln!(
        "farmem: eval daemon: {} runs ({} distinct){}",
        runs.len(),
        batch.distinct_len(),
        if quick {
            " (--quick: about 15 s on 2 cores)"
        } else {
            " (full grid at scale 1: about 8 minutes on 2 idle cores, longer under other load; --quick for a first look)"
        }
    );
    let results = run_batch(&batch, args.json)?;
    let mut e = plan.summarize(&results);
    match plan.timelines.run(&base)? {
        TimelineRuns::Ran(t) => e = e.with_timelines(t, plan.timelines.period_ns),
        TimelineRuns::NotOneCore(n) => {
            eprintln!("farmem: eval daemon: no IPC timeline with core.count = {n}")
        }
    }

    let out = args.out.clone();
    if let Some(dir) = &out {
        write_outputs(dir, &e, &plan, &results)?;
    }
    let wall = started.elapsed().as_secs_f64();
    if args.json {
        // The summary's fields sit beside the run's facts in one flat object.
        let mut json = serde_json::to_value(&e)?;
        if let Some(o) = json.as_object_mut() {
            for (k, v) in [
                ("eval", serde_json::json!("daemon")),
                ("quick", quick.into()),
                ("scale", serde_json::to_value(&plan.scale)?),
                ("runs", results.len().into()),
                ("wall_seconds", wall.into()),
                ("out", serde_json::to_value(&out)?),
                ("pass", e.pass().into()),
            ] {
                o.insert(k.to_string(), v);
            }
        }
        println!("{}", serde_json::to_string(&json)?);
    } else {
        print_table(&e, results.len(), wall);
    }
    Ok(if e.pass() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    })
}

fn write_outputs(
    dir: &Path,
    e: &DaemonEval,
    plan: &DaemonPlan,
    results: &[SimResult],
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let pts = plan.points(results);
    let w = |name: &str, body: &str| {
        let p = dir.join(name);
        std::fs::write(&p, body).with_context(|| format!("writing {}", p.display()))
    };
    w("points.csv", &csv(&pts))?;
    w("summary.json", &serde_json::to_string_pretty(e)?)?;
    w("runs.json", &serde_json::to_string(results)?)?;
    let (grid, _) = plan.split(results);
    for (name, fig) in figures(e, grid) {
        let p = dir.join("figures").join(&name);
        let svg = fig.to_svg()?;
        figure::write(&p, &svg).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

fn print_table(e: &DaemonEval, runs: usize, wall: f64) {
    println!("DaeMon §6: geomean speedup over remote ({runs} runs, {wall:.0} s)");
    print!("{:<8}", "scheme");
    for (b, _) in BANDWIDTHS {
        print!(" {:>8}", format!("bw {b}"));
    }
    println!();
    for (s, m) in &e.geomean_speedup_over_remote {
        print!("{s:<8}");
        for (_, k) in BANDWIDTHS {
            print!(" {:>8.3}", m.get(*k).copied().unwrap_or(f64::NAN));
        }
        println!();
    }
    println!("\n{:<52} {:>8} {:>8}", "", "paper", "ours");
    for (what, paper, ours) in &e.versus_paper {
        println!("{what:<52} {paper:>8.3} {ours:>8.3}");
    }
    println!();
    for c in &e.checks {
        println!(
            "[{}] {:<52} paper {:<26} measured {:.3}",
            if c.pass { "ok" } else { "FAIL" },
            c.claim,
            c.paper,
            c.measured
        );
    }
}
