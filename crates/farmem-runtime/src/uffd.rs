//! Hand-written bindings of the stable userfaultfd ABI (linux/userfaultfd.h)
//! and a small safe wrapper. `libc` only carries `SYS_userfaultfd`; the
//! structs and ioctl numbers below are checked against the kernel's values
//! in the tests, so no bindgen or C headers are needed to build.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub const UFFD_API: u64 = 0xAA;
/// Flag to `userfaultfd(2)`: only user-mode faults, allowed when
/// `vm.unprivileged_userfaultfd` is 0 for unprivileged processes.
pub const UFFD_USER_MODE_ONLY: libc::c_int = 1;

pub const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
pub const UFFD_EVENT_FORK: u8 = 0x13;
pub const UFFD_EVENT_REMAP: u8 = 0x14;
pub const UFFD_EVENT_REMOVE: u8 = 0x15;
pub const UFFD_EVENT_UNMAP: u8 = 0x16;

pub const UFFD_PAGEFAULT_FLAG_WRITE: u64 = 1 << 0;
pub const UFFD_PAGEFAULT_FLAG_WP: u64 = 1 << 1;
pub const UFFD_PAGEFAULT_FLAG_MINOR: u64 = 1 << 2;

pub const UFFD_FEATURE_PAGEFAULT_FLAG_WP: u64 = 1 << 0;
pub const UFFD_FEATURE_EVENT_FORK: u64 = 1 << 1;
pub const UFFD_FEATURE_EVENT_REMAP: u64 = 1 << 2;
pub const UFFD_FEATURE_EVENT_REMOVE: u64 = 1 << 3;
pub const UFFD_FEATURE_MISSING_HUGETLBFS: u64 = 1 << 4;
pub const UFFD_FEATURE_MISSING_SHMEM: u64 = 1 << 5;
pub const UFFD_FEATURE_EVENT_UNMAP: u64 = 1 << 6;
pub const UFFD_FEATURE_SIGBUS: u64 = 1 << 7;
pub const UFFD_FEATURE_THREAD_ID: u64 = 1 << 8;
pub const UFFD_FEATURE_MINOR_HUGETLBFS: u64 = 1 << 9;
pub const UFFD_FEATURE_MINOR_SHMEM: u64 = 1 << 10;
pub const UFFD_FEATURE_EXACT_ADDRESS: u64 = 1 << 11;
pub const UFFD_FEATURE_WP_HUGETLBFS_SHMEM: u64 = 1 << 12;
/// `UFFDIO_MOVE` (Linux 6.8): pages moved between mappings, not copied.
pub const UFFD_FEATURE_MOVE: u64 = 1 << 16;

pub const UFFDIO_REGISTER_MODE_MISSING: u64 = 1 << 0;
pub const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
pub const UFFDIO_REGISTER_MODE_MINOR: u64 = 1 << 2;

pub const UFFDIO_COPY_MODE_DONTWAKE: u64 = 1 << 0;
pub const UFFDIO_COPY_MODE_WP: u64 = 1 << 1;
pub const UFFDIO_ZEROPAGE_MODE_DONTWAKE: u64 = 1 << 0;
pub const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;
pub const UFFDIO_WRITEPROTECT_MODE_DONTWAKE: u64 = 1 << 1;
pub const UFFDIO_MOVE_MODE_DONTWAKE: u64 = 1 << 0;

