//! Set-associative caches: CPU cache sets in the simulator and Kona's
//! 4-way set-associative local cache.
//!
//! Slots are stable (a block stays in its slot until evicted), so the owning
//! cache can keep dirty bits in a parallel array indexed by slot. Each slot
//! carries one stamp that the set's replacement rule ([`SetRule`]) reads and
//! writes through ChampSim's narrow hooks (hit, fill, victim), so a rule is a
//! few lines and the set search is written once: a hit is one store, a
//! victim is the lowest-ranked slot in the set (invalid slots first).

use std::fmt::Debug;

use serde::{Deserialize, Serialize};

use super::ReplacementPolicy;
use crate::{BlockId, Nanos};

const INVALID: u64 = u64::MAX;

/// How a set chooses its victim, by one stamp per slot. `clock` counts the
/// set-associative cache's hits and fills.
pub trait SetRule: Debug + Clone + Copy + Default + Send + 'static {
    /// The name the rule is chosen by (`replacement = "lru"`).
    const NAME: &'static str;
    /// A resident block was used.
    fn on_hit(stamp: &mut u64, clock: u64);
    /// A block was placed in the slot.
    fn on_fill(stamp: &mut u64, clock: u64);
    /// The lowest rank in a set is its victim (the first of equals).
    fn rank(stamp: u64, clock: u64) -> u64;
    /// Whether [`on_evict`](Self::on_evict) does anything (LRU's fills
    /// then skip finding the set).
    const AGES_SET: bool = false;
    /// The slot `victim` of a set whose stamps are `stamps` is about to be
    /// replaced (every slot of the set is valid).
    #[inline]
    fn on_evict(_stamps: &mut [u64], _victim: usize) {}
}

/// True LRU: the stamp is the time of last use.
#[derive(Debug, Clone, Copy, Default)]
pub struct LruRule;

impl SetRule for LruRule {
    const NAME: &'static str = "lru";
    #[inline]
    fn on_hit(stamp: &mut u64, clock: u64) {
        *stamp = clock;
    }
    #[inline]
    fn on_fill(stamp: &mut u64, clock: u64) {
        *stamp = clock;
    }
    #[inline]
    fn rank(stamp: u64, _clock: u64) -> u64 {
        stamp
    }
}

/// FIFO: the stamp is the time of fill; hits change nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct FifoRule;

impl SetRule for FifoRule {
    const NAME: &'static str = "fifo";
    #[inline]
    fn on_hit(_stamp: &mut u64, _clock: u64) {}
    #[inline]
    fn on_fill(stamp: &mut u64, clock: u64) {
        *stamp = clock;
    }
    #[inline]
    fn rank(stamp: u64, _clock: u64) -> u64 {
        stamp
    }
}

/// SRRIP with hit priority (Jaleel et al., ISCA 2010), 2-bit re-reference
/// prediction values: a fill predicts a long re-reference interval (2), a
/// hit a near one (0); the victim is the first block predicted distant (3),
/// after ageing the whole set until one is. Scans do not flush it the way
/// they flush LRU.
#[derive(Debug, Clone, Copy, Default)]
pub struct SrripRule;

const RRPV_DISTANT: u64 = 3;
const RRPV_LONG: u64 = 2;

impl SetRule for SrripRule {
    const NAME: &'static str = "srrip";
    #[inline]
    fn on_hit(stamp: &mut u64, _clock: u64) {
        *stamp = 0;
    }
    #[inline]
    fn on_fill(stamp: &mut u64, _clock: u64) {
        *stamp = RRPV_LONG;
    }
    #[inline]
    fn rank(stamp: u64, _clock: u64) -> u64 {
        RRPV_DISTANT - stamp
    }
    const AGES_SET: bool = true;
    /// The hardware increments every RRPV until one reaches 3; the victim
    /// (the first of the highest) gets there after `3 - its RRPV` steps, and
    /// so does everyone else's age.
    #[inline]
    fn on_evict(stamps: &mut [u64], victim: usize) {
        let age = RRPV_DISTANT - stamps[victim];
        if age > 0 {
            for stamp in stamps.iter_mut() {
                *stamp += age;
            }
        }
    }
}

