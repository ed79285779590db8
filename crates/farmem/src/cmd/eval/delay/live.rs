//! The delay changed under a live program (issue 22: `farmem link set`
//! against a running redis): redis under `farmem run --link NAME` answers
//! GETs from one client in short windows; after a few, `farmem link set
//! NAME --delay 500us` raises the link's delay, and the windows show when
//! redis's latency followed.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde_json::{Value, json};

use super::plan::Plan;
use crate::cmd::bench::workload::{self, GetLine};

pub const RUNS: u64 = 1;
const WINDOWS: u32 = 12;
/// Windows before the delay is set.
const BEFORE: usize = 4;
const GETS_PER_WINDOW: u64 = 500;
const SET_TO: &str = "500us";

/// A window: its start (wall clock, ns), GET average latency (ms) and
/// requests per second.
type Window = (u128, f64, f64);

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

pub fn run(plan: &Plan) -> anyhow::Result<Value> {
    plan.step(format!("redis on a live link, set to {SET_TO} mid-run"));
    let name = format!("eval-delay-live-{}", std::process::id());
    let w = workload::redis_windows(plan.shape.bytes, WINDOWS, GETS_PER_WINDOW)?;
    let exe = std::env::current_exe().context("finding the farmem binary")?;
    let mut child = Command::new(&exe)
        .arg("run")
        .args([
            "--local-mem",
            &plan.local_mem.to_string(),
            "--replicas",
            "1",
        ])
        .args([
            "--backend",
            "remote",
            "--link",
            &name,
            "--delay",
            "none",
            "--",
        ])
        .args(&w.argv)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting redis under farmem run --link")?;
    let stderr = child.stderr.take().context("no stderr pipe")?;
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut text);
        text
    });
    // Stopped past the plan's limit, as every run is.
    let pid = child.id();
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let limit = plan.limit;
    let watchdog = std::thread::spawn(move || {
        if stopped.recv_timeout(limit).is_err() {
            // SAFETY: kill has no memory effects; the child is ours.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        }
    });
    let stdout = child.stdout.take().context("no stdout pipe")?;
    let read = read_windows(stdout, &exe, &name);
    if read.is_err() {
        let _ = child.kill();
    }
    let status = child.wait();
    let _ = stop.send(());
    let _ = watchdog.join();
    let errors = errors.join().unwrap_or_default();
    let _ = std::fs::remove_file(farmem_net::link::SharedLink::path(&name));
    let (windows, set_at) = read?;
    let status = status?;
    plan.done();
    anyhow::ensure!(
        status.success() && windows.len() == WINDOWS as usize,
        "redis on a live link: {status}, {} of {WINDOWS} windows:\n{}",
        windows.len(),
        errors.trim_end()
    );
    Ok(summarize(&windows, set_at))
}

/// The windows redis printed, setting the link's delay after the
/// [`BEFORE`]th; with the time of the set.
fn read_windows(
    stdout: std::process::ChildStdout,
    exe: &std::path::Path,
    name: &str,
) -> anyhow::Result<(Vec<Window>, u128)> {
    let mut windows = Vec::new();
    let mut start = None;
    let mut set_at = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading redis's output")?;
        if let Some(ns) = line.strip_prefix("window ") {
            start = ns.trim().parse::<u128>().ok();
        } else if let (Some(get), Some(s)) = (GetLine::parse(&line), start.take()) {
            windows.push((s, get.avg_ms, get.rps));
            if windows.len() == BEFORE {
                let t = now_ns();
                let set = Command::new(exe)
                    .args(["link", "set", name, "--delay", SET_TO])
                    .output()
                    .context("running farmem link set")?;
                anyhow::ensure!(
                    set.status.success(),
                    "farmem link set: {}",
                    String::from_utf8_lossy(&set.stderr)
                );
                set_at = Some(t);
            }
        }
    }
    Ok((windows, set_at.unwrap_or(0)))
}

/// Each window's latency against the time of the set, and how soon after
/// it a window's whole time saw at least half the new delay added.
fn summarize(windows: &[Window], set_at: u128) -> Value {
    let secs = |t: u128| (t as f64 - set_at as f64) / 1e9;
    let rows: Vec<Value> = windows
        .iter()
        .map(|&(s, avg, rps)| {
            json!({"start_s": secs(s), "seconds": GETS_PER_WINDOW as f64 / rps, "avg_ms": avg, "rps": rps})
        })
        .collect();
    let before: Vec<f64> = windows
        .iter()
        .filter(|w| w.0 < set_at)
        .map(|w| w.1)
        .collect();
    let base = before.iter().sum::<f64>() / before.len().max(1) as f64;
    let set_ms: f64 = 0.5;
    // The first window begun after the set whose latency rose by half the
    // new delay: the change was seen by its end.
    let seen = rows
        .iter()
        .filter(|r| r["start_s"].as_f64().is_some_and(|s| s >= 0.0))
        .find(|r| {
            r["avg_ms"]
                .as_f64()
                .is_some_and(|a| a >= base + set_ms / 2.0)
        })
        .and_then(|r| Some(r["start_s"].as_f64()? + r["seconds"].as_f64()?));
    let after: Vec<f64> = windows
        .iter()
        .filter(|w| w.0 >= set_at)
        .map(|w| w.1)
        .collect();
    json!({
        "set_to": SET_TO,
        "what": "redis under farmem run --link, one client's GETs in windows of 500; farmem link set --delay 500us after the fourth; start_s relative to the set",
        "avg_ms_before": base,
        "avg_ms_after": after.iter().sum::<f64>() / after.len().max(1) as f64,
        "seen_within_s": seen,
        "windows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_change_is_seen_by_the_end_of_the_first_slow_window_after_the_set() {
        let s = 1_000_000_000u128;
        // Two windows at 0.1 ms before the set at 10 s; one that began
        // before it; then 0.7 ms from the window at 10.2 s, 0.25 s long.
        let v = summarize(
            &[
                (9 * s, 0.1, 5000.0),
                (9 * s + s / 2, 0.1, 5000.0),
                (10 * s - s / 10, 0.2, 4000.0),
                (10 * s + s / 5, 0.7, 2000.0),
            ],
            10 * s,
        );
        assert!((v["avg_ms_before"].as_f64().unwrap() - 0.4 / 3.0).abs() < 1e-9);
        assert!(
            (v["seen_within_s"].as_f64().unwrap() - 0.45).abs() < 1e-9,
            "{v}"
        );
        assert_eq!(v["windows"].as_array().unwrap().len(), 4);
    }
}
