//! `farmem run`: an unmodified program with its large allocations in far
//! memory, through the `farmem-preload` shim (LD_PRELOAD).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};
use farmem_core::ByteSize;
use farmem_net::{ClientConfig, ControllerClient, NetError};
use farmem_runtime::backend::{Backend, Bottom};
use farmem_runtime::preload_env::{self, PreloadEnv};
use serde_json::{Map, Value, json};

use super::Outcome;
use super::local::{LocalRack, connect_target};

const PRELOAD: &str = "libfarmem_preload.so";

/// Exit status when far memory cannot be had and --fallback is `fail`:
/// the shim's.
const NO_FAR_MEMORY_EXIT: u8 = preload_env::NO_FAR_MEMORY_EXIT as u8;

/// What to do when far memory cannot be had.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Fallback {
    /// Stop with exit 70 and a message; the program does not run.
    Fail,
    /// Run the program on local memory, with one message saying why.
    Local,
}

/// Run CMD with its allocations of at least --threshold bytes (malloc
/// family and anonymous private mmap) in far memory on memory nodes.
///
/// Without --controller, a controller and --memnodes memory nodes start on
/// loopback for the run and stop after it. The program's stdout, stderr and
/// exit code are its own (a signal becomes 128+signo); farmem's summary goes
/// to stderr with a `farmem:` prefix. The controller is checked before the
/// program starts (reachable, our token accepted, a memory node up with
/// room left); when far memory cannot be had, farmem exits 70 unless
/// --fallback local is given.
#[derive(clap::Args)]
#[command(after_help = "\
Exit status: the program's own; 70 when far memory cannot be had (the \
controller unreachable, the token missing or refused, no memory node up, \
the rack full, no userfaultfd) and --fallback is `fail`, in which case the \
program does not run (a process the program starts later stops at once with \
70 too); 2 for farmem's own errors (bad flags).

