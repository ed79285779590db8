//! farmem memory node: serves its slice of the global remote address space.
//!
//! A memory node stores extents (lazily, see [`store`]), serves reads and
//! writes at any granularity and cache-line log batches (Kona's log
//! receiver: many (address, line) records applied in one message and
//! acknowledged once), and enforces ownership: a compute node may touch only
//! ranges the controller granted to it. The controller tells the node about
//! grants over its own authenticated connection (role `Controller`).
//!
//! The daemon is a library: tests start it in-process on port 0.

mod grants;
mod metrics;
pub mod store;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use farmem_core::Counter;
use farmem_core::sync::pause_unless_stopped;
use farmem_net::server::{Lent, Peer, PendingRead, Refusal, Server, ServerConfig, Service};
use farmem_net::{ClientConfig, Connection, NetError};
use farmem_wire::{Cap, ErrorCode, GrantKind, Msg, Role, auth};
use parking_lot::RwLock;
use serde::Serialize;

use grants::Grants;
use store::ChunkStore;

/// How to run a memory node.
#[derive(Debug, Clone)]
pub struct MemNodeConfig {
    /// Address to listen on; port 0 picks a free one.
    pub listen: String,
    /// Address the controller and compute nodes should dial; defaults to the
    /// bound address.
    pub advertise: Option<String>,
    pub capacity: u64,
    /// The controller to register with (`A,B,...`: several sharing their
    /// state in etcd, of which it registers with the leader and, when that
    /// one dies, with the next). Without one the node is standalone:
    /// its range starts at global address 0 and every authenticated compute
    /// node may touch all of it (for benchmarks and single-node tests).
    pub controller: Option<String>,
    pub token: Vec<u8>,
    pub heartbeat: Duration,
    pub max_frame: u32,
    /// A session that sends nothing for this long is closed (`None`:
    /// never). Clients reopen it transparently, presenting their
    /// capabilities again.
    pub idle_timeout: Option<Duration>,
    /// Delay injected on the way in (`farmem memnode --delay`): the
    /// lender's side of ThymesisFlow's injector.
    pub ingress_delay: Option<farmem_policy::delay::DelayModel>,
}

impl MemNodeConfig {
    pub fn new(listen: impl Into<String>, capacity: u64) -> Self {
        Self {
            listen: listen.into(),
            advertise: None,
            capacity,
            controller: None,
            token: Vec::new(),
            heartbeat: Duration::from_millis(500),
            max_frame: farmem_wire::DEFAULT_MAX_FRAME,
            idle_timeout: Some(farmem_net::server::DEFAULT_IDLE_TIMEOUT),
            ingress_delay: None,
        }
    }
}

/// Why a memory node could not start.
#[derive(Debug, thiserror::Error)]
pub enum MemNodeError {
    #[error("cannot listen: {0}")]
    Listen(NetError),
    /// The cause in the message only, as in [`NetError::Connect`].
    #[error("cannot register with the controller at {addr}: {cause}")]
    Register { addr: String, cause: NetError },
}

#[derive(Debug, Default)]
struct Counters {
    reads: Counter,
    writes: Counter,
    bytes_read: Counter,
    bytes_written: Counter,
    log_batches: Counter,
    log_lines: Counter,
    refused_not_owner: Counter,
    refused_out_of_range: Counter,
    refused_role: Counter,
    refused_lost: Counter,
    refused_too_long: Counter,
    refused_capability: Counter,
    caps_accepted: Counter,
    grants: Counter,
    revokes: Counter,
}

