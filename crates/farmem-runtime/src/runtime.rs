//! The facade: a [`Runtime`] starts the threads around the shared state
//! and hands out [`Region`]s; everything below it is crate-private.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::thread::JoinHandle;

use crate::config::{Config, FaultPath};
use crate::error::RuntimeError;
use crate::evict::{self, Segment};
use crate::handler::{filler, handoff_filler, monitor};
use crate::page::{PAGE, RegionInner, State};
use crate::shared::Shared;
use crate::slab::{Backing, LazyTable, ResourceManager, SlabTable};
use crate::stats::{Books, FaultBuckets, Stats};
use crate::store::{RemoteStore, SlabSource};

/// A compute node's runtime: owns the userfaultfd, the local cache and the
/// threads that serve faults and evict.
pub struct Runtime {
    sh: Arc<Shared>,
    rm: Arc<ResourceManager>,
    threads: Vec<JoinHandle<()>>,
    /// Fault path `signal`: this runtime's place in the SIGBUS handler.
    signal: Option<crate::signal::Registration>,
}

impl Runtime {
    /// Starts the runtime's threads and pre-allocates one slab batch.
    pub fn new(
        cfg: Config,
        store: Arc<dyn RemoteStore>,
        slabs: Arc<dyn SlabSource>,
    ) -> Result<Self, RuntimeError> {
        let sh = Arc::new(Shared::new(cfg, store, slabs)?);
        sh.cache.charge_process();
        let rm = sh.rm.clone();
        let signal = match sh.cfg.fault_path {
            FaultPath::Thread => None,
            FaultPath::Signal => {
                sh.cache.refill_pool();
                Some(crate::signal::register(&sh)?)
            }
        };
        let threads = start_threads(&sh)?;
        let rt = Self {
            sh,
            rm,
            threads,
            signal,
        };
        // Resource Manager: the first batch now, so eager regions rarely
        // wait for one (lazy ones take it at their first write-back).
        if !rt.sh.cfg.zeroed_slabs
            && let Err(e) = rt.rm.prefill()
        {
            rt.sh.report(format!("pre-allocating remote memory: {e}"));
        }
        Ok(rt)
    }

