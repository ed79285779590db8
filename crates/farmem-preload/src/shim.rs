//! The interposed C entry points, the global state and the runtime's start.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::{Cell, UnsafeCell};
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicUsize, Ordering};

use farmem_runtime::remote::RackStore;
use farmem_runtime::{Config, FaultPath, Runtime};

use crate::heap::{Heap, Kind, PAGE};

unsafe extern "C" {
    fn __libc_malloc(size: usize) -> *mut c_void;
    fn __libc_free(p: *mut c_void);
    fn __libc_calloc(n: usize, size: usize) -> *mut c_void;
    fn __libc_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
}

/// The shim's own Rust code (and the runtime it hosts) allocates straight
/// from glibc, never through the interposed `malloc`.
struct Glibc;

/// glibc's `malloc` alignment on 64-bit targets.
const MIN_ALIGN: usize = 16;

// SAFETY: forwards to glibc's allocator, which meets GlobalAlloc's contract
// for the alignments routed to each function.
unsafe impl GlobalAlloc for Glibc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: plain glibc allocation calls.
        unsafe {
            if l.align() <= MIN_ALIGN {
                __libc_malloc(l.size()) as *mut u8
            } else {
                __libc_memalign(l.align(), l.size()) as *mut u8
            }
        }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if l.align() <= MIN_ALIGN {
            // SAFETY: plain glibc allocation call.
            unsafe { __libc_calloc(1, l.size()) as *mut u8 }
        } else {
            // SAFETY: alloc returns null or l.size() writable bytes.
            unsafe {
                let p = self.alloc(l);
                if !p.is_null() {
                    std::ptr::write_bytes(p, 0, l.size());
                }
                p
            }
        }
    }
    unsafe fn dealloc(&self, p: *mut u8, _l: Layout) {
        // SAFETY: p came from one of glibc's allocation functions above.
        unsafe { __libc_free(p as *mut c_void) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: p came from glibc; for large alignments copy by hand.
        unsafe {
            if l.align() <= MIN_ALIGN {
                return __libc_realloc(p as *mut c_void, new) as *mut u8;
            }
            let q = __libc_memalign(l.align(), new) as *mut u8;
            if !q.is_null() {
                std::ptr::copy_nonoverlapping(p, q, l.size().min(new));
                __libc_free(p as *mut c_void);
            }
            q
        }
    }
}

#[global_allocator]
static ALLOC: Glibc = Glibc;

/// The allocator the program has without us: glibc's, or one it links
/// (Debian's redis-server links jemalloc). Blocks below the threshold go
/// there, so its own extensions (mallctl, nallocx, its malloc_usable_size)
/// only ever see its own blocks.
struct Next {
    malloc: unsafe extern "C" fn(usize) -> *mut c_void,
    calloc: unsafe extern "C" fn(usize, usize) -> *mut c_void,
    realloc: unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void,
    free: unsafe extern "C" fn(*mut c_void),
    memalign: unsafe extern "C" fn(usize, usize) -> *mut c_void,
    usable: Option<unsafe extern "C" fn(*mut c_void) -> usize>,
}

const NEXT_UNRESOLVED: u8 = 0;
const NEXT_RESOLVING: u8 = 1;
const NEXT_READY: u8 = 2;
static NEXT_STATE: AtomicU8 = AtomicU8::new(NEXT_UNRESOLVED);
static NEXT_PTR: AtomicPtr<Next> = AtomicPtr::new(std::ptr::null_mut());

/// The next allocator, or None while it is being looked up (dlsym may
/// allocate): those few blocks come from [`boot_alloc`].
fn next() -> Option<&'static Next> {
    if NEXT_STATE.load(Ordering::Acquire) == NEXT_READY {
        // SAFETY: set once to a leaked, never-freed table before READY.
        return Some(unsafe { &*NEXT_PTR.load(Ordering::Acquire) });
    }
    if NEXT_STATE
        .compare_exchange(
            NEXT_UNRESOLVED,
            NEXT_RESOLVING,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_err()
    {
        return None;
    }
    fn sym(name: &CStr) -> usize {
        // SAFETY: RTLD_NEXT lookup of a C function by name.
        unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) as usize }
    }
    /// The function `name` of the next library as an `F`, else `fallback`.
    ///
    /// # Safety
    /// `F` is a function pointer type matching the C function `name`.
    unsafe fn resolve<F: Copy>(names: &[&CStr], fallback: F) -> F {
        match names.iter().map(|n| sym(n)).find(|&f| f != 0) {
            // SAFETY: per the contract, a non-null symbol of that type.
            Some(f) => unsafe { std::mem::transmute_copy::<usize, F>(&f) },
            None => fallback,
        }
    }
    type UsableFn = unsafe extern "C" fn(*mut c_void) -> usize;
    // SAFETY: each name is the C function with the type it is resolved to.
    let table = unsafe {
        Next {
            malloc: resolve(&[c"malloc"], __libc_malloc as _),
            calloc: resolve(&[c"calloc"], __libc_calloc as _),
            realloc: resolve(&[c"realloc"], __libc_realloc as _),
            free: resolve(&[c"free"], __libc_free as _),
            memalign: resolve(&[c"memalign", c"aligned_alloc"], __libc_memalign as _),
            usable: resolve::<Option<UsableFn>>(&[c"malloc_usable_size"], None),
        }
    };
    // The table is built by value first: Box::new allocates through the
    // shim's own glibc allocator, never through `malloc` here.
    NEXT_PTR.store(Box::into_raw(Box::new(table)), Ordering::Release);
    NEXT_STATE.store(NEXT_READY, Ordering::Release);
    next()
}