fork and exec: the parent is never affected. A forked child places new \
allocations in local memory; far memory it inherited is made inaccessible \
(touching it raises SIGSEGV), because pages that were remote at the fork \
cannot be served without the parent's runtime. So fork+exec, system() and \
popen() work, and a child that reads its parent's far data fails loudly \
instead of computing on zeros (redis: run it with --save \"\"). A program \
started by exec gets its own runtime on the same controller.")]
pub struct Args {
    /// Local memory each process of the program may hold, as a cgroup
    /// limit of the same size would hold it (at least 1MiB): far pages
    /// cached, and its other resident memory (heap below --threshold,
    /// stacks, libraries, the runtime's own), measured as it runs and
    /// charged against the limit up to half of it (on the thread fault
    /// path; on the signal path, the far pages cached).
    #[arg(long, default_value_t = ByteSize(preload_env::DEFAULT_LOCAL_BYTES))]
    local_mem: ByteSize,
    /// Controller of an existing rack (host:port, or host:port,host:port
    /// for controllers sharing their state in etcd: the leader is found
    /// and followed); default: start one locally, authenticated by a
    /// random token of its own.
    #[arg(long)]
    controller: Option<String>,
    /// File holding the cluster token of --controller's rack (the one its
    /// daemons were started with, whitespace trimmed); every process
    /// proves it in its handshake (FARMEM_TOKEN_FILE).
    #[arg(long, value_name = "FILE", requires = "controller")]
    token_file: Option<PathBuf>,
    /// When far memory cannot be had: `fail` exits 70 with a message
    /// naming the cause, without running the program; `local` runs it on
    /// local memory with one message (FARMEM_FALLBACK).
    #[arg(long, value_enum, default_value_t = Fallback::Fail)]
    fallback: Fallback,
    /// Memory nodes to start when no --controller is given.
    #[arg(long, default_value_t = 2)]
    memnodes: usize,
    /// Where evicted pages go (FARMEM_BACKEND): `remote`, the memory
    /// nodes; `file:PATH`, a file (PATH is a directory to make it in, or a
    /// new file's name; deleted at once, its blocks kept for the run) or a
    /// block device, written with direct I/O so the page cache holds none
    /// of it, its --far-mem reserved at start, and no rack started;
    /// `compressed`, first a pool of LZ4-compressed pages inside
    /// --local-mem (at most a fifth of it, as zswap keeps; all-zero pages
    /// take no bytes), then the memory nodes for pages that do not shrink
    /// to 3/4 and for the pool's oldest when it is full;
    /// `tiered:compressed,file:PATH`, the same pool in front of a file;
    /// `auto`, the compressed pool over the memory nodes, turned off while
    /// the program stalls less in faults without it (as with random access
    /// over data larger than the pool, or a program whose cache is just
    /// big enough without the pool), judged in 100 ms epochs with it on
    /// and off, and tried again later; off, it gives its memory back.
    #[arg(long, default_value = "auto")]
    backend: Backend,
    /// Dirty tracking: `line` (Kona: only changed cache lines are written
    /// back) or `page`. Default: page when the last tier is a file (it
    /// writes whole blocks), else line.
    #[arg(long)]
    dirty: Option<farmem_runtime::DirtyMode>,
    /// Replacement policy of the local cache, at page granularity: lru, fifo, 4-way (alias
    /// set-assoc; Kona), clock, kona-pc (alias 2q; Linux active/inactive), filter (UniMem's
    /// Filter-Cache), workingset (kona-pc that activates a page missing again soon after its
    /// eviction, as Linux's refault distance does). The same policy objects the simulator uses. Default: workingset
    /// (on the demo, 52 k faults against kona-pc's 125 k and lru's 184 k); lru with `--fault-path signal`,
    /// whose touched I/O buffers must stay resident until the call.
    #[arg(long)]
    policy: Option<String>,
    /// Who serves a page fault: `thread` (runtime threads read the
    /// userfaultfd while the program's thread sleeps) or `signal` (the
    /// program's own thread, in a SIGBUS handler: no thread wakeups per
    /// fault; 2x faster on a fault-bound program; a SIGBUS handler the
    /// program sets still gets every SIGBUS that is not a far fault). The
    /// kernel raises no signal for its own accesses: with `signal`, the
    /// buffers of read/write, recv/send and fread/fwrite/fputs calls are
    /// made local first, but printf of a far string longer than the local
    /// cache and raw system calls (Go) fail with EFAULT on a far page.
    #[arg(long, default_value = "thread")]
    fault_path: farmem_runtime::FaultPath,
    /// What a fault on a far page fetches. `page`: the page, plus the
    /// window the region's readahead grows along a stream (--fault-around),
    /// in one read the fault waits for. `daemon`: DaeMon's selection unit
    /// (seed 000 §4.2, with §4.7's 4 KiB demand page / 256 KiB bulk
    /// cluster) decides per fault between the page alone, the page plus its
    /// cluster read at the same time on the bulk lane (the program goes
    /// on once its page is in), or the cluster alone with the page in it,
    /// from how full the demand and bulk lanes are and whether the region
    /// shows locality there (its readahead sees a stream; random faults
    /// fetch their page alone). A slow link keeps clusters in flight
    /// longer, so faults fall back to pages: try it with a `rate:` --delay
    /// and --delay-partition. Never-written pages are zeros either way.
    /// Needs --fault-path thread. Its decisions are in --stats-json
    /// (`engine_*`). See docs/daemon.md.
    #[arg(long, default_value = "page", value_name = "page|daemon")]
    engine: farmem_runtime::Engine,
    /// How the handler threads of the `thread` path wait for the next
    /// fault: `adaptive` spins (yielding the CPU) while faults come within
    /// 100 µs of each other and sleeps otherwise, so a busy program finds
    /// its handler awake (a sleeping one costs a vCPU wake-up per fault,
    /// tens of µs on a VM) and an idle one costs nothing; `adaptive:MICROS`
    /// sets the cap; `poll` always sleeps; `spin` never does (a core per
    /// handler).
    #[arg(long, default_value_t = farmem_runtime::WaitMode::default())]
    fault_wait: farmem_runtime::WaitMode,
    /// Fault-around: the most pages a fault brings in beside its own when
    /// the program touches memory in order, up or down (never-written ones
    /// filled locally; far ones read with it in one request on the thread
    /// path, and on the signal path those above it, by a filler; the
    /// window doubles from 1 as the stream goes on); 0 turns it off.
    #[arg(long, default_value_t = farmem_policy::readahead::ReadaheadConfig::default().max_blocks,
          value_parser = clap::value_parser!(u32).range(0..=farmem_runtime::MAX_FAULT_AROUND as i64))]
    fault_around: u32,
    /// Share of --local-mem kept on probation before eviction: the
    /// replacement policy's victims are unmapped but kept (their frames
    /// moved aside, not copied), and evicted only if the program does not
    /// touch them meanwhile; a touch brings the page back in a few
    /// microseconds, without the store, and tells the policy it is in use,
    /// which page faults alone never show (try 0.125). 0, the default,
    /// evicts victims at once: on a fast link a touch of a parked page
    /// costs most of what the fetch it saves costs, so it pays where
    /// fetches are slow. Thread fault path, Linux 6.8+ (UFFDIO_MOVE)
    #[arg(long, value_name = "SHARE", value_parser = probation_share)]
    probation: Option<f64>,
    /// Smallest allocation placed in far memory. Blocks under 16 KiB that
    /// go far are packed into far pages by size class (16 B steps up to
    /// 128 B, then four classes to each doubling), so `--threshold 16B`
    /// holds a program of many small allocations (sqlite, a compiler) to
    /// --local-mem, for a slower malloc, where the default leaves them in
    /// local memory (charged against the cache) and the process's resident
    /// set past the limit. A forked child cannot read far memory, so keep
    /// the default for a program whose children read what it allocated
    /// before the fork (a shell's subshells).
    #[arg(long, default_value_t = ByteSize(preload_env::DEFAULT_THRESHOLD))]
    threshold: ByteSize,
    /// Size of each process's far heap.
    #[arg(long, default_value_t = ByteSize(preload_env::DEFAULT_FAR_BYTES))]
    far_mem: ByteSize,
    /// How long the controller keeps a process's remote memory after last
    /// hearing from it (a bare number: seconds; or 90s, 2m): a process
    /// that exits gives it back at once, one killed (SIGKILL, a crash)
    /// cannot, so its lease runs out instead. Each process renews its
    /// lease every quarter of this; a process stopped for longer (Ctrl-Z,
    /// a debugger) loses its far data and is aborted when it goes on. At
    /// least 1 s; 0: no lease.
    #[arg(long, default_value = "60", value_parser = super::time_secs, value_name = "TIME")]
    lease: std::time::Duration,
    /// Write the runtime counters of every process that used far memory here, as JSON.
    #[arg(long, value_name = "FILE")]
    stats_json: Option<PathBuf>,
    /// Serve the program's fault counters and fault latency histograms
    /// live as Prometheus metrics on this address (`GET /metrics`; port
    /// 0 picks one, printed on stderr), summed over its processes and
    /// updated every second.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// Copies of every far byte, each on another memory node: write-backs
    /// reach every copy before a page counts as clean, reads go to one and
    /// fail over to the next, so the program survives the loss of all but
    /// one. With 1, losing the node stops the program (exit 74). Default: 2
    /// when the rack has two or more memory nodes up, else 1.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=8))]
    replicas: Option<u8>,
    /// Keep far memory erasure-coded instead of copied: `rs:K+M` splits
    /// every 4 KiB page into K data and M parity chunks (Reed-Solomon) on
    /// K+M distinct memory nodes, so the program survives the loss of any
    /// M of them for (K+M)/K times its far bytes (rs:4+2: 1.5x, against
    /// 3x for three copies). K is a power of two up to 128. `stripe:K`
    /// splits pages the same way with no parity: K memory nodes serve each
    /// page in parallel (K paths' bandwidth, one copy: a lost node fails
    /// the program with its error). Not with --replicas.
    #[arg(long, value_name = "rs:K+M|stripe:K", conflicts_with = "replicas")]
    redundancy: Option<farmem_net::Redundancy>,
    /// Inject delay on the program's link to the rack (ThymesisFlow): every
    /// request to a memory node passes one gate, once per gap, and its
    /// reply comes a gap late (the link's latency). A model, as
    /// in `farmem bench delay`: `20us` (a fixed gap), `uniform:10us..50us`,
    /// `exp:30us`, `steps:0=0,1s=50us` (changing mid-run), `rate:200MiB/s`
    /// (a bandwidth: each request's gap is its bytes' time).
    #[arg(long, value_name = "MODEL")]
    delay: Option<farmem_policy::delay::DelayModel>,
    /// Share --delay's link between demand and bulk as DaeMon's queue
    /// controller does (seed 000 §4.1): the pages faults wait for keep
    /// this share of the link while write-backs and log batches wait too,
    /// and either class takes the whole link while the other has nothing
    /// in service. Without it the gate is first come, first served, as
    /// ThymesisFlow's injector is. The share is DaeMon's ratio over 4 KiB
    /// demand pages and a bulk unit (§4.7): 64 KiB (write-back batches),
    /// or the 256 KiB cluster with --engine daemon: 25% reserves 24%.
    /// With --engine page a fault then reads its page alone on the demand
    /// share and its read-ahead window after it, on the bulk share.
    #[arg(
        long,
        value_name = "RATIO",
        requires = "delay",
        conflicts_with = "link"
    )]
    delay_partition: Option<farmem_core::Ratio>,
    /// Inject delay on each memory node's path instead of the whole link:
    /// a gate per node (`rate:100MiB/s` makes every path that fast, so
    /// `--redundancy stripe:2` streams over two at once). Given several
    /// times, memory node `id` takes the (`id` modulo their number)-th.
    #[arg(long, value_name = "MODEL", conflicts_with = "delay")]
    path_delay: Vec<farmem_policy::delay::DelayModel>,
    /// Put the program on a named link, `/dev/shm/farmem-link-NAME`,
    /// shared with every other program on it (ThymesisFlow's MCBN: their
    /// requests take turns at one gate, so its bandwidth divides among
    /// them). Made if missing, with --delay's model (else none); an
    /// existing link keeps its delay unless --delay is given, which sets
    /// it for everyone on it. `farmem link set NAME --delay MODEL` changes
    /// it while they run; the link stays until `farmem link remove NAME`.
    /// `steps:` models cannot be shared: step the delay with `link set`.
    #[arg(long, value_name = "NAME", conflicts_with = "path_delay")]
    link: Option<String>,
    /// Link compression of pages and clusters between the program and its
    /// memory nodes, both ways, each message's codec chosen on its own
    /// (DaeMon §4.4): `auto` packs a page only when its measured ratio and
    /// the link's speed say the bytes saved outweigh the codec's time at
    /// both ends (a `rate:` --delay or --path-delay is the link's speed;
    /// unthrottled loopback is too fast for it to pay), checking a 1 KiB
    /// sample first and backing off on data that does not shrink; `lz`,
    /// `fpc-bdi`, `fve` pack every page with that codec unless it does not
    /// shrink; `off` packs nothing. Memory nodes older than protocol 4
    /// get no packed frames. Bytes on the link and the ratio are in
    /// --stats-json (`link`). See docs/daemon.md.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    link_compression: farmem_wire::LinkMode,
    /// The program and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

