//! The interposed C entry points, the global state and the runtime's start.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::{Cell, UnsafeCell};
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicUsize, Ordering};

use farmem_runtime::remote::RackStore;
use farmem_runtime::{Config, Runtime};

use crate::heap::{Heap, PAGE};

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
static INIT_PID: AtomicUsize = AtomicUsize::new(0);
static REAL_USABLE: AtomicUsize = AtomicUsize::new(0);

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

fn runtime_thread() -> bool {
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
                            say(&format!("{e}; running on local memory only"));
                            false
                        }
                        Err(_) => {
                            say("starting the runtime panicked; running on local memory only");
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

fn init() -> Result<(), String> {
    let controller = getenv(c"FARMEM_CONTROLLER")
        .filter(|s| !s.is_empty())
        .ok_or("FARMEM_CONTROLLER is not set")?;
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
    if let Some(p) = getenv(c"FARMEM_POLICY") {
        cfg.policy = p.parse().map_err(|e| format!("FARMEM_POLICY: {e}"))?;
    }
    let name = getenv(c"FARMEM_NAME").unwrap_or_else(|| "farmem-run".into());
    let store = Arc::new(
        RackStore::connect(
            &controller,
            farmem_net::ClientConfig::new(name, farmem_wire::Role::Compute),
            2,
        )
        .map_err(|e| format!("connecting to controller {controller}: {e}"))?,
    );
    let rt = Runtime::new(cfg, store.clone(), store)
        .map_err(|e| format!("starting the far-memory runtime: {e}"))?;
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
    Ok(())
}

extern "C" fn fork_prepare() {
    lock_heap();
}

extern "C" fn fork_parent() {
    unlock_heap();
}

extern "C" fn fork_child() {
    FORKED.store(true, Ordering::Relaxed);
    unlock_heap();
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(write_stats);
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
    use std::io::Write;
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        say(&format!("writing stats to {path}: {e}"));
    }
}

/// A far range of at least `size` bytes, zeroed if asked; None when the
/// request belongs in local memory.
fn far_alloc(size: usize, zero: bool) -> Option<*mut c_void> {
    if size < threshold() || local_only() || !ensure_init() {
        return None;
    }
    let g = with_heap(|h| h.alloc(size)).flatten()?;
    if zero && g.stale > 0 {
        // SAFETY: the range was just granted to us and is mapped.
        unsafe { std::ptr::write_bytes(g.addr as *mut u8, 0, g.stale) };
    }
    Some(g.addr as *mut c_void)
}

fn far_free(p: *mut c_void) {
    with_heap(|h| h.free(p as usize));
}

fn far_len(p: *const c_void) -> usize {
    with_heap(|h| h.len_of(p as usize)).flatten().unwrap_or(0)
}

fn set_errno(e: c_int) {
    // SAFETY: errno is thread-local and always writable.
    unsafe { *libc::__errno_location() = e };
}

#[unsafe(no_mangle)]
pub extern "C" fn malloc(size: usize) -> *mut c_void {
    if let Some(p) = far_alloc(size, false) {
        return p;
    }
    // SAFETY: plain glibc call.
    unsafe { __libc_malloc(size) }
}

#[unsafe(no_mangle)]
pub extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    let Some(total) = n.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return std::ptr::null_mut();
    };
    if let Some(p) = far_alloc(total, true) {
        return p;
    }
    // SAFETY: plain glibc call.
    unsafe { __libc_calloc(n, size) }
}

/// # Safety
/// `p` is null or came from this allocator and was not freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free(p: *mut c_void) {
    if p.is_null() {
        return;
    }
    if is_far(p) {
        far_free(p);
    } else {
        // SAFETY: a local pointer, from glibc.
        unsafe { __libc_free(p) }
    }
}

/// # Safety
/// `p` is null or came from this allocator and was not freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if p.is_null() {
        return malloc(size);
    }
    if !is_far(p) {
        if size < threshold() || local_only() {
            // SAFETY: a local pointer, from glibc.
            return unsafe { __libc_realloc(p, size) };
        }
        // Growing a local block past the threshold: move it far.
        let Some(q) = far_alloc(size, false) else {
            // SAFETY: as above.
            return unsafe { __libc_realloc(p, size) };
        };
        // SAFETY: p is a live local block of `old` usable bytes, q has size bytes.
        unsafe {
            let old = usable_local(p);
            std::ptr::copy_nonoverlapping(p as *const u8, q as *mut u8, old.min(size));
            __libc_free(p);
        }
        return q;
    }
    if size == 0 {
        far_free(p);
        return std::ptr::null_mut();
    }
    let old = far_len(p);
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
        && let Some(p) = far_alloc(size, false)
    {
        return p;
    }
    // SAFETY: plain glibc call.
    unsafe { __libc_memalign(align, size) }
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

type UsableFn = unsafe extern "C" fn(*mut c_void) -> usize;

/// glibc's own `malloc_usable_size`, for local blocks.
fn usable_local(p: *mut c_void) -> usize {
    let mut f = REAL_USABLE.load(Ordering::Acquire);
    if f == 0 {
        let _busy = Busy::enter();
        // SAFETY: RTLD_NEXT lookup of a C function by name.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"malloc_usable_size".as_ptr()) } as usize;
        REAL_USABLE.store(f, Ordering::Release);
    }
    if f == 0 {
        return 0;
    }
    // SAFETY: f is glibc's malloc_usable_size, with that signature.
    unsafe { std::mem::transmute::<usize, UsableFn>(f)(p) }
}

/// # Safety
/// `p` is null or a live block from this allocator.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> usize {
    if p.is_null() {
        0
    } else if is_far(p) {
        far_len(p)
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
        && let Some(p) = far_alloc(len, true)
    {
        return p;
    }
    // SAFETY: the caller's arguments, passed to the system call unchanged.
    unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, off) as *mut c_void }
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
