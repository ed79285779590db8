//! Runs a batch's programs under `farmem run` on the batch's rack: each
//! alone for its profile, then as a [`Batch`] decides, several at once.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;
use farmem_policy::dispatch::batch::{Batch, Start};
use farmem_policy::dispatch::{BackendKind, Features};
use serde_json::{Value, json};

use super::jobs::{Job, Jobs};
use super::profile::{self, GrantWatch};
use crate::cmd::bench::measure::{self, Measured, StatsFile};
use crate::cmd::local::LocalRack;

/// What a program's profile run measured.
#[derive(Debug, Clone)]
pub struct Profile {
    /// Its features; `far_bytes` is what it reserves.
    pub features: Features,
    /// The most far memory the rack granted it.
    pub peak_granted: u64,
    pub seconds: f64,
    /// What every later run of it must print.
    pub result: Option<String>,
}

impl Profile {
    pub fn describe(&self) -> Value {
        let f = &self.features;
        json!({
            "backend": "compressed",
            "seconds": self.seconds,
            "reuse": f.reuse,
            "compressible": f.compressible,
            "sequential": f.sequential,
            "peak_granted_bytes": self.peak_granted,
            "reserve_bytes": f.far_bytes,
            "result": self.result,
        })
    }
}

/// The batch's rack and how its programs are run.
pub struct Runner<'a> {
    jobs: &'a Jobs,
    controller: String,
    token_file: PathBuf,
    token: Vec<u8>,
    timeout: Duration,
}

impl<'a> Runner<'a> {
    pub fn new(jobs: &'a Jobs, rack: &LocalRack, timeout: Duration) -> Self {
        Self {
            jobs,
            controller: rack.controller.clone(),
            token_file: rack.token_file().to_path_buf(),
            token: rack.token().to_vec(),
            timeout,
        }
    }

    /// Each program once, alone, under the compressed pool. A program
    /// that fails here stops the batch: nothing would check its later runs.
    pub fn profile(&self) -> anyhow::Result<Vec<Profile>> {
        let watch = GrantWatch::start(&self.controller, self.token.clone())?;
        let n = self.jobs.jobs.len();
        let mut out = Vec::with_capacity(n);
        for (i, job) in self.jobs.jobs.iter().enumerate() {
            eprintln!(
                "farmem: batch: profile {}/{n}: {} under compressed",
                i + 1,
                job.name
            );
            let stats = StatsFile::new("batch-profile");
            let mut cmd = self.far_command(job, BackendKind::Compressed, None, &stats.0);
            watch.take();
            let m = measure::run(&mut cmd, Some(self.timeout))?;
            let peak_granted = watch.take();
            anyhow::ensure!(
                m.outcome() == "ok",
                "job `{}`: its profile run ended with {}: {}",
                job.name,
                m.outcome(),
                m.stderr_tail
            );
            let stats = stats.read().with_context(|| {
                format!("job `{}`: its profile run wrote no statistics", job.name)
            })?;
            anyhow::ensure!(
                refused(&stats) == 0,
                "job `{}`: the rack could not back its far memory during its profile ({} pages stayed local past --local-mem); give the batch a larger `rack`",
                job.name,
                refused(&stats)
            );
            let (result, _) = job.workload.result(&m.stdout);
            // One batch more than the profile held, per copy: the pool kept
            // pages local that another backend sends far.
            let reserve = peak_granted
                + u64::from(self.jobs.replicas) * farmem_runtime::preload_env::SLAB_BATCH;
            let features = profile::features(&stats, reserve);
            eprintln!(
                "farmem:   {:.1} s; reuse {:.2}, compressible {:.2}, sequential {:.2}; reserves {}",
                m.seconds,
                features.reuse,
                features.compressible,
                features.sequential,
                farmem_core::ByteSize(reserve)
            );
            out.push(Profile {
                features,
                peak_granted,
                seconds: m.seconds,
                result,
            });
        }
        Ok(out)
    }

