//! `farmem run`: an unmodified program with its large allocations in far
//! memory, through the `farmem-preload` shim (LD_PRELOAD).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};
use farmem_core::ByteSize;
use serde_json::{Map, Value, json};

use super::Outcome;
use super::local::LocalRack;

const PRELOAD: &str = "libfarmem_preload.so";

/// Run CMD with its allocations of at least --threshold bytes (malloc
/// family and anonymous private mmap) in far memory on memory nodes.
///
/// Without --controller, a controller and --memnodes memory nodes start on
/// loopback for the run and stop after it. The program's stdout, stderr and
/// exit code are its own (a signal becomes 128+signo); farmem's summary goes
/// to stderr with a `farmem:` prefix.
#[derive(clap::Args)]
#[command(after_help = "\
fork and exec: the parent is never affected. A forked child places new \
allocations in local memory; far memory it inherited is made inaccessible \
(touching it raises SIGSEGV), because pages that were remote at the fork \
cannot be served without the parent's runtime. So fork+exec, system() and \
popen() work, and a child that reads its parent's far data fails loudly \
instead of computing on zeros (redis: run it with --save \"\"). A program \
started by exec gets its own runtime on the same controller.")]
pub struct Args {
    /// Local memory that caches far pages.
    #[arg(long, default_value = "256MiB")]
    local_mem: ByteSize,
    /// Controller of an existing rack (host:port); default: start one locally.
    #[arg(long)]
    controller: Option<String>,
    /// Memory nodes to start when no --controller is given.
    #[arg(long, default_value_t = 2)]
    memnodes: usize,
    /// Dirty tracking: `line` (Kona) or `page`.
    #[arg(long, default_value = "line")]
    dirty: String,
    /// Replacement policy of the local cache, at page granularity: lru, fifo, 4-way (alias
    /// set-assoc; Kona), clock, kona-pc (alias 2q; Linux active/inactive), filter (UniMem's
    /// Filter-Cache). The same policy objects the simulator uses. Default: lru.
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
    /// Fault-around: the most pages a fault brings in after its own when
    /// the program touches memory in order (never-written ones filled
    /// locally, far ones read in one request on the thread path; the window
    /// doubles from 1 as the stream goes on); 0 turns it off.
    #[arg(long, default_value_t = farmem_policy::readahead::ReadaheadConfig::default().max_blocks,
          value_parser = clap::value_parser!(u32).range(0..=farmem_runtime::MAX_FAULT_AROUND as i64))]
    fault_around: u32,
    /// Smallest allocation placed in far memory.
    #[arg(long, default_value = "1MiB")]
    threshold: ByteSize,
    /// Size of each process's far heap.
    #[arg(long, default_value = "8GiB")]
    far_mem: ByteSize,
    /// Seconds the controller keeps a process's remote memory after last
    /// hearing from it: a process that exits gives it back at once, one
    /// killed (SIGKILL, a crash) cannot, so its lease runs out instead.
    /// Each process renews its lease every quarter of this; a process
    /// stopped for longer (Ctrl-Z, a debugger) loses its far data and is
    /// aborted when it goes on. At least 1; 0: no lease.
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
    lease: f64,
    /// Write the runtime counters of every process that used far memory here, as JSON.
    #[arg(long, value_name = "FILE")]
    stats_json: Option<PathBuf>,
    /// The program and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

