//! `farmem bench swap`: farmem against the kernel's own swap, side by side
//! in one run. The same program (the demo's PageRank, or any command line)
//! runs on local memory, under a cgroup v1 memory limit of X with a swap
//! file, a zram device or zswap, and under `farmem run --local-mem X` with
//! its embedded rack. X is a share of the footprint the local run measured.
//! Configs take turns within each round (the order rotates every round) so
//! machine noise hits them alike; every run must compute the same result.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::Context;
use farmem_core::ByteSize;
use serde_json::{Value, json};

use super::kernel_swap::{self, Cgroup, KernelSwap};
use super::measure::{self, Measured, StatsFile};
use super::swap_plan::{Config, LocalMem, parse_configs, plan, swap_bytes};
use super::swap_report;
use super::workload::Workload;
use crate::cmd::Outcome;

/// Compare farmem with the kernel's swap (swap file, zram, zswap) under a
/// cgroup v1 limit of the same local memory, on one program.
///
/// The kernel configs need root and cgroup v1's memory controller; without
/// them the bench says why and exits 0 ("skipped" in the JSON). It turns
/// off, resets and removes all it set up, also on an error or Ctrl-C.
#[derive(clap::Args)]
pub struct Args {
    /// The program: `demo`, the quick start's PageRank (`farmem demo`'s
    /// worker), or a synthetic one over --size for --iterations passes:
    /// `kv` (random reads and writes of 256 B records), `scan` (sequential
    /// reads), `text` (pages of words, rewritten and re-read: compressible)
    /// or `noise` (the same with random bytes); or a real program when
    /// installed: `redis` (redis-server loaded with --size of 1000 B
    /// values, then random GETs from redis-benchmark; prints the data's
    /// digest) or `sqlite` (an in-memory database of --size scanned,
    /// searched, grouped and updated). A command line after `--` replaces it.
    #[arg(long, default_value = "demo")]
    workload: String,
    /// Memory of the built-in workload: the graph of the demo, the array of
    /// the synthetic ones, the data of redis and sqlite (default 1GiB;
    /// --quick: 32MiB).
    #[arg(long)]
    size: Option<ByteSize>,
    /// PageRank rounds of the demo, passes of the others (default 3; --quick: 2).
    #[arg(long)]
    iterations: Option<usize>,
    /// Local memory of each limited config: a share of the footprint the
    /// local run measured (`25%`) or a size (`256MiB`).
    #[arg(long, default_value = "25%")]
    local: String,
    /// Rounds; each runs every config once (default 2; --quick: 1).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=50))]
    rounds: Option<u32>,
    /// Configs, comma-separated: local, swapfile, zram, zswap, farmem
    /// (`farmem run --backend remote`), farmem-compressed (`--backend
    /// compressed`), farmem-auto (`--backend auto`), farmem-file
    /// (`--backend file:` the --swap-dir, where the swap file goes too).
    #[arg(
        long,
        default_value = "local,swapfile,zram,zswap,farmem,farmem-compressed,farmem-auto,farmem-file"
    )]
    configs: String,
    /// A small, fast run (32 MiB demo, 2 iterations, 1 round).
    #[arg(long)]
    quick: bool,
    /// Print one JSON object on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// A flag passed on to `farmem run` (repeatable), e.g.
    /// `--farmem-arg=--fault-path=signal`; not --backend, --local-mem or
    /// --stats-json, which each config sets.
    #[arg(long = "farmem-arg", value_name = "FLAG", allow_hyphen_values = true)]
    farmem_args: Vec<String>,
    /// Directory for the swap files (it must take one: ext4, xfs; not
    /// tmpfs). Default: the temp dir.
    #[arg(long)]
    swap_dir: Option<PathBuf>,
    /// Stop a run that takes longer than this (`90s`, `15m`) and report it
    /// as `timed out`, so one thrashing config does not hold up the rest.
    /// Default: no limit.
    #[arg(long, value_parser = crate::cmd::time_secs)]
    run_timeout: Option<std::time::Duration>,
    /// The program and its arguments, instead of --workload.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// What the rounds gave: every run, the configs left out (a backing this
/// kernel lacks, and why) and the program's footprint.
struct Rounds {
    runs: Vec<Value>,
    skipped: Vec<(Config, String)>,
    footprint: u64,
}

