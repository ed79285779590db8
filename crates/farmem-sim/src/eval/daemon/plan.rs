//! What `farmem eval daemon` runs, as data: the grid of schemes ×
//! workloads × bandwidth factor × switch latency (Fig. 8, 10) and one
//! [`StudySpec`] per sensitivity study: partition ratio (Fig. 11), codec
//! (Fig. 12), the paper's compressibility (Fig. 10 what-if), background
//! traffic (Fig. 13-14), several memory nodes (Fig. 17), several cores
//! (Fig. 15, 18); and the IPC timelines of Fig. 13 over time.

use super::paper::{
    AT_PAPER_RATIO, BANDWIDTHS, COMPRESSIBILITY, LOW_LOCALITY, PAPER_LZ_RATIO, SCHEMES, SWITCH_NS,
};
use super::points::{Point, cfg, points};
use super::report::DaemonEval;
use super::summary::{Study, summarize};
use super::timeline::TimelinePlan;
use crate::eval::study::{
    EvalOptions, RunSpec, StudyError, StudySpec, key_value, no_sweeps, parse_scale, sweep,
    workload_inputs,
};
use crate::{Input, SimResult};

/// Caches scaled down with the workloads in `--quick` (1/16 of the
/// footprints), so the LLC does not swallow the working set.
pub const QUICK_CACHES: &[&str] = &["llc.size=256KiB", "l2.size=32KiB", "l1d.size=8KiB"];
/// The workloads of the full grid and of the quick one.
pub const WORKLOADS: &[&str] = &[
    "pr", "nw", "kc", "tc", "bfs", "bc", "spmv", "stream", "linreg", "ycsb-b",
];
pub const QUICK_WORKLOADS: &[&str] = &["pr", "nw", "kc", "spmv", "stream"];
/// `--quick` runs 1/16 of each workload unless a scale is given.
pub const QUICK_SCALE: &str = "0.0625";
/// The schemes of Fig. 13-14 (and `remote`, the baseline).
pub const DISTURBANCE_SCHEMES: &[&str] = &["remote", "lc", "pq", "daemon"];
/// Samples per background period in the IPC timeline (Fig. 13 over time).
pub const TIMELINE_SAMPLES_PER_PERIOD: f64 = 4.0;

/// Which sensitivity study: how its points are labelled in the summary's
/// series, and whether its `daemon` runs count for the worst case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StudyKind {
    /// Fig. 11: `daemon 25% 100ns`.
    Ratio,
    /// Fig. 12: `lc`'s codec.
    Codec,
    /// Fig. 10 at the paper's compressibility: the scheme, or
    /// [`AT_PAPER_RATIO`].
    Compressibility,
    /// Fig. 13-14: the scheme.
    Disturbance,
    /// Fig. 17: `daemon 2 nodes`.
    Nodes,
    /// Fig. 15, 18: `daemon 2 cores`.
    Cores,
}

impl StudyKind {
    /// A point's series; `None` leaves it out (the baseline).
    pub fn label(self, p: &Point) -> Option<String> {
        let not_remote = p.scheme != "remote";
        match self {
            StudyKind::Ratio => not_remote.then(|| {
                format!(
                    "{} {} {}ns",
                    p.scheme,
                    cfg(p, "daemon.compute.partition.ratio"),
                    cfg(p, "link.switch_ns")
                )
            }),
            StudyKind::Codec => (p.scheme == "lc").then(|| cfg(p, "daemon.codec").to_string()),
            StudyKind::Compressibility => compressibility_label(p),
            StudyKind::Disturbance => Some(p.scheme.clone()),
            StudyKind::Nodes => {
                not_remote.then(|| format!("{} {} nodes", p.scheme, cfg(p, "remote.nodes")))
            }
            StudyKind::Cores => {
                not_remote.then(|| format!("{} {} cores", p.scheme, cfg(p, "core.count")))
            }
        }
    }

    /// Whether the study runs `daemon` with its default knobs (the
    /// partition-ratio, codec and assumed-ratio sweeps do not).
    pub fn default_knobs(self) -> bool {
        !matches!(
            self,
            StudyKind::Ratio | StudyKind::Codec | StudyKind::Compressibility
        )
    }
}

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

/// DaeMon §6 as data.
#[derive(Debug, Clone)]
pub struct DaemonPlan {
    /// `--scale` as run (the quick grid's when none was given).
    pub scale: String,
    pub grid: Vec<RunSpec>,
    pub studies: Vec<StudySpec<StudyKind>>,
    pub timelines: TimelinePlan,
}

/// `sets` then `more`: a study's own keys after the user's, so they win.
fn with(sets: &[String], more: &[&str]) -> Vec<String> {
    sets.iter()
        .cloned()
        .chain(more.iter().map(|s| s.to_string()))
        .collect()
}

