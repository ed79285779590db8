//! Least recently used, and its sibling FIFO: one slab-linked list in
//! admission or recency order; the only difference is whether a hit moves
//! the block to the front.

use super::ReplacementPolicy;
use super::block_map::{BlockMap, block_map};
use crate::list::{Ends, Handle, IndexList};
use crate::{BlockId, Nanos};

/// One ordered list over a slab: O(1) touch, insert, evict and remove.
/// `PROMOTE_ON_HIT` makes it LRU; without it, FIFO.
#[derive(Debug, Clone)]
pub struct OrderedList<const PROMOTE_ON_HIT: bool> {
    capacity: usize,
    index: BlockMap<Handle>,
    slab: IndexList<BlockId>,
    order: Ends,
}

/// Least recently used.
pub type Lru = OrderedList<true>;

impl<const PROMOTE_ON_HIT: bool> OrderedList<PROMOTE_ON_HIT> {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            index: block_map(capacity),
            slab: IndexList::with_capacity(capacity),
            order: Ends::default(),
        }
    }

    /// Blocks from the front (most recent use, or newest admission) to the back.
    pub fn order(&self) -> Vec<BlockId> {
        self.slab.iter(&self.order).collect()
    }
}

impl<const PROMOTE_ON_HIT: bool> ReplacementPolicy for OrderedList<PROMOTE_ON_HIT> {
    fn name(&self) -> &'static str {
        if PROMOTE_ON_HIT { "lru" } else { "fifo" }
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
        if PROMOTE_ON_HIT && let Some(&h) = self.index.get(&block) {
            self.slab.promote(&mut self.order, h);
        }
    }
    fn insert(&mut self, block: BlockId, now: Nanos) -> Option<BlockId> {
        if self.contains(block) {
            self.touch(block, now);
            return None;
        }
        let victim = if self.len() >= self.capacity {
            self.evict(now)
        } else {
            None
        };
        let h = self.slab.push_front(&mut self.order, block);
        self.index.insert(block, h);
        victim
    }
    fn evict(&mut self, _now: Nanos) -> Option<BlockId> {
        let victim = self.slab.pop_back(&mut self.order)?;
        self.index.remove(&victim);
        Some(victim)
    }
    fn remove(&mut self, block: BlockId) -> bool {
        match self.index.remove(&block) {
            Some(h) => {
                self.slab.remove(&mut self.order, h);
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
    fn evicts_least_recently_used() {
        let mut lru = Lru::new(3);
        for b in [1, 2, 3] {
            assert_eq!(lru.access(b, 0), Access::Miss { evicted: None });
        }
        assert_eq!(lru.access(1, 0), Access::Hit);
        assert_eq!(lru.order(), vec![1, 3, 2]);
        assert_eq!(lru.access(4, 0), Access::Miss { evicted: Some(2) });
        assert_eq!(lru.order(), vec![4, 1, 3]);
        assert!(lru.remove(1));
        assert_eq!(lru.evict(0), Some(3));
        assert_eq!(lru.order(), vec![4]);
    }

    #[test]
    fn cyclic_scan_one_larger_than_capacity_never_hits() {
        let mut lru = Lru::new(8);
        let hits = (0..100u64)
            .filter(|i| lru.access(i % 9, 0) == Access::Hit)
            .count();
        assert_eq!(hits, 0);
    }
}