/// A bump arena for the allocations made while the next allocator is being
/// looked up. Its blocks are never freed; a 16-byte header holds the size.
struct BootArena {
    bytes: UnsafeCell<[u8; BOOT_BYTES]>,
    used: AtomicUsize,
}

const BOOT_BYTES: usize = 256 << 10;

// SAFETY: disjoint ranges are handed out by an atomic bump pointer.
unsafe impl Sync for BootArena {}

static BOOT: BootArena = BootArena {
    bytes: UnsafeCell::new([0; BOOT_BYTES]),
    used: AtomicUsize::new(0),
};

fn boot_alloc(size: usize, align: usize) -> *mut c_void {
    let align = align.max(MIN_ALIGN);
    let base = BOOT.bytes.get() as usize;
    let mut used = BOOT.used.load(Ordering::Relaxed);
    loop {
        let start = (base + used + MIN_ALIGN).next_multiple_of(align);
        let Some(end) = start.checked_add(size).filter(|&e| e <= base + BOOT_BYTES) else {
            set_errno(libc::ENOMEM);
            return std::ptr::null_mut();
        };
        match BOOT
            .used
            .compare_exchange_weak(used, end - base, Ordering::AcqRel, Ordering::Relaxed)
        {
            Ok(_) => {
                // SAFETY: [start - 16, end) lies in our arena and is ours now.
                unsafe { *((start - MIN_ALIGN) as *mut usize) = size };
                return start as *mut c_void;
            }
            Err(u) => used = u,
        }
    }
}

fn in_boot(p: *const c_void) -> bool {
    let base = BOOT.bytes.get() as usize;
    (base..base + BOOT_BYTES).contains(&(p as usize))
}

fn boot_len(p: *const c_void) -> usize {
    // SAFETY: p came from boot_alloc, which wrote its size just below it.
    unsafe { *((p as usize - MIN_ALIGN) as *const usize) }
}

const UNINIT: u8 = 0;
const INITING: u8 = 1;
const READY: u8 = 2;
const OFF: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
/// Set in a forked child: no new far allocations.
static FORKED: AtomicBool = AtomicBool::new(false);
/// The far heap's address range, for an O(1) "is this far?" test.
static HEAP_BASE: AtomicUsize = AtomicUsize::new(0);
static HEAP_END: AtomicUsize = AtomicUsize::new(0);
/// 0 until read from FARMEM_THRESHOLD.
static THRESHOLD: AtomicUsize = AtomicUsize::new(0);
static RUNTIME: AtomicPtr<Runtime> = AtomicPtr::new(std::ptr::null_mut());
/// The rack the runtime took its remote memory from, to give it back at exit.
static STORE: AtomicPtr<RackStore> = AtomicPtr::new(std::ptr::null_mut());
static INIT_PID: AtomicUsize = AtomicUsize::new(0);
/// How long the controller keeps a silent process's remote memory.
const DEFAULT_LEASE_MS: u64 = 60_000;

/// The heap's book-keeping under a spin lock (no allocation, no futex
/// state that a fork could leave inconsistent: the fork handlers hold it).
struct HeapCell {
    locked: AtomicBool,
    heap: UnsafeCell<Option<Heap>>,
}

// SAFETY: `heap` is only reached through `with_heap`, under `locked`.
unsafe impl Sync for HeapCell {}

static HEAP: HeapCell = HeapCell {
    locked: AtomicBool::new(false),
    heap: UnsafeCell::new(None),
};

fn lock_heap() {
    while HEAP
        .locked
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::hint::spin_loop();
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
}

fn unlock_heap() {
    HEAP.locked.store(false, Ordering::Release);
}

fn with_heap<R>(f: impl FnOnce(&mut Heap) -> R) -> Option<R> {
    let _busy = Busy::enter();
    lock_heap();
    // SAFETY: we hold the lock, so this is the only reference.
    let r = unsafe { (*HEAP.heap.get()).as_mut().map(f) };
    unlock_heap();
    r
}

thread_local! {
    /// Inside the shim's own code (initialisation, book-keeping).
    static BUSY: Cell<bool> = const { Cell::new(false) };
    /// 0 unknown, 1 program thread, 2 runtime thread.
    static KIND: Cell<u8> = const { Cell::new(0) };
}

struct Busy(bool);

