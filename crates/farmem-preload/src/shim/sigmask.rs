//! Signal dispositions and masks: a program's SIGBUS handler is kept for
//! the SIGBUSes that are not far faults, and no mask blocks SIGBUS on the
//! signal path (see `sigbus`).

use std::ffi::c_int;

use super::real::*;
use super::sigbus::{Mask, mask_without_sigbus};

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
        mask_without_sigbus(&mut act.sa_mask);
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

/// # Safety
/// As pthread_sigmask(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_sigmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    let set = Mask::without_sigbus(how, set);
    // pthread_sigmask reports errors as its result, not in errno.
    call_real!(PTHREAD_SIGMASK: MaskFn, libc::ENOSYS; how, set.ptr(), old)
}

/// # Safety
/// As sigprocmask(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigprocmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    let set = Mask::without_sigbus(how, set);
    call_real!(SIGPROCMASK: MaskFn, -1; how, set.ptr(), old)
}

/// A handler run while waiting here gets this mask: SIGBUS stays out.
///
/// # Safety
/// As sigsuspend(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigsuspend(mask: *const libc::sigset_t) -> c_int {
    let mask = Mask::without_sigbus(libc::SIG_SETMASK, mask);
    call_real!(SIGSUSPEND: SigsuspendFn, -1; mask.ptr())
}
