//! Approximate bandwidth partitioning (DaeMon, seed 000 §4.1).
//!
//! The queue controller serves sub-block (cache line) and page requests in a
//! predefined fixed ratio: for a ratio `r` of the bandwidth reserved for
//! lines, it serves `(page_bytes / line_bytes) · r / (1 − r)` lines per page
//! (≈ 21 at 25%, 64 at 50%, 256 at 80%). The paper keeps the alternation
//! "even if either queue is empty (i.e., requests may be not issued in all
//! cycles)" so the partition "is always maintained": a slot whose queue is
//! empty is idle, and the other class may not use it.
//!
//! Rounding: the count is rounded to the nearest integer (21.33 → 21). That
//! is the paper's "≈ 21", gives the realized line share closest to `r`, and,
//! unlike truncation, is immune to float error at exact ratios (64 · 0.8 / 0.2
//! evaluates to 256.00000000000006 or 255.99999999999997 depending on the
//! path; both must give 256).
//!
//! Order within a period: the lines first, then the page. The paper fixes
//! only the counts; lines first matches its intent of prioritizing lines and
//! means a fresh partitioner serves a critical line before a 4 KB page.

use farmem_core::Ratio;
use serde::{Deserialize, Serialize};

use super::DaemonError;

/// Which granularity a slot of the alternation belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    /// A sub-block: a cache line (or, in the runtime, a demand page).
    Line,
    /// A page (or, in the runtime, a bulk cluster).
    Page,
}

/// What the queue controller does with the current slot. Test-only: the
/// slot-by-slot controller is this crate's reference model of §4.1's
/// alternation (its tests pin the rounded pattern that [`super::ShareServer`]
/// takes its shares from); both bodies charge the shares in continuous time.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Slot {
    /// Serve the head of the sub-block queue.
    Line,
    /// Serve the head of the page queue.
    Page,
    /// The slot belongs to `Class` but its queue is empty: nothing is issued
    /// and the other class may not take it (§4.1). The caller leaves the
    /// link (or bus) idle for [`BandwidthPartitioner::slot_bytes`] of that
    /// class, so the reserved share stays reserved.
    Idle(Class),
}

/// The partition's settings: the reserved line share and the two transfer
/// sizes. Serde default: 25% of 64 B lines against 4 KB pages (§4.1, §6).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PartitionConfig {
    /// Share of the bandwidth reserved for lines, in [0, 1]. 0 serves pages
    /// only; 1 serves lines only.
    pub ratio: Ratio,
    /// Bytes moved by one line request (64 in the paper).
    pub line_bytes: u64,
    /// Bytes moved by one page request (4096 in the paper; §4.7: a large
    /// page or bulk cluster needs the count re-derived, which this does).
    pub page_bytes: u64,
}

impl Default for PartitionConfig {
    fn default() -> Self {
        Self {
            ratio: Ratio::new(0.25).expect("25% is a ratio"),
            line_bytes: farmem_core::CACHE_LINE,
            page_bytes: farmem_core::PAGE_SIZE,
        }
    }
}

impl PartitionConfig {
    /// Lines served per page: `None` when the ratio is 1 (no page slot at
    /// all), otherwise `(page/line) · r / (1 − r)` rounded to nearest.
    pub fn lines_per_page(&self) -> Result<Option<u64>, DaemonError> {
        let bad = |why: String| DaemonError::BadConfig {
            field: "partition",
            why,
        };
        if self.line_bytes == 0 || self.page_bytes == 0 {
            return Err(bad("line_bytes and page_bytes must be positive".into()));
        }
        if self.line_bytes > self.page_bytes {
            return Err(bad(format!(
                "line_bytes {} is larger than page_bytes {}",
                self.line_bytes, self.page_bytes
            )));
        }
        let r = self.ratio.get();
        if !(0.0..=1.0).contains(&r) {
            return Err(bad(format!("ratio {r} is not in [0, 1]")));
        }
        if r == 1.0 {
            return Ok(None);
        }
        let n = (self.page_bytes as f64 / self.line_bytes as f64) * r / (1.0 - r);
        let n = n.round();
        // A ratio a hair below 1 asks for billions of lines per page: the
        // page would never be served in any run, so say so instead.
        if n > u32::MAX as f64 {
            return Err(bad(format!(
                "ratio {r} leaves pages no bandwidth ({n} lines per page); use 100% for lines only"
            )));
        }
        Ok(Some(n as u64))
    }
}

