//! farmem rack controller: memory node membership and Remote-Balloon
//! allocation (UniMem §3.1, Kona §4's rack controller).
//!
//! Memory nodes register their capacity and heartbeat; each receives a
//! contiguous slice of one global remote address space. Compute nodes ask
//! for memory and receive exclusive extents from the [`extent`] tree, in
//! multiples of the hot-plug granularity (128 MiB by default), placed
//! round-robin or least-loaded. Before answering, the controller tells each
//! memory node about its new grants, so a compute node may use an extent the
//! moment it learns of it. With a state file (`state`) the table and the
//! leases survive a restart; a controller that cannot write its state file
//! refuses to start. A quota (`quota`) may cap what one client holds.
//!
//! A compute node may hold its grants on a lease (`Msg::Lease`): if it
//! sends nothing for the lease's length (it was killed, or its host is
//! gone), its grants are given back and revoked on the memory nodes, so a
//! crashed client cannot keep rack memory for good. Leases are kept in the
//! state file and, after a restart, each counts from the restart: a client
//! that died while the controller was down loses its grants one lease
//! length later (`leases`). Grants of a client that holds no lease stay
//! granted until released, across restarts too.
//!
//! Every extent handed to a client carries a capability ([`farmem_wire::Cap`])
//! the controller signs with a key derived from the cluster secret; memory
//! nodes serve a session only ranges it presented one for. Which sessions
//! may speak for a client name here is `names`' business.
//!
//! With `--state etcd://HOST:PORT/PREFIX` the state lives in etcd and
//! several controllers share it: one leads, the others stand by and refuse
//! with `NotLeader`, naming the leader, until its etcd lease runs out and
//! one of them takes over (`election`).
//!
//! An operator (the admin role) takes a memory node that is gone out of
//! the table (`remove`).

mod alloc;
mod answered;
mod election;
pub mod etcd;
pub mod extent;
mod leases;
#[doc(hidden)]
pub mod local_etcd;
pub mod lost;
mod metrics;
mod names;
mod quota;
mod remove;
mod state;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use farmem_core::sync::pause_unless_stopped;
use farmem_net::server::{Peer, Refusal, Server, ServerConfig, Service};
use farmem_net::{ClientConfig, Connection, NetError};
use farmem_wire::{Cap, ErrorCode, GrantKind, Msg, NodeInfo, Role, auth};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use answered::Answered;
pub use election::LEASE_TTL_S;
pub use etcd::EtcdUrl;
use extent::{ExtentTree, Grant, Placement};
use leases::{LeaseBook, Leases};
use lost::LostRanges;
pub use state::StateSpec;

/// How to run a controller.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    pub listen: String,
    /// Where the node and extent table is kept across restarts: a file,
    /// or etcd (shared with standby controllers).
    pub state: Option<StateSpec>,
    pub token: Vec<u8>,
    /// Grants are multiples of this (UniMem: the hot-plug granularity).
    pub granularity: u64,
    pub placement: Placement,
    /// A memory node silent for this long is marked down and gets no new grants.
    pub heartbeat_timeout: Duration,
    /// The most bytes one client name may hold (every copy counted).
    pub quota: Option<u64>,
    /// A session that sends nothing for this long is closed (`None`:
    /// never). Clients reopen it and prove their name again with their
    /// capabilities (see `names`).
    pub idle_timeout: Option<Duration>,
}

impl ControllerConfig {
    pub fn new(listen: impl Into<String>) -> Self {
        Self {
            listen: listen.into(),
            state: None,
            token: Vec::new(),
            granularity: extent::DEFAULT_GRANULARITY,
            placement: Placement::RoundRobin,
            heartbeat_timeout: Duration::from_secs(3),
            quota: None,
            idle_timeout: Some(farmem_net::server::DEFAULT_IDLE_TIMEOUT),
        }
    }
}

/// Why a controller could not start. Each names the error in its message
/// (none is a `source`, so a chain of contexts says it once).
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("cannot listen: {0}")]
    Listen(NetError),
    #[error("{0}")]
    Etcd(String),
    #[error("cannot read the state at {place}: {error}")]
    StateRead { place: String, error: String },
    #[error("cannot write the state at {place}: {error}")]
    StateWrite { place: String, error: String },
    #[error("the state at {place} is corrupt: {error}")]
    StateCorrupt {
        place: String,
        error: serde_json::Error,
    },
    #[error("another controller took the leadership")]
    NotLeader,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct NodeRecord {
    addr: String,
    base: u64,
    capacity: u64,
    up: bool,
    /// The node's incarnation when it last registered; another one means
    /// it restarted and its memory is empty.
    #[serde(default)]
    incarnation: u64,
    #[serde(skip)]
    last_seen: Option<Instant>,
}

