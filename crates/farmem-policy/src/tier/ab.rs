//! `auto`'s pool on or off by what the program waits for: [`AbTuner`].
//!
//! The pool changes two things at once: a fault it serves costs a
//! decompression instead of a fetch, and the cache it takes makes more
//! faults. Counting its reads (the older measure, [`super::PoolTuner`]'s
//! window) weighs the first and guesses at the second; on the eval's
//! random key/value program at 50% local the pool was read back 0.32 times
//! per page written, over that measure's bar, and still took 1.45x the
//! time without it. So this tuner measures the sum: epochs of wall time,
//! alternately with the pool on and off, compared by the ns the program
//! stalled in faults per ns it ran (wall time less stall: the unit of
//! progress, as the runtime cannot see the program's work; a share of wall
//! time would hide the difference in a program that mostly waits).
//!
//! The setting in force (the incumbent) runs; after `backoff` epochs of it
//! the other is tried for a probe: `settle` epochs not counted (a pool
//! turned on fills, one turned off drains), then `probe` epochs measured.
//! The probe wins only when it stalled at least `hysteresis` less (and
//! `min_gap` of wall time less, so two settings that both barely stall do
//! not flap) than the incumbent's epochs before it; then it is the
//! incumbent. A probe that loses doubles `backoff` up to `max_backoff`, so
//! a steady workload pays little for exploring; one that wins resets it.
//! A phase change re-probes at once: `phase_epochs` epochs in a row whose
//! stall rate moved from the incumbent's when last judged by a factor
//! over 1 + `phase_shift`, up or down.
//!
//! Pure: time, stall and fault counts are numbers the caller passes in,
//! as running totals.
//!
//! Where the seed (004, xDM) is silent: it selects a backend per program
//! from offline profiles (its Algorithm 1) and switches it between
//! programs, not within one, and says nothing of measuring a backend
//! online. Chosen here: A/B epochs on the one quantity the choice is
//! about (the program's fault stall), with the defaults in [`AbConfig`]
//! sized for the 2-core dev VM's runs of 1-10 s.

/// The A/B tuner's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AbConfig {
    /// Shortest epoch, in ns of wall time (default 100 ms: a run of 2 s
    /// has 20, and an epoch is long next to the VM's scheduling hiccups).
    pub epoch_ns: u64,
    /// Fewest faults an epoch needs to be judged (default 64): a program
    /// not faulting gives nothing to compare, and its epoch runs on.
    pub min_faults: u64,
    /// Epochs not counted after a switch (default 1): a pool turned on is
    /// empty at first, one turned off still drains.
    pub settle: u32,
    /// More settling epochs a pool turned on may take to have had its
    /// size's worth of pages written back (default 3): until then it has
    /// not yet taken its cache nor been read back.
    pub max_fill: u32,
    /// More settling epochs a pool turned off may take to have given its
    /// memory back and the cache to have refilled it (default 6): until
    /// then it still holds the cache it took, so an epoch off measures a
    /// bit of both settings.
    pub max_drain: u32,
    /// Epochs a probe is measured (default 2): each must win (below).
    /// With one, a kv run at 6 MiB of 24 MiB, both settings within 10%
    /// of each other, flapped: 18 of 32 probes won on one epoch's noise.
    pub probe: u32,
    /// Incumbent's epochs before the first probe (default 2).
    pub first_probe: u32,
    /// Epochs of the incumbent before the next probe after a probe that
    /// won (default 4); each probe lost doubles it, up to `max_backoff`
    /// (default 64, 6.4 s).
    pub backoff: u32,
    pub max_backoff: u32,
    /// The probe wins when its stall rate in each of its epochs is below
    /// the incumbent's (the mean of its last two epochs) times
    /// 1 - `hysteresis` (default 0.15: a program stalled 95% of the time
    /// runs 5% of it, and that 5% moves by 10% between epochs)...
    pub hysteresis: f64,
    /// ... and below it by at least `min_gap` (default 0.02 ns of stall
    /// per ns run: less is not worth a switch that drains or refills the
    /// pool).
    pub min_gap: f64,
    /// An incumbent epoch whose stall rate is over 1 + this times the
    /// incumbent's when last judged, or under it divided by as much
    /// (`min_gap` aside), `phase_epochs` times in a row, is a phase
    /// change: probe now (defaults 1.0 and 3: twice or half). A Python
    /// job's 100 ms epochs move between 0.4 and 4 ns per ns run within
    /// one phase: at half and twice in a row, a phase change was seen
    /// every few epochs, and each probe on refilled the pool at the cost
    /// of the cache.
    pub phase_shift: f64,
    pub phase_epochs: u32,
}

