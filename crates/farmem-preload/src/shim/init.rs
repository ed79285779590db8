//! Starting the runtime, once: at load (the constructor below), or at the
//! first far allocation of a process whose constructor has not run yet.
//! Everything the allocation interposers need is set up here, from the
//! variables `farmem run` passes ([`PreloadEnv`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use farmem_runtime::backend::CompressedStore;
use farmem_runtime::join;
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
        Some(controller) if env.backend.needs_rack() => Some(join::connect(&env, controller)?),
        _ => None,
    };
    if let Some(rack) = &rack
        && let Err(e) = join::keep_lease(rack, env.lease_ms, |e| {
            // Far pages are gone: going on would hang on the first one
            // not local, or compute on what is left.
            say(&format!("{e}; aborting"));
            std::process::abort();
        })
    {
        say(&e);
    }
    // The kernel's own accesses to far pages fail on the signal path: the
    // I/O interposers touch them first.
    let touch_for_io = cfg.fault_path == FaultPath::Signal;
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
        // One gate (a link's): its delays tell the faults apart.
        if let [gate] = rack.cluster().delay_gates().as_slice() {
            rt.watch_delay(gate.clone());
        }
        STORE.store(Arc::into_raw(rack) as *mut RackStore, Ordering::Release);
    }
    if let Some(pool) = built.pool {
        POOL.store(
            Arc::into_raw(pool) as *mut CompressedStore,
            Ordering::Release,
        );
    }
    start_heap(Box::leak(Box::new(rt)), env.far_bytes)?;
    if touch_for_io {
        super::touch::enable();
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