pub fn run(args: Args) -> Outcome {
    let (lease_ms, far) = validate(&args)?;
    let preload = find_preload()?;
    let shown = args.command[0].to_string_lossy().into_owned();
    let target = match far_target(&args, far) {
        Ok(t) => Ok(t),
        Err(e) if args.fallback == Fallback::Local => {
            eprintln!("farmem: {e:#}; running `{shown}` on local memory only (--fallback local)");
            Err(format!("{e:#}"))
        }
        Err(e) => {
            eprintln!(
                "farmem: error: {e:#}; `{shown}` was not started (exit {NO_FAR_MEMORY_EXIT}; --fallback local runs it on local memory instead)"
            );
            return Ok(ExitCode::from(NO_FAR_MEMORY_EXIT));
        }
    };

    let stats_tmp = std::env::temp_dir().join(format!(
        "farmem-run-{}-{}.jsonl",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    let _ = std::fs::remove_file(&stats_tmp);
    let live = match &args.metrics {
        Some(addr) => Some(super::run_metrics::Live::start(addr)?),
        None => None,
    };
    let reports = Reports {
        stats: stats_tmp.clone(),
        live: live.as_ref().map(|l| l.dir.clone()),
    };
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    if let Ok(t) = &target {
        shim_env(&mut cmd, &args, t, preload, far, lease_ms, &reports);
    }
    let start = Instant::now();
    let code = run_child(cmd, &shown)?;
    let seconds = start.elapsed().as_secs_f64();
    let resident = peak_resident();
    // Stops a local rack.
    let target = target.map(|t| t.controller.clone());

    let lines = read_stats(&stats_tmp);
    let _ = std::fs::remove_file(&stats_tmp);
    let (processes, fallbacks): (Vec<Value>, Vec<Value>) =
        lines.into_iter().partition(|l| l.get("fallback").is_none());
    let total = sum_stats(&processes, "stats");
    let link = link_totals(&processes);
    let compressed = sum_stats(&processes, "compressed");
    let run = Summary {
        shown: &shown,
        code,
        seconds,
        resident,
        processes: &processes,
        fallbacks: &fallbacks,
        total: &total,
        compressed: &compressed,
        backend: &args.backend,
    };
    match &target {
        Ok(_) => run.print(&args),
        Err(why) => eprintln!(
            "farmem: `{shown}` exited {code} after {seconds:.2} s on local memory only ({why}); its largest peak resident set was {}, all of it local",
            ByteSize(resident)
        ),
    }
    if let Some(path) = &args.stats_json {
        let report = json!({
            "command": args.command.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>(),
            "exit_code": code,
            "seconds": seconds,
            "local_mem": args.local_mem.bytes(),
            "far_mem": far,
            "threshold": args.threshold.bytes(),
            "backend": args.backend.to_string(),
            "dirty": dirty(&args).to_string(),
            "fault_path": args.fault_path.to_string(),
            "engine": args.engine.to_string(),
            "fault_wait": args.fault_wait.to_string(),
            "fault_around": args.fault_around,
            "probation": args.probation,
            "link_compression": args.link_compression.to_string(),
            "link": link,
            "controller": target.as_ref().ok(),
            "fallback_reason": target.as_ref().err(),
            "peak_resident_bytes": resident,
            "page_amplification": page_amplification(&total, dirty(&args)),
            "total": total,
            "compressed": (!compressed.is_empty()).then_some(&compressed),
            "processes": processes,
            "fallbacks": fallbacks,
        });
        std::fs::write(path, format!("{report:#}\n"))
            .with_context(|| format!("writing --stats-json {}", path.display()))?;
    }
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// Checks the flags; the lease in ms and the far heap's size.
pub(crate) fn validate(args: &Args) -> anyhow::Result<(u64, u64)> {
    if let Some(p) = &args.policy {
        p.parse::<farmem_policy::cache::PolicyConfig>()
            .map_err(|e| anyhow::anyhow!("--policy {p}: {e}"))?;
    }
    anyhow::ensure!(args.memnodes >= 1, "--memnodes must be at least 1");
    let lease = args.lease.as_secs_f64();
    anyhow::ensure!(
        lease == 0.0 || (1.0..=4_000_000.0).contains(&lease),
        "--lease must be 0 (none) or between 1 and 4000000 seconds, got {lease} s"
    );
    let min = min_local_mem();
    anyhow::ensure!(
        args.local_mem.bytes() >= min,
        "--local-mem {} is too small: the local cache of far pages must be at least {} (it holds the pages being faulted in and evicted)",
        args.local_mem,
        ByteSize(min)
    );
    anyhow::ensure!(args.threshold.bytes() > 0, "--threshold must be positive");
    anyhow::ensure!(
        args.engine == farmem_runtime::Engine::Page
            || args.fault_path == farmem_runtime::FaultPath::Thread,
        "--engine daemon needs --fault-path thread: a signal handler cannot wait for the selection unit"
    );
    anyhow::ensure!(
        args.backend.needs_rack() || (args.delay.is_none() && args.path_delay.is_empty()),
        "--delay and --path-delay act on the link to memory nodes; --backend {} uses none",
        args.backend
    );
    anyhow::ensure!(
        args.backend.needs_rack() || args.link.is_none(),
        "--link is the link to memory nodes; --backend {} uses none",
        args.backend
    );
    if let Some(name) = &args.link {
        // Made or set here, once: the program's processes only join it,
        // so one starting later does not undo a `farmem link set`.
        let link = farmem_net::link::SharedLink::open_or_create(name, args.delay.as_ref());
        link.context("--link")?;
    }
    let far = args.far_mem.bytes().div_ceil(128 << 20) * (128 << 20);
    anyhow::ensure!(far > 0, "--far-mem must be positive");
    Ok((args.lease.as_millis() as u64, far))
}

/// The smallest --local-mem: the runtime's own floor (every fault handler's
/// page in flight plus an eviction batch), and at least 1 MiB.
fn min_local_mem() -> u64 {
    let cfg = farmem_runtime::Config::default();
    let pages = farmem_runtime::config::MIN_LOCAL_PAGES + (cfg.handlers + cfg.fillers) as u64;
    (pages * farmem_runtime::PAGE).max(1 << 20)
}

/// The rack the program's processes use, kept alive until it ends.
struct Target {
    /// None for a backend that needs no rack.
    controller: Option<String>,
    /// Passed on as FARMEM_TOKEN_FILE (absolute: a process may chdir and exec).
    token_file: Option<PathBuf>,
    /// Copies of each far byte (FARMEM_REPLICAS).
    replicas: u8,
    /// Erasure coding instead of copies (FARMEM_REDUNDANCY).
    redundancy: Option<farmem_net::Redundancy>,
    _rack: Option<LocalRack>,
}

/// Starts a local rack (with a token of its own) or reads --token-file, and
/// checks the controller the way each process will reach it, so the
/// common failures come out here, naming the controller, before the
/// program has run.
fn far_target(args: &Args, far: u64) -> anyhow::Result<Target> {
    if !args.backend.needs_rack() {
        check_backend(&args.backend, far)?;
        return Ok(Target {
            controller: None,
            token_file: None,
            replicas: 1,
            redundancy: None,
            _rack: None,
        });
    }
    let (controller, token, rack) = connect_target(
        args.controller.as_deref(),
        args.token_file.as_deref(),
        || LocalRack::start(args.memnodes, far + (1 << 30), 128 << 20),
    )?;
    let up = check_controller(&controller, token)?;
    let coded = args.redundancy.and_then(|r| Some((r, r.shards()?)));
    if let (Some((r, (k, m))), Some(up)) = (coded, up) {
        let shards = usize::from(k) + usize::from(m);
        anyhow::ensure!(
            shards <= up,
            "--redundancy {r} needs {shards} memory nodes up; the rack of controller {controller} has {up}"
        );
    }
    let replicas = match (args.replicas, up) {
        _ if args.redundancy.is_some() => 1,
        (Some(n), Some(up)) if usize::from(n) > up => bail!(
            "--replicas {n} needs {n} memory nodes up; the rack of controller {controller} has {up}"
        ),
        (Some(n), _) => n,
        (None, Some(up)) if up >= 2 => 2,
        (None, _) => 1,
    };
    let token_file = match (&rack, &args.token_file) {
        (Some(r), _) => Some(r.token_file().to_path_buf()),
        (None, Some(f)) => Some(
            std::fs::canonicalize(f)
                .with_context(|| format!("finding token file {}", f.display()))?,
        ),
        (None, None) => None,
    };
    Ok(Target {
        controller: Some(controller),
        token_file,
        replicas,
        redundancy: args.redundancy,
        _rack: rack,
    })
}

/// Builds `backend` once as each process will, so a file that cannot be
/// had (unwritable, no direct I/O, no room for the far heap) is named here,
/// before the program has run; the file goes with the check.
fn check_backend(backend: &Backend, far: u64) -> anyhow::Result<()> {
    let local = 1 << 20;
    backend
        .build(None, local, far)
        .map(drop)
        .map_err(|e| anyhow::anyhow!("--backend {backend}: {e}"))
}

/// Connects and authenticates to `controller` as a process would, and
/// makes sure its rack has a memory node up with room left; returns how
/// many are up, when the controller says.
fn check_controller(controller: &str, token: Vec<u8>) -> anyhow::Result<Option<usize>> {
    let anonymous = token.is_empty();
    let name = format!("farmem-run-check-{}", std::process::id());
    let cfg = ClientConfig::new(name, farmem_wire::Role::Compute).with_token(token);
    let ctl = match ControllerClient::connect(controller, &cfg) {
        Ok(c) => c,
        Err(e @ NetError::Auth(_)) if anonymous => bail!(
            "controller {controller}: {e} (no --token-file given: a rack started with --token-file admits only holders of its token)"
        ),
        Err(e @ NetError::Auth(_)) => bail!(
            "controller {controller}: {e} (is --token-file the token the rack was started with?)"
        ),
        Err(e) => bail!("controller {controller}: {e}"),
    };
    // A controller that does not list its nodes to a compute client leaves
    // the processes to find out.
    if let Ok(nodes) = ctl.nodes() {
        let up: Vec<_> = nodes.iter().filter(|n| n.up).collect();
        anyhow::ensure!(
            !up.is_empty(),
            "controller {controller} has no memory node up ({} registered)",
            nodes.len()
        );
        let capacity: u64 = up.iter().map(|n| n.capacity).sum();
        let free: u64 = up
            .iter()
            .map(|n| n.capacity.saturating_sub(n.granted))
            .sum();
        anyhow::ensure!(
            free > 0,
            "the rack of controller {controller} is full: its {} memory node(s) up have granted all of their {}",
            up.len(),
            ByteSize(capacity)
        );
        return Ok(Some(up.len()));
    }
    Ok(None)
}

/// Where the program's processes report: a stats line each at exit, and
/// their live statistics for `--metrics`.
struct Reports {
    stats: PathBuf,
    live: Option<PathBuf>,
}

/// The environment that loads the shim into `cmd` and points it at `target`.
fn shim_env(
    cmd: &mut Command,
    args: &Args,
    target: &Target,
    preload: PathBuf,
    far: u64,
    lease_ms: u64,
    reports: &Reports,
) {
    let mut ld_preload = preload.into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        ld_preload.push(":");
        ld_preload.push(old);
    }
    cmd.env("LD_PRELOAD", ld_preload);
    let env = PreloadEnv {
        controller: target.controller.clone(),
        local_bytes: args.local_mem.bytes(),
        far_bytes: far,
        threshold: args.threshold.bytes(),
        backend: args.backend.clone(),
        dirty: dirty(args),
        fault_path: args.fault_path,
        engine: args.engine,
        fault_wait: args.fault_wait,
        fault_around: args.fault_around,
        policy: args.policy.clone(),
        probation: args.probation,
        stats_json: Some(reports.stats.clone()),
        metrics_dir: reports.live.clone(),
        name: preload_env::DEFAULT_NAME.into(),
        token_file: target.token_file.clone(),
        fallback: match args.fallback {
            Fallback::Fail => preload_env::Fallback::Fail,
            Fallback::Local => preload_env::Fallback::Local,
        },
        replicas: Some(target.replicas),
        redundancy: target.redundancy,
        // On a link, the delay is the link's (set up in `validate`).
        delay: args.delay.clone().filter(|_| args.link.is_none()),
        delay_partition: args.delay_partition,
        path_delays: args.path_delay.clone(),
        link: args.link.clone(),
        link_compression: args.link_compression,
        lease_ms,
    };
    for (var, value) in env.vars() {
        match value {
            Some(v) => cmd.env(var, v),
            None => cmd.env_remove(var),
        };
    }
}

/// Runs the program to its end, passing on the signals farmem gets; its
/// exit code (a signal becomes 128+signo).
fn run_child(mut cmd: Command, shown: &str) -> anyhow::Result<i32> {
    // Stay alive until the program ends so the rack is stopped cleanly:
    // Ctrl-C reaches the program from the terminal, SIGTERM and SIGHUP sent
    // to farmem are passed on to it (held until it has a pid). Caught
    // signals revert to their defaults in the program at exec.
    // SAFETY: installs async-signal-safe handlers (atomics and kill).
    unsafe {
        libc::signal(libc::SIGINT, ignore as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, forward as *const () as libc::sighandler_t);
        libc::signal(libc::SIGHUP, forward as *const () as libc::sighandler_t);
    }
    let mut child = cmd.spawn().with_context(|| format!("starting `{shown}`"))?;
    CHILD.store(child.id() as i32, Ordering::SeqCst);
    let pending = PENDING.swap(0, Ordering::SeqCst);
    if pending != 0 {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(child.id() as i32, pending) };
    }
    let status = child
        .wait()
        .with_context(|| format!("waiting for `{shown}`"))?;
    CHILD.store(0, Ordering::SeqCst);
    Ok(
        match (
            status.code(),
            std::os::unix::process::ExitStatusExt::signal(&status),
        ) {
            (Some(c), _) => c,
            (None, Some(sig)) => 128 + sig,
            (None, None) => 1,
        },
    )
}

/// The largest peak resident set among the processes waited for so far
/// (the program, and whatever it waited for itself).
fn peak_resident() -> u64 {
    // SAFETY: getrusage fills the struct we pass.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut u);
        u
    };
    usage.ru_maxrss.max(0) as u64 * 1024
}