/// The queue controller's fixed alternation (§4.1): `lines_per_page` line
/// slots, then one page slot, forever, whether or not the queues have work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BandwidthPartitioner {
    /// `None`: lines only (ratio 1).
    lines_per_page: Option<u64>,
    line_bytes: u64,
    page_bytes: u64,
    /// Position in the period: `0..lines_per_page` are line slots,
    /// `lines_per_page` is the page slot.
    pos: u64,
}

impl BandwidthPartitioner {
    /// A partitioner reserving `ratio` of the bandwidth for 64 B lines
    /// against 4 KB pages.
    pub fn new(ratio: Ratio) -> Result<Self, DaemonError> {
        Self::from_config(&PartitionConfig {
            ratio,
            ..PartitionConfig::default()
        })
    }

    pub fn from_config(config: &PartitionConfig) -> Result<Self, DaemonError> {
        Ok(Self {
            lines_per_page: config.lines_per_page()?,
            line_bytes: config.line_bytes,
            page_bytes: config.page_bytes,
            pos: 0,
        })
    }

    /// Line slots per page slot; `None` for lines only.
    pub fn lines_per_page(&self) -> Option<u64> {
        self.lines_per_page
    }

    /// Slots in one full period (lines plus the page slot); 1 for lines only.
    pub fn period(&self) -> u64 {
        self.lines_per_page.map_or(1, |n| n + 1)
    }

    /// The class of the slot `next` will hand out, without consuming it.
    pub fn peek(&self) -> Class {
        match self.lines_per_page {
            Some(n) if self.pos >= n => Class::Page,
            _ => Class::Line,
        }
    }

    /// Nominal bytes of one slot of `class`: how long an idle slot holds the
    /// link, in bytes at the link's bandwidth. A served page may take fewer
    /// (link compression, §4.4); that is the caller's size to charge.
    pub fn slot_bytes(&self, class: Class) -> u64 {
        match class {
            Class::Line => self.line_bytes,
            Class::Page => self.page_bytes,
        }
    }

    /// Consumes the current slot. Served when its own queue is ready, idle
    /// otherwise; the other queue's readiness never changes the answer
    /// (§4.1: the alternation is retained even if either queue is empty).
    #[cfg(test)]
    pub(crate) fn next(&mut self, line_ready: bool, page_ready: bool) -> Slot {
        let class = self.peek();
        self.pos = (self.pos + 1) % self.period();
        match class {
            Class::Line if line_ready => Slot::Line,
            Class::Page if page_ready => Slot::Page,
            idle => Slot::Idle(idle),
        }
    }

    /// Nominal bytes of one full period (all its line slots and its page
    /// slot).
    pub fn period_bytes(&self) -> u64 {
        match self.lines_per_page {
            Some(n) => n * self.line_bytes + self.page_bytes,
            None => self.line_bytes,
        }
    }

    /// The link was parked (both queues empty) for `bytes` of transfer
    /// time. The hardware keeps alternating through idle slots meanwhile
    /// (§4.1), so advance over every slot that started during the park.
    /// Returns the bytes left of the slot still in progress: it was idle
    /// when it began, so nothing may be issued until it ends; the next
    /// `next` is the slot after it. A caller that prefers to
    /// resume where the pattern stopped simply never calls this.
    pub fn elapse_idle(&mut self, bytes: u64) -> u64 {
        // Whole periods leave the position where it was.
        let mut left = bytes % self.period_bytes();
        while left > 0 {
            let size = self.slot_bytes(self.peek());
            self.pos = (self.pos + 1) % self.period();
            if left < size {
                return size - left;
            }
            left -= size;
        }
        0
    }

