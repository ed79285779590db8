//! DaeMon's full evaluation (seed 000 §6): the grid of workloads,
//! bandwidth factors and switch latencies, and the sensitivity studies.
//! Pure functions over [`SimResult`]s: the CLI plans and runs the
//! simulations, this module turns them into the paper's numbers, checks
//! and figures.

use std::collections::BTreeMap;

use farmem_workloads::{Access, Scale, Sink};
use serde::Serialize;

use super::figure::{BarChart, Figure, LineChart, Series};
use super::{Check, geomean};
use crate::{Config, Engine, SimError, SimResult};

/// The schemes of §6 (Local is not simulated: Fig. 8 is over Remote).
pub const SCHEMES: &[&str] = &["remote", "lc", "bp", "pq", "daemon"];
/// Bandwidth factors: `--set` value and the JSON key.
pub const BANDWIDTHS: &[(&str, &str)] = &[("1/2", "0.5"), ("1/4", "0.25"), ("1/8", "0.125")];
pub const SWITCH_NS: &[&str] = &["100", "400"];
/// Workloads whose pages have poor spatial locality (§6.1's first class:
/// kc, tr, pr, nw) and high locality (§6.1's third class; spmv is the
/// paper's `sp`, stream and linreg are scans).
pub const LOW_LOCALITY: &[&str] = &["pr", "nw", "kc", "tc"];
pub const HIGH_LOCALITY: &[&str] = &["spmv", "stream", "linreg"];

/// The paper's mean LZ ratio over its workloads (§6.5).
pub const PAPER_LZ_RATIO: f64 = 4.47;
/// The study that reruns pq's low-locality losses with every page
/// compressing by [`PAPER_LZ_RATIO`] (`daemon.assume_ratio`), labelled
/// `remote`, `pq`, `daemon` and [`AT_PAPER_RATIO`].
pub const COMPRESSIBILITY: &str = "compressibility";
pub const AT_PAPER_RATIO: &str = "daemon at the paper's ratio";

/// Series of the [`COMPRESSIBILITY`] study: the scheme, or
/// [`AT_PAPER_RATIO`] for a `daemon` run that assumed the paper's ratio
/// (by value: a user's own `--set daemon.assume_ratio` reaches every run).
pub fn compressibility_label(p: &Point) -> Option<String> {
    let at_paper = p.scheme == "daemon"
        && p.config
            .get("daemon.assume_ratio")
            .and_then(|r| r.parse::<f64>().ok())
            == Some(PAPER_LZ_RATIO);
    Some(if at_paper {
        AT_PAPER_RATIO.to_string()
    } else {
        p.scheme.clone()
    })
}

/// The paper's headline numbers, for the side-by-side table.
pub const PAPER: &[(&str, f64)] = &[
    ("daemon geomean speedup over remote, bw 1/2", 1.85),
    ("daemon geomean speedup over remote, bw 1/4", 2.36),
    ("daemon geomean speedup over remote, bw 1/8", 2.97),
    ("pq geomean speedup over remote, switch 100 ns", 1.60),
    ("pq geomean speedup over remote, switch 400 ns", 1.51),
    ("remote local hit ratio (mean)", 0.977),
    ("daemon local hit ratio below remote (mean, points)", 0.004),
    ("lz compression ratio (mean)", 4.47),
    ("partition 25% over 50%, switch 100 ns (daemon)", 1.02),
    ("partition 25% over 80%, switch 100 ns (daemon)", 1.07),
    ("lz over fpc-bdi (lc)", 1.54),
    ("lz over fve (lc)", 1.44),
    ("daemon over lc under disturbance", 2.85),
    ("daemon over pq under disturbance", 1.19),
    ("daemon over remote, several cores", 1.96),
    ("daemon over remote, several memory nodes", 3.25),
];

/// A run's speedup over `remote` on the same workload and configuration.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub study: String,
    pub workload: String,
    pub scheme: String,
    /// The `--set` values of the run (scheme knobs included).
    pub config: BTreeMap<String, String>,
    pub sim_time_ns: f64,
    pub speedup_over_remote: f64,
    pub local_hit_ratio: f64,
    pub remote_bytes_read: u64,
}

