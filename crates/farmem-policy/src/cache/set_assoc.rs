//! Set-associative true LRU: CPU cache sets in the simulator and Kona's
//! 4-way set-associative local cache.
//!
//! Slots are stable (a block stays in its slot until evicted), so the owning
//! cache can keep dirty bits in a parallel array indexed by slot. Recency is a
//! per-slot stamp from a global counter: a hit is one store, a victim is the
//! smallest stamp in the set (invalid slots first).

use super::ReplacementPolicy;
use crate::{BlockId, Nanos};

const INVALID: u64 = u64::MAX;

/// `sets × ways` slots; block `b` lives in set `b mod sets`.
#[derive(Debug, Clone)]
pub struct SetAssocLru {
    sets: u64,
    /// `sets - 1` when `sets` is a power of two: the common case avoids a division.
    mask: Option<u64>,
    ways: usize,
    /// (tag, last-use stamp) per slot, a set contiguous: one search reads
    /// both, which halves the memory a lookup-then-fill touches.
    slots: Vec<(u64, u64)>,
    clock: u64,
    len: usize,
    /// Bumped whenever a block leaves other than by `fill`, so a victim
    /// chosen by [`probe`](Self::probe) is known to be still the right one.
    generation: u64,
}

/// What [`SetAssocLru::probe`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    Hit(usize),
    /// Not resident; `victim` is the slot a fill would use now.
    Miss {
        victim: usize,
    },
}

impl SetAssocLru {
    /// `capacity` blocks in sets of `ways` (both at least 1; `ways` is
    /// clamped to `capacity`).
    pub fn new(capacity: usize, ways: usize) -> Self {
        let capacity = capacity.max(1);
        let ways = ways.clamp(1, capacity);
        let sets = (capacity / ways).max(1) as u64;
        let slots = sets as usize * ways;
        Self {
            sets,
            mask: sets.is_power_of_two().then(|| sets - 1),
            ways,
            slots: vec![(INVALID, 0); slots],
            clock: 0,
            len: 0,
            generation: 0,
        }
    }

    pub fn sets(&self) -> usize {
        self.sets as usize
    }
    pub fn ways(&self) -> usize {
        self.ways
    }
    /// Number of slots (`sets × ways`): the index range of slot arrays.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Changes whenever a block leaves other than through a fill.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    #[inline]
    fn set_base(&self, block: BlockId) -> usize {
        let set = match self.mask {
            Some(m) => block & m,
            None => block % self.sets,
        };
        set as usize * self.ways
    }

    /// The slot holding `block`, without touching it.
    #[inline]
    pub fn find(&self, block: BlockId) -> Option<usize> {
        let base = self.set_base(block);
        self.slots[base..base + self.ways]
            .iter()
            .position(|&(t, _)| t == block)
            .map(|w| base + w)
    }

    /// The slot a fill of `block` would use now: the first invalid one in
    /// its set, else the least recently used.
    #[inline]
    pub fn victim_slot(&self, block: BlockId) -> usize {
        let base = self.set_base(block);
        let mut victim = base;
        let mut oldest = u64::MAX;
        for (w, &(t, stamp)) in self.slots[base..base + self.ways].iter().enumerate() {
            if t == INVALID {
                return base + w;
            }
            if stamp < oldest {
                oldest = stamp;
                victim = base + w;
            }
        }
        victim
    }

    /// One pass over the set: the slot holding `block`, or the slot a fill
    /// would use (the first invalid one, else the least recently used).
    #[inline]
    pub fn probe(&self, block: BlockId) -> Probe {
        let base = self.set_base(block);
        let mut victim = base;
        let mut oldest = u64::MAX;
        let mut free = false;
        for (w, &(t, stamp)) in self.slots[base..base + self.ways].iter().enumerate() {
            if t == block {
                return Probe::Hit(base + w);
            }
            if free {
                continue;
            }
            if t == INVALID {
                victim = base + w;
                free = true;
            } else if stamp < oldest {
                oldest = stamp;
                victim = base + w;
            }
        }
        Probe::Miss { victim }
    }

    /// Places `block` in `slot` (from [`probe`](Self::probe), with no
    /// invalidation since: same `generation`), most recently used; returns
    /// the block it displaced.
    #[inline]
    pub fn fill_at(&mut self, slot: usize, block: BlockId) -> Option<BlockId> {
        let old = self.slots[slot].0;
        let victim = (old != INVALID).then_some(old);
        if victim.is_none() {
            self.len += 1;
        }
        self.slots[slot].0 = block;
        self.touch_slot(slot);
        victim
    }

    /// Marks `slot` most recently used.
    #[inline]
    pub fn touch_slot(&mut self, slot: usize) {
        self.clock += 1;
        self.slots[slot].1 = self.clock;
    }

