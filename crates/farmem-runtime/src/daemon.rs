//! `--engine daemon`: DaeMon's selection unit on real faults (seed 000 §4.2
//! at §4.7's granularities). A fault on a stored page asks farmem-policy's
//! [`FaultSelector`](farmem_policy::daemon::FaultSelector) whether to fetch
//! the page alone (demand lane), the page and at the same time the rest of
//! its cluster (on the bulk lane, read by the `farmem-bulk` thread while
//! the page is read and after the program runs on), or the cluster alone
//! with the page in it (bulk lane, the fault waiting). The region's
//! readahead says whether the fault shows locality; the selector's buffers
//! are the lanes' occupancy. A cluster is the aligned block the selector
//! tracks, stretched to the readahead's window where a stream's window is
//! longer. Thread fault path only: a signal handler cannot wait on the
//! selector's lock.
//!
//! Never-written pages keep fault-around's zeros (they cross no link), so
//! only remote faults meet the selector.

use std::sync::Arc;
use std::time::Duration;

use farmem_policy::daemon::Fetch;
use farmem_policy::readahead::Window;

use crate::cache::Ctx;
use crate::page::{Around, FetchJob, Lane, PAGE, PageBuf, RunBuf, State};
use crate::selector::{BulkJob, Daemon, selector_key};
use crate::shared::Shared;

impl Shared {
    /// Fetches a stored page's fault as the selector says, on a thread
    /// with `buf` and `run`; the slot for the page is taken. True when the
    /// page is installed; else it is given back (Absent) or its install
    /// failed (reported).
    pub(crate) fn fetch_selected(
        &self,
        d: &Daemon,
        job: FetchJob,
        buf: &mut PageBuf,
        run: &mut RunBuf,
    ) -> bool {
        let page_no = selector_key(d, &job);
        let cluster = d.selector.lock().cluster_of(page_no).0;
        let (fetch, around) = self.select(d, &job, page_no);
        if fetch == Fetch::PageAndCluster {
            // Both at once, as §4.2 sends the line and the page: the bulk
            // thread reads the cluster while this one reads the page, on
            // their own lanes.
            self.send_cluster(d, &job, around, cluster);
        }
        let t = std::time::Instant::now();
        let filled = match fetch {
            Fetch::Cluster if !around.is_empty() => {
                d.selector.lock().cluster_issued(cluster);
                let read = self.read_window(&job, around, buf, run, Lane::Bulk);
                let mut selector = d.selector.lock();
                selector.cluster_done(cluster);
                if read {
                    let pages = (around.before + around.after + 1) as u64;
                    selector.observe_bulk_read(elapsed_ns(t), pages);
                }
                drop(selector);
                if read {
                    d.bulk_reads.inc();
                    d.bulk_pages.add((around.before + around.after) as u64);
                    self.m.st_fetch.since(t);
                    return self.install_cluster(job, around, buf, run);
                }
                self.finish_around(&job, around, Ctx::Thread);
                self.fill(&job, buf, Ctx::Thread)
            }
            Fetch::Cluster => {
                // Nothing of the cluster could be taken: the page alone.
                d.selector.lock().cluster_done(cluster);
                self.fill(&job, buf, Ctx::Thread)
            }
            Fetch::Page | Fetch::PageAndCluster => {
                let ok = self.fill(&job, buf, Ctx::Thread);
                let mut selector = d.selector.lock();
                selector.page_done(page_no);
                if ok {
                    selector.observe_demand_read(elapsed_ns(t));
                }
                ok
            }
        };
        self.m.st_fetch.since(t);
        if !filled {
            self.give_back(&job, Ctx::Thread);
            return false;
        }
        self.install_or_report(&job, buf)
    }

    /// Hands the pages `around` took of `job`'s cluster to the bulk
    /// thread (or, with none taken, releases the cluster).
    fn send_cluster(&self, d: &Daemon, job: &FetchJob, around: Around, cluster: u64) {
        if around.is_empty() {
            d.selector.lock().cluster_done(cluster);
            return;
        }
        let b = BulkJob {
            job: FetchJob {
                region: job.region.clone(),
                idx: job.idx,
                write: false,
                unwatched: false,
                zero: false,
                reserved: true,
                t0: job.t0,
            },
            around,
            cluster,
        };
        if let Err(e) = d.tx.try_send(b) {
            self.give_back_cluster(d, e.into_inner());
        }
    }

