//! `farmem eval delay`: ThymesisFlow's delay study (seed 003 §IV-B, §V) on
//! real programs over farmem's own link, our numbers beside the paper's.
//!
//! | part         | the paper                                   | here |
//! |--------------|---------------------------------------------|------|
//! | `validation` | Figs. 2-3: latency linear in PERIOD, bandwidth-delay product constant | `farmem bench delay` (4 KiB reads through the gate) |
//! | `programs`   | §V: STREAM bandwidth, redis, Graph500 BFS/SSSP per delay (Table I) | each program on local memory, then under `farmem run --delay D` at a quarter of its footprint local, for every D |
//! | `variance`   | its next step: delays from distributions, varying in a run | one mean delay as fixed, uniform and exponential, and a step mid-run from twice it to none |
//! | `resilience` | the attach broke at 4 ms                    | 1, 4 and 10 ms: the answer, or the named deadline error |
//! | `contention` | §V-C: MCBN, MCLN                            | `contention.rs` |
//! | `live`       | (its next step: a delay varying in a run)   | `live.rs`: `farmem link set` under a running redis |
//!
//! Every far run's answer is checked against the local run's; a run that
//! answers differently fails the evaluation whatever its speed.

mod contention;
mod live;
mod programs;
mod report;

use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use farmem_core::ByteSize;
use farmem_policy::delay::DelayModel;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use super::{Args, Outcome};
use crate::cmd::bench::delay::ProgramRun;
use crate::cmd::bench::measure;
use crate::cmd::bench::workload::Workload;
use programs::{Program, Shape};

/// `farmem eval delay`'s own flags.
#[derive(clap::Args)]
pub struct Flags {
    /// eval delay: injected delays of the program sweeps, comma-separated
    /// [default: none,1us,2us,5us,20us,50us,100us,200us; --quick:
    /// none,5us,20us,50us,100us,200us]
    #[arg(long, value_delimiter = ',')]
    pub delays: Vec<DelayModel>,
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

const PARTS: [&str; 6] = [
    "validation",
    "programs",
    "variance",
    "resilience",
    "contention",
    "live",
];
const DELAYS: &str = "none,1us,2us,5us,20us,50us,100us,200us";
const QUICK_DELAYS: &str = "none,5us,20us,50us,100us,200us";
/// The mean delay of the variance study (its step: from twice it to none).
const VARIANCE_MEAN_US: u64 = 50;
/// The resilience study's delays (the paper's attach broke at 4 ms).
const RESILIENCE: [&str; 3] = ["1ms", "4ms", "10ms"];

/// Everything one evaluation runs.
pub struct Plan {
    quick: bool,
    programs: Vec<Program>,
    delays: Vec<DelayModel>,
    shape: Shape,
    /// Local memory of every far run: a quarter of the footprint.
    local_mem: u64,
    parts: Vec<&'static str>,
    /// A run past this is stopped and counted as hung.
    limit: Duration,
    bar: ProgressBar,
}

impl Plan {
    fn new(args: &Args) -> anyhow::Result<Self> {
        let f = &args.delay;
        let quick = args.quick;
        let programs = match &args.workloads {
            Some(list) => list
                .split(',')
                .map(str::trim)
                .filter(|w| !w.is_empty())
                .map(Program::parse)
                .collect::<anyhow::Result<Vec<_>>>()?,
            None => Program::ALL.to_vec(),
        };
        let delays = if f.delays.is_empty() {
            let list = if quick { QUICK_DELAYS } else { DELAYS };
            list.split(',').map(str::parse).collect::<Result<_, _>>()?
        } else {
            f.delays.clone()
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
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} runs, {elapsed} {msg}")
                .expect("static template")
                .progress_chars("=> "),
        );
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

    fn has(&self, part: &str) -> bool {
        self.parts.contains(&part)
    }

    /// Runs each part will make, for the progress bar.
    fn runs(&self) -> u64 {
        let p = self.programs.len() as u64;
        let mut n = 0;
        if self.has("validation") {
            n += 1;
        }
        if self.has("programs") {
            n += p * (1 + self.delays.len() as u64);
        }
        if self.has("variance") {
            n += self.variance_programs().len() as u64 * 5;
        }
        if self.has("resilience") {
            n += self.resilience_programs().len() as u64 * (1 + RESILIENCE.len() as u64);
        }
        if self.has("contention") {
            n += contention::RUNS;
        }
        if self.has("live") && self.programs.contains(&Program::Redis) {
            n += live::RUNS;
        }
        n
    }

    fn variance_programs(&self) -> Vec<Program> {
        [Program::Redis, Program::Bfs]
            .into_iter()
            .filter(|p| self.programs.contains(p))
            .collect()
    }

