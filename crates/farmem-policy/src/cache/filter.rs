//! UniMem's Filter-Cache (seed 002 §3.2, defaults from §4.1).
//!
//! The cache is split into `pairs` independent parts chosen by address, each
//! an active list (LRU, at most `active_max_percent` of the part) and an
//! inactive list (FIFO, the rest, and the whole part while the cache is
//! cold), plus a refault queue: a ring of the addresses of blocks evicted
//! from either list, as many entries as the part has blocks.
//!
//! Data flow (Figure 8): a fetched block first looks itself up in the refault
//! queue (①); found, it is a refault and enters the active head (③), else it
//! enters the inactive head (②). A hit in the inactive list promotes to the
//! active head (⑤); a hit in the active list moves to its head. Evicted
//! blocks (from either list) are logged in the refault queue (④); writing
//! back the dirty ones is the owner's job (the policy holds no data).
//!
//! Active evictions are dropped, not demoted. §3.2, last paragraph of the
//! list-size discussion: "When a block is evicted from active list, it is
//! directly discarded and not inserted into inactive list. We regard the
//! block evicted from active list as unvalued". We read "discarded" as a
//! real eviction: the block leaves the cache (written back if dirty, Step ④)
//! and its address goes to the refault queue, which §3.2 says logs "evicted
//! blocks from both active and inactive lists".
//!
//! When the 90% bound is enforced: a promotion happens on a hit, and a hit
//! (`touch`) cannot report a victim, so each promotion may leave the active
//! list one more over its bound (as may a refault into a part that is not
//! full). Every eviction from that part then takes the active tail while the
//! active list is over its bound, and the inactive tail otherwise; a refault
//! into a full part counts itself. So k promotions cost the active list its
//! k oldest blocks at the part's next k evictions: the same lists as
//! dropping each at its hit, while the blocks stay usable until then. With
//! the part full and the bound met, the inactive list holds at least
//! `100 − active_max_percent`% of it.
//!
//! A known limit, kept because it is the paper's: a loop over more blocks
//! than the cache (but fewer than cache + ring) thrashes as it does under
//! LRU. Every returning block is still in the ring, so each miss refaults
//! into the active head and displaces the active tail; §3.2 has no refault
//! distance test like Linux's workingset. Scans and one-hit wonders, the
//! pollution §2.2 is about, are filtered (tests/policies.rs shows both).
//!
//! The ring stores block numbers only, 8 bytes per 512 B block, the paper's
//! "approximately 1.5% of cache capacity" (§4.1).
//!
//! Parts: the paper divides the cache "into equal parts … similar to set
//! associative cache". We pick a block's part by a multiplicative hash of
//! its number rather than its low bits, so strided access (one 512 B block
//! per 4 KiB page, block numbers all ≡ 0 mod 8) still spreads over 8 parts.
//! Each part has its own ring, sized to the part, so parts share nothing.

use serde::{Deserialize, Serialize};

use super::SubPageState;
use super::block_map::{BlockMap, block_map};
use super::{Access, PolicyError, ReplacementPolicy};
use crate::list::{Ends, Handle, IndexList};
use crate::{BlockId, Nanos};

/// Largest number of list pairs (the paper sweeps 1–16, §4.7).
pub const MAX_PAIRS: u32 = 16;

/// Filter-Cache parameters; the defaults are the paper's (§4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FilterConfig {
    /// Upper bound of each active list, percent of its part (paper: 90); the
    /// inactive list keeps the rest, rounded up (paper: at least 10%).
    pub active_max_percent: u32,
    /// Independent active/inactive list pairs (paper: 8; 1–16).
    pub pairs: u32,
    /// Refault-queue entries, percent of the cache's blocks (paper: 100, "set
    /// to match the number of maximum caching blocks"); 0 turns refault
    /// admission off.
    pub refault_percent: u32,
    /// Blocks an owner evicts at once ahead of demand, for
    /// [`ReplacementPolicy::evict_batch`]. The paper batches eviction but
    /// gives no size; 32 blocks (16 KiB at 512 B) is ours.
    pub batch: u32,
}

impl Default for FilterConfig {
    fn default() -> Self {
        Self {
            active_max_percent: 90,
            pairs: 8,
            refault_percent: 100,
            batch: 32,
        }
    }
}

