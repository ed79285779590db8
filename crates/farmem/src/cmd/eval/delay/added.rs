//! What an injected delay adds to a program's remote faults (`--delay
//! 20us` should add 20 µs), measured within one run: the program runs
//! under `farmem run --link NAME`, whose delay this switches between none
//! and the delay every few milliseconds until the program ends, and the
//! runtime counts its remote faults by the delay in force when each ended
//! (`remote_fault_latency_by_delay` in `--stats-json`). Two separate runs'
//! means differ by more than the 2 µs this is judged to on this machine
//! (another moment of a shared host, other fault windows); phases
//! milliseconds apart share both.
//!
//! Each phase lasts a random time in [`PHASE`], so neither delay keeps
//! company with one part of a program that repeats: with fixed 50 ms
//! phases, STREAM's kernels fell in step with them and its 20 µs phases
//! measured 41 µs *faster* than its undelayed ones.
//!
//! Every remote fault reads its own page alone (`--fault-around 0`), so
//! the two means are of the same work. With windows, they were not: a
//! window stops where the cache has no free room, and faults slowed by
//! the delay leave the evictor further ahead. In one run, BFS's faults
//! read 4.22 pages each under 20 µs against 3.11 under none, and STREAM's
//! 20 µs added 57-60 µs to its mean fault, against 24 µs with one page.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use farmem_net::link::SharedLink;
use farmem_policy::delay::DelayModel;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use super::plan::Plan;
use super::programs::Program;
use super::runs::{Local, Via, far};
use crate::cmd::bench::workload::Workload;

/// The delay switched on and off, in µs: the 20.
pub const DELAY_US: f64 = 20.0;
/// Seeds the phases' lengths, so two runs switch alike.
const PHASE_SEED: u64 = 20;
/// How long a phase lasts, drawn uniformly: long enough that a fault
/// (about 100 µs) rarely spans a switch, short enough that every part of
/// a program sees both delays many times.
const PHASE: std::ops::Range<Duration> = Duration::from_millis(2)..Duration::from_millis(10);

/// `w` on a link of its own whose delay alternates between none and
/// [`DELAY_US`]: its row, with its mean remote fault under each and what the
/// delay added.
pub(super) fn run(plan: &Plan, p: Program, w: &Workload, base: &Local) -> anyhow::Result<Value> {
    let delay = DelayModel::Period {
        gap_ns: (DELAY_US * 1e3) as u64,
    };
    let label = delay.to_string();
    let name = format!("eval-delay-added-{}-{}", p.name(), std::process::id());
    let link = SharedLink::open_or_create(&name, Some(&DelayModel::None))?;
    let stop = Arc::new(AtomicBool::new(false));
    let switcher = {
        let (stop, delay) = (stop.clone(), delay.clone());
        std::thread::spawn(move || -> anyhow::Result<u64> {
            let mut rng = SmallRng::seed_from_u64(PHASE_SEED);
            let mut switches = 0;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(rng.gen_range(PHASE));
                let next = if switches % 2 == 0 {
                    &delay
                } else {
                    &DelayModel::None
                };
                link.set(next)?;
                switches += 1;
            }
            Ok(switches)
        })
    };
    let via = Via {
        one_page_faults: true,
        ..Via::on_link(&name)
    };
    let row = far(plan, p, w, &DelayModel::None, plan.local_mem, via, base);
    stop.store(true, Ordering::Relaxed);
    let switches = switcher
        .join()
        .map_err(|_| anyhow::anyhow!("the delay switcher panicked"))?;
    let _ = std::fs::remove_file(SharedLink::path(&name));
    let mut row = row?;
    let switches = switches?;
    let by = &row["remote_faults_by_delay"];
    let added = |stat: &str| {
        by[label.as_str()][stat]
            .as_f64()
            .zip(by["none"][stat].as_f64())
            .map(|(on, off)| on - off)
    };
    let (added, added_p50) = (added("mean_us"), added("p50_us"));
    row["delay"] = json!(format!(
        "none/{label} by turns of {}-{} ms",
        PHASE.start.as_millis(),
        PHASE.end.as_millis()
    ));
    row["switches"] = json!(switches);
    row["added_us"] = json!(added);
    // The median fault's, beside: what the delay adds to a typical fault,
    // apart from what it does to the tail.
    row["added_p50_us"] = json!(added_p50);
    Ok(row)
}
