//! Delay injection at a compute node's egress (ThymesisFlow's injector),
//! driving the pure [`DelayGate`] policy with the monotonic clock.
//!
//! One [`EgressDelay`] stands for one node's link: share it (it is an `Arc`
//! inside [`crate::ClientConfig`]) between every connection of the node so
//! that all its requests queue at the same gate, as on the hardware.

use std::time::{Duration, Instant};

use farmem_core::Counter;
use farmem_core::sync::lock_without_parking;
use farmem_policy::delay::{DelayGate, DelayModel};
use parking_lot::Mutex;

/// Below this, waiting spins: sleeping would overshoot by tens of µs.
const SPIN_BELOW: Duration = Duration::from_micros(200);

/// A node's egress gate.
#[derive(Debug)]
pub struct EgressDelay {
    gate: Mutex<DelayGate>,
    origin: Instant,
    /// Requests that passed the gate.
    pub admitted: Counter,
    /// Nanoseconds requests spent waiting at the gate.
    pub waited_ns: Counter,
}

impl EgressDelay {
    pub fn new(model: DelayModel, seed: u64) -> Self {
        Self {
            gate: Mutex::new(DelayGate::new(model, seed)),
            origin: Instant::now(),
            admitted: Counter::default(),
            waited_ns: Counter::default(),
        }
    }

    pub fn model(&self) -> DelayModel {
        self.gate.lock().model().clone()
    }

    /// Blocks until one more request may leave. Never parks on the gate's
    /// lock (held for one admission), so a fault served in a signal
    /// handler may pass the gate too.
    pub fn pass(&self) {
        let now = self.origin.elapsed().as_nanos() as u64;
        let at = lock_without_parking(&self.gate).admit(now);
        self.admitted.inc();
        if at <= now {
            return;
        }
        self.waited_ns.add(at - now);
        let until = self.origin + Duration::from_nanos(at);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            if left > SPIN_BELOW {
                std::thread::sleep(left - SPIN_BELOW);
            } else {
                std::hint::spin_loop();
            }
        }
    }
}
