//! farmem's own runtime (`farmem run`) as a scheme, so the simulator can
//! predict what the runtime does on the same accesses (`farmem eval
//! validate`). The runtime serves page faults, so this scheme sees what
//! the MMU sees: every access, before the CPU caches (which decide time,
//! not which pages fault).
//!
//! What it mirrors, and where the runtime does it, calling the same
//! farmem-policy objects:
//! - A missing page faults. A page never written back is filled with zeros
//!   locally; a stored one is read from its memory node (`resolve.rs`).
//! - Fault-around takes a window from [`Readahead`]: absent never-written
//!   pages beside a never-written fault, absent stored pages beside a
//!   stored one, on either side, within the region, at most [`MAX_FAULT_AROUND`]
//!   pages and a share of the limit ([`around_allowance`]), taken even past
//!   the room: the page itself waits for room, its neighbours never do. A
//!   window cut at a resident page tells the readahead its stream goes on
//!   past the run of resident pages, which the program reads without a
//!   fault (`around.rs`).
//! - A page faulted in by a read is write-protected: its first write is a
//!   write-protect fault that marks it dirty and touches the replacement
//!   order, the only touch the runtime sees of a resident page. A write
//!   fault installs it dirty at once, and so does a read fault whose page
//!   [`WriteStreak`] predicts will be written (unwatched, then). A window
//!   filled with zeros starts dirty, and one read by a write fault starts
//!   dirty and unwatched (`around.rs` `Settle`).
//! - A page turning dirty keeps a diff base: zeros if it was never written
//!   back, else a snapshot when [`DiffBase`] says so (capped at a share of
//!   the run's limit, `runtime.limit`), else none (`cache.rs`). The cap
//!   counts the bases of victims the shipper has not yet acknowledged
//!   (`evict.rs` `drop_pages` frees them): here a batch's bases count
//!   until the next missing fault, about the time a batch takes to ship
//!   on the host measured (60 µs a batch against 56 µs a fault on pr).
//! - Eviction: the local memory's policy between the watermarks (the
//!   runtime's default marks unless `local.watermarks` sets others). A
//!   fault that passes the high mark starts a round; the runtime's evictor
//!   thread wakes after the fault and evicts in batches of `evict_batch`
//!   pages, so here a round lands one batch before each later fault, until
//!   the low mark. A fault that finds the cache full waits for batches
//!   (`cache.rs` `reserve`, `victims`; `evict.rs`).
//!   A dirty page ships the lines that differ from its base (all 64
//!   without one; page mode: all 64 once any differ); a page with none to
//!   ship stays as it was, zeros or stored (`evict.rs` `diff_into`).
//! - A dirty victim's write-back is in flight for the rest of the fault
//!   whose batch took it: the runtime keeps the page in place (Busy) until
//!   its batch is acknowledged, so that fault's window stops at it as at a
//!   resident page (`around.rs`, `evict.rs` `drop_pages`). Its frame is
//!   free here at once, where the runtime counts it resident until then.
//!
//! Where it differs: the runtime's evictor runs beside the program, so how
//! many batches land between two faults, and how long a victim stays in
//! the way, is a race. On a stream over the replacement order's oldest
//! pages the evictor there takes them as the stream arrives, and one run
//! of pr at 50% differs from the next by up to 2x in faults (502 to 1,119
//! in eight runs; docs/sim.md). Windows no longer wait on the race
//! itself: they take their pages past the room, where they were cut at
//! the first page with no free frame and the same replay took 235 to
//! 1,266 faults from run to run. The room shrinks and grows with snapshot
//! buffers and the process's own memory; the simulator takes one room,
//! `local.size` (`farmem eval validate` simulates each run at the mean
//! room that run reported). A written line counts as changed: the diff
//! would find a store of the value already there unchanged (`farmem
//! trace replay` never stores one).

use farmem_core::{CACHE_LINE, PAGE_SIZE};
use farmem_policy::cache::PolicyConfig;
use farmem_policy::diffbase::{DiffBase, DiffBaseConfig};
use farmem_policy::readahead::{MAX_FAULT_AROUND, Readahead, ReadaheadConfig};
use farmem_policy::watermark::{Watermarks, around_allowance, policy_capacity};
use farmem_policy::write_streak::{Seen, WriteStreak};

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

