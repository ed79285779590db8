//! Delay injection at a compute node's egress (ThymesisFlow's injector),
//! driving the pure [`DelayGate`] policy with the monotonic clock: a
//! request waits for its turn at the gate in the thread that sends it,
//! and its reply is held for the link's latency in the thread that waits
//! for it, so a thread's requests to several nodes are in flight together.
//!
//! One [`EgressDelay`] stands for one node's link: share it (it is an `Arc`
//! inside [`crate::ClientConfig`]) between every connection of the node so
//! that all its requests queue at the same gate, as on the hardware.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use farmem_core::Counter;
use farmem_core::sync::lock_without_parking;
use farmem_policy::daemon::ShareServer;
use farmem_policy::delay::{DelayGate, DelayModel, Traffic};
use parking_lot::Mutex;
use rand::SeedableRng;
use rand::rngs::SmallRng;

use crate::link::SharedLink;

/// Below this, waiting spins: sleeping would overshoot by tens of µs.
const SPIN_BELOW: Duration = Duration::from_micros(200);

/// The quickest recent undelayed round trip of any gate's request (the
/// host's link, before a hold): learnt from every gate, since a path whose
/// replies its thread always reads after another's hold never sees one
/// come.
static QUICKEST_ROUND_TRIP_NS: AtomicU64 = AtomicU64::new(0);

/// Whose turns a gate gives out.
#[derive(Debug)]
enum Gate {
    /// This process's own.
    Own(Mutex<DelayGate>),
    /// A link's that several processes share, with this one's draws.
    Shared {
        link: SharedLink,
        rng: Mutex<SmallRng>,
    },
}

/// What requests met at a client's delay gates, for its statistics: the
/// time a request waited for its turn (the link busy: bandwidth) apart
/// from the time its reply was held (the link's latency).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct GateStats {
    pub requests: u64,
    /// Data bytes on the link: a packed reply or write counts its packed
    /// size.
    pub bytes: u64,
    pub queued_us_mean: f64,
    pub held_us_mean: f64,
    /// Requests whose turn or reply came past their deadline.
    pub late: u64,
    /// The reads faults wait for, apart: how many, their wait for a turn,
    /// their round trip from the gate to the reply landing (the host's
    /// link), and their hold. What a delay adds to a fault is the sum of
    /// what it adds to these three.
    pub demand_reads: u64,
    pub demand_queued_us_mean: f64,
    pub demand_round_trip_us_mean: f64,
    pub demand_held_us_mean: f64,
}

impl GateStats {
    /// Summed over `gates` (a link's one, or each path's).
    pub fn of(gates: &[std::sync::Arc<EgressDelay>]) -> Self {
        let sum = |f: &dyn Fn(&EgressDelay) -> u64| gates.iter().map(|g| f(g)).sum::<u64>();
        let requests = sum(&|g| g.admitted.get());
        let demand_reads = sum(&|g| g.demand.admitted.get());
        let mean_us = |ns: u64, n: u64| ns as f64 / n.max(1) as f64 / 1e3;
        Self {
            requests,
            bytes: sum(&|g| g.bytes.get()) - sum(&|g| g.refunded.get()),
            queued_us_mean: mean_us(sum(&|g| g.waited_ns.get()), requests),
            held_us_mean: mean_us(sum(&|g| g.held_ns.get()), requests),
            late: sum(&|g| g.late.get()),
            demand_reads,
            demand_queued_us_mean: mean_us(sum(&|g| g.demand.waited_ns.get()), demand_reads),
            demand_round_trip_us_mean: mean_us(
                sum(&|g| g.demand.round_trip_ns.get()),
                sum(&|g| g.demand.landed.get()),
            ),
            demand_held_us_mean: mean_us(
                sum(&|g| g.demand.held_ns.get()),
                sum(&|g| g.demand.landed.get()),
            ),
        }
    }
}

/// A node's egress gate.
#[derive(Debug)]
pub struct EgressDelay {
    gate: Gate,
    origin: Instant,
    /// Requests that passed the gate.
    pub admitted: Counter,
    /// Data bytes those requests were admitted for (see `Msg::data_bytes`).
    pub bytes: Counter,
    /// Of those, bytes that did not cross because a reply or write went
    /// packed ([`Self::refund`]): `bytes - refunded` crossed the link.
    pub refunded: Counter,
    /// Nanoseconds requests spent waiting at the gate.
    pub waited_ns: Counter,
    /// Nanoseconds replies were held (the link's latency).
    pub held_ns: Counter,
    /// Requests whose turn came after their deadline (not sent).
    pub late: Counter,
    /// The same for demand reads alone, with their round trips.
    pub demand: DemandCounters,
}

