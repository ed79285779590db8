//! farmem-core: the vocabulary every other farmem crate shares.
//!
//! Sizes and ratios are parsed one way everywhere (`4GiB`, `512MiB`, `25%`),
//! the fixed granularities of the memory hierarchy live here, and so do the
//! metrics primitives (counters and latency histograms) both bodies report.

pub mod metrics;
pub mod noise;
pub mod sync;
pub mod units;

pub use metrics::{Buckets, Counter, LatencyHistogram};
pub use units::{ByteSize, CACHE_LINE, PAGE_SIZE, ParseError, Ratio, SUB_BLOCK, parse_duration_ns};

/// SplitMix64's finalizer: a fast bijective mix of a 64-bit value, for
/// deterministic pseudo-random choices (placement, generated data) that
/// need no RNG state.
#[inline]
pub fn mix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
