//! `farmem eval delay`: ThymesisFlow's delay study (seed 003 §IV-B, §V) on
//! real programs over farmem's own link, our numbers beside the paper's.
//!
//! | part         | the paper                                   | here |
//! |--------------|---------------------------------------------|------|
//! | `validation` | Figs. 2-3: latency linear in PERIOD, bandwidth-delay product constant | `farmem bench delay` (4 KiB reads through the gate) |
//! | `programs`   | §V: STREAM bandwidth, redis, Graph500 BFS/SSSP per delay (Table I) | each program on local memory, then under `farmem run --delay D` at a quarter of its footprint local, for every D |
//! | `added`      | (§III-B: the injected latency reaches the program) | with `programs`: each program once more, one page per fault, its delay switched between none and 20 µs in the run (`added.rs`) |
//! | `variance`   | its next step: delays from distributions, varying in a run | one mean delay as fixed, uniform and exponential, and a step mid-run from twice it to none |
//! | `resilience` | the attach broke at 4 ms                    | 1, 4 and 10 ms: the answer, or the named deadline error |
//! | `contention` | §V-C: MCBN, MCLN                            | `contention.rs` |
//! | `live`       | (its next step: a delay varying in a run)   | `live.rs`: `farmem link set` under a running redis |
//!
//! Every far run's answer is checked against the local run's; a run that
//! answers differently fails the evaluation whatever its speed.

mod added;
mod contention;
mod live;
mod plan;
mod programs;
mod report;
mod runs;

use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use farmem_policy::delay::DelayModel;
use serde_json::{Value, json};

use super::{Args, Outcome};
use crate::cmd::bench::measure;
pub use plan::Flags;
use plan::{Plan, RESILIENCE};
use programs::Program;
use runs::{Via, far, local};

/// The mean delay of the variance study (its step: from twice it to none).
const VARIANCE_MEAN_US: u64 = 50;

/// Runs each part of `plan` will make, for the progress bar.
fn planned(plan: &Plan) -> u64 {
    let p = plan.programs.len() as u64;
    let mut n = 0;
    if plan.has("validation") {
        n += 1;
    }
    if plan.has("programs") {
        n += p * (2 + plan.delays.len() as u64);
    }
    if plan.has("variance") {
        n += plan.variance_programs().len() as u64 * 5;
    }
    if plan.has("resilience") {
        n += plan.resilience_programs().len() as u64 * (1 + RESILIENCE.len() as u64);
    }
    if plan.has("contention") {
        n += contention::RUNS;
    }
    if plan.has("live") && plan.programs.contains(&Program::Redis) {
        n += live::RUNS;
    }
    n
}

pub fn run(args: Args) -> Outcome {
    let plan = Plan::new(&args)?;
    crate::cmd::run::find_preload()?;
    measure::catch_interrupts();
    plan.bar.set_length(planned(&plan));
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
        let (rows, added) = sweep(&plan)?;
        out["programs"] = json!(rows);
        out["added"] = json!(added);
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
    super::finish(&args, &out, report::write, report::print)
}

/// `farmem bench delay` over the paper's range and beyond: its rows and
/// its two checks.
fn validation(plan: &Plan) -> anyhow::Result<Value> {
    plan.step("validation: 4 KiB reads through the gate".into());
    let exe = std::env::current_exe().context("finding the farmem binary")?;
    let mut cmd = Command::new(exe);
    cmd.args(["bench", "delay", "--json"]);
    if plan.quick {
        cmd.args([
            "--gaps",
            "none,5us,20us,100us,150us,200us,300us,500us,1ms,2ms",
        ])
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

/// Every program on local memory, then under each delay: their rows; and
/// once more with the delay switched in the run: what it added.
fn sweep(plan: &Plan) -> anyhow::Result<(Vec<Value>, Vec<Value>)> {
    let (mut rows, mut added) = (Vec::new(), Vec::new());
    for &p in &plan.programs {
        let w = plan.shape.workload(p, plan.shape.bytes)?;
        let base = local(plan, p, &w)?;
        rows.push(base.row.clone());
        for model in &plan.delays {
            rows.push(far(plan, p, &w, model, plan.local_mem, Via::OWN, &base)?);
        }
        added.push(added::run(plan, p, &w, &base)?);
    }
    Ok((rows, added))
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
            let row = far(plan, p, &w, &model, plan.local_mem, Via::OWN, &base)?;
            half = half.or(row["seconds"].as_f64().map(|s| s / 2.0));
            rows.push(row);
        }
        let at = Duration::from_secs_f64(half.unwrap_or(1.0).max(0.01));
        let step: DelayModel =
            format!("steps:0={}us,{}ms=0", 2 * mean, at.as_millis().max(1)).parse()?;
        rows.push(far(plan, p, &w, &step, plan.local_mem, Via::OWN, &base)?);
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
            rows.push(far(plan, p, &w, &model, 4 << 20, Via::OWN, &base)?);
        }
    }
    Ok(rows)
}
