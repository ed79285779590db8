//! The shape §6 claims, checked on our numbers, and the paper's headline
//! numbers beside ours.

use std::collections::BTreeMap;

use super::paper::{AT_PAPER_RATIO, COMPRESSIBILITY, HIGH_LOCALITY, LOW_LOCALITY, PAPER};
use super::points::{get2, mean};
use super::report::DaemonEval;
use crate::eval::{Check, geomean};

/// Spearman rank correlation (ties get their mean rank); NaN under 3 pairs.
pub fn spearman(pairs: &[(f64, f64)]) -> f64 {
    if pairs.len() < 3 {
        return f64::NAN;
    }
    let rank = |v: Vec<f64>| -> Vec<f64> {
        let mut idx: Vec<usize> = (0..v.len()).collect();
        idx.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
        let mut r = vec![0.0; v.len()];
        let mut i = 0;
        while i < idx.len() {
            let mut j = i;
            while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
                j += 1;
            }
            for &k in &idx[i..=j] {
                r[k] = (i + j) as f64 / 2.0;
            }
            i = j + 1;
        }
        r
    };
    let a = rank(pairs.iter().map(|p| p.0).collect());
    let b = rank(pairs.iter().map(|p| p.1).collect());
    let (ma, mb) = (mean(&a), mean(&b));
    let cov: f64 = a.iter().zip(&b).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = a.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = b.iter().map(|y| (y - mb).powi(2)).sum();
    if va == 0.0 || vb == 0.0 {
        return f64::NAN;
    }
    cov / (va * vb).sqrt()
}

/// Geomean over workloads of one study series.
fn study_geo(e: &DaemonEval, study: &str, label: &str) -> f64 {
    let v: Vec<f64> = e
        .studies
        .get(study)
        .and_then(|s| s.get(label))
        .map(|w| w.values().copied().collect())
        .unwrap_or_default();
    geomean(&v)
}

/// Mean hit ratio of `scheme` over the workloads in `set` that ran, from
/// a scheme → workload → hit ratio map.
fn hit_over(hits: &BTreeMap<String, BTreeMap<String, f64>>, scheme: &str, set: &[&str]) -> f64 {
    let v: Vec<f64> = set
        .iter()
        .map(|w| get2(hits, scheme, w))
        .filter(|x| x.is_finite())
        .collect();
    mean(&v)
}

/// Of the low-locality hits `pq` loses against `remote`, the share
/// `daemon_label` wins back (NaN when pq loses none).
fn recovered_hits(hits: &BTreeMap<String, BTreeMap<String, f64>>, daemon_label: &str) -> f64 {
    let [r, pq, d] = ["remote", "pq", daemon_label].map(|s| hit_over(hits, s, LOW_LOCALITY));
    let lost = r - pq;
    if lost > 0.0 {
        (d - pq) / lost
    } else {
        f64::NAN
    }
}

