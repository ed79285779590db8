//! What fault path `signal` needs from the interposers of an unmodified
//! program, beyond the SIGBUS disposition `sigmask` keeps. This module
//! holds the ways a call's far buffers are made local before the kernel
//! sees them; the interposers are in `fileio`, `socket`, `stdio`, `poll`
//! and `sigmask`.
//!
//! * **SIGBUS is never blocked.** A far fault is a SIGBUS the faulting
//!   thread must take; with SIGBUS blocked the kernel kills the process
//!   instead (jemalloc starts its background threads with every signal
//!   blocked, and redis died that way). `pthread_sigmask` and
//!   `sigprocmask` leave SIGBUS out of the signals they block, `sigaction`
//!   leaves it out of a handler's mask, and `sigsuspend`, `ppoll` and
//!   `epoll_pwait` out of the mask they wait with. Blocking SIGBUS only
//!   ever deferred a SIGBUS sent with kill(2); a fault's SIGBUS cannot be
//!   blocked anyway.
//! * **System calls on far buffers** (see [`crate::io`]): `read`,
//!   `write`, `pread`, `pwrite`, `readv`, `writev`, `preadv`, `pwritev`,
//!   `recv`, `recvfrom`, `recvmsg`, `send`, `sendto`, `sendmsg`, `fread`,
//!   `fwrite`, `fputs`, `epoll_wait`, `epoll_pwait`, `poll` and `ppoll`, and their `_FORTIFY_SOURCE` (`__read_chk` …),
//!   `_unlocked` and `64` forms, touch the far pages of their buffers
//!   before calling the real function, and retry a call that fails with
//!   `EFAULT` after touching them again. Receives on sockets go through a
//!   local buffer instead: a socket dequeues data before copying it out,
//!   so a faulting copy would lose it. The pages a call touches are
//!   pinned first ([`pin`]) and stay local until it returns: the kernel's
//!   copy fails on a far page, and the cache may shrink meanwhile. Off
//!   the signal path, for buffers
//!   with no far byte, or on the runtime's own threads, a call goes
//!   straight through.
//!
//! A flat buffer larger than the touch budget ([`budget`]: a quarter of
//! the room the cache has for pages) is moved piece by piece (its pages could not all be local at once): files, and every
//! write, go on to the next piece while each piece is whole; a read from a
//! pipe, socket or terminal returns after its first piece, as a short read
//! it could have been anyway, rather than block for more. Vectored calls
//! touch their buffers up to the same budget and are made once, as are
//! `send` and `sendto` (a datagram must go whole). `fread` and `fwrite` go
//! in pieces of whole items and are not retried (a failure sets the
//! stream's error flag). glibc functions that hand a caller's buffer to
//! the kernel themselves (`printf("%s")` of a far string longer than the
//! local cache, `puts`) and raw system calls (Go's runtime) do not come
//! through here.

use std::ops::Range;
use std::sync::atomic::{AtomicU8, Ordering};

use libc::{c_int, c_void, iovec, off_t, ssize_t};

use super::real::resolve;
use super::state::{ON, RUNTIME, far_range, forked, runtime_thread};
use crate::io::{Access, MAX_TRIES, far_pages, overlaps, pieces};

/// Turns the interposers on (the runtime is up).
pub(super) fn enable() {
    resolve();
    ON.store(true, Ordering::Release);
}

/// Most bytes of far buffers one call touches: a quarter of the room the
/// cache has for pages now, so touching does not evict what it just
/// touched, nor does the cache shrinking as the process's own memory
/// grows (when the limit counts the process, up to half of it may go).
/// Whole pages, so pieces of an O_DIRECT transfer stay aligned.
pub(super) fn budget() -> usize {
    let page = farmem_core::PAGE_SIZE as usize;
    let rt = RUNTIME.load(Ordering::Acquire);
    if rt.is_null() {
        return page;
    }
    // SAFETY: the runtime is leaked at start and never freed.
    let room = unsafe { &*rt }.cache_room_bytes();
    let quarter = usize::try_from(room / 4).unwrap_or(usize::MAX) / page * page;
    quarter.max(page)
}

/// The far heap, when this call's far buffers need touching.
pub(super) fn active() -> Option<Range<usize>> {
    if !ON.load(Ordering::Acquire) || forked() || runtime_thread() {
        return None;
    }
    Some(far_range())
}

fn errno() -> c_int {
    // SAFETY: errno is thread-local and always readable.
    unsafe { *libc::__errno_location() }
}