const _UFFDIO_REGISTER: u64 = 0x00;
const _UFFDIO_UNREGISTER: u64 = 0x01;
const _UFFDIO_WAKE: u64 = 0x02;
const _UFFDIO_COPY: u64 = 0x03;
const _UFFDIO_ZEROPAGE: u64 = 0x04;
const _UFFDIO_MOVE: u64 = 0x05;
const _UFFDIO_WRITEPROTECT: u64 = 0x06;
const _UFFDIO_API: u64 = 0x3F;

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioApi {
    pub api: u64,
    pub features: u64,
    pub ioctls: u64,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioRange {
    pub start: u64,
    pub len: u64,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioRegister {
    pub range: UffdioRange,
    pub mode: u64,
    pub ioctls: u64,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioCopy {
    pub dst: u64,
    pub src: u64,
    pub len: u64,
    pub mode: u64,
    pub copy: i64,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioMove {
    pub dst: u64,
    pub src: u64,
    pub len: u64,
    pub mode: u64,
    pub moved: i64,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioZeropage {
    pub range: UffdioRange,
    pub mode: u64,
    pub zeropage: i64,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioWriteprotect {
    pub range: UffdioRange,
    pub mode: u64,
}

/// `struct uffd_msg`: 8 bytes of header and a 24-byte union. Only the
/// pagefault arm is decoded; the others are kept raw.
#[repr(C, packed)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdMsg {
    pub event: u8,
    pub reserved1: u8,
    pub reserved2: u16,
    pub reserved3: u32,
    /// For UFFD_EVENT_PAGEFAULT: flags, address, feat (ptid).
    pub arg: [u64; 3],
}

impl UffdMsg {
    pub fn pagefault_flags(&self) -> u64 {
        let a = self.arg;
        a[0]
    }
    pub fn pagefault_address(&self) -> u64 {
        let a = self.arg;
        a[1]
    }
}

// _IOC encoding (asm-generic, used by x86-64 and aarch64).
const IOC_WRITE: u64 = 1;
const IOC_READ: u64 = 2;
const fn ioc(dir: u64, nr: u64, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | (0xAA << 8) | nr
}

pub const UFFDIO_API: u64 = ioc(IOC_READ | IOC_WRITE, _UFFDIO_API, size_of::<UffdioApi>());
pub const UFFDIO_REGISTER: u64 = ioc(
    IOC_READ | IOC_WRITE,
    _UFFDIO_REGISTER,
    size_of::<UffdioRegister>(),
);
pub const UFFDIO_UNREGISTER: u64 = ioc(IOC_READ, _UFFDIO_UNREGISTER, size_of::<UffdioRange>());
pub const UFFDIO_WAKE: u64 = ioc(IOC_READ, _UFFDIO_WAKE, size_of::<UffdioRange>());
pub const UFFDIO_COPY: u64 = ioc(IOC_READ | IOC_WRITE, _UFFDIO_COPY, size_of::<UffdioCopy>());
pub const UFFDIO_ZEROPAGE: u64 = ioc(
    IOC_READ | IOC_WRITE,
    _UFFDIO_ZEROPAGE,
    size_of::<UffdioZeropage>(),
);
pub const UFFDIO_MOVE: u64 = ioc(IOC_READ | IOC_WRITE, _UFFDIO_MOVE, size_of::<UffdioMove>());
pub const UFFDIO_WRITEPROTECT: u64 = ioc(
    IOC_READ | IOC_WRITE,
    _UFFDIO_WRITEPROTECT,
    size_of::<UffdioWriteprotect>(),
);

/// One decoded page fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub addr: u64,
    pub write: bool,
    /// A write-protect fault (page present but protected), not a missing one.
    pub wp: bool,
}

/// An open userfaultfd, non-blocking, with the API handshake done.
#[derive(Debug)]
pub struct Uffd {
    fd: OwnedFd,
    pub features: u64,
}

/// The result of a non-blocking read.
pub enum ReadResult {
    Fault(Fault),
    /// Some other event (fork, remap, remove, unmap); ignored by the runtime.
    Other(u8),
    Empty,
}

fn cvt(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl Uffd {
    /// Opens a userfaultfd that reports write-protect faults. Falls back to
    /// user-mode-only when the kernel refuses the plain form.
    pub fn open() -> io::Result<Self> {
        Self::open_with(0)
    }

    /// Opens one that raises SIGBUS in the faulting thread instead of
    /// queueing faults (missing and write-protect alike).
    pub fn open_signalling() -> io::Result<Self> {
        let uffd = Self::open_with(UFFD_FEATURE_SIGBUS)?;
        if uffd.features & UFFD_FEATURE_SIGBUS == 0 {
            return Err(io::Error::other("the kernel lacks UFFD_FEATURE_SIGBUS"));
        }
        Ok(uffd)
    }

    /// Opens with `extra_features` and, where the kernel has it (6.8+),
    /// [`UFFD_FEATURE_MOVE`]: an older kernel refuses the handshake over a
    /// feature it does not know, so it is asked again without.
    fn open_with(extra_features: u64) -> io::Result<Self> {
        Self::handshake(extra_features | UFFD_FEATURE_MOVE)
            .or_else(|_| Self::handshake(extra_features))
    }

    fn handshake(extra_features: u64) -> io::Result<Self> {
        let flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
        // SAFETY: plain syscall with integer flags.
        let mut fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
        if fd < 0 {
            // SAFETY: as above.
            fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags | UFFD_USER_MODE_ONLY) };
        }
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the syscall returned a fresh descriptor we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        let mut api = UffdioApi {
            api: UFFD_API,
            features: UFFD_FEATURE_PAGEFAULT_FLAG_WP | extra_features,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_API takes a pointer to a live UffdioApi.
        cvt(unsafe { libc::ioctl(fd.as_raw_fd(), UFFDIO_API as _, &mut api) })?;
        Ok(Self {
            fd,
            features: api.features,
        })
    }

    fn ioctl<T>(&self, req: u64, arg: &mut T) -> io::Result<()> {
        // SAFETY: every caller passes the struct matching `req`.
        cvt(unsafe { libc::ioctl(self.fd.as_raw_fd(), req as _, arg as *mut T) })
    }

    /// Registers `[start, start+len)` for missing and write-protect faults.
    pub fn register(&self, start: u64, len: u64) -> io::Result<u64> {
        let mut r = UffdioRegister {
            range: UffdioRange { start, len },
            mode: UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP,
            ioctls: 0,
        };
        self.ioctl(UFFDIO_REGISTER, &mut r)?;
        Ok(r.ioctls)
    }

    pub fn unregister(&self, start: u64, len: u64) -> io::Result<()> {
        let mut r = UffdioRange { start, len };
        self.ioctl(UFFDIO_UNREGISTER, &mut r)
    }

    /// Installs `len` bytes from `src` at `dst` (both page aligned), mapped
    /// write-protected when `wp`. Wakes the threads faulting on the range.
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes.
    pub unsafe fn copy(&self, dst: u64, src: *const u8, len: u64, wp: bool) -> io::Result<()> {
        // SAFETY: the caller's guarantee, passed on.
        unsafe { self.copy_run(dst, src, len, wp) }.1
    }

    /// [`Uffd::copy`] of several pages that reports how far it got: the
    /// bytes installed (all of `len` when Ok; a prefix when Err).
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes.
    pub unsafe fn copy_run(
        &self,
        dst: u64,
        src: *const u8,
        len: u64,
        wp: bool,
    ) -> (u64, io::Result<()>) {
        let mut c = UffdioCopy {
            dst,
            src: src as u64,
            len,
            mode: if wp { UFFDIO_COPY_MODE_WP } else { 0 },
            copy: 0,
        };
        match self.ioctl(UFFDIO_COPY, &mut c) {
            Ok(()) => (len, Ok(())),
            // `copy` holds the bytes copied, or a negated errno if none were.
            Err(e) => (c.copy.clamp(0, len as i64) as u64, Err(e)),
        }
    }

    pub fn zeropage(&self, start: u64, len: u64) -> io::Result<()> {
        let mut z = UffdioZeropage {
            range: UffdioRange { start, len },
            mode: 0,
            zeropage: 0,
        };
        self.ioctl(UFFDIO_ZEROPAGE, &mut z)
    }

    /// Sets (`protect`) or lifts write protection; lifting wakes waiters.
    pub fn writeprotect(&self, start: u64, len: u64, protect: bool) -> io::Result<()> {
        let mut w = UffdioWriteprotect {
            range: UffdioRange { start, len },
            mode: if protect {
                UFFDIO_WRITEPROTECT_MODE_WP
            } else {
                0
            },
        };
        self.ioctl(UFFDIO_WRITEPROTECT, &mut w)
    }

    /// Whether [`Uffd::move_pages`] is available.
    pub fn can_move(&self) -> bool {
        self.features & UFFD_FEATURE_MOVE != 0
    }

    /// Moves the pages at `src` to `dst` (page aligned, `len` bytes): their
    /// frames change address, with no copy. `dst` must be unmapped and in a
    /// range registered with this descriptor; `src` must be mapped,
    /// anonymous and not shared with another process. Wakes the threads
    /// faulting on `dst` unless `dontwake`.
    pub fn move_pages(&self, dst: u64, src: u64, len: u64, dontwake: bool) -> io::Result<()> {
        let mut m = UffdioMove {
            dst,
            src,
            len,
            mode: if dontwake {
                UFFDIO_MOVE_MODE_DONTWAKE
            } else {
                0
            },
            moved: 0,
        };
        self.ioctl(UFFDIO_MOVE, &mut m)?;
        if m.moved != len as i64 {
            return Err(io::Error::other(format!(
                "moved {} of {len} bytes",
                m.moved
            )));
        }
        Ok(())
    }

    /// Wakes threads blocked on faults in the range so they retry.
    pub fn wake(&self, start: u64, len: u64) -> io::Result<()> {
        let mut r = UffdioRange { start, len };
        self.ioctl(UFFDIO_WAKE, &mut r)
    }

    /// Non-blocking read of one message.
    pub fn read(&self) -> io::Result<ReadResult> {
        let mut msg = UffdMsg::default();
        // SAFETY: reading at most size_of::<UffdMsg>() bytes into it.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut msg as *mut UffdMsg).cast(),
                size_of::<UffdMsg>(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(ReadResult::Empty),
                _ => Err(e),
            };
        }
        if n as usize != size_of::<UffdMsg>() {
            return Ok(ReadResult::Empty);
        }
        if msg.event != UFFD_EVENT_PAGEFAULT {
            return Ok(ReadResult::Other(msg.event));
        }
        let flags = msg.pagefault_flags();
        Ok(ReadResult::Fault(Fault {
            addr: msg.pagefault_address(),
            write: flags & UFFD_PAGEFAULT_FLAG_WRITE != 0,
            wp: flags & UFFD_PAGEFAULT_FLAG_WP != 0,
        }))
    }

    /// Sleeps until a message is readable or `timeout_ms` passes.
    pub fn poll(&self, timeout_ms: i32) -> io::Result<bool> {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                return Ok(false);
            }
            return Err(e);
        }
        Ok(r > 0)
    }
}

/// One handler thread's sleep on the descriptor: an epoll instance with the
/// uffd registered EPOLLEXCLUSIVE, so a fault wakes one sleeping handler,
/// not all of them.
#[derive(Debug)]
pub struct Waiter {
    ep: OwnedFd,
}

impl Uffd {
    pub fn waiter(&self) -> io::Result<Waiter> {
        // SAFETY: plain syscall.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor we now own.
        let ep = unsafe { OwnedFd::from_raw_fd(ep) };
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32,
            u64: 0,
        };
        // SAFETY: both descriptors are live; ev outlives the call.
        cvt(unsafe {
            libc::epoll_ctl(
                ep.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                self.fd.as_raw_fd(),
                &mut ev,
            )
        })?;
        Ok(Waiter { ep })
    }
}

