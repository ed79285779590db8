//! The local cache: which pages may be resident, in what replacement
//! order, and the buffers their snapshots are kept in. It owns the policy,
//! the watermarks and the snapshot pool behind methods, so the fault path,
//! the evictor and the facade agree on one set of rules for them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex, MutexGuard};

use farmem_core::sync::lock_without_parking;
use farmem_policy::BlockId;
use farmem_policy::cache::ReplacementPolicy;
use farmem_policy::diffbase::DiffBase;
use farmem_policy::watermark::{Watermarks, around_allowance, policy_capacity};

use crate::bufs::{Arena, Buf};
use crate::config::{Config, DirtyMode, FaultPath};
use crate::error::RuntimeError;
use crate::page::{PAGE, PageMeta};
use crate::stats::Metrics;

/// Where runtime code runs: an ordinary thread, or a SIGBUS handler on a
/// program thread that may hold any lock or be inside the allocator, where
/// nothing may allocate or park.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ctx {
    Thread,
    Signal,
}

impl Ctx {
    pub(crate) fn lock<T>(self, m: &Mutex<T>) -> MutexGuard<'_, T> {
        match self {
            Ctx::Thread => m.lock(),
            Ctx::Signal => lock_without_parking(m),
        }
    }
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

/// The least room the cache keeps for pages, as a share of the limit
/// (1/8), and in pages ([`MIN_ROOM_PAGES`]). Charged past it, the charges
/// besides the cache (page tables, the process's own memory, a compressed
/// pool, snapshot buffers) could leave no room at all: the cache then held
/// one page, and an access needing two far pages at once (a `memcmp` of
/// two far buffers, a load straddling pages) evicted each for the other
/// forever. Past the floor the limit is exceeded instead, by at most the
/// floor (and a fault-around window's allowance past the room), and
/// counted (`room_floored`).
const MIN_ROOM_SHARE: u64 = 8;
const MIN_ROOM_PAGES: u64 = 16;

/// Snapshot buffers kept ready while the evictor is idle (4 MiB).
const POOL_LOW: u64 = 1024;

/// How often the process's resident memory is measured when the limit
/// counts it: a read of /proc/self/statm, some microseconds.
const MEASURE_EVERY: Duration = Duration::from_millis(20);

/// Measured sooner, but at most every [`MEASURE_SOON`], while the cache
/// grows by a [`MEASURE_GROWTH_SHARE`]th of the limit: a program can fill
/// its whole cache in fault-around windows within [`MEASURE_EVERY`], and
/// its own heap, grown meanwhile, must be charged before the cache holds
/// what the limit leaves for it (else the process holds more than the
/// limit until the next measure).
const MEASURE_SOON: Duration = Duration::from_millis(1);
const MEASURE_GROWTH_SHARE: u64 = 32;

/// Whether the process's memory is measured again, `elapsed` after the
/// last measure, the cache having grown by `grown` pages since, under a
/// limit of `limit` pages.
fn measure_due(elapsed: Duration, grown: u64, limit: u64) -> bool {
    let fast_growth = grown >= (limit / MEASURE_GROWTH_SHARE).max(1);
    elapsed >= MEASURE_EVERY || (fast_growth && elapsed >= MEASURE_SOON)
}

/// The process's resident anonymous pages (/proc/self/statm: resident less
/// shared, the pages backed by files and shared memory), or None if
/// unreadable. File pages are the page cache's: shared with every process
/// that maps the file, and charged by a cgroup only to the one that first
/// read them (libraries are mostly in the cache already), so a limit that
/// charged them would hold farmem to less memory than the kernel's swap
/// under a cgroup of the same size.
fn process_anon_pages() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let mut fields = statm.split_whitespace().skip(1);
    // In the system's pages, which are the runtime's.
    let resident = fields.next()?.parse::<u64>().ok()?;
    let shared = fields.next()?.parse::<u64>().ok()?;
    Some(resident.saturating_sub(shared))
}