/// Workloads of a study: those of the grid the study's paper figure uses,
/// or the grid's first ones.
fn pick(grid: &[Input], want: &[&str], n: usize) -> Vec<Input> {
    let mut v: Vec<Input> = grid
        .iter()
        .filter(|i| want.contains(&i.name().as_str()))
        .cloned()
        .collect();
    if v.is_empty() {
        v = grid.iter().take(n).cloned().collect();
    }
    v.truncate(n);
    v
}

/// The user's `--set`s, one value each, then the quick grid's caches where
/// the user set none.
fn common_sets(opts: &EvalOptions) -> Result<Vec<String>, StudyError> {
    no_sweeps(&opts.sets)?;
    let mut sets = opts.sets.clone();
    for s in &sets {
        key_value(s)?;
    }
    if opts.quick {
        for c in QUICK_CACHES {
            let key = c.split('=').next().unwrap_or_default();
            if !sets.iter().any(|s| s.starts_with(&format!("{key}="))) {
                sets.push(c.to_string());
            }
        }
    }
    Ok(sets)
}

/// The runs of `farmem eval daemon` for `opts`. Fails on a bad `--set`,
/// workload or scale, before anything runs.
pub fn plan(opts: &EvalOptions) -> Result<DaemonPlan, StudyError> {
    let quick = opts.quick;
    let scale = match &opts.scale {
        None if quick => QUICK_SCALE.to_string(),
        None => "1".to_string(),
        Some(s) => s.clone(),
    };
    let default = if quick { QUICK_WORKLOADS } else { WORKLOADS };
    let names: Vec<String> = match &opts.workloads {
        Some(w) => w.clone(),
        None => default.iter().map(|w| w.to_string()).collect(),
    };
    let grid_inputs = workload_inputs(&names, parse_scale(&scale)?)?;
    let sets = common_sets(opts)?;
    let bws = BANDWIDTHS.iter().map(|b| b.0).collect::<Vec<_>>().join(",");
    let sw_set = format!("link.switch_ns={}", SWITCH_NS.join(","));
    let grid = sweep(
        SCHEMES,
        &grid_inputs,
        &with(&sets, &[&format!("link.bw_factor={bws}"), &sw_set]),
    )?;
    let n = if quick { 2 } else { 4 };
    // Fig. 12's and the what-if's second bandwidth is left out of the quick grid.
    let bw = if quick {
        "link.bw_factor=1/4"
    } else {
        "link.bw_factor=1/4,1/8"
    };
    let period_ns: f64 = if quick { 100_000.0 } else { 1_000_000.0 };
    let disturbance_ins = pick(&grid_inputs, &["pr", "nw"], 2);
    let disturbance_sets = with(
        &sets,
        &[
            "link.bw_factor=1/4",
            "link.background=0.5",
            &format!("link.background_period_ns={period_ns}"),
        ],
    );
    let studies = vec![
        ratio(&grid_inputs, &sets, &sw_set, n)?,
        codec(&grid_inputs, &sets, bw, n)?,
        compressibility(&grid_inputs, &sets, bw, n)?,
        study(
            StudyKind::Disturbance,
            sweep(DISTURBANCE_SCHEMES, &disturbance_ins, &disturbance_sets)?,
        ),
        nodes(&grid_inputs, &sets, n)?,
        cores(&grid_inputs, &sets)?,
    ];
    let timelines = TimelinePlan {
        inputs: disturbance_ins,
        sets: disturbance_sets,
        schemes: DISTURBANCE_SCHEMES,
        period_ns,
        interval_ns: period_ns / TIMELINE_SAMPLES_PER_PERIOD,
    };
    Ok(DaemonPlan {
        scale,
        grid,
        studies,
        timelines,
    })
}

fn study(kind: StudyKind, runs: Vec<RunSpec>) -> StudySpec<StudyKind> {
    let name = match kind {
        StudyKind::Ratio => "ratio",
        StudyKind::Codec => "codec",
        StudyKind::Compressibility => COMPRESSIBILITY,
        StudyKind::Disturbance => "disturbance",
        StudyKind::Nodes => "nodes",
        StudyKind::Cores => "cores",
    };
    StudySpec { name, kind, runs }
}

/// Fig. 11: partition ratio, both switch latencies, bandwidth 1/4.
fn ratio(
    grid: &[Input],
    sets: &[String],
    sw_set: &str,
    n: usize,
) -> Result<StudySpec<StudyKind>, StudyError> {
    let ins = pick(grid, &["pr", "nw", "spmv", "stream"], n);
    let base = with(sets, &["link.bw_factor=1/4", sw_set]);
    let mut runs = sweep(&["remote"], &ins, &base)?;
    runs.extend(sweep(
        &["pq", "daemon"],
        &ins,
        &with(&base, &["daemon.compute.partition.ratio=25%,50%,80%"]),
    )?);
    Ok(study(StudyKind::Ratio, runs))
}

