//! Counters for everything that moves, and their serializable snapshot.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;

use farmem_core::metrics::LatencySummary;
use farmem_core::{Counter, LatencyHistogram};

/// Time spent in one pipeline stage, accumulated in nanoseconds.
#[derive(Debug, Default)]
pub(crate) struct Stage(Counter);

impl Stage {
    pub(crate) fn since(&self, t: Instant) {
        self.0.add(t.elapsed().as_nanos() as u64);
    }
    fn get(&self) -> u64 {
        self.0.get()
    }
}

#[derive(Debug, Default)]
pub(crate) struct Metrics {
    /// The cache's room summed over the slots taken while it was full (at
    /// its low watermark or past it: each page taken then meant one
    /// evicted), and those slots: their mean is the local memory a model
    /// of the run sizes by. The same over every slot, for a run that never
    /// filled its cache.
    pub room_full_sum: Counter,
    pub slots_taken_full: Counter,
    pub room_taken_sum: Counter,
    pub slots_taken: Counter,
    pub faults_missing: Counter,
    pub faults_wp: Counter,
    /// Pages installed writable because their streak predicted a write
    /// ([`farmem_policy::write_streak`]): write-protect faults not taken.
    pub writes_predicted: Counter,
    /// Eviction victims passed by because a system call's buffer held
    /// them (`Runtime::pin`).
    pub pages_pinned_passed: Counter,
    /// Faults that found their page mid-fetch or mid-eviction and waited.
    pub faults_waited: Counter,
    /// Fault messages that were already resolved when read (woken only).
    pub faults_spurious: Counter,
    /// Missing faults (of `faults_missing`) that found their page on its
    /// way or already in, waited or spurious: they brought nothing in.
    pub faults_missing_found: Counter,
    pub pages_fetched: Counter,
    pub pages_zero_filled: Counter,
    pub pages_faulted_around: Counter,
    pub pages_parked: Counter,
    pub pages_unparked: Counter,
    pub pages_discarded: Counter,
    pub bytes_fetched: Counter,
    pub pages_evicted_clean: Counter,
    pub pages_evicted_dirty: Counter,
    pub pages_synced: Counter,
    pub dirty_lines_shipped: Counter,
    pub bytes_written_back: Counter,
    pub log_batches: Counter,
    pub snapshots: Counter,
    pub fetch_errors: Counter,
    /// Times far data was found lost (the `on_lost` hook was called).
    pub data_lost: Counter,
    pub writeback_errors: Counter,
    /// Dirty pages whose write-back failed for good and stayed resident.
    pub writeback_kept: Counter,
    /// Pages cached beyond the limit while the store refused write-backs.
    pub limit_overruns: Counter,
    /// Slots taken past the room for pages pinned by system calls in
    /// flight: resident pages stay within the room plus the pinned ones.
    pub pinned_overruns: Counter,
    /// Slots a fault's window took past the room and the pinned pages
    /// (`around_allowance`): the evictor's next round gives them back.
    pub around_past_room: Counter,
    /// Slots taken past the limit because the charges besides the cache
    /// (page tables, the process, a compressed pool, snapshot buffers)
    /// left less than the room's floor: the limit is exceeded by at most
    /// the floor (an eighth of it, 16 pages at least).
    pub room_floored: Counter,
    pub filler_waits: Counter,
    /// Faults a signal handler passed to a filler thread (fault path
    /// `signal`: no idle page reader, a read failed).
    pub faults_handed_off: Counter,
    /// First writes served in a signal handler with no snapshot buffer
    /// ready: the page has no diff base and is written back whole.
    pub snapshots_missed: Counter,
    /// First writes that kept no diff base because pages lately came back
    /// mostly dirty, or bases already took their share of the cache
    /// ([`farmem_policy::diffbase`]): written back whole.
    pub snapshots_skipped: Counter,
    /// Of those, the ones refused because bases alive (kept by pages, or
    /// by victims awaiting their write-back) were at their cap.
    pub snapshots_capped: Counter,
    pub fault_latency: LatencyHistogram,
    /// The missing faults whose page the store had (not filled with zeros).
    pub remote_fault_latency: LatencyHistogram,
    /// The same, by the delay in force on the link.
    pub remote_by_delay: ByDelay,
    /// Missing faults that found their page in transition (fetched by
    /// another fault or read ahead, or being written back): fault to wake.
    pub wait_latency: LatencyHistogram,
    pub wp_latency: LatencyHistogram,
    pub st_fetch: Stage,
    pub st_install: Stage,
    pub st_snapshot: Stage,
    pub st_protect: Stage,
    pub st_diff: Stage,
    pub st_ship: Stage,
    pub st_unmap: Stage,
    pub st_wait_space: Stage,
}

