//! The ranges of the global pool whose bytes were lost: granted before
//! their memory node restarted. They stay granted to their owner (so they
//! are never handed to anyone else as if fresh) until the owner releases
//! them, and the node is told to refuse every access to them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Non-overlapping, coalesced ranges: base → length.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LostRanges(BTreeMap<u64, u64>);

impl LostRanges {
    /// Marks [base, base+len) lost.
    pub fn add(&mut self, base: u64, len: u64) {
        if len == 0 {
            return;
        }
        let (mut lo, mut hi) = (base, base.saturating_add(len));
        // Swallow every range that overlaps or touches the new one.
        let touching: Vec<(u64, u64)> = self
            .0
            .range(..=hi)
            .filter(|(b, l)| **b + **l >= lo)
            .map(|(b, l)| (*b, *l))
            .collect();
        for (b, l) in touching {
            self.0.remove(&b);
            lo = lo.min(b);
            hi = hi.max(b + l);
        }
        self.0.insert(lo, hi - lo);
    }

    /// Forgets [base, base+len): released, so no longer anyone's.
    pub fn remove(&mut self, base: u64, len: u64) {
        let end = base.saturating_add(len);
        let overlapping: Vec<(u64, u64)> = self
            .0
            .range(..end)
            .filter(|(b, l)| **b + **l > base)
            .map(|(b, l)| (*b, *l))
            .collect();
        for (b, l) in overlapping {
            self.0.remove(&b);
            if b < base {
                self.0.insert(b, base - b);
            }
            if b + l > end {
                self.0.insert(end, b + l - end);
            }
        }
    }

    /// Splits [base, base+len) into consecutive pieces, each wholly lost
    /// (`true`) or wholly intact.
    pub fn split(&self, base: u64, len: u64) -> Vec<(u64, u64, bool)> {
        let end = base.saturating_add(len);
        let mut out = Vec::new();
        let mut at = base;
        let first = self.0.range(..=base).next_back().map(|(b, l)| (*b, *l));
        let rest = self
            .0
            .range(base.saturating_add(1)..end)
            .map(|(b, l)| (*b, *l));
        for (b, l) in first.into_iter().chain(rest) {
            let (lo, hi) = (b.max(at), (b + l).min(end));
            if lo >= hi {
                continue;
            }
            if lo > at {
                out.push((at, lo - at, false));
            }
            out.push((lo, hi - lo, true));
            at = hi;
        }
        if at < end {
            out.push((at, end - at, false));
        }
        out
    }

    /// Lost bytes in all.
    pub fn bytes(&self) -> u64 {
        self.0.values().sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_coalesce_split_and_trim() {
        let mut lost = LostRanges::default();
        lost.add(100, 50);
        lost.add(150, 50); // touches: one range [100, 200)
        lost.add(300, 10);
        assert_eq!(lost.bytes(), 110);
        assert_eq!(
            lost.split(0, 400),
            vec![
                (0, 100, false),
                (100, 100, true),
                (200, 100, false),
                (300, 10, true),
                (310, 90, false)
            ]
        );
        assert_eq!(lost.split(120, 10), vec![(120, 10, true)]);
        assert_eq!(lost.split(200, 100), vec![(200, 100, false)]);
        lost.remove(120, 40); // [100,120) and [160,200) stay
        assert_eq!(lost.bytes(), 70);
        assert_eq!(
            lost.split(100, 100),
            vec![(100, 20, true), (120, 40, false), (160, 40, true)]
        );
        lost.remove(0, 1000);
        assert!(lost.is_empty());
    }
}
