//! read/write and their positioned, vectored and `_FORTIFY_SOURCE` forms:
//! far buffers touched first on the signal path (see `touch`).

use libc::{c_int, c_void, iovec, off_t, size_t, ssize_t};

use super::real::*;
use super::touch::*;
use crate::io::Access;

/// # Safety
/// As read(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    flat(
        buf as usize,
        count,
        Access::KernelWrites,
        fd,
        |p, n, _| call_real!(READ: ReadFn, -1; fd, p as *mut c_void, n),
    )
}

/// # Safety
/// As write(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    flat(
        buf as usize,
        count,
        Access::KernelReads,
        fd,
        |p, n, _| call_real!(WRITE: WriteFn, -1; fd, p as *const c_void, n),
    )
}

/// # Safety
/// As pread(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread64(
    fd: c_int,
    buf: *mut c_void,
    count: size_t,
    off: off_t,
) -> ssize_t {
    flat(buf as usize, count, Access::KernelWrites, fd, |p, n, at| {
        let off = off.saturating_add(to_off(at));
        call_real!(PREAD: PreadFn, -1; fd, p as *mut c_void, n, off)
    })
}

/// # Safety
/// As pread(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, count: size_t, off: off_t) -> ssize_t {
    // SAFETY: the same function on 64-bit targets.
    unsafe { pread64(fd, buf, count, off) }
}

/// # Safety
/// As pwrite(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite64(
    fd: c_int,
    buf: *const c_void,
    count: size_t,
    off: off_t,
) -> ssize_t {
    flat(buf as usize, count, Access::KernelReads, fd, |p, n, at| {
        let off = off.saturating_add(to_off(at));
        call_real!(PWRITE: PwriteFn, -1; fd, p as *const c_void, n, off)
    })
}

/// # Safety
/// As pwrite(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite(
    fd: c_int,
    buf: *const c_void,
    count: size_t,
    off: off_t,
) -> ssize_t {
    // SAFETY: the same function on 64-bit targets.
    unsafe { pwrite64(fd, buf, count, off) }
}

/// # Safety
/// As readv(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    let real = |v: *const iovec, c: c_int| call_real!(READV: VecFn, -1; fd, v, c);
    // SAFETY: the caller's iovec array, as readv(2) requires.
    if let Some(iovs) = unsafe { iovecs(iov, cnt) }
        && any_far(iovs)
        && is_socket(fd)
    {
        // SAFETY: as above.
        return unsafe { bounced_vec(iovs, |one| real(one, 1)) };
    }
    let call = || real(iov, cnt);
    // SAFETY: as above.
    unsafe { vectored(iov, cnt, Access::KernelWrites, call) }
}

/// # Safety
/// As writev(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    let call = || call_real!(WRITEV: VecFn, -1; fd, iov, cnt);
    // SAFETY: the caller's iovec array, as writev(2) requires.
    unsafe { vectored(iov, cnt, Access::KernelReads, call) }
}

/// # Safety
/// As preadv(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn preadv(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    let call = || call_real!(PREADV: PvecFn, -1; fd, iov, cnt, off);
    // SAFETY: the caller's iovec array, as preadv(2) requires.
    unsafe { vectored(iov, cnt, Access::KernelWrites, call) }
}

/// # Safety
/// As pwritev(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwritev(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    let call = || call_real!(PWRITEV: PvecFn, -1; fd, iov, cnt, off);
    // SAFETY: the caller's iovec array, as pwritev(2) requires.
    unsafe { vectored(iov, cnt, Access::KernelReads, call) }
}

// _FORTIFY_SOURCE turns a call whose buffer size the compiler knows into
// its `__*_chk` form (distributions build with it): the overflow check is
// glibc's (its function is called, and aborts), the rest is ours.

/// # Safety
/// As glibc's __read_chk.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    if n > buflen {
        return call_real!(READ_CHK: ReadChkFn, -1; fd, buf, n, buflen);
    }
    // SAFETY: the caller's arguments, checked against the buffer's size.
    unsafe { read(fd, buf, n) }
}

/// # Safety
/// As glibc's __pread64_chk.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __pread64_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off_t,
    buflen: size_t,
) -> ssize_t {
    if n > buflen {
        return call_real!(PREAD_CHK: PreadChkFn, -1; fd, buf, n, off, buflen);
    }
    // SAFETY: as above.
    unsafe { pread64(fd, buf, n, off) }
}

/// # Safety
/// As glibc's __pread_chk.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __pread_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off_t,
    buflen: size_t,
) -> ssize_t {
    // SAFETY: the same function on 64-bit targets.
    unsafe { __pread64_chk(fd, buf, n, off, buflen) }
}

/// # Safety
/// As preadv(2) (the same function on 64-bit targets).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn preadv64(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    // SAFETY: the caller's arguments.
    unsafe { preadv(fd, iov, cnt, off) }
}

/// # Safety
/// As pwritev(2) (the same function on 64-bit targets).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwritev64(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off_t,
) -> ssize_t {
    // SAFETY: the caller's arguments.
    unsafe { pwritev(fd, iov, cnt, off) }
}
