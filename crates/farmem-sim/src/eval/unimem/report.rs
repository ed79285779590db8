//! What `farmem eval unimem` reports: the points (one per simulated
//! point of a figure), the summary's shape, and the points' CSV.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::eval::Check;

/// Which figure a point belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Experiment {
    /// Fig. 9, 10 (and 11 with workload `MIXED`): x = cache percent.
    CacheSize,
    /// Fig. 12: x = block bytes.
    BlockSize,
    /// Fig. 13: x = host share percent.
    HostShare,
    /// Fig. 14: x = list pairs.
    Pairs,
}

impl Experiment {
    pub fn name(self) -> &'static str {
        match self {
            Experiment::CacheSize => "cache-size",
            Experiment::BlockSize => "block-size",
            Experiment::HostShare => "host-share",
            Experiment::Pairs => "pairs",
        }
    }
}

/// One simulated point.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub experiment: Experiment,
    pub system: String,
    pub workload: String,
    /// The swept value, as a string key ("10", "512").
    pub x: String,
    pub amat_miss_ns: f64,
    pub data_amplification: f64,
    pub local_hit_ratio: f64,
    pub remote_bytes_read: u64,
    pub footprint_bytes: u64,
}

/// Outer key → workload → x → value.
pub type Grid = BTreeMap<String, BTreeMap<String, BTreeMap<String, f64>>>;

/// One of the paper's numbers beside ours.
#[derive(Debug, Clone, Serialize)]
pub struct Compare {
    pub what: &'static str,
    pub paper: f64,
    pub ours: f64,
}

/// Everything the eval prints and writes.
#[derive(Debug, Clone, Serialize)]
pub struct UniMemEval {
    /// system → workload (and "mixed") → cache percent → AMAT (ns).
    pub amat_miss_ns: Grid,
    /// system → workload (and "mixed") → cache percent → remote bytes / working set.
    pub data_amplification: Grid,
    /// metric ("amat_miss_ns", "data_amplification") → workload → block bytes.
    pub block_size: Grid,
    /// metric → workload → host share percent (system `unimem`).
    pub host_share: Grid,
    /// metric → workload → list pairs (system `unimem`).
    pub pairs: Grid,
    pub paper: Vec<Compare>,
    pub checks: Vec<Check>,
}

impl UniMemEval {
    pub fn pass(&self) -> bool {
        self.checks.iter().all(|c| c.pass)
    }
}

/// The points as CSV, one line each.
pub fn csv(points: &[Point]) -> String {
    let mut s = String::from(
        "experiment,system,workload,x,amat_miss_ns,data_amplification,local_hit_ratio,remote_bytes_read,footprint_bytes\n",
    );
    for p in points {
        s.push_str(&format!(
            "{},{},{},{},{:.3},{:.4},{:.4},{},{}\n",
            p.experiment.name(),
            p.system,
            p.workload,
            p.x,
            p.amat_miss_ns,
            p.data_amplification,
            p.local_hit_ratio,
            p.remote_bytes_read,
            p.footprint_bytes
        ));
    }
    s
}
