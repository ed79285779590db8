//! `farmem eval faults`: a chaos soak of the real system on loopback.
//!
//! A controller (or `--controllers N` on an etcd the soak starts, one of
//! them leading) and `--memnodes` memory nodes start as children of this
//! binary; `--programs` programs run at once under `farmem run --replicas R
//! --local-mem L`, each this binary's hidden worker (`farmem eval faults
//! --worker`) writing a seeded pattern over `--size` of far memory in a
//! random page order, pass after pass, and checking every page against what
//! it last wrote before overwriting it (and once more at the end). A program
//! that ends is replaced by a new one until the soak is over. Meanwhile
//! memory nodes are, at random (seeded), SIGKILLed and restarted on the same
//! address a few seconds later (empty: a new incarnation), or SIGSTOPped
//! and SIGCONTed a few seconds later, never more than max(R-1, 1) at once.
//! With several controllers the leader is SIGKILLed too, now and then, and
//! restarted on its address a few seconds later (see [`controllers`]); at
//! each such kill one more short program starts, to show that new runs
//! start while the standby takes over.
//!
//! A program whose every copy of some data was lost before a copy could be
//! made again stops with exit 74, counted as stopped with data lost. A byte
//! read back different from the one written is counted apart: that number
//! must be 0.

mod chaos;
mod children;
mod controllers;
mod report;
mod worker;

use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;
use farmem_core::ByteSize;
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

use super::Args;
use crate::cmd::Outcome;
use crate::cmd::local::LocalRack;
use chaos::{Fault, Node, NodeState};
use controllers::{Elected, Rack};

/// Flags of `farmem eval faults` (ignored by the other evaluations).
#[derive(clap::Args)]
#[group(id = "FaultsFlags")]
pub struct Flags {
    /// faults: length of the soak in minutes [default: 10; --quick: 1].
    #[arg(long)]
    pub minutes: Option<f64>,
    /// faults: programs running at once.
    #[arg(long, default_value_t = 3)]
    pub programs: usize,
    /// faults: memory nodes.
    #[arg(long, default_value_t = 4)]
    pub memnodes: usize,
    /// faults: copies of every far byte (farmem run --replicas); at most
    /// max(R-1, 1) nodes are down at once.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=8))]
    pub replicas: u8,
    /// faults: seed of the fault schedule and of the programs' data.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// faults: far memory each program writes and checks.
    #[arg(long, default_value = "96MiB")]
    pub size: ByteSize,
    /// faults: each program's local memory (farmem run --local-mem).
    #[arg(long, default_value = "16MiB")]
    pub local_mem: ByteSize,
    /// faults: passes over its memory a program makes before it exits
    /// and a new one takes its place.
    #[arg(long, default_value_t = 3)]
    pub passes: u32,
    /// faults: a program that reports no progress for this long (a bare
    /// number: seconds; 1 s to 1 h) is hung, killed and counted as a
    /// failure (one reports every 2 MiB, about every 0.1 s, and a lost
    /// node is given up on after 3 s).
    #[arg(long, default_value = "30", value_parser = hang_time)]
    pub hang_secs: Duration,
    /// faults: seconds from one memory node fault to the next at least:
    /// the window in which a lost copy is found (3 s) and made again, so
    /// that with R copies no more than R-1 of a byte are lost before it is
    /// (what R copies promise). 0: faults at the schedule's pace.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=600))]
    pub repair_window: u64,
    /// faults: controllers; 2 or more share their state in an etcd the
    /// soak starts (`etcd` must be on PATH), and the leader is killed
    /// (SIGKILL) and restarted now and then.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=5))]
    pub controllers: u64,
    /// Run one soak program in this process (what `farmem run` executes).
    #[arg(long, hide = true)]
    pub worker: bool,
    /// The worker's time limit (a bare number: ms; 0: none): past it, it
    /// stops writing, checks every page once more and exits.
    #[arg(long, hide = true, default_value = "0", value_parser = crate::cmd::time_ms)]
    pub worker_ms: Duration,
}

/// --hang-secs: a time from 1 s to 1 h.
fn hang_time(s: &str) -> Result<Duration, String> {
    let t = crate::cmd::time_secs(s)?;
    if (Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&t) {
        Ok(t)
    } else {
        Err(format!("{s}: from 1s to 1h"))
    }
}

const PAGE_WORDS: usize = 512;
const PAGE: u64 = 4096;
/// A worker reports every this many pages (2 MiB).
const REPORT_PAGES: usize = 512;
/// Exit status of a worker that read a wrong byte.
const MISMATCH_EXIT: u8 = 3;
/// Exit status of `farmem run` when far memory cannot be had.
const NO_FAR_MEMORY_EXIT: i32 = 70;
/// How long after a fault ends a program's pauses count as its effect.
const EFFECT_WINDOW: Duration = Duration::from_secs(5);

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

