//! `farmem bench fuzz`: a structured random harness (no nightly toolchain,
//! so no cargo-fuzz) over the frame reader and message decoder and over
//! each daemon's request handler called in-process with every role of
//! peer. Inputs are random bytes and mutations of valid frames of every
//! message kind; each runs under `catch_unwind`, and a panic or a broken
//! contract (a decoded message that does not survive re-encoding, a
//! handler reply that is not exactly one well-formed frame for the
//! request) stops the run with the input in hex and a non-zero exit.

mod inputs;
mod targets;

use std::cell::{Cell, RefCell};
use std::io::IsTerminal;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rand::SeedableRng;
use rand::rngs::SmallRng;

use crate::cmd::Outcome;
use targets::{Daemon, FrameRig, Rig, ServiceRig, Tally};

/// Fuzz the frame decoder and the daemons' request handlers.
#[derive(clap::Args)]
pub struct Args {
    /// What to fuzz.
    #[arg(long, value_enum, default_value_t = Target::All)]
    target: Target,
    /// Inputs per target.
    #[arg(long, default_value_t = 1_000_000)]
    inputs: u64,
    /// Seed of the input generator (each worker derives its own).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Worker threads per target (default: the cores, at most 2).
    #[arg(long)]
    threads: Option<usize>,
    /// Print one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    Frame,
    Memnode,
    Controller,
    All,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Frame => "frame",
            Target::Memnode => "memnode",
            Target::Controller => "controller",
            Target::All => "all",
        }
    }

    fn rig(self) -> anyhow::Result<Box<dyn Rig>> {
        Ok(match self {
            Target::Frame | Target::All => Box::new(FrameRig::new()),
            Target::Memnode => Box::new(ServiceRig::new(Daemon::MemNode)?),
            Target::Controller => Box::new(ServiceRig::new(Daemon::Controller)?),
        })
    }
}

/// Inputs between two fresh handler states (tables would grow otherwise).
const RESET_EVERY: u64 = 20_000;
/// Inputs between two progress updates.
const BATCH: u64 = 1024;

/// An input that panicked or broke a contract.
#[derive(Debug, Clone)]
pub struct Finding {
    pub target: &'static str,
    pub kind: &'static str,
    pub what: String,
    pub input: String,
    pub hex: String,
}

/// One target's run.
pub struct TargetRun {
    pub tally: Tally,
    pub elapsed: Duration,
    pub finding: Option<Finding>,
}

thread_local! {
    static IN_FUZZ: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Panics on fuzz workers are kept (message and backtrace) for the report
/// instead of printed; others go to the usual hook.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_FUZZ.with(Cell::get) {
                let bt = std::backtrace::Backtrace::force_capture();
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{info}\n{bt}")));
            } else {
                default(info);
            }
        }));
    });
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs `n` inputs of `target` on this thread, stopping early on a finding
/// (here or, through `stop`, on another worker).
fn worker(
    target: Target,
    seed: u64,
    n: u64,
    stop: &AtomicBool,
    bar: &ProgressBar,
) -> anyhow::Result<(Tally, Option<Finding>)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut rig = target.rig()?;
    let mut tally = Tally::default();
    let mut input = Vec::new();
    IN_FUZZ.with(|f| f.set(true));
    let mut finding = None;
    for i in 0..n {
        if i % BATCH == 0 && i > 0 {
            bar.inc(BATCH);
            if stop.load(Ordering::Relaxed) {
                break;
            }
        }
        if i % RESET_EVERY == RESET_EVERY - 1 {
            rig.reset()?;
        }
        input.clear();
        rig.input(&mut rng, &mut input);
        tally.inputs += 1;
        let outcome = catch_unwind(AssertUnwindSafe(|| rig.run(&mut rng, &input, &mut tally)));
        let (kind, what) = match outcome {
            Ok(Ok(())) => continue,
            Ok(Err(broken)) => ("contract", broken),
            Err(_) => (
                "panic",
                LAST_PANIC
                    .with(|p| p.borrow_mut().take())
                    .unwrap_or_default(),
            ),
        };
        finding = Some(Finding {
            target: target.name(),
            kind,
            what,
            input: rig.describe(&input),
            hex: hex(&input),
        });
        stop.store(true, Ordering::Relaxed);
        break;
    }
    IN_FUZZ.with(|f| f.set(false));
    Ok((tally, finding))
}

/// Runs `inputs` inputs of one target over `threads` workers.
pub fn fuzz_target(
    target: Target,
    inputs: u64,
    seed: u64,
    threads: usize,
    bar: &ProgressBar,
) -> anyhow::Result<TargetRun> {
    install_panic_hook();
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let threads = threads.max(1) as u64;
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|w| {
                let n = inputs / threads + u64::from(w < inputs % threads);
                let seed = seed ^ (w + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ target as u64;
                let stop = &stop;
                s.spawn(move || worker(target, seed, n, stop, bar))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a fuzz worker died")))
            })
            .collect()
    });
    let mut run = TargetRun {
        tally: Tally::default(),
        elapsed: start.elapsed(),
        finding: None,
    };
    for r in results {
        let (tally, finding) = r?;
        run.tally.merge(&tally);
        run.finding = run.finding.or(finding);
    }
    Ok(run)
}