/// Fig. 12: lc with each codec.
fn codec(
    grid: &[Input],
    sets: &[String],
    bw: &str,
    n: usize,
) -> Result<StudySpec<StudyKind>, StudyError> {
    let ins = pick(grid, &["pr", "nw", "spmv", "stream"], 2 * n);
    let base = with(sets, &[bw]);
    let mut runs = sweep(&["remote"], &ins, &base)?;
    runs.extend(sweep(
        &["lc"],
        &ins,
        &with(&base, &["daemon.codec=lz,fpc-bdi,fve"]),
    )?);
    Ok(study(StudyKind::Codec, runs))
}

/// Fig. 10's recovery at the paper's compressibility: pq's low-locality
/// losses rerun with every page sent at 4096 / 4.47 bytes, so that the
/// check on our real page contents can be told from the mechanism.
fn compressibility(
    grid: &[Input],
    sets: &[String],
    bw: &str,
    n: usize,
) -> Result<StudySpec<StudyKind>, StudyError> {
    let ins = pick(grid, LOW_LOCALITY, 2 * n);
    let base = with(sets, &[bw, "link.switch_ns=100"]);
    let mut runs = sweep(&["remote", "pq", "daemon"], &ins, &base)?;
    let assumed = format!("daemon.assume_ratio={PAPER_LZ_RATIO}");
    runs.extend(sweep(&["daemon"], &ins, &with(&base, &[&assumed]))?);
    Ok(study(StudyKind::Compressibility, runs))
}

/// Fig. 17: 2 and 4 memory nodes, each with its own link.
fn nodes(grid: &[Input], sets: &[String], n: usize) -> Result<StudySpec<StudyKind>, StudyError> {
    let ins = pick(grid, &["pr", "spmv", "nw", "stream"], n);
    let runs = sweep(
        &["remote", "daemon"],
        &ins,
        &with(sets, &["link.bw_factor=1/4", "remote.nodes=2,4"]),
    )?;
    Ok(study(StudyKind::Nodes, runs))
}

/// Fig. 15/18: 2 and 4 workloads on as many cores, local memory ~15%
/// and ~9% of each working set (§6.10).
fn cores(grid: &[Input], sets: &[String]) -> Result<StudySpec<StudyKind>, StudyError> {
    let mut runs = Vec::new();
    for (k, local) in [(2usize, "15%"), (4, "9%")] {
        if grid.len() < k {
            continue;
        }
        let mix = Input::Multi(grid.iter().take(k).cloned().collect());
        runs.extend(sweep(
            &["remote", "lc", "pq", "daemon"],
            &[mix],
            &with(
                sets,
                &[
                    "link.bw_factor=1/4",
                    &format!("core.count={k}"),
                    &format!("local.size={local}"),
                ],
            ),
        )?);
    }
    Ok(study(StudyKind::Cores, runs))
}

impl DaemonPlan {
    /// Every run, the grid's first, then each study's: one batch.
    pub fn runs(&self) -> Vec<RunSpec> {
        let mut all = self.grid.clone();
        for s in &self.studies {
            all.extend(s.runs.iter().cloned());
        }
        all
    }

