//! Live statistics for `farmem run --metrics` (`FARMEM_METRICS_DIR`): a
//! thread rewrites this process's counters and fault latency histograms
//! to `DIR/PID.json` every second, and once more at exit, so the endpoint
//! sums every process of the program at each scrape. Written whole to a
//! temporary name, then renamed: a scrape never reads half a file.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use farmem_net::metrics::LATENCY_BOUNDS_NS;
use farmem_runtime::preload_env;

use super::state::*;

const EVERY: Duration = Duration::from_secs(1);

/// Starts the writer when `FARMEM_METRICS_DIR` is set (after the runtime
/// is up).
pub(super) fn start() {
    let Some(dir) = preload_env::metrics_dir(&getenv) else {
        return;
    };
    let spawned = std::thread::Builder::new()
        .name("farmem-metrics".into())
        .spawn(move || {
            loop {
                write(&dir);
                std::thread::sleep(EVERY);
            }
        });
    if let Err(e) = spawned {
        say(&format!("starting the metrics writer: {e}"));
    }
}

/// The last write, at exit: what the process did in its last second.
pub(super) fn write_final() {
    if let Some(dir) = preload_env::metrics_dir(&getenv) {
        write(&dir);
    }
}

fn write(dir: &Path) {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as usize;
    let rt = RUNTIME.load(Ordering::Acquire);
    if rt.is_null() || pid != INIT_PID.load(Ordering::Relaxed) {
        return;
    }
    let _busy = Busy::enter();
    // SAFETY: the runtime is leaked, so it lives until the process ends.
    let rt = unsafe { &*rt };
    let body = serde_json::json!({
        "pid": pid,
        "stats": rt.stats(),
        "latency_buckets": rt.latency_buckets(&LATENCY_BOUNDS_NS),
    })
    .to_string();
    let path = dir.join(format!("{pid}.json"));
    let tmp: PathBuf = dir.join(format!(".{pid}.json.tmp"));
    if let Err(e) = std::fs::write(&tmp, body).and_then(|()| std::fs::rename(&tmp, &path)) {
        // The directory went away (farmem run ended first): nothing to do.
        if e.kind() != std::io::ErrorKind::NotFound {
            say(&format!("writing live stats to {}: {e}", path.display()));
        }
    }
}
