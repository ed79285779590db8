//! Prefetch beyond sequential runs: Leap's majority-trend detection.
//!
//! [`readahead`](crate::readahead) follows a miss that lands where the last
//! window ended; anything else gets one block. Leap (Al Maruf and
//! Chowdhury, "Effectively Prefetching Remote Memory with Leap", ATC'20,
//! §4) looks instead at the *deltas* between consecutive misses and
//! prefetches along the delta that holds a majority of the recent ones:
//! strides (a column of a matrix, every 3rd record) and reverse scans are
//! followed, and a sequential scan interleaved with a few stray misses (a
//! hash table probed beside it) keeps its trend, where readahead would
//! start over at every stray miss.
//!
//! | type | paper |
//! |---|---|
//! | [`PrefetchConfig::history`] | §4.1 the access history window `H_size` (32) |
//! | [`PrefetchConfig::min_window`] | §4.1 `H_size / N_split`, the first window the majority is looked for in (4) |
//! | [`Prefetcher::on_miss`] → [`Prefetch`] | §4.1 Algorithm 1 `FindTrend` (Boyer–Moore majority vote over growing windows), §4.2 Algorithm 2 prefetch window sizing |
//! | [`Prefetcher::on_hit`] | §4.2 `Chit`: prefetched blocks used since the last miss |
//! | [`PrefetchStats`] | issued, used and the hit rate, for the runtime's stats |
//!
//! # Where the paper is ambiguous, and how we read it
//! - **No trend.** Algorithm 2 prefetches along the *previous* trend when
//!   none is found in the history. That pays on a trend briefly broken, and
//!   costs a window of useless blocks on random access. We keep the previous
//!   trend only while its window is open (the last window had hits) and
//!   prefetch nothing otherwise: on random access the window has closed
//!   after one miss without hits, so nothing is wasted.
//! - **Window size.** With `Chit` hits since the last miss the window is
//!   `Chit + 1` rounded up to a power of two, capped at
//!   [`PrefetchConfig::max_window`]; with none it halves (the "cut when it
//!   stops paying"). A trend found while the window is closed reopens it at
//!   one block: a majority over at least `min_window` misses is evidence
//!   enough for one speculative block, and hits grow it from there.
//! - **Stride units.** Deltas are in blocks of the caller's size (pages in
//!   the runtime), signed; a delta of 0 (the same block missing twice) is a
//!   trend of nothing and prefetches nothing.

use serde::{Deserialize, Serialize};

use crate::BlockId;

/// Leap's parameters; the defaults are the paper's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PrefetchConfig {
    /// Deltas between misses remembered (`H_size`): 32.
    pub history: u32,
    /// The first, smallest window of recent deltas a majority is looked
    /// for in; it doubles up to `history` (`H_size / N_split`): 4.
    pub min_window: u32,
    /// Most blocks prefetched after one miss: 32 (128 KiB of pages, as
    /// readahead's cap). 0 turns prefetching off.
    pub max_window: u32,
}

impl Default for PrefetchConfig {
    fn default() -> Self {
        Self {
            history: 32,
            min_window: 4,
            max_window: 32,
        }
    }
}

/// What to bring in after a miss on `from`: `count` blocks at
/// `from + stride`, `from + 2 * stride`, ...
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Prefetch {
    pub from: BlockId,
    pub stride: i64,
    pub count: u32,
}

impl Prefetch {
    /// The blocks to prefetch, in order, stopping at the ends of the
    /// address space.
    pub fn blocks(&self) -> impl Iterator<Item = BlockId> + '_ {
        (1..=i64::from(self.count)).map_while(move |k| {
            let off = self.stride.checked_mul(k)?;
            self.from.checked_add_signed(off)
        })
    }
}

/// Counters of what prefetching did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct PrefetchStats {
    /// Blocks asked to be prefetched.
    pub issued: u64,
    /// Prefetched blocks the program used (reported through `on_hit`).
    pub used: u64,
    /// Misses that found a trend.
    pub trends: u64,
}

impl PrefetchStats {
    /// Used / issued, 0 when nothing was issued.
    pub fn hit_rate(&self) -> f64 {
        if self.issued == 0 {
            0.0
        } else {
            self.used as f64 / self.issued as f64
        }
    }
}

/// Leap's prefetcher for one stream of misses (a region).
#[derive(Debug, Clone)]
pub struct Prefetcher {
    cfg: PrefetchConfig,
    /// The last `history` deltas, oldest first once full (a ring).
    deltas: Vec<i64>,
    /// Where the next delta goes in `deltas`.
    head: usize,
    last: Option<BlockId>,
    window: u32,
    /// The trend of the last prefetch.
    trend: i64,
    hits: u32,
    stats: PrefetchStats,
}

