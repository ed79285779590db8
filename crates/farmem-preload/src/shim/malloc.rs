//! The malloc family: blocks at or above the threshold go far, the rest
//! to the allocator the program has without us.

use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;

use super::far::{far_alloc, far_block, far_free};
use super::local::*;
use super::state::{FORKED, local_only, set_errno, threshold, with_heap};
use crate::heap::{Kind, PAGE};

#[unsafe(no_mangle)]
pub extern "C" fn malloc(size: usize) -> *mut c_void {
    if let Some(p) = far_alloc(size, false, Kind::Block, MIN_ALIGN) {
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
    if let Some(p) = far_alloc(total, true, Kind::Block, MIN_ALIGN) {
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
    if !far_free(p) {
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
        let Some(q) = far_alloc(size, false, Kind::Block, MIN_ALIGN) else {
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
    if size <= old
        && size >= threshold()
        && !FORKED.load(Ordering::Relaxed)
        && with_heap(|h| h.shrink(p as usize, size)) == Some(true)
    {
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
        && let Some(p) = far_alloc(size, false, Kind::Block, align)
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
