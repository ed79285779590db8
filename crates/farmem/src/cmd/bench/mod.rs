//! `farmem bench`: each benchmark measures a part of the real system next to
//! its baseline in the same run, and prints ratios.

pub mod delay;
mod failover;
mod fault_program;
mod fuzz;
pub mod kernel_swap;
pub mod measure;
mod runtime;
mod sim;
mod stripe;
mod swap;
mod swap_plan;
mod swap_report;
mod wire;
pub mod workload;

use super::Outcome;

#[derive(clap::Subcommand)]
pub enum Bench {
    /// Wire protocol latency and throughput beside plain TCP on the same loopback.
    Wire(wire::Args),
    /// Latency and bandwidth under injected egress delay (ThymesisFlow Figs. 2–3).
    Delay(delay::Args),
    /// xDM's multi-path access: a stream over one throttled path, then
    /// striped over two, in one run.
    Stripe(stripe::Args),
    /// Kona's microbenchmark: cache-line vs page dirty tracking, side by side.
    Kona(runtime::KonaArgs),
    /// Latency of a remote page fault beside a bare 4 KiB read.
    Fault(runtime::FaultArgs),
    /// Structured random inputs through the frame decoder and each daemon's handler.
    Fuzz(fuzz::Args),
    /// Replication's price and a memory node's loss, on the demo: one copy
    /// against two, then two with a node SIGKILLed halfway.
    Failover(failover::Args),
    /// farmem against the kernel's own swap (swap file, zram, zswap under a
    /// cgroup v1 limit of the same local memory), side by side on one program.
    Swap(swap::Args),
    /// The simulator's speed: `farmem sim` of one workload under remote,
    /// daemon and unimem, records per CPU second beside issue 24's targets.
    Sim(sim::Args),
}

pub fn run(b: Bench) -> Outcome {
    match b {
        Bench::Wire(a) => wire::run(a),
        Bench::Delay(a) => delay::run(a),
        Bench::Stripe(a) => stripe::run(a),
        Bench::Kona(a) => runtime::kona(a),
        Bench::Fault(a) => runtime::fault(a),
        Bench::Fuzz(a) => fuzz::run(a),
        Bench::Failover(a) => failover::run(a),
        Bench::Swap(a) => swap::run(a),
        Bench::Sim(a) => sim::run(a),
    }
}

/// How long a bench's grants outlive it when it is killed: the controller
/// takes them back once the bench has not renewed its lease this long.
const BENCH_LEASE: std::time::Duration = std::time::Duration::from_secs(10);

/// Holds `cluster`'s grants on a lease while the bench runs, like any client,
/// so a bench killed midway leaks nothing on a shared rack.
fn hold_lease(cluster: &farmem_net::Cluster) -> anyhow::Result<farmem_net::LeaseKeeper> {
    use anyhow::Context as _;
    cluster
        .keep_lease(BENCH_LEASE, |e| {
            eprintln!("farmem bench: the controller ended this bench's lease: {e}");
        })
        .context("taking a lease on the bench's memory")
}
