//! Fault-around: the pages beside a fault's own that one fault installs,
//! so a program filling fresh memory or reading far data in order, up or
//! down, takes a fault per window, not per page. Below the fault state
//! machine (`resolve.rs`), which takes a window before it installs the
//! fault's page and fills it after.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::cache::{Ctx, PolicyUpdate};
use crate::page::{Around, FetchJob, Lane, MAX_FAULT_AROUND, PAGE, PageBuf, RunBuf, State};
use crate::shared::Shared;

/// How the pages of a window that were installed start out.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Settle<'a> {
    /// Write-protected, clean: a write takes a fault to mark the page.
    Clean,
    /// Writable and dirty over zeros, their diff base (never-written pages).
    DirtyOverZeros,
    /// Writable and dirty, unwatched (no write seen yet), with the bytes
    /// read, a page each in order, as their diff bases: the fault that
    /// took the window was a write, so the stream it continues is most
    /// likely written too, and each of its pages would otherwise take a
    /// write-protect fault right after its install.
    DirtyOver(&'a [u8]),
}

impl Shared {
    /// Step one: if the region's readahead sees a stream at `job`'s page,
    /// takes the absent pages beside it that the window covers (Fetching,
    /// with their cache slots): never-written pages beside a never-written
    /// one, above it or below it (GNU sort writes its line table from the
    /// top of its buffer down); stored pages whose remote addresses run on
    /// from the page's, so one read covers them all, above it and, on a
    /// thread, below it.
    /// Done before the job's page is installed, so the program, woken by
    /// that install, finds its next pages taken and waits for them instead
    /// of faulting them in one by one. A window keeps to a share of the
    /// limit and takes its pages even past the room, by as much
    /// ([`farmem_policy::watermark::around_allowance`]), so its length
    /// does not depend on how far behind the evictor runs; a page that
    /// does not fit, or a cache past even that, ends it early.
    pub(crate) fn reserve_around(&self, job: &FetchJob, ctx: Ctx) -> Around {
        if self.zeros.is_none() {
            return Around::default();
        }
        let (r, idx) = (&job.region, job.idx);
        let base = r.remote(idx);
        let mut readahead = ctx.lock(&r.readahead);
        let window = readahead.on_miss(idx as u64);
        let allowed = (MAX_FAULT_AROUND as usize - 1).min(self.cache.around_allowance() as usize);
        let after = (window.after(idx as u64) as usize).min(allowed);
        // Zeros are installed in place on either path; stored pages below
        // the fault are read with it only on a thread (a handler's filler
        // reads those above).
        let before = if job.zero || ctx == Ctx::Thread {
            window.before(idx as u64) as usize
        } else {
            0
        };
        // Page j fits when it is absent and, for stored pages, at its
        // place in the run of remote addresses through the page's.
        let take = |j: usize| {
            let mut m = ctx.lock(&r.pages[j]);
            let fresh = m.reads_zero(r);
            let fits = if job.zero {
                fresh
            } else {
                let offset = (j as i64 - idx as i64) * PAGE as i64;
                !fresh
                    && base.is_some()
                    && r.remote(j) == base.and_then(|b| b.checked_add_signed(offset))
            };
            if m.state != State::Absent || !fits || !self.cache.try_reserve_around(&self.m) {
                return false;
            }
            m.state = State::Fetching;
            true
        };
        let end = (idx + 1 + after).min(r.pages.len());
        let after = (idx + 1..end).take_while(|&j| take(j)).count();
        let took = Around {
            after,
            before: (idx.saturating_sub(before.min(allowed - after))..idx)
                .rev()
                .take_while(|&j| take(j))
                .count(),
        };
        let reach = (
            before.min(idx) as u64,
            u64::from(window.after(idx as u64)).min((r.pages.len() - 1 - idx) as u64),
        );
        readahead.end_window(
            idx as u64,
            window,
            (took.before as u64, took.after as u64),
            reach,
            |j| ctx.lock(&r.pages[j as usize]).state != State::Absent,
        );
        took
    }

