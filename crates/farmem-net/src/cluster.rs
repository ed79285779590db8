//! The compute node's view of a rack: the controller that hands out memory
//! and a pool of connections to the memory nodes that hold it.
//!
//! Addresses are global: an extent's base is where its bytes live in the
//! pool, and the memory node serving it is found by looking the address up
//! among the extents this client holds (a B-tree over a handful of large
//! extents: the runtime's remote translation).
//!
//! # Slots: the unit of trust
//!
//! The client trusts a memory node's copies only as long as it has seen the
//! node answer without a break: from its first connection until the node is
//! lost (it restarted, and its memory is new) or declared down (it failed
//! every request for `fail_after`, so its copies may have missed writes).
//! Each such span is a *slot*: the connections, health and capabilities of
//! one node for that span. Copies held by this client name their slot, not
//! their node, so a slot that is dropped takes its copies with it for good,
//! while the node itself (its next incarnation, or the same process back
//! from a pause) gets a fresh slot as soon as the controller places a new
//! copy or extent there. A rack of three nodes that each restart in turn
//! thus keeps its copies on the nodes that are up, instead of running out
//! of nodes it has never dropped.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use farmem_wire::{Cap, ErrorCode, Extent, Msg, Placement};
use parking_lot::{Mutex, RwLock};

mod controller;
mod ec;
mod io;
mod repair;

pub use controller::{ControllerClient, LeaseKeeper, stats_json};
pub use ec::{LOGICAL_BASE, Redundancy, RedundancyError, StripeSplit};
pub use repair::Repaired;

use crate::conn::copy_read_reply;
use crate::{ClientConfig, Connection, Lane, NetError, PageReadError, PageReader, Reply, Ticket};

/// Largest read a page reader serves: one 4 KiB page.
const PAGE_READ_MAX: usize = 4096;

struct NodeConns {
    /// The memory node's id (a slot's number is the client's own).
    id: u32,
    addr: String,
    /// How connections to the node are made: the cluster's, with the
    /// node's own delay gate when each path has one.
    cfg: ClientConfig,
    conns: Vec<Mutex<Connection>>,
    next: AtomicUsize,
    /// Allocation-free readers for faults served in a signal handler
    /// ([`Cluster::keep_page_readers`]); empty unless asked for.
    readers: RwLock<Vec<Mutex<PageReader>>>,
    /// The node's incarnation when we first connected: a connection that
    /// finds another one has reached a restarted node, whose memory is new.
    incarnation: u64,
    /// The other incarnation found, once one was (0: none): every request
    /// to the node fails from then on, rather than read what it holds now.
    restarted_as: AtomicU64,
    lost: AtomicBool,
    /// When the node's current run of failed requests began.
    failing_since: Mutex<Option<Instant>>,
    /// In a run of failed requests (`failing_since` is set): copies
    /// elsewhere are tried first.
    failing: AtomicBool,
    /// Declared down: failed every request for `fail_after`. How long,
    /// and the last failure, for the error every later request gets.
    down: Mutex<Option<(Duration, String)>>,
    is_down: AtomicBool,
    /// When the slot was dropped (lost or down): of several dropped copies,
    /// an error names the last to go, the loss that left none.
    dropped_at: Mutex<Option<Instant>>,
    /// Capabilities the controller issued us for this node's ranges,
    /// shared with each connection to present again when it reopens.
    caps: Arc<RwLock<Vec<Cap>>>,
}

impl NodeConns {
    /// The next connection of `lane` (see [`Lane::connection`]); a failed
    /// one is replaced by a fresh connection first, which must reach the
    /// same incarnation.
    fn pick(&self, lane: Lane) -> Result<Connection, NetError> {
        self.check_lost()?;
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        let i = lane.connection(self.conns.len(), turn);
        let mut slot = self.conns[i].lock();
        if !slot.is_alive() {
            let conn = Connection::connect(&self.addr, &self.cfg)?;
            self.check_incarnation(conn.incarnation())?;
            self.present(Some(&conn), None, &self.caps.read())?;
            conn.present_on_reopen(self.caps.clone());
            *slot = conn;
        }
        Ok(slot.clone())
    }

    fn check_incarnation(&self, now: u64) -> Result<(), NetError> {
        if now != self.incarnation {
            self.restarted_as.store(now, Ordering::SeqCst);
            self.mark_lost();
        }
        self.check_lost()
    }

