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
//! Keeping pages costs the pool's memory, taken from the page cache, and a
//! compression per write-back; it pays only when its hits save more fault
//! time than the faults its cache brings cost. Under `auto`, [`PoolTuner`]
//! turns the pool off when it does not pay, so the runtime runs as the
//! plain remote backend: xDM's switching of backend mid-run and tuning of
//! the pool's size, as an on/off choice. By default it measures what it
//! decides on, the program's fault stall in epochs with the pool on and
//! off ([`ab`], [`AbTuner`]); without [`TunerConfig::ab`] it judges by
//! reads from the pool per page written back (and, off, by the reads a
//! ghost list of the pages it would hold says it would have served).
//!
//! Where the seed is silent: xDM chooses a backend per application, not per
//! page, and gives no pool size; the defaults here are zswap's
//! (`max_pool_percent` 20, pages that do not shrink are rejected), with the
//! rejection threshold lowered to 3/4 of a page because a slot of the pool's
//! allocator costs more than the bytes it holds.

pub mod ab;

pub use ab::{AbConfig, AbStats, AbTuner};

/// The compressed pool's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompressedTierConfig {
    /// Most of the local limit the pool may take (0..=0.5; default 0.2):
    /// the rest is for pages the program can touch without a fault.
    pub pool_share: f64,
    /// Largest compressed size kept, as a share of the page (default 0.75).
    pub max_ratio: f64,
    /// Turn the pool off while it does not pay (`auto`); None: always on.
    pub tuner: Option<TunerConfig>,
}

