//! Whether a page's first write keeps a diff base.
//!
//! Kona tracks dirty data at cache-line granularity so that eviction ships
//! only the lines a program changed (seed 001 §4.3, "dirty data
//! amplification"). Its hardware sees line writes; the runtime emulates
//! that by copying a page at its first write (the diff base, or snapshot)
//! and comparing at write-back. The copy costs a page of local memory while
//! the page stays dirty, and a page of copying; it pays only when write-backs
//! find few lines changed. A program that rewrites its pages whole (a
//! PageRank updating its rank vector) gets nothing for it, and loses the
//! memory to its cache.
//!
//! So the runtime asks [`DiffBase::keep`] at each first write, and tells
//! [`DiffBase::observe`] how many lines each diffed write-back found
//! changed. While the pages diffed lately came back mostly dirty (an
//! average above `whole_above` of their lines), only one first write in
//! `sample_every` keeps a base, enough to notice the program's writes
//! becoming sparse again; the others are written back whole.
//!
//! A base is also a page the cache cannot hold, so bases alive at once are
//! capped ([`DiffBase::budget`]) at `max_share` of the cache, and while
//! pages are written back whole at `sample_bases`, as many as the samples
//! need (the runtime's pool of spare buffers at half the budget): past it,
//! first writes keep none.
//!
//! The share is small because every program measured gave its cache's
//! pages more use than its bases: a page of cache saves faults, which the
//! program waits for, while a base saves lines of a write-back, which the
//! evictor ships in the background. Sorting 1 M lines (GNU sort) at 25%
//! local writes a few lines of most pages it touches; with bases uncapped
//! they took more than half the cache and sort faulted 729 k times in
//! 69 s; capped at an eighth, 409 k faults, 33 s; at a sixteenth 341 k,
//! 28 s; with none (`--dirty page`) 257 k, 25 s. A Python job over
//! 120 MiB at 96 MiB local (400 k tuples sorted and indexed; every read
//! writes a reference count) faulted 564 k times with a sixteenth, 300 k
//! with a sixty-fourth, 237 k with a 256th and 230 k with none, writing
//! back 1.97, 1.14, 0.93 and 0.91 GiB. The demo's PageRank (256 MiB at 64 MiB
//! local) took 6.7 k faults with a sixteenth and with a 256th, and wrote
//! back the same bytes. Fresh pages need no base (they are diffed against
//! zeros), so Kona's line log still ships only what a program wrote to
//! memory it just allocated.
//!
//! Where the paper is silent: it has no such choice (its hardware tracks
//! lines for free). The average is exponentially weighted over the last
//! `1 / weight` pages or so, in pages, not time: a program that writes
//! rarely keeps its judgement until it writes again.

use serde::{Deserialize, Serialize};

/// Lines per 4 KiB page.
const LINES: f64 = 64.0;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiffBaseConfig {
    /// Share of a page's lines found dirty, on average, above which pages
    /// are written back whole: diffing would save less than a quarter.
    pub whole_above: f64,
    /// While writing back whole, one first write in this many still keeps
    /// a base, to measure; 1 keeps every one (always diff).
    pub sample_every: u32,
    /// Weight of each diffed page in the average.
    pub weight: f64,
    /// Most of the cache that bases alive at once may take; 0 keeps none.
    pub max_share: f64,
    /// While writing back whole, the most bases alive at once: enough
    /// samples in flight to notice sparse writes, few pages of cache.
    pub sample_bases: u32,
}

impl Default for DiffBaseConfig {
    fn default() -> Self {
        Self {
            whole_above: 0.75,
            sample_every: 16,
            weight: 1.0 / 256.0,
            max_share: 1.0 / 256.0,
            sample_bases: 64,
        }
    }
}

#[derive(Debug, Clone)]
pub struct DiffBase {
    cfg: DiffBaseConfig,
    /// Average share of lines found dirty; starts at 0 (diff everything
    /// until pages show otherwise).
    dirty_share: f64,
    first_writes: u64,
}

impl DiffBase {
    pub fn new(cfg: DiffBaseConfig) -> Self {
        Self {
            cfg,
            dirty_share: 0.0,
            first_writes: 0,
        }
    }

    /// A page's first write, with `alive` bases kept in a cache of
    /// `capacity` pages: true when it should keep one more.
    pub fn keep(&mut self, alive: u64, capacity: u64) -> bool {
        self.first_writes += 1;
        if self.at_cap(alive, capacity) {
            return false;
        }
        !self.whole()
            || self
                .first_writes
                .is_multiple_of(u64::from(self.cfg.sample_every.max(1)))
    }