    /// The batch to its end; its makespan and each program's run.
    pub fn run(&self, mut batch: Batch, profiles: &[Profile]) -> anyhow::Result<Value> {
        let (tx, rx) = mpsc::channel::<Ended>();
        let t0 = Instant::now();
        let mut records = vec![Value::Null; self.jobs.jobs.len()];
        let mut running = 0;
        let mut failure = None;
        while !batch.done() {
            while failure.is_none() {
                let Some(s) = batch.start_next() else { break };
                self.launch(s, t0, tx.clone());
                running += 1;
            }
            if running == 0 {
                break;
            }
            let ended = rx.recv().context("a program's runner thread vanished")?;
            running -= 1;
            batch.finished(ended.start.job);
            match ended.measured {
                Ok(ref m) => records[ended.start.job] = self.record(&ended, m, profiles, t0),
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failure {
            return Err(e);
        }
        let makespan = t0.elapsed().as_secs_f64();
        let all_ok = records
            .iter()
            .all(|r| r["outcome"] == "ok" && r["result_matches_profile"] == json!(true));
        eprintln!("farmem:   makespan {makespan:.1} s");
        Ok(json!({
            "makespan_seconds": makespan,
            "all_ok": all_ok,
            "jobs": records,
        }))
    }

    /// Starts `s`'s program on a thread of its own, which sends it back on
    /// `done` once it has ended.
    fn launch(&self, s: Start, t0: Instant, done: mpsc::Sender<Ended>) {
        let job = &self.jobs.jobs[s.job];
        let fault_around = s.params.map(|p| p.fault_around);
        eprintln!(
            "farmem:   {} on {} (instance {}, {}{})",
            job.name,
            s.backend.name(),
            s.instance,
            s.placement.name(),
            fault_around
                .map(|f| format!(", fault-around {f}"))
                .unwrap_or_default()
        );
        let stats = StatsFile::new("batch-job");
        let mut cmd = self.far_command(job, s.backend, fault_around, &stats.0);
        let started = t0.elapsed().as_secs_f64();
        let timeout = self.timeout;
        std::thread::spawn(move || {
            let measured = measure::run(&mut cmd, Some(timeout));
            let _ = done.send(Ended {
                start: s,
                started,
                stats,
                measured,
            });
        });
    }

    /// What an ended program did, checked against its profile.
    fn record(&self, ended: &Ended, m: &Measured, profiles: &[Profile], t0: Instant) -> Value {
        let s = &ended.start;
        let job = &self.jobs.jobs[s.job];
        let (result, _) = job.workload.result(&m.stdout);
        let matches = result.is_some() && result == profiles[s.job].result;
        // A full rack does not stop a program: its pages stay local, past
        // its limit. Its reservation was too small; say so.
        let over = ended.stats.read().map_or(0, |st| refused(&st));
        let outcome = match m.outcome() {
            o if o == "ok" && over > 0 => {
                format!("over its local memory: the rack refused {over} write-backs")
            }
            o => o,
        };
        let differs = if matches {
            ""
        } else {
            ", printing other than its profile"
        };
        eprintln!(
            "farmem:   {} {outcome} in {:.1} s{differs}",
            job.name, m.seconds
        );
        json!({
            "name": job.name,
            "backend": s.backend.name(),
            "fault_around": s.params.map(|p| p.fault_around),
            "instance": s.instance,
            "placement": s.placement.name(),
            "start_seconds": ended.started,
            "end_seconds": t0.elapsed().as_secs_f64(),
            "seconds": m.seconds,
            "outcome": outcome,
            "result": result,
            "result_matches_profile": matches,
            "stderr_tail": (outcome != "ok").then_some(&m.stderr_tail),
        })
    }

    /// `farmem run` of `job` on this rack with `backend`.
    fn far_command(
        &self,
        job: &Job,
        backend: BackendKind,
        fault_around: Option<u32>,
        stats: &Path,
    ) -> Command {
        let mut cmd = Command::new(std::env::current_exe().unwrap_or_else(|_| "farmem".into()));
        cmd.arg("run")
            .args(["--controller", &self.controller])
            .arg("--token-file")
            .arg(&self.token_file)
            .args(["--replicas", &self.jobs.replicas.to_string()])
            .args(["--local-mem", &job.local_mem.to_string()])
            .arg("--backend");
        match backend {
            BackendKind::File => cmd.arg(format!("file:{}", self.jobs.file_dir.display())),
            b => cmd.arg(b.name()),
        };
        if let Some(f) = fault_around {
            cmd.args(["--fault-around", &f.to_string()]);
        }
        cmd.arg("--stats-json").arg(stats);
        cmd.arg("--").args(&job.workload.argv);
        cmd
    }
}

/// A program that ended: when it started (seconds into the batch), its
/// statistics file and how it ran.
struct Ended {
    start: Start,
    started: f64,
    stats: StatsFile,
    measured: anyhow::Result<Measured>,
}

/// Pages a run kept local past its limit because the store refused them.
fn refused(stats: &Value) -> u64 {
    let get = |k: &str| stats["total"][k].as_u64().unwrap_or(0);
    get("limit_overruns") + get("writeback_kept")
}
