//! The runtime: shared state, the fault handlers, fillers, and regions.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};

use farmem_core::sync::lock_without_parking;

use farmem_policy::BlockId;
use farmem_policy::cache::ReplacementPolicy;
use farmem_policy::readahead::Readahead;

use crate::config::{Config, DirtyMode, FaultPath, WaitMode};
use crate::evict::{self, Segment};
use crate::slab::{Backing, LazyTable, ResourceManager, SlabTable};
use crate::stats::{Metrics, Stats};
use crate::store::{RemoteStore, SlabSource};
use crate::uffd::{Fault, ReadResult, Uffd, Waiter};
use crate::{PAGE, RuntimeError};

/// One page of memory, aligned as UFFDIO_COPY requires of its source.
#[repr(C, align(4096))]
pub(crate) struct PageBuf(pub [u8; PAGE as usize]);

impl PageBuf {
    pub(crate) fn zeroed() -> Box<Self> {
        Box::new(Self([0; PAGE as usize]))
    }
}

/// A fetching thread's buffers: its fault's page, and (grown at first
/// use) the pages it reads ahead after it.
pub(crate) struct FetchBufs {
    pub page: Box<PageBuf>,
    run: Vec<PageBuf>,
}

impl FetchBufs {
    pub(crate) fn new() -> Self {
        Self {
            page: PageBuf::zeroed(),
            run: Vec::new(),
        }
    }

    /// `n` contiguous, page-aligned pages (n <= MAX_FAULT_AROUND), as bytes.
    fn run(&mut self, n: usize) -> &mut [u8] {
        if self.run.len() < n {
            self.run
                .resize_with(MAX_FAULT_AROUND as usize, || PageBuf([0; PAGE as usize]));
        }
        // SAFETY: PageBuf is repr(C) around [u8; PAGE], so the Vec's first
        // n elements are n * PAGE initialised bytes in one allocation.
        unsafe { std::slice::from_raw_parts_mut(self.run.as_mut_ptr().cast(), n * PAGE as usize) }
    }
}

/// Where a page is. Transitions happen only under the page's lock; see the
/// crate docs for the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum State {
    /// Not mapped; its data is on the store. Zero: see [`page_table`].
    Absent = 0,
    /// A filler owns it and is fetching it.
    Fetching,
    /// Mapped, write-protected, identical to the store.
    Clean,
    /// Mapped and writable; differs (or may) from the store.
    Dirty,
    /// The evictor or a sync owns it: write-protected, being written back.
    Busy,
}

pub(crate) struct PageMeta {
    pub state: State,
    /// A fault found the page in a transition; wake the range when it ends.
    pub waiters: bool,
    /// The page as of its first write (line mode): the diff base.
    pub snapshot: Option<Box<PageBuf>>,
    /// Lines that must be shipped even if they equal the snapshot, because a
    /// failed batch may have half-applied them on the store.
    pub force: u64,
    /// Line mode without a snapshot: the store holds zeros for this page
    /// (zeroed slab, never written back), so zero is the diff base and no
    /// copy is needed. Pages a program fills from scratch cost no snapshot.
    pub zero_base: bool,
    /// The page was written back, so the store holds its data even if the
    /// region's slabs started zeroed ([`RegionInner::all_stored`]).
    pub stored: bool,
}

/// One lock and state per page of a `len`-byte region, all zero bytes: an
/// 8 GiB region has 2 Mi entries, and zeroed memory stays unbacked until a
/// page is first touched, so the table costs nothing for pages never used.
fn page_table(pages: usize) -> Box<[Mutex<PageMeta>]> {
    if pages == 0 {
        return Box::new([]);
    }
    let layout = std::alloc::Layout::array::<Mutex<PageMeta>>(pages).expect("page table size");
    // SAFETY: all-zero bytes are a valid unlocked `Mutex<PageMeta>` (raw
    // mutex state 0 = unlocked; Absent = 0, false, None = null, 0, false…;
    // `zeroed_page_table_is_the_initial_state` checks it), and the pointer
    // is owned by the returned Box, allocated with the Global allocator and
    // that layout.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout) as *mut Mutex<PageMeta>;
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, pages))
    }
}

pub(crate) struct RegionInner {
    pub start: u64,
    pub len: u64,
    pub pages: Box<[Mutex<PageMeta>]>,
    /// The store may hold something other than zeros for every page (else
    /// the slabs were zeroed, and a page never written back is filled
    /// locally instead of fetched).
    pub all_stored: bool,
    pub backing: Backing,
    pub dead: AtomicBool,
    /// Where first touches of never-written pages run in order: how many
    /// such pages a fault installs around itself ([`Shared::reserve_around`]).
    pub readahead: Mutex<Readahead>,
}

impl RegionInner {
    pub(crate) fn page_addr(&self, idx: usize) -> u64 {
        self.start + idx as u64 * PAGE
    }
    pub(crate) fn remote(&self, idx: usize) -> Option<u64> {
        self.backing.remote(idx as u64 * PAGE)
    }
    /// Where page `idx` is written back to, backing its chunk if needed.
    pub(crate) fn remote_or_back(
        &self,
        idx: usize,
        rm: &Arc<ResourceManager>,
    ) -> Result<u64, RuntimeError> {
        self.backing.remote_or_back(idx as u64 * PAGE, rm)
    }
}

impl Drop for RegionInner {
    fn drop(&mut self) {
        // SAFETY: the mapping was created by us with this start and length,
        // and no thread holds a reference into it any more (last Arc).
        unsafe { libc::munmap(self.start as *mut libc::c_void, self.len as usize) };
    }
}

pub(crate) struct FetchJob {
    pub region: Arc<RegionInner>,
    pub idx: usize,
    pub write: bool,
    /// Never written to the store: zero-fill instead of reading it.
    pub zero: bool,
    /// Its slot in the cache is taken already (a fault handed over by a
    /// signal handler).
    pub reserved: bool,
    pub t0: Instant,
}