    /// Whether `alive` bases in a cache of `capacity` pages are at the
    /// cap, so [`Self::keep`] refuses whatever the pages showed.
    pub fn at_cap(&self, alive: u64, capacity: u64) -> bool {
        alive >= self.budget(capacity)
    }

    /// The most bases worth keeping alive at once in a cache of
    /// `capacity` pages: `max_share` of it, and no more than
    /// `sample_bases` while pages are written back whole.
    pub fn budget(&self, capacity: u64) -> u64 {
        let share = (self.cfg.max_share.max(0.0) * capacity as f64).ceil() as u64;
        if self.whole() {
            share.min(u64::from(self.cfg.sample_bases))
        } else {
            share
        }
    }

    /// A page diffed at write-back had `dirty_lines` of its 64 changed.
    pub fn observe(&mut self, dirty_lines: u32) {
        let share = f64::from(dirty_lines.min(64)) / LINES;
        let w = self.cfg.weight.clamp(0.0, 1.0);
        self.dirty_share += w * (share - self.dirty_share);
    }

    /// True while pages are written back whole (no base kept but samples).
    pub fn whole(&self) -> bool {
        self.dirty_share > self.cfg.whole_above
    }

    /// The average share of lines found dirty.
    pub fn dirty_share(&self) -> f64 {
        self.dirty_share
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_rewritten_whole_stop_keeping_bases_but_for_samples() {
        let mut d = DiffBase::new(DiffBaseConfig::default());
        assert!(
            (0..100).all(|_| d.keep(0, 1000)),
            "sparse until shown otherwise"
        );
        for _ in 0..2000 {
            d.observe(64);
        }
        assert!(d.whole());
        let kept = (0..1600).filter(|_| d.keep(0, 1000)).count();
        assert_eq!(kept, 100, "one in 16");
    }

    #[test]
    fn bases_past_the_cap_are_refused_whatever_pages_showed() {
        // A 256th of 1024 pages: 4 alive is the cap.
        let mut d = DiffBase::new(DiffBaseConfig::default());
        assert!(!d.at_cap(3, 1024) && d.keep(3, 1024));
        assert!(d.at_cap(4, 1024) && !d.keep(4, 1024));
    }

    #[test]
    fn writing_back_whole_keeps_only_the_samples_bases() {
        let mut d = DiffBase::new(DiffBaseConfig::default());
        let capacity = 1 << 20;
        let share = d.budget(capacity);
        assert!(share > 64, "{share}");
        for _ in 0..2000 {
            d.observe(64);
        }
        assert_eq!(d.budget(capacity), 64);
        assert!(d.at_cap(64, capacity) && !d.keep(64, capacity));
        // A small cache's share is smaller still: a 256th of 2560 pages.
        assert_eq!(d.budget(2560), 10);
    }

    #[test]
    fn sparse_writes_again_bring_bases_back() {
        let mut d = DiffBase::new(DiffBaseConfig::default());
        for _ in 0..2000 {
            d.observe(64);
        }
        assert!(d.whole());
        // Only sampled pages are diffed; they now show 2 lines of 64.
        for _ in 0..1000 {
            d.observe(2);
        }
        assert!(!d.whole(), "{}", d.dirty_share());
        assert!((0..100).all(|_| d.keep(0, 1000)));
    }

    #[test]
    fn half_dirty_pages_are_still_diffed() {
        let mut d = DiffBase::new(DiffBaseConfig::default());
        for _ in 0..5000 {
            d.observe(32);
        }
        assert!(!d.whole());
        assert!((d.dirty_share() - 0.5).abs() < 0.01);
    }

    #[test]
    fn bases_past_their_share_of_the_cache_are_not_kept() {
        let mut d = DiffBase::new(DiffBaseConfig::default());
        assert!(d.keep(62, 16_000));
        assert!(!d.keep(63, 16_000));
        assert!(!d.keep(0, 0), "no cache, no bases");
        let none = DiffBaseConfig {
            max_share: 0.0,
            ..DiffBaseConfig::default()
        };
        assert!(!DiffBase::new(none).keep(0, 1000));
    }

    #[test]
    fn sample_every_one_always_diffs() {
        let cfg = DiffBaseConfig {
            sample_every: 1,
            ..DiffBaseConfig::default()
        };
        let mut d = DiffBase::new(cfg);
        for _ in 0..2000 {
            d.observe(64);
        }
        assert!((0..100).all(|_| d.keep(0, 1000)));
    }
}
