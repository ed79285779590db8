//! A run against `remote`'s on the same workload and platform: the points
//! every figure and check of §6 is built from, and their CSV.

use std::collections::BTreeMap;

use serde::Serialize;

use super::paper::BANDWIDTHS;
use crate::SimResult;
use crate::eval::geomean;

#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub study: String,
    pub workload: String,
    pub scheme: String,
    /// The `--set` values of the run (scheme knobs included).
    pub config: BTreeMap<String, String>,
    pub sim_time_ns: f64,
    pub speedup_over_remote: f64,
    pub local_hit_ratio: f64,
    pub remote_bytes_read: u64,
}

/// The configuration a run is compared under: its overrides without the
/// scheme-only knobs (`daemon.*`), which `remote` ignores.
fn platform(r: &SimResult) -> Vec<(String, String)> {
    r.overrides
        .iter()
        .filter(|(k, _)| !k.starts_with("daemon."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Pairs every run with `remote`'s on the same workload and platform.
/// Runs without such a `remote` run are left out.
pub fn points(study: &str, results: &[SimResult]) -> Vec<Point> {
    let mut remote: BTreeMap<(String, Vec<(String, String)>), f64> = BTreeMap::new();
    for r in results.iter().filter(|r| r.scheme == "remote") {
        remote.insert((r.workload.clone(), platform(r)), r.sim_time_ns);
    }
    results
        .iter()
        .filter_map(|r| {
            let base = remote.get(&(r.workload.clone(), platform(r)))?;
            Some(Point {
                study: study.to_string(),
                workload: r.workload.clone(),
                scheme: r.scheme.clone(),
                config: r.overrides.clone(),
                sim_time_ns: r.sim_time_ns,
                speedup_over_remote: base / r.sim_time_ns.max(1e-9),
                local_hit_ratio: r.local_hit_ratio,
                remote_bytes_read: r.remote_bytes_read,
            })
        })
        .collect()
}

pub(super) fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Geomean of `speedup_over_remote` over the points `keep` selects,
/// grouped by `key`.
pub(super) fn geo_by<K: Ord>(
    points: &[Point],
    keep: impl Fn(&Point) -> bool,
    key: impl Fn(&Point) -> K,
) -> BTreeMap<K, f64> {
    let mut g: BTreeMap<K, Vec<f64>> = BTreeMap::new();
    for p in points.iter().filter(|p| keep(p)) {
        g.entry(key(p)).or_default().push(p.speedup_over_remote);
    }
    g.into_iter().map(|(k, v)| (k, geomean(&v))).collect()
}

pub(super) fn cfg<'a>(p: &'a Point, key: &str) -> &'a str {
    p.config.get(key).map(String::as_str).unwrap_or("")
}

/// The JSON key of a `link.bw_factor` value (`1/4` → `0.25`).
pub fn bw_key(v: &str) -> String {
    BANDWIDTHS
        .iter()
        .find(|(s, _)| *s == v)
        .map(|(_, k)| k.to_string())
        .unwrap_or_else(|| v.to_string())
}

/// (a, b) → v into a → b → v.
pub(super) fn scheme_map(
    flat: BTreeMap<(String, String), f64>,
) -> BTreeMap<String, BTreeMap<String, f64>> {
    let mut m: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for ((a, b), v) in flat {
        m.entry(a).or_default().insert(b, v);
    }
    m
}

pub(super) fn get2(m: &BTreeMap<String, BTreeMap<String, f64>>, a: &str, b: &str) -> f64 {
    m.get(a).and_then(|x| x.get(b)).copied().unwrap_or(f64::NAN)
}

/// One CSV row per point (every study), with a header.
pub fn csv(points: &[Point]) -> String {
    let mut out = String::from(
        "study,workload,scheme,config,sim_time_ns,speedup_over_remote,local_hit_ratio,remote_bytes_read\n",
    );
    for p in points {
        let config: Vec<String> = p.config.iter().map(|(k, v)| format!("{k}={v}")).collect();
        out.push_str(&format!(
            "{},{},{},{},{:.1},{:.6},{:.6},{}\n",
            p.study,
            p.workload,
            p.scheme,
            config.join(";"),
            p.sim_time_ns,
            p.speedup_over_remote,
            p.local_hit_ratio,
            p.remote_bytes_read
        ));
    }
    out
}
