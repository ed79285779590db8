//! Fault path `thread`, and the filler threads of both paths: handler
//! threads read fault messages from the userfaultfd and resolve each
//! ([`Shared::resolve`]) while the faulting thread sleeps in the kernel;
//! fillers fetch what handlers (or signal handlers) pass them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use farmem_policy::poll::{AdaptivePoll, PollConfig};

use crate::around::Settle;
use crate::cache::Ctx;
use crate::config::WaitMode;
use crate::page::{FetchBufs, FetchJob, PAGE};
use crate::resolve::{By, FaultAt, Step};
use crate::shared::{Handoff, Shared};
use crate::uffd::{Fault, ReadResult, Uffd, Waiter};

/// Resolves one fault message; a page to fetch goes to the fillers (`tx`)
/// if there are any, else is fetched here.
fn handle_fault(sh: &Shared, f: Fault, tx: Option<&Sender<FetchJob>>, bufs: &mut FetchBufs) {
    let t0 = Instant::now();
    let page = f.addr & !(PAGE - 1);
    if f.wp {
        sh.m.faults_wp.inc();
    }
    let Some(r) = sh.lookup(page) else {
        sh.report(format!("fault at {page:#x} outside every region"));
        return;
    };
    let fault = FaultAt {
        page,
        write: f.write,
        wp: f.wp,
        t0,
    };
    let step = sh.resolve(r, fault, Ctx::Thread);
    if !f.wp && !matches!(step, Step::Unparked) {
        sh.m.faults_missing.inc();
    }
    match step {
        Step::Fetch(job) => match tx {
            Some(tx) => {
                if let Err(e) = tx.send(job) {
                    // Only at shutdown: fetch here so the thread is not left hanging.
                    sh.fetch(e.into_inner(), By::Thread(bufs));
                }
            }
            None => {
                sh.fetch(job, By::Thread(bufs));
            }
        },
        Step::Written => sh.m.wp_latency.record(t0.elapsed()),
        Step::Spurious | Step::Unparked => {
            // Resolved between the fault and now: let the thread retry.
            let _ = sh.uffd.wake(page, PAGE);
        }
        Step::Wait | Step::Full => {}
    }
}

/// A handler thread: reads and resolves fault messages until shutdown.
pub(crate) fn monitor(sh: Arc<Shared>, tx: Option<Sender<FetchJob>>) {
    let mut bufs = FetchBufs::new();
    // Without epoll, fall back to poll(2) (every handler wakes per fault).
    let waiter = match sh.uffd.waiter() {
        Ok(w) => Some(w),
        Err(e) => {
            sh.report(format!("epoll on userfaultfd: {e}; using poll"));
            None
        }
    };
    let mut idler = Idler::new(sh.cfg.wait);
    while !sh.shutdown.load(Ordering::Relaxed) {
        match sh.uffd.read() {
            Ok(ReadResult::Fault(f)) => {
                idler.fault();
                handle_fault(&sh, f, tx.as_ref(), &mut bufs);
                idler.resolved();
            }
            Ok(ReadResult::Other(_)) => {}
            Ok(ReadResult::Empty) => {
                if let Err(e) = idler.idle(&sh.uffd, waiter.as_ref()) {
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

/// How a fault handler waits while the descriptor is empty, by its
/// [`WaitMode`].
pub(crate) struct Idler {
    wait: WaitMode,
    /// Adapts the spin to the gaps between faults (`Adaptive`).
    poll: AdaptivePoll,
    /// When the last fault was resolved.
    last: Instant,
    /// Whether the handler found the descriptor empty since then.
    waited: bool,
}

impl Idler {
    pub(crate) fn new(wait: WaitMode) -> Self {
        let max_us = match wait {
            WaitMode::Adaptive { max_us } => max_us,
            _ => 0,
        };
        Self {
            wait,
            poll: AdaptivePoll::new(PollConfig {
                max_us,
                ..PollConfig::default()
            }),
            last: Instant::now(),
            waited: false,
        }
    }

    /// A fault was read: the gap since the last one teaches the spin.
    pub(crate) fn fault(&mut self) {
        if std::mem::take(&mut self.waited) {
            self.poll.waited(self.last.elapsed().as_nanos() as u64);
        }
    }

    /// The fault read last is resolved: the next gap starts.
    pub(crate) fn resolved(&mut self) {
        self.last = Instant::now();
    }

    /// The descriptor is empty: spin once (yielding the CPU to any ready
    /// thread), or sleep (at most 20 ms, so shutdown is seen) until a
    /// message may be readable.
    pub(crate) fn idle(&mut self, uffd: &Uffd, waiter: Option<&Waiter>) -> std::io::Result<()> {
        self.waited = true;
        let since = self.last.elapsed();
        let spin = match self.wait {
            WaitMode::Spin => true,
            WaitMode::Poll => false,
            WaitMode::Hybrid { spin_us } => since < Duration::from_micros(spin_us),
            WaitMode::Adaptive { .. } => (since.as_nanos() as u64) < self.poll.budget(),
        };
        if spin {
            if matches!(self.wait, WaitMode::Adaptive { .. }) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            return Ok(());
        }
        match waiter {
            Some(w) => w.wait(20),
            None => uffd.poll(20),
        }
        .map(drop)
    }
}

/// Fault path `thread` with fillers: fetches what handlers passed on.
pub(crate) fn filler(sh: Arc<Shared>, rx: Receiver<FetchJob>) {
    let mut bufs = FetchBufs::new();
    for job in rx {
        sh.fetch(job, By::Thread(&mut bufs));
    }
}

/// Fault path `signal`: fetches what signal handlers handed over (through
/// the thread's way, which retries and reports), and reopens the store's
/// signal-safe readers that broke.
pub(crate) fn handoff_filler(sh: Arc<Shared>) {
    let Some((_, rx)) = &sh.handoff else { return };
    let mut bufs = FetchBufs::new();
    while !sh.is_shutdown() {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(Handoff::Fetch(job)) => {
                if let Err(e) = sh.store.prepare_read_in_signal() {
                    sh.report(format!("reopening signal-safe store readers: {e}"));
                }
                sh.fetch(job, By::Thread(&mut bufs));
            }
            Ok(Handoff::ReadAhead { job, pages }) => sh.read_around(&job, pages, &mut bufs.run),
            Err(_) => {}
        }
    }
    // Shutting down: pages handed over stay Absent, their slots given back.
    while let Ok(h) = rx.try_recv() {
        match h {
            Handoff::Fetch(job) => sh.give_back(&job, Ctx::Thread),
            Handoff::ReadAhead { job, pages } => {
                sh.finish_run(&job, job.idx + 1, pages, 0, Settle::Clean, Ctx::Thread)
            }
        }
    }
}