/// A snapshot of a memory node's counters, as `Stats` returns it.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct MemNodeStats {
    pub node: u32,
    /// Drawn at every start: a new one means this node's memory is new.
    pub incarnation: u64,
    pub base: u64,
    pub capacity: u64,
    pub resident_bytes: u64,
    pub granted_bytes: u64,
    /// Granted ranges held (pieces of separately stamped grants count
    /// apart).
    pub grants: u64,
    /// Grants the controller sent, re-sends included.
    pub grants_received: u64,
    /// Granted bytes whose data was lost when this node restarted.
    pub lost_bytes: u64,
    pub reads: u64,
    pub writes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub log_batches: u64,
    pub log_lines: u64,
    pub refused_not_owner: u64,
    pub refused_out_of_range: u64,
    pub refused_role: u64,
    /// Accesses to a lost range, refused instead of served as zeros.
    pub refused_lost: u64,
    /// Reads longer than one reply frame may carry.
    pub refused_too_long: u64,
    /// Accesses outside every capability the session presented, and
    /// presented capabilities that were forged, tampered with or not ours.
    pub refused_capability: u64,
    /// Capabilities presented and verified.
    pub caps_accepted: u64,
    /// Handshakes that claimed a role whose key they did not hold.
    pub refused_role_handshake: u64,
    pub connections: u64,
    pub protocol_errors: u64,
    pub auth_failures: u64,
    /// Page payloads of read replies and writes on the link (issue 23):
    /// as stored, and as they crossed, compressed or not. Zero from a
    /// node before link compression.
    #[serde(default)]
    pub link_read_raw_bytes: u64,
    #[serde(default)]
    pub link_read_wire_bytes: u64,
    #[serde(default)]
    pub link_write_raw_bytes: u64,
    #[serde(default)]
    pub link_write_wire_bytes: u64,
}

struct Shared {
    store: ChunkStore,
    /// Drawn at start; told to the controller and to every client.
    incarnation: u64,
    /// Where peers reach us, for messages.
    advertise: RwLock<String>,
    max_frame: u32,
    /// Global address of this node's first byte (assigned by the controller).
    base: AtomicU64,
    node: AtomicU32,
    standalone: bool,
    grants: RwLock<Grants>,
    /// The cluster secret, which capabilities are checked against.
    secret: Vec<u8>,
    /// Verified capabilities by session: a session is served only ranges
    /// it presented one for.
    caps: RwLock<HashMap<u64, Vec<Cap>>>,
    counters: Counters,
    server_stats: RwLock<Option<Arc<farmem_net::server::ServerStats>>>,
}

impl Shared {
    /// Translates a global range to a store offset after checking that
    /// `peer` owns all of it.
    fn authorize(&self, peer: &Peer, addr: u64, len: u64) -> Result<u64, Refusal> {
        if self.standalone {
            return self.in_range(addr, len);
        }
        self.authorize_under(peer, addr, len, &self.grants.read())
    }

    /// The store offset of a global range that lies on this node.
    fn in_range(&self, addr: u64, len: u64) -> Result<u64, Refusal> {
        let base = self.base.load(Ordering::Acquire);
        let offset = addr.checked_sub(base).filter(|off| {
            off.checked_add(len)
                .is_some_and(|end| end <= self.store.capacity())
        });
        offset.ok_or_else(|| {
            self.counters.refused_out_of_range.inc();
            Refusal::new(
                ErrorCode::OutOfRange,
                format!(
                    "[{addr:#x}, +{len}) is outside this node's range [{base:#x}, +{})",
                    self.store.capacity()
                ),
            )
        })
    }