/// The configuration a run is compared under: its overrides without the
/// scheme-only knobs (`daemon.*`), which `remote` ignores.
fn platform(r: &SimResult) -> Vec<(String, String)> {
    r.overrides
        .iter()
        .filter(|(k, _)| !k.starts_with("daemon."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Pairs every run with `remote`'s on the same workload and platform.
/// Runs without such a `remote` run are left out.
pub fn points(study: &str, results: &[SimResult]) -> Vec<Point> {
    let mut remote: BTreeMap<(String, Vec<(String, String)>), f64> = BTreeMap::new();
    for r in results.iter().filter(|r| r.scheme == "remote") {
        remote.insert((r.workload.clone(), platform(r)), r.sim_time_ns);
    }
    results
        .iter()
        .filter_map(|r| {
            let base = remote.get(&(r.workload.clone(), platform(r)))?;
            Some(Point {
                study: study.to_string(),
                workload: r.workload.clone(),
                scheme: r.scheme.clone(),
                config: r.overrides.clone(),
                sim_time_ns: r.sim_time_ns,
                speedup_over_remote: base / r.sim_time_ns.max(1e-9),
                local_hit_ratio: r.local_hit_ratio,
                remote_bytes_read: r.remote_bytes_read,
            })
        })
        .collect()
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Geomean of `speedup_over_remote` over the points `keep` selects,
/// grouped by `key`.
fn geo_by<K: Ord>(
    points: &[Point],
    keep: impl Fn(&Point) -> bool,
    key: impl Fn(&Point) -> K,
) -> BTreeMap<K, f64> {
    let mut g: BTreeMap<K, Vec<f64>> = BTreeMap::new();
    for p in points.iter().filter(|p| keep(p)) {
        g.entry(key(p)).or_default().push(p.speedup_over_remote);
    }
    g.into_iter().map(|(k, v)| (k, geomean(&v))).collect()
}

fn cfg<'a>(p: &'a Point, key: &str) -> &'a str {
    p.config.get(key).map(String::as_str).unwrap_or("")
}

/// The JSON key of a `link.bw_factor` value (`1/4` → `0.25`).
pub fn bw_key(v: &str) -> String {
    BANDWIDTHS
        .iter()
        .find(|(s, _)| *s == v)
        .map(|(_, k)| k.to_string())
        .unwrap_or_else(|| v.to_string())
}

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

/// The worst `daemon` point, for [`DaemonEval::worst_daemon_vs_remote`].
#[derive(Debug, Clone, Serialize)]
pub struct Worst {
    pub study: String,
    pub workload: String,
    pub config: BTreeMap<String, String>,
    pub speedup: f64,
}

/// Everything `farmem eval daemon` reports.
#[derive(Debug, Clone, Serialize)]
pub struct DaemonEval {
    /// scheme → bandwidth factor ("0.5", "0.25", "0.125") → geomean over
    /// workloads and switch latencies of the main grid (Fig. 8).
    pub geomean_speedup_over_remote: BTreeMap<String, BTreeMap<String, f64>>,
    /// scheme → switch latency (ns) → geomean over workloads and bandwidths.
    pub geomean_speedup_by_switch: BTreeMap<String, BTreeMap<String, f64>>,
    /// Smallest remote_time / daemon_time over every workload and
    /// configuration run with the default DaeMon knobs (every study but
    /// the partition-ratio and codec sweeps).
    pub worst_daemon_vs_remote: f64,
    pub worst_daemon_at: Option<Worst>,
    /// scheme (remote, pq, daemon, …) → workload → mean over the main grid
    /// (Fig. 10).
    pub local_hit_ratio: BTreeMap<String, BTreeMap<String, f64>>,
    /// workload → LZ compression ratio of the pages `lc` moved.
    pub compression_ratio: BTreeMap<String, f64>,
    /// workload → scheme → geomean speedup over the main grid's configs.
    pub speedup_by_workload: BTreeMap<String, BTreeMap<String, f64>>,
    /// Sensitivity studies: study → series label → workload → geomean
    /// speedup over remote (Fig. 11, 12, 13, 15/18, 17).
    pub studies: BTreeMap<String, BTreeMap<String, BTreeMap<String, f64>>>,
    /// study → series label → workload → mean local hit ratio (Fig. 14).
    pub study_hit_ratio: BTreeMap<String, BTreeMap<String, BTreeMap<String, f64>>>,
    /// bp's geomean speedup over the high-locality workloads, per
    /// bandwidth factor: where its duplicate lines start to cost (§6.1).
    pub bp_high_locality_by_bandwidth: BTreeMap<String, f64>,
    /// workload → bandwidth factor → `remote`'s link utilization (mean over
    /// switch latencies): how far from bandwidth-bound the baseline is.
    pub remote_link_utilization: BTreeMap<String, BTreeMap<String, f64>>,
    /// Fig. 13 over time: workload → scheme → IPC per interval of simulated
    /// time with background traffic (filled by the caller, which runs them).
    pub disturbance_timeline: BTreeMap<String, BTreeMap<String, Timeline>>,
    /// workload → scheme → mean IPC over the quiet and the busy periods of
    /// the background traffic (from the timeline).
    pub disturbance_ipc_by_phase: BTreeMap<String, BTreeMap<String, PhaseIpc>>,
    /// Our number beside the paper's: (what, paper, ours).
    pub versus_paper: Vec<(String, f64, f64)>,
    pub checks: Vec<Check>,
}

impl DaemonEval {
    pub fn pass(&self) -> bool {
        self.checks.iter().all(|c| c.pass)
    }
}

/// A sensitivity study's runs and how to label a point's series.
pub struct Study<'a> {
    pub name: &'a str,
    pub results: &'a [SimResult],
    /// Series label of a point (e.g. `daemon 50%`); `None` leaves it out.
    pub label: &'a dyn Fn(&Point) -> Option<String>,
    /// Whether its `daemon` runs use the default knobs (count for the
    /// worst case).
    pub default_knobs: bool,
}

/// Summarizes the main grid (schemes × workloads × bandwidth × switch) and
/// the studies.
pub fn summarize(grid: &[SimResult], studies: &[Study]) -> DaemonEval {
    let pts = points("grid", grid);
    let geomean_speedup_over_remote = scheme_map(geo_by(
        &pts,
        |_| true,
        |p| (p.scheme.clone(), bw_key(cfg(p, "link.bw_factor"))),
    ));
    let geomean_speedup_by_switch = scheme_map(geo_by(
        &pts,
        |_| true,
        |p| (p.scheme.clone(), cfg(p, "link.switch_ns").to_string()),
    ));
    let speedup_by_workload = scheme_map(geo_by(
        &pts,
        |_| true,
        |p| (p.workload.clone(), p.scheme.clone()),
    ));
    let mut hits: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    for p in &pts {
        hits.entry((p.scheme.clone(), p.workload.clone()))
            .or_default()
            .push(p.local_hit_ratio);
    }
    let local_hit_ratio = scheme_map(hits.into_iter().map(|(k, v)| (k, mean(&v))).collect());
    let mut compression_ratio = BTreeMap::new();
    for r in grid.iter().filter(|r| r.scheme == "lc") {
        if let Some(c) = r.stats.get("lc.compression_ratio") {
            compression_ratio.insert(r.workload.clone(), c);
        }
    }

    // Worst daemon point over the grid and the default-knob studies.
    let mut worst: Option<Worst> = None;
    let mut consider = |p: &Point| {
        if p.scheme == "daemon"
            && worst
                .as_ref()
                .is_none_or(|w| p.speedup_over_remote < w.speedup)
        {
            worst = Some(Worst {
                study: p.study.clone(),
                workload: p.workload.clone(),
                config: p.config.clone(),
                speedup: p.speedup_over_remote,
            });
        }
    };
    pts.iter().for_each(&mut consider);
    let mut study_maps = BTreeMap::new();
    let mut study_hits = BTreeMap::new();
    for s in studies {
        let sp = points(s.name, s.results);
        if s.default_knobs {
            sp.iter().for_each(&mut consider);
        }
        let labelled: Vec<(String, &Point)> = sp
            .iter()
            .filter_map(|p| (s.label)(p).map(|l| (l, p)))
            .collect();
        let mut speed: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
        let mut hit: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
        for (l, p) in &labelled {
            speed
                .entry((l.clone(), p.workload.clone()))
                .or_default()
                .push(p.speedup_over_remote);
            hit.entry((l.clone(), p.workload.clone()))
                .or_default()
                .push(p.local_hit_ratio);
        }
        study_maps.insert(
            s.name.to_string(),
            scheme_map(speed.into_iter().map(|(k, v)| (k, geomean(&v))).collect()),
        );
        study_hits.insert(
            s.name.to_string(),
            scheme_map(hit.into_iter().map(|(k, v)| (k, mean(&v))).collect()),
        );
    }
    let worst_daemon_vs_remote = worst.as_ref().map_or(f64::NAN, |w| w.speedup);
    let bp_high_locality_by_bandwidth = geo_by(
        &pts,
        |p| p.scheme == "bp" && HIGH_LOCALITY.contains(&p.workload.as_str()),
        |p| bw_key(cfg(p, "link.bw_factor")),
    );
    let mut util: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    for r in grid.iter().filter(|r| r.scheme == "remote") {
        let bw = r.overrides.get("link.bw_factor").map_or("", String::as_str);
        util.entry((r.workload.clone(), bw_key(bw)))
            .or_default()
            .push(r.link_utilization);
    }
    let remote_link_utilization =
        scheme_map(util.into_iter().map(|(k, v)| (k, mean(&v))).collect());

    let mut e = DaemonEval {
        geomean_speedup_over_remote,
        geomean_speedup_by_switch,
        worst_daemon_vs_remote,
        worst_daemon_at: worst,
        local_hit_ratio,
        compression_ratio,
        speedup_by_workload,
        studies: study_maps,
        study_hit_ratio: study_hits,
        bp_high_locality_by_bandwidth,
        remote_link_utilization,
        disturbance_timeline: BTreeMap::new(),
        disturbance_ipc_by_phase: BTreeMap::new(),
        versus_paper: Vec::new(),
        checks: Vec::new(),
    };
    e.checks = checks(&e);
    e.versus_paper = versus_paper(&e);
    e
}

/// (a, b) → v into a → b → v.
fn scheme_map(flat: BTreeMap<(String, String), f64>) -> BTreeMap<String, BTreeMap<String, f64>> {
    let mut m: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for ((a, b), v) in flat {
        m.entry(a).or_default().insert(b, v);
    }
    m
}

fn get2(m: &BTreeMap<String, BTreeMap<String, f64>>, a: &str, b: &str) -> f64 {
    m.get(a).and_then(|x| x.get(b)).copied().unwrap_or(f64::NAN)
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

fn versus_paper(e: &DaemonEval) -> Vec<(String, f64, f64)> {
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

/// IPC per fixed interval of one core's simulated time (Fig. 13's view
/// of a run with background traffic).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timeline {
    pub interval_ns: f64,
    /// IPC of each interval from time 0; the last may be partial.
    pub ipc: Vec<f64>,
}

/// Mean IPC over the intervals in the quiet and in the busy periods of the
/// background traffic (`link.background_period_ns`, quiet first).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PhaseIpc {
    pub quiet: f64,
    pub busy: f64,
}

/// Intervals a timeline may hold: a bound, not a limit any run reaches
/// (10^6 intervals of 25 µs is 25 s of simulated time).
const MAX_INTERVALS: usize = 1 << 20;

/// Feeds a single-core engine and records the instructions issued in each
/// interval of the core's clock. A load that stalls the core across
/// several intervals leaves them at zero, as a stalled core retires nothing.
struct Sampler<'a> {
    engine: &'a mut Engine,
    interval: f64,
    next: f64,
    freq_ghz: f64,
    issued: u64,
    ipc: Vec<f64>,
}

