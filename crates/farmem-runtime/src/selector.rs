//! `--engine daemon`'s state: farmem-policy's selection unit behind a
//! lock, and the bulk lane's queue of clusters (the mechanism is in
//! `daemon.rs`). Below the shared state, which holds it.

use crossbeam_channel::{Receiver, Sender};
use farmem_core::Counter;
use farmem_policy::daemon::{FaultConfig, FaultSelector, FaultStats};
use parking_lot::Mutex;

use crate::page::{Around, FetchJob, PAGE};

/// The selector's number for `job`'s page: clusters are aligned to the
/// region's start, and two regions' numbers never meet (a region's are
/// its first page's number times the cluster size, plus the page's index,
/// and the next region starts at least a page per index later).
pub(crate) fn selector_key(d: &Daemon, job: &FetchJob) -> u64 {
    (job.region.page_addr(0) / PAGE) * d.cluster_pages as u64 + job.idx as u64
}

/// The rest of a cluster, taken around a fault's page, for the bulk thread.
pub(crate) struct BulkJob {
    /// The fault's page; the job installs clean (`write` false).
    pub(crate) job: FetchJob,
    pub(crate) around: Around,
    pub(crate) cluster: u64,
}

/// The engine's state in a runtime.
pub(crate) struct Daemon {
    pub(crate) selector: Mutex<FaultSelector>,
    pub(crate) cluster_pages: usize,
    pub(crate) tx: Sender<BulkJob>,
    pub(crate) rx: Receiver<BulkJob>,
    /// Cluster reads on the bulk lane, and the pages they installed.
    pub bulk_reads: Counter,
    pub bulk_pages: Counter,
}

impl Daemon {
    pub(crate) fn new(config: FaultConfig) -> Result<Self, String> {
        let selector = FaultSelector::new(config).map_err(|e| e.to_string())?;
        // A cluster is queued only when the selector scheduled it, and it
        // holds at most `bulk_slots`: the channel never fills.
        let (tx, rx) = crossbeam_channel::bounded(config.bulk_slots.max(1));
        Ok(Self {
            selector: Mutex::new(selector),
            cluster_pages: config.cluster_pages as usize,
            tx,
            rx,
            bulk_reads: Counter::default(),
            bulk_pages: Counter::default(),
        })
    }

    pub(crate) fn stats(&self) -> FaultStats {
        *self.selector.lock().stats()
    }
}