impl Default for AbConfig {
    fn default() -> Self {
        Self {
            epoch_ns: 100_000_000,
            min_faults: 64,
            settle: 1,
            max_fill: 3,
            max_drain: 6,
            probe: 2,
            first_probe: 2,
            backoff: 4,
            max_backoff: 64,
            hysteresis: 0.15,
            min_gap: 0.02,
            phase_shift: 1.0,
            phase_epochs: 3,
        }
    }
}

/// What the tuner saw, for reports.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AbStats {
    /// Epochs with the pool on and off (settling ones included).
    pub epochs_on: u64,
    pub epochs_off: u64,
    /// Their stall and wall time, in ns.
    pub stall_on_ns: u64,
    pub stall_off_ns: u64,
    pub wall_on_ns: u64,
    pub wall_off_ns: u64,
    /// Probes of the other setting, and those it won.
    pub probes: u64,
    pub probes_won: u64,
}

impl AbStats {
    /// Mean stall ns per epoch with the pool on or off (0 without one).
    pub fn mean_stall_ns(&self, on: bool) -> u64 {
        let (stall, n) = if on {
            (self.stall_on_ns, self.epochs_on)
        } else {
            (self.stall_off_ns, self.epochs_off)
        };
        stall.checked_div(n).unwrap_or(0)
    }

