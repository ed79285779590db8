//! The SVG figures of §4: Fig. 9-11 per workload, the 10% bars, and the
//! sweeps of Fig. 12-14.

use super::paper::{BLOCK_SIZES, CACHE_PERCENTS, HOST_SHARES, MIXED, PAIRS, SYSTEMS};
use super::report::{Grid, UniMemEval};
use super::summary::get;
use crate::eval::figure::{BarChart, Figure, LineChart, Series};

fn row(g: &Grid, outer: &str, w: &str, xs: &[String]) -> Vec<f64> {
    xs.iter()
        .map(|x| get(g, outer, w, x).unwrap_or(f64::NAN))
        .collect()
}

/// A sweep (metric → workload → x) as one line per workload.
fn sweep_chart(g: &Grid, metric: &str, title: &str, x_label: &str, xs: &[String]) -> LineChart {
    LineChart {
        title: title.into(),
        x_label: x_label.into(),
        y_label: metric.into(),
        x: xs.to_vec(),
        series: g
            .get(metric)
            .into_iter()
            .flatten()
            .map(|(w, _)| Series::new(w.clone(), row(g, metric, w, xs)))
            .collect(),
        reference: None,
    }
}

/// The figures as (file name, SVG): per workload (and the mixed run) AMAT
/// and data amplification over cache sizes, one line per system (Fig. 9,
/// 10, 11); the 10% point of every workload as bars; the block-size,
/// host-share and list-pair sweeps (Fig. 12, 13, 14).
pub fn figures(e: &UniMemEval) -> Vec<(String, Figure)> {
    let mut workloads: Vec<String> = Vec::new();
    for m in e.amat_miss_ns.values() {
        for w in m.keys() {
            if !workloads.contains(w) {
                workloads.push(w.clone());
            }
        }
    }
    let mut out = by_cache_size(e, &workloads);
    out.extend(sweeps(e));
    out
}

/// Fig. 9-11 per workload over cache sizes, and every workload at 10%.
fn by_cache_size(e: &UniMemEval, workloads: &[String]) -> Vec<(String, Figure)> {
    let pcs: Vec<String> = CACHE_PERCENTS.iter().map(|p| p.to_string()).collect();
    let x_pct: Vec<String> = pcs.iter().map(|p| format!("{p}%")).collect();
    let mut out = Vec::new();
    for w in workloads {
        let fig = if w == MIXED { "fig11" } else { "fig09-10" };
        for (metric, g, label) in [
            ("amat", &e.amat_miss_ns, "AMAT over LLC misses (ns)"),
            ("da", &e.data_amplification, "remote bytes / working set"),
        ] {
            let c = LineChart {
                title: format!("{w}: {label} by local cache size"),
                x_label: "local cache, % of working set".into(),
                y_label: label.into(),
                x: x_pct.clone(),
                series: SYSTEMS
                    .iter()
                    .filter(|s| g.get(**s).is_some_and(|m| m.contains_key(w)))
                    .map(|s| Series::new(*s, row(g, s, w, &pcs)))
                    .collect(),
                reference: None,
            };
            out.push((format!("{fig}_{metric}_{w}.svg"), c.into()));
        }
    }
    for (metric, g, label) in [
        ("amat", &e.amat_miss_ns, "AMAT over LLC misses (ns)"),
        ("da", &e.data_amplification, "remote bytes / working set"),
    ] {
        let c = BarChart {
            title: format!("{label} at 10% local cache"),
            y_label: label.into(),
            groups: workloads.to_vec(),
            series: SYSTEMS
                .iter()
                .map(|s| {
                    Series::new(
                        *s,
                        workloads
                            .iter()
                            .map(|w| get(g, s, w, "10").unwrap_or(f64::NAN))
                            .collect(),
                    )
                })
                .collect(),
            reference: None,
        };
        out.push((format!("at10_{metric}.svg"), c.into()));
    }
    out
}

/// Fig. 12-14: the block-size, host-share and list-pair sweeps.
fn sweeps(e: &UniMemEval) -> Vec<(String, Figure)> {
    let mut out = Vec::new();
    let xs = |xs: &[String]| xs.to_vec();
    let blocks: Vec<String> = BLOCK_SIZES.iter().map(|b| b.to_string()).collect();
    let hosts: Vec<String> = HOST_SHARES.iter().map(|h| h.to_string()).collect();
    let pairs: Vec<String> = PAIRS.iter().map(|p| p.to_string()).collect();
    for (fig, g, what, x_label, x) in [
        (
            "fig12",
            &e.block_size,
            "block size, unimem-nopromote, 10%",
            "block bytes",
            xs(&blocks),
        ),
        (
            "fig13",
            &e.host_share,
            "host share, unimem, 10%",
            "host memory, % of local",
            xs(&hosts),
        ),
        (
            "fig14",
            &e.pairs,
            "list pairs, unimem, 10%",
            "active/inactive list pairs",
            xs(&pairs),
        ),
    ] {
        if g.is_empty() {
            continue;
        }
        // Only the x values some workload has (the quick grid has fewer).
        let x: Vec<String> = x
            .into_iter()
            .filter(|v| {
                g.values()
                    .flat_map(|m| m.values())
                    .any(|r| r.contains_key(v))
            })
            .collect();
        for (metric, short) in [("amat_miss_ns", "amat"), ("data_amplification", "da")] {
            let c = sweep_chart(g, metric, &format!("{metric} by {what}"), x_label, &x);
            out.push((format!("{fig}_{short}.svg"), c.into()));
        }
    }
    out
}
