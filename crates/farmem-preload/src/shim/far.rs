//! The far heap's blocks: allocation (starting the runtime if need be),
//! free and lookup, for the malloc and mmap families.

use std::ffi::c_void;
use std::sync::atomic::Ordering;

use super::init::ensure_init;
use super::state::{Busy, FORKED, READY, RUNTIME, STATE, is_far, local_only, threshold, with_heap};
use crate::heap::{Kind, PAGE, Taken, small};

/// A far range of at least `size` bytes aligned to `align`, zeroed if
/// asked; None when the request belongs in local memory.
pub(super) fn far_alloc(size: usize, zero: bool, kind: Kind, align: usize) -> Option<*mut c_void> {
    if size < threshold() || local_only() {
        return None;
    }
    // An mmap may come from inside the program's allocator, holding its
    // locks: starting the runtime there would allocate and deadlock. The
    // runtime starts in the constructor below (or at a malloc).
    let ready = match kind {
        Kind::Block => ensure_init(),
        Kind::Mapping | Kind::Run => STATE.load(Ordering::Acquire) == READY,
    };
    if !ready {
        return None;
    }
    let g = with_heap(|h| h.alloc(size, kind, align)).flatten()?;
    if zero && g.stale > 0 {
        zero_range(g.addr, g.stale);
    }
    Some(g.addr as *mut c_void)
}

/// Frees the far malloc-family block at `p`; false if there is none.
pub(super) fn far_free(p: *mut c_void) -> bool {
    if !may_be_block(p) {
        return false;
    }
    match with_heap(|h| h.take(p as usize)).flatten() {
        Some(Taken::Pages { addr, len }) => {
            discard(addr, len);
            with_heap(|h| h.put_back(addr, len));
            true
        }
        Some(Taken::Block) => true,
        None => false,
    }
}

/// Freed far memory leaves the local cache now, unwritten (as the kernel
/// frees the pages of an unmapped chunk), rather than wait to be evicted
/// and written back. Before the range goes back to the heap, so no new
/// owner's write is dropped.
pub(super) fn discard(addr: usize, len: usize) {
    if let Some(rt) = own_runtime() {
        let _busy = Busy::enter();
        rt.discard(addr as u64, len as u64);
    }
}

/// Makes a far range read as zeros: its freed pages are dropped, not
/// fetched to be overwritten (`Runtime::zero`). Without a runtime of our
/// own the zeros are written.
pub(super) fn zero_range(addr: usize, len: usize) {
    match own_runtime() {
        Some(rt) => {
            let _busy = Busy::enter();
            rt.zero(addr as u64, len as u64);
        }
        // SAFETY: a far range of the caller's, mapped for the process.
        None => unsafe { std::ptr::write_bytes(addr as *mut u8, 0, len) },
    }
}

/// The process's runtime, if it has one of its own: not before it
/// started, and not in a forked child (which has only the parent's
/// locks, as they were at the fork).
fn own_runtime() -> Option<&'static farmem_runtime::Runtime> {
    let rt = RUNTIME.load(Ordering::Acquire);
    // SAFETY: the runtime is leaked, so it lives until the process ends.
    (!rt.is_null() && !FORKED.load(Ordering::Relaxed)).then(|| unsafe { &*rt })
}

/// The length of the far malloc-family block at `p`, if it is one (a
/// pointer into a far mapping belongs to whoever mapped it).
pub(super) fn far_block(p: *const c_void) -> Option<usize> {
    if !may_be_block(p) {
        return None;
    }
    with_heap(|h| h.block_len(p as usize)).flatten()
}

/// Whether `p` can be a far block. Far blocks are aligned as malloc's are,
/// and start on a page unless the threshold lets blocks be small: a small
/// block of the program's allocator inside a far arena is mostly told
/// apart without taking the heap's lock.
fn may_be_block(p: *const c_void) -> bool {
    let align = if threshold() > small::MAX {
        PAGE
    } else {
        small::ALIGN
    };
    is_far(p) && (p as usize).is_multiple_of(align)
}