    /// [`Self::authorize`] under `grants`, which the caller holds.
    fn authorize_under(
        &self,
        peer: &Peer,
        addr: u64,
        len: u64,
        grants: &Grants,
    ) -> Result<u64, Refusal> {
        let offset = self.in_range(addr, len)?;
        if self.standalone {
            return Ok(offset);
        }
        let grant = grants
            .holding(addr, len)
            .filter(|(_, g)| *g.owner == *peer.name);
        match grant {
            Some((_, g)) if g.lost => {
                self.counters.refused_lost.inc();
                Err(Refusal::new(
                    ErrorCode::Lost,
                    format!(
                        "[{addr:#x}, +{len}) of `{}` was lost: memory node {} at {} restarted (incarnation {:#x}) after it was written",
                        peer.name,
                        self.node.load(Ordering::Relaxed),
                        self.advertise.read(),
                        self.incarnation
                    ),
                ))
            }
            Some((gbase, g)) => {
                let stamp = g.stamp;
                let covered = self.caps.read().get(&peer.session).is_some_and(|caps| {
                    caps.iter()
                        .any(|c| c.stamp == stamp && c.base <= addr && addr + len <= c.base + c.len)
                });
                if covered {
                    return Ok(offset);
                }
                self.counters.refused_capability.inc();
                Err(Refusal::new(
                    ErrorCode::NoCapability,
                    format!(
                        "memory node {} refused `{}` (session {} from {}): no capability for [{addr:#x}, +{len}) of its grant at {gbase:#x}",
                        self.node.load(Ordering::Relaxed),
                        peer.name,
                        peer.session,
                        peer.addr
                    ),
                ))
            }
            None => {
                self.counters.refused_not_owner.inc();
                Err(Refusal::new(
                    ErrorCode::NotOwner,
                    format!(
                        "memory node {} at {} refused `{}`: [{addr:#x}, +{len}) is not granted to it",
                        self.node.load(Ordering::Relaxed),
                        self.advertise.read(),
                        peer.name,
                    ),
                ))
            }
        }
    }

    fn stats(&self) -> MemNodeStats {
        let grants = self.grants.read();
        let c = &self.counters;
        let server = self.server_stats.read().clone();
        let sv =
            |f: fn(&farmem_net::server::ServerStats) -> u64| server.as_deref().map(f).unwrap_or(0);
        MemNodeStats {
            node: self.node.load(Ordering::Relaxed),
            incarnation: self.incarnation,
            base: self.base.load(Ordering::Relaxed),
            capacity: self.store.capacity(),
            resident_bytes: self.store.resident_bytes(),
            granted_bytes: grants.entries().map(|g| g.len).sum(),
            grants: grants.len() as u64,
            grants_received: c.grants.get(),
            lost_bytes: grants.entries().filter(|g| g.lost).map(|g| g.len).sum(),
            reads: c.reads.get(),
            writes: c.writes.get(),
            bytes_read: c.bytes_read.get(),
            bytes_written: c.bytes_written.get(),
            log_batches: c.log_batches.get(),
            log_lines: c.log_lines.get(),
            refused_not_owner: c.refused_not_owner.get(),
            refused_out_of_range: c.refused_out_of_range.get(),
            refused_role: c.refused_role.get(),
            refused_lost: c.refused_lost.get(),
            refused_too_long: c.refused_too_long.get(),
            refused_capability: c.refused_capability.get(),
            caps_accepted: c.caps_accepted.get(),
            refused_role_handshake: sv(|s| s.refused_role.get()),
            connections: sv(|s| s.connections.get()),
            protocol_errors: sv(|s| s.protocol_errors.get()),
            auth_failures: sv(|s| s.auth_failures.get()),
            link_read_raw_bytes: sv(|s| s.link.read_raw_bytes.get()),
            link_read_wire_bytes: sv(|s| s.link.read_wire_bytes.get()),
            link_write_raw_bytes: sv(|s| s.link.write_raw_bytes.get()),
            link_write_wire_bytes: sv(|s| s.link.write_wire_bytes.get()),
        }
    }

    fn refuse_role(&self, peer: &Peer, what: &str) -> Refusal {
        self.counters.refused_role.inc();
        Refusal::new(
            ErrorCode::Unauthorized,
            format!(
                "memory node {} refused `{}` ({} at {}): a {} peer may not {what}",
                self.node.load(Ordering::Relaxed),
                peer.name,
                peer.role.name(),
                peer.addr,
                peer.role.name()
            ),
        )
    }

