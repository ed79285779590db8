//! Starting the runtime, once: at load (the constructor below), or at the
//! first far allocation of a process whose constructor has not run yet.
//! Everything the allocation interposers need is set up here, from the
//! variables `farmem run` passes ([`PreloadEnv`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use farmem_runtime::backend::CompressedStore;
use farmem_runtime::preload_env::{self, Fallback, NO_FAR_MEMORY_EXIT, PreloadEnv};
use farmem_runtime::remote::RackStore;
use farmem_runtime::{FaultPath, Runtime};

use super::exit::{at_exit, fork_child, fork_parent, fork_prepare, record_fallback};
use super::state::*;
use crate::heap::Heap;

/// Starts the runtime once; true when far memory is ready.
pub(super) fn ensure_init() -> bool {
    loop {
        match STATE.load(Ordering::Acquire) {
            READY => return true,
            OFF => return false,
            UNINIT => {
                if STATE
                    .compare_exchange(UNINIT, INITING, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    let busy = Busy::enter();
                    let ok = match std::panic::catch_unwind(init) {
                        Ok(Ok(())) => true,
                        Ok(Err(e)) => {
                            give_up(&e);
                            false
                        }
                        Err(_) => {
                            give_up("starting the runtime panicked");
                            false
                        }
                    };
                    drop(busy);
                    STATE.store(if ok { READY } else { OFF }, Ordering::Release);
                    return ok;
                }
            }
            _ => {
                // Another thread is starting the runtime.
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            }
        }
    }
}

/// The runtime could not start, for `reason`. Under `FARMEM_FALLBACK=local`
/// the process goes on in local memory; otherwise (`fail`, the default) it
/// stops at once with [`NO_FAR_MEMORY_EXIT`], before it has done anything,
/// so it never runs on local memory unnoticed. A process that was never
/// asked to use far memory (no `FARMEM_CONTROLLER`) stays local. Either
/// way a `fallback` line goes to `FARMEM_STATS_JSON`, and `farmem run`
/// says why once for all its processes (a program that starts 35 helpers
/// would otherwise print 35 identical lines); without `farmem run` one
/// `farmem:` line per process says why.
fn give_up(reason: &str) {
    let asked = preload_env::asked(&getenv);
    let local = !asked || preload_env::fallback(&getenv) == Ok(Fallback::Local);
    record_fallback(reason, local);
    let summarized = preload_env::stats_json(&getenv).is_some();
    if local {
        if !summarized {
            say(&format!("{reason}; running on local memory only"));
        }
        return;
    }
    if !summarized {
        say(&format!(
            "{reason}; no far memory, so stopping with exit {NO_FAR_MEMORY_EXIT} instead of running on local memory (FARMEM_FALLBACK=local, farmem run --fallback local, runs it there)"
        ));
    }
    // SAFETY: _exit ends the process without running the program's atexit
    // handlers; nothing of the program has run yet.
    unsafe { libc::_exit(NO_FAR_MEMORY_EXIT) };
}

fn init() -> Result<(), String> {
    start_logging()?;
    let env = PreloadEnv::read(&getenv)?;
    let cfg = env.config()?;
    let rack = match &env.controller {
        Some(controller) if env.backend.needs_rack() => Some(connect(&env, controller)?),
        _ => None,
    };
    if let Some(rack) = &rack {
        keep_lease(rack, env.lease_ms);
    }
    // The kernel's own accesses to far pages fail on the signal path: the
    // I/O interposers touch them first.
    let touch_for_io = (cfg.fault_path == FaultPath::Signal).then_some(cfg.local_bytes);
    let built = env
        .backend
        .build(
            rack.clone().map(|r| (r.clone() as _, r as _)),
            cfg.local_bytes,
            env.far_bytes,
        )
        .map_err(|e| format!("backend {}: {e}", env.backend))?;
    let rt = Runtime::new(cfg, built.store, built.slabs)
        .map_err(|e| format!("starting the far-memory runtime: {e}"))?;
    if let Some(rack) = rack {
        STORE.store(Arc::into_raw(rack) as *mut RackStore, Ordering::Release);
    }
    if let Some(pool) = built.pool {
        POOL.store(
            Arc::into_raw(pool) as *mut CompressedStore,
            Ordering::Release,
        );
    }
    start_heap(Box::leak(Box::new(rt)), env.far_bytes)?;
    if let Some(local) = touch_for_io {
        super::touch::enable(local);
    }
    super::live::start();
    Ok(())
}

