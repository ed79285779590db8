//! The selection unit on real faults (§4.2, read at §4.7's larger
//! granularities): the runtime's demand page is the engine's sub-block and
//! its bulk cluster (256 KiB, 64 pages, by default) the engine's page. For each
//! fault on a far page the runtime asks [`FaultSelector::on_fault`] whether
//! to fetch the page alone, the page and its cluster, or the cluster alone;
//! the answer is [`ComputeEngine::on_miss`]'s, mapped onto what a fault can
//! do, so there is one selection policy for both bodies.
//!
//! Three inputs the hardware engine does not have, all the caller's:
//! - **Locality.** The hardware schedules a 4 KB page at a 64 B miss; a
//!   256 KiB cluster per random 4 KiB fault would multiply the bytes on
//!   the link by 64. A cluster is offered to the engine only when the caller
//!   sees locality in the region (its readahead finds the fault continuing
//!   a stream); any other fault fetches its page alone
//!   ([`FaultStats::no_locality`]).
//! - **Buffer sizes.** The queues are the runtime's lanes: the sub-block
//!   buffer holds the demand reads in flight (one per fault handler), the
//!   page buffer the clusters queued or in flight on the bulk lane. A
//!   slower link keeps clusters longer, the page buffer fills, and faults
//!   fall back to their page alone: the adaptivity of §4.2.
//! - **The link's pace.** Splitting a fault's page from its cluster saves
//!   the fault the cluster's transfer and costs a second read; where the
//!   cluster's read takes little longer than a page's, the two are read as
//!   one ([`FaultConfig::whole_within`]).
//!
//! Pure: no clocks, no I/O. The caller tells it when a read leaves and
//! lands ([`FaultSelector::page_done`], [`FaultSelector::cluster_issued`],
//! [`FaultSelector::cluster_done`]) and how long reads took
//! ([`FaultSelector::observe_demand_read`],
//! [`FaultSelector::observe_bulk_read`]).

use serde::{Deserialize, Serialize};

use super::engine::{ComputeEngine, EngineConfig, LineDecision, PageDecision, Selection};
use super::partition::PartitionConfig;
use super::{DaemonError, LineOffset, PageNo};

/// The bytes of a demand page.
const PAGE_BYTES: u64 = 4096;

/// The selector's sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaultConfig {
    /// Pages per bulk cluster, 2 to 64 (the engine's 64-bit masks).
    pub cluster_pages: u32,
    /// Demand reads in flight at most: the sub-block buffer.
    pub demand_slots: usize,
    /// Clusters queued or in flight at most: the page buffer (and the
    /// page queue).
    pub bulk_slots: usize,
    /// A fault that would read its page and, beside it, its cluster reads
    /// them as one when the cluster's read, at the bulk lane's measured
    /// pace, takes at most this many times a demand read (0: never). The
    /// split saves the fault the cluster's transfer, and costs a second
    /// read and a hand-off; on a fast link the transfer is the smaller.
    pub whole_within: u32,
}

impl Default for FaultConfig {
    /// 256 KiB clusters (64 pages, the most the engine's masks hold; §4.7
    /// names 64 KiB and 2 MB as examples), two demand reads (the runtime's
    /// two fault handlers), eight clusters (2 MiB) on the bulk lane. On the
    /// demo's PageRank (256 MiB at 64 MiB local, `rate:375000000/s`),
    /// 64 KiB clusters took 28 k faults, 11.5 k of them cluster reads, and
    /// 256 KiB ones 11 k faults and 2.9 k cluster reads for the same bytes
    /// read (the page engine, whose readahead window grows to 512 KiB: 7.5 k).
    /// Whole reads within 4 demand reads: on this repo's 2-vCPU host, on
    /// the full loopback link, most of PageRank's stream faults read whole
    /// (350-380 of about 500 decisions), and under a 125 MB/s cap none.
    fn default() -> Self {
        Self {
            cluster_pages: 64,
            demand_slots: 2,
            bulk_slots: 8,
            whole_within: 4,
        }
    }
}

/// What to fetch for one fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fetch {
    /// The page alone, on the demand lane.
    Page,
    /// The page on the demand lane and, at the same time, the rest of its
    /// cluster on the bulk lane, which nothing waits for but the faults on
    /// its pages.
    PageAndCluster,
    /// The cluster alone, the page with it, on the bulk lane: the demand
    /// buffer is full, so the fault waits for the cluster (§4.2: the
    /// line is not sent, the page is).
    Cluster,
}

