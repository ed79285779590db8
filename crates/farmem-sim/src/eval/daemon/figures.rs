//! The SVG figures of §6: Fig. 8 per network point, the geomean per
//! bandwidth, Fig. 10's hit ratios, one chart per sensitivity study
//! (Fig. 11-18) and Fig. 13 over time.

use std::collections::BTreeMap;

use super::paper::{BANDWIDTHS, COMPRESSIBILITY, SCHEMES, SWITCH_NS};
use super::points::{cfg, points};
use super::report::DaemonEval;
use crate::SimResult;
use crate::eval::figure::{BarChart, Figure, LineChart, Series};

/// Fig. 13 over time: one chart per workload, IPC per interval per scheme.
fn timeline_figures(e: &DaemonEval) -> Vec<(String, Figure)> {
    e.disturbance_timeline
        .iter()
        .filter_map(|(w, by_scheme)| {
            let n = by_scheme.values().map(|t| t.ipc.len()).max()?;
            let interval = by_scheme.values().next()?.interval_ns;
            let x = (0..n)
                .map(|i| format!("{:.0}", (i + 1) as f64 * interval / 1000.0))
                .collect();
            let series = by_scheme
                .iter()
                .map(|(s, t)| {
                    let mut v = t.ipc.clone();
                    v.resize(n, f64::NAN);
                    Series::new(s.clone(), v)
                })
                .collect();
            Some((
                format!("fig13_ipc_over_time_{w}.svg"),
                LineChart {
                    title: format!("Fig. 13: IPC over time with background traffic, {w}"),
                    x_label: "simulated time (µs, end of interval)".into(),
                    y_label: "IPC".into(),
                    x,
                    series,
                    reference: None,
                }
                .into(),
            ))
        })
        .collect()
}

/// The figures, as (file name, SVG).
pub fn figures(e: &DaemonEval, grid: &[SimResult]) -> Vec<(String, Figure)> {
    let workloads: Vec<String> = e.speedup_by_workload.keys().cloned().collect();
    let mut figs = fig8(grid, &workloads);
    figs.extend(grid_figures(e, &workloads));
    figs.extend(study_figures(e));
    figs
}

/// Fig. 8: one chart per network configuration.
fn fig8(grid: &[SimResult], workloads: &[String]) -> Vec<(String, Figure)> {
    let mut figs = Vec::new();
    let pts = points("grid", grid);
    for (bw, key) in BANDWIDTHS {
        for sw in SWITCH_NS {
            let series: Vec<Series> = SCHEMES
                .iter()
                .filter(|s| **s != "remote")
                .map(|s| {
                    let v = workloads
                        .iter()
                        .map(|w| {
                            pts.iter()
                                .find(|p| {
                                    p.scheme == *s
                                        && &p.workload == w
                                        && cfg(p, "link.bw_factor") == *bw
                                        && cfg(p, "link.switch_ns") == *sw
                                })
                                .map_or(f64::NAN, |p| p.speedup_over_remote)
                        })
                        .collect();
                    Series::new(*s, v)
                })
                .collect();
            if series.iter().all(|s| s.values.iter().all(|v| v.is_nan())) {
                continue;
            }
            figs.push((
                format!("fig8_bw{key}_sw{sw}.svg"),
                BarChart {
                    title: format!("Fig. 8: speedup over remote, bandwidth {bw}, switch {sw} ns"),
                    y_label: "speedup over remote".into(),
                    groups: workloads.to_vec(),
                    series,
                    reference: Some(1.0),
                }
                .into(),
            ));
        }
    }
    figs
}

/// The geomean per bandwidth factor and Fig. 10's hit ratios.
fn grid_figures(e: &DaemonEval, workloads: &[String]) -> Vec<(String, Figure)> {
    let mut figs = Vec::new();
    figs.push((
        "geomean_by_bandwidth.svg".into(),
        LineChart {
            title: "Geomean speedup over remote".into(),
            x_label: "bandwidth factor".into(),
            y_label: "speedup".into(),
            x: BANDWIDTHS.iter().map(|b| b.0.to_string()).collect(),
            series: e
                .geomean_speedup_over_remote
                .iter()
                .map(|(s, m)| {
                    Series::new(
                        s.clone(),
                        BANDWIDTHS
                            .iter()
                            .map(|(_, k)| m.get(*k).copied().unwrap_or(f64::NAN))
                            .collect(),
                    )
                })
                .collect(),
            reference: Some(1.0),
        }
        .into(),
    ));
    // Fig. 10: local hit ratio.
    figs.push((
        "fig10_local_hit_ratio.svg".into(),
        BarChart {
            title: "Fig. 10: local memory hit ratio".into(),
            y_label: "hit ratio".into(),
            groups: workloads.to_vec(),
            series: e
                .local_hit_ratio
                .iter()
                .map(|(s, m)| {
                    Series::new(
                        s.clone(),
                        workloads
                            .iter()
                            .map(|w| m.get(w).copied().unwrap_or(f64::NAN))
                            .collect(),
                    )
                })
                .collect(),
            reference: None,
        }
        .into(),
    ));
    figs
}

/// One chart per sensitivity study (Fig. 11-18), Fig. 13 over time, and
/// the hit ratios of Fig. 14 and the what-if.
fn study_figures(e: &DaemonEval) -> Vec<(String, Figure)> {
    let mut figs = Vec::new();
    let titles = [
        ("ratio", "Fig. 11: partition ratio, speedup over remote"),
        ("codec", "Fig. 12: lc with each codec, speedup over remote"),
        (
            "disturbance",
            "Fig. 13: with background traffic, speedup over remote",
        ),
        ("cores", "Fig. 15/18: several cores, speedup over remote"),
        (
            "nodes",
            "Fig. 17: several memory nodes, speedup over remote",
        ),
        (
            COMPRESSIBILITY,
            "What-if: pages compressing 4.47x, speedup over remote",
        ),
    ];
    for (study, title) in titles {
        if let Some(m) = e.studies.get(study) {
            figs.push((
                format!("{study}.svg"),
                study_chart(title, "speedup over remote", m),
            ));
        }
    }
    figs.extend(timeline_figures(e));
    let hit_titles = [
        (
            "disturbance",
            "Fig. 14: local hit ratio with background traffic",
        ),
        (
            COMPRESSIBILITY,
            "What-if (Fig. 10): local hit ratio, pages compressing 4.47x",
        ),
    ];
    for (study, title) in hit_titles {
        if let Some(m) = e.study_hit_ratio.get(study) {
            figs.push((
                format!("{study}_hit_ratio.svg"),
                study_chart(title, "hit ratio", m),
            ));
        }
    }
    figs
}

fn study_chart(title: &str, y: &str, m: &BTreeMap<String, BTreeMap<String, f64>>) -> Figure {
    let mut groups: Vec<String> = m.values().flat_map(|w| w.keys().cloned()).collect();
    groups.sort();
    groups.dedup();
    BarChart {
        title: title.into(),
        y_label: y.into(),
        series: m
            .iter()
            .map(|(l, w)| {
                Series::new(
                    l.clone(),
                    groups
                        .iter()
                        .map(|g| w.get(g).copied().unwrap_or(f64::NAN))
                        .collect(),
                )
            })
            .collect(),
        groups,
        reference: Some(1.0),
    }
    .into()
}
