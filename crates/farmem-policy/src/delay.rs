//! Delay injection on a link's egress (ThymesisFlow, seed 003 §III-B).
//!
//! The paper's injector lets a request pass once every PERIOD cycles, so
//! latency grows linearly with PERIOD while the bandwidth-delay product stays
//! constant. [`DelayGate`] does the same in time: each request is admitted no
//! earlier than one gap after the previous one. The paper's stated next step,
//! delays drawn from a distribution and varying within a run, are the other
//! [`DelayModel`]s. [`DelayModel::Rate`] throttles bandwidth instead: a
//! request's gap is the time its bytes take at the rate, which is how one
//! path of several is made a given speed for striping. A request's reply is
//! held its gap too ([`DelayGate::admit_held`]): the latency of the link,
//! which a lone request on an idle link pays as well. Pure: the caller
//! passes `now` and the bytes, and waits until the time returned, so the
//! simulator and the real transport share it.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::Nanos;
use crate::daemon::{Class, ShareServer, share::Busy};

/// The gap enforced between consecutive requests on one egress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum DelayModel {
    /// No injected delay (PERIOD = 1).
    #[default]
    None,
    /// A fixed gap, the paper's PERIOD.
    Period { gap_ns: Nanos },
    /// A gap drawn uniformly from [min, max] for every request.
    Uniform { min_ns: Nanos, max_ns: Nanos },
    /// A gap drawn from an exponential distribution (bursty tails).
    Exponential { mean_ns: Nanos },
    /// Fixed gaps that change during the run: `(from_ns, gap_ns)` steps,
    /// sorted by start time, measured from the gate's first request.
    Steps { steps: Vec<(Nanos, Nanos)> },
    /// A link of this many bytes per second: each request's gap is its
    /// bytes' time on it. A read is admitted for the bytes it asks for;
    /// when its reply (or a write) crossed packed, the caller gives the
    /// difference back ([`DelayGate::refund`]), so the link is charged the
    /// bytes on the wire.
    Rate { bytes_per_sec: u64 },
}

/// Why a delay specification could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "bad delay `{input}`: {why} (examples: none, 20us, uniform:10us..50us, exp:30us, steps:0=0,1s=50us, rate:200MiB/s)"
)]
pub struct DelayParseError {
    input: String,
    why: String,
}

impl DelayModel {
    /// Models separated by commas, as a flag that takes several lists
    /// them: `none,20us,steps:0=0,1s=50us,exp:30us`. After a `steps:`
    /// model, a piece with `=` and no `:` is its next step.
    pub fn parse_list(list: &str) -> Result<Vec<DelayModel>, DelayParseError> {
        let mut specs: Vec<String> = Vec::new();
        for piece in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match specs.last_mut() {
                Some(last)
                    if last.starts_with("steps:")
                        && piece.contains('=')
                        && !piece.contains(':') =>
                {
                    last.push(',');
                    last.push_str(piece);
                }
                _ => specs.push(piece.to_string()),
            }
        }
        specs.iter().map(|s| s.parse()).collect()
    }
}