pub fn run(args: Args) -> Outcome {
    let f = &args.faults;
    if f.worker {
        return worker::worker(f);
    }
    let minutes = f.minutes.unwrap_or(if args.quick { 1.0 } else { 10.0 });
    anyhow::ensure!(
        minutes.is_finite() && minutes > 0.0 && minutes <= 7.0 * 24.0 * 60.0,
        "--minutes must be positive (at most a week)"
    );
    anyhow::ensure!(f.programs >= 1, "--programs must be at least 1");
    anyhow::ensure!(f.memnodes >= 1, "--memnodes must be at least 1");
    anyhow::ensure!(
        f.memnodes >= usize::from(f.replicas),
        "--replicas {} needs at least as many --memnodes ({})",
        f.replicas,
        f.memnodes
    );
    anyhow::ensure!(f.size.bytes() >= PAGE, "--size must be at least 4KiB");
    anyhow::ensure!(
        f.local_mem.bytes() >= 1 << 20,
        "--local-mem must be at least 1MiB"
    );
    anyhow::ensure!(f.passes >= 1, "--passes must be at least 1");
    crate::cmd::run::find_preload()?;
    Soak::start(&args, minutes)?.run()
}

/// A soak program, running or ended.
struct Program {
    id: u64,
    child: Option<Child>,
    reader: Option<std::thread::JoinHandle<()>>,
    log: PathBuf,
    started: Instant,
    ended: Option<Instant>,
    /// Exit code (a signal as 128+signo), None while it runs or if killed by us.
    code: Option<i32>,
    /// Killed by us after --hang-secs without progress.
    hung: bool,
    verified: u64,
    mismatched: u64,
    /// When each progress line arrived.
    progress: Vec<Instant>,
    /// Started at a leader kill, to time new runs during the takeover.
    probe: bool,
}

struct Soak<'a> {
    args: &'a Args,
    minutes: f64,
    exe: PathBuf,
    logs: PathBuf,
    // Declared in drop order: programs, memory nodes, then the controller.
    programs: Vec<Program>,
    nodes: Vec<Node>,
    rack: Rack,
    /// A controller killed, restarted at the instant.
    ctl_down: Option<(usize, Instant)>,
    /// The leader kill (index in `faults`) whose takeover is awaited.
    awaiting_takeover: Option<usize>,
    tx: mpsc::Sender<(u64, Instant, String)>,
    rx: mpsc::Receiver<(u64, Instant, String)>,
    rng: SmallRng,
    faults: Vec<Fault>,
    next_id: u64,
}

impl<'a> Soak<'a> {
    fn start(args: &'a Args, minutes: f64) -> anyhow::Result<Self> {
        let f = &args.faults;
        // SAFETY: the handler only stores to an atomic. Our children are in
        // process groups of their own, so a Ctrl-C reaches us alone and we
        // stop them; PR_SET_PDEATHSIG stops them if we are killed.
        unsafe {
            libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
            libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        }
        let logs = std::env::temp_dir().join(format!("farmem-faults-{}", std::process::id()));
        std::fs::create_dir_all(&logs)
            .with_context(|| format!("creating the log directory {}", logs.display()))?;
        let exe = std::env::current_exe().context("finding the farmem binary")?;
        let granularity = 128 << 20;
        let rack = match f.controllers {
            1 => Rack::One(LocalRack::start(0, 0, granularity).context("starting the controller")?),
            n => Rack::Elected(
                Elected::start(n as usize, &exe, &logs, granularity)
                    .context("starting the controllers")?,
            ),
        };
        let (tx, rx) = mpsc::channel();
        let mut soak = Self {
            args,
            minutes,
            exe,
            logs,
            programs: Vec::new(),
            nodes: Vec::new(),
            rack,
            ctl_down: None,
            awaiting_takeover: None,
            tx,
            rx,
            rng: SmallRng::seed_from_u64(f.seed),
            faults: Vec::new(),
            next_id: 0,
        };
        for i in 0..f.memnodes {
            let (child, addr, id) = soak.spawn_memnode(i, "127.0.0.1:0")?;
            soak.nodes.push(Node {
                addr,
                id,
                child: Some(child),
                state: NodeState::Up,
                starts: 1,
            });
        }
        Ok(soak)
    }