/// The selector's decisions, for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FaultStats {
    /// Faults that fetched their page alone, for any reason.
    pub pages_only: u64,
    pub page_and_cluster: u64,
    pub cluster_only: u64,
    /// Of `cluster_only`: the page and its cluster read as one, the link
    /// fast enough ([`FaultConfig::whole_within`]).
    pub whole: u64,
    /// Of `pages_only`: the region showed no locality at the fault.
    pub no_locality: u64,
    /// Of `pages_only`: the engine did not schedule the cluster (its
    /// buffer full, or the cluster already in flight without this page).
    pub cluster_refused: u64,
    /// Of `pages_only`: both buffers were full ([`super::MissAction::is_stalled`]);
    /// a fault cannot wait, so its page went on the demand lane anyway.
    pub stalled: u64,
}

/// The selection unit over a [`ComputeEngine`] in the runtime's reading.
#[derive(Debug, Clone)]
pub struct FaultSelector {
    engine: ComputeEngine,
    cluster_pages: u32,
    whole_within: u32,
    /// Moving means of a demand read's ns and of a bulk read's ns per
    /// page, as the caller measured them (None until one is).
    demand_ns: Option<f64>,
    bulk_ns_per_page: Option<f64>,
    stats: FaultStats,
}

/// Weight of each new measure in the moving means.
const EWMA_WEIGHT: f64 = 1.0 / 8.0;

fn ewma(mean: &mut Option<f64>, x: f64) {
    *mean = Some(mean.map_or(x, |m| m + EWMA_WEIGHT * (x - m)));
}

impl FaultSelector {
    pub fn new(config: FaultConfig) -> Result<Self, DaemonError> {
        if !(2..=64).contains(&config.cluster_pages) {
            return Err(DaemonError::BadConfig {
                field: "cluster_pages",
                why: format!("{} (a cluster holds 2 to 64 pages)", config.cluster_pages),
            });
        }
        let engine = ComputeEngine::new(EngineConfig {
            sub_block_queue: config.demand_slots,
            inflight_sub_block: config.demand_slots,
            page_queue: config.bulk_slots,
            inflight_page: config.bulk_slots,
            selection: Selection::Selective,
            partition: PartitionConfig {
                line_bytes: PAGE_BYTES,
                page_bytes: PAGE_BYTES * u64::from(config.cluster_pages),
                ..PartitionConfig::default()
            },
            ..EngineConfig::default()
        })?;
        Ok(Self {
            engine,
            cluster_pages: config.cluster_pages,
            whole_within: config.whole_within,
            demand_ns: None,
            bulk_ns_per_page: None,
            stats: FaultStats::default(),
        })
    }

    /// The cluster holding page number `page`, and its first page.
    pub fn cluster_of(&self, page: PageNo) -> (PageNo, PageNo) {
        let n = u64::from(self.cluster_pages);
        (page / n, page / n * n)
    }

    pub fn cluster_pages(&self) -> u32 {
        self.cluster_pages
    }

    /// A fault on far page number `page` (its address / 4 KiB); `local`:
    /// the region shows locality there. The caller then fetches what the
    /// answer says and reports the reads' progress: after
    /// [`Fetch::Page`] or [`Fetch::PageAndCluster`], [`Self::page_done`]
    /// when the page is in; after [`Fetch::PageAndCluster`] or
    /// [`Fetch::Cluster`], [`Self::cluster_issued`] and
    /// [`Self::cluster_done`].
    pub fn on_fault(&mut self, page: PageNo, write: bool, local: bool) -> Fetch {
        if !local {
            self.stats.pages_only += 1;
            self.stats.no_locality += 1;
            return Fetch::Page;
        }
        let (cluster, first) = self.cluster_of(page);
        // Below 64 by construction (cluster_pages ≤ 64).
        let offset = (page - first) as LineOffset;
        let action = match self.engine.on_miss(cluster, offset, write) {
            Ok(a) => a,
            // Unreachable (the offset is in range); fetching the page is
            // always correct.
            Err(_) => {
                self.stats.pages_only += 1;
                return Fetch::Page;
            }
        };
        let sent = action.line == LineDecision::Sent;
        let fetch = match action.page {
            PageDecision::Scheduled if sent && self.whole_pays() => {
                // The page comes with its cluster: its demand slot is
                // free at once.
                self.engine.issue_line(cluster, offset);
                self.engine.on_line_arrival(cluster, offset);
                self.stats.whole += 1;
                Fetch::Cluster
            }
            PageDecision::Scheduled if sent => Fetch::PageAndCluster,
            PageDecision::Scheduled => Fetch::Cluster,
            _ => Fetch::Page,
        };
        match fetch {
            Fetch::PageAndCluster => self.stats.page_and_cluster += 1,
            Fetch::Cluster => self.stats.cluster_only += 1,
            Fetch::Page => {
                self.stats.pages_only += 1;
                if action.is_stalled() {
                    self.stats.stalled += 1;
                } else {
                    self.stats.cluster_refused += 1;
                }
            }
        }
        fetch
    }

