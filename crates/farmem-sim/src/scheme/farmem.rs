//! farmem's own runtime (`farmem run`) as a scheme, so the simulator can
//! predict what the runtime does on the same accesses (`farmem eval
//! validate`). The runtime serves page faults, so this scheme sees what
//! the MMU sees: every access, before the CPU caches (which decide time,
//! not which pages fault).
//!
//! What it mirrors, and where the runtime does it:
//! - A missing page faults. A page never written back is filled with zeros
//!   locally; a stored one is read from its memory node (`resolve.rs`).
//! - Fault-around takes a window from farmem-policy's [`Readahead`], the
//!   runtime's own: absent never-written pages after a never-written
//!   fault, absent stored pages on both sides of a stored one, within the
//!   region and at most [`MAX_FAULT_AROUND`] pages (`around.rs`).
//! - A page faulted in by a read is write-protected: its first write is a
//!   write-protect fault that marks it dirty and touches the replacement
//!   order, the only touch the runtime sees of a resident page. A write
//!   fault installs it dirty at once, and a window taken by a write fault,
//!   or filled with zeros, starts dirty too (`around.rs` `Settle`).
//! - Eviction: the local memory's policy and watermarks, farmem-policy's,
//!   as [`Machine::install_page`] applies them. A dirty page ships the
//!   lines written since it came in (line mode: Kona's diff against its
//!   snapshot; page mode: all 64 lines); a page with none written ships
//!   nothing and stays as it was, zeros or stored (`evict.rs`).
//!
//! Where it differs: the runtime evicts from a thread, so its rounds land a
//! little later than here, and its room shrinks and grows with snapshot
//! buffers and the process's own memory; the simulator takes one room,
//! `local.size` (`farmem eval validate` sets the room the run reported).
//! A written line counts as changed: the diff would find a store of the
//! value already there unchanged (`farmem trace replay` never stores one).

use farmem_core::{CACHE_LINE, PAGE_SIZE};
use farmem_policy::readahead::{Readahead, ReadaheadConfig};

use super::{Scheme, SchemeEntry};
use crate::config::{Config, DirtyUnit, RuntimeSimConfig};
use crate::machine::{Evicted, Machine};
use crate::stats::Stats;
use crate::{LINES_PER_PAGE, Time};

pub const SCHEMES: &[SchemeEntry] = &[(
    "farmem",
    "farmem's runtime: pages fault in (zeros if never written), fault-around, dirty lines shipped at eviction",
    || Box::new(Runtime::new(RuntimeSimConfig::default())),
)];

/// The most pages one fault brings in, the runtime's cap (`page.rs`).
pub const MAX_FAULT_AROUND: u32 = 256;

/// Where simulated regions start (`farmem_workloads::space::BASE`), in pages.
const BASE_PAGE: u64 = farmem_workloads::space::BASE / PAGE_SIZE;

/// A page's runtime state beyond residency (the machine's page table).
#[derive(Debug, Clone, Copy, Default)]
struct Page {
    /// Written back at least once: a fault reads it, else fills zeros.
    stored: bool,
    /// Writable: a write needs no fault to be seen.
    dirty: bool,
    /// Lines written since it came in.
    lines: u64,
}

/// What the scheme counts, by the runtime's `--stats-json` names.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    faults_missing: u64,
    faults_wp: u64,
    pages_fetched: u64,
    pages_zero_filled: u64,
    pages_faulted_around: u64,
    pages_evicted_clean: u64,
    pages_evicted_dirty: u64,
    dirty_lines_shipped: u64,
    bytes_written_back: u64,
}

pub struct Runtime {
    cfg: RuntimeSimConfig,
    readahead: Readahead,
    /// By the machine's dense page id.
    pages: Vec<Page>,
    /// One past the region's last page (`Scheme::begin`).
    region_end: u64,
    counts: Counts,
}

impl Runtime {
    pub fn new(cfg: RuntimeSimConfig) -> Self {
        Self {
            readahead: Readahead::new(ReadaheadConfig {
                max_blocks: cfg.fault_around,
            }),
            cfg,
            pages: Vec::new(),
            region_end: u64::MAX,
            counts: Counts::default(),
        }
    }

    fn page(&mut self, id: u32) -> &mut Page {
        let i = id as usize;
        if i >= self.pages.len() {
            self.pages.resize(i + 1, Page::default());
        }
        &mut self.pages[i]
    }

    fn stored(&mut self, m: &mut Machine, page: u64) -> bool {
        let id = m.pages.id(page);
        self.page(id).stored
    }

    /// Whether fault-around takes `page` for a fault of kind `zero`: it is
    /// absent and of the same kind (never written, or stored).
    fn fits(&mut self, m: &mut Machine, page: u64, zero: bool) -> bool {
        let id = m.pages.id(page);
        !m.pages.pages[id as usize].resident && self.page(id).stored != zero
    }

