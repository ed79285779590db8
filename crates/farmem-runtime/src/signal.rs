//! Fault path `signal`: the SIGBUS handler that serves a far page in the
//! thread that touched it.
//!
//! With `UFFD_FEATURE_SIGBUS` the kernel queues no fault message: it raises
//! SIGBUS in the faulting thread, and returning from the handler runs the
//! access again. The handler finds the runtime owning the address, fetches
//! and installs the page ([`crate::runtime::Shared::signal_fault`]), and
//! returns; anything it cannot do at once it hands over and simply returns,
//! and the access faults again until the page is there. The thread never
//! sleeps in the kernel waiting for another thread, so the only wakeup on
//! the path is the memory node's reply.
//!
//! The handler may interrupt a thread anywhere: inside the allocator,
//! holding any lock. So nothing under it allocates or parks on a lock (see
//! [`crate::runtime::Ctx`]), and errno is preserved. A SIGBUS at an address
//! no runtime owns goes to the handler installed before ours, or kills the
//! process as it would have.

use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::RuntimeError;
use crate::runtime::{Shared, SignalOutcome};

/// Runtimes with fault path `signal` in this process, at most this many.
const SLOTS: usize = 8;

static RUNTIMES: [AtomicPtr<Shared>; SLOTS] = [const { AtomicPtr::new(null_mut()) }; SLOTS];
/// Handlers running now; a runtime leaving waits for them.
static IN_HANDLER: AtomicUsize = AtomicUsize::new(0);
/// The SIGBUS disposition before ours, for faults that are not ours.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
static INSTALL: Mutex<()> = Mutex::new(());

/// A runtime's place in the handler; dropping it waits until no handler
/// can still be using the runtime.
#[derive(Debug)]
pub(crate) struct Registration {
    slot: usize,
}

/// Makes the handler serve faults in `sh`'s regions. The caller keeps `sh`
/// alive until the registration is dropped.
pub(crate) fn register(sh: &Arc<Shared>) -> Result<Registration, RuntimeError> {
    install()?;
    prime_parking_lot();
    let ptr = Arc::as_ptr(sh) as *mut Shared;
    for (slot, s) in RUNTIMES.iter().enumerate() {
        if s.compare_exchange(null_mut(), ptr, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            return Ok(Registration { slot });
        }
    }
    Err(RuntimeError::Config(format!(
        "at most {SLOTS} runtimes can use fault path `signal` in one process"
    )))
}

impl Drop for Registration {
    fn drop(&mut self) {
        RUNTIMES[self.slot].store(null_mut(), Ordering::SeqCst);
        // A handler that counted itself in before the store may still hold
        // the pointer; one counted in after it sees null.
        while IN_HANDLER.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
    }
}

fn install() -> Result<(), RuntimeError> {
    let _once = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    if PREVIOUS.get().is_some() {
        return Ok(());
    }
    // SAFETY: zeroed sigaction structs are valid (empty mask, no flags);
    // the handler has the SA_SIGINFO signature.
    unsafe {
        let mut ours: libc::sigaction = std::mem::zeroed();
        ours.sa_sigaction = on_sigbus as *const () as usize;
        // No SA_ONSTACK: the handler keeps a page on its stack, more than
        // an alternate signal stack may hold.
        ours.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut ours.sa_mask);
        let mut previous: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, &ours, &mut previous) != 0 {
            return Err(RuntimeError::Uffd(std::io::Error::last_os_error()));
        }
        let _ = PREVIOUS.set(previous);
    }
    Ok(())
}

/// Notifying a condition variable that nobody ever waited on would create
/// parking_lot's global table, which allocates: make sure it exists before
/// any handler can run.
fn prime_parking_lot() {
    let m = parking_lot::Mutex::new(());
    let cv = parking_lot::Condvar::new();
    cv.wait_for(&mut m.lock(), std::time::Duration::from_nanos(1));
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: errno is this thread's; the handler must give it back as found.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as u64;
    let write = fault_was_write(ctx);
    IN_HANDLER.fetch_add(1, Ordering::SeqCst);
    let mut outcome = SignalOutcome::NotOurs;
    for s in &RUNTIMES {
        let p = s.load(Ordering::SeqCst);
        if p.is_null() {
            continue;
        }
        // SAFETY: a registered runtime outlives its registration, whose
        // drop waits for IN_HANDLER to drain after clearing the slot.
        outcome = unsafe { &*p }.signal_fault(addr, write);
        if outcome != SignalOutcome::NotOurs {
            break;
        }
    }
    IN_HANDLER.fetch_sub(1, Ordering::SeqCst);
    match outcome {
        SignalOutcome::Served => {}
        // Let whoever has the page (a fetch, a write-back, the evictor)
        // run before the access faults again.
        SignalOutcome::Retry => {
            // SAFETY: plain syscall.
            unsafe { libc::sched_yield() };
        }
        SignalOutcome::NotOurs => pass_on(sig, info, ctx),
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// A SIGBUS that is not a far page: what would have happened without us.
fn pass_on(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let previous = PREVIOUS.get().map(|p| (p.sa_sigaction, p.sa_flags));
    match previous {
        Some((handler, flags)) if handler != libc::SIG_DFL && handler != libc::SIG_IGN => {
            // SAFETY: the previous disposition was a handler of the kind
            // its flags say; we call it as the kernel would have.
            unsafe {
                if flags & libc::SA_SIGINFO != 0 {
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        std::mem::transmute(handler);
                    f(sig, info, ctx);
                } else {
                    let f: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
                    f(sig);
                }
            }
        }
        _ => {
            // Default (ignoring a fault's SIGBUS is not possible): restore
            // it, and the access raises SIGBUS again, now fatal.
            // SAFETY: a zeroed sigaction with SIG_DFL is valid.
            unsafe {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(libc::SIGBUS, &default, null_mut());
            }
        }
    }
}

/// Whether the faulting access was a write: the x86 page-fault error code
/// the kernel saves in the signal frame (bit 1). Unknown elsewhere.
fn fault_was_write(ctx: *mut libc::c_void) -> Option<bool> {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        if ctx.is_null() {
            return None;
        }
        // SAFETY: for an SA_SIGINFO handler the third argument is the
        // interrupted thread's ucontext.
        let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
        Some(uc.uc_mcontext.gregs[libc::REG_ERR as usize] & 2 != 0)
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    {
        let _ = ctx;
        None
    }
}
