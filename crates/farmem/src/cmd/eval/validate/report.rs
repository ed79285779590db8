//! The report's outputs: JSON, CSV and SVG files, and the table printed.

use std::path::{Path, PathBuf};

use anyhow::Context;
use farmem_core::ByteSize;
use farmem_sim::eval::figure::{self, BarChart, Series};
use serde_json::{Value, json};

use super::mechanism::{METRICS, ratio};

/// The row's `differs`, for the table: `metric: mechanism (sim/run)`.
pub(super) fn differs_text(differs: &Value) -> Option<String> {
    let named = differs.as_object()?;
    fn short(m: &str) -> &str {
        match m {
            "faults_filled" => "faults",
            "bytes_fetched" => "fetched",
            "bytes_written_back" => "written back",
            other => other,
        }
    }
    Some(
        named
            .iter()
            .map(|(m, d)| {
                format!(
                    "{}: {} ({:.0}/{:.0})",
                    short(m),
                    d["mechanism"].as_str().unwrap_or("?"),
                    d["predicted"].as_f64().unwrap_or(0.0),
                    d["measured"].as_f64().unwrap_or(0.0)
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
    )
}

pub(super) fn write_outputs(dir: &Path, report: &Value) -> anyhow::Result<()> {
    let path = dir.join("validate.json");
    std::fs::write(&path, format!("{report:#}\n"))
        .with_context(|| format!("writing {}", path.display()))?;
    let rows = report["rows"].as_array().cloned().unwrap_or_default();
    let mut csv = String::from("workload,local_share,metric,measured,predicted,ratio\n");
    let mut groups = Vec::new();
    let mut series: Vec<Series> = METRICS
        .iter()
        .map(|m| Series::new(*m, Vec::new()))
        .collect();
    for r in rows.iter().filter(|r| r["skipped"].is_null()) {
        groups.push(format!(
            "{} {:.0}%",
            r["workload"].as_str().unwrap_or("?"),
            r["local_share"].as_f64().unwrap_or(0.0) * 100.0
        ));
        for (i, m) in METRICS.iter().enumerate() {
            let v = &r["metrics"][m];
            csv.push_str(&format!(
                "{},{},{m},{},{},{}\n",
                r["workload"].as_str().unwrap_or("?"),
                r["local_share"],
                v["measured"],
                v["predicted"],
                v["ratio"]
            ));
            series[i]
                .values
                .push(v["ratio"].as_f64().unwrap_or(f64::NAN));
        }
    }
    let path = dir.join("validate.csv");
    std::fs::write(&path, csv).with_context(|| format!("writing {}", path.display()))?;
    let chart = BarChart {
        title: "farmem sim against farmem run: predicted / measured".into(),
        y_label: "predicted / measured".into(),
        groups,
        series,
        reference: Some(1.0),
    };
    let path: PathBuf = dir.join("validate.svg");
    figure::write(&path, &chart.to_svg()?)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

pub(super) fn print_table(report: &Value) {
    println!(
        "{:<12} {:>5} {:>9} | {:>21} | {:>27} | {:>27} | differs",
        "workload",
        "local",
        "room",
        "faults (sim/run)",
        "fetched (sim/run)",
        "written back (sim/run)"
    );
    for r in report["rows"].as_array().into_iter().flatten() {
        if let Some(why) = r["skipped"].as_str() {
            println!(
                "{:<12} skipped: {why}",
                r["workload"].as_str().unwrap_or("?")
            );
            continue;
        }
        let cell = |k: &str| {
            let v = &r["metrics"][k];
            let (p, m) = (
                v["predicted"].as_f64().unwrap_or(0.0),
                v["measured"].as_f64().unwrap_or(0.0),
            );
            if k == "faults_filled" {
                format!("{p:.0}/{m:.0} {:.2}", ratio(p, m))
            } else {
                format!(
                    "{}/{} {:.2}",
                    ByteSize(p as u64),
                    ByteSize(m as u64),
                    ratio(p, m)
                )
            }
        };
        println!(
            "{:<12} {:>4.0}% {:>9} | {:>21} | {:>27} | {:>27} | {}",
            r["workload"].as_str().unwrap_or("?"),
            r["local_share"].as_f64().unwrap_or(0.0) * 100.0,
            r["room_pages_mean"].as_u64().unwrap_or(0),
            cell("faults_filled"),
            cell("bytes_fetched"),
            cell("bytes_written_back"),
            if r["identical"] != json!(true) {
                "OUTPUT DIFFERS".to_string()
            } else {
                differs_text(&r["differs"]).unwrap_or_else(|| "-".into())
            }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::eval::validate::mechanism::{MECHANISMS, differs};

    fn entry(predicted: f64, measured: f64, within: bool) -> Value {
        json!({"predicted": predicted, "measured": measured,
               "ratio": ratio(predicted, measured), "within": within})
    }

    #[test]
    fn each_metric_off_names_its_own_mechanism_most_off() {
        let metrics: serde_json::Map<String, Value> = [
            ("faults_filled", entry(100.0, 130.0, false)),
            ("bytes_fetched", entry(100.0, 101.0, true)),
            ("bytes_written_back", entry(75.0, 100.0, false)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let mut mechanisms: serde_json::Map<String, Value> = MECHANISMS
            .iter()
            .map(|(k, _)| (k.to_string(), entry(10.0, 10.0, true)))
            .collect();
        // Off most of all, but inside the runs' spread: named only when
        // no mechanism of the metric is off.
        mechanisms.insert("pages_zero_filled".into(), entry(1.0, 100.0, true));
        mechanisms.insert("pages_evicted_clean".into(), entry(70.0, 100.0, false));
        mechanisms.insert("pages_faulted_around".into(), entry(90.0, 100.0, false));
        mechanisms.insert("snapshots_capped".into(), entry(0.0, 1000.0, false));
        mechanisms.insert("writes_predicted".into(), entry(50.0, 100.0, false));
        let d = differs(&metrics, &mechanisms);
        assert_eq!(d["faults_filled"]["counter"], "pages_evicted_clean");
        assert!(d["bytes_fetched"].is_null());
        // None against some is off without bound.
        assert_eq!(d["bytes_written_back"]["counter"], "snapshots_capped");
        let text = differs_text(&d).unwrap_or_default();
        assert!(
            text.contains("faults: eviction (clean pages) (70/100)"),
            "{text}"
        );

        let within: serde_json::Map<String, Value> = METRICS
            .iter()
            .map(|k| (k.to_string(), entry(1.0, 1.0, true)))
            .collect();
        assert!(differs(&within, &mechanisms).is_null());

        // A metric off with every mechanism inside its spread: the one
        // most off still names where to look.
        for k in ["pages_evicted_clean", "pages_faulted_around"] {
            mechanisms.insert(k.into(), entry(10.0, 10.0, true));
        }
        let d = differs(&metrics, &mechanisms);
        assert_eq!(d["faults_filled"]["counter"], "pages_zero_filled");
        // Refused and refused at the cap alike: the cap is named.
        mechanisms.insert("snapshots_skipped".into(), entry(0.0, 1000.0, false));
        let d = differs(&metrics, &mechanisms);
        assert_eq!(d["bytes_written_back"]["counter"], "snapshots_capped");
    }
}
