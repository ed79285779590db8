//! Sequential readahead: how many blocks to bring in at a miss.
//!
//! A miss that lands exactly where an earlier window ended continues that
//! stream, and the stream's window doubles up to a cap; any other miss
//! starts a stream with a window of one block (no speculation on a single
//! miss). This is Linux's on-demand readahead reduced to its core, with a
//! few streams tracked at once so threads filling different parts of one
//! region do not break each other's streams.
//!
//! The runtime uses it to fault around first touches of never-written
//! pages, which it can fill locally without the store: a program filling
//! fresh memory in order then takes one fault per window instead of one per
//! page.

use serde::{Deserialize, Serialize};

use crate::BlockId;

/// Streams tracked at once; the least recently continued is replaced.
const STREAMS: usize = 4;

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

#[derive(Debug, Clone, Copy, Default)]
struct Stream {
    /// The block a miss continuing this stream lands on.
    next: BlockId,
    window: u32,
    /// When it was last continued, in misses: for replacement.
    used: u64,
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

    /// A miss on `block`: returns the window to bring in, `block` and the
    /// blocks after it (at least 1). If the caller brings in fewer, it says
    /// so with [`Readahead::cut`].
    pub fn on_miss(&mut self, block: BlockId) -> u32 {
        self.misses += 1;
        let now = self.misses;
        let max = self.max;
        let s = match self
            .streams
            .iter_mut()
            .find(|s| s.window > 0 && s.next == block)
        {
            Some(s) => {
                s.window = (s.window * 2).min(max);
                s
            }
            None => {
                let s = self
                    .streams
                    .iter_mut()
                    .min_by_key(|s| s.used)
                    .expect("STREAMS > 0");
                s.window = 1;
                s
            }
        };
        s.next = block.saturating_add(s.window as u64);
        s.used = now;
        s.window
    }

    /// The window just returned for a miss on `block` was brought in only
    /// up to `len` blocks (a block already present, or no room): the
    /// stream continues where that run ends, with its window kept, so a
    /// short run does not restart the ramp.
    pub fn cut(&mut self, block: BlockId, len: u32) {
        let now = self.misses;
        if let Some(s) = self
            .streams
            .iter_mut()
            .find(|s| s.used == now && s.window > 0)
        {
            s.next = block.saturating_add(len.max(1) as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ra(max: u32) -> Readahead {
        Readahead::new(ReadaheadConfig { max_blocks: max })
    }

    /// Feeds misses where each window ends; returns the windows.
    fn sequential(r: &mut Readahead, from: BlockId, misses: usize) -> Vec<u32> {
        let mut at = from;
        (0..misses)
            .map(|_| {
                let w = r.on_miss(at);
                at += w as u64;
                w
            })
            .collect()
    }

    #[test]
    fn a_sequential_stream_doubles_its_window_up_to_the_cap() {
        let mut r = ra(16);
        assert_eq!(sequential(&mut r, 100, 8), [1, 2, 4, 8, 16, 16, 16, 16]);
    }

    #[test]
    fn a_random_miss_gets_one_block() {
        let mut r = ra(16);
        for b in [7, 1000, 3, 55, 900_000] {
            assert_eq!(r.on_miss(b), 1);
        }
    }

    #[test]
    fn a_miss_inside_a_window_starts_over() {
        let mut r = ra(16);
        assert_eq!(sequential(&mut r, 0, 4), [1, 2, 4, 8]);
        // The window [7, 15) was brought in; a miss at 10 means it was not
        // (or no longer) all there: no evidence of a stream at 10.
        assert_eq!(r.on_miss(10), 1);
        assert_eq!(r.on_miss(11), 2);
    }

    #[test]
    fn interleaved_streams_keep_their_windows() {
        let mut r = ra(64);
        let (mut a, mut b) = (0u64, 1 << 20);
        let mut last = (0, 0);
        for _ in 0..6 {
            let wa = r.on_miss(a);
            a += wa as u64;
            let wb = r.on_miss(b);
            b += wb as u64;
            last = (wa, wb);
        }
        assert_eq!(last, (32, 32));
    }

    #[test]
    fn a_fifth_stream_replaces_the_least_recently_continued() {
        let mut r = ra(64);
        let starts = [0u64, 1000, 2000, 3000];
        // Two misses each: every stream at window 2, next = start + 3.
        for s in starts {
            r.on_miss(s);
            r.on_miss(s + 1);
        }
        // Stream 0 is the least recently continued: a new stream takes it.
        assert_eq!(r.on_miss(9000), 1);
        assert_eq!(r.on_miss(1003), 4, "stream at 1000 kept");
        assert_eq!(r.on_miss(3), 1, "stream at 0 was replaced");
    }

    #[test]
    fn a_cut_window_continues_where_its_run_ended() {
        let mut r = ra(16);
        assert_eq!(sequential(&mut r, 0, 4), [1, 2, 4, 8]);
        // The miss at 15 gets 16 blocks but only 3 are brought in.
        assert_eq!(r.on_miss(15), 16);
        r.cut(15, 3);
        assert_eq!(r.on_miss(18), 16, "the stream goes on at full width");
        // Uncut, the stream would have expected 34.
        assert_eq!(r.on_miss(50), 1);
    }

    #[test]
    fn off_means_one_block() {
        for max in [0, 1] {
            let mut r = ra(max);
            assert_eq!(sequential(&mut r, 0, 5), [1, 1, 1, 1, 1]);
        }
    }

    #[test]
    fn the_last_block_does_not_overflow() {
        let mut r = ra(8);
        assert_eq!(r.on_miss(u64::MAX - 1), 1);
        assert_eq!(r.on_miss(u64::MAX), 2);
    }
}