    /// `results` (one per [`DaemonPlan::runs`], in order) split back into
    /// the grid's and each study's.
    pub fn split<'r>(&self, results: &'r [SimResult]) -> (&'r [SimResult], Vec<&'r [SimResult]>) {
        let n = self.grid.len().min(results.len());
        let (grid, mut rest) = results.split_at(n);
        let mut studies = Vec::with_capacity(self.studies.len());
        for s in &self.studies {
            let (this, more) = rest.split_at(s.runs.len().min(rest.len()));
            studies.push(this);
            rest = more;
        }
        (grid, studies)
    }

    /// The summary of `results` (one per [`DaemonPlan::runs`]); the
    /// timelines are added by [`DaemonEval::with_timelines`].
    pub fn summarize(&self, results: &[SimResult]) -> DaemonEval {
        let (grid, per_study) = self.split(results);
        let labels: Vec<_> = self
            .studies
            .iter()
            .map(|s| move |p: &Point| s.kind.label(p))
            .collect();
        let studies: Vec<Study> = self
            .studies
            .iter()
            .zip(&per_study)
            .zip(&labels)
            .map(|((s, r), label)| Study {
                name: s.name,
                results: r,
                label,
                default_knobs: s.kind.default_knobs(),
            })
            .collect();
        summarize(grid, &studies)
    }

    /// Every study's points, the grid's first (the CSV's rows).
    pub fn points(&self, results: &[SimResult]) -> Vec<Point> {
        let (grid, per_study) = self.split(results);
        let mut pts = points("grid", grid);
        for (s, r) in self.studies.iter().zip(per_study) {
            pts.extend(points(s.name, r));
        }
        pts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ConfigBuilder;
    use crate::eval::study::Batch;

    #[test]
    fn the_quick_plan_has_its_runs_and_shares_the_repeated_ones() {
        let p = plan(&EvalOptions::quick()).unwrap();
        assert_eq!(p.scale, QUICK_SCALE);
        // 5 workloads × 5 schemes × 3 bandwidths × 2 switch latencies.
        assert_eq!(p.grid.len(), 150);
        let per_study: Vec<(&str, usize)> =
            p.studies.iter().map(|s| (s.name, s.runs.len())).collect();
        assert_eq!(
            per_study,
            [
                ("ratio", 2 * 2 + 2 * 2 * 3 * 2),
                ("codec", 4 + 4 * 3),
                (COMPRESSIBILITY, 3 * 3 + 3),
                ("disturbance", 2 * 4),
                ("nodes", 2 * 2 * 2),
                ("cores", 2 * 4),
            ]
        );
        let runs = p.runs();
        assert_eq!(runs.len(), 230);
        let base = ConfigBuilder::preset("daemon").unwrap();
        let batch = Batch::new(&base, &runs).unwrap();
        // Repeats of the grid's runs at the preset's link (1/4 set, 100 ns,
        // 25% partition, lz): ratio's remote (2 × 2 switch) and its 25%
        // pq and daemon (2 × 2 × 2); codec's remote and lz lc at 100 ns
        // (4 + 4); compressibility's remote, pq and daemon (3 × 3).
        assert_eq!(batch.distinct_len(), 230 - (4 + 8) - (4 + 4) - 9);
        assert_eq!(p.timelines.inputs.len(), 2);
        assert_eq!(p.timelines.interval_ns, 25_000.0);
    }

    #[test]
    fn user_sets_come_first_and_quick_caches_fill_in() {
        let mut o = EvalOptions::quick();
        o.sets = vec!["llc.size=1MiB".into(), "local.policy=fifo".into()];
        let p = plan(&o).unwrap();
        let ov = &p.grid[0].overrides;
        assert_eq!(ov[0], ("llc.size".into(), "1MiB".into()));
        assert!(!ov.iter().any(|(k, v)| k == "llc.size" && v == "256KiB"));
        assert!(ov.iter().any(|(k, v)| k == "l2.size" && v == "32KiB"));
    }

    #[test]
    fn a_bad_set_workload_or_scale_is_refused_before_any_run() {
        let mut o = EvalOptions::quick();
        o.sets = vec!["link.bw_factor=1/2,1/4".into()];
        assert!(matches!(plan(&o), Err(StudyError::Sweep(_))));
        o.sets = vec!["no-equals".into()];
        assert!(matches!(plan(&o), Err(StudyError::NotKeyValue(_))));
        let mut o = EvalOptions::quick();
        o.workloads = Some(vec!["nope".into()]);
        assert!(matches!(plan(&o), Err(StudyError::UnknownWorkload(_))));
        let mut o = EvalOptions::quick();
        o.scale = Some("-1".into());
        assert!(matches!(plan(&o), Err(StudyError::Scale(_))));
        // A key the config does not have: planned, refused by the batch.
        let mut o = EvalOptions::quick();
        o.sets = vec!["no.such.key=1".into()];
        let runs = plan(&o).unwrap().runs();
        let base = ConfigBuilder::preset("daemon").unwrap();
        assert!(Batch::new(&base, &runs).is_err());
    }

    #[test]
    fn one_workload_has_no_several_core_study() {
        let mut o = EvalOptions::quick();
        o.workloads = Some(vec!["stream".into()]);
        let p = plan(&o).unwrap();
        let cores = p.studies.iter().find(|s| s.name == "cores").unwrap();
        assert!(cores.runs.is_empty());
        // Studies whose paper workloads are missing take the grid's.
        assert!(
            p.studies
                .iter()
                .all(|s| s.name == "cores" || !s.runs.is_empty())
        );
    }

    #[test]
    fn results_split_back_per_study() {
        let p = plan(&EvalOptions::quick()).unwrap();
        let n = p.runs().len();
        let fake: Vec<SimResult> = (0..n).map(|_| crate::eval::test_result()).collect();
        let (grid, studies) = p.split(&fake);
        assert_eq!(grid.len(), p.grid.len());
        let lens: Vec<usize> = studies.iter().map(|s| s.len()).collect();
        let want: Vec<usize> = p.studies.iter().map(|s| s.runs.len()).collect();
        assert_eq!(lens, want);
    }
}