/// What the runs share.
struct Bench {
    workload: Workload,
    limit: u64,
    swap_bytes: u64,
    swap_dir: PathBuf,
    farmem_args: Vec<String>,
    /// A run taking longer is stopped (`--run-timeout`).
    run_timeout: Option<std::time::Duration>,
    /// Whether local runs are accounted in a cgroup too (root, cgroup v1).
    cgroups: bool,
}

pub fn run(args: Args) -> Outcome {
    let configs = parse_configs(&args.configs)?;
    refuse_flags_set_per_config(&args.farmem_args)?;
    let local = LocalMem::parse(&args.local)?;
    let size = args.size.unwrap_or(if args.quick {
        ByteSize::mib(32)
    } else {
        ByteSize::gib(1)
    });
    let iterations = args.iterations.unwrap_or(if args.quick { 2 } else { 3 });
    anyhow::ensure!(iterations >= 1, "--iterations must be at least 1");
    let rounds = args.rounds.unwrap_or(if args.quick { 1 } else { 2 });
    let workload = if args.command.is_empty() {
        Workload::builtin(&args.workload, size, iterations)?
    } else {
        Workload::command(args.command.clone())
    };
    let kernel = configs.iter().any(|c| matches!(c, Config::Kernel(_)));
    let why_not = kernel_swap::unavailable();
    if let (true, Some(why)) = (kernel, &why_not) {
        return skip(&args, why);
    }
    if configs.iter().any(|c| matches!(c, Config::Farmem(_))) {
        crate::cmd::run::find_preload()?;
    }
    measure::catch_interrupts();
    let _lock = if kernel {
        let lock = kernel_swap::BenchLock::acquire()?;
        kernel_swap::clear_the_way()?;
        Some(lock)
    } else {
        None
    };
    let zswap_before = kernel_swap::ZswapSwitch::enabled_now();
    let mut bench = Bench {
        workload,
        limit: 0,
        swap_bytes: 0,
        swap_dir: args.swap_dir.clone().unwrap_or_else(std::env::temp_dir),
        farmem_args: args.farmem_args.clone(),
        run_timeout: args.run_timeout,
        cgroups: why_not.is_none(),
    };
    let load_before = loadavg();
    let order = plan(&configs, rounds);
    let Rounds {
        runs,
        skipped,
        footprint,
    } = bench.rounds(&configs, &order, local)?;
    let report = swap_report::Report {
        workload: json!({
            "kind": if bench.workload.demo { args.workload.as_str() } else { "command" },
            "command": bench.workload.shown(),
            "size_bytes": bench.workload.demo.then_some(size.bytes()),
            "iterations": bench.workload.demo.then_some(iterations),
        }),
        local: args.local.clone(),
        footprint,
        limit: bench.limit,
        rounds,
        order: &order,
        configs: &configs,
        skipped: &skipped,
        runs: &runs,
        host: json!({
            "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).ok(),
            "cpus": std::thread::available_parallelism().map(|n| n.get()).ok(),
            "loadavg_before": load_before,
            "loadavg_after": loadavg(),
            "zswap_enabled_before": zswap_before,
            "zswap_enabled_after": kernel_swap::ZswapSwitch::enabled_now(),
        }),
    }
    .build();
    finish(&args, &report)
}