/// What demand reads met at a gate ([`GateStats`]'s `demand_` fields).
#[derive(Debug, Default)]
pub struct DemandCounters {
    pub admitted: Counter,
    pub waited_ns: Counter,
    /// Replies that landed, and the nanoseconds from their requests
    /// passing the gate to then.
    pub landed: Counter,
    pub round_trip_ns: Counter,
    pub held_ns: Counter,
}

impl EgressDelay {
    pub fn new(model: DelayModel, seed: u64) -> Self {
        Self::with_gate(Gate::Own(Mutex::new(DelayGate::new(model, seed))))
    }

    /// A gate whose bandwidth demand and bulk requests share as `share`
    /// says ([`DelayGate::partitioned`]: DaeMon's partitioning on the
    /// link): a fault's read never waits behind write-backs.
    pub fn partitioned(model: DelayModel, seed: u64, share: ShareServer) -> Self {
        let gate = DelayGate::new(model, seed).partitioned(share);
        Self::with_gate(Gate::Own(Mutex::new(gate)))
    }

    /// A gate whose turns `link` gives out, shared with every process on
    /// it; `seed` seeds this process's draws of random gaps.
    pub fn on_link(link: SharedLink, seed: u64) -> Self {
        Self::with_gate(Gate::Shared {
            link,
            rng: Mutex::new(SmallRng::seed_from_u64(seed)),
        })
    }

    fn with_gate(gate: Gate) -> Self {
        Self {
            gate,
            origin: Instant::now(),
            admitted: Counter::default(),
            bytes: Counter::default(),
            refunded: Counter::default(),
            waited_ns: Counter::default(),
            held_ns: Counter::default(),
            late: Counter::default(),
            demand: DemandCounters::default(),
        }
    }

    pub fn model(&self) -> DelayModel {
        match &self.gate {
            Gate::Own(g) => g.lock().model().clone(),
            Gate::Shared { link, .. } => link.model(),
        }
    }

