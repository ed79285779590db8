//! What every runtime thread and fault handler shares: the configuration,
//! the store, the userfaultfd, the regions, the local cache and the
//! metrics, and the few things anyone may do with them (find a region,
//! report an error, give up on lost data).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Mutex, RwLock};

use farmem_policy::readahead::Readahead;

use crate::cache::Cache;
use crate::config::{Config, Engine, FaultPath};
use crate::error::RuntimeError;
use crate::page::{
    FetchJob, MAX_FAULT_AROUND, PAGE, PageMeta, PageTable, RegionInner, Zeros, map_pages,
};
use crate::park::Parking;
use crate::slab::{Backing, ResourceManager};
use crate::stats::Metrics;
use crate::store::{RemoteStore, SlabSource};
use crate::uffd::Uffd;

/// What a signal handler passes to a filler thread.
pub(crate) enum Handoff {
    /// A fault it could not serve: fetch the page.
    Fetch(FetchJob),
    /// Its page is installed; read ahead the `pages` stored pages after it,
    /// which it took (`Shared::reserve_around`).
    ReadAhead { job: FetchJob, pages: usize },
}

/// Faults a signal handler can hand to the fillers at once.
const HANDOFF_QUEUE: usize = 1024;

/// Exit status of a process whose far data was lost (EX_IOERR): see
/// `Runtime::on_lost`.
pub const LOST_EXIT_CODE: i32 = 74;

/// What to do when far data is lost.
pub(crate) type OnLost = Arc<dyn Fn(&str) + Send + Sync>;

/// The default `Runtime::on_lost`: one line on stderr and `_exit`,
/// which runs no exit handler (they could touch far memory and wait forever).
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

pub(crate) struct Shared {
    pub cfg: Config,
    pub store: Arc<dyn RemoteStore>,
    pub rm: Arc<ResourceManager>,
    pub uffd: Uffd,
    pub regions: RwLock<BTreeMap<u64, Arc<RegionInner>>>,
    pub cache: Cache,
    /// Victims on probation before eviction (None: evicted at once).
    pub park: Option<Parking>,
    pub shutdown: AtomicBool,
    /// The process is exiting and gives its remote memory back
    /// (`Runtime::exiting`): write-backs refused from then on are
    /// expected, and neither retried nor reported.
    pub exiting: AtomicBool,
    /// Zeros for fault-around to install from (None: fault-around is off).
    pub zeros: Option<Zeros>,
    pub m: Metrics,
    pub epoch: Instant,
    pub last_error: Mutex<Option<String>>,
    /// When `report` last warned (ms after `epoch`; 0: never), and how
    /// many reports it kept quiet since.
    last_warned_ms: AtomicU64,
    unwarned: AtomicU64,
    /// Called when far data cannot be had at all (`Runtime::on_lost`).
    pub on_lost: RwLock<OnLost>,
    /// Fault path `signal`: where handlers pass what they cannot do at once.
    pub handoff: Option<(Sender<Handoff>, Receiver<Handoff>)>,
    /// `--engine daemon`: the selection unit and its bulk queue.
    pub daemon: Option<crate::selector::Daemon>,
    /// Fault path `thread`: when the first fault still waiting on each
    /// page in transition came, to time its wait when the page settles.
    pub waiting: Mutex<HashMap<u64, Instant>>,
}

impl Shared {
    /// A fault seen at `t0` waits for `page`, in transition, under its
    /// lock `m` (thread path): the page's owner wakes it when done.
    pub(crate) fn add_waiter(&self, m: &mut PageMeta, page: u64, t0: Instant) {
        m.waiters = true;
        self.waiting.lock().entry(page).or_insert(t0);
    }

    /// Takes the faults waiting for `page` as it settles, under its lock
    /// `m`: None if there are none, else when the first came, for
    /// [`Self::woke`] once they are woken. Never locks without waiters, so
    /// a signal handler (whose path has none) may call it.
    pub(crate) fn take_waiters(&self, m: &mut PageMeta, page: u64) -> Option<Instant> {
        if !std::mem::take(&mut m.waiters) {
            return None;
        }
        Some(
            self.waiting
                .lock()
                .remove(&page)
                .unwrap_or_else(Instant::now),
        )
    }

    /// The faults waiting since `since` were woken: times the wait.
    pub(crate) fn woke(&self, since: Instant) {
        self.m.wait_latency.record(since.elapsed());
    }

