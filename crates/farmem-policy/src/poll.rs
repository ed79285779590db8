//! Adaptive polling: how long a thread waiting for a message spins before
//! it sleeps.
//!
//! A thread that sleeps on a socket is woken by an interrupt to its CPU;
//! when that CPU has gone idle, and on a virtual machine above all, the
//! wake-up costs tens of microseconds, several times a 4 KiB round trip on
//! loopback. Spinning a little first catches a reply or the next request
//! that comes soon, at the price of the CPU it burns when none comes.
//!
//! The budget adapts as Linux's haltpoll cpuidle governor
//! (drivers/cpuidle/governors/haltpoll.c) adapts its poll time, from how
//! long each wait turned out to be:
//! - a wait within the budget: the spin paid, the budget stays;
//! - a wait past the budget but within the cap: a longer spin would have
//!   caught it, so the budget grows (from `start_us`, doubling, to `max_us`);
//! - a wait past the cap: spinning is hopeless for this traffic, so the
//!   budget halves, and below `start_us` drops to nothing.
//!
//! An idle connection thus stops spinning after a few waits, and a busy
//! one spins just long enough for its usual gap.

use serde::{Deserialize, Serialize};

use crate::Nanos;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PollConfig {
    /// Longest spin in microseconds; 0 never spins.
    pub max_us: u32,
    /// The first budget after a wait the cap would have caught.
    pub start_us: u32,
}

impl Default for PollConfig {
    /// A cap of 100 µs, starting at 10 µs: a vCPU wake-up on this kind of
    /// machine costs 30-60 µs, so a gap longer than about twice that is
    /// cheaper slept through than spun through.
    fn default() -> Self {
        Self {
            max_us: 100,
            start_us: 10,
        }
    }
}

impl PollConfig {
    /// Never spins.
    pub const OFF: Self = Self {
        max_us: 0,
        start_us: 0,
    };
}

#[derive(Debug, Clone)]
pub struct AdaptivePoll {
    max: Nanos,
    start: Nanos,
    budget: Nanos,
}

impl AdaptivePoll {
    pub fn new(cfg: PollConfig) -> Self {
        let max = u64::from(cfg.max_us) * 1000;
        Self {
            max,
            start: (u64::from(cfg.start_us) * 1000).clamp(1, max.max(1)),
            budget: 0,
        }
    }

    /// How long to spin before sleeping on the next wait.
    pub fn budget(&self) -> Nanos {
        self.budget
    }

    /// The longest wait a spin could ever be grown to catch: a waiter that
    /// wants to learn from a slept wait need only time it this far.
    pub fn cap(&self) -> Nanos {
        self.max
    }

    /// The last wait lasted `waited` from its start to the message's arrival
    /// (spun or slept): adapts the budget.
    pub fn waited(&mut self, waited: Nanos) {
        if waited <= self.budget {
            return;
        }
        if waited <= self.max {
            self.budget = (self.budget * 2).clamp(self.start, self.max);
        } else {
            self.budget /= 2;
            if self.budget < self.start {
                self.budget = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Nanos = 1000;

    fn poll() -> AdaptivePoll {
        AdaptivePoll::new(PollConfig {
            max_us: 100,
            start_us: 10,
        })
    }

    #[test]
    fn starts_asleep_and_grows_while_gaps_are_within_the_cap() {
        let mut p = poll();
        assert_eq!(p.budget(), 0);
        let mut seen = Vec::new();
        for _ in 0..6 {
            p.waited(90 * US);
            seen.push(p.budget() / US);
        }
        assert_eq!(seen, [10, 20, 40, 80, 100, 100]);
    }

    #[test]
    fn a_wait_within_the_budget_keeps_it() {
        let mut p = poll();
        for _ in 0..3 {
            p.waited(50 * US);
        }
        assert_eq!(p.budget(), 40 * US);
        p.waited(5 * US);
        p.waited(40 * US);
        assert_eq!(p.budget(), 40 * US);
    }

    #[test]
    fn long_gaps_shrink_it_to_nothing() {
        let mut p = poll();
        for _ in 0..5 {
            p.waited(90 * US);
        }
        assert_eq!(p.budget(), 100 * US);
        let mut seen = Vec::new();
        for _ in 0..5 {
            p.waited(10_000 * US);
            seen.push(p.budget() / US);
        }
        assert_eq!(seen, [50, 25, 12, 0, 0]);
    }

    #[test]
    fn off_never_spins() {
        let mut p = AdaptivePoll::new(PollConfig::OFF);
        for w in [0, 1, 5 * US, 1_000_000 * US] {
            p.waited(w);
            assert_eq!(p.budget(), 0);
        }
    }
}