#[derive(Clone, Serialize, Deserialize)]
struct Table {
    tree: ExtentTree,
    nodes: BTreeMap<u32, NodeRecord>,
    next_node: u32,
    /// Granted ranges whose bytes went with a restart of their node.
    #[serde(default)]
    lost: LostRanges,
    /// What the last requests of each client got, for a repeat.
    #[serde(default)]
    answered: Answered,
}

struct Shared {
    cfg: ControllerConfig,
    /// Where the state is saved, if anywhere.
    backend: Option<Arc<dyn state::Backend>>,
    /// Our part in the election, with the state in etcd; `None`: we lead.
    leadership: Option<Arc<election::Leadership>>,
    table: Mutex<Table>,
    /// Our connections to memory nodes, for pushing grants.
    links: Mutex<HashMap<u32, Connection>>,
    /// Clients holding their grants on a lease, and those whose lease ran
    /// out. Locked before `table` when both are needed.
    leases: Mutex<Leases>,
    /// The lease table as the state file keeps it; taken after every other
    /// lock, and updated under `leases` when a lease is taken, changed,
    /// ended or lapses.
    lease_book: Mutex<LeaseBook>,
    state_save_errors: AtomicU64,
    /// The last save failed: the next failure is not logged again.
    save_failing: AtomicBool,
    refused_quota: AtomicU64,
    grants_reclaimed: AtomicU64,
    bytes_reclaimed: AtomicU64,
    /// Sessions proven to speak for each client name.
    names: Mutex<names::Names>,
    /// The session that registered each memory node: only it may
    /// heartbeat for the node or take it out, so one node's key holder
    /// cannot mark another down.
    node_sessions: Mutex<HashMap<u32, u64>>,
    refused_role: AtomicU64,
    refused_name: AtomicU64,
    refused_capability: AtomicU64,
    server_stats: Mutex<Option<Arc<farmem_net::server::ServerStats>>>,
}

/// A snapshot of the controller's table, as `Stats` returns it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ControllerStats {
    pub nodes: u64,
    pub nodes_up: u64,
    pub capacity_bytes: u64,
    pub granted_bytes: u64,
    pub free_bytes: u64,
    pub grants: u64,
    pub granularity: u64,
    /// Clients holding their grants on a lease.
    pub leases: u64,
    /// Grants given back because their client's lease ran out, and their bytes.
    pub grants_reclaimed: u64,
    pub bytes_reclaimed: u64,
    /// Granted bytes whose memory node restarted after they were written:
    /// refused on access until their owners release them.
    pub lost_bytes: u64,
    /// Requests refused to a peer whose (proven) role may not make them.
    pub refused_role: u64,
    /// Requests refused to a session that claimed a client name without
    /// proving it (another live session holds it).
    pub refused_name: u64,
    /// Presented capabilities that were forged, tampered or not the session's.
    pub refused_capability: u64,
    /// Handshakes that claimed a role whose key they did not hold.
    pub refused_role_handshake: u64,
    /// Allocations refused for taking their client past `--quota`.
    #[serde(default)]
    pub refused_quota: u64,
    /// Saves of the state file that failed (see `state`).
    #[serde(default)]
    pub state_save_errors: u64,
    /// A standby controller (another leads, see `election`): it serves
    /// nothing but these statistics, whose table fields are then empty.
    #[serde(default)]
    pub standby: bool,
    /// Times this controller won the election and loaded the state.
    #[serde(default)]
    pub takeovers: u64,
    /// Every memory node, by id (empty on a standby).
    #[serde(default)]
    pub node_table: Vec<NodeStatus>,
    /// Every client holding grants or a lease, by name.
    #[serde(default)]
    pub clients: Vec<ClientStatus>,
}

/// One memory node, as `farmem status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub id: u32,
    pub addr: String,
    /// False once it missed its heartbeats: it gets no new grants.
    pub up: bool,
    /// Its incarnation when it last registered (new at every start).
    pub incarnation: u64,
    pub capacity_bytes: u64,
    pub granted_bytes: u64,
    /// Since its last heartbeat, in ms; none before its first to this
    /// controller.
    pub silent_ms: Option<u64>,
}