/// The delay in force on a client's link, which `farmem link set` may
/// change while the program runs.
pub(crate) trait DelaySource: Send + Sync {
    /// Changes whenever the delay may have.
    fn generation(&self) -> u64;
    /// The delay in force, as `--delay` takes it.
    fn label(&self) -> String;
}

/// Delays a run tells apart; faults under more are not counted here.
const DELAY_SLOTS: usize = 8;

/// Remote fault latency by the delay in force when each fault ended: what
/// a delay adds, measured within one run whose delay is switched live, so
/// the noise between runs (another sitting, other fault windows) cancels.
#[derive(Default)]
pub(crate) struct ByDelay {
    source: OnceLock<Arc<dyn DelaySource>>,
    /// The source's generation, shifted up a byte, and the slot of its
    /// label plus one (0: none seen yet).
    key: AtomicU64,
    labels: Mutex<Vec<String>>,
    /// Made when a source is watched: most runs have no delay.
    hists: OnceLock<Box<[LatencyHistogram; DELAY_SLOTS]>>,
}

impl std::fmt::Debug for ByDelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.summaries()).finish()
    }
}

impl ByDelay {
    /// Counts faults by `source`'s delay from now on (once per run).
    pub(crate) fn watch(&self, source: Arc<dyn DelaySource>) {
        self.hists.get_or_init(Box::default);
        // Named now, so a signal handler has a slot from the first fault.
        self.name(&*source);
        let _ = self.source.set(source);
    }

    /// Records a remote fault of `took`. `may_block` false (a signal
    /// handler): recorded only under the delay last named, since naming a
    /// new one allocates.
    pub(crate) fn record(&self, took: Duration, may_block: bool) {
        let (Some(source), Some(hists)) = (self.source.get(), self.hists.get()) else {
            return;
        };
        let key = self.key.load(Ordering::Acquire);
        let slot = if key & 0xff != 0 && key >> 8 << 8 == source.generation() << 8 {
            Some((key & 0xff) as usize - 1)
        } else if may_block {
            self.name(&**source)
        } else {
            None
        };
        let Some(hist) = slot.map(|s| &hists[s]) else {
            return;
        };
        if may_block {
            hist.record(took);
        } else {
            hist.try_record(took);
        }
    }

    /// The slot of the delay in force, taken if new; None when every slot
    /// holds another.
    fn name(&self, source: &dyn DelaySource) -> Option<usize> {
        // The generation before the label: if the delay changes between,
        // the next fault sees a newer generation and names it again.
        let generation = source.generation() << 8;
        let label = source.label();
        let mut labels = self.labels.lock();
        let slot = match labels.iter().position(|l| *l == label) {
            Some(slot) => slot,
            None if labels.len() < DELAY_SLOTS => {
                labels.push(label);
                labels.len() - 1
            }
            None => return None,
        };
        self.key
            .store(generation | (slot as u64 + 1), Ordering::Release);
        Some(slot)
    }