impl std::str::FromStr for DelayModel {
    type Err = DelayParseError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| DelayParseError {
            input: input.to_string(),
            why: why.to_string(),
        };
        let ns = |s: &str| farmem_core::parse_duration_ns(s).map_err(|e| bad(&e.to_string()));
        let s = input.trim();
        if s == "none" || s == "0" {
            return Ok(Self::None);
        }
        let (kind, rest) = s.split_once(':').unwrap_or(("period", s));
        match kind {
            "period" => Ok(Self::Period { gap_ns: ns(rest)? }),
            "uniform" => {
                let (lo, hi) = rest
                    .split_once("..")
                    .ok_or_else(|| bad("uniform needs MIN..MAX"))?;
                let (min_ns, max_ns) = (ns(lo)?, ns(hi)?);
                if min_ns > max_ns {
                    return Err(bad("MIN is larger than MAX"));
                }
                Ok(Self::Uniform { min_ns, max_ns })
            }
            "exp" | "exponential" => Ok(Self::Exponential { mean_ns: ns(rest)? }),
            "steps" => {
                let mut steps = Vec::new();
                for step in rest.split(',') {
                    let (at, gap) = step
                        .split_once('=')
                        .ok_or_else(|| bad("steps are FROM=GAP"))?;
                    steps.push((ns(at)?, ns(gap)?));
                }
                if !steps.windows(2).all(|w| w[0].0 < w[1].0) {
                    return Err(bad("step start times must increase"));
                }
                Ok(Self::Steps { steps })
            }
            "rate" => {
                let size = rest
                    .strip_suffix("/s")
                    .ok_or_else(|| bad("a rate is BYTES/s, as 200MiB/s"))?;
                let bytes_per_sec = size
                    .parse::<farmem_core::ByteSize>()
                    .map_err(|e| bad(&e.to_string()))?
                    .0;
                if bytes_per_sec == 0 {
                    return Err(bad("a rate of 0 bytes/s lets nothing through"));
                }
                Ok(Self::Rate { bytes_per_sec })
            }
            _ => Err(bad("unknown kind")),
        }
    }
}

/// `ns` in the largest unit that keeps it whole (`4ms`, `20us`, `0`), as
/// [`farmem_core::parse_duration_ns`] reads it back.
fn duration(ns: Nanos) -> String {
    match ns {
        0 => "0".into(),
        n if n.is_multiple_of(1_000_000_000) => format!("{}s", n / 1_000_000_000),
        n if n.is_multiple_of(1_000_000) => format!("{}ms", n / 1_000_000),
        n if n.is_multiple_of(1_000) => format!("{}us", n / 1_000),
        n => format!("{n}ns"),
    }
}

impl std::fmt::Display for DelayModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = |ns: &Nanos| duration(*ns);
        match self {
            DelayModel::None => write!(f, "none"),
            DelayModel::Period { gap_ns } => write!(f, "{}", d(gap_ns)),
            DelayModel::Uniform { min_ns, max_ns } => {
                write!(f, "uniform:{}..{}", d(min_ns), d(max_ns))
            }
            DelayModel::Exponential { mean_ns } => write!(f, "exp:{}", d(mean_ns)),
            DelayModel::Steps { steps } => {
                write!(f, "steps:")?;
                for (i, (from, gap)) in steps.iter().enumerate() {
                    write!(f, "{}{}={}", if i > 0 { "," } else { "" }, d(from), d(gap))?;
                }
                Ok(())
            }
            DelayModel::Rate { bytes_per_sec } => write!(f, "rate:{bytes_per_sec}/s"),
        }
    }
}

/// The two classes of a partitioned gate (DaeMon §4.1 on the link, in
/// the runtime's reading of §4.7): the pages a fault waits for, and the
/// rest (write-backs, log batches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Traffic {
    Demand,
    Bulk,
}

/// Admits requests one gap apart: first come, first served, as
/// ThymesisFlow's injector does; or, [`DelayGate::partitioned`], with the
/// link's bandwidth shared between demand and bulk as DaeMon's queue
/// controller shares it.
#[derive(Debug, Clone)]
pub struct DelayGate {
    model: DelayModel,
    rng: SmallRng,
    /// Earliest time the next request may pass.
    next_free: Option<Nanos>,
    started: Option<Nanos>,
    /// The shares and each class's busy time, since `started`.
    partition: Option<(ShareServer, Busy)>,
}

impl DelayGate {
    /// A gate whose random draws are reproducible from `seed`.
    pub fn new(model: DelayModel, seed: u64) -> Self {
        Self {
            model,
            rng: SmallRng::seed_from_u64(seed),
            next_free: None,
            started: None,
            partition: None,
        }
    }

    /// The gate's bandwidth shared between [`Traffic::Demand`] (the
    /// server's line share) and [`Traffic::Bulk`] (its page share): a
    /// demand request waits only for the demand requests before it, never
    /// behind bulk; each class lends its share while it has nothing in
    /// service when `share` lends. Requests still pass one gap apart in
    /// all, so the link's bandwidth is the same.
    pub fn partitioned(mut self, share: ShareServer) -> Self {
        self.partition = Some((share, [0.0; 3]));
        self
    }