    /// Changes whenever the delay in force may have: a shared link's is set
    /// live (`farmem link set`); a gate of the process's own never changes.
    pub fn generation(&self) -> u64 {
        match &self.gate {
            Gate::Own(_) => 0,
            Gate::Shared { link, .. } => link.generation(),
        }
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

    /// Blocks until one more request, moving `bytes`, may leave; returns
    /// how long its reply is to be held ([`Self::hold`]). Never parks on
    /// the gate's lock (held for one admission), so a fault served in a
    /// signal handler may pass the gate too.
    pub fn pass(&self, bytes: u64, traffic: Traffic) -> Duration {
        let (until, hold) = self.admit(bytes, traffic);
        wait_until(until);
        hold
    }

    /// Like [`Self::pass`] for a request due by `deadline`: waits for its
    /// turn, but if that comes after the deadline, waits only until the
    /// deadline and returns None (the request must not be sent). The turn
    /// stays taken, as a request lost on the link would have taken it.
    pub fn pass_by(&self, deadline: Instant, bytes: u64, traffic: Traffic) -> Option<Duration> {
        let (until, hold) = self.admit(bytes, traffic);
        if until > deadline {
            self.late.inc();
            wait_until(deadline);
            return None;
        }
        wait_until(until);
        Some(hold)
    }

    /// Holds the reply to a request that passed the gate at `passed` for
    /// `hold` (the link's latency) after it landed, but not past
    /// `deadline`: false then, and the reply counts as late. It landed when
    /// it was read (`arrived`) if its waiter was there before the quickest
    /// round trip lately; a reply read late (its thread was waiting out
    /// another's hold first) landed that quickest round trip after it
    /// left, so the holds of a thread's requests to several nodes overlap.
    /// A demand read's round trip (passed to landed) is counted whatever
    /// its hold, so the statistics compare a delay with none.
    ///
    /// A demand read's hold is spun out, since a fault waits on it to the
    /// microsecond; a bulk request's (a write-back's acknowledgement) is
    /// slept, late by a wake-up at most: spun, every write-back's hold took
    /// a CPU from the faults it was to stay out of the way of.
    pub fn hold(
        &self,
        passed: Instant,
        waited_from: Instant,
        arrived: Instant,
        hold: Duration,
        deadline: Instant,
        traffic: Traffic,
    ) -> bool {
        let was = Duration::from_nanos(QUICKEST_ROUND_TRIP_NS.load(Ordering::Relaxed));
        let prompt = was.is_zero() || waited_from <= passed + was;
        let landed = if prompt {
            // A round trip: the quickest, creeping up 1/64 a reply so it
            // follows a link that slowed. Late ones teach nothing.
            let took = arrived.saturating_duration_since(passed);
            let quickest = if was.is_zero() {
                took
            } else {
                took.min(was + was / 64)
            };
            let ns = (quickest.as_nanos() as u64).max(1);
            QUICKEST_ROUND_TRIP_NS.store(ns, Ordering::Relaxed);
            arrived
        } else {
            arrived.min(passed + was)
        };
        if traffic == Traffic::Demand {
            self.demand.landed.inc();
            self.demand
                .round_trip_ns
                .add(landed.saturating_duration_since(passed).as_nanos() as u64);
        }
        if hold.is_zero() {
            return true;
        }
        let until = landed + hold;
        if until > deadline {
            self.late.inc();
            wait_until(deadline);
            return false;
        }
        let now = Instant::now();
        if until > now {
            let ns = (until - now).as_nanos() as u64;
            self.held_ns.add(ns);
            if traffic == Traffic::Demand {
                self.demand.held_ns.add(ns);
            }
        }
        match traffic {
            Traffic::Demand => wait_until(until),
            Traffic::Bulk => std::thread::sleep(until.saturating_duration_since(now)),
        }
        true
    }

    /// A request that passed the gate for `charged` bytes moved `wire` on
    /// the link (its reply or write crossed packed): gives the link the
    /// difference back, so a `rate:` gate charges the bytes on the wire.
    /// Returns the time given back, by which the request's own hold is
    /// shortened.
    pub fn refund(&self, charged: u64, wire: u64, traffic: Traffic) -> Duration {
        if wire >= charged {
            return Duration::ZERO;
        }
        let ns = match &self.gate {
            Gate::Own(g) => {
                let now = self.origin.elapsed().as_nanos() as u64;
                lock_without_parking(g).refund(now, charged, wire, traffic)
            }
            Gate::Shared { link, .. } => {
                let ns = link.model().refund_ns(charged, wire);
                link.refund(ns, charged - wire);
                ns
            }
        };
        self.refunded.add(charged - wire);
        Duration::from_nanos(ns)
    }

    /// Takes the next turn at the gate (its class's, on a partitioned
    /// gate; a shared link's gate is first come, first served); returns
    /// when it comes, and the request's hold.
    fn admit(&self, bytes: u64, traffic: Traffic) -> (Instant, Duration) {
        let (now, at, hold) = match &self.gate {
            Gate::Own(g) => {
                let now = self.origin.elapsed().as_nanos() as u64;
                let (at, hold) = lock_without_parking(g).admit_class(now, bytes, traffic);
                (now, at, hold)
            }
            Gate::Shared { link, rng } => {
                let now = crate::link::monotonic_ns();
                let (at, hold) = link.admit(bytes, |model, since_start| {
                    model.gap(&mut lock_without_parking(rng), since_start, bytes)
                });
                (now, at, hold)
            }
        };
        self.admitted.inc();
        self.bytes.add(bytes);
        let wait = Duration::from_nanos(at.saturating_sub(now));
        self.waited_ns.add(wait.as_nanos() as u64);
        if traffic == Traffic::Demand {
            self.demand.admitted.inc();
            self.demand.waited_ns.add(wait.as_nanos() as u64);
        }
        (Instant::now() + wait, Duration::from_nanos(hold))
    }
}

/// A request's class at a partitioned gate: reads are what faults wait
/// for; writes and log batches can wait.
pub fn traffic(msg: &farmem_wire::Msg<'_>) -> Traffic {
    match msg {
        farmem_wire::Msg::Read { .. } => Traffic::Demand,
        _ => Traffic::Bulk,
    }
}

/// Sleeps, then spins for the last stretch (sleeping would overshoot).
pub(crate) fn wait_until(until: Instant) {
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
