//! Fig. 13 over time: IPC per interval of a run with background traffic,
//! and its mean over the quiet and the busy periods.

use std::collections::BTreeMap;

use farmem_workloads::{Access, Scale, Sink};
use rayon::prelude::*;
use serde::Serialize;

use super::points::mean;
use crate::eval::study::{StudyError, key_value};
use crate::{Config, ConfigBuilder, Engine, Input, SimError};

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

/// The timelines a plan runs: each built-in workload of `inputs` under
/// each of `schemes`, one core, with `sets` over the base config.
#[derive(Debug, Clone)]
pub struct TimelinePlan {
    pub inputs: Vec<Input>,
    /// `KEY=VALUE`, one value each.
    pub sets: Vec<String>,
    pub schemes: &'static [&'static str],
    /// The background traffic's period (quiet, then busy).
    pub period_ns: f64,
    pub interval_ns: f64,
}

/// workload → scheme → timeline.
pub type Timelines = BTreeMap<String, BTreeMap<String, Timeline>>;

/// What running a [`TimelinePlan`] gave.
#[derive(Debug, Clone)]
pub enum TimelineRuns {
    Ran(Timelines),
    /// A timeline is of one core's clock: none with several.
    NotOneCore(u32),
}

impl TimelinePlan {
    /// Runs the timelines in parallel (a trace has no scale to rebuild it
    /// at: only built-in workloads have one).
    pub fn run(&self, base: &ConfigBuilder) -> Result<TimelineRuns, StudyError> {
        let mut b = base.clone();
        for s in &self.sets {
            let (k, v) = key_value(s)?;
            b.set(&k, &v)?;
        }
        let cfg = b.build()?;
        if cfg.core.count != 1 {
            return Ok(TimelineRuns::NotOneCore(cfg.core.count));
        }
        let jobs: Vec<(&str, Scale, u64, &str)> = self
            .inputs
            .iter()
            .filter_map(|i| match i {
                Input::Workload { name, scale, seed } => Some((name.as_str(), *scale, *seed)),
                _ => None,
            })
            .flat_map(|(n, sc, seed)| self.schemes.iter().map(move |s| (n, sc, seed, *s)))
            .collect();
        let runs = jobs
            .par_iter()
            .map(|&(w, scale, seed, scheme)| {
                ipc_timeline(&cfg, scheme, w, scale, seed, self.interval_ns)
                    .map(|t| (w.to_string(), scheme.to_string(), t))
                    .map_err(|source| StudyError::Timeline {
                        scheme: scheme.to_string(),
                        workload: w.to_string(),
                        source,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut out = Timelines::new();
        for (w, s, t) in runs {
            out.entry(w).or_default().insert(s, t);
        }
        Ok(TimelineRuns::Ran(out))
    }
}
