//! Where evicted pages go (xDM's backends, seed 004 §3): the rack's memory
//! nodes, or a compressed pool in local memory in front of them.
//!
//! | backend      | store                                    |
//! |--------------|------------------------------------------|
//! | `remote`     | the memory nodes ([`crate::remote::RackStore`]) |
//! | `compressed` | [`CompressedStore`] over the memory nodes |
//!
//! A backend is chosen by name (`farmem run --backend`, `FARMEM_BACKEND`)
//! and built over the store below it with [`Backend::build`].

pub mod compressed;

use std::sync::Arc;

use farmem_policy::tier::CompressedTierConfig;

pub use compressed::{CompressedStats, CompressedStore};

use crate::config::DirtyMode;
use crate::store::RemoteStore;

/// A backend and its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Backend {
    /// Every evicted page goes to the memory nodes.
    #[default]
    Remote,
    /// A compressed pool within the local limit first; pages that do not
    /// shrink, and the oldest past the pool's size, go to the memory nodes.
    Compressed(CompressedTierConfig),
}

/// The names [`Backend`] parses, for help and errors.
pub const NAMES: &str = "remote, compressed";

impl std::str::FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "" | "remote" => Ok(Self::Remote),
            "compressed" => Ok(Self::Compressed(CompressedTierConfig::default())),
            other => Err(format!(
                "unknown backend {other:?}; expected one of: {NAMES}"
            )),
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Remote => "remote",
            Self::Compressed(_) => "compressed",
        })
    }
}

/// The store a runtime with `local_bytes` of local memory uses.
pub enum Built {
    Remote(Arc<dyn RemoteStore>),
    Compressed(Arc<CompressedStore>),
}

impl Built {
    pub fn store(&self) -> Arc<dyn RemoteStore> {
        match self {
            Self::Remote(s) => s.clone(),
            Self::Compressed(s) => s.clone(),
        }
    }

    /// The compressed pool's counters, when there is one.
    pub fn compressed_stats(&self) -> Option<CompressedStats> {
        match self {
            Self::Remote(_) => None,
            Self::Compressed(s) => Some(s.stats()),
        }
    }
}

impl Backend {
    /// The dirty tracking that suits the backend when none is asked for:
    /// line diffs for the memory nodes (Kona: only changed lines cross the
    /// link), whole pages for a compressed pool, which stores pages whole
    /// and would decompress and compress a page again for each diff.
    pub fn default_dirty(&self) -> DirtyMode {
        match self {
            Self::Remote => DirtyMode::default(),
            Self::Compressed(_) => DirtyMode::Page,
        }
    }

    /// This backend over `below` (the rack) for a runtime of `local_bytes`.
    pub fn build(&self, below: Arc<dyn RemoteStore>, local_bytes: u64) -> Built {
        match self {
            Self::Remote => Built::Remote(below),
            Self::Compressed(cfg) => Built::Compressed(Arc::new(CompressedStore::new(
                below,
                *cfg,
                cfg.pool_bytes(local_bytes),
            ))),
        }
    }
}
