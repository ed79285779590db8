//! A paper's evaluation plan as data, and the runner that executes it.
//!
//! A plan is a list of [`StudySpec`]s: each a named set of [`RunSpec`]s
//! (scheme, input, config overrides) and what its paper's summary needs to
//! read the results (`K`: DaeMon's series label, UniMem's figure). The
//! papers' plans are [`daemon::plan`](super::daemon::plan) and
//! [`unimem::plan`](super::unimem::plan); [`Batch`] runs any list of
//! runs in parallel, once per distinct resolved configuration.

use std::collections::HashMap;

use farmem_workloads::Scale;
use rayon::prelude::*;

use crate::config::{ConfigError, sweep_values};
use crate::{Config, ConfigBuilder, Input, SimError, SimResult};

/// One simulation of a plan.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub scheme: String,
    pub input: Input,
    /// `(key, value)` config overrides, applied in order (a later one wins).
    pub overrides: Vec<(String, String)>,
    /// The value the study sweeps at this run as its figures key it (`10`
    /// for 10% local, `512` block bytes); empty where points are keyed by
    /// their overrides instead (DaeMon).
    pub x: String,
}

/// One study of a paper's plan: its name, its runs, and `kind`, what the
/// paper's summary needs to read them.
#[derive(Debug, Clone)]
pub struct StudySpec<K> {
    pub name: &'static str,
    pub kind: K,
    pub runs: Vec<RunSpec>,
}

/// What `farmem eval` parsed, for a paper's plan.
#[derive(Debug, Clone, Default)]
pub struct EvalOptions {
    /// The smaller grid (a first look, CI).
    pub quick: bool,
    /// Built-in workload names; `None`: the paper's.
    pub workloads: Option<Vec<String>>,
    /// `--scale` as given (a factor or a footprint); `None`: scale 1, or
    /// the quick grid's own scale.
    pub scale: Option<String>,
    /// `KEY=VALUE` overrides for every run (one value each).
    pub sets: Vec<String>,
}

impl EvalOptions {
    /// The quick grid, everything else the paper's.
    pub fn quick() -> Self {
        Self {
            quick: true,
            ..Self::default()
        }
    }
}

/// Why a plan could not be made or run.
#[derive(Debug, thiserror::Error)]
pub enum StudyError {
    #[error("--set {0}: expected KEY=VALUE")]
    NotKeyValue(String),
    #[error("--set {0}: sweeps are not supported in eval")]
    Sweep(String),
    #[error("unknown workload `{0}`")]
    UnknownWorkload(String),
    #[error("--workloads: no workload given")]
    NoWorkload,
    #[error("no scheme given")]
    NoScheme,
    #[error("--scale: {0}")]
    Scale(#[source] farmem_workloads::WorkloadError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error("{scheme} on {input}: {source}")]
    Run {
        scheme: String,
        input: String,
        #[source]
        source: SimError,
    },
    #[error("IPC timeline of {scheme} on {workload}: {source}")]
    Timeline {
        scheme: String,
        workload: String,
        #[source]
        source: SimError,
    },
}

/// Splits `KEY=VALUE` (both trimmed).
pub fn key_value(s: &str) -> Result<(String, String), StudyError> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| StudyError::NotKeyValue(s.to_string()))?;
    Ok((k.trim().to_string(), v.trim().to_string()))
}

/// Refuses a `--set` with several values: a plan sweeps its own keys.
pub fn no_sweeps(sets: &[String]) -> Result<(), StudyError> {
    match sets.iter().find(|s| s.contains(',')) {
        Some(s) => Err(StudyError::Sweep(s.clone())),
        None => Ok(()),
    }
}

/// Parses a `--scale` value.
pub fn parse_scale(s: &str) -> Result<Scale, StudyError> {
    s.parse().map_err(StudyError::Scale)
}

