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
    /// Whether the rank is the stamp itself and every fill or hit leaves a
    /// stamp of at least 1: invalid slots keep stamp 0, so a set's victim
    /// is its first lowest stamp, found without reading its tags.
    const RANK_IS_STAMP: bool = false;
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
    const RANK_IS_STAMP: bool = true;
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
    const RANK_IS_STAMP: bool = true;
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
    /// Sets are searched in AVX2 registers (the host has them, and the
    /// sets are a width they take).
    simd: bool,
    /// ... and victims too (the rule ranks by stamp).
    simd_victims: bool,
}

/// The index of the first lowest of `stamps` (0 when empty).
#[inline]
fn first_lowest(stamps: &[u64]) -> usize {
    let mut best = 0;
    let mut lowest = u64::MAX;
    for (w, &s) in stamps.iter().enumerate() {
        if s < lowest {
            lowest = s;
            best = w;
        }
    }
    best
}

/// Set searches in AVX2 registers, four ways per compare: a CPU cache
/// level's lookup is the simulator's commonest step, and a scalar search
/// of 8 or 16 ways, with a mispredicted exit, its largest cost. Used when
/// the host has AVX2 ([`SetAssoc::simd`]), for sets of a multiple of 4
/// ways up to 32; others search one way at a time.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{
        __m256i, _mm256_blendv_epi8, _mm256_castsi256_pd, _mm256_cmpeq_epi64, _mm256_cmpgt_epi64,
        _mm256_loadu_si256, _mm256_movemask_pd, _mm256_permute4x64_epi64, _mm256_set1_epi64x,
        _mm256_shuffle_epi32, _mm256_xor_si256,
    };

    /// Whether the set searches here can run on this host.
    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx2")
    }

    /// Whether a set of `ways` is searched here.
    pub(super) fn fits(ways: usize) -> bool {
        ways.is_multiple_of(4) && (4..=32).contains(&ways)
    }

    /// Lanes `4k..4k + 4` of `v`.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn quad(v: &[u64], k: usize) -> __m256i {
        let q = &v[4 * k..4 * k + 4];
        // SAFETY: `q` is 32 readable bytes; the load needs no alignment.
        unsafe { _mm256_loadu_si256(q.as_ptr().cast()) }
    }

    /// A bit per way of `tags` (a set that [`fits`]) that holds `block`.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn hits(tags: &[u64], block: u64) -> u32 {
        let b = _mm256_set1_epi64x(block as i64);
        let mut bits = 0;
        for k in 0..tags.len() / 4 {
            let eq = _mm256_cmpeq_epi64(quad(tags, k), b);
            bits |= (_mm256_movemask_pd(_mm256_castsi256_pd(eq)) as u32) << (4 * k);
        }
        bits
    }

    /// The way of `tags` (a set that [`fits`]) holding `block`.
    #[target_feature(enable = "avx2")]
    pub(super) fn way_of(tags: &[u64], block: u64) -> Option<usize> {
        // The usual widths with constant trip counts, unrolled.
        let bits = match tags.len() {
            8 => hits(&tags[..8], block),
            16 => hits(&tags[..16], block),
            _ => hits(tags, block),
        };
        (bits != 0).then(|| bits.trailing_zeros() as usize)
    }

    /// Lanes of `v` with the sign bit flipped: signed compares of them
    /// order the `u64`s unsigned.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn biased(v: &[u64], k: usize) -> __m256i {
        _mm256_xor_si256(quad(v, k), _mm256_set1_epi64x(i64::MIN))
    }

    /// The lower of each lane of `a` and `b`.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn min(a: __m256i, b: __m256i) -> __m256i {
        _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b))
    }

    #[target_feature(enable = "avx2")]
    #[inline]
    fn lowest(stamps: &[u64]) -> usize {
        let mut m = biased(stamps, 0);
        for k in 1..stamps.len() / 4 {
            m = min(m, biased(stamps, k));
        }
        // Every lane to the lowest: swap halves, then neighbours.
        m = min(m, _mm256_permute4x64_epi64::<0b01_00_11_10>(m));
        m = min(m, _mm256_shuffle_epi32::<0b01_00_11_10>(m));
        let mut bits = 0;
        for k in 0..stamps.len() / 4 {
            let eq = _mm256_cmpeq_epi64(biased(stamps, k), m);
            bits |= (_mm256_movemask_pd(_mm256_castsi256_pd(eq)) as u32) << (4 * k);
        }
        bits.trailing_zeros() as usize
    }

    /// The way of `tags` (a set that [`fits`]) holding `block`, else the
    /// first lowest of `stamps` (as long): [`way_of`] then [`first_lowest`]
    /// in one call.
    #[target_feature(enable = "avx2")]
    pub(super) fn search(tags: &[u64], stamps: &[u64], block: u64) -> Result<usize, usize> {
        match tags.len() {
            8 => search_in(&tags[..8], &stamps[..8], block),
            16 => search_in(&tags[..16], &stamps[..16], block),
            _ => search_in(tags, stamps, block),
        }
    }

    #[target_feature(enable = "avx2")]
    #[inline]
    fn search_in(tags: &[u64], stamps: &[u64], block: u64) -> Result<usize, usize> {
        let bits = hits(tags, block);
        if bits != 0 {
            Ok(bits.trailing_zeros() as usize)
        } else {
            Err(lowest(stamps))
        }
    }

    /// [`super::first_lowest`] of `stamps` (a set that [`fits`]).
    #[target_feature(enable = "avx2")]
    pub(super) fn first_lowest(stamps: &[u64]) -> usize {
        match stamps.len() {
            8 => lowest(&stamps[..8]),
            16 => lowest(&stamps[..16]),
            _ => lowest(stamps),
        }
    }
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