    fn resilience_programs(&self) -> Vec<Program> {
        [Program::Stream, Program::Bfs]
            .into_iter()
            .filter(|p| self.programs.contains(p))
            .collect()
    }

    /// Says what runs next: on the bar, or a line when stderr is not a
    /// terminal (a log).
    fn step(&self, what: String) {
        if self.bar.is_hidden() {
            eprintln!(
                "farmem: eval delay: [{}/{}] {what}",
                self.bar.position() + 1,
                self.bar.length().unwrap_or(0)
            );
        }
        self.bar.set_message(what);
    }

    fn done(&self) {
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

pub fn run(args: Args) -> Outcome {
    let plan = Plan::new(&args)?;
    crate::cmd::run::find_preload()?;
    measure::catch_interrupts();
    plan.bar.set_length(plan.runs());
    let mut out = json!({
        "eval": "delay",
        "what": "ThymesisFlow's delay study (seed 003) on farmem's own link: each program on local memory, then under farmem run --backend remote --delay at a quarter of its footprint local (one memory node, one copy), every answer checked against the local run's",
        "footprint_bytes": plan.shape.bytes,
        "local_mem_bytes": plan.local_mem,
        "delays": plan.delays.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "paper": report::paper(),
    });
    if plan.has("validation") {
        out["validation"] = validation(&plan)?;
    }
    if plan.has("programs") {
        out["programs"] = json!(sweep(&plan)?);
    }
    if plan.has("variance") {
        out["variance"] = json!(variance(&plan)?);
    }
    if plan.has("resilience") {
        out["resilience"] = json!(resilience(&plan)?);
    }
    if plan.has("contention") {
        out["contention"] = contention::run(&plan)?;
    }
    if plan.has("live") && plan.programs.contains(&Program::Redis) {
        out["live"] = live::run(&plan)?;
    }
    plan.bar.finish_and_clear();
    let checks = report::checks(&out);
    let pass = checks.values().all(|c| c["pass"] == json!(true));
    out["checks"] = Value::Object(checks);
    out["pass"] = json!(pass);
    if let Some(dir) = &args.out {
        report::write(dir, &out)?;
    }
    if args.json {
        println!("{out}");
    } else {
        report::print(&out);
    }
    Ok(if pass {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}

/// `farmem bench delay` over the paper's range and beyond: its rows and
/// its two checks.
fn validation(plan: &Plan) -> anyhow::Result<Value> {
    plan.step("validation: 4 KiB reads through the gate".into());
    let exe = std::env::current_exe().context("finding the farmem binary")?;
    let mut cmd = Command::new(exe);
    cmd.args(["bench", "delay", "--json"]);
    if plan.quick {
        cmd.args(["--gaps", "none,5us,20us,100us,150us,200us,300us,500us,1ms"])
            .args(["--iters", "300"]);
    }
    let m = measure::run(&mut cmd, Some(plan.limit))?;
    anyhow::ensure!(
        m.outcome() == "ok",
        "farmem bench delay: {}: {}",
        m.outcome(),
        m.stderr_tail
    );
    let v: Value = serde_json::from_slice(&m.stdout).context("reading bench delay's report")?;
    plan.done();
    Ok(json!({"runs": v["runs"], "checks": v["validation"]}))
}

/// A program's local run: its result and measures, the baseline of every
/// far run of it.
struct Local {
    result: Option<String>,
    row: Value,
}

fn local(plan: &Plan, p: Program, w: &Workload) -> anyhow::Result<Local> {
    plan.step(format!("{} on local memory", p.name()));
    let m = measure::run(&mut w.program(), Some(plan.limit))?;
    anyhow::ensure!(
        m.outcome() == "ok",
        "{} on local memory: {}: {}",
        p.name(),
        m.outcome(),
        m.stderr_tail
    );
    let (result, measured) = programs::read(p, w, &m.stdout);
    anyhow::ensure!(result.is_some(), "{} printed no result", p.name());
    plan.done();
    let mut row = json!({"program": p.name(), "delay": "local", "outcome": "ok", "seconds": m.seconds, "identical": true});
    merge(&mut row, &measured);
    Ok(Local { result, row })
}

/// `w` under `farmem run --delay model` (on the named link if given): a
/// row of how it ended, what it measured, its faults, and whether it
/// answered as `base` did.
fn far(
    plan: &Plan,
    p: Program,
    w: &Workload,
    model: &DelayModel,
    local_mem: u64,
    link: Option<&str>,
    base: &Local,
) -> anyhow::Result<Value> {
    plan.step(format!("{} under --delay {model}", p.name()));
    let exe = std::env::current_exe().context("finding the farmem binary")?;
    let mut cmd = Command::new(exe);
    // Every evicted page on the memory node, so every fault crosses the
    // link (a compressed pool would serve some locally, past the delay).
    cmd.arg("run")
        .args(["--local-mem", &local_mem.to_string(), "--replicas", "1"])
        .args(["--backend", "remote", "--delay", &model.to_string()]);
    if let Some(name) = link {
        cmd.args(["--link", name]);
    }
    let run = ProgramRun::start(w, cmd, Some(plan.limit))?;
    measure::check_interrupted()?;
    let (result, measured) = programs::read(p, w, &run.measured.stdout);
    let outcome = outcome(&run, model, result.as_deref(), base.result.as_deref());
    let mut row = json!({
        "program": p.name(),
        "delay": model.to_string(),
        "outcome": outcome,
        "seconds": run.measured.seconds,
        "identical": outcome == "ok",
        "bytes_fetched": run.stats["bytes_fetched"],
        "bytes_written_back": run.stats["bytes_written_back"],
    });
    if outcome != "ok" && outcome != "named_deadline_error" {
        row["stderr_tail"] = json!(run.measured.stderr_tail);
    }
    merge(&mut row, &measured);
    merge(&mut row, &run.fault_row());
    plan.done();
    Ok(row)
}

/// How a far run ended: `ok` (the local run's answer), `wrong_answer`,
/// `named_deadline_error` (exit 74 with the error naming the delay in
/// force), `timed_out` or `failed`.
fn outcome(run: &ProgramRun, model: &DelayModel, got: Option<&str>, want: Option<&str>) -> String {
    let m = &run.measured;
    if m.timed_out.is_some() {
        return "timed_out".into();
    }
    if run.ok() {
        return if got.is_some() && got == want {
            "ok".into()
        } else {
            "wrong_answer".into()
        };
    }
    let named = format!("an injected delay of {model} is in force");
    if m.status.code() == Some(74) && m.stderr_tail.contains(&named) {
        "named_deadline_error".into()
    } else {
        "failed".into()
    }
}

fn merge(row: &mut Value, more: &Value) {
    if let (Some(r), Some(m)) = (row.as_object_mut(), more.as_object()) {
        for (k, v) in m {
            r.insert(k.clone(), v.clone());
        }
    }
}

/// Every program on local memory, then under each delay.
fn sweep(plan: &Plan) -> anyhow::Result<Vec<Value>> {
    let mut rows = Vec::new();
    for &p in &plan.programs {
        let w = plan.shape.workload(p, plan.shape.bytes)?;
        let base = local(plan, p, &w)?;
        rows.push(base.row.clone());
        for model in &plan.delays {
            rows.push(far(plan, p, &w, model, plan.local_mem, None, &base)?);
        }
    }
    Ok(rows)
}

/// One mean delay drawn three ways, and a step from twice it down to none
/// halfway through the fixed run's time (a step up at that time could
/// come after a run that went faster before it).
fn variance(plan: &Plan) -> anyhow::Result<Vec<Value>> {
    let mean = VARIANCE_MEAN_US;
    let mut rows = Vec::new();
    for p in plan.variance_programs() {
        let w = plan.shape.workload(p, plan.shape.bytes)?;
        let base = local(plan, p, &w)?;
        let mut half = None;
        for spec in [
            format!("{mean}us"),
            format!("uniform:0us..{}us", 2 * mean),
            format!("exp:{mean}us"),
        ] {
            let model: DelayModel = spec.parse()?;
            let row = far(plan, p, &w, &model, plan.local_mem, None, &base)?;
            half = half.or(row["seconds"].as_f64().map(|s| s / 2.0));
            rows.push(row);
        }
        let at = Duration::from_secs_f64(half.unwrap_or(1.0).max(0.01));
        let step: DelayModel =
            format!("steps:0={}us,{}ms=0", 2 * mean, at.as_millis().max(1)).parse()?;
        rows.push(far(plan, p, &w, &step, plan.local_mem, None, &base)?);
    }
    Ok(rows)
}

/// Small programs behind delays of milliseconds: the answer, or the named
/// deadline error, never a hang or a wrong answer. Small, yet four times
/// their local memory: hundreds of faults each wait the delay.
fn resilience(plan: &Plan) -> anyhow::Result<Vec<Value>> {
    let bytes = 16 << 20;
    let mut rows = Vec::new();
    for p in plan.resilience_programs() {
        let mut small = plan.shape.clone();
        small.passes = 1;
        small.roots = 2;
        small.graph_scale = None;
        let w = small.workload(p, bytes)?;
        let base = local(plan, p, &w)?;
        for spec in RESILIENCE {
            let model: DelayModel = spec.parse()?;
            rows.push(far(plan, p, &w, &model, 4 << 20, None, &base)?);
        }
    }
    Ok(rows)
}