impl Prefetcher {
    pub fn new(cfg: PrefetchConfig) -> Self {
        let history = cfg.history.max(1) as usize;
        Self {
            cfg: PrefetchConfig {
                history: history as u32,
                min_window: cfg.min_window.clamp(1, history as u32),
                max_window: cfg.max_window,
            },
            deltas: Vec::with_capacity(history),
            head: 0,
            last: None,
            window: 0,
            trend: 0,
            hits: 0,
            stats: PrefetchStats::default(),
        }
    }

    /// A miss on `block`: what to prefetch after it (possibly nothing).
    pub fn on_miss(&mut self, block: BlockId) -> Prefetch {
        if let Some(last) = self.last {
            self.push((block as i64).wrapping_sub(last as i64));
        }
        self.last = Some(block);
        let hits = std::mem::take(&mut self.hits);
        self.window = if hits > 0 {
            (hits + 1).next_power_of_two()
        } else {
            self.window / 2
        }
        .min(self.cfg.max_window);
        match self.find_trend() {
            Some(trend) => {
                self.stats.trends += 1;
                if self.window == 0 {
                    self.window = 1.min(self.cfg.max_window);
                }
                self.trend = trend;
            }
            // The previous trend, only while its window is open.
            None if self.window > 0 => {}
            None => self.trend = 0,
        }
        let count = if self.trend == 0 { 0 } else { self.window };
        self.stats.issued += u64::from(count);
        Prefetch {
            from: block,
            stride: self.trend,
            count,
        }
    }

    /// A block this prefetcher asked for was used before it was evicted.
    pub fn on_hit(&mut self) {
        self.hits = self.hits.saturating_add(1);
        self.stats.used += 1;
    }

    pub fn stats(&self) -> PrefetchStats {
        self.stats
    }

    fn push(&mut self, delta: i64) {
        if self.deltas.len() < self.cfg.history as usize {
            self.deltas.push(delta);
        } else {
            self.deltas[self.head] = delta;
        }
        self.head = (self.head + 1) % self.cfg.history as usize;
    }

    /// The `n` most recent deltas, newest first.
    fn recent(&self, n: usize) -> impl Iterator<Item = i64> + Clone + '_ {
        let len = self.deltas.len();
        (1..=n.min(len)).map(move |i| self.deltas[(self.head + len - i) % len])
    }

    /// Algorithm 1: the majority delta of the most recent `min_window`
    /// deltas, else of twice as many, ... up to the whole history; `None`
    /// when no window has a majority (or the majority is 0).
    fn find_trend(&self) -> Option<i64> {
        let mut w = self.cfg.min_window as usize;
        let have = self.deltas.len();
        while w <= self.cfg.history as usize {
            if w > have {
                return None;
            }
            if let Some(m) = majority(self.recent(w)).filter(|&m| m != 0) {
                return Some(m);
            }
            w *= 2;
        }
        None
    }
}