    /// Whether a cluster's read, at the bulk lane's measured pace, takes
    /// at most `whole_within` demand reads (false until both are measured).
    fn whole_pays(&self) -> bool {
        match (self.demand_ns, self.bulk_ns_per_page) {
            (Some(demand), Some(per_page)) if self.whole_within > 0 => {
                per_page * f64::from(self.cluster_pages) <= f64::from(self.whole_within) * demand
            }
            _ => false,
        }
    }

    /// A demand read of one page took `ns`, request to reply.
    pub fn observe_demand_read(&mut self, ns: u64) {
        ewma(&mut self.demand_ns, ns as f64);
    }

    /// A bulk read of `pages` pages took `ns`, request to reply.
    pub fn observe_bulk_read(&mut self, ns: u64, pages: u64) {
        if pages > 0 {
            ewma(&mut self.bulk_ns_per_page, ns as f64 / pages as f64);
        }
    }

    /// The demand read of `page` (fetched alone or before its cluster)
    /// landed: its sub-block entry is released.
    pub fn page_done(&mut self, page: PageNo) {
        let (cluster, first) = self.cluster_of(page);
        let offset = (page - first) as LineOffset;
        self.engine.issue_line(cluster, offset);
        self.engine.on_line_arrival(cluster, offset);
    }

    /// The cluster's read left the bulk queue.
    pub fn cluster_issued(&mut self, cluster: PageNo) {
        self.engine.issue_page(cluster);
    }

    /// The cluster's read landed (or failed: its pages are given back and
    /// each is fetched at its own fault): its page-buffer entry is
    /// released.
    pub fn cluster_done(&mut self, cluster: PageNo) {
        self.engine.issue_page(cluster);
        self.engine.on_page_arrival(cluster);
    }

    pub fn stats(&self) -> &FaultStats {
        &self.stats
    }

