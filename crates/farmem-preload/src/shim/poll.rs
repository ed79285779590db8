//! Event loops: epoll_wait, epoll_pwait, poll and ppoll. The kernel fills
//! the caller's event array, which an allocator whose arenas went far
//! (jemalloc under redis) may have put in far memory; on the signal path it
//! is touched first. A failed copy-out leaves the events pending (epoll
//! puts them back on its ready list; poll recomputes), so touching and
//! retrying is safe.

use libc::{c_int, ssize_t};

use super::real::*;
use super::sigbus::Mask;
use super::touch::*;
use crate::io::{Access, overlaps};

/// `call` with `[start, start + len)` made local first, retried on EFAULT.
fn filled(start: usize, len: usize, mut call: impl FnMut() -> c_int) -> c_int {
    match active().filter(|f| overlaps(start, len, f)) {
        Some(far) => touched(
            &[(start, len)],
            budget(),
            Access::KernelWrites,
            &far,
            || call() as ssize_t,
        ) as c_int,
        None => call(),
    }
}

fn array_bytes<T>(n: impl TryInto<usize>) -> usize {
    n.try_into()
        .unwrap_or(0)
        .saturating_mul(std::mem::size_of::<T>())
}

/// # Safety
/// As epoll_wait(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    let len = array_bytes::<libc::epoll_event>(max);
    filled(
        events as usize,
        len,
        || call_real!(EPOLL_WAIT: EpollWaitFn, -1; epfd, events, max, timeout),
    )
}

/// # Safety
/// As epoll_pwait(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const libc::sigset_t,
) -> c_int {
    let len = array_bytes::<libc::epoll_event>(max);
    let mask = Mask::without_sigbus(libc::SIG_SETMASK, mask);
    filled(
        events as usize,
        len,
        || call_real!(EPOLL_PWAIT: EpollPwaitFn, -1; epfd, events, max, timeout, mask.ptr()),
    )
}

/// # Safety
/// As poll(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    let len = array_bytes::<libc::pollfd>(n);
    filled(
        fds as usize,
        len,
        || call_real!(POLL: PollFn, -1; fds, n, timeout),
    )
}

/// # Safety
/// As ppoll(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ppoll(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    let len = array_bytes::<libc::pollfd>(n);
    let mask = Mask::without_sigbus(libc::SIG_SETMASK, mask);
    filled(
        fds as usize,
        len,
        || call_real!(PPOLL: PpollFn, -1; fds, n, timeout, mask.ptr()),
    )
}
