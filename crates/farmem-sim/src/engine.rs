//! The engine: cores replay accesses through the CPU caches; LLC misses and
//! dirty LLC evictions go to the scheme. Time is virtual nanoseconds. How a
//! core turns instructions and access latencies into time is its model's
//! business ([`CoreModel`], chosen by `core.model`). Cores that share a
//! trace are stepped in trace order.

use farmem_workloads::{Access, Sink};

use crate::config::Config;
use crate::core::{CoreModel, OooCore};
use crate::machine::Machine;
use crate::scheme::Scheme;
use crate::stats::Stats;
use crate::{LINE_SHIFT, Time};

#[derive(Debug, Clone)]
struct Core<C> {
    model: C,
    instructions: u64,
    records: u64,
}

/// Per-run totals the result is computed from.
#[derive(Debug, Clone, Copy, Default)]
pub struct Totals {
    pub records: u64,
    pub instructions: u64,
    pub sim_time_ns: f64,
    pub latency_sum: f64,
    pub llc_miss_latency_sum: f64,
    pub llc_miss_accesses: u64,
    pub declared_footprint: u64,
}

/// Records between a prefetch of an access's cache sets and its step: about
/// a DRAM latency of the host's work (4 measured best of 2 to 16 on
/// `pr`, an EPYC VM).
const LOOKAHEAD: usize = 4;

pub struct Engine<C: CoreModel = OooCore> {
    cfg: Config,
    cores: Vec<Core<C>>,
    pub machine: Machine,
    scheme: Box<dyn Scheme>,
    l1_lat: Time,
    l2_lat: Time,
    llc_lat: Time,
    latency_sum: f64,
    miss_latency_sum: f64,
    miss_accesses: u64,
    declared_footprint: u64,
    wants_contents: bool,
    /// The scheme sees every access ([`Scheme::observes_accesses`]).
    observes: bool,
}

impl<C: CoreModel> Engine<C> {
    /// The engine for core model `C` (whatever `cfg.core.model` says:
    /// [`crate::with_core_model`] picks `C` from it).
    pub fn new(cfg: &Config, mut scheme: Box<dyn Scheme>) -> Self {
        scheme.configure(cfg);
        let wants_contents = scheme.wants_contents();
        let observes = scheme.observes_accesses();
        let f = cfg.core.freq_ghz;
        let n = cfg.core.count as usize;
        Self {
            cfg: cfg.clone(),
            cores: (0..n)
                .map(|_| Core {
                    model: C::new(&cfg.core),
                    instructions: 0,
                    records: 0,
                })
                .collect(),
            machine: Machine::new(cfg, 0),
            scheme,
            l1_lat: cfg.l1d.latency_ns(f),
            l2_lat: cfg.l2.latency_ns(f),
            llc_lat: cfg.llc.latency_ns(f),
            latency_sum: 0.0,
            miss_latency_sum: 0.0,
            miss_accesses: 0,
            declared_footprint: 0,
            wants_contents,
            observes,
        }
    }

    /// Core `i`'s clock (for scheduling cores in virtual-time order).
    #[inline]
    pub fn core_time(&self, i: usize) -> Time {
        self.cores[i].model.now()
    }

