//! DaeMon's schemes (seed 000): link compression (`lc`, §4.4) and the
//! compute engine's partitioned, selective data movement (`bp`, `pq`,
//! `daemon`, §4.1–4.3).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use farmem_codec::CodecKind;
use farmem_core::{CACHE_LINE, PAGE_SIZE};
use farmem_policy::daemon::{
    Class, ComputeEngine, DirtyAction, EngineConfig, LineDecision, PageArrival, PageDecision,
    Selection, ShareServer,
};

use super::{Scheme, SchemeEntry};
use crate::components::Dir;
use crate::config::{Config, IdleSlots};
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
/// Sizes come from the trace's page-content records: a page's latest
/// record before it moves (workloads report a page again when its values
/// change). A page without a record is treated as incompressible (sent
/// raw): we cannot invent its bytes. A page whose compressed form is not
/// smaller than the page is sent raw, as hardware with a raw/compressed
/// flag would do. `daemon.assume_ratio` replaces the measured sizes by one
/// ratio for every page, as an explicit what-if.
pub struct LinkCompression {
    codec: CodecKind,
    /// Every page's wire size when a ratio is assumed.
    assumed_bytes: Option<u64>,
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
            assumed_bytes: None,
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
        let measured = self
            .assumed_bytes
            .or_else(|| self.sizes.get(&page).map(|&l| l as u64));
        let (bytes, compressed) = match measured {
            Some(len) if len < PAGE_SIZE => (len, true),
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
        let ratio = cfg.daemon.assume_ratio;
        self.assumed_bytes = (ratio >= 1.0).then(|| (PAGE_SIZE as f64 / ratio).ceil() as u64);
        // Streaming, the link carries one unit while the next is coded, so
        // one unit's latency shows at each end (the codec outruns any link
        // here: 1 KB per 64 cycles).
        let unit = match (cfg.daemon.codec_pipeline, self.codec) {
            (false, _) => PAGE_SIZE,
            (true, CodecKind::Lz) => 1024,
            (true, _) => CACHE_LINE,
        };
        self.codec_ns = self
            .codec
            .codec()
            .latency_ns(unit as usize, cfg.core.freq_ghz);
    }