fn target_json(run: &TargetRun) -> serde_json::Value {
    let t = &run.tally;
    let secs = run.elapsed.as_secs_f64();
    serde_json::json!({
        "inputs": t.inputs,
        "seconds": secs,
        "inputs_per_sec": t.inputs as f64 / secs.max(1e-9),
        "accepted": t.accepted,
        "decode_errors": t.decode_errors,
        "decode_errors_by_kind": t.decode_errors_by_kind,
        "refused": t.refusals(),
        "refusals_by_code": t.refusals_by_code,
        "replies_by_op": t.replies_by_op,
        "panics": u64::from(run.finding.as_ref().is_some_and(|f| f.kind == "panic")),
        "contract_violations": u64::from(run.finding.as_ref().is_some_and(|f| f.kind == "contract")),
    })
}

fn progress(target: Target, inputs: u64) -> ProgressBar {
    let bar = ProgressBar::new(inputs);
    if !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg} ({per_sec})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(target.name());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

fn report_finding(f: &Finding) {
    eprintln!(
        "farmem: fuzz {}: {} on {}\n{}\ninput (hex): {}",
        f.target, f.kind, f.input, f.what, f.hex
    );
}

pub fn run(args: Args) -> Outcome {
    anyhow::ensure!(args.inputs > 0, "--inputs must be at least 1");
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(2)));
    let targets = match args.target {
        Target::All => vec![Target::Frame, Target::Memnode, Target::Controller],
        t => vec![t],
    };
    let mut rows = serde_json::Map::new();
    let mut finding = None;
    for t in targets {
        let bar = progress(t, args.inputs);
        let run = fuzz_target(t, args.inputs, args.seed, threads, &bar)?;
        bar.finish_and_clear();
        let row = target_json(&run);
        if !args.json {
            eprintln!("farmem: fuzz {:<10} {row}", t.name());
        }
        rows.insert(t.name().into(), row);
        if let Some(f) = run.finding {
            report_finding(&f);
            finding = Some(f);
            break;
        }
    }
    let report = serde_json::json!({
        "benchmark": "fuzz",
        "what": "structured random inputs (noise, and byte-level mutations of valid frames of every message kind) through the frame reader and Msg::decode, and through each daemon's Service::handle in-process from every role of peer; each under catch_unwind",
        "seed": args.seed,
        "threads": threads,
        "targets": rows,
        "finding": finding.as_ref().map(|f| serde_json::json!({
            "target": f.target, "kind": f.kind, "what": f.what, "input": f.input, "hex": f.hex,
        })),
    });
    if args.json {
        println!("{report}");
    }
    Ok(if finding.is_some() {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quick(target: Target) -> TargetRun {
        let run = fuzz_target(target, 20_000, 7, 1, &ProgressBar::hidden()).unwrap();
        if let Some(f) = &run.finding {
            panic!("{f:?}");
        }
        assert_eq!(run.tally.inputs, 20_000);
        assert!(run.tally.accepted > 200, "{:?}", run.tally);
        assert!(run.tally.decode_errors > 2000, "{:?}", run.tally);
        run
    }

    #[test]
    fn the_frame_target_decodes_and_refuses_without_panicking() {
        let run = quick(Target::Frame);
        for kind in ["Truncated", "UnknownOp", "Trailing", "FrameTooLarge"] {
            assert!(
                run.tally.decode_errors_by_kind.contains_key(kind),
                "{:?}",
                run.tally
            );
        }
    }

    #[test]
    fn the_memnode_target_reaches_granted_reads_and_writes() {
        let t = quick(Target::Memnode).tally;
        for op in ["ReadOk", "LogAck", "Done", "StatsOk"] {
            assert!(t.replies_by_op.contains_key(op), "{t:?}");
        }
        for code in ["Unauthorized", "OutOfRange", "NotOwner", "BadRequest"] {
            assert!(t.refusals_by_code.contains_key(code), "{t:?}");
        }
    }

    #[test]
    fn the_controller_target_allocates_releases_and_refuses() {
        let t = quick(Target::Controller).tally;
        for op in ["AllocOk", "Done", "NodesOk", "Registered"] {
            assert!(t.replies_by_op.contains_key(op), "{t:?}");
        }
        for code in ["Unauthorized", "NoCapacity", "NotOwner", "BadRequest"] {
            assert!(t.refusals_by_code.contains_key(code), "{t:?}");
        }
    }
}