/// One client: what it holds, and its lease.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientStatus {
    pub name: String,
    pub grants: u64,
    pub granted_bytes: u64,
    /// What is left of its lease, in ms; none: no lease (its grants stay
    /// until it gives them back).
    pub lease_ms_left: Option<u64>,
}

/// The table's memory nodes, for [`ControllerStats::node_table`].
fn node_table(t: &Table) -> Vec<NodeStatus> {
    t.nodes
        .iter()
        .map(|(&id, n)| NodeStatus {
            id,
            addr: n.addr.clone(),
            up: n.up,
            incarnation: n.incarnation,
            capacity_bytes: t.tree.free_bytes(id) + t.tree.granted_bytes(id),
            granted_bytes: t.tree.granted_bytes(id),
            silent_ms: n.last_seen.map(|s| s.elapsed().as_millis() as u64),
        })
        .collect()
}

/// Each owner's grants, with what is left of the leases in `lease_left`,
/// for [`ControllerStats::clients`].
fn clients(t: &Table, lease_left: &BTreeMap<String, u64>) -> Vec<ClientStatus> {
    let mut by_name: BTreeMap<String, ClientStatus> = BTreeMap::new();
    for g in t.tree.grants() {
        let c = by_name.entry(g.owner.clone()).or_default();
        c.grants += 1;
        c.granted_bytes += g.len;
    }
    for (name, &left) in lease_left {
        by_name.entry(name.clone()).or_default().lease_ms_left = Some(left);
    }
    by_name
        .into_iter()
        .map(|(name, c)| ClientStatus { name, ..c })
        .collect()
}

impl Shared {
    fn new(cfg: ControllerConfig, table: Table) -> Self {
        Self::with_leases(cfg, table, Leases::default())
    }

    fn with_leases(cfg: ControllerConfig, table: Table, leases: Leases) -> Self {
        let fence = Arc::new(Mutex::new(None));
        let backend = cfg
            .state
            .as_ref()
            .map(|spec| state::backend(spec, fence.clone()));
        let leadership = match &cfg.state {
            Some(StateSpec::Etcd(url)) => Some(Arc::new(election::Leadership::new(
                etcd::Etcd::new(url, etcd::ETCD_TIMEOUT),
                fence,
            ))),
            _ => None,
        };
        Self {
            backend,
            leadership,
            cfg,
            table: Mutex::new(table),
            links: Mutex::new(HashMap::new()),
            lease_book: Mutex::new(leases.book()),
            leases: Mutex::new(leases),
            state_save_errors: AtomicU64::new(0),
            save_failing: AtomicBool::new(false),
            refused_quota: AtomicU64::new(0),
            grants_reclaimed: AtomicU64::new(0),
            bytes_reclaimed: AtomicU64::new(0),
            names: Mutex::new(names::Names::default()),
            node_sessions: Mutex::new(HashMap::new()),
            refused_role: AtomicU64::new(0),
            refused_name: AtomicU64::new(0),
            refused_capability: AtomicU64::new(0),
            server_stats: Mutex::new(None),
        }
    }

    fn link(&self, node: u32, addr: &str) -> Result<Connection, NetError> {
        if let Some(c) = self.links.lock().get(&node) {
            return Ok(c.clone());
        }
        let cfg =
            ClientConfig::new("controller", Role::Controller).with_token(self.cfg.token.clone());
        let conn = Connection::connect(addr, &cfg)?;
        // Only to the incarnation that registered: a node restarted since
        // would take grants whose capabilities name the old one, and lose
        // them when it registers (its memory is new).
        let registered = self.table.lock().nodes.get(&node).map(|n| n.incarnation);
        if let Some(registered) = registered
            && registered != conn.incarnation()
        {
            return Err(NetError::Routing(format!(
                "memory node {node} at {addr} answers as incarnation {:#x}, registered as {registered:#x}: it restarted and has not registered again, so nothing is granted on it until it does",
                conn.incarnation()
            )));
        }
        self.links.lock().insert(node, conn.clone());
        Ok(conn)
    }

