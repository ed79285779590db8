//! What fault path `signal` needs from the interposers of an unmodified
//! program, beyond the SIGBUS disposition `shim` keeps:
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
//!   so a faulting copy would lose it. Off the signal path, for buffers
//!   with no far byte, or on the runtime's own threads, a call goes
//!   straight through.
//!
//! A flat buffer larger than a quarter of the local cache is moved piece
//! by piece (its pages could not all be local at once): files, and every
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

use std::ffi::CStr;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

use libc::{c_int, c_void, iovec, msghdr, off_t, size_t, sockaddr, socklen_t, ssize_t};

use crate::io::{Access, MAX_TRIES, far_pages, overlaps, pieces};
use crate::shim::{far_range, forked, runtime_thread};

/// Set once the runtime serves faults in signal handlers.
static ON: AtomicBool = AtomicBool::new(false);
/// Most bytes of far buffers one call touches: a quarter of the local
/// cache, so touching does not evict what it just touched.
static BUDGET: AtomicUsize = AtomicUsize::new(0);

/// Turns the interposers on for a runtime with `local_bytes` of cache.
pub(crate) fn enable(local_bytes: u64) {
    resolve();
    // Whole pages, so pieces of an O_DIRECT transfer stay aligned.
    let page = farmem_core::PAGE_SIZE as usize;
    let budget = usize::try_from(local_bytes / 4).unwrap_or(usize::MAX) / page * page;
    BUDGET.store(budget.max(page), Ordering::Relaxed);
    ON.store(true, Ordering::Release);
}

/// The far heap, when this call's far buffers need touching.
fn active() -> Option<Range<usize>> {
    if !ON.load(Ordering::Acquire) || forked() || runtime_thread() {
        return None;
    }
    Some(far_range())
}

fn errno() -> c_int {
    // SAFETY: errno is thread-local and always readable.
    unsafe { *libc::__errno_location() }
}

