//! Benchmarks the CLI runs (`farmem bench kona`, `farmem bench fault`),
//! over any store, so the same code measures MemStore and the network.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use farmem_core::LatencyHistogram;

use crate::config::{Config, DirtyMode, WaitMode};
use crate::error::RuntimeError;
use crate::handler::Idler;
use crate::page::{PAGE, PageBuf, map_pages};
use crate::runtime::Runtime;
use crate::store::{RemoteStore, SlabSource};
use crate::uffd::{ReadResult, Uffd};

/// Kona's microbenchmark (seed 001, §5.1): each thread owns a region and
/// writes one cache line in every page, eviction running concurrently.
#[derive(Debug, Clone)]
pub struct KonaOpts {
    pub threads: usize,
    /// Region size per thread.
    pub region_bytes: u64,
    /// Local cache as a fraction of the total working set (0 < f <= 1).
    pub local_fraction: f64,
    /// Times each mode runs; each reports its median run. The modes take
    /// turns going first, so no mode always runs on a machine warmed (or
    /// disturbed) by the same predecessor.
    pub rounds: usize,
    /// Memory to take from the kernel and give back right before each
    /// timed run (0: none), so its first faults find the allocator warm.
    pub warm_bytes: u64,
    /// Everything else (wait mode, fillers, policy) comes from here.
    pub base: Config,
}

/// One mode's run.
#[derive(Debug, Clone, Serialize)]
pub struct KonaRun {
    pub seconds: f64,
    pub bytes_written_back: u64,
    pub pages_evicted: u64,
    pub faults: u64,
    pub stats: crate::stats::Stats,
}

#[derive(Debug, Clone, Serialize)]
pub struct KonaReport {
    pub threads: usize,
    pub region_bytes: u64,
    pub local_bytes: u64,
    pub line: KonaRun,
    pub page: KonaRun,
    /// Page mode as Kona-VM runs it: a write to a missing page takes a
    /// second (write-protect) fault to mark it dirty, and no fault-around.
    pub kona_vm: KonaRun,
    /// page seconds / line seconds.
    pub speedup: f64,
    /// kona_vm seconds / line seconds: the paper's comparison.
    pub speedup_vs_kona_vm: f64,
    /// page bytes written back / line bytes written back.
    pub writeback_reduction: f64,
    pub rounds: usize,
    /// Memory taken and freed before each timed run.
    pub warm_bytes: u64,
    /// Every run's seconds, in round order: the spread behind the medians.
    pub seconds_by_round: RoundSeconds,
}

#[derive(Debug, Clone, Serialize)]
pub struct RoundSeconds {
    pub line: Vec<f64>,
    pub page: Vec<f64>,
    pub kona_vm: Vec<f64>,
}

/// The run of median time, and every run's seconds in order.
fn median_run(runs: Vec<KonaRun>) -> (KonaRun, Vec<f64>) {
    let seconds = runs.iter().map(|r| r.seconds).collect();
    let mut runs = runs;
    runs.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    let mid = runs.len() / 2;
    (runs.swap_remove(mid), seconds)
}