    /// Back to the start of a period (lines first).
    pub fn reset(&mut self) {
        self.pos = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ratio(s: &str) -> Ratio {
        s.parse().unwrap()
    }

    /// The expected pattern over `periods` periods of `n` lines then a page.
    fn pattern(n: usize, periods: usize, line: Slot, page: Slot) -> Vec<Slot> {
        let mut v = Vec::new();
        for _ in 0..periods {
            v.extend(std::iter::repeat_n(line, n));
            v.push(page);
        }
        v
    }

    fn run(p: &mut BandwidthPartitioner, steps: usize, line: bool, page: bool) -> Vec<Slot> {
        (0..steps).map(|_| p.next(line, page)).collect()
    }

    #[test]
    fn counts_and_rounding() {
        let n = |s: &str| {
            BandwidthPartitioner::new(ratio(s))
                .unwrap()
                .lines_per_page()
        };
        assert_eq!(n("25%"), Some(21)); // 21.33
        assert_eq!(n("50%"), Some(64));
        assert_eq!(n("80%"), Some(256));
        assert_eq!(n("0%"), Some(0));
        assert_eq!(n("100%"), None);
        assert_eq!(n("30%"), Some(27)); // 27.43
        assert_eq!(n("40%"), Some(43)); // 42.67 rounds up
    }

    #[test]
    fn alternation_25_percent_two_periods() {
        let mut p = BandwidthPartitioner::new(ratio("25%")).unwrap();
        assert_eq!(p.period(), 22);
        // Both queues busy: 21 lines, a page, 21 lines, a page.
        let both = run(&mut p, 44, true, true);
        assert_eq!(both, pattern(21, 2, Slot::Line, Slot::Page));
        // Both empty: the same slots, all idle, in the same places.
        let idle = run(&mut p, 44, false, false);
        let want = pattern(21, 2, Slot::Idle(Class::Line), Slot::Idle(Class::Page));
        assert_eq!(idle, want);
        // Only pages waiting: they still get one slot in 22; the 21 line
        // slots are wasted, not given to pages.
        let pages = run(&mut p, 44, false, true);
        assert_eq!(pages, pattern(21, 2, Slot::Idle(Class::Line), Slot::Page));
        // Only lines waiting: the page slot stays idle.
        let lines = run(&mut p, 44, true, false);
        assert_eq!(lines, pattern(21, 2, Slot::Line, Slot::Idle(Class::Page)));
    }

    #[test]
    fn alternation_50_percent_two_periods() {
        let mut p = BandwidthPartitioner::new(ratio("50%")).unwrap();
        assert_eq!(p.period(), 65);
        let both = run(&mut p, 130, true, true);
        assert_eq!(both, pattern(64, 2, Slot::Line, Slot::Page));
        let pages = run(&mut p, 130, false, true);
        assert_eq!(pages, pattern(64, 2, Slot::Idle(Class::Line), Slot::Page));
        let lines = run(&mut p, 130, true, false);
        assert_eq!(lines, pattern(64, 2, Slot::Line, Slot::Idle(Class::Page)));
        // Byte shares: 64 · 64 B against 4096 B is exactly half.
        assert_eq!(64 * p.slot_bytes(Class::Line), p.slot_bytes(Class::Page));
    }

    #[test]
    fn queue_emptying_mid_period_does_not_shift_the_pattern() {
        let mut p = BandwidthPartitioner::new(ratio("25%")).unwrap();
        let mut got = run(&mut p, 10, true, true);
        got.extend(run(&mut p, 5, false, true)); // lines ran dry
        got.extend(run(&mut p, 7, true, true));
        let mut want = vec![Slot::Line; 10];
        want.extend([Slot::Idle(Class::Line); 5]);
        want.extend([Slot::Line; 6]);
        want.push(Slot::Page);
        assert_eq!(got, want);
        assert_eq!(p.peek(), Class::Line);
    }

    #[test]
    fn parked_time_advances_the_pattern() {
        let mut p = BandwidthPartitioner::new(ratio("25%")).unwrap();
        assert_eq!(p.period_bytes(), 21 * 64 + 4096);
        assert_eq!(p.elapse_idle(0), 0);
        // Three line slots pass: the fourth is next.
        assert_eq!(p.elapse_idle(3 * 64), 0);
        assert_eq!(run(&mut p, 17, true, true), vec![Slot::Line; 17]);
        // Half of the last line slot: it is over only after 32 more bytes,
        // and the page slot comes next.
        assert_eq!(p.elapse_idle(32), 32);
        assert_eq!(p.peek(), Class::Page);
        // 100 bytes into the page slot: 3996 bytes before lines resume.
        assert_eq!(p.elapse_idle(100), 3996);
        assert_eq!(p.peek(), Class::Line);
        // Whole periods change nothing.
        assert_eq!(p.elapse_idle(7 * p.period_bytes()), 0);
        assert_eq!(p.peek(), Class::Line);
        // Past the 21 line slots and into the page slot.
        assert_eq!(p.elapse_idle(21 * 64 + 1), 4095);
        assert_eq!(
            run(&mut p, 22, true, true),
            pattern(21, 1, Slot::Line, Slot::Page)
        );
    }

    #[test]
    fn degenerate_ratios() {
        let mut pages_only = BandwidthPartitioner::new(ratio("0%")).unwrap();
        assert_eq!(run(&mut pages_only, 3, true, true), vec![Slot::Page; 3]);
        assert_eq!(
            run(&mut pages_only, 2, true, false),
            vec![Slot::Idle(Class::Page); 2]
        );
        let mut lines_only = BandwidthPartitioner::new(ratio("100%")).unwrap();
        assert_eq!(run(&mut lines_only, 3, true, true), vec![Slot::Line; 3]);
        assert_eq!(
            run(&mut lines_only, 2, false, true),
            vec![Slot::Idle(Class::Line); 2]
        );
    }

    #[test]
    fn large_page_rederives_the_count() {
        // §4.7: a 2 MB page at 25% needs 512 × 21.33 ≈ 10923 lines.
        let cfg = PartitionConfig {
            page_bytes: 2 << 20,
            ..PartitionConfig::default()
        };
        assert_eq!(cfg.lines_per_page().unwrap(), Some(10923));
        // Runtime pair: 4 KB demand pages against 64 KB clusters, 25%.
        let cfg = PartitionConfig {
            line_bytes: 4096,
            page_bytes: 64 << 10,
            ..PartitionConfig::default()
        };
        assert_eq!(cfg.lines_per_page().unwrap(), Some(5)); // 5.33
    }

    #[test]
    fn bad_configs_are_errors() {
        let bad = |c: PartitionConfig| BandwidthPartitioner::from_config(&c).is_err();
        let d = PartitionConfig::default();
        assert!(bad(PartitionConfig { line_bytes: 0, ..d }));
        assert!(bad(PartitionConfig { page_bytes: 0, ..d }));
        assert!(bad(PartitionConfig {
            line_bytes: 8192,
            ..d
        }));
        assert!(bad(PartitionConfig {
            ratio: Ratio::new(0.999_999_999_9).unwrap(),
            ..d
        }));
    }

    #[test]
    fn serde_default_is_25_percent() {
        let c: PartitionConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(c, PartitionConfig::default());
        assert_eq!(c.lines_per_page().unwrap(), Some(21));
        let c: PartitionConfig = serde_json::from_str(r#"{"ratio": "50%"}"#).unwrap();
        assert_eq!(c.lines_per_page().unwrap(), Some(64));
        assert!(serde_json::from_str::<PartitionConfig>(r#"{"ratio": "150%"}"#).is_err());
        assert!(serde_json::from_str::<PartitionConfig>(r#"{"rate": 0.5}"#).is_err());
    }
}
