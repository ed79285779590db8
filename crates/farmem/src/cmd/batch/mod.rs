//! `farmem batch JOBS.toml`: xDM's Algorithm 1 (seed 004 §3) on real
//! programs. One rack of limited far memory serves a batch of programs
//! run a few at a time; each gets the backend and fault-around its
//! profile suggests, and `--compare` runs the same batch with one backend
//! for all, in the same invocation, for the makespans side by side.

mod jobs;
mod profile;
mod runner;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use farmem_core::ByteSize;
use farmem_policy::dispatch::batch::{Assignment, Batch};
use farmem_policy::dispatch::{BackendKind, Pressure, Room, SelectConfig};
use serde_json::{Value, json};

use super::Outcome;
use super::bench::measure;
use super::local::LocalRack;
use jobs::Jobs;
use runner::Runner;

/// Run a batch of programs, each on the backend its profile suggests
/// (xDM's Algorithm 1), against one backend for all.
///
/// First each program runs once alone under the compressed pool (the
/// profile): its counters give how often evicted pages are read back, how
/// well they compress and how sequential its faults are, and the rack
/// gives the far memory it holds, which it reserves from then on (plus
/// one slab batch per copy). Then the batch runs `slots` programs at a
/// time in the file's order: a program starts when an instance is free
/// and its backend has room for its reservation, a later one going by
/// when it has to wait. Hot data that compresses goes to the pool, the
/// rest to the rack while it has room; when the rack is full, streams go
/// to the file and random access waits (it runs at twice its time on a
/// file), unless the rack could never hold it. Every run of a program
/// must print what its profile printed; a program the rack could not
/// back (its pages kept local past its limit) fails the batch too.
///
/// --compare runs the same batch, same queue, same room, with each
/// backend for all; rounds take turns. Exit status: 0 when every run of
/// every program succeeded and printed what its profile did, 1 when one
/// did not, 2 for a batch that cannot run (bad file, a profile failing).
#[derive(clap::Args)]
#[command(after_help = format!("A batch file:\n\n{}", jobs::EXAMPLE))]
pub struct Args {
    /// The batch file (TOML; see below).
    #[arg(required_unless_present = "example")]
    jobs: Option<PathBuf>,
    /// Also run the batch with every program on one backend, for each of
    /// these (comma-separated: remote, compressed, auto, file), and print
    /// the makespans side by side.
    #[arg(long, num_args = 0..=1, default_missing_value = "remote,compressed,auto,file")]
    compare: Option<String>,
    /// Runs of each assignment, taking turns (the order rotates every
    /// round); makespans are their medians.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    rounds: u32,
    /// Stop a program that runs longer than this and report it as timed out.
    #[arg(long, default_value = "30m", value_parser = crate::cmd::time_secs)]
    job_timeout: Duration,
    /// Print one JSON object on stdout instead of the tables.
    #[arg(long)]
    json: bool,
    /// Print an example batch file, then exit.
    #[arg(long)]
    example: bool,
}

pub fn run(args: Args) -> Outcome {
    if args.example {
        print!("{}", jobs::EXAMPLE);
        return Ok(ExitCode::SUCCESS);
    }
    let path = args.jobs.as_deref().context("no batch file given")?;
    let jobs = Jobs::load(path)?;
    let statics = match &args.compare {
        Some(list) => parse_statics(list)?,
        None => Vec::new(),
    };
    super::run::find_preload()?;
    measure::catch_interrupts();
    let per_node = (jobs.rack / jobs.memnodes as u64).div_ceil(GRANULE) * GRANULE;
    eprintln!(
        "farmem: batch: a rack of {} memory node(s) of {} each, {} program(s) at a time",
        jobs.memnodes,
        ByteSize(per_node),
        jobs.slots
    );
    let rack = LocalRack::start(jobs.memnodes, per_node, GRANULE)?;
    let runner = Runner::new(&jobs, &rack, args.job_timeout);
    let profiles = runner.profile()?;
    let capacity = Pressure {
        rack: Room::empty(per_node * jobs.memnodes as u64),
        file: Room::empty(jobs.file),
    };
    let features: Vec<_> = profiles.iter().map(|p| p.features).collect();
    let mut assignments = vec![Assignment::Dispatch(SelectConfig::default())];
    assignments.extend(statics.iter().map(|&b| Assignment::Static(b)));
    let mut runs = Vec::new();
    for round in 0..args.rounds {
        let mut order = assignments.clone();
        let turn = round as usize % order.len();
        order.rotate_left(turn);
        for a in order {
            let batch = Batch::new(a, features.clone(), capacity, jobs.slots)
                .map_err(|e| anyhow::anyhow!("{} assignment: {e}", label(a)))?;
            eprintln!(
                "farmem: batch: round {}/{}: {}",
                round + 1,
                args.rounds,
                label(a)
            );
            let mut run = runner.run(batch, &profiles)?;
            run["assignment"] = json!(label(a));
            run["round"] = json!(round + 1);
            runs.push(run);
            measure::check_interrupted()?;
        }
    }
    let report = report(&jobs, &profiles, &assignments, &runs, capacity);
    if args.json {
        println!("{report}");
    } else {
        print_tables(&report);
    }
    let ok = runs.iter().all(|r| r["all_ok"] == json!(true));
    if !ok {
        eprintln!(
            "farmem: batch: some programs failed or printed other than their profile (see `jobs` of each run)"
        );
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The rack's unit of grant.
const GRANULE: u64 = 32 << 20;

fn parse_statics(list: &str) -> anyhow::Result<Vec<BackendKind>> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let b = match name {
            "remote" => BackendKind::Remote,
            "compressed" => BackendKind::Compressed,
            "auto" => BackendKind::Auto,
            "file" => BackendKind::File,
            _ => anyhow::bail!(
                "--compare: unknown backend `{name}` (remote, compressed, auto, file)"
            ),
        };
        anyhow::ensure!(!out.contains(&b), "--compare: `{name}` given twice");
        out.push(b);
    }
    anyhow::ensure!(!out.is_empty(), "--compare: no backend given");
    Ok(out)
}

