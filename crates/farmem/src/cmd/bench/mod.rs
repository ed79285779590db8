//! `farmem bench`: each benchmark measures a part of the real system next to
//! its baseline in the same run, and prints ratios.

mod delay;
mod wire;

use super::Outcome;

#[derive(clap::Subcommand)]
pub enum Bench {
    /// Wire protocol latency and throughput beside plain TCP on the same loopback.
    Wire(wire::Args),
    /// Latency and bandwidth under injected egress delay (ThymesisFlow Figs. 2–3).
    Delay(delay::Args),
}

pub fn run(b: Bench) -> Outcome {
    match b {
        Bench::Wire(a) => wire::run(a),
        Bench::Delay(a) => delay::run(a),
    }
}
