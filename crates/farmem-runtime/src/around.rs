//! Fault-around: the pages after a fault's own that one fault installs,
//! so a program filling fresh memory or reading far data in order takes a
//! fault per window, not per page. Below the fault state machine (`resolve.rs`), which takes a
//! window before it installs the fault's page and fills it after.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::cache::{Ctx, PolicyUpdate};
use crate::page::{FetchJob, MAX_FAULT_AROUND, PAGE, PageBuf, RunBuf, State};
use crate::shared::Shared;

impl Shared {
    /// Step one: `job` is the first touch of a never-written page (else
    /// this does nothing); if the region's readahead sees a sequential
    /// stream, takes the never-written absent pages after it that the
    /// window covers (Fetching, with their cache slots), and returns how
    /// many. Done before the job's page is installed, so the program,
    /// woken by that install, finds its next pages taken and waits for
    /// them instead of faulting them in one by one. A full cache or a page
    /// not absent ends the window early.
    pub(crate) fn reserve_around(&self, job: &FetchJob, ctx: Ctx) -> usize {
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
            if m.state != State::Absent || !fits || !self.cache.try_reserve(&self.m) {
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

    /// Step two for never-written pages: installs the `n` pages after
    /// `job`'s that [`Shared::reserve_around`] took, with one UFFDIO_COPY
    /// from zeros, writable: zeros are their diff base, so no write needs
    /// a fault to be seen (page mode ships such a page whole once any of
    /// it is not zero).
    pub(crate) fn install_around(&self, job: &FetchJob, n: usize, ctx: Ctx) {
        let Some(zeros) = self.zeros.as_ref().filter(|_| n > 0) else {
            return;
        };
        let r = &job.region;
        let first = job.idx + 1;
        // Counted before the install wakes the program (as in `install`).
        self.m.pages_zero_filled.add(n as u64);
        self.m.pages_faulted_around.add(n as u64);
        let t = Instant::now();
        // SAFETY: `zeros` is a live read-only mapping of MAX_FAULT_AROUND
        // pages, and n < MAX_FAULT_AROUND.
        let (copied, result) = unsafe {
            self.uffd
                .copy_run(r.page_addr(first), zeros.as_ptr(), n as u64 * PAGE, false)
        };
        self.m.st_install.since(t);
        if let Err(e) = result
            && ctx == Ctx::Thread
        {
            self.report(format!("faulting around {:#x}: {e}", r.page_addr(first)));
        }
        self.finish_around(job, n, (copied / PAGE) as usize, true, ctx);
    }

    /// Step two for stored pages on a fault-handling thread, before the
    /// page itself is read: reads `job`'s page and the `n` pages after it
    /// that [`Shared::reserve_around`] took in one request into `run`, and
    /// copies the page into `buf`. One round trip for the whole window: the
    /// program, woken by the page's install, would otherwise wait for the
    /// window's own. False if the read failed (the caller gives the window
    /// back and fetches the page alone, with retries).
    pub(crate) fn read_window(
        &self,
        job: &FetchJob,
        n: usize,
        buf: &mut PageBuf,
        run: &mut RunBuf,
    ) -> bool {
        let Some(remote) = job.region.remote(job.idx) else {
            return false;
        };
        let bytes = run.run(n + 1);
        match self.store.read(remote, bytes) {
            Ok(()) => {
                buf.0.copy_from_slice(&bytes[..PAGE as usize]);
                true
            }
            Err(e) => {
                self.m.fetch_errors.inc();
                self.report(format!(
                    "reading {} pages at {:#x}: {e}; fetching the page alone",
                    n + 1,
                    job.region.page_addr(job.idx)
                ));
                false
            }
        }
    }

    /// Step two for stored pages (read-ahead by a filler, for a signal
    /// handler): the `n` pages after `job`'s that [`Shared::reserve_around`]
    /// took, read in one request into `run` and installed write-protected
    /// (clean). A failed read gives them back: each is fetched, with
    /// retries, at its own fault.
    pub(crate) fn read_around(&self, job: &FetchJob, n: usize, run: &mut RunBuf) {
        if n == 0 {
            return;
        }
        let r = &job.region;
        let first = job.idx + 1;
        let t = Instant::now();
        let read = match r.remote(first) {
            Some(remote) => self
                .store
                .read(remote, run.run(n))
                .map_err(|e| e.to_string()),
            None => Err("no remote address".into()),
        };
        self.m.st_fetch.since(t);
        match read {
            Ok(()) => self.install_read(job, n, run, 0),
            Err(e) => {
                self.m.fetch_errors.inc();
                self.report(format!(
                    "reading ahead {n} pages at {:#x}: {e}; each is fetched at its fault",
                    r.page_addr(first)
                ));
                self.finish_around(job, n, 0, false, Ctx::Thread);
            }
        }
    }

    /// Installs, write-protected (clean), the `n` pages after `job`'s that
    /// were read into `run` starting `skip` pages in, and settles them.
    pub(crate) fn install_read(&self, job: &FetchJob, n: usize, run: &mut RunBuf, skip: usize) {
        if n == 0 {
            return;
        }
        let r = &job.region;
        let first = job.idx + 1;
        // Counted before the install wakes the program (as in `install`).
        self.m.pages_fetched.add(n as u64);
        self.m.bytes_fetched.add(n as u64 * PAGE);
        self.m.pages_faulted_around.add(n as u64);
        let pages = &run.run(skip + n)[skip * PAGE as usize..];
        let t = Instant::now();
        // SAFETY: `pages` is n live, page-aligned pages.
        let (copied, result) = unsafe {
            self.uffd
                .copy_run(r.page_addr(first), pages.as_ptr(), n as u64 * PAGE, true)
        };
        self.m.st_install.since(t);
        if let Err(e) = result {
            self.report(format!("reading ahead at {:#x}: {e}", r.page_addr(first)));
        }
        self.finish_around(job, n, (copied / PAGE) as usize, false, Ctx::Thread);
    }

    /// Settles the `n` pages after `job`'s that fault-around took: the
    /// first `installed` become resident (Dirty with a zero diff base when
    /// mapped `writable`, else Clean), the rest Absent again.
    pub(crate) fn finish_around(
        &self,
        job: &FetchJob,
        n: usize,
        installed: usize,
        writable: bool,
        ctx: Ctx,
    ) {
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
                    self.cache.keep_diff_base(&mut m, true, &[], ctx, &self.m);
                } else {
                    m.state = State::Clean;
                }
                self.cache
                    .update_policy(PolicyUpdate::Insert(r.page_addr(j) / PAGE, now), ctx)
            };
            let absent = m.state == State::Absent;
            let waiters = self.take_waiters(&mut m, r.page_addr(j));
            drop(m);
            if absent {
                self.cache.release_page();
            }
            if let Some(since) = waiters {
                let _ = self.uffd.wake(r.page_addr(j), PAGE);
                self.woke(since);
            }
            if let Some(v) = victim {
                self.cache.force_out(v);
            }
        }
    }
}
