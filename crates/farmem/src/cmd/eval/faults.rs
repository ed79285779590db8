//! `farmem eval faults`: a chaos soak of the real system on loopback.
//!
//! A controller and `--memnodes` memory nodes start as children of this
//! binary; `--programs` programs run at once under `farmem run --replicas R
//! --local-mem L`, each this binary's hidden worker (`farmem eval faults
//! --worker`) writing a seeded pattern over `--size` of far memory in a
//! random page order, pass after pass, and checking every page against what
//! it last wrote before overwriting it (and once more at the end). A program
//! that ends is replaced by a new one until the soak is over. Meanwhile
//! memory nodes are, at random (seeded), SIGKILLed and restarted on the same
//! address a few seconds later (empty: a new incarnation), or SIGSTOPped
//! and SIGCONTed a few seconds later, never more than max(R-1, 1) at once.
//! The controller is never touched (there is no leader election yet).
//!
//! The controller does not re-create lost copies yet, so a program that
//! lived through a node's loss holds one copy fewer from then on, and a
//! later loss can take its last one: it then stops with exit 74, counted as
//! stopped with data lost. A byte read back different from the one written
//! is counted apart: that number must be 0.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use farmem_core::ByteSize;
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use super::Args;
use crate::cmd::Outcome;
use crate::cmd::local::LocalRack;

/// Flags of `farmem eval faults` (ignored by the other evaluations).
#[derive(clap::Args)]
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
    /// faults: a program that reports no progress for this many seconds
    /// is hung, killed and counted as a failure (one reports every 2 MiB,
    /// about every 0.1 s, and a lost node is given up on after 3 s).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub hang_secs: u64,
    /// Run one soak program in this process (what `farmem run` executes).
    #[arg(long, hide = true)]
    pub worker: bool,
    /// The worker's time limit in milliseconds (0: none): past it, it stops
    /// writing, checks every page once more and exits.
    #[arg(long, hide = true, default_value_t = 0)]
    pub worker_ms: u64,
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
        return worker(f);
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

/// What a soak program does: seeded writes and checks, progress on stdout
/// as `progress VERIFIED MISMATCHED PASS` lines, `done VERIFIED MISMATCHED`
/// at the end.
fn worker(f: &Flags) -> Outcome {
    // SAFETY: prctl on ourselves: die with `farmem run`, our parent.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    let start = Instant::now();
    let deadline = (f.worker_ms > 0).then(|| start + Duration::from_millis(f.worker_ms));
    let pages = (f.size.bytes() / PAGE) as usize;
    let mut mem = vec![0u64; pages * PAGE_WORDS];
    const UNWRITTEN: u32 = u32::MAX;
    let mut version = vec![UNWRITTEN; pages];
    let mut rng = SmallRng::seed_from_u64(f.seed);
    let mut order: Vec<u32> = (0..pages as u32).collect();
    let mut out = std::io::stdout().lock();
    let (mut verified, mut mismatched, mut shown) = (0u64, 0u64, 0u32);
    let mut check = |p: usize, page: &[u64], v: u32, verified: &mut u64, mismatched: &mut u64| {
        for (w, &got) in page.iter().enumerate() {
            let want = pattern(f.seed, v, p, w);
            if got != want {
                let diff = got ^ want;
                *mismatched += (0..8).filter(|b| (diff >> (8 * b)) & 0xff != 0).count() as u64;
                if shown < 10 {
                    shown += 1;
                    eprintln!(
                        "farmem faults worker: MISMATCH at page {p} word {w}: wrote {want:016x} (pass {v}), read {got:016x}"
                    );
                }
            }
        }
        *verified += PAGE;
    };
    let late = |i: usize| deadline.is_some_and(|d| i.is_multiple_of(64) && Instant::now() >= d);
    'passes: for pass in 0..f.passes {
        order.shuffle(&mut rng);
        for (i, &p) in order.iter().enumerate() {
            if late(i) {
                break 'passes;
            }
            let p = p as usize;
            let page = &mut mem[p * PAGE_WORDS..(p + 1) * PAGE_WORDS];
            if version[p] != UNWRITTEN {
                check(p, page, version[p], &mut verified, &mut mismatched);
            }
            for (w, x) in page.iter_mut().enumerate() {
                *x = pattern(f.seed, pass, p, w);
            }
            version[p] = pass;
            if (i + 1).is_multiple_of(REPORT_PAGES) {
                writeln!(out, "progress {verified} {mismatched} {pass}")?;
                out.flush()?;
            }
        }
    }
    // Every page once more, in another order.
    order.shuffle(&mut rng);
    for (i, &p) in order.iter().enumerate() {
        let p = p as usize;
        if version[p] != UNWRITTEN {
            let page = &mem[p * PAGE_WORDS..(p + 1) * PAGE_WORDS];
            check(p, page, version[p], &mut verified, &mut mismatched);
        }
        if (i + 1).is_multiple_of(REPORT_PAGES) {
            writeln!(out, "progress {verified} {mismatched} {}", f.passes)?;
            out.flush()?;
        }
    }
    writeln!(out, "done {verified} {mismatched}")?;
    out.flush()?;
    Ok(if mismatched > 0 {
        std::process::ExitCode::from(MISMATCH_EXIT)
    } else {
        std::process::ExitCode::SUCCESS
    })
}