/// Random replacement, reproducible: each eviction ranks the set afresh by
/// a hash of the slot's fill time and the clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct RandomRule;

impl SetRule for RandomRule {
    const NAME: &'static str = "random";
    #[inline]
    fn on_hit(_stamp: &mut u64, _clock: u64) {}
    #[inline]
    fn on_fill(stamp: &mut u64, clock: u64) {
        *stamp = clock;
    }
    #[inline]
    fn rank(stamp: u64, clock: u64) -> u64 {
        farmem_core::mix64(stamp ^ clock.rotate_left(32))
    }
}

/// Runs `$body` with `$R` the [`SetRule`] that `$kind` names. The rule is
/// a field, not a type parameter, so one cache type serves every rule; the
/// match sits outside each loop and its arms are the rules' own inlined
/// code.
macro_rules! by_rule {
    ($kind:expr, $R:ident => $body:expr) => {
        match $kind {
            SetRuleKind::Lru => {
                type $R = LruRule;
                $body
            }
            SetRuleKind::Fifo => {
                type $R = FifoRule;
                $body
            }
            SetRuleKind::Srrip => {
                type $R = SrripRule;
                $body
            }
            SetRuleKind::Random => {
                type $R = RandomRule;
                $body
            }
        }
    };
}

/// `sets × ways` slots; block `b` lives in set `b mod sets`; `rule` orders
/// each set.
#[derive(Debug, Clone)]
pub struct SetAssoc {
    sets: u64,
    /// `sets - 1` when `sets` is a power of two: the common case avoids a division.
    mask: Option<u64>,
    ways: usize,
    /// The block in each slot, a set contiguous: a lookup reads only
    /// these (a 16-way set's are two host cache lines, where tags and
    /// stamps side by side were four).
    tags: Vec<u64>,
    /// Each slot's stamp for the rule, read to choose a victim and written
    /// on a hit.
    stamps: Vec<u64>,
    clock: u64,
    len: usize,
    /// Bumped whenever a block leaves other than by `fill`, so a victim
    /// chosen by [`probe`](Self::probe) is known to be still the right one.
    generation: u64,
    rule: SetRuleKind,
}

/// Set-associative true LRU (Kona's 4-way local cache, the CPU caches'
/// default): [`SetAssoc::new`].
pub type SetAssocLru = SetAssoc;

/// What [`SetAssoc::probe`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    Hit(usize),
    /// Not resident; `victim` is the slot a fill would use now.
    Miss {
        victim: usize,
    },
}

impl SetAssoc {
    /// `capacity` blocks in sets of `ways` (both at least 1; `ways` is
    /// clamped to `capacity`), true LRU.
    pub fn new(capacity: usize, ways: usize) -> Self {
        Self::with_rule(capacity, ways, SetRuleKind::Lru)
    }

    /// `capacity` blocks in sets of `ways`, ordered by `rule`.
    pub fn with_rule(capacity: usize, ways: usize, rule: SetRuleKind) -> Self {
        let capacity = capacity.max(1);
        let ways = ways.clamp(1, capacity);
        let sets = (capacity / ways).max(1) as u64;
        let slots = sets as usize * ways;
        Self {
            sets,
            mask: sets.is_power_of_two().then(|| sets - 1),
            ways,
            tags: vec![INVALID; slots],
            stamps: vec![0; slots],
            clock: 0,
            len: 0,
            generation: 0,
            rule,
        }
    }

    pub fn rule(&self) -> SetRuleKind {
        self.rule
    }