/// Touches the far pages of `[start, start + len)` the way `access` says,
/// each at a byte of the buffer.
fn touch(start: usize, len: usize, access: Access, far: &Range<usize>) {
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

/// Touches `bufs` (up to the budget in all) and calls `call`, again while
/// it fails with `EFAULT`.
fn touched(
    bufs: &[(usize, usize)],
    access: Access,
    far: &Range<usize>,
    mut call: impl FnMut() -> ssize_t,
) -> ssize_t {
    let budget = BUDGET.load(Ordering::Relaxed);
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

fn is_socket(fd: c_int) -> bool {
    file_type(fd) == Some(libc::S_IFSOCK)
}

/// Largest bounce buffer: the touch budget, but never less than any
/// datagram (a smaller buffer would truncate it).
fn bounce_cap() -> usize {
    BUDGET.load(Ordering::Relaxed).max(1 << 20)
}

/// Reads from a socket into far memory through a local buffer: a socket
/// takes data off its queue before copying it out, so a copy that faults
/// would lose it (a datagram is dropped; a stream's bytes are gone when a
/// later output, such as recvfrom's address, faults). `call(ptr, len)` is
/// the receive into local memory; the bytes are then copied in user mode,
/// where far faults are served. With `MSG_WAITALL` it goes on to fill the
/// whole buffer, as the kernel would.
fn bounced(
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
fn flat(
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
    if len <= BUDGET.load(Ordering::Relaxed) {
        return touched(&[(buf, len)], access, &far, || call(buf, len, 0));
    }
    let go_on = access == Access::KernelReads
        || matches!(file_type(fd), Some(libc::S_IFREG | libc::S_IFBLK));
    let mut done = 0usize;
    for piece in pieces(len, BUDGET.load(Ordering::Relaxed)) {
        let (at, n) = (buf + piece.start, piece.len());
        let r = touched(&[(at, n)], access, &far, || call(at, n, piece.start));
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
unsafe fn vectored(
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
    touched(&bufs, access, &far, call)
}

/// The next library's functions (glibc's), found once when the shim loads
/// so that no interposer looks them up inside a signal handler.
struct Real {
    slot: AtomicUsize,
    name: &'static CStr,
}

macro_rules! reals {
    ($($id:ident = $name:literal),* $(,)?) => {
        $(static $id: Real = Real { slot: AtomicUsize::new(0), name: $name };)*
        pub(crate) fn resolve() {
            $($id.get();)*
        }
    };
}

reals! {
    READ = c"read", WRITE = c"write", PREAD = c"pread64", PWRITE = c"pwrite64",
    READV = c"readv", WRITEV = c"writev", PREADV = c"preadv", PWRITEV = c"pwritev",
    RECV = c"recv", RECVFROM = c"recvfrom", RECVMSG = c"recvmsg",
    SEND = c"send", SENDTO = c"sendto", SENDMSG = c"sendmsg",
    FREAD = c"fread", FWRITE = c"fwrite", FPUTS = c"fputs",
    PTHREAD_SIGMASK = c"pthread_sigmask", SIGPROCMASK = c"sigprocmask",
    READ_CHK = c"__read_chk", PREAD_CHK = c"__pread64_chk", RECV_CHK = c"__recv_chk",
    RECVFROM_CHK = c"__recvfrom_chk", FREAD_CHK = c"__fread_chk",
    FREAD_UNLOCKED_CHK = c"__fread_unlocked_chk",
    FREAD_UNLOCKED = c"fread_unlocked", FWRITE_UNLOCKED = c"fwrite_unlocked",
    EPOLL_WAIT = c"epoll_wait", EPOLL_PWAIT = c"epoll_pwait", POLL = c"poll",
    PPOLL = c"ppoll", SIGSUSPEND = c"sigsuspend",
}

impl Real {
    fn get(&self) -> usize {
        match self.slot.load(Ordering::Relaxed) {
            0 => {
                // SAFETY: RTLD_NEXT lookup of a C function by name.
                let p = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) } as usize;
                self.slot.store(p, Ordering::Relaxed);
                p
            }
            p => p,
        }
    }

    /// The function as an `F`, or None if no library below has it.
    ///
    /// # Safety
    /// `F` is the function pointer type of the C function `self.name`.
    unsafe fn f<F: Copy>(&self) -> Option<F> {
        let p = self.get();
        // SAFETY: per the contract, a non-null symbol of that type.
        (p != 0).then(|| unsafe { std::mem::transmute_copy::<usize, F>(&p) })
    }
}

/// The real function `$real` of type `$ty` called with `$args`, or -1 with
/// ENOSYS if there is none.
macro_rules! call_real {
    ($real:ident: $ty:ty, $fail:expr; $($arg:expr),*) => {
        // SAFETY: the type is the C function's; the arguments are the
        // caller's, as valid as the function requires.
        match unsafe { $real.f::<$ty>() } {
            Some(f) => unsafe { f($($arg),*) },
            None => {
                // SAFETY: errno is thread-local and always writable.
                unsafe { *libc::__errno_location() = libc::ENOSYS };
                $fail
            }
        }
    };
}

type ReadFn = unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t;
type WriteFn = unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t;
type PreadFn = unsafe extern "C" fn(c_int, *mut c_void, size_t, off_t) -> ssize_t;
type PwriteFn = unsafe extern "C" fn(c_int, *const c_void, size_t, off_t) -> ssize_t;
type VecFn = unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t;
type PvecFn = unsafe extern "C" fn(c_int, *const iovec, c_int, off_t) -> ssize_t;
type RecvFn = unsafe extern "C" fn(c_int, *mut c_void, size_t, c_int) -> ssize_t;
type RecvfromFn = unsafe extern "C" fn(
    c_int,
    *mut c_void,
    size_t,
    c_int,
    *mut sockaddr,
    *mut socklen_t,
) -> ssize_t;
type SendFn = unsafe extern "C" fn(c_int, *const c_void, size_t, c_int) -> ssize_t;
type SendtoFn = unsafe extern "C" fn(
    c_int,
    *const c_void,
    size_t,
    c_int,
    *const sockaddr,
    socklen_t,
) -> ssize_t;
type RecvmsgFn = unsafe extern "C" fn(c_int, *mut msghdr, c_int) -> ssize_t;
type SendmsgFn = unsafe extern "C" fn(c_int, *const msghdr, c_int) -> ssize_t;
type FileFn = unsafe extern "C" fn(*mut c_void, size_t, size_t, *mut libc::FILE) -> size_t;

fn to_off(o: usize) -> off_t {
    off_t::try_from(o).unwrap_or(off_t::MAX)
}

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

/// # Safety
/// As recv(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    let call = |p: *mut c_void, n: size_t| call_real!(RECV: RecvFn, -1; fd, p, n, flags);
    if far_bytes(buf as usize, len) {
        return bounced(buf as usize, len, flags, call);
    }
    call(buf, len)
}

/// # Safety
/// As recvfrom(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> ssize_t {
    let real = |p: *mut c_void, n: size_t, a: *mut sockaddr, al: *mut socklen_t| call_real!(RECVFROM: RecvfromFn, -1; fd, p, n, flags, a, al);
    let name_bytes = std::mem::size_of::<libc::sockaddr_storage>();
    if !(far_bytes(buf as usize, len)
        || far_bytes(addr as usize, name_bytes)
        || far_bytes(addrlen as usize, std::mem::size_of::<socklen_t>()))
    {
        return real(buf, len, addr, addrlen);
    }
    // The address, written after the data, goes through local memory too.
    let mut name = LocalName::new(addr.cast(), addrlen);
    let (a, al) = name.args();
    let r = bounced(buf as usize, len, flags, |p, n| real(p, n, a.cast(), al));
    if r >= 0 {
        name.copy_back();
    }
    r
}

/// A socket address the kernel fills, in local memory, for callers whose
/// own is (or may be) far.
struct LocalName {
    user: *mut c_void,
    user_len: *mut socklen_t,
    cap: socklen_t,
    storage: libc::sockaddr_storage,
    len: socklen_t,
}

impl LocalName {
    fn new(user: *mut c_void, user_len: *mut socklen_t) -> Self {
        let max = std::mem::size_of::<libc::sockaddr_storage>() as socklen_t;
        // SAFETY: a non-null length is the caller's, valid to read.
        let cap = if user.is_null() || user_len.is_null() {
            0
        } else {
            unsafe { *user_len }
        };
        Self {
            user,
            user_len,
            cap,
            // SAFETY: an all-zero sockaddr_storage is valid.
            storage: unsafe { std::mem::zeroed() },
            len: cap.min(max),
        }
    }

    /// What to pass the kernel: our storage, or nulls if the caller gave none.
    fn args(&mut self) -> (*mut c_void, *mut socklen_t) {
        if self.user.is_null() || self.user_len.is_null() {
            (self.user, self.user_len)
        } else {
            (std::ptr::addr_of_mut!(self.storage).cast(), &mut self.len)
        }
    }

    /// Gives the caller the address as the kernel would have: truncated to
    /// its buffer, with the full length.
    fn copy_back(&self) {
        if self.user.is_null() || self.user_len.is_null() {
            return;
        }
        let n = self.len.min(self.cap) as usize;
        // SAFETY: the caller's buffer holds `cap` bytes and its length is
        // writable, as recvfrom(2) requires.
        unsafe {
            std::ptr::copy_nonoverlapping(
                std::ptr::addr_of!(self.storage).cast::<u8>(),
                self.user.cast::<u8>(),
                n,
            );
            *self.user_len = self.len;
        }
    }
}

/// Whether `[start, start + len)` has a far byte and the shim is on.
fn far_bytes(start: usize, len: usize) -> bool {
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
unsafe fn iovecs<'a>(iov: *const iovec, cnt: c_int) -> Option<&'a [iovec]> {
    if iov.is_null() || cnt <= 0 || cnt > libc::UIO_MAXIOV {
        return None;
    }
    // SAFETY: per the contract.
    Some(unsafe { std::slice::from_raw_parts(iov, cnt as usize) })
}

fn any_far(iovs: &[iovec]) -> bool {
    iovs.iter()
        .any(|v| far_bytes(v.iov_base as usize, v.iov_len))
}

/// Receives on a socket into the caller's iovecs through one local buffer
/// (see [`bounced`]); `call(local_iov)` is the receive.
///
/// # Safety
/// The iovecs are the caller's, as writable as the kernel would need them.
unsafe fn bounced_vec(iovs: &[iovec], mut call: impl FnMut(&mut iovec) -> ssize_t) -> ssize_t {
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

/// # Safety
/// As send(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t {
    // A datagram must go whole: a buffer over the budget is touched up to
    // it and sent at once (pieces would be separate datagrams).
    sent_whole(
        buf,
        len,
        |p, n| call_real!(SEND: SendFn, -1; fd, p, n, flags),
    )
}

/// # Safety
/// As sendto(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    addr: *const sockaddr,
    addrlen: socklen_t,
) -> ssize_t {
    sent_whole(
        buf,
        len,
        |p, n| call_real!(SENDTO: SendtoFn, -1; fd, p, n, flags, addr, addrlen),
    )
}

/// One call on a whole flat buffer, its far pages touched up to the budget.
fn sent_whole(
    buf: *const c_void,
    len: size_t,
    mut call: impl FnMut(*const c_void, size_t) -> ssize_t,
) -> ssize_t {
    match active().filter(|f| overlaps(buf as usize, len, f)) {
        Some(far) => touched(&[(buf as usize, len)], Access::KernelReads, &far, || {
            call(buf, len)
        }),
        None => call(buf, len),
    }
}

/// # Safety
/// As recvmsg(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    let real = |m: *mut msghdr| call_real!(RECVMSG: RecvmsgFn, -1; fd, m, flags);
    if msg.is_null() || active().is_none() {
        return real(msg);
    }
    // SAFETY: the caller's header, which the kernel reads and writes.
    let m = unsafe { &mut *msg };
    // SAFETY: the header's iovecs, as recvmsg(2) requires.
    let Some(iovs) = (unsafe { iovecs(m.msg_iov, m.msg_iovlen as c_int) }) else {
        return real(msg);
    };
    let control_far = far_bytes(m.msg_control as usize, m.msg_controllen);
    if !(any_far(iovs)
        || far_bytes(msg as usize, std::mem::size_of::<msghdr>())
        || far_bytes(m.msg_name as usize, m.msg_namelen as usize)
        || control_far)
    {
        return real(msg);
    }
    // Everything the kernel writes goes to local memory first: the data,
    // the address, the control messages, the header's lengths and flags.
    let mut name_len = m.msg_namelen;
    let mut name = LocalName::new(m.msg_name, &mut name_len);
    let (name_ptr, name_len_ptr) = name.args();
    // Control messages are small (SCM_RIGHTS: at most 253 descriptors);
    // more than this comes back truncated (MSG_CTRUNC), as from the kernel.
    let mut control: Vec<u8> = vec![0; m.msg_controllen.min(64 << 10)];
    // SAFETY: per recvmsg(2); every pointer in `local` is to live memory.
    unsafe {
        bounced_vec(iovs, |one| {
            let mut local: msghdr = std::mem::zeroed();
            local.msg_iov = one;
            local.msg_iovlen = 1;
            local.msg_name = name_ptr;
            local.msg_namelen = if name_len_ptr.is_null() {
                0
            } else {
                *name_len_ptr
            };
            if !m.msg_control.is_null() {
                local.msg_control = control.as_mut_ptr().cast();
                local.msg_controllen = control.len() as _;
            }
            let r = real(&mut local);
            if r >= 0 {
                if !name_len_ptr.is_null() {
                    *name_len_ptr = local.msg_namelen;
                }
                name.copy_back();
                m.msg_namelen = name_len;
                let c = local.msg_controllen;
                if c > 0 {
                    std::ptr::copy_nonoverlapping(control.as_ptr(), m.msg_control.cast::<u8>(), c);
                }
                m.msg_controllen = local.msg_controllen;
                m.msg_flags = local.msg_flags;
            }
            r
        })
    }
}

