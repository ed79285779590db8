//! ThymesisFlow's contention study (seed 003 §V-C) on one host:
//!
//! - **MCBN** (many compute, borrower network): N STREAM instances, each
//!   under `farmem run --link NAME`, share one throttled link; each should
//!   get about 1/N of it.
//! - **MCLN** (many compute, lender node): one STREAM under `farmem run` on
//!   its own throttled link, beside N-1 STREAMs on local memory (at the
//!   lowest CPU priority on a CPU of their own, see [`loader`]) loading the host its memory node
//!   runs on; its bandwidth should hardly change.
//!
//! Both links are throttled (`rate:`) so that the link, not this 2-core
//! host's CPUs, is what the instances share: unthrottled, four instances
//! are CPU-bound and the study would measure the scheduler. A link's
//! bandwidth is the bytes the instance's runtime fetched and wrote back
//! over its run time.

use std::process::{Child, Stdio};

use farmem_policy::delay::DelayModel;
use serde_json::{Value, json};

use super::plan::Plan;
use super::programs::Program;
use super::runs::{Via, far, local};

/// The shared link's rate: low enough that four instances are link-bound.
const RATE: &str = "rate:40MiB/s";
/// Each instance's footprint, and its local memory.
const BYTES: u64 = 16 << 20;
const LOCAL: u64 = 4 << 20;
const MAX_N: usize = 4;
const PASSES: usize = 3;
/// Runs it makes: one local, 1 + 2 + .. + MAX_N for MCBN, MAX_N for MCLN.
pub const RUNS: u64 = (1 + MAX_N * (MAX_N + 1) / 2 + MAX_N) as u64;

pub fn run(plan: &Plan) -> anyhow::Result<Value> {
    // Passes enough that the instances' start-up skew (each starts its own
    // rack) is small beside their time together.
    let mut shape = plan.shape.clone();
    shape.passes = PASSES;
    let w = shape.workload(Program::Stream, BYTES)?;
    let base = local(plan, Program::Stream, &w)?;
    let model: DelayModel = RATE.parse()?;
    let stream = |via: Via<'_>| far(plan, Program::Stream, &w, &model, LOCAL, via, &base);
    let mut mcbn = Vec::new();
    for n in 1..=MAX_N {
        let name = format!("eval-delay-{}-{n}", std::process::id());
        let rows = std::thread::scope(|s| {
            let runs: Vec<_> = (0..n)
                .map(|_| s.spawn(|| stream(Via::on_link(&name))))
                .collect();
            runs.into_iter()
                .map(|r| {
                    r.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a run panicked")))
                })
                .collect::<anyhow::Result<Vec<Value>>>()
        });
        let _ = std::fs::remove_file(farmem_net::link::SharedLink::path(&name));
        mcbn.push(shares(n, rows?));
    }
    let mut mcln = Vec::new();
    for n in 1..=MAX_N {
        let mut loaders = Vec::new();
        let started = (1..n).try_for_each(|_| {
            loaders.push(loader(plan)?);
            anyhow::Ok(())
        });
        let row = started.and_then(|()| stream(Via::OWN));
        for mut l in loaders {
            let _ = l.kill();
            let _ = l.wait();
        }
        let row = row?;
        mcln.push(json!({"n": n, "local_instances": n - 1, "remote": with_rate(row)}));
    }
    let alone = mcln.first().and_then(|r| r["remote"]["link_mb_s"].as_f64());
    for r in &mut mcln {
        let change = r["remote"]["link_mb_s"]
            .as_f64()
            .zip(alone)
            .map(|(x, a)| x / a - 1.0);
        r["change_from_alone"] = json!(change);
    }
    Ok(json!({
        "link": RATE,
        "instance_bytes": BYTES,
        "instance_local_mem_bytes": LOCAL,
        "what": "STREAM instances (three passes) on a link throttled to the rate; link_mb_s: an instance's fetched and written-back bytes over its run time; MCBN: N instances on one shared link; MCLN: one on its own link beside N-1 on local memory",
        "mcbn": mcbn,
        "mcln": mcln,
    }))
}

/// A STREAM on local memory that runs until killed: the MCLN load. On
/// the last CPU, at the lowest priority: on the paper's testbed the
/// lender's STREAMs run on the lender's cores and contend with the
/// borrower only for the lender's memory; here both share one host, and
/// the load must not take the remote instance's CPU instead.
fn loader(plan: &Plan) -> anyhow::Result<Child> {
    use std::os::unix::process::CommandExt;
    let mut shape = plan.shape.clone();
    shape.passes = 100_000;
    let w = shape.workload(Program::Stream, BYTES)?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut cmd = w.program();
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if cpus > 1 {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpus - 1, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
            }
            libc::setpriority(libc::PRIO_PROCESS, 0, 19);
            Ok(())
        });
    }
    Ok(cmd.spawn()?)
}

/// A run's link bandwidth.
fn with_rate(mut row: Value) -> Value {
    let bytes = row["bytes_fetched"].as_f64().unwrap_or(0.0)
        + row["bytes_written_back"].as_f64().unwrap_or(0.0);
    let secs = row["seconds"].as_f64().unwrap_or(0.0);
    row["link_mb_s"] = json!((secs > 0.0).then(|| bytes / secs / 1e6));
    row
}

/// N instances on one link: each one's bandwidth and share of their sum.
fn shares(n: usize, rows: Vec<Value>) -> Value {
    let rows: Vec<Value> = rows.into_iter().map(with_rate).collect();
    let total: f64 = rows.iter().filter_map(|r| r["link_mb_s"].as_f64()).sum();
    let share: Vec<Option<f64>> = rows
        .iter()
        .map(|r| {
            r["link_mb_s"]
                .as_f64()
                .filter(|_| total > 0.0)
                .map(|x| x / total)
        })
        .collect();
    // None if any instance has no bandwidth to share.
    let worst = share
        .iter()
        .map(|s| s.map(|s| (s * n as f64 - 1.0).abs()))
        .collect::<Option<Vec<f64>>>()
        .map(|d| d.into_iter().fold(0.0, f64::max));
    json!({
        "n": n,
        "total_link_mb_s": total,
        "shares": share,
        "max_deviation_from_fair": worst,
        "instances": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_each_instances_part_of_the_link() {
        let row = |bytes: u64, secs: f64| json!({"bytes_fetched": bytes, "bytes_written_back": 0, "seconds": secs});
        let v = shares(2, vec![row(30_000_000, 1.0), row(10_000_000, 1.0)]);
        assert_eq!(v["total_link_mb_s"], 40.0);
        assert_eq!(v["shares"], json!([0.75, 0.25]));
        assert_eq!(v["max_deviation_from_fair"], 0.5);
        // A run with no time has no bandwidth: no share to judge; nor
        // have runs that moved nothing.
        let v = shares(1, vec![row(1, 0.0)]);
        assert!(v["max_deviation_from_fair"].is_null());
        let v = shares(2, vec![row(0, 1.0), row(0, 1.0)]);
        assert!(v["max_deviation_from_fair"].is_null());
    }
}