impl FilterConfig {
    pub fn validate(&self, capacity: usize) -> Result<(), PolicyError> {
        let bad = |why: String| {
            Err(PolicyError::BadConfig {
                policy: "filter",
                why,
            })
        };
        if self.active_max_percent > 100 {
            return bad(format!(
                "active_max_percent must be 0..=100, got {}",
                self.active_max_percent
            ));
        }
        if !(1..=MAX_PAIRS).contains(&self.pairs) {
            return bad(format!("pairs must be 1..={MAX_PAIRS}, got {}", self.pairs));
        }
        if self.refault_percent > 1000 {
            return bad(format!(
                "refault_percent must be 0..=1000, got {}",
                self.refault_percent
            ));
        }
        if self.batch == 0 {
            return bad("batch must be at least 1".into());
        }
        if capacity < self.pairs as usize {
            // Every part needs a block.
            return Err(PolicyError::TooSmall {
                policy: "filter",
                min: self.pairs as usize,
                got: capacity,
            });
        }
        Ok(())
    }

    /// The paper's parameters, with fewer pairs when the cache has fewer
    /// than 8 blocks (every pair needs one): what [`super::PolicyConfig`]'s
    /// `filter` builds, so tiny caches in tests and the runtime still work.
    pub fn for_capacity(capacity: usize) -> Self {
        let d = Self::default();
        Self {
            pairs: d
                .pairs
                .min(u32::try_from(capacity).unwrap_or(u32::MAX))
                .max(1),
            ..d
        }
    }

    /// Builds a Filter-Cache of `capacity` blocks.
    pub fn build(self, capacity: usize) -> Result<FilterCache, PolicyError> {
        FilterCache::new(capacity, self)
    }
}

/// `total` split into `parts` shares differing by at most one, larger first.
fn share(total: usize, parts: usize, i: usize) -> usize {
    total / parts + usize::from(i < total % parts)
}

/// The refault queue of one part: a ring of evicted block numbers. Lookups
/// go through the cache's `ghosts` map, block → slot.
#[derive(Debug, Clone, Default)]
struct Ring {
    size: usize,
    /// Grows to `size`, then wraps.
    slots: Vec<BlockId>,
    next: usize,
}

#[derive(Debug, Clone)]
struct Pair {
    active: Ends,
    inactive: Ends,
    capacity: usize,
    active_max: usize,
    ring: Ring,
}

impl Pair {
    fn len(&self) -> usize {
        self.active.len() + self.inactive.len()
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    h: Handle,
    active: bool,
}

/// UniMem's Filter-Cache as a [`ReplacementPolicy`].
#[derive(Debug, Clone)]
pub struct FilterCache {
    cfg: FilterConfig,
    capacity: usize,
    pairs: Vec<Pair>,
    index: BlockMap<Entry>,
    slab: IndexList<BlockId>,
    /// Refault-queue membership: block → its slot in its part's ring. A
    /// refault consumes the entry; the stale slot is skipped on overwrite.
    ghosts: BlockMap<usize>,
    /// Where background eviction starts looking, so ties rotate over parts.
    cursor: usize,
}

impl FilterCache {
    pub fn new(capacity: usize, cfg: FilterConfig) -> Result<Self, PolicyError> {
        cfg.validate(capacity)?;
        let n = cfg.pairs as usize;
        let ring_total = (capacity as u128 * u128::from(cfg.refault_percent) / 100)
            .try_into()
            .unwrap_or(usize::MAX);
        let pairs = (0..n)
            .map(|i| {
                let cap = share(capacity, n, i);
                let inactive_min =
                    (cap as u128 * u128::from(100 - cfg.active_max_percent)).div_ceil(100) as usize;
                Pair {
                    active: Ends::default(),
                    inactive: Ends::default(),
                    capacity: cap,
                    active_max: cap - inactive_min.min(cap),
                    ring: Ring {
                        size: share(ring_total, n, i),
                        ..Ring::default()
                    },
                }
            })
            .collect();
        Ok(Self {
            cfg,
            capacity,
            pairs,
            index: block_map(capacity),
            slab: IndexList::with_capacity(capacity),
            ghosts: block_map(ring_total),
            cursor: 0,
        })
    }

    pub fn config(&self) -> &FilterConfig {
        &self.cfg
    }

    /// The configured eviction batch, for [`ReplacementPolicy::evict_batch`].
    pub fn batch(&self) -> usize {
        self.cfg.batch as usize
    }

    /// Number of list pairs.
    pub fn pairs(&self) -> usize {
        self.pairs.len()
    }

    /// The pair `block` belongs to.
    pub fn pair_of(&self, block: BlockId) -> usize {
        // Fibonacci hashing: the high bits of the product mix every bit of
        // the block number.
        let h = block.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        (h % self.pairs.len() as u64) as usize
    }