    /// Sends one control message to a memory node, reconnecting once.
    fn push(&self, node: u32, addr: &str, msg: &Msg<'_>) -> Result<(), NetError> {
        let attempt = |conn: Connection| conn.call(msg).and_then(|r| r.done("grant"));
        match self.link(node, addr).and_then(attempt) {
            Err(e) if e.is_transient() => {
                self.links.lock().remove(&node);
                self.link(node, addr).and_then(attempt)
            }
            r => r,
        }
    }

    fn node_addr(&self, node: u32) -> Option<String> {
        self.table.lock().nodes.get(&node).map(|n| n.addr.clone())
    }

    /// Tells memory nodes about new grants, which they zero first;
    /// `stamps` name them in their capabilities.
    fn push_fresh(&self, grants: &[Grant], stamps: &[u64]) -> Result<(), (u32, NetError)> {
        let pieces = grants
            .iter()
            .zip(stamps)
            .map(|(g, &stamp)| (g, g.base, g.len, GrantKind::Fresh, stamp));
        self.push_pieces(pieces.collect())
    }

    /// The capability for grant `g` named `stamp`: what a memory node wants
    /// to see before serving `g`'s owner.
    fn issue_cap(&self, t: &Table, g: &Grant, stamp: u64) -> Cap {
        let mut cap = Cap {
            node: g.node,
            base: g.base,
            len: g.len,
            stamp,
            mac: [0; 32],
        };
        let incarnation = t.nodes.get(&g.node).map_or(0, |n| n.incarnation);
        cap.mac = auth::cap_mac(&self.cfg.token, &g.owner, &cap, incarnation);
        cap
    }

    /// Binds a session presenting a capability of its name (see [`names`]).
    fn present(&self, peer: &Peer, caps: &[Cap]) -> Result<(), Refusal> {
        if peer.role != Role::Compute {
            return Err(self.refuse_role(peer, "present capabilities"));
        }
        let t = self.table.lock();
        let issued = |c: &&Cap| {
            let incarnation = t.nodes.get(&c.node).map_or(0, |n| n.incarnation);
            auth::verify(
                &auth::cap_mac(&self.cfg.token, &peer.name, c, incarnation),
                &c.mac,
            )
        };
        // One capability issued to the name proves it; the others may be
        // void (their memory node restarted since) without harm.
        let proven = caps.is_empty() || caps.iter().any(|c| issued(&c));
        let refused = caps.iter().find(|c| !issued(c)).cloned();
        drop(t);
        if let Some(c) = refused.filter(|_| !proven) {
            self.refused_capability.fetch_add(1, Ordering::Relaxed);
            return Err(Refusal::new(
                ErrorCode::NoCapability,
                format!(
                    "the controller refused `{}` (session {} from {}): the capability for node {} [{:#x}, +{}) was not issued to it",
                    peer.name, peer.session, peer.addr, c.node, c.base, c.len
                ),
            ));
        }
        if !caps.is_empty() {
            self.names.lock().prove(&peer.name, peer.session);
        }
        Ok(())
    }

    /// Lets a request that acts for the peer's client name in only from a
    /// session proven to speak for it (see [`names`]).
    fn check_name(&self, peer: &Peer) -> Result<(), Refusal> {
        let mut names = self.names.lock();
        let holds = !self.table.lock().tree.grants_of(&peer.name).is_empty();
        if names.admit(&peer.name, peer.session, holds) {
            return Ok(());
        }
        self.refused_name.fetch_add(1, Ordering::Relaxed);
        Err(Refusal::new(
            ErrorCode::Unauthorized,
            format!(
                "the controller refused `{}` (session {} from {}): another live session holds that name and its grants; present one of its capabilities first",
                peer.name, peer.session, peer.addr
            ),
        ))
    }

    /// Tells a node that (re)registered what it holds: the pieces of each
    /// grant that are lost as lost, the rest as intact.
    fn resend(&self, grants: &[Grant]) -> Result<(), (u32, NetError)> {
        let t = self.table.lock();
        let mut pieces = Vec::new();
        for g in grants {
            for (base, len, lost) in t.lost.split(g.base, g.len) {
                let kind = if lost {
                    GrantKind::Lost
                } else {
                    GrantKind::Resend
                };
                pieces.push((g, base, len, kind, 0));
            }
        }
        drop(t);
        self.push_pieces(pieces)
    }

