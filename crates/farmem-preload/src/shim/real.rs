//! The real functions below the shim (glibc's), found once when the shim
//! loads, and the C types they are called with.

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_int, c_void, iovec, msghdr, off_t, size_t, sockaddr, socklen_t, ssize_t};

/// The next library's functions (glibc's), found once when the shim loads
/// so that no interposer looks them up inside a signal handler.
pub(super) struct Real {
    slot: AtomicUsize,
    name: &'static CStr,
}

macro_rules! reals {
    ($($id:ident = $name:literal),* $(,)?) => {
        $(pub(super) static $id: Real = Real { slot: AtomicUsize::new(0), name: $name };)*
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
    pub(super) fn get(&self) -> usize {
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
    pub(super) unsafe fn f<F: Copy>(&self) -> Option<F> {
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
pub(super) use call_real;

pub(super) type ReadFn = unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t;
pub(super) type WriteFn = unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t;
pub(super) type PreadFn = unsafe extern "C" fn(c_int, *mut c_void, size_t, off_t) -> ssize_t;
pub(super) type PwriteFn = unsafe extern "C" fn(c_int, *const c_void, size_t, off_t) -> ssize_t;
pub(super) type VecFn = unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t;
pub(super) type PvecFn = unsafe extern "C" fn(c_int, *const iovec, c_int, off_t) -> ssize_t;
pub(super) type RecvFn = unsafe extern "C" fn(c_int, *mut c_void, size_t, c_int) -> ssize_t;
pub(super) type RecvfromFn = unsafe extern "C" fn(
    c_int,
    *mut c_void,
    size_t,
    c_int,
    *mut sockaddr,
    *mut socklen_t,
) -> ssize_t;
pub(super) type SendFn = unsafe extern "C" fn(c_int, *const c_void, size_t, c_int) -> ssize_t;
pub(super) type SendtoFn = unsafe extern "C" fn(
    c_int,
    *const c_void,
    size_t,
    c_int,
    *const sockaddr,
    socklen_t,
) -> ssize_t;
pub(super) type RecvmsgFn = unsafe extern "C" fn(c_int, *mut msghdr, c_int) -> ssize_t;
pub(super) type SendmsgFn = unsafe extern "C" fn(c_int, *const msghdr, c_int) -> ssize_t;
pub(super) type FileFn =
    unsafe extern "C" fn(*mut c_void, size_t, size_t, *mut libc::FILE) -> size_t;

pub(super) type FputsFn = unsafe extern "C" fn(*const libc::c_char, *mut libc::FILE) -> c_int;

pub(super) type MaskFn =
    unsafe extern "C" fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int;

pub(super) type ReadChkFn = unsafe extern "C" fn(c_int, *mut c_void, size_t, size_t) -> ssize_t;
pub(super) type PreadChkFn =
    unsafe extern "C" fn(c_int, *mut c_void, size_t, off_t, size_t) -> ssize_t;
pub(super) type RecvChkFn =
    unsafe extern "C" fn(c_int, *mut c_void, size_t, size_t, c_int) -> ssize_t;
pub(super) type RecvfromChkFn = unsafe extern "C" fn(
    c_int,
    *mut c_void,
    size_t,
    size_t,
    c_int,
    *mut sockaddr,
    *mut socklen_t,
) -> ssize_t;
pub(super) type FreadChkFn =
    unsafe extern "C" fn(*mut c_void, size_t, size_t, size_t, *mut libc::FILE) -> size_t;

pub(super) type EpollWaitFn =
    unsafe extern "C" fn(c_int, *mut libc::epoll_event, c_int, c_int) -> c_int;
pub(super) type EpollPwaitFn = unsafe extern "C" fn(
    c_int,
    *mut libc::epoll_event,
    c_int,
    c_int,
    *const libc::sigset_t,
) -> c_int;
pub(super) type PollFn = unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int;

pub(super) type PpollFn = unsafe extern "C" fn(
    *mut libc::pollfd,
    libc::nfds_t,
    *const libc::timespec,
    *const libc::sigset_t,
) -> c_int;
pub(super) type SigsuspendFn = unsafe extern "C" fn(*const libc::sigset_t) -> c_int;
