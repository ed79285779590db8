//! Metrics primitives: lock-free counters and latency histograms, both cheap
//! enough for the fault path and both reporting as plain JSON numbers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;

/// A monotonically increasing count.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn inc(&self) {
        self.add(1);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Latency distribution in nanoseconds, 1 ns to 100 s at 2 significant
/// digits (within 1%). A third digit would take 229 KB a histogram instead
/// of 31 KB, and a runtime keeps four of them inside the program's
/// `--local-mem`.
pub struct LatencyHistogram(Mutex<hdrhistogram::Histogram<u64>>);

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LatencyHistogram")
            .field(&self.summary())
            .finish()
    }
}

/// A histogram's samples per bucket ([`LatencyHistogram::buckets`]):
/// `counts[i]` fell at or under `upper_ns[i]` and above the bound before
/// it; the last count is past every bound.
#[derive(Debug, Clone, PartialEq, Default, Serialize, serde::Deserialize)]
pub struct Buckets {
    pub upper_ns: Vec<u64>,
    pub counts: Vec<u64>,
    pub sum_ns: f64,
    pub count: u64,
}

impl Buckets {
    /// Adds `other`'s samples, if its buckets are the same (false if not).
    pub fn add(&mut self, other: &Buckets) -> bool {
        if self.upper_ns.is_empty() && self.counts.is_empty() {
            *self = other.clone();
            return true;
        }
        if self.upper_ns != other.upper_ns || self.counts.len() != other.counts.len() {
            return false;
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.sum_ns += other.sum_ns;
        self.count += other.count;
        true
    }
}

/// A histogram's summary in microseconds, as reports print it.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct LatencySummary {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

/// Each sample is kept to within 1/128 of its value.
const SIGNIFICANT_DIGITS: u8 = 2;

impl LatencyHistogram {
    pub fn new() -> Self {
        let hist = hdrhistogram::Histogram::new_with_bounds(1, 100_000_000_000, SIGNIFICANT_DIGITS)
            .expect("static histogram bounds are valid");
        Self(Mutex::new(hist))
    }

    pub fn record(&self, latency: Duration) {
        self.record_ns(latency.as_nanos().min(u64::MAX as u128) as u64);
    }

    pub fn record_ns(&self, ns: u64) {
        self.0.lock().saturating_record(ns.max(1));
    }

    /// Records unless another thread holds the histogram: for code that
    /// must not park (a signal handler), where one lost sample is cheaper.
    /// Recording never allocates (the bounds are fixed).
    pub fn try_record(&self, latency: Duration) -> bool {
        let ns = latency.as_nanos().min(u64::MAX as u128) as u64;
        match self.0.try_lock() {
            Some(mut h) => {
                h.saturating_record(ns.max(1));
                true
            }
            None => false,
        }
    }

    /// Adds every sample of `other` to this histogram.
    pub fn merge(&self, other: &LatencyHistogram) {
        let theirs = other.0.lock().clone();
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.0.lock().add(theirs);
    }

    /// The samples in buckets whose upper bounds are `bounds_ns`
    /// (ascending) and one past them, as a Prometheus histogram takes
    /// them: per-bucket counts (not cumulative), with the sum and count.
    /// A sample is counted within the histogram's precision (1%).
    pub fn buckets(&self, bounds_ns: &[u64]) -> Buckets {
        let h = self.0.lock();
        let mut counts = vec![0u64; bounds_ns.len() + 1];
        let mut sum_ns = 0f64;
        for v in h.iter_recorded() {
            let value = h.highest_equivalent(v.value_iterated_to());
            let n = v.count_at_value();
            sum_ns += value as f64 * n as f64;
            let i = bounds_ns.partition_point(|&b| b < value);
            counts[i] += n;
        }
        Buckets {
            upper_ns: bounds_ns.to_vec(),
            counts,
            sum_ns,
            count: h.len(),
        }
    }

    pub fn summary(&self) -> LatencySummary {
        let h = self.0.lock();
        if h.is_empty() {
            return LatencySummary::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        LatencySummary {
            count: h.len(),
            mean_us: h.mean() / 1000.0,
            p50_us: us(h.value_at_quantile(0.50)),
            p99_us: us(h.value_at_quantile(0.99)),
            max_us: us(h.max()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles() {
        let h = LatencyHistogram::new();
        for ns in 1..=1000u64 {
            h.record_ns(ns * 1000);
        }
        let s = h.summary();
        assert_eq!(s.count, 1000);
        // Within the 1% the histogram keeps.
        assert!((s.p50_us - 500.0).abs() < 5.0, "{s:?}");
        assert!((s.p99_us - 990.0).abs() < 9.9, "{s:?}");
    }

    #[test]
    fn buckets_count_each_sample_once_under_its_bound() {
        let h = LatencyHistogram::new();
        for ns in [500, 990, 1_010, 40_000, 7_000_000] {
            h.record_ns(ns);
        }
        let b = h.buckets(&[1_000, 100_000]);
        assert_eq!(b.counts, [2, 2, 1], "{b:?}");
        assert_eq!(b.count, 5);
        let exact = 500.0 + 990.0 + 1_010.0 + 40_000.0 + 7_000_000.0;
        assert!((b.sum_ns - exact).abs() / exact < 1e-2, "{b:?}");
        assert_eq!(LatencyHistogram::new().buckets(&[1]).counts, [0, 0]);
        // Summed across processes: same bounds add, others are refused.
        let mut total = Buckets::default();
        assert!(total.add(&b) && total.add(&b));
        assert_eq!((total.counts.clone(), total.count), (vec![4, 4, 2], 10));
        assert!(!total.add(&h.buckets(&[5])));
    }

    #[test]
    fn counters_add() {
        let c = Counter::default();
        c.inc();
        c.add(41);
        assert_eq!(c.get(), 42);
    }
}
