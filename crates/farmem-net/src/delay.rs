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
    /// Data bytes those requests moved (see `Msg::data_bytes`).
    pub bytes: Counter,
    /// Nanoseconds requests spent waiting at the gate.
    pub waited_ns: Counter,
    /// Requests whose turn came after their deadline (not sent).
    pub late: Counter,
}

impl EgressDelay {
    pub fn new(model: DelayModel, seed: u64) -> Self {
        Self {
            gate: Mutex::new(DelayGate::new(model, seed)),
            origin: Instant::now(),
            admitted: Counter::default(),
            bytes: Counter::default(),
            waited_ns: Counter::default(),
            late: Counter::default(),
        }
    }

    pub fn model(&self) -> DelayModel {
        self.gate.lock().model().clone()
    }

    /// What an error should say of this gate: None when it delays nothing.
    pub fn in_force(&self) -> Option<String> {
        let model = self.model();
        (model != DelayModel::None).then(|| {
            format!(
                "an injected delay of {model} is in force on its link, and {} request(s) found their turn at it past their deadline",
                self.late.get()
            )
        })
    }

    /// Blocks until one more request, moving `bytes`, may leave. Never
    /// parks on the gate's lock (held for one admission), so a fault served
    /// in a signal handler may pass the gate too.
    pub fn pass(&self, bytes: u64) {
        let until = self.admit(bytes);
        wait_until(until);
    }

    /// Like [`Self::pass`] for a request due by `deadline`: waits for its
    /// turn, but if that comes after the deadline, waits only until the
    /// deadline and returns `false` (the request must not be sent). The
    /// turn stays taken, as a request lost on the link would have taken it.
    pub fn pass_by(&self, deadline: Instant, bytes: u64) -> bool {
        let until = self.admit(bytes);
        if until > deadline {
            self.late.inc();
            wait_until(deadline);
            return false;
        }
        wait_until(until);
        true
    }

    /// Takes the next turn at the gate; returns when it comes.
    fn admit(&self, bytes: u64) -> Instant {
        let now = self.origin.elapsed().as_nanos() as u64;
        let at = lock_without_parking(&self.gate).admit(now, bytes);
        self.admitted.inc();
        self.bytes.add(bytes);
        if at > now {
            self.waited_ns.add(at - now);
        }
        self.origin + Duration::from_nanos(at)
    }
}

/// Sleeps, then spins for the last stretch (sleeping would overshoot).
fn wait_until(until: Instant) {
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