    pub fn sets(&self) -> usize {
        self.sets as usize
    }
    pub fn ways(&self) -> usize {
        self.ways
    }
    /// Number of slots (`sets × ways`): the index range of slot arrays.
    pub fn slots(&self) -> usize {
        self.tags.len()
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

    /// Asks the CPU to bring `block`'s set into its cache: a simulator that
    /// knows its next accesses calls this a few records ahead, so the set
    /// search finds the set there instead of waiting on DRAM. A hint only:
    /// no state changes.
    #[inline]
    pub fn prefetch(&self, block: BlockId) {
        let base = self.set_base(block);
        let set = &self.tags[base..base + self.ways];
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            let start = set.as_ptr().cast::<i8>();
            for off in (0..std::mem::size_of_val(set)).step_by(64) {
                // SAFETY: a prefetch never faults, and the address lies in `set`.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(off)) };
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = set;
    }

    /// The slot holding `block`, without touching it.
    #[inline]
    pub fn find(&self, block: BlockId) -> Option<usize> {
        let base = self.set_base(block);
        self.tags[base..base + self.ways]
            .iter()
            .position(|&t| t == block)
            .map(|w| base + w)
    }

    /// The slot a fill of `block` would use now: the first invalid one in
    /// its set, else the rule's victim.
    #[inline]
    pub fn victim_slot(&self, block: BlockId) -> usize {
        by_rule!(self.rule, R => self.victim_slot_by::<R>(block))
    }

    #[inline]
    fn victim_slot_by<R: SetRule>(&self, block: BlockId) -> usize {
        let base = self.set_base(block);
        let mut victim = base;
        let mut lowest = u64::MAX;
        let tags = &self.tags[base..base + self.ways];
        let stamps = &self.stamps[base..base + self.ways];
        for (w, (&t, &stamp)) in tags.iter().zip(stamps).enumerate() {
            if t == INVALID {
                return base + w;
            }
            let rank = R::rank(stamp, self.clock);
            if rank < lowest {
                lowest = rank;
                victim = base + w;
            }
        }
        victim
    }

    /// The slot holding `block`, or the slot a fill would use (the first
    /// invalid one, else the rule's victim): the tags first, the stamps
    /// only on a miss.
    #[inline]
    pub fn probe(&self, block: BlockId) -> Probe {
        match self.find(block) {
            Some(slot) => Probe::Hit(slot),
            None => Probe::Miss {
                victim: self.victim_slot(block),
            },
        }
    }

    /// Places `block` in `slot` (from [`probe`](Self::probe), with no
    /// invalidation since: same `generation`); returns the block it displaced.
    #[inline]
    pub fn fill_at(&mut self, slot: usize, block: BlockId) -> Option<BlockId> {
        let old = self.tags[slot];
        let victim = (old != INVALID).then_some(old);
        let replaced = victim.is_some();
        self.len += usize::from(!replaced);
        self.clock += 1;
        let clock = self.clock;
        by_rule!(self.rule, R => {
            if replaced && R::AGES_SET {
                let base = self.set_base(block);
                R::on_evict(&mut self.stamps[base..base + self.ways], slot - base);
            }
            R::on_fill(&mut self.stamps[slot], clock);
        });
        self.tags[slot] = block;
        victim
    }

    /// A hit on `slot`.
    #[inline]
    pub fn touch_slot(&mut self, slot: usize) {
        self.clock += 1;
        let (clock, stamp) = (self.clock, &mut self.stamps[slot]);
        by_rule!(self.rule, R => R::on_hit(stamp, clock));
    }

    /// Places a block that is not resident; returns its slot and the block
    /// it displaced.
    pub fn fill(&mut self, block: BlockId) -> (usize, Option<BlockId>) {
        let slot = match self.probe(block) {
            Probe::Hit(s) | Probe::Miss { victim: s } => s,
        };
        (slot, self.fill_at(slot, block))
    }

    /// Drops `block`; returns the slot it held.
    pub fn invalidate(&mut self, block: BlockId) -> Option<usize> {
        let slot = self.find(block)?;
        self.tags[slot] = INVALID;
        self.len -= 1;
        self.generation += 1;
        Some(slot)
    }

    /// The block in `slot`, if any.
    pub fn block_at(&self, slot: usize) -> Option<BlockId> {
        let t = self.tags[slot];
        (t != INVALID).then_some(t)
    }
}

impl ReplacementPolicy for SetAssoc {
    fn name(&self) -> &'static str {
        match (self.rule.name(), self.ways) {
            ("lru", 4) => "4-way",
            ("lru", _) => "set-assoc-lru",
            (name, _) => name,
        }
    }
    fn capacity(&self) -> usize {
        self.tags.len()
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
    /// The lowest-ranked block of the whole cache (a scan: demand
    /// eviction goes through `insert`, which is O(ways)).
    fn evict(&mut self, _now: Nanos) -> Option<BlockId> {
        let rank = |s: usize| by_rule!(self.rule, R => R::rank(self.stamps[s], self.clock));
        let slot = (0..self.tags.len())
            .filter(|&s| self.tags[s] != INVALID)
            .min_by_key(|&s| rank(s))?;
        let victim = self.tags[slot];
        self.tags[slot] = INVALID;
        self.len -= 1;
        self.generation += 1;
        Some(victim)
    }
    fn remove(&mut self, block: BlockId) -> bool {
        self.invalidate(block).is_some()
    }
}

/// A set rule chosen by name in config (`replacement = "srrip"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SetRuleKind {
    #[default]
    Lru,
    Fifo,
    Srrip,
    Random,
}

impl SetRuleKind {
    /// Every name, for `--help` and error messages.
    pub const NAMES: &'static [&'static str] = &[
        LruRule::NAME,
        FifoRule::NAME,
        SrripRule::NAME,
        RandomRule::NAME,
    ];