    fn push_pieces(
        &self,
        pieces: Vec<(&Grant, u64, u64, GrantKind, u64)>,
    ) -> Result<(), (u32, NetError)> {
        for (g, base, len, kind, stamp) in pieces {
            let addr = self.node_addr(g.node).unwrap_or_default();
            let grant = Msg::Grant {
                owner: &g.owner,
                base,
                len,
                kind,
                stamp,
            };
            self.push(g.node, &addr, &grant).map_err(|e| (g.node, e))?;
        }
        Ok(())
    }

    fn register(
        &self,
        listen: &str,
        capacity: u64,
        incarnation: u64,
    ) -> Result<(u32, u64), Refusal> {
        let mut t = self.table.lock();
        let existing = t
            .nodes
            .iter()
            .find(|(_, n)| n.addr == listen)
            .map(|(&id, n)| (id, n.clone()));
        let (id, base) = match existing {
            Some((id, n)) => {
                if n.capacity != capacity {
                    return Err(Refusal::new(
                        ErrorCode::BadRequest,
                        format!(
                            "{listen} registered before with {} bytes, now {capacity}; give it a new address",
                            n.capacity
                        ),
                    ));
                }
                if n.incarnation != incarnation {
                    let (grants, bytes) = t.lose_node(id);
                    if grants > 0 {
                        tracing::error!(
                            "memory node {id} at {listen} restarted (incarnation {:#x} -> {incarnation:#x}): the {grants} grants it held ({bytes} bytes) are lost; their owners are refused, never served zeros",
                            n.incarnation
                        );
                    }
                }
                (id, n.base)
            }
            None => {
                let id = t.next_node;
                let base = t.tree.next_free_base();
                t.tree
                    .add_node(id, base, capacity)
                    .map_err(|e| Refusal::new(ErrorCode::BadRequest, e.to_string()))?;
                t.next_node += 1;
                t.nodes.insert(
                    id,
                    NodeRecord {
                        addr: listen.to_string(),
                        base,
                        capacity,
                        up: true,
                        incarnation,
                        last_seen: None,
                    },
                );
                (id, base)
            }
        };
        t.tree.set_up(id, true);
        if let Some(n) = t.nodes.get_mut(&id) {
            n.up = true;
            n.incarnation = incarnation;
            n.last_seen = Some(Instant::now());
        }
        self.save(&t)?;
        Ok((id, base))
    }

    fn stats(&self) -> ControllerStats {
        let standby = !self.leading();
        let lease_left: BTreeMap<String, u64> = if standby {
            BTreeMap::new()
        } else {
            self.leases
                .lock()
                .held
                .iter()
                .map(|(name, l)| (name.clone(), l.left().as_millis() as u64))
                .collect()
        };
        let leases = lease_left.len() as u64;
        let table = self.table.lock();
        // A standby's table is the one it had when it last led, if ever.
        let empty = standby.then(|| Table::new(self.cfg.granularity));
        let t = empty.as_ref().unwrap_or(&table);
        let free: u64 = t.nodes.keys().map(|&id| t.tree.free_bytes(id)).sum();
        let granted: u64 = t.nodes.keys().map(|&id| t.tree.granted_bytes(id)).sum();
        ControllerStats {
            nodes: t.nodes.len() as u64,
            nodes_up: t.nodes.values().filter(|n| n.up).count() as u64,
            capacity_bytes: free + granted,
            granted_bytes: granted,
            free_bytes: free,
            grants: t.tree.grants().len() as u64,
            granularity: t.tree.granularity(),
            leases,
            grants_reclaimed: self.grants_reclaimed.load(Ordering::Relaxed),
            bytes_reclaimed: self.bytes_reclaimed.load(Ordering::Relaxed),
            lost_bytes: t.lost.bytes(),
            refused_role: self.refused_role.load(Ordering::Relaxed),
            refused_name: self.refused_name.load(Ordering::Relaxed),
            refused_capability: self.refused_capability.load(Ordering::Relaxed),
            refused_role_handshake: self
                .server_stats
                .lock()
                .as_ref()
                .map_or(0, |s| s.refused_role.get()),
            refused_quota: self.refused_quota.load(Ordering::Relaxed),
            state_save_errors: self.state_save_errors.load(Ordering::Relaxed),
            standby,
            takeovers: self
                .leadership
                .as_ref()
                .map_or(0, |l| l.takeovers.load(Ordering::Relaxed)),
            node_table: node_table(t),
            clients: clients(t, &lease_left),
        }
    }

