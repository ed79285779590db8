//! UniMem's and Kona's local caches as schemes (seed 002 §3–4, seed 001 §4.3).
//!
//! UniMem's simulator (§4.1) replays the CPU cache misses of a workload
//! through a local cache and prices each by the tier that served it (Table
//! 1): host memory 80 ns, device-attached memory 150 ns, a remote fetch
//! 2 µs (512 B) to 4 µs (4 KiB). These schemes do the same on our engine's
//! LLC misses, with fixed latencies (no link queueing) and loads blocking
//! (the `unimem` preset), and report the paper's AMAT (over LLC misses, CPU
//! cache time excluded) as the run's `amat_miss_ns`.
//!
//! | scheme | remote mechanism | local cache |
//! |---|---|---|
//! | `kona` | fake physical memory: `translation_ns` on every device access | 4-way set-associative, 4 KiB blocks, device memory |
//! | `kona-pc` | fake physical memory | Linux's active/inactive lists (active ≤ inactive), 4 KiB, device memory |
//! | `srrb-4sc` | Shadow-Region (no translation) | as `kona` |
//! | `unimem-nopromote` | Shadow-Region | Filter-Cache of `block_bytes` blocks on all of local memory |
//! | `unimem` | Shadow-Region | host page cache (`host_share` of local memory, Linux lists) + Filter-Cache on the rest, fully-used page promotion |
//!
//! The policies are farmem-policy's (`SetAssocLru`, `TwoQ`, `FilterCache`,
//! `Promoter`); this module only owns the data-side state (dirty bits,
//! which tier holds what) and the prices.
//!
//! Choices the paper leaves open, ours:
//! * A miss costs the fetch and then the device access that serves the line
//!   (plus translation under Kona).
//! * Dirty state comes from dirty LLC evictions (the CPU caches hold the
//!   newest data until then). A dirty block leaving the cache is written
//!   back whole; a dirty line whose block is not cached goes remote alone.
//! * The local cache is not inclusive of the CPU caches (the paper replays
//!   one fixed miss stream for every system).
//! * `unimem-nopromote` gives all local memory to the Filter-Cache: the
//!   30/70 host/device split is stated for promotion only (§4.1).
//! * Promotion: every `device blocks` device accesses (one scan interval)
//!   the candidates are ranked (`Promoter`) and the fully-used ones move to
//!   host memory, at most `promotion.batch_pages` at once. A candidate is a
//!   page with an active sub-page that was accessed in this interval and
//!   the previous one: our stand-in for "hot in the process page cache"
//!   (§3.3), since line-granular misses make a streamed block active within
//!   nanoseconds. A batch is charged `promote_batch_ns` × pages /
//!   `batch_pages` (2 ms for the paper's 512), added to the access that
//!   triggered it. Sub-pages missing from a promoted page are fetched
//!   (counted as remote bytes). Host memory is a page cache fed only by
//!   promotion; to make room, a promotion displaces only host pages that
//!   saw no access during the whole last interval (they are dropped,
//!   written back if dirty, not demoted), so it never evicts a page in use.

use farmem_core::{CACHE_LINE, PAGE_SIZE};
use farmem_policy::cache::{FilterCache, FilterConfig, ReplacementPolicy, SetAssocLru, TwoQ};
use farmem_policy::promote::Promoter;
use rustc_hash::FxHashSet;

use super::{Scheme, SchemeEntry};
use crate::config::Config;
use crate::machine::Machine;
use crate::stats::Stats;
use crate::{LINES_PER_PAGE, Time};

pub const SCHEMES: &[SchemeEntry] = &[
    (
        "kona",
        "Kona: 4-way set-associative 4 KiB device cache, fake-physical translation",
        || Box::new(UniMemScheme::new(System::Kona)),
    ),
    (
        "kona-pc",
        "Kona with Linux's active/inactive page lists as its device cache",
        || Box::new(UniMemScheme::new(System::KonaPc)),
    ),
    (
        "srrb-4sc",
        "Shadow-Region (no translation) with Kona's 4-way device cache",
        || Box::new(UniMemScheme::new(System::Srrb4sc)),
    ),
    (
        "unimem-nopromote",
        "Shadow-Region with UniMem's Filter-Cache on all local memory",
        || Box::new(UniMemScheme::new(System::NoPromote)),
    ),
    (
        "unimem",
        "UniMem: host page cache + Filter-Cache, fully-used page promotion",
        || Box::new(UniMemScheme::new(System::UniMem)),
    ),
];

pub use crate::config::UniMemConfig;

