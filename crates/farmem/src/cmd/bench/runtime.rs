//! `farmem bench kona` and `farmem bench fault`: the compute-node runtime
//! against a rack (a local one by default), or against in-process memory.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use farmem_core::{ByteSize, Ratio};
use farmem_net::ClientConfig;
use farmem_policy::readahead::ReadaheadConfig;
use farmem_runtime::bench::{FaultOpts, KonaOpts};
use farmem_runtime::remote::RackStore;
use farmem_runtime::{
    Config, FaultPath, MAX_FAULT_AROUND, MemStore, RemoteStore, SlabSource, WaitMode,
};
use farmem_wire::Role;

use crate::cmd::Outcome;
use crate::cmd::local::{LocalRack, connect_target};

/// Where the runtime's remote memory lives during a benchmark.
#[derive(clap::Args)]
pub struct StoreArgs {
    /// Use this controller instead of starting a local rack of child processes.
    #[arg(long)]
    controller: Option<String>,
    /// File holding the cluster token of --controller's rack (a local rack
    /// makes its own).
    #[arg(long, value_name = "FILE", requires = "controller")]
    token_file: Option<PathBuf>,
    /// Keep remote memory in this process (no network): isolates the runtime's own cost.
    #[arg(long, conflicts_with = "controller")]
    in_process: bool,
    /// Who serves a fault: `signal` (the faulting thread itself, in its
    /// SIGBUS handler: no thread wakeups; the default here, as the
    /// benchmark makes no system call on far memory) or `thread` (handler
    /// threads read the userfaultfd while the faulting thread sleeps; the
    /// runtime's default).
    #[arg(long, default_value = "signal")]
    fault_path: FaultPath,
    /// How fault handler threads wait (fault path `thread`), as `farmem
    /// run --fault-wait`: adaptive, adaptive:MICROS, poll, spin, or
    /// hybrid:MICROS.
    #[arg(long, default_value_t = WaitMode::default())]
    wait: WaitMode,
    /// Fault-around, as `farmem run --fault-around`: the most pages a
    /// fault in an ascending or descending stream brings in beside its
    /// own; 0 turns it off. `bench fault` always times single faults,
    /// without it.
    #[arg(long, default_value_t = ReadaheadConfig::default().max_blocks,
          value_parser = clap::value_parser!(u32).range(0..=MAX_FAULT_AROUND as i64))]
    fault_around: u32,
}

impl StoreArgs {
    /// The runtime settings these flags choose.
    fn config(&self) -> Config {
        Config {
            wait: self.wait,
            fault_path: self.fault_path,
            fault_around: ReadaheadConfig {
                max_blocks: self.fault_around,
            },
            ..Config::default()
        }
    }
}

/// A store for one benchmark run, and the rack behind it if we started one.
struct Backing {
    store: Arc<dyn RemoteStore>,
    slabs: Arc<dyn SlabSource>,
    what: String,
    _rack: Option<LocalRack>,
}

/// `bytes`: remote memory the benchmark's runs take in all. Both stores are
/// sparse, so the headroom (a runtime keeps a slab batch in reserve) is free.
fn backing(args: &StoreArgs, bytes: u64, name: &str) -> anyhow::Result<Backing> {
    if args.in_process {
        let mem = Arc::new(MemStore::new(bytes * 2 + (1 << 30)));
        return Ok(Backing {
            store: mem.clone(),
            slabs: mem,
            what: "in-process memory".into(),
            _rack: None,
        });
    }
    let (controller, token, rack) = connect_target(
        args.controller.as_deref(),
        args.token_file.as_deref(),
        || LocalRack::start(2, (bytes * 2).max(8 << 30), 128 << 20),
    )?;
    let cfg = ClientConfig::new(name, Role::Compute).with_token(token);
    let rack_store = RackStore::connect(&controller, cfg, 2)
        .with_context(|| format!("connecting to the controller at {controller}"))?;
    let store = Arc::new(rack_store);
    Ok(Backing {
        store: store.clone(),
        slabs: store,
        what: format!("memory nodes of the controller at {controller} over loopback TCP"),
        _rack: rack,
    })
}