impl Busy {
    fn enter() -> Self {
        Self(BUSY.try_with(|b| b.replace(true)).unwrap_or(true))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let prev = self.0;
        let _ = BUSY.try_with(|b| b.set(prev));
    }
}

pub(crate) fn runtime_thread() -> bool {
    KIND.try_with(|k| {
        if k.get() == 0 {
            let mut name = [0u8; 16];
            // SAFETY: the buffer is 16 bytes, the size pthread names have.
            let rc = unsafe {
                libc::pthread_getname_np(
                    libc::pthread_self(),
                    name.as_mut_ptr() as *mut c_char,
                    name.len(),
                )
            };
            // The main thread's name is the program's (which may well
            // start with `farmem-`); the runtime never runs on it.
            // SAFETY: gettid and getpid have no preconditions.
            let main = unsafe { libc::gettid() == libc::getpid() };
            k.set(if rc == 0 && !main && name.starts_with(b"farmem-") {
                2
            } else {
                1
            });
        }
        k.get() == 2
    })
    .unwrap_or(true)
}

/// True when this call must use local memory whatever its size.
fn local_only() -> bool {
    FORKED.load(Ordering::Relaxed)
        || STATE.load(Ordering::Acquire) == OFF
        || BUSY.try_with(|b| b.get()).unwrap_or(true)
        || runtime_thread()
}

/// The far heap's address range (empty before the runtime starts).
pub(crate) fn far_range() -> std::ops::Range<usize> {
    HEAP_BASE.load(Ordering::Acquire)..HEAP_END.load(Ordering::Acquire)
}

/// In a forked child, which has no runtime.
pub(crate) fn forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}

fn is_far(p: *const c_void) -> bool {
    let a = p as usize;
    a >= HEAP_BASE.load(Ordering::Acquire) && a < HEAP_END.load(Ordering::Acquire)
}

fn getenv(name: &CStr) -> Option<String> {
    // SAFETY: name is NUL-terminated; getenv returns null or a C string.
    let v = unsafe { libc::getenv(name.as_ptr()) };
    if v.is_null() {
        return None;
    }
    // SAFETY: non-null result of getenv.
    Some(unsafe { CStr::from_ptr(v) }.to_string_lossy().into_owned())
}

fn size_env(name: &CStr, default: u64) -> Result<u64, String> {
    match getenv(name) {
        None => Ok(default),
        Some(s) => s
            .trim()
            .parse::<farmem_core::ByteSize>()
            .map(|b| b.bytes())
            .map_err(|e| format!("{}={s:?}: {e}", name.to_string_lossy())),
    }
}

fn threshold() -> usize {
    match THRESHOLD.load(Ordering::Relaxed) {
        0 => {
            let _busy = Busy::enter();
            let t = match size_env(c"FARMEM_THRESHOLD", 1 << 20) {
                Ok(t) => (t as usize).max(1),
                Err(e) => {
                    say(&format!("{e}; using 1MiB"));
                    1 << 20
                }
            };
            THRESHOLD.store(t, Ordering::Relaxed);
            t
        }
        t => t,
    }
}

/// One `farmem: …` line on stderr, in a single write.
fn say(msg: &str) {
    let line = format!("farmem: {msg}\n");
    // SAFETY: writes our own buffer to fd 2.
    unsafe { libc::write(2, line.as_ptr() as *const c_void, line.len()) };
}

/// Starts the runtime once; true when far memory is ready.
fn ensure_init() -> bool {
    loop {
        match STATE.load(Ordering::Acquire) {
            READY => return true,
            OFF => return false,
            UNINIT => {
                if STATE
                    .compare_exchange(UNINIT, INITING, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    let busy = Busy::enter();
                    let ok = match std::panic::catch_unwind(init) {
                        Ok(Ok(())) => true,
                        Ok(Err(e)) => {
                            give_up(&e);
                            false
                        }
                        Err(_) => {
                            give_up("starting the runtime panicked");
                            false
                        }
                    };
                    drop(busy);
                    STATE.store(if ok { READY } else { OFF }, Ordering::Release);
                    return ok;
                }
            }
            _ => {
                // Another thread is starting the runtime.
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            }
        }
    }
}

/// The runtime could not start, for `reason`. Under `FARMEM_FALLBACK=local`
/// the process goes on in local memory; otherwise (`fail`, the default) it
/// stops at once with [`crate::NO_FAR_MEMORY_EXIT`], before it has done
/// anything, so it never runs on local memory unnoticed. A process that was
/// never asked to use far memory (no `FARMEM_CONTROLLER`) stays local.
/// Either way one `farmem:` line says why, and a `fallback` line goes to
/// `FARMEM_STATS_JSON` for `farmem run`'s summary.
fn give_up(reason: &str) {
    let asked = getenv(c"FARMEM_CONTROLLER").is_some_and(|c| !c.is_empty());
    let local = !asked || fallback_local().unwrap_or(false);
    record_fallback(reason, local);
    if local {
        say(&format!("{reason}; running on local memory only"));
        return;
    }
    say(&format!(
        "{reason}; no far memory, so stopping with exit {} instead of running on local memory (FARMEM_FALLBACK=local, farmem run --fallback local, runs it there)",
        crate::NO_FAR_MEMORY_EXIT
    ));
    // SAFETY: _exit ends the process without running the program's atexit
    // handlers; nothing of the program has run yet.
    unsafe { libc::_exit(crate::NO_FAR_MEMORY_EXIT) };
}