    fn nodes(&self) -> Vec<NodeInfo> {
        let t = self.table.lock();
        t.nodes
            .iter()
            .map(|(&id, n)| NodeInfo {
                node: id,
                addr: n.addr.clone(),
                base: n.base,
                capacity: n.capacity,
                granted: t.tree.granted_bytes(id),
                up: n.up,
            })
            .collect()
    }

    /// Tells memory nodes that ranges freed in our table are no one's.
    fn revoke(&self, grants: &[Grant]) {
        for g in grants {
            let addr = self.node_addr(g.node).unwrap_or_default();
            let revoke = Msg::Revoke {
                base: g.base,
                len: g.len,
            };
            if let Err(e) = self.push(g.node, &addr, &revoke) {
                // The node keeps a stale grant until it re-registers; the
                // range is free in our table and will be re-granted there.
                tracing::warn!(
                    "cannot revoke [{:#x}, +{}) on node {}: {e}",
                    g.base,
                    g.len,
                    g.node
                );
            }
        }
    }

    /// Refuses a memory node's message about `node` from a session that
    /// did not register it.
    fn check_node_session(&self, peer: &Peer, node: u32) -> Result<(), Refusal> {
        if self.node_sessions.lock().get(&node) == Some(&peer.session) {
            return Ok(());
        }
        self.refused_role.fetch_add(1, Ordering::Relaxed);
        Err(Refusal::new(
            ErrorCode::Unauthorized,
            format!(
                "the controller refused `{}` at {}: node {node} was not registered on this session (register first)",
                peer.name, peer.addr
            ),
        ))
    }

    fn refuse_role(&self, peer: &Peer, what: &str) -> Refusal {
        self.refused_role.fetch_add(1, Ordering::Relaxed);
        Refusal::new(
            ErrorCode::Unauthorized,
            format!(
                "the controller refused `{}` ({} at {}): a {} peer may not {what}",
                peer.name,
                peer.role.name(),
                peer.addr,
                peer.role.name()
            ),
        )
    }
}

/// The server-facing handle; holds the table by `Arc` so handlers can hand
/// follow-up work (re-sending grants) to another thread.
struct ControllerService(Arc<Shared>);

impl Service for ControllerService {
    fn handle(&self, peer: &Peer, id: u64, msg: Msg<'_>, out: &mut Vec<u8>) -> Result<(), Refusal> {
        let shared = &self.0;
        shared.handle(peer, id, msg, out, &self.0)
    }

    fn disconnected(&self, peer: &Peer) {
        self.0.names.lock().disconnected(&peer.name, peer.session);
        self.0
            .node_sessions
            .lock()
            .retain(|_, session| *session != peer.session);
    }
}

