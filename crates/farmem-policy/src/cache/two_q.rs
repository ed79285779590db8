//! Kona-PC: Linux's page cache as UniMem's baseline models it (seed 002
//! §2.2, §4.1): an active and an inactive LRU list, the active list never
//! longer than the inactive one.
//!
//! First access → inactive head. A hit in the inactive list promotes to the
//! active head; a hit in the active list moves to its head. When the active
//! list outgrows the inactive one its tail is demoted to the inactive head
//! (Linux's deactivation; unlike Filter-Cache nothing leaves the cache from
//! the active list). Victims come from the inactive tail.
//!
//! Linux promotes only on the second inactive reference (PG_referenced);
//! UniMem describes Kona-PC by its lists and their ratio only, so one
//! inactive hit promotes here, as in Filter-Cache, which keeps the two
//! caches comparable.

use super::SubPageState;
use super::block_map::{BlockMap, block_map};
use super::{Access, ReplacementPolicy};
use crate::list::{Ends, Handle, IndexList};
use crate::{BlockId, Nanos};

#[derive(Debug, Clone, Copy)]
struct Entry {
    h: Handle,
    active: bool,
}

/// Active/inactive lists with `active.len() ≤ inactive.len()`.
#[derive(Debug, Clone)]
pub struct TwoQ {
    capacity: usize,
    index: BlockMap<Entry>,
    slab: IndexList<BlockId>,
    active: Ends,
    inactive: Ends,
}

impl TwoQ {
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            capacity,
            index: block_map(capacity),
            slab: IndexList::with_capacity(capacity),
            active: Ends::default(),
            inactive: Ends::default(),
        }
    }

    /// Active blocks, head (most recent) to tail.
    pub fn active(&self) -> Vec<BlockId> {
        self.slab.iter(&self.active).collect()
    }

    /// Inactive blocks, head (most recent) to tail (next victim).
    pub fn inactive(&self) -> Vec<BlockId> {
        self.slab.iter(&self.inactive).collect()
    }

    /// Which list holds `block` (never `Refault`: Kona-PC keeps no history).
    pub fn position(&self, block: BlockId) -> SubPageState {
        match self.index.get(&block) {
            Some(e) if e.active => SubPageState::Active,
            Some(_) => SubPageState::Inactive,
            None => SubPageState::Absent,
        }
    }

    /// Demotes active tails until the active list is no longer than the
    /// inactive one.
    fn balance(&mut self) {
        while self.active.len() > self.inactive.len() {
            let Some(b) = self.slab.back(&self.active) else {
                break;
            };
            let Some(e) = self.index.get_mut(&b) else {
                break;
            };
            self.slab
                .move_to_front(&mut self.active, &mut self.inactive, e.h);
            e.active = false;
        }
    }
}

impl TwoQ {
    /// Reorders a resident block; false if absent.
    fn hit(&mut self, block: BlockId) -> bool {
        let Some(e) = self.index.get_mut(&block) else {
            return false;
        };
        if e.active {
            self.slab.promote(&mut self.active, e.h);
        } else {
            self.slab
                .move_to_front(&mut self.inactive, &mut self.active, e.h);
            e.active = true;
            self.balance();
        }
        true
    }

    /// Admits a block that is not resident at the inactive head; returns
    /// the victim.
    fn fill(&mut self, block: BlockId) -> Option<BlockId> {
        self.fill_at(block, false)
    }

    /// Admits a block that is not resident at the head of the `active` or
    /// inactive list (the workingset policy activates refaults); returns
    /// the victim.
    pub(super) fn fill_at(&mut self, block: BlockId, active: bool) -> Option<BlockId> {
        // The newcomer refills the list the victim left, so no demotion is
        // needed in between.
        let victim = if self.len() >= self.capacity {
            self.pop_victim()
        } else {
            None
        };
        let list = if active {
            &mut self.active
        } else {
            &mut self.inactive
        };
        let h = self.slab.push_front(list, block);
        self.index.insert(block, Entry { h, active });
        self.balance();
        victim
    }

    /// The inactive tail (the active tail only when nothing is inactive).
    fn pop_victim(&mut self) -> Option<BlockId> {
        let victim = self
            .slab
            .pop_back(&mut self.inactive)
            .or_else(|| self.slab.pop_back(&mut self.active))?;
        self.index.remove(&victim);
        Some(victim)
    }
}