    /// Checks capabilities a session presents and keeps those whose grant
    /// is still in force. A forged or tampered one, or one issued to
    /// another client or for another node or incarnation, refuses them all.
    fn present(&self, peer: &Peer, caps: Vec<Cap>) -> Result<(), Refusal> {
        if peer.role != Role::Compute {
            return Err(self.refuse_role(peer, "present capabilities"));
        }
        if self.standalone {
            return Ok(());
        }
        let node = self.node.load(Ordering::Relaxed);
        let bad = caps.iter().find(|c| {
            c.node != node
                || !auth::verify(
                    &auth::cap_mac(&self.secret, &peer.name, c, self.incarnation),
                    &c.mac,
                )
        });
        if let Some(c) = bad {
            self.counters.refused_capability.inc();
            return Err(Refusal::new(
                ErrorCode::NoCapability,
                format!(
                    "memory node {node} refused `{}` (session {} from {}): the capability for node {} [{:#x}, +{}) was not issued to it for this node's incarnation {:#x}",
                    peer.name, peer.session, peer.addr, c.node, c.base, c.len, self.incarnation
                ),
            ));
        }
        self.counters.caps_accepted.add(caps.len() as u64);
        self.caps
            .write()
            .entry(peer.session)
            .or_default()
            .extend(caps);
        Ok(())
    }
}

impl Shared {
    /// Checks a read (role, length, ownership): its store offset.
    /// `grants`: held by the caller, or `None` to take them here.
    fn check_read(
        &self,
        peer: &Peer,
        addr: u64,
        len: u32,
        grants: Option<&Grants>,
    ) -> Result<u64, Refusal> {
        if peer.role != Role::Compute {
            return Err(self.refuse_role(peer, "read"));
        }
        // The reply must fit one frame: a read may not ask for a whole extent.
        let most = self.max_frame as usize - farmem_wire::HEADER_LEN;
        if len as usize > most {
            self.counters.refused_too_long.inc();
            return Err(Refusal::new(
                ErrorCode::BadRequest,
                format!("a read of {len} bytes is longer than one reply may carry ({most})"),
            ));
        }
        match grants {
            Some(g) => self.authorize_under(peer, addr, len.into(), g),
            None => self.authorize(peer, addr, len.into()),
        }
    }
}

impl Service for Shared {
    fn lends_reads(&self) -> bool {
        true
    }

