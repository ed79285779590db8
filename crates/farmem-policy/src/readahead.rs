//! Readahead: which blocks to bring in at a miss.
//!
//! A miss that lands just past where an earlier window ended continues that
//! stream upward, one that lands just below where it began continues it
//! downward (a few blocks past, too, once the stream is confirmed: the
//! window then covers the blocks skipped), and the stream's window doubles
//! up to a cap. A window cut short at present blocks counts them in (the
//! program reads them without a miss), and a miss among them, one evicted
//! before the program got there, continues the stream too. Any other miss
//! starts a stream with a window of one block (no speculation on a single
//! miss). This is Linux's on-demand readahead reduced to its core, with
//! several streams tracked at once so threads filling different parts of
//! one region do not break each other's streams, and with descending
//! streams, which Linux's swap readahead serves by placing its window
//! around the fault: GNU sort walks its array of lines from the top down,
//! so on sort of 4 M lines about a quarter of all misses continue a
//! descending stream and almost none an ascending one.
//!
//! The runtime uses it to fault around a miss: never-written pages it
//! fills locally, stored pages it reads with the missing one
//! in one request.

use serde::{Deserialize, Serialize};

use crate::BlockId;

/// The most blocks one miss brings in, its own among them: the runtime's
/// cap on a fault-around window (it installs zeros from a mapping of this
/// many pages), which the simulator's runtime scheme keeps too.
pub const MAX_FAULT_AROUND: u32 = 256;

/// How many blocks past a confirmed stream's edge (window over 1) a miss
/// may land and still continue it, the blocks it skipped brought in with
/// its window: GNU sort's merge threads write their output a page or three
/// out of order, and each such miss restarted its stream at one block (on
/// sort of 300 k numbers, 319 of 697 fresh-memory faults).
const JITTER: u64 = 4;

/// Streams tracked at once. A miss that continues none replaces a stream
/// not yet confirmed (window 1) before one that is, the least recently
/// used first: random misses then churn among themselves and leave the
/// program's real streams (a merge's two runs and its output, per thread)
/// their windows.
const STREAMS: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReadaheadConfig {
    /// Largest window in blocks; 0 or 1 turns readahead off.
    pub max_blocks: u32,
}

impl Default for ReadaheadConfig {
    /// 128 blocks: 512 KiB of 4 KiB pages, four times Linux's default
    /// readahead. A far window costs one round trip however long it is; on
    /// the demo (PageRank, 1 GiB at 25% local), same sitting: 32 blocks
    /// 52 k faults and 26-28 s, 64 blocks 35 k and 20-23 s, 128 blocks
    /// 27 k and 18-20 s, 256 blocks 23 k and 18-19.5 s.
    fn default() -> Self {
        Self { max_blocks: 128 }
    }
}

/// The blocks to bring in for a miss: `len` blocks from `first`, the
/// missing block among them. An ascending window starts at the miss, a
/// descending one ends there, unless the miss skipped a few blocks past
/// its stream's last window: then the window takes those too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub first: BlockId,
    pub len: u32,
}

impl Window {
    /// How many of the window's blocks come before the miss at `block`.
    pub fn before(&self, block: BlockId) -> u32 {
        (block - self.first) as u32
    }