    /// `capacity` blocks in sets of `ways`, ordered by this rule.
    pub fn build(self, capacity: usize, ways: usize) -> SetAssoc {
        SetAssoc::with_rule(capacity, ways, self)
    }

    pub fn name(self) -> &'static str {
        by_rule!(self, R => R::NAME)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Access;

    /// One 4-way set; returns the victims of `accesses` in order.
    fn victims(rule: SetRuleKind, accesses: &[u64]) -> Vec<u64> {
        let mut c = SetAssoc::with_rule(4, 4, rule);
        let mut out = Vec::new();
        for &b in accesses {
            if let Access::Miss { evicted: Some(v) } = c.access(b, 0) {
                out.push(v);
            }
        }
        out
    }

    #[test]
    fn each_rule_picks_its_own_victims() {
        // Fill 1..=4, hit 1, then two new blocks.
        let seq = [1, 2, 3, 4, 1, 5, 6];
        assert_eq!(victims(SetRuleKind::Lru, &seq), vec![2, 3]);
        // FIFO ignores the hit on 1.
        assert_eq!(victims(SetRuleKind::Fifo, &seq), vec![1, 2]);
        // SRRIP: 1 was hit (RRPV 0), the rest filled at 2 and aged to 3
        // on the first miss; 5 lands at 2 beside 3 and 4 at 3.
        assert_eq!(victims(SetRuleKind::Srrip, &seq), vec![2, 3]);
    }

    #[test]
    fn srrip_keeps_a_hot_block_through_a_scan() {
        // 1 is reused once, then 9 blocks stream through its set: LRU loses
        // it after 4 of them; under SRRIP the streamed blocks enter at RRPV 2
        // and leave before it (a 10th would age it out too).
        let mut seq = vec![1, 1];
        seq.extend(10..19);
        seq.push(1);
        let hit = |victims: Vec<u64>| !victims.contains(&1);
        assert!(!hit(victims(SetRuleKind::Lru, &seq)));
        assert!(hit(victims(SetRuleKind::Srrip, &seq)));
    }

    #[test]
    fn random_replacement_is_reproducible_and_spreads() {
        let seq: Vec<u64> = (0..200).collect();
        let a = victims(SetRuleKind::Random, &seq);
        assert_eq!(a, victims(SetRuleKind::Random, &seq));
        assert_eq!(a.len(), 196);
        // Not FIFO order: some younger block leaves before an older one.
        assert!(a.windows(2).any(|w| w[1] < w[0]));
    }

    #[test]
    fn rules_are_chosen_by_name() {
        for (i, name) in SetRuleKind::NAMES.iter().enumerate() {
            let kind: SetRuleKind = serde_json::from_str(&format!("\"{name}\"")).unwrap();
            let c = kind.build(64, 8);
            assert_eq!(c.rule().name(), *name);
            assert_eq!(c.slots(), 64, "rule {i}");
        }
        assert!(serde_json::from_str::<SetRuleKind>("\"plru\"").is_err());
    }

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