    fn lend_reads<'s>(
        &'s self,
        peer: &Peer,
        reads: &[PendingRead],
        parts: &mut Vec<Lent<'s>>,
        answers: &mut Vec<Result<std::ops::Range<usize>, Refusal>>,
    ) {
        // The grants first and held while the pages are taken, as a grant
        // or revoke takes them before it zeroes pages: a read is answered
        // with the memory its check covered, and no revoke waits on a page
        // held here while this thread waits on the grants.
        let grants = self.grants.read();
        for r in reads {
            let start = parts.len();
            let lent = self
                .check_read(peer, r.addr, r.len, Some(&grants))
                .and_then(|offset| {
                    self.store
                        .lend(offset, r.len.into(), parts)
                        .map_err(|e| Refusal::new(ErrorCode::OutOfRange, e.to_string()))
                });
            if lent.is_ok() {
                self.counters.reads.inc();
                self.counters.bytes_read.add(r.len.into());
            }
            answers.push(lent.map(|()| start..parts.len()));
        }
    }

    fn handle(&self, peer: &Peer, id: u64, msg: Msg<'_>, out: &mut Vec<u8>) -> Result<(), Refusal> {
        match msg {
            Msg::Read { addr, len } => {
                let offset = self.check_read(peer, addr, len, None)?;
                // Encode the reply header, then read straight into the frame.
                farmem_wire::encode_frame(out, farmem_wire::Op::ReadOk as u8, id, |b| {
                    // Range was checked by authorize.
                    let _ = self.store.read_append(offset, len.into(), b);
                });
                self.counters.reads.inc();
                self.counters.bytes_read.add(len.into());
            }
            Msg::Write { addr, data } => {
                if peer.role != Role::Compute {
                    return Err(self.refuse_role(peer, "write"));
                }
                let offset = self.authorize(peer, addr, data.len() as u64)?;
                self.store
                    .write(offset, data)
                    .map_err(|e| Refusal::new(ErrorCode::OutOfRange, e.to_string()))?;
                self.counters.writes.inc();
                self.counters.bytes_written.add(data.len() as u64);
                Msg::Done.encode(id, out);
            }
            Msg::LogBatch { records } => {
                if peer.role != Role::Compute {
                    return Err(self.refuse_role(peer, "apply a log"));
                }
                // All or nothing: check every record before applying any, so a
                // refused batch leaves memory as it was and the sender can retry.
                let mut offsets = Vec::with_capacity(records.len());
                for rec in records.iter() {
                    offsets.push(self.authorize(peer, rec.addr, rec.line.len() as u64)?);
                }
                for (rec, offset) in records.iter().zip(offsets) {
                    self.store
                        .write(offset, rec.line)
                        .map_err(|e| Refusal::new(ErrorCode::OutOfRange, e.to_string()))?;
                }
                self.counters.log_batches.inc();
                self.counters.log_lines.add(records.len() as u64);
                self.counters
                    .bytes_written
                    .add((records.len() * farmem_wire::LINE_LEN) as u64);
                Msg::LogAck {
                    applied: records.len() as u32,
                }
                .encode(id, out);
            }
            Msg::Grant {
                owner,
                base,
                len,
                kind,
                stamp,
            } => {
                if peer.role != Role::Controller {
                    return Err(self.refuse_role(peer, "grant memory"));
                }
                let node_base = self.base.load(Ordering::Acquire);
                if base < node_base || base.saturating_add(len) > node_base + self.store.capacity()
                {
                    return Err(Refusal::new(
                        ErrorCode::OutOfRange,
                        format!("grant [{base:#x}, +{len}) is not on this node"),
                    ));
                }
                let mut grants = self.grants.write();
                if kind != GrantKind::Resend {
                    // New memory, or bytes that are gone: nothing of a
                    // previous owner's stays readable. Range checked above.
                    let _ = self.store.zero(base - node_base, len);
                }
                grants.grant(base, len, owner, kind, stamp);
                self.counters.grants.inc();
                Msg::Done.encode(id, out);
            }
            Msg::Revoke { base, len } => {
                if peer.role != Role::Controller {
                    return Err(self.refuse_role(peer, "revoke memory"));
                }
                let node_base = self.base.load(Ordering::Acquire);
                let offset = base.checked_sub(node_base).ok_or_else(|| {
                    Refusal::new(
                        ErrorCode::OutOfRange,
                        format!("revoke [{base:#x}, +{len}) is not on this node"),
                    )
                })?;
                let mut grants = self.grants.write();
                // Nobody owns the range any more: give its memory back.
                self.store
                    .zero(offset, len)
                    .map_err(|e| Refusal::new(ErrorCode::OutOfRange, e.to_string()))?;
                grants.cut(base, len);
                self.counters.revokes.inc();
                Msg::Done.encode(id, out);
            }
            Msg::Present { caps } => {
                self.present(peer, caps)?;
                Msg::Done.encode(id, out);
            }
            Msg::Stats => farmem_net::server::reply_stats(id, &self.stats(), out),
            other => return Err(Refusal::unsupported("a memory node", &other)),
        }
        Ok(())
    }

    fn disconnected(&self, peer: &Peer) {
        self.caps.write().remove(&peer.session);
    }
}

/// A running memory node. Dropping it stops it.
pub struct MemNode {
    server: Server,
    shared: Arc<Shared>,
    advertise: String,
    stop: Arc<AtomicBool>,
    /// Set by [`MemNode::leave`]: the heartbeat thread's last act is to
    /// tell the controller.
    leaving: Arc<AtomicBool>,
    heartbeat: Option<JoinHandle<()>>,
}

