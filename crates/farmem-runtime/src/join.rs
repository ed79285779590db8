//! Joining the rack a [`PreloadEnv`] names: the controller's connection
//! with the process's name, token, injected delays and redundancy, the
//! repair of lost copies, and the lease that gives the memory back if the
//! process dies. Shared by every client that starts a runtime from
//! `FARMEM_*` variables: the LD_PRELOAD shim and libfarmem's rack regions.

use std::sync::Arc;

use crate::preload_env::PreloadEnv;
use crate::remote::RackStore;

/// How fast lost copies are made again: enough to restore a GiB in a few
/// seconds, little enough to leave the link to the program.
const REPAIR_BYTES_PER_SEC: u64 = 256 << 20;

/// Connects to the controller (proving the token if there is one) and sets
/// the rack client's copies or erasure coding.
pub fn connect(env: &PreloadEnv, controller: &str) -> Result<Arc<RackStore>, String> {
    // One owner per process image, so a lease that runs out gives back only
    // the memory of the process that died: the pid alone is reused (by
    // exec, or in another pid namespace on the same rack).
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    // SAFETY: getpid has no preconditions.
    let name = format!("{}-{}-{started:x}", env.name, unsafe { libc::getpid() });
    let token = token(env)?;
    let anonymous = token.is_empty();
    let mut cfg = farmem_net::ClientConfig::new(name, farmem_wire::Role::Compute).with_token(token);
    if let Some(link) = &env.link {
        let link = farmem_net::link::SharedLink::open(link).map_err(|e| e.to_string())?;
        // SAFETY: getpid has no preconditions; each process draws its own gaps.
        let seed = u64::from(unsafe { libc::getpid() }.unsigned_abs());
        let gate = farmem_net::delay::EgressDelay::on_link(link, seed);
        cfg = cfg.with_delay(Arc::new(gate));
    } else if let Some(model) = &env.delay {
        let gate = match env.delay_partition {
            None => farmem_net::delay::EgressDelay::new(model.clone(), 0),
            Some(ratio) => {
                let share = demand_share(ratio, env.engine)?;
                farmem_net::delay::EgressDelay::partitioned(model.clone(), 0, share)
            }
        };
        cfg = cfg.with_delay(Arc::new(gate));
    }
    cfg = cfg.with_path_delays(env.path_delays.clone());
    cfg.link.mode = env.link_compression;
    cfg.link.bytes_per_sec = link_rate(env);
    let store = match farmem_net::Cluster::connect(controller, cfg, 2) {
        Ok(cluster) => Arc::new(RackStore::new(cluster)),
        Err(e @ farmem_net::NetError::Auth(_)) if anonymous => {
            return Err(format!(
                "connecting to controller {controller}: {e} (no FARMEM_TOKEN_FILE given: a rack started with --token-file admits only holders of its token)"
            ));
        }
        Err(e) => return Err(format!("connecting to controller {controller}: {e}")),
    };
    if let Some(n) = env.replicas {
        store.cluster().set_replicas(n);
    }
    if let Some(r) = env.redundancy {
        // Erasure-coded stripes survive any M lost memory nodes; plain
        // stripes spread each page over K of them.
        store.cluster().set_redundancy(r);
    }
    // Plain stripes have nothing to rebuild a lost shard from.
    let coded = matches!(
        env.redundancy,
        Some(farmem_net::Redundancy::ReedSolomon { .. })
    );
    if env.replicas.is_some_and(|n| n > 1) || coded {
        // Copies, or shards, lost with a memory node are made again from
        // the rest.
        store
            .start_repair(REPAIR_BYTES_PER_SEC)
            .map_err(|e| format!("starting the repair thread: {e}"))?;
    }
    Ok(store)
}