/// FARMEM_LOG: what the runtime and the rack client report (retries, nodes
/// suspected or dropped, copies made again), on stderr.
fn start_logging() -> Result<(), String> {
    let filter = preload_env::log(&getenv);
    let filter = tracing_subscriber::EnvFilter::try_new(&filter)
        .map_err(|e| format!("FARMEM_LOG `{filter}`: {e}"))?;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .try_init();
    Ok(())
}

/// How fast lost copies are made again: enough to restore a GiB in a few
/// seconds, little enough to leave the link to the program.
const REPAIR_BYTES_PER_SEC: u64 = 256 << 20;

/// Connects to the controller (proving the token if there is one) and sets
/// the rack client's copies or erasure coding.
fn connect(env: &PreloadEnv, controller: &str) -> Result<Arc<RackStore>, String> {
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
                let share = demand_share(ratio)?;
                farmem_net::delay::EgressDelay::partitioned(model.clone(), 0, share)
            }
        };
        cfg = cfg.with_delay(Arc::new(gate));
    }
    cfg = cfg.with_path_delays(env.path_delays.clone());
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
fn demand_share(ratio: farmem_core::Ratio) -> Result<farmem_policy::daemon::ShareServer, String> {
    use farmem_policy::daemon::{BandwidthPartitioner, PartitionConfig, ShareServer};
    let config = PartitionConfig {
        ratio,
        line_bytes: 4096,
        page_bytes: 64 << 10,
    };
    let partitioner = BandwidthPartitioner::from_config(&config)
        .map_err(|e| format!("FARMEM_DELAY_PARTITION {ratio}: {e}"))?;
    Ok(ShareServer::new(&partitioner, true))
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
/// renewed for as long as the process lives.
fn keep_lease(store: &RackStore, lease_ms: u64) {
    if lease_ms == 0 {
        return;
    }
    match store
        .cluster()
        .keep_lease(std::time::Duration::from_millis(lease_ms), |e| {
            // Far pages are gone: going on would hang on the first one
            // not local, or compute on what is left.
            say(&format!(
                "this process's remote memory was given back to the rack ({e}); it was silent for longer than its lease (FARMEM_LEASE_MS, farmem run --lease), stopped or frozen; aborting"
            ));
            std::process::abort();
        }) {
        Ok(keeper) => std::mem::forget(keeper),
        Err(e) => say(&format!(
            "cannot hold remote memory on a lease ({e}): if this process is killed, the controller keeps it"
        )),
    }
}

/// Reserves the far heap of `far` bytes in `rt` and opens it to the
/// allocation interposers; registers the fork and exit handlers.
fn start_heap(rt: &'static Runtime, far: u64) -> Result<(), String> {
    let region = rt
        .region(far)
        .map_err(|e| format!("reserving {far} bytes of far memory: {e}"))?;
    let (base, len) = (region.as_ptr() as usize, region.len());
    // The heap lives as long as the process.
    std::mem::forget(region);
    lock_heap();
    // SAFETY: we hold the lock.
    unsafe { *HEAP.heap.get() = Some(Heap::new(base, len)) };
    unlock_heap();
    RUNTIME.store(rt as *const Runtime as *mut Runtime, Ordering::Release);
    // SAFETY: getpid has no preconditions; the handlers are plain functions.
    unsafe {
        INIT_PID.store(libc::getpid() as usize, Ordering::Relaxed);
        libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child));
        libc::atexit(at_exit);
    }
    HEAP_END.store(base + len, Ordering::Release);
    HEAP_BASE.store(base, Ordering::Release);
    Ok(())
}

/// Starts the runtime when the library is loaded, before the program runs
/// and before any allocator holds a lock, if `farmem run` asked for it.
extern "C" fn start_at_load() {
    super::real::resolve();
    if preload_env::asked(&getenv) {
        ensure_init();
    }
}

#[used]
#[unsafe(link_section = ".init_array")]
static START_AT_LOAD: extern "C" fn() = start_at_load;
