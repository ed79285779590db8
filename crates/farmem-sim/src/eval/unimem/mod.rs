//! UniMem's evaluation (seed 002 §4): AMAT (over LLC misses) and data
//! amplification of the local-cache systems across local cache sizes
//! (Fig. 9–11), cache block sizes (Fig. 12), host memory shares (Fig. 13)
//! and list pairs (Fig. 14), with the paper's numbers beside ours and the
//! shape checks.
//!
//! Layers, bottom up: `paper` (the grid's constants); `report` (points
//! and the summary's shape); `summary`; `figures`; `plan` (what runs, as
//! [`StudySpec`](crate::eval::study::StudySpec)s keyed by [`Experiment`],
//! and the results turned into points). The CLI parses, runs the plan
//! with [`Batch`](crate::eval::study::Batch) and prints.

mod figures;
mod paper;
mod plan;
mod report;
mod summary;

#[cfg(test)]
mod tests;

pub use figures::figures;
pub use paper::{
    BLOCK_SIZES, CACHE_PERCENTS, HOST_SHARES, KV_WORKLOADS, MIXED, MIXED_INPUTS, PAIRS, SYSTEMS,
    WORKLOADS,
};
pub use plan::{
    PRESET, QUICK_HOST_SHARES, QUICK_SCALE, QUICK_SWEEP_WORKLOADS, SCALED_CACHES, UniMemPlan, plan,
};
pub use report::{Compare, Experiment, Grid, Point, UniMemEval, csv};
pub use summary::summarize;