impl Waiter {
    /// Sleeps until a message may be readable or `timeout_ms` passes.
    pub fn wait(&self, timeout_ms: i32) -> io::Result<bool> {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: room for one event.
        let r = unsafe { libc::epoll_wait(self.ep.as_raw_fd(), &mut ev, 1, timeout_ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                return Ok(false);
            }
            return Err(e);
        }
        Ok(r > 0)
    }
}

/// Whether this process can use userfaultfd with write-protect; the reason
/// when not (tests skip with it).
pub fn available() -> Result<(), String> {
    Uffd::open()
        .map_err(|e| format!("userfaultfd unavailable: {e}"))
        .and_then(|u| {
            if u.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP == 0 {
                Err("userfaultfd lacks write-protect support".into())
            } else {
                Ok(())
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values from linux/userfaultfd.h on x86-64 / aarch64 (asm-generic ioctl).
    #[test]
    fn abi_matches_kernel() {
        assert_eq!(UFFDIO_API, 0xc018aa3f);
        assert_eq!(UFFDIO_REGISTER, 0xc020aa00);
        assert_eq!(UFFDIO_UNREGISTER, 0x8010aa01);
        assert_eq!(UFFDIO_WAKE, 0x8010aa02);
        assert_eq!(UFFDIO_COPY, 0xc028aa03);
        assert_eq!(UFFDIO_ZEROPAGE, 0xc020aa04);
        assert_eq!(UFFDIO_WRITEPROTECT, 0xc018aa06);
        assert_eq!(UFFDIO_MOVE, 0xc028aa05);
        assert_eq!(size_of::<UffdioMove>(), 40);
        assert_eq!(size_of::<UffdioApi>(), 24);
        assert_eq!(size_of::<UffdioRegister>(), 32);
        assert_eq!(size_of::<UffdioRange>(), 16);
        assert_eq!(size_of::<UffdioCopy>(), 40);
        assert_eq!(size_of::<UffdioZeropage>(), 32);
        assert_eq!(size_of::<UffdioWriteprotect>(), 24);
        assert_eq!(size_of::<UffdMsg>(), 32);
        assert_eq!(std::mem::offset_of!(UffdMsg, arg), 8);
    }

    #[test]
    fn opens_with_wp_or_explains() {
        match available() {
            Ok(()) => {}
            Err(why) => eprintln!("skipping: {why}"),
        }
    }
}
