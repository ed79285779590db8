//! CLOCK (second chance): the runtime's cheap default. A hit is one bit
//! store, with no list surgery under the lock the fault path holds.
//!
//! Slots sit on a circle swept by a hand. A hit sets the slot's reference
//! bit; the hand clears set bits as it passes and evicts the first slot whose
//! bit is already clear. A new block starts with its bit clear: the miss that
//! admitted it is not a reuse, so only a second touch earns the second chance
//! (a one-pass scan then leaves before blocks that were reused).
//!
//! Slots are stable, like [`SetAssocLru`](super::SetAssocLru): the owner may
//! keep per-slot state in a parallel array indexed by [`Clock::find`].

use super::ReplacementPolicy;
use super::block_map::BlockMap;
use crate::{BlockId, Nanos};

#[derive(Debug, Clone, Copy)]
struct Slot {
    block: BlockId,
    referenced: bool,
}

/// CLOCK over `capacity` slots.
#[derive(Debug, Clone)]
pub struct Clock {
    capacity: usize,
    /// Grows to `capacity` as the clock fills, so a huge configured
    /// capacity costs nothing until it is used.
    slots: Vec<Option<Slot>>,
    index: BlockMap<usize>,
    /// Slots emptied by eviction or removal, reused before the clock grows.
    free: Vec<usize>,
    hand: usize,
}

impl Clock {
    /// A clock of `capacity` slots (at least 1; [`super::PolicyConfig::build`]
    /// rejects 0 before it gets here).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            capacity,
            slots: Vec::new(),
            index: BlockMap::default(),
            free: Vec::new(),
            hand: 0,
        }
    }

    /// The slot holding `block`.
    pub fn find(&self, block: BlockId) -> Option<usize> {
        self.index.get(&block).copied()
    }

    /// The slot the hand points at: the next one examined for eviction.
    pub fn hand(&self) -> usize {
        self.hand
    }

    /// Whether `block` is resident with its reference bit set.
    pub fn referenced(&self, block: BlockId) -> Option<bool> {
        let s = self.find(block)?;
        self.slots[s].map(|slot| slot.referenced)
    }

    /// Resident blocks and their reference bits in the order the hand will
    /// meet them, starting at the hand.
    pub fn order(&self) -> Vec<(BlockId, bool)> {
        let n = self.slots.len();
        (0..n)
            .filter_map(|i| self.slots[(self.hand + i) % n])
            .map(|s| (s.block, s.referenced))
            .collect()
    }

    fn advance(&mut self) {
        self.hand = (self.hand + 1) % self.slots.len().max(1);
    }
}

impl ReplacementPolicy for Clock {
    fn name(&self) -> &'static str {
        "clock"
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn len(&self) -> usize {
        self.index.len()
    }
    fn contains(&self, block: BlockId) -> bool {
        self.index.contains_key(&block)
    }
    fn touch(&mut self, block: BlockId, _now: Nanos) {
        if let Some(&s) = self.index.get(&block)
            && let Some(slot) = self.slots[s].as_mut()
        {
            slot.referenced = true;
        }
    }
    fn insert(&mut self, block: BlockId, now: Nanos) -> Option<BlockId> {
        if self.contains(block) {
            self.touch(block, now);
            return None;
        }
        let mut victim = None;
        if self.free.is_empty() && self.slots.len() < self.capacity {
            self.slots.push(None);
            self.free.push(self.slots.len() - 1);
        } else if self.free.is_empty() {
            victim = self.evict(now);
        }
        // `evict` frees exactly the slot under the hand, so a full clock puts
        // the newcomer where the victim was, behind the hand: it is examined
        // last, after one full sweep, as in the textbook algorithm.
        let Some(s) = self.free.pop() else {
            return victim;
        };
        self.slots[s] = Some(Slot {
            block,
            referenced: false,
        });
        self.index.insert(block, s);
        victim
    }
    fn evict(&mut self, _now: Nanos) -> Option<BlockId> {
        if self.index.is_empty() {
            return None;
        }
        // Two sweeps at most: the first clears every set bit it passes.
        for _ in 0..2 * self.slots.len() {
            let h = self.hand;
            match self.slots[h].as_mut() {
                Some(slot) if slot.referenced => {
                    slot.referenced = false;
                    self.advance();
                }
                Some(slot) => {
                    let victim = slot.block;
                    self.slots[h] = None;
                    self.index.remove(&victim);
                    self.free.push(h);
                    self.advance();
                    return Some(victim);
                }
                None => self.advance(),
            }
        }
        None
    }
    fn remove(&mut self, block: BlockId) -> bool {
        match self.index.remove(&block) {
            Some(s) => {
                self.slots[s] = None;
                self.free.push(s);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Access;

    #[test]
    fn referenced_blocks_get_a_second_chance() {
        let mut c = Clock::new(3);
        for b in [1, 2, 3] {
            assert_eq!(c.access(b, 0), Access::Miss { evicted: None });
        }
        assert_eq!(c.order(), vec![(1, false), (2, false), (3, false)]);
        assert_eq!(c.access(1, 0), Access::Hit);
        assert_eq!(c.referenced(1), Some(true));
        // The hand passes 1 (clearing its bit) and takes 2; 4 lands in 2's slot.
        assert_eq!(c.access(4, 0), Access::Miss { evicted: Some(2) });
        assert_eq!(c.find(4), Some(1));
        assert_eq!(c.hand(), 2);
        assert_eq!(c.order(), vec![(3, false), (1, false), (4, false)]);
        assert_eq!(c.access(5, 0), Access::Miss { evicted: Some(3) });
        assert_eq!(c.evict(0), Some(1));
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn all_referenced_degrades_to_fifo_after_one_sweep() {
        let mut c = Clock::new(3);
        for b in [1, 2, 3] {
            c.access(b, 0);
            c.access(b, 0);
        }
        assert_eq!(c.access(4, 0), Access::Miss { evicted: Some(1) });
        assert_eq!(c.order(), vec![(2, false), (3, false), (4, false)]);
    }

    #[test]
    fn removed_slots_are_reused_without_eviction() {
        let mut c = Clock::new(2);
        c.access(1, 0);
        c.access(2, 0);
        assert!(c.remove(1));
        assert!(!c.remove(1));
        assert_eq!(c.access(3, 0), Access::Miss { evicted: None });
        assert_eq!(c.find(3), Some(0));
        assert_eq!(c.len(), 2);
        assert_eq!(c.evict(0), Some(3));
        assert_eq!(c.evict(0), Some(2));
        assert_eq!(c.evict(0), None);
    }
}