    fn wants_contents(&self) -> bool {
        self.assumed_bytes.is_none()
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
        for (v, _) in m.install_page(id, now, arrival).into_iter().filter(|e| e.1) {
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

/// Index of a traffic class in [`Path`].
const LINE: usize = 0;
const PAGE: usize = 1;

/// The partitioned data path to one memory node (§4.1): the node's memory
/// bus and the link's data direction, each split into a line share and a
/// page share. Each share is a FIFO server at its fraction of the
/// bandwidth (when each class may start next, then the end of all work at
/// the whole bandwidth), so a page never delays a line beyond the line
/// share. Under `daemon.idle_slots = hold` each class keeps its share
/// whether or not the other uses it (§4.1's idle slots); under `lend` a
/// class with nothing in service lends it ([`ShareServer::serve`]).
#[derive(Debug, Clone, Copy, Default)]
struct Path {
    bus: [Time; 3],
    link: [Time; 3],
}

/// Fixed costs of the path, from the config.
#[derive(Debug, Clone, Copy)]
struct Timing {
    link_ns_per_byte: f64,
    bus_ns_per_byte: f64,
    switch_ns: f64,
    header: u64,
    dram_ns: f64,
    translation: bool,
    /// Each resource's line and page shares, and whether an idle class
    /// lends its own (`daemon.idle_slots = lend`).
    server: ShareServer,
    /// Other nodes' traffic (`link.background`, `background_period_ns`).
    background: f64,
    background_period_ns: f64,
}

impl Timing {
    fn new(cfg: &Config, partitioner: &farmem_policy::daemon::BandwidthPartitioner) -> Self {
        Self {
            link_ns_per_byte: 1.0 / (cfg.link.base_gbps * cfg.link.bw_factor),
            bus_ns_per_byte: 1.0 / cfg.remote.bw_gbps,
            switch_ns: cfg.link.switch_ns,
            header: cfg.link.header_bytes as u64,
            dram_ns: cfg.remote.latency_ns,
            translation: cfg.remote.translation,
            server: ShareServer::new(partitioner, cfg.daemon.idle_slots == IdleSlots::Lend),
            background: cfg.link.background,
            background_period_ns: cfg.link.background_period_ns,
        }
    }
}

/// The traffic class of a [`Path`] index.
fn class_of(index: usize) -> Class {
    if index == LINE {
        Class::Line
    } else {
        Class::Page
    }
}

/// DaeMon's compute engine (`farmem_policy::daemon::ComputeEngine`) driven
/// in virtual time, with the memory engine's partitioned bus (§4.1).
///
/// The simulator is not event-driven (a miss returns its completion time
/// at once), so the queue controller is modelled by when each request may
/// leave its queue: a request enters its class's share of the bus and of
/// the link (`Path`); the time it waits there for its share is the time
/// it spends in the engine's queue. The engine is told a request left its
/// queue (`pop_line` / `pop_page`) when simulated time passes that moment,
/// and replies are applied (releasing buffer entries, installing pages)
/// when time passes their arrival, both before the next miss or
/// writeback. So a later miss sees its page still in the page queue while
/// earlier pages hold the page share, and §4.2's "send the line while its
/// page still waits" applies; full queues and buffers refuse requests as
/// in hardware (PQ's throttled page migrations, §6.3).
///
/// Dirty writebacks and request packets travel up the link's FIFO
/// direction, as for every scheme (the paper puts them in neither queue).
pub struct Daemon {
    mode: DaemonMode,
    engine: ComputeEngine,
    /// Page sizes on the link (`daemon` only).
    lc: Option<LinkCompression>,
    timing: Option<Timing>,
    paths: Vec<Path>,
    pending: BinaryHeap<Arrival>,
    /// When each queued request leaves its queue (time bits, page[,
    /// offset]), earliest first: with several memory nodes a request to an
    /// idle node leaves before one queued earlier to a busy node.
    line_queue: BinaryHeap<Reverse<(u64, u64, u8)>>,
    page_queue: BinaryHeap<Reverse<(u64, u64)>>,
    /// When each inflight page / line arrives.
    page_at: HashMap<u64, Time>,
    line_at: HashMap<(u64, u8), Time>,
    stalls: u64,
    queue_wait_ns: [f64; 2],
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
            timing: None,
            paths: Vec::new(),
            pending: BinaryHeap::new(),
            line_queue: BinaryHeap::new(),
            page_queue: BinaryHeap::new(),
            page_at: HashMap::new(),
            line_at: HashMap::new(),
            stalls: 0,
            queue_wait_ns: [0.0; 2],
        }
    }

    fn timing(&mut self, m: &Machine) -> Timing {
        if let Some(t) = self.timing {
            return t;
        }
        // Not configured (unit tests that skip `configure`): the preset.
        let cfg = Config::preset("daemon").expect("the daemon preset is valid");
        let t = Timing::new(&cfg, self.engine.partitioner());
        self.timing = Some(t);
        self.paths = vec![Path::default(); m.links.len()];
        t
    }

    /// Sends a request of `class` from the compute node at `now`; returns
    /// when it leaves the engine's queue and when its reply arrives.
    #[allow(clippy::too_many_arguments)]
    fn request(
        &mut self,
        m: &mut Machine,
        node: u16,
        now: Time,
        class: usize,
        dram_bytes: u64,
        wire_bytes: u64,
        enc: f64,
        dec: f64,
    ) -> (Time, Time) {
        let t = self.timing(m);
        let n = node as usize;
        if self.paths.len() <= n {
            self.paths.resize(n + 1, Path::default());
        }
        let at_node = m.links[n].send(Dir::Up, now, t.header);
        let looked_up = at_node + if t.translation { t.dram_ns } else { 0.0 };
        let path = &mut self.paths[n];
        let (bus_start, bus_end) = t.server.serve(
            &mut path.bus,
            class_of(class),
            looked_up,
            dram_bytes as f64 * t.bus_ns_per_byte,
        );
        let ready = bus_end + t.dram_ns + enc;
        let bytes = wire_bytes + t.header;
        // Other nodes' traffic slows the transfer as on every link.
        let slow = crate::components::background_slowdown(
            t.background,
            t.background_period_ns,
            ready.max(path.link[class]),
        );
        let (link_start, link_end) = t.server.serve(
            &mut path.link,
            class_of(class),
            ready,
            bytes as f64 * t.link_ns_per_byte * slow,
        );
        m.links[n].record(Dir::Down, link_start, bytes);
        m.counters.remote_bytes_read += wire_bytes;
        m.counters.remote_reads += 1;
        let wait = (bus_start - looked_up) + (link_start - ready);
        self.queue_wait_ns[class] += wait;
        (now + wait, link_end + t.switch_ns + dec)
    }

    fn enqueue_line(&mut self, m: &mut Machine, now: Time, page: u64, offset: u8) {
        let id = m.pages.id(page);
        let node = m.node_of(id);
        let (leave, at) = self.request(m, node, now, LINE, CACHE_LINE, CACHE_LINE, 0.0, 0.0);
        self.line_queue
            .push(Reverse((leave.to_bits(), page, offset)));
        self.line_at.insert((page, offset), at);
        self.pending.push(Reverse((at.to_bits(), 0, page, offset)));
    }

    fn enqueue_page(&mut self, m: &mut Machine, now: Time, page: u64) {
        let id = m.pages.id(page);
        let node = m.node_of(id);
        let (bytes, enc, dec) = self.page_wire(page);
        let (leave, at) = self.request(m, node, now, PAGE, PAGE_SIZE, bytes, enc, dec);
        self.page_queue.push(Reverse((leave.to_bits(), page)));
        self.page_at.insert(page, at);
        self.pending.push(Reverse((at.to_bits(), 1, page, 0)));
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

    /// The time of the next event (a request leaving its queue or a reply
    /// arriving), if any.
    fn next_event(&self) -> Option<Time> {
        [
            self.line_queue
                .peek()
                .map(|Reverse((b, ..))| f64::from_bits(*b)),
            self.page_queue
                .peek()
                .map(|Reverse((b, _))| f64::from_bits(*b)),
            self.pending
                .peek()
                .map(|Reverse((b, ..))| f64::from_bits(*b)),
        ]
        .into_iter()
        .flatten()
        .reduce(f64::min)
    }

    /// Applies every event up to `now`, in time order.
    fn drain(&mut self, m: &mut Machine, now: Time) {
        while let Some(t) = self.next_event().filter(|&t| t <= now) {
            if let Some(&Reverse((lt, p, o))) = self.line_queue.peek()
                && f64::from_bits(lt) == t
            {
                self.line_queue.pop();
                // False if the engine took it out itself (its page arrived
                // first).
                self.engine.issue_line(p, o);
                continue;
            }
            if let Some(&Reverse((pt, p))) = self.page_queue.peek()
                && f64::from_bits(pt) == t
            {
                self.page_queue.pop();
                self.engine.issue_page(p);
                continue;
            }
            let Some(Reverse((_, kind, p, o))) = self.pending.pop() else {
                break;
            };
            self.arrive(m, t, kind, p, o);
        }
    }

    fn arrive(&mut self, m: &mut Machine, t: Time, kind: u8, p: u64, o: u8) {
        if kind == 0 {
            self.line_at.remove(&(p, o));
            // Delivered or ignored, the LLC was filled when the miss
            // returned; the engine only releases its entry.
            self.engine.on_line_arrival(p, o);
            return;
        }
        self.page_at.remove(&p);
        let id = m.pages.id(p);
        match self.engine.on_page_arrival(p) {
            PageArrival::Installed { merge, .. } => {
                m.local_dram.occupy(t, PAGE_SIZE);
                let victims = m.install_page(id, t, t);
                // Held dirty lines are merged into the page.
                m.pages.pages[id as usize].dirty = !merge.is_empty();
                for (v, _) in victims.into_iter().filter(|e| e.1) {
                    let vpage = m.pages.pages[v as usize].page;
                    let (bytes, enc, _) = self.page_wire(vpage);
                    m.remote_write_encoded(m.node_of(v), t + enc, PAGE_SIZE, bytes);
                }
            }
            PageArrival::Discarded { rerequested } => {
                if rerequested {
                    self.enqueue_page(m, t, p);
                }
            }
            PageArrival::Unexpected => {}
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
        self.timing = Some(Timing::new(cfg, self.engine.partitioner()));
        self.paths = vec![Path::default(); cfg.remote.nodes as usize];
    }

    fn wants_contents(&self) -> bool {
        self.lc.as_ref().is_some_and(|lc| lc.wants_contents())
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
        let mut now = now;
        // A stalled miss (queues or buffers full) retries after the next
        // event; the bound only guards against a bug looping forever.
        for _ in 0..100_000 {
            let Ok(action) = self.engine.on_miss(page, offset, write) else {
                // Unreachable with 64 lines per page; serve it as a line.
                m.counters.local_misses += 1;
                return m.remote_read(node, now, CACHE_LINE);
            };
            if action.line == LineDecision::HeldDirty {
                // The dirty buffer has the newest copy, at the compute node.
                m.counters.local_hits += 1;
                return now;
            }
            // The critical line's request goes up first.
            if action.line == LineDecision::Sent {
                self.enqueue_line(m, now, page, offset);
            }
            if action.page == PageDecision::Scheduled {
                self.enqueue_page(m, now, page);
            }
            let line_wait = matches!(
                action.line,
                LineDecision::Sent | LineDecision::AlreadyInflight
            );
            let page_wait = matches!(
                action.page,
                PageDecision::Scheduled | PageDecision::AlreadyInflight
            ) || action.line == LineDecision::Dropped;
            let line_t = self.line_at.get(&(page, offset)).copied();
            let page_t = self.page_at.get(&page).copied();
            let line_t = line_t.filter(|_| line_wait);
            let page_t = page_t.filter(|_| page_wait);
            // Served by the page (local memory, as `remote` counts a miss to
            // an arriving page) or by the line (remote memory).
            match (line_t, page_t) {
                (Some(l), Some(p)) if p <= l => {
                    m.counters.local_hits += 1;
                    return p;
                }
                (None, Some(p)) => {
                    m.counters.local_hits += 1;
                    return p;
                }
                (Some(l), _) => {
                    m.counters.local_misses += 1;
                    return l;
                }
                (None, None) => {}
            }
            self.stalls += 1;
            let Some(next) = self.next_event() else {
                break;
            };
            now = now.max(next);
            self.drain(m, now);
            if let Some(ready) = m.local_lookup(id, now) {
                m.counters.local_hits += 1;
                return m.local_dram.access(now.max(ready), CACHE_LINE, false);
            }
        }
        // Nothing in flight and nothing scheduled: fetch the line directly.
        m.counters.local_misses += 1;
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
            ("pages_buffer_full", s.pages_buffer_full),
            ("lines_sent", s.lines_sent),
            ("lines_dropped", s.lines_dropped),
            ("lines_buffer_full", s.lines_buffer_full),
            ("lines_issued", s.lines_issued),
            ("lines_unqueued", s.lines_unqueued),
            ("pages_issued", s.pages_issued),
            ("lines_delivered", s.lines_delivered),
            ("lines_ignored", s.lines_ignored),
            ("pages_installed", s.pages_installed),
            ("pages_discarded", s.pages_discarded),
            ("dirty_held", s.dirty_held),
            ("throttles", s.throttles),
            ("stalls", self.stalls),
        ] {
            out.put(n, k, v as f64);
        }
        out.put(n, "line_queue_wait_ns", self.queue_wait_ns[LINE]);
        out.put(n, "page_queue_wait_ns", self.queue_wait_ns[PAGE]);
        if let Some(t) = &self.timing {
            out.put(n, "line_share", t.server.line_share());
        }
        if let Some(lc) = &self.lc {
            out.put(n, "wire_bytes", lc.wire_bytes as f64);
            out.put(n, "raw_bytes", lc.raw_bytes as f64);
            out.put(
                n,
                "compression_ratio",
                lc.raw_bytes as f64 / lc.wire_bytes.max(1) as f64,
            );
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