fn kona_run(
    opts: &KonaOpts,
    dirty: DirtyMode,
    writable_on_write_fault: bool,
    store: &Arc<dyn RemoteStore>,
    slabs: &Arc<dyn SlabSource>,
) -> Result<KonaRun, RuntimeError> {
    let total = opts.region_bytes * opts.threads as u64;
    let local = ((total as f64 * opts.local_fraction) as u64 / PAGE).max(64) * PAGE;
    let mut cfg = Config {
        local_bytes: local,
        dirty,
        slab_batch: total,
        writable_on_write_fault,
        ..opts.base.clone()
    };
    // Kona's hardware tracks lines without a copy: line mode here keeps a
    // base at every first write, whatever share of the cache they take.
    cfg.diff_base.max_share = 1.0;
    if !writable_on_write_fault {
        // Kona-VM as the paper runs it: two faults per page, none avoided.
        cfg.fault_around.max_blocks = 0;
    }
    let rt = Runtime::new(cfg, store.clone(), slabs.clone())?;
    let regions = (0..opts.threads)
        .map(|_| rt.region(opts.region_bytes))
        .collect::<Result<Vec<_>, _>>()?;
    warm_page_allocator(opts.warm_bytes);
    let start = Instant::now();
    std::thread::scope(|s| {
        for r in &regions {
            s.spawn(move || {
                let base = r.as_ptr();
                for p in 0..r.len() / PAGE as usize {
                    let off = p * PAGE as usize + (p % 64) * 64;
                    // SAFETY: in bounds, and only this thread touches its region.
                    unsafe {
                        let line = base.add(off) as *mut u64;
                        for w in 0..8 {
                            line.add(w).write_volatile(p as u64 + w as u64 + 1);
                        }
                    }
                }
            });
        }
    });
    // As in the paper: the application's run time, eviction concurrent;
    // what is still cached at the end is not written back.
    let seconds = start.elapsed().as_secs_f64();
    let st = rt.stats();
    Ok(KonaRun {
        seconds,
        bytes_written_back: st.bytes_written_back,
        pages_evicted: st.pages_evicted_clean + st.pages_evicted_dirty,
        faults: st.faults_missing + st.faults_wp,
        stats: st,
    })
}

/// Touches `bytes` of fresh memory and frees it. On a VM whose balloon
/// reports free memory to the host (free page reporting), memory freed a
/// while ago (the previous run's regions, the memory nodes' data) costs a
/// host fault when the kernel hands it out again, which made one run of a
/// mode take up to 4x another's. Memory freed just now has not been
/// reported yet, so the run that follows allocates at the machine's own
/// speed, whichever mode it is.
fn warm_page_allocator(bytes: u64) {
    if bytes == 0 {
        return;
    }
    let len = bytes as usize;
    // SAFETY: a fresh private anonymous mapping, populated, then unmapped;
    // nothing else refers to it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
            -1,
            0,
        );
        if p != libc::MAP_FAILED {
            libc::munmap(p, len);
        }
    }
}

pub fn kona(
    opts: &KonaOpts,
    store: Arc<dyn RemoteStore>,
    slabs: Arc<dyn SlabSource>,
) -> Result<KonaReport, RuntimeError> {
    if opts.threads == 0
        || opts.rounds == 0
        || opts.region_bytes < PAGE
        || !(opts.local_fraction > 0.0 && opts.local_fraction <= 1.0)
    {
        return Err(RuntimeError::Config(
            "kona bench needs threads >= 1, rounds >= 1, region >= 1 page, 0 < local <= 100%"
                .into(),
        ));
    }
    // (dirty mode, writable on a write fault): line, page, Kona-VM.
    const MODES: [(DirtyMode, bool); 3] = [
        (DirtyMode::Line, true),
        (DirtyMode::Page, true),
        (DirtyMode::Page, false),
    ];
    let mut runs: [Vec<KonaRun>; 3] = Default::default();
    for round in 0..opts.rounds {
        for k in 0..MODES.len() {
            let m = (round + k) % MODES.len();
            let (dirty, writable) = MODES[m];
            runs[m].push(kona_run(opts, dirty, writable, &store, &slabs)?);
        }
    }
    let [line, page, kona_vm] = runs.map(median_run);
    let seconds_by_round = RoundSeconds {
        line: line.1,
        page: page.1,
        kona_vm: kona_vm.1,
    };
    let (line, page, kona_vm) = (line.0, page.0, kona_vm.0);
    let total = opts.region_bytes * opts.threads as u64;
    Ok(KonaReport {
        threads: opts.threads,
        region_bytes: opts.region_bytes,
        local_bytes: (total as f64 * opts.local_fraction) as u64,
        speedup: page.seconds / line.seconds.max(1e-9),
        speedup_vs_kona_vm: kona_vm.seconds / line.seconds.max(1e-9),
        writeback_reduction: page.bytes_written_back as f64
            / (line.bytes_written_back.max(1)) as f64,
        line,
        page,
        kona_vm,
        rounds: opts.rounds,
        warm_bytes: opts.warm_bytes,
        seconds_by_round,
    })
}

