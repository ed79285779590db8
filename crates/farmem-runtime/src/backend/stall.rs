//! The fault stall `auto`'s tuner decides on ([`farmem_policy::tier::AbTuner`]).
//!
//! The fault path knows how long each fault kept its thread waiting (it
//! times them for the latency histograms); the compressed pool, a store
//! under the runtime, knows nothing of faults. [`FAULT_CLOCK`] is where
//! the one leaves the numbers for the other: two relaxed atomic adds per
//! fault, safe in a signal handler. It is process-wide because a process
//! has one runtime (the preload library's); a store built for a test may
//! be given a clock of its own, whose time the test moves by hand.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Running totals of fault stall, and the time to read them against.
#[derive(Debug, Default)]
pub struct FaultClock {
    stall_ns: AtomicU64,
    faults: AtomicU64,
    /// Time set by hand (tests), else the monotonic clock.
    manual: AtomicBool,
    now_ns: AtomicU64,
}

/// The runtime's clock: faults of every region of the process.
pub static FAULT_CLOCK: FaultClock = FaultClock::new();

impl FaultClock {
    pub const fn new() -> Self {
        Self {
            stall_ns: AtomicU64::new(0),
            faults: AtomicU64::new(0),
            manual: AtomicBool::new(false),
            now_ns: AtomicU64::new(0),
        }
    }

    /// A clock whose time moves only by [`Self::advance`].
    pub fn manual() -> Self {
        let c = Self::new();
        c.manual.store(true, Ordering::Relaxed);
        c
    }

    /// A fault kept its thread waiting `took`.
    pub fn fault(&self, took: Duration) {
        self.stall(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
    }

    /// A fault kept its thread waiting `ns`.
    pub fn stall(&self, ns: u64) {
        self.stall_ns.fetch_add(ns, Ordering::Relaxed);
        self.faults.fetch_add(1, Ordering::Relaxed);
    }

    /// Moves a manual clock's time on by `ns`.
    pub fn advance(&self, ns: u64) {
        self.now_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// (now in ns, stall ns so far, faults so far).
    pub fn totals(&self) -> (u64, u64, u64) {
        let now = if self.manual.load(Ordering::Relaxed) {
            self.now_ns.load(Ordering::Relaxed)
        } else {
            static START: OnceLock<Instant> = OnceLock::new();
            let start = *START.get_or_init(Instant::now);
            u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
        };
        (
            now,
            self.stall_ns.load(Ordering::Relaxed),
            self.faults.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_adds_up_what_it_is_told() {
        let c = FaultClock::manual();
        c.fault(Duration::from_micros(3));
        c.stall(7);
        c.advance(100);
        assert_eq!(c.totals(), (100, 3007, 2));
        let real = FaultClock::new();
        let (a, _, _) = real.totals();
        let (b, _, _) = real.totals();
        assert!(b >= a);
    }
}