/// Built-in workloads by name at `scale`, seed 1.
pub fn workload_inputs(names: &[String], scale: Scale) -> Result<Vec<Input>, StudyError> {
    let inputs = names
        .iter()
        .map(|w| w.trim())
        .filter(|w| !w.is_empty())
        .map(|w| {
            if !farmem_workloads::WORKLOADS.iter().any(|x| x.0 == w) {
                return Err(StudyError::UnknownWorkload(w.to_string()));
            }
            Ok(Input::Workload {
                name: w.to_string(),
                scale,
                seed: 1,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if inputs.is_empty() {
        return Err(StudyError::NoWorkload);
    }
    Ok(inputs)
}

/// Every input × scheme × combination of the `KEY=V1,V2` values in `sets`
/// (cartesian; `farmem sim`'s sweeps).
pub fn sweep(
    schemes: &[&str],
    inputs: &[Input],
    sets: &[String],
) -> Result<Vec<RunSpec>, StudyError> {
    let mut combos: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for s in sets {
        let (k, v) = key_value(s)?;
        let (k, values) = (&k, sweep_values(&v));
        combos = combos
            .into_iter()
            .flat_map(|c| {
                values.iter().map(move |val| {
                    let mut c = c.clone();
                    c.push((k.clone(), val.clone()));
                    c
                })
            })
            .collect();
    }
    let mut runs = Vec::new();
    for input in inputs {
        for scheme in schemes.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
            for c in &combos {
                runs.push(RunSpec {
                    scheme: scheme.to_string(),
                    input: input.clone(),
                    overrides: c.clone(),
                    x: String::new(),
                });
            }
        }
    }
    if runs.is_empty() {
        return Err(StudyError::NoScheme);
    }
    Ok(runs)
}

/// What the runner reports while it runs (from every worker thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Records replayed since the previous report of that run.
    Records(u64),
    /// One distinct run finished.
    RunDone,
}

/// Runs checked and deduplicated: every config resolved before any run,
/// so a bad setting costs no simulation time.
pub struct Batch<'a> {
    runs: &'a [RunSpec],
    /// Index into `runs` of each distinct run, and its resolved config.
    distinct: Vec<(usize, Config)>,
    /// Per run, its distinct run.
    of_run: Vec<usize>,
}

impl<'a> Batch<'a> {
    /// Resolves each run's config over `base`. Runs with the same scheme,
    /// input and resolved config are one simulation (at the defaults, a
    /// sweep's default value is another study's run).
    pub fn new(base: &ConfigBuilder, runs: &'a [RunSpec]) -> Result<Self, StudyError> {
        let mut distinct = Vec::new();
        let mut of_run = Vec::with_capacity(runs.len());
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, r) in runs.iter().enumerate() {
            crate::scheme::build(&r.scheme)?;
            let mut b = base.clone();
            for (k, v) in &r.overrides {
                b.set(k, v)?;
            }
            let cfg = b.build()?;
            // The resolved config's JSON is its identity (every field).
            let text = serde_json::to_string(&cfg).map_err(|e| ConfigError {
                source_name: r.scheme.clone(),
                message: e.to_string(),
            })?;
            let key = format!("{}\n{:?}\n{text}", r.scheme, r.input);
            let d = *seen.entry(key).or_insert_with(|| {
                distinct.push((i, cfg));
                distinct.len() - 1
            });
            of_run.push(d);
        }
        Ok(Batch {
            runs,
            distinct,
            of_run,
        })
    }

    /// The runs that will be simulated, one per distinct config.
    pub fn distinct(&self) -> impl Iterator<Item = &RunSpec> {
        self.distinct.iter().map(|(i, _)| &self.runs[*i])
    }

    pub fn distinct_len(&self) -> usize {
        self.distinct.len()
    }

    /// Per run, the index of its distinct run.
    pub fn of_run(&self) -> &[usize] {
        &self.of_run
    }

    /// Simulates the distinct runs in parallel over rayon's pool and
    /// returns one result per run, in order, each with its own overrides.
    pub fn run(&self, progress: &(dyn Fn(Progress) + Sync)) -> Result<Vec<SimResult>, StudyError> {
        let tick = |n: u64| progress(Progress::Records(n));
        let done =
            self.distinct
                .par_iter()
                .map(|(i, cfg)| {
                    let r = &self.runs[*i];
                    let res = crate::simulate_with_progress(cfg, &r.scheme, &r.input, &tick)
                        .map_err(|source| StudyError::Run {
                            scheme: r.scheme.clone(),
                            input: r.input.name(),
                            source,
                        })?;
                    progress(Progress::RunDone);
                    Ok(res)
                })
                .collect::<Result<Vec<_>, StudyError>>()?;
        Ok(self
            .runs
            .iter()
            .zip(&self.of_run)
            .map(|(r, &d)| {
                let mut res = done[d].clone();
                res.overrides = r.overrides.iter().cloned().collect();
                res
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pr() -> Input {
        Input::Workload {
            name: "pr".into(),
            scale: Scale::Factor(0.01),
            seed: 1,
        }
    }

    fn run(scheme: &str, sets: &[(&str, &str)]) -> RunSpec {
        RunSpec {
            scheme: scheme.into(),
            input: pr(),
            overrides: sets
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            x: String::new(),
        }
    }

    #[test]
    fn runs_with_the_same_resolved_config_share_a_simulation() {
        let base = ConfigBuilder::preset("unimem").unwrap();
        let ten = ("local.size", "10%");
        let runs = [
            run("unimem-nopromote", &[ten]),
            // 512 B and 8 pairs are the preset's: the same simulation.
            run("unimem-nopromote", &[ten, ("unimem.block_bytes", "512")]),
            run("unimem-nopromote", &[ten, ("unimem.block_bytes", "256")]),
            run("unimem", &[ten, ("unimem.filter.pairs", "8")]),
            run("unimem", &[ten]),
            // Another scheme on the same config is another run.
            run("kona", &[ten]),
        ];
        let b = Batch::new(&base, &runs).unwrap();
        assert_eq!(b.of_run(), [0, 0, 1, 2, 2, 3]);
        let schemes: Vec<&str> = b.distinct().map(|r| r.scheme.as_str()).collect();
        assert_eq!(
            schemes,
            ["unimem-nopromote", "unimem-nopromote", "unimem", "kona"]
        );
    }

    #[test]
    fn a_bad_setting_or_scheme_is_an_error_before_any_run() {
        let base = ConfigBuilder::preset("unimem").unwrap();
        let bad = [run("unimem", &[("unimem.block_bytes", "100")])];
        assert!(matches!(
            Batch::new(&base, &bad),
            Err(StudyError::Config(_))
        ));
        let unknown = [run("no-such-scheme", &[])];
        assert!(matches!(
            Batch::new(&base, &unknown),
            Err(StudyError::Sim(_))
        ));
    }

    #[test]
    fn shared_runs_keep_their_own_overrides() {
        let base = ConfigBuilder::preset("daemon").unwrap();
        let tiny = Input::Workload {
            name: "stream".into(),
            scale: Scale::Factor(0.002),
            seed: 1,
        };
        let mut a = run("remote", &[]);
        a.input = tiny.clone();
        let mut b = run("remote", &[("daemon.codec", "lz")]);
        b.input = tiny;
        let runs = [a, b];
        let batch = Batch::new(&base, &runs).unwrap();
        assert_eq!(batch.distinct_len(), 1);
        let done = std::sync::atomic::AtomicUsize::new(0);
        let res = batch
            .run(&|p| {
                if p == Progress::RunDone {
                    done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            })
            .unwrap();
        assert_eq!(done.into_inner(), 1);
        assert_eq!(res.len(), 2);
        assert_eq!(res[0].sim_time_ns, res[1].sim_time_ns);
        assert!(res[0].overrides.is_empty());
        assert_eq!(res[1].overrides["daemon.codec"], "lz");
    }

    #[test]
    fn sweeps_expand_and_single_sets_are_checked() {
        let sets = vec!["link.bw_factor=1/2,1/4".to_string(), "core.mlp=2".into()];
        let runs = sweep(&["remote", "daemon"], &[pr()], &sets).unwrap();
        assert_eq!(runs.len(), 4);
        assert_eq!(
            runs[1].overrides[0],
            ("link.bw_factor".into(), "1/4".into())
        );
        assert!(matches!(no_sweeps(&sets), Err(StudyError::Sweep(_))));
        assert!(matches!(
            sweep(&["remote"], &[pr()], &["nokey".into()]),
            Err(StudyError::NotKeyValue(_))
        ));
        assert!(matches!(
            workload_inputs(&["nope".into()], Scale::Factor(1.0)),
            Err(StudyError::UnknownWorkload(_))
        ));
    }
}