/// What a signal handler passes to a filler thread.
pub(crate) enum Handoff {
    /// A fault it could not serve: fetch the page.
    Fetch(FetchJob),
    /// Its page is installed; read ahead the `pages` stored pages after it,
    /// which it took ([`Shared::reserve_around`]).
    ReadAhead { job: FetchJob, pages: usize },
}

/// Where runtime code runs: an ordinary thread, or a SIGBUS handler on a
/// program thread that may hold any lock or be inside the allocator, where
/// nothing may allocate or park.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ctx {
    Thread,
    Signal,
}

impl Ctx {
    fn lock<T>(self, m: &Mutex<T>) -> MutexGuard<'_, T> {
        match self {
            Ctx::Thread => m.lock(),
            Ctx::Signal => lock_without_parking(m),
        }
    }
}

/// What serving a fault in a signal handler came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SignalOutcome {
    /// The address is in none of this runtime's regions.
    NotOurs,
    /// The page is there now; the access may go on.
    Served,
    /// Someone else has the page (a fetch, a write-back, a filler) or the
    /// cache is full: return, let the access fault again.
    Retry,
}

/// Faults a signal handler can hand to the fillers at once.
const HANDOFF_QUEUE: usize = 1024;

pub(crate) struct Shared {
    pub cfg: Config,
    pub store: Arc<dyn RemoteStore>,
    pub rm: Arc<ResourceManager>,
    pub uffd: Uffd,
    pub regions: RwLock<BTreeMap<u64, Arc<RegionInner>>>,
    pub policy: Mutex<Box<dyn ReplacementPolicy>>,
    /// Victims a full policy pushed out on insert; the evictor takes them first.
    pub forced: Mutex<Vec<BlockId>>,
    /// Pages mapped or being fetched.
    pub resident: AtomicU64,
    /// Dirty victims whose write-back is in flight (still resident).
    pub in_flight: AtomicU64,
    pub limit: u64,
    pub high: u64,
    pub low: u64,
    pub space_lock: Mutex<()>,
    pub space_cv: Condvar,
    pub evict_kick: Mutex<bool>,
    pub evict_cv: Condvar,
    pub shutdown: AtomicBool,
    /// The store refuses the evictor's write-backs (writes fail for good,
    /// or it has no memory left to back a page): the limit turns soft, so
    /// the program runs on in local memory instead of waiting forever for
    /// room the evictor cannot make. Cleared by a round that keeps nothing.
    pub store_refusing: AtomicBool,
    /// Zeros for fault-around to install from (None: fault-around is off).
    pub zeros: Option<Zeros>,
    pub m: Metrics,
    pub epoch: Instant,
    pub last_error: Mutex<Option<String>>,
    /// Called when far data cannot be had at all ([`Runtime::on_lost`]).
    pub on_lost: RwLock<OnLost>,
    /// Recycled page buffers for snapshots, off the allocator on the fault path.
    pub pool: Mutex<Vec<Box<PageBuf>>>,
    /// Fault path `signal`: where handlers pass what they cannot do at once.
    pub handoff: Option<(Sender<Handoff>, Receiver<Handoff>)>,
    /// Fault path `signal`: replacement-order updates from signal handlers,
    /// applied under the policy lock by whoever takes it next
    /// ([`Shared::lock_policy`]): a policy may allocate as it grows, which a
    /// handler must not. Room for an insert and a touch per cached page,
    /// the most that can be pending, so sending never fails.
    pub policy_updates: Option<(Sender<PolicyUpdate>, Receiver<PolicyUpdate>)>,
}

/// A replacement-order event a signal handler could not apply itself.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PolicyUpdate {
    Insert(BlockId, u64),
    Touch(BlockId, u64),
}

impl PolicyUpdate {
    /// Applies it; returns a victim a full policy pushed out.
    fn apply(self, policy: &mut dyn ReplacementPolicy) -> Option<BlockId> {
        match self {
            PolicyUpdate::Insert(block, now) => policy.insert(block, now),
            PolicyUpdate::Touch(block, now) => {
                policy.touch(block, now);
                None
            }
        }
    }
}

/// Most pages a fault installs around itself (a window beyond it is cut).
pub const MAX_FAULT_AROUND: u32 = 64;

/// A read-only anonymous mapping: reads see the kernel's shared zero page,
/// so it is a source of zeros for UFFDIO_COPY that takes no memory.
pub(crate) struct Zeros {
    addr: u64,
    len: u64,
}

impl Zeros {
    fn map(len: u64) -> std::io::Result<Self> {
        // SAFETY: a fresh anonymous mapping; nothing else refers to it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self {
            addr: p as u64,
            len,
        })
    }

    fn as_ptr(&self) -> *const u8 {
        self.addr as *const u8
    }
}

impl Drop for Zeros {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len as usize) };
    }
}

/// Snapshot buffers kept ready while the evictor is idle (4 MiB).
const POOL_LOW: u64 = 1024;

impl Shared {
    /// A page buffer with unspecified contents.
    pub(crate) fn get_buf(&self) -> Box<PageBuf> {
        self.pool.lock().pop().unwrap_or_else(PageBuf::zeroed)
    }

    /// Tops the snapshot pool up ahead of first writes (line mode), within
    /// the cache size, so the fault path rarely allocates.
    pub(crate) fn refill_pool(&self) {
        if self.cfg.dirty != DirtyMode::Line {
            return;
        }
        let have = self.pool.lock().len() as u64;
        let resident = self.resident.load(Ordering::Relaxed);
        let (want, refill_below) = if self.handoff.is_some() {
            // Signal handlers cannot allocate a missing buffer: keep the
            // pool full even when the cache is (4 MiB at most).
            let want = POOL_LOW.min(self.limit);
            (want, want)
        } else {
            let want = POOL_LOW.min(self.limit.saturating_sub(resident));
            (want, want / 2)
        };
        if have < refill_below {
            let fresh = (have..want).map(|_| PageBuf::zeroed()).collect();
            self.put_bufs(fresh);
        }
    }

