//! fread/fwrite/fputs and their `_unlocked` and `_FORTIFY_SOURCE` forms:
//! far buffers touched first, in pieces of whole items, on the signal path.

use libc::{c_int, c_void, size_t};

use super::real::*;
use super::touch::*;
use crate::io::{Access, overlaps};

/// fread and fwrite: `call(ptr, items)` in pieces of whole items that fit
/// the budget, each touched first (a failed stream call is not retried: it
/// sets the stream's error flag). Stops at the first short piece.
fn stream(
    ptr: *const c_void,
    size: size_t,
    n: size_t,
    access: Access,
    mut call: impl FnMut(*const c_void, size_t) -> size_t,
) -> size_t {
    let len = size.saturating_mul(n);
    let Some(far) = active().filter(|f| size > 0 && overlaps(ptr as usize, len, f)) else {
        return call(ptr, n);
    };
    let per_piece = (budget() / size).max(1);
    let mut done = 0;
    while done < n {
        let items = per_piece.min(n - done);
        let at = ptr as usize + done * size;
        let _pin = pin(at, items * size);
        touch(at, items * size, access, &far);
        let got = call(at as *const c_void, items);
        done += got;
        if got < items {
            break;
        }
    }
    done
}

/// # Safety
/// As fread(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fread(
    ptr: *mut c_void,
    size: size_t,
    n: size_t,
    f: *mut libc::FILE,
) -> size_t {
    stream(
        ptr,
        size,
        n,
        Access::KernelWrites,
        |p, k| call_real!(FREAD: FileFn, 0; p as *mut c_void, size, k, f),
    )
}

/// # Safety
/// As fwrite(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fwrite(
    ptr: *const c_void,
    size: size_t,
    n: size_t,
    f: *mut libc::FILE,
) -> size_t {
    stream(
        ptr,
        size,
        n,
        Access::KernelReads,
        |p, k| call_real!(FWRITE: FileFn, 0; p as *mut c_void, size, k, f),
    )
}

/// A far string goes out as `fwrite` pieces: glibc's fputs hands it to
/// the kernel in one call, and a string longer than the local cache is
/// no longer all local by then (its own `strlen` read it first).
///
/// # Safety
/// As fputs(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fputs(s: *const libc::c_char, f: *mut libc::FILE) -> c_int {
    if active().is_none_or(|far| !overlaps(s as usize, 1, &far)) {
        return call_real!(FPUTS: FputsFn, libc::EOF; s, f);
    }
    // SAFETY: the caller's NUL-terminated string.
    let len = unsafe { libc::strlen(s) };
    let written = stream(
        s.cast(),
        1,
        len,
        Access::KernelReads,
        |p, k| call_real!(FWRITE: FileFn, 0; p as *mut c_void, 1, k, f),
    );
    if written == len { 1 } else { libc::EOF }
}

/// Whether `n` items of `size` bytes overrun a buffer of `len` (glibc's
/// fortify check, which then aborts in glibc's own function).
fn overflows(size: size_t, n: size_t, len: size_t) -> bool {
    size.checked_mul(n).is_none_or(|total| total > len)
}

/// # Safety
/// As glibc's __fread_chk.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __fread_chk(
    ptr: *mut c_void,
    ptrlen: size_t,
    size: size_t,
    n: size_t,
    f: *mut libc::FILE,
) -> size_t {
    if overflows(size, n, ptrlen) {
        return call_real!(FREAD_CHK: FreadChkFn, 0; ptr, ptrlen, size, n, f);
    }
    // SAFETY: as above.
    unsafe { fread(ptr, size, n, f) }
}

/// # Safety
/// As glibc's __fread_unlocked_chk.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __fread_unlocked_chk(
    ptr: *mut c_void,
    ptrlen: size_t,
    size: size_t,
    n: size_t,
    f: *mut libc::FILE,
) -> size_t {
    if overflows(size, n, ptrlen) {
        return call_real!(FREAD_UNLOCKED_CHK: FreadChkFn, 0; ptr, ptrlen, size, n, f);
    }
    // SAFETY: as above.
    unsafe { fread_unlocked(ptr, size, n, f) }
}

/// # Safety
/// As fread_unlocked(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fread_unlocked(
    ptr: *mut c_void,
    size: size_t,
    n: size_t,
    f: *mut libc::FILE,
) -> size_t {
    stream(
        ptr,
        size,
        n,
        Access::KernelWrites,
        |p, k| call_real!(FREAD_UNLOCKED: FileFn, 0; p as *mut c_void, size, k, f),
    )
}

/// # Safety
/// As fwrite_unlocked(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fwrite_unlocked(
    ptr: *const c_void,
    size: size_t,
    n: size_t,
    f: *mut libc::FILE,
) -> size_t {
    stream(
        ptr,
        size,
        n,
        Access::KernelReads,
        |p, k| call_real!(FWRITE_UNLOCKED: FileFn, 0; p as *mut c_void, size, k, f),
    )
}
