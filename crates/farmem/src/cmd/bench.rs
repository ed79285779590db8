//! `farmem bench`.

use super::Outcome;

#[derive(clap::Subcommand)]
pub enum Bench {
    /// Wire protocol latency and throughput against plain TCP.
    Wire {},
}

pub fn run(_b: Bench) -> Outcome {
    anyhow::bail!("`farmem bench` is not implemented yet")
}
