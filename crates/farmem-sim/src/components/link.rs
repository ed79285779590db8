//! Links between the compute node and a memory node, chosen by
//! `link.model`.

use crate::Time;
use crate::config::{Config, LinkConfig, LinkModel};
use crate::stats::Stats;

/// Link directions: toward the memory node (requests, writebacks) and
/// toward the compute node (data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Up = 0,
    Down = 1,
}

/// A network link between the compute node and one memory node.
pub trait Link: Send {
    /// Sends `bytes` (payload and header) at `now`; returns the arrival time.
    fn send(&mut self, dir: Dir, now: Time, bytes: u64) -> Time;
    /// Accounts `bytes` carried from `start` by a transfer the caller
    /// scheduled itself (DaeMon's partitioned link): utilization and byte
    /// counters only, the FIFO order is untouched.
    fn record(&mut self, dir: Dir, start: Time, bytes: u64);
    /// Fraction of `sim_time_ns` the direction was busy.
    fn utilization(&self, dir: Dir, sim_time_ns: f64) -> f64;
    fn report(&self, prefix: &str, sim_time_ns: f64, out: &mut Stats);
}

const MAX_BINS: usize = 1 << 24;

/// How much longer a transfer starting at `t` takes on a link carrying
/// `link.background` traffic of other nodes (alternating periods, quiet
/// first).
#[inline]
pub fn background_slowdown(share: f64, period_ns: f64, t: Time) -> f64 {
    if share > 0.0 && (t / period_ns) as u64 % 2 == 1 {
        1.0 / (1.0 - share)
    } else {
        1.0
    }
}

/// FIFO serialization at `bw` plus a fixed switch latency per traversal;
/// busy time is also binned per sampling interval.
#[derive(Debug, Clone)]
pub struct FifoLink {
    ns_per_byte: f64,
    switch: Time,
    interval: f64,
    busy_until: [Time; 2],
    busy: [f64; 2],
    bytes: [u64; 2],
    packets: [u64; 2],
    bins: [Vec<f32>; 2],
    background: f64,
    background_period_ns: f64,
}

impl FifoLink {
    pub fn new(cfg: &LinkConfig) -> Self {
        Self {
            background: cfg.background,
            background_period_ns: cfg.background_period_ns,
            ns_per_byte: 1.0 / (cfg.base_gbps * cfg.bw_factor),
            switch: cfg.switch_ns,
            interval: cfg.interval_ns,
            busy_until: [0.0; 2],
            busy: [0.0; 2],
            bytes: [0; 2],
            packets: [0; 2],
            bins: [Vec::new(), Vec::new()],
        }
    }

    fn bin(&mut self, d: usize, mut start: f64, end: f64) {
        while start < end {
            let i = (start / self.interval) as usize;
            if i >= MAX_BINS {
                // Past 16 M intervals the peak is already well sampled.
                return;
            }
            let stop = ((i + 1) as f64 * self.interval).min(end);
            if self.bins[d].len() <= i {
                self.bins[d].resize(i + 1, 0.0);
            }
            self.bins[d][i] += (stop - start) as f32;
            start = stop;
        }
    }
}

impl Link for FifoLink {
    #[inline]
    fn send(&mut self, dir: Dir, now: Time, bytes: u64) -> Time {
        let d = dir as usize;
        let start = now.max(self.busy_until[d]);
        let xfer = bytes as f64
            * self.ns_per_byte
            * background_slowdown(self.background, self.background_period_ns, start);
        let end = start + xfer;
        self.busy_until[d] = end;
        self.busy[d] += xfer;
        self.bytes[d] += bytes;
        self.packets[d] += 1;
        self.bin(d, start, end);
        end + self.switch
    }
    fn record(&mut self, dir: Dir, start: Time, bytes: u64) {
        let d = dir as usize;
        let xfer = bytes as f64 * self.ns_per_byte;
        self.busy[d] += xfer;
        self.bytes[d] += bytes;
        self.packets[d] += 1;
        self.bin(d, start, start + xfer);
    }
    fn utilization(&self, dir: Dir, t: f64) -> f64 {
        self.busy[dir as usize] / t.max(1e-9)
    }
    fn report(&self, prefix: &str, t: f64, out: &mut Stats) {
        for (d, name) in [(0, "up"), (1, "down")] {
            out.put(prefix, &format!("{name}.bytes"), self.bytes[d] as f64);
            out.put(prefix, &format!("{name}.packets"), self.packets[d] as f64);
            out.put(prefix, &format!("{name}.busy_ns"), self.busy[d]);
            out.put(
                prefix,
                &format!("{name}.utilization"),
                self.busy[d] / t.max(1e-9),
            );
            let peak = self.bins[d].iter().copied().fold(0.0f32, f32::max) as f64;
            out.put(
                prefix,
                &format!("{name}.peak_interval_utilization"),
                peak / self.interval,
            );
        }
    }
}

pub fn build_link(cfg: &Config) -> Box<dyn Link> {
    match cfg.link.model {
        LinkModel::Fifo => Box::new(FifoLink::new(&cfg.link)),
    }
}
