//! The rack controller as a compute node sees it: allocation, release,
//! the node list and statistics, and a lease kept alive by a thread.

use std::sync::Arc;
use std::time::Duration;

use farmem_wire::{Cap, Extent, Msg, NodeInfo, Placement};
use parking_lot::{Condvar, Mutex, RwLock};

use crate::{ClientConfig, Connection, NetError};

/// A client of the rack controller.
#[derive(Clone, Debug)]
pub struct ControllerClient {
    pub(super) conn: Connection,
    addr: String,
}

impl ControllerClient {
    pub fn connect(addr: &str, cfg: &ClientConfig) -> Result<Self, NetError> {
        Ok(Self {
            conn: Connection::connect(addr, cfg)?,
            addr: addr.to_string(),
        })
    }

    /// Takes or renews a lease of `length` once (see [`Self::keep_lease`]
    /// for one kept alive); a zero length ends it.
    pub fn lease(&self, length: Duration) -> Result<(), NetError> {
        lease_on(&self.conn, length)
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
        let conn = Connection::connect(&self.addr, &cfg)?;
        lease_on(&conn, length)?;
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let (addr, flag) = (self.addr.clone(), stop.clone());
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
                        _ => Connection::connect(&addr, &cfg).and_then(|c| {
                            present_to(&c, &proof.read())?;
                            renew(&c)?;
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
        };
        match self.conn.call(&alloc)?.msg()? {
            Msg::AllocOk { extents } => Ok(extents),
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
        stats_json(&self.conn)
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
