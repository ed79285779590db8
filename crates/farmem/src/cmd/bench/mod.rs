//! `farmem bench`: each benchmark measures a part of the real system next to
//! its baseline in the same run, and prints ratios.

mod wire;

use super::Outcome;

#[derive(clap::Subcommand)]
pub enum Bench {
    /// Wire protocol latency and throughput beside plain TCP on the same loopback.
    Wire(wire::Args),
}

pub fn run(b: Bench) -> Outcome {
    match b {
        Bench::Wire(a) => wire::run(a),
    }
}
