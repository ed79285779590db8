//! The hardware: CPU cache levels, DRAM devices, links, local memory and the
//! page table. Devices and links are traits chosen by `model` name in the
//! config, so new models plug in here without touching the engine.

use farmem_core::PAGE_SIZE;
use farmem_policy::cache::{PolicyConfig, Probe, ReplacementPolicy, SetAssoc};
use farmem_policy::watermark::Watermarks;
use rustc_hash::FxHashMap;

use crate::config::{CacheConfig, Config, LinkConfig};
use crate::stats::{Component, Stats};
use crate::{LINES_PER_PAGE, Time};

use crate::config::{LINK_MODELS, REMOTE_MODELS};

/// Every config key that names an implementation, with the names it takes
/// (`farmem sim --list`).
pub fn models() -> Vec<(&'static str, &'static [&'static str])> {
    use farmem_policy::cache::SetRuleKind;
    vec![
        ("core.model", crate::core::CoreKind::NAMES),
        ("l1d|l2|llc.replacement", SetRuleKind::NAMES),
        ("local.policy", PolicyConfig::NAMES),
        ("link.model", LINK_MODELS),
        ("remote.model", REMOTE_MODELS),
    ]
}

/// Lines before the MRU one a level remembers the slots of.
const RECENT: usize = 3;

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
    /// The lines accessed before the last one, with their slots (all
    /// resident: `forget` drops lines that leave).
    recent: [(u64, usize); RECENT],
    /// The victim slot the last missing lookup chose, valid for a fill of
    /// that line while the policy's generation is unchanged: saves a second
    /// search of the set.
    hint: (u64, usize, u64),
    /// Lines present per page bucket (page number modulo the length): a
    /// page whose bucket is empty has no line here, so back-invalidating it
    /// skips 64 set searches. Most evicted pages are long gone from L1/L2.
    page_lines: Box<[u32]>,
}