    /// Returns buffers to the pool, which keeps at most [`POOL_LOW`]: live
    /// snapshots already cost up to one page per resident page, and a pool
    /// as large again would double that for nothing.
    pub(crate) fn put_bufs(&self, bufs: Vec<Box<PageBuf>>) {
        let mut pool = self.pool.lock();
        let room = (POOL_LOW as usize).saturating_sub(pool.len());
        pool.extend(bufs.into_iter().take(room));
    }

    pub(crate) fn put_buf(&self, b: Option<Box<PageBuf>>) {
        if let Some(b) = b {
            let mut pool = self.pool.lock();
            if (pool.len() as u64) < POOL_LOW {
                pool.push(b);
            }
        }
    }

    pub(crate) fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    pub(crate) fn lookup(&self, addr: u64) -> Option<Arc<RegionInner>> {
        let regions = self.regions.read();
        let (_, r) = regions.range(..=addr).next_back()?;
        (addr < r.start + r.len).then(|| r.clone())
    }

    /// The replacement policy, locked, with every update signal handlers
    /// queued applied first.
    pub(crate) fn lock_policy(&self) -> MutexGuard<'_, Box<dyn ReplacementPolicy>> {
        let mut policy = self.policy.lock();
        if let Some((_, rx)) = &self.policy_updates {
            while let Ok(u) = rx.try_recv() {
                if let Some(v) = u.apply(policy.as_mut()) {
                    self.force_out(v);
                }
            }
        }
        policy
    }

    /// Applies a replacement-order update now, or (in a signal handler)
    /// queues it for the next [`Shared::lock_policy`]. Returns a victim a
    /// full policy pushed out.
    fn update_policy(&self, u: PolicyUpdate, ctx: Ctx) -> Option<BlockId> {
        match (ctx, &self.policy_updates) {
            (Ctx::Signal, Some((tx, _))) => {
                let mut u = u;
                // Never full (see `policy_updates`); should it be, wait
                // for the evictor to drain it.
                while let Err(e) = tx.try_send(u) {
                    u = e.into_inner();
                    self.kick_evictor();
                    std::thread::yield_now();
                }
                None
            }
            _ => u.apply(self.lock_policy().as_mut()),
        }
    }

    /// Puts a page back in the replacement order (a write-back finished
    /// or failed). A victim this pushes out of a full policy goes to the
    /// evictor: dropped here, its page would stay resident and never be
    /// evicted again, which once left a program past its local limit for
    /// good after its store refused write-backs for a while.
    pub(crate) fn reinsert(&self, block: BlockId) {
        let now = self.now();
        let pushed_out = self.lock_policy().insert(block, now);
        if let Some(v) = pushed_out {
            self.force_out(v);
        }
    }

    /// Queues a victim a full policy pushed out, for the evictor to take first.
    fn force_out(&self, v: BlockId) {
        self.forced.lock().push(v);
        self.kick_evictor();
    }

    /// Safe in a signal handler: the flag's lock is held only briefly by
    /// the evictor, and notifying never parks.
    pub(crate) fn kick_evictor(&self) {
        *lock_without_parking(&self.evict_kick) = true;
        self.evict_cv.notify_one();
    }

    /// A buffer for a page's snapshot: in a signal handler only one the
    /// pool has ready.
    fn snapshot_buf(&self, ctx: Ctx) -> Option<Box<PageBuf>> {
        match ctx {
            Ctx::Thread => Some(self.get_buf()),
            Ctx::Signal => {
                let mut pool = ctx.lock(&self.pool);
                let buf = pool.pop();
                if (pool.len() as u64) < POOL_LOW.min(self.limit) / 2 {
                    // Wake the evictor without a kick: idle, it refills the
                    // pool; kicked, it would also evict down to the low
                    // watermark.
                    drop(pool);
                    self.evict_cv.notify_one();
                }
                buf
            }
        }
    }

    pub(crate) fn release_page(&self) {
        self.resident.fetch_sub(1, Ordering::SeqCst);
        self.space_cv.notify_all();
    }

    pub(crate) fn report(&self, msg: String) {
        tracing::warn!("{msg}");
        *self.last_error.lock() = Some(msg);
    }

    /// Far data cannot be had (see [`StoreError::Lost`]): reported, then
    /// the `on_lost` hook, which by default ends the process.
    pub(crate) fn lost(&self, what: String) {
        self.m.data_lost.inc();
        self.report(what.clone());
        let hook = self.on_lost.read().clone();
        hook(&what);
    }

    /// Takes a slot in the local cache if one is free, kicking the
    /// evictor past the high watermark or when there is none.
    fn try_reserve(&self) -> bool {
        loop {
            let cur = self.resident.load(Ordering::SeqCst);
            let over = cur >= self.limit;
            if over && !self.store_refusing.load(Ordering::SeqCst) {
                self.kick_evictor();
                return false;
            }
            if self
                .resident
                .compare_exchange(cur, cur + 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                if over {
                    self.m.limit_overruns.inc();
                }
                if cur + 1 > self.high {
                    self.kick_evictor();
                }
                return true;
            }
        }
    }

    /// Takes a slot in the local cache for a page about to be fetched,
    /// waiting for the evictor when the cache is full. False at shutdown.
    fn reserve(&self) -> bool {
        let mut waited: Option<Instant> = None;
        loop {
            if self.try_reserve() {
                if let Some(t) = waited {
                    self.m.st_wait_space.since(t);
                }
                return true;
            }
            if self.shutdown.load(Ordering::SeqCst) {
                return false;
            }
            if waited.is_none() {
                waited = Some(Instant::now());
                self.m.filler_waits.inc();
            }
            let mut g = self.space_lock.lock();
            if self.resident.load(Ordering::SeqCst) >= self.limit {
                // Timed, so a notify racing with this check costs 1 ms, not a hang.
                self.space_cv.wait_for(&mut g, Duration::from_millis(1));
            }
        }
    }

    fn handle_fault(&self, f: Fault, tx: Option<&Sender<FetchJob>>, bufs: &mut FetchBufs) {
        let t0 = Instant::now();
        let page = f.addr & !(PAGE - 1);
        if f.wp {
            self.m.faults_wp.inc();
        } else {
            self.m.faults_missing.inc();
        }
        let Some(r) = self.lookup(page) else {
            self.report(format!("fault at {page:#x} outside every region"));
            return;
        };
        let idx = ((page - r.start) / PAGE) as usize;
        let mut m = r.pages[idx].lock();
        match m.state {
            State::Absent => {
                m.state = State::Fetching;
                let zero = !(m.stored || r.all_stored);
                drop(m);
                let job = FetchJob {
                    region: r,
                    idx,
                    write: f.write && self.cfg.writable_on_write_fault,
                    zero,
                    reserved: false,
                    t0,
                };
                match tx {
                    Some(tx) => {
                        if let Err(e) = tx.send(job) {
                            // Only at shutdown: fetch here so the thread is not left hanging.
                            self.fetch(e.into_inner(), bufs);
                        }
                    }
                    None => self.fetch(job, bufs),
                }
            }
            State::Fetching | State::Busy => {
                m.waiters = true;
                self.m.faults_waited.inc();
            }
            State::Clean if f.wp => {
                self.first_write(&r, &mut m, page, Ctx::Thread);
                drop(m);
                self.m.st_snapshot.since(t0);
                self.m.wp_latency.record(t0.elapsed());
            }
            State::Clean | State::Dirty => {
                // Resolved between the fault and now: let the thread retry.
                drop(m);
                self.m.faults_spurious.inc();
                let _ = self.uffd.wake(page, PAGE);
            }
        }
    }

    /// A first write to a clean page: keeps its current (= stored) contents
    /// as the diff base (line mode), marks it dirty and lets the write
    /// through.
    fn first_write(&self, r: &RegionInner, m: &mut PageMeta, page: u64, ctx: Ctx) {
        // SAFETY: the page is mapped and write-protected, so nothing
        // writes it while it is read.
        let current = unsafe { std::slice::from_raw_parts(page as *const u8, PAGE as usize) };
        self.keep_diff_base(m, !(m.stored || r.all_stored), current, ctx);
        m.state = State::Dirty;
        if let Some(v) = self.update_policy(PolicyUpdate::Touch(page / PAGE, self.now()), ctx) {
            self.force_out(v);
        }
        if let Err(e) = self.uffd.writeprotect(page, PAGE, false)
            && ctx == Ctx::Thread
        {
            self.report(format!("lifting protection of {page:#x}: {e}"));
        }
    }

    /// Line mode, a page about to be written: records what the store holds
    /// for it, the base its dirty lines are diffed against. Zeros need no
    /// copy (`zero_base`); else `current` is copied into a snapshot buffer.
    /// Without one (a signal handler finding the pool empty) the page has
    /// no diff base and is written back whole.
    fn keep_diff_base(&self, m: &mut PageMeta, store_zero: bool, current: &[u8], ctx: Ctx) {
        if self.cfg.dirty != DirtyMode::Line {
            return;
        }
        if store_zero {
            m.zero_base = true;
            return;
        }
        match self.snapshot_buf(ctx) {
            Some(mut snap) => {
                snap.0.copy_from_slice(current);
                m.snapshot = Some(snap);
                self.m.snapshots.inc();
            }
            None => self.m.snapshots_missed.inc(),
        }
    }

    /// Reads a page from the store, retrying until it works: the faulting
    /// thread cannot proceed without its page, and guessing would corrupt
    /// it. False at shutdown, or when the page is lost (the store says so,
    /// for instance once its memory node missed its deadline).
    fn read_page(&self, remote: u64, buf: &mut PageBuf) -> bool {
        let mut backoff = Duration::from_micros(100);
        loop {
            match self.store.read(remote, &mut buf.0) {
                Ok(()) => return true,
                Err(e) if e.is_lost() => {
                    self.m.fetch_errors.inc();
                    self.lost(format!("the far page at {remote:#x} cannot be read: {e}"));
                    return false;
                }
                Err(e) => {
                    self.m.fetch_errors.inc();
                    self.report(format!("fetching {remote:#x}: {e}; retrying"));
                    if self.shutdown.load(Ordering::SeqCst) {
                        return false;
                    }
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_millis(100));
                }
            }
        }
    }

    /// Brings one page in: reserve room, read it from the store, install it.
    pub(crate) fn fetch(&self, job: FetchJob, bufs: &mut FetchBufs) {
        let buf = &mut bufs.page;
        let r = &job.region;
        if !job.reserved && !self.reserve() {
            r.pages[job.idx].lock().state = State::Absent;
            return;
        }
        let page = r.page_addr(job.idx);
        let t = Instant::now();
        let filled = if job.zero {
            buf.0.fill(0);
            self.m.pages_zero_filled.inc();
            true
        } else {
            match r.remote(job.idx) {
                Some(remote) => self.read_page(remote, buf),
                None => {
                    // A page with data on the store was backed when it was
                    // written back: none here is a bug, reported, not guessed.
                    self.report(format!("page {page:#x} has no remote address"));
                    false
                }
            }
        };
        if !filled {
            r.pages[job.idx].lock().state = State::Absent;
            self.release_page();
            return;
        }
        self.m.st_fetch.since(t);
        let around = self.reserve_around(&job, Ctx::Thread);
        if let Err(e) = self.install(&job, buf, Ctx::Thread) {
            self.report(format!("installing {page:#x}: {e}"));
        }
        if job.zero {
            self.install_around(&job, around, Ctx::Thread);
        } else {
            self.read_around(&job, around, bufs);
        }
    }

    /// Installs a page whose contents are in `buf` and makes it resident:
    /// state, snapshot, replacement order. Err only if UFFDIO_COPY failed
    /// (the page stays Fetching in a signal handler, to be handed over;
    /// an ordinary thread reports it and carries on, as before).
    fn install(&self, job: &FetchJob, buf: &PageBuf, ctx: Ctx) -> std::io::Result<()> {
        let r = &job.region;
        let page = r.page_addr(job.idx);
        // Counted before the install wakes the program, so a program that
        // checks stats after its accesses sees every fetch.
        if !job.zero {
            self.m.pages_fetched.inc();
            self.m.bytes_fetched.add(PAGE);
        }
        let t = Instant::now();
        // A write fault gets the page writable at once: it would take a
        // write-protect fault right after anyway.
        // SAFETY: buf is a live, aligned page.
        let installed = unsafe { self.uffd.copy(page, buf.0.as_ptr(), PAGE, !job.write) };
        self.m.st_install.since(t);
        if ctx == Ctx::Signal && installed.is_err() {
            return installed;
        }
        let mut m = ctx.lock(&r.pages[job.idx]);
        if r.dead.load(Ordering::SeqCst) {
            m.state = State::Absent;
            drop(m);
            self.release_page();
            return installed;
        }
        if job.write {
            m.state = State::Dirty;
            // The fetched bytes are the diff base.
            self.keep_diff_base(&mut m, job.zero, &buf.0, ctx);
        } else {
            m.state = State::Clean;
        }
        // COPY woke the faults queued before it; one that arrived between
        // COPY and this lock (a write right after a read install, say)
        // found Fetching and waits for us.
        let waiters = std::mem::take(&mut m.waiters);
        let victim = self.update_policy(PolicyUpdate::Insert(page / PAGE, self.now()), ctx);
        drop(m);
        if waiters {
            let _ = self.uffd.wake(page, PAGE);
        }
        if let Some(v) = victim {
            self.force_out(v);
        }
        match ctx {
            Ctx::Thread => self.m.fault_latency.record(job.t0.elapsed()),
            Ctx::Signal => {
                self.m.fault_latency.try_record(job.t0.elapsed());
            }
        }
        installed
    }

    /// Fault-around, step one: `job` is the first touch of a never-written
    /// page (else this does nothing); if the region's readahead sees a
    /// sequential stream, takes the never-written absent pages after it
    /// that the window covers (Fetching, with their cache slots), and
    /// returns how many. Done before the job's page is installed, so the
    /// program, woken by that install, finds its next pages taken and
    /// waits for them instead of faulting them in one by one. A full cache
    /// or a page not absent ends the window early.
    fn reserve_around(&self, job: &FetchJob, ctx: Ctx) -> usize {
        if self.zeros.is_none() {
            return 0;
        }
        let (r, idx) = (&job.region, job.idx);
        // Stored pages: only while their remote addresses run on, so one
        // read covers them.
        let base = r.remote(idx);
        let mut readahead = ctx.lock(&r.readahead);
        let window = readahead.on_miss(idx as u64);
        let end = (idx + window.min(MAX_FAULT_AROUND) as usize).min(r.pages.len());
        let mut n = 0;
        for j in idx + 1..end {
            let mut m = ctx.lock(&r.pages[j]);
            let fresh = !(m.stored || r.all_stored);
            let fits = if job.zero {
                fresh
            } else {
                !fresh && base.is_some() && r.remote(j) == base.map(|b| b + (j - idx) as u64 * PAGE)
            };
            if m.state != State::Absent || !fits || !self.try_reserve() {
                break;
            }
            m.state = State::Fetching;
            n += 1;
        }
        if idx + 1 + n < end {
            readahead.cut(idx as u64, n as u32 + 1);
        }
        n
    }

    /// Fault-around, step two: installs the `n` pages after `job`'s that
    /// [`Shared::reserve_around`] took, with one UFFDIO_COPY from zeros, so
    /// a program filling fresh memory in order takes a fault per window,
    /// not per page. Line mode maps them writable: zeros are their diff
    /// base, so no write needs a fault to be seen. Page mode maps them
    /// write-protected: a first write must fault to mark a page dirty.
    fn install_around(&self, job: &FetchJob, n: usize, ctx: Ctx) {
        let Some(zeros) = self.zeros.as_ref().filter(|_| n > 0) else {
            return;
        };
        let r = &job.region;
        let first = job.idx + 1;
        let writable = self.cfg.dirty == DirtyMode::Line;
        // Counted before the install wakes the program (as in `install`).
        self.m.pages_zero_filled.add(n as u64);
        self.m.pages_faulted_around.add(n as u64);
        let t = Instant::now();
        // SAFETY: `zeros` is a live read-only mapping of MAX_FAULT_AROUND
        // pages, and n < MAX_FAULT_AROUND.
        let (copied, result) = unsafe {
            self.uffd.copy_run(
                r.page_addr(first),
                zeros.as_ptr(),
                n as u64 * PAGE,
                !writable,
            )
        };
        self.m.st_install.since(t);
        if let Err(e) = result
            && ctx == Ctx::Thread
        {
            self.report(format!("faulting around {:#x}: {e}", r.page_addr(first)));
        }
        self.finish_around(job, n, (copied / PAGE) as usize, writable, ctx);
    }

    /// Read-ahead: the `n` stored pages after `job`'s that
    /// [`Shared::reserve_around`] took, read in one request and installed
    /// write-protected (clean), so a program reading far data in order
    /// takes a fault and a round trip per window, not per page. A failed
    /// read gives them back: each is fetched, with retries, at its own
    /// fault.
    fn read_around(&self, job: &FetchJob, n: usize, bufs: &mut FetchBufs) {
        if n == 0 {
            return;
        }
        let r = &job.region;
        let first = job.idx + 1;
        let run = bufs.run(n);
        let t = Instant::now();
        let read = match r.remote(first) {
            Some(remote) => self.store.read(remote, run).map_err(|e| e.to_string()),
            None => Err("no remote address".into()),
        };
        self.m.st_fetch.since(t);
        let copied = match read {
            Ok(()) => {
                // Counted before the install wakes the program (as in `install`).
                self.m.pages_fetched.add(n as u64);
                self.m.bytes_fetched.add(n as u64 * PAGE);
                self.m.pages_faulted_around.add(n as u64);
                let t = Instant::now();
                // SAFETY: `run` is n live, page-aligned pages.
                let (copied, result) = unsafe {
                    self.uffd
                        .copy_run(r.page_addr(first), run.as_ptr(), n as u64 * PAGE, true)
                };
                self.m.st_install.since(t);
                if let Err(e) = result {
                    self.report(format!("reading ahead at {:#x}: {e}", r.page_addr(first)));
                }
                copied
            }
            Err(e) => {
                self.m.fetch_errors.inc();
                self.report(format!(
                    "reading ahead {n} pages at {:#x}: {e}; each is fetched at its fault",
                    r.page_addr(first)
                ));
                0
            }
        };
        self.finish_around(job, n, (copied / PAGE) as usize, false, Ctx::Thread);
    }

    /// Settles the `n` pages after `job`'s that fault-around took: the
    /// first `installed` become resident (Dirty with a zero diff base when
    /// mapped `writable`, else Clean), the rest Absent again.
    fn finish_around(&self, job: &FetchJob, n: usize, installed: usize, writable: bool, ctx: Ctx) {
        let r = &job.region;
        let first = job.idx + 1;
        let now = self.now();
        for j in first..first + n {
            let mut m = ctx.lock(&r.pages[j]);
            let victim = if j >= first + installed || r.dead.load(Ordering::SeqCst) {
                m.state = State::Absent;
                None
            } else {
                if writable {
                    m.state = State::Dirty;
                    self.keep_diff_base(&mut m, true, &[], ctx);
                } else {
                    m.state = State::Clean;
                }
                self.update_policy(PolicyUpdate::Insert(r.page_addr(j) / PAGE, now), ctx)
            };
            let absent = m.state == State::Absent;
            let waiters = std::mem::take(&mut m.waiters);
            drop(m);
            if absent {
                self.release_page();
            }
            if waiters {
                let _ = self.uffd.wake(r.page_addr(j), PAGE);
            }
            if let Some(v) = victim {
                self.force_out(v);
            }
        }
    }

    /// Serves a fault at `addr` in the faulting thread's SIGBUS handler
    /// (fault path `signal`): no allocation, no parking, no report. A page
    /// it cannot fetch at once goes to a filler, and the thread retries.
    pub(crate) fn signal_fault(&self, addr: u64, write: Option<bool>) -> SignalOutcome {
        let t0 = Instant::now();
        let page = addr & !(PAGE - 1);
        let r = {
            let Some(regions) = self.regions.try_read() else {
                // A region being mapped or dropped; ours or not, ask again.
                return SignalOutcome::Retry;
            };
            match regions.range(..=page).next_back() {
                Some((_, r)) if page < r.start + r.len => r.clone(),
                _ => return SignalOutcome::NotOurs,
            }
        };
        let idx = ((page - r.start) / PAGE) as usize;
        let mut m = lock_without_parking(&r.pages[idx]);
        match m.state {
            State::Absent => {
                if !self.try_reserve() {
                    return SignalOutcome::Retry;
                }
                m.state = State::Fetching;
                let zero = !(m.stored || r.all_stored);
                drop(m);
                self.m.faults_missing.inc();
                let job = FetchJob {
                    region: r,
                    idx,
                    write: write == Some(true) && self.cfg.writable_on_write_fault,
                    zero,
                    reserved: true,
                    t0,
                };
                self.fetch_in_signal(job)
            }
            State::Fetching | State::Busy => SignalOutcome::Retry,
            // Mapped and write-protected: this access is a write, unless
            // the fault raced with the install and was a read.
            State::Clean if write != Some(false) => {
                self.m.faults_wp.inc();
                self.first_write(&r, &mut m, page, Ctx::Signal);
                drop(m);
                self.m.st_snapshot.since(t0);
                self.m.wp_latency.try_record(t0.elapsed());
                SignalOutcome::Served
            }
            State::Clean | State::Dirty => {
                self.m.faults_spurious.inc();
                SignalOutcome::Served
            }
        }
    }

    /// Reads and installs a page from a signal handler, or hands it over.
    fn fetch_in_signal(&self, job: FetchJob) -> SignalOutcome {
        let mut buf = PageBuf([0; PAGE as usize]);
        let t = Instant::now();
        let filled = if job.zero {
            self.m.pages_zero_filled.inc();
            true
        } else {
            job.region
                .remote(job.idx)
                .is_some_and(|remote| self.store.read_in_signal(remote, &mut buf.0))
        };
        if filled {
            self.m.st_fetch.since(t);
            let around = self.reserve_around(&job, Ctx::Signal);
            let installed = self.install(&job, &buf, Ctx::Signal).is_ok();
            if job.zero {
                // Installed or not, the pages around are ours to finish.
                self.install_around(&job, around, Ctx::Signal);
            } else if installed && around > 0 {
                // A window of stored pages is one larger read than a handler
                // can hold: a filler reads it while this thread goes on.
                self.hand_off(Handoff::ReadAhead { job, pages: around });
                return SignalOutcome::Served;
            } else {
                self.finish_around(&job, around, 0, false, Ctx::Signal);
            }
            if installed {
                return SignalOutcome::Served;
            }
        }
        self.m.faults_handed_off.inc();
        self.hand_off(Handoff::Fetch(job));
        SignalOutcome::Retry
    }

    /// Passes work to the filler threads; if their queue is full, gives
    /// the pages it holds back (Absent, slots released) for their faults
    /// to take again.
    fn hand_off(&self, h: Handoff) {
        let refused = match &self.handoff {
            Some((tx, _)) => tx.try_send(h).err().map(|e| e.into_inner()),
            None => Some(h),
        };
        match refused {
            None => {}
            Some(Handoff::Fetch(job)) => {
                lock_without_parking(&job.region.pages[job.idx]).state = State::Absent;
                self.release_page();
            }
            Some(Handoff::ReadAhead { job, pages }) => {
                self.finish_around(&job, pages, 0, false, Ctx::Signal)
            }
        }
    }
}