    fn run(mut self) -> Outcome {
        let args = self.args;
        let f = &args.faults;
        let t0 = Instant::now();
        let soak = Duration::from_secs_f64(self.minutes * 60.0);
        let deadline = t0 + soak;
        let max_down = usize::from(f.replicas.saturating_sub(1)).max(1);
        let bar = ProgressBar::new(soak.as_secs());
        bar.set_style(
            ProgressStyle::with_template("faults [{bar:30}] {pos}/{len} s {msg}")
                .expect("static template")
                .progress_chars("=> "),
        );
        bar.enable_steady_tick(Duration::from_millis(500));
        let mut next_fault = t0 + Duration::from_millis(self.rng.gen_range(2000..=6000));
        let window = Duration::from_secs(f.repair_window);
        let mut last_node_fault: Option<Instant> = None;
        let mut interrupted = false;
        let mut hold = t0;
        loop {
            let now = Instant::now();
            if INTERRUPTED.load(Ordering::SeqCst) {
                interrupted = true;
                break;
            }
            if now >= deadline {
                break;
            }
            self.recover(now, false)?;
            let down = self
                .nodes
                .iter()
                .filter(|n| n.state != NodeState::Up)
                .count();
            self.watch_takeover(now);
            let node_may_fail =
                down < max_down && last_node_fault.is_none_or(|t| now >= t + window);
            if now >= next_fault && (node_may_fail || self.can_kill_leader()) {
                let before = self.faults.len();
                self.inject(now, node_may_fail, deadline)?;
                if self.faults[before..]
                    .iter()
                    .any(|x| x.kind != chaos::Kind::LeaderKill)
                {
                    last_node_fault = Some(now);
                }
                next_fault = now + Duration::from_millis(self.rng.gen_range(4000..=10000));
            }
            let refused = self.refused();
            self.reap();
            self.kill_hung(now);
            if self.refused() > refused {
                // No far memory to be had (too few nodes up): wait a little.
                hold = now + Duration::from_secs(1);
            }
            // Keep --programs running; a program started in the last two
            // seconds could not do anything worth counting.
            while now >= hold
                && self.running() < f.programs
                && deadline.saturating_duration_since(now).as_secs() >= 2
            {
                self.spawn_program(deadline, false)?;
            }
            if let Ok((id, at, line)) = self.rx.recv_timeout(Duration::from_millis(50)) {
                self.handle_line(id, at, &line);
                self.drain();
            }
            bar.set_position(now.duration_since(t0).as_secs());
            bar.set_message(self.status());
        }
        // No more faults: bring every node back, let the programs end
        // (their time limit has passed) or stop them.
        self.recover(Instant::now(), true)?;
        let grace = Instant::now() + Duration::from_secs(120);
        while !interrupted && self.running() > 0 && Instant::now() < grace {
            if INTERRUPTED.load(Ordering::SeqCst) {
                interrupted = true;
                break;
            }
            self.reap();
            self.kill_hung(Instant::now());
            self.watch_takeover(Instant::now());
            if let Ok((id, at, line)) = self.rx.recv_timeout(Duration::from_millis(50)) {
                self.handle_line(id, at, &line);
            }
            bar.set_message(format!("waiting for programs: {}", self.status()));
        }
        let killed = self.stop_programs();
        bar.finish_and_clear();
        let mut report = self.report(t0, max_down, interrupted, killed);
        let bad = report["bytes_mismatched"].as_u64().unwrap_or(0) > 0
            || report["programs"]["failed"].as_u64().unwrap_or(0) > 0
            || report["programs"]["hung"].as_u64().unwrap_or(0) > 0;
        if !bad && std::fs::remove_dir_all(&self.logs).is_ok() {
            // Nothing went wrong that the logs would explain.
            report["logs"] = Value::Null;
        }
        if self.args.json {
            println!("{report}");
        } else {
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
        Ok(if bad || interrupted {
            std::process::ExitCode::FAILURE
        } else {
            std::process::ExitCode::SUCCESS
        })
    }

    /// Kills the programs still running; returns how many.
    fn stop_programs(&mut self) -> usize {
        let mut killed = 0;
        for p in &mut self.programs {
            if let Some(mut c) = p.child.take() {
                let _ = c.kill();
                let _ = c.wait();
                p.ended = Some(Instant::now());
                killed += 1;
            }
            if let Some(r) = p.reader.as_ref()
                && !r.is_finished()
            {
                // The worker may outlive a killed `farmem run` for a moment
                // (PR_SET_PDEATHSIG): do not wait on its pipe here.
                continue;
            }
            if let Some(r) = p.reader.take() {
                let _ = r.join();
            }
        }
        self.drain();
        killed
    }
}

impl Drop for Soak<'_> {
    fn drop(&mut self) {
        self.stop_programs();
        for n in &mut self.nodes {
            if let Some(mut c) = n.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}