    /// Places a block that is not resident, most recently used; returns its
    /// slot and the block it displaced.
    pub fn fill(&mut self, block: BlockId) -> (usize, Option<BlockId>) {
        let slot = match self.probe(block) {
            Probe::Hit(s) | Probe::Miss { victim: s } => s,
        };
        (slot, self.fill_at(slot, block))
    }

    /// Drops `block`; returns the slot it held.
    pub fn invalidate(&mut self, block: BlockId) -> Option<usize> {
        let slot = self.find(block)?;
        self.slots[slot].0 = INVALID;
        self.len -= 1;
        self.generation += 1;
        Some(slot)
    }

    /// The block in `slot`, if any.
    pub fn block_at(&self, slot: usize) -> Option<BlockId> {
        let t = self.slots[slot].0;
        (t != INVALID).then_some(t)
    }
}

impl ReplacementPolicy for SetAssocLru {
    fn name(&self) -> &'static str {
        if self.ways == 4 {
            "4-way"
        } else {
            "set-assoc-lru"
        }
    }
    fn capacity(&self) -> usize {
        self.slots.len()
    }
    fn len(&self) -> usize {
        self.len
    }
    fn contains(&self, block: BlockId) -> bool {
        self.find(block).is_some()
    }
    fn touch(&mut self, block: BlockId, _now: Nanos) {
        if let Some(s) = self.find(block) {
            self.touch_slot(s);
        }
    }
    fn insert(&mut self, block: BlockId, _now: Nanos) -> Option<BlockId> {
        match self.find(block) {
            Some(s) => {
                self.touch_slot(s);
                None
            }
            None => self.fill(block).1,
        }
    }
    /// The least recently used block of the whole cache (a scan: demand
    /// eviction goes through `insert`, which is O(ways)).
    fn evict(&mut self, _now: Nanos) -> Option<BlockId> {
        let slot = (0..self.slots.len())
            .filter(|&s| self.slots[s].0 != INVALID)
            .min_by_key(|&s| self.slots[s].1)?;
        let victim = self.slots[slot].0;
        self.slots[slot].0 = INVALID;
        self.len -= 1;
        self.generation += 1;
        Some(victim)
    }
    fn remove(&mut self, block: BlockId) -> bool {
        self.invalidate(block).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Access;

    #[test]
    fn conflicts_evict_within_a_set_only() {
        // 2 sets × 2 ways: even blocks share set 0.
        let mut c = SetAssocLru::new(4, 2);
        assert_eq!(c.access(0, 0), Access::Miss { evicted: None });
        assert_eq!(c.access(2, 0), Access::Miss { evicted: None });
        assert_eq!(c.access(1, 0), Access::Miss { evicted: None });
        assert_eq!(c.access(0, 0), Access::Hit);
        assert_eq!(c.access(4, 0), Access::Miss { evicted: Some(2) });
        assert_eq!(c.access(3, 0), Access::Miss { evicted: None });
        assert_eq!(c.len(), 4);
        assert_eq!(c.evict(0), Some(1));
        assert!(c.remove(0));
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn non_power_of_two_sets_work() {
        let mut c = SetAssocLru::new(12, 4);
        assert_eq!(c.sets(), 3);
        for b in 0..12 {
            assert_eq!(c.access(b, 0), Access::Miss { evicted: None });
        }
        for b in 0..12 {
            assert_eq!(c.access(b, 0), Access::Hit);
        }
        assert_eq!(c.access(12, 0), Access::Miss { evicted: Some(0) });
    }

    #[test]
    fn probe_then_fill_at_equals_fill() {
        let mut a = SetAssocLru::new(8, 4);
        let mut b = SetAssocLru::new(8, 4);
        for blk in [0u64, 2, 4, 6, 8, 0, 10, 1, 3, 12] {
            let gen0 = a.generation();
            match a.probe(blk) {
                Probe::Hit(s) => a.touch_slot(s),
                Probe::Miss { victim } => {
                    assert_eq!(a.generation(), gen0);
                    let va = a.fill_at(victim, blk);
                    let (_, vb) = b.fill(blk);
                    assert_eq!(va, vb);
                    continue;
                }
            }
            b.touch(blk, 0);
        }
        let g = a.generation();
        assert!(a.invalidate(12).is_some());
        assert_ne!(a.generation(), g);
    }

    #[test]
    fn slots_are_stable_across_hits() {
        let mut c = SetAssocLru::new(8, 8);
        let (s, _) = c.fill(5);
        c.fill(6);
        c.touch(5, 0);
        assert_eq!(c.find(5), Some(s));
        assert_eq!(c.block_at(s), Some(5));
    }
}