fn monitor(sh: Arc<Shared>, tx: Option<Sender<FetchJob>>) {
    let mut bufs = FetchBufs::new();
    // Without epoll, fall back to poll(2) (every handler wakes per fault).
    let waiter = match sh.uffd.waiter() {
        Ok(w) => Some(w),
        Err(e) => {
            sh.report(format!("epoll on userfaultfd: {e}; using poll"));
            None
        }
    };
    let mut last = Instant::now();
    while !sh.shutdown.load(Ordering::Relaxed) {
        match sh.uffd.read() {
            Ok(ReadResult::Fault(f)) => {
                sh.handle_fault(f, tx.as_ref(), &mut bufs);
                last = Instant::now();
            }
            Ok(ReadResult::Other(_)) => {}
            Ok(ReadResult::Empty) => {
                if let Err(e) = idle(&sh.uffd, waiter.as_ref(), sh.cfg.wait, last) {
                    sh.report(format!("polling userfaultfd: {e}"));
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            Err(e) => {
                sh.report(format!("reading userfaultfd: {e}"));
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// Exit status of a process whose far data was lost (EX_IOERR): see
/// [`Runtime::on_lost`].
pub const LOST_EXIT_CODE: i32 = 74;

/// What to do when far data is lost.
pub(crate) type OnLost = Arc<dyn Fn(&str) + Send + Sync>;

/// The default [`Runtime::on_lost`]: one line on stderr and `_exit`, which
/// runs no exit handler (they could touch far memory and wait forever).
fn stop_process(what: &str) {
    let line = format!(
        "farmem: far memory lost: {what}; stopping the program (exit {LOST_EXIT_CODE}) rather than let it go on without that data\n"
    );
    // SAFETY: writes our own buffer to fd 2, then ends the process.
    unsafe {
        libc::write(2, line.as_ptr().cast(), line.len());
        libc::_exit(LOST_EXIT_CODE);
    }
}

/// A fresh private anonymous mapping of `len` bytes for userfaultfd to
/// serve, in 4 KiB pages only: a huge page would be fetched and tracked as
/// one block. Returns its address.
pub(crate) fn map_pages(len: u64) -> Result<u64, RuntimeError> {
    // SAFETY: a fresh anonymous mapping; nothing else refers to it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(RuntimeError::Mmap(std::io::Error::last_os_error()));
    }
    // SAFETY: advice on our own mapping.
    unsafe { libc::madvise(p, len as usize, libc::MADV_NOHUGEPAGE) };
    Ok(p as u64)
}

/// What a fault handler does when the descriptor is empty, by `wait` mode:
/// spin, or sleep (at most 20 ms, so shutdown is seen) until a message may
/// be readable. `last` is when the previous fault was read.
pub(crate) fn idle(
    uffd: &Uffd,
    waiter: Option<&Waiter>,
    wait: WaitMode,
    last: Instant,
) -> std::io::Result<()> {
    let spin = match wait {
        WaitMode::Spin => true,
        WaitMode::Poll => false,
        WaitMode::Hybrid { spin_us } => last.elapsed() < Duration::from_micros(spin_us),
    };
    if spin {
        std::hint::spin_loop();
        return Ok(());
    }
    match waiter {
        Some(w) => w.wait(20),
        None => uffd.poll(20),
    }
    .map(drop)
}

fn filler(sh: Arc<Shared>, rx: Receiver<FetchJob>) {
    let mut bufs = FetchBufs::new();
    for job in rx {
        sh.fetch(job, &mut bufs);
    }
}

/// Fault path `signal`: fetches what signal handlers handed over (through
/// the ordinary path, which retries and reports), and reopens the store's
/// signal-safe readers that broke.
fn handoff_filler(sh: Arc<Shared>) {
    let Some((_, rx)) = &sh.handoff else { return };
    let mut bufs = FetchBufs::new();
    while !sh.shutdown.load(Ordering::SeqCst) {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(Handoff::Fetch(job)) => {
                if let Err(e) = sh.store.prepare_read_in_signal() {
                    sh.report(format!("reopening signal-safe store readers: {e}"));
                }
                sh.fetch(job, &mut bufs);
            }
            Ok(Handoff::ReadAhead { job, pages }) => sh.read_around(&job, pages, &mut bufs),
            Err(_) => {}
        }
    }
    // Shutting down: pages handed over stay Absent, their slots given back.
    while let Ok(h) = rx.try_recv() {
        match h {
            Handoff::Fetch(job) => {
                job.region.pages[job.idx].lock().state = State::Absent;
                sh.release_page();
            }
            Handoff::ReadAhead { job, pages } => {
                sh.finish_around(&job, pages, 0, false, Ctx::Thread)
            }
        }
    }
}

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
        cfg.validate()?;
        let uffd = match cfg.fault_path {
            FaultPath::Thread => Uffd::open(),
            FaultPath::Signal => {
                if !store.prepare_read_in_signal()? {
                    return Err(RuntimeError::Config(
                        "fault path `signal` needs a store that can be read from a signal handler"
                            .into(),
                    ));
                }
                Uffd::open_signalling()
            }
        }
        .map_err(RuntimeError::Uffd)?;
        if uffd.features & crate::uffd::UFFD_FEATURE_PAGEFAULT_FLAG_WP == 0 {
            return Err(RuntimeError::Config(
                "kernel userfaultfd lacks write-protect support".into(),
            ));
        }
        let limit = cfg.local_bytes / PAGE;
        let high = ((limit as f64 * cfg.high_watermark) as u64).clamp(1, limit);
        let low = ((limit as f64 * cfg.low_watermark) as u64).min(high - 1);
        // Room for every page the limit allows plus slack, so insert never
        // has to pick a victim behind the evictor's back.
        let policy = cfg
            .policy
            .build(limit as usize + 64)
            .map_err(|e| RuntimeError::Config(e.to_string()))?;
        let rm = Arc::new(ResourceManager::new(slabs, cfg.slab_batch));
        let sh = Arc::new(Shared {
            store,
            rm: rm.clone(),
            uffd,
            regions: RwLock::new(BTreeMap::new()),
            policy: Mutex::new(policy),
            forced: Mutex::new(Vec::new()),
            resident: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            limit,
            high,
            low,
            space_lock: Mutex::new(()),
            space_cv: Condvar::new(),
            evict_kick: Mutex::new(false),
            evict_cv: Condvar::new(),
            shutdown: AtomicBool::new(false),
            store_refusing: AtomicBool::new(false),
            zeros: if cfg.fault_around.max_blocks > 1 {
                Some(Zeros::map(MAX_FAULT_AROUND as u64 * PAGE).map_err(RuntimeError::Mmap)?)
            } else {
                None
            },
            m: Metrics::default(),
            epoch: Instant::now(),
            last_error: Mutex::new(None),
            on_lost: RwLock::new(Arc::new(stop_process)),
            pool: Mutex::new(Vec::new()),
            handoff: (cfg.fault_path == FaultPath::Signal)
                .then(|| crossbeam_channel::bounded(HANDOFF_QUEUE)),
            policy_updates: (cfg.fault_path == FaultPath::Signal)
                .then(|| crossbeam_channel::bounded(2 * limit as usize + 64)),
            cfg,
        });
        let signal = match sh.cfg.fault_path {
            FaultPath::Thread => None,
            FaultPath::Signal => {
                sh.refill_pool();
                Some(crate::signal::register(&sh)?)
            }
        };
        let mut threads = Vec::new();
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    farmem_net::block_async_signals();
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
        let s = sh.clone();
        threads.push(spawn(
            "farmem-ship",
            Box::new(move || evict::shipper(s, ship_rx, free_tx)),
        )?);
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
        let len = match &backing {
            Backing::Eager(t) => t.len(),
            Backing::Lazy(t) => t.len(),
        };
        let start = map_pages(len)?;
        let inner = Arc::new(RegionInner {
            start,
            len,
            pages: page_table((len / PAGE) as usize),
            all_stored: stored,
            backing,
            dead: AtomicBool::new(false),
            readahead: Mutex::new(Readahead::new(self.sh.cfg.fault_around)),
        });
        self.sh
            .uffd
            .register(start, len)
            .map_err(RuntimeError::Uffd)?;
        self.sh.regions.write().insert(start, inner.clone());
        Ok(Region { rt: self, inner })
    }

    /// Writes back every dirty page of every region ([`Region::sync`]).
    /// Dropping a runtime or region does not: unsynced data is discarded,
    /// as at process exit.
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

    pub fn stats(&self) -> Stats {
        self.sh
            .m
            .snapshot(self.sh.resident.load(Ordering::SeqCst), self.sh.limit)
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
            "states {counts:?} waiters {waiters} policy {} resident {} in_flight {} forced {} limit {} high {} low {}",
            self.sh.lock_policy().len(),
            self.sh.resident.load(Ordering::SeqCst),
            self.sh.in_flight.load(Ordering::SeqCst),
            self.sh.forced.lock().len(),
            self.sh.limit,
            self.sh.high,
            self.sh.low
        )
    }

    /// Replaces what happens when far data cannot be had (its memory node
    /// restarted or stayed unreachable past its deadline with no copy
    /// left): by default the process writes the reason on stderr and exits
    /// with [`LOST_EXIT_CODE`] at once, since the access that needed the
    /// data cannot complete and going on would compute on what is left.
    /// A hook that returns leaves that access waiting.
    pub fn on_lost(&self, hook: impl Fn(&str) + Send + Sync + 'static) {
        *self.sh.on_lost.write() = Arc::new(hook);
    }

    /// The most recent error the background threads reported, if any.
    pub fn last_error(&self) -> Option<String> {
        self.sh.last_error.lock().clone()
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
        self.sh.kick_evictor();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
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

impl Drop for Region<'_> {
    fn drop(&mut self) {
        let sh = &self.rt.sh;
        let r = &self.inner;
        r.dead.store(true, Ordering::SeqCst);
        sh.regions.write().remove(&r.start);
        // Resident pages leave the cache now; pages in a fetch or write-back
        // are released by the thread that owns them, which sees `dead`.
        for (idx, p) in r.pages.iter().enumerate() {
            let mut m = p.lock();
            if matches!(m.state, State::Clean | State::Dirty) {
                sh.lock_policy().remove(r.page_addr(idx) / PAGE);
                m.state = State::Absent;
                sh.put_buf(m.snapshot.take());
                drop(m);
                sh.release_page();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_page_table_is_the_initial_state() {
        let table = page_table(3);
        assert_eq!(table.len(), 3);
        for m in table.iter() {
            let mut g = m.try_lock().expect("a zeroed mutex is unlocked");
            assert_eq!(g.state, State::Absent);
            assert!(!g.waiters && !g.stored && !g.zero_base);
            assert!(g.snapshot.is_none() && g.force == 0);
            g.snapshot = Some(PageBuf::zeroed());
        }
        // Entries lock independently and drop what they own.
        let _a = table[0].lock();
        assert!(table[1].try_lock().is_some());
        assert!(page_table(0).is_empty());
    }
}
