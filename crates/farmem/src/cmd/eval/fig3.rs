//! `farmem eval daemon-fig3`: DaeMon Fig. 3's baselines side by side.

use farmem_sim::eval::{FIG3_SCHEMES, fig3};

use super::{Args, inputs};
use crate::cmd::Outcome;
use crate::cmd::sim::{Run, base_config, execute, plan};

/// Runs DaeMon Fig. 3's schemes over the workloads and checks its direction.
pub fn run(args: Args) -> Outcome {
    let inputs = inputs(
        args.workloads.as_deref().unwrap_or("pr,stream,spmv,nw"),
        &args.scale,
    )?;
    for s in &args.cfg.set {
        if s.contains(',') {
            anyhow::bail!("--set {s}: sweeps are not supported in eval");
        }
    }
    let base = base_config(&args.cfg.preset, args.cfg.config.as_ref())?;
    let runs: Vec<Run> = plan(&FIG3_SCHEMES.join(","), &inputs, &args.cfg.set)?;
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
