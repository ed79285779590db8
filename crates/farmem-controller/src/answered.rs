//! Answers to requests a client may send twice. An `Alloc` or `Remirror`
//! whose reply was lost (the leader died after saving the grants, a reply
//! timed out) is sent again, to the same controller or to a new leader,
//! under the same request number. The grants it made are kept in the
//! table, saved with it, so the second request gets them again instead of
//! a second set that nobody would ever release.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::extent::{ExtentTree, Grant};

/// Answers kept per client: requests are sent one at a time per client
/// thread, so a repeat is of one of the last few.
const KEPT_PER_OWNER: usize = 8;

/// The grants each client's last requests got, by client name.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Answered(BTreeMap<String, VecDeque<Answer>>);

/// What one request got.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Answer {
    pub request: u64,
    /// Each set's grants, primary first, each with the stamp of its
    /// capability.
    pub sets: Vec<Vec<(Grant, u64)>>,
}

impl Answered {
    /// The answer `owner`'s `request` got, if it was one (0 names none).
    pub fn find(&self, owner: &str, request: u64) -> Option<&Answer> {
        if request == 0 {
            return None;
        }
        self.0.get(owner)?.iter().find(|a| a.request == request)
    }

    /// Keeps `answer` to `owner`'s request; forgets the answers of clients
    /// that hold nothing any more (they released all, or their lease ran
    /// out), which will not ask again.
    pub fn record(&mut self, owner: &str, answer: Answer, tree: &ExtentTree) {
        if answer.request == 0 {
            return;
        }
        self.0
            .retain(|o, _| o == owner || !tree.grants_of(o).is_empty());
        let kept = self.0.entry(owner.to_string()).or_default();
        kept.push_back(answer);
        while kept.len() > KEPT_PER_OWNER {
            kept.pop_front();
        }
    }

    /// Forgets `request` (its grants were taken back before it was answered).
    pub fn forget(&mut self, owner: &str, request: u64) {
        if let Some(kept) = self.0.get_mut(owner) {
            kept.retain(|a| a.request != request);
        }
    }
}

impl Answer {
    /// True when `owner` still holds every grant of the answer.
    pub fn still_held(&self, owner: &str, tree: &ExtentTree) -> bool {
        self.sets.iter().flatten().all(|(g, _)| {
            tree.grant_at(g.base).is_some_and(|held| {
                held.owner == owner && held.node == g.node && held.end() >= g.end()
            })
        })
    }

    /// Every grant with its stamp, sets in order.
    pub fn grants(&self) -> (Vec<Grant>, Vec<u64>) {
        self.sets.iter().flatten().cloned().unzip()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extent::Placement;

    fn answer(request: u64, grants: &[Grant]) -> Answer {
        Answer {
            request,
            sets: vec![grants.iter().cloned().map(|g| (g, 1)).collect()],
        }
    }

    #[test]
    fn a_repeat_finds_its_answer_and_clients_holding_nothing_are_forgotten() {
        let mut tree = ExtentTree::new(1 << 20);
        tree.add_node(0, 0, 64 << 20).unwrap();
        let a = tree.allocate("a", 1 << 20, Placement::RoundRobin).unwrap();
        let b = tree.allocate("b", 1 << 20, Placement::RoundRobin).unwrap();
        let mut answered = Answered::default();
        answered.record("a", answer(5, &a), &tree);
        answered.record("b", answer(6, &b), &tree);
        assert!(answered.find("a", 5).unwrap().still_held("a", &tree));
        assert!(answered.find("a", 6).is_none(), "another client's request");
        assert!(answered.find("a", 0).is_none(), "0 names no request");
        tree.release("b", b[0].base, b[0].len).unwrap();
        assert!(!answered.find("b", 6).unwrap().still_held("b", &tree));
        answered.record("a", answer(7, &a), &tree);
        assert!(answered.find("b", 6).is_none(), "b holds nothing");
        for r in 10..30 {
            answered.record("a", answer(r, &a), &tree);
        }
        assert!(
            answered.find("a", 5).is_none(),
            "only the last few are kept"
        );
        assert!(answered.find("a", 29).is_some());
    }
}