    /// Blocks pair `p` holds at most.
    pub fn pair_capacity(&self, p: usize) -> usize {
        self.pairs.get(p).map_or(0, |x| x.capacity)
    }

    /// The active list's bound in pair `p`.
    pub fn active_max(&self, p: usize) -> usize {
        self.pairs.get(p).map_or(0, |x| x.active_max)
    }

    /// Pair `p`'s active list, head (most recent) to tail.
    pub fn active(&self, p: usize) -> Vec<BlockId> {
        self.pairs
            .get(p)
            .map_or_else(Vec::new, |x| self.slab.iter(&x.active).collect())
    }

    /// Pair `p`'s inactive list, head (newest) to tail (next victim).
    pub fn inactive(&self, p: usize) -> Vec<BlockId> {
        self.pairs
            .get(p)
            .map_or_else(Vec::new, |x| self.slab.iter(&x.inactive).collect())
    }

    /// Pair `p`'s live refault-queue entries, oldest first.
    pub fn refault_queue(&self, p: usize) -> Vec<BlockId> {
        let Some(ring) = self.pairs.get(p).map(|x| &x.ring) else {
            return Vec::new();
        };
        let n = ring.slots.len();
        let start = if n < ring.size { 0 } else { ring.next };
        (0..n)
            .map(|i| (start + i) % n)
            .filter(|&s| self.ghosts.get(&ring.slots[s]) == Some(&s))
            .map(|s| ring.slots[s])
            .collect()
    }

    /// Every active block, pair by pair (the hot sub-pages promotion starts from).
    pub fn active_blocks(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.pairs.iter().flat_map(|x| self.slab.iter(&x.active))
    }

    /// Where `block` sits.
    pub fn position(&self, block: BlockId) -> SubPageState {
        match self.index.get(&block) {
            Some(e) if e.active => SubPageState::Active,
            Some(_) => SubPageState::Inactive,
            None if self.ghosts.contains_key(&block) => SubPageState::Refault,
            None => SubPageState::Absent,
        }
    }

    /// Reorders a resident block (⑤ or an active-list hit); false if absent.
    fn hit(&mut self, block: BlockId) -> bool {
        let p = self.pair_of(block);
        let Some(e) = self.index.get_mut(&block) else {
            return false;
        };
        let pair = &mut self.pairs[p];
        if e.active {
            self.slab.promote(&mut pair.active, e.h);
        } else {
            // ⑤: inactive hit → active head; the bound is met at the next
            // eviction (module docs).
            self.slab
                .move_to_front(&mut pair.inactive, &mut pair.active, e.h);
            e.active = true;
        }
        true
    }

    /// Admits a block that is not resident (①–③); returns the victim.
    fn fill(&mut self, block: BlockId) -> Option<BlockId> {
        let p = self.pair_of(block);
        // ①: a refault consumes its ring entry.
        let refault = self.ghosts.remove(&block).is_some();
        let victim = if self.pairs[p].len() >= self.pairs[p].capacity {
            self.evict_from(p, refault)
        } else {
            None
        };
        let pair = &mut self.pairs[p];
        let (list, active) = if refault {
            (&mut pair.active, true) // ③
        } else {
            (&mut pair.inactive, false) // ②
        };
        let h = self.slab.push_front(list, block);
        self.index.insert(block, Entry { h, active });
        victim
    }

    /// Logs an evicted block in pair `p`'s ring, overwriting the oldest entry.
    fn log_refault(&mut self, p: usize, block: BlockId) {
        let ring = &mut self.pairs[p].ring;
        if ring.size == 0 {
            return;
        }
        let pos = ring.next;
        if ring.slots.len() < ring.size {
            ring.slots.push(block);
        } else {
            let old = std::mem::replace(&mut ring.slots[pos], block);
            // Forget the overwritten address unless it was logged again later.
            if self.ghosts.get(&old) == Some(&pos) {
                self.ghosts.remove(&old);
            }
        }
        ring.next = (pos + 1) % ring.size;
        self.ghosts.insert(block, pos);
    }