    pub fn scheme_name(&self) -> &'static str {
        self.scheme.name()
    }

    pub fn scheme(&self) -> &dyn Scheme {
        &*self.scheme
    }

    /// One access through the caches at `t`; returns its completion time
    /// and the level that served it (0 L1, 1 L2, 2 LLC, 3 beyond).
    #[inline]
    fn hierarchy(&mut self, core: usize, line: u64, write: bool, t: Time) -> (Time, u8) {
        let caches = &mut self.machine.caches;
        if caches.l1[core].lookup(line, write) {
            return (t + self.l1_lat, 0);
        }
        let (done, level) = if caches.l2[core].lookup(line, false) {
            (t + self.l2_lat, 1)
        } else if caches.llc.lookup(line, false) {
            if let Some(v) = caches.l2[core].fill(line, false) {
                self.spill_l2(v, t);
            }
            (t + self.llc_lat, 2)
        } else {
            let done = self
                .scheme
                .read_line(&mut self.machine, t + self.llc_lat, line, write);
            if let Some(v) = self.machine.caches.llc.fill(line, false) {
                self.scheme.write_back(&mut self.machine, t, v);
            }
            if let Some(v) = self.machine.caches.l2[core].fill(line, false) {
                self.spill_l2(v, t);
            }
            (done, 3)
        };
        if let Some(v) = self.machine.caches.l1[core].fill(line, write)
            && let Some(v2) = self.machine.caches.l2[core].write_in(v)
        {
            self.spill_l2(v2, t);
        }
        (done, level)
    }

    /// A dirty L2 victim goes to the LLC, whose dirty victim goes to the scheme.
    #[inline]
    fn spill_l2(&mut self, line: u64, t: Time) {
        if let Some(v) = self.machine.caches.llc.write_in(line) {
            self.scheme.write_back(&mut self.machine, t, v);
        }
    }

    #[inline]
    fn step(&mut self, a: Access) {
        let ci = if self.cores.len() == 1 {
            0
        } else {
            a.thread as usize % self.cores.len()
        };
        let n = a.gap as u64 + 1;
        let (t, index) = {
            let c = &mut self.cores[ci];
            c.instructions += n;
            c.records += 1;
            (c.model.issue(n, c.instructions, a.write), c.instructions)
        };
        let line = a.addr >> LINE_SHIFT;
        let go = if self.observes {
            self.scheme.access(&mut self.machine, t, line, a.write)
        } else {
            t
        };
        let (done, level) = self.hierarchy(ci, line, a.write, go);
        let lat = done - t;
        self.latency_sum += lat;
        if level == 3 {
            self.miss_latency_sum += lat;
            self.miss_accesses += 1;
        }
        self.cores[ci]
            .model
            .complete(index, t, done, level, a.write);
    }

    /// Ends the run: every core drains; returns the totals.
    pub fn finish(&mut self) -> Totals {
        let mut tot = Totals {
            declared_footprint: self.declared_footprint,
            ..Totals::default()
        };
        for c in &mut self.cores {
            let end = c.model.drain();
            tot.records += c.records;
            tot.instructions += c.instructions;
            tot.sim_time_ns = tot.sim_time_ns.max(end);
        }
        tot.latency_sum = self.latency_sum;
        tot.llc_miss_latency_sum = self.miss_latency_sum;
        tot.llc_miss_accesses = self.miss_accesses;
        tot
    }

    pub fn report(&self, sim_time_ns: f64, out: &mut Stats) {
        self.machine.report(sim_time_ns, out);
        self.scheme.report(out);
        for (i, c) in self.cores.iter().enumerate() {
            out.put(&format!("core{i}"), "instructions", c.instructions as f64);
            out.put(&format!("core{i}"), "records", c.records as f64);
            out.put(&format!("core{i}"), "time_ns", c.model.now());
        }
    }

    /// Asks for page contents (schemes that compress ask by themselves,
    /// through [`Scheme::wants_contents`]).
    pub fn set_wants_contents(&mut self, yes: bool) {
        self.wants_contents = yes;
    }
}

impl<C: CoreModel> Sink for Engine<C> {
    fn begin(&mut self, footprint: u64) {
        self.declared_footprint = footprint;
        // More local memory than the footprint changes nothing; the cap
        // keeps a huge `local.size` from allocating policy state for nothing.
        let bytes = if self.scheme.uses_local_memory() {
            let cap = footprint.max(farmem_core::PAGE_SIZE);
            self.cfg.local.size.resolve(footprint).min(cap)
        } else {
            0
        };
        self.machine.resize_local(bytes);
        self.scheme.begin(footprint);
    }

    #[inline]
    fn access(&mut self, a: Access) {
        self.step(a);
    }

    /// Steps each access with the L2 and LLC sets of the one
    /// `LOOKAHEAD` records later already on their way into the host's
    /// cache: the set searches of a large LLC otherwise wait on DRAM. The
    /// levels' geometry is read once a batch, not once a record.
    fn access_batch(&mut self, batch: &[Access]) {
        let caches = &self.machine.caches;
        let llc = caches.llc.prefetcher();
        let l2: Vec<_> = caches.l2.iter().map(|c| c.prefetcher()).collect();
        let cores = self.cores.len();
        for (i, &a) in batch.iter().enumerate() {
            if let Some(next) = batch.get(i + LOOKAHEAD) {
                let line = next.addr >> LINE_SHIFT;
                llc.prefetch(line);
                let core = if cores == 1 {
                    0
                } else {
                    next.thread as usize % cores
                };
                l2[core].prefetch(line);
            }
            self.step(a);
        }
    }

    fn wants_contents(&self) -> bool {
        self.wants_contents
    }

    fn page(&mut self, addr: u64, data: &[u8]) {
        self.scheme.page_contents(addr, data);
    }
}