    /// Opens the userfaultfd and sets up the cache; starts no thread.
    pub(crate) fn new(
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
        let zeros = if cfg.fault_around.max_blocks > 1 {
            Some(Zeros::map(MAX_FAULT_AROUND as u64 * PAGE).map_err(RuntimeError::Mmap)?)
        } else {
            None
        };
        let cache = Cache::new(&cfg)?;
        // The kernel's own accesses to a parked page (a system call's
        // buffer) raise no signal on the signal path: they would fail.
        let share = match cfg.fault_path {
            FaultPath::Thread => cfg.park_share,
            FaultPath::Signal => 0.0,
        };
        let park = Parking::new(&uffd, cache.limit(), share, cfg.evict_batch)?;
        Ok(Self {
            cache,
            park,
            rm: Arc::new(ResourceManager::new(slabs, cfg.slab_batch)),
            store,
            uffd,
            regions: RwLock::new(BTreeMap::new()),
            shutdown: AtomicBool::new(false),
            exiting: AtomicBool::new(false),
            zeros,
            m: Metrics::default(),
            epoch: Instant::now(),
            last_error: Mutex::new(None),
            last_warned_ms: AtomicU64::new(0),
            unwarned: AtomicU64::new(0),
            on_lost: RwLock::new(Arc::new(stop_process)),
            handoff: (cfg.fault_path == FaultPath::Signal)
                .then(|| crossbeam_channel::bounded(HANDOFF_QUEUE)),
            waiting: Mutex::new(HashMap::new()),
            daemon: match cfg.engine {
                Engine::Page => None,
                Engine::Daemon => Some(
                    crate::selector::Daemon::new(cfg.daemon_config())
                        .map_err(RuntimeError::Config)?,
                ),
            },
            cfg,
        })
    }

    /// Maps a region over `backing` and registers it with the userfaultfd;
    /// `stored`: the store may hold data for every page.
    pub(crate) fn map_region(
        &self,
        backing: Backing,
        stored: bool,
    ) -> Result<Arc<RegionInner>, RuntimeError> {
        let len = match &backing {
            Backing::Eager(t) => t.len(),
            Backing::Lazy(t) => t.len(),
        };
        let pages = PageTable::new((len / PAGE) as usize)?;
        let start = map_pages(len)?;
        let inner = Arc::new(RegionInner {
            start,
            len,
            pages,
            all_stored: stored,
            backing,
            dead: AtomicBool::new(false),
            readahead: Mutex::new(Readahead::new(self.cfg.fault_around)),
        });
        self.uffd.register(start, len).map_err(RuntimeError::Uffd)?;
        self.regions.write().insert(start, inner.clone());
        Ok(inner)
    }

    pub(crate) fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Counts the pages the regions' page tables take now, for the cache
    /// to hold them against the limit.
    pub(crate) fn count_table_pages(&self) {
        let pages = self.regions.read().values().map(|r| r.table_pages()).sum();
        self.cache.set_table_pages(pages);
    }

    pub(crate) fn lookup(&self, addr: u64) -> Option<Arc<RegionInner>> {
        let regions = self.regions.read();
        let (_, r) = regions.range(..=addr).next_back()?;
        r.contains(addr).then(|| r.clone())
    }

    /// Records `msg` as the last error and warns of it, at most once a
    /// second: a failing rack makes every retry fail, and the program's
    /// stderr gets the first and a count of the others, not thousands.
    pub(crate) fn report(&self, msg: String) {
        let now = self.epoch.elapsed().as_millis() as u64;
        let last = self.last_warned_ms.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= 1000;
        if due
            && self
                .last_warned_ms
                .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            match self.unwarned.swap(0, Ordering::Relaxed) {
                0 => tracing::warn!("{msg}"),
                n => tracing::warn!("{msg} ({n} more reported since the last warning)"),
            }
        } else {
            self.unwarned.fetch_add(1, Ordering::Relaxed);
            tracing::debug!("{msg}");
        }
        *self.last_error.lock() = Some(msg);
    }

    /// Far data cannot be had (see [`StoreError::Lost`](crate::store::StoreError::Lost)): reported,
    /// then the `on_lost` hook, which by default ends the process.
    pub(crate) fn lost(&self, what: String) {
        self.m.data_lost.inc();
        self.report(what.clone());
        let hook = self.on_lost.read().clone();
        hook(&what);
    }

    /// The page `job` took goes back to Absent and its cache slot is freed
    /// (its fetch failed, or nobody is left to do it).
    pub(crate) fn give_back(&self, job: &FetchJob, ctx: crate::cache::Ctx) {
        ctx.lock(&job.region.pages[job.idx]).state = crate::page::State::Absent;
        self.cache.release_page();
    }

    pub(crate) fn is_shutdown(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }
}