/// The shape §6 claims, on our numbers.
pub fn checks(e: &DaemonEval) -> Vec<Check> {
    let g = |bw: &str| get2(&e.geomean_speedup_over_remote, "daemon", bw);
    let (g2, g4, g8) = (g("0.5"), g("0.25"), g("0.125"));
    let hits = &e.local_hit_ratio;
    let lost = hit_over(hits, "remote", LOW_LOCALITY) - hit_over(hits, "pq", LOW_LOCALITY);
    let recovered = recovered_hits(hits, "daemon");
    let recovered_at_paper_ratio = e
        .study_hit_ratio
        .get(COMPRESSIBILITY)
        .map_or(f64::NAN, |h| recovered_hits(h, AT_PAPER_RATIO));
    let bp_high: Vec<f64> = HIGH_LOCALITY
        .iter()
        .map(|w| get2(&e.speedup_by_workload, w, "bp"))
        .filter(|x| x.is_finite())
        .collect();
    let bp_high = geomean(&bp_high);
    let lc_pairs: Vec<(f64, f64)> = e
        .compression_ratio
        .iter()
        .filter_map(|(w, c)| {
            let s = get2(&e.speedup_by_workload, w, "lc");
            s.is_finite().then_some((*c, s))
        })
        .collect();
    let rho = spearman(&lc_pairs);
    vec![
        Check {
            claim: "daemon never more than 2% slower than remote",
            paper: "never slower",
            measured: e.worst_daemon_vs_remote,
            pass: e.worst_daemon_vs_remote >= 0.98,
        },
        Check {
            claim: "daemon's geomean speedup grows as bandwidth shrinks",
            paper: "1.85 / 2.36 / 2.97",
            measured: g8 / g2,
            pass: g2 < g4 && g4 < g8,
        },
        Check {
            claim: "pq lowers the local hit ratio on low-locality workloads",
            paper: "up to -18.4%",
            measured: lost,
            pass: lost > 0.0,
        },
        Check {
            claim: "daemon recovers most of pq's lost local hits",
            paper: "68.9% of throttled pages",
            measured: recovered,
            pass: recovered >= 0.5,
        },
        Check {
            claim: "what-if: pages at 4.47x, daemon recovers most",
            paper: "hits 0.4% below remote",
            measured: recovered_at_paper_ratio,
            pass: recovered_at_paper_ratio >= 0.5,
        },
        Check {
            claim: "bp hurts high-locality workloads",
            paper: "high slowdowns",
            measured: bp_high,
            pass: bp_high < 1.0,
        },
        Check {
            claim: "lc's gain follows compression ratio (Spearman)",
            paper: "sp, sl, hp, pf > dr, rs",
            measured: rho,
            pass: rho > 0.5,
        },
    ]
}

pub(super) fn versus_paper(e: &DaemonEval) -> Vec<(String, f64, f64)> {
    let ours: Vec<f64> = vec![
        get2(&e.geomean_speedup_over_remote, "daemon", "0.5"),
        get2(&e.geomean_speedup_over_remote, "daemon", "0.25"),
        get2(&e.geomean_speedup_over_remote, "daemon", "0.125"),
        get2(&e.geomean_speedup_by_switch, "pq", "100"),
        get2(&e.geomean_speedup_by_switch, "pq", "400"),
        mean(
            &e.local_hit_ratio
                .get("remote")
                .map(|m| m.values().copied().collect::<Vec<_>>())
                .unwrap_or_default(),
        ),
        {
            let r = e.local_hit_ratio.get("remote");
            let d = e.local_hit_ratio.get("daemon");
            let v: Vec<f64> = r
                .iter()
                .flat_map(|r| r.iter())
                .filter_map(|(w, x)| d.and_then(|d| d.get(w)).map(|y| x - y))
                .collect();
            mean(&v)
        },
        mean(&e.compression_ratio.values().copied().collect::<Vec<_>>()),
        study_geo(e, "ratio", "daemon 25% 100ns") / study_geo(e, "ratio", "daemon 50% 100ns"),
        study_geo(e, "ratio", "daemon 25% 100ns") / study_geo(e, "ratio", "daemon 80% 100ns"),
        study_geo(e, "codec", "lz") / study_geo(e, "codec", "fpc-bdi"),
        study_geo(e, "codec", "lz") / study_geo(e, "codec", "fve"),
        study_geo(e, "disturbance", "daemon") / study_geo(e, "disturbance", "lc"),
        study_geo(e, "disturbance", "daemon") / study_geo(e, "disturbance", "pq"),
        {
            let v: Vec<f64> = ["daemon 2 cores", "daemon 4 cores"]
                .iter()
                .map(|l| study_geo(e, "cores", l))
                .filter(|x| x.is_finite())
                .collect();
            geomean(&v)
        },
        {
            let v: Vec<f64> = ["daemon 2 nodes", "daemon 4 nodes"]
                .iter()
                .map(|l| study_geo(e, "nodes", l))
                .filter(|x| x.is_finite())
                .collect();
            geomean(&v)
        },
    ];
    PAPER
        .iter()
        .zip(ours)
        .map(|((what, paper), ours)| (what.to_string(), *paper, ours))
        .collect()
}
