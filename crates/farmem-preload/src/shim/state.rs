//! Process state, the bottom layer: whether the runtime is up, the far
//! heap and its range, which thread is calling, and the few helpers every
//! other module needs (environment variables, errno, one line on stderr).

use std::cell::{Cell, UnsafeCell};
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicUsize, Ordering};

use farmem_runtime::Runtime;
use farmem_runtime::backend::CompressedStore;
use farmem_runtime::preload_env;
use farmem_runtime::remote::RackStore;

use crate::heap::Heap;

pub(super) const UNINIT: u8 = 0;
pub(super) const INITING: u8 = 1;
pub(super) const READY: u8 = 2;
pub(super) const OFF: u8 = 3;

pub(super) static STATE: AtomicU8 = AtomicU8::new(UNINIT);
/// Set in a forked child: no new far allocations.
pub(super) static FORKED: AtomicBool = AtomicBool::new(false);
/// The far heap's address range, for an O(1) "is this far?" test.
pub(super) static HEAP_BASE: AtomicUsize = AtomicUsize::new(0);
pub(super) static HEAP_END: AtomicUsize = AtomicUsize::new(0);
/// 0 until read from FARMEM_THRESHOLD.
static THRESHOLD: AtomicUsize = AtomicUsize::new(0);
pub(super) static RUNTIME: AtomicPtr<Runtime> = AtomicPtr::new(std::ptr::null_mut());
/// The rack the runtime took its remote memory from, to give it back at exit.
pub(super) static STORE: AtomicPtr<RackStore> = AtomicPtr::new(std::ptr::null_mut());
/// The compressed pool in front of it (`FARMEM_BACKEND=compressed`), for
/// the stats line; null otherwise.
pub(super) static POOL: AtomicPtr<CompressedStore> = AtomicPtr::new(std::ptr::null_mut());
pub(super) static INIT_PID: AtomicUsize = AtomicUsize::new(0);

/// The heap's book-keeping under a spin lock (no allocation, no futex
/// state that a fork could leave inconsistent: the fork handlers hold it).
pub(super) struct HeapCell {
    pub(super) locked: AtomicBool,
    pub(super) heap: UnsafeCell<Option<Heap>>,
}

// SAFETY: `heap` is only reached through `with_heap`, under `locked`.
unsafe impl Sync for HeapCell {}

pub(super) static HEAP: HeapCell = HeapCell {
    locked: AtomicBool::new(false),
    heap: UnsafeCell::new(None),
};

pub(super) fn lock_heap() {
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

pub(super) fn unlock_heap() {
    HEAP.locked.store(false, Ordering::Release);
}

pub(super) fn with_heap<R>(f: impl FnOnce(&mut Heap) -> R) -> Option<R> {
    let _busy = Busy::enter();
    lock_heap();
    // SAFETY: we hold the lock, so this is the only reference.
    let r = unsafe { (*HEAP.heap.get()).as_mut().map(f) };
    unlock_heap();
    r
}

thread_local! {
    /// Inside the shim's own code (initialisation, book-keeping).
    pub(super) static BUSY: Cell<bool> = const { Cell::new(false) };
    /// 0 unknown, 1 program thread, 2 runtime thread.
    pub(super) static KIND: Cell<u8> = const { Cell::new(0) };
}

pub(super) struct Busy(bool);

impl Busy {
    pub(super) fn enter() -> Self {
        Self(BUSY.try_with(|b| b.replace(true)).unwrap_or(true))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let prev = self.0;
        let _ = BUSY.try_with(|b| b.set(prev));
    }
}

pub(super) fn runtime_thread() -> bool {
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
pub(super) fn local_only() -> bool {
    FORKED.load(Ordering::Relaxed)
        || STATE.load(Ordering::Acquire) == OFF
        || BUSY.try_with(|b| b.get()).unwrap_or(true)
        || runtime_thread()
}

/// The far heap's address range (empty before the runtime starts).
pub(super) fn far_range() -> std::ops::Range<usize> {
    HEAP_BASE.load(Ordering::Acquire)..HEAP_END.load(Ordering::Acquire)
}

/// In a forked child, which has no runtime.
pub(super) fn forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}

pub(super) fn is_far(p: *const c_void) -> bool {
    let a = p as usize;
    a >= HEAP_BASE.load(Ordering::Acquire) && a < HEAP_END.load(Ordering::Acquire)
}

pub(super) fn getenv(name: &CStr) -> Option<String> {
    // SAFETY: name is NUL-terminated; getenv returns null or a C string.
    let v = unsafe { libc::getenv(name.as_ptr()) };
    if v.is_null() {
        return None;
    }
    // SAFETY: non-null result of getenv.
    Some(unsafe { CStr::from_ptr(v) }.to_string_lossy().into_owned())
}

pub(super) fn threshold() -> usize {
    match THRESHOLD.load(Ordering::Relaxed) {
        0 => {
            let _busy = Busy::enter();
            let t = match preload_env::threshold(&getenv) {
                Ok(t) => (t as usize).max(1),
                Err(e) => {
                    let t = preload_env::DEFAULT_THRESHOLD;
                    say(&format!("{e}; using {}", farmem_core::ByteSize(t)));
                    t as usize
                }
            };
            THRESHOLD.store(t, Ordering::Relaxed);
            t
        }
        t => t,
    }
}

/// One `farmem: …` line on stderr, in a single write.
pub(super) fn say(msg: &str) {
    let line = format!("farmem: {msg}\n");
    // SAFETY: writes our own buffer to fd 2.
    unsafe { libc::write(2, line.as_ptr() as *const c_void, line.len()) };
}

pub(super) fn set_errno(e: c_int) {
    // SAFETY: errno is thread-local and always writable.
    unsafe { *libc::__errno_location() = e };
}

/// Set once the runtime serves faults in signal handlers.
pub(super) static ON: AtomicBool = AtomicBool::new(false);