    /// Shows a newly opened connection or page reader `caps`, this client's
    /// capabilities for the node: the node serves a session only the ranges
    /// it presented capabilities for. A refusal (capabilities of a previous
    /// incarnation of the node) is logged, not returned: the node's answer
    /// to each access then says what is wrong (lost, not granted).
    fn present(
        &self,
        conn: Option<&Connection>,
        reader: Option<&mut PageReader>,
        caps: &[Cap],
    ) -> Result<(), NetError> {
        if caps.is_empty() {
            return Ok(());
        }
        let msg = Msg::Present {
            caps: caps.to_vec(),
        };
        let shown = match (conn, reader) {
            (Some(c), _) => c.call(&msg).and_then(|r| r.done("present")),
            (None, Some(r)) => r.present(caps),
            (None, None) => Ok(()),
        };
        match shown {
            Err(NetError::Remote { message, .. }) => {
                tracing::warn!("{message}");
                Ok(())
            }
            other => other,
        }
    }

    /// Adds a capability and shows it to every open connection and page
    /// reader; one that fails is replaced (and shown every capability) later.
    fn add_cap(&self, cap: Cap) {
        self.caps.write().push(cap.clone());
        let caps = [cap];
        for slot in &self.conns {
            let conn = slot.lock().clone();
            let _ = self.present(Some(&conn), None, &caps);
        }
        for r in self.readers.read().iter() {
            let _ = self.present(None, Some(&mut r.lock()), &caps);
        }
    }

    fn mark_lost(&self) {
        self.dropped_at.lock().get_or_insert_with(Instant::now);
        self.lost.store(true, Ordering::SeqCst);
    }

    /// Lost or down: no copy of this slot is used again.
    fn dropped(&self) -> bool {
        self.lost.load(Ordering::SeqCst) || self.is_down.load(Ordering::SeqCst)
    }

    /// Fails once the node is lost (restarted) or down: this client uses
    /// it no more, and says why.
    fn check_lost(&self) -> Result<(), NetError> {
        if self.is_down.load(Ordering::SeqCst)
            && let Some((waited, cause)) = self.down.lock().clone()
        {
            return Err(NetError::NodeDown {
                node: self.id,
                addr: self.addr.clone(),
                waited,
                cause,
                held: 0,
            });
        }
        if !self.lost.load(Ordering::SeqCst) {
            return Ok(());
        }
        Err(NetError::NodeLost {
            node: self.id,
            addr: self.addr.clone(),
            was: self.incarnation,
            now: self.restarted_as.load(Ordering::SeqCst),
            held: 0,
        })
    }
}

/// The slots of this client (see the module docs), and the one of each
/// memory node new copies there join.
#[derive(Default)]
struct Nodes {
    slots: HashMap<u32, NodeConns>,
    /// Memory node id -> its newest slot.
    current: HashMap<u32, u32>,
    next_slot: u32,
}

impl Nodes {
    fn get(&self, slot: &u32) -> Option<&NodeConns> {
        self.slots.get(slot)
    }

    fn values(&self) -> impl Iterator<Item = &NodeConns> {
        self.slots.values()
    }

    /// The memory node of `slot` (the slot itself when unknown: it names
    /// no node then, and no request reaches one).
    fn node_of(&self, slot: u32) -> u32 {
        self.slots.get(&slot).map_or(slot, |n| n.id)
    }

    /// The slot new copies on `node` at `addr` join: its newest, unless
    /// that one was dropped or the node moved.
    fn usable(&self, node: u32, addr: &str) -> Option<u32> {
        let slot = *self.current.get(&node)?;
        let n = self.slots.get(&slot)?;
        (!n.dropped() && n.addr == addr).then_some(slot)
    }
}

/// A pool of connections to the memory nodes holding this client's extents.
pub struct Cluster {
    cfg: ClientConfig,
    /// `cfg` with requests timing out within `fail_after`, for memory nodes.
    node_cfg: ClientConfig,
    controller: Option<ControllerClient>,
    conns_per_node: usize,
    /// Extents held, by base address; their copies' `node` fields are
    /// slots (see the module docs).
    extents: RwLock<BTreeMap<u64, Extent>>,
    nodes: RwLock<Nodes>,
    /// Page readers kept open to each node, including nodes connected later.
    page_readers: AtomicUsize,
    /// Copies of each byte asked for in allocations.
    replicas: AtomicU8,
    /// Every capability issued to this client, for the lease keeper.
    issued: Arc<RwLock<Vec<Cap>>>,
    /// Copies being filled by [`Self::repair`]: (slot, first address,
    /// end) there. Written to, not read from.
    filling: RwLock<Vec<(u32, u64, u64)>>,
    /// Held shared by every write, alone by a repair filling a piece, so a
    /// fill never overwrites a newer write with older bytes.
    copy_lock: RwLock<()>,
    /// Erasure-coded stripes, at logical addresses (see [`ec`]).
    stripes: ec::Stripes,
}