/// Which of the paper's systems (§4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    Kona,
    KonaPc,
    Srrb4sc,
    NoPromote,
    UniMem,
}

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Kona => "kona",
            System::KonaPc => "kona-pc",
            System::Srrb4sc => "srrb-4sc",
            System::NoPromote => "unimem-nopromote",
            System::UniMem => "unimem",
        }
    }
    fn translates(self) -> bool {
        matches!(self, System::Kona | System::KonaPc)
    }
    fn filter(self) -> bool {
        matches!(self, System::NoPromote | System::UniMem)
    }
}

/// Counts the report prints.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    misses: u64,
    host_hits: u64,
    device_hits: u64,
    fetches: u64,
    device_evictions: u64,
    dirty_block_writebacks: u64,
    line_writebacks: u64,
    host_evictions: u64,
    dirty_page_writebacks: u64,
    promoted_pages: u64,
    promotion_batches: u64,
    promotion_fetches: u64,
    promote_ns: f64,
    latency_sum: f64,
}

/// The device-attached cache: the typed Filter-Cache (promotion reads its
/// lists) or any other policy.
enum Device {
    Filter(FilterCache),
    Other(Box<dyn ReplacementPolicy>),
}

impl Device {
    fn policy(&mut self) -> &mut dyn ReplacementPolicy {
        match self {
            Device::Filter(f) => f,
            Device::Other(p) => &mut **p,
        }
    }
    fn policy_ref(&self) -> &dyn ReplacementPolicy {
        match self {
            Device::Filter(f) => f,
            Device::Other(p) => &**p,
        }
    }
}

/// The caches, built on the first miss (local memory is sized late, from
/// the footprint).
struct Tiers {
    device: Device,
    host: Option<TwoQ>,
    promoter: Option<Promoter>,
    /// Device accesses between promotion scans.
    scan_every: u64,
    since_scan: u64,
    /// Pages with a device access in the current and the previous scan
    /// interval: a page is hot when it is in both (module docs).
    seen_now: FxHashSet<u64>,
    seen_prev: FxHashSet<u64>,
}

pub struct UniMemScheme {
    system: System,
    cfg: UniMemConfig,
    device_ns: f64,
    /// log2(block bytes / 64): line → block.
    block_shift: u32,
    block_bytes: u64,
    tiers: Option<Tiers>,
    dirty_blocks: FxHashSet<u64>,
    dirty_pages: FxHashSet<u64>,
    /// Host pages accessed since the last promotion scan.
    host_referenced: FxHashSet<u64>,
    n: Counts,
}

impl UniMemScheme {
    pub fn new(system: System) -> Self {
        let mut s = Self {
            system,
            cfg: UniMemConfig::default(),
            device_ns: 150.0,
            block_shift: 0,
            block_bytes: 0,
            tiers: None,
            dirty_blocks: FxHashSet::default(),
            dirty_pages: FxHashSet::default(),
            host_referenced: FxHashSet::default(),
            n: Counts::default(),
        };
        s.set_block();
        s
    }

    fn set_block(&mut self) {
        self.block_bytes = if self.system.filter() {
            self.cfg.block_bytes
        } else {
            PAGE_SIZE // Kona caches whole pages (seed 001 §4.3).
        };
        self.block_shift = (self.block_bytes / CACHE_LINE).trailing_zeros();
    }

    fn build_tiers(&self, local_bytes: u64) -> Tiers {
        let (host_bytes, device_bytes) = if self.system == System::UniMem {
            let h = self.cfg.host_share.of(local_bytes) / PAGE_SIZE * PAGE_SIZE;
            (h, local_bytes - h)
        } else {
            (0, local_bytes)
        };
        let blocks = (device_bytes / self.block_bytes).max(1) as usize;
        let device = if self.system.filter() {
            let fc = FilterConfig {
                pairs: self
                    .cfg
                    .filter
                    .pairs
                    .min(u32::try_from(blocks).unwrap_or(u32::MAX)),
                ..self.cfg.filter
            };
            // Validated in config and pairs ≤ blocks: cannot fail; a plain
            // LRU keeps the run going if it ever does.
            match FilterCache::new(blocks, fc) {
                Ok(f) => Device::Filter(f),
                Err(_) => Device::Other(Box::new(farmem_policy::cache::Lru::new(blocks))),
            }
        } else if self.system == System::KonaPc {
            Device::Other(Box::new(TwoQ::new(blocks)))
        } else {
            Device::Other(Box::new(SetAssocLru::new(blocks, 4)))
        };
        let host_pages = (host_bytes / PAGE_SIZE) as usize;
        let promoter = (host_pages > 0 && matches!(device, Device::Filter(_)))
            .then(|| Promoter::new(self.cfg.promotion()).ok())
            .flatten();
        Tiers {
            device,
            host: (host_pages > 0).then(|| TwoQ::new(host_pages)),
            promoter,
            scan_every: blocks as u64,
            since_scan: 0,
            seen_now: FxHashSet::default(),
            seen_prev: FxHashSet::default(),
        }
    }