/// Page buckets per cache level (a power of two).
const PAGE_BUCKETS: usize = 4096;

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
            recent: [(u64::MAX, 0); RECENT],
            hint: (u64::MAX, 0, 0),
            page_lines: vec![0; PAGE_BUCKETS].into_boxed_slice(),
        }
    }

    /// False when no line of `page` can be here.
    #[inline]
    pub fn may_hold_page(&self, page: u64) -> bool {
        self.page_lines[page_bucket(page * LINES_PER_PAGE)] > 0
    }

    /// Hit: touches the line (dirtying it on a write) and returns true.
    /// The MRU and recent checks are inlined into the engine's loop (most
    /// accesses end there); the set search is a call.
    #[inline(always)]
    pub fn lookup(&mut self, line: u64, write: bool) -> bool {
        if line == self.last_line {
            self.dirty[self.last_slot] |= write;
            self.hits += 1;
            return true;
        }
        // Lines a few accesses back (interleaved arrays): known slot, one touch.
        for k in 0..RECENT {
            if self.recent[k].0 == line {
                let s = self.recent[k].1;
                self.recent[k] = (self.last_line, self.last_slot);
                return self.hit(line, s, write);
            }
        }
        self.lookup_set(line, write)
    }

    #[inline(never)]
    fn lookup_set(&mut self, line: u64, write: bool) -> bool {
        match self.policy.find(line) {
            Some(s) => {
                self.remember();
                self.hit(line, s, write)
            }
            None => {
                let victim = self.policy.victim_slot(line);
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
        self.policy.touch_slot(s);
        self.dirty[s] |= write;
        self.hits += 1;
        true
    }

    /// Pushes the current MRU line into the recent ring before it changes.
    #[inline]
    fn remember(&mut self) {
        if self.last_line != u64::MAX {
            self.recent.copy_within(0..RECENT - 1, 1);
            self.recent[0] = (self.last_line, self.last_slot);
        }
    }

    /// Forgets `line` as MRU or recent (it left the cache).
    #[inline]
    fn forget(&mut self, line: u64) {
        if line == self.last_line {
            self.last_line = u64::MAX;
        }
        for r in &mut self.recent {
            if r.0 == line {
                r.0 = u64::MAX;
            }
        }
    }

    /// Places a line that is not present; returns a dirty victim.
    #[inline]
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
        self.remember();
        self.last_line = line;
        self.last_slot = slot;
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
                // (`recent` keeps valid: the line stays in its slot.)
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
            l1: (0..n).map(|_| CacheLevel::new(&cfg.l1d, f)).collect(),
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

/// A memory device: DRAM behind a bus.
pub trait Memory: Send {
    /// Reads or writes `bytes` starting at `now`; returns when the data is
    /// ready (read) or written (write). `translate` adds the address
    /// translation lookup (one more DRAM access) before the access.
    fn access(&mut self, now: Time, bytes: u64, translate: bool) -> Time;
    /// Occupies the bus for `bytes` without anyone waiting for it (a page
    /// written into local memory while the line is forwarded).
    fn occupy(&mut self, now: Time, bytes: u64);
    fn report(&self, prefix: &str, sim_time_ns: f64, out: &mut Stats);
}

/// DRAM: fixed latency plus bus serialization, FIFO on the bus.
#[derive(Debug, Clone)]
pub struct Dram {
    latency: Time,
    ns_per_byte: f64,
    busy_until: Time,
    busy: f64,
    accesses: u64,
    bytes: u64,
}

impl Dram {
    pub fn new(latency_ns: f64, gbps: f64) -> Self {
        Self {
            latency: latency_ns,
            ns_per_byte: 1.0 / gbps,
            busy_until: 0.0,
            busy: 0.0,
            accesses: 0,
            bytes: 0,
        }
    }
}

impl Memory for Dram {
    #[inline]
    fn access(&mut self, now: Time, bytes: u64, translate: bool) -> Time {
        let t = if translate { now + self.latency } else { now };
        let start = t.max(self.busy_until);
        let xfer = bytes as f64 * self.ns_per_byte;
        self.busy_until = start + xfer;
        self.busy += xfer;
        self.accesses += 1;
        self.bytes += bytes;
        start + xfer + self.latency
    }
    #[inline]
    fn occupy(&mut self, now: Time, bytes: u64) {
        let start = now.max(self.busy_until);
        let xfer = bytes as f64 * self.ns_per_byte;
        self.busy_until = start + xfer;
        self.busy += xfer;
        self.bytes += bytes;
    }
    fn report(&self, prefix: &str, t: f64, out: &mut Stats) {
        out.put(prefix, "accesses", self.accesses as f64);
        out.put(prefix, "bytes", self.bytes as f64);
        out.put(prefix, "busy_ns", self.busy);
        out.put(prefix, "utilization", self.busy / t.max(1e-9));
    }
}

/// Link directions: toward the memory node (requests, writebacks) and
/// toward the compute node (data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Up = 0,
    Down = 1,
}

/// A network link between the compute node and one memory node.
pub trait Link: Send {
    /// Sends `bytes` (payload and header) at `now`; returns the arrival time.
    fn send(&mut self, dir: Dir, now: Time, bytes: u64) -> Time;
    /// Accounts `bytes` carried from `start` by a transfer the caller
    /// scheduled itself (DaeMon's partitioned link): utilization and byte
    /// counters only, the FIFO order is untouched.
    fn record(&mut self, dir: Dir, start: Time, bytes: u64);
    /// Fraction of `sim_time_ns` the direction was busy.
    fn utilization(&self, dir: Dir, sim_time_ns: f64) -> f64;
    fn report(&self, prefix: &str, sim_time_ns: f64, out: &mut Stats);
}

const MAX_BINS: usize = 1 << 24;

/// How much longer a transfer starting at `t` takes on a link carrying
/// `link.background` traffic of other nodes (alternating periods, quiet
/// first).
#[inline]
pub fn background_slowdown(share: f64, period_ns: f64, t: Time) -> f64 {
    if share > 0.0 && (t / period_ns) as u64 % 2 == 1 {
        1.0 / (1.0 - share)
    } else {
        1.0
    }
}

/// FIFO serialization at `bw` plus a fixed switch latency per traversal;
/// busy time is also binned per sampling interval.
#[derive(Debug, Clone)]
pub struct FifoLink {
    ns_per_byte: f64,
    switch: Time,
    interval: f64,
    busy_until: [Time; 2],
    busy: [f64; 2],
    bytes: [u64; 2],
    packets: [u64; 2],
    bins: [Vec<f32>; 2],
    background: f64,
    background_period_ns: f64,
}

impl FifoLink {
    pub fn new(cfg: &LinkConfig) -> Self {
        Self {
            background: cfg.background,
            background_period_ns: cfg.background_period_ns,
            ns_per_byte: 1.0 / (cfg.base_gbps * cfg.bw_factor),
            switch: cfg.switch_ns,
            interval: cfg.interval_ns,
            busy_until: [0.0; 2],
            busy: [0.0; 2],
            bytes: [0; 2],
            packets: [0; 2],
            bins: [Vec::new(), Vec::new()],
        }
    }

    fn bin(&mut self, d: usize, mut start: f64, end: f64) {
        while start < end {
            let i = (start / self.interval) as usize;
            if i >= MAX_BINS {
                // Past 16 M intervals the peak is already well sampled.
                return;
            }
            let stop = ((i + 1) as f64 * self.interval).min(end);
            if self.bins[d].len() <= i {
                self.bins[d].resize(i + 1, 0.0);
            }
            self.bins[d][i] += (stop - start) as f32;
            start = stop;
        }
    }
}

impl Link for FifoLink {
    #[inline]
    fn send(&mut self, dir: Dir, now: Time, bytes: u64) -> Time {
        let d = dir as usize;
        let start = now.max(self.busy_until[d]);
        let xfer = bytes as f64
            * self.ns_per_byte
            * background_slowdown(self.background, self.background_period_ns, start);
        let end = start + xfer;
        self.busy_until[d] = end;
        self.busy[d] += xfer;
        self.bytes[d] += bytes;
        self.packets[d] += 1;
        self.bin(d, start, end);
        end + self.switch
    }
    fn record(&mut self, dir: Dir, start: Time, bytes: u64) {
        let d = dir as usize;
        let xfer = bytes as f64 * self.ns_per_byte;
        self.busy[d] += xfer;
        self.bytes[d] += bytes;
        self.packets[d] += 1;
        self.bin(d, start, start + xfer);
    }
    fn utilization(&self, dir: Dir, t: f64) -> f64 {
        self.busy[dir as usize] / t.max(1e-9)
    }
    fn report(&self, prefix: &str, t: f64, out: &mut Stats) {
        for (d, name) in [(0, "up"), (1, "down")] {
            out.put(prefix, &format!("{name}.bytes"), self.bytes[d] as f64);
            out.put(prefix, &format!("{name}.packets"), self.packets[d] as f64);
            out.put(prefix, &format!("{name}.busy_ns"), self.busy[d]);
            out.put(
                prefix,
                &format!("{name}.utilization"),
                self.busy[d] / t.max(1e-9),
            );
            let peak = self.bins[d].iter().copied().fold(0.0f32, f32::max) as f64;
            out.put(
                prefix,
                &format!("{name}.peak_interval_utilization"),
                peak / self.interval,
            );
        }
    }
}

pub fn build_link(cfg: &Config) -> Box<dyn Link> {
    // check_models guarantees the name.
    Box::new(FifoLink::new(&cfg.link))
}

pub fn build_memory(latency_ns: f64, gbps: f64) -> Box<dyn Memory> {
    Box::new(Dram::new(latency_ns, gbps))
}

/// A touched page: its dense id is its index in [`PageTable::pages`].
#[derive(Debug, Clone, Copy)]
pub struct PageInfo {
    pub page: u64,
    pub node: u16,
    /// Resident in local memory (possibly still arriving).
    pub resident: bool,
    pub dirty: bool,
    /// When the page's data is in local memory.
    pub ready_at: Time,
}

/// Every page the workload touched, with its home node and local state.
/// Dense ids keep the per-page state in an array.
///
/// A page's id is found by direct index, not hashing: pages are grouped in
/// chunks of [`CHUNK_PAGES`] with a slot each, and a small direct-mapped
/// table of recent chunks finds a chunk's slots; only a chunk missing from
/// it is looked up in a hash map. Workloads touch dense ranges, so nearly
/// every lookup ends in the two arrays (a hash map per page was the
/// simulator's fourth-largest cost).
#[derive(Debug, Clone)]
pub struct PageTable {
    /// First page of a chunk (`page >> CHUNK_SHIFT`) to its first slot.
    chunks: FxHashMap<u64, u32>,
    /// Recent chunks by `chunk % RECENT_CHUNKS`: (chunk, first slot).
    recent: Box<[(u64, u32)]>,
    /// Dense id per slot, [`NO_ID`] for a page not touched yet.
    slots: Vec<u32>,
    pub pages: Vec<PageInfo>,
    nodes: u16,
    random: bool,
    seed: u64,
    last: (u64, u32),
}

/// Pages per chunk of the page table's direct index: small enough that a
/// sparse trace's chunks cost little (256 B each), large enough that a
/// dense one's recent chunks cover its footprint.
const CHUNK_SHIFT: u32 = 6;
const CHUNK_PAGES: u64 = 1 << CHUNK_SHIFT;
/// Entries of the recent-chunk table (a power of two): 64 MiB of pages.
const RECENT_CHUNKS: usize = 256;
const NO_ID: u32 = u32::MAX;

impl PageTable {
    pub fn new(cfg: &Config) -> Self {
        Self {
            chunks: FxHashMap::default(),
            recent: vec![(u64::MAX, 0); RECENT_CHUNKS].into_boxed_slice(),
            slots: Vec::new(),
            pages: Vec::new(),
            nodes: cfg.remote.nodes as u16,
            random: cfg.remote.placement == "random",
            seed: cfg.remote.seed,
            last: (u64::MAX, 0),
        }
    }

    /// The dense id of `page`, registering it on first touch.
    #[inline]
    pub fn id(&mut self, page: u64) -> u32 {
        if self.last.0 == page {
            return self.last.1;
        }
        let chunk = page >> CHUNK_SHIFT;
        let r = self.recent[chunk as usize % RECENT_CHUNKS];
        let first = if r.0 == chunk { r.1 } else { self.chunk(chunk) };
        let slot = first as usize + (page % CHUNK_PAGES) as usize;
        let mut id = self.slots[slot];
        if id == NO_ID {
            id = self.register(page);
            self.slots[slot] = id;
        }
        self.last = (page, id);
        id
    }

    /// The first slot of `chunk`, allocating its slots on first touch, and
    /// remembered as recent.
    #[cold]
    fn chunk(&mut self, chunk: u64) -> u32 {
        let next = self.slots.len() as u32;
        let first = *self.chunks.entry(chunk).or_insert(next);
        if first == next {
            self.slots
                .resize(self.slots.len() + CHUNK_PAGES as usize, NO_ID);
        }
        self.recent[chunk as usize % RECENT_CHUNKS] = (chunk, first);
        first
    }

    /// A new page's id and home node.
    fn register(&mut self, page: u64) -> u32 {
        let id = self.pages.len() as u32;
        let node = if self.random {
            (splitmix(page ^ self.seed) % self.nodes as u64) as u16
        } else {
            (id % self.nodes as u32) as u16
        };
        self.pages.push(PageInfo {
            page,
            node,
            resident: false,
            dirty: false,
            ready_at: 0.0,
        });
        id
    }

    pub fn footprint_bytes(&self) -> u64 {
        self.pages.len() as u64 * PAGE_SIZE
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Local memory as an inclusive page cache of remote memory: which pages
/// are resident is the replacement policy's business (farmem-policy), their
/// state is in the page table.
pub struct LocalMemory {
    pub policy: Box<dyn ReplacementPolicy>,
    pub capacity_pages: usize,
    /// Evict in rounds between two marks, as the runtime does; None: one
    /// victim per install, when full.
    pub watermarks: Option<Watermarks>,
    pub evictions: u64,
    pub dirty_evictions: u64,
}

impl LocalMemory {
    /// `bytes` of local memory, at least one page (a page must land somewhere).
    pub fn new(policy: PolicyConfig, watermarks: Option<Watermarks>, bytes: u64) -> Self {
        let capacity_pages = (bytes / PAGE_SIZE).max(1) as usize;
        Self {
            // Capacity ≥ 1, so building cannot fail.
            policy: policy
                .build(capacity_pages)
                .unwrap_or_else(|_| Box::new(farmem_policy::cache::Lru::new(capacity_pages))),
            capacity_pages,
            watermarks,
            evictions: 0,
            dirty_evictions: 0,
        }
    }
}

impl Component for LocalMemory {
    fn report(&self, prefix: &str, _t: f64, out: &mut Stats) {
        out.put(prefix, "capacity_pages", self.capacity_pages as f64);
        out.put(prefix, "evictions", self.evictions as f64);
        out.put(prefix, "dirty_evictions", self.dirty_evictions as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_ids_are_dense_in_first_touch_order() {
        let mut t = PageTable::new(&Config::preset("daemon").unwrap());
        // Dense, repeated, far apart (chunks colliding in the recent
        // table), and the highest page numbers.
        let pages: Vec<u64> = [
            5,
            6,
            5,
            1 << 40,
            4,
            6 + 256 * 64,
            6,
            u64::MAX >> 12,
            1 << 40,
        ]
        .into_iter()
        .chain((0..3000).map(|i| (i * 7919) % 5000))
        .collect();
        let mut seen: Vec<u64> = Vec::new();
        for &p in &pages {
            let want = match seen.iter().position(|&q| q == p) {
                Some(i) => i,
                None => {
                    seen.push(p);
                    seen.len() - 1
                }
            };
            assert_eq!(t.id(p) as usize, want, "page {p}");
            assert_eq!(t.pages[want].page, p);
        }
        assert_eq!(t.pages.len(), seen.len());
    }

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