impl MemNode {
    pub fn start(cfg: MemNodeConfig) -> Result<Self, MemNodeError> {
        // Never 0, which clients read as "a server that holds no data".
        let incarnation = rand::random::<u64>() | 1;
        let shared = Arc::new(Shared {
            store: ChunkStore::new(cfg.capacity),
            incarnation,
            advertise: RwLock::new(cfg.listen.clone()),
            max_frame: cfg.max_frame,
            base: AtomicU64::new(0),
            node: AtomicU32::new(0),
            standalone: cfg.controller.is_none(),
            grants: RwLock::default(),
            secret: cfg.token.clone(),
            caps: RwLock::new(HashMap::new()),
            counters: Counters::default(),
            server_stats: RwLock::new(None),
        });
        let server_cfg = ServerConfig {
            token: cfg.token.clone(),
            max_frame: cfg.max_frame,
            incarnation,
            idle_timeout: cfg.idle_timeout,
            ingress_delay: cfg
                .ingress_delay
                .clone()
                .map(|m| Arc::new(farmem_net::delay::EgressDelay::new(m, incarnation))),
            // Pages move here: agree to whatever link compression a
            // client asks for (docs/daemon.md, "Link compression").
            link_compression: true,
            ..ServerConfig::default()
        };
        let server =
            Server::start(&cfg.listen, server_cfg, shared.clone()).map_err(MemNodeError::Listen)?;
        *shared.server_stats.write() = Some(server.stats().clone());
        let advertise = cfg
            .advertise
            .clone()
            .unwrap_or_else(|| server.local_addr().to_string());
        *shared.advertise.write() = advertise.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let leaving = Arc::new(AtomicBool::new(false));
        let heartbeat = match &cfg.controller {
            None => None,
            Some(ctl) => {
                let several = controller_addrs(ctl).len() > 1;
                let patience = if several {
                    FIND_LEADER_FOR
                } else {
                    Duration::ZERO
                };
                let link = register(ctl, &advertise, &cfg, &shared, patience).map_err(|cause| {
                    MemNodeError::Register {
                        addr: ctl.clone(),
                        cause,
                    }
                })?;
                let (shared, stop, leaving, cfg, ctl, advertise) = (
                    shared.clone(),
                    stop.clone(),
                    leaving.clone(),
                    cfg.clone(),
                    ctl.clone(),
                    advertise.clone(),
                );
                Some(
                    thread::Builder::new()
                        .name("farmem-heartbeat".into())
                        .spawn(move || {
                            let link = heartbeat_loop(link, &ctl, &advertise, &cfg, &shared, &stop);
                            if leaving.load(Ordering::SeqCst) {
                                leave(link, &ctl, &shared);
                            }
                        })
                        .expect("spawning the heartbeat thread"),
                )
            }
        };
        Ok(Self {
            server,
            shared,
            advertise,
            stop,
            leaving,
            heartbeat,
        })
    }

    /// The address peers should dial.
    pub fn addr(&self) -> &str {
        &self.advertise
    }

    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.server.local_addr()
    }

    pub fn node_id(&self) -> u32 {
        self.shared.node.load(Ordering::Relaxed)
    }

    pub fn stats(&self) -> MemNodeStats {
        self.shared.stats()
    }

    /// Stops serving and heartbeating; the controller will mark us down.
    pub fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.heartbeat.take() {
            h.thread().unpark();
            let _ = h.join();
        }
        self.server.shutdown();
    }

    /// Stops as an operator's SIGTERM asks: the controller is told first,
    /// so it marks the node down at once (no new grants; clients go to
    /// their other copies) instead of after its heartbeat timeout; then
    /// the node stops serving. A node that simply dies is found by the
    /// timeout, as before.
    pub fn leave(&mut self) {
        self.leaving.store(true, Ordering::SeqCst);
        self.shutdown();
    }
}

