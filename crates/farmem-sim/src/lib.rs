//! Trace-driven simulator of the disaggregated memory hierarchy.
//!
//! Accesses (from a built-in workload or a trace file) drive cores through
//! private L1D/L2 caches and a shared LLC; LLC misses and dirty evictions go
//! to a data-movement [`scheme::Scheme`] that moves lines or pages between
//! local memory and memory nodes over FIFO links. Time is virtual
//! nanoseconds. See `docs/sim.md`.

//!
//! Layers, bottom up, none importing a module above it: `config` (a leaf),
//! `stats`, `error`, `input`; `core` and `components`; `machine`;
//! `scheme`; `engine` and `multi`; `run` (the facade's functions); `eval`
//! (the papers' evaluations, built on `run`). This file only declares and
//! re-exports.

pub mod components;
pub mod config;
pub mod core;
pub mod engine;
pub mod error;
pub mod eval;
pub mod input;
pub mod machine;
pub mod multi;
pub mod run;
pub mod scheme;
pub mod stats;

pub use config::{Config, ConfigBuilder, ConfigError};
pub use engine::Engine;
pub use error::SimError;
pub use input::Input;
pub use run::{PROGRESS_EVERY, SimResult, simulate, simulate_accesses, simulate_with_progress};
pub use stats::Stats;

/// Virtual time in nanoseconds.
pub type Time = f64;
pub const LINE_SHIFT: u32 = 6;
pub const LINES_PER_PAGE: u64 = farmem_core::PAGE_SIZE / farmem_core::CACHE_LINE;