impl Cluster {
    /// Connects to the controller at `controller`. Memory node connections
    /// are opened as extents on them are granted.
    pub fn connect(
        controller: &str,
        cfg: ClientConfig,
        conns_per_node: usize,
    ) -> Result<Self, NetError> {
        Ok(Self {
            controller: Some(ControllerClient::connect(controller, &cfg)?),
            node_cfg: node_cfg(&cfg),
            cfg,
            conns_per_node: conns_per_node.max(1),
            extents: RwLock::new(BTreeMap::new()),
            nodes: RwLock::default(),
            page_readers: AtomicUsize::new(0),
            replicas: AtomicU8::new(1),
            issued: Arc::default(),
            filling: RwLock::new(Vec::new()),
            copy_lock: RwLock::new(()),
            stripes: ec::Stripes::default(),
        })
    }

    /// Uses one standalone memory node (no controller) as a single extent
    /// [0, capacity).
    pub fn standalone(
        memnode: &str,
        capacity: u64,
        cfg: ClientConfig,
        conns_per_node: usize,
    ) -> Result<Self, NetError> {
        let cluster = Self {
            controller: None,
            node_cfg: node_cfg(&cfg),
            cfg,
            conns_per_node: conns_per_node.max(1),
            extents: RwLock::new(BTreeMap::new()),
            nodes: RwLock::default(),
            page_readers: AtomicUsize::new(0),
            replicas: AtomicU8::new(1),
            issued: Arc::default(),
            filling: RwLock::new(Vec::new()),
            copy_lock: RwLock::new(()),
            stripes: ec::Stripes::default(),
        };
        cluster.adopt(vec![Extent {
            node: 0,
            addr: memnode.to_string(),
            base: 0,
            len: capacity,
            mirrors: Vec::new(),
            cap: None,
        }])?;
        Ok(cluster)
    }

    pub fn controller(&self) -> Option<&ControllerClient> {
        self.controller.as_ref()
    }

    /// Holds this client's grants on a lease (see
    /// [`ControllerClient::keep_lease`]).
    pub fn keep_lease(
        &self,
        length: Duration,
        on_lost: impl FnOnce(&NetError) + Send + 'static,
    ) -> Result<LeaseKeeper, NetError> {
        let ctl = self
            .controller
            .as_ref()
            .ok_or_else(|| NetError::Routing("a standalone cluster has no controller".into()))?;
        ctl.keep_lease(&self.cfg, length, self.issued.clone(), on_lost)
    }

    /// Allocates `size` bytes from the controller and connects to the nodes
    /// holding them. Under rs:K+M or stripe:K (see [`Self::set_redundancy`])
    /// the extents returned are logical: ranges from [`LOGICAL_BASE`] up
    /// that only this client's reads and writes understand.
    pub fn allocate(&self, size: u64, placement: Placement) -> Result<Vec<Extent>, NetError> {
        if let Some((k, m)) = self.redundancy().shards() {
            return self.allocate_stripes(size, placement, k, m);
        }
        let ctl = self
            .controller
            .as_ref()
            .ok_or_else(|| NetError::Routing("a standalone cluster cannot allocate".into()))?;
        let replicas = self.replicas.load(Ordering::Relaxed);
        let extents = ctl.alloc(size, placement, replicas)?;
        self.adopt(extents.clone())?;
        Ok(extents)
    }

    /// Every later allocation holds each byte on `n` distinct memory nodes
    /// (1 by default): writes reach every copy, reads fail over between them.
    pub fn set_replicas(&self, n: u8) {
        self.replicas.store(n.max(1), Ordering::Relaxed);
    }