    /// Step two for never-written pages: installs the pages beside `job`'s
    /// that [`Shared::reserve_around`] took, each side with one
    /// UFFDIO_COPY from zeros, writable: zeros are their diff base, so no
    /// write needs a fault to be seen (page mode ships such a page whole
    /// once any of it is not zero).
    pub(crate) fn install_around(&self, job: &FetchJob, around: Around, ctx: Ctx) {
        self.install_zeros(job, job.idx - around.before, around.before, ctx);
        self.install_zeros(job, job.idx + 1, around.after, ctx);
    }

    /// Installs zeros over the `n` pages of `job`'s window from `first`.
    fn install_zeros(&self, job: &FetchJob, first: usize, n: usize, ctx: Ctx) {
        let Some(zeros) = self.zeros.as_ref().filter(|_| n > 0) else {
            return;
        };
        let r = &job.region;
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
        let installed = (copied / PAGE) as usize;
        self.finish_run(job, first, n, installed, Settle::DirtyOverZeros, ctx);
    }

    /// Step two for stored pages on a fault-handling thread, before the
    /// page itself is read: reads `job`'s page and the pages around it
    /// that [`Shared::reserve_around`] took in one request into `run`, and
    /// copies the page into `buf`. One round trip for the whole window: the
    /// program, woken by the page's install, would otherwise wait for the
    /// window's own. False if the read failed (the caller gives the window
    /// back and fetches the page alone, with retries).
    pub(crate) fn read_window(
        &self,
        job: &FetchJob,
        around: Around,
        buf: &mut PageBuf,
        run: &mut RunBuf,
        lane: Lane,
    ) -> bool {
        let first = job.idx - around.before;
        let Some(remote) = job.region.remote(first) else {
            return false;
        };
        let pages = around.before + 1 + around.after;
        let bytes = run.run(pages);
        let read = match lane {
            Lane::Demand => self.store.read(remote, bytes),
            Lane::Bulk => self.store.read_bulk(remote, bytes),
        };
        match read {
            Ok(()) => {
                let at = around.before * PAGE as usize;
                buf.0.copy_from_slice(&bytes[at..at + PAGE as usize]);
                true
            }
            Err(e) => {
                self.m.fetch_errors.inc();
                self.report(format!(
                    "reading {pages} pages at {:#x}: {e}; fetching the page alone",
                    job.region.page_addr(first)
                ));
                false
            }
        }
    }

    /// Reads each of `runs` (first page, pages) of `job`'s region in one
    /// request on `lane` and installs it ([`Self::install_read`]); a
    /// failed read gives its pages back, for each to be fetched at its own
    /// fault. `landed` is told each read's pages before they are
    /// installed (counted before the install wakes the program).
    pub(crate) fn read_runs(
        &self,
        job: &FetchJob,
        runs: &[(usize, usize)],
        run: &mut RunBuf,
        lane: Lane,
        mut landed: impl FnMut(usize),
    ) {
        for &(first, n) in runs.iter().filter(|&&(_, n)| n > 0) {
            let t = Instant::now();
            let read = match job.region.remote(first) {
                Some(remote) => match lane {
                    Lane::Demand => self.store.read(remote, run.run(n)),
                    Lane::Bulk => self.store.read_bulk(remote, run.run(n)),
                }
                .map_err(|e| e.to_string()),
                None => Err("no remote address".into()),
            };
            self.m.st_fetch.since(t);
            match read {
                Ok(()) => {
                    landed(n);
                    self.install_read(job, first, n, run, 0);
                }
                Err(e) => {
                    self.m.fetch_errors.inc();
                    self.report(format!(
                        "reading {n} pages at {:#x}: {e}; each is fetched at its fault",
                        job.region.page_addr(first)
                    ));
                    self.finish_run(job, first, n, 0, Settle::Clean, Ctx::Thread);
                }
            }
        }
    }