#[derive(Debug, Clone)]
pub struct FaultOpts {
    /// Faults to time (each on a distinct page).
    pub pages: usize,
    /// Store reads of 4 KiB to time for the comparison.
    pub reads: usize,
    pub base: Config,
}

#[derive(Debug, Clone, Serialize)]
pub struct FaultReport {
    /// First touch of a remote page as the application sees it.
    pub fault_us_p50: f64,
    pub fault_us_p99: f64,
    /// A bare 4 KiB read from the same store (its ordinary client: the
    /// caller sleeps until the reply).
    pub wire_read4k_us_p50: f64,
    /// The same read through the client the signal fault path uses (it
    /// polls for the reply), where the store has one.
    pub wire_read4k_polled_us_p50: Option<f64>,
    /// fault p50 / the faster wire read's p50.
    pub fault_ratio: f64,
    /// The machine's own cost of a fault: one handler waiting as the
    /// runtime's do installs a page from a local buffer (no store, no
    /// bookkeeping).
    pub bare_fault_us_p50: f64,
    /// (wire + bare fault) / wire, with the faster wire read: the ratio a
    /// thread-path runtime with no cost of its own would reach here.
    pub floor_ratio: f64,
    pub stats: crate::stats::Stats,
}

/// Latency of a remote 4 KiB fault measured in the faulting thread, against a
/// bare 4 KiB store read in the same run. The cache holds every page, so no
/// eviction interferes.
pub fn fault(
    opts: &FaultOpts,
    store: Arc<dyn RemoteStore>,
    slabs: Arc<dyn SlabSource>,
) -> Result<FaultReport, RuntimeError> {
    let pages = opts.pages.max(1) as u64;
    let mut cfg = Config {
        local_bytes: (pages + 256) * PAGE,
        slab_batch: pages * PAGE,
        ..opts.base.clone()
    };
    // The pages are touched in order: read-ahead would turn most of the
    // faults timed here into none. This measures one fault.
    cfg.fault_around.max_blocks = 0;
    let rt = Runtime::new(cfg, store.clone(), slabs)?;
    let r = rt.region(pages * PAGE)?;
    let bare = BareFaults::new(pages, opts.base.wait)?;
    let faults = LatencyHistogram::new();
    let reads = LatencyHistogram::new();
    let polled_reads = LatencyHistogram::new();
    let polled = store.prepare_read_in_signal()?;
    let bare_faults = LatencyHistogram::new();
    let mut buf = vec![0u8; PAGE as usize];
    let extents = r.extents()?;
    // Let the monitor settle into its waiting mode between faults, as an
    // application doing work between misses would.
    let gap = Duration::from_micros(20);
    let pause = || {
        let until = Instant::now() + gap;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    };
    // Faults, bare faults and reads take turns, so all three see the same
    // machine: on a shared host, timing them one phase after the other
    // compares noise. The order rotates each round, because on a VM what
    // an operation costs depends on what ran just before it (a vCPU that
    // just worked wakes far faster than one the host parked), so a fixed
    // order would always hand one of them the warm machine.
    let rounds = (pages as usize).max(opts.reads.max(1));
    for i in 0..rounds {
        for step in 0..4 {
            let addr = extents[0].0 + (i as u64 % (extents[0].1 / PAGE)) * PAGE;
            match (i + step) % 4 {
                0 if i < pages as usize => {
                    let t = Instant::now();
                    // SAFETY: in bounds; a read through the mapping faults.
                    let _ =
                        unsafe { (r.as_ptr().add(i * PAGE as usize) as *const u8).read_volatile() };
                    faults.record(t.elapsed());
                }
                1 if i < pages as usize => {
                    let t = Instant::now();
                    bare.touch(i as u64);
                    bare_faults.record(t.elapsed());
                }
                2 if i < opts.reads.max(1) => {
                    let t = Instant::now();
                    store.read(addr, &mut buf)?;
                    reads.record(t.elapsed());
                }
                3 if polled && i < opts.reads.max(1) => {
                    let t = Instant::now();
                    // A busy reader is skipped, not timed.
                    if store.read_in_signal(addr, &mut buf) {
                        polled_reads.record(t.elapsed());
                    }
                }
                _ => continue,
            }
            pause();
        }
    }
    let f = faults.summary();
    let w = reads.summary();
    let p = polled_reads.summary();
    let b = bare_faults.summary();
    let polled_p50 = (p.count > 0).then_some(p.p50_us);
    let wire = polled_p50.map_or(w.p50_us, |p| p.min(w.p50_us)).max(1e-3);
    Ok(FaultReport {
        fault_us_p50: f.p50_us,
        fault_us_p99: f.p99_us,
        wire_read4k_us_p50: w.p50_us,
        wire_read4k_polled_us_p50: polled_p50,
        fault_ratio: f.p50_us / wire,
        bare_fault_us_p50: b.p50_us,
        floor_ratio: (wire + b.p50_us) / wire,
        stats: rt.stats(),
    })
}

