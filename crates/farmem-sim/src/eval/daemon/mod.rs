//! DaeMon's full evaluation (seed 000 §6): the grid of workloads,
//! bandwidth factors and switch latencies (Fig. 8, 10), and the
//! sensitivity studies: partition ratio (Fig. 11), codec (Fig. 12),
//! background traffic (Fig. 13-14), several cores (Fig. 15, 18), several
//! memory nodes (Fig. 17).
//!
//! Layers, bottom up: `paper` (the grid's constants and the paper's
//! numbers); `points` (runs against `remote`'s); `timeline` (Fig. 13 over
//! time); `report` (the summary's shape); `checks`; `summary` and
//! `figures`; `plan` (what runs, as [`StudySpec`](crate::eval::study::StudySpec)s,
//! and the results split back per study). The CLI parses, runs the plan
//! with [`Batch`](crate::eval::study::Batch) and prints.

mod checks;
mod figures;
mod paper;
mod plan;
mod points;
mod report;
mod summary;
mod timeline;

#[cfg(test)]
mod tests;

pub use checks::{checks, spearman};
pub use figures::figures;
pub use paper::{
    AT_PAPER_RATIO, BANDWIDTHS, COMPRESSIBILITY, HIGH_LOCALITY, LOW_LOCALITY, PAPER,
    PAPER_LZ_RATIO, SCHEMES, SWITCH_NS,
};
pub use plan::{
    DISTURBANCE_SCHEMES, DaemonPlan, QUICK_CACHES, QUICK_SCALE, QUICK_WORKLOADS, StudyKind,
    TIMELINE_SAMPLES_PER_PERIOD, WORKLOADS, compressibility_label, plan,
};
pub use points::{Point, bw_key, csv, points};
pub use report::{DaemonEval, Worst};
pub use summary::{Study, summarize};
pub use timeline::{
    PhaseIpc, Timeline, TimelinePlan, TimelineRuns, Timelines, ipc_timeline, phase_ipc,
};