/// FARMEM_FALLBACK: true for `local`, false for `fail` (or unset).
fn fallback_local() -> Result<bool, String> {
    match getenv(c"FARMEM_FALLBACK").as_deref().map(str::trim) {
        None | Some("" | "fail") => Ok(false),
        Some("local") => Ok(true),
        Some(other) => Err(format!(
            "FARMEM_FALLBACK={other:?}: expected `local` or `fail`"
        )),
    }
}

/// Tells `farmem run` (FARMEM_STATS_JSON) that this process got no far
/// memory and why: one JSON line, appended in one write.
/// Appends one JSON line to the stats file `path` (one write: processes
/// of one run append to the same file).
fn append_stats_line(path: &str, line: &str) {
    use std::io::Write;
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        say(&format!("writing stats to {path}: {e}"));
    }
}

fn record_fallback(reason: &str, local: bool) {
    let Some(path) = getenv(c"FARMEM_STATS_JSON").filter(|p| !p.is_empty()) else {
        return;
    };
    let line = serde_json::json!({
        // SAFETY: getpid has no preconditions.
        "pid": unsafe { libc::getpid() },
        "fallback": if local { "local" } else { "fail" },
        "reason": reason,
    })
    .to_string()
        + "\n";
    append_stats_line(&path, &line);
}

/// The cluster token named by FARMEM_TOKEN_FILE, or none.
fn token() -> Result<Vec<u8>, String> {
    let Some(path) = getenv(c"FARMEM_TOKEN_FILE").filter(|p| !p.is_empty()) else {
        return Ok(Vec::new());
    };
    let token = farmem_net::read_token_file(std::path::Path::new(&path))
        .map_err(|e| format!("reading FARMEM_TOKEN_FILE {path}: {e}"))?;
    if token.is_empty() {
        return Err(format!("FARMEM_TOKEN_FILE {path} is empty"));
    }
    Ok(token)
}

/// Connects to the controller, proving the token if there is one.
fn connect(controller: &str, name: String) -> Result<RackStore, String> {
    let token = token()?;
    let anonymous = token.is_empty();
    let cfg = farmem_net::ClientConfig::new(name, farmem_wire::Role::Compute).with_token(token);
    match farmem_net::Cluster::connect(controller, cfg, 2) {
        Ok(cluster) => Ok(RackStore::new(cluster)),
        Err(e @ farmem_net::NetError::Auth(_)) if anonymous => Err(format!(
            "connecting to controller {controller}: {e} (no FARMEM_TOKEN_FILE given: a rack started with --token-file admits only holders of its token)"
        )),
        Err(e) => Err(format!("connecting to controller {controller}: {e}")),
    }
}

/// How fast lost copies are made again: enough to restore a GiB in a few
/// seconds, little enough to leave the link to the program.
const REPAIR_BYTES_PER_SEC: u64 = 256 << 20;