    /// The engine, for its counters and buffers.
    pub fn engine(&self) -> &ComputeEngine {
        &self.engine
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector(demand: usize, bulk: usize) -> FaultSelector {
        FaultSelector::new(FaultConfig {
            cluster_pages: 16,
            demand_slots: demand,
            bulk_slots: bulk,
            whole_within: 0,
        })
        .unwrap()
    }

    /// Serves each fault at once, as one fault handler does: the page's
    /// read lands before the next fault, the cluster's when `land` says.
    fn serve(s: &mut FaultSelector, page: PageNo, local: bool, land: bool) -> Fetch {
        let f = s.on_fault(page, false, local);
        if f != Fetch::Cluster {
            s.page_done(page);
        }
        if f != Fetch::Page {
            let (cluster, _) = s.cluster_of(page);
            s.cluster_issued(cluster);
            if land {
                s.cluster_done(cluster);
            }
        }
        f
    }

    #[test]
    fn bad_sizes_are_errors() {
        for (pages, demand, bulk) in [(1, 2, 8), (65, 2, 8), (16, 0, 8), (16, 2, 0)] {
            let cfg = FaultConfig {
                cluster_pages: pages,
                demand_slots: demand,
                bulk_slots: bulk,
                whole_within: 4,
            };
            assert!(FaultSelector::new(cfg).is_err(), "{cfg:?}");
        }
    }

    #[test]
    fn a_sequential_region_takes_a_cluster_per_fault_a_random_one_pages() {
        // A stream: one fault per cluster (the cluster brings the rest),
        // each landing before the next.
        let mut s = selector(2, 8);
        for c in 0..10u64 {
            assert_eq!(serve(&mut s, c * 16, true, true), Fetch::PageAndCluster);
        }
        // Random faults show no locality: pages alone, nothing scheduled.
        for i in 0..7u64 {
            assert_eq!(serve(&mut s, 1_000 + i * 977, false, true), Fetch::Page);
        }
        let st = *s.stats();
        assert_eq!(
            (
                st.page_and_cluster,
                st.pages_only,
                st.no_locality,
                st.cluster_only
            ),
            (10, 7, 7, 0)
        );
        assert_eq!(s.engine().stats().pages_scheduled, 10);
        assert_eq!(s.engine().inflight_page_len(), 0, "every cluster released");
        assert_eq!(s.engine().inflight_sub_block_len(), 0);
    }

    #[test]
    fn a_fast_link_reads_page_and_cluster_as_one() {
        let mut s = FaultSelector::new(FaultConfig {
            cluster_pages: 16,
            demand_slots: 1,
            bulk_slots: 8,
            whole_within: 4,
        })
        .unwrap();
        // Nothing measured yet: DaeMon's split.
        assert_eq!(serve(&mut s, 0, true, true), Fetch::PageAndCluster);
        // A page in 50 us, a 16-page cluster in 160 us: 3.2 page reads.
        s.observe_demand_read(50_000);
        s.observe_bulk_read(160_000, 16);
        assert_eq!(serve(&mut s, 16, true, true), Fetch::Cluster);
        // Its demand slot (the only one) was freed at once: the next
        // stream's fault is judged the same, not refused for want of it.
        assert_eq!(s.on_fault(32, false, true), Fetch::Cluster);
        assert_eq!(s.engine().inflight_sub_block_len(), 0);
        s.cluster_issued(2);
        s.cluster_done(2);
        // The link slows: clusters at 40 page reads. Split again, once
        // the moving mean has moved past 4 (each new measure weighs 1/8).
        for _ in 0..8 {
            s.observe_bulk_read(2_000_000, 16);
        }
        assert_eq!(serve(&mut s, 48, true, true), Fetch::PageAndCluster);
        let st = *s.stats();
        assert_eq!((st.whole, st.cluster_only, st.page_and_cluster), (2, 2, 2));
    }

    #[test]
    fn a_full_bulk_lane_leaves_faults_their_pages_alone() {
        // Eight clusters in flight that have not landed (a slow link): the
        // page buffer is full, so the next streams' faults take pages.
        let mut s = selector(2, 8);
        for c in 0..8u64 {
            assert_eq!(serve(&mut s, c * 16, true, false), Fetch::PageAndCluster);
        }
        for c in 8..12u64 {
            assert_eq!(serve(&mut s, c * 16, true, false), Fetch::Page);
        }
        assert_eq!(s.stats().cluster_refused, 4);
        // One lands: the next fault gets its cluster again.
        s.cluster_done(0);
        assert_eq!(serve(&mut s, 12 * 16, true, false), Fetch::PageAndCluster);
        // A page of a cluster in flight that the cluster does not bring
        // (the caller could not take it) is fetched alone.
        assert_eq!(serve(&mut s, 16 + 5, true, false), Fetch::Page);
        assert_eq!(s.stats().cluster_refused, 5);
    }

    #[test]
    fn a_full_demand_lane_sends_the_cluster_alone() {
        // Two demand reads in flight (two handlers each waiting for a
        // page): a third fault with locality waits for its cluster.
        let mut s = selector(2, 8);
        assert_eq!(s.on_fault(0, false, true), Fetch::PageAndCluster);
        assert_eq!(s.on_fault(16, false, true), Fetch::PageAndCluster);
        assert_eq!(s.on_fault(32, true, true), Fetch::Cluster);
        // Without locality it still fetches its page: a fault cannot wait.
        assert_eq!(s.on_fault(999, false, false), Fetch::Page);
        s.page_done(0);
        assert_eq!(s.on_fault(48, false, true), Fetch::PageAndCluster);
        let st = *s.stats();
        assert_eq!(
            (st.page_and_cluster, st.cluster_only, st.pages_only),
            (3, 1, 1)
        );
        // Both full: the fault's page goes anyway, counted as stalled.
        let mut s = selector(1, 1);
        assert_eq!(s.on_fault(0, false, true), Fetch::PageAndCluster);
        assert_eq!(s.on_fault(16, false, true), Fetch::Page);
        assert_eq!(s.stats().stalled, 1);
    }
}