/// Prints the report; fails when a run failed or the results differ.
fn finish(args: &Args, report: &Value) -> Outcome {
    if args.json {
        println!("{report}");
    } else {
        swap_report::print_table(report);
    }
    let failed = report["failed_runs"].as_u64().unwrap_or(0);
    if report["results_match"] != json!(true) || failed > 0 {
        eprintln!(
            "farmem: {}",
            if failed > 0 {
                format!("{failed} run(s) failed (see `outcome`)")
            } else {
                "the configs computed different results".into()
            }
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn skip(args: &Args, why: &str) -> Outcome {
    if args.json {
        println!("{}", json!({"benchmark": "swap", "skipped": why}));
    } else {
        eprintln!("farmem: bench swap skipped: {why} (`--configs local,farmem` needs neither)");
    }
    Ok(ExitCode::SUCCESS)
}

fn loadavg() -> Option<String> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

impl Bench {
    /// Every round in `order`.
    fn rounds(
        &mut self,
        configs: &[Config],
        order: &[Vec<Config>],
        local: LocalMem,
    ) -> anyhow::Result<Rounds> {
        let mut runs: Vec<Value> = Vec::new();
        let mut skipped: Vec<(Config, String)> = Vec::new();
        let mut footprint = None;
        if configs[0] != Config::Local {
            eprintln!("farmem: a local run to measure the program's footprint");
            let r = self.run_once(Config::Local, 0)?;
            footprint = Some(self.footprint_from(&r)?);
        }
        for (round, configs) in order.iter().enumerate() {
            for &config in configs {
                if skipped.iter().any(|(c, _)| *c == config) {
                    continue;
                }
                if let Some(f) = footprint {
                    self.limit = local.bytes(f);
                    self.swap_bytes = swap_bytes(f);
                }
                eprintln!(
                    "farmem: round {}/{}: {}{}",
                    round + 1,
                    order.len(),
                    config.name(),
                    if config == Config::Local {
                        String::new()
                    } else {
                        format!(" at {}", ByteSize(self.limit))
                    }
                );
                let settled = measure::settle();
                match self.run_once(config, round as u32 + 1) {
                    Ok(mut r) => {
                        r["settled_before"] = json!(settled);
                        if footprint.is_none() {
                            footprint = Some(self.footprint_from(&r)?);
                        }
                        eprintln!("farmem:   {}", swap_report::one_line(&r));
                        runs.push(r);
                    }
                    // A backing this kernel lacks (no zram) is left out, said so.
                    Err(e)
                        if round == 0
                            && matches!(config, Config::Kernel(_))
                            && !measure::interrupted() =>
                    {
                        eprintln!("farmem:   {} skipped: {e:#}", config.name());
                        skipped.push((config, format!("{e:#}")));
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(Rounds {
            runs,
            skipped,
            footprint: footprint.unwrap_or(0),
        })
    }

    /// The footprint a local run measured; the limit and swap size follow.
    fn footprint_from(&self, run: &Value) -> anyhow::Result<u64> {
        anyhow::ensure!(
            run["outcome"] == "ok",
            "the local run failed ({}): {}",
            run["outcome"],
            run["stderr_tail"].as_str().unwrap_or("")
        );
        run["peak_rss_bytes"]
            .as_u64()
            .filter(|&b| b > 0)
            .context("the local run reported no peak RSS")
    }

    /// One run of `config`, with everything it set up undone before it
    /// returns.
    fn run_once(&self, config: Config, round: u32) -> anyhow::Result<Value> {
        let mut cmd;
        let mut swap = None;
        let mut cgroup = None;
        let stats = StatsFile::new("bench-swap");
        match config {
            Config::Local => {
                cmd = self.program();
                if self.cgroups {
                    cgroup = Some(Cgroup::create("local", None)?);
                }
            }
            Config::Kernel(b) => {
                swap = Some(
                    KernelSwap::setup(b, self.swap_bytes, &self.swap_dir)
                        .with_context(|| format!("setting up {}", b.name()))?,
                );
                cgroup = Some(Cgroup::create(b.name(), Some(self.limit))?);
                cmd = self.program();
            }
            Config::Farmem(backend) => {
                cmd = Command::new(std::env::current_exe().context("finding the farmem binary")?);
                cmd.arg("run")
                    .args(["--local-mem", &self.limit.to_string()])
                    .arg("--backend")
                    .arg(backend.arg(&self.swap_dir))
                    .arg("--stats-json")
                    .arg(&stats.0)
                    .args(&self.farmem_args)
                    .arg("--")
                    .args(&self.workload.argv);
            }
        }
        if let Some(cg) = &cgroup {
            cg.adopt(&mut cmd)?;
        }
        let before = kernel_swap::swap_counters();
        let m = measure::run(&mut cmd, self.run_timeout)?;
        let after = kernel_swap::swap_counters();
        let mut r = self.describe_run(config, round, &m);
        let delta: serde_json::Map<String, Value> = after
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    json!(v.saturating_sub(before.get(k).copied().unwrap_or(0))),
                )
            })
            .collect();
        let get = |k: &str| delta.get(k).and_then(Value::as_u64).unwrap_or(0);
        r["swap_ins"] = json!(get("pswpin") + get("zswpin"));
        r["swap_outs"] = json!(get("pswpout") + get("zswpout"));
        r["vmstat"] = Value::Object(delta);
        if let Some(cg) = &cgroup {
            let stat = cg.stat();
            r["cgroup"] = json!({
                "peak_bytes": cg.peak(),
                "memsw_peak_bytes": cg.memsw_peak(),
                "pgmajfault": stat.get("pgmajfault"),
                "workingset_refault_anon": stat.get("workingset_refault_anon"),
                "oom_kills": cg.oom_kills(),
                "settings": cg.describe(),
            });
            if cg.oom_kills().unwrap_or(0) > 0 {
                r["outcome"] = json!("oom_killed");
            }
        }
        if let Some(s) = &swap {
            r["setup"] = s.describe();
        }
        if matches!(config, Config::Farmem(_)) {
            self.farmem_stats(&mut r, &stats);
        }
        measure::check_interrupted()?;
        Ok(r)
    }

    fn program(&self) -> Command {
        self.workload.program()
    }

    fn describe_run(&self, config: Config, round: u32, m: &Measured) -> Value {
        let (result, seconds) = self.workload.result(&m.stdout);
        let mut outcome = m.outcome();
        if outcome == "ok" && result.is_none() {
            outcome = "no result".into();
        }
        json!({
            "config": config.name(),
            "round": round,
            "outcome": outcome,
            "wall_seconds": m.seconds,
            "workload_seconds": seconds,
            "result": result,
            "major_faults": m.major_faults,
            "peak_rss_bytes": m.max_rss_bytes,
            "limit_bytes": (config != Config::Local).then_some(self.limit),
            "stderr_tail": (outcome != "ok").then_some(&m.stderr_tail),
        })
    }

    /// farmem's own counters, and its program's peak RSS (the tree's
    /// includes the rack's memory nodes, which hold the far pages).
    fn farmem_stats(&self, r: &mut Value, stats: &StatsFile) {
        let Some(s) = stats.read() else {
            r["farmem"] = Value::Null;
            return;
        };
        let total = &s["total"];
        r["tree_max_rss_bytes"] = r["peak_rss_bytes"].clone();
        r["peak_rss_bytes"] = s["peak_resident_bytes"].clone();
        r["farmem"] = json!({
            "faults_missing": total["faults_missing"],
            "faults_wp": total["faults_wp"],
            "bytes_fetched": total["bytes_fetched"],
            "bytes_written_back": total["bytes_written_back"],
            "program_seconds": s["seconds"],
            "fault_path": s["fault_path"],
            // What of the limit the cache had (the rest held the process's
            // own memory and farmem's buffers), in pages.
            "room_pages_mean": total["room_pages_mean"],
            "limit_pages": total["limit_pages"],
            "tiers": tiers(&s),
        });
    }
}

/// What went to each tier: a compressed pool's pages and bytes kept and
/// the pages it sent below, and the reads each served; without a pool,
/// all of it below.
fn tiers(s: &Value) -> Value {
    let pool = &s["compressed"];
    let n = |k: &str| pool[k].as_u64().unwrap_or(0);
    if !pool.is_object() {
        return json!({
            "below_bytes_written": s["total"]["bytes_written_back"],
            "below_bytes_read": s["total"]["bytes_fetched"],
        });
    }
    json!({
        "pool_pages_kept": n("stored") + n("stored_zero"),
        "pool_bytes_kept": n("bytes_in"),
        "pool_bytes_compressed": n("bytes_out"),
        "pool_pages_read": n("hits"),
        "below_pages_written": n("passed_down") + n("off_passed") + n("demoted"),
        "below_pages_read": n("misses"),
    })
}

/// The `farmem run` flags each farmem config sets itself: a
/// `--farmem-arg` repeating one made clap refuse every farmem run, after
/// the kernel's configs had run.
const SET_PER_CONFIG: [(&str, &str); 3] = [
    (
        "--backend",
        "each farmem config sets its backend; choose them with --configs (farmem, farmem-compressed, farmem-auto, farmem-file)",
    ),
    ("--local-mem", "every config gets --local"),
    ("--stats-json", "bench swap reads each run's stats itself"),
];

fn refuse_flags_set_per_config(farmem_args: &[String]) -> anyhow::Result<()> {
    for arg in farmem_args {
        let flag = arg.split('=').next().unwrap_or(arg);
        if let Some((_, why)) = SET_PER_CONFIG.iter().find(|(f, _)| *f == flag) {
            anyhow::bail!("--farmem-arg={arg}: {why}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_each_config_sets_are_refused_up_front() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let passed = args(&["--fault-path=signal", "--threshold", "16B"]);
        assert!(refuse_flags_set_per_config(&passed).is_ok());
        let e = refuse_flags_set_per_config(&args(&["--backend=compressed"])).unwrap_err();
        assert!(e.to_string().contains("--configs"), "{e}");
        assert!(refuse_flags_set_per_config(&args(&["--local-mem"])).is_err());
        assert!(refuse_flags_set_per_config(&args(&["--stats-json=/tmp/x"])).is_err());
    }
}
