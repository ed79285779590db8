//! Where an evicted page goes when a compressed pool sits in front of the
//! remote tier (xDM's `compressed` backend, seed 004 §3 "Swap Backend"; the
//! kernel's zswap in front of a swap device is the same shape).
//!
//! A page all zeros is kept as nothing. A page that compresses to no more
//! than [`CompressedTierConfig::max_ratio`] of its size is kept compressed
//! in local memory; one that does not is passed down, since keeping it
//! would spend nearly a page of local memory to save one remote write.
//! The pool is bounded by [`CompressedTierConfig::pool_share`] of the
//! local limit; past it the oldest kept pages are demoted to the tier
//! below, as zswap's shrinker writes its least recently stored back.
//!
//! Compressing data that does not shrink costs a compression per
//! write-back and saves nothing: [`CompressionGate`] stops trying after a
//! window of pages mostly passed down, and probes one page in sixteen to
//! see the data change (zswap tries every page).
//!
//! Where the seed is silent: xDM chooses a backend per application, not per
//! page, and gives no pool size; the defaults here are zswap's
//! (`max_pool_percent` 20, pages that do not shrink are rejected), with the
//! rejection threshold lowered to 3/4 of a page because a slot of the pool's
//! allocator costs more than the bytes it holds.

/// The compressed pool's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompressedTierConfig {
    /// Most of the local limit the pool may take (0..=0.5; default 0.2):
    /// the rest is for pages the program can touch without a fault.
    pub pool_share: f64,
    /// Largest compressed size kept, as a share of the page (default 0.75).
    pub max_ratio: f64,
}

impl Default for CompressedTierConfig {
    fn default() -> Self {
        Self {
            pool_share: 0.2,
            max_ratio: 0.75,
        }
    }
}

/// Where one page goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// All zeros: kept as a mark, no bytes.
    Zero,
    /// Kept compressed in the pool.
    Pool,
    /// Passed down to the tier below as it is.
    Below,
}

impl CompressedTierConfig {
    /// The pool's size in bytes for a local limit of `local_bytes`.
    pub fn pool_bytes(&self, local_bytes: u64) -> u64 {
        (local_bytes as f64 * self.pool_share.clamp(0.0, 0.5)) as u64
    }

    /// Where a page of `page_len` bytes goes, given whether it is all zeros
    /// and its compressed length (None: the compressor gave up).
    pub fn admit(&self, page_len: usize, zero: bool, compressed: Option<usize>) -> Admit {
        if zero {
            return Admit::Zero;
        }
        match compressed {
            Some(len) if (len as f64) <= page_len as f64 * self.max_ratio => Admit::Pool,
            _ => Admit::Below,
        }
    }

    /// Rejects values that cannot mean anything.
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=0.5).contains(&self.pool_share) {
            return Err(format!(
                "compressed pool share {} is not between 0 and 0.5",
                self.pool_share
            ));
        }
        if !(0.0..=1.0).contains(&self.max_ratio) {
            return Err(format!(
                "compressed page ratio {} is not between 0 and 1",
                self.max_ratio
            ));
        }
        Ok(())
    }
}

/// When to stop trying to compress: data that does not shrink costs a
/// compression per write-back and saves nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GateConfig {
    /// Pages per verdict (default 256).
    pub window: u32,
    /// Below this share of pages kept in a window, the gate closes
    /// (default 1/32: the demo's PageRank keeps a tenth of its pages, and
    /// those make its pool pay; data that keeps fewer is as good as noise).
    pub min_kept: f64,
    /// While closed, one page in this many is still tried, so a change in
    /// the data is seen (default 16).
    pub probe_every: u32,
}

impl Default for GateConfig {
    fn default() -> Self {
        Self {
            window: 256,
            min_kept: 1.0 / 32.0,
            probe_every: 16,
        }
    }
}

/// Whether the next page is worth compressing (see [`GateConfig`]): open
/// while enough pages of the last window were kept; closed, it tries one
/// page in `probe_every` and opens again on a window of probes that shrank.
#[derive(Debug, Clone)]
pub struct CompressionGate {
    cfg: GateConfig,
    open: bool,
    tried: u32,
    kept: u32,
    /// Pages let through untried since the last probe.
    skipped: u32,
}

impl CompressionGate {
    pub fn new(cfg: GateConfig) -> Self {
        Self {
            cfg,
            open: true,
            tried: 0,
            kept: 0,
            skipped: 0,
        }
    }

    /// Whether to compress the next page; if so, [`Self::observe`] its outcome.
    pub fn should_try(&mut self) -> bool {
        if self.open || self.skipped + 1 >= self.cfg.probe_every.max(1) {
            self.skipped = 0;
            return true;
        }
        self.skipped += 1;
        false
    }

    /// A page tried went where `admit` says.
    pub fn observe(&mut self, admit: Admit) {
        self.tried += 1;
        self.kept += u32::from(admit != Admit::Below);
        if self.tried >= self.cfg.window.max(1) {
            self.open = f64::from(self.kept) >= f64::from(self.tried) * self.cfg.min_kept;
            self.tried = 0;
            self.kept = 0;
        }
    }

    pub fn is_open(&self) -> bool {
        self.open
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages tried out of `n`, each kept when `kept(i)` says.
    fn run(gate: &mut CompressionGate, n: u32, kept: impl Fn(u32) -> bool) -> u32 {
        let mut tried = 0;
        for i in 0..n {
            if gate.should_try() {
                tried += 1;
                gate.observe(if kept(i) { Admit::Pool } else { Admit::Below });
            }
        }
        tried
    }

    #[test]
    fn the_gate_closes_on_data_that_does_not_shrink_and_reopens_when_it_does() {
        let mut g = CompressionGate::new(GateConfig::default());
        // Compressible: every page tried.
        assert_eq!(run(&mut g, 1024, |_| true), 1024);
        assert!(g.is_open());
        // Noise: a window of 256 closes it; then one in 16 is tried.
        let tried = run(&mut g, 256 + 16 * 100, |_| false);
        assert!(!g.is_open());
        assert_eq!(tried, 256 + 100);
        // Compressible again: reopened within one window of probes.
        let tried = run(&mut g, 16 * 256, |_| true);
        assert!(g.is_open());
        assert!(tried < 16 * 256 && tried > 256, "{tried}");
        // One page in twenty kept is enough to stay open.
        let mut g = CompressionGate::new(GateConfig::default());
        assert_eq!(run(&mut g, 2560, |i| i % 20 == 0), 2560);
        assert!(g.is_open());
    }

    #[test]
    fn zero_pages_take_nothing_and_incompressible_ones_pass_down() {
        let c = CompressedTierConfig::default();
        assert_eq!(c.admit(4096, true, Some(20)), Admit::Zero);
        assert_eq!(c.admit(4096, false, Some(3072)), Admit::Pool);
        assert_eq!(c.admit(4096, false, Some(3073)), Admit::Below);
        assert_eq!(c.admit(4096, false, None), Admit::Below);
    }

    #[test]
    fn pool_size_follows_the_limit() {
        let c = CompressedTierConfig::default();
        assert_eq!(c.pool_bytes(1000 * 4096), 200 * 4096);
        let none = CompressedTierConfig {
            pool_share: 0.0,
            ..c
        };
        assert_eq!(none.pool_bytes(1 << 30), 0);
        assert!(
            CompressedTierConfig {
                pool_share: 0.6,
                ..c
            }
            .validate()
            .is_err()
        );
        assert!(c.validate().is_ok());
    }
}