    /// Step two for stored pages (read-ahead by a filler, for a signal
    /// handler): the `n` pages after `job`'s that [`Shared::reserve_around`]
    /// took, read in one request into `run` (on the bulk lane under
    /// [`Config::demand_first`](crate::Config::demand_first)) and
    /// installed write-protected (clean). A failed read gives them back:
    /// each is fetched, with retries, at its own fault.
    pub(crate) fn read_around(&self, job: &FetchJob, n: usize, run: &mut RunBuf) {
        let lane = if self.cfg.demand_first {
            Lane::Bulk
        } else {
            Lane::Demand
        };
        self.read_runs(job, &[(job.idx + 1, n)], run, lane, |_| {});
    }

    /// Installs `n` pages of `job`'s window from page `first`, read into
    /// `run` starting `skip` pages in, and settles them: writable when the
    /// job is a write fault's ([`Settle::DirtyOver`]; the thread path,
    /// which reads a window with its page), else write-protected (clean).
    /// A write only predicted from the faulting page's own history says
    /// nothing of its neighbours': they come in protected, or each would
    /// ship whole at its eviction, written or not (the diff-base cap keeps
    /// no copy of most).
    pub(crate) fn install_read(
        &self,
        job: &FetchJob,
        first: usize,
        n: usize,
        run: &mut RunBuf,
        skip: usize,
    ) {
        if n == 0 {
            return;
        }
        let r = &job.region;
        // Counted before the install wakes the program (as in `install`).
        self.m.pages_fetched.add(n as u64);
        self.m.bytes_fetched.add(n as u64 * PAGE);
        self.m.pages_faulted_around.add(n as u64);
        let pages = &run.run(skip + n)[skip * PAGE as usize..];
        let written = job.write && !job.unwatched;
        let t = Instant::now();
        // SAFETY: `pages` is n live, page-aligned pages.
        let (copied, result) = unsafe {
            self.uffd.copy_run(
                r.page_addr(first),
                pages.as_ptr(),
                n as u64 * PAGE,
                !written,
            )
        };
        self.m.st_install.since(t);
        if let Err(e) = result {
            self.report(format!("reading ahead at {:#x}: {e}", r.page_addr(first)));
        }
        let settle = if written {
            Settle::DirtyOver(pages)
        } else {
            Settle::Clean
        };
        let installed = (copied / PAGE) as usize;
        self.finish_run(job, first, n, installed, settle, Ctx::Thread);
    }

    /// Gives back every page of `job`'s window (Absent, slots released),
    /// for each to be fetched at its own fault.
    pub(crate) fn finish_around(&self, job: &FetchJob, around: Around, ctx: Ctx) {
        let below = job.idx - around.before;
        self.finish_run(job, below, around.before, 0, Settle::Clean, ctx);
        self.finish_run(job, job.idx + 1, around.after, 0, Settle::Clean, ctx);
    }

    /// Settles `n` pages of `job`'s window from page `first`: the first
    /// `installed` become resident as `settle` says, the rest Absent again.
    pub(crate) fn finish_run(
        &self,
        job: &FetchJob,
        first: usize,
        n: usize,
        installed: usize,
        settle: Settle<'_>,
        ctx: Ctx,
    ) {
        let r = &job.region;
        let now = self.now();
        for j in first..first + n {
            let mut m = ctx.lock(&r.pages[j]);
            let victim = if j >= first + installed || r.dead.load(Ordering::SeqCst) {
                m.state = State::Absent;
                None
            } else {
                match settle {
                    Settle::Clean => m.state = State::Clean,
                    Settle::DirtyOverZeros => {
                        m.state = State::Dirty;
                        self.cache.keep_diff_base(&mut m, true, &[], ctx, &self.m);
                    }
                    Settle::DirtyOver(pages) => {
                        m.state = State::Dirty;
                        m.unwatched = true;
                        self.m.writes_predicted.inc();
                        let at = (j - first) * PAGE as usize;
                        let base = &pages[at..at + PAGE as usize];
                        self.cache.keep_diff_base(&mut m, false, base, ctx, &self.m);
                    }
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
