//! `farmem node`: an operator's changes to the controller's node table.

use std::path::PathBuf;

use farmem_net::{ClientConfig, Connection, NetError};
use farmem_wire::{ErrorCode, Msg, Role, auth};

use super::Outcome;

/// Change the controller's table of memory nodes.
#[derive(clap::Subcommand)]
pub enum Node {
    Remove(RemoveArgs),
}

/// Take a memory node that is gone out of the controller's table, so
/// `farmem status` stops listing it.
///
/// The node must be down (stopped with SIGTERM, or silent past the
/// controller's heartbeat timeout); an up node is refused (NodeUp) unless
/// --force. A node on which clients still hold grants is refused (NodeBusy,
/// naming how many and whose) even with --force: a client keeps the grants
/// it had on a dead node, whether or not it made new copies elsewhere
/// (farmem run --replicas), until it releases them, exits, or its lease
/// lapses. An unknown id is refused (NotFound). The removal is saved with
/// the controller's state (--state FILE or etcd); the id is never reused,
/// and a node that comes back at the same address registers as a new one.
///
/// Needs the cluster secret or the admin key (`farmem token --role admin`):
/// the compute key of a program cannot remove nodes.
///
/// Example, node 2 shown DOWN by `farmem status`:
///   farmem token --role admin --token-file /etc/farmem/secret > admin.key
///   farmem status --controller 10.0.0.1:7000 --token-file admin.key
///   farmem node remove 2 --controller 10.0.0.1:7000 --token-file admin.key
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct RemoveArgs {
    /// The node's id, as `farmem status` lists it.
    id: u32,
    /// The controller (A,B: controllers sharing their state in etcd; the
    /// one that leads answers).
    #[arg(long, default_value = "127.0.0.1:7000")]
    controller: String,
    /// File holding the cluster secret, or the admin key from `farmem
    /// token --role admin` (without it: an unauthenticated rack).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Remove it although the controller still counts it up (its host is
    /// known gone, before the heartbeat timeout). A node that still runs
    /// registers again, as a new node, at its next heartbeat.
    #[arg(long)]
    force: bool,
}

pub fn run(cmd: Node) -> Outcome {
    match cmd {
        Node::Remove(args) => remove(args),
    }
}

fn remove(args: RemoveArgs) -> Outcome {
    let token = super::load_token(args.token_file.as_deref())?;
    if let Some(Ok((role, _))) = auth::parse_role_key(&token)
        && role != Role::Admin
    {
        anyhow::bail!(
            "{} holds the {} key; removing a node needs the cluster secret or the admin key (farmem token --role admin)",
            args.token_file.unwrap_or_default().display(),
            role.name()
        );
    }
    let name = format!("farmem-node-remove-{}", std::process::id());
    let cfg = ClientConfig::new(name, Role::Admin).with_token(token);
    let ask = Msg::RemoveNode {
        node: args.id,
        force: args.force,
    };
    let mut last = None;
    for addr in args.controller.split(',').map(str::trim) {
        let answer = Connection::connect(addr, &cfg)
            .and_then(|c| c.call(&ask).and_then(|r| r.done("remove node")));
        match answer {
            Ok(()) => {
                eprintln!(
                    "farmem: memory node {} removed from the controller at {addr}",
                    args.id
                );
                return Ok(std::process::ExitCode::SUCCESS);
            }
            // A standby names the leader; another of A,B may be it.
            Err(NetError::Remote {
                code: ErrorCode::NotLeader,
                message,
            }) => last = Some(anyhow::anyhow!("the controller at {addr}: {message}")),
            Err(e @ NetError::Remote { .. }) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "the controller at {addr} refused to remove memory node {}",
                    args.id
                )));
            }
            Err(e) => {
                last =
                    Some(anyhow::Error::new(e).context(format!("asking the controller at {addr}")))
            }
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("--controller names no controller")))
}
