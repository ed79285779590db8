//! Compute-node runtime: far regions served over userfaultfd.
//!
//! Kona's KLib (seed 001, §4) in software. A [`Runtime`] gives the process
//! [`Region`]s whose pages live on a [`RemoteStore`] and are cached locally
//! up to [`Config::local_bytes`]. See `README.md` in this crate for the
//! design: threads, page states, and why the eviction protocol is race-free.
//!
//! ```no_run
//! use std::sync::Arc;
//! use farmem_runtime::{Config, MemStore, Runtime};
//! let store = Arc::new(MemStore::new(1 << 30));
//! let rt = Runtime::new(Config::default(), store.clone(), store).unwrap();
//! let region = rt.region(64 << 20).unwrap();
//! region.write_at(12345, b"far").unwrap();
//! region.sync().unwrap();
//! println!("{}", serde_json::to_string(&rt.stats()).unwrap());
//! ```

pub mod bench;
pub mod config;
mod evict;
pub mod remote;
mod runtime;
pub mod signal;
mod slab;
pub mod stats;
pub mod store;
pub mod uffd;

pub use config::{Config, DirtyMode, FaultPath, WaitMode};
pub use runtime::{LOST_EXIT_CODE, MAX_FAULT_AROUND, Region, Runtime};
pub use stats::{StageTimes, Stats};
pub use store::{FaultOp, MemStore, MemStoreStats, RemoteStore, SlabSource, StoreError};

/// Page size the runtime maps, fetches and tracks.
pub const PAGE: u64 = farmem_core::PAGE_SIZE;
/// Dirty-tracking granularity in line mode.
pub const LINE: usize = farmem_core::CACHE_LINE as usize;

/// Why a runtime operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("invalid runtime config: {0}")]
    Config(String),
    #[error("userfaultfd: {0}")]
    Uffd(std::io::Error),
    #[error("mapping a region: {0}")]
    Mmap(std::io::Error),
    #[error("starting a runtime thread: {0}")]
    Thread(std::io::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("range {off}+{len} is outside the region of {size} bytes")]
    OutOfBounds { off: usize, len: usize, size: usize },
    /// The pages stay resident and dirty; nothing was dropped.
    #[error("write-back of {pages} pages failed; they stay resident: {source}")]
    Writeback { pages: usize, source: StoreError },
}