    /// A block leaves the device cache: written back if dirty.
    fn device_victim(&mut self, m: &mut Machine, now: Time, block: u64) {
        self.n.device_evictions += 1;
        if self.dirty_blocks.remove(&block) {
            self.n.dirty_block_writebacks += 1;
            let node = self.node_of_block(m, block);
            m.remote_write(node, now, self.block_bytes);
        }
    }

    fn node_of_block(&self, m: &mut Machine, block: u64) -> u16 {
        let page = (block << self.block_shift) / LINES_PER_PAGE;
        let id = m.pages.id(page);
        m.node_of(id)
    }

    /// Fetches `block` into the device cache (evicting a batch when full);
    /// returns the fetch latency.
    fn fetch(&mut self, m: &mut Machine, now: Time, block: u64) -> f64 {
        // Fixed latency by block size: the link is not modelled (module docs).
        m.counters.remote_bytes_read += self.block_bytes;
        m.counters.remote_reads += 1;
        let mut victims = Vec::new();
        if let Some(t) = self.tiers.as_mut() {
            if let Device::Filter(f) = &mut t.device
                && f.len() >= f.capacity()
            {
                // Batched eviction ahead of demand (§3.2), at most 1/32 of
                // the cache so a small cache is not emptied by one batch.
                let n = f.batch().min((f.capacity() / 32).max(1));
                victims = f.evict_batch(n, now as u64);
            }
            victims.extend(t.device.policy().insert(block, now as u64));
        }
        for v in victims {
            self.device_victim(m, now, v);
        }
        self.cfg.fetch_ns(self.block_bytes)
    }

    /// Promotes fully-used pages when a scan is due; returns the time charged.
    fn maybe_promote(&mut self, m: &mut Machine, now: Time, page: u64) -> f64 {
        let Some(t) = self.tiers.as_mut() else {
            return 0.0;
        };
        let (Some(pr), Device::Filter(f), Some(host)) = (&t.promoter, &mut t.device, &mut t.host)
        else {
            return 0.0;
        };
        t.seen_now.insert(page);
        t.since_scan += 1;
        if t.since_scan < t.scan_every {
            return 0.0;
        }
        t.since_scan = 0;
        let (now_seen, prev_seen) = (&t.seen_now, &t.seen_prev);
        let hot = pr
            .pages_of(f.active_blocks())
            .into_iter()
            .filter(|p| now_seen.contains(p) && prev_seen.contains(p));
        let ranked = pr.rank(&*f, hot);
        t.seen_prev = std::mem::take(&mut t.seen_now);
        let want = ranked.len().min(pr.config().batch_pages as usize);
        // Room: free host pages, then host pages nobody touched during the
        // whole last interval (inactive tail first), so a promotion never
        // displaces a page in use (module docs).
        let free = host.capacity().saturating_sub(host.len());
        let mut host_victims = Vec::new();
        if want > free {
            let mut cold: Vec<u64> = host.inactive();
            cold.reverse();
            let mut act = host.active();
            act.reverse();
            cold.extend(act);
            for p in cold
                .into_iter()
                .filter(|p| !self.host_referenced.contains(p))
                .take(want - free)
            {
                host.remove(p);
                host_victims.push(p);
            }
        }
        self.host_referenced.clear();
        let room = free + host_victims.len();
        let pages: Vec<u64> = ranked.iter().take(want.min(room)).map(|s| s.page).collect();
        let mut missing = 0u64;
        let mut dirty_pages = Vec::new();
        for &page in &pages {
            let mut dirty = false;
            if let Some(blocks) = pr.blocks_of(page) {
                for b in blocks {
                    if f.remove(b) {
                        dirty |= self.dirty_blocks.remove(&b);
                    } else {
                        missing += 1;
                    }
                }
            }
            if dirty {
                dirty_pages.push(page);
            }
            host_victims.extend(host.insert(page, now as u64));
        }
        let n_pages = pages.len() as u64;
        let batch_pages = f64::from(pr.config().batch_pages);
        for v in host_victims {
            self.n.host_evictions += 1;
            if self.dirty_pages.remove(&v) {
                self.n.dirty_page_writebacks += 1;
                let id = m.pages.id(v);
                m.remote_write(m.node_of(id), now, PAGE_SIZE);
            }
        }
        self.dirty_pages.extend(dirty_pages);
        // A page must be whole in host memory: its absent sub-pages come
        // from remote memory as part of the migration.
        m.counters.remote_bytes_read += missing * self.block_bytes;
        m.counters.remote_reads += missing;
        self.n.promotion_fetches += missing;
        self.n.promoted_pages += n_pages;
        self.n.promotion_batches += u64::from(n_pages > 0);
        let cost = self.cfg.promote_batch_ns * n_pages as f64 / batch_pages;
        self.n.promote_ns += cost;
        cost
    }
}

