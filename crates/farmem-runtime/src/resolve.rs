//! The fault state machine, one for both fault paths: [`Shared::resolve`]
//! moves a faulting page's state under its lock and says what is left to
//! do; [`Shared::fetch`] does it for an absent page (slot, contents,
//! install, the pages around). The thread path (`handler.rs`) and the
//! signal path (`signal.rs`) only find the region, count, and act on the
//! answer; where the two differ ([`Ctx`]), it is because a signal handler
//! may not allocate, park or wait for the store, so it takes only what it
//! can have at once and hands the rest to a filler thread.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::around::Settle;
use crate::cache::{Ctx, PolicyUpdate};
use crate::page::{
    Around, FetchBufs, FetchJob, Lane, PAGE, PageBuf, PageMeta, RegionInner, RunBuf, State,
};
use crate::shared::{Handoff, Shared};

/// A fault on a far page, as either path saw it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FaultAt {
    /// The page's address.
    pub page: u64,
    /// The access is known to be a write: a fetched page is installed
    /// writable (with `writable_on_write_fault`).
    pub write: bool,
    /// On a mapped, write-protected (Clean) page, the access is a write.
    pub wp: bool,
    /// When the fault was seen, for its latency.
    pub t0: Instant,
}

/// What [`Shared::resolve`] came to.
pub(crate) enum Step {
    /// The page was Absent and is now this job's (Fetching): fetch it.
    Fetch(FetchJob),
    /// Someone else has the page (a fetch, a write-back); on the thread
    /// path it wakes the fault when done, a signal handler retries.
    Wait,
    /// A first write to a clean page: diff base kept, page Dirty and
    /// writable.
    Written,
    /// Resolved between the fault and now: the access may go on.
    Spurious,
    /// A parked page touched: its frame is back, the page in use again,
    /// and the access may go on (a soft fault: nothing was fetched).
    Unparked,
    /// Fault path `signal`: no cache slot free now; the access retries.
    Full,
}