    /// Gives an extent (or part of one), with its copies, back to the
    /// controller.
    pub fn release(&self, base: u64, len: u64) -> Result<(), NetError> {
        if ec::is_logical(base) {
            return self.release_stripes(base, len);
        }
        let end = base.saturating_add(len);
        let overlapping: Vec<Extent> = self
            .extents
            .read()
            .range(..end)
            .filter(|(b, e)| **b + e.len > base)
            .map(|(_, e)| e.clone())
            .collect();
        if let Some(ctl) = &self.controller {
            for e in &overlapping {
                let part = sub_extent(e, base.max(e.base), end.min(e.base + e.len));
                ctl.release(part.base, part.len)?;
                for m in &part.mirrors {
                    ctl.release(m.base, part.len)?;
                }
            }
        }
        let mut extents = self.extents.write();
        for e in overlapping {
            extents.remove(&e.base);
            if e.base < base {
                extents.insert(e.base, sub_extent(&e, e.base, base));
            }
            if e.base + e.len > end {
                extents.insert(end, sub_extent(&e, end, e.base + e.len));
            }
        }
        Ok(())
    }

    /// Starts using extents granted elsewhere (for instance to a previous
    /// runtime with the same name).
    pub fn adopt(&self, extents: Vec<Extent>) -> Result<(), NetError> {
        for e in extents {
            let e = self.adopt_copies(e)?;
            self.extents.write().insert(e.base, e);
        }
        Ok(())
    }

    /// Connects to the nodes of `e` and its mirrors and takes up their
    /// capabilities; returns `e` with each copy naming its slot.
    fn adopt_copies(&self, mut e: Extent) -> Result<Extent, NetError> {
        e.node = self.join(e.node, &e.addr, e.cap.as_ref())?;
        for m in &mut e.mirrors {
            m.node = self.join(m.node, &m.addr, m.cap.as_ref())?;
        }
        Ok(e)
    }

    /// The slot a new copy on `node` joins, holding its capability.
    fn join(&self, node: u32, addr: &str, cap: Option<&Cap>) -> Result<u32, NetError> {
        let slot = self.ensure_node(node, addr)?;
        if let (Some(cap), Some(n)) = (cap, self.nodes.read().get(&slot)) {
            n.add_cap(cap.clone());
            self.issued.write().push(cap.clone());
        }
        Ok(slot)
    }

    /// The extents this client holds, by address, naming memory nodes.
    pub fn extents(&self) -> Vec<Extent> {
        let mut extents: Vec<Extent> = self.extents.read().values().cloned().collect();
        let nodes = self.nodes.read();
        for e in &mut extents {
            e.node = nodes.node_of(e.node);
            for m in &mut e.mirrors {
                m.node = nodes.node_of(m.node);
            }
        }
        extents
    }

    /// The slot new copies on `node` join: its newest, or a new one with
    /// fresh connections when that was dropped (see the module docs).
    fn ensure_node(&self, node: u32, addr: &str) -> Result<u32, NetError> {
        if let Some(slot) = self.nodes.read().usable(node, addr) {
            return Ok(slot);
        }
        let cfg = self.path_cfg(node);
        let conns = (0..self.conns_per_node)
            .map(|_| Connection::connect(addr, &cfg))
            .collect::<Result<Vec<_>, _>>()?;
        let incarnation = conns[0].incarnation();
        if let Some(other) = conns.iter().find(|c| c.incarnation() != incarnation) {
            return Err(NetError::Routing(format!(
                "memory node {node} at {addr} restarted while we connected (incarnation {incarnation:#x} -> {:#x})",
                other.incarnation()
            )));
        }
        let slot = {
            let mut nodes = self.nodes.write();
            if let Some(slot) = nodes.usable(node, addr) {
                return Ok(slot);
            }
            let slot = nodes.next_slot;
            nodes.next_slot = slot.checked_add(1).ok_or_else(|| {
                NetError::Routing("this client has used up its memory node slots".into())
            })?;
            let caps = Arc::<RwLock<Vec<Cap>>>::default();
            for c in &conns {
                c.present_on_reopen(caps.clone());
            }
            nodes.slots.insert(
                slot,
                NodeConns {
                    id: node,
                    addr: addr.to_string(),
                    cfg,
                    conns: conns.into_iter().map(Mutex::new).collect(),
                    next: AtomicUsize::new(0),
                    readers: RwLock::new(Vec::new()),
                    incarnation,
                    restarted_as: AtomicU64::new(0),
                    lost: AtomicBool::new(false),
                    failing_since: Mutex::new(None),
                    failing: AtomicBool::new(false),
                    down: Mutex::new(None),
                    is_down: AtomicBool::new(false),
                    dropped_at: Mutex::new(None),
                    caps,
                },
            );
            nodes.current.insert(node, slot);
            slot
        };
        self.refresh_page_readers()?;
        Ok(slot)
    }

