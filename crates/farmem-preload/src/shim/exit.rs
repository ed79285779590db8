//! Fork and exit: a forked child loses far memory loudly, and an exiting
//! process writes its stats line and gives its remote memory back.

use std::path::Path;
use std::sync::atomic::Ordering;

use farmem_runtime::preload_env;

use super::state::*;

/// Appends one JSON line to the stats file `path` (one write: processes
/// of one run append to the same file).
fn append_stats_line(path: &Path, line: &str) {
    use std::io::Write;
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        say(&format!("writing stats to {}: {e}", path.display()));
    }
}

/// Tells `farmem run` (FARMEM_STATS_JSON) that this process got no far
/// memory and why: one JSON line, appended in one write.
pub(super) fn record_fallback(reason: &str, local: bool) {
    let Some(path) = preload_env::stats_json(&getenv) else {
        return;
    };
    let line = serde_json::json!({
        // SAFETY: getpid has no preconditions.
        "pid": unsafe { libc::getpid() },
        "fallback": if local { "local" } else { "fail" },
        "reason": reason,
    })
    .to_string()
        + "\n";
    append_stats_line(&path, &line);
}

pub(super) extern "C" fn fork_prepare() {
    lock_heap();
}

pub(super) extern "C" fn fork_parent() {
    unlock_heap();
}

pub(super) extern "C" fn fork_child() {
    FORKED.store(true, Ordering::Relaxed);
    unlock_heap();
    // The child has no runtime and no userfaultfd registration: a far page
    // that was remote at the fork would read as zeros. Make every touch of
    // inherited far memory fault loudly instead of computing on zeros.
    super::child::guard(
        HEAP_BASE.load(Ordering::Acquire),
        HEAP_END.load(Ordering::Acquire),
    );
}

pub(super) extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(write_stats);
    let _ = std::panic::catch_unwind(super::live::write_final);
    let _ = std::panic::catch_unwind(release_remote);
}

/// Gives the process's remote memory back to the controller: the heap dies
/// with the process, and a rack that outlives it (`--controller`, or many
/// processes under one `farmem run`) would otherwise keep it granted for
/// good. Threads still running see their write-backs refused from here on,
/// which only costs them the data the exiting process discards anyway.
fn release_remote() {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as usize;
    let store = STORE.load(Ordering::Acquire);
    if store.is_null() || pid != INIT_PID.load(Ordering::Relaxed) {
        // A forked child: the memory is its parent's.
        return;
    }
    let _busy = Busy::enter();
    let rt = RUNTIME.load(Ordering::Acquire);
    if !rt.is_null() {
        // SAFETY: the runtime is leaked, so it lives until the process ends.
        unsafe { &*rt }.exiting();
    }
    // SAFETY: leaked in init(), so it lives until the process ends.
    let store = unsafe { &*store };
    match store.release_all() {
        Err(e) => say(&format!(
            "giving remote memory back at exit: {e}; the rack takes back the rest when this process's lease runs out"
        )),
        // Nothing left to hold: end the lease rather than let it run out.
        Ok(()) => {
            if let Some(ctl) = store.cluster().controller() {
                let _ = ctl.lease(std::time::Duration::ZERO);
            }
        }
    }
}

/// The process's stats line, for `farmem run`'s summary.
fn write_stats() {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as usize;
    let rt = RUNTIME.load(Ordering::Acquire);
    if rt.is_null() || pid != INIT_PID.load(Ordering::Relaxed) {
        return;
    }
    let Some(path) = preload_env::stats_json(&getenv) else {
        return;
    };
    let _busy = Busy::enter();
    // SAFETY: the runtime is leaked, so it lives until the process ends.
    let rt = unsafe { &*rt };
    let (in_use, peak) = with_heap(|h| h.usage()).unwrap_or((0, 0));
    if peak == 0 {
        // Nothing went far (a shell, an exec'd helper): nothing to report.
        return;
    }
    let pool = POOL.load(Ordering::Acquire);
    // SAFETY: like the runtime, the pool is leaked at init.
    let compressed = (!pool.is_null()).then(|| unsafe { &*pool }.stats());
    let store = STORE.load(Ordering::Acquire);
    // SAFETY: the store is leaked at init too.
    let gates = (!store.is_null())
        .then(|| unsafe { &*store }.cluster().delay_gates())
        .filter(|g| !g.is_empty());
    let delay_gate = gates.map(|g| farmem_net::delay::GateStats::of(&g));
    // SAFETY: as above.
    let link = (!store.is_null()).then(|| unsafe { &*store }.cluster().link_stats());
    let line = serde_json::json!({
        "pid": pid,
        "compressed": compressed,
        "delay_gate": delay_gate,
        "link": link,
        "far_bytes_in_use": in_use,
        "far_bytes_peak": peak,
        "local_bytes": rt.config().local_bytes,
        "last_error": rt.last_error(),
        "stats": rt.stats(),
    })
    .to_string()
        + "\n";
    append_stats_line(&path, &line);
}