/// Kona's microbenchmark (seed 001 §5.1): cache-line vs page dirty tracking.
///
/// Each thread owns a region and writes one cache line in every page while
/// the runtime evicts concurrently; the same workload runs with dirty=line
/// (diff against a snapshot, ship changed lines through the log) and
/// dirty=page (write whole dirty pages), and page mode as Kona-VM runs it
/// (a second, write-protect fault marks a written page dirty), side by side.
#[derive(clap::Args)]
pub struct KonaArgs {
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Region per thread.
    #[arg(long, default_value = "1GiB")]
    region: ByteSize,
    /// Local cache as a share of all threads' regions.
    #[arg(long, default_value = "50%")]
    local: Ratio,
    /// Treat remote memory as holding data: every first touch fetches its
    /// page. By default the regions are fresh allocations, as in the
    /// paper's Figure 4: memory nodes zero new grants, so a first touch
    /// needs no fetch and eviction (what the two modes differ in) dominates.
    #[arg(long)]
    prefilled: bool,
    /// Runs of each mode; each reports its median (the modes take turns
    /// going first). This VM's timings swing from run to run.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Skip warming the page allocator before each timed run. By default
    /// twice the regions' size is taken from the kernel and given back
    /// just before a run: on a VM that reports free memory to its host,
    /// memory freed long ago costs a host fault to allocate again.
    #[arg(long)]
    cold: bool,
    #[command(flatten)]
    store: StoreArgs,
    /// Print one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

pub fn kona(args: KonaArgs) -> Outcome {
    anyhow::ensure!(args.threads >= 1, "--threads must be at least 1");
    let total = args.region.bytes() * args.threads as u64;
    anyhow::ensure!(args.rounds >= 1, "--rounds must be at least 1");
    // Three runs (line, page, Kona-VM) a round, each on fresh remote memory.
    let runs = 3 * args.rounds as u64;
    let b = backing(&args.store, runs * total, "bench-kona")?;
    let opts = KonaOpts {
        threads: args.threads,
        region_bytes: args.region.bytes(),
        local_fraction: args.local.get(),
        rounds: args.rounds,
        warm_bytes: if args.cold { 0 } else { 2 * total },
        base: Config {
            zeroed_slabs: !args.prefilled,
            ..args.store.config()
        },
    };
    if !args.json {
        eprintln!(
            "farmem: bench kona: {} thread(s) × {} on {}, {} local, {}",
            args.threads,
            args.region,
            b.what,
            args.local,
            if args.prefilled {
                "prefilled remote memory"
            } else {
                "fresh allocations"
            }
        );
    }
    let report = farmem_runtime::bench::kona(&opts, b.store.clone(), b.slabs.clone())
        .context("running the benchmark")?;
    let mut v = serde_json::to_value(&report)?;
    v["benchmark"] = "kona".into();
    v["fault_path"] = args.store.fault_path.to_string().into();
    v["prefilled"] = args.prefilled.into();
    v["store"] = b.what.clone().into();
    v["host"] = host_idle();
    if args.json {
        println!("{v}");
    } else {
        for (mode, run) in [
            ("line", &report.line),
            ("page", &report.page),
            ("kona-vm", &report.kona_vm),
        ] {
            println!(
                "{mode:8}  {:7.2} s  written back {:>10}  pages evicted {:>9}  faults {:>9}",
                run.seconds,
                ByteSize(run.bytes_written_back).to_string(),
                run.pages_evicted,
                run.faults
            );
        }
        println!(
            "speedup (page s / line s) {:.2}×   vs kona-vm {:.2}×   write-back reduction {:.1}×{}",
            report.speedup,
            report.speedup_vs_kona_vm,
            report.writeback_reduction,
            if report.rounds > 1 {
                format!("   (median runs of {} rounds)", report.rounds)
            } else {
                String::new()
            }
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// Latency of a remote 4 KiB page fault as the application sees it, beside
/// a bare 4 KiB read from the same store in the same run.
///
/// By default the benchmark's own loop touches fresh pages one at a time.
/// With --workload or a command after `--`, a real program runs under
/// `farmem run` on the rack instead (after one run without farmem, for its
/// footprint and its answer), and its faults (from the runtime's
/// histograms) are compared with bare reads timed before and after each of
/// its runs: per fault, and per page fetched (a fault-around window's pages
/// share its time).
#[derive(clap::Args)]
pub struct FaultArgs {
    /// Faults to time, each on a fresh page (the loop).
    #[arg(long, default_value_t = 20_000)]
    pages: usize,
    /// Bare reads to time for the comparison (with a program: before and
    /// after each run).
    #[arg(long, default_value_t = 20_000)]
    reads: usize,
    #[command(flatten)]
    store: StoreArgs,
    /// A built-in program instead of the loop: `demo` (PageRank), `kv`,
    /// `scan`, `text`, `noise`, `redis`, `sqlite` (as `bench swap
    /// --workload`). --fault-path, --wait and --fault-around then do not
    /// apply: the program runs with `farmem run`'s defaults and --farmem-arg.
    #[arg(long, conflicts_with = "in_process")]
    workload: Option<String>,
    /// Memory of the built-in program.
    #[arg(long, default_value = "256MiB")]
    size: ByteSize,
    /// Rounds of the built-in program (PageRank rounds, passes).
    #[arg(long, default_value_t = 3)]
    iterations: usize,
    /// The program's local memory: a share of the footprint a local run
    /// measured (`25%`) or a size (`64MiB`).
    #[arg(long, default_value = "25%")]
    local: String,
    /// Runs of the program, each between two probes of the wire.
    #[arg(long, default_value_t = 2)]
    rounds: u32,
    /// A flag passed on to `farmem run` (repeatable), e.g.
    /// `--farmem-arg=--fault-path=signal`.
    #[arg(long = "farmem-arg", value_name = "FLAG", allow_hyphen_values = true)]
    farmem_args: Vec<String>,
    /// Print one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// A program and its arguments, instead of --workload.
    #[arg(last = true, conflicts_with = "in_process")]
    cmd: Vec<std::ffi::OsString>,
}

pub fn fault(args: FaultArgs) -> Outcome {
    let program = super::fault_program::workload(
        args.workload.as_deref(),
        args.cmd.clone(),
        args.size,
        args.iterations,
    )?;
    if let Some(workload) = program {
        let report = super::fault_program::run(super::fault_program::ProgramOpts {
            workload,
            local: super::swap_plan::LocalMem::parse(&args.local)?,
            rounds: args.rounds,
            reads: args.reads,
            farmem_args: args.farmem_args.clone(),
            controller: args.store.controller.clone(),
            token_file: args.store.token_file.clone(),
            json: args.json,
        })?;
        if args.json {
            println!("{report}");
        } else {
            super::fault_program::print(&report);
        }
        return Ok(std::process::ExitCode::SUCCESS);
    }
    anyhow::ensure!(
        args.pages >= 10 && args.reads >= 10,
        "--pages and --reads must be at least 10"
    );
    let b = backing(&args.store, args.pages as u64 * 4096, "bench-fault")?;
    let opts = FaultOpts {
        pages: args.pages,
        reads: args.reads,
        base: args.store.config(),
    };
    let report = farmem_runtime::bench::fault(&opts, b.store.clone(), b.slabs.clone())
        .context("running the benchmark")?;
    let mut v = serde_json::to_value(&report)?;
    v["benchmark"] = "fault".into();
    v["fault_path"] = args.store.fault_path.to_string().into();
    v["store"] = b.what.clone().into();
    v["host"] = host_idle();
    if args.json {
        println!("{v}");
    } else {
        println!(
            "remote fault p50 {:.1} µs  p99 {:.1} µs;  bare 4 KiB read p50 {:.1} µs;  ratio {:.2}",
            report.fault_us_p50, report.fault_us_p99, report.wire_read4k_us_p50, report.fault_ratio
        );
        println!(
            "bare userfaultfd fault p50 {:.1} µs: a runtime costing nothing would reach ratio {:.2} here",
            report.bare_fault_us_p50, report.floor_ratio
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// How this machine's idle CPUs wake, which sets the cost of every handoff
/// between threads (fault → handler → faulting thread). On a VM guest with
/// the haltpoll driver and `guest_halt_poll_ns` 0, an idle vCPU halts to the
/// host and each wakeup costs a VM exit: crates/farmem-runtime/README.md measures both.
fn host_idle() -> serde_json::Value {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let driver = read("/sys/devices/system/cpu/cpuidle/current_driver");
    let halt_poll_ns = read("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
        .and_then(|s| s.parse::<u64>().ok());
    if driver.as_deref() == Some("haltpoll") && halt_poll_ns == Some(0) {
        eprintln!(
            "farmem: this VM guest does not halt-poll (guest_halt_poll_ns = 0), so each thread wakeup costs a VM exit; see crates/farmem-runtime/README.md (Measured)"
        );
    }
    serde_json::json!({ "cpuidle_driver": driver, "guest_halt_poll_ns": halt_poll_ns })
}