/// Word `w` of page `p` as written in pass `v`.
fn pattern(seed: u64, v: u32, p: usize, w: usize) -> u64 {
    let mut z = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (u64::from(v) + 1).wrapping_mul(0xD1B5_4A32_D192_ED03)
        ^ (p as u64 * PAGE_WORDS as u64 + w as u64);
    // splitmix64's finaliser.
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A memory node of the soak.
struct Node {
    addr: String,
    /// The controller's number for it (what the runtime's messages name).
    id: Option<u64>,
    child: Option<Child>,
    state: NodeState,
    starts: u32,
}

#[derive(Clone, Copy, PartialEq)]
enum NodeState {
    Up,
    /// SIGKILLed; restarted on the same address at the instant.
    Killed(Instant),
    /// SIGSTOPped; SIGCONTed at the instant.
    Stopped(Instant),
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    KillRestart,
    StopCont,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::KillRestart => "kill_restart",
            Kind::StopCont => "stop_cont",
        }
    }
}

/// One injected fault.
struct Fault {
    kind: Kind,
    node: usize,
    at: Instant,
    /// When the node was back (SIGCONT, or the restarted node serving).
    back: Option<Instant>,
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
}

struct Soak<'a> {
    args: &'a Args,
    minutes: f64,
    exe: PathBuf,
    logs: PathBuf,
    // Declared in drop order: programs, memory nodes, then the controller.
    programs: Vec<Program>,
    nodes: Vec<Node>,
    rack: LocalRack,
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
        let rack = LocalRack::start(0, 0, 128 << 20).context("starting the controller")?;
        let (tx, rx) = mpsc::channel();
        let mut soak = Self {
            args,
            minutes,
            exe: std::env::current_exe().context("finding the farmem binary")?,
            logs,
            programs: Vec::new(),
            nodes: Vec::new(),
            rack,
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

    /// Starts memory node `i` listening on `listen`; its stderr goes to
    /// its log. Returns it and the address it serves.
    fn spawn_memnode(
        &self,
        i: usize,
        listen: &str,
    ) -> anyhow::Result<(Child, String, Option<u64>)> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.logs.join(format!("memnode-{i}.log")))?;
        let mut cmd = Command::new(&self.exe);
        cmd.args(["memnode", "--listen", listen, "--capacity", "4GiB"])
            .arg("--controller")
            .arg(&self.rack.controller)
            .arg("--token-file")
            .arg(self.rack.token_file())
            .arg("--json")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log);
        own_group_dying_with_us(&mut cmd);
        let mut child = cmd.spawn().context("starting `farmem memnode`")?;
        let stdout = child.stdout.take().expect("stdout was piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_default();
        let v = serde_json::from_str::<Value>(line.trim()).unwrap_or_default();
        match v["addr"].as_str() {
            Some(a) => Ok((child, a.to_string(), v["node"].as_u64())),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "memory node {i} did not start on {listen} (see {})",
                    self.logs.display()
                )
            }
        }
    }

    /// Starts a soak program under `farmem run`, told to end by `deadline`.
    fn spawn_program(&mut self, deadline: Instant) -> anyhow::Result<()> {
        let args = self.args;
        let f = &args.faults;
        let id = self.next_id;
        self.next_id += 1;
        let log_path = self.logs.join(format!("program-{id}.log"));
        let log = File::create(&log_path)?;
        let ms = deadline
            .saturating_duration_since(Instant::now())
            .as_millis() as u64;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("run")
            .arg("--controller")
            .arg(&self.rack.controller)
            .arg("--token-file")
            .arg(self.rack.token_file())
            .arg(format!("--replicas={}", f.replicas))
            .arg(format!("--local-mem={}", f.local_mem.bytes()))
            .arg("--")
            .arg(&self.exe)
            .args(["eval", "faults", "--worker"])
            .arg(format!("--size={}", f.size.bytes()))
            .arg(format!("--passes={}", f.passes))
            .arg(format!("--seed={}", program_seed(f.seed, id)))
            .arg(format!("--worker-ms={}", ms.max(1)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log);
        own_group_dying_with_us(&mut cmd);
        let mut child = cmd.spawn().context("starting `farmem run`")?;
        let stdout = child.stdout.take().expect("stdout was piped");
        let tx = self.tx.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send((id, Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        self.programs.push(Program {
            id,
            child: Some(child),
            reader: Some(reader),
            log: log_path,
            started: Instant::now(),
            ended: None,
            code: None,
            hung: false,
            verified: 0,
            mismatched: 0,
            progress: Vec::new(),
        });
        Ok(())
    }

    fn handle_line(&mut self, id: u64, at: Instant, line: &str) {
        let mut it = line.split_whitespace();
        let (Some("progress" | "done"), Some(v), Some(m)) = (it.next(), it.next(), it.next())
        else {
            return;
        };
        if let Some(p) = self.programs.iter_mut().find(|p| p.id == id) {
            p.verified = v.parse().unwrap_or(p.verified);
            p.mismatched = m.parse().unwrap_or(p.mismatched);
            p.progress.push(at);
        }
    }

    fn drain(&mut self) {
        while let Ok((id, at, line)) = self.rx.try_recv() {
            self.handle_line(id, at, &line);
        }
    }

    /// Collects programs that ended; returns how many.
    fn reap(&mut self) -> usize {
        let mut ended = 0;
        for i in 0..self.programs.len() {
            let Some(child) = self.programs[i].child.as_mut() else {
                continue;
            };
            let Ok(Some(status)) = child.try_wait() else {
                continue;
            };
            let now = Instant::now();
            let p = &mut self.programs[i];
            p.child = None;
            p.ended = Some(now);
            p.code = Some(exit_code(status));
            if let Some(r) = p.reader.take() {
                let _ = r.join();
            }
            ended += 1;
        }
        if ended > 0 {
            self.drain();
        }
        ended
    }

    /// Kills the programs that made no progress for --hang-secs.
    fn kill_hung(&mut self, now: Instant) {
        let hang = Duration::from_secs(self.args.faults.hang_secs);
        for p in &mut self.programs {
            let last = p.progress.last().copied().unwrap_or(p.started);
            if now.duration_since(last) < hang {
                continue;
            }
            if let Some(mut c) = p.child.take() {
                let _ = c.kill();
                let _ = c.wait();
                p.ended = Some(now);
                p.hung = true;
            }
        }
    }

    fn refused(&self) -> usize {
        self.programs
            .iter()
            .filter(|p| p.code == Some(NO_FAR_MEMORY_EXIT))
            .count()
    }

    fn running(&self) -> usize {
        self.programs.iter().filter(|p| p.child.is_some()).count()
    }

    fn inject(&mut self, now: Instant) {
        let up: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].state == NodeState::Up)
            .collect();
        let Some(&node) = up.choose(&mut self.rng) else {
            return;
        };
        let kind = if self.rng.gen_bool(0.5) {
            Kind::KillRestart
        } else {
            Kind::StopCont
        };
        let n = &mut self.nodes[node];
        let pid = n.child.as_ref().map(|c| c.id() as libc::pid_t).unwrap_or(0);
        match kind {
            Kind::KillRestart => {
                let mut child = n.child.take().expect("an up node runs");
                let _ = child.kill();
                let _ = child.wait();
                let after = self.rng.gen_range(2000..=5000);
                n.state = NodeState::Killed(now + Duration::from_millis(after));
            }
            Kind::StopCont => {
                // SAFETY: kill(2) on our own child.
                unsafe { libc::kill(pid, libc::SIGSTOP) };
                let after = self.rng.gen_range(1000..=5000);
                n.state = NodeState::Stopped(now + Duration::from_millis(after));
            }
        }
        self.faults.push(Fault {
            kind,
            node,
            at: now,
            back: None,
        });
    }

    /// Brings back the nodes whose fault is over (all of them with `all`).
    fn recover(&mut self, now: Instant, all: bool) -> anyhow::Result<()> {
        for i in 0..self.nodes.len() {
            match self.nodes[i].state {
                NodeState::Stopped(t) if all || now >= t => {
                    if let Some(c) = &self.nodes[i].child {
                        // SAFETY: kill(2) on our own child.
                        unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGCONT) };
                    }
                }
                NodeState::Killed(t) if all || now >= t => {
                    let addr = self.nodes[i].addr.clone();
                    // The old socket may linger a moment: try for a while.
                    let mut tries = 0;
                    let child = loop {
                        match self.spawn_memnode(i, &addr) {
                            Ok((c, _, id)) => {
                                self.nodes[i].id = id;
                                break c;
                            }
                            Err(_) if tries < 20 => {
                                tries += 1;
                                std::thread::sleep(Duration::from_millis(250));
                            }
                            Err(e) => return Err(e),
                        }
                    };
                    self.nodes[i].child = Some(child);
                    self.nodes[i].starts += 1;
                }
                _ => continue,
            }
            self.nodes[i].state = NodeState::Up;
            let back = Instant::now();
            if let Some(f) = self
                .faults
                .iter_mut()
                .rev()
                .find(|f| f.node == i && f.back.is_none())
            {
                f.back = Some(back);
            }
        }
        Ok(())
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
            if now >= next_fault && down < max_down {
                self.inject(now);
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
                self.spawn_program(deadline)?;
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

    fn status(&self) -> String {
        let count = |c: i32| self.programs.iter().filter(|p| p.code == Some(c)).count();
        let verified: u64 = self.programs.iter().map(|p| p.verified).sum();
        let mismatched: u64 = self.programs.iter().map(|p| p.mismatched).sum();
        format!(
            "{} faults, programs {} started, {} finished, {} stopped (74), {} verified, {} mismatched",
            self.faults.len(),
            self.programs.len(),
            count(0),
            count(farmem_runtime::LOST_EXIT_CODE),
            ByteSize(verified),
            mismatched
        )
    }

    fn report(&self, t0: Instant, max_down: usize, interrupted: bool, killed: usize) -> Value {
        let f = &self.args.faults;
        let lost = farmem_runtime::LOST_EXIT_CODE;
        let code = |p: &Program| p.code;
        let finished = self.programs.iter().filter(|p| code(p) == Some(0)).count();
        let stopped: Vec<&Program> = self
            .programs
            .iter()
            .filter(|p| code(p) == Some(lost))
            .collect();
        let refused = self
            .programs
            .iter()
            .filter(|p| code(p) == Some(NO_FAR_MEMORY_EXIT))
            .count();
        let failed: Vec<&Program> = self
            .programs
            .iter()
            .filter(
                |p| matches!(code(p), Some(c) if c != 0 && c != lost && c != NO_FAR_MEMORY_EXIT),
            )
            .collect();
        let mut by_kind: HashMap<&str, usize> = HashMap::new();
        for x in &self.faults {
            *by_kind.entry(x.kind.name()).or_default() += 1;
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        // Each fault's effect on each program that ran through it: the
        // longest pause between its progress reports from the fault until
        // EFFECT_WINDOW after the node was back.
        let mut pauses: HashMap<&str, Vec<f64>> = HashMap::new();
        let mut windows = Vec::new();
        for x in &self.faults {
            let end = x.back.unwrap_or(x.at) + EFFECT_WINDOW;
            windows.push((x.at, end));
            for p in &self.programs {
                if p.started >= x.at || p.ended.is_some_and(|e| e <= end) {
                    continue;
                }
                if let Some(gap) = longest_gap(&p.progress, x.at, end) {
                    pauses.entry(x.kind.name()).or_default().push(ms(gap));
                }
            }
        }
        // Pauses with no fault near: the programs' own rhythm.
        let mut quiet = Vec::new();
        for p in &self.programs {
            for w in p.progress.windows(2) {
                if !windows.iter().any(|&(a, b)| w[1] > a && w[0] < b) {
                    quiet.push(ms(w[1] - w[0]));
                }
            }
        }
        let node = |i: usize| self.nodes[i].id;
        // A program stopped for lost data: the last fault before its exit,
        // and the last one on the node its message names.
        let stops: Vec<Value> = stopped
            .iter()
            .filter_map(|p| {
                let end = p.ended?;
                let message = lost_line(&p.log);
                let named = message.as_deref().and_then(named_node);
                let before = |x: &&Fault| x.at <= end;
                let fault = |x: &Fault| {
                    json!({
                        "kind": x.kind.name(),
                        "node": node(x.node),
                        "ms_before_exit": ms(end - x.at).round(),
                    })
                };
                let last = self.faults.iter().rev().find(before);
                let on_named = self
                    .faults
                    .iter()
                    .rev()
                    .filter(before)
                    .find(|x| named.is_some() && node(x.node) == named);
                Some(json!({
                    "program": p.id,
                    "exit_s": (ms(end - t0) / 1e3 * 10.0).round() / 10.0,
                    "node_named": named,
                    "last_fault": last.map(fault),
                    "last_fault_on_named_node": on_named.map(fault),
                    "message": message,
                }))
            })
            .collect();
        let hung: Vec<&Program> = self.programs.iter().filter(|p| p.hung).collect();
        let failures: Vec<Value> = failed
            .iter()
            .chain(&hung)
            .map(|p| {
                let last = p.progress.last().copied().unwrap_or(p.started);
                let fault = self.faults.iter().rev().find(|x| x.at <= last);
                json!({
                    "program": p.id,
                    "exit": p.code,
                    "hung": p.hung,
                    "last_progress_s": (ms(last - t0) / 1e3 * 10.0).round() / 10.0,
                    "verified_bytes": p.verified,
                    "last_fault_before": fault.map(|x| json!({
                        "kind": x.kind.name(),
                        "node": node(x.node),
                        "ms_before_last_progress": ms(last - x.at).round(),
                    })),
                    "log": p.log.display().to_string(),
                })
            })
            .collect();
        let verified: u64 = self.programs.iter().map(|p| p.verified).sum();
        let mismatched: u64 = self.programs.iter().map(|p| p.mismatched).sum();
        let mut pause_stats = serde_json::Map::new();
        for kind in [Kind::KillRestart, Kind::StopCont] {
            let v = pauses.remove(kind.name()).unwrap_or_default();
            pause_stats.insert(kind.name().into(), summary(v));
        }
        pause_stats.insert("no_fault".into(), summary(quiet));
        json!({
            "eval": "faults",
            "config": {
                "minutes": self.minutes,
                "programs": f.programs,
                "memnodes": f.memnodes,
                "replicas": f.replicas,
                "max_nodes_down": max_down,
                "seed": f.seed,
                "far_bytes_per_program": f.size.bytes() / PAGE * PAGE,
                "local_mem_bytes": f.local_mem.bytes(),
                "passes_per_program": f.passes,
                "hang_secs": f.hang_secs,
                "quick": self.args.quick,
                "network": "loopback 127.0.0.1, all processes on this machine",
            },
            "wall_seconds": t0.elapsed().as_secs_f64(),
            "interrupted": interrupted,
            "faults": {
                "total": self.faults.len(),
                "kill_restart": by_kind.get("kill_restart").copied().unwrap_or(0),
                "stop_cont": by_kind.get("stop_cont").copied().unwrap_or(0),
                "log": self.faults.iter().map(|x| json!({
                    "t_s": (ms(x.at - t0) / 1e3 * 10.0).round() / 10.0,
                    "kind": x.kind.name(),
                    "node": node(x.node),
                    "addr": self.nodes[x.node].addr,
                    "down_ms": x.back.map(|b| ms(b - x.at).round()),
                })).collect::<Vec<_>>(),
            },
            "programs": {
                "started": self.programs.len(),
                "finished": finished,
                "stopped_data_lost": stopped.len(),
                "refused_no_far_memory": refused,
                "failed": failed.len(),
                "hung": hung.len(),
                "killed_at_end": killed,
            },
            "bytes_verified": verified,
            "bytes_mismatched": mismatched,
            "program_pause_ms": {
                "what": "longest gap between a program's progress reports (one per 2 MiB of pages checked or written) from a fault until 5 s after its node was back, per fault and program running through it; no_fault: every gap away from faults",
                "by_fault": Value::Object(pause_stats),
            },
            "stopped_after_fault": stops,
            "failures": failures,
            "memnode_starts": self.nodes.iter().map(|n| n.starts).collect::<Vec<_>>(),
            "logs": self.logs.display().to_string(),
        })
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

/// The longest gap between consecutive instants of `times` that overlaps
/// `[from, to]`; None without an instant after `from`.
fn longest_gap(times: &[Instant], from: Instant, to: Instant) -> Option<Duration> {
    let first = times.partition_point(|&t| t <= from);
    if first == 0 || first == times.len() {
        return None;
    }
    times[first - 1..]
        .windows(2)
        .take_while(|w| w[0] < to)
        .map(|w| w[1] - w[0])
        .max()
}

/// Count, median, p99 and max of `v`.
fn summary(mut v: Vec<f64>) -> Value {
    if v.is_empty() {
        return json!({"n": 0});
    }
    v.sort_by(f64::total_cmp);
    let q = |x: f64| v[((v.len() - 1) as f64 * x).round() as usize].round();
    json!({"n": v.len(), "p50": q(0.5), "p99": q(0.99), "max": q(1.0)})
}

/// The `far memory lost` line a stopped program's runtime printed.
fn lost_line(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines()
        .find(|l| l.contains("far memory lost"))
        .map(|l| l.chars().take(300).collect())
}

/// The controller's number of the node a `far memory lost` line names
/// (`memory node N at ...`).
fn named_node(message: &str) -> Option<u64> {
    let rest = &message[message.find("memory node ")? + "memory node ".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn program_seed(seed: u64, id: u64) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ id.wrapping_add(1)
}

fn exit_code(s: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        _ => 1,
    }
}

/// Puts the child in a process group of its own (a Ctrl-C at the terminal
/// reaches only us, and we stop it) and has it SIGKILLed if we die first.
fn own_group_dying_with_us(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setpgid and prctl are async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::setpgid(0, 0);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_differ_by_pass_page_word_and_seed() {
        let a = pattern(1, 0, 0, 0);
        assert_ne!(a, pattern(1, 1, 0, 0));
        assert_ne!(a, pattern(1, 0, 1, 0));
        assert_ne!(a, pattern(1, 0, 0, 1));
        assert_ne!(a, pattern(2, 0, 0, 0));
        assert_eq!(a, pattern(1, 0, 0, 0));
    }

    #[test]
    fn the_named_node_is_read_from_the_message() {
        let m = "farmem: far memory lost: the far page at 0x1 cannot be read: memory node 12 at 127.0.0.1:1 has not answered";
        assert_eq!(named_node(m), Some(12));
        assert_eq!(named_node("memory node at"), None);
        assert_eq!(named_node("nothing"), None);
    }

    #[test]
    fn the_longest_gap_spans_the_fault() {
        let t = Instant::now();
        let at = |ms: u64| t + Duration::from_millis(ms);
        let times = [at(0), at(100), at(200), at(3200), at(3300)];
        assert_eq!(
            longest_gap(&times, at(150), at(5000)),
            Some(Duration::from_millis(3000))
        );
        assert_eq!(longest_gap(&times, at(4000), at(5000)), None);
        assert_eq!(
            longest_gap(&times, at(3250), at(5000)),
            Some(Duration::from_millis(100))
        );
    }
}
