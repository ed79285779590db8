use farmem_workloads::Scale;

use super::*;
use crate::eval::Check;
use crate::stats::Stats;
use crate::{Config, SimResult};

fn run(w: &str, s: &str, bw: &str, sw: &str, t: f64, hit: f64) -> SimResult {
    let mut stats = Stats::default();
    if s == "lc" {
        stats.put("lc", "compression_ratio", if w == "a" { 3.0 } else { 1.0 });
    }
    SimResult {
        scheme: s.into(),
        workload: w.into(),
        sim_time_ns: t,
        local_hit_ratio: hit,
        overrides: [
            ("link.bw_factor".to_string(), bw.to_string()),
            ("link.switch_ns".to_string(), sw.to_string()),
        ]
        .into_iter()
        .collect(),
        stats,
        ..crate::eval::test_result()
    }
}

/// A paper-shaped grid: daemon gains more at lower bandwidth, pq
/// loses hits on pr that daemon recovers, bp slows the scan, lc gains
/// on the compressible workload.
fn grid() -> Vec<SimResult> {
    let mut v = Vec::new();
    for (w, lc_t, bp_t) in [
        ("pr", 90.0, 95.0),
        ("stream", 100.0, 120.0),
        ("a", 50.0, 90.0),
    ] {
        for (bw, gain) in [("1/2", 1.5), ("1/4", 2.0), ("1/8", 3.0)] {
            for sw in SWITCH_NS {
                let hit = |s| match (w, s) {
                    ("pr", "pq") => 0.80,
                    ("pr", "daemon") => 0.95,
                    _ => 0.97,
                };
                v.push(run(w, "remote", bw, sw, 100.0, hit("remote")));
                v.push(run(w, "lc", bw, sw, lc_t, hit("lc")));
                v.push(run(w, "bp", bw, sw, bp_t, hit("bp")));
                v.push(run(w, "pq", bw, sw, 90.0, hit("pq")));
                v.push(run(w, "daemon", bw, sw, 100.0 / gain, hit("daemon")));
            }
        }
    }
    v
}

/// The compressibility study on pr: pq loses 0.17 of remote's hits,
/// daemon wins back `measured` of its own hit ratio and `assumed` at
/// the paper's ratio.
fn compressibility(measured: f64, assumed: f64) -> Vec<SimResult> {
    let mut d = run("pr", "daemon", "1/4", "100", 80.0, assumed);
    d.overrides
        .insert("daemon.assume_ratio".into(), PAPER_LZ_RATIO.to_string());
    vec![
        run("pr", "remote", "1/4", "100", 100.0, 0.97),
        run("pr", "pq", "1/4", "100", 90.0, 0.80),
        run("pr", "daemon", "1/4", "100", 85.0, measured),
        d,
    ]
}

fn with_compressibility(rs: &[SimResult]) -> DaemonEval {
    summarize(
        &grid(),
        &[Study {
            name: COMPRESSIBILITY,
            results: rs,
            label: &compressibility_label,
            default_knobs: false,
        }],
    )
}

fn check<'a>(e: &'a DaemonEval, claim_starts: &str) -> &'a Check {
    e.checks
        .iter()
        .find(|c| c.claim.starts_with(claim_starts))
        .unwrap_or_else(|| panic!("no check {claim_starts}"))
}

#[test]
fn only_daemon_at_the_papers_ratio_is_labelled_so() {
    let mut rs = compressibility(0.82, 0.93);
    for r in &mut rs[..3] {
        r.overrides.insert("daemon.assume_ratio".into(), "2".into());
    }
    let labels: Vec<String> = points(COMPRESSIBILITY, &rs)
        .iter()
        .filter_map(compressibility_label)
        .collect();
    assert_eq!(labels, ["remote", "pq", "daemon", AT_PAPER_RATIO]);
}

#[test]
fn recovered_hits_are_measured_on_the_grid_and_at_the_papers_ratio_apart() {
    let e = with_compressibility(&compressibility(0.82, 0.93));
    let h = &e.study_hit_ratio[COMPRESSIBILITY];
    assert_eq!(h[AT_PAPER_RATIO]["pr"], 0.93);
    assert_eq!(h["daemon"]["pr"], 0.82);
    // The grid's daemon: (0.95 - 0.80) / (0.97 - 0.80).
    let grid = check(&e, "daemon recovers most of pq's lost local hits");
    assert!((grid.measured - 0.15 / 0.17).abs() < 1e-9 && grid.pass);
    let what_if = check(&e, "what-if: pages at 4.47x");
    assert!((what_if.measured - 0.13 / 0.17).abs() < 1e-9 && what_if.pass);
    assert!(e.pass());
    // Little recovered even at the paper's ratio: that check fails alone.
    let e = with_compressibility(&compressibility(0.82, 0.84));
    assert!(!check(&e, "what-if: pages at 4.47x").pass);
    assert!(check(&e, "daemon recovers most of pq's lost local hits").pass);
    assert!(!e.pass());
}

