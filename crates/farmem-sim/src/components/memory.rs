//! Memory devices: DRAM behind a bus, chosen by `remote.model`.

use crate::Time;
use crate::stats::Stats;

/// A memory device: DRAM behind a bus.
pub trait Memory: Send {
    /// Reads or writes `bytes` starting at `now`; returns when the data is
    /// ready (read) or written (write). `translate` adds the address
    /// translation lookup (one more DRAM access) before the access.
    fn access(&mut self, now: Time, bytes: u64, translate: bool) -> Time;
    /// Occupies the bus for `bytes` without anyone waiting for it (a page
    /// written into local memory while the line is forwarded).
    fn occupy(&mut self, now: Time, bytes: u64);
    fn report(&self, prefix: &str, sim_time_ns: f64, out: &mut Stats);
}

/// DRAM: fixed latency plus bus serialization, FIFO on the bus.
#[derive(Debug, Clone)]
pub struct Dram {
    latency: Time,
    ns_per_byte: f64,
    busy_until: Time,
    busy: f64,
    accesses: u64,
    bytes: u64,
}

impl Dram {
    pub fn new(latency_ns: f64, gbps: f64) -> Self {
        Self {
            latency: latency_ns,
            ns_per_byte: 1.0 / gbps,
            busy_until: 0.0,
            busy: 0.0,
            accesses: 0,
            bytes: 0,
        }
    }
}

impl Memory for Dram {
    #[inline]
    fn access(&mut self, now: Time, bytes: u64, translate: bool) -> Time {
        let t = if translate { now + self.latency } else { now };
        let start = t.max(self.busy_until);
        let xfer = bytes as f64 * self.ns_per_byte;
        self.busy_until = start + xfer;
        self.busy += xfer;
        self.accesses += 1;
        self.bytes += bytes;
        start + xfer + self.latency
    }
    #[inline]
    fn occupy(&mut self, now: Time, bytes: u64) {
        let start = now.max(self.busy_until);
        let xfer = bytes as f64 * self.ns_per_byte;
        self.busy_until = start + xfer;
        self.busy += xfer;
        self.bytes += bytes;
    }
    fn report(&self, prefix: &str, t: f64, out: &mut Stats) {
        out.put(prefix, "accesses", self.accesses as f64);
        out.put(prefix, "bytes", self.bytes as f64);
        out.put(prefix, "busy_ns", self.busy);
        out.put(prefix, "utilization", self.busy / t.max(1e-9));
    }
}

pub fn build_memory(latency_ns: f64, gbps: f64) -> Box<dyn Memory> {
    Box::new(Dram::new(latency_ns, gbps))
}
