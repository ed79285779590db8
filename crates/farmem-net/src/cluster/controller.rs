//! The rack controller as a compute node sees it: allocation, release,
//! the node list and statistics, and a lease kept alive by a thread.
//!
//! The controller may be several (`A,B`: controllers sharing their state
//! in etcd, one leading): requests go to the leader, and when it dies or a
//! standby answers `NotLeader`, the client finds the new leader among the
//! others, proves its name there with a capability it was issued, and
//! sends the request again ([`LeaderConn`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use farmem_wire::{Cap, ErrorCode, Extent, Msg, NodeInfo, Placement};
use parking_lot::{Condvar, Mutex, RwLock};

use crate::conn::Reply;
use crate::{ClientConfig, Connection, NetError};

/// How long a client looks for a new leader before giving up: a killed
/// leader's etcd lease (2 s) runs out and a standby loads the state well
/// within this.
const FIND_LEADER_FOR: Duration = Duration::from_secs(15);

/// The controllers of `list` (`A,B,...`), blanks dropped.
pub fn controller_addrs(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(String::from)
        .collect()
}

/// Names a request that may be sent twice (its reply lost, the leader
/// changed): the controller answers a repeat as it did the first time.
pub(super) fn request_number() -> u64 {
    rand::random::<u64>() | 1
}

/// A connection to whichever controller leads.
#[derive(Clone, Debug)]
pub(super) struct LeaderConn {
    addrs: Arc<[String]>,
    cfg: ClientConfig,
    conn: Arc<Mutex<Connection>>,
    /// Capabilities issued to us, shown to a new leader.
    proof: Arc<RwLock<Vec<Cap>>>,
}

fn is_not_leader(reply: &Result<Reply, NetError>) -> bool {
    match reply {
        Ok(r) => matches!(
            r.msg(),
            Err(NetError::Remote {
                code: ErrorCode::NotLeader,
                ..
            })
        ),
        Err(e) => matches!(
            e,
            NetError::Remote {
                code: ErrorCode::NotLeader,
                ..
            }
        ),
    }
}

/// Proves our name on `conn` (a new leader, or a session reopened after an
/// idle close, knows none of ours) with the capabilities we were issued,
/// and has a reopened `conn` prove it again: one of them suffices.
fn prove_on(conn: &Connection, proof: &Arc<RwLock<Vec<Cap>>>) {
    let _ = present_to(conn, &proof.read());
    conn.present_on_reopen(proof.clone());
}

