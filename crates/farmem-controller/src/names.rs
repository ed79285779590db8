//! Which sessions may speak for a client name.
//!
//! A name is bound to the live sessions proven to speak for it. A session
//! is proven when it is the first to speak for a name that holds no grant
//! or that no live session speaks for (a client's first connection, or its
//! reconnection after the controller restarted), or when it presents a
//! capability the controller issued to that name. Any other session of a
//! name is refused `Alloc`, `Release` and `Lease`: a connection that merely
//! claims another program's name can neither give its memory back nor end
//! or shorten its lease. A session's binding ends when it disconnects.

use std::collections::{HashMap, HashSet};

#[derive(Default)]
pub(crate) struct Names {
    bound: HashMap<String, HashSet<u64>>,
}

impl Names {
    /// True when `session` is proven for `name`, binding it if `name` is
    /// free (`holds_grants` false, or no live session bound).
    pub(crate) fn admit(&mut self, name: &str, session: u64, holds_grants: bool) -> bool {
        let sessions = self.bound.entry(name.to_string()).or_default();
        if sessions.contains(&session) || !holds_grants || sessions.is_empty() {
            sessions.insert(session);
            return true;
        }
        false
    }

    /// Binds `session` to `name` after it presented a capability of `name`.
    pub(crate) fn prove(&mut self, name: &str, session: u64) {
        self.bound
            .entry(name.to_string())
            .or_default()
            .insert(session);
    }

    /// Forgets a closed session.
    pub(crate) fn disconnected(&mut self, name: &str, session: u64) {
        if let Some(sessions) = self.bound.get_mut(name) {
            sessions.remove(&session);
            if sessions.is_empty() {
                self.bound.remove(name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_session_of_a_name_with_grants_needs_proof() {
        let mut n = Names::default();
        assert!(n.admit("a", 1, false));
        assert!(n.admit("a", 2, false), "nothing to protect yet");
        assert!(n.admit("a", 1, true));
        assert!(!n.admit("a", 3, true));
        n.prove("a", 3);
        assert!(n.admit("a", 3, true));
        for s in [1, 2, 3] {
            n.disconnected("a", s);
        }
        assert!(n.admit("a", 4, true), "no live session: the next one binds");
    }
}