impl Sampler<'_> {
    fn close_interval(&mut self) {
        self.ipc
            .push(self.issued as f64 / (self.interval * self.freq_ghz));
        self.issued = 0;
        self.next += self.interval;
    }
}

impl Sink for Sampler<'_> {
    fn begin(&mut self, footprint: u64) {
        self.engine.begin(footprint);
    }

    fn access(&mut self, a: Access) {
        self.issued += u64::from(a.gap) + 1;
        self.engine.access(a);
        let now = self.engine.core_time(0);
        while now >= self.next && self.ipc.len() < MAX_INTERVALS {
            self.close_interval();
        }
    }

    fn wants_contents(&self) -> bool {
        self.engine.wants_contents()
    }

    fn page(&mut self, addr: u64, data: &[u8]) {
        self.engine.page(addr, data);
    }
}

/// Runs built-in `workload` under `scheme` on one out-of-order core and
/// returns its IPC per `interval_ns` of simulated time.
pub fn ipc_timeline(
    cfg: &Config,
    scheme: &str,
    workload: &str,
    scale: Scale,
    seed: u64,
    interval_ns: f64,
) -> Result<Timeline, SimError> {
    let bad = |message: String| SimError::Config {
        source_name: workload.to_string(),
        message,
    };
    if cfg.core.count != 1 {
        return Err(bad(format!(
            "an IPC timeline needs core.count = 1, got {}",
            cfg.core.count
        )));
    }
    if !(interval_ns.is_finite() && interval_ns > 0.0) {
        return Err(bad(format!(
            "timeline interval {interval_ns} ns is not positive"
        )));
    }
    let mut engine: Engine = Engine::new(cfg, crate::scheme::build(scheme)?);
    let mut s = Sampler {
        engine: &mut engine,
        interval: interval_ns,
        next: interval_ns,
        freq_ghz: cfg.core.freq_ghz,
        issued: 0,
        ipc: Vec::new(),
    };
    farmem_workloads::run_workload(workload, scale, seed, &mut s)?;
    let (issued, mut ipc) = (s.issued, s.ipc);
    let end = engine.finish().sim_time_ns;
    // The last, partial interval (the run ends when its last load is back).
    let start = ipc.len() as f64 * interval_ns;
    if end > start && ipc.len() < MAX_INTERVALS {
        ipc.push(issued as f64 / ((end - start) * cfg.core.freq_ghz));
    }
    Ok(Timeline { interval_ns, ipc })
}