/// Where simulated regions start (`farmem_workloads::space::BASE`), in pages.
const BASE_PAGE: u64 = farmem_workloads::space::BASE / PAGE_SIZE;

/// What a dirty page's write-back is diffed against (`cache.rs`
/// `keep_diff_base`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Base {
    /// None: every line may be dirty, all 64 ship (page mode, or no
    /// snapshot kept: [`DiffBase::keep`] said no).
    #[default]
    Whole,
    /// Zeros: the page was never written back, so the lines not zero ship.
    Zeros,
    /// A snapshot of the page at its first write: the lines changed ship.
    Snapshot,
}

/// A page's runtime state beyond residency (the machine's page table).
#[derive(Debug, Clone, Copy, Default)]
struct Page {
    /// Written back at least once: a fault reads it, else fills zeros.
    stored: bool,
    /// Writable: a write needs no fault to be seen.
    dirty: bool,
    /// Installed writable on a prediction, so its writes were not seen.
    unwatched: bool,
    base: Base,
    /// Lines written since it came in.
    lines: u64,
    streak: WriteStreak,
    /// The fault in whose eviction batch it left dirty (0: none). Its
    /// write-back is in flight for the rest of that fault, and the runtime
    /// keeps such a page in place (Busy) until its batch is acknowledged,
    /// so that fault's window stops at it as at a resident page.
    left_dirty_at: u64,
}

/// What the scheme counts, by the runtime's `--stats-json` names.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    faults_missing: u64,
    faults_wp: u64,
    writes_predicted: u64,
    pages_fetched: u64,
    pages_zero_filled: u64,
    pages_faulted_around: u64,
    pages_evicted_clean: u64,
    pages_evicted_dirty: u64,
    dirty_lines_shipped: u64,
    bytes_written_back: u64,
    snapshots: u64,
    snapshots_skipped: u64,
    snapshots_capped: u64,
}

pub struct Runtime {
    cfg: RuntimeSimConfig,
    /// Local memory's policy, built again for the run's limit.
    policy: PolicyConfig,
    marks: Watermarks,
    readahead: Readahead,
    diff: DiffBase,
    /// Snapshots held by resident pages, and the pages their cap is a
    /// share of (the run's limit, which may exceed the cache's room).
    snapshots: u64,
    limit_pages: u64,
    /// Evicted pages' snapshots the shipper still holds: a batch's bases
    /// are freed once its write-back is acknowledged (`evict.rs`
    /// `drop_pages`), and count against the cap until then.
    shipping_bases: u64,
    /// The evictor is in a round (past the high mark, not yet at the low).
    evicting: bool,
    /// By the machine's dense page id.
    pages: Vec<Page>,
    /// One past the region's last page (`Scheme::begin`).
    region_end: u64,
    counts: Counts,
}