    /// Bytes of this client's copies on memory node `node`, in every slot.
    fn held_on(&self, node: u32) -> u64 {
        let slots: Vec<u32> = {
            let nodes = self.nodes.read();
            nodes
                .slots
                .iter()
                .filter(|(_, n)| n.id == node)
                .map(|(slot, _)| *slot)
                .collect()
        };
        let extents = self.extents.read();
        let copies = |e: &Extent| {
            u64::from(slots.contains(&e.node))
                + e.mirrors.iter().filter(|m| slots.contains(&m.node)).count() as u64
        };
        let copied: u64 = extents.values().map(|e| copies(e) * e.len).sum();
        copied + slots.iter().map(|&slot| self.shards_on(slot)).sum::<u64>()
    }

    /// Keeps slot `node`'s health from the outcome of a request to it: success
    /// ends its run of failures; a transient failure starts or continues
    /// one, and one that has lasted `fail_after` declares the node down.
    /// A lost or down node's errors say how much this client held there.
    fn settle<T>(&self, node: u32, result: Result<T, NetError>) -> Result<T, NetError> {
        let e = {
            let nodes = self.nodes.read();
            let Some(n) = nodes.get(&node) else {
                return result;
            };
            match result {
                Ok(v) => {
                    if n.failing.swap(false, Ordering::Relaxed) {
                        *n.failing_since.lock() = None;
                    }
                    return Ok(v);
                }
                Err(e) if e.is_transient() => {
                    let now = Instant::now();
                    // A request that timed out began failing when it was sent.
                    let began = match e {
                        NetError::Timeout(t) => now.checked_sub(t).unwrap_or(now),
                        _ => now,
                    };
                    let since = *n.failing_since.lock().get_or_insert(began);
                    n.failing.store(true, Ordering::Relaxed);
                    let waited = now.saturating_duration_since(since);
                    if waited < self.cfg.fail_after {
                        return Err(e);
                    }
                    // A node behind an injected delay may be up and slow:
                    // the cause says which delay held its requests.
                    let cause = match n.cfg.delay.as_ref().and_then(|d| d.in_force()) {
                        Some(delay) => format!("{e}; {delay}"),
                        None => e.to_string(),
                    };
                    *n.down.lock() = Some((waited, cause));
                    n.dropped_at.lock().get_or_insert(now);
                    n.is_down.store(true, Ordering::SeqCst);
                    n.check_lost().err().unwrap_or(e)
                }
                Err(e) => e,
            }
        };
        Err(self.with_held(e))
    }

    /// Passes on a memory node's answer to a request, noting a `Lost`
    /// refusal: the node restarted before we noticed, so no copy of ours
    /// in slot `node` is used again, as for a restart seen in its handshake.
    fn note_refusal(&self, node: u32, e: NetError) -> NetError {
        if let NetError::Remote {
            code: ErrorCode::Lost,
            ..
        } = e
            && let Some(n) = self.nodes.read().get(&node)
        {
            n.mark_lost();
        }
        e
    }

    /// Fills in how much this client held on a lost or down node.
    fn with_held(&self, e: NetError) -> NetError {
        match e {
            NetError::NodeLost {
                node,
                addr,
                was,
                now,
                ..
            } => NetError::NodeLost {
                node,
                addr,
                was,
                now,
                held: self.held_on(node),
            },
            NetError::NodeDown {
                node,
                addr,
                waited,
                cause,
                ..
            } => NetError::NodeDown {
                node,
                addr,
                waited,
                cause,
                held: self.held_on(node),
            },
            e => e,
        }
    }

    /// Keeps `per_node` [`PageReader`]s open to every memory node, now and
    /// as nodes are added; each holds one page-sized buffer.
    pub fn keep_page_readers(&self, per_node: usize) -> Result<(), NetError> {
        self.page_readers.store(per_node, Ordering::SeqCst);
        self.refresh_page_readers()
    }

