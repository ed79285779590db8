//! `farmem trace`.

use super::Outcome;

#[derive(clap::Subcommand)]
pub enum Trace {
    /// Print a trace's header and summary.
    Info {
        /// The trace file.
        file: std::path::PathBuf,
    },
}

pub fn run(_t: Trace) -> Outcome {
    anyhow::bail!("`farmem trace` is not implemented yet")
}