/// Faults served by the minimum a userfaultfd handler does: read the
/// message, copy one page from a local buffer. Measured beside the runtime
/// so a reader can tell the runtime's cost from the machine's (on a VM
/// without guest halt-polling, waking a sleeping handler and then the
/// faulting thread can cost more than a network round trip).
struct BareFaults {
    uffd: Arc<Uffd>,
    base: u64,
    len: u64,
    stop: Arc<AtomicBool>,
    handler: Option<JoinHandle<()>>,
}

impl BareFaults {
    fn new(pages: u64, wait: WaitMode) -> Result<Self, RuntimeError> {
        let uffd = Arc::new(Uffd::open().map_err(RuntimeError::Uffd)?);
        let len = pages * PAGE;
        let base = map_pages(len)?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut me = Self {
            uffd: uffd.clone(),
            base,
            len,
            stop: stop.clone(),
            handler: None,
        };
        uffd.register(base, len).map_err(RuntimeError::Uffd)?;
        let handler = std::thread::Builder::new()
            .name("farmem-bare-fault".into())
            .spawn(move || {
                let page = PageBuf::zeroed();
                let waiter = uffd.waiter().ok();
                let mut idler = Idler::new(wait);
                while !stop.load(Ordering::Relaxed) {
                    match uffd.read() {
                        Ok(ReadResult::Fault(f)) => {
                            idler.fault();
                            // SAFETY: `page` is a live 4 KiB buffer.
                            let _ = unsafe {
                                uffd.copy(f.addr & !(PAGE - 1), page.0.as_ptr(), PAGE, false)
                            };
                            idler.resolved();
                        }
                        Ok(ReadResult::Other(_)) => {}
                        Ok(ReadResult::Empty) | Err(_) => {
                            let _ = idler.idle(&uffd, waiter.as_ref());
                        }
                    }
                }
            })
            .map_err(RuntimeError::Thread)?;
        me.handler = Some(handler);
        Ok(me)
    }

    /// Faults page `i` in (once; later touches are plain reads).
    fn touch(&self, i: u64) {
        if i * PAGE < self.len {
            // SAFETY: in bounds of our mapping; the handler resolves the fault.
            let _ = unsafe { ((self.base + i * PAGE) as *const u8).read_volatile() };
        }
    }
}

impl Drop for BareFaults {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handler.take() {
            let _ = h.join();
        }
        let _ = self.uffd.unregister(self.base, self.len);
        // SAFETY: our mapping, no longer touched by anyone.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len as usize) };
    }
}