/// DaeMon's partitioning for the link (§4.1), in the runtime's reading of
/// §4.7: 4 KiB demand pages as its lines, 64 KiB bulk clusters as its
/// pages; an idle class lends its share.
fn demand_share(
    ratio: farmem_core::Ratio,
    engine: crate::Engine,
) -> Result<farmem_policy::daemon::ShareServer, String> {
    use farmem_policy::daemon::{BandwidthPartitioner, PartitionConfig, ShareServer};
    let config = PartitionConfig {
        ratio,
        line_bytes: 4096,
        page_bytes: bulk_unit_bytes(engine),
    };
    let partitioner = BandwidthPartitioner::from_config(&config)
        .map_err(|e| format!("FARMEM_DELAY_PARTITION {ratio}: {e}"))?;
    Ok(ShareServer::new(&partitioner, true))
}

/// The bulk class's unit in `--delay-partition`'s ratio: `--engine
/// daemon` reads whole clusters on the bulk lane, so its unit is theirs;
/// the page engine's bulk traffic (write-backs, log batches) comes in
/// batches, taken at the 64 KiB of DaeMon's own example (seed 000 §4.7).
fn bulk_unit_bytes(engine: crate::Engine) -> u64 {
    match engine {
        crate::Engine::Daemon => {
            u64::from(farmem_policy::daemon::FaultConfig::default().cluster_pages) * 4096
        }
        crate::Engine::Page => 64 << 10,
    }
}

/// The link's bytes per second when a `rate:` delay throttles it (the
/// slowest path's with one gate per path), for link compression's `auto`:
/// 0 when nothing does.
fn link_rate(env: &PreloadEnv) -> u64 {
    use farmem_policy::delay::DelayModel;
    env.delay
        .iter()
        .chain(&env.path_delays)
        .filter_map(|m| match m {
            DelayModel::Rate { bytes_per_sec } => Some(*bytes_per_sec),
            _ => None,
        })
        .min()
        .unwrap_or(0)
}

/// The cluster token in FARMEM_TOKEN_FILE, or none.
fn token(env: &PreloadEnv) -> Result<Vec<u8>, String> {
    let Some(path) = &env.token_file else {
        return Ok(Vec::new());
    };
    let token = farmem_net::read_token_file(path)
        .map_err(|e| format!("reading FARMEM_TOKEN_FILE {}: {e}", path.display()))?;
    if token.is_empty() {
        return Err(format!("FARMEM_TOKEN_FILE {} is empty", path.display()));
    }
    Ok(token)
}

/// Holds the process's remote memory on a lease of `lease_ms` (0: none),
/// renewed for as long as the process lives. `on_lost` is called, with
/// why, if the rack gives the memory back all the same (the process was
/// silent past its lease); it must not return to far memory.
pub fn keep_lease(
    store: &RackStore,
    lease_ms: u64,
    on_lost: impl Fn(&str) + Send + 'static,
) -> Result<(), String> {
    if lease_ms == 0 {
        return Ok(());
    }
    match store
        .cluster()
        .keep_lease(std::time::Duration::from_millis(lease_ms), move |e| {
            on_lost(&format!(
                "this process's remote memory was given back to the rack ({e}); it was silent for longer than its lease (FARMEM_LEASE_MS, farmem run --lease), stopped or frozen"
            ))
        }) {
        Ok(keeper) => {
            std::mem::forget(keeper);
            Ok(())
        }
        Err(e) => Err(format!(
            "cannot hold remote memory on a lease ({e}): if this process is killed, the controller keeps it"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_partition_counts_bulk_in_the_engines_unit() {
        let quarter: farmem_core::Ratio = "25%".parse().unwrap();
        let page = demand_share(quarter, crate::Engine::Page).unwrap();
        let daemon = demand_share(quarter, crate::Engine::Daemon).unwrap();
        // 25% over 4 KiB pages and 64 KiB batches reserves 24% of the link
        // (--delay-partition's documented figure: 5 pages to a batch, in
        // bytes); over 256 KiB clusters 21 pages to one, 24.7%.
        assert_eq!(page.line_share(), 5.0 * 4096.0 / (5.0 * 4096.0 + 65536.0));
        assert_eq!(
            daemon.line_share(),
            21.0 * 4096.0 / (21.0 * 4096.0 + 262144.0)
        );
        assert_eq!(bulk_unit_bytes(crate::Engine::Daemon), 256 << 10);
    }
}