    /// Asks the selector about `job`'s fault (its number `page_no`), with
    /// the region's readahead as the locality, and takes the cluster's
    /// pages unless the page goes alone.
    fn select(&self, d: &Daemon, job: &FetchJob, page_no: u64) -> (Fetch, Around) {
        let r = &job.region;
        let window = r.readahead.lock().on_miss(job.idx as u64);
        let fetch = d
            .selector
            .lock()
            .on_fault(page_no, job.write, window.len > 1);
        let around = match fetch {
            Fetch::Page => Around::default(),
            _ => self.reserve_cluster(d, job, window),
        };
        // The readahead's stream goes on where what this fault brings
        // ends, so the next cluster's first fault continues it.
        r.readahead
            .lock()
            .cut(job.idx as u64, around.before as u32, around.after as u32);
        (fetch, around)
    }

    /// Takes the absent stored pages of `job`'s cluster beside its page
    /// (Fetching, with their slots): those whose remote addresses run on
    /// from the page's, outward from it, until one does not fit or the
    /// cache is full. The cluster is the aligned block the selector knows,
    /// or the fault's readahead `window` where that reaches further. The
    /// selector's cluster is then these pages.
    fn reserve_cluster(&self, d: &Daemon, job: &FetchJob, window: Window) -> Around {
        let r = &job.region;
        let idx = job.idx;
        let n = d.cluster_pages;
        // The aligned cluster, stretched to the readahead's window where
        // the stream's is longer: a stream then faults as seldom as under
        // `--engine page`, whose windows grow past a cluster.
        let first = (idx - idx % n).min(idx - window.before(idx as u64) as usize);
        let end = (idx - idx % n + n)
            .max(idx + 1 + window.after(idx as u64) as usize)
            .min(r.pages.len());
        let base = r.remote(idx);
        let take = |j: usize| {
            let mut m = r.pages[j].lock();
            let offset = (j as i64 - idx as i64) * PAGE as i64;
            let fits = !m.reads_zero(r)
                && base.is_some()
                && r.remote(j) == base.and_then(|b| b.checked_add_signed(offset));
            if m.state != State::Absent || !fits || !self.cache.try_reserve(&self.m) {
                return false;
            }
            m.state = State::Fetching;
            true
        };
        Around {
            after: (idx + 1..end).take_while(|&j| take(j)).count(),
            before: (first..idx).rev().take_while(|&j| take(j)).count(),
        }
    }

    /// Installs a cluster read whole into `run`: the page, then the pages
    /// below and above it.
    fn install_cluster(
        &self,
        job: FetchJob,
        around: Around,
        buf: &PageBuf,
        run: &mut RunBuf,
    ) -> bool {
        let installed = self.install_or_report(&job, buf);
        let below = job.idx - around.before;
        self.install_read(&job, below, around.before, run, 0);
        self.install_read(&job, job.idx + 1, around.after, run, around.before + 1);
        installed
    }

    fn install_or_report(&self, job: &FetchJob, buf: &PageBuf) -> bool {
        match self.install(job, buf, Ctx::Thread) {
            Ok(()) => true,
            Err(e) => {
                let page = job.region.page_addr(job.idx);
                self.report(format!("installing {page:#x}: {e}"));
                false
            }
        }
    }

    /// The bulk thread's work: the pages of a cluster beside its fault's
    /// page, below and above it, each run in one bulk read, installed
    /// clean. A failed read gives its pages back, for each to be fetched
    /// at its own fault.
    fn read_cluster(&self, d: &Daemon, b: BulkJob, run: &mut RunBuf) {
        d.selector.lock().cluster_issued(b.cluster);
        let t = std::time::Instant::now();
        let mut read = 0u64;
        self.read_runs(&b.job, &b.around.runs(b.job.idx), run, Lane::Bulk, |n| {
            d.bulk_reads.inc();
            d.bulk_pages.add(n as u64);
            read += n as u64;
        });
        let mut selector = d.selector.lock();
        selector.cluster_done(b.cluster);
        selector.observe_bulk_read(elapsed_ns(t), read);
    }

    /// A cluster that will not be read: its pages Absent again, its
    /// selector entry released.
    fn give_back_cluster(&self, d: &Daemon, b: BulkJob) {
        self.finish_around(&b.job, b.around, Ctx::Thread);
        d.selector.lock().cluster_done(b.cluster);
    }
}

/// The `farmem-bulk` thread: reads the clusters faults scheduled, until
/// shutdown; those left then are given back.
pub(crate) fn bulk_worker(sh: Arc<Shared>) {
    let Some(d) = sh.daemon.as_ref() else { return };
    let mut run = crate::page::FetchBufs::new().run;
    while !sh.is_shutdown() {
        if let Ok(b) = d.rx.recv_timeout(Duration::from_millis(20)) {
            sh.read_cluster(d, b, &mut run);
        }
    }
    while let Ok(b) = d.rx.try_recv() {
        sh.give_back_cluster(d, b);
    }
}

fn elapsed_ns(since: std::time::Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}