/// Holds the far pages of `[start, start + len)` local until dropped
/// ([`farmem_runtime::Runtime::pin`]), so what a call's buffers had touched
/// is still mapped when the kernel copies, however the cache's room
/// changes meanwhile (a compressed pool turned on mid-call shrinks it).
/// Pin before touching; within [`budget`].
pub(super) fn pin(start: usize, len: usize) -> Option<farmem_runtime::Pinned<'static>> {
    let rt = RUNTIME.load(Ordering::Acquire);
    // SAFETY: the runtime is leaked at start and never freed.
    (!rt.is_null()).then(|| unsafe { &*rt }.pin(start, len))
}

/// Touches the far pages of `[start, start + len)` the way `access` says,
/// each at a byte of the buffer.
pub(super) fn touch(start: usize, len: usize, access: Access, far: &Range<usize>) {
    for page in far_pages(start, len, far) {
        let byte = page.max(start) as *mut u8;
        match access {
            // A compare-exchange always writes, whether or not it swaps,
            // and leaves the byte as it was even if another thread writes
            // it meanwhile (an idempotent add may be compiled to a load).
            Access::KernelWrites => {
                // SAFETY: a byte of the caller's buffer, which it hands to
                // the kernel to fill; atomics need no alignment for u8.
                let a = unsafe { AtomicU8::from_ptr(byte) };
                let v = a.load(Ordering::Relaxed);
                let _ = a.compare_exchange(v, v, Ordering::Relaxed, Ordering::Relaxed);
            }
            // SAFETY: a byte of the caller's buffer, which the kernel reads.
            Access::KernelReads => unsafe {
                std::ptr::read_volatile(byte);
            },
        }
    }
}

/// Touches `bufs` (up to `budget` bytes in all: the caller's one reading
/// of [`budget`], which its pieces were cut to) and calls `call`, again
/// while it fails with `EFAULT`.
pub(super) fn touched(
    bufs: &[(usize, usize)],
    budget: usize,
    access: Access,
    far: &Range<usize>,
    mut call: impl FnMut() -> ssize_t,
) -> ssize_t {
    let mut left = budget;
    let _pins: Vec<_> = bufs
        .iter()
        .map(|&(start, len)| {
            let len = len.min(left);
            left -= len;
            pin(start, len)
        })
        .collect();
    let mut r = -1;
    for _ in 0..MAX_TRIES {
        let mut left = budget;
        for &(start, len) in bufs {
            let len = len.min(left);
            touch(start, len, access, far);
            left -= len;
        }
        r = call();
        if r >= 0 || errno() != libc::EFAULT {
            return r;
        }
    }
    r
}

fn file_type(fd: c_int) -> Option<libc::mode_t> {
    // SAFETY: a zeroed stat is valid; fstat fills it or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a pointer to a live local.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st.st_mode & libc::S_IFMT)
}

pub(super) fn is_socket(fd: c_int) -> bool {
    file_type(fd) == Some(libc::S_IFSOCK)
}

/// Largest bounce buffer: the touch budget, but never less than any
/// datagram (a smaller buffer would truncate it).
fn bounce_cap() -> usize {
    budget().max(1 << 20)
}

/// Reads from a socket into far memory through a local buffer: a socket
/// takes data off its queue before copying it out, so a copy that faults
/// would lose it (a datagram is dropped; a stream's bytes are gone when a
/// later output, such as recvfrom's address, faults). `call(ptr, len)` is
/// the receive into local memory; the bytes are then copied in user mode,
/// where far faults are served. With `MSG_WAITALL` it goes on to fill the
/// whole buffer, as the kernel would.
pub(super) fn bounced(
    buf: usize,
    len: usize,
    flags: c_int,
    mut call: impl FnMut(*mut c_void, usize) -> ssize_t,
) -> ssize_t {
    let mut local: Vec<u8> = Vec::with_capacity(len.min(bounce_cap()));
    let mut done = 0usize;
    loop {
        let n = (len - done).min(local.capacity());
        let r = call(local.as_mut_ptr().cast(), n);
        if r <= 0 {
            return if done > 0 { done as ssize_t } else { r };
        }
        // SAFETY: the kernel wrote `r` bytes into `local`; the caller's
        // buffer has `len - done` bytes left from `buf + done`.
        unsafe {
            std::ptr::copy_nonoverlapping(local.as_ptr(), (buf + done) as *mut u8, r as usize)
        };
        done += r as usize;
        if done == len || flags & libc::MSG_WAITALL == 0 || (r as usize) < n {
            return done as ssize_t;
        }
    }
}

