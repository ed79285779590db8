//! The runs of the grid (Fig. 8, 10) and of the sensitivity studies
//! (Fig. 11-18) summarized into [`DaemonEval`].

use std::collections::BTreeMap;

use super::checks::{checks, versus_paper};
use super::paper::HIGH_LOCALITY;
use super::points::{Point, bw_key, cfg, geo_by, mean, points, scheme_map};
use super::report::{DaemonEval, Worst};
use crate::SimResult;
use crate::eval::geomean;

/// A sensitivity study's runs and how to label a point's series.
pub struct Study<'a> {
    pub name: &'a str,
    pub results: &'a [SimResult],
    /// Series label of a point (e.g. `daemon 50%`); `None` leaves it out.
    pub label: &'a dyn Fn(&Point) -> Option<String>,
    /// Whether its `daemon` runs use the default knobs (count for the
    /// worst case).
    pub default_knobs: bool,
}

/// Nested map: (outer, inner) → values, reduced by `f`.
type Groups = BTreeMap<(String, String), Vec<f64>>;

fn reduce(g: Groups, f: fn(&[f64]) -> f64) -> BTreeMap<String, BTreeMap<String, f64>> {
    scheme_map(g.into_iter().map(|(k, v)| (k, f(&v))).collect())
}

/// Summarizes the main grid (schemes × workloads × bandwidth × switch) and
/// the studies.
pub fn summarize(grid: &[SimResult], studies: &[Study]) -> DaemonEval {
    let pts = points("grid", grid);
    let geomean_speedup_over_remote = scheme_map(geo_by(
        &pts,
        |_| true,
        |p| (p.scheme.clone(), bw_key(cfg(p, "link.bw_factor"))),
    ));
    let geomean_speedup_by_switch = scheme_map(geo_by(
        &pts,
        |_| true,
        |p| (p.scheme.clone(), cfg(p, "link.switch_ns").to_string()),
    ));
    let speedup_by_workload = scheme_map(geo_by(
        &pts,
        |_| true,
        |p| (p.workload.clone(), p.scheme.clone()),
    ));
    let mut hits = Groups::new();
    for p in &pts {
        hits.entry((p.scheme.clone(), p.workload.clone()))
            .or_default()
            .push(p.local_hit_ratio);
    }
    let mut compression_ratio = BTreeMap::new();
    for r in grid.iter().filter(|r| r.scheme == "lc") {
        if let Some(c) = r.stats.get("lc.compression_ratio") {
            compression_ratio.insert(r.workload.clone(), c);
        }
    }
    let per_study: Vec<Vec<Point>> = studies.iter().map(|s| points(s.name, s.results)).collect();
    let worst = worst_daemon(&pts, studies, &per_study);
    let mut study_maps = BTreeMap::new();
    let mut study_hits = BTreeMap::new();
    for (s, sp) in studies.iter().zip(&per_study) {
        let (speed, hit) = series(s, sp);
        study_maps.insert(s.name.to_string(), reduce(speed, geomean));
        study_hits.insert(s.name.to_string(), reduce(hit, mean));
    }
    let mut e = DaemonEval {
        geomean_speedup_over_remote,
        geomean_speedup_by_switch,
        worst_daemon_vs_remote: worst.as_ref().map_or(f64::NAN, |w| w.speedup),
        worst_daemon_at: worst,
        local_hit_ratio: reduce(hits, mean),
        compression_ratio,
        speedup_by_workload,
        studies: study_maps,
        study_hit_ratio: study_hits,
        bp_high_locality_by_bandwidth: geo_by(
            &pts,
            |p| p.scheme == "bp" && HIGH_LOCALITY.contains(&p.workload.as_str()),
            |p| bw_key(cfg(p, "link.bw_factor")),
        ),
        remote_link_utilization: remote_utilization(grid),
        disturbance_timeline: BTreeMap::new(),
        disturbance_ipc_by_phase: BTreeMap::new(),
        versus_paper: Vec::new(),
        checks: Vec::new(),
    };
    e.checks = checks(&e);
    e.versus_paper = versus_paper(&e);
    e
}

/// The worst `daemon` point over the grid and the default-knob studies
/// (the first of equals, grid first).
fn worst_daemon(grid: &[Point], studies: &[Study], per_study: &[Vec<Point>]) -> Option<Worst> {
    let default_knobs = studies
        .iter()
        .zip(per_study)
        .filter(|(s, _)| s.default_knobs)
        .flat_map(|(_, sp)| sp);
    let mut worst: Option<Worst> = None;
    for p in grid.iter().chain(default_knobs) {
        if p.scheme == "daemon"
            && worst
                .as_ref()
                .is_none_or(|w| p.speedup_over_remote < w.speedup)
        {
            worst = Some(Worst {
                study: p.study.clone(),
                workload: p.workload.clone(),
                config: p.config.clone(),
                speedup: p.speedup_over_remote,
            });
        }
    }
    worst
}

/// A study's speedups and hit ratios by (series label, workload).
fn series(s: &Study, sp: &[Point]) -> (Groups, Groups) {
    let mut speed = Groups::new();
    let mut hit = Groups::new();
    for p in sp {
        let Some(l) = (s.label)(p) else { continue };
        speed
            .entry((l.clone(), p.workload.clone()))
            .or_default()
            .push(p.speedup_over_remote);
        hit.entry((l, p.workload.clone()))
            .or_default()
            .push(p.local_hit_ratio);
    }
    (speed, hit)
}

/// workload → bandwidth → `remote`'s mean link utilization on the grid.
fn remote_utilization(grid: &[SimResult]) -> BTreeMap<String, BTreeMap<String, f64>> {
    let mut util = Groups::new();
    for r in grid.iter().filter(|r| r.scheme == "remote") {
        let bw = r.overrides.get("link.bw_factor").map_or("", String::as_str);
        util.entry((r.workload.clone(), bw_key(bw)))
            .or_default()
            .push(r.link_utilization);
    }
    reduce(util, mean)
}
