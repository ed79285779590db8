//! Paper evaluations rebuilt from simulator runs: one module per
//! evaluation, each with its plan as data (the runs, as
//! [`study::StudySpec`]s) and turning the [`SimResult`](crate::SimResult)s
//! into the paper's figures and checks. [`study`] runs any plan.

pub mod daemon;
pub mod fig3;
pub mod figure;
pub mod study;
pub mod unimem;

use serde::Serialize;

pub use fig3::{FIG3_SCHEMES, Fig3, fig3};

/// One claim of the paper and whether the runs reproduce its direction.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub claim: &'static str,
    pub paper: &'static str,
    pub measured: f64,
    pub pass: bool,
}

/// Geometric mean; NaN for no values.
pub fn geomean(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
}

/// A result with every count at 1 and no overrides (plans' tests).
#[cfg(test)]
pub(crate) fn test_result() -> crate::SimResult {
    crate::SimResult {
        scheme: "remote".into(),
        workload: "pr".into(),
        records: 1,
        instructions: 1,
        sim_time_ns: 1.0,
        ipc: 1.0,
        amat_ns: 1.0,
        amat_miss_ns: 1.0,
        llc_misses: 1,
        local_hit_ratio: 1.0,
        remote_bytes_read: 0,
        remote_bytes_written: 0,
        footprint_bytes: 0,
        local_memory_bytes: 0,
        data_amplification: 0.0,
        link_utilization: 0.0,
        wall_seconds: 0.0,
        records_per_sec: 0.0,
        cpu_seconds: 0.0,
        records_per_cpu_sec: 0.0,
        sim_cpu_seconds: 0.0,
        records_per_sim_cpu_sec: 0.0,
        overrides: Default::default(),
        stats: Default::default(),
    }
}
