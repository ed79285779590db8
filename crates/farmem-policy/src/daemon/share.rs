//! §4.1's approximate bandwidth partitioning in continuous time, for a
//! caller that charges each transfer as a span of time rather than slot by
//! slot (the simulator's memory bus and link): each class is a FIFO server
//! at its share of the bandwidth, with the share the
//! [`BandwidthPartitioner`]'s rounded pattern reserves. Pure: the caller
//! keeps the busy times and passes the time in.

use super::partition::{BandwidthPartitioner, Class};

/// When each class may start its next transfer, and when all work so far
/// would end at the whole bandwidth: one partitioned resource's state.
pub type Busy = [f64; 3];

const TOTAL: usize = 2;

fn index(class: Class) -> usize {
    match class {
        Class::Line => 0,
        Class::Page => 1,
    }
}

/// The shares of one resource, and whether an idle class lends its own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShareServer {
    /// Fraction of the bandwidth reserved for [lines, pages].
    share: [f64; 2],
    /// A class may use the other's share while the other has nothing in
    /// service (§4.1 read as "an idle slot costs one controller cycle").
    /// Off, a class keeps its share whether or not the other uses it.
    lend: bool,
}

impl ShareServer {
    /// The shares `partitioner`'s pattern reserves (21 lines per page at
    /// 25%: a line share of 21 x 64 B over the period's bytes).
    pub fn new(partitioner: &BandwidthPartitioner, lend: bool) -> Self {
        let line_share = match partitioner.lines_per_page() {
            Some(n) => {
                let l = n * partitioner.slot_bytes(Class::Line);
                l as f64 / partitioner.period_bytes() as f64
            }
            None => 1.0,
        };
        // A page share of zero would never move a page; 1/64 keeps the
        // 100%-lines corner finite (it is not a paper configuration).
        Self::with_line_share(line_share, lend)
    }

    /// Shares of `line_share` for lines and the rest for pages.
    pub fn with_line_share(line_share: f64, lend: bool) -> Self {
        let line_share = line_share.clamp(1.0 / 64.0, 63.0 / 64.0);
        Self {
            share: [line_share, 1.0 - line_share],
            lend,
        }
    }

    /// The lines' share of the bandwidth.
    pub fn line_share(&self) -> f64 {
        self.share[0]
    }

    /// Serves a transfer of `class` ready at `t`, taking `ns_full` at the
    /// whole bandwidth; returns its (start, end).
    ///
    /// A page never delays a line beyond the line share; a line that cuts
    /// in pushes the pages after it back (their end is bounded by the total
    /// work), so the resource never carries more than its bandwidth.
    ///
    /// Without lending a page is one slot of the alternation (§4.1): it
    /// crosses at the whole bandwidth, and the line slots that follow it
    /// stay reserved whether or not a line uses them, so the next page may
    /// start only `ns_full / page share` after this one started. Pages back
    /// to back thus get the page share, while a page after a quiet spell is
    /// not slowed: the idle line slots have passed (the pattern advances
    /// while the link is parked). Lines, 64 B slots, are served at the line
    /// share.
    pub fn serve(&self, busy: &mut Busy, class: Class, t: f64, ns_full: f64) -> (f64, f64) {
        let (c, other) = (index(class), 1 - index(class));
        let start = t.max(busy[c]);
        // Lending: the other class has nothing in service, so its slots
        // are free for this transfer.
        let share = if self.lend && busy[other] <= start {
            1.0
        } else {
            self.share[c]
        };
        let total = busy[TOTAL].max(start) + ns_full;
        busy[TOTAL] = total;
        if class == Class::Page && !self.lend {
            busy[c] = start + ns_full / share;
            return (start, (start + ns_full).max(total));
        }
        let mut end = start + ns_full / share;
        if class == Class::Page {
            end = end.max(total);
        }
        busy[c] = end;
        (start, end)
    }

    /// A request of `class` served for `ns_full` more than it moved (its
    /// reply or write crossed packed): its class's and the total's busy
    /// times give that back, never before `t`. Given back at the full
    /// bandwidth, the smallest the request could have held its class for,
    /// so a refund never lets the resource carry more than its bandwidth.
    pub fn refund(&self, busy: &mut Busy, class: Class, t: f64, ns_full: f64) {
        for i in [index(class), TOTAL] {
            busy[i] = (busy[i] - ns_full).max(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Class::{Line, Page};

    #[test]
    fn hold_spaces_pages_back_to_back_but_not_after_a_quiet_spell() {
        let s = ShareServer::with_line_share(0.25, false);
        let mut busy = [0.0; 3];
        // A page crosses at the whole bandwidth; the line slots after it
        // stay reserved, so the next page starts 100 / 0.75 after it.
        assert_eq!(s.serve(&mut busy, Page, 0.0, 100.0), (0.0, 100.0));
        let next = 100.0 / 0.75;
        assert_eq!(s.serve(&mut busy, Page, 0.0, 100.0), (next, next + 100.0));
        // After a quiet spell the reserved slots have passed.
        assert_eq!(s.serve(&mut busy, Page, 1000.0, 100.0), (1000.0, 1100.0));
        // A line crosses at its share, whatever the pages do.
        assert_eq!(s.serve(&mut busy, Line, 1000.0, 10.0), (1000.0, 1040.0));
        // It cut in: the next page ends no sooner than all the work.
        let (start, end) = s.serve(&mut busy, Page, 1000.0, 100.0);
        assert_eq!(start, 1000.0 + next);
        assert_eq!(end, start + 100.0);
        assert_eq!(busy[TOTAL], end);
    }

    #[test]
    fn lend_gives_a_lone_class_the_whole_bandwidth() {
        // Pages back to back at the whole bandwidth while no line is in
        // service; a line that comes while a page is in service gets its
        // share.
        let s = ShareServer::with_line_share(0.25, true);
        let mut busy = [0.0; 3];
        assert_eq!(s.serve(&mut busy, Page, 0.0, 100.0), (0.0, 100.0));
        assert_eq!(s.serve(&mut busy, Page, 0.0, 100.0), (100.0, 200.0));
        assert_eq!(s.serve(&mut busy, Line, 150.0, 10.0), (150.0, 190.0));
        // The line is done by 200: the next page gets the whole bandwidth,
        // but ends no sooner than all the work (200 + 10 + 75).
        assert_eq!(s.serve(&mut busy, Page, 150.0, 75.0), (200.0, 285.0));
    }

    #[test]
    fn the_share_is_the_partitioners_rounded_pattern() {
        let p = |share: f64| {
            let ratio = farmem_core::Ratio::new(share).unwrap();
            ShareServer::new(&BandwidthPartitioner::new(ratio).unwrap(), false).line_share()
        };
        // 25% of 4 KiB pages and 64 B lines: 21 lines per page.
        let quarter = p(0.25);
        assert!(
            (quarter - 21.0 * 64.0 / (21.0 * 64.0 + 4096.0)).abs() < 1e-12,
            "{quarter}"
        );
        assert_eq!(p(1.0), 63.0 / 64.0, "lines only, a page share kept");
    }
}
