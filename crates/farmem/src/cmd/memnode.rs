//! `farmem memnode`: run a memory node until interrupted.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use farmem_core::ByteSize;
use farmem_memnode::{MemNode, MemNodeConfig};

use super::Outcome;

/// Run a memory node.
///
/// The node registers with the controller, which assigns it a slice of the
/// global remote address space and tells it which compute node owns which
/// extent. Memory is allocated lazily: a 64GiB capacity costs nothing until
/// written. Without --controller the node runs standalone: its range starts
/// at address 0 and every authenticated compute node may use all of it.
///
/// Example: farmem memnode --listen 127.0.0.1:7001 --capacity 64GiB --controller 127.0.0.1:7000
#[derive(clap::Args)]
pub struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:7001")]
    listen: String,
    /// Memory to offer, e.g. 64GiB.
    #[arg(long)]
    capacity: ByteSize,
    /// The controller to register with (A,B: controllers sharing their
    /// state in etcd; the node registers with the leader, and with the
    /// next one when it dies).
    #[arg(long)]
    controller: Option<String>,
    /// Address peers should dial, when it differs from --listen (e.g. 0.0.0.0).
    #[arg(long)]
    advertise: Option<String>,
    /// File holding the shared cluster token (whitespace trimmed). Without
    /// it the cluster is unauthenticated: use only on loopback.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// How often to heartbeat the controller (a bare number: ms; or 1s,
    /// 250ms).
    #[arg(long, default_value = "500", value_parser = super::time_ms)]
    heartbeat_ms: Duration,
    /// Close a session idle this long (a bare number: seconds; or 10m;
    /// 0: never). Clients reopen it on their next request and present
    /// their capabilities again.
    #[arg(long, default_value = "600", value_parser = super::time_secs)]
    idle_secs: Duration,
    /// Inject delay on the way in, for every client (ThymesisFlow's
    /// injector on the lender's side): a request is served no sooner than
    /// one gap after the one before it, and its reply leaves a gap after
    /// that. A model as `farmem run --delay` takes: none, 20us (a fixed
    /// gap), uniform:10us..50us, exp:30us, steps:0=0,1s=50us (from the
    /// first request), rate:200MiB/s.
    #[arg(long, value_name = "MODEL")]
    delay: Option<farmem_policy::delay::DelayModel>,
    /// Serve Prometheus metrics on this address (`GET /metrics`; port 0
    /// picks one, printed with the address): what it holds and serves,
    /// refusals by reason, and a histogram of request service times.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// Print the bound address as one JSON object on stdout once serving.
    #[arg(long)]
    json: bool,
    /// A TOML file whose keys are these flags (`listen = "0.0.0.0:7001"`,
    /// `heartbeat-ms = 500`, `json = true`); a flag on the command line
    /// wins over its key. Example: contrib/systemd/memnode.toml.
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
}

pub fn run(args: Args) -> Outcome {
    let mut cfg = MemNodeConfig::new(args.listen.clone(), args.capacity.bytes());
    cfg.controller = args.controller.clone();
    cfg.advertise = args.advertise;
    cfg.heartbeat = args.heartbeat_ms.max(Duration::from_millis(10));
    cfg.idle_timeout = (!args.idle_secs.is_zero()).then_some(args.idle_secs);
    cfg.token = super::load_secret(args.token_file.as_deref())?;
    cfg.ingress_delay = args
        .delay
        .clone()
        .filter(|m| *m != farmem_policy::delay::DelayModel::None);
    super::block_termination_signals();
    let node = std::sync::Arc::new(
        MemNode::start(cfg)
            .with_context(|| format!("starting the memory node on {}", args.listen))?,
    );
    let metrics = match &args.metrics {
        Some(addr) => {
            let node = node.clone();
            Some(super::serve_metrics(addr, move || node.scrape())?)
        }
        None => None,
    };
    super::announce(
        args.json,
        serde_json::json!({"role": "memnode", "addr": node.addr(), "node": node.node_id(), "capacity": args.capacity.bytes(),
                           "metrics": metrics.as_ref().map(|m| m.local_addr().to_string())}),
        &format!(
            "memnode {} serving {} on {}{}",
            node.node_id(),
            args.capacity,
            node.addr(),
            args.controller
                .as_ref()
                .map(|c| format!(", registered with {c}"))
                .unwrap_or_else(|| " (standalone)".into())
        ),
    );
    let signal = super::wait_for_signal();
    // The endpoint's scrapes hold the node too: stop them first.
    drop(metrics);
    let id = node.node_id();
    let held = node.stats().granted_bytes;
    if let Ok(mut node) = std::sync::Arc::try_unwrap(node) {
        node.leave();
    }
    eprintln!(
        "farmem: memnode {id} stopped on {signal}{}; {} granted on it {}",
        if args.controller.is_some() {
            ", after telling the controller (it is marked down at once)"
        } else {
            ""
        },
        farmem_core::ByteSize(held),
        if held == 0 {
            "(nothing lost)"
        } else {
            "are gone with it: programs read their other copies (farmem run --replicas)"
        }
    );
    Ok(std::process::ExitCode::SUCCESS)
}
