//! CPU cache levels: set-associative, write-back, with dirty bits by slot,
//! and the hierarchy of them (private L1D and L2 per core, a shared LLC).

use farmem_policy::cache::{Probe, SetAssoc, SetPrefetch};

use crate::config::{CacheConfig, Config};
use crate::stats::{Component, Stats};
use crate::{LINES_PER_PAGE, Time};

/// One set-associative, write-back CPU cache level. Replacement is a
/// farmem-policy set rule chosen by name (`replacement`, LRU by default);
/// dirty bits live here, by slot.
#[derive(Debug, Clone)]
pub struct CacheLevel {
    pub policy: SetAssoc,
    pub dirty: Vec<bool>,
    pub latency: Time,
    pub hits: u64,
    pub misses: u64,
    pub writebacks: u64,
    /// The most recently accessed line and its slot: it is MRU, so a repeat
    /// access needs no search and changes no order (most accesses repeat a line).
    last_line: u64,
    last_slot: usize,
    /// The victim slot the last missing lookup chose, valid for a fill of
    /// that line while the policy's generation is unchanged: saves a second
    /// search of the set.
    hint: (u64, usize, u64),
    /// Lines present per page bucket (page number modulo the length): a
    /// page whose bucket is empty has no line here, so back-invalidating it
    /// skips 64 set searches. Most evicted pages are long gone from L1/L2.
    /// An array, so that a masked index needs no bounds check.
    page_lines: Box<[u32; PAGE_BUCKETS]>,
    /// The slot each line was last used in, by line modulo the length
    /// (L1 only, [`CacheLevel::with_way_hints`]): a hit whose line is
    /// still in that slot skips the set search. Most L1 hits are not on
    /// the MRU line but on one of the few hundred lines an L1 holds.
    way_hints: Option<Box<[u16; WAY_HINTS]>>,
}

/// Page buckets per cache level (a power of two).
const PAGE_BUCKETS: usize = 4096;

/// Way hints per cache level that keeps them (a power of two, about four
/// per line of a 32 KiB L1, so that few of its lines share one).
const WAY_HINTS: usize = 2048;

#[inline]
fn way_hint(line: u64) -> usize {
    line as usize & (WAY_HINTS - 1)
}

#[inline]
fn page_bucket(line: u64) -> usize {
    (line / LINES_PER_PAGE) as usize & (PAGE_BUCKETS - 1)
}

impl CacheLevel {
    pub fn new(cfg: &CacheConfig, freq_ghz: f64) -> Self {
        let lines = (cfg.size.0 / 64) as usize;
        let policy = cfg.replacement.build(lines, cfg.ways as usize);
        let slots = policy.slots();
        Self {
            policy,
            dirty: vec![false; slots],
            latency: cfg.latency_ns(freq_ghz),
            hits: 0,
            misses: 0,
            writebacks: 0,
            last_line: u64::MAX,
            last_slot: 0,
            hint: (u64::MAX, 0, 0),
            page_lines: Box::new([0; PAGE_BUCKETS]),
            way_hints: None,
        }
    }

    /// Keeps way hints (for a level whose slots a `u16` numbers).
    pub fn with_way_hints(mut self) -> Self {
        if self.policy.slots() <= 1 << 16 {
            self.way_hints = Some(Box::new([0; WAY_HINTS]));
        }
        self
    }

    /// What brings a line's set into the host's cache ahead of its lookup.
    #[inline]
    pub fn prefetcher(&self) -> SetPrefetch {
        self.policy.prefetcher()
    }

    /// False when no line of `page` can be here.
    #[inline]
    pub fn may_hold_page(&self, page: u64) -> bool {
        self.page_lines[page_bucket(page * LINES_PER_PAGE)] > 0
    }

    /// Hit: touches the line (dirtying it on a write) and returns true.
    /// The MRU check comes first (most accesses end there); the rest is
    /// inlined too, into each level's lookup in the engine (only the vector
    /// search is a call): as a call of its own, its saves and restores of
    /// registers were 6% of the instructions on `pr`. (A ring of the lines before the
    /// MRU one, checked next, saved a search for 1 access in 40 on `pr`
    /// and cost more than that in upkeep once searches were vector compares.)
    #[inline(always)]
    pub fn lookup(&mut self, line: u64, write: bool) -> bool {
        if line == self.last_line {
            if write {
                self.dirty[self.last_slot] = true;
            }
            self.hits += 1;
            return true;
        }
        self.lookup_set(line, write)
    }

    /// Always inlined: left to itself, the compiler makes it a call, which
    /// costs more than the way hint saves.
    #[inline(always)]
    fn lookup_set(&mut self, line: u64, write: bool) -> bool {
        // The search would find the line in this slot (a line is in one
        // slot at most), so the hit is the same.
        if let Some(hints) = &self.way_hints {
            let s = hints[way_hint(line)] as usize;
            if self.policy.block_at(s) == Some(line) {
                return self.hit(line, s, write);
            }
        }
        match self.policy.probe(line) {
            Probe::Hit(s) => self.hit(line, s, write),
            Probe::Miss { victim } => {
                self.hint = (line, victim, self.policy.generation());
                self.misses += 1;
                false
            }
        }
    }

    #[inline]
    fn hit(&mut self, line: u64, s: usize, write: bool) -> bool {
        self.last_line = line;
        self.last_slot = s;
        self.note_way(line, s);
        self.policy.touch_slot(s);
        // A read leaves the bit alone without loading it: the bits are an
        // array apart from the set, another host cache line per lookup.
        if write {
            self.dirty[s] = true;
        }
        self.hits += 1;
        true
    }

