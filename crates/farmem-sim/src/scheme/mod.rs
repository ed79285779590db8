//! Data-movement schemes: what happens when a line misses the LLC and when a
//! dirty line leaves it. The engine only calls [`Scheme`]; a new scheme
//! (DaeMon's engines, UniMem's caches) is a new implementation plus one
//! entry in its module's `SCHEMES`.

pub mod daemon;
pub mod farmem;
pub mod unimem;

use farmem_core::{CACHE_LINE, PAGE_SIZE};

use crate::config::Config;
use crate::error::SimError;
use crate::machine::{Evicted, Machine};
use crate::stats::Stats;
use crate::{LINES_PER_PAGE, Time};

/// A data-movement scheme between local and remote memory.
pub trait Scheme: Send {
    fn name(&self) -> &'static str;
    /// Whether the scheme caches pages in local memory (sizes it; without,
    /// local memory is a single page that never holds anything).
    fn uses_local_memory(&self) -> bool {
        true
    }
    /// Whether the scheme sees every access before the CPU caches, as a
    /// runtime serving page faults does ([`Scheme::access`]).
    fn observes_accesses(&self) -> bool {
        false
    }
    /// An access to `line` at `now`, before the CPU caches (only if
    /// [`Scheme::observes_accesses`]): returns when it may proceed (a page
    /// fault delays it).
    fn access(&mut self, _m: &mut Machine, now: Time, _line: u64, _write: bool) -> Time {
        now
    }
    /// The workload's footprint in bytes, before its first access.
    fn begin(&mut self, _footprint: u64) {}
    /// A demand miss for `line` leaving the LLC at `now` (`write`: a store,
    /// write-allocate). Returns when the line reaches the LLC.
    fn read_line(&mut self, m: &mut Machine, now: Time, line: u64, write: bool) -> Time;
    /// A dirty line evicted from the LLC at `now`.
    fn write_back(&mut self, m: &mut Machine, now: Time, line: u64);
    /// Scheme-specific statistics.
    fn report(&self, _out: &mut Stats) {}
    /// The scheme's own mean latency of an LLC miss, when it prices misses
    /// itself (UniMem's model: CPU cache time excluded); `None` keeps the
    /// engine's measure, from issue to completion.
    fn amat_miss_ns(&self) -> Option<f64> {
        None
    }
    /// Reads the scheme's settings (called once, before any access).
    fn configure(&mut self, _cfg: &Config) {}
    /// Whether the scheme needs the trace's page contents.
    fn wants_contents(&self) -> bool {
        false
    }
    /// The initial content of the page at `addr` (only if wanted).
    fn page_contents(&mut self, _addr: u64, _data: &[u8]) {}
}

/// A scheme's name, one-line description and constructor.
pub type SchemeEntry = (&'static str, &'static str, fn() -> Box<dyn Scheme>);

/// Every scheme, baselines first, then each paper's own.
pub fn all() -> impl Iterator<Item = &'static SchemeEntry> {
    BASELINES
        .iter()
        .chain(daemon::SCHEMES)
        .chain(unimem::SCHEMES)
        .chain(farmem::SCHEMES)
}

/// DaeMon §2.2's baselines.
pub const BASELINES: &[SchemeEntry] = &[
    (
        "local",
        "all data in local memory (the monolithic baseline)",
        || Box::new(Local),
    ),
    ("remote", "pages move to local memory over the link", || {
        Box::new(PageMoves::new(PageMode::Remote))
    }),
    (
        "cache-line",
        "lines move from remote memory straight to the LLC",
        || Box::new(CacheLine),
    ),
    (
        "page-free",
        "a remote miss costs one line access; its page moves for free",
        || Box::new(PageMoves::new(PageMode::Free)),
    ),
    (
        "cache-line+page",
        "both the line and its page are requested; the first to arrive serves",
        || Box::new(PageMoves::new(PageMode::Both)),
    ),
];

pub fn build(name: &str) -> Result<Box<dyn Scheme>, SimError> {
    all()
        .find(|s| s.0 == name)
        .map(|s| (s.2)())
        .ok_or_else(|| SimError::UnknownScheme {
            name: name.to_string(),
            known: all().map(|s| s.0).collect::<Vec<_>>().join(", "),
        })
}

/// Everything is local: DRAM latency and bus, never a link.
pub struct Local;

impl Scheme for Local {
    fn name(&self) -> &'static str {
        "local"
    }
    fn uses_local_memory(&self) -> bool {
        false
    }
    #[inline]
    fn read_line(&mut self, m: &mut Machine, now: Time, line: u64, _write: bool) -> Time {
        m.pages.id(line / LINES_PER_PAGE);
        m.counters.local_hits += 1;
        m.local_dram.access(now, CACHE_LINE, false)
    }
    fn write_back(&mut self, m: &mut Machine, now: Time, _line: u64) {
        m.local_dram.occupy(now, CACHE_LINE);
    }
}

