//! Algorithm 1's offline preparation: each job runs once alone under the
//! compressed pool, whose counters give its page features, while the
//! rack's grants give the far memory it holds.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use farmem_net::{ClientConfig, ControllerClient};
use farmem_policy::dispatch::Features;
use serde_json::Value;

/// Page features from a `farmem run --backend compressed --stats-json`
/// report, with `far_bytes` the far memory to reserve.
///
/// - reuse: pool reads per page written back whole;
/// - compressible: share of those pages kept (compressed or as zeros)
///   rather than passed down;
/// - sequential: share of the pages brought in that fault-around brought
///   (it only widens on runs of consecutive faults).
pub fn features(stats: &Value, far_bytes: u64) -> Features {
    let get = |group: &str, key: &str| stats[group][key].as_u64().unwrap_or(0) as f64;
    let kept = get("compressed", "stored") + get("compressed", "stored_zero");
    let written = kept + get("compressed", "passed_down");
    let around = get("total", "pages_faulted_around");
    let brought = get("total", "faults_missing") + around;
    let share = |part: f64, whole: f64| if whole > 0.0 { part / whole } else { 0.0 };
    Features {
        reuse: share(get("compressed", "hits"), written),
        compressible: share(kept, written),
        sequential: share(around, brought),
        far_bytes,
    }
}

/// The most far memory the rack granted, sampled until dropped: the
/// profile runs alone, so it is the job's (all copies included).
pub struct GrantWatch {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl GrantWatch {
    pub fn start(controller: &str, token: Vec<u8>) -> anyhow::Result<Self> {
        let name = format!("farmem-batch-watch-{}", std::process::id());
        let cfg = ClientConfig::new(name, farmem_wire::Role::Compute).with_token(token);
        let ctl = ControllerClient::connect(controller, &cfg)
            .map_err(|e| anyhow::anyhow!("controller {controller}: {e}"))?;
        let peak = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (peak.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                if let Ok(nodes) = ctl.nodes() {
                    let granted = nodes.iter().map(|n| n.granted).sum();
                    p.fetch_max(granted, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Ok(Self {
            peak,
            stop,
            thread: Some(thread),
        })
    }

    /// The peak so far, and starts again from zero.
    pub fn take(&self) -> u64 {
        self.peak.swap(0, Ordering::SeqCst)
    }
}

impl Drop for GrantWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn features_come_from_the_pool_and_fault_counters() {
        let stats = json!({
            "total": {"faults_missing": 300, "pages_faulted_around": 700},
            "compressed": {"stored": 500, "stored_zero": 100, "passed_down": 400, "hits": 1500},
        });
        let f = features(&stats, 42);
        assert_eq!(f.reuse, 1.5);
        assert_eq!(f.compressible, 0.6);
        assert_eq!(f.sequential, 0.7);
        assert_eq!(f.far_bytes, 42);
        // A run that wrote nothing back: no reuse, nothing compressible.
        let idle = features(&json!({"total": {}}), 0);
        assert_eq!(
            (idle.reuse, idle.compressible, idle.sequential),
            (0.0, 0.0, 0.0)
        );
    }
}
