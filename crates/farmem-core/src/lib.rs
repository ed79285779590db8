//! farmem-core: the vocabulary every other farmem crate shares.
//!
//! Sizes and ratios are parsed one way everywhere (`4GiB`, `512MiB`, `25%`),
//! the fixed granularities of the memory hierarchy live here, and so do the
//! metrics primitives (counters and latency histograms) both bodies report.

pub mod metrics;
pub mod units;

pub use metrics::{Counter, LatencyHistogram};
pub use units::{ByteSize, CACHE_LINE, PAGE_SIZE, ParseError, Ratio, SUB_BLOCK, parse_duration_ns};