impl Runtime {
    pub fn new(cfg: RuntimeSimConfig) -> Self {
        Self {
            marks: Watermarks::default(),
            readahead: Readahead::new(ReadaheadConfig {
                max_blocks: cfg.fault_around,
            }),
            diff: DiffBase::new(DiffBaseConfig {
                max_share: cfg.diff_share.get(),
                ..DiffBaseConfig::default()
            }),
            policy: PolicyConfig::default(),
            snapshots: 0,
            limit_pages: 0,
            shipping_bases: 0,
            evicting: false,
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

    /// Whether fault-around takes `page` for a fault of kind `zero`: it is
    /// absent, not still shipping, and of the same kind (never written, or
    /// stored).
    fn fits(&mut self, m: &mut Machine, page: u64, zero: bool) -> bool {
        let id = m.pages.id(page);
        let p = *self.page(id);
        let shipping = p.left_dirty_at == self.counts.faults_missing;
        !m.pages.pages[id as usize].resident && p.stored != zero && !shipping
    }

    /// A missing fault on `page` at `now`: the page and its window come in
    /// (one read for stored pages); returns when the page is there.
    fn fault(&mut self, m: &mut Machine, now: Time, page: u64, write: bool) -> Time {
        self.counts.faults_missing += 1;
        // The shipper has acknowledged the batches landed before this
        // fault (on this host a batch ships in about one fault's time):
        // their bases go back to the pool.
        self.shipping_bases = 0;
        let cap = m.local.capacity_pages as u64;
        // The evictor, once kicked, has landed one batch since the last
        // fault; a fault that finds the cache full waits for more.
        let batch = u64::from(self.cfg.evict_batch.max(1));
        if self.evicting {
            self.evict_batch(m, now, batch);
        }
        while m.local.policy.len() as u64 >= cap {
            self.evicting = true;
            if !self.evict_batch(m, now, batch) {
                break;
            }
        }
        let id = m.pages.id(page);
        let p = *self.page(id);
        let zero = !p.stored;
        let predicted = !write && p.streak.predicts_write();
        let window = self.readahead.on_miss(page);
        // Pages beside it: a share of the limit, taken even past the room
        // (never cut for want of a free frame).
        let allowed = u64::from(MAX_FAULT_AROUND - 1).min(around_allowance(self.limit_pages));
        let after = u64::from(window.after(page)).min(allowed);
        let up = (1..=after)
            .take_while(|&d| page + d < self.region_end && self.fits(m, page + d, zero))
            .count() as u64;
        let before = u64::from(window.before(page)).min(allowed - up);
        let down = (1..=before)
            .take_while(|&d| page >= BASE_PAGE + d && self.fits(m, page - d, zero))
            .count() as u64;
        let reach = (
            u64::from(window.before(page)).min(page.saturating_sub(BASE_PAGE)),
            u64::from(window.after(page)).min(self.region_end.saturating_sub(page + 1)),
        );
        self.readahead
            .end_window(page, window, (down, up), reach, |p| {
                let id = m.pages.id(p);
                m.pages.pages[id as usize].resident
            });
        let pages = down + 1 + up;
        let ready = if zero {
            self.counts.pages_zero_filled += pages;
            m.local_dram.access(now, PAGE_SIZE, false)
        } else {
            self.counts.pages_fetched += pages;
            m.remote_read(m.node_of(id), now, pages * PAGE_SIZE)
        };
        m.local_dram.occupy(ready, pages * PAGE_SIZE);
        self.counts.pages_faulted_around += pages - 1;
        // The page first (the program waits for it), then its window: over
        // zeros, or read by a write fault, they start dirty (`Settle`).
        let writable = write || predicted;
        self.install(m, now, ready, page, writable.then_some(predicted), zero);
        for j in (page + 1..=page + up).chain((page - down..page).rev()) {
            let dirty = (zero || write).then_some(!zero);
            self.install(m, now, ready, j, dirty, zero);
        }
        // The round the fault kicked runs after its window is taken.
        if self.marks.should_evict(m.local.policy.len() as u64, 0, cap) {
            self.evicting = true;
        }
        ready
    }

    /// One batch of the evictor's round: up to `batch` pages, down to the
    /// low mark, where the round ends. False if it evicted nothing.
    fn evict_batch(&mut self, m: &mut Machine, now: Time, batch: u64) -> bool {
        let cap = m.local.capacity_pages as u64;
        let excess = self.marks.to_evict(m.local.policy.len() as u64, 0, cap);
        let out = m.evict_pages(excess.min(batch).max(1), now);
        let evicted = !out.is_empty();
        self.evict(m, now, out);
        let resident = m.local.policy.len() as u64;
        self.evicting = self.marks.to_evict(resident, 0, cap) > 0;
        evicted
    }

    /// Installs `page`: clean, or dirty (`Some(unwatched)`) with its diff
    /// base kept now.
    fn install(
        &mut self,
        m: &mut Machine,
        now: Time,
        ready: Time,
        page: u64,
        dirty: Option<bool>,
        zero: bool,
    ) {
        let id = m.pages.id(page);
        let pushed = m.insert_page(id, now, ready);
        let p = self.page(id);
        p.lines = 0;
        p.dirty = false;
        if let Some(unwatched) = dirty {
            self.counts.writes_predicted += unwatched as u64;
            self.first_write(id, zero, unwatched);
        }
        if let Some(v) = pushed {
            let out = m.evict_page(v);
            let mut evicted = Evicted::default();
            evicted.push(out);
            self.evict(m, now, evicted);
        }
    }

    /// A page turns dirty: its diff base is zeros if it was never written
    /// back, else a snapshot if the runtime's [`DiffBase`] keeps one.
    fn first_write(&mut self, id: u32, zero: bool, unwatched: bool) {
        let base = if zero {
            Base::Zeros
        } else if self.cfg.dirty == DirtyUnit::Line
            && self
                .diff
                .keep(self.snapshots + self.shipping_bases, self.limit_pages)
        {
            self.snapshots += 1;
            self.counts.snapshots += 1;
            Base::Snapshot
        } else {
            if self.cfg.dirty == DirtyUnit::Line {
                self.counts.snapshots_skipped += 1;
                let alive = self.snapshots + self.shipping_bases;
                self.counts.snapshots_capped += self.diff.at_cap(alive, self.limit_pages) as u64;
            }
            Base::Whole
        };
        let p = self.page(id);
        p.dirty = true;
        p.unwatched = unwatched;
        p.base = base;
    }

    fn evict(&mut self, m: &mut Machine, now: Time, evicted: Evicted) {
        let mut bases = 0;
        for (id, _) in evicted {
            let unit = self.cfg.dirty;
            let p = *self.page(id);
            let mut streak = p.streak;
            if !p.dirty {
                streak.evicted(Seen::Clean);
                self.counts.pages_evicted_clean += 1;
                *self.page(id) = Page { streak, ..p };
                continue;
            }
            streak.evicted(if p.unwatched {
                Seen::Unwatched
            } else {
                Seen::Written
            });
            self.counts.pages_evicted_dirty += 1;
            // The replay writes only values that differ, so the lines a
            // diff finds changed are the lines written.
            let mut mask = match p.base {
                Base::Whole => u64::MAX,
                Base::Zeros | Base::Snapshot => p.lines,
            };
            if p.base == Base::Snapshot {
                self.snapshots -= 1;
                bases += 1;
                if unit == DirtyUnit::Line {
                    self.diff.observe(mask.count_ones());
                }
            }
            if unit == DirtyUnit::Page && mask != 0 {
                mask = u64::MAX;
            }
            let lines = u64::from(mask.count_ones());
            *self.page(id) = Page {
                streak,
                stored: p.stored || lines > 0,
                left_dirty_at: self.counts.faults_missing,
                ..Page::default()
            };
            if lines > 0 {
                self.counts.dirty_lines_shipped += lines;
                self.counts.bytes_written_back += lines * CACHE_LINE;
                m.remote_write(m.node_of(id), now, lines * CACHE_LINE);
            }
        }
        // Victims' bases stay allocated until their batch is acknowledged.
        self.shipping_bases += bases;
    }
}

impl Scheme for Runtime {
    fn name(&self) -> &'static str {
        "farmem"
    }

    fn configure(&mut self, cfg: &Config) {
        *self = Self::new(cfg.runtime.clone());
        self.policy = cfg.local.policy;
        // The runtime always evicts between marks, its own by default.
        self.marks = cfg.local.watermarks.unwrap_or_default();
    }

    fn begin(&mut self, footprint: u64) {
        self.region_end = BASE_PAGE + footprint.div_ceil(PAGE_SIZE);
    }

    fn observes_accesses(&self) -> bool {
        true
    }

    fn access(&mut self, m: &mut Machine, now: Time, line: u64, write: bool) -> Time {
        if self.limit_pages == 0 {
            // Local memory is sized by now (`Engine::begin`).
            let cap = m.local.capacity_pages as u64;
            self.limit_pages = (self.cfg.limit.0 / PAGE_SIZE).max(cap);
            // The runtime's policy holds the limit and a window past it
            // (its rounds, not the policy, keep the cache to its room), so
            // victims leave in rounds here too, not one per insert.
            if let Ok(p) = self.policy.build(policy_capacity(self.limit_pages)) {
                m.local.policy = p;
            }
        }
        let page = line / LINES_PER_PAGE;
        let id = m.pages.id(page);
        let ready = if m.pages.pages[id as usize].resident {
            now
        } else {
            self.fault(m, now, page, write)
        };
        if write {
            let p = *self.page(id);
            if !p.dirty {
                self.counts.faults_wp += 1;
                self.first_write(id, !p.stored, false);
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
            // Every fault here fills its page: a touch of a page on its way
            // waits for it without a fault (the runtime counts a fault,
            // `faults_missing_found`).
            ("faults_filled", c.faults_missing),
            ("faults_wp", c.faults_wp),
            ("writes_predicted", c.writes_predicted),
            ("snapshots", c.snapshots),
            ("snapshots_skipped", c.snapshots_skipped),
            ("snapshots_capped", c.snapshots_capped),
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