    /// Remembers that `line` is in `slot` (levels with way hints).
    #[inline]
    fn note_way(&mut self, line: u64, slot: usize) {
        if let Some(hints) = &mut self.way_hints {
            hints[way_hint(line)] = slot as u16;
        }
    }

    /// Forgets `line` as MRU (it left the cache).
    #[inline]
    fn forget(&mut self, line: u64) {
        if line == self.last_line {
            self.last_line = u64::MAX;
        }
    }

    /// Places a line that is not present; returns a dirty victim. Always
    /// inlined (with [`SetAssoc::fill_at`](farmem_policy::cache::SetAssoc::fill_at)):
    /// the engine calls it for every miss at each level, and as calls they
    /// were 5% of the instructions on `pr`.
    #[inline(always)]
    pub fn fill(&mut self, line: u64, dirty: bool) -> Option<u64> {
        let (slot, victim) = if self.hint.0 == line && self.hint.2 == self.policy.generation() {
            let slot = self.hint.1;
            self.hint.0 = u64::MAX;
            (slot, self.policy.fill_at(slot, line))
        } else {
            self.policy.fill(line)
        };
        if let Some(v) = victim {
            self.forget(v);
            self.page_lines[page_bucket(v)] -= 1;
        }
        self.page_lines[page_bucket(line)] += 1;
        self.last_line = line;
        self.last_slot = slot;
        self.note_way(line, slot);
        let was_dirty = std::mem::replace(&mut self.dirty[slot], dirty);
        match victim {
            Some(v) if was_dirty => {
                self.writebacks += 1;
                Some(v)
            }
            _ => None,
        }
    }

    /// Marks a present line dirty, or places it dirty; returns a dirty victim.
    #[inline]
    pub fn write_in(&mut self, line: u64) -> Option<u64> {
        match self.policy.probe(line) {
            Probe::Hit(s) => {
                // Not an access: recency is unchanged (a writeback from above).
                self.dirty[s] = true;
                None
            }
            Probe::Miss { victim } => {
                self.hint = (line, victim, self.policy.generation());
                self.fill(line, true)
            }
        }
    }

    /// Drops a line; true if it was dirty.
    #[inline]
    pub fn invalidate(&mut self, line: u64) -> bool {
        self.forget(line);
        match self.policy.invalidate(line) {
            Some(s) => {
                self.page_lines[page_bucket(line)] -= 1;
                std::mem::replace(&mut self.dirty[s], false)
            }
            None => false,
        }
    }
}

impl Component for CacheLevel {
    fn report(&self, prefix: &str, _t: f64, out: &mut Stats) {
        out.put(prefix, "hits", self.hits as f64);
        out.put(prefix, "misses", self.misses as f64);
        out.put(prefix, "writebacks", self.writebacks as f64);
        let total = (self.hits + self.misses).max(1) as f64;
        out.put(prefix, "hit_ratio", self.hits as f64 / total);
    }
}

/// Every CPU cache: private L1D and L2 per core, one shared LLC.
#[derive(Debug, Clone)]
pub struct Caches {
    pub l1: Vec<CacheLevel>,
    pub l2: Vec<CacheLevel>,
    pub llc: CacheLevel,
}

impl Caches {
    pub fn new(cfg: &Config) -> Self {
        let f = cfg.core.freq_ghz;
        let n = cfg.core.count as usize;
        Self {
            l1: (0..n)
                .map(|_| CacheLevel::new(&cfg.l1d, f).with_way_hints())
                .collect(),
            l2: (0..n).map(|_| CacheLevel::new(&cfg.l2, f)).collect(),
            llc: CacheLevel::new(&cfg.llc, f),
        }
    }

    /// Back-invalidates every line of `page` (local memory is inclusive of
    /// the CPU caches); returns the dirty lines found, which belong to the page.
    pub fn invalidate_page(&mut self, page: u64) -> u32 {
        let first = page * LINES_PER_PAGE;
        // Bit i: line i of the page was dirty in some level.
        let mut dirty = 0u64;
        let levels = std::iter::once(&mut self.llc)
            .chain(self.l1.iter_mut())
            .chain(self.l2.iter_mut());
        for level in levels {
            if !level.may_hold_page(page) {
                continue;
            }
            for i in 0..LINES_PER_PAGE {
                if level.invalidate(first + i) {
                    dirty |= 1 << i;
                }
            }
        }
        dirty.count_ones()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn back_invalidation_finds_every_dirty_line_once_and_skips_absent_pages() {
        let mut caches = Caches::new(&Config::preset("daemon").unwrap());
        let page = 5u64;
        let line = |i: u64| page * LINES_PER_PAGE + i;
        // Lines 0..8 clean in L1; line 3 dirty in L1 and in the LLC; line 9
        // dirty only in L2.
        for i in 0..8 {
            caches.l1[0].fill(line(i), i == 3);
        }
        caches.llc.fill(line(3), true);
        caches.l2[0].fill(line(9), true);
        assert!(caches.l1[0].may_hold_page(page) && caches.llc.may_hold_page(page));
        assert!(!caches.l1[0].may_hold_page(page + 1));
        assert_eq!(caches.invalidate_page(page), 2);
        for level in [&caches.l1[0], &caches.l2[0], &caches.llc] {
            assert!(!level.may_hold_page(page));
        }
        // Nothing left: a second pass finds nothing.
        assert_eq!(caches.invalidate_page(page), 0);
    }
}
