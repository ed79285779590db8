//! One run of a program, on local memory or under `farmem run --delay`,
//! as a row: how it ended, what it measured, and whether it answered as
//! on local memory.

use std::process::Command;

use anyhow::Context;
use farmem_policy::delay::DelayModel;
use serde_json::{Value, json};

use super::plan::Plan;
use super::programs::{self, Program};
use crate::cmd::bench::delay::ProgramRun;
use crate::cmd::bench::measure;
use crate::cmd::bench::workload::Workload;

/// A program's local run: its result and measures, the baseline of every
/// far run of it.
pub(super) struct Local {
    result: Option<String>,
    pub(super) row: Value,
}

pub(super) fn local(plan: &Plan, p: Program, w: &Workload) -> anyhow::Result<Local> {
    plan.step(format!("{} on local memory", p.name()));
    let m = crate::cmd::eval::local_run(w, plan.limit, p.name())?;
    let (result, measured) = programs::read(p, w, &m.stdout);
    anyhow::ensure!(result.is_some(), "{} printed no result", p.name());
    plan.done();
    let mut row = json!({"program": p.name(), "delay": "local", "outcome": "ok", "seconds": m.seconds, "identical": true});
    merge(&mut row, &measured);
    Ok(Local { result, row })
}

/// How a far run reaches its memory node.
#[derive(Debug, Clone, Copy)]
pub(super) struct Via<'a> {
    /// A shared link by name (`farmem run --link`), else a gate of its own.
    pub link: Option<&'a str>,
    /// `--fault-around 0`: every remote fault reads its own page alone.
    pub one_page_faults: bool,
}

impl Via<'static> {
    /// A gate of the run's own, windows as `farmem run` takes them.
    pub const OWN: Self = Self {
        link: None,
        one_page_faults: false,
    };
}

impl<'a> Via<'a> {
    /// The shared link `name`.
    pub fn on_link(name: &'a str) -> Self {
        Self {
            link: Some(name),
            ..Via::OWN
        }
    }
}

/// `w` under `farmem run --delay model` (`via` a shared link if given): a
/// row of how it ended, what it measured, its faults, and whether it
/// answered as `base` did.
pub(super) fn far(
    plan: &Plan,
    p: Program,
    w: &Workload,
    model: &DelayModel,
    local_mem: u64,
    via: Via<'_>,
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
    if let Some(name) = via.link {
        cmd.args(["--link", name]);
    }
    if via.one_page_faults {
        cmd.args(["--fault-around", "0"]);
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
