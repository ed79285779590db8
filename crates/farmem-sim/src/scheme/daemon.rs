//! DaeMon's schemes (seed 000): link compression (`lc`, §4.4) and the
//! compute engine's partitioned, selective data movement (`bp`, `pq`,
//! `daemon`, §4.1–4.3).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use farmem_codec::CodecKind;
use farmem_core::{CACHE_LINE, PAGE_SIZE};
use farmem_policy::daemon::{
    ComputeEngine, DirtyAction, EngineConfig, Issue, LineDecision, PageArrival, PageDecision,
    Selection,
};

use super::{Scheme, SchemeEntry};
use crate::components::Dir;
use crate::config::Config;
use crate::machine::Machine;
use crate::stats::Stats;
use crate::{LINES_PER_PAGE, Time};

pub const SCHEMES: &[SchemeEntry] = &[
    (
        "lc",
        "remote with pages compressed on the link (DaeMon LC; codec: daemon.codec)",
        || Box::new(LinkCompression::default()),
    ),
    (
        "bp",
        "DaeMon BP: lines and pages both moved, 25% of the link reserved for lines",
        || Box::new(Daemon::new(DaemonMode::Bp)),
    ),
    (
        "pq",
        "DaeMon PQ: BP plus granularity selection (§4.2)",
        || Box::new(Daemon::new(DaemonMode::Pq)),
    ),
    (
        "daemon",
        "DaeMon: PQ plus link compression of pages (codec: daemon.codec)",
        || Box::new(Daemon::new(DaemonMode::Daemon)),
    ),
];

/// DaeMon's LC (§4.4): Remote, but every page crossing the link is
/// compressed, so it occupies the link for its compressed size, and pays
/// the codec's compression and decompression latency.
///
/// Sizes come from the trace's page-content records (initial contents).
/// A page without a record is treated as incompressible (sent raw): we
/// cannot invent its bytes, and a constant ratio would be fiction. Stores
/// are not reflected in the bytes (traces carry only initial contents), so
/// a dirty page is written back at its initial compressed size. A page
/// whose compressed form is not smaller than the page is sent raw, as
/// hardware with a raw/compressed flag would do.
pub struct LinkCompression {
    codec: CodecKind,
    /// One (de)compression of a page, ns.
    codec_ns: f64,
    /// Compressed length of each page that has contents, by page number.
    sizes: HashMap<u64, u32>,
    pages_with_contents: u64,
    pages_sent: u64,
    pages_sent_compressed: u64,
    raw_bytes: u64,
    wire_bytes: u64,
}

impl Default for LinkCompression {
    fn default() -> Self {
        Self {
            codec: CodecKind::Lz,
            codec_ns: 0.0,
            sizes: HashMap::new(),
            pages_with_contents: 0,
            pages_sent: 0,
            pages_sent_compressed: 0,
            raw_bytes: 0,
            wire_bytes: 0,
        }
    }
}

impl LinkCompression {
    /// Bytes page `page` takes on the link, and whether they are compressed.
    fn wire(&mut self, page: u64) -> (u64, bool) {
        self.pages_sent += 1;
        self.raw_bytes += PAGE_SIZE;
        let (bytes, compressed) = match self.sizes.get(&page) {
            Some(&len) if (len as u64) < PAGE_SIZE => (len as u64, true),
            _ => (PAGE_SIZE, false),
        };
        self.pages_sent_compressed += compressed as u64;
        self.wire_bytes += bytes;
        (bytes, compressed)
    }

    fn decode_ns(&self, compressed: bool) -> f64 {
        if compressed { self.codec_ns } else { 0.0 }
    }
}

