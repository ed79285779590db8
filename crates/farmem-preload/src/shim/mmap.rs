//! The mmap family: anonymous private read-write mappings at or above the
//! threshold go far; calls on far ranges are emulated.

use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;

use super::far::{discard, far_alloc, zero_range};
use super::state::{BUSY, FORKED, HEAP_END, is_far, runtime_thread, set_errno, with_heap};
use crate::heap::{Kind, PAGE};

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
        && let Some(p) = far_alloc(len, true, Kind::Mapping, PAGE)
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
        zero_range(addr as usize, len);
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
        discard(addr as usize, len);
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
            zero_range(addr as usize, end - addr as usize);
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
