//! Running a simulation: the engine fed from its input, and its report.

use std::collections::BTreeMap;

use farmem_workloads::TraceReader;
use farmem_workloads::pipe::piped;
use serde::Serialize;

use crate::config::Config;
use crate::engine::Engine;
use crate::error::SimError;
use crate::input::Input;
use crate::stats::Stats;
use crate::{components, core, multi, scheme, with_core_model};

/// One run's report (`--json`).
#[derive(Debug, Clone, Serialize)]
pub struct SimResult {
    pub scheme: String,
    pub workload: String,
    pub records: u64,
    pub instructions: u64,
    pub sim_time_ns: f64,
    pub ipc: f64,
    pub amat_ns: f64,
    pub amat_miss_ns: f64,
    pub llc_misses: u64,
    pub local_hit_ratio: f64,
    pub remote_bytes_read: u64,
    pub remote_bytes_written: u64,
    pub footprint_bytes: u64,
    pub local_memory_bytes: u64,
    pub data_amplification: f64,
    pub link_utilization: f64,
    /// Wall-clock seconds of the whole run: the workload's generation (or
    /// the trace's decoding) and the simulation.
    pub wall_seconds: f64,
    /// `records / wall_seconds`: records per wall-clock second of the whole
    /// run. A single input's generation or decoding overlaps the simulation
    /// on a second core, so on an idle machine this is the slower of the two.
    pub records_per_sec: f64,
    /// CPU time of the run's threads, generation or decoding included
    /// (Linux, 10 ms ticks; 0 elsewhere).
    pub cpu_seconds: f64,
    /// `records / cpu_seconds`: records per CPU second of the whole run,
    /// stable on a shared machine.
    pub records_per_cpu_sec: f64,
    /// CPU time of the thread that simulated: the run less the generation or
    /// decoding, which a single input does on a thread of its own.
    pub sim_cpu_seconds: f64,
    /// `records / sim_cpu_seconds`: the simulator's speed per core.
    pub records_per_sim_cpu_sec: f64,
    /// The `--set` values of this run.
    pub overrides: BTreeMap<String, String>,
    pub stats: Stats,
}

/// Runs `input` under `scheme` with `cfg`.
pub fn simulate(cfg: &Config, scheme: &str, input: &Input) -> Result<SimResult, SimError> {
    simulate_with_progress(cfg, scheme, input, &|_| {})
}

/// Like [`simulate`], calling `tick` with the records replayed since its
/// previous call every [`PROGRESS_EVERY`] records and at the end (progress
/// bars; several inputs at once report nothing until the end).
pub fn simulate_with_progress(
    cfg: &Config,
    scheme: &str,
    input: &Input,
    tick: &(dyn Fn(u64) + Sync),
) -> Result<SimResult, SimError> {
    with_core_model!(cfg.core.model, C => simulate_on::<C>(cfg, scheme, input, tick))
}

/// Records between two progress ticks.
pub const PROGRESS_EVERY: u64 = 1 << 20;

/// Passes accesses on to the engine, counting them for `tick`.
struct Progress<'a, S> {
    inner: &'a mut S,
    since: u64,
    tick: &'a (dyn Fn(u64) + Sync),
}

impl<S> Drop for Progress<'_, S> {
    fn drop(&mut self) {
        if self.since > 0 {
            (self.tick)(self.since);
        }
    }
}

impl<S: farmem_workloads::Sink> farmem_workloads::Sink for Progress<'_, S> {
    fn begin(&mut self, footprint: u64) {
        self.inner.begin(footprint);
    }
    #[inline]
    fn access(&mut self, a: farmem_workloads::Access) {
        self.inner.access(a);
        self.since += 1;
        if self.since >= PROGRESS_EVERY {
            (self.tick)(self.since);
            self.since = 0;
        }
    }
    fn access_batch(&mut self, batch: &[farmem_workloads::Access]) {
        self.inner.access_batch(batch);
        self.since += batch.len() as u64;
        if self.since >= PROGRESS_EVERY {
            (self.tick)(self.since);
            self.since = 0;
        }
    }
    fn wants_contents(&self) -> bool {
        self.inner.wants_contents()
    }
    fn page(&mut self, addr: u64, data: &[u8]) {
        self.inner.page(addr, data);
    }
}

/// Feeds `sink` from `produce`, run on a thread of its own, counting
/// progress here; returns what `produce` returned and that thread's CPU
/// seconds.
fn feed<S, T, F>(sink: &mut S, tick: &(dyn Fn(u64) + Sync), produce: F) -> (T, f64)
where
    S: farmem_workloads::Sink,
    T: Send,
    F: FnOnce(&mut dyn farmem_workloads::Sink) -> T + Send,
{
    let mut sink = Progress {
        inner: sink,
        since: 0,
        tick,
    };
    piped(&mut sink, |s| {
        let c0 = thread_cpu_seconds();
        let out = produce(s);
        (out, thread_cpu_seconds() - c0)
    })
}