/// Where a [`SetAssoc`]'s sets lie, for prefetches
/// ([`SetAssoc::prefetcher`]). It holds the tag array's address, not a
/// borrow, so the cache can change while it is used: a prefetch never
/// faults, and one for an address the array has left is a wasted hint.
#[derive(Debug, Clone, Copy)]
pub struct SetPrefetch {
    tags: *const i8,
    sets: u64,
    mask: Option<u64>,
    set_bytes: usize,
    mid: usize,
}

impl SetPrefetch {
    /// Asks the CPU to bring `block`'s set into its cache (a hint only).
    #[inline]
    pub fn prefetch(&self, block: BlockId) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            let set = match self.mask {
                Some(m) => block & m,
                None => block % self.sets,
            };
            let start = self.tags.wrapping_add(set as usize * self.set_bytes);
            // SAFETY: a prefetch never faults, whatever the address.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(start);
                _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(self.mid));
                _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(self.set_bytes - 1));
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = block;
    }
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
            simd: Self::simd_fits(ways),
            simd_victims: Self::simd_fits(ways) && by_rule!(rule, R => R::RANK_IS_STAMP),
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn simd_fits(ways: usize) -> bool {
        x86::fits(ways) && x86::available()
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn simd_fits(_ways: usize) -> bool {
        false
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
        self.prefetcher().prefetch(block);
    }

    /// [`prefetch`](Self::prefetch) with this cache's geometry read once:
    /// a loop that prefetches for every record keeps it in registers.
    #[inline]
    pub fn prefetcher(&self) -> SetPrefetch {
        let set_bytes = self.ways * std::mem::size_of::<u64>();
        SetPrefetch {
            tags: self.tags.as_ptr().cast(),
            sets: self.sets,
            mask: self.mask,
            set_bytes,
            // The set's first and last bytes, and one line between for a
            // set of up to 128 bytes (three lines when unaligned): a loop
            // over the set's lines cost more than the prefetches (run for
            // every record); longer sets' other lines wait for the search.
            // A set of one line prefetches its last byte twice.
            mid: 64.min(set_bytes - 1),
        }
    }

    /// The slot holding `block`, without touching it.
    #[inline]
    pub fn find(&self, block: BlockId) -> Option<usize> {
        let base = self.set_base(block);
        let tags = &self.tags[base..base + self.ways];
        #[cfg(target_arch = "x86_64")]
        if self.simd {
            // SAFETY: `simd` says the host has AVX2.
            return unsafe { x86::way_of(tags, block) }.map(|w| base + w);
        }
        tags.iter().position(|&t| t == block).map(|w| base + w)
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
        if R::RANK_IS_STAMP {
            // Invalid slots' stamps are 0, below any valid one's: the
            // first of them wins, as in the search below.
            let stamps = &self.stamps[base..base + self.ways];
            #[cfg(target_arch = "x86_64")]
            if self.simd {
                // SAFETY: `simd` says the host has AVX2.
                return base + unsafe { x86::first_lowest(stamps) };
            }
            return base + first_lowest(stamps);
        }
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
    /// only on a miss. Always inlined: the CPU cache levels' lookups call
    /// it once a record or so, and a call's register saves cost as much as
    /// its own work.
    #[inline(always)]
    pub fn probe(&self, block: BlockId) -> Probe {
        #[cfg(target_arch = "x86_64")]
        if self.simd_victims {
            // Tags and stamps in one call: a CPU cache level's lookup.
            let base = self.set_base(block);
            let end = base + self.ways;
            let (tags, stamps) = (&self.tags[base..end], &self.stamps[base..end]);
            // SAFETY: `simd_victims` says the host has AVX2.
            return match unsafe { x86::search(tags, stamps, block) } {
                Ok(w) => Probe::Hit(base + w),
                Err(w) => Probe::Miss { victim: base + w },
            };
        }
        self.probe_by_parts(block)
    }

    /// [`probe`](Self::probe) as a search of the tags, then of the ranks.
    #[inline(never)]
    fn probe_by_parts(&self, block: BlockId) -> Probe {
        match self.find(block) {
            Some(slot) => Probe::Hit(slot),
            None => Probe::Miss {
                victim: self.victim_slot(block),
            },
        }
    }

    /// Places `block` in `slot` (from [`probe`](Self::probe), with no
    /// invalidation since: same `generation`); returns the block it
    /// displaced. Always inlined, as [`probe`](Self::probe) is.
    #[inline(always)]
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
        self.stamps[slot] = 0;
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
        self.stamps[slot] = 0;
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

    /// The victim as the search was written before stamps ranked sets by
    /// themselves: the first invalid slot, else the first lowest rank.
    fn reference_victim(c: &SetAssoc, block: BlockId) -> usize {
        let base = c.set_base(block);
        let mut victim = base;
        let mut lowest = u64::MAX;
        for s in base..base + c.ways {
            if c.tags[s] == INVALID {
                return s;
            }
            let rank = by_rule!(c.rule, R => R::rank(c.stamps[s], c.clock));
            if rank < lowest {
                lowest = rank;
                victim = s;
            }
        }
        victim
    }

    #[test]
    fn every_search_finds_what_a_plain_scan_finds() {
        for ways in [3, 4, 8, 12, 16, 20, 40] {
            for rule in [
                SetRuleKind::Lru,
                SetRuleKind::Fifo,
                SetRuleKind::Srrip,
                SetRuleKind::Random,
            ] {
                let mut vector = SetAssoc::with_rule(ways * 8, ways, rule);
                let mut plain = vector.clone();
                plain.simd = false;
                plain.simd_victims = false;
                let mut x = ways as u64;
                for i in 0..20_000u64 {
                    x = farmem_core::mix64(x);
                    // Three sets' worth of blocks: hits, misses, conflicts.
                    let block = x % (ways as u64 * 8 * 3);
                    for c in [&mut vector, &mut plain] {
                        let want = c.tags.iter().position(|&t| t == block);
                        assert_eq!(c.find(block), want, "{ways} ways, {rule:?}");
                        if i % 5 == 0 {
                            // Holes, so that victims include invalid slots.
                            assert_eq!(c.invalidate(block), want);
                            continue;
                        }
                        match want {
                            Some(s) => {
                                assert_eq!(c.probe(block), Probe::Hit(s));
                                c.touch_slot(s);
                            }
                            None => {
                                let v = c.victim_slot(block);
                                assert_eq!(v, reference_victim(c, block), "{ways} ways, {rule:?}");
                                assert_eq!(c.probe(block), Probe::Miss { victim: v });
                                c.fill_at(v, block);
                            }
                        }
                    }
                }
                assert_eq!(vector.tags, plain.tags);
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn vector_searches_take_ties_and_high_bits_as_a_scan_does() {
        if !x86::available() {
            return;
        }
        let sets: [&[u64]; 5] = [
            &[7, 3, 3, 9],
            &[u64::MAX, 1 << 63, (1 << 63) - 1, 5, 5, 0, 0, 2],
            &[9; 16],
            &[
                (1 << 63) + 1,
                1 << 63,
                1 << 63,
                u64::MAX,
                6,
                6,
                6,
                6,
                1,
                2,
                3,
                4,
            ],
            &[4, 3, 2, 1, 4, 3, 2, 1, 0, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 0],
        ];
        for set in sets {
            assert!(x86::fits(set.len()));
            // SAFETY: the host has AVX2 (checked above).
            let lowest = unsafe { x86::first_lowest(set) };
            assert_eq!(lowest, first_lowest(set), "{set:?}");
            for &b in set.iter().chain(&[8, 1 << 62]) {
                // SAFETY: as above.
                let way = unsafe { x86::way_of(set, b) };
                assert_eq!(way, set.iter().position(|&t| t == b), "{set:?} {b}");
            }
        }
    }
}