    /// A new far region of `size` bytes (rounded up to pages), backed by
    /// fresh remote memory. Reads of never-written bytes return zeros.
    pub fn region(&self, size: u64) -> Result<Region<'_>, RuntimeError> {
        if size == 0 {
            return Err(RuntimeError::Config("region size must be positive".into()));
        }
        let size = size.div_ceil(PAGE) * PAGE;
        if self.sh.cfg.zeroed_slabs {
            // Fresh remote memory reads as zeros, so a page need not have
            // any until it is first written back.
            return self.map(Backing::Lazy(LazyTable::new(size)), false);
        }
        let extents = self.rm.take(size)?;
        self.rm.top_up();
        self.map(Backing::Eager(SlabTable::new(&extents)), true)
    }

    /// A region over remote extents that already hold data (from
    /// [`Region::extents`] of an earlier runtime on the same store).
    pub fn region_over(&self, extents: &[(u64, u64)]) -> Result<Region<'_>, RuntimeError> {
        if extents.is_empty()
            || extents
                .iter()
                .any(|e| e.0 % PAGE != 0 || e.1 % PAGE != 0 || e.1 == 0)
        {
            return Err(RuntimeError::Config(
                "region extents must be non-empty and page-aligned".into(),
            ));
        }
        self.map(Backing::Eager(SlabTable::new(extents)), true)
    }

    fn map(&self, backing: Backing, stored: bool) -> Result<Region<'_>, RuntimeError> {
        let inner = self.sh.map_region(backing, stored)?;
        Ok(Region { rt: self, inner })
    }

    /// Writes back every dirty page of every region ([`Region::sync`]).
    /// Dropping a runtime or region does not: unsynced data is discarded,
    /// as at process exit. Freed pages ([`Self::discard`]) not written
    /// since are not written either: they read as zeros here, while the
    /// store keeps their old bytes.
    pub fn sync(&self) -> Result<(), RuntimeError> {
        let regions: Vec<_> = self.sh.regions.read().values().cloned().collect();
        let mut first_err = None;
        for r in &regions {
            if let Err(e) = evict::sync_region(&self.sh, r) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// The fault latency histograms in buckets under `bounds_ns`, for a
    /// Prometheus scrape: faults that fetched, those of them that read
    /// the store, faults that waited for a page in transition, and
    /// write-protect faults.
    pub fn latency_buckets(&self, bounds_ns: &[u64]) -> FaultBuckets {
        let m = &self.sh.m;
        FaultBuckets {
            fault: m.fault_latency.buckets(bounds_ns),
            remote_fault: m.remote_fault_latency.buckets(bounds_ns),
            wait: m.wait_latency.buckets(bounds_ns),
            wp: m.wp_latency.buckets(bounds_ns),
        }
    }

    pub fn stats(&self) -> Stats {
        self.sh.count_table_pages();
        let cache = &self.sh.cache;
        let mut stats = self.sh.m.snapshot(Books {
            resident: cache.resident(),
            snapshots: cache.buffers(),
            tables: cache.table_pages(),
            store: cache.store_pages(),
            outside: cache.outside_pages(),
            outside_peak: cache.outside_peak(),
            limit: cache.limit(),
        });
        if let Some(d) = &self.sh.daemon {
            let f = d.stats();
            stats.engine_pages_only = f.pages_only;
            stats.engine_page_and_cluster = f.page_and_cluster;
            stats.engine_cluster_only = f.cluster_only;
            stats.engine_no_locality = f.no_locality;
            stats.engine_cluster_refused = f.cluster_refused;
            stats.engine_stalled = f.stalled;
            stats.engine_whole = f.whole;
            stats.engine_bulk_reads = d.bulk_reads.get();
            stats.engine_bulk_pages = d.bulk_pages.get();
        }
        stats
    }

    /// Pages by state plus the cache's books, for diagnosing a stall.
    #[doc(hidden)]
    pub fn census(&self) -> String {
        let mut counts = std::collections::BTreeMap::new();
        let mut waiters = 0;
        for r in self.sh.regions.read().values() {
            for p in r.pages.iter() {
                let m = p.lock();
                *counts.entry(format!("{:?}", m.state)).or_insert(0u64) += 1;
                waiters += m.waiters as u64;
            }
        }
        format!(
            "states {counts:?} waiters {waiters} {}",
            self.sh.cache.census()
        )
    }

    /// Replaces what happens when far data cannot be had (its memory node
    /// restarted or stayed unreachable past its deadline with no copy
    /// left): by default the process writes the reason on stderr and exits
    /// with [`LOST_EXIT_CODE`](crate::LOST_EXIT_CODE) at once, since the access that needed the
    /// data cannot complete and going on would compute on what is left.
    /// A hook that returns leaves that access waiting.
    pub fn on_lost(&self, hook: impl Fn(&str) + Send + Sync + 'static) {
        *self.sh.on_lost.write() = Arc::new(hook);
    }

    /// Counts remote faults by the delay in force on `gate` as well
    /// (`Stats::remote_fault_latency_by_delay`), so a delay switched live
    /// (`farmem link set`) is measured within one run.
    pub fn watch_delay(&self, gate: Arc<farmem_net::delay::EgressDelay>) {
        self.sh.m.remote_by_delay.watch(gate);
    }

    /// The process is exiting and is about to give its remote memory back:
    /// write-backs the store refuses from now on (their pages die with the
    /// process) are neither retried nor reported.
    pub fn exiting(&self) {
        self.sh.exiting.store(true, Ordering::SeqCst);
    }

    /// The most recent error the background threads reported, if any.
    pub fn last_error(&self) -> Option<String> {
        self.sh.last_error.lock().clone()
    }

    /// Local memory the cache has for the program's pages now: the limit
    /// less what else it is charged (snapshot buffers, page tables, the
    /// compressed pool and, when the limit counts the process, the rest
    /// of its memory). A caller that needs touched pages to stay resident
    /// until it uses them keeps within a share of this.
    pub fn cache_room_bytes(&self) -> u64 {
        self.sh.cache.room() * PAGE
    }

    /// The pages wholly inside `[addr, addr + len)` of a region hold
    /// nothing the program wants any more (memory it freed): resident ones
    /// leave the local cache without a write-back, making room at once,
    /// and every one reads as zeros from now on, filled locally at its
    /// next touch rather than fetched. The store keeps its stale copy
    /// until the page's next write-back, which ships every line of it.
    /// Pages mid-fetch or mid-write-back are left as they are. Returns the
    /// pages dropped from the cache.
    ///
    /// Call it before the memory can be handed out again: a write that
    /// lands on a page between the free and this call is discarded too.
    pub fn discard(&self, addr: u64, len: u64) -> u64 {
        self.each_freed(addr, len, |_, _| {})
    }

    /// Makes `[addr, addr + len)` read as zeros, as a fresh anonymous
    /// mapping or `MADV_DONTNEED` does: far pages wholly inside by
    /// [`Self::discard`] (nothing is fetched or written for them now), the
    /// rest (the range's partial pages, pages mid-fetch or mid-write-back,
    /// memory outside far regions) by writing zeros from the calling
    /// thread, which may take faults.
    pub fn zero(&self, addr: u64, len: u64) {
        self.each_freed(addr, len, |freed, (at, n)| {
            if freed == Freed::Kept {
                // SAFETY: the caller's range, mapped and writable.
                unsafe { std::ptr::write_bytes(at as *mut u8, 0, n as usize) }
            }
        });
    }

    /// Frees each page of `[addr, addr + len)` ([`free_page`]), passing
    /// `f` what became of it and its part of the range (address, bytes):
    /// partial pages and pages outside far regions are `Kept`. Returns
    /// the pages dropped from the cache (`pages_discarded`).
    fn each_freed(&self, addr: u64, len: u64, mut f: impl FnMut(Freed, (u64, u64))) -> u64 {
        let end = addr.saturating_add(len);
        let mut at = addr;
        let mut region: Option<Arc<RegionInner>> = None;
        let mut dropped = 0;
        while at < end {
            let page = at / PAGE * PAGE;
            let next = (page + PAGE).min(end);
            if !region.as_ref().is_some_and(|r| r.contains(page)) {
                region = self.sh.lookup(page);
            }
            let freed = match &region {
                Some(r) if at == page && next == page + PAGE => free_page(&self.sh, r, page),
                _ => Freed::Kept,
            };
            dropped += (freed == Freed::Dropped) as u64;
            f(freed, (at, next - at));
            at = next;
        }
        self.sh.m.pages_discarded.add(dropped);
        dropped
    }

    /// Holds the far pages of `[addr, addr + len)` in local memory while
    /// the guard lives: the evictor passes them by (`pages_pinned_passed`)
    /// once they are resident, however the cache's room changes meanwhile.
    /// For a caller that touches a buffer and then hands it to the kernel,
    /// whose own accesses to a far page fail rather than fault it in. Pin
    /// before touching, and keep the pinned bytes within a share of
    /// [`Self::cache_room_bytes`]: pinned pages may stay resident past the
    /// room (counted in `pinned_overruns`), so the local limit is exceeded
    /// by at most what is pinned.
    pub fn pin(&self, addr: usize, len: usize) -> Pinned<'_> {
        let pages = page_span(addr, len);
        let cache = &self.sh.cache;
        let mut held = Vec::new();
        let mut page = pages.start;
        while page < pages.end {
            let Some(r) = self.sh.lookup(page) else {
                page += PAGE;
                continue;
            };
            let end = pages.end.min(r.start + r.pages.len() as u64 * PAGE);
            let idx = r.page_index(page)..r.page_index(end - 1) + 1;
            for i in idx.clone() {
                let mut m = r.pages[i].lock();
                if m.pins == 0 {
                    cache.pin_page(true);
                }
                m.pins = m.pins.saturating_add(1);
            }
            page = end;
            held.push((r, idx));
        }
        Pinned { rt: self, held }
    }

    pub fn config(&self) -> &Config {
        &self.sh.cfg
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // First, so no signal handler is inside `sh` while it goes away.
        self.signal.take();
        self.sh.shutdown.store(true, Ordering::SeqCst);
        self.sh.cache.kick_evictor();
        self.sh.rm.wake();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The evictor, shipper and slab top-up, then by fault path the fillers and the fault
/// handler threads, each with async signals blocked.
fn start_threads(sh: &Arc<Shared>) -> Result<Vec<JoinHandle<()>>, RuntimeError> {
    let mut threads = Vec::new();
    let (started_tx, started_rx) = crossbeam_channel::unbounded::<()>();
    let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
        let started = started_tx.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                farmem_net::block_async_signals();
                let _ = started.send(());
                f()
            })
            .map_err(RuntimeError::Thread)
    };
    let (ship_tx, ship_rx) = crossbeam_channel::bounded::<Segment>(sh.cfg.log_segments);
    let (free_tx, free_rx) = crossbeam_channel::bounded::<Segment>(sh.cfg.log_segments);
    for _ in 0..sh.cfg.log_segments {
        let _ = free_tx.send(Segment::new(sh.cfg.log_lines, false));
    }
    let s = sh.clone();
    threads.push(spawn(
        "farmem-evict",
        Box::new(move || evict::evictor(s, ship_tx, free_rx)),
    )?);
    for i in 0..sh.cfg.shippers.min(sh.cfg.log_segments) {
        let (s, rx, free) = (sh.clone(), ship_rx.clone(), free_tx.clone());
        threads.push(spawn(
            &format!("farmem-ship{i}"),
            Box::new(move || evict::shipper(s, rx, free)),
        )?);
    }
    // The shippers hold the only ends left: the evictor sees them go.
    drop((ship_rx, free_tx));
    let s = sh.clone();
    threads.push(spawn(
        "farmem-slabs",
        Box::new(move || s.rm.serve(&s.shutdown)),
    )?);
    if sh.daemon.is_some() {
        let s = sh.clone();
        threads.push(spawn(
            "farmem-bulk",
            Box::new(move || crate::daemon::bulk_worker(s)),
        )?);
    }
    if sh.cfg.fault_path == FaultPath::Signal {
        for i in 0..sh.cfg.fillers.max(1) {
            let s = sh.clone();
            threads.push(spawn(
                &format!("farmem-fill{i}"),
                Box::new(move || handoff_filler(s)),
            )?);
        }
    }
    let tx = if sh.cfg.fillers > 0 && sh.cfg.fault_path == FaultPath::Thread {
        let (tx, rx) = crossbeam_channel::unbounded();
        for i in 0..sh.cfg.fillers {
            let (s, rx) = (sh.clone(), rx.clone());
            threads.push(spawn(
                &format!("farmem-fill{i}"),
                Box::new(move || filler(s, rx)),
            )?);
        }
        Some(tx)
    } else {
        None
    };
    let handlers = match sh.cfg.fault_path {
        FaultPath::Thread => sh.cfg.handlers,
        // No fault reaches the descriptor: the faulting threads serve them.
        FaultPath::Signal => 0,
    };
    for i in 0..handlers {
        let (s, tx) = (sh.clone(), tx.clone());
        threads.push(spawn(
            &format!("farmem-fault{i}"),
            Box::new(move || monitor(s, tx)),
        )?);
    }
    drop(tx);
    // Returns once every thread has started. Starting, a thread registers
    // a thread-local destructor with the C library, which allocates with
    // its `calloc`: under the preload shim, the program's allocator
    // (jemalloc for redis), whose arenas go far once the program runs. A
    // fault handler scheduled that late faulted on its own far memory and
    // waited for itself (redis hung so on a loaded machine); started now,
    // before the shim hands out far memory, it gets local memory.
    for _ in 0..threads.len() {
        let _ = started_rx.recv();
    }
    Ok(threads)
}