impl ReplacementPolicy for TwoQ {
    fn name(&self) -> &'static str {
        "kona-pc"
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
        self.hit(block);
    }
    fn insert(&mut self, block: BlockId, _now: Nanos) -> Option<BlockId> {
        if self.hit(block) {
            return None;
        }
        self.fill(block)
    }
    /// One index lookup on a hit (the trait's default takes two).
    fn access(&mut self, block: BlockId, _now: Nanos) -> Access {
        if self.hit(block) {
            Access::Hit
        } else {
            Access::Miss {
                evicted: self.fill(block),
            }
        }
    }
    fn evict(&mut self, _now: Nanos) -> Option<BlockId> {
        let victim = self.pop_victim();
        self.balance();
        victim
    }
    fn sub_page_state(&self, block: BlockId) -> SubPageState {
        self.position(block)
    }
    fn remove(&mut self, block: BlockId) -> bool {
        match self.index.remove(&block) {
            Some(e) => {
                let list = if e.active {
                    &mut self.active
                } else {
                    &mut self.inactive
                };
                self.slab.remove(list, e.h);
                self.balance();
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

    fn lists(q: &TwoQ) -> (Vec<BlockId>, Vec<BlockId>) {
        (q.active(), q.inactive())
    }

    #[test]
    fn cold_fill_goes_to_inactive_in_arrival_order() {
        let mut q = TwoQ::new(4);
        for b in [1, 2, 3, 4] {
            assert_eq!(q.access(b, 0), Access::Miss { evicted: None });
        }
        assert_eq!(lists(&q), (vec![], vec![4, 3, 2, 1]));
        assert_eq!(q.access(5, 0), Access::Miss { evicted: Some(1) });
        assert_eq!(lists(&q), (vec![], vec![5, 4, 3, 2]));
    }

    #[test]
    fn second_touch_promotes_and_active_never_outgrows_inactive() {
        let mut q = TwoQ::new(6);
        for b in 1..=6 {
            q.access(b, 0);
        }
        assert_eq!(q.access(2, 0), Access::Hit);
        assert_eq!(lists(&q), (vec![2], vec![6, 5, 4, 3, 1]));
        q.access(4, 0);
        q.access(6, 0);
        assert_eq!(lists(&q), (vec![6, 4, 2], vec![5, 3, 1]));
        // A fourth promotion makes active 4 > inactive 2: its tail (2) is
        // demoted to the inactive head, leaving 3 ≤ 3.
        q.access(1, 0);
        assert_eq!(lists(&q), (vec![1, 6, 4], vec![2, 5, 3]));
        assert_eq!(q.position(2), SubPageState::Inactive);
        assert_eq!(q.position(1), SubPageState::Active);
        // A hit in active only reorders it.
        q.access(4, 0);
        assert_eq!(lists(&q), (vec![4, 1, 6], vec![2, 5, 3]));
        // Victims come from the inactive tail, new blocks enter its head.
        assert_eq!(q.access(7, 0), Access::Miss { evicted: Some(3) });
        assert_eq!(lists(&q), (vec![4, 1, 6], vec![7, 2, 5]));
    }

    #[test]
    fn dirty_victims_are_reported_for_write_back() {
        // The owner keeps dirty bits; every victim the policy names is one
        // it can write back, and the active list is never a victim source
        // while anything is inactive.
        let mut q = TwoQ::new(3);
        let mut dirty = std::collections::HashSet::new();
        let mut written_back = Vec::new();
        for (b, write) in [
            (1, true),
            (2, false),
            (1, false),
            (3, true),
            (4, false),
            (5, false),
        ] {
            if let Access::Miss { evicted: Some(v) } = q.access(b, 0)
                && dirty.remove(&v)
            {
                written_back.push(v);
            }
            if write {
                dirty.insert(b);
            }
        }
        // 1 was promoted (active, dirty) and survives; 2 (clean) then 3
        // (dirty) leave from the inactive tail.
        assert_eq!(lists(&q), (vec![1], vec![5, 4]));
        assert_eq!(written_back, vec![3]);
        assert_eq!(dirty.into_iter().collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn removal_rebalances() {
        let mut q = TwoQ::new(4);
        for b in 1..=4 {
            q.access(b, 0);
        }
        q.access(1, 0);
        q.access(2, 0);
        assert_eq!(lists(&q), (vec![2, 1], vec![4, 3]));
        // Removing from the inactive list demotes the active tail to keep
        // active ≤ inactive.
        assert!(q.remove(3));
        assert_eq!(lists(&q), (vec![2], vec![1, 4]));
        assert!(q.remove(4));
        assert_eq!(lists(&q), (vec![2], vec![1]));
        // So does eviction: the last active block is demoted once alone.
        assert_eq!(q.evict(0), Some(1));
        assert_eq!(lists(&q), (vec![], vec![2]));
        assert_eq!(q.evict(0), Some(2));
        assert_eq!(q.evict(0), None);
    }
}
