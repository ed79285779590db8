//! Fault path `signal`: the SIGBUS handler that serves a far page in the
//! thread that touched it.
//!
//! With `UFFD_FEATURE_SIGBUS` the kernel queues no fault message: it raises
//! SIGBUS in the faulting thread, and returning from the handler runs the
//! access again. The handler finds the runtime owning the address, fetches
//! and installs the page (the one state machine, `Shared::resolve`), and
//! returns; anything it cannot do at once it hands over and simply returns,
//! and the access faults again until the page is there. The thread never
//! sleeps in the kernel waiting for another thread, so the only wakeup on
//! the path is the memory node's reply.
//!
//! The handler may interrupt a thread anywhere: inside the allocator,
//! holding any lock. So nothing under it allocates or parks on a lock (see
//! `Ctx`), and errno is preserved. A SIGBUS at an address
//! no runtime owns goes to the handler installed before ours, or kills the
//! process as it would have.
//!
//! A program that sets its own SIGBUS disposition later would replace ours;
//! an LD_PRELOAD shim can interpose `sigaction` and `signal` and pass SIGBUS
//! requests to [`intercept_sigbus`], which records them as the disposition
//! ours passes foreign faults to, and leaves ours in place.

use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::cache::Ctx;
use crate::error::RuntimeError;
use crate::page::{PAGE, PageBuf};
use crate::resolve::{By, FaultAt, Step};
use crate::shared::Shared;

/// What serving a fault in a signal handler came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SignalOutcome {
    /// The address is in none of this runtime's regions.
    NotOurs,
    /// The page is there now; the access may go on.
    Served,
    /// Someone else has the page (a fetch, a write-back, a filler) or the
    /// cache is full: return, let the access fault again.
    Retry,
}

/// Serves a fault at `addr` in the faulting thread's SIGBUS handler: no
/// allocation, no parking, no report. A page it cannot fetch at once goes
/// to a filler, and the thread retries.
pub(crate) fn serve(sh: &Shared, addr: u64, write: Option<bool>) -> SignalOutcome {
    let t0 = Instant::now();
    let page = addr & !(PAGE - 1);
    let r = {
        let Some(regions) = sh.regions.try_read() else {
            // A region being mapped or dropped; ours or not, ask again.
            return SignalOutcome::Retry;
        };
        match regions.range(..=page).next_back() {
            Some((_, r)) if r.contains(page) => r.clone(),
            _ => return SignalOutcome::NotOurs,
        }
    };
    let fault = FaultAt {
        page,
        write: write == Some(true),
        // Mapped and write-protected: this access is a write, unless the
        // fault raced with the install and was a read.
        wp: write != Some(false),
        t0,
    };
    match sh.resolve(r, fault, Ctx::Signal) {
        Step::Fetch(job) => {
            sh.m.faults_missing.inc();
            let mut buf = PageBuf([0; PAGE as usize]);
            if sh.fetch(job, By::Signal(&mut buf)) {
                SignalOutcome::Served
            } else {
                SignalOutcome::Retry
            }
        }
        Step::Written => {
            sh.m.faults_wp.inc();
            sh.m.wp_latency.try_record(t0.elapsed());
            SignalOutcome::Served
        }
        Step::Spurious | Step::Unparked => SignalOutcome::Served,
        Step::Wait | Step::Full => SignalOutcome::Retry,
    }
}

/// Runtimes with fault path `signal` in this process, at most this many.
const SLOTS: usize = 8;

static RUNTIMES: [AtomicPtr<Shared>; SLOTS] = [const { AtomicPtr::new(null_mut()) }; SLOTS];
/// Handlers running now; a runtime leaving waits for them.
static IN_HANDLER: AtomicUsize = AtomicUsize::new(0);
/// Our handler is the process's SIGBUS handler.
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// The disposition a foreign SIGBUS goes to: the one before ours, or the
/// program's since (handler and flags; atomics, read in the handler).
static PREVIOUS_HANDLER: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
static PREVIOUS_FLAGS: AtomicI32 = AtomicI32::new(0);
static INSTALL: Mutex<()> = Mutex::new(());

/// The C library's own `sigaction`, past any interposer (an LD_PRELOAD shim
/// defining `sigaction` would otherwise see, and keep, our own calls).
///
/// # Safety
/// As sigaction(2).
pub unsafe fn real_sigaction(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    #[cfg(target_env = "gnu")]
    {
        unsafe extern "C" {
            fn __sigaction(
                sig: libc::c_int,
                act: *const libc::sigaction,
                old: *mut libc::sigaction,
            ) -> libc::c_int;
        }
        // SAFETY: glibc's exported alias of sigaction, same contract.
        unsafe { __sigaction(sig, act, old) }
    }
    #[cfg(not(target_env = "gnu"))]
    // SAFETY: the caller's arguments.
    unsafe {
        libc::sigaction(sig, act, old)
    }
}

/// For a shim interposing `sigaction`: while our handler is installed, a
/// program's SIGBUS request is recorded as the disposition foreign faults
/// go to, instead of replacing ours, and `old` (if not null) gets the one
/// recorded before (with an empty mask). False when our handler is not
/// installed: the caller passes the request on.
///
/// # Safety
/// `act` and `old` are null or valid, as for sigaction(2).
pub unsafe fn intercept_sigbus(act: *const libc::sigaction, old: *mut libc::sigaction) -> bool {
    if !INSTALLED.load(Ordering::SeqCst) {
        return false;
    }
    // SAFETY: per the contract; a zeroed sigaction is valid.
    unsafe {
        if !old.is_null() {
            let mut was: libc::sigaction = std::mem::zeroed();
            was.sa_sigaction = PREVIOUS_HANDLER.load(Ordering::SeqCst);
            was.sa_flags = PREVIOUS_FLAGS.load(Ordering::SeqCst);
            *old = was;
        }
        if let Some(act) = act.as_ref() {
            PREVIOUS_FLAGS.store(act.sa_flags, Ordering::SeqCst);
            PREVIOUS_HANDLER.store(act.sa_sigaction, Ordering::SeqCst);
        }
    }
    true
}

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
    if INSTALLED.load(Ordering::SeqCst) {
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
        if real_sigaction(libc::SIGBUS, &ours, &mut previous) != 0 {
            return Err(RuntimeError::Uffd(std::io::Error::last_os_error()));
        }
        PREVIOUS_FLAGS.store(previous.sa_flags, Ordering::SeqCst);
        PREVIOUS_HANDLER.store(previous.sa_sigaction, Ordering::SeqCst);
        INSTALLED.store(true, Ordering::SeqCst);
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
        outcome = serve(unsafe { &*p }, addr, write);
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
    let handler = PREVIOUS_HANDLER.load(Ordering::SeqCst);
    let flags = PREVIOUS_FLAGS.load(Ordering::SeqCst);
    match handler {
        handler if handler != libc::SIG_DFL && handler != libc::SIG_IGN => {
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
                INSTALLED.store(false, Ordering::SeqCst);
                real_sigaction(libc::SIGBUS, &default, null_mut());
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
