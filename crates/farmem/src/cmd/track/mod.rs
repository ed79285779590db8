//! `farmem track`: Kona's KTracker (seed 001 §4.4, §5.3) on a live process
//! farmem does not host: every interval, the bytes its writable memory
//! changed, and what a tracker at 64 B, 256 B, 1 KiB and 4 KiB granularity
//! would have moved for them — the dirty data amplification of Kona's
//! Table 2 and Figure 6.

mod diff;
mod scan;

use std::os::fd::AsFd;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use self::diff::{Dirty, GRANULARITIES};
use self::scan::Tracker;
use super::Outcome;

/// Kona's Table 2: amplification at 4 KiB pages and 64 B lines.
const KONA_TABLE2: [(&str, f64, f64); 6] = [
    ("Redis-Rand", 31.36, 1.48),
    ("Redis-Seq", 2.76, 1.08),
    ("Linear Regression", 2.31, 1.22),
    ("Page Rank", 4.38, 1.47),
    ("Label Propagation", 8.14, 1.85),
    ("VoltDB", 3.74, 1.17),
];

/// Measure a running program's dirty data amplification, as Kona's KTracker.
///
/// Every interval it reads the program's resident writable pages, compares
/// them with the previous interval's copy and reports the bytes that
/// changed and, per tracking granularity, how many bytes a tracker of that
/// size would have had to move: 4 KiB is a page-based system (write faults),
/// 64 B is Kona's cache-line tracking. Bytes written with the value they
/// held are not seen, so "changed" is a lower bound on written.
///
/// Examples:
///   farmem track --pid 1234 --interval 1s --duration 30s
///   farmem track --json -- redis-server --port 7777
#[derive(clap::Args)]
pub struct Args {
    /// The process to track (root, or the right to ptrace it).
    #[arg(long, conflicts_with = "command", required_unless_present = "command")]
    pid: Option<i32>,
    /// Time between scans: Kona's window is 1s.
    #[arg(long, default_value = "1s", value_parser = crate::cmd::time_secs)]
    interval: Duration,
    /// Stop after this long (default: when the process exits).
    #[arg(long, value_parser = crate::cmd::time_secs)]
    duration: Option<Duration>,
    /// Print one JSON object on stdout (a launched program's output goes
    /// to stderr then).
    #[arg(long)]
    json: bool,
    /// A program to launch and track until it exits.
    #[arg(last = true)]
    command: Vec<String>,
}

pub fn run(args: Args) -> Outcome {
    anyhow::ensure!(
        args.interval >= Duration::from_millis(10),
        "--interval must be at least 10ms"
    );
    let mut child = match args.command.split_first() {
        Some((prog, rest)) => Some(launch(prog, rest, args.json)?),
        None => None,
    };
    let pid = match (&child, args.pid) {
        (Some(c), _) => c.id() as i32,
        (None, Some(pid)) => pid,
        (None, None) => anyhow::bail!("give --pid PID or a command after --"),
    };
    let mut tracker = Tracker::new(pid);
    tracker
        .scan()
        .with_context(|| format!("reading the memory of process {pid}"))?;
    let t0 = Instant::now();
    let mut rows = Vec::new();
    let mut total = Dirty::default();
    let mut status = None;
    loop {
        std::thread::sleep(args.interval);
        if let Some(c) = child.as_mut()
            && let Some(s) = c.try_wait()?
        {
            status = Some(s);
            break;
        }
        let started = Instant::now();
        let Ok(s) = tracker.scan() else {
            break; // the process is gone
        };
        total.merge(&s.dirty);
        rows.push(json!({
            "t_s": t0.elapsed().as_secs_f64(),
            "dirty_bytes": s.dirty.bytes,
            "tracked_bytes": by_granularity(|i| json!(s.dirty.units[i] * GRANULARITIES[i] as u64)),
            "amplification": amplification(&s.dirty),
            "resident_pages": s.pages,
            "new_pages": s.new_pages,
            "scan_ms": started.elapsed().as_secs_f64() * 1e3,
        }));
        if !args.json {
            eprintln!("{}", human_row(&rows[rows.len() - 1]));
        }
        if args.duration.is_some_and(|d| t0.elapsed() >= d) {
            break;
        }
    }
    let report = report(&args, pid, &rows, &total);
    if args.json {
        println!("{report}");
    } else {
        print_overall(&report);
    }
    Ok(match status {
        Some(s) if !s.success() => ExitCode::from(s.code().unwrap_or(1).clamp(1, 255) as u8),
        _ => ExitCode::SUCCESS,
    })
}