fn init() -> Result<(), String> {
    if let Some(filter) = getenv(c"FARMEM_LOG").filter(|f| !f.is_empty()) {
        // What the runtime and the rack client report (retries, nodes
        // suspected or dropped, copies made again), on stderr.
        let filter = tracing_subscriber::EnvFilter::try_new(&filter)
            .map_err(|e| format!("FARMEM_LOG `{filter}`: {e}"))?;
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .with_target(false)
            .try_init();
    }
    let controller = getenv(c"FARMEM_CONTROLLER")
        .filter(|s| !s.is_empty())
        .ok_or("FARMEM_CONTROLLER is not set")?;
    fallback_local()?;
    let local = size_env(c"FARMEM_LOCAL_MEM", 256 << 20)?;
    let far = size_env(c"FARMEM_FAR_MEM", 8 << 30)?;
    let mut cfg = Config {
        local_bytes: local,
        zeroed_slabs: true,
        slab_batch: 256 << 20,
        ..Config::default()
    };
    if let Some(d) = getenv(c"FARMEM_DIRTY") {
        cfg.dirty = d.parse().map_err(|e| format!("FARMEM_DIRTY: {e}"))?;
    }
    if let Some(f) = getenv(c"FARMEM_FAULT_PATH") {
        cfg.fault_path = f.parse().map_err(|e| format!("FARMEM_FAULT_PATH: {e}"))?;
    }
    if let Some(n) = getenv(c"FARMEM_FAULT_AROUND") {
        cfg.fault_around.max_blocks = n
            .parse()
            .map_err(|e| format!("FARMEM_FAULT_AROUND `{n}`: {e}"))?;
    }
    if let Some(p) = getenv(c"FARMEM_POLICY") {
        cfg.policy = p.parse().map_err(|e| format!("FARMEM_POLICY: {e}"))?;
    }
    // One owner per process image, so a lease that runs out gives back only
    // the memory of the process that died: the pid alone is reused (by
    // exec, or in another pid namespace on the same rack).
    let prefix = getenv(c"FARMEM_NAME").unwrap_or_else(|| "farmem-run".into());
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    // SAFETY: getpid has no preconditions.
    let name = format!("{prefix}-{}-{started:x}", unsafe { libc::getpid() });
    let lease_ms: u64 = match getenv(c"FARMEM_LEASE_MS") {
        None => DEFAULT_LEASE_MS,
        Some(v) => v
            .trim()
            .parse()
            .map_err(|e| format!("FARMEM_LEASE_MS `{v}`: {e}"))?,
    };
    let store = Arc::new(connect(&controller, name)?);
    if let Some(n) = getenv(c"FARMEM_REPLICAS") {
        let n: u8 = n.trim().parse().ok().filter(|&n| n >= 1).ok_or_else(|| {
            format!("FARMEM_REPLICAS `{n}`: expected a number of copies from 1 to 255")
        })?;
        store.cluster().set_replicas(n);
        if n > 1 {
            // Copies lost with a memory node are made again from the rest.
            store
                .start_repair(REPAIR_BYTES_PER_SEC)
                .map_err(|e| format!("starting the copy repair thread: {e}"))?;
        }
    }
    if let Some(r) = getenv(c"FARMEM_REDUNDANCY") {
        let r: farmem_net::Redundancy = r
            .trim()
            .parse()
            .map_err(|e| format!("FARMEM_REDUNDANCY: {e}"))?;
        // Erasure-coded stripes: pages survive any M lost memory nodes.
        store.cluster().set_redundancy(r);
    }
    if lease_ms > 0 {
        match store
            .cluster()
            .keep_lease(std::time::Duration::from_millis(lease_ms), |e| {
                // Far pages are gone: going on would hang on the first one
                // not local, or compute on what is left.
                say(&format!(
                    "this process's remote memory was given back to the rack ({e}); it was silent for longer than its lease (FARMEM_LEASE_MS, farmem run --lease), stopped or frozen; aborting"
                ));
                std::process::abort();
            })
        {
            // Renewed for as long as the process lives.
            Ok(keeper) => std::mem::forget(keeper),
            Err(e) => say(&format!(
                "cannot hold remote memory on a lease ({e}): if this process is killed, the controller keeps it"
            )),
        }
    }
    // The kernel's own accesses to far pages fail on the signal path: the
    // I/O interposers touch them first.
    let touch_for_io = (cfg.fault_path == FaultPath::Signal).then_some(cfg.local_bytes);
    let rt = Runtime::new(cfg, store.clone(), store.clone())
        .map_err(|e| format!("starting the far-memory runtime: {e}"))?;
    STORE.store(Arc::into_raw(store) as *mut RackStore, Ordering::Release);
    let rt: &'static Runtime = Box::leak(Box::new(rt));
    let region = rt
        .region(far)
        .map_err(|e| format!("reserving {far} bytes of far memory: {e}"))?;
    let (base, len) = (region.as_ptr() as usize, region.len());
    // The heap lives as long as the process.
    std::mem::forget(region);
    lock_heap();
    // SAFETY: we hold the lock.
    unsafe { *HEAP.heap.get() = Some(Heap::new(base, len)) };
    unlock_heap();
    RUNTIME.store(rt as *const Runtime as *mut Runtime, Ordering::Release);
    // SAFETY: getpid has no preconditions; the handlers are plain functions.
    unsafe {
        INIT_PID.store(libc::getpid() as usize, Ordering::Relaxed);
        libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child));
        libc::atexit(at_exit);
    }
    HEAP_END.store(base + len, Ordering::Release);
    HEAP_BASE.store(base, Ordering::Release);
    if let Some(local) = touch_for_io {
        crate::signal_shim::enable(local);
    }
    Ok(())
}

/// Starts the runtime when the library is loaded, before the program runs
/// and before any allocator holds a lock, if `farmem run` asked for it.
extern "C" fn start_at_load() {
    crate::signal_shim::resolve();
    if getenv(c"FARMEM_CONTROLLER").is_some_and(|c| !c.is_empty()) {
        ensure_init();
    }
}

#[used]
#[unsafe(link_section = ".init_array")]
static START_AT_LOAD: extern "C" fn() = start_at_load;

extern "C" fn fork_prepare() {
    lock_heap();
}

extern "C" fn fork_parent() {
    unlock_heap();
}

