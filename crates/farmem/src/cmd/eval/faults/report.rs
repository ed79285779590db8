//! The soak's report: faults, programs, bytes verified, and the pauses
//! the faults caused.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use farmem_core::ByteSize;
use serde_json::{Value, json};

use super::chaos::{Fault, Kind};
use super::{EFFECT_WINDOW, NO_FAR_MEMORY_EXIT, PAGE, Program, Soak};

impl Soak<'_> {
    pub(super) fn status(&self) -> String {
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

    pub(super) fn report(
        &self,
        t0: Instant,
        max_down: usize,
        interrupted: bool,
        killed: usize,
    ) -> Value {
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
        // The controller's number of a fault's memory node.
        let node = |x: &Fault| match x.kind {
            Kind::LeaderKill => None,
            _ => self.nodes[x.node].id,
        };
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
                        "node": node(x),
                        "ms_before_exit": ms(end - x.at).round(),
                    })
                };
                let last = self.faults.iter().rev().find(before);
                let on_named = self
                    .faults
                    .iter()
                    .rev()
                    .filter(before)
                    .find(|x| named.is_some() && node(x) == named);
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
                        "node": node(x),
                        "ms_before_last_progress": ms(last - x.at).round(),
                    })),
                    "log": p.log.display().to_string(),
                })
            })
            .collect();
        let verified: u64 = self.programs.iter().map(|p| p.verified).sum();
        let mismatched: u64 = self.programs.iter().map(|p| p.mismatched).sum();
        let mut pause_stats = serde_json::Map::new();
        for kind in [Kind::KillRestart, Kind::StopCont, Kind::LeaderKill] {
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
                "hang_secs": f.hang_secs.as_secs_f64(),
                "repair_window_secs": f.repair_window,
                "controllers": f.controllers,
                "quick": self.args.quick,
                "network": "loopback 127.0.0.1, all processes on this machine",
            },
            "wall_seconds": t0.elapsed().as_secs_f64(),
            "interrupted": interrupted,
            "faults": {
                "total": self.faults.len(),
                "kill_restart": by_kind.get("kill_restart").copied().unwrap_or(0),
                "stop_cont": by_kind.get("stop_cont").copied().unwrap_or(0),
                "leader_kill": by_kind.get("leader_kill").copied().unwrap_or(0),
                "log": self.faults.iter().map(|x| json!({
                    "t_s": (ms(x.at - t0) / 1e3 * 10.0).round() / 10.0,
                    "kind": x.kind.name(),
                    "node": node(x),
                    "addr": self.fault_addr(x),
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
            "controllers": self.controllers_report(),
            "logs": self.logs.display().to_string(),
        })
    }
}

impl Soak<'_> {
    fn fault_addr(&self, x: &Fault) -> String {
        match x.kind {
            Kind::LeaderKill => self
                .rack
                .controller()
                .split(',')
                .nth(x.node)
                .unwrap_or_default()
                .to_string(),
            _ => self.nodes[x.node].addr.clone(),
        }
    }

    /// The leader kills: how soon another controller led, and how soon the
    /// program started at each kill made progress (allocated far memory
    /// from the new leader and wrote 2 MiB to it).
    fn controllers_report(&self) -> Value {
        let ms = |d: Duration| (d.as_secs_f64() * 1e3).round();
        let kills: Vec<&Fault> = self
            .faults
            .iter()
            .filter(|x| x.kind == Kind::LeaderKill)
            .collect();
        let mut takeovers = Vec::new();
        let mut first_progress = Vec::new();
        let mut within = 0;
        let log: Vec<Value> = kills
            .iter()
            .map(|x| {
                let takeover = x.takeover.map(|t| ms(t - x.at));
                takeovers.extend(takeover);
                let probe = x
                    .probe
                    .and_then(|id| self.programs.iter().find(|p| p.id == id && p.probe));
                let progress = probe
                    .and_then(|p| p.progress.first())
                    .map(|&t| ms(t.saturating_duration_since(x.at)));
                first_progress.extend(progress);
                let in_time = progress.is_some_and(|p| p <= NEW_RUN_WITHIN.as_millis() as f64);
                within += usize::from(in_time);
                json!({
                    "controller": x.node,
                    "takeover_ms": takeover,
                    "new_run_first_progress_ms": progress,
                    "new_run_within_5s": in_time,
                    "new_run_exit": probe.and_then(|p| p.code),
                })
            })
            .collect();
        json!({
            "count": self.args.faults.controllers,
            "leader_kills": kills.len(),
            "takeover_ms": summary(takeovers),
            "new_run_first_progress_ms": summary(first_progress),
            "new_runs_within_5s": within,
            "kills": log,
        })
    }
}

/// A run started at a leader kill should make progress within this.
const NEW_RUN_WITHIN: Duration = Duration::from_secs(5);

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

#[cfg(test)]
mod tests {
    use super::*;

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
