//! `farmem run --metrics ADDR`: the program's fault counters and fault
//! latency histograms, live. Each of its processes rewrites its own
//! statistics in a directory every second (`FARMEM_METRICS_DIR`, the
//! shim's `live.rs`); a scrape sums them.

use std::path::{Path, PathBuf};

use farmem_core::Buckets;
use farmem_net::metrics::{MetricsServer, Scrape};
use serde_json::Value;

/// The endpoint and the directory it reads; dropping it stops the one
/// and removes the other.
pub struct Live {
    pub dir: PathBuf,
    _server: MetricsServer,
}

impl Live {
    pub fn start(addr: &str) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        let dir = std::env::temp_dir().join(format!("farmem-metrics-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("creating {} for --metrics", dir.display()))?;
        let read_from = dir.clone();
        let server = super::serve_metrics(addr, move || scrape(&read_from))?;
        Ok(Self {
            dir,
            _server: server,
        })
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Every process's last statistics, summed.
fn scrape(dir: &Path) -> Scrape {
    let mut files: Vec<Value> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
        .collect();
    files.sort_by_key(|f| f["pid"].as_u64());
    let sum = |key: &str| -> u64 { files.iter().filter_map(|f| f["stats"][key].as_u64()).sum() };
    let mut s = Scrape::default();
    s.gauge(
        "farmem_run_processes",
        "Processes of the program that used far memory",
        &[],
        files.len() as f64,
    );
    for (kind, key) in [
        ("missing", "faults_missing"),
        ("write_protect", "faults_wp"),
    ] {
        s.counter(
            "farmem_run_faults",
            "Page faults served, by kind",
            &[("kind", kind)],
            sum(key),
        );
    }
    for (state, key) in [
        ("clean", "pages_evicted_clean"),
        ("dirty", "pages_evicted_dirty"),
    ] {
        s.counter(
            "farmem_run_pages_evicted",
            "Pages evicted, by state",
            &[("state", state)],
            sum(key),
        );
    }
    for (name, help, key) in [
        (
            "farmem_run_pages_fetched",
            "Pages read from far memory",
            "pages_fetched",
        ),
        (
            "farmem_run_fetched_bytes",
            "Bytes read from far memory",
            "bytes_fetched",
        ),
        (
            "farmem_run_written_back_bytes",
            "Bytes written back to far memory",
            "bytes_written_back",
        ),
        (
            "farmem_run_fetch_errors",
            "Fetches that failed and were retried",
            "fetch_errors",
        ),
        (
            "farmem_run_writeback_errors",
            "Write-backs that failed",
            "writeback_errors",
        ),
    ] {
        s.counter(name, help, &[], sum(key));
    }
    let page = farmem_core::PAGE_SIZE;
    s.gauge(
        "farmem_run_resident_bytes",
        "Far pages resident locally",
        &[],
        (sum("resident_pages") * page) as f64,
    );
    s.gauge(
        "farmem_run_limit_bytes",
        "Local memory for far pages (--local-mem, per process)",
        &[],
        (sum("limit_pages") * page) as f64,
    );
    for (name, help, key) in [
        (
            "farmem_run_fault_duration_seconds",
            "Missing faults that fetched or zero-filled their page, from the fault to the page installed",
            "fault",
        ),
        (
            "farmem_run_remote_fault_duration_seconds",
            "The missing faults that read their page from the store",
            "remote_fault",
        ),
        (
            "farmem_run_wait_fault_duration_seconds",
            "Missing faults that waited for a page in transition, to their wake",
            "wait",
        ),
        (
            "farmem_run_wp_fault_duration_seconds",
            "Write-protect faults, to the protection lifted",
            "wp",
        ),
    ] {
        let mut total = Buckets::default();
        for f in &files {
            if let Ok(b) = serde_json::from_value::<Buckets>(f["latency_buckets"][key].clone()) {
                total.add(&b);
            }
        }
        if total.upper_ns.is_empty() {
            total.upper_ns = farmem_net::metrics::LATENCY_BOUNDS_NS.to_vec();
            total.counts = vec![0; total.upper_ns.len() + 1];
        }
        s.histogram(name, help, &[], &total);
    }
    s
}