pub(crate) struct Cache {
    policy: Mutex<Box<dyn ReplacementPolicy>>,
    /// Victims a full policy pushed out on insert; the evictor takes them first.
    forced: Mutex<Vec<BlockId>>,
    /// Pages mapped or being fetched.
    resident: AtomicU64,
    /// Dirty victims whose write-back is in flight (still resident).
    in_flight: AtomicU64,
    limit: u64,
    /// When the evictor runs and how far, in shares of [`Self::room`].
    marks: Watermarks,
    space_lock: Mutex<()>,
    space_cv: Condvar,
    evict_kick: Mutex<bool>,
    evict_cv: Condvar,
    /// The store refuses the evictor's write-backs (writes fail for good,
    /// or it has no memory left to back a page): the limit turns soft, so
    /// the program runs on in local memory instead of waiting forever for
    /// room the evictor cannot make. Cleared by a round that keeps nothing.
    store_refusing: AtomicBool,
    /// Pages pinned by system calls in flight (`Runtime::pin`),
    /// resident or not. They may be resident beyond the room, and the
    /// evictor leaves them be: a call's own next touch must not wait for
    /// room only its end can make. So resident pages stay within the room
    /// plus these, which the callers keep to a share of the room.
    pinned: AtomicU64,
    /// Recycled page buffers for snapshots, off the allocator on the fault path.
    pool: Mutex<Vec<Buf>>,
    /// Where snapshot buffers live; given back beyond the pool, their
    /// memory goes back to the system at once.
    arena: Arena,
    /// Most buffers the pool keeps: [`POOL_LOW`], at most half the share
    /// of the cache diff bases may take (they count against it).
    pool_cap: u64,
    /// Snapshot buffers alive, kept by pages or pooled: local memory the
    /// limit counts with the resident pages.
    buffers: AtomicU64,
    /// Pages of the runtime's own bookkeeping that grow with far memory
    /// used (the regions' page tables), counted against the limit.
    table_pages: AtomicU64,
    /// Pages of local memory the store holds (a compressed pool), as last
    /// reported by the shipper.
    store_pages: AtomicU64,
    /// [`Config::limit_counts_process`]: the limit bounds the process's
    /// resident memory, not the cache alone.
    count_process: bool,
    /// The process's resident anonymous pages that nothing above counts
    /// (its own heap and stacks, the runtime's books), as last measured;
    /// file pages are not charged ([`process_anon_pages`]).
    outside_pages: AtomicU64,
    /// The most `outside_pages` ever measured: a program's own heap can
    /// swell for a phase and shrink by its exit.
    outside_peak: AtomicU64,
    /// When the process's resident memory was last measured, and the
    /// cache's resident pages then.
    measured: Mutex<(Instant, u64)>,
    /// Whether first writes keep a diff base.
    diff: Mutex<DiffBase>,
    /// Line mode: first writes take snapshots from the pool.
    line_mode: bool,
    /// Fault path `signal`: replacement-order updates from signal handlers,
    /// applied under the policy lock by whoever takes it next
    /// ([`Cache::lock_policy`]): a policy may allocate as it grows, which a
    /// handler must not. Room for an insert and a touch per cached page,
    /// the most that can be pending, so sending never fails.
    policy_updates: Option<(Sender<PolicyUpdate>, Receiver<PolicyUpdate>)>,
}

impl Cache {
    /// A cache of `cfg.local_bytes`, its watermarks and policy.
    pub(crate) fn new(cfg: &Config) -> Result<Self, RuntimeError> {
        let limit = cfg.local_bytes / PAGE;
        let policy = cfg
            .policy
            .build(policy_capacity(limit))
            .map_err(|e| RuntimeError::Config(e.to_string()))?;
        let signal = cfg.fault_path == FaultPath::Signal;
        Ok(Self {
            policy: Mutex::new(policy),
            forced: Mutex::new(Vec::new()),
            resident: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            limit,
            marks: cfg.watermarks(),
            space_lock: Mutex::new(()),
            space_cv: Condvar::new(),
            evict_kick: Mutex::new(false),
            evict_cv: Condvar::new(),
            store_refusing: AtomicBool::new(false),
            pinned: AtomicU64::new(0),
            pool: Mutex::new(Vec::new()),
            arena: Arena::new(limit as usize + 64).map_err(RuntimeError::Mmap)?,
            pool_cap: POOL_LOW.min((limit as f64 * cfg.diff_base.max_share / 2.0) as u64),
            buffers: AtomicU64::new(0),
            table_pages: AtomicU64::new(0),
            store_pages: AtomicU64::new(0),
            count_process: cfg.limit_counts_process,
            outside_pages: AtomicU64::new(0),
            outside_peak: AtomicU64::new(0),
            measured: Mutex::new((Instant::now(), 0)),
            diff: Mutex::new(DiffBase::new(cfg.diff_base)),
            line_mode: cfg.dirty == DirtyMode::Line,
            policy_updates: signal.then(|| crossbeam_channel::bounded(2 * limit as usize + 64)),
        })
    }