    /// How many come after it.
    pub fn after(&self, block: BlockId) -> u32 {
        self.len - 1 - self.before(block)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Direction {
    /// One block so far: either way.
    #[default]
    Unknown,
    Up,
    Down,
}

#[derive(Debug, Clone, Copy, Default)]
struct Stream {
    /// The lowest block of the last window, and one past its highest.
    low: BlockId,
    end: BlockId,
    window: u32,
    dir: Direction,
    /// When it was last continued, in misses: for replacement.
    used: u64,
    /// Blocks at the window's far edge that were present when it was cut
    /// and counted in ([`Readahead::end_window`]). The program reads them
    /// without a miss, unless one is evicted before it gets there: a miss
    /// among them still continues the stream.
    present: u64,
}

impl Stream {
    /// The direction a miss on `block` continues this stream in, if any.
    fn continued_by(&self, block: BlockId) -> Option<Direction> {
        if self.window == 0 {
            return None;
        }
        // A confirmed stream also takes a miss a few blocks past its edge.
        let slack = if self.window > 1 { JITTER } else { 0 };
        let up_from = self.end.saturating_sub(self.present);
        let down_to = self.low.saturating_add(self.present);
        if self.dir != Direction::Down
            && block >= up_from
            && block.saturating_sub(self.end) <= slack
        {
            Some(Direction::Up)
        } else if self.dir != Direction::Up
            && block < down_to
            && self.low.saturating_sub(block + 1) <= slack
        {
            Some(Direction::Down)
        } else {
            None
        }
    }
}

#[derive(Debug, Clone)]
pub struct Readahead {
    max: u32,
    streams: [Stream; STREAMS],
    misses: u64,
}

impl Readahead {
    pub fn new(cfg: ReadaheadConfig) -> Self {
        Self {
            max: cfg.max_blocks.max(1),
            streams: [Stream::default(); STREAMS],
            misses: 0,
        }
    }

    /// A miss on `block`: returns the window to bring in (at least the
    /// block). If the caller brings in fewer, it says so with
    /// [`Readahead::cut`].
    pub fn on_miss(&mut self, block: BlockId) -> Window {
        self.misses += 1;
        let now = self.misses;
        let max = self.max;
        let continued = self
            .streams
            .iter_mut()
            .find_map(|s| s.continued_by(block).map(|dir| (s, dir)));
        // Where the last window ended, for a stream the miss continues: the
        // new window runs from there, over any blocks the miss skipped.
        let mut edge = None;
        let s = match continued {
            Some((s, dir)) => {
                s.window = (s.window * 2).min(max);
                s.dir = dir;
                edge = Some(match dir {
                    Direction::Down => s.low,
                    _ => s.end,
                });
                s
            }
            None => {
                let s = self
                    .streams
                    .iter_mut()
                    .min_by_key(|s| (s.window > 1, s.used))
                    .expect("STREAMS > 0");
                s.window = 1;
                s.dir = Direction::Unknown;
                s
            }
        };
        s.used = now;
        let w = u64::from(s.window);
        // A miss among the present blocks the last window counted in (one
        // was evicted first) starts the window at the miss.
        let (low, end) = match (s.dir, edge) {
            (Direction::Down, Some(low)) => (block.saturating_sub(w - 1), low.max(block + 1)),
            (_, Some(end)) => (end.min(block), block.saturating_add(w)),
            (_, None) => (block, block.saturating_add(w)),
        };
        s.low = low;
        s.end = end;
        s.present = 0;
        Window {
            first: low,
            len: (end - low).max(1) as u32,
        }
    }

    /// The window just returned for a miss on `block` was brought in only
    /// `below` blocks under the miss and `above` over it (a block already
    /// present, one that does not fit, or no room): the stream continues
    /// where that run ends in its direction, with its window kept, so a
    /// short run does not restart the ramp. Callers count in the present
    /// blocks the run stopped at: the program reads them without a miss,
    /// so its next miss is past them.
    pub fn cut(&mut self, block: BlockId, below: u32, above: u32) {
        self.cut_to(block, (u64::from(below), u64::from(above)), (0, 0));
    }

    /// The window just returned for a miss on `block` brought in `took`
    /// blocks (below it, above it); `reach` is how far the window went on
    /// each side, within the region. If that is less than the window, cuts
    /// it ([`Self::cut`]), counting in the `present` blocks the run
    /// stopped at: the program reads them without a miss, so its next miss
    /// is past them (a page being written back, say).
    pub fn end_window(
        &mut self,
        block: BlockId,
        window: Window,
        took: (u64, u64),
        reach: (u64, u64),
        mut present: impl FnMut(BlockId) -> bool,
    ) {
        if took.0 + 1 + took.1 >= u64::from(window.len) {
            return;
        }
        let below = took.0
            + (took.0 + 1..=reach.0)
                .take_while(|&d| present(block - d))
                .count() as u64;
        let above = took.1
            + (took.1 + 1..=reach.1)
                .take_while(|&d| present(block + d))
                .count() as u64;
        self.cut_to(block, (below, above), (below - took.0, above - took.1));
    }

    /// Ends the stream's last window `reach` blocks (below, above) from
    /// `block`, the last `present` of them (below, above) present blocks.
    fn cut_to(&mut self, block: BlockId, reach: (u64, u64), present: (u64, u64)) {
        let now = self.misses;
        if let Some(s) = self
            .streams
            .iter_mut()
            .find(|s| s.used == now && s.window > 0)
        {
            match s.dir {
                Direction::Down => {
                    s.low = block.saturating_sub(reach.0);
                    s.present = present.0;
                }
                _ => {
                    s.end = block.saturating_add(reach.1 + 1);
                    s.present = present.1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ra(max: u32) -> Readahead {
        Readahead::new(ReadaheadConfig { max_blocks: max })
    }

    /// Feeds misses where each window ends; returns the windows' lengths.
    fn sequential(r: &mut Readahead, from: BlockId, misses: usize) -> Vec<u32> {
        let mut at = from;
        (0..misses)
            .map(|_| {
                let w = r.on_miss(at);
                assert_eq!(w.first, at, "an ascending window starts at the miss");
                at += u64::from(w.len);
                w.len
            })
            .collect()
    }

    #[test]
    fn a_sequential_stream_doubles_its_window_up_to_the_cap() {
        let mut r = ra(16);
        assert_eq!(sequential(&mut r, 100, 8), [1, 2, 4, 8, 16, 16, 16, 16]);
    }

    #[test]
    fn a_descending_stream_grows_its_window_below_the_miss() {
        let mut r = ra(16);
        let mut at = 1000u64;
        let mut windows = Vec::new();
        for _ in 0..7 {
            let w = r.on_miss(at);
            assert_eq!(w.first + u64::from(w.len) - 1, at, "it ends at the miss");
            assert_eq!((w.before(at), w.after(at)), (w.len - 1, 0));
            windows.push(w.len);
            at = w.first - 1;
        }
        assert_eq!(windows, [1, 2, 4, 8, 16, 16, 16]);
        // Near block 0 the window stops there.
        let mut r = ra(16);
        for b in [3, 2, 1] {
            r.on_miss(b);
        }
        assert_eq!(r.on_miss(0), Window { first: 0, len: 1 });
    }

    #[test]
    fn a_miss_a_few_blocks_past_a_stream_continues_it_over_the_gap() {
        let mut r = ra(16);
        assert_eq!(sequential(&mut r, 100, 2), [1, 2]);
        // The stream's window ended at 103; a miss at 106 skipped 3 blocks:
        // it continues the stream, its window of 4 taken from 103.
        assert_eq!(r.on_miss(106), Window { first: 103, len: 7 });
        // Past the slack, a miss starts a stream of its own.
        assert_eq!(r.on_miss(110 + JITTER + 1).len, 1);
        // Downward alike: 1000 and 999 (window [998, 1000)), then 995.
        let mut r = ra(16);
        r.on_miss(1000);
        assert_eq!(r.on_miss(999), Window { first: 998, len: 2 });
        assert_eq!(r.on_miss(995), Window { first: 992, len: 6 });
        // A stream of one block takes no slack: random misses stay alone.
        let mut r = ra(16);
        r.on_miss(500);
        assert_eq!(r.on_miss(502).len, 1);
    }

    #[test]
    fn a_random_miss_gets_one_block() {
        let mut r = ra(16);
        for b in [7, 1000, 3, 55, 900_000] {
            assert_eq!(r.on_miss(b), Window { first: b, len: 1 });
        }
    }

    #[test]
    fn a_miss_inside_a_window_starts_over() {
        let mut r = ra(16);
        assert_eq!(sequential(&mut r, 0, 4), [1, 2, 4, 8]);
        // The window [7, 15) was brought in; a miss at 10 means it was not
        // (or no longer) all there: no evidence of a stream at 10.
        assert_eq!(r.on_miss(10).len, 1);
        assert_eq!(r.on_miss(11).len, 2);
    }

    #[test]
    fn a_stream_keeps_its_direction() {
        let mut r = ra(16);
        assert_eq!(sequential(&mut r, 100, 3), [1, 2, 4]);
        // The stream went up from 100: a miss just below it is not its.
        assert_eq!(r.on_miss(99).len, 1);
    }

    #[test]
    fn interleaved_streams_keep_their_windows() {
        let mut r = ra(64);
        let (mut a, mut b, mut c) = (0u64, 1 << 20, 2 << 20);
        let mut last = (0, 0, 0);
        for _ in 0..6 {
            let wa = r.on_miss(a);
            a += u64::from(wa.len);
            let wb = r.on_miss(b);
            b += u64::from(wb.len);
            let wc = r.on_miss(c);
            c = wc.first - 1;
            last = (wa.len, wb.len, wc.len);
        }
        assert_eq!(last, (32, 32, 32));
    }

    #[test]
    fn random_misses_do_not_push_out_a_confirmed_stream() {
        let mut r = ra(64);
        assert_eq!(sequential(&mut r, 0, 3), [1, 2, 4]);
        // Many more random misses than there are streams.
        for i in 0..(4 * STREAMS as u64) {
            assert_eq!(r.on_miss(1_000_000 + 17 * i).len, 1);
        }
        assert_eq!(r.on_miss(7).len, 8, "the stream at 0 kept its window");
    }

    #[test]
    fn the_least_recently_continued_confirmed_stream_goes_when_all_are() {
        let mut r = ra(64);
        // Every stream confirmed (window 2), the first the least recent.
        for i in 0..STREAMS as u64 {
            r.on_miss(i * 1000);
            r.on_miss(i * 1000 + 1);
        }
        assert_eq!(r.on_miss(1 << 30).len, 1);
        assert_eq!(r.on_miss(1003).len, 4, "the stream at 1000 kept");
        assert_eq!(r.on_miss(3).len, 1, "the stream at 0 was replaced");
    }

    #[test]
    fn a_cut_window_continues_where_its_run_ended() {
        let mut r = ra(16);
        assert_eq!(sequential(&mut r, 0, 4), [1, 2, 4, 8]);
        // The miss at 15 gets 16 blocks but only 3 are brought in.
        assert_eq!(r.on_miss(15).len, 16);
        r.cut(15, 0, 2);
        assert_eq!(r.on_miss(18).len, 16, "the stream goes on at full width");
        // Uncut, the stream would have expected 34.
        assert_eq!(r.on_miss(50).len, 1);
        // Downward: misses at 1000, 999 and 997 take windows of 1, 2 and 4
        // blocks (the last [994, 998)); the next, at 993, takes 8 blocks
        // but brings in only 2, so the stream goes on below 992.
        let mut r = ra(16);
        for b in [1000, 999, 997] {
            r.on_miss(b);
        }
        assert_eq!(r.on_miss(993), Window { first: 986, len: 8 });
        r.cut(993, 1, 0);
        assert_eq!(
            r.on_miss(991),
            Window {
                first: 976,
                len: 16
            }
        );
        // A miss a few blocks below a downward stream takes the blocks it
        // skipped above it too; cut below, the stream goes on from there,
        // whatever came in above.
        assert_eq!(
            r.on_miss(973),
            Window {
                first: 958,
                len: 18
            }
        );
        r.cut(973, 1, 2);
        assert_eq!(r.on_miss(971).len, 16, "the stream goes on below 972");
    }

    /// A stream ramped to 8 blocks whose next window, at 15, brings in 16
    /// only: 17..23 are present.
    fn cut_at_present_blocks() -> Readahead {
        let mut r = ra(16);
        assert_eq!(sequential(&mut r, 0, 4), [1, 2, 4, 8]);
        let w = r.on_miss(15);
        r.end_window(15, w, (0, 1), (0, 15), |b| (17..23).contains(&b));
        r
    }

    #[test]
    fn a_window_ended_at_present_blocks_continues_past_them() {
        let mut r = cut_at_present_blocks();
        assert_eq!(r.on_miss(23).len, 16, "the next miss is past them");
        // A window brought in whole is not cut.
        let w = r.on_miss(39);
        r.end_window(39, w, (0, 15), (0, 15), |_| false);
        assert_eq!(r.on_miss(55).len, 16);
    }

    #[test]
    fn a_miss_among_present_blocks_counted_in_continues_the_stream() {
        // 20, present when the window was cut, is evicted before the
        // program reaches it.
        let mut r = cut_at_present_blocks();
        assert_eq!(
            r.on_miss(20),
            Window { first: 20, len: 16 },
            "the stream goes on from the miss, its window kept"
        );
        // A miss on a block its earlier window took is another stream's.
        assert_eq!(r.on_miss(16).len, 1);
        // Downward: 993's window of 8 brings in 1 below it, then 990..992
        // are present; 991 is evicted first.
        let mut r = ra(16);
        for b in [1000, 999, 997] {
            r.on_miss(b);
        }
        let w = r.on_miss(993);
        assert_eq!(w, Window { first: 986, len: 8 });
        r.end_window(993, w, (1, 0), (7, 0), |b| (990..992).contains(&b));
        assert_eq!(
            r.on_miss(991),
            Window {
                first: 976,
                len: 16
            }
        );
    }

    #[test]
    fn off_means_one_block() {
        for max in [0, 1] {
            let mut r = ra(max);
            assert_eq!(sequential(&mut r, 0, 5), [1, 1, 1, 1, 1]);
        }
    }

    #[test]
    fn the_ends_of_the_block_space_do_not_overflow() {
        let mut r = ra(8);
        assert_eq!(r.on_miss(u64::MAX - 1).len, 1);
        assert_eq!(
            r.on_miss(u64::MAX),
            Window {
                first: u64::MAX,
                len: 1
            }
        );
        let mut r = ra(8);
        assert_eq!(r.on_miss(1).len, 1);
        assert_eq!(r.on_miss(0), Window { first: 0, len: 1 });
    }
}