/// The element of `xs` that occurs more than half the time (Boyer–Moore
/// vote, then a count to confirm).
fn majority(xs: impl Iterator<Item = i64> + Clone) -> Option<i64> {
    let (mut candidate, mut votes) = (0i64, 0usize);
    for x in xs.clone() {
        if votes == 0 {
            candidate = x;
            votes = 1;
        } else if x == candidate {
            votes += 1;
        } else {
            votes -= 1;
        }
    }
    let (n, count) = xs.fold((0usize, 0usize), |(n, c), x| {
        (n + 1, c + usize::from(x == candidate))
    });
    (count * 2 > n).then_some(candidate)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leap() -> Prefetcher {
        Prefetcher::new(PrefetchConfig::default())
    }

    /// Misses at `blocks`; each prefetched block that is in `used` counts
    /// as a hit before the next miss. Returns every prefetch.
    fn replay(
        p: &mut Prefetcher,
        blocks: &[BlockId],
        used: impl Fn(BlockId) -> bool,
    ) -> Vec<Prefetch> {
        let mut out: Vec<Prefetch> = Vec::new();
        for &b in blocks {
            if let Some(prev) = out.last() {
                for x in prev.blocks() {
                    if used(x) {
                        p.on_hit();
                    }
                }
            }
            out.push(p.on_miss(b));
        }
        out
    }

    #[test]
    fn a_stride_is_found_after_the_first_window_and_ramps_with_hits() {
        let mut p = leap();
        let misses: Vec<BlockId> = (0..12).map(|i| 1000 + 3 * i).collect();
        let got = replay(&mut p, &misses, |_| true);
        // Four deltas are needed before a majority can be seen.
        assert!(got[..4].iter().all(|f| f.count == 0), "{got:?}");
        assert_eq!((got[4].stride, got[4].count), (3, 1));
        let counts: Vec<u32> = got[4..].iter().map(|f| f.count).collect();
        assert_eq!(counts, [1, 2, 4, 8, 16, 32, 32, 32]);
        assert_eq!(got[5].blocks().collect::<Vec<_>>(), [1018, 1021]);
    }

    #[test]
    fn a_reverse_scan_prefetches_downwards() {
        let mut p = leap();
        let misses: Vec<BlockId> = (0..8).map(|i| 500 - i).collect();
        let got = replay(&mut p, &misses, |_| true);
        let last = got.last().unwrap();
        assert_eq!(last.stride, -1);
        assert_eq!(last.blocks().next(), Some(492));
    }

    #[test]
    fn a_trend_survives_stray_misses_in_between() {
        let mut p = leap();
        // A scan by 1 with every sixth miss somewhere else: each stray miss
        // breaks two deltas, so 4 of every 6 are still 1 and a window of
        // 16 deltas always has a majority of them. Readahead would start
        // over twice per stray miss.
        let mut misses = Vec::new();
        let mut at = 100u64;
        for i in 0..24 {
            if i % 6 == 5 {
                misses.push(90_000 + i);
            } else {
                misses.push(at);
                at += 1;
            }
        }
        let got = replay(&mut p, &misses, |_| false);
        let with_trend = got.iter().skip(5).filter(|f| f.stride == 1).count();
        assert!(with_trend >= 12, "{got:?}");
    }

    #[test]
    fn random_misses_prefetch_nothing() {
        let mut p = leap();
        let mut x = 7u64;
        let misses: Vec<BlockId> = (0..200)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                x >> 40
            })
            .collect();
        let got = replay(&mut p, &misses, |_| false);
        assert_eq!(got.iter().map(|f| f.count).sum::<u32>(), 0);
        assert_eq!(p.stats().issued, 0);
    }

    #[test]
    fn the_window_halves_when_prefetches_go_unused_and_closes() {
        let mut p = leap();
        let misses: Vec<BlockId> = (0..10).collect();
        // Used while ramping: window reaches 16 at miss 8.
        let got = replay(&mut p, &misses, |_| true);
        assert_eq!(got.last().unwrap().count, 32);
        // The scan goes on, but nothing prefetched is used any more.
        let more: Vec<BlockId> = (10..20).collect();
        let got = replay(&mut p, &more, |_| false);
        let counts: Vec<u32> = got.iter().map(|f| f.count).collect();
        // Halving; a trend reopens a closed window at one block.
        assert_eq!(&counts[..6], [16, 8, 4, 2, 1, 1]);
        let s = p.stats();
        assert!(s.hit_rate() > 0.0 && s.hit_rate() < 1.0, "{s:?}");
    }

    #[test]
    fn off_prefetches_nothing_and_repeats_are_no_trend() {
        let mut p = Prefetcher::new(PrefetchConfig {
            max_window: 0,
            ..PrefetchConfig::default()
        });
        let misses: Vec<BlockId> = (0..50).collect();
        assert!(
            replay(&mut p, &misses, |_| true)
                .iter()
                .all(|f| f.count == 0)
        );
        let mut p = leap();
        assert!(
            replay(&mut p, &[9; 40], |_| true)
                .iter()
                .all(|f| f.count == 0)
        );
    }

    #[test]
    fn blocks_stop_at_the_ends_of_the_address_space() {
        let f = Prefetch {
            from: 2,
            stride: -1,
            count: 5,
        };
        assert_eq!(f.blocks().collect::<Vec<_>>(), [1, 0]);
        let f = Prefetch {
            from: u64::MAX - 1,
            stride: 1,
            count: 5,
        };
        assert_eq!(f.blocks().collect::<Vec<_>>(), [u64::MAX]);
    }

    #[test]
    fn majority_needs_more_than_half() {
        assert_eq!(majority([1, 1, 2].into_iter()), Some(1));
        assert_eq!(majority([1, 2, 1, 2].into_iter()), None);
        assert_eq!(majority(std::iter::empty()), None);
    }
}
