//! What `farmem eval unimem` runs, as data: one [`StudySpec`] per figure
//! group, keyed by [`Experiment`]: every system, workload and cache size
//! (Fig. 9, 10) and the four workloads interleaved (Fig. 11); the
//! block-size (Fig. 12), host-share (Fig. 13) and list-pair (Fig. 14)
//! sweeps at 10% local.

use super::paper::{
    BLOCK_SIZES, CACHE_PERCENTS, HOST_SHARES, MIXED, MIXED_INPUTS, PAIRS, SYSTEMS, WORKLOADS,
};
use super::report::{Experiment, Point};
use crate::eval::study::{
    EvalOptions, RunSpec, StudyError, StudySpec, key_value, parse_scale, workload_inputs,
};
use crate::{Input, SimResult};

/// The preset the eval runs on (UniMem Table 1).
pub const PRESET: &str = "unimem";
/// CPU caches scaled with the working sets: the paper's 24 MiB LLC is
/// 0.06–0.6% of its 4–40 GB working sets; ours are 16–100 MiB, so a
/// 24 MiB LLC would hold most of them. 256 KiB keeps the LLC ~0.3–1.5%.
pub const SCALED_CACHES: &[(&str, &str)] = &[("llc.size", "256KiB"), ("l2.size", "80KiB")];
/// `--quick` runs 1/4 of each workload unless a scale is given.
pub const QUICK_SCALE: &str = "0.25";
/// The quick grid's sweeps (the cache-size grid is always whole).
pub const QUICK_SWEEP_WORKLOADS: &[&str] = &["ycsb-a", "pr"];
pub const QUICK_HOST_SHARES: &[u32] = &[0, 10, 30, 50, 80];

/// UniMem §4 as data.
#[derive(Debug, Clone)]
pub struct UniMemPlan {
    /// `--scale` as run (the quick grid's when none was given).
    pub scale: String,
    /// Cache size (Fig. 9-11), block size, host share, pairs.
    pub studies: Vec<StudySpec<Experiment>>,
}

/// Scaled caches, then the user's `--set`s (one value each).
fn common_sets(sets: &[String]) -> Result<Vec<(String, String)>, StudyError> {
    let mut common: Vec<(String, String)> = SCALED_CACHES
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for s in sets {
        let (k, v) = key_value(s)?;
        if v.contains(',') {
            return Err(StudyError::Sweep(s.clone()));
        }
        common.push((k, v));
    }
    Ok(common)
}

fn run(
    system: &str,
    input: &Input,
    common: &[(String, String)],
    extra: &[(&str, String)],
    x: String,
) -> RunSpec {
    let mut overrides = common.to_vec();
    overrides.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
    RunSpec {
        scheme: system.to_string(),
        input: input.clone(),
        overrides,
        x,
    }
}

/// The runs of `farmem eval unimem` for `opts`. Fails on a bad `--set`,
/// workload or scale, before anything runs.
pub fn plan(opts: &EvalOptions) -> Result<UniMemPlan, StudyError> {
    let scale = match &opts.scale {
        None if opts.quick => QUICK_SCALE.to_string(),
        None => "1".to_string(),
        Some(s) => s.clone(),
    };
    let scale_v = parse_scale(&scale)?;
    let names: Vec<String> = match &opts.workloads {
        Some(w) => w.clone(),
        None => WORKLOADS.iter().map(|w| w.to_string()).collect(),
    };
    let singles = workload_inputs(&names, scale_v)?;
    let common = common_sets(&opts.sets)?;
    // Fig. 11: the four interleaved, one core each, sharing the local cache.
    let mixed = Input::Multi(
        MIXED_INPUTS
            .iter()
            .map(|w| Input::Workload {
                name: w.to_string(),
                scale: scale_v,
                seed: 1,
            })
            .collect(),
    );
    let cache = cache_size(&singles, &mixed, &common);
    let sweep_inputs: Vec<&Input> = singles
        .iter()
        .filter(|i| !opts.quick || QUICK_SWEEP_WORKLOADS.contains(&i.name().as_str()))
        .collect();
    let hosts = if opts.quick {
        QUICK_HOST_SHARES
    } else {
        HOST_SHARES
    };
    let (block, host, pairs) = sweeps(&sweep_inputs, hosts, &common);
    let studies = [
        (Experiment::CacheSize, cache),
        (Experiment::BlockSize, block),
        (Experiment::HostShare, host),
        (Experiment::Pairs, pairs),
    ]
    .into_iter()
    .map(|(kind, runs)| StudySpec {
        name: kind.name(),
        kind,
        runs,
    })
    .collect();
    Ok(UniMemPlan { scale, studies })
}

/// Fig. 9-11: every system and cache size on each workload, and on the
/// four interleaved (one core each).
fn cache_size(singles: &[Input], mixed: &Input, common: &[(String, String)]) -> Vec<RunSpec> {
    let mut cache = Vec::new();
    for (input, cores) in singles
        .iter()
        .map(|i| (i, None))
        .chain([(mixed, Some(MIXED_INPUTS.len()))])
    {
        for &system in SYSTEMS {
            for pc in CACHE_PERCENTS {
                let mut extra = vec![("local.size", format!("{pc}%"))];
                if let Some(n) = cores {
                    extra.push(("core.count", n.to_string()));
                }
                cache.push(run(system, input, common, &extra, pc.to_string()));
            }
        }
    }
    cache
}