extern "C" fn fork_child() {
    FORKED.store(true, Ordering::Relaxed);
    unlock_heap();
    // The child has no runtime and no userfaultfd registration: a far page
    // that was remote at the fork would read as zeros. Make every touch of
    // inherited far memory fault loudly instead of computing on zeros.
    let (base, end) = (
        HEAP_BASE.load(Ordering::Acquire),
        HEAP_END.load(Ordering::Acquire),
    );
    if end > base {
        // SAFETY: our own heap range; mprotect is async-signal-safe.
        unsafe { libc::mprotect(base as *mut c_void, end - base, libc::PROT_NONE) };
    }
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(write_stats);
    let _ = std::panic::catch_unwind(release_remote);
}

/// Gives the process's remote memory back to the controller: the heap dies
/// with the process, and a rack that outlives it (`--controller`, or many
/// processes under one `farmem run`) would otherwise keep it granted for
/// good. Threads still running see their write-backs refused from here on,
/// which only costs them the data the exiting process discards anyway.
fn release_remote() {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as usize;
    let store = STORE.load(Ordering::Acquire);
    if store.is_null() || pid != INIT_PID.load(Ordering::Relaxed) {
        // A forked child: the memory is its parent's.
        return;
    }
    let _busy = Busy::enter();
    // SAFETY: leaked in init(), so it lives until the process ends.
    let store = unsafe { &*store };
    match store.release_all() {
        Err(e) => say(&format!(
            "giving remote memory back at exit: {e}; the rack takes back the rest when this process's lease runs out"
        )),
        // Nothing left to hold: end the lease rather than let it run out.
        Ok(()) => {
            if let Some(ctl) = store.cluster().controller() {
                let _ = ctl.lease(std::time::Duration::ZERO);
            }
        }
    }
}

fn write_stats() {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as usize;
    let rt = RUNTIME.load(Ordering::Acquire);
    if rt.is_null() || pid != INIT_PID.load(Ordering::Relaxed) {
        return;
    }
    let Some(path) = getenv(c"FARMEM_STATS_JSON").filter(|p| !p.is_empty()) else {
        return;
    };
    let _busy = Busy::enter();
    // SAFETY: the runtime is leaked, so it lives until the process ends.
    let rt = unsafe { &*rt };
    let (in_use, peak) = with_heap(|h| h.usage()).unwrap_or((0, 0));
    if peak == 0 {
        // Nothing went far (a shell, an exec'd helper): nothing to report.
        return;
    }
    let line = serde_json::json!({
        "pid": pid,
        "far_bytes_in_use": in_use,
        "far_bytes_peak": peak,
        "local_bytes": rt.config().local_bytes,
        "last_error": rt.last_error(),
        "stats": rt.stats(),
    })
    .to_string()
        + "\n";
    append_stats_line(&path, &line);
}

/// A far range of at least `size` bytes, zeroed if asked; None when the
/// request belongs in local memory.
fn far_alloc(size: usize, zero: bool, kind: Kind) -> Option<*mut c_void> {
    if size < threshold() || local_only() {
        return None;
    }
    // An mmap may come from inside the program's allocator, holding its
    // locks: starting the runtime there would allocate and deadlock. The
    // runtime starts in the constructor below (or at a malloc).
    let ready = match kind {
        Kind::Block => ensure_init(),
        Kind::Mapping => STATE.load(Ordering::Acquire) == READY,
    };
    if !ready {
        return None;
    }
    let g = with_heap(|h| h.alloc(size, kind)).flatten()?;
    if zero && g.stale > 0 {
        // SAFETY: the range was just granted to us and is mapped.
        unsafe { std::ptr::write_bytes(g.addr as *mut u8, 0, g.stale) };
    }
    Some(g.addr as *mut c_void)
}

fn far_free(p: *mut c_void) {
    with_heap(|h| h.free(p as usize));
}

/// The length of the far malloc-family block at `p`, if it is one (a
/// pointer into a far mapping belongs to whoever mapped it).
fn far_block(p: *const c_void) -> Option<usize> {
    // Far blocks start on a page: a small block of the program's allocator
    // inside a far arena is told apart without taking the heap's lock.
    if !is_far(p) || !(p as usize).is_multiple_of(PAGE) {
        return None;
    }
    with_heap(|h| h.block_len(p as usize)).flatten()
}

fn local_malloc(size: usize) -> *mut c_void {
    match next() {
        // SAFETY: the next allocator's malloc.
        Some(n) => unsafe { (n.malloc)(size) },
        None => boot_alloc(size, MIN_ALIGN),
    }
}

/// # Safety
/// `p` is a live local block (the next allocator's or the boot arena's).
unsafe fn local_free(p: *mut c_void) {
    if in_boot(p) {
        return;
    }
    if let Some(n) = next() {
        // SAFETY: p is the next allocator's.
        unsafe { (n.free)(p) }
    }
}

