//! Compute-node runtime: far regions served over userfaultfd.
//!
//! Kona's KLib (seed 001, §4) in software. A [`Runtime`] gives the process
//! [`Region`]s whose pages live on a [`RemoteStore`] and are cached locally
//! up to [`Config::local_bytes`]. Where pages go is a [`backend::Backend`]
//! (xDM's backends, seed 004): the memory nodes, a compressed pool in front
//! of them, or a file. See `README.md` in this crate for the design:
//! threads, page states, and why the eviction protocol is race-free.
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

// Layers, bottom up, each module using only those in layers below it (see
// README.md, Modules): store; error, uffd, stats; slab; bufs; page; config;
// backend; cache; park; shared; around; resolve; evict, signal, handler; runtime;
// bench, preload_env, remote; join.
mod around;
pub mod backend;
pub mod bench;
mod bufs;
mod cache;
pub mod config;
mod daemon;
mod error;
mod evict;
mod handler;
pub mod join;
mod page;
mod park;
pub mod preload_env;
pub mod remote;
mod resolve;
mod runtime;
mod selector;
mod shared;
pub mod signal;
mod slab;
pub mod stats;
pub mod store;
pub mod uffd;

pub use config::{Config, DirtyMode, Engine, FaultPath, WaitMode};
pub use error::RuntimeError;
pub use page::{LINE, MAX_FAULT_AROUND, PAGE};
pub use runtime::{Pinned, Region, Runtime};
pub use shared::LOST_EXIT_CODE;
pub use stats::{FaultBuckets, StageTimes, Stats};
pub use store::{FaultOp, MemStore, MemStoreStats, RemoteStore, SlabSource, StoreError};
