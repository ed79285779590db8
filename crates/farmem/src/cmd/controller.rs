//! `farmem controller`: run the rack controller until interrupted.

use std::path::PathBuf;
use std::time::Duration;

use farmem_controller::StateSpec;

use anyhow::Context;
use farmem_controller::extent::Placement;
use farmem_controller::{Controller, ControllerConfig};
use farmem_core::ByteSize;

use super::Outcome;

/// Run the rack controller.
///
/// Memory nodes register and heartbeat; compute nodes ask for memory and
/// receive exclusive extents (UniMem's Remote-Balloon), in multiples of
/// --granularity, spread over memory nodes by --placement. With --state the
/// node and extent table and the clients' leases survive a restart (each
/// lease counting again from the restart); the controller refuses to start
/// when it cannot write that file. --quota caps what one client may hold.
///
/// With --state etcd://HOST:PORT/PREFIX the state lives in etcd, and
/// several controllers given the same one elect a leader on an etcd lease:
/// the others stand by (refusing with "not the leader; the leader is at
/// X") and one takes over within a few seconds of the leader's death.
/// Clients and memory nodes take every controller's address: --controller A,B.
///
/// Example: farmem controller --listen 127.0.0.1:7000 --state /var/lib/farmem/controller.json
#[derive(clap::Args)]
pub struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:7000")]
    listen: String,
    /// Where the node and extent table and the leases are kept across
    /// restarts: a FILE (written at start, refused if it cannot be, and
    /// after every change, atomically) or etcd://HOST:PORT/PREFIX (shared
    /// with standby controllers; see above).
    #[arg(long, value_name = "FILE|etcd://HOST:PORT/PREFIX")]
    state: Option<StateSpec>,
    /// The most one client name may hold, every copy counted (default: no
    /// limit); an allocation past it is refused.
    #[arg(long)]
    quota: Option<ByteSize>,
    /// Grant unit (UniMem: the memory hot-plug granularity).
    #[arg(long, default_value = "128MiB")]
    granularity: ByteSize,
    /// How grants spread over memory nodes.
    #[arg(long, value_enum, default_value_t = PlacementArg::RoundRobin)]
    placement: PlacementArg,
    /// A memory node silent this long is marked down (a bare number: ms;
    /// or 3s).
    #[arg(long, default_value = "3000", value_parser = super::time_ms)]
    heartbeat_timeout_ms: Duration,
    /// File holding the shared cluster token (whitespace trimmed).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Close a session idle this long (a bare number: seconds; or 10m; 0:
    /// never). Clients reopen it on their next request and prove their
    /// name again with the capabilities they were issued.
    #[arg(long, default_value = "600", value_parser = super::time_secs)]
    idle_secs: Duration,
    /// Serve Prometheus metrics on this address (`GET /metrics`; port 0
    /// picks one, printed with the address): what it holds and serves,
    /// refusals by reason, and a histogram of request service times.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// Print the bound address as one JSON object on stdout once serving.
    #[arg(long)]
    json: bool,
    /// A TOML file whose keys are these flags (`listen = "0.0.0.0:7000"`,
    /// `heartbeat-timeout-ms = "3s"`, `json = true`); a flag on the
    /// command line wins over its key. Example: contrib/systemd/controller.toml.
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum PlacementArg {
    RoundRobin,
    LeastLoaded,
}

pub fn run(args: Args) -> Outcome {
    anyhow::ensure!(
        args.granularity.bytes() >= 4096 && args.granularity.bytes().is_power_of_two(),
        "--granularity must be a power of two of at least 4KiB, got {}",
        args.granularity
    );
    let mut cfg = ControllerConfig::new(args.listen.clone());
    cfg.state = args.state.clone();
    cfg.granularity = args.granularity.bytes();
    cfg.quota = args.quota.map(|q| q.bytes());
    cfg.placement = match args.placement {
        PlacementArg::RoundRobin => Placement::RoundRobin,
        PlacementArg::LeastLoaded => Placement::LeastLoaded,
    };
    cfg.heartbeat_timeout = args.heartbeat_timeout_ms.max(Duration::from_millis(50));
    cfg.idle_timeout = (!args.idle_secs.is_zero()).then_some(args.idle_secs);
    cfg.token = super::load_secret(args.token_file.as_deref())?;
    super::block_termination_signals();
    let ctl = std::sync::Arc::new(
        Controller::start(cfg)
            .with_context(|| format!("starting the controller on {}", args.listen))?,
    );
    let metrics = match &args.metrics {
        Some(addr) => {
            let ctl = ctl.clone();
            Some(super::serve_metrics(addr, move || ctl.scrape())?)
        }
        None => None,
    };
    super::announce(
        args.json,
        serde_json::json!({"role": "controller", "addr": ctl.local_addr().to_string(),
                           "metrics": metrics.as_ref().map(|m| m.local_addr().to_string())}),
        &format!("controller listening on {}", ctl.local_addr()),
    );
    let signal = super::wait_for_signal();
    eprintln!("farmem: controller stopped on {signal}");
    Ok(std::process::ExitCode::SUCCESS)
}