    pub(crate) fn resident(&self) -> u64 {
        self.resident.load(Ordering::SeqCst)
    }

    /// Snapshot buffers alive (kept by dirty pages, or pooled).
    pub(crate) fn buffers(&self) -> u64 {
        self.buffers.load(Ordering::SeqCst)
    }

    /// Pages the regions' page tables take, as last counted.
    pub(crate) fn table_pages(&self) -> u64 {
        self.table_pages.load(Ordering::SeqCst)
    }

    /// The regions' page tables now take `pages`: the evictor makes room
    /// for them as for any page.
    pub(crate) fn set_table_pages(&self, pages: u64) {
        self.table_pages.store(pages, Ordering::SeqCst);
    }

    /// The page tables' share of the limit: all of them, up to a quarter
    /// of it. They cannot be evicted, so counting more could leave no room
    /// for any page (a program touching an 8 GiB heap's every table entry
    /// through a 256 KiB cache); past that the limit is exceeded by what
    /// the tables take beyond it.
    fn table_charge(&self) -> u64 {
        self.table_pages().min(self.limit / 4)
    }

    /// Pages of local memory the store holds now (a compressed pool).
    pub(crate) fn store_pages(&self) -> u64 {
        self.store_pages.load(Ordering::SeqCst)
    }

    /// The store now holds `bytes` of local memory: counted against the
    /// limit, so the cache shrinks as a compressed pool grows.
    pub(crate) fn set_store_bytes(&self, bytes: u64) {
        self.store_pages
            .store(bytes.div_ceil(PAGE), Ordering::SeqCst);
    }

    /// The process's resident pages the cache does not count, as last
    /// measured (0 unless the limit counts the process).
    pub(crate) fn outside_pages(&self) -> u64 {
        self.outside_pages.load(Ordering::SeqCst)
    }

    pub(crate) fn outside_peak(&self) -> u64 {
        self.outside_peak.load(Ordering::Relaxed)
    }

    /// The outside pages' share of the limit: all of them, up to half of
    /// it, so a program whose own local memory is larger still has a cache
    /// (the limit is then exceeded by the rest).
    fn outside_charge(&self) -> u64 {
        self.outside_pages().min(self.limit / 2)
    }

    /// Measures the process's resident memory, every [`MEASURE_EVERY`] or
    /// sooner while the cache grows ([`MEASURE_SOON`]), when the limit
    /// counts it: what the cache does not count is charged against the
    /// limit, as a cgroup would charge it.
    pub(crate) fn measure_process(&self) {
        if !self.count_process {
            return;
        }
        {
            let mut measured = self.measured.lock();
            let (at, resident_then) = *measured;
            let resident = self.resident();
            let grown = resident.saturating_sub(resident_then);
            if !measure_due(at.elapsed(), grown, self.limit) {
                return;
            }
            *measured = (Instant::now(), resident);
        }
        self.charge_process();
    }

    /// Measures the process's resident memory now and charges what the
    /// cache does not count (when the limit counts the process). Also at
    /// start: a program filling fresh memory fills the cache within the
    /// first [`MEASURE_EVERY`], and its heap must already be charged then.
    pub(crate) fn charge_process(&self) {
        if !self.count_process {
            return;
        }
        let Some(rss) = process_anon_pages() else {
            return;
        };
        let counted = self.resident() + self.buffers() + self.table_pages() + self.store_pages();
        let outside = rss.saturating_sub(counted);
        self.outside_pages.store(outside, Ordering::SeqCst);
        self.outside_peak.fetch_max(outside, Ordering::Relaxed);
    }

    /// Local pages in use besides resident ones: snapshot buffers, page
    /// tables, the store's own and, when the limit counts the process,
    /// the rest of its resident memory.
    fn overheads(&self) -> u64 {
        self.buffers() + self.table_charge() + self.store_pages() + self.outside_charge()
    }