/// Mean IPC over the whole intervals of each background phase; `None` if
/// the intervals do not tile the periods or a phase has no whole interval.
pub fn phase_ipc(t: &Timeline, period_ns: f64) -> Option<PhaseIpc> {
    let per = period_ns / t.interval_ns;
    if !(per >= 1.0 && per.fract() == 0.0) {
        return None;
    }
    let per = per as usize;
    let (mut quiet, mut busy) = (Vec::new(), Vec::new());
    // The last interval may be partial: left out.
    let whole = t.ipc.len().saturating_sub(1);
    for (i, &v) in t.ipc[..whole].iter().enumerate() {
        if (i / per).is_multiple_of(2) {
            quiet.push(v);
        } else {
            busy.push(v);
        }
    }
    (!quiet.is_empty() && !busy.is_empty()).then(|| PhaseIpc {
        quiet: mean(&quiet),
        busy: mean(&busy),
    })
}

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

/// One CSV row per point (every study), with a header.
pub fn csv(points: &[Point]) -> String {
    let mut out = String::from(
        "study,workload,scheme,config,sim_time_ns,speedup_over_remote,local_hit_ratio,remote_bytes_read\n",
    );
    for p in points {
        let config: Vec<String> = p.config.iter().map(|(k, v)| format!("{k}={v}")).collect();
        out.push_str(&format!(
            "{},{},{},{},{:.1},{:.6},{:.6},{}\n",
            p.study,
            p.workload,
            p.scheme,
            config.join(";"),
            p.sim_time_ns,
            p.speedup_over_remote,
            p.local_hit_ratio,
            p.remote_bytes_read
        ));
    }
    out
}