fn label(a: Assignment) -> String {
    match a {
        Assignment::Dispatch(_) => "dispatch".into(),
        Assignment::Static(b) => format!("all-{}", b.name()),
    }
}

fn report(
    jobs: &Jobs,
    profiles: &[runner::Profile],
    assignments: &[Assignment],
    runs: &[Value],
    capacity: Pressure,
) -> Value {
    let makespan = |name: &str| {
        super::median(
            &runs
                .iter()
                .filter(|r| r["assignment"] == name && r["all_ok"] == json!(true))
                .filter_map(|r| r["makespan_seconds"].as_f64())
                .collect::<Vec<_>>(),
        )
    };
    let dispatch = makespan("dispatch");
    let mut ratios = serde_json::Map::new();
    for a in assignments.iter().skip(1) {
        let name = label(*a);
        let ratio = match (dispatch, makespan(&name)) {
            (Some(d), Some(s)) if s > 0.0 => Some(d / s),
            _ => None,
        };
        ratios.insert(name, json!(ratio));
    }
    let beats_all =
        !ratios.is_empty() && ratios.values().all(|r| r.as_f64().is_some_and(|r| r < 1.0));
    json!({
        "benchmark": "batch",
        "what": "a batch of programs on one rack of limited far memory, a few at a time: each program's backend chosen from its profile (xDM's Algorithm 1) against one backend for all, same queue, same room, same slots, in one run; makespans are medians of the rounds",
        "slots": jobs.slots,
        "memnodes": jobs.memnodes,
        "replicas": jobs.replicas,
        "rack_bytes": capacity.rack.total,
        "file_bytes": capacity.file.total,
        "file_dir": jobs.file_dir,
        "jobs": jobs.jobs.iter().zip(profiles).map(|(j, p)| json!({
            "name": j.name,
            "command": j.workload.shown(),
            "local_mem_bytes": j.local_mem,
            "profile": p.describe(),
        })).collect::<Vec<_>>(),
        "makespan_seconds": assignments.iter().map(|a| (label(*a), json!(makespan(&label(*a))))).collect::<serde_json::Map<_, _>>(),
        "dispatch_to_static": ratios,
        "dispatch_beats_every_static": beats_all,
        "runs": runs,
    })
}

fn print_tables(report: &Value) {
    println!(
        "{:<14} {:>7} {:>7} {:>7} {:>10} {:>9}",
        "job", "reuse", "compr.", "seq.", "reserve", "profile"
    );
    for j in report["jobs"].as_array().into_iter().flatten() {
        let p = &j["profile"];
        println!(
            "{:<14} {:>7.2} {:>7.2} {:>7.2} {:>10} {:>8.1}s",
            j["name"].as_str().unwrap_or("?"),
            p["reuse"].as_f64().unwrap_or(0.0),
            p["compressible"].as_f64().unwrap_or(0.0),
            p["sequential"].as_f64().unwrap_or(0.0),
            ByteSize(p["reserve_bytes"].as_u64().unwrap_or(0)).to_string(),
            p["seconds"].as_f64().unwrap_or(0.0),
        );
    }
    println!();
    for r in report["runs"].as_array().into_iter().flatten() {
        let jobs: Vec<String> = r["jobs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|j| {
                format!(
                    "{}:{}",
                    j["name"].as_str().unwrap_or("?"),
                    j["backend"].as_str().unwrap_or("?")
                )
            })
            .collect();
        println!(
            "{:<16} round {} makespan {:>7.1}s  {}",
            r["assignment"].as_str().unwrap_or("?"),
            r["round"],
            r["makespan_seconds"].as_f64().unwrap_or(f64::NAN),
            jobs.join(" ")
        );
    }
    if let Some(ratios) = report["dispatch_to_static"].as_object() {
        for (name, ratio) in ratios {
            match ratio.as_f64() {
                Some(x) => println!("dispatch / {name}: {x:.2}x"),
                None => println!("dispatch / {name}: -"),
            }
        }
    }
}
