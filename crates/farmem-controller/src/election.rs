//! Leader election among the controllers sharing one etcd prefix
//! (`--state etcd://HOST:PORT/PREFIX`).
//!
//! Each controller listens from the start but serves only while it leads;
//! a standby refuses every request but `Stats` with
//! [`ErrorCode::NotLeader`], naming the leader, so clients and memory
//! nodes go there instead. To lead, a controller creates `PREFIX/leader`
//! (holding its address) in a transaction that succeeds only if the key
//! is absent, bound to an etcd lease of [`LEASE_TTL_S`] seconds that it
//! renews every quarter of that. A leader killed stops renewing: etcd
//! deletes the key when the lease runs out, and the next standby to poll
//! creates it, loads the state from etcd and serves.
//!
//! Fencing: every save is a transaction that writes only if the leader key
//! still exists in the life this controller created (its create revision),
//! so a leader that lost its lease without noticing (stopped, cut off)
//! writes nothing; the save that finds out makes it stand down, and the
//! change it was saving is refused, never pushed to a memory node. A
//! leader that cannot renew for most of the lease's length stands down on
//! its own, so it stops answering from a table that may be stale.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use farmem_net::server::Refusal;
use farmem_wire::ErrorCode;
use parking_lot::Mutex;

use crate::etcd::Etcd;
use crate::{Shared, state};

/// The leader's etcd lease: a killed leader is replaced about this long
/// (plus one poll) after its death.
pub const LEASE_TTL_S: u64 = 2;

/// This controller's part in the election.
pub(crate) struct Leadership {
    pub(crate) etcd: Etcd,
    /// The address we serve on, as written into the leader key.
    pub(crate) me: Mutex<String>,
    leading: AtomicBool,
    /// The leader key's create revision while we lead (the state
    /// backend's fence), shared with [`state::EtcdBackend`].
    pub(crate) fence: Arc<Mutex<Option<i64>>>,
    /// Our etcd lease while we lead.
    lease: Mutex<Option<i64>>,
    /// The leader's address as last read, for standby refusals.
    leader_at: Mutex<Option<String>>,
    pub(crate) takeovers: AtomicU64,
}

impl Leadership {
    pub(crate) fn new(etcd: Etcd, fence: Arc<Mutex<Option<i64>>>) -> Self {
        Self {
            etcd,
            me: Mutex::new(String::new()),
            leading: AtomicBool::new(false),
            fence,
            lease: Mutex::new(None),
            leader_at: Mutex::new(None),
            takeovers: AtomicU64::new(0),
        }
    }

    pub(crate) fn leading(&self) -> bool {
        self.leading.load(Ordering::SeqCst)
    }

    /// Gives the leadership back to etcd at once (a clean shutdown), so a
    /// standby need not wait for the lease to run out.
    pub(crate) fn resign(&self) {
        self.leading.store(false, Ordering::SeqCst);
        *self.fence.lock() = None;
        if let Some(lease) = self.lease.lock().take() {
            let _ = self.etcd.revoke(lease);
        }
    }
}

impl Shared {
    /// True unless this is a standby (a controller without etcd always leads).
    pub(crate) fn leading(&self) -> bool {
        self.leadership.as_ref().is_none_or(|l| l.leading())
    }

    /// The refusal a standby answers with.
    pub(crate) fn not_leader(&self) -> Refusal {
        let Some(l) = &self.leadership else {
            return Refusal::new(ErrorCode::Internal, "not the leader".to_string());
        };
        let me = l.me.lock().clone();
        let message = match l.leader_at.lock().clone().filter(|at| *at != me) {
            Some(at) => format!("controller {me} is not the leader; the leader is at {at}"),
            None => format!("controller {me} is not the leader; no leader is elected yet"),
        };
        Refusal::new(ErrorCode::NotLeader, message)
    }

    /// Stops serving: another controller leads, or may.
    pub(crate) fn stand_down(&self, why: &str) {
        if let Some(l) = &self.leadership
            && l.leading.swap(false, Ordering::SeqCst)
        {
            tracing::warn!("controller {} stands down: {why}", l.me.lock());
            l.resign();
        }
    }

    /// Won the election with `lease`, the key made at `rev`: loads the
    /// state from etcd, confirms it can write it, and serves.
    fn take_over(&self, l: &Leadership, lease: i64, rev: i64) -> Result<(), String> {
        *l.lease.lock() = Some(lease);
        *l.fence.lock() = Some(rev);
        let backend = self.backend.as_deref().ok_or("no state backend")?;
        let (table, leases) =
            state::open(backend, self.cfg.granularity).map_err(|e| e.to_string())?;
        {
            let mut held = self.leases.lock();
            let mut t = self.table.lock();
            *self.lease_book.lock() = leases.book();
            *held = leases;
            *t = table;
        }
        self.links.lock().clear();
        *self.names.lock() = Default::default();
        l.takeovers.fetch_add(1, Ordering::Relaxed);
        l.leading.store(true, Ordering::SeqCst);
        let me = l.me.lock().clone();
        *l.leader_at.lock() = Some(me.clone());
        tracing::warn!("controller {me} leads (leader key revision {rev})");
        Ok(())
    }