impl Default for CompressedTierConfig {
    fn default() -> Self {
        Self {
            pool_share: 0.2,
            max_ratio: 0.75,
            tuner: None,
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

/// When the pool is worth its memory (see [`PoolTuner`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TunerConfig {
    /// Pages written back per verdict (default 4096, 16 MiB: longer than
    /// a default pool takes to fill, so its reads are counted at its full
    /// size).
    pub window: u32,
    /// The pool pays when at least this many pages per page written back
    /// are read from it (on) or would have been (off; default 1/4). A read
    /// from the pool saves a fetch from below, tens of µs; a page kept
    /// costs a compression of a few µs and a page of cache the pool's
    /// bytes took, which costs faults of its own. On the eval's random
    /// key/value program, 0.15 reads per page made the pool 10-35% slower
    /// than none.
    pub min_reads_per_write: f64,
    /// Most windows in a row the pool must look worth it while off before
    /// it is tried again (default 16); each failed trial doubles the
    /// number, from one.
    pub max_backoff: u32,
    /// The pool also pays, read back or not yet, in a window where most
    /// pages written were kept at 1/`min_shrink` of their size or less
    /// (default 4) and it demoted at most a quarter as many as it kept,
    /// until it is first turned off: it has room to spare, holds that many
    /// times the pages of the cache it takes, and keeps them without the
    /// network. A program that loads its data first and
    /// reads it later shows no reads in its first windows: redis loaded
    /// with values that shrank 23x read nothing back while loading, so the
    /// pool went off and its GETs went to the memory nodes, 1.4x the time
    /// they took with the pool on (which held all 135 MiB in 14 MiB). A
    /// pool that demotes as much as it keeps must earn its place by reads:
    /// sqlite's pages shrank 4x or more too, but its scans cycled through
    /// four times what the pool held, and kept on it took 1.18x the time
    /// without.
    pub min_shrink: f64,
    /// Decide by fault stall, pool on against off ([`AbTuner`]; default).
    /// Then the windows' reads only turn the pool off (a window after the
    /// first since it went on, read back under `min_reads_per_write`,
    /// without room to spare: [`AbTuner::veto`]), never on; the shrink
    /// rule (`min_shrink`, judged every window, not only before the first
    /// switch) holds off the probes while the pool has room to spare.
    /// None: reads per page written decide, as above.
    pub ab: Option<AbConfig>,
}

impl Default for TunerConfig {
    fn default() -> Self {
        Self {
            window: 4096,
            min_reads_per_write: 0.25,
            max_backoff: 16,
            min_shrink: 4.0,
            ab: Some(AbConfig::default()),
        }
    }
}

/// Whether the compressed pool takes pages now (`auto`).
///
/// With [`TunerConfig::ab`] (the default) the [`AbTuner`] decides from
/// the fault stall the pool calls [`Self::progress`] with; the windows
/// below then only hold its probes off while the pool has room. Without:
/// on, it counts the pages written back and those read from the pool; at
/// the end of each window of `window` pages written back it stays on if
/// enough were read, else it goes off. Off, nothing is compressed or
/// kept: the pages written back go into a ghost list as long as the pool
/// (page numbers only), and reads of pages on it count as reads the pool
/// would have served. Once `backoff` windows in a row would have paid, the
/// pool is on again for a trial; a trial that does not pay doubles
/// `backoff` (up to `max_backoff`), one that does resets it. Pure: the
/// pool calls it with page numbers.
#[derive(Debug, Clone)]
pub struct PoolTuner {
    cfg: TunerConfig,
    /// Pages the pool holds when full: the ghost list's length.
    capacity: usize,
    on: bool,
    written: u32,
    reads: u32,
    /// Of the pages written this window: those kept, and their bytes.
    kept: u32,
    kept_bytes: u64,
    /// Pages the pool demoted this window to stay within its size.
    demoted: u32,
    /// Windows in a row that would have paid, while off.
    paying: u32,
    backoff: u32,
    /// The current stretch on is a trial after a stretch off.
    trial: bool,
    ghost: std::collections::VecDeque<u64>,
    ghost_set: std::collections::HashSet<u64>,
    /// Times the pool went off, and on again.
    switches: u64,
    /// Deciding by fault stall ([`TunerConfig::ab`]).
    ab: Option<AbTuner>,
    /// Windows ended since the pool last went on (stall mode).
    windows_on: u32,
}

impl PoolTuner {
    /// A tuner for a pool of `pool_bytes`, whose pages are kept at about
    /// half their size.
    pub fn new(cfg: TunerConfig, pool_bytes: u64) -> Self {
        let capacity = (pool_bytes / 2048).max(1);
        Self {
            cfg,
            capacity: capacity as usize,
            // On first, though a wrong start off would cost less (nothing
            // to drain): a probe on is judged while the pool still fills,
            // so over a slow tier started off it lost every probe (954
            // against 960 stall per mille in the runtime's test of one,
            // `auto_keeps_the_pool_over_a_slow_tier...`) and stayed off.
            on: true,
            written: 0,
            reads: 0,
            kept: 0,
            kept_bytes: 0,
            demoted: 0,
            paying: 0,
            backoff: 1,
            trial: false,
            ghost: Default::default(),
            ghost_set: Default::default(),
            switches: 0,
            ab: cfg.ab.map(|ab| AbTuner::new(ab, true, capacity)),
            windows_on: 0,
        }
    }

    /// Whether the pool takes pages now.
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// Times the pool was turned off or on again.
    pub fn switches(&self) -> u64 {
        self.switches
    }

    /// What the stall tuner saw (None: reads decide).
    pub fn ab_stats(&self) -> Option<AbStats> {
        self.ab.as_ref().map(AbTuner::stats)
    }

    /// Running totals at `now_ns` of the ns the program stalled in faults
    /// and of its faults (the stall tuner's input; ignored without one),
    /// and whether the pool holds (next to) nothing ([`AbTuner::drained`]).
    pub fn progress(&mut self, now_ns: u64, stall_ns: u64, faults: u64, drained: bool) {
        if let Some(ab) = &mut self.ab {
            ab.drained(drained);
        }
        if let Some(ab) = &mut self.ab
            && ab.progress(now_ns, stall_ns, faults)
        {
            self.on = ab.is_on();
            self.switches += 1;
            // The window's counts were of the other setting.
            (self.written, self.reads, self.kept, self.kept_bytes) = (0, 0, 0, 0);
            self.demoted = 0;
            self.windows_on = 0;
        }
    }

    /// Page `page` was written back: kept in the pool in `kept` bytes
    /// (zero for a page of zeros), or None (passed down, or the pool off).
    pub fn written(&mut self, page: u64, kept: Option<u64>) {
        match &mut self.ab {
            Some(ab) => ab.written(),
            None if !self.on => self.remember(page),
            None => {}
        }
        self.written += 1;
        if let Some(bytes) = kept {
            self.kept += 1;
            self.kept_bytes += bytes;
        }
        if self.written < self.cfg.window.max(1) {
            return;
        }
        let read_back =
            f64::from(self.reads) >= f64::from(self.written) * self.cfg.min_reads_per_write;
        // (With min_shrink infinite, never: reads alone decide.)
        // Only before the pool was first turned off: once judged by its
        // reads, its trials are judged by reads too, as a refilling pool
        // always has room at first.
        let shrunk = self.switches == 0
            && 4 * self.demoted <= self.kept
            && 2 * self.kept > self.written
            && self.cfg.min_shrink.is_finite()
            && self.kept_bytes as f64 * self.cfg.min_shrink <= f64::from(self.kept) * 4096.0;
        let roomy = 4 * self.demoted <= self.kept
            && 2 * self.kept > self.written
            && self.kept_bytes as f64 * self.cfg.min_shrink <= f64::from(self.kept) * 4096.0;
        let pays = read_back || shrunk;
        (self.written, self.reads, self.kept, self.kept_bytes) = (0, 0, 0, 0);
        self.demoted = 0;
        if let Some(ab) = &mut self.ab {
            ab.hold(self.on && roomy);
            self.windows_on += u32::from(self.on);
            // Reads overrate what a pool saves (kv at 50% local: 0.32 per
            // page written, and 1.45x the time), but a pool read back less
            // than the bar, without room to spare, saves little for sure:
            // off at once rather than after a probe's epochs (which put
            // auto at 1.29x remote on text at 25% local, 3-second runs,
            // where the pool took 1.7x). Not in the first window after
            // the pool went on: it was filling.
            if self.on && !read_back && !roomy && self.windows_on >= 2 && ab.veto() {
                self.on = false;
                self.switches += 1;
                self.windows_on = 0;
            }
            return;
        }
        match (self.on, pays) {
            (true, true) => {
                self.trial = false;
                self.backoff = 1;
            }
            (true, false) => {
                if self.trial {
                    self.backoff = (self.backoff * 2).min(self.cfg.max_backoff.max(1));
                }
                self.on = false;
                self.paying = 0;
                self.switches += 1;
            }
            (false, true) => {
                self.paying += 1;
                if self.paying >= self.backoff {
                    self.on = true;
                    self.trial = true;
                    self.switches += 1;
                    self.ghost.clear();
                    self.ghost_set.clear();
                }
            }
            (false, false) => self.paying = 0,
        }
    }

    /// The pool, on, demotes `pages` to stay within its size.
    pub fn demoted(&mut self, pages: u32) {
        self.demoted = self.demoted.saturating_add(pages);
    }

    /// Page `page` was read: `from_pool`, or from below.
    pub fn read(&mut self, page: u64, from_pool: bool) {
        let counts = if self.on {
            from_pool
        } else {
            self.ghost_set.contains(&page)
        };
        if counts {
            self.reads = self.reads.saturating_add(1);
        }
    }

    /// Puts `page` on the ghost list, the oldest falling off.
    fn remember(&mut self, page: u64) {
        if !self.ghost_set.insert(page) {
            return;
        }
        self.ghost.push_back(page);
        while self.ghost.len() > self.capacity {
            if let Some(old) = self.ghost.pop_front() {
                self.ghost_set.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuner() -> PoolTuner {
        let four_pages = 4 * 2048;
        PoolTuner::new(
            TunerConfig {
                window: 10,
                min_reads_per_write: 0.5,
                max_backoff: 4,
                min_shrink: 4.0,
                ab: None,
            },
            four_pages,
        )
    }

    /// Writes back a window of pages 100..104 (on the ghost list while
    /// off), reading the first `reads` back as they go (from the pool, when
    /// it is on); whether the pool is on after.
    fn window(t: &mut PoolTuner, reads: u32) -> bool {
        for i in 0..10 {
            t.written(100 + u64::from(i % 4), None);
            if i < reads {
                t.read(100 + u64::from(i % 4), true);
            }
        }
        t.is_on()
    }

    #[test]
    fn a_pool_whose_pages_shrink_fourfold_stays_on_unread() {
        let mut t = tuner();
        // Seven of ten kept at 1 KiB or less, none read: on.
        let write = |t: &mut PoolTuner, bytes: &[Option<u64>]| {
            for (i, &b) in bytes.iter().cycle().take(10).enumerate() {
                t.written(i as u64, b);
            }
            t.is_on()
        };
        let good = [
            Some(1024),
            Some(0),
            Some(900),
            None,
            Some(1024),
            Some(1000),
            Some(512),
        ];
        assert!(write(&mut t, &good));
        // A few demotions leave it on; the same in a window where the pool
        // demoted more than a quarter of what it kept: the reads decide,
        // and there are none.
        t.demoted(1);
        assert!(write(&mut t, &good));
        t.demoted(3);
        assert!(!write(&mut t, &good));
        // Once off, only reads turn it on again and keep it on.
        assert!(!write(&mut t, &good));
        let mut t = tuner();
        // Kept at half their size: the reads decide, and there are none.
        assert!(!write(&mut t, &[Some(2048)]));
        let mut t = tuner();
        // Well shrunk, but most pages passed down: off.
        assert!(!write(&mut t, &[Some(100), None, None]));
    }

    #[test]
    fn a_pool_read_back_enough_stays_on() {
        let mut t = tuner();
        assert!(window(&mut t, 5));
        assert!(window(&mut t, 9));
        assert_eq!(t.switches(), 0);
    }

    #[test]
    fn off_the_pool_counts_reads_it_would_have_served_and_comes_back_after_a_growing_pause() {
        let mut t = tuner();
        assert!(!window(&mut t, 4), "4 reads for 10 written is under 0.5");
        // Off: pages read that were never written back (or fell off the
        // ghost list) do not count, nor does a pool that no longer has them.
        for p in 0..10 {
            t.read(500 + p, false);
            t.written(p, None);
        }
        assert!(!t.is_on());
        for p in 0..4 {
            t.read(p, false); // fell off: only 6..10 are remembered
        }
        for p in 20..30 {
            t.written(p, None);
        }
        assert!(!t.is_on());
        // Reads of remembered pages count: one window that would have paid
        // and the pool is tried again.
        assert!(window(&mut t, 5));
        assert_eq!(t.switches(), 2);
        // The trial fails: off, and now two paying windows in a row are
        // needed, then four (at most max_backoff).
        assert!(!window(&mut t, 0));
        assert!(!window(&mut t, 5));
        assert!(window(&mut t, 5));
        assert!(!window(&mut t, 1));
        for _ in 0..3 {
            assert!(!window(&mut t, 5));
        }
        assert!(
            !window(&mut t, 0),
            "a window that would not pay starts the count again"
        );
        for _ in 0..3 {
            assert!(!window(&mut t, 5));
        }
        assert!(window(&mut t, 5));
        // A trial that pays resets the pause.
        assert!(window(&mut t, 5));
        assert!(!window(&mut t, 0));
        assert!(window(&mut t, 5));
        assert_eq!(t.switches(), 8);
    }

    #[test]
    fn by_stall_the_pools_reads_do_not_switch_it_and_a_pool_with_room_is_not_probed() {
        let ab = AbConfig {
            epoch_ns: 100,
            min_faults: 1,
            max_fill: 0,
            max_drain: 0,
            ..AbConfig::default()
        };
        let cfg = TunerConfig {
            window: 10,
            ab: Some(ab),
            ..TunerConfig::default()
        };
        let mut t = PoolTuner::new(cfg, 4 * 2048);
        // Read back over the bar: on, as stall decides and there is none
        // yet.
        for _ in 0..5 {
            assert!(window(&mut t, 5));
        }
        // Epochs where the pool costs stall: off after settle, the two
        // measured epochs, and the probe's settle and two measured.
        let (mut now, mut stall) = (0, 0);
        t.progress(now, stall, 0, true);
        for f in 1..=6 {
            now += 100;
            stall += if t.is_on() { 60 } else { 20 };
            t.progress(now, stall, f, true);
        }
        assert!(!t.is_on());
        assert_eq!(t.switches(), 1);
        let st = t.ab_stats().unwrap();
        assert_eq!((st.epochs_on, st.epochs_off, st.probes_won), (3, 3, 1));
        // A pool kept at a quarter of the page with room to spare holds
        // its probe off however it stalls.
        let mut t = PoolTuner::new(cfg, 4 * 2048);
        t.progress(0, 0, 0, true);
        for f in 1..=20u64 {
            for p in 0..10 {
                t.written(p, Some(512));
            }
            t.progress(100 * f, 60 * f, f, true);
        }
        assert!(t.is_on());
        assert_eq!(t.switches(), 0);
        // Read back under the bar, kept at half size: off at the second
        // window (the first after going on was filling), no probe taken;
        // stall probes it back on later.
        let mut t = PoolTuner::new(cfg, 4 * 2048);
        assert!(window(&mut t, 1));
        assert!(!window(&mut t, 1));
        assert_eq!(t.switches(), 1);
        assert_eq!(t.ab_stats().unwrap().probes, 0);
        t.progress(0, 0, 0, true);
        for f in 1..=4 {
            t.progress(100 * f, 10 * f, f, true);
        }
        assert!(!t.is_on());
        t.progress(500, 50, 5, true);
        assert!(t.is_on(), "probed after settling and four epochs");
        assert!(window(&mut t, 1), "filling: not judged");
        assert!(!window(&mut t, 1), "the probe is cut short");
        assert_eq!(t.switches(), 3);
    }

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