    /// Local pages the cache has for the program's pages now: its limit
    /// less what else it is charged, but never below [`Self::room_floor`].
    /// Shrinks as the process's own memory grows, when the limit counts
    /// the process.
    pub(crate) fn room(&self) -> u64 {
        self.room_with(self.overheads())
    }

    fn room_with(&self, overheads: u64) -> u64 {
        self.limit.saturating_sub(overheads).max(self.room_floor())
    }

    /// See [`MIN_ROOM_SHARE`].
    fn room_floor(&self) -> u64 {
        (self.limit / MIN_ROOM_SHARE).max(MIN_ROOM_PAGES.min(self.limit))
    }

    /// Pages pinned now (see the field `pinned`).
    pub(crate) fn pinned(&self) -> u64 {
        self.pinned.load(Ordering::SeqCst)
    }

    /// A page's first pin was taken (`pinned`) or its last one released.
    pub(crate) fn pin_page(&self, pinned: bool) {
        if pinned {
            self.pinned.fetch_add(1, Ordering::SeqCst);
        } else {
            // Saturating: a release never takes more than was added, but
            // a wrapped count would let faults take every slot.
            let _ = self
                .pinned
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                    Some(n.saturating_sub(1))
                });
        }
    }

    /// Local pages in use: resident ones and the overheads.
    fn used(&self) -> u64 {
        self.resident() + self.overheads()
    }

    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// Signal handlers take snapshot buffers only from the pool.
    fn handlers_need_pool(&self) -> bool {
        self.policy_updates.is_some()
    }

    /// A page buffer with unspecified contents; None only when the arena
    /// is out of slots (as many buffers as the cache has pages).
    fn get_buf(&self) -> Option<Buf> {
        let pooled = self.pool.lock().pop();
        pooled.or_else(|| self.new_buf())
    }

    /// A new snapshot buffer, counted until [`Self::put_buf`] discards it.
    fn new_buf(&self) -> Option<Buf> {
        let b = self.arena.take()?;
        self.buffers.fetch_add(1, Ordering::SeqCst);
        Some(b)
    }

    /// Tops the snapshot pool up ahead of first writes (line mode), within
    /// the cache size, so the fault path rarely allocates.
    pub(crate) fn refill_pool(&self) {
        if !self.line_mode {
            return;
        }
        let have = self.pool.lock().len() as u64;
        let target = self.pool_target();
        let (want, refill_below) = if self.handlers_need_pool() {
            // Signal handlers cannot allocate a missing buffer: keep the
            // pool full even when the cache is (4 MiB at most).
            (target, target)
        } else {
            let want = target.min(self.limit.saturating_sub(self.used()));
            (want, want / 2)
        };
        if have > target {
            // Pages turned out rewritten whole: the samples need fewer
            // spare buffers, and the rest go back to the cache.
            let mut pool = self.pool.lock();
            let extra = pool.len().saturating_sub(target as usize);
            let spare: Vec<Buf> = pool.drain(..extra).collect();
            drop(pool);
            self.discard(spare);
        } else if have < refill_below {
            let fresh = (have..want).map_while(|_| self.new_buf()).collect();
            self.put_bufs(fresh);
        }
    }

    /// Spare snapshot buffers worth pooling: `pool_cap`, and no more than
    /// half the bases [`DiffBase::budget`] allows now (few while pages are
    /// written back whole).
    fn pool_target(&self) -> u64 {
        let budget = self.diff.lock().budget(self.limit);
        self.pool_cap.min(budget.div_ceil(2))
    }

    /// Returns buffers to the pool, which keeps at most
    /// [`Self::pool_target`]; the rest are discarded.
    pub(crate) fn put_bufs(&self, mut bufs: Vec<Buf>) {
        let target = self.pool_target();
        let mut pool = self.pool.lock();
        let room = (target as usize).saturating_sub(pool.len());
        let keep = bufs.len().saturating_sub(room);
        pool.extend(bufs.drain(keep..));
        drop(pool);
        self.discard(bufs);
    }

    pub(crate) fn put_buf(&self, b: Option<Buf>) {
        if let Some(b) = b {
            self.put_bufs(vec![b]);
        }
    }

    /// Snapshot buffers given back to the system: room for as many pages.
    fn discard(&self, bufs: Vec<Buf>) {
        let n = bufs.len() as u64;
        if n > 0 {
            self.arena.discard(bufs);
            self.buffers.fetch_sub(n, Ordering::SeqCst);
            self.space_cv.notify_all();
        }
    }

    /// A buffer for a page's snapshot: in a signal handler only one the
    /// pool has ready.
    fn snapshot_buf(&self, ctx: Ctx) -> Option<Buf> {
        match ctx {
            Ctx::Thread => self.get_buf(),
            Ctx::Signal => {
                let mut pool = ctx.lock(&self.pool);
                let buf = pool.pop();
                if (pool.len() as u64) < self.pool_cap / 2 {
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

    /// A page about to be written: records the base its dirty lines are
    /// diffed against, what the store holds for it (or, for a `zeroed`
    /// page, what it came in as). Zeros (`zeros`) need no copy
    /// (`zero_base`, in both modes: a page still all zeros at eviction
    /// stays unstored); else, in line mode, `current` is copied into a
    /// snapshot buffer. Without one (a signal handler finding the pool
    /// empty) the page has no diff base and is written back whole.
    pub(crate) fn keep_diff_base(
        &self,
        m: &mut PageMeta,
        zeros: bool,
        current: &[u8],
        ctx: Ctx,
        metrics: &Metrics,
    ) {
        if zeros {
            m.zero_base = true;
            return;
        }
        if !self.line_mode {
            return;
        }
        let alive = self
            .buffers()
            .saturating_sub(ctx.lock(&self.pool).len() as u64);
        let mut diff = ctx.lock(&self.diff);
        if !diff.keep(alive, self.limit) {
            metrics.snapshots_skipped.inc();
            if diff.at_cap(alive, self.limit) {
                metrics.snapshots_capped.inc();
            }
            return;
        }
        drop(diff);
        match self.snapshot_buf(ctx) {
            Some(mut snap) => {
                snap.copy_from_slice(current);
                m.snapshot = Some(snap);
                metrics.snapshots.inc();
            }
            None => metrics.snapshots_missed.inc(),
        }
    }

    /// A page diffed against its snapshot at write-back had `dirty_lines`
    /// of its lines changed.
    pub(crate) fn observe_diff(&self, dirty_lines: u32) {
        self.diff.lock().observe(dirty_lines);
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
    /// queues it for the next [`Cache::lock_policy`]. Returns a victim a
    /// full policy pushed out, for [`Cache::force_out`].
    pub(crate) fn update_policy(&self, u: PolicyUpdate, ctx: Ctx) -> Option<BlockId> {
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
    pub(crate) fn reinsert(&self, block: BlockId, now: u64) {
        let pushed_out = self.lock_policy().insert(block, now);
        if let Some(v) = pushed_out {
            self.force_out(v);
        }
    }

    /// Queues a victim a full policy pushed out, for the evictor to take first.
    pub(crate) fn force_out(&self, v: BlockId) {
        self.forced.lock().push(v);
        self.kick_evictor();
    }

    /// Safe in a signal handler: the flag's lock is held only briefly by
    /// the evictor, and notifying never parks.
    pub(crate) fn kick_evictor(&self) {
        *lock_without_parking(&self.evict_kick) = true;
        self.evict_cv.notify_one();
    }

    pub(crate) fn release_page(&self) {
        self.resident.fetch_sub(1, Ordering::SeqCst);
        self.space_cv.notify_all();
    }

    /// Takes a slot in the local cache if one is free, kicking the
    /// evictor past the high watermark or when there is none.
    ///
    /// Slots are the room plus the pinned pages, and the evictor's marks
    /// ([`Self::past_high`], [`Self::victims`]) discount the same pinned
    /// pages: when this refuses, the resident pages not pinned fill the
    /// room, past the high mark, so the evictor has work (or the shipper
    /// has write-backs in flight that will free slots). A fault waiting
    /// for a slot never finds both idle.
    pub(crate) fn try_reserve(&self, metrics: &Metrics) -> bool {
        self.take_slot(metrics, false)
    }

    /// [`Self::try_reserve`] for a page of a fault's window, which may
    /// also take a slot past the room, up to [`around_allowance`] of the
    /// limit (counted in `around_past_room`).
    pub(crate) fn try_reserve_around(&self, metrics: &Metrics) -> bool {
        self.take_slot(metrics, true)
    }

    /// Fault-around's pages for one fault (besides its own): a share of
    /// the limit ([`around_allowance`]).
    pub(crate) fn around_allowance(&self) -> u64 {
        around_allowance(self.limit)
    }

    fn take_slot(&self, metrics: &Metrics, around: bool) -> bool {
        loop {
            let cur = self.resident.load(Ordering::SeqCst);
            let overheads = self.overheads();
            let room = self.room_with(overheads);
            let allowed = room + self.pinned();
            let past = if around {
                around_allowance(self.limit)
            } else {
                0
            };
            let full = cur >= allowed + past;
            if full && !self.store_refusing() {
                self.kick_evictor();
                return false;
            }
            if self
                .resident
                .compare_exchange(cur, cur + 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                if full {
                    metrics.limit_overruns.inc();
                } else if cur >= allowed {
                    metrics.around_past_room.inc();
                } else if cur >= room {
                    metrics.pinned_overruns.inc();
                }
                if cur + overheads >= self.limit && overheads + room > self.limit {
                    // Past the limit, with the room at its floor.
                    metrics.room_floored.inc();
                }
                metrics.room_taken_sum.add(room);
                metrics.slots_taken.inc();
                if cur + 1 >= self.marks.low_mark(room) {
                    metrics.room_full_sum.add(room);
                    metrics.slots_taken_full.inc();
                }
                if self.marks.should_evict(cur + 1, self.pinned(), room) {
                    self.kick_evictor();
                }
                return true;
            }
        }
    }

    /// Whether a fault would find no slot now ([`Self::try_reserve`]).
    fn full(&self) -> bool {
        self.resident() >= self.room() + self.pinned() && !self.store_refusing()
    }

    /// Takes a slot in the local cache for a page about to be fetched,
    /// waiting for the evictor when the cache is full. False at shutdown.
    pub(crate) fn reserve(&self, metrics: &Metrics, shutdown: &AtomicBool) -> bool {
        let mut waited: Option<Instant> = None;
        loop {
            if self.try_reserve(metrics) {
                if let Some(t) = waited {
                    metrics.st_wait_space.since(t);
                }
                return true;
            }
            if shutdown.load(Ordering::SeqCst) {
                return false;
            }
            if waited.is_none() {
                waited = Some(Instant::now());
                metrics.filler_waits.inc();
            }
            let mut g = self.space_lock.lock();
            if self.full() {
                // Timed, so a notify racing with this check costs 1 ms, not a hang.
                self.space_cv.wait_for(&mut g, Duration::from_millis(1));
            }
        }
    }

    /// Resident pages the evictor need not count: those already on their
    /// way out, and pinned ones, which it cannot take (see
    /// [`Self::try_reserve`]).
    fn not_evictable(&self) -> u64 {
        self.in_flight.load(Ordering::SeqCst) + self.pinned()
    }

    /// Whether resident pages, less those already on their way out or
    /// pinned, are past the high watermark.
    fn past_high(&self) -> bool {
        self.marks
            .should_evict(self.resident(), self.not_evictable(), self.room())
    }

    /// The evictor's wait: until kicked, past the high watermark, or
    /// `shutdown`; idle, it refills the snapshot pool, off the fault path.
    pub(crate) fn wait_for_work(&self, shutdown: &AtomicBool) {
        let mut kick = self.evict_kick.lock();
        while !*kick && !shutdown.load(Ordering::SeqCst) && !self.past_high() {
            self.evict_cv.wait_for(&mut kick, Duration::from_millis(1));
            if !*kick {
                self.refill_pool();
                self.measure_process();
            }
        }
        *kick = false;
    }

    /// Between eviction rounds: signal handlers take snapshot buffers only
    /// from the pool and never allocate one, so keep it topped up.
    pub(crate) fn top_up_for_handlers(&self) {
        if self.handlers_need_pool() {
            self.refill_pool();
        }
    }

    /// The blocks to evict next: victims a full policy pushed out, then
    /// (never more than the excess over the low watermark, nor `batch`:
    /// the newest pages are the ones the program is using right now) the
    /// policy's choice.
    pub(crate) fn victims(&self, batch: usize, now: u64) -> Vec<BlockId> {
        let mut blocks = std::mem::take(&mut *self.forced.lock());
        let excess = self.excess() as usize;
        if excess > 0 {
            let want = excess.min(batch);
            let mut p = self.lock_policy();
            while blocks.len() < want {
                match p.evict(now) {
                    Some(b) => blocks.push(b),
                    None => break,
                }
            }
        }
        blocks
    }

    /// Pages to evict to come down to the low mark, not counting those
    /// already leaving or pinned (what [`Self::victims`] asks the policy
    /// for).
    fn excess(&self) -> u64 {
        self.marks
            .to_evict(self.resident(), self.not_evictable(), self.room())
    }

    /// Whether there is room to make: resident pages past the low mark.
    pub(crate) fn wants_room(&self) -> bool {
        self.excess() > 0
    }

    /// `n` dirty victims' write-backs started (`started`) or ended.
    pub(crate) fn in_flight(&self, n: u64, started: bool) {
        if started {
            self.in_flight.fetch_add(n, Ordering::SeqCst);
        } else {
            self.in_flight.fetch_sub(n, Ordering::SeqCst);
        }
    }

    pub(crate) fn store_refusing(&self) -> bool {
        self.store_refusing.load(Ordering::SeqCst)
    }

    /// The store refuses write-backs (or takes them again). Refusing lets
    /// waiting faults past the limit: waiting would hang the program.
    pub(crate) fn set_store_refusing(&self, refusing: bool) {
        self.store_refusing.store(refusing, Ordering::SeqCst);
        if refusing {
            self.space_cv.notify_all();
        }
    }

    /// The cache's books, for diagnosing a stall.
    pub(crate) fn census(&self) -> String {
        format!(
            "policy {} resident {} pinned {} buffers {} tables {} store {} outside {} in_flight {} forced {} limit {} room {} high {} low {}",
            self.lock_policy().len(),
            self.resident(),
            self.pinned(),
            self.buffers(),
            self.table_charge(),
            self.store_pages(),
            self.outside_charge(),
            self.in_flight.load(Ordering::SeqCst),
            self.forced.lock().len(),
            self.limit,
            self.room(),
            self.marks.high_mark(self.room()),
            self.marks.low_mark(self.room())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_growing_cache_has_the_process_measured_sooner() {
        let ms = Duration::from_millis;
        // Every 20 ms whatever happens.
        assert!(measure_due(ms(20), 0, 4096));
        assert!(!measure_due(ms(19), 0, 4096));
        // A 32nd of the limit grown: after a millisecond already.
        assert!(measure_due(ms(1), 128, 4096));
        assert!(!measure_due(ms(1), 127, 4096));
        assert!(!measure_due(Duration::from_micros(999), 128, 4096));
        // A limit under 32 pages: each page counts.
        assert!(measure_due(ms(1), 1, 16));
    }

    #[test]
    fn the_room_reported_is_the_one_a_full_cache_had() {
        let cfg = Config {
            local_bytes: 200 * PAGE,
            ..Config::default()
        };
        let cache = Cache::new(&cfg).unwrap();
        let m = Metrics::default();
        let stats = |m: &Metrics| {
            m.snapshot(crate::stats::Books {
                resident: 0,
                snapshots: 0,
                tables: 0,
                store: 0,
                outside: 0,
                outside_peak: 0,
                limit: 200,
            })
            .room_pages_mean
        };
        // Filling: the mean over every page taken.
        for _ in 0..100 {
            assert!(cache.try_reserve(&m));
        }
        assert_eq!(stats(&m), 200);
        // Then the room shrinks as other memory is charged (a compressed
        // pool of 40 pages), and the cache fills the rest: only the pages
        // taken that brought it to its low watermark or past it count.
        cache.set_store_bytes(40 * PAGE);
        while cache.try_reserve(&m) {}
        assert_eq!(m.slots_taken.get(), 160);
        let low = cfg.watermarks().low_mark(160);
        assert_eq!(m.slots_taken_full.get(), 160 - low + 1);
        assert_eq!(stats(&m), 160);
    }
}
