//! Whether a page fetched back will be written: if so, it is installed
//! writable and dirty at once, and the write-protect fault its first write
//! would take is never taken.
//!
//! The runtime learns a page's writes from those faults, so a page
//! installed writable shows nothing more: its next eviction cannot tell
//! whether it was written. The streak is therefore a small saturating
//! count: a write seen while resident adds two, an eviction that saw
//! nothing (the page was installed writable) takes one, a clean eviction
//! clears it. A page written every time it is resident takes one
//! write-protect fault in three residencies instead of one in each; a page
//! that stops being written costs at most two whole-page write-backs it
//! did not need before it is installed protected again.
//!
//! Where the seed is silent: Kona's hardware sees writes at line
//! granularity for free; a page-fault runtime pays a fault for each first
//! write (seed 001 §5.1 counts "two page faults for caching a remote
//! page"). The plan ("install writable where the page's history
//! says it will be written") is this.

/// What an eviction knew of the page's writes while it was resident.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// A write fault or write-protect fault showed a write.
    Written,
    /// Evicted clean: it was installed protected and nothing wrote it.
    Clean,
    /// Installed writable on its streak: writes were not watched.
    Unwatched,
}

const MAX: u8 = 3;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteStreak(u8);

impl WriteStreak {
    /// The page is being evicted, with what was seen of it.
    pub fn evicted(&mut self, seen: Seen) {
        self.0 = match seen {
            Seen::Written => (self.0 + 2).min(MAX),
            Seen::Unwatched => self.0.saturating_sub(1),
            Seen::Clean => 0,
        };
    }

    /// The next fetch should install the page writable.
    pub fn predicts_write(self) -> bool {
        self.0 > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Residencies of a page under `written`; which took a write-protect
    /// fault (were installed protected and then written).
    fn faults(written: impl Iterator<Item = bool>) -> Vec<bool> {
        let mut s = WriteStreak::default();
        written
            .map(|w| {
                let protected = !s.predicts_write();
                s.evicted(match (protected, w) {
                    (true, true) => Seen::Written,
                    (true, false) => Seen::Clean,
                    (false, _) => Seen::Unwatched,
                });
                protected && w
            })
            .collect()
    }

    #[test]
    fn a_page_always_written_faults_once_in_three_residencies() {
        let f = faults(std::iter::repeat_n(true, 9));
        assert_eq!(
            f,
            [true, false, false, true, false, false, true, false, false]
        );
    }

    #[test]
    fn a_page_never_written_is_always_installed_protected() {
        let mut s = WriteStreak::default();
        for _ in 0..5 {
            assert!(!s.predicts_write());
            s.evicted(Seen::Clean);
        }
    }

    #[test]
    fn a_page_that_stops_being_written_is_protected_again_after_two() {
        let mut s = WriteStreak::default();
        s.evicted(Seen::Written);
        let mut unwatched = 0;
        while s.predicts_write() {
            s.evicted(Seen::Unwatched);
            unwatched += 1;
        }
        assert_eq!(unwatched, 2);
        s.evicted(Seen::Clean);
        assert!(!s.predicts_write());
    }
}