/// A far region: ordinary memory to the program, whose pages live on the
/// store and are cached locally up to the runtime's limit.
pub struct Region<'rt> {
    rt: &'rt Runtime,
    inner: Arc<RegionInner>,
}

impl Region<'_> {
    pub fn as_ptr(&self) -> *mut u8 {
        self.inner.start as *mut u8
    }

    pub fn len(&self) -> usize {
        self.inner.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// The region as bytes any thread may load and store; accesses fault
    /// pages in as needed.
    pub fn bytes(&self) -> &[AtomicU8] {
        // SAFETY: the mapping lives as long as self and AtomicU8 has the
        // layout of u8; atomics make concurrent access from threads sound.
        unsafe { std::slice::from_raw_parts(self.inner.start as *const AtomicU8, self.len()) }
    }

    /// The state of the page holding `off`, for diagnosing a stall.
    #[doc(hidden)]
    pub fn page_state(&self, off: usize) -> String {
        match self.inner.pages.get(off / PAGE as usize) {
            Some(p) => {
                let m = p.lock();
                format!(
                    "{:?} waiters {} snapshot {} force {:#x}",
                    m.state,
                    m.waiters,
                    m.snapshot.is_some(),
                    m.force
                )
            }
            None => "out of range".into(),
        }
    }

    /// Remote extents backing the whole region, in order, for a later
    /// [`Runtime::region_over`]. A region backed lazily is backed whole first.
    pub fn extents(&self) -> Result<Vec<(u64, u64)>, RuntimeError> {
        self.inner.backing.extents(&self.rt.rm)
    }

    /// Bytes of remote memory taken for this region so far (all of it for
    /// an eager region; what was written back, in chunks, for a lazy one).
    pub fn backed_bytes(&self) -> u64 {
        self.inner.backing.backed_bytes()
    }

    fn check(&self, off: usize, len: usize) -> Result<(), RuntimeError> {
        match off.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(RuntimeError::OutOfBounds {
                off,
                len,
                size: self.len(),
            }),
        }
    }

    pub fn read_at(&self, off: usize, buf: &mut [u8]) -> Result<(), RuntimeError> {
        self.check(off, buf.len())?;
        for (b, a) in buf.iter_mut().zip(&self.bytes()[off..]) {
            *b = a.load(Ordering::Relaxed);
        }
        Ok(())
    }

    pub fn write_at(&self, off: usize, data: &[u8]) -> Result<(), RuntimeError> {
        self.check(off, data.len())?;
        for (b, a) in data.iter().zip(&self.bytes()[off..]) {
            a.store(*b, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Writes every dirty page back to the store and waits for the
    /// acknowledgement; the pages stay resident, clean.
    pub fn sync(&self) -> Result<(), RuntimeError> {
        evict::sync_region(&self.rt.sh, &self.inner)
    }
}

/// What [`free_page`] did with a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Freed {
    /// It was resident: dropped from the cache, unwritten.
    Dropped,
    /// It was absent: it now reads as zeros without a fetch.
    Zeroed,
    /// Left as it was: a fetch or a write-back owns it and settles it as
    /// usual (or, to `Runtime::each_freed`, it is no whole far page).
    Kept,
}

/// Frees a far page whose contents the program no longer wants: out of
/// the cache if resident, and reading as zeros from now on.
fn free_page(sh: &Shared, r: &RegionInner, page: u64) -> Freed {
    let mut m = r.pages[r.page_index(page)].lock();
    let freed = match m.state {
        State::Absent => Freed::Zeroed,
        State::Clean | State::Dirty => {
            // SAFETY: a page of a live region, whose contents are unwanted.
            let rc = unsafe {
                libc::madvise(
                    page as *mut libc::c_void,
                    PAGE as usize,
                    libc::MADV_DONTNEED,
                )
            };
            if rc != 0 {
                return Freed::Kept;
            }
            Freed::Dropped
        }
        State::Parked => match &sh.park {
            Some(park) => {
                park.discard(&mut m);
                Freed::Dropped
            }
            None => Freed::Kept,
        },
        State::Fetching | State::Busy => return Freed::Kept,
    };
    // Zeros are the store's own copy of a page never written back.
    m.zeroed = !m.store_zero(r);
    if freed == Freed::Dropped {
        sh.cache.lock_policy().remove(page / PAGE);
        m.state = State::Absent;
        sh.cache.put_buf(m.snapshot.take());
        m.zero_base = false;
        m.unwatched = false;
        m.force = 0;
        drop(m);
        sh.cache.release_page();
    }
    freed
}

impl Drop for Region<'_> {
    fn drop(&mut self) {
        let sh = &self.rt.sh;
        let r = &self.inner;
        r.dead.store(true, Ordering::SeqCst);
        sh.regions.write().remove(&r.start);
        // Resident pages leave the cache now; pages in a fetch or write-back
        // are released by the thread that owns them, which sees `dead`.
        for idx in r.pages.touched() {
            let mut m = r.pages[idx].lock();
            if m.pins > 0 {
                // Its guard finds no region to release it from: the
                // cache's count of pinned pages would stay up for good.
                m.pins = 0;
                sh.cache.pin_page(false);
            }
            if matches!(m.state, State::Clean | State::Dirty | State::Parked) {
                sh.cache.lock_policy().remove(r.page_addr(idx) / PAGE);
                if let Some(park) = sh.park.as_ref().filter(|_| m.state == State::Parked) {
                    park.discard(&mut m);
                }
                m.state = State::Absent;
                sh.cache.put_buf(m.snapshot.take());
                drop(m);
                sh.cache.release_page();
            }
        }
    }
}

