//! First in, first out: DaeMon's sensitivity study replaces LRU by FIFO in
//! local memory. Hits do not reorder.

use super::ReplacementPolicy;
use super::block_map::{BlockMap, block_map};
use crate::list::{Ends, Handle, IndexList};
use crate::{BlockId, Nanos};

/// FIFO over a slab-linked list: O(1) insert, evict and remove.
#[derive(Debug, Clone)]
pub struct Fifo {
    capacity: usize,
    index: BlockMap<Handle>,
    slab: IndexList<BlockId>,
    order: Ends,
}

impl Fifo {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            index: block_map(capacity),
            slab: IndexList::with_capacity(capacity),
            order: Ends::default(),
        }
    }

    /// Blocks from newest to oldest admission.
    pub fn order(&self) -> Vec<BlockId> {
        self.slab.iter(&self.order).collect()
    }
}

impl ReplacementPolicy for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
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
    fn touch(&mut self, _block: BlockId, _now: Nanos) {}
    fn insert(&mut self, block: BlockId, now: Nanos) -> Option<BlockId> {
        if self.contains(block) {
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
    fn evicts_oldest_admission_even_if_recently_hit() {
        let mut fifo = Fifo::new(3);
        for b in [1, 2, 3] {
            assert_eq!(fifo.access(b, 0), Access::Miss { evicted: None });
        }
        assert_eq!(fifo.access(1, 0), Access::Hit);
        assert_eq!(fifo.order(), vec![3, 2, 1]);
        assert_eq!(fifo.access(4, 0), Access::Miss { evicted: Some(1) });
        assert_eq!(fifo.order(), vec![4, 3, 2]);
        assert!(fifo.remove(3));
        assert_eq!(fifo.evict(0), Some(2));
        assert_eq!(fifo.len(), 1);
    }
}