/// Why the shim of the first process that got no far memory gave up.
fn fallback_reason(fallbacks: &[Value]) -> String {
    fallbacks
        .iter()
        .find_map(|f| f.get("reason").and_then(Value::as_str))
        .map_or_else(
            || "far memory could not be had, see above".to_string(),
            str::to_string,
        )
}

/// What the run did, for the `farmem:` lines at its end.
/// Peak resident set over --local-mem by this factor gets a line saying why.
const OVER_LIMIT_NOTED: f64 = 1.1;

struct Summary<'a> {
    shown: &'a str,
    code: i32,
    seconds: f64,
    resident: u64,
    processes: &'a [Value],
    fallbacks: &'a [Value],
    total: &'a Map<String, Value>,
    /// Counters of the compressed pools (`--backend compressed`), summed.
    compressed: &'a Map<String, Value>,
    backend: &'a Backend,
}

impl Summary<'_> {
    fn print(&self, args: &Args) {
        let (shown, code, seconds) = (self.shown, self.code, self.seconds);
        let get = |k: &str| self.total.get(k).and_then(Value::as_u64).unwrap_or(0);
        if code == farmem_runtime::LOST_EXIT_CODE && self.processes.is_empty() {
            // The runtime ends such a process at once, stats unwritten.
            eprintln!(
                "farmem: `{shown}` was stopped after {seconds:.2} s (exit {code}): far memory it needed was lost, as the `far memory lost` line above says"
            );
        } else if self.processes.is_empty() {
            eprintln!(
                "farmem: `{shown}` exited {code} after {seconds:.2} s; nothing went to far memory{}",
                if self.fallbacks.is_empty() {
                    format!(" (no allocation of {} or more)", args.threshold)
                } else {
                    String::new()
                }
            );
        } else {
            let peak: u64 = self
                .processes
                .iter()
                .filter_map(|p| p.get("far_bytes_peak").and_then(Value::as_u64))
                .sum();
            let n = self.processes.len();
            eprintln!(
                "farmem: `{shown}` exited {code} after {seconds:.2} s; far memory used {} (peak, {n} process{}), local {}",
                ByteSize(peak),
                if n == 1 { "" } else { "es" },
                args.local_mem,
            );
            eprintln!(
                "farmem: faults {} missing + {} write-protect ({} more avoided: pages fetched writable on their write history); fetched {}; written back {}; evicted {} pages ({} dirty)",
                get("faults_missing"),
                get("faults_wp"),
                get("writes_predicted"),
                ByteSize(get("bytes_fetched")),
                ByteSize(get("bytes_written_back")),
                get("pages_evicted_clean") + get("pages_evicted_dirty"),
                get("pages_evicted_dirty"),
            );
            self.print_compressed();
            self.print_over_limit(args);
            if let Some(amp) = page_amplification(self.total, dirty(args)) {
                eprintln!(
                    "farmem: dirty amplification avoided: whole dirty pages would have been {amp:.1}x the lines written back"
                );
            }
        }
        self.print_fallbacks();
    }

    /// Why the program's peak resident set went past --local-mem, when it
    /// went well past: file pages are not charged, and anonymous memory
    /// farmem cannot move is charged only up to half the limit, so a
    /// program whose own small allocations and stacks (and farmem's
    /// buffers) take more runs over, where a cgroup's limit would swap
    /// them.
    fn print_over_limit(&self, args: &Args) {
        let limit = args.local_mem.bytes();
        if limit == 0 || (self.resident as f64) < limit as f64 * OVER_LIMIT_NOTED {
            return;
        }
        let outside = self
            .processes
            .iter()
            .filter_map(|p| {
                let s = &p["stats"];
                s["outside_pages_peak"]
                    .as_u64()
                    .or(s["outside_pages"].as_u64())
            })
            .max()
            .unwrap_or(0)
            * 4096;
        let over = format!(
            "farmem: peak resident set {} is {:.0}% over --local-mem {}",
            ByteSize(self.resident),
            (self.resident as f64 / limit as f64 - 1.0) * 100.0,
            args.local_mem,
        );
        if outside <= limit / 2 {
            eprintln!(
                "{over}: the pages of libraries and other files, which the limit does not charge (a cgroup charges the page cache to whoever read it first)"
            );
            return;
        }
        eprintln!(
            "{over}: up to {} of anonymous memory farmem does not move (allocations under --threshold {}, stacks, farmem's own buffers), of which only half the limit is charged, and file pages, which are not; `--threshold 16B` moves the program's small allocations far too, packed by size class",
            ByteSize(outside),
            args.threshold,
        );
    }

    /// What the compressed pool kept, passed on, and served.
    fn print_compressed(&self) {
        if self.compressed.is_empty() {
            return;
        }
        let get = |k: &str| self.compressed.get(k).and_then(Value::as_u64).unwrap_or(0);
        let ratio = get("bytes_in") as f64 / get("bytes_out").max(1) as f64;
        let below = match self.backend.bottom {
            Bottom::Remote => "the memory nodes",
            Bottom::File(_) => "the file",
        };
        eprintln!(
            "farmem: compressed pool: kept {} pages ({ratio:.1}x smaller) and {} all-zero ones; {} did not shrink ({} of them not tried: the data had stopped shrinking) and {} were demoted to {below}; {} page reads from the pool, {} from {below}; {} held at exit",
            get("stored"),
            get("stored_zero"),
            get("passed_down"),
            get("untried"),
            get("demoted"),
            get("hits"),
            get("misses"),
            ByteSize(get("bytes")),
        );
        if self.backend.compressed.is_some_and(|c| c.tuner.is_some()) {
            eprintln!(
                "farmem: auto: the pool was turned off or on again {} times; {} pages went to {below} while it was off",
                get("switches"),
                get("off_passed"),
            );
        }
    }

    /// The processes that got no far memory: how many, why, and what that
    /// left in local memory.
    fn print_fallbacks(&self) {
        let count = |kind: &str| {
            self.fallbacks
                .iter()
                .filter(|f| f.get("fallback").and_then(Value::as_str) == Some(kind))
                .count()
        };
        let (local, stopped) = (count("local"), count("fail"));
        let why = fallback_reason(self.fallbacks);
        let s = |n: usize| if n == 1 { "" } else { "es" };
        if local > 0 {
            eprintln!(
                "farmem: {local} process{} ran on local memory only (--fallback local): {why}; the largest peak resident set was {}, all of it local",
                s(local),
                ByteSize(self.resident)
            );
        }
        if stopped > 0 {
            eprintln!(
                "farmem: {stopped} process{} stopped with exit {NO_FAR_MEMORY_EXIT} before running, as far memory could not be had: {why} (--fallback local runs them on local memory instead)",
                s(stopped)
            );
        }
    }
}

