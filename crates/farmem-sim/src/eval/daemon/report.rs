//! What `farmem eval daemon` reports: the summary's shape.

use std::collections::BTreeMap;

use serde::Serialize;

use super::timeline::{PhaseIpc, Timeline, Timelines, phase_ipc};
use crate::eval::Check;

/// The worst `daemon` point, for [`DaemonEval::worst_daemon_vs_remote`].
#[derive(Debug, Clone, Serialize)]
pub struct Worst {
    pub study: String,
    pub workload: String,
    pub config: BTreeMap<String, String>,
    pub speedup: f64,
}

/// Everything `farmem eval daemon` reports.
#[derive(Debug, Clone, Serialize)]
pub struct DaemonEval {
    /// scheme → bandwidth factor ("0.5", "0.25", "0.125") → geomean over
    /// workloads and switch latencies of the main grid (Fig. 8).
    pub geomean_speedup_over_remote: BTreeMap<String, BTreeMap<String, f64>>,
    /// scheme → switch latency (ns) → geomean over workloads and bandwidths.
    pub geomean_speedup_by_switch: BTreeMap<String, BTreeMap<String, f64>>,
    /// Smallest remote_time / daemon_time over every workload and
    /// configuration run with the default DaeMon knobs (every study but
    /// the partition-ratio and codec sweeps).
    pub worst_daemon_vs_remote: f64,
    pub worst_daemon_at: Option<Worst>,
    /// scheme (remote, pq, daemon, …) → workload → mean over the main grid
    /// (Fig. 10).
    pub local_hit_ratio: BTreeMap<String, BTreeMap<String, f64>>,
    /// workload → LZ compression ratio of the pages `lc` moved.
    pub compression_ratio: BTreeMap<String, f64>,
    /// workload → scheme → geomean speedup over the main grid's configs.
    pub speedup_by_workload: BTreeMap<String, BTreeMap<String, f64>>,
    /// Sensitivity studies: study → series label → workload → geomean
    /// speedup over remote (Fig. 11, 12, 13, 15/18, 17).
    pub studies: BTreeMap<String, BTreeMap<String, BTreeMap<String, f64>>>,
    /// study → series label → workload → mean local hit ratio (Fig. 14).
    pub study_hit_ratio: BTreeMap<String, BTreeMap<String, BTreeMap<String, f64>>>,
    /// bp's geomean speedup over the high-locality workloads, per
    /// bandwidth factor: where its duplicate lines start to cost (§6.1).
    pub bp_high_locality_by_bandwidth: BTreeMap<String, f64>,
    /// workload → bandwidth factor → `remote`'s link utilization (mean over
    /// switch latencies): how far from bandwidth-bound the baseline is.
    pub remote_link_utilization: BTreeMap<String, BTreeMap<String, f64>>,
    /// Fig. 13 over time: workload → scheme → IPC per interval of simulated
    /// time with background traffic (added by [`DaemonEval::with_timelines`]).
    pub disturbance_timeline: BTreeMap<String, BTreeMap<String, Timeline>>,
    /// workload → scheme → mean IPC over the quiet and the busy periods of
    /// the background traffic (from the timeline).
    pub disturbance_ipc_by_phase: BTreeMap<String, BTreeMap<String, PhaseIpc>>,
    /// Our number beside the paper's: (what, paper, ours).
    pub versus_paper: Vec<(String, f64, f64)>,
    pub checks: Vec<Check>,
}

impl DaemonEval {
    pub fn pass(&self) -> bool {
        self.checks.iter().all(|c| c.pass)
    }

    /// Adds Fig. 13 over time, and each timeline's mean IPC per background
    /// phase of `period_ns`.
    pub fn with_timelines(mut self, timelines: Timelines, period_ns: f64) -> Self {
        for (w, by_scheme) in &timelines {
            for (scheme, t) in by_scheme {
                if let Some(p) = phase_ipc(t, period_ns) {
                    self.disturbance_ipc_by_phase
                        .entry(w.clone())
                        .or_default()
                        .insert(scheme.clone(), p);
                }
            }
        }
        self.disturbance_timeline = timelines;
        self
    }
}