    /// A missing fault on `page` at `now`: the page and its window come in
    /// (one read for stored pages); returns when the page is there.
    fn fault(&mut self, m: &mut Machine, now: Time, page: u64, write: bool) -> Time {
        self.counts.faults_missing += 1;
        let zero = !self.stored(m, page);
        let window = self.readahead.on_miss(page);
        let room = (MAX_FAULT_AROUND - 1) as u64;
        let after = u64::from(window.after(page)).min(room);
        let before = if zero {
            0
        } else {
            u64::from(window.before(page)).min(room)
        };
        let up = (1..=after)
            .take_while(|&d| page + d < self.region_end && self.fits(m, page + d, zero))
            .count() as u64;
        let down = (1..=before)
            .take_while(|&d| page >= BASE_PAGE + d && self.fits(m, page - d, zero))
            .count() as u64;
        if down + 1 + up < u64::from(window.len) {
            self.readahead.cut(page, (down.max(up) + 1) as u32);
        }
        let pages = down + 1 + up;
        let ready = if zero {
            self.counts.pages_zero_filled += pages;
            m.local_dram.access(now, PAGE_SIZE, false)
        } else {
            self.counts.pages_fetched += pages;
            let id = m.pages.id(page);
            m.remote_read(m.node_of(id), now, pages * PAGE_SIZE)
        };
        m.local_dram.occupy(ready, pages * PAGE_SIZE);
        self.counts.pages_faulted_around += pages - 1;
        // The page first (the program waits for it), then its window; the
        // window starts dirty when zeros are its base or a write took it.
        self.install(m, now, ready, page, write);
        for j in (page + 1..=page + up).chain((page - down..page).rev()) {
            self.install(m, now, ready, j, zero || write);
        }
        ready
    }

    fn install(&mut self, m: &mut Machine, now: Time, ready: Time, page: u64, dirty: bool) {
        let id = m.pages.id(page);
        let evicted = m.install_page(id, now, ready);
        let p = self.page(id);
        p.dirty = dirty;
        p.lines = 0;
        self.evict(m, now, evicted);
    }

    fn evict(&mut self, m: &mut Machine, now: Time, evicted: Evicted) {
        for (id, _) in evicted {
            let unit = self.cfg.dirty;
            let p = self.page(id);
            let lines = match (p.lines, unit) {
                (0, _) => 0,
                (l, DirtyUnit::Line) => u64::from(l.count_ones()),
                (_, DirtyUnit::Page) => LINES_PER_PAGE,
            };
            p.dirty = false;
            p.lines = 0;
            if lines == 0 {
                self.counts.pages_evicted_clean += 1;
                continue;
            }
            p.stored = true;
            self.counts.pages_evicted_dirty += 1;
            self.counts.dirty_lines_shipped += lines;
            self.counts.bytes_written_back += lines * CACHE_LINE;
            m.remote_write(m.node_of(id), now, lines * CACHE_LINE);
        }
    }
}

impl Scheme for Runtime {
    fn name(&self) -> &'static str {
        "farmem"
    }

    fn configure(&mut self, cfg: &Config) {
        *self = Self::new(cfg.runtime.clone());
    }

    fn begin(&mut self, footprint: u64) {
        self.region_end = BASE_PAGE + footprint.div_ceil(PAGE_SIZE);
    }

    fn observes_accesses(&self) -> bool {
        true
    }

    fn access(&mut self, m: &mut Machine, now: Time, line: u64, write: bool) -> Time {
        let page = line / LINES_PER_PAGE;
        let id = m.pages.id(page);
        let ready = if m.pages.pages[id as usize].resident {
            now
        } else {
            self.fault(m, now, page, write)
        };
        if write {
            let p = self.page(id);
            if !p.dirty {
                p.dirty = true;
                self.counts.faults_wp += 1;
                m.local.policy.touch(u64::from(id), now as u64);
            }
            self.page(id).lines |= 1 << (line % LINES_PER_PAGE);
        }
        ready
    }

    fn read_line(&mut self, m: &mut Machine, now: Time, line: u64, write: bool) -> Time {
        let id = m.pages.id(line / LINES_PER_PAGE);
        // `access` brought the page in just before; a window installed
        // after it may have pushed it out again in a tiny local memory.
        let now = if m.pages.pages[id as usize].resident {
            m.counters.local_hits += 1;
            now
        } else {
            m.counters.local_misses += 1;
            self.access(m, now, line, write)
        };
        m.local_dram.access(now, CACHE_LINE, false)
    }

    fn write_back(&mut self, m: &mut Machine, now: Time, _line: u64) {
        // The page's lines were marked when they were written.
        m.local_dram.occupy(now, CACHE_LINE);
    }

    fn report(&self, out: &mut Stats) {
        let c = &self.counts;
        for (k, v) in [
            ("faults_missing", c.faults_missing),
            ("faults_wp", c.faults_wp),
            ("pages_fetched", c.pages_fetched),
            ("bytes_fetched", c.pages_fetched * PAGE_SIZE),
            ("pages_zero_filled", c.pages_zero_filled),
            ("pages_faulted_around", c.pages_faulted_around),
            ("pages_evicted_clean", c.pages_evicted_clean),
            ("pages_evicted_dirty", c.pages_evicted_dirty),
            ("dirty_lines_shipped", c.dirty_lines_shipped),
            ("bytes_written_back", c.bytes_written_back),
        ] {
            out.put("farmem", k, v as f64);
        }
    }
}