/// The running program, for signal forwarding (0: none).
static CHILD: AtomicI32 = AtomicI32::new(0);
/// A signal to forward that arrived before the program had a pid.
static PENDING: AtomicI32 = AtomicI32::new(0);

extern "C" fn ignore(_sig: libc::c_int) {}

extern "C" fn forward(sig: libc::c_int) {
    let pid = CHILD.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill(2) is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    } else {
        PENDING.store(sig, Ordering::SeqCst);
    }
}

/// `libfarmem_preload.so` beside the farmem binary (cargo puts both in
/// `target/<profile>/`), or where FARMEM_PRELOAD points.
pub fn find_preload() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("FARMEM_PRELOAD").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        anyhow::ensure!(p.is_file(), "FARMEM_PRELOAD={} is not a file", p.display());
        return Ok(p);
    }
    let exe = std::env::current_exe().context("finding the farmem binary")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    for cand in [dir.join(PRELOAD), dir.join("deps").join(PRELOAD)] {
        if cand.is_file() {
            return Ok(cand);
        }
    }
    bail!(
        "{PRELOAD} not found next to {}; build it with `cargo build --release -p farmem-preload` (or set FARMEM_PRELOAD)",
        exe.display()
    )
}

/// One JSON object per process that used far memory.
fn read_stats(path: &Path) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| match serde_json::from_str::<Value>(l) {
            Ok(v) => Some(v),
            Err(e) => {
                eprintln!("farmem: ignoring a malformed stats line ({e})");
                None
            }
        })
        .collect()
}