impl Shared {
    fn handle(
        &self,
        peer: &Peer,
        id: u64,
        msg: Msg<'_>,
        out: &mut Vec<u8>,
        me: &Arc<Shared>,
    ) -> Result<(), Refusal> {
        if !matches!(msg, Msg::Stats) && !self.leading() {
            return Err(self.not_leader());
        }
        if peer.role == Role::Compute
            && matches!(
                msg,
                Msg::Alloc { .. } | Msg::Release { .. } | Msg::Lease { .. } | Msg::Remirror { .. }
            )
        {
            self.check_name(peer)?;
        }
        let admitted = self.admit(peer)?;
        let changes_table = matches!(
            msg,
            Msg::Alloc { .. } | Msg::Release { .. } | Msg::Remirror { .. }
        );
        let _admitted = if changes_table {
            Some(admitted)
        } else {
            drop(admitted);
            None
        };
        match msg {
            Msg::Register {
                listen,
                capacity,
                incarnation,
            } => {
                if peer.role != Role::MemNode {
                    return Err(self.refuse_role(peer, "register as a memory node"));
                }
                let (node, base) = self.register(listen, capacity, incarnation)?;
                self.node_sessions.lock().insert(node, peer.session);
                Msg::Registered { node, base }.encode(id, out);
                // A node that restarted or reconnected learns its grants again.
                let grants: Vec<Grant> = self
                    .table
                    .lock()
                    .tree
                    .grants()
                    .into_iter()
                    .filter(|g| g.node == node)
                    .collect();
                if !grants.is_empty() {
                    let me = me.clone();
                    thread::spawn(move || {
                        // Give the node a moment to read our reply first.
                        thread::sleep(Duration::from_millis(20));
                        if let Err((node, e)) = me.resend(&grants) {
                            tracing::warn!("cannot re-send grants to node {node}: {e}");
                        }
                    });
                }
            }
            Msg::Heartbeat { node, .. } => {
                if peer.role != Role::MemNode {
                    return Err(self.refuse_role(peer, "heartbeat"));
                }
                self.check_node_session(peer, node)?;
                let mut t = self.table.lock();
                let n = t.registered(node)?;
                n.last_seen = Some(Instant::now());
                if !n.up {
                    n.up = true;
                    t.tree.set_up(node, true);
                    tracing::info!("memory node {node} is back up");
                    self.save(&t)?;
                }
                Msg::Done.encode(id, out);
            }
            Msg::Leave { node } => {
                if peer.role != Role::MemNode {
                    return Err(self.refuse_role(peer, "take a memory node out"));
                }
                self.check_node_session(peer, node)?;
                let mut t = self.table.lock();
                // Down at once rather than after the heartbeat timeout:
                // no new grants, and clients fail over to other copies.
                t.registered(node)?.last_seen = None;
                t.set_down(node);
                tracing::info!("memory node {node} is stopping; marked down");
                self.save(&t)?;
                Msg::Done.encode(id, out);
            }
            Msg::RemoveNode { node, force } => {
                self.remove_node(peer, node, force)?;
                Msg::Done.encode(id, out);
            }
            Msg::Alloc {
                size,
                placement,
                replicas,
                parity,
                request,
            } => {
                if peer.role != Role::Compute {
                    return Err(self.refuse_role(peer, "allocate"));
                }
                let placement = match placement {
                    farmem_wire::Placement::Default => self.cfg.placement,
                    farmem_wire::Placement::RoundRobin => Placement::RoundRobin,
                    farmem_wire::Placement::LeastLoaded => Placement::LeastLoaded,
                };
                let replicas: usize = replicas.max(1).into();
                let parity = usize::from(parity);
                if parity > 0 && parity >= replicas {
                    return Err(Refusal::new(
                        ErrorCode::BadRequest,
                        format!(
                            "an erasure-coded stripe of {replicas} shards cannot have {parity} of parity: at least one must hold data"
                        ),
                    ));
                }
                self.check_quota(peer, size, replicas)?;
                let extents = self
                    .alloc(&peer.name, size, placement, replicas, request)
                    .map_err(|mut r| {
                        if parity > 0 {
                            let code = format!("rs:{}+{parity}", replicas - parity);
                            r.message = format!(
                                "{code} stripes need {replicas} shards on distinct memory nodes: {}",
                                r.message
                            );
                        }
                        r
                    })?;
                Msg::AllocOk { extents }.encode(id, out);
            }
            Msg::Remirror {
                base,
                len,
                request,
                avoid,
            } => {
                if peer.role != Role::Compute {
                    return Err(self.refuse_role(peer, "ask for another copy"));
                }
                let extent = self.remirror(&peer.name, base, len, &avoid, request)?;
                Msg::AllocOk {
                    extents: vec![extent],
                }
                .encode(id, out);
            }
            Msg::Release { base, len } => {
                if peer.role != Role::Compute {
                    return Err(self.refuse_role(peer, "release"));
                }
                let released = {
                    let mut t = self.table.lock();
                    let released = t
                        .tree
                        .release(&peer.name, base, len)
                        .map_err(|e| Refusal::new(ErrorCode::NotOwner, e.to_string()))?;
                    t.forget_lost(&released);
                    self.save(&t)?;
                    released
                };
                self.revoke(&released);
                Msg::Done.encode(id, out);
            }
            Msg::Lease { ms } => {
                self.take_lease(peer, ms)?;
                Msg::Done.encode(id, out);
            }
            Msg::Present { caps } => {
                self.present(peer, &caps)?;
                Msg::Done.encode(id, out);
            }
            Msg::ListNodes => Msg::NodesOk {
                nodes: self.nodes(),
            }
            .encode(id, out),
            Msg::Stats => farmem_net::server::reply_stats(id, &self.stats(), out),
            other => return Err(Refusal::unsupported("the controller", &other)),
        }
        Ok(())
    }
}

/// A running controller. Dropping it stops it.
pub struct Controller {
    server: Server,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    monitor: Option<JoinHandle<()>>,
    election: Option<JoinHandle<()>>,
}