    fn summaries(&self) -> BTreeMap<String, LatencySummary> {
        let Some(hists) = self.hists.get() else {
            return BTreeMap::new();
        };
        let labels = self.labels.lock();
        labels
            .iter()
            .zip(hists.iter())
            .map(|(label, hist)| (label.clone(), hist.summary()))
            .collect()
    }
}

/// Nanoseconds spent in each stage, summed over threads.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct StageTimes {
    /// Reading pages from the store.
    pub fetch_ns: u64,
    /// UFFDIO_COPY.
    pub install_ns: u64,
    /// Copying a page at its first write and lifting protection.
    pub snapshot_ns: u64,
    /// Write-protecting victims.
    pub protect_ns: u64,
    /// Diffing victims against snapshots into the log.
    pub diff_ns: u64,
    /// Shipping log segments / pages until acknowledged.
    pub ship_ns: u64,
    /// MADV_DONTNEED.
    pub unmap_ns: u64,
    /// Fillers waiting for the evictor to make room.
    pub wait_space_ns: u64,
}

/// A point-in-time copy of every counter, as `--json` reports print it.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Stats {
    pub faults_missing: u64,
    pub faults_wp: u64,
    pub writes_predicted: u64,
    pub pages_pinned_passed: u64,
    pub faults_waited: u64,
    pub faults_spurious: u64,
    /// Missing faults that found their page on its way or already in.
    pub faults_missing_found: u64,
    pub pages_fetched: u64,
    /// First touches of never-written pages served without the store.
    pub pages_zero_filled: u64,
    /// Pages taken around another page's fault, so never faulted on
    /// themselves: fresh ones (also counted as zero-filled) and, on the
    /// thread path, stored ones read in one request (also counted as
    /// fetched) when a program touches memory in order.
    pub pages_faulted_around: u64,
    /// Victims put on probation (`Config::park_share`) instead of
    /// evicted at once...
    pub pages_parked: u64,
    /// ... and those the program touched while parked: pages in use the
    /// policy would have evicted (each a soft fault, not in
    /// `faults_missing`).
    pub pages_unparked: u64,
    /// Resident pages dropped without a write-back because the program
    /// freed their memory (`Runtime::discard`).
    pub pages_discarded: u64,
    pub bytes_fetched: u64,
    pub pages_evicted_clean: u64,
    pub pages_evicted_dirty: u64,
    pub pages_synced: u64,
    pub dirty_lines_shipped: u64,
    pub bytes_written_back: u64,
    pub log_batches: u64,
    pub snapshots: u64,
    pub fetch_errors: u64,
    /// Times far data was found lost: its memory node restarted or stayed
    /// unreachable past its deadline with no copy left.
    pub data_lost: u64,
    pub writeback_errors: u64,
    pub writeback_kept: u64,
    /// Pages cached beyond the limit while the store refused write-backs
    /// (the limit is soft then: the program runs on instead of hanging).
    pub limit_overruns: u64,
    pub pinned_overruns: u64,
    pub around_past_room: u64,
    pub room_floored: u64,
    pub filler_waits: u64,
    pub faults_handed_off: u64,
    pub snapshots_missed: u64,
    pub snapshots_skipped: u64,
    pub snapshots_capped: u64,
    pub resident_pages: u64,
    /// Page buffers held for diff bases (kept and pooled), counted
    /// against the limit with the resident pages.
    pub snapshot_pages: u64,
    /// Pages the runtime's page tables take (32 bytes per far page
    /// touched), counted against the limit too.
    pub table_pages: u64,
    /// Pages of local memory the backend holds (a compressed pool),
    /// counted against the limit too.
    pub store_pages: u64,
    /// The process's other resident pages (its heap, stacks, libraries),
    /// as last measured, counted against the limit too when it bounds the
    /// process (`Config::limit_counts_process`; 0 otherwise).
    pub outside_pages: u64,
    /// The most of those ever measured: a program's own heap may swell
    /// for a phase and shrink by the end.
    pub outside_pages_peak: u64,
    pub limit_pages: u64,
    /// The cache's room (the limit less everything else charged against
    /// it) when it took a page while full, averaged over those pages (over
    /// every page taken if it never filled): the local memory a simulation
    /// of this run sizes by (`farmem eval validate`). The room shrinks as
    /// the process's own memory grows, mostly while the cache first fills,
    /// and the room that decides what is evicted is the one after.
    pub room_pages_mean: u64,
    /// Missing-fault latency, message read to page installed.
    pub fault_latency: LatencySummary,
    /// The same for the faults that read their page from the store: what
    /// the link's latency and an injected delay add to.
    pub remote_fault_latency: LatencySummary,
    /// The same by the delay in force on the link (`--delay`, or set live
    /// by `farmem link set`); empty without a delay.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub remote_fault_latency_by_delay: BTreeMap<String, LatencySummary>,
    /// Missing faults that waited for a page in transition, from the fault
    /// to the wake (thread path; not in `fault_latency`, which times the
    /// faults that fetched). A program sees these too.
    pub wait_latency: LatencySummary,
    /// Write-protect fault latency, message read to protection lifted.
    pub wp_latency: LatencySummary,
    pub stages: StageTimes,
    /// `--engine daemon`'s decisions (all 0 with `page`): faults that
    /// fetched their page alone, their page and then its cluster, or the
    /// cluster alone; of the first, those whose region showed no
    /// locality, whose cluster the selector did not schedule (bulk lane
    /// full, or the cluster in flight without the page), and those that
    /// found both lanes full.
    pub engine_pages_only: u64,
    pub engine_page_and_cluster: u64,
    pub engine_cluster_only: u64,
    pub engine_no_locality: u64,
    pub engine_cluster_refused: u64,
    pub engine_stalled: u64,
    /// Of `engine_cluster_only`: page and cluster read as one, the link
    /// fast enough that splitting them would not pay.
    pub engine_whole: u64,
    /// Reads on the bulk lane, and the pages of clusters they installed.
    pub engine_bulk_reads: u64,
    pub engine_bulk_pages: u64,
}