    /// Opens missing page readers and replaces dead ones (a node that
    /// restarted, a reply that timed out).
    pub fn refresh_page_readers(&self) -> Result<(), NetError> {
        let want = self.page_readers.load(Ordering::SeqCst);
        if want == 0 {
            return Ok(());
        }
        let nodes = self.nodes.read();
        let mut first = Ok(());
        for n in nodes.values() {
            // A node that is failing is left to the ordinary path, which
            // judges it; its readers are reopened once it answers again.
            let unhealthy = n.dropped() || n.failing.load(Ordering::SeqCst);
            if !unhealthy && let Err(e) = self.refresh_readers_of(n, want) {
                first = first.and(Err(e));
            }
        }
        first
    }

    fn refresh_readers_of(&self, n: &NodeConns, want: usize) -> Result<(), NetError> {
        // Cheap when nothing broke (a filler calls this per fault it is
        // handed): a reader in use is alive, and is not waited for.
        let healthy = {
            let readers = n.readers.read();
            readers.len() >= want
                && readers
                    .iter()
                    .all(|r| r.try_lock().is_none_or(|r| r.is_alive()))
        };
        if healthy {
            return Ok(());
        }
        let connect = || {
            let mut reader = PageReader::connect(&n.addr, &n.cfg, PAGE_READ_MAX)?;
            n.check_incarnation(reader.incarnation())?;
            n.present(None, Some(&mut reader), &n.caps.read())?;
            Ok::<_, NetError>(reader)
        };
        let mut readers = n.readers.write();
        for r in readers.iter_mut() {
            let r = r.get_mut();
            if !r.is_alive() {
                *r = connect()?;
            }
        }
        while readers.len() < want {
            readers.push(Mutex::new(connect()?));
        }
        Ok(())
    }

    /// Reads `out` at `addr` through an idle page reader of its node,
    /// without allocating and without parking on a lock: what a fault
    /// served in a signal handler may call. `None` when that is not
    /// possible now (no reader kept, every reader busy, the tables being
    /// changed): the caller takes the ordinary path instead.
    pub fn read_without_allocating(
        &self,
        addr: u64,
        out: &mut [u8],
    ) -> Option<Result<(), PageReadError>> {
        if ec::is_logical(addr) {
            return self.ec_read_without_allocating(addr, out);
        }
        let extents = self.extents.try_read()?;
        let (_, e) = extents.range(..=addr).next_back()?;
        if addr.checked_add(out.len() as u64)? > e.base + e.len {
            return None;
        }
        let off = addr - e.base;
        let copies =
            std::iter::once((e.node, addr)).chain(e.mirrors.iter().map(|m| (m.node, m.base + off)));
        let nodes = self.nodes.try_read()?;
        let filling = self.filling.try_read()?;
        for (node, at) in copies {
            let n = nodes.get(&node)?;
            // Unhealthy copies are the ordinary path's to try and judge; a
            // copy still being filled is not read at all.
            if n.lost.load(Ordering::Relaxed)
                || n.is_down.load(Ordering::Relaxed)
                || n.failing.load(Ordering::Relaxed)
                || filling
                    .iter()
                    .any(|&(f, lo, hi)| f == node && (lo..hi).contains(&at))
            {
                continue;
            }
            let readers = n.readers.try_read()?;
            let mut reader = readers
                .iter()
                .filter_map(|r| r.try_lock())
                .find(|r| r.is_alive())?;
            return Some(reader.read(at, out));
        }
        None
    }

    /// The demand lane's connection to the first live copy of `addr`
    /// (the benches' reads). Requests sent on it reach that copy only.
    pub fn conn_for(&self, addr: u64, len: u64) -> Result<Connection, NetError> {
        self.node_conn(self.copies(addr, len, false)?[0].node, Lane::Demand)
    }

    fn node_conn(&self, slot: u32, lane: Lane) -> Result<Connection, NetError> {
        let nodes = self.nodes.read();
        let conns = nodes
            .get(&slot)
            .ok_or_else(|| NetError::Routing(format!("no connection in slot {slot}")))?;
        conns.pick(lane)
    }

    /// Sends `msg` to slot `node` in its lane, the node's health kept (see
    /// [`Self::settle`]).
    fn submit_to(&self, node: u32, msg: &Msg<'_>) -> Result<Ticket, NetError> {
        self.submit_in(node, msg, Lane::of(msg))
    }

