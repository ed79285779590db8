//! Clients' leases: a compute node may hold its grants on a lease
//! (`Msg::Lease`); if it sends nothing for the lease's length, its grants
//! are given back and revoked on the memory nodes, and its name is refused
//! from then on.
//!
//! The lease table is kept in the state file ([`LeaseBook`]: each held
//! lease's length, and the lapsed names) but not when each was last
//! renewed: on load, every lease starts counting from the restart. A live
//! client renews within a quarter of its length, so it keeps its memory; one
//! that died while the controller was down never comes back, and its grants
//! are reclaimed one lease length after the restart.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use farmem_net::server::{Peer, Refusal};
use farmem_wire::{ErrorCode, Role};
use serde::{Deserialize, Serialize};

use crate::Shared;
use crate::extent::Grant;

/// How long a client's grants outlive its silence, and when it last spoke.
pub(crate) struct Lease {
    length: Duration,
    renewed: Instant,
}

impl Lease {
    /// What is left of it before the client's grants are given back.
    pub(crate) fn left(&self) -> Duration {
        self.length.saturating_sub(self.renewed.elapsed())
    }
}

/// Most lapsed clients remembered (each refused from then on).
const LAPSED_REMEMBERED: usize = 1 << 16;

#[derive(Default)]
pub(crate) struct Leases {
    pub(crate) held: HashMap<String, Lease>,
    /// Clients whose grants were given back: their requests are refused,
    /// so a client that was only stopped learns its memory is gone
    /// instead of being handed more.
    lapsed: HashSet<String>,
    lapsed_order: VecDeque<String>,
}

/// What the state file keeps of the lease table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LeaseBook {
    /// Each client holding a lease, and its length in milliseconds.
    #[serde(default)]
    pub(crate) held: BTreeMap<String, u64>,
    /// Clients whose lease ran out, oldest first.
    #[serde(default)]
    pub(crate) lapsed: Vec<String>,
}

impl Leases {
    fn lapse(&mut self, name: String) {
        self.held.remove(&name);
        if self.lapsed.insert(name.clone()) {
            self.lapsed_order.push_back(name);
        }
        while self.lapsed_order.len() > LAPSED_REMEMBERED {
            if let Some(old) = self.lapsed_order.pop_front() {
                self.lapsed.remove(&old);
            }
        }
    }

    /// The leases as the state file keeps them.
    pub(crate) fn book(&self) -> LeaseBook {
        LeaseBook {
            held: self
                .held
                .iter()
                .map(|(name, l)| {
                    let ms = u64::try_from(l.length.as_millis()).unwrap_or(u64::MAX);
                    (name.clone(), ms)
                })
                .collect(),
            lapsed: self.lapsed_order.iter().cloned().collect(),
        }
    }

    /// The leases of a state file, each counting from `now`. A lease of
    /// length 0 (none) is skipped.
    pub(crate) fn from_book(book: &LeaseBook, now: Instant) -> Self {
        let mut leases = Leases::default();
        for name in &book.lapsed {
            leases.lapse(name.clone());
        }
        for (name, &ms) in &book.held {
            if ms > 0 && !leases.lapsed.contains(name) {
                let lease = Lease {
                    length: Duration::from_millis(ms),
                    renewed: now,
                };
                leases.held.insert(name.clone(), lease);
            }
        }
        leases
    }
}

impl Shared {
    /// Takes, renews (with a new length) or ends (`ms` 0) `peer`'s lease,
    /// saving the state when its length changed.
    pub(crate) fn take_lease(&self, peer: &Peer, ms: u32) -> Result<(), Refusal> {
        if peer.role != Role::Compute {
            return Err(self.refuse_role(peer, "hold a lease"));
        }
        let mut leases = self.leases.lock();
        let length = Duration::from_millis(ms.into());
        let changed = if ms == 0 {
            leases.held.remove(&peer.name).is_some()
        } else {
            let old = leases.held.insert(
                peer.name.clone(),
                Lease {
                    length,
                    renewed: Instant::now(),
                },
            );
            old.is_none_or(|l| l.length != length)
        };
        if changed {
            *self.lease_book.lock() = leases.book();
            self.save(&self.table.lock())?;
        }
        Ok(())
    }

