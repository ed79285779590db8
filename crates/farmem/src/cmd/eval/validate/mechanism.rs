//! What a row compares, and where a prediction that is off points: the
//! metrics, each mechanism's own counters, and the mechanisms each metric
//! moves with.

use serde_json::{Value, json};

/// What is compared: the runtime's counter, the simulator's. Faults are
/// those that fill their page (the runtime's missing faults less those
/// that found their page on its way, as `faults_filled` in the module
/// above counts them).
pub(super) const METRICS: [&str; 3] = ["faults_filled", "bytes_fetched", "bytes_written_back"];

/// Each mechanism's own counters, to name the one that differs.
pub(super) const MECHANISMS: [(&str, &str); 10] = [
    ("pages_zero_filled", "first touches (zero fill)"),
    ("pages_faulted_around", "fault-around"),
    ("pages_evicted_clean", "eviction (clean pages)"),
    ("pages_evicted_dirty", "eviction (dirty pages)"),
    ("faults_wp", "write tracking (write-protect faults)"),
    (
        "writes_predicted",
        "write prediction (pages installed writable)",
    ),
    ("snapshots", "diff bases kept"),
    ("snapshots_skipped", "diff bases refused (shipped whole)"),
    (
        "snapshots_capped",
        "diff bases refused at the cap (shipped whole)",
    ),
    ("dirty_lines_shipped", "dirty tracking (lines shipped)"),
];

/// The mechanisms each metric moves with: where a metric is off, the one
/// of these whose counter is most off is named. A fault is a first touch,
/// a page evicted before its next touch, or one fault-around did not take;
/// a page ships whole when it was refused a base, and is dirty when it
/// was written after a write-protect fault or installed writable.
const DRIVERS: [(&str, &[&str]); 3] = [
    (
        "faults_filled",
        &[
            "pages_zero_filled",
            "pages_faulted_around",
            "pages_evicted_clean",
            "pages_evicted_dirty",
        ],
    ),
    (
        "bytes_fetched",
        &[
            "pages_zero_filled",
            "pages_faulted_around",
            "pages_evicted_clean",
            "pages_evicted_dirty",
        ],
    ),
    (
        "bytes_written_back",
        &[
            "snapshots",
            "snapshots_skipped",
            "snapshots_capped",
            "writes_predicted",
            "faults_wp",
            "pages_evicted_dirty",
        ],
    ),
];

/// predicted / measured; 1 when both are 0, infinite when only the
/// measure is.
pub(super) fn ratio(predicted: f64, measured: f64) -> f64 {
    if measured == 0.0 {
        if predicted == 0.0 { 1.0 } else { f64::INFINITY }
    } else {
        predicted / measured
    }
}

/// For each metric off, the mechanism it moves with ([`DRIVERS`]) whose
/// counter is off most (by the log of predicted / measured), those off
/// themselves (outside the tolerance and the runs' spread) first:
/// `{metric: {counter, mechanism, predicted, measured}}`; null when every
/// metric is within.
pub(super) fn differs(
    metrics: &serde_json::Map<String, Value>,
    mechanisms: &serde_json::Map<String, Value>,
) -> Value {
    let off = |v: &Value| (v["ratio"].as_f64().unwrap_or(1.0).ln()).abs();
    let named: serde_json::Map<String, Value> = DRIVERS
        .iter()
        .filter(|(m, _)| metrics.get(*m).is_some_and(|v| v["within"] != json!(true)))
        .filter_map(|(m, drivers)| {
            // Those off themselves first; on a tie the later, narrower
            // counter (refused at the cap, not refused).
            let rank = |v: &Value| (v["within"] != json!(true), off(v));
            let (k, v) = drivers
                .iter()
                .filter_map(|k| mechanisms.get(*k).map(|v| (*k, v)))
                .max_by(|a, b| {
                    let (a, b) = (rank(a.1), rank(b.1));
                    a.0.cmp(&b.0).then(a.1.total_cmp(&b.1))
                })?;
            let what = MECHANISMS.iter().find(|x| x.0 == k).map_or(k, |x| x.1);
            Some((
                m.to_string(),
                json!({"counter": k, "mechanism": what,
                       "predicted": v["predicted"], "measured": v["measured"]}),
            ))
        })
        .collect();
    if named.is_empty() {
        Value::Null
    } else {
        Value::Object(named)
    }
}
