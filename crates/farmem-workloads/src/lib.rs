//! Built-in workloads and the trace format.
//!
//! Workloads run real algorithms on generated data and report every access
//! to their data arrays to a [`Sink`]: the simulator consumes them directly,
//! or a [`trace::TraceWriter`] stores them in the compact binary format that
//! `farmem trace capture` also produces from unmodified programs.

pub mod champsim;
pub mod compact;
pub mod graph;
pub mod graph500;
pub mod kernels;
pub mod lackey;
pub mod ligra;
pub mod native;
pub mod pipe;
pub mod record;
pub mod registry;
pub mod space;
pub mod stream;
pub mod synthetic;
pub mod trace;
pub mod zipf;

pub use record::{Access, Sink};
pub use registry::{Scale, WORKLOADS, WorkloadError, WorkloadInfo, run_workload};
pub use trace::{TraceError, TraceHeader, TraceReader, TraceRecord, TraceWriter};