impl Scheme for UniMemScheme {
    fn name(&self) -> &'static str {
        self.system.name()
    }

    fn configure(&mut self, cfg: &Config) {
        self.cfg = cfg.unimem.clone();
        self.device_ns = cfg.local.latency_ns;
        self.set_block();
    }

    fn read_line(&mut self, m: &mut Machine, now: Time, line: u64, _write: bool) -> Time {
        let page = line / LINES_PER_PAGE;
        m.pages.id(page); // registers the page for the footprint
        if self.tiers.is_none() {
            let bytes = m.local.capacity_pages as u64 * PAGE_SIZE;
            self.tiers = Some(self.build_tiers(bytes));
        }
        self.n.misses += 1;
        let block = line >> self.block_shift;
        let translation = if self.system.translates() {
            self.cfg.translation_ns
        } else {
            0.0
        };
        let Some(t) = self.tiers.as_mut() else {
            return now;
        };
        if let Some(h) = t.host.as_mut()
            && h.contains(page)
        {
            h.touch(page, now as u64);
            self.host_referenced.insert(page);
            self.n.host_hits += 1;
            m.counters.local_hits += 1;
            self.n.latency_sum += self.cfg.host_ns;
            return now + self.cfg.host_ns;
        }
        let dev = t.device.policy();
        let mut lat = if dev.contains(block) {
            dev.touch(block, now as u64);
            self.n.device_hits += 1;
            m.counters.local_hits += 1;
            self.device_ns + translation
        } else {
            self.n.fetches += 1;
            m.counters.local_misses += 1;
            self.fetch(m, now, block) + self.device_ns + translation
        };
        lat += self.maybe_promote(m, now, page);
        self.n.latency_sum += lat;
        now + lat
    }

    fn write_back(&mut self, m: &mut Machine, now: Time, line: u64) {
        let page = line / LINES_PER_PAGE;
        let id = m.pages.id(page);
        let block = line >> self.block_shift;
        if let Some(t) = self.tiers.as_mut() {
            if t.host.as_ref().is_some_and(|h| h.contains(page)) {
                self.dirty_pages.insert(page);
                return;
            }
            if t.device.policy_ref().contains(block) {
                self.dirty_blocks.insert(block);
                return;
            }
        }
        self.n.line_writebacks += 1;
        m.remote_write(m.node_of(id), now, CACHE_LINE);
    }

    fn amat_miss_ns(&self) -> Option<f64> {
        Some(self.n.latency_sum / self.n.misses.max(1) as f64)
    }

    fn report(&self, out: &mut Stats) {
        let p = self.name();
        let n = &self.n;
        for (k, v) in [
            ("misses", n.misses as f64),
            ("host_hits", n.host_hits as f64),
            ("device_hits", n.device_hits as f64),
            ("fetches", n.fetches as f64),
            ("device_evictions", n.device_evictions as f64),
            ("dirty_block_writebacks", n.dirty_block_writebacks as f64),
            ("line_writebacks", n.line_writebacks as f64),
            ("host_evictions", n.host_evictions as f64),
            ("dirty_page_writebacks", n.dirty_page_writebacks as f64),
            ("promoted_pages", n.promoted_pages as f64),
            ("promotion_batches", n.promotion_batches as f64),
            ("promotion_fetches", n.promotion_fetches as f64),
            ("promote_ns", n.promote_ns),
            ("block_bytes", self.block_bytes as f64),
            ("amat_ns", n.latency_sum / n.misses.max(1) as f64),
        ] {
            out.put(p, k, v);
        }
        if let Some(t) = &self.tiers {
            out.put(p, "device_blocks", t.device.policy_ref().capacity() as f64);
            out.put(
                p,
                "host_pages",
                t.host.as_ref().map_or(0, |h| h.capacity()) as f64,
            );
        }
    }
}