/// Lines only, to the LLC; local memory unused.
pub struct CacheLine;

impl Scheme for CacheLine {
    fn name(&self) -> &'static str {
        "cache-line"
    }
    fn uses_local_memory(&self) -> bool {
        false
    }
    #[inline]
    fn read_line(&mut self, m: &mut Machine, now: Time, line: u64, _write: bool) -> Time {
        let id = m.pages.id(line / LINES_PER_PAGE);
        m.counters.local_misses += 1;
        m.remote_read(m.node_of(id), now, CACHE_LINE)
    }
    fn write_back(&mut self, m: &mut Machine, now: Time, line: u64) {
        let id = m.pages.id(line / LINES_PER_PAGE);
        m.remote_write(m.node_of(id), now, CACHE_LINE);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageMode {
    /// Remote: the page moves, the line waits for it.
    Remote,
    /// page-free: the line's latency, the page for free (ideal).
    Free,
    /// cache-line+page: both requested, the earlier arrival serves.
    Both,
}

/// The page-moving baselines (DaeMon §2.2): Remote, page-free, cache-line+page.
pub struct PageMoves {
    mode: PageMode,
    free_page_bytes: u64,
    line_requests: u64,
    line_first: u64,
}

impl PageMoves {
    pub fn new(mode: PageMode) -> Self {
        Self {
            mode,
            free_page_bytes: 0,
            line_requests: 0,
            line_first: 0,
        }
    }

    fn evict(&mut self, m: &mut Machine, now: Time, victims: Evicted) {
        for (v, dirty) in victims {
            if !dirty {
                continue;
            }
            if self.mode == PageMode::Free {
                self.free_page_bytes += PAGE_SIZE;
            } else {
                m.remote_write(m.node_of(v), now, PAGE_SIZE);
            }
        }
    }
}

impl Scheme for PageMoves {
    fn name(&self) -> &'static str {
        match self.mode {
            PageMode::Remote => "remote",
            PageMode::Free => "page-free",
            PageMode::Both => "cache-line+page",
        }
    }

    #[inline]
    fn read_line(&mut self, m: &mut Machine, now: Time, line: u64, _write: bool) -> Time {
        let id = m.pages.id(line / LINES_PER_PAGE);
        let node = m.node_of(id);
        if let Some(ready) = m.local_lookup(id, now) {
            m.counters.local_hits += 1;
            if ready > now && self.mode == PageMode::Both {
                // Page still in flight: the naive scheme asks for the line too.
                self.line_requests += 1;
                let line_at = m.remote_read(node, now, CACHE_LINE);
                if line_at < ready {
                    self.line_first += 1;
                    return line_at;
                }
            }
            return m.local_dram.access(now.max(ready), CACHE_LINE, false);
        }
        m.counters.local_misses += 1;
        match self.mode {
            PageMode::Remote => {
                let arrival = m.remote_read(node, now, PAGE_SIZE);
                // The page is written into local memory; the demand line is
                // forwarded as it arrives.
                m.local_dram.occupy(arrival, PAGE_SIZE);
                let victim = m.install_page(id, now, arrival);
                self.evict(m, now, victim);
                arrival
            }
            PageMode::Free => {
                let arrival = m.remote_read(node, now, CACHE_LINE);
                self.free_page_bytes += PAGE_SIZE;
                let victim = m.install_page(id, now, arrival);
                self.evict(m, now, victim);
                arrival
            }
            PageMode::Both => {
                self.line_requests += 1;
                let line_at = m.remote_read(node, now, CACHE_LINE);
                let page_at = m.remote_read(node, now, PAGE_SIZE);
                m.local_dram.occupy(page_at, PAGE_SIZE);
                let victim = m.install_page(id, now, page_at);
                self.evict(m, now, victim);
                if line_at <= page_at {
                    self.line_first += 1;
                }
                line_at.min(page_at)
            }
        }
    }

    fn write_back(&mut self, m: &mut Machine, now: Time, line: u64) {
        if let Some(node) = m.absorb_dirty_line(now, line) {
            m.remote_write(node, now, CACHE_LINE);
        }
    }

    fn report(&self, out: &mut Stats) {
        let n = self.name();
        out.put(n, "free_page_bytes", self.free_page_bytes as f64);
        out.put(n, "line_requests", self.line_requests as f64);
        out.put(n, "line_arrived_first", self.line_first as f64);
    }
}