    /// [`Self::submit_to`] in `lane`, which is also its class at the
    /// delay gate.
    fn submit_in(&self, node: u32, msg: &Msg<'_>, lane: Lane) -> Result<Ticket, NetError> {
        let traffic = match lane {
            Lane::Demand => farmem_policy::delay::Traffic::Demand,
            Lane::Bulk => farmem_policy::delay::Traffic::Bulk,
        };
        let sent = self
            .node_conn(node, lane)
            .and_then(|c| c.submit_as(msg, traffic));
        self.settle(node, sent)
    }

    /// Each connected memory node's statistics as JSON.
    pub fn memnode_stats(&self) -> Result<Vec<(u32, String)>, NetError> {
        let current: Vec<(u32, u32)> = {
            let nodes = self.nodes.read();
            nodes
                .current
                .iter()
                .map(|(&id, &slot)| (id, slot))
                .collect()
        };
        let mut out: Vec<(u32, String)> = current
            .into_iter()
            .map(|(id, slot)| stats_json(&self.node_conn(slot, Lane::Bulk)?).map(|s| (id, s)))
            .collect::<Result<_, _>>()?;
        out.sort();
        Ok(out)
    }

    pub(super) fn max_piece(&self) -> usize {
        let nodes = self.nodes.read();
        let limit = nodes
            .values()
            .flat_map(|n| n.conns.first())
            .map(|c| c.lock().max_payload())
            .min();
        // Keep pieces at a power-of-two size so page-aligned transfers stay aligned.
        let limit = limit.unwrap_or(1 << 20).max(4096);
        1 << (usize::BITS - 1 - limit.leading_zeros())
    }
}

/// The part [lo, hi) of `e` (inside it), with its mirrors' matching parts.
fn sub_extent(e: &Extent, lo: u64, hi: u64) -> Extent {
    let shift = lo - e.base;
    Extent {
        node: e.node,
        addr: e.addr.clone(),
        base: lo,
        len: hi - lo,
        // Still the grant's: a capability covers the whole of it.
        cap: e.cap.clone(),
        mirrors: e
            .mirrors
            .iter()
            .map(|m| farmem_wire::Mirror {
                base: m.base + shift,
                ..m.clone()
            })
            .collect(),
    }
}

/// Memory node connections wait no longer for a reply than it takes to
/// declare their node down.
impl Cluster {
    /// Each memory node's own delay gate, by node id, when paths are
    /// throttled ([`ClientConfig::path_delays`]).
    pub fn path_delays(&self) -> Vec<(u32, Arc<crate::delay::EgressDelay>)> {
        if self.node_cfg.path_delays.is_empty() {
            return Vec::new();
        }
        let nodes = self.nodes.read();
        let mut gates: Vec<_> = nodes
            .values()
            .filter_map(|n| Some((n.id, n.cfg.delay.clone()?)))
            .collect();
        gates.sort_by_key(|(id, _)| *id);
        gates
    }

    /// Bytes on the link and what link compression did, over every
    /// connection of this client (they share the config's counters).
    pub fn link_stats(&self) -> crate::compress::LinkSnapshot {
        self.node_cfg.link.stats.snapshot()
    }

    /// Every delay gate this client's requests pass: the link's one, or
    /// each path's; none when no delay is injected.
    pub fn delay_gates(&self) -> Vec<Arc<crate::delay::EgressDelay>> {
        if self.node_cfg.path_delays.is_empty() {
            return self.node_cfg.delay.iter().cloned().collect();
        }
        self.path_delays().into_iter().map(|(_, g)| g).collect()
    }

    /// The connection settings for memory node `node`: with a gate of its
    /// own when each path is throttled ([`ClientConfig::path_delays`]).
    fn path_cfg(&self, node: u32) -> ClientConfig {
        let mut cfg = self.node_cfg.clone();
        let models = &cfg.path_delays;
        if let Some(model) = models.get(node as usize % models.len().max(1)) {
            let gate = crate::delay::EgressDelay::new(model.clone(), u64::from(node));
            cfg.delay = Some(Arc::new(gate));
        }
        cfg
    }
}

fn node_cfg(cfg: &ClientConfig) -> ClientConfig {
    let mut node_cfg = cfg.clone();
    node_cfg.timeout = cfg.timeout.min(cfg.fail_after);
    node_cfg
}

/// Copies a read reply into `buf`.
pub fn read_reply_into(reply: &Reply, buf: &mut [u8]) -> Result<(), NetError> {
    copy_read_reply(reply, buf)
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("name", &self.cfg.name)
            .field("extents", &self.extents.read().len())
            .finish()
    }
}