/// # Safety
/// As `local_free`.
unsafe fn local_realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if in_boot(p) {
        let q = local_malloc(size);
        if !q.is_null() {
            // SAFETY: both blocks hold at least the copied length.
            unsafe {
                std::ptr::copy_nonoverlapping(p as *const u8, q as *mut u8, boot_len(p).min(size))
            };
        }
        return q;
    }
    match next() {
        // SAFETY: p is the next allocator's.
        Some(n) => unsafe { (n.realloc)(p, size) },
        None => std::ptr::null_mut(),
    }
}

fn set_errno(e: c_int) {
    // SAFETY: errno is thread-local and always writable.
    unsafe { *libc::__errno_location() = e };
}

#[unsafe(no_mangle)]
pub extern "C" fn malloc(size: usize) -> *mut c_void {
    if let Some(p) = far_alloc(size, false, Kind::Block) {
        return p;
    }
    local_malloc(size)
}

#[unsafe(no_mangle)]
pub extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    let Some(total) = n.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return std::ptr::null_mut();
    };
    if let Some(p) = far_alloc(total, true, Kind::Block) {
        return p;
    }
    match next() {
        // SAFETY: the next allocator's calloc.
        Some(next) => unsafe { (next.calloc)(n, size) },
        // The arena is static and never reused: already zero.
        None => boot_alloc(total, MIN_ALIGN),
    }
}

/// # Safety
/// `p` is null or came from this allocator and was not freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free(p: *mut c_void) {
    if p.is_null() {
        return;
    }
    if far_block(p).is_some() {
        far_free(p);
    } else {
        // SAFETY: not ours, so a local block.
        unsafe { local_free(p) }
    }
}

/// # Safety
/// `p` is null or came from this allocator and was not freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if p.is_null() {
        return malloc(size);
    }
    let Some(old) = far_block(p) else {
        if size < threshold() || local_only() {
            // SAFETY: not ours, so a local block.
            return unsafe { local_realloc(p, size) };
        }
        // Growing a local block past the threshold: move it far.
        let Some(q) = far_alloc(size, false, Kind::Block) else {
            // SAFETY: as above.
            return unsafe { local_realloc(p, size) };
        };
        // SAFETY: p is a live local block of `old` usable bytes, q has size bytes.
        unsafe {
            let old = usable_local(p);
            std::ptr::copy_nonoverlapping(p as *const u8, q as *mut u8, old.min(size));
            local_free(p);
        }
        return q;
    };
    if size == 0 {
        far_free(p);
        return std::ptr::null_mut();
    }
    if size <= old && size >= threshold() && !FORKED.load(Ordering::Relaxed) {
        with_heap(|h| h.shrink(p as usize, size));
        return p;
    }
    let q = malloc(size);
    if q.is_null() {
        return q;
    }
    // SAFETY: p has old bytes, q has size bytes; they do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(p as *const u8, q as *mut u8, old.min(size)) };
    far_free(p);
    q
}

/// # Safety
/// As `realloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        // SAFETY: forwarded contract.
        Some(total) => unsafe { realloc(p, total) },
        None => {
            set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    }
}

fn aligned(align: usize, size: usize) -> *mut c_void {
    if align <= PAGE
        && let Some(p) = far_alloc(size, false, Kind::Block)
    {
        return p;
    }
    match next() {
        // SAFETY: the next allocator's memalign (or aligned_alloc).
        Some(n) => unsafe { (n.memalign)(align, size) },
        None => boot_alloc(size, align),
    }
}

/// # Safety
/// `out` is valid for a pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    if !align.is_power_of_two() || !align.is_multiple_of(size_of::<usize>()) {
        return libc::EINVAL;
    }
    let p = aligned(align, size);
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller passes a writable out-pointer.
    unsafe { *out = p };
    0
}

#[unsafe(no_mangle)]
pub extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    aligned(align, size)
}

#[unsafe(no_mangle)]
pub extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    aligned(align, size)
}

/// The usable size of a local block.
fn usable_local(p: *mut c_void) -> usize {
    if in_boot(p) {
        return boot_len(p);
    }
    match next().and_then(|n| n.usable) {
        // SAFETY: p is the next allocator's block.
        Some(f) => unsafe { f(p) },
        None => 0,
    }
}

/// # Safety
/// `p` is null or a live block from this allocator.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> usize {
    if p.is_null() {
        0
    } else if let Some(len) = far_block(p) {
        len
    } else {
        usable_local(p)
    }
}

fn far_mapping(addr: *mut c_void, prot: c_int, flags: c_int) -> bool {
    const BAD: c_int = libc::MAP_SHARED
        | libc::MAP_FIXED
        | libc::MAP_FIXED_NOREPLACE
        | libc::MAP_STACK
        | libc::MAP_GROWSDOWN
        | libc::MAP_HUGETLB;
    addr.is_null()
        && flags & libc::MAP_ANONYMOUS != 0
        && flags & libc::MAP_PRIVATE != 0
        && flags & BAD == 0
        && prot == libc::PROT_READ | libc::PROT_WRITE
}

