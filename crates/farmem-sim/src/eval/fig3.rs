//! The direction of DaeMon's Figure 3 (§2.2): the data-movement baselines
//! side by side.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Check, geomean};
use crate::SimResult;

/// The schemes Figure 3 compares (DaeMon itself comes with its engines).
pub const FIG3_SCHEMES: &[&str] = &[
    "local",
    "remote",
    "cache-line",
    "page-free",
    "cache-line+page",
];

#[derive(Debug, Clone, Serialize)]
pub struct Fig3 {
    /// Execution time of each scheme over Local's, per workload.
    pub slowdown: BTreeMap<String, BTreeMap<String, f64>>,
    /// Geometric means over workloads.
    pub geomean: BTreeMap<String, f64>,
    pub checks: Vec<Check>,
}

impl Fig3 {
    pub fn pass(&self) -> bool {
        self.checks.iter().all(|c| c.pass)
    }
}

/// Summarizes runs of [`FIG3_SCHEMES`] over some workloads.
pub fn fig3(results: &[SimResult]) -> Fig3 {
    let mut by_workload: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for r in results {
        by_workload
            .entry(r.workload.clone())
            .or_default()
            .insert(r.scheme.clone(), r.sim_time_ns);
    }
    let mut slowdown = BTreeMap::new();
    let mut per_scheme: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (w, times) in &by_workload {
        let Some(&local) = times.get("local") else {
            continue;
        };
        let row: BTreeMap<String, f64> = times
            .iter()
            .map(|(s, t)| (s.clone(), t / local.max(1e-9)))
            .collect();
        for (s, v) in &row {
            per_scheme.entry(s.clone()).or_default().push(*v);
        }
        slowdown.insert(w.clone(), row);
    }
    let geomean: BTreeMap<String, f64> = per_scheme
        .iter()
        .map(|(s, v)| (s.clone(), geomean(v)))
        .collect();
    let g = |s: &str| geomean.get(s).copied().unwrap_or(f64::NAN);
    let remote = g("remote");
    let checks = vec![
        Check {
            claim: "remote is several times slower than local",
            paper: "3.86x",
            measured: remote,
            pass: remote >= 2.0,
        },
        Check {
            claim: "page-free is close to local",
            paper: "almost the same",
            measured: g("page-free"),
            pass: g("page-free") <= 1.5,
        },
        Check {
            claim: "cache-line+page gains little over remote",
            paper: "1.11x",
            measured: remote / g("cache-line+page"),
            pass: remote / g("cache-line+page") <= 1.3,
        },
    ];
    Fig3 {
        slowdown,
        geomean,
        checks,
    }
}
