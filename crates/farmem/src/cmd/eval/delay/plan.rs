//! What one `farmem eval delay` runs: its flags, the programs, delays and
//! parts they pick, and the progress every run reports to.

use std::time::Duration;

use anyhow::Context;
use farmem_core::ByteSize;
use farmem_policy::delay::DelayModel;
use indicatif::ProgressBar;

use super::programs::{Program, Shape};
use crate::cmd::eval::Args;

/// `farmem eval delay`'s own flags.
#[derive(clap::Args)]
#[group(id = "DelayFlags")]
pub struct Flags {
    /// eval delay: injected delays of the program sweeps, comma-separated
    /// (a `steps:` model keeps its own commas) [default:
    /// none,1us,2us,5us,20us,50us,100us,200us; --quick:
    /// none,5us,20us,50us,100us,200us]
    #[arg(long)]
    pub delays: Option<crate::cmd::DelayModels>,
    /// eval delay: which parts, comma-separated: validation, programs,
    /// variance, resilience, contention, live [default: all]
    #[arg(long, value_delimiter = ',')]
    pub parts: Vec<String>,
    /// eval delay: the Graph500 graph's scale (2^SCALE vertices) [default:
    /// the largest that fits the footprint]
    #[arg(long)]
    pub graph_scale: Option<u32>,
    /// eval delay: Graph500 edges per vertex.
    #[arg(long, default_value_t = 16)]
    pub edge_factor: u32,
}

pub(super) const PARTS: [&str; 6] = [
    "validation",
    "programs",
    "variance",
    "resilience",
    "contention",
    "live",
];
const DELAYS: &str = "none,1us,2us,5us,20us,50us,100us,200us";
const QUICK_DELAYS: &str = "none,5us,20us,50us,100us,200us";
/// The resilience study's delays (the paper's attach broke at 4 ms).
pub(super) const RESILIENCE: [&str; 3] = ["1ms", "4ms", "10ms"];

/// Everything one evaluation runs.
pub struct Plan {
    pub(super) quick: bool,
    pub(super) programs: Vec<Program>,
    pub(super) delays: Vec<DelayModel>,
    pub(super) shape: Shape,
    /// Local memory of every far run: a quarter of the footprint.
    pub(super) local_mem: u64,
    pub(super) parts: Vec<&'static str>,
    /// A run past this is stopped and counted as hung.
    pub(super) limit: Duration,
    pub(super) bar: ProgressBar,
}

impl Plan {
    pub(super) fn new(args: &Args) -> anyhow::Result<Self> {
        let f = &args.delay;
        let quick = args.quick;
        let programs = match &args.workloads {
            Some(list) => crate::cmd::eval::parse_list(list, Program::parse)?,
            None => Program::ALL.to_vec(),
        };
        let delays = match &f.delays {
            Some(d) => d.0.clone(),
            None => DelayModel::parse_list(if quick { QUICK_DELAYS } else { DELAYS })?,
        };
        let parts = if f.parts.is_empty() {
            PARTS.to_vec()
        } else {
            f.parts
                .iter()
                .map(|p| {
                    PARTS.into_iter().find(|x| x == p).ok_or_else(|| {
                        anyhow::anyhow!("--parts: unknown part `{p}` ({})", PARTS.join(", "))
                    })
                })
                .collect::<anyhow::Result<_>>()?
        };
        let bytes = footprint(&args.scale, quick)?;
        let shape = Shape {
            bytes,
            passes: if quick { 2 } else { 3 },
            roots: if quick { 4 } else { 8 },
            graph_scale: f.graph_scale,
            edge_factor: f.edge_factor,
            gets: if quick { 4000 } else { 20000 },
        };
        // Checked before any run: a bad flag fails now, not an hour in.
        for p in &programs {
            shape.workload(*p, bytes)?;
            if matches!(p, Program::Bfs | Program::Sssp) {
                crate::cmd::demo::worker::Kind::parse(p.name(), f.graph_scale, f.edge_factor)?;
            }
        }
        let bar = crate::cmd::eval::runs_bar(0);
        Ok(Plan {
            quick,
            programs,
            delays,
            local_mem: (bytes / 4).max(4 << 20),
            shape,
            parts,
            limit: Duration::from_secs(if quick { 300 } else { 900 }),
            bar,
        })
    }

    pub(super) fn has(&self, part: &str) -> bool {
        self.parts.contains(&part)
    }

    pub(super) fn variance_programs(&self) -> Vec<Program> {
        [Program::Redis, Program::Bfs]
            .into_iter()
            .filter(|p| self.programs.contains(p))
            .collect()
    }

    pub(super) fn resilience_programs(&self) -> Vec<Program> {
        [Program::Stream, Program::Bfs]
            .into_iter()
            .filter(|p| self.programs.contains(p))
            .collect()
    }

    /// Says what runs next: on the bar, or a line when stderr is not a
    /// terminal (a log).
    pub(super) fn step(&self, what: String) {
        crate::cmd::eval::step(&self.bar, "delay", what);
    }

    pub(super) fn done(&self) {
        self.bar.inc(1);
    }
}

/// The footprint of each program: 128 MiB times --scale, or the size
/// given (--quick: 32 MiB).
fn footprint(scale: &str, quick: bool) -> anyhow::Result<u64> {
    let base: u64 = if quick { 32 << 20 } else { 128 << 20 };
    let bytes = match scale.parse::<f64>() {
        Ok(f) => {
            anyhow::ensure!(f > 0.0 && f.is_finite(), "--scale must be positive");
            (base as f64 * f) as u64
        }
        Err(_) => scale
            .parse::<ByteSize>()
            .with_context(|| format!("--scale {scale}: a factor (0.5) or a size (256MiB)"))?
            .bytes(),
    };
    anyhow::ensure!(
        bytes >= 8 << 20,
        "--scale {scale}: the footprint must be at least 8MiB"
    );
    Ok(bytes)
}