/// Kona's dirty-data amplification, seen from line tracking: the bytes
/// whole dirty pages would have cost over the dirty lines actually written
/// back. None when nothing dirty was written back, or in page mode (every
/// page is written whole, so the truly dirty lines are not known).
fn page_amplification(total: &Map<String, Value>, dirty: farmem_runtime::DirtyMode) -> Option<f64> {
    if dirty == farmem_runtime::DirtyMode::Page {
        return None;
    }
    let get = |k: &str| total.get(k).and_then(Value::as_u64).unwrap_or(0);
    let lines = get("dirty_lines_shipped");
    let pages = get("pages_evicted_dirty") + get("pages_synced");
    (lines > 0 && lines < pages * 64).then(|| pages as f64 * 64.0 / lines as f64)
}

/// The dirty tracking asked for, or the backend's.
fn dirty(args: &Args) -> farmem_runtime::DirtyMode {
    args.dirty.unwrap_or_else(|| args.backend.default_dirty())
}

/// Integer counters of the processes' `key` object, summed.
/// Every process's bytes on the link summed, with the compression ratio
/// of all their page payloads (raw over wire bytes, both ways).
fn link_totals(processes: &[Value]) -> Map<String, Value> {
    let mut link = sum_stats(processes, "link");
    let get = |k: &str| link.get(k).and_then(Value::as_u64).unwrap_or(0);
    let raw = get("read_raw_bytes") + get("write_raw_bytes");
    let wire = get("read_wire_bytes") + get("write_wire_bytes");
    let ratio = if wire == 0 {
        1.0
    } else {
        raw as f64 / wire as f64
    };
    link.insert("compression_ratio".into(), json!(ratio));
    link
}

fn sum_stats(processes: &[Value], key: &str) -> Map<String, Value> {
    let mut total = Map::new();
    for p in processes {
        if let Some(stats) = p.get(key).and_then(Value::as_object) {
            for (k, v) in stats {
                if let Some(n) = v.as_u64() {
                    let sum = total.get(k).and_then(Value::as_u64).unwrap_or(0) + n;
                    total.insert(k.clone(), json!(sum));
                }
            }
        }
    }
    total
}

/// `--probation`: a share of the local memory, from 0 to 0.5.
fn probation_share(s: &str) -> Result<f64, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| (0.0..=0.5).contains(v))
        .ok_or_else(|| format!("`{s}`: expected a share of --local-mem from 0 to 0.5"))
}
