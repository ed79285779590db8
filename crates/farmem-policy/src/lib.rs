//! farmem-policy: every decision farmem makes, as pure code.
//!
//! Policies take time as an argument (`now`, virtual or monotonic
//! nanoseconds) and do no I/O, so the real runtime and the simulator drive
//! the same objects: the runtime with the monotonic clock and real pages, the
//! simulator with virtual time and traces. A policy is written once.

pub mod cache;
pub mod daemon;
pub mod delay;
pub mod diffbase;
pub mod dispatch;
pub mod list;
pub mod poll;
pub mod prefetch;
pub mod promote;
pub mod readahead;
pub mod stripe;
pub mod tier;
pub mod watermark;
pub mod write_streak;

/// Nanoseconds, virtual (simulator) or monotonic (runtime).
pub type Nanos = u64;

/// A cached block's number: its address divided by the cache's block size.
pub type BlockId = u64;