/// # Safety
/// As mmap(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: libc::off_t,
) -> *mut c_void {
    if far_mapping(addr, prot, flags)
        && let Some(p) = far_alloc(len, true, Kind::Mapping)
    {
        return p;
    }
    if is_far(addr) && !runtime_thread() && !FORKED.load(Ordering::Relaxed) {
        return remap_far(addr, len, prot, flags);
    }
    // SAFETY: the caller's arguments, passed to the system call unchanged.
    unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, off) as *mut c_void }
}

/// A fixed mapping over far memory (allocators decommit and recommit that
/// way). The runtime keeps owning the range: a fresh anonymous read-write
/// mapping reads as zero, so the range is zeroed; an inaccessible one is
/// left as it is, since the program cannot look. Anything else would hide
/// far pages behind a mapping the runtime does not know, so it is refused.
fn remap_far(addr: *mut c_void, len: usize, prot: c_int, flags: c_int) -> *mut c_void {
    let anon_private = libc::MAP_ANONYMOUS | libc::MAP_PRIVATE;
    let end = addr as usize + len;
    if flags & libc::MAP_FIXED == 0
        || flags & anon_private != anon_private
        || end > HEAP_END.load(Ordering::Acquire)
    {
        set_errno(libc::ENOMEM);
        return libc::MAP_FAILED;
    }
    if prot == libc::PROT_READ | libc::PROT_WRITE {
        // SAFETY: inside the far heap, which stays mapped for the process.
        unsafe { std::ptr::write_bytes(addr as *mut u8, 0, len) };
    } else if prot != libc::PROT_NONE {
        set_errno(libc::ENOMEM);
        return libc::MAP_FAILED;
    }
    addr
}

/// # Safety
/// As mmap(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: libc::off_t,
) -> *mut c_void {
    // SAFETY: same function on 64-bit targets.
    unsafe { mmap(addr, len, prot, flags, fd, off) }
}

/// # Safety
/// As munmap(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: usize) -> c_int {
    if is_far(addr) && !runtime_thread() {
        with_heap(|h| h.release(addr as usize, len));
        return 0;
    }
    // SAFETY: the caller's arguments, passed to the system call unchanged.
    unsafe { libc::syscall(libc::SYS_munmap, addr, len) as c_int }
}

/// # Safety
/// As madvise(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int {
    if is_far(addr) && FORKED.load(Ordering::Relaxed) {
        // A forked child cannot touch far memory (see `fork_child`).
        return 0;
    }
    if is_far(addr) && !runtime_thread() && !BUSY.try_with(|b| b.get()).unwrap_or(true) {
        // The runtime owns the far pages' mappings; honour only what the
        // program can observe: DONTNEED makes private anonymous memory zero.
        if advice == libc::MADV_DONTNEED {
            let end = (addr as usize + len).min(HEAP_END.load(Ordering::Acquire));
            // SAFETY: inside the far heap, which stays mapped for the process.
            unsafe { std::ptr::write_bytes(addr as *mut u8, 0, end - addr as usize) };
        }
        return 0;
    }
    // SAFETY: the caller's arguments, passed to the system call unchanged.
    unsafe { libc::syscall(libc::SYS_madvise, addr, len, advice) as c_int }
}

/// Variadic in C; the optional fifth argument arrives in the same register
/// as a fixed one on x86-64 and aarch64 Linux.
///
/// # Safety
/// As mremap(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: usize,
    new_len: usize,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    if is_far(old) && !runtime_thread() {
        set_errno(libc::ENOMEM);
        return libc::MAP_FAILED;
    }
    // SAFETY: the caller's arguments, passed to the system call unchanged.
    unsafe {
        libc::syscall(libc::SYS_mremap, old, old_len, new_len, flags, new_addr) as *mut c_void
    }
}

/// A program setting its own SIGBUS disposition must not replace the
/// runtime's handler (fault path `signal`): the request is recorded as the
/// disposition foreign SIGBUSes go to, as if it had been installed.
///
/// # Safety
/// As sigaction(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    // SAFETY: the caller's arguments, valid as sigaction(2) requires.
    unsafe {
        if sig == libc::SIGBUS && farmem_runtime::signal::intercept_sigbus(act, old) {
            return 0;
        }
        if act.is_null() {
            return farmem_runtime::signal::real_sigaction(sig, act, old);
        }
        // A handler running with SIGBUS blocked could not take a far fault.
        let mut act = *act;
        crate::signal_shim::mask_without_sigbus(&mut act.sa_mask);
        farmem_runtime::signal::real_sigaction(sig, &act, old)
    }
}

/// glibc's `signal` calls its internal sigaction, past the interposer
/// above, so it is interposed too, with glibc's (BSD) semantics.
///
/// # Safety
/// As signal(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: zeroed sigaction structs are valid; the calls get pointers
    // to live locals.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = handler;
        act.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaddset(&mut act.sa_mask, sig);
        let mut old: libc::sigaction = std::mem::zeroed();
        if sigaction(sig, &act, &mut old) != 0 {
            return libc::SIG_ERR;
        }
        old.sa_sigaction
    }
}