/// Far pages held for a system call ([`Runtime::pin`]); released on drop.
/// It holds the regions it pinned, not addresses: a region dropped
/// meanwhile released its pins itself, and a new one mapped at the same
/// addresses is not another guard's to unpin.
pub struct Pinned<'a> {
    rt: &'a Runtime,
    held: Vec<(Arc<RegionInner>, std::ops::Range<usize>)>,
}

impl Drop for Pinned<'_> {
    fn drop(&mut self) {
        let cache = &self.rt.sh.cache;
        for (r, idx) in &self.held {
            for i in idx.clone() {
                let mut m = r.pages[i].lock();
                // Checked under the page's lock: `Region`'s drop marks the
                // region dead before it clears each page's pins.
                if r.dead.load(Ordering::SeqCst) {
                    break;
                }
                if m.pins == 1 {
                    cache.pin_page(false);
                }
                m.pins = m.pins.saturating_sub(1);
            }
        }
    }
}

/// The page-aligned addresses covering `[addr, addr + len)`.
fn page_span(addr: usize, len: usize) -> std::ops::Range<u64> {
    let start = addr as u64 / PAGE * PAGE;
    let end = (addr as u64).saturating_add(len as u64).div_ceil(PAGE) * PAGE;
    start..end.max(start)
}
