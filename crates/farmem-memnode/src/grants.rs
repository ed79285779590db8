//! Which ranges of this node are whose: the grants the controller pushed,
//! each with the stamp its owner's capabilities must carry.
//!
//! Ranges are exact. A grant replaces what it overlaps and only that: the
//! parts of older grants outside it stay as they were. The controller
//! may send one grant for what this node holds as several (it merges a
//! client's adjacent grants, while each was pushed with a stamp of its
//! own); a re-send (stamp 0) therefore keeps every piece's own stamp, so
//! each of the owner's capabilities stays good for exactly its piece.

use std::collections::BTreeMap;
use std::sync::Arc;

use farmem_wire::GrantKind;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GrantEntry {
    pub len: u64,
    pub owner: Arc<str>,
    /// The owner wrote this range before this node last restarted: its
    /// bytes are gone, and every access is refused.
    pub lost: bool,
    /// Names the grant in its capabilities (drawn by the controller; 0 on
    /// a piece re-sent that this node never held, which no capability
    /// names).
    pub stamp: u64,
}

/// Granted ranges keyed by global base address, none overlapping.
#[derive(Debug, Default)]
pub(crate) struct Grants(BTreeMap<u64, GrantEntry>);

impl Grants {
    /// The grant holding all of [addr, addr+len), with its base.
    pub fn holding(&self, addr: u64, len: u64) -> Option<(u64, &GrantEntry)> {
        let (&base, g) = self.0.range(..=addr).next_back()?;
        (addr.checked_add(len)? <= base + g.len).then_some((base, g))
    }

    pub fn entries(&self) -> impl Iterator<Item = &GrantEntry> {
        self.0.values()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Takes [base, base+len) out of every grant, keeping the parts
    /// outside it; returns the pieces taken, by base.
    pub fn cut(&mut self, base: u64, len: u64) -> Vec<(u64, GrantEntry)> {
        let end = base.saturating_add(len);
        let overlapping: Vec<u64> = self
            .0
            .range(..end)
            .filter(|(gb, g)| **gb + g.len > base)
            .map(|(gb, _)| *gb)
            .collect();
        let mut taken = Vec::new();
        for gb in overlapping {
            let Some(g) = self.0.remove(&gb) else {
                continue;
            };
            let gend = gb + g.len;
            if gb < base {
                self.0.insert(
                    gb,
                    GrantEntry {
                        len: base - gb,
                        ..g.clone()
                    },
                );
            }
            if gend > end {
                self.0.insert(
                    end,
                    GrantEntry {
                        len: gend - end,
                        ..g.clone()
                    },
                );
            }
            let (lo, hi) = (gb.max(base), gend.min(end));
            taken.push((lo, GrantEntry { len: hi - lo, ..g }));
        }
        taken
    }

    /// Records the controller's grant of [base, base+len) to `owner`.
    /// A fresh or lost grant takes `stamp`; a re-send (stamp 0) keeps the
    /// stamps of the owner's pieces it covers.
    pub fn grant(&mut self, base: u64, len: u64, owner: &str, kind: GrantKind, stamp: u64) {
        let lost = kind == GrantKind::Lost;
        let old = self.cut(base, len);
        let mut insert = |at: u64, len: u64, stamp: u64| {
            if len > 0 {
                let owner = owner.into();
                self.0.insert(
                    at,
                    GrantEntry {
                        len,
                        owner,
                        lost,
                        stamp,
                    },
                );
            }
        };
        if stamp != 0 {
            insert(base, len, stamp);
            return;
        }
        let mut at = base;
        for (piece, g) in old.into_iter().filter(|(_, g)| *g.owner == *owner) {
            insert(at, piece - at, 0);
            insert(piece, g.len, g.stamp);
            at = piece + g.len;
        }
        insert(at, base + len - at, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamps(g: &Grants) -> Vec<(u64, u64, &str, u64)> {
        g.0.iter()
            .map(|(b, e)| (*b, e.len, &*e.owner, e.stamp))
            .collect()
    }

    #[test]
    fn a_resend_of_merged_grants_keeps_each_pieces_stamp() {
        let mut g = Grants::default();
        g.grant(0, 100, "a", GrantKind::Fresh, 7);
        g.grant(100, 50, "a", GrantKind::Fresh, 9);
        // The controller merged them: one re-send for both.
        g.grant(0, 150, "a", GrantKind::Resend, 0);
        assert_eq!(stamps(&g), [(0, 100, "a", 7), (100, 50, "a", 9)]);
        assert_eq!(g.holding(100, 50).unwrap().1.stamp, 9);
        assert!(
            g.holding(90, 20).is_none(),
            "an access stays inside one piece"
        );
    }

    #[test]
    fn a_grant_replaces_only_what_it_overlaps() {
        let mut g = Grants::default();
        g.grant(0, 300, "a", GrantKind::Fresh, 7);
        // A sub-range released and granted to another client.
        g.grant(100, 100, "b", GrantKind::Fresh, 3);
        assert_eq!(
            stamps(&g),
            [(0, 100, "a", 7), (100, 100, "b", 3), (200, 100, "a", 7)]
        );
        // A re-send for a range this node held for someone else: that
        // part names no stamp any capability carries.
        g.grant(50, 100, "a", GrantKind::Resend, 0);
        assert_eq!(
            stamps(&g),
            [
                (0, 50, "a", 7),
                (50, 50, "a", 7),
                (100, 50, "a", 0),
                (150, 50, "b", 3),
                (200, 100, "a", 7)
            ]
        );
        let taken = g.cut(0, 1000);
        assert_eq!(taken.len(), 5);
        assert_eq!(g.len(), 0);
    }

    #[test]
    fn a_lost_resend_marks_the_pieces_lost() {
        let mut g = Grants::default();
        g.grant(0, 100, "a", GrantKind::Fresh, 7);
        g.grant(0, 100, "a", GrantKind::Lost, 0);
        let (_, e) = g.holding(10, 10).unwrap();
        assert!(e.lost);
        assert_eq!(e.stamp, 7);
    }
}