    /// Stall ns per 1000 ns of wall time with the pool on or off.
    pub fn stall_per_mille(&self, on: bool) -> u64 {
        let (stall, wall) = if on {
            (self.stall_on_ns, self.wall_on_ns)
        } else {
            (self.stall_off_ns, self.wall_off_ns)
        };
        (u128::from(stall) * 1000)
            .checked_div(u128::from(wall))
            .map_or(0, |v| u64::try_from(v).unwrap_or(u64::MAX))
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Stage {
    /// The incumbent runs; `settle` epochs left uncounted.
    Steady { settle: u32 },
    /// The other setting is tried: `settle` epochs left uncounted, then
    /// `n` measured, the worst of their rates and their sum.
    Probe {
        settle: u32,
        worst: f64,
        sum: f64,
        n: u32,
    },
}

/// The pool on or off by the fault stall of each (module docs).
#[derive(Debug, Clone)]
pub struct AbTuner {
    cfg: AbConfig,
    on: bool,
    stage: Stage,
    /// Totals at the epoch's start: (ns, stall ns, faults).
    start: Option<(u64, u64, u64)>,
    /// Pages written back since the last switch, and how many a pool
    /// turned on needs to have been written to be full.
    written: u64,
    fill: u64,
    /// Settling epochs past `settle` spent waiting for the pool to fill
    /// (on) or drain and the cache to refill (off).
    filling: u32,
    /// The pool, off, has given back its memory ([`Self::drained`]).
    drained: bool,
    /// The running count of faults at the last epoch, and at the first
    /// one that found the pool, turned off, drained.
    faults: u64,
    drained_at: Option<u64>,
    /// The incumbent's latest measured stall rates, newest last (two).
    recent: [Option<f64>; 2],
    /// The incumbent's rate when last judged (phase changes).
    reference: Option<f64>,
    /// Epochs in a row that moved from it.
    shifted: u32,
    /// Incumbent epochs measured since the last probe, and how many
    /// before the next.
    waited: u32,
    backoff: u32,
    /// The incumbent is on, filling with room to spare: it costs no
    /// fetches yet, and the countdown to a probe waits.
    held: bool,
    stats: AbStats,
}

impl AbTuner {
    /// A tuner starting `on`, whose pool is full after `fill` pages are
    /// written back.
    pub fn new(cfg: AbConfig, on: bool, fill: u64) -> Self {
        Self {
            cfg,
            on,
            stage: Stage::Steady { settle: cfg.settle },
            start: None,
            written: 0,
            fill,
            filling: 0,
            drained: true,
            faults: 0,
            drained_at: None,
            recent: [None; 2],
            reference: None,
            shifted: 0,
            waited: 0,
            backoff: cfg.first_probe.max(1),
            held: false,
            stats: AbStats::default(),
        }
    }

    pub fn is_on(&self) -> bool {
        self.on
    }

    pub fn stats(&self) -> AbStats {
        self.stats
    }

    /// A page was written back (the pool fills with them).
    pub fn written(&mut self) {
        self.written = self.written.saturating_add(1);
    }

    /// Whether the pool, on, has room to spare for what it is given: its
    /// probe waits (a program that loads its data first reads none back
    /// yet; turned off, the pool would drain it to the tier below).
    pub fn hold(&mut self, held: bool) {
        self.held = held;
    }

    /// Whether the pool holds (next to) nothing: a pool turned off settles
    /// until it does, since the cache it still takes would make more
    /// faults in the epochs that measure it without the pool. On Python
    /// at 96 MiB the off epochs stalled as much as the on ones (654
    /// against 644 per mille) while the pool still held its pages, and
    /// the run with the pool on took 5.5x the time of one without it.
    pub fn drained(&mut self, drained: bool) {
        self.drained = drained;
    }

    /// The pool, on, is known not to pay (its caller's reads say so): off
    /// at once, as the setting in force, and the next probe on waits as
    /// after a probe lost. True when it was on.
    pub fn veto(&mut self) -> bool {
        if !self.on {
            return false;
        }
        if matches!(self.stage, Stage::Steady { .. }) {
            // Off is the incumbent now, not yet measured.
            self.reference = None;
        }
        self.backoff = (self.backoff.saturating_mul(2))
            .max(self.cfg.backoff)
            .min(self.cfg.max_backoff.max(1));
        self.waited = 0;
        self.shifted = 0;
        self.recent = [None; 2];
        self.switch();
        self.stage = Stage::Steady {
            settle: self.cfg.settle,
        };
        true
    }

    /// Running totals at `now_ns`: ns the program stalled in faults and
    /// the faults. True when the pool was switched.
    pub fn progress(&mut self, now_ns: u64, stall_ns: u64, faults: u64) -> bool {
        let Some((t0, s0, f0)) = self.start else {
            self.start = Some((now_ns, stall_ns, faults));
            return false;
        };
        let wall = now_ns.saturating_sub(t0);
        if wall < self.cfg.epoch_ns.max(1) || faults.saturating_sub(f0) < self.cfg.min_faults {
            return false;
        }
        let stall = stall_ns.saturating_sub(s0);
        self.start = Some((now_ns, stall_ns, faults));
        self.faults = faults;
        if !self.on && self.drained && self.drained_at.is_none() {
            self.drained_at = Some(faults);
        }
        let s = &mut self.stats;
        if self.on {
            s.epochs_on += 1;
            s.stall_on_ns = s.stall_on_ns.saturating_add(stall);
            s.wall_on_ns = s.wall_on_ns.saturating_add(wall);
        } else {
            s.epochs_off += 1;
            s.stall_off_ns = s.stall_off_ns.saturating_add(stall);
            s.wall_off_ns = s.wall_off_ns.saturating_add(wall);
        }
        // Stall per ns the program ran, not per ns of wall time: a program
        // stalled 95% of the time with one setting and 97% with the other
        // runs 1.6x as long with the second, a 2% difference of shares of wall time.
        // (An epoch stalled past nine tenths of its wall time counts as
        // having run a tenth of it: a fault is timed whole in the epoch
        // it ends in, so one that began in the epoch before, or threads
        // stalling at once, can make the stall the whole epoch or more.)
        let ran = wall.saturating_sub(stall).max(wall / 10).max(1);
        self.epoch(stall as f64 / ran as f64)
    }

    /// Whether an epoch after a switch is still settling; counts it down.
    fn settling(&mut self, settle: &mut u32) -> bool {
        if *settle > 0 {
            *settle -= 1;
            return true;
        }
        // A pool turned on settles until it has had its size's worth; one
        // turned off until it has drained and the cache has had as many
        // faults as the pool's memory holds pages, to fill what it gave
        // back (its size in pages of the cache: half of `fill`, whose
        // pages are kept at about half their size).
        let unsettled = if self.on {
            self.written < self.fill
        } else {
            self.drained_at
                .is_none_or(|at| self.faults.saturating_sub(at) < self.fill / 2)
        };
        let most = if self.on {
            self.cfg.max_fill
        } else {
            self.cfg.max_drain
        };
        if unsettled && self.filling < most {
            self.filling += 1;
            return true;
        }
        false
    }

    /// An epoch of stall rate `share` (ns per ns run) ended; true when the pool switched.
    fn epoch(&mut self, share: f64) -> bool {
        match self.stage {
            Stage::Steady { mut settle } => {
                let settling = self.settling(&mut settle);
                self.stage = Stage::Steady { settle };
                if settling {
                    return false;
                }
                self.recent = [self.recent[1], Some(share)];
                let reference = *self.reference.get_or_insert(share);
                // A factor either way: rates only go down to zero.
                let by = 1.0 + self.cfg.phase_shift;
                let gap = self.cfg.min_gap;
                let moved = share > reference * by + gap || share < reference / by - gap;
                self.shifted = if moved { self.shifted + 1 } else { 0 };
                let held = self.on && self.held;
                if !held {
                    self.waited += 1;
                }
                let phase = self.shifted >= self.cfg.phase_epochs.max(1) && !held;
                if phase {
                    self.backoff = self.cfg.backoff.max(1);
                }
                if self.waited >= self.backoff || phase {
                    self.switch();
                    self.stats.probes += 1;
                    self.stage = Stage::Probe {
                        settle: self.cfg.settle,
                        worst: 0.0,
                        sum: 0.0,
                        n: 0,
                    };
                    return true;
                }
                false
            }
            Stage::Probe {
                mut settle,
                worst,
                sum,
                n,
            } => {
                let settling = self.settling(&mut settle);
                let (worst, sum, n) = if settling {
                    (worst, sum, n)
                } else {
                    (worst.max(share), sum + share, n + 1)
                };
                if n < self.cfg.probe.max(1) {
                    self.stage = Stage::Probe {
                        settle,
                        worst,
                        sum,
                        n,
                    };
                    return false;
                }
                let probe = sum / f64::from(n);
                let measured: Vec<f64> = self.recent.iter().flatten().copied().collect();
                let incumbent = if measured.is_empty() {
                    f64::INFINITY
                } else {
                    measured.iter().sum::<f64>() / measured.len() as f64
                };
                let won = worst <= incumbent * (1.0 - self.cfg.hysteresis)
                    && incumbent - probe >= self.cfg.min_gap;
                self.waited = 0;
                self.shifted = 0;
                if won {
                    self.stats.probes_won += 1;
                    self.backoff = self.cfg.backoff.max(1);
                    self.recent = [None, Some(probe)];
                    self.reference = Some(probe);
                    self.stage = Stage::Steady { settle: 0 };
                    return false;
                }
                self.backoff = (self.backoff.saturating_mul(2))
                    .max(self.cfg.backoff)
                    .min(self.cfg.max_backoff.max(1));
                self.reference = Some(incumbent);
                self.recent = [None; 2];
                self.switch();
                self.stage = Stage::Steady {
                    settle: self.cfg.settle,
                };
                true
            }
        }
    }

    fn switch(&mut self) {
        self.on = !self.on;
        self.written = 0;
        self.filling = 0;
        self.drained_at = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Epochs of 100 ns, 10 faults each, judged at once; no fill wait.
    fn cfg() -> AbConfig {
        AbConfig {
            epoch_ns: 100,
            min_faults: 10,
            settle: 1,
            max_fill: 0,
            max_drain: 0,
            probe: 2,
            first_probe: 2,
            backoff: 4,
            max_backoff: 16,
            hysteresis: 0.15,
            min_gap: 0.02,
            phase_shift: 0.5,
            phase_epochs: 2,
        }
    }

    /// Feeds a program stalled `on` or `off` of each epoch's wall time
    /// with the pool on or off, for `epochs`; the setting after each.
    struct Run {
        t: AbTuner,
        now: u64,
        stall: u64,
        faults: u64,
    }

    impl Run {
        fn new(cfg: AbConfig) -> Self {
            let mut t = AbTuner::new(cfg, true, 0);
            t.progress(0, 0, 0);
            Self {
                t,
                now: 0,
                stall: 0,
                faults: 0,
            }
        }

        fn epochs(&mut self, epochs: usize, share: impl Fn(bool, usize) -> f64) -> Vec<bool> {
            (0..epochs)
                .map(|i| {
                    self.now += 100;
                    self.faults += 10;
                    self.stall += (share(self.t.is_on(), i) * 100.0) as u64;
                    self.t.progress(self.now, self.stall, self.faults);
                    self.t.is_on()
                })
                .collect()
        }
    }

    fn count(v: &[bool], on: bool) -> usize {
        v.iter().filter(|&&x| x == on).count()
    }

    #[test]
    fn a_pool_that_saves_stall_stays_on_and_probes_ever_less_often() {
        let mut r = Run::new(cfg());
        let seen = r.epochs(200, |on, _| if on { 0.30 } else { 0.50 });
        // Probes off: after 1 settle + 2, then 4, 8, 16, 16, ...: each
        // three epochs (settle, measure two).
        let off = count(&seen, false);
        assert!(off <= 3 * 12, "{off} epochs off of 200");
        assert!(seen.last().copied().unwrap_or(false));
        let st = r.t.stats();
        assert_eq!(st.probes_won, 0);
        assert!(st.probes >= 3 && st.probes <= 16, "{st:?}");
        // Later probes are sparser than early ones.
        let first_half = count(&seen[..100], false);
        let second_half = count(&seen[100..], false);
        assert!(second_half < first_half, "{first_half} {second_half}");
        assert_eq!(st.stall_per_mille(true), 300);
        assert_eq!(st.stall_per_mille(false), 500);
    }

    #[test]
    fn by_default_a_rate_that_moves_within_a_phase_is_no_phase_change() {
        let c = AbConfig {
            epoch_ns: 100,
            min_faults: 10,
            max_fill: 0,
            ..AbConfig::default()
        };
        // The pool pays, but its epochs go 1.5, 1.5, 0.43 ns per ns run
        // (stalled 60%, 60%, 30%), as a real program's do; off is 4.
        let noisy = |on: bool, i: usize| match (on, i % 3) {
            (false, _) => 0.8,
            (true, 2) => 0.3,
            (true, _) => 0.6,
        };
        let mut r = Run::new(c);
        let seen = r.epochs(300, noisy);
        // Probes back off to 64 epochs: about eight of them.
        let st = r.t.stats();
        assert!(st.probes <= 10, "{st:?}");
        assert_eq!(st.probes_won, 0);
        assert!(seen.last().copied().unwrap_or(false));
        // With the old rule (half, twice in a row), each pair of epochs
        // at 1.5 after one at 0.43 was a phase change.
        let mut r = Run::new(AbConfig {
            phase_shift: 0.5,
            phase_epochs: 2,
            ..c
        });
        r.epochs(300, noisy);
        assert!(r.t.stats().probes > 30, "{:?}", r.t.stats());
        // A real change (on now stalls 90%, off 30%) is seen in three.
        let mut r = Run::new(c);
        r.epochs(300, noisy);
        let seen = r.epochs(30, |on, _| if on { 0.9 } else { 0.3 });
        let off = seen.iter().position(|on| !on).unwrap();
        assert!(off <= 4, "found after {off} epochs");
        assert!(!seen.last().copied().unwrap_or(true));
    }

    #[test]
    fn a_pool_that_costs_stall_is_probed_off_within_four_epochs_and_stays_off() {
        let mut r = Run::new(cfg());
        let seen = r.epochs(200, |on, _| if on { 0.45 } else { 0.30 });
        let first_off = seen.iter().position(|on| !on).unwrap();
        assert!(first_off < 4, "off at epoch {first_off}");
        // The probe off won: it stays off but for probes on, ever sparser.
        assert!(!seen[first_off..first_off + 5].iter().any(|&on| on));
        // Probes after 4, 8, then every 16 epochs (max_backoff), each of
        // three epochs on.
        assert!(count(&seen, true) <= 3 + 3 * 11, "{seen:?}");
        let starts: Vec<usize> = (1..seen.len())
            .filter(|&i| seen[i] && !seen[i - 1])
            .collect();
        let gaps: Vec<usize> = starts.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.windows(2).all(|g| g[1] >= g[0]), "{gaps:?}");
        // A settling epoch, 16 measured, a probe of three.
        assert_eq!(gaps.last(), Some(&(1 + 16 + 3)), "{gaps:?}");
        assert!(!seen.last().copied().unwrap_or(true));
        assert_eq!(r.t.stats().probes_won, 1);
    }

    #[test]
    fn noise_within_the_band_does_not_flap() {
        let mut r = Run::new(cfg());
        // On and off alike, each epoch moving by +-4%: the probe never
        // wins, so the pool stays on but for probes.
        let wobble = |i: usize| if i.is_multiple_of(3) { 1.04 } else { 0.96 };
        let seen = r.epochs(300, |on, i| {
            if on {
                0.40 * wobble(i)
            } else {
                0.40 * wobble(i + 1)
            }
        });
        let st = r.t.stats();
        assert_eq!(st.probes_won, 0, "{st:?}");
        // Every switch is a probe and its return, the probes backing off
        // to one in 16 epochs.
        let flips = seen.windows(2).filter(|w| w[0] != w[1]).count() as u64;
        assert!(flips <= 2 * st.probes, "{flips} flips");
        assert!(st.probes <= 3 + 300 / 16, "{st:?}");
        // A pool that barely stalls either way: a relative gap with no
        // absolute one is noise too.
        let mut r = Run::new(cfg());
        r.epochs(300, |on, _| if on { 0.010 } else { 0.001 });
        assert_eq!(r.t.stats().probes_won, 0);
    }

    #[test]
    fn a_phase_change_is_found_by_the_reprobe() {
        let mut r = Run::new(cfg());
        // Phase 1: the pool pays; it stays on, probes backing off.
        let seen = r.epochs(100, |on, _| if on { 0.2 } else { 0.4 });
        assert!(seen[90..].iter().all(|&on| on) || seen.last() == Some(&true));
        // Phase 2: the pool costs (a program that now scans through it).
        // The incumbent's share doubles: a phase change, probed at once.
        let seen = r.epochs(100, |on, _| if on { 0.5 } else { 0.3 });
        let off = seen.iter().position(|on| !on).unwrap();
        assert!(off <= 3, "found after {off} epochs");
        assert!(!seen.last().copied().unwrap_or(true));
        // Phase 3: a change without a jump in the incumbent's stall (the
        // pool would now pay, off stays the same): the backed-off re-probe
        // finds it within max_backoff epochs and a probe.
        let seen = r.epochs(100, |on, _| if on { 0.1 } else { 0.3 });
        let on = seen.iter().position(|&on| on).unwrap();
        assert!(on <= 16 + 3, "found after {on} epochs");
        // The probe (a settling epoch and two measured) won: on it stays.
        assert!(seen[on..on + 3 + 4].iter().all(|&on| on), "{seen:?}");
    }

    #[test]
    fn epochs_wait_for_time_and_faults_and_a_held_pool_is_not_probed() {
        let mut t = AbTuner::new(cfg(), true, 0);
        t.progress(0, 0, 0);
        // Time without faults, faults without time: no epoch.
        assert!(!t.progress(10_000, 5_000, 5));
        assert_eq!(t.stats().epochs_on, 0);
        let mut r = Run::new(cfg());
        r.t.hold(true);
        let seen = r.epochs(50, |on, _| if on { 0.5 } else { 0.1 });
        assert!(seen.iter().all(|&on| on), "held: never probed");
        r.t.hold(false);
        let seen = r.epochs(10, |on, _| if on { 0.5 } else { 0.1 });
        // Probed off after two epochs; the probe wins, and off it stays
        // (but for a probe back on four epochs later).
        assert!(seen[1..8].iter().all(|&on| !on), "{seen:?}");
        assert_eq!(r.t.stats().probes_won, 1);
    }

    #[test]
    fn a_pool_turned_on_settles_until_filled() {
        let c = AbConfig {
            max_fill: 3,
            ..cfg()
        };
        let mut t = AbTuner::new(c, true, 100);
        t.progress(0, 0, 0);
        // 1 settle, then up to 3 more while under 100 pages written.
        for e in 1..=4u64 {
            t.progress(100 * e, 0, 10 * e);
            assert_eq!(t.recent, [None, None], "epoch {e} settling");
        }
        t.progress(500, 0, 50);
        assert_eq!(t.recent[1], Some(0.0));
        let mut t = AbTuner::new(c, true, 100);
        t.progress(0, 0, 0);
        t.progress(100, 0, 10);
        for _ in 0..100 {
            t.written();
        }
        t.progress(200, 0, 20);
        assert_eq!(t.recent[1], Some(0.0), "filled: measured");
    }

    #[test]
    fn a_pool_turned_off_settles_until_drained_and_refilled() {
        let c = AbConfig {
            max_drain: 10,
            ..cfg()
        };
        let mut t = AbTuner::new(c, true, 100);
        t.progress(0, 0, 0);
        assert!(t.veto());
        // Off, still holding pages: the settle epoch, then more while the
        // pool drains.
        t.drained(false);
        for e in 1..=3u64 {
            t.progress(100 * e, 0, 10 * e);
            assert_eq!(t.recent, [None, None], "epoch {e} draining");
        }
        // Drained when the fourth epoch ends, at 40 faults: settling on
        // until the cache has had the 50 faults its pool's 100 half pages
        // gave back.
        t.drained(true);
        for e in 4..=8u64 {
            t.progress(100 * e, 0, 10 * e);
            assert_eq!(t.recent, [None, None], "epoch {e} refilling");
        }
        t.progress(900, 0, 90);
        assert_eq!(t.recent[1], Some(0.0), "refilled: measured");
        // However long a drain takes, `max_drain` epochs past the settle
        // end it.
        let c = AbConfig { max_drain: 6, ..c };
        let mut t = AbTuner::new(c, true, 100);
        t.progress(0, 0, 0);
        assert!(t.veto());
        t.drained(false);
        for e in 1..=7u64 {
            t.progress(100 * e, 0, 10 * e);
        }
        assert_eq!(t.recent, [None, None]);
        t.progress(800, 0, 80);
        assert_eq!(t.recent[1], Some(0.0));
    }
}