    pub fn model(&self) -> &DelayModel {
        &self.model
    }

    /// True when the gate never delays anything.
    pub fn is_transparent(&self) -> bool {
        self.model == DelayModel::None
    }

    /// A request moving `bytes` is ready at `now`; returns when it may
    /// pass (≥ `now`).
    pub fn admit(&mut self, now: Nanos, bytes: u64) -> Nanos {
        self.admit_held(now, bytes).0
    }

    /// Like [`Self::admit`], with how long the request's reply is held
    /// after it arrives: its own gap, the link's latency. A lone request
    /// so pays its gap once, on the way back, and back-to-back ones leave
    /// a gap apart as well.
    pub fn admit_held(&mut self, now: Nanos, bytes: u64) -> (Nanos, Nanos) {
        let start = *self.started.get_or_insert(now);
        let pass = self.next_free.map_or(now, |free| free.max(now));
        let gap = self.gap(pass.saturating_sub(start), bytes);
        self.next_free = Some(pass.saturating_add(gap));
        (pass, gap)
    }

    /// [`Self::admit_held`] for a request of `traffic`: on a partitioned
    /// gate, its class's turn; on a plain one, the next turn.
    pub fn admit_class(&mut self, now: Nanos, bytes: u64, traffic: Traffic) -> (Nanos, Nanos) {
        if self.partition.is_none() {
            return self.admit_held(now, bytes);
        }
        let start = *self.started.get_or_insert(now);
        let since = now.saturating_sub(start);
        let gap = self.gap(since, bytes);
        let Some((share, busy)) = self.partition.as_mut() else {
            return (now, gap);
        };
        let class = match traffic {
            Traffic::Demand => Class::Line,
            Traffic::Bulk => Class::Page,
        };
        let (pass, _) = share.serve(busy, class, since as f64, gap as f64);
        (start.saturating_add(pass.ceil() as Nanos), gap)
    }

    /// A request admitted for `charged` bytes moved only `wire` bytes on
    /// the link (a reply or write that crossed packed): the link's backlog
    /// gives back the difference's time, never past `now`, so later
    /// requests pass as if this one had been admitted for `wire`. Returns
    /// the nanoseconds given back, by which the caller also shortens the
    /// request's own hold: 0 unless the model is a [`DelayModel::Rate`]
    /// (no other model's gap depends on bytes).
    ///
    /// A partitioned gate gives the time back at the full rate: whether
    /// the class was lent the other's share when it was admitted is not
    /// kept, and the smaller refund never lets the link run faster than
    /// its rate.
    pub fn refund(&mut self, now: Nanos, charged: u64, wire: u64, traffic: Traffic) -> Nanos {
        let saved = self.model.refund_ns(charged, wire);
        if saved == 0 {
            return 0;
        }
        match self.partition.as_mut() {
            None => {
                if let Some(free) = self.next_free.as_mut() {
                    *free = free.saturating_sub(saved).max(now);
                }
            }
            Some((share, busy)) => {
                let since = now.saturating_sub(self.started.unwrap_or(now));
                let class = match traffic {
                    Traffic::Demand => Class::Line,
                    Traffic::Bulk => Class::Page,
                };
                share.refund(busy, class, since as f64, saved as f64);
            }
        }
        saved
    }

    fn gap(&mut self, since_start: Nanos, bytes: u64) -> Nanos {
        self.model.gap(&mut self.rng, since_start, bytes)
    }
}

impl DelayModel {
    /// What a request charged `charged` bytes and moving `wire` bytes
    /// gives back: the time of the difference at a [`DelayModel::Rate`],
    /// 0 for every other model and when nothing was saved.
    pub fn refund_ns(&self, charged: u64, wire: u64) -> Nanos {
        let DelayModel::Rate { bytes_per_sec } = self else {
            return 0;
        };
        let at =
            |bytes: u64| u128::from(bytes) * 1_000_000_000 / u128::from((*bytes_per_sec).max(1));
        // Each side rounded as its gap was, so a refund never exceeds the
        // charge.
        Nanos::try_from(at(charged).saturating_sub(at(wire.min(charged)))).unwrap_or(Nanos::MAX)
    }

