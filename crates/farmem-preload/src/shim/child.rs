//! A forked child and its parent's far memory: made inaccessible, so the
//! child cannot compute on zeros, and a touch of it named on stderr before
//! the SIGSEGV it raises, so the program's user sees why its child died
//! (a shell whose subshell reads a far table, say) rather than a bare 139.
//!
//! Everything here runs in the child right after `fork` or in a signal
//! handler: async-signal-safe calls only, no allocation.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::mem::MaybeUninit;

use super::state::{HEAP_BASE, HEAP_END};
use std::sync::atomic::Ordering;

/// The child's SIGSEGV disposition before ours (inherited from the
/// parent), which the handler puts back.
struct Prev(UnsafeCell<MaybeUninit<libc::sigaction>>);

// SAFETY: written once, in the child right after fork (one thread), and
// read only by the handler that write installs.
unsafe impl Sync for Prev {}

static PREV_SEGV: Prev = Prev(UnsafeCell::new(MaybeUninit::zeroed()));

/// Makes the far heap `[base, end)` inaccessible in this (forked) process
/// and installs the handler that names a touch of it.
pub(super) fn guard(base: usize, end: usize) {
    if end <= base {
        return;
    }
    // SAFETY: our own heap range; mprotect and sigaction are
    // async-signal-safe; the structs are valid for the calls.
    unsafe {
        libc::mprotect(base as *mut c_void, end - base, libc::PROT_NONE);
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_segv as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut act.sa_mask);
        let prev = (*PREV_SEGV.0.get()).as_mut_ptr();
        farmem_runtime::signal::real_sigaction(libc::SIGSEGV, &act, prev);
    }
}

extern "C" fn on_segv(sig: c_int, info: *mut libc::siginfo_t, _ctx: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let (addr, code) = unsafe { ((*info).si_addr() as usize, (*info).si_code) };
    let far = addr >= HEAP_BASE.load(Ordering::Relaxed) && addr < HEAP_END.load(Ordering::Relaxed);
    if far {
        let mut msg = Msg::default();
        msg.push(b"farmem: a forked child (pid ");
        // SAFETY: getpid has no preconditions.
        msg.number(unsafe { libc::getpid() } as u64, 10);
        msg.push(b") touched far memory it inherited, at 0x");
        msg.number(addr as u64, 16);
        msg.push(
            b"; far memory stays with the parent, so the child stops here with SIGSEGV \
              (fork+exec, system() and popen() work; see the README)\n",
        );
        // SAFETY: write(2) of a live buffer; async-signal-safe.
        unsafe { libc::write(2, msg.buf.as_ptr().cast(), msg.len) };
    }
    // Back to what the program had: the faulting access runs again and
    // meets it (for a fault); a SIGSEGV sent by kill() is raised again.
    // SAFETY: PREV_SEGV was filled by `guard` before this handler existed.
    unsafe {
        farmem_runtime::signal::real_sigaction(
            sig,
            (*PREV_SEGV.0.get()).as_ptr(),
            std::ptr::null_mut(),
        );
        if code <= 0 {
            libc::raise(sig);
        }
    }
}

/// A message built on the stack: a signal handler may not allocate.
struct Msg {
    buf: [u8; 320],
    len: usize,
}

impl Default for Msg {
    fn default() -> Self {
        Self {
            buf: [0; 320],
            len: 0,
        }
    }
}

impl Msg {
    fn push(&mut self, s: &[u8]) {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s[..n]);
        self.len += n;
    }

    fn number(&mut self, mut v: u64, radix: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b"0123456789abcdef"[(v % radix) as usize];
            v /= radix;
            if v == 0 {
                break;
            }
        }
        self.push(&digits[i..]);
    }
}
