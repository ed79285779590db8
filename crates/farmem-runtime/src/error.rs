//! Why a runtime operation failed.

use crate::store::StoreError;

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