#[test]
fn summary_keys_values_and_checks() {
    let e = with_compressibility(&compressibility(0.82, 0.93));
    let d = &e.geomean_speedup_over_remote["daemon"];
    assert_eq!(d.keys().collect::<Vec<_>>(), ["0.125", "0.25", "0.5"]);
    assert!((d["0.5"] - 1.5).abs() < 1e-12 && (d["0.125"] - 3.0).abs() < 1e-12);
    assert!((e.worst_daemon_vs_remote - 1.5).abs() < 1e-12);
    assert!((e.local_hit_ratio["pq"]["pr"] - 0.80).abs() < 1e-12);
    assert_eq!(e.compression_ratio["a"], 3.0);
    // bp over the high-locality workloads (stream only here), per bandwidth.
    for bw in ["0.5", "0.25", "0.125"] {
        assert!((e.bp_high_locality_by_bandwidth[bw] - 100.0 / 120.0).abs() < 1e-12);
    }
    assert_eq!(e.remote_link_utilization["pr"]["0.125"], 0.0);
    assert!(e.pass(), "{:#?}", e.checks);
    // Fig. 8 for every network point, geomean, hit ratio, and the
    // compressibility study's speedups and hit ratios.
    assert_eq!(figures(&e, &grid()).len(), 6 + 2 + 2);
}

#[test]
fn a_slow_daemon_point_fails_the_two_percent_check() {
    let mut g = grid();
    g.push(run("b", "remote", "1/2", "100", 100.0, 0.9));
    g.push(run("b", "daemon", "1/2", "100", 103.0, 0.9));
    let e = summarize(&g, &[]);
    assert!((e.worst_daemon_vs_remote - 100.0 / 103.0).abs() < 1e-12);
    let w = e.worst_daemon_at.as_ref().unwrap();
    assert_eq!(w.workload, "b");
    assert!(!e.checks[0].pass);
}

#[test]
fn studies_are_paired_with_remote_ignoring_daemon_knobs() {
    let mut rs = vec![run("pr", "remote", "1/4", "100", 100.0, 0.9)];
    let mut d = run("pr", "daemon", "1/4", "100", 80.0, 0.9);
    d.overrides
        .insert("daemon.compute.partition.ratio".into(), "50%".into());
    rs.push(d);
    let label = |p: &Point| {
        (p.scheme != "remote").then(|| {
            format!(
                "{} {}",
                p.scheme,
                p.config
                    .get("daemon.compute.partition.ratio")
                    .cloned()
                    .unwrap_or_default()
            )
        })
    };
    let e = summarize(
        &grid(),
        &[Study {
            name: "ratio",
            results: &rs,
            label: &label,
            default_knobs: false,
        }],
    );
    assert_eq!(e.studies["ratio"]["daemon 50%"]["pr"], 1.25);
    // Non-default knobs do not count for the worst case.
    assert!((e.worst_daemon_vs_remote - 1.5).abs() < 1e-12);
    let rows = csv(&points("ratio", &rs));
    assert_eq!(rows.lines().count(), 3);
    assert!(rows.contains("ratio,pr,daemon,daemon.compute.partition.ratio=50%;"));
}

#[test]
fn phase_ipc_averages_whole_intervals_of_each_phase() {
    // Two intervals per period, quiet first; the last (partial) is left out.
    let t = Timeline {
        interval_ns: 25.0,
        ipc: vec![1.0, 3.0, 2.0, 2.0, 1.0, 1.0, 4.0, 4.0, 9.0],
    };
    assert_eq!(
        phase_ipc(&t, 50.0),
        Some(PhaseIpc {
            quiet: 1.5,
            busy: 3.0
        })
    );
    // Intervals that do not tile the period, or one phase only.
    assert_eq!(phase_ipc(&t, 60.0), None);
    let short = Timeline {
        interval_ns: 25.0,
        ipc: vec![1.0, 1.0, 0.5],
    };
    assert_eq!(phase_ipc(&short, 50.0), None);
}

#[test]
fn ipc_timeline_accounts_for_every_instruction_and_the_whole_run() {
    let cfg = Config::preset("daemon").unwrap();
    let scale = Scale::Factor(0.002);
    let whole = crate::simulate(
        &cfg,
        "remote",
        &crate::Input::Workload {
            name: "stream".into(),
            scale,
            seed: 1,
        },
    )
    .unwrap();
    let interval = 2000.0;
    let t = ipc_timeline(&cfg, "remote", "stream", scale, 1, interval).unwrap();
    // One interval per 2 µs of the run, the last one partial.
    let n = t.ipc.len();
    assert_eq!(n, (whole.sim_time_ns / interval).ceil() as usize);
    let last = whole.sim_time_ns - (n - 1) as f64 * interval;
    let instructions: f64 = t.ipc[..n - 1]
        .iter()
        .map(|v| v * interval * cfg.core.freq_ghz)
        .sum::<f64>()
        + t.ipc[n - 1] * last * cfg.core.freq_ghz;
    assert!((instructions - whole.instructions as f64).abs() < 1e-6 * instructions);
    // Several cores share one clock per core: refused.
    let mut b = crate::ConfigBuilder::preset("daemon").unwrap();
    b.set("core.count", "2").unwrap();
    let two = b.build().unwrap();
    assert!(ipc_timeline(&two, "remote", "stream", scale, 1, interval).is_err());
    assert!(ipc_timeline(&cfg, "remote", "stream", scale, 1, 0.0).is_err());
}

#[test]
fn spearman_ranks() {
    assert_eq!(spearman(&[(1.0, 10.0), (2.0, 20.0), (3.0, 30.0)]), 1.0);
    assert_eq!(spearman(&[(1.0, 30.0), (2.0, 20.0), (3.0, 10.0)]), -1.0);
    assert!(spearman(&[(1.0, 1.0)]).is_nan());
}