impl Drop for MemNode {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The controllers of `list` (`A,B,...`), blanks dropped.
fn controller_addrs(list: &str) -> Vec<&str> {
    list.split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .collect()
}

/// How long a memory node given several controllers waits at start for
/// one of them to be elected leader.
const FIND_LEADER_FOR: Duration = Duration::from_secs(15);

/// Registers with the controller of `ctls`, or with whichever of several
/// leads (a standby refuses with `NotLeader`); with several, tries again
/// for `patience` while none answers.
fn register(
    ctls: &str,
    advertise: &str,
    cfg: &MemNodeConfig,
    shared: &Shared,
    patience: Duration,
) -> Result<Connection, NetError> {
    let addrs = controller_addrs(ctls);
    let deadline = std::time::Instant::now() + patience;
    loop {
        let mut last = NetError::Routing(format!("no controller address in `{ctls}`"));
        for ctl in &addrs {
            match register_with(ctl, advertise, cfg, shared) {
                Ok(conn) => return Ok(conn),
                Err(e) if addrs.len() == 1 => return Err(e),
                Err(e) => last = e,
            }
        }
        if std::time::Instant::now() >= deadline {
            return Err(last);
        }
        thread::sleep(cfg.heartbeat.min(Duration::from_millis(200)));
    }
}

fn register_with(
    ctl: &str,
    advertise: &str,
    cfg: &MemNodeConfig,
    shared: &Shared,
) -> Result<Connection, NetError> {
    let client = ClientConfig::new(format!("memnode@{advertise}"), Role::MemNode)
        .with_token(cfg.token.clone());
    let conn = Connection::connect(ctl, &client)?;
    let reply = conn.call(&Msg::Register {
        listen: advertise,
        capacity: cfg.capacity,
        incarnation: shared.incarnation,
    })?;
    match reply.msg()? {
        Msg::Registered { node, base } => {
            shared.node.store(node, Ordering::Relaxed);
            shared.base.store(base, Ordering::Release);
            tracing::info!("registered with {ctl} as node {node}, global base {base:#x}");
            Ok(conn)
        }
        other => Err(NetError::Unexpected {
            request: "register",
            got: other.op(),
        }),
    }
}

/// Heartbeats until stopped; the connection it ends with (None if it was
/// stopped while the controller was away).
fn heartbeat_loop(
    mut link: Connection,
    ctl: &str,
    advertise: &str,
    cfg: &MemNodeConfig,
    shared: &Shared,
    stop: &AtomicBool,
) -> Option<Connection> {
    while !pause_unless_stopped(stop, cfg.heartbeat) {
        let used = shared.store.resident_bytes();
        let beat = Msg::Heartbeat {
            node: shared.node.load(Ordering::Relaxed),
            used,
        };
        if let Err(e) = link.call(&beat).and_then(|r| r.done("heartbeat")) {
            tracing::warn!("heartbeat to {ctl} failed: {e}; re-registering");
            // Keep trying until the controller is back or we are stopped.
            loop {
                if stop.load(Ordering::SeqCst) {
                    return None;
                }
                match register(ctl, advertise, cfg, shared, Duration::ZERO) {
                    Ok(conn) => {
                        link = conn;
                        break;
                    }
                    Err(e) => {
                        tracing::debug!("re-register with {ctl} failed: {e}");
                        pause_unless_stopped(stop, cfg.heartbeat);
                    }
                }
            }
        }
    }
    Some(link)
}

/// Tells the controller this node is stopping (`Msg::Leave`).
fn leave(link: Option<Connection>, ctl: &str, shared: &Shared) {
    let node = shared.node.load(Ordering::Relaxed);
    let told = link
        .ok_or_else(|| "the controller is unreachable".to_string())
        .and_then(|l| {
            l.call(&Msg::Leave { node })
                .and_then(|r| r.done("leave"))
                .map_err(|e| e.to_string())
        });
    match told {
        Ok(()) => tracing::info!("told {ctl} that node {node} is stopping"),
        Err(e) => tracing::warn!(
            "could not tell {ctl} that node {node} is stopping: {e}; it will mark it down when its heartbeats stop"
        ),
    }
}

/// A memory node's request handler without a server: `capacity` bytes at
/// global address `base`, registered (so grants from a `Controller` peer
/// decide who may touch what). For fuzzing `Service::handle` in-process.
#[doc(hidden)]
pub fn service_for_fuzzing(capacity: u64, base: u64) -> Arc<dyn Service> {
    Arc::new(Shared {
        store: ChunkStore::new(capacity),
        incarnation: 1,
        advertise: RwLock::new("fuzz".into()),
        secret: Vec::new(),
        caps: RwLock::new(HashMap::new()),
        max_frame: farmem_wire::DEFAULT_MAX_FRAME,
        base: AtomicU64::new(base),
        node: AtomicU32::new(0),
        standalone: false,
        grants: RwLock::default(),
        counters: Counters::default(),
        server_stats: RwLock::new(None),
    })
}
