//! `farmem eval unimem`: UniMem §4 (Fig. 9–14) from simulator runs.

use std::collections::HashMap;

use anyhow::Context;
use farmem_sim::eval::unimem::{
    BLOCK_SIZES, CACHE_PERCENTS, Experiment, HOST_SHARES, MIXED, MIXED_INPUTS, PAIRS, Point,
    SYSTEMS, WORKLOADS, csv, figures, summarize,
};
use farmem_sim::{Input, SimResult};
use farmem_workloads::Scale;

use super::{Args, inputs};
use crate::cmd::Outcome;
use crate::cmd::sim::{Run, base_config, execute};

/// CPU caches scaled with the working sets: the paper's 24 MiB LLC is
/// 0.06–0.6% of its 4–40 GB working sets; ours are 16–100 MiB, so a
/// 24 MiB LLC would hold most of them. 256 KiB keeps the LLC ~0.3–1.5%.
const SCALED_CACHES: &[(&str, &str)] = &[("llc.size", "256KiB"), ("l2.size", "80KiB")];

/// The quick grid's sweeps (the cache-size grid is always whole).
const QUICK_SWEEP_WORKLOADS: &[&str] = &["ycsb-a", "pr"];
const QUICK_HOST_SHARES: &[u32] = &[0, 10, 30, 50, 80];

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

/// Points whose runs are one simulation (same scheme, input and resolved
/// config) share it: at the defaults the block-size sweep's 512 B, the
/// host-share sweep's 30% and the pairs sweep's 8 are the cache-size
/// grid's 10% runs. Returns the distinct runs and, per point, its run.
fn distinct_runs(
    base: &farmem_sim::ConfigBuilder,
    plan: &[Planned],
) -> anyhow::Result<(Vec<Run>, Vec<usize>)> {
    let mut runs: Vec<Run> = Vec::new();
    let mut of_point = Vec::with_capacity(plan.len());
    let mut seen: HashMap<String, usize> = HashMap::new();
    for p in plan {
        let mut b = base.clone();
        for (k, v) in &p.run.overrides {
            b.set(k, v)?;
        }
        let key = format!(
            "{}\n{:?}\n{}",
            p.run.scheme,
            p.run.input,
            serde_json::to_string(&b.build()?)?
        );
        let i = *seen.entry(key).or_insert_with(|| {
            runs.push(p.run.clone());
            runs.len() - 1
        });
        of_point.push(i);
    }
    Ok((runs, of_point))
}

struct Planned {
    experiment: Experiment,
    system: &'static str,
    workload: String,
    x: String,
    run: Run,
}

fn run_of(system: &str, input: &Input, sets: &[(String, String)]) -> Run {
    Run {
        scheme: system.to_string(),
        input: input.clone(),
        overrides: sets.to_vec(),
    }
}