impl Scheme for LinkCompression {
    fn name(&self) -> &'static str {
        "lc"
    }

    fn configure(&mut self, cfg: &Config) {
        self.codec = cfg.daemon.codec;
        self.codec_ns = self
            .codec
            .codec()
            .latency_ns(PAGE_SIZE as usize, cfg.core.freq_ghz);
    }

    fn wants_contents(&self) -> bool {
        true
    }

    fn page_contents(&mut self, addr: u64, data: &[u8]) {
        let len = self.codec.codec().compressed_len(data);
        let len = u32::try_from(len).unwrap_or(u32::MAX);
        if self.sizes.insert(addr / PAGE_SIZE, len).is_none() {
            self.pages_with_contents += 1;
        }
    }

    #[inline]
    fn read_line(&mut self, m: &mut Machine, now: Time, line: u64, _write: bool) -> Time {
        let page = line / LINES_PER_PAGE;
        let id = m.pages.id(page);
        let node = m.node_of(id);
        if let Some(ready) = m.local_lookup(id, now) {
            m.counters.local_hits += 1;
            return m.local_dram.access(now.max(ready), CACHE_LINE, false);
        }
        m.counters.local_misses += 1;
        let (bytes, compressed) = self.wire(page);
        // The memory node's engine always runs the compressor (it learns
        // whether the page shrinks only by trying); only a compressed page
        // needs decompressing.
        let arrival = m.remote_read_encoded(node, now, PAGE_SIZE, bytes, self.codec_ns)
            + self.decode_ns(compressed);
        m.local_dram.occupy(arrival, PAGE_SIZE);
        if let Some((v, true)) = m.install_page(id, now, arrival) {
            let vpage = m.pages.pages[v as usize].page;
            let (vbytes, _) = self.wire(vpage);
            // Compressed at the compute node before the link; nobody waits
            // for the memory node's decompression.
            m.remote_write_encoded(m.node_of(v), now + self.codec_ns, PAGE_SIZE, vbytes);
        }
        arrival
    }

    fn write_back(&mut self, m: &mut Machine, now: Time, line: u64) {
        // Lines are not compressed (§4.4 compresses pages only).
        if let Some(node) = m.absorb_dirty_line(now, line) {
            m.remote_write(node, now, CACHE_LINE);
        }
    }

    fn report(&self, out: &mut Stats) {
        let n = self.name();
        out.put(n, "pages_with_contents", self.pages_with_contents as f64);
        out.put(n, "pages_sent", self.pages_sent as f64);
        out.put(
            n,
            "pages_sent_compressed",
            self.pages_sent_compressed as f64,
        );
        out.put(n, "raw_bytes", self.raw_bytes as f64);
        out.put(n, "wire_bytes", self.wire_bytes as f64);
        out.put(
            n,
            "compression_ratio",
            self.raw_bytes as f64 / self.wire_bytes.max(1) as f64,
        );
        out.put(n, "codec_ns", self.codec_ns);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaemonMode {
    /// Both granularities, bandwidth partitioned (§6 BP).
    Bp,
    /// BP plus granularity selection (§6 PQ).
    Pq,
    /// PQ plus link compression (§6 DaeMon).
    Daemon,
}

/// A reply on its way: (arrival time bits, 0 line / 1 page, page, offset).
/// Non-negative f64 bits order like the numbers.
type Arrival = Reverse<(u64, u8, u64, u8)>;

/// DaeMon's compute engine (`farmem_policy::daemon::ComputeEngine`) driven
/// in virtual time. The simulator is not event-driven (a miss returns its
/// completion time at once), so the queue controller runs synchronously:
/// a miss is given to the engine, then every queued request is issued at
/// once in the partitioner's order, its reply charged on the page's link;
/// an idle slot holds that link for the slot's nominal size (`Issue::Idle`).
/// Replies are applied to the engine (releasing buffer entries, installing
/// pages in local memory) when simulated time passes their arrival, before
/// the next miss or writeback. A page is only resident once it arrived, so
/// misses to an inflight page go through the selection unit (§4.2).
///
/// Consequence of issuing at once: the page queue is empty after every
/// miss, so §4.2's "send the line while its page still waits in the page
/// queue" never applies and PQ drops every line of an inflight page; queues
/// only build up under an event-driven queue controller (issue when the
/// link frees), the next step.
///
/// Not modelled yet: the memory engine's partitioned memory bus (the node's
/// DRAM is a FIFO as for every scheme), and the idle slot's link when
/// pages sit on several memory nodes (it is charged to the missing page's).
pub struct Daemon {
    mode: DaemonMode,
    engine: ComputeEngine,
    /// Page sizes on the link (`daemon` only).
    lc: Option<LinkCompression>,
    pending: BinaryHeap<Arrival>,
    /// When each inflight page / line arrives.
    page_at: HashMap<u64, Time>,
    line_at: HashMap<(u64, u8), Time>,
    idle_slots: u64,
    stalls: u64,
}

impl Daemon {
    pub fn new(mode: DaemonMode) -> Self {
        let selection = match mode {
            DaemonMode::Bp => Selection::Both,
            DaemonMode::Pq | DaemonMode::Daemon => Selection::Selective,
        };
        let config = EngineConfig {
            selection,
            ..EngineConfig::default()
        };
        Self {
            mode,
            // The paper's defaults always validate.
            engine: ComputeEngine::new(config).expect("default DaeMon engine config is valid"),
            lc: (mode == DaemonMode::Daemon).then(LinkCompression::default),
            pending: BinaryHeap::new(),
            page_at: HashMap::new(),
            line_at: HashMap::new(),
            idle_slots: 0,
            stalls: 0,
        }
    }

    /// Wire bytes and the encode / decode latencies of page `page`.
    fn page_wire(&mut self, page: u64) -> (u64, f64, f64) {
        match &mut self.lc {
            Some(lc) => {
                let (bytes, compressed) = lc.wire(page);
                (bytes, lc.codec_ns, lc.decode_ns(compressed))
            }
            None => (PAGE_SIZE, 0.0, 0.0),
        }
    }

    /// Issues every queued request at `now` (see the type's doc).
    fn pump(&mut self, m: &mut Machine, now: Time, link_node: u16) {
        // Each slot either issues or idles, and the partition's period is
        // at most 64 lines + 1 page, so this bounds the loop generously.
        let mut budget = 1 << 20;
        while self.engine.has_work() && budget > 0 {
            budget -= 1;
            match self.engine.issue() {
                Issue::Line(p, o) => {
                    let id = m.pages.id(p);
                    let node = m.node_of(id);
                    let t = m.remote_read(node, now, CACHE_LINE);
                    self.line_at.insert((p, o), t);
                    self.pending.push(Reverse((t.to_bits(), 0, p, o)));
                }
                Issue::Page(p) => {
                    let id = m.pages.id(p);
                    let node = m.node_of(id);
                    let (bytes, enc, dec) = self.page_wire(p);
                    let t = m.remote_read_encoded(node, now, PAGE_SIZE, bytes, enc) + dec;
                    self.page_at.insert(p, t);
                    self.pending.push(Reverse((t.to_bits(), 1, p, 0)));
                }
                Issue::Idle(class) => {
                    self.idle_slots += 1;
                    let bytes = self.engine.partitioner().slot_bytes(class);
                    m.links[link_node as usize].send(Dir::Down, now, bytes);
                }
            }
        }
    }

    /// Applies every reply that arrived by `now`.
    fn drain(&mut self, m: &mut Machine, now: Time) {
        while let Some(&Reverse((bits, kind, p, o))) = self.pending.peek() {
            let t = f64::from_bits(bits);
            if t > now {
                break;
            }
            self.pending.pop();
            if kind == 0 {
                self.line_at.remove(&(p, o));
                // Delivered or ignored, the LLC was filled when the miss
                // returned; the engine only releases its entry.
                self.engine.on_line_arrival(p, o);
                continue;
            }
            self.page_at.remove(&p);
            let id = m.pages.id(p);
            match self.engine.on_page_arrival(p) {
                PageArrival::Installed { merge, .. } => {
                    m.local_dram.occupy(t, PAGE_SIZE);
                    let victim = m.install_page(id, t, t);
                    // Held dirty lines are merged into the page.
                    m.pages.pages[id as usize].dirty = !merge.is_empty();
                    if let Some((v, true)) = victim {
                        let vpage = m.pages.pages[v as usize].page;
                        let (bytes, enc, _) = self.page_wire(vpage);
                        m.remote_write_encoded(m.node_of(v), t + enc, PAGE_SIZE, bytes);
                    }
                }
                PageArrival::Discarded { rerequested } => {
                    if rerequested {
                        let node = m.node_of(id);
                        self.pump(m, t, node);
                    }
                }
                PageArrival::Unexpected => {}
            }
        }
    }
}

impl Scheme for Daemon {
    fn name(&self) -> &'static str {
        match self.mode {
            DaemonMode::Bp => "bp",
            DaemonMode::Pq => "pq",
            DaemonMode::Daemon => "daemon",
        }
    }

    fn configure(&mut self, cfg: &Config) {
        if let Some(lc) = &mut self.lc {
            lc.configure(cfg);
        }
        let config = EngineConfig {
            selection: self.engine.config().selection,
            ..cfg.daemon.compute
        };
        // Config::validate checked it; keep the paper's engine otherwise.
        if let Ok(engine) = ComputeEngine::new(config) {
            self.engine = engine;
        }
    }

    fn wants_contents(&self) -> bool {
        self.lc.is_some()
    }

    fn page_contents(&mut self, addr: u64, data: &[u8]) {
        if let Some(lc) = &mut self.lc {
            lc.page_contents(addr, data);
        }
    }

    fn read_line(&mut self, m: &mut Machine, now: Time, line: u64, write: bool) -> Time {
        self.drain(m, now);
        let page = line / LINES_PER_PAGE;
        let offset = (line % LINES_PER_PAGE) as u8;
        let id = m.pages.id(page);
        let node = m.node_of(id);
        if let Some(ready) = m.local_lookup(id, now) {
            m.counters.local_hits += 1;
            return m.local_dram.access(now.max(ready), CACHE_LINE, false);
        }
        m.counters.local_misses += 1;
        let mut now = now;
        // A stalled miss (both buffers full) retries after the next reply.
        for _ in 0..1024 {
            let Ok(action) = self.engine.on_miss(page, offset, write) else {
                // Unreachable with 64 lines per page; serve it as a line.
                return m.remote_read(node, now, CACHE_LINE);
            };
            if action.line == LineDecision::HeldDirty {
                // The dirty buffer has the newest copy, at the compute node.
                return now;
            }
            self.pump(m, now, node);
            let line_t = self.line_at.get(&(page, offset)).copied();
            let page_t = self.page_at.get(&page).copied();
            let line_wait = matches!(
                action.line,
                LineDecision::Sent | LineDecision::AlreadyInflight
            );
            let page_wait = matches!(
                action.page,
                PageDecision::Scheduled | PageDecision::AlreadyInflight
            ) || action.line == LineDecision::Dropped;
            let t = [line_t.filter(|_| line_wait), page_t.filter(|_| page_wait)]
                .into_iter()
                .flatten()
                .reduce(f64::min);
            if let Some(t) = t {
                return t;
            }
            self.stalls += 1;
            let Some(&Reverse((bits, ..))) = self.pending.peek() else {
                break;
            };
            now = now.max(f64::from_bits(bits));
            self.drain(m, now);
            if let Some(ready) = m.local_lookup(id, now) {
                return m.local_dram.access(now.max(ready), CACHE_LINE, false);
            }
        }
        // Nothing in flight and nothing scheduled: fetch the line directly.
        m.remote_read(node, now, CACHE_LINE)
    }

    fn write_back(&mut self, m: &mut Machine, now: Time, line: u64) {
        self.drain(m, now);
        let Some(node) = m.absorb_dirty_line(now, line) else {
            return;
        };
        let page = line / LINES_PER_PAGE;
        let offset = (line % LINES_PER_PAGE) as u8;
        match self.engine.on_dirty_line_evicted(page, offset) {
            Ok(DirtyAction::Hold | DirtyAction::Replace) => {}
            Ok(DirtyAction::FlushAndThrottle { flush }) => {
                let lines = u64::from(flush.len().max(1));
                m.remote_write(node, now, lines * CACHE_LINE);
            }
            Ok(DirtyAction::WriteRemote) | Err(_) => {
                m.remote_write(node, now, CACHE_LINE);
            }
        }
    }

    fn report(&self, out: &mut Stats) {
        let n = self.name();
        let s = self.engine.stats();
        for (k, v) in [
            ("misses", s.misses),
            ("pages_scheduled", s.pages_scheduled),
            ("lines_sent", s.lines_sent),
            ("lines_dropped", s.lines_dropped),
            ("lines_issued", s.lines_issued),
            ("pages_issued", s.pages_issued),
            ("lines_delivered", s.lines_delivered),
            ("lines_ignored", s.lines_ignored),
            ("pages_installed", s.pages_installed),
            ("pages_discarded", s.pages_discarded),
            ("dirty_held", s.dirty_held),
            ("throttles", s.throttles),
            ("idle_slots", self.idle_slots),
            ("stalls", self.stalls),
        ] {
            out.put(n, k, v as f64);
        }
        if let Some(lc) = &self.lc {
            out.put(n, "wire_bytes", lc.wire_bytes as f64);
            out.put(n, "raw_bytes", lc.raw_bytes as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine() -> Machine {
        let cfg = Config::preset("daemon").unwrap();
        Machine::new(&cfg, 64 * PAGE_SIZE)
    }

    #[test]
    fn daemon_holds_dirty_lines_then_throttles_and_rerequests() {
        let mut m = machine();
        let mut s = Daemon::new(DaemonMode::Pq);
        let page = 0x1234u64;
        let line = |o: u64| page * LINES_PER_PAGE + o;
        // A miss sends line 0 and the page.
        let first = s.read_line(&mut m, 0.0, line(0), false);
        let page_at = s.page_at[&page];
        assert!(first < page_at);
        // A dirty line of the inflight page is held, not written.
        s.write_back(&mut m, 1.0, line(5));
        assert_eq!(m.counters.remote_bytes_written, 0);
        assert!(s.engine.dirty_held(page, 5));
        // A miss to it is served from the dirty buffer at once.
        assert_eq!(s.read_line(&mut m, 2.0, line(5), false), 2.0);
        // Up to 8 held lines; the 9th flushes all 9 and throttles the page.
        for o in 6..14 {
            s.write_back(&mut m, 3.0, line(o));
        }
        assert_eq!(m.counters.remote_bytes_written, 9 * CACHE_LINE);
        assert_eq!(s.engine.stats().throttles, 1);
        // The throttled page is discarded on arrival and requested again.
        let reads = m.counters.remote_bytes_read;
        s.drain(&mut m, page_at);
        assert_eq!(s.engine.stats().pages_discarded, 1);
        assert_eq!(m.counters.remote_bytes_read, reads + PAGE_SIZE);
        let again = s.page_at[&page];
        assert!(again > page_at);
        let id = m.pages.id(page) as usize;
        assert!(!m.pages.pages[id].resident);
        // Its second arrival installs it.
        s.drain(&mut m, again);
        assert_eq!(s.engine.stats().pages_installed, 1);
        assert!(m.pages.pages[id].resident);
    }

    #[test]
    fn held_dirty_lines_merge_into_the_arriving_page() {
        let mut m = machine();
        let mut s = Daemon::new(DaemonMode::Daemon);
        let page = 7u64;
        s.read_line(&mut m, 0.0, page * LINES_PER_PAGE, false);
        let page_at = s.page_at[&page];
        s.write_back(&mut m, 1.0, page * LINES_PER_PAGE + 3);
        assert_eq!(m.counters.remote_bytes_written, 0);
        s.drain(&mut m, page_at);
        assert_eq!(s.engine.stats().pages_installed, 1);
        let id = m.pages.id(page) as usize;
        // The page holds the newest data of line 3, so it is dirty.
        assert!(m.pages.pages[id].resident && m.pages.pages[id].dirty);
        // No contents for page 7: sent raw, `daemon` charges it 4 KiB.
        assert_eq!(m.counters.remote_bytes_read, CACHE_LINE + PAGE_SIZE);
    }
}