    /// Evicts one block from pair `p`. `incoming_active` says a refaulted
    /// block is about to enter the active list, so the bound counts it.
    fn evict_from(&mut self, p: usize, incoming_active: bool) -> Option<BlockId> {
        let pair = &mut self.pairs[p];
        let over = pair.active.len() + usize::from(incoming_active) > pair.active_max;
        let victim = if over {
            self.slab
                .pop_back(&mut pair.active)
                .or_else(|| self.slab.pop_back(&mut pair.inactive))
        } else {
            self.slab
                .pop_back(&mut pair.inactive)
                .or_else(|| self.slab.pop_back(&mut pair.active))
        }?;
        self.index.remove(&victim);
        self.log_refault(p, victim);
        Some(victim)
    }
}

impl ReplacementPolicy for FilterCache {
    fn name(&self) -> &'static str {
        "filter"
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
    /// Background eviction takes from the fullest pair (relative to its
    /// share), so batches keep the pairs balanced.
    fn evict(&mut self, _now: Nanos) -> Option<BlockId> {
        let n = self.pairs.len();
        let mut best: Option<usize> = None;
        for i in 0..n {
            let p = (self.cursor + i) % n;
            let x = &self.pairs[p];
            if x.len() == 0 {
                continue;
            }
            let better = best.is_none_or(|b| {
                let y = &self.pairs[b];
                // x.len/x.cap > y.len/y.cap, without division.
                x.len() as u128 * y.capacity as u128 > y.len() as u128 * x.capacity as u128
            });
            if better {
                best = Some(p);
            }
        }
        let p = best?;
        self.cursor = (p + 1) % n;
        self.evict_from(p, false)
    }
    fn sub_page_state(&self, block: BlockId) -> SubPageState {
        self.position(block)
    }
    fn remove(&mut self, block: BlockId) -> bool {
        let p = self.pair_of(block);
        match self.index.remove(&block) {
            Some(e) => {
                let pair = &mut self.pairs[p];
                let list = if e.active {
                    &mut pair.active
                } else {
                    &mut pair.inactive
                };
                self.slab.remove(list, e.h);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::cache::Access;

    /// One pair, paper ratios and ring, `capacity` blocks.
    fn one_pair(capacity: usize) -> FilterCache {
        FilterCache::new(
            capacity,
            FilterConfig {
                pairs: 1,
                ..Default::default()
            },
        )
        .unwrap()
    }

    /// (active, inactive, refault queue) of pair 0.
    fn dump(c: &FilterCache) -> (Vec<BlockId>, Vec<BlockId>, Vec<BlockId>) {
        (c.active(0), c.inactive(0), c.refault_queue(0))
    }

    #[test]
    fn cold_fill_lets_the_inactive_list_take_the_whole_cache() {
        let mut c = one_pair(10);
        assert_eq!(c.active_max(0), 9);
        for b in 1..=10 {
            assert_eq!(c.access(b, 0), Access::Miss { evicted: None });
        }
        assert_eq!(dump(&c), (vec![], (1..=10).rev().collect(), vec![]));
        // FIFO: the oldest admission leaves first and is logged.
        assert_eq!(c.access(11, 0), Access::Miss { evicted: Some(1) });
        assert_eq!(c.access(12, 0), Access::Miss { evicted: Some(2) });
        assert_eq!(dump(&c), (vec![], (3..=12).rev().collect(), vec![1, 2]));
        assert_eq!(c.position(1), SubPageState::Refault);
        assert_eq!(c.position(3), SubPageState::Inactive);
        assert_eq!(c.position(99), SubPageState::Absent);
    }

    #[test]
    fn second_touch_promotes_and_active_is_lru_inactive_fifo() {
        let mut c = one_pair(6);
        for b in 1..=6 {
            c.access(b, 0);
        }
        assert_eq!(c.access(3, 0), Access::Hit);
        assert_eq!(c.access(5, 0), Access::Hit);
        assert_eq!(dump(&c), (vec![5, 3], vec![6, 4, 2, 1], vec![]));
        // Active hit: LRU reorder. Inactive hits never reorder the inactive list.
        c.access(3, 0);
        assert_eq!(dump(&c), (vec![3, 5], vec![6, 4, 2, 1], vec![]));
        assert_eq!(c.position(3), SubPageState::Active);
        // A new block evicts the inactive tail, not the active one.
        assert_eq!(c.access(7, 0), Access::Miss { evicted: Some(1) });
        assert_eq!(dump(&c), (vec![3, 5], vec![7, 6, 4, 2], vec![1]));
    }

    #[test]
    fn refaulted_block_enters_the_active_head() {
        let mut c = one_pair(4);
        for b in 1..=4 {
            c.access(b, 0);
        }
        c.access(2, 0);
        assert_eq!(c.access(5, 0), Access::Miss { evicted: Some(1) });
        assert_eq!(dump(&c), (vec![2], vec![5, 4, 3], vec![1]));
        // 1 comes back: found in the ring (consumed) → active head, and the
        // inactive tail makes room.
        assert_eq!(c.access(1, 0), Access::Miss { evicted: Some(3) });
        assert_eq!(dump(&c), (vec![1, 2], vec![5, 4], vec![3]));
        assert_eq!(c.position(1), SubPageState::Active);
        // A block that never left is no refault: 6 goes to the inactive head.
        assert_eq!(c.access(6, 0), Access::Miss { evicted: Some(4) });
        assert_eq!(dump(&c), (vec![1, 2], vec![6, 5], vec![3, 4]));
    }

    #[test]
    fn active_is_bounded_to_90_percent_and_its_evictions_are_dropped() {
        let mut c = one_pair(10);
        for b in 1..=10 {
            c.access(b, 0);
        }
        // Promote everything: the hits leave the active list over its bound.
        for b in 1..=10 {
            assert_eq!(c.access(b, 0), Access::Hit);
        }
        assert_eq!(dump(&c), ((1..=10).rev().collect(), vec![], vec![]));
        // The next fill takes the active tail (over the bound), and drops it
        // rather than demoting it: 1 goes to the ring, not the inactive list.
        assert_eq!(c.access(11, 0), Access::Miss { evicted: Some(1) });
        assert_eq!(dump(&c), ((2..=10).rev().collect(), vec![11], vec![1]));
        // Now 9 active ≤ 90%: one-hit wonders flow through the 10% inactive
        // list and never disturb the active list.
        for b in 12..=15 {
            assert_eq!(
                c.access(b, 0),
                Access::Miss {
                    evicted: Some(b - 1)
                }
            );
        }
        assert_eq!(
            dump(&c),
            ((2..=10).rev().collect(), vec![15], vec![1, 11, 12, 13, 14])
        );
        // A refault while the active list is full drops the active tail.
        assert_eq!(c.access(11, 0), Access::Miss { evicted: Some(2) });
        assert_eq!(
            dump(&c),
            (
                vec![11, 10, 9, 8, 7, 6, 5, 4, 3],
                vec![15],
                vec![1, 12, 13, 14, 2]
            )
        );
    }

    #[test]
    fn refault_ring_overwrites_its_oldest_entry() {
        // 4 blocks → 4 ring entries.
        let mut c = one_pair(4);
        for b in 1..=8 {
            c.access(b, 0);
        }
        assert_eq!(dump(&c), (vec![], vec![8, 7, 6, 5], vec![1, 2, 3, 4]));
        c.access(9, 0);
        c.access(10, 0);
        // 1 and 2 fell off the ring: they are absent, no longer refaults.
        assert_eq!(c.refault_queue(0), vec![3, 4, 5, 6]);
        assert_eq!(c.position(1), SubPageState::Absent);
        assert_eq!(c.position(3), SubPageState::Refault);
        // So 1 is admitted as a first access again (inactive head) …
        c.access(1, 0);
        assert_eq!(dump(&c), (vec![], vec![1, 10, 9, 8], vec![4, 5, 6, 7]));
        // … while 5, still in the ring, refaults into the active list and its
        // entry is consumed; the victim 8 overwrites the oldest slot (4).
        c.access(5, 0);
        assert_eq!(dump(&c), (vec![5], vec![1, 10, 9], vec![6, 7, 8]));
        // Evicted again, 5 is logged anew at the newest end (its old, stale
        // slot, which is next in line).
        c.remove(1);
        c.remove(10);
        c.remove(9);
        assert_eq!(c.evict(0), Some(5));
        assert_eq!(c.refault_queue(0), vec![6, 7, 8, 5]);
    }

    #[test]
    fn refault_percent_zero_turns_refaults_off() {
        let mut c = FilterCache::new(
            2,
            FilterConfig {
                pairs: 1,
                refault_percent: 0,
                ..Default::default()
            },
        )
        .unwrap();
        for b in [1, 2, 3, 1] {
            c.access(b, 0);
        }
        assert_eq!(dump(&c), (vec![], vec![1, 3], vec![]));
    }

    #[test]
    fn batch_eviction_drains_the_fullest_pairs_first() {
        let mut c = FilterCache::new(64, FilterConfig::default()).unwrap();
        assert_eq!(c.pairs(), 8);
        assert_eq!((0..8).map(|p| c.pair_capacity(p)).sum::<usize>(), 64);
        // Fill pair 0 to its 8 blocks and two other pairs with one block each.
        let pair0: Vec<BlockId> = (0..).filter(|&b| c.pair_of(b) == 0).take(8).collect();
        let other: Vec<BlockId> = (0..).filter(|&b| c.pair_of(b) != 0).take(2).collect();
        for &b in pair0.iter().chain(&other) {
            assert_eq!(c.access(b, 0), Access::Miss { evicted: None });
        }
        assert_eq!(c.batch(), 32);
        // Pair 0 is at 8/8, the others at most 1/8: the first 7 victims
        // are pair 0's inactive tail in FIFO order.
        let victims = c.evict_batch(7, 0);
        assert_eq!(victims, pair0[..7].to_vec());
        assert_eq!(c.refault_queue(0), pair0[..7].to_vec());
        // Then every non-empty pair is at 1/8; the rest drains fully.
        let rest: HashSet<BlockId> = c.evict_batch(100, 0).into_iter().collect();
        let expect: HashSet<BlockId> = other.iter().copied().chain([pair0[7]]).collect();
        assert_eq!(rest, expect);
        assert!(c.is_empty());
        assert!(c.evict_batch(4, 0).is_empty());
    }

    #[test]
    fn pairs_fill_and_evict_independently() {
        let mut c = FilterCache::new(
            16,
            FilterConfig {
                pairs: 2,
                ..Default::default()
            },
        )
        .unwrap();
        let p0: Vec<BlockId> = (0..).filter(|&b| c.pair_of(b) == 0).take(9).collect();
        for &b in &p0[..8] {
            c.access(b, 0);
        }
        // Pair 1 is empty, yet pair 0's ninth block evicts inside pair 0.
        assert_eq!(
            c.access(p0[8], 0),
            Access::Miss {
                evicted: Some(p0[0])
            }
        );
        assert_eq!(c.len(), 8);
        assert!(c.inactive(1).is_empty());
    }

    /// The cache that owns the policy keeps dirty bits and writes back.
    struct Owner {
        cache: FilterCache,
        dirty: HashSet<BlockId>,
        written_back: Vec<BlockId>,
    }

    impl Owner {
        fn access(&mut self, block: BlockId, write: bool) {
            if let Access::Miss {
                evicted: Some(victim),
            } = self.cache.access(block, 0)
                && self.dirty.remove(&victim)
            {
                self.written_back.push(victim);
            }
            if write {
                self.dirty.insert(block);
            }
        }
    }

    #[test]
    fn dirty_victims_are_reported_for_write_back() {
        let mut o = Owner {
            cache: one_pair(2),
            dirty: HashSet::new(),
            written_back: Vec::new(),
        };
        o.access(1, true);
        o.access(2, false);
        o.access(3, false); // evicts 1 (dirty)
        o.access(4, false); // evicts 2 (clean)
        assert_eq!(o.written_back, vec![1]);
        assert!(o.dirty.is_empty());
        assert_eq!(dump(&o.cache), (vec![], vec![4, 3], vec![1, 2]));
    }

    #[test]
    fn odd_configs_are_typed_errors() {
        let cfg = FilterConfig::default();
        assert!(matches!(
            FilterCache::new(7, cfg),
            Err(PolicyError::TooSmall { min: 8, got: 7, .. })
        ));
        for bad in [
            FilterConfig { pairs: 0, ..cfg },
            FilterConfig { pairs: 17, ..cfg },
            FilterConfig {
                active_max_percent: 101,
                ..cfg
            },
            FilterConfig { batch: 0, ..cfg },
        ] {
            assert!(matches!(
                FilterCache::new(64, bad),
                Err(PolicyError::BadConfig { .. })
            ));
        }
        // Extreme but legal ratios work: all-inactive and all-active bounds.
        for pct in [0, 100] {
            let mut c = FilterCache::new(
                3,
                FilterConfig {
                    pairs: 1,
                    active_max_percent: pct,
                    ..cfg
                },
            )
            .unwrap();
            for b in [1, 2, 3, 1, 2, 4, 5, 1, 6] {
                c.access(b, 0);
                assert!(c.len() <= 3);
            }
        }
    }

    #[test]
    fn config_reads_with_paper_defaults() {
        let cfg: FilterConfig = serde_json::from_str(r#"{"pairs": 4}"#).unwrap();
        assert_eq!(
            cfg,
            FilterConfig {
                pairs: 4,
                ..Default::default()
            }
        );
        assert!(serde_json::from_str::<FilterConfig>(r#"{"pair": 4}"#).is_err());
    }
}
