//! Paper evaluations rebuilt from simulator runs: one module per
//! evaluation, each turning [`SimResult`](crate::SimResult)s into the
//! paper's figures and checks.

pub mod daemon;
pub mod fig3;
pub mod figure;
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
