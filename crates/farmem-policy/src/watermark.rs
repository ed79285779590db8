//! When to evict, and how much: the high/low watermark rule.
//!
//! A local cache has a limit, and charged against it besides its pages are
//! other things: snapshot buffers, page tables, a compressed pool, and
//! (when the limit bounds the whole process) the process's own memory.
//! What is left is the cache's *room* for pages. Eviction starts once the
//! resident pages, less those already on their way out, pass `high` of the
//! room, and takes them down to `low` of it in one round of batches, so a
//! fault finds a free frame without waiting for a write-back: the
//! watermarks of Linux's kswapd, and of UMap's evictors
//! (`UMAP_EVICT_HIGH_WATER_THRESHOLD`, `UMAP_EVICT_LOW_WATER_THRESHOLD`).
//!
//! The marks are shares of the room, not of the limit. As shares of the
//! limit, a large charge ate the gap between them: at 12 MiB local (3,072
//! pages) with 2,583 pages charged otherwise, marks at 95% and 85% of the
//! limit let 335 pages be resident and then evicted all but 28, among
//! them the pages an I/O call had just touched for the kernel.

/// The two marks, as shares of the room (0 < low < high <= 1).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Watermarks {
    /// Eviction starts past this share of the room (default 0.99).
    pub high: f64,
    /// And goes down to this share (default 0.97).
    pub low: f64,
}

/// The room is for pages, as a cgroup's limit is, whose reclaim starts at
/// the limit itself: marks at 95% and 85% left a tenth of it empty on
/// average, and a Python job at 96 MiB took 174 k faults with them against
/// 93 k at 99% and 97%. Two hundredths of headroom still leave a fault a
/// free frame while a round of write-backs is on its way.
impl Default for Watermarks {
    fn default() -> Self {
        Self {
            high: 0.99,
            low: 0.97,
        }
    }
}

impl Watermarks {
    /// Why the marks cannot be used, if they cannot.
    pub fn validate(&self) -> Result<(), String> {
        if 0.0 < self.low && self.low < self.high && self.high <= 1.0 {
            Ok(())
        } else {
            Err(format!(
                "watermarks must satisfy 0 < low < high <= 1 (low {}, high {})",
                self.low, self.high
            ))
        }
    }

    /// Resident pages past which eviction starts, for `room` pages of room.
    pub fn high_mark(&self, room: u64) -> u64 {
        (room as f64 * self.high) as u64
    }

    /// Resident pages eviction goes down to: below the high mark, so a
    /// round that starts always evicts at least one page.
    pub fn low_mark(&self, room: u64) -> u64 {
        ((room as f64 * self.low) as u64).min(self.high_mark(room).saturating_sub(1))
    }

    /// Whether eviction should run: `resident` pages, `leaving` of them
    /// already on their way out, past the high mark.
    pub fn should_evict(&self, resident: u64, leaving: u64, room: u64) -> bool {
        resident.saturating_sub(leaving) > self.high_mark(room)
    }

    /// Pages to evict now to come down to the low mark (0 below it).
    pub fn to_evict(&self, resident: u64, leaving: u64, room: u64) -> u64 {
        resident
            .saturating_sub(leaving)
            .saturating_sub(self.low_mark(room))
    }
}

/// Fault-around's share of the local limit: a fault's window takes at
/// most `limit / AROUND_SHARE` pages besides the faulting one (1/32), and
/// takes them even where the room is full, up to as many past it, which
/// the evictor's next round gives back.
///
/// Why past the room: a window cut where no frame was free depended on
/// how far behind the evictor thread ran, so the same program took 235 to
/// 1,266 faults from run to run, and no model could predict it. Why a
/// share of the limit, not of the room: the room moves as the process's
/// own memory is measured, the limit does not, so both bodies take the
/// same windows. Why a share at all: speculation keeps to a small part of
/// a small cache, as Linux's readahead once kept to half the free and
/// inactive pages (`max_sane_readahead`), and the limit is exceeded by at
/// most 1/32 while the evictor catches up.
pub const AROUND_SHARE: u64 = 32;

/// The most pages a fault's window takes besides its own page, and the
/// most it may take past the room, under a limit of `limit` pages.
pub fn around_allowance(limit: u64) -> u64 {
    limit / AROUND_SHARE
}

/// Blocks a cache's replacement policy is built for under a limit of
/// `limit` pages: every page the limit allows, a window's
/// [`around_allowance`] past it, and slack, so an insert never has to
/// push a victim out behind the evictor's back (the evictor's rounds
/// between the marks decide what leaves; the policy only orders it).
pub fn policy_capacity(limit: u64) -> usize {
    usize::try_from(limit + around_allowance(limit) + 64).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_shares_of_the_room() {
        let w = Watermarks {
            high: 0.95,
            low: 0.85,
        };
        // 3072 pages of limit, 2583 charged otherwise: 489 of room.
        assert_eq!((w.high_mark(489), w.low_mark(489)), (464, 415));
        assert!(!w.should_evict(464, 0, 489));
        assert!(w.should_evict(465, 0, 489));
        assert_eq!(w.to_evict(465, 0, 489), 50);
        // Pages already leaving count as gone.
        assert!(!w.should_evict(480, 20, 489));
        assert_eq!(w.to_evict(480, 20, 489), 45);
        assert_eq!(w.to_evict(400, 0, 489), 0);
        // The defaults leave two hundredths of the room free after a round.
        let w = Watermarks::default();
        assert_eq!((w.high_mark(489), w.low_mark(489)), (484, 474));
        assert_eq!(w.to_evict(485, 0, 489), 11);
    }

    #[test]
    fn a_round_always_evicts_and_no_room_evicts_everything() {
        let w = Watermarks {
            high: 0.5,
            low: 0.49,
        };
        // Two pages of room: high 1, low 0.
        assert_eq!((w.high_mark(2), w.low_mark(2)), (1, 0));
        assert_eq!(w.to_evict(2, 0, 2), 2);
        let w = Watermarks::default();
        assert!(w.should_evict(1, 0, 0));
        assert_eq!(w.to_evict(7, 0, 0), 7);
    }

    #[test]
    fn a_window_keeps_to_a_share_of_the_limit() {
        assert_eq!(around_allowance(1024), 32);
        assert_eq!(around_allowance(4578), 143);
        assert_eq!(around_allowance(31), 0);
    }

    #[test]
    fn bad_marks_are_refused() {
        for (high, low) in [(0.5, 0.5), (1.1, 0.5), (0.9, 0.0), (0.4, 0.6)] {
            assert!(Watermarks { high, low }.validate().is_err(), "{high} {low}");
        }
        assert!(Watermarks::default().validate().is_ok());
    }
}