    /// Gives back the grants of every client whose lease ran out. After a
    /// stall of the controller itself (`stalled`), every lease starts over
    /// instead: their renewals were waiting on us.
    pub(crate) fn reclaim_lapsed(&self, stalled: bool) {
        // Held until the memory nodes are told: requests that change the
        // table wait for it, so no range freed here is granted again, and
        // pushed to its node, before its revocation (which would wipe the
        // new grant).
        let mut leases = self.leases.lock();
        if stalled {
            let now = Instant::now();
            leases.held.values_mut().for_each(|l| l.renewed = now);
            return;
        }
        let lapsed: Vec<(String, Duration)> = leases
            .held
            .iter()
            .filter(|(_, l)| l.renewed.elapsed() > l.length)
            .map(|(name, l)| (name.clone(), l.length))
            .collect();
        if lapsed.is_empty() {
            return;
        }
        let released: Vec<(String, Duration, Vec<Grant>)> = {
            let mut t = self.table.lock();
            let released = lapsed
                .into_iter()
                .map(|(owner, length)| {
                    let grants = t.tree.release_owner(&owner);
                    t.forget_lost(&grants);
                    leases.lapse(owner.clone());
                    (owner, length, grants)
                })
                .collect();
            *self.lease_book.lock() = leases.book();
            if self.save(&t).is_err() {
                // Another controller leads: its memory nodes are not ours
                // to revoke on.
                return;
            }
            released
        };
        for (owner, length, grants) in released {
            self.log_reclaimed(&owner, length, &grants);
            self.revoke(&grants);
        }
    }

    fn log_reclaimed(&self, owner: &str, length: Duration, grants: &[Grant]) {
        use std::sync::atomic::Ordering;
        if grants.is_empty() {
            tracing::info!(
                "client {owner} was silent for its lease of {length:?}; it held nothing"
            );
            return;
        }
        let bytes: u64 = grants.iter().map(|g| g.len).sum();
        self.grants_reclaimed
            .fetch_add(grants.len() as u64, Ordering::Relaxed);
        self.bytes_reclaimed.fetch_add(bytes, Ordering::Relaxed);
        tracing::warn!(
            "client {owner} was silent for its lease of {length:?}; gave back its {} grants ({bytes} bytes)",
            grants.len()
        );
    }

    /// Lets a compute client's request in: refused once its lease ran out,
    /// and otherwise a renewal (any request is a sign of life). The guard
    /// is held by requests that change the table, so a lease cannot run
    /// out between this check and their change.
    pub(crate) fn admit(
        &self,
        peer: &Peer,
    ) -> Result<parking_lot::MutexGuard<'_, Leases>, Refusal> {
        let mut leases = self.leases.lock();
        if peer.role == Role::Compute {
            if leases.lapsed.contains(&peer.name) {
                return Err(Refusal::new(
                    ErrorCode::NotOwner,
                    format!(
                        "the lease of client {} ran out and its remote memory was given back",
                        peer.name
                    ),
                ));
            }
            if let Some(l) = leases.held.get_mut(&peer.name) {
                l.renewed = Instant::now();
            }
        }
        Ok(leases)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_book_round_trips_and_its_leases_start_from_the_load() {
        let mut leases = Leases::default();
        let long_ago = Instant::now() - Duration::from_secs(60);
        for (name, ms) in [("a", 300u64), ("b", 2000)] {
            let lease = Lease {
                length: Duration::from_millis(ms),
                renewed: long_ago,
            };
            leases.held.insert(name.into(), lease);
        }
        leases.lapse("gone".into());
        let book = leases.book();
        assert_eq!(book.held.get("a"), Some(&300));
        assert_eq!(book.lapsed, vec!["gone".to_string()]);
        let now = Instant::now();
        let loaded = Leases::from_book(&book, now);
        assert_eq!(loaded.book(), book);
        assert!(loaded.held.values().all(|l| l.renewed == now));
        assert!(loaded.lapsed.contains("gone"));
    }

    #[test]
    fn a_book_from_a_file_skips_empty_leases_and_lapsed_names() {
        let book: LeaseBook =
            serde_json::from_str(r#"{"held": {"a": 0, "b": 5, "c": 7}, "lapsed": ["c"]}"#).unwrap();
        let leases = Leases::from_book(&book, Instant::now());
        assert_eq!(leases.held.keys().collect::<Vec<_>>(), vec!["b"]);
        let empty: LeaseBook = serde_json::from_str("{}").unwrap();
        assert_eq!(empty, LeaseBook::default());
    }
}