/// The fault latency histograms in buckets (`Runtime::latency_buckets`).
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct FaultBuckets {
    pub fault: farmem_core::Buckets,
    pub remote_fault: farmem_core::Buckets,
    pub wait: farmem_core::Buckets,
    pub wp: farmem_core::Buckets,
}

/// The cache's books at a snapshot, in pages: what it holds and what it
/// counts against its limit.
pub(crate) struct Books {
    pub resident: u64,
    pub snapshots: u64,
    pub tables: u64,
    pub store: u64,
    pub outside: u64,
    pub outside_peak: u64,
    pub limit: u64,
}

impl Metrics {
    pub(crate) fn snapshot(&self, books: Books) -> Stats {
        Stats {
            faults_missing: self.faults_missing.get(),
            faults_wp: self.faults_wp.get(),
            writes_predicted: self.writes_predicted.get(),
            pages_pinned_passed: self.pages_pinned_passed.get(),
            faults_waited: self.faults_waited.get(),
            faults_spurious: self.faults_spurious.get(),
            faults_missing_found: self.faults_missing_found.get(),
            pages_fetched: self.pages_fetched.get(),
            pages_zero_filled: self.pages_zero_filled.get(),
            pages_faulted_around: self.pages_faulted_around.get(),
            pages_parked: self.pages_parked.get(),
            pages_unparked: self.pages_unparked.get(),
            pages_discarded: self.pages_discarded.get(),
            bytes_fetched: self.bytes_fetched.get(),
            pages_evicted_clean: self.pages_evicted_clean.get(),
            pages_evicted_dirty: self.pages_evicted_dirty.get(),
            pages_synced: self.pages_synced.get(),
            dirty_lines_shipped: self.dirty_lines_shipped.get(),
            bytes_written_back: self.bytes_written_back.get(),
            log_batches: self.log_batches.get(),
            snapshots: self.snapshots.get(),
            fetch_errors: self.fetch_errors.get(),
            data_lost: self.data_lost.get(),
            writeback_errors: self.writeback_errors.get(),
            writeback_kept: self.writeback_kept.get(),
            limit_overruns: self.limit_overruns.get(),
            pinned_overruns: self.pinned_overruns.get(),
            around_past_room: self.around_past_room.get(),
            room_floored: self.room_floored.get(),
            filler_waits: self.filler_waits.get(),
            faults_handed_off: self.faults_handed_off.get(),
            snapshots_missed: self.snapshots_missed.get(),
            snapshots_skipped: self.snapshots_skipped.get(),
            snapshots_capped: self.snapshots_capped.get(),
            resident_pages: books.resident,
            snapshot_pages: books.snapshots,
            table_pages: books.tables,
            store_pages: books.store,
            outside_pages: books.outside,
            outside_pages_peak: books.outside_peak,
            limit_pages: books.limit,
            room_pages_mean: match self.slots_taken_full.get() {
                0 => self.room_taken_sum.get() / self.slots_taken.get().max(1),
                full => self.room_full_sum.get() / full,
            },
            fault_latency: self.fault_latency.summary(),
            remote_fault_latency: self.remote_fault_latency.summary(),
            remote_fault_latency_by_delay: self.remote_by_delay.summaries(),
            wait_latency: self.wait_latency.summary(),
            wp_latency: self.wp_latency.summary(),
            stages: StageTimes {
                fetch_ns: self.st_fetch.get(),
                install_ns: self.st_install.get(),
                snapshot_ns: self.st_snapshot.get(),
                protect_ns: self.st_protect.get(),
                diff_ns: self.st_diff.get(),
                ship_ns: self.st_ship.get(),
                unmap_ns: self.st_unmap.get(),
                wait_space_ns: self.st_wait_space.get(),
            },
            ..Stats::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A link whose delay the test sets.
    #[derive(Default)]
    struct Link(Mutex<(u64, String)>);

    impl DelaySource for Link {
        fn generation(&self) -> u64 {
            self.0.lock().0
        }
        fn label(&self) -> String {
            self.0.lock().1.clone()
        }
    }

    impl Link {
        fn set(&self, label: &str) {
            let mut l = self.0.lock();
            *l = (l.0 + 2, label.into());
        }
    }

    #[test]
    fn faults_go_under_the_delay_in_force_and_a_handler_never_names_one() {
        let by = ByDelay::default();
        let us = Duration::from_micros;
        // Nothing watched: nothing counted.
        by.record(us(1), true);
        assert!(by.summaries().is_empty());
        let link = Arc::new(Link::default());
        link.set("none");
        by.watch(link.clone());
        // Named at watch, so a handler counts from the first fault.
        by.record(us(10), false);
        by.record(us(30), true);
        link.set("20us");
        // A handler does not name the new delay: its fault is not counted.
        by.record(us(99), false);
        by.record(us(40), true);
        by.record(us(60), false);
        link.set("none");
        by.record(us(20), true);
        let s = by.summaries();
        assert_eq!(s.len(), 2);
        assert_eq!((s["none"].count, s["20us"].count), (3, 2));
        assert!((s["20us"].mean_us - 50.0).abs() < 0.1, "{s:?}");
        assert!((s["none"].mean_us - 20.0).abs() < 0.1, "{s:?}");
        // Past the slots, a delay is not counted rather than mislabelled.
        for i in 0..DELAY_SLOTS {
            link.set(&format!("{i}us"));
            by.record(us(1), true);
        }
        assert_eq!(by.summaries().len(), DELAY_SLOTS);
        assert!(
            !by.summaries()
                .contains_key(&format!("{}us", DELAY_SLOTS - 1))
        );
    }
}