    /// One round as a standby: take the leadership if nobody holds it.
    fn campaign(&self, l: &Leadership) -> Result<(), String> {
        let key = l.etcd.key("leader");
        if let Some(kv) = l.etcd.get(&key).map_err(|e| e.to_string())? {
            *l.leader_at.lock() = Some(String::from_utf8_lossy(&kv.value).into_owned());
            return Ok(());
        }
        let lease = l.etcd.grant(LEASE_TTL_S).map_err(|e| e.to_string())?;
        let me = l.me.lock().clone();
        match l.etcd.create(&key, me.as_bytes(), lease) {
            Ok(Ok(rev)) => self.take_over(l, lease, rev).inspect_err(|_| l.resign()),
            Ok(Err(holder)) => {
                let _ = l.etcd.revoke(lease);
                *l.leader_at.lock() =
                    holder.map(|kv| String::from_utf8_lossy(&kv.value).into_owned());
                Ok(())
            }
            Err(e) => {
                let _ = l.etcd.revoke(lease);
                Err(e.to_string())
            }
        }
    }

    /// One renewal as the leader; stands down once the lease is gone or
    /// could not be renewed for most of its length.
    fn renew(&self, l: &Leadership, last_ok: &mut Instant) {
        let Some(lease) = *l.lease.lock() else {
            return self.stand_down("no lease");
        };
        match l.etcd.keep_alive(lease) {
            Ok(ttl) if ttl > 0 => *last_ok = Instant::now(),
            Ok(_) => self.stand_down("its etcd lease ran out"),
            Err(e) => {
                let ttl = Duration::from_secs(LEASE_TTL_S);
                if last_ok.elapsed() > ttl * 3 / 4 {
                    self.stand_down(&format!("cannot renew its etcd lease: {e}"));
                }
            }
        }
    }
}

/// Campaigns while standing by and renews while leading, until `stop`.
pub(crate) fn election_loop(shared: &Shared, stop: &AtomicBool) {
    let Some(l) = shared.leadership.as_deref() else {
        return;
    };
    let period = Duration::from_secs(LEASE_TTL_S) / 4;
    let mut last_ok = Instant::now();
    let mut failing = false;
    while !stop.load(Ordering::SeqCst) {
        if shared.leading() {
            shared.renew(l, &mut last_ok);
        } else {
            match shared.campaign(l) {
                Ok(()) => failing = false,
                Err(e) => {
                    if !failing {
                        tracing::warn!("controller election at {}: {e}", l.etcd.endpoint());
                    }
                    failing = true;
                }
            }
            last_ok = Instant::now();
        }
        thread::sleep(period);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local_etcd::EtcdProcess;
    use crate::state::{Backend, EtcdBackend, SaveError};
    use crate::{Controller, ControllerConfig, StateSpec};

    fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn a_write_fenced_on_an_old_leader_key_writes_nothing() {
        let Some(etcd) = EtcdProcess::start("fence-backend") else {
            return;
        };
        let client = etcd.client("fb");
        let leader = client.key("leader");
        let lease = client.grant(LEASE_TTL_S).unwrap();
        let old = client.create(&leader, b"old", lease).unwrap().unwrap();
        let backend = EtcdBackend {
            etcd: etcd.client("fb"),
            url: etcd.url("fb"),
            fence: Arc::new(Mutex::new(Some(old))),
        };
        backend.store(b"from the old leader").unwrap();
        // Its lease runs out (revoked here); another controller leads.
        client.revoke(lease).unwrap();
        let lease = client.grant(LEASE_TTL_S).unwrap();
        let new = client.create(&leader, b"new", lease).unwrap().unwrap();
        assert_ne!(new, old);
        let fresh = EtcdBackend {
            etcd: etcd.client("fb"),
            url: etcd.url("fb"),
            fence: Arc::new(Mutex::new(Some(new))),
        };
        fresh.store(b"from the new leader").unwrap();
        assert!(matches!(backend.store(b"stale"), Err(SaveError::NotLeader)));
        let state = client.get(&client.key("state")).unwrap().unwrap();
        assert_eq!(state.value, b"from the new leader");
        assert_eq!(backend.load().unwrap().unwrap(), b"from the new leader");
    }

    #[test]
    fn a_leader_that_lost_its_lease_stands_down_and_cannot_save() {
        let Some(etcd) = EtcdProcess::start("fence-ctl") else {
            return;
        };
        let mut cfg = ControllerConfig::new("127.0.0.1:0");
        cfg.granularity = 1 << 20;
        cfg.state = Some(StateSpec::Etcd(etcd.url("fc")));
        let a = Controller::start(cfg.clone()).unwrap();
        wait_for("a to lead", || a.leading());
        let b = Controller::start(cfg).unwrap();
        thread::sleep(Duration::from_millis(700));
        assert!(!b.leading(), "one leader at a time");
        assert!(b.stats().standby);
        let client = etcd.client("fc");
        let held = client.get(&client.key("leader")).unwrap().unwrap();
        assert_eq!(held.value, a.local_addr().to_string().as_bytes());
        // A's lease ends behind its back (as if it had been stopped).
        client.revoke(held.lease).unwrap();
        wait_for("b to take over", || b.leading());
        let state = client.get(&client.key("state")).unwrap().unwrap();
        let t = a.shared.table.lock().clone();
        assert!(
            a.shared.save(&t).is_err(),
            "a stale leader's save is refused"
        );
        assert!(!a.leading());
        let after = client.get(&client.key("state")).unwrap().unwrap();
        assert_eq!(after.mod_revision, state.mod_revision, "a wrote nothing");
        assert_eq!(b.stats().takeovers, 1);
        let now = client.get(&client.key("leader")).unwrap().unwrap();
        assert_eq!(now.value, b.local_addr().to_string().as_bytes());
    }
}