pub fn run(args: Args) -> Outcome {
    // `--preset` defaults to DaeMon's for the other evals; this one is UniMem's.
    let preset = if args.cfg.preset == "daemon" {
        "unimem"
    } else {
        args.cfg.preset.as_str()
    };
    let scale = if args.quick && args.scale == "1" {
        "0.25".to_string()
    } else {
        args.scale.clone()
    };
    let wl = args
        .workloads
        .clone()
        .unwrap_or_else(|| WORKLOADS.join(","));
    let singles = inputs(&wl, &scale)?;
    let mut common: Vec<(String, String)> = SCALED_CACHES
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for s in &args.cfg.set {
        let (k, v) = s
            .split_once('=')
            .with_context(|| format!("--set {s}: expected KEY=VALUE"))?;
        anyhow::ensure!(
            !v.contains(','),
            "--set {s}: sweeps are not supported in eval"
        );
        common.push((k.trim().to_string(), v.trim().to_string()));
    }
    let with = |extra: &[(&str, String)]| {
        let mut v = common.clone();
        v.extend(extra.iter().map(|(k, x)| (k.to_string(), x.clone())));
        v
    };

    let mut plan: Vec<Planned> = Vec::new();
    // Fig. 9, 10: every system, workload and cache size.
    for input in &singles {
        for &system in SYSTEMS {
            for pc in CACHE_PERCENTS {
                plan.push(Planned {
                    experiment: Experiment::CacheSize,
                    system,
                    workload: input.name(),
                    x: pc.to_string(),
                    run: run_of(system, input, &with(&[("local.size", format!("{pc}%"))])),
                });
            }
        }
    }
    // Fig. 11: the four interleaved, one core each, sharing the local cache.
    let scale_v: Scale = scale.parse().context("--scale")?;
    let mixed = Input::Multi(
        MIXED_INPUTS
            .iter()
            .map(|w| Input::Workload {
                name: w.to_string(),
                scale: scale_v,
                seed: 1,
            })
            .collect(),
    );
    for &system in SYSTEMS {
        for pc in CACHE_PERCENTS {
            plan.push(Planned {
                experiment: Experiment::CacheSize,
                system,
                workload: MIXED.to_string(),
                x: pc.to_string(),
                run: run_of(
                    system,
                    &mixed,
                    &with(&[
                        ("local.size", format!("{pc}%")),
                        ("core.count", MIXED_INPUTS.len().to_string()),
                    ]),
                ),
            });
        }
    }
    // Fig. 12–14 at 10%.
    let sweep_inputs: Vec<&Input> = if args.quick {
        singles
            .iter()
            .filter(|i| QUICK_SWEEP_WORKLOADS.contains(&i.name().as_str()))
            .collect()
    } else {
        singles.iter().collect()
    };
    let hosts = if args.quick {
        QUICK_HOST_SHARES
    } else {
        HOST_SHARES
    };
    for input in sweep_inputs {
        let ten = ("local.size", "10%".to_string());
        for b in BLOCK_SIZES {
            plan.push(Planned {
                experiment: Experiment::BlockSize,
                system: "unimem-nopromote",
                workload: input.name(),
                x: b.to_string(),
                run: run_of(
                    "unimem-nopromote",
                    input,
                    &with(&[ten.clone(), ("unimem.block_bytes", b.to_string())]),
                ),
            });
        }
        for h in hosts {
            plan.push(Planned {
                experiment: Experiment::HostShare,
                system: "unimem",
                workload: input.name(),
                x: h.to_string(),
                run: run_of(
                    "unimem",
                    input,
                    &with(&[ten.clone(), ("unimem.host_share", format!("\"{h}%\""))]),
                ),
            });
        }
        for p in PAIRS {
            plan.push(Planned {
                experiment: Experiment::Pairs,
                system: "unimem",
                workload: input.name(),
                x: p.to_string(),
                run: run_of(
                    "unimem",
                    input,
                    &with(&[ten.clone(), ("unimem.filter.pairs", p.to_string())]),
                ),
            });
        }
    }

    let base = base_config(preset, args.cfg.config.as_ref())?;
    let (runs, of_point) = distinct_runs(&base, &plan)?;
    let cpu: f64 = runs.iter().map(|r| cpu_seconds_at_scale_1(&r.input)).sum();
    let longest = runs
        .iter()
        .map(|r| cpu_seconds_at_scale_1(&r.input))
        .fold(0.0, f64::max);
    let threads = rayon::current_num_threads().max(1);
    eprintln!(
        "farmem: eval unimem: {} runs for {} points ({} repeat another point's run), scale {scale}; \
         about {} of CPU, {} on {threads} free cores",
        runs.len(),
        plan.len(),
        plan.len() - runs.len(),
        human_seconds(cpu),
        human_seconds((cpu / threads as f64).max(longest)),
    );
    let started = std::time::Instant::now();
    let distinct = execute(&base, &runs, args.json)?;
    eprintln!(
        "farmem: eval unimem: {} runs took {}",
        runs.len(),
        human_seconds(started.elapsed().as_secs_f64())
    );
    let results: Vec<SimResult> = of_point
        .iter()
        .map(|&i| distinct.get(i).cloned().context("a run without a result"))
        .collect::<anyhow::Result<_>>()?;
    let points: Vec<Point> = plan
        .iter()
        .zip(&results)
        .map(|(p, r)| Point {
            experiment: p.experiment,
            system: p.system.to_string(),
            workload: p.workload.clone(),
            x: p.x.clone(),
            amat_miss_ns: r.amat_miss_ns,
            data_amplification: r.data_amplification,
            local_hit_ratio: r.local_hit_ratio,
            remote_bytes_read: r.remote_bytes_read,
            footprint_bytes: r.footprint_bytes,
        })
        .collect();
    let e = summarize(&points);

    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let write = |name: &str, text: String| {
            let p = dir.join(name);
            std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))
        };
        write("unimem.csv", csv(&points))?;
        write("unimem.json", serde_json::to_string_pretty(&e)?)?;
        write("runs.json", serde_json::to_string(&results)?)?;
        for (name, fig) in figures(&e) {
            let p = dir.join(&name);
            let svg = fig.to_svg()?;
            farmem_sim::eval::figure::write(&p, &svg)
                .with_context(|| format!("writing {}", p.display()))?;
        }
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
    Ok(if e.pass() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planned(system: &'static str, sets: &[(&str, &str)]) -> Planned {
        let input = Input::Workload {
            name: "pr".into(),
            scale: Scale::Factor(0.01),
            seed: 1,
        };
        let sets: Vec<(String, String)> = sets
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Planned {
            experiment: Experiment::BlockSize,
            system,
            workload: "pr".into(),
            x: String::new(),
            run: run_of(system, &input, &sets),
        }
    }

    #[test]
    fn points_with_the_same_resolved_config_share_a_run() {
        let base = base_config("unimem", None).unwrap();
        let ten = ("local.size", "10%");
        let plan = [
            planned("unimem-nopromote", &[ten]),
            // 512 B and 8 pairs are the preset's: the same simulation.
            planned("unimem-nopromote", &[ten, ("unimem.block_bytes", "512")]),
            planned("unimem-nopromote", &[ten, ("unimem.block_bytes", "256")]),
            planned("unimem", &[ten, ("unimem.filter.pairs", "8")]),
            planned("unimem", &[ten]),
            // Another scheme on the same config is another run.
            planned("kona", &[ten]),
        ];
        let (runs, of_point) = distinct_runs(&base, &plan).unwrap();
        assert_eq!(of_point, [0, 0, 1, 2, 2, 3]);
        let schemes: Vec<&str> = runs.iter().map(|r| r.scheme.as_str()).collect();
        assert_eq!(
            schemes,
            ["unimem-nopromote", "unimem-nopromote", "unimem", "kona"]
        );
    }

    #[test]
    fn a_bad_setting_is_an_error_before_any_run() {
        let base = base_config("unimem", None).unwrap();
        let plan = [planned("unimem", &[("unimem.block_bytes", "100")])];
        assert!(distinct_runs(&base, &plan).is_err());
    }
}
