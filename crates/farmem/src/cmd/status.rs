//! `farmem status`: what the controller knows of its rack, for the people
//! who run it.

use std::path::PathBuf;

use anyhow::Context;
use farmem_controller::ControllerStats;
use farmem_core::ByteSize;
use farmem_net::{ClientConfig, Connection};
use farmem_wire::Role;

use super::Outcome;

/// Show a rack: its memory nodes (up or down, capacity, what is granted,
/// when each was last heard from), and each client's grants and lease.
///
/// A node that misses its heartbeats for the controller's
/// --heartbeat-timeout-ms (3 s by default) shows as down at most a quarter
/// of that timeout later. Example: farmem status --controller 127.0.0.1:7000
/// --token-file rack.token
#[derive(clap::Args)]
pub struct Args {
    /// The controller (A,B: controllers sharing their state in etcd; the
    /// one that leads answers).
    #[arg(long, default_value = "127.0.0.1:7000")]
    controller: String,
    /// File holding the cluster token, or a compute or admin key from
    /// `farmem token` (without it: an unauthenticated rack).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Print the controller's statistics as one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Outcome {
    let token = super::load_token(args.token_file.as_deref())?;
    // A name of its own, so it never stands in for a client of the rack.
    let name = format!("farmem-status-{}", std::process::id());
    // An operator's admin key reads the rack as well as a compute key.
    let role = match farmem_wire::auth::parse_role_key(&token) {
        Some(Ok((Role::Admin, _))) => Role::Admin,
        _ => Role::Compute,
    };
    let cfg = ClientConfig::new(name, role).with_token(token);
    let mut last = None;
    for addr in args.controller.split(',').map(str::trim) {
        let asked = Connection::connect(addr, &cfg)
            .and_then(|c| farmem_net::cluster::stats_json(&c))
            .with_context(|| format!("asking the controller at {addr}"));
        match asked {
            Ok(json) => {
                let stats: ControllerStats = serde_json::from_str(&json)
                    .with_context(|| format!("reading the statistics of {addr}"))?;
                if stats.standby {
                    last = Some(anyhow::anyhow!("the controller at {addr} is a standby"));
                    continue;
                }
                if args.json {
                    println!("{json}");
                } else {
                    print(addr, &stats);
                }
                return Ok(std::process::ExitCode::SUCCESS);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("--controller names no controller")))
}

fn print(addr: &str, s: &ControllerStats) {
    println!(
        "controller {addr}: {} of {} memory nodes up, {} granted of {} ({} free), {} grants, {} leases",
        s.nodes_up,
        s.nodes,
        ByteSize(s.granted_bytes),
        ByteSize(s.capacity_bytes),
        ByteSize(s.free_bytes),
        s.grants,
        s.leases
    );
    if s.lost_bytes > 0 {
        println!(
            "{} granted on nodes that restarted since: refused until released",
            ByteSize(s.lost_bytes)
        );
    }
    println!();
    println!(
        "{:>4} {:<22} {:>5} {:>12} {:>12} {:>12} {:>18}",
        "node", "address", "state", "capacity", "granted", "heard from", "incarnation"
    );
    for n in &s.node_table {
        println!(
            "{:>4} {:<22} {:>5} {:>12} {:>12} {:>12} {:>18}",
            n.id,
            n.addr,
            if n.up { "up" } else { "DOWN" },
            ByteSize(n.capacity_bytes).to_string(),
            ByteSize(n.granted_bytes).to_string(),
            n.silent_ms
                .map_or("never".into(), |ms| format!("{:.1} s ago", ms as f64 / 1e3)),
            format!("{:#x}", n.incarnation)
        );
    }
    if s.clients.is_empty() {
        println!("\nno client holds memory");
        return;
    }
    println!();
    println!(
        "{:<40} {:>7} {:>12} {:>14}",
        "client", "grants", "granted", "lease left"
    );
    for c in &s.clients {
        println!(
            "{:<40} {:>7} {:>12} {:>14}",
            c.name,
            c.grants,
            ByteSize(c.granted_bytes).to_string(),
            c.lease_ms_left
                .map_or("no lease".into(), |ms| format!("{:.1} s", ms as f64 / 1e3))
        );
    }
}
