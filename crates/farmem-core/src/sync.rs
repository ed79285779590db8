//! Locking for code that must never park: a fault served inside the
//! faulting thread's signal handler. Parking may allocate on a thread's
//! first park (thread-local data), and that thread may have been stopped
//! inside the allocator. And a pause that a stop cuts short.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};

/// Waits `d`, or less once `stop` is set and the thread unparked (a
/// daemon's shutdown sets the flag, then unparks its periodic threads so
/// that it need not wait out their period). True when stopped.
pub fn pause_unless_stopped(stop: &AtomicBool, d: Duration) -> bool {
    let end = Instant::now() + d;
    loop {
        if stop.load(Ordering::SeqCst) {
            return true;
        }
        let now = Instant::now();
        if now >= end {
            return false;
        }
        std::thread::park_timeout(end - now);
    }
}

/// Takes `m` by trying, spinning briefly, then yielding the CPU between
/// tries: the holder is always another thread, which holds it briefly.
pub fn lock_without_parking<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    let mut tries = 0u32;
    loop {
        if let Some(g) = m.try_lock() {
            return g;
        }
        tries += 1;
        if tries < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_pause_ends_at_its_time_or_when_stopped() {
        let stop = Arc::new(AtomicBool::new(false));
        assert!(!pause_unless_stopped(&stop, Duration::from_millis(1)));
        let s = stop.clone();
        let t = std::thread::spawn(move || pause_unless_stopped(&s, Duration::from_secs(3600)));
        stop.store(true, Ordering::SeqCst);
        t.thread().unpark();
        assert!(t.join().unwrap(), "stopped, not timed out");
    }

    #[test]
    fn waits_for_the_holder_then_takes_the_lock() {
        let m = Arc::new(Mutex::new(0u64));
        let held = m.lock();
        let m2 = m.clone();
        let t = std::thread::spawn(move || {
            *lock_without_parking(&m2) += 1;
        });
        std::thread::sleep(std::time::Duration::from_millis(5));
        drop(held);
        t.join().unwrap();
        assert_eq!(*m.lock(), 1);
    }
}