impl Controller {
    /// Starts serving: at once with a state file or none, which it loads
    /// and writes back first; with etcd, as a standby that leads once
    /// elected (see `election`), after checking etcd answers.
    pub fn start(cfg: ControllerConfig) -> Result<Self, ControllerError> {
        let mut shared = Shared::new(cfg.clone(), Table::new(cfg.granularity));
        match (&shared.backend, &shared.leadership) {
            (_, Some(l)) => {
                l.etcd
                    .get(&l.etcd.key("leader"))
                    .map_err(|e| ControllerError::Etcd(e.to_string()))?;
            }
            (Some(backend), None) => {
                let (table, leases) = state::open(backend.as_ref(), cfg.granularity)?;
                shared = Shared::with_leases(cfg.clone(), table, leases);
            }
            (None, None) => {}
        }
        let shared = Arc::new(shared);
        let server_cfg = ServerConfig {
            token: cfg.token.clone(),
            idle_timeout: cfg.idle_timeout,
            ..ServerConfig::default()
        };
        let server = Server::start(
            &cfg.listen,
            server_cfg,
            Arc::new(ControllerService(shared.clone())),
        )
        .map_err(ControllerError::Listen)?;
        *shared.server_stats.lock() = Some(server.stats().clone());
        let stop = Arc::new(AtomicBool::new(false));
        let monitor = {
            let (shared, stop) = (shared.clone(), stop.clone());
            thread::Builder::new()
                .name("farmem-liveness".into())
                .spawn(move || liveness_loop(&shared, &stop))
                .expect("spawning the liveness thread")
        };
        let election = shared.leadership.as_ref().map(|l| {
            *l.me.lock() = server.local_addr().to_string();
            let (shared, stop) = (shared.clone(), stop.clone());
            thread::Builder::new()
                .name("farmem-election".into())
                .spawn(move || election::election_loop(&shared, &stop))
                .expect("spawning the election thread")
        });
        Ok(Self {
            server,
            shared,
            stop,
            monitor: Some(monitor),
            election,
        })
    }

    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.server.local_addr()
    }

    pub fn stats(&self) -> ControllerStats {
        self.shared.stats()
    }

    pub fn nodes(&self) -> Vec<NodeInfo> {
        self.shared.nodes()
    }

    /// True while this controller serves (always, without etcd).
    pub fn leading(&self) -> bool {
        self.shared.leading()
    }

    pub fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.server.shutdown();
        for h in [self.monitor.take(), self.election.take()]
            .into_iter()
            .flatten()
        {
            h.thread().unpark();
            let _ = h.join();
        }
        if let Some(l) = &self.shared.leadership {
            l.resign();
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn liveness_loop(shared: &Shared, stop: &AtomicBool) {
    let timeout = shared.cfg.heartbeat_timeout;
    let tick = (timeout / 4).max(Duration::from_millis(10));
    let mut last_tick = Instant::now();
    while !pause_unless_stopped(stop, tick) {
        if !shared.leading() {
            last_tick = Instant::now();
            continue;
        }
        let mut t = shared.table.lock();
        let late: Vec<u32> = t
            .nodes
            .iter()
            .filter(|(_, n)| n.up && n.last_seen.is_none_or(|s| s.elapsed() > timeout))
            .map(|(&id, _)| id)
            .collect();
        for id in &late {
            tracing::warn!("memory node {id} missed its heartbeats; marking it down");
            t.set_down(*id);
        }
        if !late.is_empty() {
            // Refused only once another leads: we stood down.
            let _ = shared.save(&t);
        }
        drop(t);
        // A tick far later than due: the controller itself was stalled.
        let stalled = last_tick.elapsed() > tick * 4 + Duration::from_secs(1);
        last_tick = Instant::now();
        shared.reclaim_lapsed(stalled);
    }
}

/// A controller's request handler without a server, liveness thread or
/// state file, handing out multiples of `granularity`. For fuzzing
/// `Service::handle` in-process: it still dials the memory nodes that
/// register with it to push grants, so give it loopback addresses only.
#[doc(hidden)]
pub fn service_for_fuzzing(granularity: u64) -> Arc<dyn Service> {
    let cfg = ControllerConfig {
        granularity,
        ..ControllerConfig::new("127.0.0.1:0")
    };
    let table = Table::new(cfg.granularity);
    Arc::new(ControllerService(Arc::new(Shared::new(cfg, table))))
}