/// # Safety
/// As sendmsg(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    let (iov, cnt) = msg_iov(msg);
    let call = || call_real!(SENDMSG: SendmsgFn, -1; fd, msg, flags);
    // SAFETY: the caller's message header and its iovecs, as sendmsg(2) requires.
    unsafe { vectored(iov, cnt, Access::KernelReads, call) }
}

/// A message header's iovec array, or none when it is null.
fn msg_iov(msg: *const msghdr) -> (*const iovec, c_int) {
    if msg.is_null() || active().is_none() {
        return (std::ptr::null(), 0);
    }
    // SAFETY: non-null, and the caller hands it to the kernel to read.
    let m = unsafe { &*msg };
    (
        m.msg_iov,
        c_int::try_from(m.msg_iovlen).unwrap_or(c_int::MAX),
    )
}

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
    let per_piece = (BUDGET.load(Ordering::Relaxed) / size).max(1);
    let mut done = 0;
    while done < n {
        let items = per_piece.min(n - done);
        let at = ptr as usize + done * size;
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

type FputsFn = unsafe extern "C" fn(*const libc::c_char, *mut libc::FILE) -> c_int;

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

/// Whether SIGBUS must stay deliverable: the signal path is on.
pub(crate) fn keep_sigbus() -> bool {
    ON.load(Ordering::Acquire)
}

/// A caller's signal set as passed on: itself, or a copy without SIGBUS
/// when the mask it sets would block SIGBUS.
struct Mask {
    given: *const libc::sigset_t,
    copy: Option<libc::sigset_t>,
}

impl Mask {
    /// `set` as a mask change `how` (`SIG_SETMASK` for a wait's mask).
    fn without_sigbus(how: c_int, set: *const libc::sigset_t) -> Self {
        let mut mask = Self {
            given: set,
            copy: None,
        };
        if set.is_null() || how == libc::SIG_UNBLOCK || !keep_sigbus() {
            return mask;
        }
        // SAFETY: `set` is the caller's valid signal set; the copy is ours.
        unsafe {
            if libc::sigismember(set, libc::SIGBUS) == 1 {
                let mut copy = *set;
                libc::sigdelset(&mut copy, libc::SIGBUS);
                mask.copy = Some(copy);
            }
        }
        mask
    }

    fn ptr(&self) -> *const libc::sigset_t {
        self.copy.as_ref().map_or(self.given, |c| c as *const _)
    }
}

/// Leaves SIGBUS out of a handler's mask (see the module docs).
pub(crate) fn mask_without_sigbus(mask: &mut libc::sigset_t) {
    if keep_sigbus() {
        // SAFETY: a valid signal set of the caller's.
        unsafe { libc::sigdelset(mask, libc::SIGBUS) };
    }
}

type MaskFn = unsafe extern "C" fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int;

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

// _FORTIFY_SOURCE turns a call whose buffer size the compiler knows into
// its `__*_chk` form (distributions build with it): the overflow check is
// glibc's (its function is called, and aborts), the rest is ours.

type ReadChkFn = unsafe extern "C" fn(c_int, *mut c_void, size_t, size_t) -> ssize_t;
type PreadChkFn = unsafe extern "C" fn(c_int, *mut c_void, size_t, off_t, size_t) -> ssize_t;
type RecvChkFn = unsafe extern "C" fn(c_int, *mut c_void, size_t, size_t, c_int) -> ssize_t;
type RecvfromChkFn = unsafe extern "C" fn(
    c_int,
    *mut c_void,
    size_t,
    size_t,
    c_int,
    *mut sockaddr,
    *mut socklen_t,
) -> ssize_t;
type FreadChkFn =
    unsafe extern "C" fn(*mut c_void, size_t, size_t, size_t, *mut libc::FILE) -> size_t;

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
/// As glibc's __recv_chk.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
    flags: c_int,
) -> ssize_t {
    if n > buflen {
        return call_real!(RECV_CHK: RecvChkFn, -1; fd, buf, n, buflen, flags);
    }
    // SAFETY: as above.
    unsafe { recv(fd, buf, n, flags) }
}

