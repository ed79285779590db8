//! The runtime's store and slab source over a farmem rack: a controller that
//! grants extents and the memory nodes that hold them, reached through
//! [`farmem_net::Cluster`].

use std::sync::atomic::{AtomicBool, Ordering};

use farmem_net::{ClientConfig, Cluster, NetError};
use farmem_wire::{ErrorCode, Placement};

use crate::store::{RemoteStore, SlabSource, StoreError};

/// Page readers per memory node for faults served in signal handlers: how
/// many threads of a program can fetch from one node at once before the
/// rest hand their faults to the filler threads.
const SIGNAL_READERS_PER_NODE: usize = 4;

/// Remote memory on a rack.
#[derive(Debug)]
pub struct RackStore {
    cluster: Cluster,
    placement: Placement,
    /// Set by [`Self::release_all`]: failures after it are the release's
    /// doing, never lost data.
    released: AtomicBool,
}

impl RackStore {
    /// Connects to the controller at `controller`; memory node connections
    /// open as slabs on them are granted (`conns_per_node` each).
    pub fn connect(
        controller: &str,
        cfg: ClientConfig,
        conns_per_node: usize,
    ) -> Result<Self, StoreError> {
        let cluster = Cluster::connect(controller, cfg, conns_per_node).map_err(store_error)?;
        Ok(Self::new(cluster))
    }

    /// Wraps an existing cluster client.
    pub fn new(cluster: Cluster) -> Self {
        Self {
            cluster,
            placement: Placement::Default,
            released: AtomicBool::new(false),
        }
    }

    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Keeps every far byte at the number of copies asked for: a thread
    /// (`farmem-repair`) probes the memory nodes holding copies a few
    /// times a second, so one lost while the program touched nothing there
    /// is found too, and makes new copies from the survivors of a lost one
    /// at no more than `rate` bytes per second (see [`Cluster::repair`]).
    /// It ends with the store.
    pub fn start_repair(self: &std::sync::Arc<Self>, rate: u64) -> std::io::Result<()> {
        let store = std::sync::Arc::downgrade(self);
        std::thread::Builder::new()
            .name("farmem-repair".into())
            .spawn(move || {
                farmem_net::block_async_signals();
                let mut failing = false;
                loop {
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    let Some(store) = store.upgrade() else { return };
                    if store.released.load(Ordering::SeqCst) {
                        continue;
                    }
                    store.cluster.probe();
                    if !store.cluster.needs_repair() {
                        continue;
                    }
                    match store.cluster.repair(rate) {
                        Ok(_) => failing = false,
                        Err(e) if !failing => {
                            failing = true;
                            tracing::warn!("cannot restore a lost copy yet: {e}");
                        }
                        Err(_) => {}
                    }
                }
            })
            .map(|_| ())
    }

    /// Gives every extent and erasure-coded stripe back to the controller,
    /// going on past a failed one; the first error is returned.
    pub fn release_all(&self) -> Result<(), StoreError> {
        self.released.store(true, Ordering::SeqCst);
        let mut first = Ok(());
        let extents = self.cluster.extents().into_iter().map(|e| (e.base, e.len));
        for (base, len) in extents.chain(self.cluster.stripes()) {
            if let Err(err) = self.cluster.release(base, len) {
                first = first.and(Err(StoreError::Other(Box::new(err))));
            }
        }
        first
    }
}

impl RackStore {
    /// Maps transport errors onto the runtime's, keeping the cause's
    /// message (which node, which range, what the node said). Data that a
    /// memory node lost or no longer serves is [`StoreError::Lost`], unless
    /// this store gave its memory back already.
    fn store_error(&self, e: NetError) -> StoreError {
        let lost = match &e {
            NetError::NodeDown { .. } | NetError::NodeLost { .. } => true,
            NetError::Remote { code, .. } => matches!(code, ErrorCode::Lost | ErrorCode::NotOwner),
            _ => false,
        };
        if lost && !self.released.load(Ordering::SeqCst) {
            StoreError::Lost(e.to_string())
        } else {
            store_error(e)
        }
    }
}

impl RemoteStore for RackStore {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        self.cluster
            .read(addr, buf)
            .map_err(|e| self.store_error(e))
    }

    fn read_bulk(&self, addr: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        self.cluster
            .read_bulk(addr, buf)
            .map_err(|e| self.store_error(e))
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<(), StoreError> {
        self.cluster
            .write(addr, data)
            .map_err(|e| self.store_error(e))
    }

    fn write_lines(&self, lines: &[(u64, [u8; 64])]) -> Result<(), StoreError> {
        self.cluster
            .write_lines(lines)
            .map_err(|e| self.store_error(e))
    }

    fn prepare_read_in_signal(&self) -> Result<bool, StoreError> {
        self.cluster
            .keep_page_readers(SIGNAL_READERS_PER_NODE)
            .map_err(store_error)?;
        Ok(true)
    }

    fn read_in_signal(&self, addr: u64, buf: &mut [u8]) -> bool {
        matches!(
            self.cluster.read_without_allocating(addr, buf),
            Some(Ok(()))
        )
    }
}

impl SlabSource for RackStore {
    fn allocate(&self, size: u64) -> Result<Vec<(u64, u64)>, StoreError> {
        let extents = self
            .cluster
            .allocate(size, self.placement)
            .map_err(store_error)?;
        Ok(extents.into_iter().map(|e| (e.base, e.len)).collect())
    }
}

/// Maps transport errors onto the runtime's, keeping the cause's message
/// (which node, which range, what the node said).
fn store_error(e: NetError) -> StoreError {
    match e {
        NetError::Timeout(_) => StoreError::Timeout,
        e => StoreError::Other(Box::new(e)),
    }
}

impl crate::stats::DelaySource for farmem_net::delay::EgressDelay {
    fn generation(&self) -> u64 {
        farmem_net::delay::EgressDelay::generation(self)
    }

    fn label(&self) -> String {
        self.model().to_string()
    }
}
