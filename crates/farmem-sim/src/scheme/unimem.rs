//! UniMem's and Kona's local caches as schemes (seed 002, seed 001 §4.3).

use super::SchemeEntry;

pub const SCHEMES: &[SchemeEntry] = &[];