/// # Safety
/// As glibc's __recvfrom_chk.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> ssize_t {
    if n > buflen {
        return call_real!(RECVFROM_CHK: RecvfromChkFn, -1; fd, buf, n, buflen, flags, addr, addrlen);
    }
    // SAFETY: as above.
    unsafe { recvfrom(fd, buf, n, flags, addr, addrlen) }
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

// Event loops: the kernel fills the caller's event array, which an
// allocator whose arenas went far (jemalloc under redis) may have put in
// far memory. A failed copy-out leaves the events pending (epoll puts them
// back on its ready list; poll recomputes), so touching and retrying is
// safe.

type EpollWaitFn = unsafe extern "C" fn(c_int, *mut libc::epoll_event, c_int, c_int) -> c_int;
type EpollPwaitFn = unsafe extern "C" fn(
    c_int,
    *mut libc::epoll_event,
    c_int,
    c_int,
    *const libc::sigset_t,
) -> c_int;
type PollFn = unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int;

/// `call` with `[start, start + len)` made local first, retried on EFAULT.
fn filled(start: usize, len: usize, mut call: impl FnMut() -> c_int) -> c_int {
    match active().filter(|f| overlaps(start, len, f)) {
        Some(far) => touched(&[(start, len)], Access::KernelWrites, &far, || {
            call() as ssize_t
        }) as c_int,
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

type PpollFn = unsafe extern "C" fn(
    *mut libc::pollfd,
    libc::nfds_t,
    *const libc::timespec,
    *const libc::sigset_t,
) -> c_int;
type SigsuspendFn = unsafe extern "C" fn(*const libc::sigset_t) -> c_int;

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

/// A handler run while waiting here gets this mask: SIGBUS stays out.
///
/// # Safety
/// As sigsuspend(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigsuspend(mask: *const libc::sigset_t) -> c_int {
    let mask = Mask::without_sigbus(libc::SIG_SETMASK, mask);
    call_real!(SIGSUSPEND: SigsuspendFn, -1; mask.ptr())
}
