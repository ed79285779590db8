//! recv/send and their relatives: receives into far memory go through a
//! local buffer on the signal path (see `touch`), sends touch first.

use libc::{c_int, c_void, iovec, msghdr, size_t, sockaddr, socklen_t, ssize_t};

use super::real::*;
use super::touch::*;
use crate::io::{Access, overlaps};

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
        Some(far) => touched(
            &[(buf as usize, len)],
            budget(),
            Access::KernelReads,
            &far,
            || call(buf, len),
        ),
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
