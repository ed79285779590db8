//! An operator takes a memory node that is gone out of the table
//! (`Msg::RemoveNode`, from the admin role only), so `farmem status` stops
//! listing it.
//!
//! Refused while the node is up (unless forced: its host is known gone
//! before the heartbeat timeout says so) and while it holds any grant: a
//! client keeps the grants it had on a dead node, copies made elsewhere or
//! not, until it releases them or its lease lapses, and releasing them must
//! keep working. A removed node's id is never handed out again; a node
//! that comes back (or a forced one still running) registers as a new one.

use std::collections::BTreeSet;

use farmem_core::ByteSize;
use farmem_net::server::{Peer, Refusal};
use farmem_wire::{ErrorCode, Role};

use crate::{NodeRecord, Shared, Table};

/// Client names a refusal lists before it only counts the rest.
const NAMES_SHOWN: usize = 5;

impl Table {
    /// Takes `node` out of the table, or says why not.
    pub(crate) fn remove_node(&mut self, node: u32, force: bool) -> Result<NodeRecord, Refusal> {
        let n = self.registered(node)?.clone();
        if n.up && !force {
            let heard = n.last_seen.map_or("never heard from".into(), |s| {
                format!("heard from {:.1} s ago", s.elapsed().as_secs_f64())
            });
            return Err(Refusal::new(
                ErrorCode::NodeUp,
                format!(
                    "memory node {node} at {} is up ({heard}): stop it first (on SIGTERM it tells the controller and is marked down at once), or, if its host is gone, remove it with force (farmem node remove --force)",
                    n.addr
                ),
            ));
        }
        let held: Vec<_> = self
            .tree
            .grants()
            .into_iter()
            .filter(|g| g.node == node)
            .collect();
        if !held.is_empty() {
            let owners: BTreeSet<&str> = held.iter().map(|g| g.owner.as_str()).collect();
            let names: Vec<&str> = owners.iter().copied().take(NAMES_SHOWN).collect();
            let more = owners.len().saturating_sub(NAMES_SHOWN);
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            return Err(Refusal::new(
                ErrorCode::NodeBusy,
                format!(
                    "memory node {node} at {} still holds {} ({}) of {} ({}{more}): it can be removed once its clients release them or their leases lapse (farmem status lists the clients)",
                    n.addr,
                    counted(held.len(), "grant"),
                    ByteSize(held.iter().map(|g| g.len).sum()),
                    counted(owners.len(), "client"),
                    names.join(", ")
                ),
            ));
        }
        // Checked above: the tree holds the node and no grant on it.
        self.tree
            .remove_node(node)
            .map_err(|e| Refusal::new(ErrorCode::Internal, e.to_string()))?;
        self.nodes.remove(&node);
        Ok(n)
    }
}

/// `n` `thing`s, in words: "1 grant", "3 grants".
fn counted(n: usize, thing: &str) -> String {
    format!("{n} {thing}{}", if n == 1 { "" } else { "s" })
}

impl Shared {
    /// `Msg::RemoveNode`: an operator's (admin role's) removal, saved like
    /// every change of the table.
    pub(crate) fn remove_node(&self, peer: &Peer, node: u32, force: bool) -> Result<(), Refusal> {
        if peer.role != Role::Admin {
            return Err(self.refuse_role(peer, "remove a memory node"));
        }
        let mut t = self.table.lock();
        let removed = t.remove_node(node, force)?;
        self.save(&t)?;
        drop(t);
        // Its session and our connection to it speak for a node that is
        // no more; a forced node still running registers again.
        self.node_sessions.lock().remove(&node);
        self.links.lock().remove(&node);
        tracing::info!(
            "memory node {node} at {} removed by `{}` from {}{}",
            removed.addr,
            peer.name,
            peer.addr,
            if removed.up {
                " (forced: it was up)"
            } else {
                ""
            }
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extent::Placement;
    use std::time::Instant;

    const G: u64 = 1 << 20;

    fn table(nodes: u32) -> Table {
        let mut t = Table::new(G);
        for id in 0..nodes {
            let base = t.tree.next_free_base();
            t.tree.add_node(id, base, 4 * G).unwrap();
            t.nodes.insert(
                id,
                NodeRecord {
                    addr: format!("10.0.0.{id}:7001"),
                    base,
                    capacity: 4 * G,
                    up: true,
                    incarnation: 1,
                    last_seen: Some(Instant::now()),
                },
            );
            t.next_node = id + 1;
        }
        t
    }

    #[test]
    fn an_unknown_node_is_not_found() {
        let mut t = table(1);
        let r = t.remove_node(7, true).unwrap_err();
        assert_eq!(r.code, ErrorCode::NotFound);
        assert!(r.message.contains("node 7"), "{}", r.message);
    }

    #[test]
    fn an_up_node_is_refused_unless_forced() {
        let mut t = table(2);
        let r = t.remove_node(1, false).unwrap_err();
        assert_eq!(r.code, ErrorCode::NodeUp);
        assert!(r.message.contains("10.0.0.1:7001 is up"), "{}", r.message);
        assert!(r.message.contains("stop it first"), "{}", r.message);
        assert_eq!(t.nodes.len(), 2);
        let gone = t.remove_node(1, true).unwrap();
        assert_eq!(gone.addr, "10.0.0.1:7001");
        assert!(!t.nodes.contains_key(&1));
        assert_eq!(t.tree.is_up(1), None);
    }

    #[test]
    fn a_down_node_with_grants_is_refused_naming_them_until_released() {
        let mut t = table(2);
        let a = t
            .tree
            .allocate("cn-a", 2 * G, Placement::RoundRobin)
            .unwrap();
        let b = t.tree.allocate("cn-b", G, Placement::RoundRobin).unwrap();
        t.set_down(0);
        let on_0: Vec<_> = a.iter().chain(&b).filter(|g| g.node == 0).collect();
        assert!(!on_0.is_empty());
        let r = t.remove_node(0, true).unwrap_err();
        assert_eq!(r.code, ErrorCode::NodeBusy, "forcing does not drop grants");
        assert!(
            r.message
                .contains(&format!("still holds {}", counted(on_0.len(), "grant"))),
            "{}",
            r.message
        );
        for g in &on_0 {
            assert!(r.message.contains(&g.owner), "{}", r.message);
        }
        for g in a.iter().chain(&b) {
            t.tree.release(&g.owner, g.base, g.len).unwrap();
        }
        t.remove_node(0, false).unwrap();
        assert_eq!(t.nodes.keys().copied().collect::<Vec<_>>(), vec![1]);
        t.tree.check_invariants().unwrap();
        // Its id is not handed out again.
        assert_eq!(t.next_node, 2);
    }
}