/// Fig. 12-14 at 10% local: block sizes (promotion off), host shares and
/// list pairs on each of `inputs`.
fn sweeps(
    inputs: &[&Input],
    hosts: &[u32],
    common: &[(String, String)],
) -> (Vec<RunSpec>, Vec<RunSpec>, Vec<RunSpec>) {
    let ten = ("local.size", "10%".to_string());
    let (mut block, mut host, mut pairs) = (Vec::new(), Vec::new(), Vec::new());
    for &input in inputs {
        for b in BLOCK_SIZES {
            let extra = [ten.clone(), ("unimem.block_bytes", b.to_string())];
            block.push(run(
                "unimem-nopromote",
                input,
                common,
                &extra,
                b.to_string(),
            ));
        }
        for h in hosts {
            let extra = [ten.clone(), ("unimem.host_share", format!("\"{h}%\""))];
            host.push(run("unimem", input, common, &extra, h.to_string()));
        }
        for p in PAIRS {
            let extra = [ten.clone(), ("unimem.filter.pairs", p.to_string())];
            pairs.push(run("unimem", input, common, &extra, p.to_string()));
        }
    }
    (block, host, pairs)
}

impl UniMemPlan {
    /// Every run, study by study: one batch.
    pub fn runs(&self) -> Vec<RunSpec> {
        self.studies
            .iter()
            .flat_map(|s| s.runs.iter().cloned())
            .collect()
    }

    /// One point per run, from `results` (one per [`UniMemPlan::runs`], in
    /// order). The interleaved run's points are workload [`MIXED`].
    pub fn points(&self, results: &[SimResult]) -> Vec<Point> {
        self.studies
            .iter()
            .flat_map(|s| s.runs.iter().map(move |r| (s.kind, r)))
            .zip(results)
            .map(|((experiment, run), r)| Point {
                experiment,
                system: run.scheme.clone(),
                workload: match run.input {
                    Input::Multi(_) => MIXED.to_string(),
                    _ => run.input.name(),
                },
                x: run.x.clone(),
                amat_miss_ns: r.amat_miss_ns,
                data_amplification: r.data_amplification,
                local_hit_ratio: r.local_hit_ratio,
                remote_bytes_read: r.remote_bytes_read,
                footprint_bytes: r.footprint_bytes,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ConfigBuilder;
    use crate::eval::study::Batch;

    #[test]
    fn the_quick_plan_has_its_points_and_shares_the_repeated_runs() {
        let p = plan(&EvalOptions::quick()).unwrap();
        assert_eq!(p.scale, QUICK_SCALE);
        let per: Vec<(&str, usize)> = p.studies.iter().map(|s| (s.name, s.runs.len())).collect();
        // 6 workloads and the mixed run × 5 systems × 5 sizes; the sweeps
        // on ycsb-a and pr.
        assert_eq!(
            per,
            [
                ("cache-size", 7 * 5 * 5),
                ("block-size", 2 * 6),
                ("host-share", 2 * 5),
                ("pairs", 2 * 5)
            ]
        );
        let runs = p.runs();
        let base = ConfigBuilder::preset(PRESET).unwrap();
        let batch = Batch::new(&base, &runs).unwrap();
        // 512 B, 30% host and 8 pairs are the preset's: the cache-size
        // grid's 10% runs, on each of the two sweep workloads.
        assert_eq!(batch.distinct_len(), runs.len() - 2 * 3);
    }

    #[test]
    fn points_are_named_by_system_workload_and_value() {
        let p = plan(&EvalOptions::quick()).unwrap();
        let runs = p.runs();
        let fake: Vec<SimResult> = runs.iter().map(|_| crate::eval::test_result()).collect();
        let pts = p.points(&fake);
        assert_eq!(pts.len(), runs.len());
        assert!(pts.iter().any(|q| q.workload == MIXED && q.x == "10"));
        let h = pts
            .iter()
            .find(|q| q.experiment == Experiment::HostShare)
            .unwrap();
        assert_eq!(
            (h.system.as_str(), h.workload.as_str(), h.x.as_str()),
            ("unimem", "ycsb-a", "0")
        );
    }

    #[test]
    fn a_bad_set_is_refused_before_any_run() {
        let mut o = EvalOptions::quick();
        o.sets = vec!["unimem.block_bytes=128,256".into()];
        assert!(matches!(plan(&o), Err(StudyError::Sweep(_))));
        o.sets = vec!["unimem.block_bytes".into()];
        assert!(matches!(plan(&o), Err(StudyError::NotKeyValue(_))));
        // A value the config refuses: planned, refused by the batch.
        o.sets = vec!["unimem.block_bytes=100".into()];
        let runs = plan(&o).unwrap().runs();
        let base = ConfigBuilder::preset(PRESET).unwrap();
        assert!(Batch::new(&base, &runs).is_err());
    }
}