    /// The gap of one request moving `bytes`, `since_start` after the
    /// gate's first: drawn from `rng` for the random models. One place for
    /// every gate, private ([`DelayGate`]) or shared by processes.
    pub fn gap(&self, rng: &mut SmallRng, since_start: Nanos, bytes: u64) -> Nanos {
        match self {
            DelayModel::Rate { bytes_per_sec } => {
                let ns = u128::from(bytes) * 1_000_000_000 / u128::from((*bytes_per_sec).max(1));
                Nanos::try_from(ns).unwrap_or(Nanos::MAX)
            }
            DelayModel::None => 0,
            DelayModel::Period { gap_ns } => *gap_ns,
            DelayModel::Uniform { min_ns, max_ns } => rng.gen_range(*min_ns..=*max_ns),
            DelayModel::Exponential { mean_ns } => {
                let u: f64 = rng.r#gen::<f64>();
                (-(1.0 - u).ln() * *mean_ns as f64) as Nanos
            }
            DelayModel::Steps { steps } => steps
                .iter()
                .take_while(|(from, _)| *from <= since_start)
                .last()
                .map_or(0, |(_, gap)| *gap),
        }
    }
}

#[cfg(test)]
mod partition_tests {
    use super::*;

    #[test]
    fn demand_passes_a_bulk_backlog_at_its_share() {
        // 10 us per request. Ten write-backs queue at once, then a fault.
        let model = DelayModel::Period { gap_ns: 10_000 };
        let mut fifo = DelayGate::new(model.clone(), 1);
        let mut split =
            DelayGate::new(model, 1).partitioned(ShareServer::with_line_share(0.25, true));
        for gate in [&mut fifo, &mut split] {
            for _ in 0..10 {
                gate.admit_class(0, 4096, Traffic::Bulk);
            }
        }
        // First come, first served: the fault waits for all ten.
        assert_eq!(
            fifo.admit_class(0, 4096, Traffic::Demand),
            (100_000, 10_000)
        );
        // Partitioned: it goes at once (no demand before it); the next
        // demand request waits its class's turn, a gap over its share.
        assert_eq!(split.admit_class(0, 4096, Traffic::Demand), (0, 10_000));
        assert_eq!(split.admit_class(0, 4096, Traffic::Demand).0, 40_000);
        // The bulk backlog moved back: no more than the link's bandwidth.
        let (bulk, _) = split.admit_class(0, 4096, Traffic::Bulk);
        assert!(bulk >= 100_000, "{bulk}");
    }

    #[test]
    fn an_idle_class_lends_its_share() {
        let model = DelayModel::Period { gap_ns: 10_000 };
        let mut g = DelayGate::new(model, 1).partitioned(ShareServer::with_line_share(0.25, true));
        // Bulk alone gets the whole link: one gap apart.
        let starts: Vec<Nanos> = (0..3)
            .map(|_| g.admit_class(0, 4096, Traffic::Bulk).0)
            .collect();
        assert_eq!(starts, [0, 10_000, 20_000]);
    }
}

#[cfg(test)]
mod list_tests {
    use super::*;