/// The figures, as (file name, SVG).
pub fn figures(e: &DaemonEval, grid: &[SimResult]) -> Vec<(String, Figure)> {
    let mut figs = Vec::new();
    let pts = points("grid", grid);
    let workloads: Vec<String> = e.speedup_by_workload.keys().cloned().collect();
    // Fig. 8: one chart per network configuration.
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
                    groups: workloads.clone(),
                    series,
                    reference: Some(1.0),
                }
                .into(),
            ));
        }
    }
    // Geomean per bandwidth factor.
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
            groups: workloads.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Stats;

    fn run(w: &str, s: &str, bw: &str, sw: &str, t: f64, hit: f64) -> SimResult {
        let mut stats = Stats::default();
        if s == "lc" {
            stats.put("lc", "compression_ratio", if w == "a" { 3.0 } else { 1.0 });
        }
        SimResult {
            scheme: s.into(),
            workload: w.into(),
            records: 1,
            instructions: 1,
            sim_time_ns: t,
            ipc: 1.0,
            amat_ns: 1.0,
            amat_miss_ns: 1.0,
            llc_misses: 1,
            local_hit_ratio: hit,
            remote_bytes_read: 0,
            remote_bytes_written: 0,
            footprint_bytes: 0,
            local_memory_bytes: 0,
            data_amplification: 0.0,
            link_utilization: 0.0,
            wall_seconds: 0.0,
            records_per_sec: 0.0,
            cpu_seconds: 0.0,
            records_per_cpu_sec: 0.0,
            sim_cpu_seconds: 0.0,
            records_per_sim_cpu_sec: 0.0,
            overrides: [
                ("link.bw_factor".to_string(), bw.to_string()),
                ("link.switch_ns".to_string(), sw.to_string()),
            ]
            .into_iter()
            .collect(),
            stats,
        }
    }

    /// A paper-shaped grid: daemon gains more at lower bandwidth, pq
    /// loses hits on pr that daemon recovers, bp slows the scan, lc gains
    /// on the compressible workload.
    fn grid() -> Vec<SimResult> {
        let mut v = Vec::new();
        for (w, lc_t, bp_t) in [
            ("pr", 90.0, 95.0),
            ("stream", 100.0, 120.0),
            ("a", 50.0, 90.0),
        ] {
            for (bw, gain) in [("1/2", 1.5), ("1/4", 2.0), ("1/8", 3.0)] {
                for sw in SWITCH_NS {
                    let hit = |s| match (w, s) {
                        ("pr", "pq") => 0.80,
                        ("pr", "daemon") => 0.95,
                        _ => 0.97,
                    };
                    v.push(run(w, "remote", bw, sw, 100.0, hit("remote")));
                    v.push(run(w, "lc", bw, sw, lc_t, hit("lc")));
                    v.push(run(w, "bp", bw, sw, bp_t, hit("bp")));
                    v.push(run(w, "pq", bw, sw, 90.0, hit("pq")));
                    v.push(run(w, "daemon", bw, sw, 100.0 / gain, hit("daemon")));
                }
            }
        }
        v
    }

    /// The compressibility study on pr: pq loses 0.17 of remote's hits,
    /// daemon wins back `measured` of its own hit ratio and `assumed` at
    /// the paper's ratio.
    fn compressibility(measured: f64, assumed: f64) -> Vec<SimResult> {
        let mut d = run("pr", "daemon", "1/4", "100", 80.0, assumed);
        d.overrides
            .insert("daemon.assume_ratio".into(), PAPER_LZ_RATIO.to_string());
        vec![
            run("pr", "remote", "1/4", "100", 100.0, 0.97),
            run("pr", "pq", "1/4", "100", 90.0, 0.80),
            run("pr", "daemon", "1/4", "100", 85.0, measured),
            d,
        ]
    }

    fn with_compressibility(rs: &[SimResult]) -> DaemonEval {
        summarize(
            &grid(),
            &[Study {
                name: COMPRESSIBILITY,
                results: rs,
                label: &compressibility_label,
                default_knobs: false,
            }],
        )
    }

    fn check<'a>(e: &'a DaemonEval, claim_starts: &str) -> &'a Check {
        e.checks
            .iter()
            .find(|c| c.claim.starts_with(claim_starts))
            .unwrap_or_else(|| panic!("no check {claim_starts}"))
    }

    #[test]
    fn only_daemon_at_the_papers_ratio_is_labelled_so() {
        let mut rs = compressibility(0.82, 0.93);
        for r in &mut rs[..3] {
            r.overrides.insert("daemon.assume_ratio".into(), "2".into());
        }
        let labels: Vec<String> = points(COMPRESSIBILITY, &rs)
            .iter()
            .filter_map(compressibility_label)
            .collect();
        assert_eq!(labels, ["remote", "pq", "daemon", AT_PAPER_RATIO]);
    }

    #[test]
    fn recovered_hits_are_measured_on_the_grid_and_at_the_papers_ratio_apart() {
        let e = with_compressibility(&compressibility(0.82, 0.93));
        let h = &e.study_hit_ratio[COMPRESSIBILITY];
        assert_eq!(h[AT_PAPER_RATIO]["pr"], 0.93);
        assert_eq!(h["daemon"]["pr"], 0.82);
        // The grid's daemon: (0.95 - 0.80) / (0.97 - 0.80).
        let grid = check(&e, "daemon recovers most of pq's lost local hits");
        assert!((grid.measured - 0.15 / 0.17).abs() < 1e-9 && grid.pass);
        let what_if = check(&e, "what-if: pages at 4.47x");
        assert!((what_if.measured - 0.13 / 0.17).abs() < 1e-9 && what_if.pass);
        assert!(e.pass());
        // Little recovered even at the paper's ratio: that check fails alone.
        let e = with_compressibility(&compressibility(0.82, 0.84));
        assert!(!check(&e, "what-if: pages at 4.47x").pass);
        assert!(check(&e, "daemon recovers most of pq's lost local hits").pass);
        assert!(!e.pass());
    }

    #[test]
    fn summary_keys_values_and_checks() {
        let e = with_compressibility(&compressibility(0.82, 0.93));
        let d = &e.geomean_speedup_over_remote["daemon"];
        assert_eq!(d.keys().collect::<Vec<_>>(), ["0.125", "0.25", "0.5"]);
        assert!((d["0.5"] - 1.5).abs() < 1e-12 && (d["0.125"] - 3.0).abs() < 1e-12);
        assert!((e.worst_daemon_vs_remote - 1.5).abs() < 1e-12);
        assert!((e.local_hit_ratio["pq"]["pr"] - 0.80).abs() < 1e-12);
        assert_eq!(e.compression_ratio["a"], 3.0);
        // bp over the high-locality workloads (stream only here), per bandwidth.
        for bw in ["0.5", "0.25", "0.125"] {
            assert!((e.bp_high_locality_by_bandwidth[bw] - 100.0 / 120.0).abs() < 1e-12);
        }
        assert_eq!(e.remote_link_utilization["pr"]["0.125"], 0.0);
        assert!(e.pass(), "{:#?}", e.checks);
        // Fig. 8 for every network point, geomean, hit ratio, and the
        // compressibility study's speedups and hit ratios.
        assert_eq!(figures(&e, &grid()).len(), 6 + 2 + 2);
    }

    #[test]
    fn a_slow_daemon_point_fails_the_two_percent_check() {
        let mut g = grid();
        g.push(run("b", "remote", "1/2", "100", 100.0, 0.9));
        g.push(run("b", "daemon", "1/2", "100", 103.0, 0.9));
        let e = summarize(&g, &[]);
        assert!((e.worst_daemon_vs_remote - 100.0 / 103.0).abs() < 1e-12);
        let w = e.worst_daemon_at.as_ref().unwrap();
        assert_eq!(w.workload, "b");
        assert!(!e.checks[0].pass);
    }

    #[test]
    fn studies_are_paired_with_remote_ignoring_daemon_knobs() {
        let mut rs = vec![run("pr", "remote", "1/4", "100", 100.0, 0.9)];
        let mut d = run("pr", "daemon", "1/4", "100", 80.0, 0.9);
        d.overrides
            .insert("daemon.compute.partition.ratio".into(), "50%".into());
        rs.push(d);
        let label = |p: &Point| {
            (p.scheme != "remote").then(|| {
                format!(
                    "{} {}",
                    p.scheme,
                    p.config
                        .get("daemon.compute.partition.ratio")
                        .cloned()
                        .unwrap_or_default()
                )
            })
        };
        let e = summarize(
            &grid(),
            &[Study {
                name: "ratio",
                results: &rs,
                label: &label,
                default_knobs: false,
            }],
        );
        assert_eq!(e.studies["ratio"]["daemon 50%"]["pr"], 1.25);
        // Non-default knobs do not count for the worst case.
        assert!((e.worst_daemon_vs_remote - 1.5).abs() < 1e-12);
        let rows = csv(&points("ratio", &rs));
        assert_eq!(rows.lines().count(), 3);
        assert!(rows.contains("ratio,pr,daemon,daemon.compute.partition.ratio=50%;"));
    }

    #[test]
    fn phase_ipc_averages_whole_intervals_of_each_phase() {
        // Two intervals per period, quiet first; the last (partial) is left out.
        let t = Timeline {
            interval_ns: 25.0,
            ipc: vec![1.0, 3.0, 2.0, 2.0, 1.0, 1.0, 4.0, 4.0, 9.0],
        };
        assert_eq!(
            phase_ipc(&t, 50.0),
            Some(PhaseIpc {
                quiet: 1.5,
                busy: 3.0
            })
        );
        // Intervals that do not tile the period, or one phase only.
        assert_eq!(phase_ipc(&t, 60.0), None);
        let short = Timeline {
            interval_ns: 25.0,
            ipc: vec![1.0, 1.0, 0.5],
        };
        assert_eq!(phase_ipc(&short, 50.0), None);
    }

    #[test]
    fn ipc_timeline_accounts_for_every_instruction_and_the_whole_run() {
        let cfg = Config::preset("daemon").unwrap();
        let scale = Scale::Factor(0.002);
        let whole = crate::simulate(
            &cfg,
            "remote",
            &crate::Input::Workload {
                name: "stream".into(),
                scale,
                seed: 1,
            },
        )
        .unwrap();
        let interval = 2000.0;
        let t = ipc_timeline(&cfg, "remote", "stream", scale, 1, interval).unwrap();
        // One interval per 2 µs of the run, the last one partial.
        let n = t.ipc.len();
        assert_eq!(n, (whole.sim_time_ns / interval).ceil() as usize);
        let last = whole.sim_time_ns - (n - 1) as f64 * interval;
        let instructions: f64 = t.ipc[..n - 1]
            .iter()
            .map(|v| v * interval * cfg.core.freq_ghz)
            .sum::<f64>()
            + t.ipc[n - 1] * last * cfg.core.freq_ghz;
        assert!((instructions - whole.instructions as f64).abs() < 1e-6 * instructions);
        // Several cores share one clock per core: refused.
        let mut b = crate::ConfigBuilder::preset("daemon").unwrap();
        b.set("core.count", "2").unwrap();
        let two = b.build().unwrap();
        assert!(ipc_timeline(&two, "remote", "stream", scale, 1, interval).is_err());
        assert!(ipc_timeline(&cfg, "remote", "stream", scale, 1, 0.0).is_err());
    }

    #[test]
    fn spearman_ranks() {
        assert_eq!(spearman(&[(1.0, 10.0), (2.0, 20.0), (3.0, 30.0)]), 1.0);
        assert_eq!(spearman(&[(1.0, 30.0), (2.0, 20.0), (3.0, 10.0)]), -1.0);
        assert!(spearman(&[(1.0, 1.0)]).is_nan());
    }
}