fn launch(prog: &str, rest: &[String], json: bool) -> anyhow::Result<Child> {
    let mut cmd = Command::new(prog);
    cmd.args(rest);
    if json {
        // stdout carries the one JSON object.
        cmd.stdout(Stdio::from(std::io::stderr().as_fd().try_clone_to_owned()?));
    }
    let child = cmd.spawn().with_context(|| format!("starting {prog}"))?;
    wait_for_exec(child.id());
    Ok(child)
}

/// Waits (briefly) until the child runs its own program rather than the
/// copy of ours it starts as, so the first scan does not take our memory
/// for its.
fn wait_for_exec(pid: u32) {
    let ours = std::fs::read_link("/proc/self/exe").ok();
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        match std::fs::read_link(format!("/proc/{pid}/exe")) {
            Ok(exe) if Some(&exe) != ours.as_ref() => return,
            Err(_) => return,
            Ok(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// A JSON object keyed by granularity in bytes.
fn by_granularity(f: impl Fn(usize) -> Value) -> Value {
    let map: serde_json::Map<String, Value> = GRANULARITIES
        .iter()
        .enumerate()
        .map(|(i, g)| (g.to_string(), f(i)))
        .collect();
    Value::Object(map)
}

fn amplification(d: &Dirty) -> Value {
    let a = d.amplification();
    by_granularity(|i| json!(a[i]))
}

fn report(args: &Args, pid: i32, rows: &[Value], total: &Dirty) -> Value {
    let a = total.amplification();
    let page_vs_line = match (a[0], a[GRANULARITIES.len() - 1]) {
        (Some(line), Some(page)) if line > 0.0 => Some(page / line),
        _ => None,
    };
    json!({
        "tool": "track",
        "what": "Kona's KTracker: bytes of the process's writable memory that changed per interval, and the bytes a tracker at each granularity (bytes) would move for them; amplification = tracked / changed",
        "pid": pid,
        "command": args.command,
        "interval_s": args.interval.as_secs_f64(),
        "intervals": rows,
        "overall": {
            "dirty_bytes": total.bytes,
            "tracked_bytes": by_granularity(|i| json!(total.units[i] * GRANULARITIES[i] as u64)),
            "amplification": amplification(total),
            "page_vs_line": page_vs_line,
        },
        "kona_table2": KONA_TABLE2
            .iter()
            .map(|(app, page, line)| (app.to_string(), json!({"4096": page, "64": line})))
            .collect::<serde_json::Map<_, _>>(),
    })
}

fn fmt_amp(v: &Value) -> String {
    v.as_f64().map_or("-".into(), |x| format!("{x:.2}x"))
}

fn human_row(row: &Value) -> String {
    let a = &row["amplification"];
    format!(
        "t={:>6.1}s changed {:>10} B  amplification 64B {:>8} 256B {:>8} 1KiB {:>8} 4KiB {:>8}  ({} pages, {:.0} ms scan)",
        row["t_s"].as_f64().unwrap_or(0.0),
        row["dirty_bytes"],
        fmt_amp(&a["64"]),
        fmt_amp(&a["256"]),
        fmt_amp(&a["1024"]),
        fmt_amp(&a["4096"]),
        row["resident_pages"],
        row["scan_ms"].as_f64().unwrap_or(0.0),
    )
}

fn print_overall(report: &Value) {
    let o = &report["overall"];
    let a = &o["amplification"];
    println!(
        "overall: {} bytes changed; amplification 64B {}, 256B {}, 1KiB {}, 4KiB {}; page relative to line {}",
        o["dirty_bytes"],
        fmt_amp(&a["64"]),
        fmt_amp(&a["256"]),
        fmt_amp(&a["1024"]),
        fmt_amp(&a["4096"]),
        fmt_amp(&o["page_vs_line"]),
    );
    println!("Kona's Table 2 (Pin, bytes written):   4KiB     64B");
    for (app, page, line) in KONA_TABLE2 {
        println!("  {app:<20} {page:>12.2}x {line:>6.2}x");
    }
}