pub fn run(args: Args) -> Outcome {
    args.dirty
        .parse::<farmem_runtime::DirtyMode>()
        .context("--dirty")?;
    if let Some(p) = &args.policy {
        p.parse::<farmem_policy::cache::PolicyConfig>()
            .map_err(|e| anyhow::anyhow!("--policy {p}: {e}"))?;
    }
    anyhow::ensure!(args.memnodes >= 1, "--memnodes must be at least 1");
    anyhow::ensure!(
        args.lease == 0.0 || (args.lease.is_finite() && (1.0..=4_000_000.0).contains(&args.lease)),
        "--lease must be 0 (none) or between 1 and 4000000 seconds, got {}",
        args.lease
    );
    let lease_ms = (args.lease * 1000.0).round() as u64;
    anyhow::ensure!(args.threshold.bytes() > 0, "--threshold must be positive");
    let preload = find_preload()?;
    let far = args.far_mem.bytes().div_ceil(128 << 20) * (128 << 20);
    anyhow::ensure!(far > 0, "--far-mem must be positive");

    let rack = match &args.controller {
        Some(_) => None,
        None => Some(
            LocalRack::start(args.memnodes, far + (1 << 30), 128 << 20)
                .context("starting a local rack")?,
        ),
    };
    let controller = match (&args.controller, &rack) {
        (Some(c), _) => c.clone(),
        (None, Some(r)) => r.controller.clone(),
        (None, None) => unreachable!("a rack is started when no controller is given"),
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
    let mut ld_preload = preload.into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        ld_preload.push(":");
        ld_preload.push(old);
    }
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..])
        .env("LD_PRELOAD", ld_preload)
        .env("FARMEM_CONTROLLER", &controller)
        .env("FARMEM_LOCAL_MEM", args.local_mem.bytes().to_string())
        .env("FARMEM_FAR_MEM", far.to_string())
        .env("FARMEM_THRESHOLD", args.threshold.bytes().to_string())
        .env("FARMEM_DIRTY", &args.dirty)
        .env("FARMEM_FAULT_PATH", args.fault_path.to_string())
        .env("FARMEM_FAULT_AROUND", args.fault_around.to_string())
        .env("FARMEM_STATS_JSON", &stats_tmp)
        .env("FARMEM_NAME", "farmem-run")
        .env("FARMEM_LEASE_MS", lease_ms.to_string());
    match &args.policy {
        Some(p) => cmd.env("FARMEM_POLICY", p),
        None => cmd.env_remove("FARMEM_POLICY"),
    };
    let shown = args.command[0].to_string_lossy().into_owned();
    let start = Instant::now();
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
    let seconds = start.elapsed().as_secs_f64();
    drop(rack);

    let code = match (
        status.code(),
        std::os::unix::process::ExitStatusExt::signal(&status),
    ) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    };
    let processes = read_stats(&stats_tmp);
    let _ = std::fs::remove_file(&stats_tmp);
    let total = sum_stats(&processes);
    let get = |k: &str| total.get(k).and_then(Value::as_u64).unwrap_or(0);
    if processes.is_empty() {
        eprintln!(
            "farmem: `{shown}` exited {code} after {seconds:.2} s; nothing went to far memory (no allocation of {} or more, or the runtime could not start)",
            args.threshold
        );
    } else {
        let peak: u64 = processes
            .iter()
            .filter_map(|p| p.get("far_bytes_peak").and_then(Value::as_u64))
            .sum();
        eprintln!(
            "farmem: `{shown}` exited {code} after {seconds:.2} s; far memory used {} (peak, {} process{}), local {}",
            ByteSize(peak),
            processes.len(),
            if processes.len() == 1 { "" } else { "es" },
            args.local_mem,
        );
        eprintln!(
            "farmem: faults {} missing + {} write-protect; fetched {}; written back {}; evicted {} pages ({} dirty)",
            get("faults_missing"),
            get("faults_wp"),
            ByteSize(get("bytes_fetched")),
            ByteSize(get("bytes_written_back")),
            get("pages_evicted_clean") + get("pages_evicted_dirty"),
            get("pages_evicted_dirty"),
        );
        if let Some(amp) = page_amplification(&total) {
            eprintln!(
                "farmem: dirty amplification avoided: whole dirty pages would have been {amp:.1}x the lines written back"
            );
        }
    }
    if let Some(path) = &args.stats_json {
        let report = json!({
            "command": args.command.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>(),
            "exit_code": code,
            "seconds": seconds,
            "local_mem": args.local_mem.bytes(),
            "far_mem": far,
            "threshold": args.threshold.bytes(),
            "dirty": args.dirty,
            "fault_path": args.fault_path.to_string(),
            "fault_around": args.fault_around,
            "controller": controller,
            "page_amplification": page_amplification(&total),
            "total": total,
            "processes": processes,
        });
        std::fs::write(path, format!("{report:#}\n"))
            .with_context(|| format!("writing --stats-json {}", path.display()))?;
    }
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
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
/// target/<profile>/), or where FARMEM_PRELOAD points.
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
fn page_amplification(total: &Map<String, Value>) -> Option<f64> {
    let get = |k: &str| total.get(k).and_then(Value::as_u64).unwrap_or(0);
    let lines = get("dirty_lines_shipped");
    let pages = get("pages_evicted_dirty") + get("pages_synced");
    (lines > 0 && lines < pages * 64).then(|| pages as f64 * 64.0 / lines as f64)
}

/// Integer counters summed over processes.
fn sum_stats(processes: &[Value]) -> Map<String, Value> {
    let mut total = Map::new();
    for p in processes {
        if let Some(stats) = p.get("stats").and_then(Value::as_object) {
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