/// A call on one flat buffer: `call(ptr, len, offset)` moves `len` bytes
/// at `ptr`, `offset` bytes into the caller's buffer.
pub(super) fn flat(
    buf: usize,
    len: usize,
    access: Access,
    fd: c_int,
    mut call: impl FnMut(usize, usize, usize) -> ssize_t,
) -> ssize_t {
    let Some(far) = active().filter(|f| overlaps(buf, len, f)) else {
        return call(buf, len, 0);
    };
    if access == Access::KernelWrites && is_socket(fd) {
        return bounced(buf, len, 0, |p, n| call(p as usize, n, 0));
    }
    let budget = budget();
    if len <= budget {
        return touched(&[(buf, len)], budget, access, &far, || call(buf, len, 0));
    }
    let go_on = access == Access::KernelReads
        || matches!(file_type(fd), Some(libc::S_IFREG | libc::S_IFBLK));
    let mut done = 0usize;
    for piece in pieces(len, budget) {
        let (at, n) = (buf + piece.start, piece.len());
        let r = touched(&[(at, n)], budget, access, &far, || {
            call(at, n, piece.start)
        });
        if r < 0 {
            return if done == 0 { r } else { done as ssize_t };
        }
        done += r as usize;
        if (r as usize) < n || !go_on {
            break;
        }
    }
    done as ssize_t
}

/// A call on an iovec array.
///
/// # Safety
/// `iov` points to `cnt` iovecs, or `cnt` is not positive.
pub(super) unsafe fn vectored(
    iov: *const iovec,
    cnt: c_int,
    access: Access,
    call: impl FnMut() -> ssize_t,
) -> ssize_t {
    let mut call = call;
    let Some(far) = active() else { return call() };
    // SAFETY: per the contract (the kernel would read the same array).
    let Some(iovs) = (unsafe { iovecs(iov, cnt) }) else {
        return call();
    };
    let bufs: Vec<(usize, usize)> = iovs
        .iter()
        .map(|v| (v.iov_base as usize, v.iov_len))
        .filter(|&(s, l)| overlaps(s, l, &far))
        .collect();
    if bufs.is_empty() {
        return call();
    }
    touched(&bufs, budget(), access, &far, call)
}

pub(super) fn to_off(o: usize) -> off_t {
    off_t::try_from(o).unwrap_or(off_t::MAX)
}

/// Whether `[start, start + len)` has a far byte and the shim is on.
pub(super) fn far_bytes(start: usize, len: usize) -> bool {
    start != 0 && active().is_some_and(|f| overlaps(start, len, &f))
}

/// Copies `n` bytes from `from` into the caller's iovecs in order.
///
/// # Safety
/// `from` holds `n` bytes; the iovecs are the caller's, as writable as
/// the kernel would need them.
unsafe fn scatter(from: *const u8, n: usize, iovs: &[iovec]) {
    let mut left = n;
    let mut at = from;
    for v in iovs {
        if left == 0 {
            break;
        }
        let k = v.iov_len.min(left);
        // SAFETY: per the contract.
        unsafe {
            std::ptr::copy_nonoverlapping(at, v.iov_base.cast::<u8>(), k);
            at = at.add(k);
        }
        left -= k;
    }
}

/// The caller's iovecs, if the array is one the kernel would take.
///
/// # Safety
/// As readv(2)'s `iov` and `cnt`.
pub(super) unsafe fn iovecs<'a>(iov: *const iovec, cnt: c_int) -> Option<&'a [iovec]> {
    if iov.is_null() || cnt <= 0 || cnt > libc::UIO_MAXIOV {
        return None;
    }
    // SAFETY: per the contract.
    Some(unsafe { std::slice::from_raw_parts(iov, cnt as usize) })
}

pub(super) fn any_far(iovs: &[iovec]) -> bool {
    iovs.iter()
        .any(|v| far_bytes(v.iov_base as usize, v.iov_len))
}

/// Receives on a socket into the caller's iovecs through one local buffer
/// (see [`bounced`]); `call(local_iov)` is the receive.
///
/// # Safety
/// The iovecs are the caller's, as writable as the kernel would need them.
pub(super) unsafe fn bounced_vec(
    iovs: &[iovec],
    mut call: impl FnMut(&mut iovec) -> ssize_t,
) -> ssize_t {
    let total = iovs.iter().fold(0usize, |t, v| t.saturating_add(v.iov_len));
    let mut local: Vec<u8> = Vec::with_capacity(total.min(bounce_cap()));
    let mut one = iovec {
        iov_base: local.as_mut_ptr().cast(),
        iov_len: local.capacity(),
    };
    let r = call(&mut one);
    if r > 0 {
        // SAFETY: the kernel wrote `r` bytes into `local`; per the contract.
        unsafe { scatter(local.as_ptr(), r as usize, iovs) };
    }
    r
}