    #[test]
    fn a_list_keeps_each_steps_model_whole() {
        let list = DelayModel::parse_list("none, 20us,steps:0=0,1s=50us,exp:30us").unwrap();
        assert_eq!(
            list,
            [
                DelayModel::None,
                DelayModel::Period { gap_ns: 20_000 },
                DelayModel::Steps {
                    steps: vec![(0, 0), (1_000_000_000, 50_000)]
                },
                DelayModel::Exponential { mean_ns: 30_000 },
            ]
        );
        assert!(DelayModel::parse_list("20us,1s=50us").is_err());
        assert!(DelayModel::parse_list("20us,warp").is_err());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn period_spaces_back_to_back_requests_one_gap_apart() {
        let mut g = DelayGate::new(DelayModel::Period { gap_ns: 100 }, 0);
        let passes: Vec<Nanos> = (0..4).map(|_| g.admit(1000, 4096)).collect();
        assert_eq!(passes, vec![1000, 1100, 1200, 1300]);
        // An idle link lets the next request through at once (its reply
        // is held instead: `admit_held`).
        assert_eq!(g.admit(5000, 4096), 5000);
        assert_eq!(g.admit(5000, 4096), 5100);
    }

    #[test]
    fn every_reply_is_held_its_requests_gap() {
        let mut g = DelayGate::new(DelayModel::Period { gap_ns: 100 }, 0);
        assert_eq!(g.admit_held(1000, 4096), (1000, 100), "a lone request");
        assert_eq!(g.admit_held(1000, 4096), (1100, 100));
        let mut r = DelayGate::new(
            DelayModel::Rate {
                bytes_per_sec: 1_000_000_000,
            },
            0,
        );
        assert_eq!(r.admit_held(0, 4096), (0, 4096), "its bytes' time");
        assert_eq!(
            DelayGate::new(DelayModel::None, 0).admit_held(5, 4096),
            (5, 0)
        );
    }

    #[test]
    fn no_delay_is_transparent() {
        let mut g = DelayGate::new(DelayModel::None, 0);
        assert!(g.is_transparent());
        assert_eq!(
            (0..3).map(|_| g.admit(7, 4096)).collect::<Vec<_>>(),
            vec![7, 7, 7]
        );
    }

    #[test]
    fn steps_change_the_gap_during_the_run() {
        let mut g = DelayGate::new(
            DelayModel::Steps {
                steps: vec![(0, 0), (1000, 50)],
            },
            0,
        );
        assert_eq!(g.admit(0, 4096), 0);
        assert_eq!(g.admit(0, 4096), 0);
        assert_eq!(g.admit(1000, 4096), 1000);
        assert_eq!(g.admit(1000, 4096), 1050);
    }

    #[test]
    fn random_gaps_stay_in_range_and_are_reproducible() {
        let model = DelayModel::Uniform {
            min_ns: 10,
            max_ns: 20,
        };
        let (mut a, mut b) = (DelayGate::new(model.clone(), 9), DelayGate::new(model, 9));
        let mut last = 0;
        for _ in 0..1000 {
            let pass = a.admit(0, 4096);
            assert_eq!(pass, b.admit(0, 4096));
            if last > 0 {
                assert!((10..=20).contains(&(pass - last)));
            }
            last = pass;
        }
        let mut e = DelayGate::new(DelayModel::Exponential { mean_ns: 1000 }, 1);
        let end = (0..10_000).map(|_| e.admit(0, 4096)).last().unwrap();
        let mean = end as f64 / 9_999.0;
        assert!((900.0..1100.0).contains(&mean), "mean gap {mean}");
    }

    #[test]
    fn rate_spaces_requests_by_their_bytes() {
        // 1 MB/s: a byte takes 1 µs.
        let mut g = DelayGate::new(
            DelayModel::Rate {
                bytes_per_sec: 1_000_000,
            },
            0,
        );
        assert_eq!(g.admit(0, 4096), 0);
        assert_eq!(g.admit(0, 100), 4_096_000);
        assert_eq!(g.admit(0, 0), 4_196_000);
        assert_eq!(g.admit(0, 0), 4_196_000, "nothing moved, no gap");
        // A byte count too large for the clock saturates, never wraps.
        let mut g = DelayGate::new(DelayModel::Rate { bytes_per_sec: 1 }, 0);
        g.admit(5, u64::MAX);
        assert_eq!(g.admit(0, 1), Nanos::MAX);
    }

    #[test]
    fn a_packed_reply_is_charged_its_bytes_on_the_wire() {
        // 1 MB/s: a byte takes 1 µs. A 4096-byte read whose reply crossed
        // in 1000 bytes gives back 3096 µs of the link.
        let rate = DelayModel::Rate {
            bytes_per_sec: 1_000_000,
        };
        let mut g = DelayGate::new(rate.clone(), 0);
        assert_eq!(g.admit_held(0, 4096), (0, 4_096_000));
        assert_eq!(g.refund(10, 4096, 1000, Traffic::Demand), 3_096_000);
        assert_eq!(g.admit(10, 4096), 1_000_000, "the next turn: 1000 bytes on");
        // Nothing saved, nothing given back; more on the wire than charged
        // (a header) is not charged again here.
        assert_eq!(g.refund(10, 4096, 4096, Traffic::Demand), 0);
        assert_eq!(g.refund(10, 4096, 5000, Traffic::Demand), 0);
        // The backlog never goes back past now: an idle link stays idle.
        let mut g = DelayGate::new(rate.clone(), 0);
        g.admit(0, 4096);
        assert_eq!(g.refund(4_000_000, 4096, 0, Traffic::Bulk), 4_096_000);
        assert_eq!(g.admit(4_000_000, 10), 4_000_000);
        // Only a rate's gap depends on bytes.
        let mut g = DelayGate::new(DelayModel::Period { gap_ns: 500 }, 0);
        g.admit(0, 4096);
        assert_eq!(g.refund(0, 4096, 1, Traffic::Demand), 0);
        assert_eq!(g.admit(0, 4096), 500);
        assert_eq!(DelayModel::None.refund_ns(4096, 0), 0);
    }

    #[test]
    fn a_partitioned_gate_gives_back_to_the_class_that_was_charged() {
        let rate = DelayModel::Rate {
            bytes_per_sec: 1_000_000,
        };
        let share = ShareServer::with_line_share(0.25, false);
        let mut g = DelayGate::new(rate, 0).partitioned(share);
        // Two bulk writes of 1000 bytes back to back: the second waits for
        // the first at the bulk share (1000 µs / 0.75).
        assert_eq!(g.admit_class(0, 1000, Traffic::Bulk).0, 0);
        let (second, _) = g.admit_class(0, 1000, Traffic::Bulk);
        assert_eq!(second, 1_333_334);
        // The first crossed in 400 bytes: 600 µs back, at the full rate.
        assert_eq!(g.refund(0, 1000, 400, Traffic::Bulk), 600_000);
        let (third, _) = g.admit_class(0, 1000, Traffic::Bulk);
        assert_eq!(third, 2_066_667);
    }

    #[test]
    fn specs_parse() {
        assert_eq!("none".parse::<DelayModel>().unwrap(), DelayModel::None);
        assert_eq!(
            "20us".parse::<DelayModel>().unwrap(),
            DelayModel::Period { gap_ns: 20_000 }
        );
        assert_eq!(
            "uniform:10us..50us".parse::<DelayModel>().unwrap(),
            DelayModel::Uniform {
                min_ns: 10_000,
                max_ns: 50_000
            }
        );
        assert_eq!(
            "exp:1ms".parse::<DelayModel>().unwrap(),
            DelayModel::Exponential { mean_ns: 1_000_000 }
        );
        assert_eq!(
            "rate:200MiB/s".parse::<DelayModel>().unwrap(),
            DelayModel::Rate {
                bytes_per_sec: 200 << 20
            }
        );
        assert_eq!(
            "steps:0=0,1s=50us".parse::<DelayModel>().unwrap(),
            DelayModel::Steps {
                steps: vec![(0, 0), (1_000_000_000, 50_000)]
            }
        );
        for spec in [
            "none",
            "20us",
            "uniform:10us..50us",
            "exp:1ms",
            "steps:0=0,1s=50us",
            "1500ns",
            "uniform:0..2s",
            "rate:1048576/s",
        ] {
            let model: DelayModel = spec.parse().unwrap();
            assert_eq!(model.to_string(), spec);
        }
        for bad in [
            "uniform:5us",
            "uniform:9us..1us",
            "steps:1s=1us,0=2us",
            "warp:9",
            "rate:0/s",
            "rate:200MiB",
            "rate:fast/s",
            "12 parsecs",
        ] {
            assert!(bad.parse::<DelayModel>().is_err(), "{bad}");
        }
    }
}