/// Who fetches a page, with what buffers.
pub(crate) enum By<'a> {
    /// A thread that may block: it waits for room, retries the store and
    /// reads ahead itself.
    Thread(&'a mut FetchBufs),
    /// A signal handler, with a zeroed page on its stack: it tries the
    /// store once and hands what it cannot do to a filler.
    Signal(&'a mut PageBuf),
}

impl Shared {
    /// The state machine: under the page's lock, decides what the fault at
    /// `f` in region `r` needs and moves the page's state.
    pub(crate) fn resolve(&self, r: Arc<RegionInner>, f: FaultAt, ctx: Ctx) -> Step {
        let idx = r.page_index(f.page);
        let mut m = ctx.lock(&r.pages[idx]);
        match m.state {
            State::Absent => {
                // A signal handler cannot wait for room: a slot now, or retry.
                let reserved = ctx == Ctx::Signal;
                if reserved && !self.cache.try_reserve(&self.m) {
                    return Step::Full;
                }
                m.state = State::Fetching;
                let zero = m.reads_zero(&r);
                let predicted = !f.write && m.streak.predicts_write();
                drop(m);
                let write = (f.write || predicted) && self.cfg.writable_on_write_fault;
                Step::Fetch(FetchJob {
                    region: r,
                    idx,
                    write,
                    unwatched: write && predicted,
                    zero,
                    reserved,
                    t0: f.t0,
                })
            }
            State::Fetching | State::Busy => {
                if ctx == Ctx::Thread {
                    // Asleep in the kernel: the owner wakes it when done.
                    self.add_waiter(&mut m, f.page, f.t0);
                    self.m.faults_waited.inc();
                    if !f.wp {
                        self.m.faults_missing_found.inc();
                    }
                }
                Step::Wait
            }
            State::Clean if f.wp => {
                self.first_write(&r, &mut m, f.page, ctx);
                drop(m);
                self.m.st_snapshot.since(f.t0);
                Step::Written
            }
            State::Clean | State::Dirty => {
                drop(m);
                self.m.faults_spurious.inc();
                if !f.wp {
                    self.m.faults_missing_found.inc();
                }
                Step::Spurious
            }
            State::Parked => self.unpark(&mut m, f.page, ctx),
        }
    }

    /// The program touched a parked page: its frame goes back and the page
    /// back into the replacement order, as one in use.
    fn unpark(&self, m: &mut PageMeta, page: u64, ctx: Ctx) -> Step {
        let Some(park) = self.park.as_ref() else {
            unreachable!("pages are parked only with parking");
        };
        if let Err(e) = park.unpark(&self.uffd, page, m) {
            if ctx == Ctx::Thread {
                self.report(format!("unparking {page:#x}: {e}"));
            }
            // Still parked (a move refused while the address space
            // changes, as in a fork): the access faults again and retries.
            return Step::Spurious;
        }
        self.m.pages_unparked.inc();
        let insert = PolicyUpdate::Insert(page / PAGE, self.now());
        if let Some(v) = self.cache.update_policy(insert, ctx) {
            self.cache.force_out(v);
        }
        Step::Unparked
    }

    /// A first write to a clean page: keeps its current (= stored) contents
    /// as the diff base (line mode), marks it dirty and lets the write
    /// through.
    fn first_write(&self, r: &RegionInner, m: &mut PageMeta, page: u64, ctx: Ctx) {
        // SAFETY: the page is mapped and write-protected, so nothing
        // writes it while it is read.
        let current = unsafe { std::slice::from_raw_parts(page as *const u8, PAGE as usize) };
        // A clean page that came in as zeros needs no copy of them.
        let zero_base = m.reads_zero(r);
        self.cache
            .keep_diff_base(m, zero_base, current, ctx, &self.m);
        m.state = State::Dirty;
        let touch = PolicyUpdate::Touch(page / PAGE, self.now());
        if let Some(v) = self.cache.update_policy(touch, ctx) {
            self.cache.force_out(v);
        }
        if let Err(e) = self.uffd.writeprotect(page, PAGE, false)
            && ctx == Ctx::Thread
        {
            self.report(format!("lifting protection of {page:#x}: {e}"));
        }
    }

    /// Brings `job`'s page in: a cache slot, its contents (zeros, or the
    /// store's), the install, and the pages fault-around takes after it.
    /// True when the page is installed. Else a thread has given the page
    /// back (Absent) or reported a failed install; a signal handler has
    /// handed the page to a filler, and the access retries.
    pub(crate) fn fetch(&self, job: FetchJob, by: By<'_>) -> bool {
        let (buf, mut run, ctx) = match by {
            By::Thread(FetchBufs { page, run }) => (&mut **page, Some(run), Ctx::Thread),
            By::Signal(page) => (page, None, Ctx::Signal),
        };
        if !job.reserved && !self.cache.reserve(&self.m, &self.shutdown) {
            job.region.pages[job.idx].lock().state = State::Absent;
            return false;
        }
        // `--engine daemon`: a stored page's fault takes what the selection
        // unit says (thread path only; `Config::validate`).
        if !job.zero
            && let (Some(d), Some(run)) = (self.daemon.as_ref(), run.as_deref_mut())
        {
            return self.fetch_selected(d, job, buf, run);
        }
        let t = Instant::now();
        // A thread takes a stored page's window first, to read it with the
        // page in one request; the others take it once the page is in hand
        // (and so does a thread reading its page first on the demand lane,
        // `Config::demand_first`).
        let early = ctx == Ctx::Thread && !job.zero && !self.cfg.demand_first;
        let mut around = if early {
            self.reserve_around(&job, ctx)
        } else {
            Around::default()
        };
        let window_read = match run.as_deref_mut() {
            Some(run) if !around.is_empty() => {
                self.read_window(&job, around, buf, run, Lane::Demand)
            }
            _ => false,
        };
        if !around.is_empty() && !window_read {
            self.finish_around(&job, around, ctx);
            around = Around::default();
        }
        if !window_read && !self.fill(&job, buf, ctx) {
            self.not_served(job, ctx);
            return false;
        }
        self.m.st_fetch.since(t);
        if !early {
            around = self.reserve_around(&job, ctx);
        }
        let installed = match self.install(&job, buf, ctx) {
            Ok(()) => true,
            Err(e) => {
                if ctx == Ctx::Thread {
                    let page = job.region.page_addr(job.idx);
                    self.report(format!("installing {page:#x}: {e}"));
                }
                false
            }
        };
        let Some(job) = self.fill_around(job, around, installed, run, window_read, ctx) else {
            return true;
        };
        if installed || ctx == Ctx::Thread {
            // A thread's failed install leaves the page as `install` set it.
            return installed;
        }
        self.not_served(job, ctx);
        false
    }

    /// Fills the pages [`Shared::reserve_around`] took beside `job`'s:
    /// zeros at once; stored pages on a thread from `run`, where they were
    /// read with the page; for a signal handler (which takes pages after
    /// its own only), read by a filler (one read of a window is more than
    /// a handler can hold), or given back if the page itself is not
    /// installed. Returns `job` unless it went to a filler.
    fn fill_around(
        &self,
        job: FetchJob,
        around: Around,
        installed: bool,
        run: Option<&mut RunBuf>,
        window_read: bool,
        ctx: Ctx,
    ) -> Option<FetchJob> {
        if job.zero {
            // Installed or not, the pages around are ours to finish.
            self.install_around(&job, around, ctx);
            return Some(job);
        }
        match run {
            // Read with the page (`read_window`): those below it first in
            // `run`, then the page, then those above.
            Some(run) if window_read => {
                let below = job.idx - around.before;
                self.install_read(&job, below, around.before, run, 0);
                let above = around.before + 1;
                self.install_read(&job, job.idx + 1, around.after, run, above);
            }
            // The page first, on its own (`Config::demand_first`): the
            // window now, on the bulk lane.
            Some(run) if installed => {
                self.read_runs(&job, &around.runs(job.idx), run, Lane::Bulk, |_| {});
            }
            None if installed && around.after > 0 => {
                self.hand_off(Handoff::ReadAhead {
                    job,
                    pages: around.after,
                });
                return None;
            }
            _ => self.finish_around(&job, around, ctx),
        }
        Some(job)
    }

    /// A page a fetch could not fill or install: a thread gives it back
    /// (Absent, slot released) for its fault to take again; a signal
    /// handler hands it to a filler.
    fn not_served(&self, job: FetchJob, ctx: Ctx) {
        match ctx {
            Ctx::Thread => self.give_back(&job, ctx),
            Ctx::Signal => {
                self.m.faults_handed_off.inc();
                self.hand_off(Handoff::Fetch(job));
            }
        }
    }

    /// A page's contents into `buf`: zeros for a never-written page, else
    /// the store's (a thread retries until it has them, a signal handler
    /// tries once).
    pub(crate) fn fill(&self, job: &FetchJob, buf: &mut PageBuf, ctx: Ctx) -> bool {
        if job.zero {
            // A signal handler's buffer is fresh zeros already.
            if ctx == Ctx::Thread {
                buf.0.fill(0);
            }
            self.m.pages_zero_filled.inc();
            return true;
        }
        match (job.region.remote(job.idx), ctx) {
            (Some(remote), Ctx::Thread) => self.read_page(remote, buf),
            (Some(remote), Ctx::Signal) => self.store.read_in_signal(remote, &mut buf.0),
            (None, Ctx::Thread) => {
                // A page with data on the store was backed when it was
                // written back: none here is a bug, reported, not guessed.
                let page = job.region.page_addr(job.idx);
                self.report(format!("page {page:#x} has no remote address"));
                false
            }
            (None, Ctx::Signal) => false,
        }
    }

    /// Reads a page from the store, retrying until it works: the faulting
    /// thread cannot proceed without its page, and guessing would corrupt
    /// it. False at shutdown, or when the page is lost (the store says so,
    /// for instance once its memory node missed its deadline) or failed
    /// for `give_up_after`: the program is stopped then, never left hung.
    fn read_page(&self, remote: u64, buf: &mut PageBuf) -> bool {
        let mut backoff = Duration::from_micros(100);
        let start = Instant::now();
        loop {
            match self.store.read(remote, &mut buf.0) {
                Ok(()) => return true,
                Err(e) if e.is_lost() => {
                    self.m.fetch_errors.inc();
                    self.lost(format!("the far page at {remote:#x} cannot be read: {e}"));
                    return false;
                }
                Err(e) if start.elapsed() >= self.cfg.give_up_after => {
                    self.m.fetch_errors.inc();
                    self.lost(format!(
                        "the far page at {remote:#x} could not be read for {:?}: {e}",
                        self.cfg.give_up_after
                    ));
                    return false;
                }
                Err(e) => {
                    self.m.fetch_errors.inc();
                    self.report(format!("fetching {remote:#x}: {e}; retrying"));
                    if self.is_shutdown() {
                        return false;
                    }
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_millis(100));
                }
            }
        }
    }

    /// Installs a page whose contents are in `buf` and makes it resident:
    /// state, snapshot, replacement order. Err only if UFFDIO_COPY failed
    /// (the page stays Fetching in a signal handler, to be handed over;
    /// on a thread it is settled as if installed, as it always was).
    pub(crate) fn install(&self, job: &FetchJob, buf: &PageBuf, ctx: Ctx) -> std::io::Result<()> {
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
            self.cache.release_page();
            return installed;
        }
        if job.write {
            m.state = State::Dirty;
            m.unwatched = job.unwatched;
            if job.unwatched {
                self.m.writes_predicted.inc();
            }
            // The fetched bytes are the diff base.
            self.cache
                .keep_diff_base(&mut m, job.zero, &buf.0, ctx, &self.m);
        } else {
            m.state = State::Clean;
        }
        // COPY woke the faults queued before it; one that arrived between
        // COPY and this lock (a write right after a read install, say)
        // found Fetching and waits for us.
        let waiters = self.take_waiters(&mut m, page);
        let insert = PolicyUpdate::Insert(page / PAGE, self.now());
        let victim = self.cache.update_policy(insert, ctx);
        drop(m);
        if let Some(since) = waiters {
            let _ = self.uffd.wake(page, PAGE);
            self.woke(since);
        }
        if let Some(v) = victim {
            self.cache.force_out(v);
        }
        let took = job.t0.elapsed();
        // What `auto`'s tuner weighs the pool by: the fault's whole wait.
        crate::backend::FAULT_CLOCK.fault(took);
        let remote = (!job.zero).then_some(&self.m.remote_fault_latency);
        if !job.zero {
            self.m.remote_by_delay.record(took, ctx == Ctx::Thread);
        }
        for hist in std::iter::once(&self.m.fault_latency).chain(remote) {
            match ctx {
                Ctx::Thread => hist.record(took),
                Ctx::Signal => {
                    hist.try_record(took);
                }
            }
        }
        installed
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
            Some(Handoff::Fetch(job)) => self.give_back(&job, Ctx::Signal),
            Some(Handoff::ReadAhead { job, pages }) => {
                self.finish_run(&job, job.idx + 1, pages, 0, Settle::Clean, Ctx::Signal)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, DirtyMode, FaultPath};
    use crate::slab::{Backing, LazyTable, SlabTable};
    use crate::store::{FaultOp, MemStore, RemoteStore};
    use farmem_policy::diffbase::DiffBaseConfig;
    use farmem_policy::readahead::ReadaheadConfig;

    /// A runtime's shared state with no thread started, over an in-memory
    /// store, and one region of 8 pages: stored (eager) or never written.
    fn setup(path: FaultPath, stored: bool) -> Option<(Shared, Arc<MemStore>, Arc<RegionInner>)> {
        // Fault-around off: each fetch is of its own page only.
        setup_around(path, stored, 1)
    }

    /// As [`setup`], with fault-around windows of up to `around` pages.
    fn setup_around(
        path: FaultPath,
        stored: bool,
        around: u32,
    ) -> Option<(Shared, Arc<MemStore>, Arc<RegionInner>)> {
        setup_sized(path, stored, around, 64, 8)
    }

    /// As [`setup_around`], with a limit of `local` pages and a region of
    /// `pages`.
    fn setup_sized(
        path: FaultPath,
        stored: bool,
        around: u32,
        local: u64,
        pages: u64,
    ) -> Option<(Shared, Arc<MemStore>, Arc<RegionInner>)> {
        if let Err(why) = crate::uffd::available() {
            eprintln!("skipping: {why}");
            return None;
        }
        let store = Arc::new(MemStore::new(1 << 30));
        let cfg = Config {
            local_bytes: local * PAGE,
            fault_path: path,
            dirty: DirtyMode::Line,
            zeroed_slabs: !stored,
            slab_batch: 1 << 20,
            fault_around: ReadaheadConfig { max_blocks: around },
            // Room for a few diff bases and a pool of two in 64 pages.
            diff_base: DiffBaseConfig {
                max_share: 1.0 / 16.0,
                ..DiffBaseConfig::default()
            },
            ..Config::default()
        };
        let sh = Shared::new(cfg, store.clone(), store.clone()).unwrap();
        let backing = if stored {
            Backing::Eager(SlabTable::new(&sh.rm.take(pages * PAGE).unwrap()))
        } else {
            Backing::Lazy(LazyTable::new(pages * PAGE))
        };
        let r = sh.map_region(backing, stored).unwrap();
        Some((sh, store, r))
    }

    fn fault(r: &RegionInner, idx: usize, write: bool, wp: bool) -> FaultAt {
        FaultAt {
            page: r.page_addr(idx),
            write,
            wp,
            t0: Instant::now(),
        }
    }

    /// A write fault on absent page `idx`, fetched by a thread.
    fn write_on_thread(sh: &Shared, r: &Arc<RegionInner>, idx: usize, bufs: &mut FetchBufs) {
        let Step::Fetch(job) = sh.resolve(r.clone(), fault(r, idx, true, false), Ctx::Thread)
        else {
            panic!("page {idx} is absent");
        };
        assert!(sh.fetch(job, By::Thread(bufs)));
    }

    fn state(r: &RegionInner, idx: usize) -> State {
        r.pages[idx].lock().state
    }

    /// The bytes of an installed page (reading one not installed would
    /// fault with no handler to serve it).
    fn bytes(r: &RegionInner, idx: usize) -> Vec<u8> {
        // SAFETY: the page is installed, and nothing writes it meanwhile.
        unsafe { std::slice::from_raw_parts(r.page_addr(idx) as *const u8, PAGE as usize) }.to_vec()
    }

    #[test]
    fn a_read_fault_fetches_then_a_write_takes_the_diff_base() {
        let Some((sh, store, r)) = setup(FaultPath::Thread, true) else {
            return;
        };
        store
            .write(r.remote(3).unwrap(), &[7; PAGE as usize])
            .unwrap();
        let Step::Fetch(job) = sh.resolve(r.clone(), fault(&r, 3, false, false), Ctx::Thread)
        else {
            panic!("an absent page is fetched");
        };
        assert!(!job.reserved && !job.zero && !job.write);
        assert_eq!(state(&r, 3), State::Fetching);
        assert_eq!(sh.cache.resident(), 0, "a thread takes its slot in fetch");
        assert!(sh.fetch(job, By::Thread(&mut FetchBufs::new())));
        assert_eq!(state(&r, 3), State::Clean);
        assert_eq!(sh.cache.resident(), 1);
        assert_eq!(store.stats().reads, 1);
        assert_eq!(bytes(&r, 3), vec![7; PAGE as usize]);

        // A read fault on it now raced with the install.
        let step = sh.resolve(r.clone(), fault(&r, 3, false, false), Ctx::Thread);
        assert!(matches!(step, Step::Spurious));
        assert_eq!(sh.m.faults_spurious.get(), 1);
        assert_eq!(sh.m.faults_missing_found.get(), 1);

        // A first write keeps the stored bytes as its diff base.
        let step = sh.resolve(r.clone(), fault(&r, 3, true, true), Ctx::Thread);
        assert!(matches!(step, Step::Written));
        let m = r.pages[3].lock();
        assert_eq!(m.state, State::Dirty);
        assert_eq!(**m.snapshot.as_ref().unwrap(), [7; PAGE as usize]);
        assert_eq!(sh.m.snapshots.get(), 1);
        assert_eq!(store.stats().reads, 1, "no second fetch");
    }

    #[test]
    fn a_write_fault_on_a_never_written_page_installs_zeros_writable() {
        let Some((sh, store, r)) = setup(FaultPath::Thread, false) else {
            return;
        };
        let Step::Fetch(job) = sh.resolve(r.clone(), fault(&r, 0, true, false), Ctx::Thread) else {
            panic!("an absent page is fetched");
        };
        assert!(job.zero && job.write);
        let mut bufs = FetchBufs::new();
        bufs.page.0.fill(9);
        assert!(sh.fetch(job, By::Thread(&mut bufs)));
        let m = r.pages[0].lock();
        assert_eq!(m.state, State::Dirty);
        assert!(m.zero_base && m.snapshot.is_none(), "zeros need no copy");
        drop(m);
        assert_eq!(
            bytes(&r, 0),
            vec![0; PAGE as usize],
            "the buffer was reused"
        );
        assert_eq!(store.stats().reads, 0);
        assert_eq!(sh.m.pages_zero_filled.get(), 1);
    }

    #[test]
    fn a_page_in_transition_is_waited_for_on_a_thread_and_retried_in_a_handler() {
        let Some((sh, _store, r)) = setup(FaultPath::Thread, true) else {
            return;
        };
        for busy in [State::Fetching, State::Busy] {
            r.pages[1].lock().state = busy;
            let step = sh.resolve(r.clone(), fault(&r, 1, false, false), Ctx::Signal);
            assert!(matches!(step, Step::Wait));
            assert!(
                !r.pages[1].lock().waiters,
                "a handler retries, nobody wakes it"
            );
            let step = sh.resolve(r.clone(), fault(&r, 1, false, false), Ctx::Thread);
            assert!(matches!(step, Step::Wait));
            let mut m = r.pages[1].lock();
            assert!(m.waiters && m.state == busy);
            // As the page settles, its owner takes the waiter and times it.
            let since = sh.take_waiters(&mut m, r.page_addr(1));
            assert!(since.is_some() && !m.waiters);
            assert_eq!(sh.take_waiters(&mut m, r.page_addr(1)), None, "taken once");
            drop(m);
            sh.woke(since.unwrap());
        }
        assert_eq!(sh.m.faults_waited.get(), 2);
        // A write to a page being written back waits too, but it was a
        // write-protect fault: no missing fault found its page.
        r.pages[1].lock().state = State::Busy;
        let step = sh.resolve(r.clone(), fault(&r, 1, true, true), Ctx::Thread);
        assert!(matches!(step, Step::Wait));
        let since = sh.take_waiters(&mut r.pages[1].lock(), r.page_addr(1));
        sh.woke(since.unwrap());
        assert_eq!(sh.m.faults_waited.get(), 3);
        assert_eq!(sh.m.faults_missing_found.get(), 2);
        assert_eq!(sh.m.wait_latency.summary().count, 3, "each wait timed");
        assert!(sh.waiting.lock().is_empty(), "nothing left behind");
    }

    #[test]
    fn a_handler_takes_a_slot_at_once_or_retries() {
        let Some((sh, _store, r)) = setup(FaultPath::Signal, true) else {
            return;
        };
        let Step::Fetch(job) = sh.resolve(r.clone(), fault(&r, 0, false, true), Ctx::Signal) else {
            panic!("an absent page is fetched");
        };
        assert!(job.reserved);
        assert_eq!(sh.cache.resident(), 1);
        while sh.cache.try_reserve(&sh.m) {}
        let step = sh.resolve(r.clone(), fault(&r, 2, false, true), Ctx::Signal);
        assert!(matches!(step, Step::Full));
        assert_eq!(state(&r, 2), State::Absent);
    }

    #[test]
    fn a_handler_hands_over_a_page_it_cannot_read_and_a_filler_fetches_it() {
        let Some((sh, store, r)) = setup(FaultPath::Signal, true) else {
            return;
        };
        store
            .write(r.remote(5).unwrap(), &[5; PAGE as usize])
            .unwrap();
        // Armed, the failure makes the handler's one try give up.
        store.fail_nth(0, FaultOp::Read);
        let Step::Fetch(job) = sh.resolve(r.clone(), fault(&r, 5, false, false), Ctx::Signal)
        else {
            panic!("an absent page is fetched");
        };
        let mut buf = PageBuf([0; PAGE as usize]);
        assert!(!sh.fetch(job, By::Signal(&mut buf)));
        assert_eq!(state(&r, 5), State::Fetching, "the filler owns it now");
        assert_eq!(sh.m.faults_handed_off.get(), 1);
        let Some((_, rx)) = &sh.handoff else {
            panic!("fault path signal has a hand-off queue");
        };
        let Ok(Handoff::Fetch(job)) = rx.try_recv() else {
            panic!("the page was handed over");
        };
        assert!(job.reserved && job.idx == 5);
        // The filler's fetch retries past the failure.
        assert!(sh.fetch(job, By::Thread(&mut FetchBufs::new())));
        assert_eq!(state(&r, 5), State::Clean);
        assert_eq!(sh.m.fetch_errors.get(), 1);
        assert_eq!(sh.cache.resident(), 1, "one slot, taken once");
        assert_eq!(bytes(&r, 5), vec![5; PAGE as usize]);
    }

    #[test]
    fn a_handler_serves_a_page_it_can_read_and_its_first_write() {
        let Some((sh, store, r)) = setup(FaultPath::Signal, true) else {
            return;
        };
        store
            .write(r.remote(6).unwrap(), &[6; PAGE as usize])
            .unwrap();
        let Step::Fetch(job) = sh.resolve(r.clone(), fault(&r, 6, false, true), Ctx::Signal) else {
            panic!("an absent page is fetched");
        };
        let mut buf = PageBuf([0; PAGE as usize]);
        assert!(sh.fetch(job, By::Signal(&mut buf)));
        assert_eq!(state(&r, 6), State::Clean);
        assert_eq!(bytes(&r, 6), vec![6; PAGE as usize]);
        // Handlers take snapshots only from the pool.
        sh.cache.refill_pool();
        let step = sh.resolve(r.clone(), fault(&r, 6, true, true), Ctx::Signal);
        assert!(matches!(step, Step::Written));
        let m = r.pages[6].lock();
        assert_eq!(m.state, State::Dirty);
        assert_eq!(**m.snapshot.as_ref().unwrap(), [6; PAGE as usize]);
    }

    /// A thread-path runtime with windows of up to 8 pages over a stored
    /// region whose page i holds the byte i + 1.
    fn stored_pages_numbered() -> Option<(Shared, Arc<MemStore>, Arc<RegionInner>)> {
        let (sh, store, r) = setup_around(FaultPath::Thread, true, 8)?;
        for idx in 0..8 {
            store
                .write(r.remote(idx).unwrap(), &[idx as u8 + 1; PAGE as usize])
                .unwrap();
        }
        Some((sh, store, r))
    }

    /// Faults on pages 0, 1 and 3 of a stored region, in order, each
    /// fetched by a thread; returns the store's reads after each.
    fn stream_of_three(sh: &Shared, store: &MemStore, r: &Arc<RegionInner>) -> Vec<u64> {
        let mut bufs = FetchBufs::new();
        [0, 1, 3]
            .iter()
            .map(|&idx| {
                let Step::Fetch(job) =
                    sh.resolve(r.clone(), fault(r, idx, false, false), Ctx::Thread)
                else {
                    panic!("page {idx} is absent");
                };
                assert!(sh.fetch(job, By::Thread(&mut bufs)));
                store.stats().reads
            })
            .collect()
    }

    #[test]
    fn a_thread_reads_a_window_with_its_page_in_one_request() {
        let Some((sh, store, r)) = stored_pages_numbered() else {
            return;
        };
        // Page 0 starts a stream (window 1); page 1 continues it (window 2:
        // pages 1 and 2); page 3 continues it (window 4, but a window takes
        // at most 1/32 of the 64-page limit besides its page: pages 3 to
        // 5). One read each.
        assert_eq!(sh.cache.around_allowance(), 2);
        assert_eq!(stream_of_three(&sh, &store, &r), [1, 2, 3]);
        assert_eq!(store.stats().bytes_read, 6 * PAGE);
        for idx in 0..6 {
            assert_eq!(state(&r, idx), State::Clean, "page {idx}");
            assert_eq!(bytes(&r, idx), vec![idx as u8 + 1; PAGE as usize]);
        }
        assert_eq!(state(&r, 6), State::Absent);
        assert_eq!(sh.m.pages_fetched.get(), 6);
        assert_eq!(sh.cache.resident(), 6);
    }

    #[test]
    fn a_window_takes_its_share_of_the_limit_past_a_full_room() {
        let Some((sh, _store, r)) = setup_sized(FaultPath::Thread, false, 8, 64, 16) else {
            return;
        };
        let mut bufs = FetchBufs::new();
        let mut write = |idx: usize| write_on_thread(&sh, &r, idx, &mut bufs);
        write(0);
        write(1);
        // The room full but for page 3's own slot (other pages' slots
        // taken here, as a program's would be).
        while sh.cache.resident() + 1 < sh.cache.room() {
            assert!(sh.cache.try_reserve(&sh.m));
        }
        // 3's window of 4 takes 4 and 5 past the room: 1/32 of 64 pages.
        write(3);
        assert_eq!(sh.cache.resident(), sh.cache.room() + 2);
        assert_eq!(sh.m.around_past_room.get(), 2);
        assert_eq!(
            [4, 5, 6].map(|j| state(&r, j)),
            [State::Dirty, State::Dirty, State::Absent]
        );
    }

    #[test]
    fn a_window_cut_at_resident_pages_leaves_the_stream_going_on_past_them() {
        // 1,024 pages of limit: windows of up to 16 pages are not capped.
        let Some((sh, _store, r)) = setup_sized(FaultPath::Thread, false, 16, 1024, 64) else {
            return;
        };
        let mut bufs = FetchBufs::new();
        let mut write = |idx: usize| write_on_thread(&sh, &r, idx, &mut bufs);
        // A stream of fresh pages: windows of 1, 2, 4 and 8 pages.
        for idx in [0, 1, 3, 7] {
            write(idx);
        }
        // Pages 17..23 are resident, as if being written back, when 15's
        // window of 16 comes: it takes page 16 only.
        let busy = 17..23;
        for j in busy.clone() {
            r.pages[j].lock().state = State::Busy;
        }
        write(15);
        assert_eq!(state(&r, 16), State::Dirty);
        // The program reads 17..22 without a fault: its next miss, 23,
        // continues the stream (a window of 16), where a stream cut at 17
        // would start over at one page (23 is past the slack a stream
        // allows).
        let window = r.readahead.lock().on_miss(23);
        assert_eq!((window.first, window.len), (23, 16));
        for j in busy {
            r.pages[j].lock().state = State::Absent;
        }
    }

    #[test]
    fn a_failed_window_read_gives_the_window_back_and_fetches_the_page_alone() {
        let Some((sh, store, r)) = stored_pages_numbered() else {
            return;
        };
        // The third read is the window at page 3: it fails once, then
        // page 3 is read alone (reads counts those that worked).
        store.fail_nth(2, FaultOp::Read);
        assert_eq!(stream_of_three(&sh, &store, &r), [1, 2, 3]);
        assert_eq!(store.stats().failed_calls, 1);
        assert_eq!(store.stats().bytes_read, 4 * PAGE);
        assert_eq!(bytes(&r, 3), vec![4; PAGE as usize]);
        assert_eq!(state(&r, 3), State::Clean);
        for idx in 4..7 {
            assert_eq!(state(&r, idx), State::Absent, "page {idx} given back");
        }
        assert_eq!(sh.m.fetch_errors.get(), 1);
        assert_eq!(sh.cache.resident(), 4, "slots of the window released");
    }
}