/// Sends `msg` to each of `addrs` in turn, from `first`, until one that is
/// not a standby answers (an answer that is itself a refusal included);
/// tries again for `patience` while none does.
fn find_leader(
    addrs: &[String],
    first: usize,
    cfg: &ClientConfig,
    proof: &Arc<RwLock<Vec<Cap>>>,
    msg: &Msg<'_>,
    patience: Duration,
) -> Result<(Connection, Reply), NetError> {
    let deadline = Instant::now() + patience;
    loop {
        let mut last = None;
        for i in 0..addrs.len() {
            let addr = &addrs[(first + i) % addrs.len()];
            let conn = match Connection::connect(addr, cfg) {
                Ok(c) => c,
                Err(e) if e.is_transient() => {
                    last = Some(e);
                    continue;
                }
                Err(e) => return Err(e),
            };
            prove_on(&conn, proof);
            let reply = conn.call(msg);
            if is_not_leader(&reply) {
                last = reply.and_then(|r| r.msg().map(drop)).err();
                continue;
            }
            match reply {
                Ok(r) => return Ok((conn, r)),
                Err(e) if e.is_transient() => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        let err = last.unwrap_or_else(|| NetError::Routing("no controller address given".into()));
        if Instant::now() >= deadline {
            return Err(err);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl LeaderConn {
    /// Connects to the one controller of `list`, or finds the leader of
    /// several (asking each for the node list).
    fn connect(list: &str, cfg: &ClientConfig) -> Result<Self, NetError> {
        let addrs: Arc<[String]> = controller_addrs(list).into();
        let proof = Arc::<RwLock<Vec<Cap>>>::default();
        let conn = match &*addrs {
            [] => {
                return Err(NetError::Routing(format!(
                    "no controller address in `{list}`"
                )));
            }
            [one] => {
                let conn = Connection::connect(one, cfg)?;
                conn.present_on_reopen(proof.clone());
                conn
            }
            many => {
                let probe = Msg::ListNodes;
                find_leader(many, 0, cfg, &proof, &probe, FIND_LEADER_FOR)?.0
            }
        };
        Ok(Self {
            addrs,
            cfg: cfg.clone(),
            conn: Arc::new(Mutex::new(conn)),
            proof,
        })
    }

    /// Sends `msg` to the leader; with several controllers, one that died
    /// or stands by is replaced by the new leader and `msg` sent there.
    /// One controller that stops answering (restarted, its state saved) is
    /// dialled again, within [`FIND_LEADER_FOR`], and `msg` sent again:
    /// requests that grant are answered as the first time (see
    /// [`request_number`]).
    pub(super) fn call(&self, msg: &Msg<'_>) -> Result<Reply, NetError> {
        let mut tried = None;
        if self.addrs.len() < 2 {
            let conn = self.conn.lock().clone();
            let reply = conn.call(msg);
            if !reply.as_ref().is_err_and(NetError::is_transient) {
                return reply;
            }
            tried = Some((conn, reply));
        }
        // On a thread of its own: this may be a process's exit path (the
        // shim gives its memory back there), whose thread-locals, which
        // reopening a connection draws on, are already gone. Named as the
        // runtime's threads are, so the shim keeps its memory local.
        std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("farmem-ctl".into())
                .spawn_scoped(s, || {
                    crate::block_async_signals();
                    self.call_leader(msg, tried)
                })
                .map_err(NetError::Io)?
                .join()
                .map_err(|_| NetError::Routing("the controller call panicked".into()))?
        })
    }

    /// `msg` to the leader, after `tried`, the answer it gave already.
    fn call_leader(
        &self,
        msg: &Msg<'_>,
        tried: Option<(Connection, Result<Reply, NetError>)>,
    ) -> Result<Reply, NetError> {
        let (conn, reply) = tried.unwrap_or_else(|| {
            let conn = self.conn.lock().clone();
            let reply = conn.call(msg);
            (conn, reply)
        });
        let lost = is_not_leader(&reply) || reply.as_ref().is_err_and(NetError::is_transient);
        if !lost {
            return reply;
        }
        let at = self
            .addrs
            .iter()
            .position(|a| *a == conn.peer())
            .unwrap_or(0);
        let (conn, reply) = find_leader(
            &self.addrs,
            at + 1,
            &self.cfg,
            &self.proof,
            msg,
            FIND_LEADER_FOR,
        )?;
        tracing::info!("the controller at {} leads now", conn.peer());
        *self.conn.lock() = conn;
        Ok(reply)
    }

    /// Keeps the capabilities of `extents` to prove our name with later.
    fn remember(&self, extents: &[Extent]) {
        let caps = extents
            .iter()
            .flat_map(|e| e.cap.iter().chain(e.mirrors.iter().flat_map(|m| &m.cap)));
        let mut proof = self.proof.write();
        proof.extend(caps.cloned());
        // A handful is plenty: any one proves the name.
        let excess = proof.len().saturating_sub(64);
        proof.drain(..excess);
    }
}

/// A client of the rack controller (or of the leader among several).
#[derive(Clone, Debug)]
pub struct ControllerClient {
    pub(super) conn: LeaderConn,
    addr: String,
}

impl ControllerClient {
    /// Connects to the controller at `addr`, or to the leader of several
    /// given as `A,B,...`.
    pub fn connect(addr: &str, cfg: &ClientConfig) -> Result<Self, NetError> {
        Ok(Self {
            conn: LeaderConn::connect(addr, cfg)?,
            addr: addr.to_string(),
        })
    }

    /// Takes or renews a lease of `length` once (see [`Self::keep_lease`]
    /// for one kept alive); a zero length ends it.
    pub fn lease(&self, length: Duration) -> Result<(), NetError> {
        let ms = u32::try_from(length.as_millis()).unwrap_or(u32::MAX);
        self.conn.call(&Msg::Lease { ms })?.done("lease")
    }

    /// Holds this client's grants on a lease of `length`: should the client
    /// die without releasing them, the controller gives them back once it
    /// has heard nothing from it for that long. The lease is taken now and
    /// renewed every quarter of its length by a thread (`farmem-lease`) on
    /// a connection of its own, which it reopens if it breaks, so a live
    /// client keeps its memory across a broken connection; dropping the
    /// keeper ends the lease (the grants stay until released). A renewal
    /// that fails is tried again within a second. If the controller says
    /// the lease already ran out (the client was stopped for longer), its
    /// memory is gone: `on_lost` is called once and renewals stop.
    ///
    /// `proof` holds the capabilities issued to this client so far: a
    /// connection the keeper reopens presents them, since the controller
    /// lets a new session speak for a name that holds grants only once it
    /// proved it is that client.
    pub fn keep_lease(
        &self,
        cfg: &ClientConfig,
        length: Duration,
        proof: Arc<RwLock<Vec<Cap>>>,
        on_lost: impl FnOnce(&NetError) + Send + 'static,
    ) -> Result<LeaseKeeper, NetError> {
        let length = length.max(Duration::from_millis(4));
        let period = length / 4;
        // A renewal waits no longer than its period for an answer.
        let mut cfg = cfg.clone();
        cfg.timeout = cfg.timeout.min(period.max(Duration::from_millis(100)));
        let addrs = controller_addrs(&self.addr);
        let ms = u32::try_from(length.as_millis()).unwrap_or(u32::MAX);
        let patience = if addrs.len() > 1 {
            FIND_LEADER_FOR
        } else {
            Duration::ZERO
        };
        let (conn, reply) = find_leader(&addrs, 0, &cfg, &proof, &Msg::Lease { ms }, patience)?;
        reply.done("lease")?;
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("farmem-lease".into())
            .spawn(move || {
                crate::block_async_signals();
                let mut conn = Some(conn);
                let mut failing = false;
                let mut on_lost = Some(on_lost);
                loop {
                    let wait = if failing {
                        period.min(Duration::from_secs(1))
                    } else {
                        period
                    };
                    {
                        let (stopped, cv) = &*flag;
                        let mut stopped = stopped.lock();
                        if !*stopped {
                            cv.wait_for(&mut stopped, wait);
                        }
                        if *stopped {
                            break;
                        }
                    }
                    let renew = |c: &Connection| lease_on(c, length);
                    let result = match conn.as_ref().map(renew) {
                        Some(Ok(())) => Ok(()),
                        // A new connection, to the new leader if there
                        // are several; one patient round only, so a
                        // lapse is still reported on time.
                        _ => find_leader(&addrs, 0, &cfg, &proof, &Msg::Lease { ms }, period)
                            .and_then(|(c, reply)| {
                                reply.done("lease")?;
                                conn = Some(c);
                                Ok(())
                            }),
                    };
                    match result {
                        Ok(()) => failing = false,
                        Err(
                            e @ NetError::Remote {
                                code: farmem_wire::ErrorCode::NotOwner,
                                ..
                            },
                        ) => {
                            tracing::error!("our remote memory is gone: {e}");
                            if let Some(f) = on_lost.take() {
                                f(&e);
                            }
                            return;
                        }
                        Err(e) => {
                            conn = None;
                            if !failing {
                                tracing::warn!("cannot renew the lease on our remote memory: {e}");
                            }
                            failing = true;
                        }
                    }
                }
                if let Some(c) = conn {
                    let _ = lease_on(&c, Duration::ZERO);
                }
            })
            .map_err(NetError::Io)?;
        Ok(LeaseKeeper {
            stop,
            thread: Some(thread),
        })
    }

    /// Asks for `size` bytes (rounded up to the controller's granularity).
    pub fn alloc(
        &self,
        size: u64,
        placement: Placement,
        replicas: u8,
    ) -> Result<Vec<Extent>, NetError> {
        self.alloc_coded(size, placement, replicas, 0)
    }

    /// Asks for `size` bytes in sets of `shards` granules on distinct
    /// nodes, the last `parity` of each set for parity (see
    /// [`Msg::Alloc`]); `parity` 0 is [`Self::alloc`] with `shards` copies.
    pub fn alloc_coded(
        &self,
        size: u64,
        placement: Placement,
        shards: u8,
        parity: u8,
    ) -> Result<Vec<Extent>, NetError> {
        let alloc = Msg::Alloc {
            size,
            placement,
            replicas: shards,
            parity,
            request: request_number(),
        };
        match self.conn.call(&alloc)?.msg()? {
            Msg::AllocOk { extents } => {
                self.conn.remember(&extents);
                Ok(extents)
            }
            other => Err(NetError::Unexpected {
                request: "alloc",
                got: other.op(),
            }),
        }
    }

    pub fn release(&self, base: u64, len: u64) -> Result<(), NetError> {
        self.conn.call(&Msg::Release { base, len })?.done("release")
    }

    pub fn nodes(&self) -> Result<Vec<NodeInfo>, NetError> {
        match self.conn.call(&Msg::ListNodes)?.msg()? {
            Msg::NodesOk { nodes } => Ok(nodes),
            other => Err(NetError::Unexpected {
                request: "list nodes",
                got: other.op(),
            }),
        }
    }

    /// The controller's statistics as a JSON object.
    pub fn stats_json(&self) -> Result<String, NetError> {
        match self.conn.call(&Msg::Stats)?.msg()? {
            Msg::StatsOk { json } => Ok(json.to_string()),
            other => Err(NetError::Unexpected {
                request: "stats",
                got: other.op(),
            }),
        }
    }
}

/// Shows `caps` to the controller on `conn`, proving the session is the
/// client they were issued to.
fn present_to(conn: &Connection, caps: &[Cap]) -> Result<(), NetError> {
    if caps.is_empty() {
        return Ok(());
    }
    let present = Msg::Present {
        caps: caps.to_vec(),
    };
    conn.call(&present)?.done("present")
}

fn lease_on(conn: &Connection, length: Duration) -> Result<(), NetError> {
    let ms = u32::try_from(length.as_millis()).unwrap_or(u32::MAX);
    conn.call(&Msg::Lease { ms })?.done("lease")
}

/// Renews a lease until dropped (see [`ControllerClient::keep_lease`]).
pub struct LeaseKeeper {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl std::fmt::Debug for LeaseKeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LeaseKeeper")
    }
}

/// Asks any daemon for its statistics.
pub fn stats_json(conn: &Connection) -> Result<String, NetError> {
    match conn.call(&Msg::Stats)?.msg()? {
        Msg::StatsOk { json } => Ok(json.to_string()),
        other => Err(NetError::Unexpected {
            request: "stats",
            got: other.op(),
        }),
    }
}