fn simulate_on<C: core::CoreModel>(
    cfg: &Config,
    scheme: &str,
    input: &Input,
    tick: &(dyn Fn(u64) + Sync),
) -> Result<SimResult, SimError> {
    let started = std::time::Instant::now();
    let cpu0 = thread_cpu_seconds();
    let mut engine = Engine::<C>::new(cfg, scheme::build(scheme)?);
    // CPU seconds of the thread that generated or decoded the input.
    let mut feed_cpu = 0.0;
    match input {
        Input::Workload { name, scale, seed } => {
            let (out, cpu) = feed(&mut engine, tick, |s| {
                farmem_workloads::run_workload(name, *scale, *seed, s)
            });
            out?;
            feed_cpu = cpu;
        }
        Input::Trace(path) => {
            let mut reader = TraceReader::open(path)?;
            let footprint = if reader.header().complete {
                reader.header().footprint_bytes()
            } else {
                farmem_workloads::trace::scan_summary(path)?.footprint_bytes()
            };
            farmem_workloads::Sink::begin(&mut engine, footprint);
            if cfg.core.count > 1 {
                multi::run_demux(&mut engine, &mut reader, cfg.core.count as usize)?;
            } else {
                // Streams through the reader's fixed buffer: memory does
                // not grow with the trace's length.
                let (out, cpu) = feed(&mut engine, tick, |s| reader.replay(s));
                out?;
                feed_cpu = cpu;
            }
        }
        Input::Multi(inputs) => {
            if inputs.len() != cfg.core.count as usize {
                return Err(SimError::Config {
                    source_name: input.name(),
                    message: format!(
                        "{} inputs need core.count = {}, got {}",
                        inputs.len(),
                        inputs.len(),
                        cfg.core.count
                    ),
                });
            }
            multi::run(&mut engine, inputs)?;
        }
    }
    let mut r = result(
        &mut engine,
        cfg,
        &input.name(),
        started.elapsed().as_secs_f64(),
    );
    r.sim_cpu_seconds = thread_cpu_seconds() - cpu0;
    r.cpu_seconds = r.sim_cpu_seconds + feed_cpu;
    let per = |secs: f64| {
        if secs > 0.0 {
            r.records as f64 / secs
        } else {
            0.0
        }
    };
    r.records_per_cpu_sec = per(r.cpu_seconds);
    r.records_per_sim_cpu_sec = per(r.sim_cpu_seconds);
    Ok(r)
}

/// This thread's user+system CPU time from /proc (10 ms resolution).
fn thread_cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/thread-self/stat") else {
        return 0.0;
    };
    // Fields after the parenthesized command name; utime and stime are 14 and 15.
    let Some(rest) = stat.rsplit_once(')').map(|p| p.1) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// Replays accesses already in memory (tests, crafted patterns).
pub fn simulate_accesses(
    cfg: &Config,
    scheme: &str,
    footprint: u64,
    accesses: &[farmem_workloads::Access],
) -> Result<SimResult, SimError> {
    let started = std::time::Instant::now();
    with_core_model!(cfg.core.model, C => {
        let mut engine = Engine::<C>::new(cfg, scheme::build(scheme)?);
        use farmem_workloads::Sink;
        engine.begin(footprint);
        for &a in accesses {
            engine.access(a);
        }
        Ok(result(
            &mut engine,
            cfg,
            "accesses",
            started.elapsed().as_secs_f64(),
        ))
    })
}

fn result<C: core::CoreModel>(
    engine: &mut Engine<C>,
    cfg: &Config,
    workload: &str,
    wall: f64,
) -> SimResult {
    let tot = engine.finish();
    let m = &engine.machine;
    let c = m.counters;
    let t = tot.sim_time_ns.max(1e-9);
    let mut stats = Stats::default();
    engine.report(t, &mut stats);
    let footprint = m.pages.footprint_bytes();
    let links = m.links.len().max(1) as f64;
    let link_util = m
        .links
        .iter()
        .map(|l| l.utilization(components::Dir::Down, t))
        .sum::<f64>()
        / links;
    let served = c.local_hits + c.local_misses;
    SimResult {
        scheme: engine.scheme_name().to_string(),
        workload: workload.to_string(),
        records: tot.records,
        instructions: tot.instructions,
        sim_time_ns: tot.sim_time_ns,
        ipc: tot.instructions as f64 / (t * cfg.core.freq_ghz),
        amat_ns: tot.latency_sum / tot.records.max(1) as f64,
        amat_miss_ns: engine
            .scheme()
            .amat_miss_ns()
            .unwrap_or(tot.llc_miss_latency_sum / tot.llc_miss_accesses.max(1) as f64),
        llc_misses: tot.llc_miss_accesses,
        local_hit_ratio: if served == 0 {
            1.0
        } else {
            c.local_hits as f64 / served as f64
        },
        remote_bytes_read: c.remote_bytes_read,
        remote_bytes_written: c.remote_bytes_written,
        footprint_bytes: footprint,
        local_memory_bytes: if engine_uses_local(engine) {
            m.local.capacity_pages as u64 * farmem_core::PAGE_SIZE
        } else {
            0
        },
        data_amplification: c.remote_bytes_read as f64 / footprint.max(1) as f64,
        link_utilization: link_util,
        wall_seconds: wall,
        records_per_sec: tot.records as f64 / wall.max(1e-9),
        cpu_seconds: 0.0,
        records_per_cpu_sec: 0.0,
        sim_cpu_seconds: 0.0,
        records_per_sim_cpu_sec: 0.0,
        overrides: BTreeMap::new(),
        stats,
    }
}

fn engine_uses_local<C: core::CoreModel>(e: &Engine<C>) -> bool {
    !matches!(e.scheme_name(), "local" | "cache-line")
}
