//! Local memory: glibc for the shim's own Rust code (its global
//! allocator), and the allocator the program has without us for blocks
//! below the threshold, with a boot arena for the few made while that one
//! is being looked up.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::ffi::{CStr, c_void};
use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering};

use super::state::set_errno;

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
pub(super) const MIN_ALIGN: usize = 16;

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
pub(super) struct Next {
    pub(super) malloc: unsafe extern "C" fn(usize) -> *mut c_void,
    pub(super) calloc: unsafe extern "C" fn(usize, usize) -> *mut c_void,
    pub(super) realloc: unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void,
    pub(super) free: unsafe extern "C" fn(*mut c_void),
    pub(super) memalign: unsafe extern "C" fn(usize, usize) -> *mut c_void,
    pub(super) usable: Option<unsafe extern "C" fn(*mut c_void) -> usize>,
}

const NEXT_UNRESOLVED: u8 = 0;
const NEXT_RESOLVING: u8 = 1;
const NEXT_READY: u8 = 2;
static NEXT_STATE: AtomicU8 = AtomicU8::new(NEXT_UNRESOLVED);
static NEXT_PTR: AtomicPtr<Next> = AtomicPtr::new(std::ptr::null_mut());

/// The next allocator, or None while it is being looked up (dlsym may
/// allocate): those few blocks come from [`boot_alloc`].
pub(super) fn next() -> Option<&'static Next> {
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

pub(super) fn boot_alloc(size: usize, align: usize) -> *mut c_void {
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

pub(super) fn local_malloc(size: usize) -> *mut c_void {
    match next() {
        // SAFETY: the next allocator's malloc.
        Some(n) => unsafe { (n.malloc)(size) },
        None => boot_alloc(size, MIN_ALIGN),
    }
}

/// # Safety
/// `p` is a live local block (the next allocator's or the boot arena's).
pub(super) unsafe fn local_free(p: *mut c_void) {
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
pub(super) unsafe fn local_realloc(p: *mut c_void, size: usize) -> *mut c_void {
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

/// The usable size of a local block.
pub(super) fn usable_local(p: *mut c_void) -> usize {
    if in_boot(p) {
        return boot_len(p);
    }
    match next().and_then(|n| n.usable) {
        // SAFETY: p is the next allocator's block.
        Some(f) => unsafe { f(p) },
        None => 0,
    }
}
