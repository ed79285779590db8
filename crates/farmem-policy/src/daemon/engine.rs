//! The DaeMon compute engine (seed 000 §4.1–4.3, sizes §4.5): the sub-block
//! and page queues, the inflight sub-block and page buffers, the selection
//! granularity unit and the dirty data buffer. Metadata only: the caller
//! keeps the bytes of held dirty lines keyed by (page, offset) and moves
//! them as the returned actions say.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::partition::{BandwidthPartitioner, PartitionConfig};
#[cfg(test)]
use super::partition::{Class, Slot};
use super::{DaemonError, LineOffset, PageNo};

/// Which granularities a miss may move: the §6 schemes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Selection {
    /// §4.2's selection granularity unit (PQ, DaeMon).
    #[default]
    Selective,
    /// Always both granularities, no selection (BP, "naive" line+page).
    Both,
    /// Pages only (Remote, LC).
    PageOnly,
    /// Lines only (cache-line only, page-free).
    LineOnly,
}

impl Selection {
    /// The partition a scheme really runs with. A single-granularity scheme
    /// has nothing to partition (Remote and LC move pages over the whole
    /// link, §6): its one class gets every slot (ratio 0% or 100%), instead
    /// of idling through slots reserved for a class it never sends.
    pub fn effective_partition(self, partition: PartitionConfig) -> PartitionConfig {
        let ratio = match self {
            Selection::Selective | Selection::Both => return partition,
            Selection::PageOnly => 0.0,
            Selection::LineOnly => 1.0,
        };
        PartitionConfig {
            ratio: farmem_core::Ratio::new(ratio).expect("0 and 1 are ratios"),
            ..partition
        }
    }
}

/// Compute-engine sizes and knobs. Defaults are the paper's (§4.5 Table 1,
/// §4.3 threshold 8, §4.1 ratio 25%).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Sub-block queue entries (lines), 128: the LLC MSHRs.
    pub sub_block_queue: usize,
    /// Page queue entries, 256.
    pub page_queue: usize,
    /// Inflight sub-block buffer entries (pages, each with a line mask), 128.
    pub inflight_sub_block: usize,
    /// Inflight page buffer entries, 256.
    pub inflight_page: usize,
    /// Dirty data buffer lines, 256.
    pub dirty_buffer: usize,
    /// Dirty lines held per inflight page before it is throttled, 8.
    pub dirty_throttle: u32,
    pub selection: Selection,
    /// The queue controller's partition; its `page_bytes / line_bytes` is
    /// also the number of sub-blocks per page (at most 64). Ignored for
    /// single-granularity schemes ([`Selection::effective_partition`]).
    pub partition: PartitionConfig,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            sub_block_queue: 128,
            page_queue: 256,
            inflight_sub_block: 128,
            inflight_page: 256,
            dirty_buffer: 256,
            dirty_throttle: 8,
            selection: Selection::Selective,
            partition: PartitionConfig::default(),
        }
    }
}

impl EngineConfig {
    pub fn validate(&self) -> Result<(), DaemonError> {
        for (field, v) in [
            ("sub_block_queue", self.sub_block_queue),
            ("page_queue", self.page_queue),
            ("inflight_sub_block", self.inflight_sub_block),
            ("inflight_page", self.inflight_page),
            ("dirty_buffer", self.dirty_buffer),
        ] {
            if v == 0 {
                return Err(DaemonError::BadConfig {
                    field,
                    why: "must be at least 1".into(),
                });
            }
        }
        self.partition.lines_per_page()?;
        self.lines_per_page().map(|_| ())
    }

    /// Sub-blocks per page: `page_bytes / line_bytes`, which must divide
    /// exactly and fit the 64-bit masks of §4.5.
    pub fn lines_per_page(&self) -> Result<u32, DaemonError> {
        let p = &self.partition;
        let bad = |why: String| DaemonError::BadConfig {
            field: "partition",
            why,
        };
        if p.line_bytes == 0 || !p.page_bytes.is_multiple_of(p.line_bytes) {
            return Err(bad(format!(
                "page_bytes {} is not a multiple of line_bytes {}",
                p.page_bytes, p.line_bytes
            )));
        }
        let n = p.page_bytes / p.line_bytes;
        if !(1..=64).contains(&n) {
            return Err(bad(format!(
                "{n} sub-blocks per page; the inflight masks hold 1 to 64 (§4.5)"
            )));
        }
        Ok(n as u32)
    }
}

/// A set of line offsets within one page (the 64-bit masks of §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct LineMask(pub u64);

impl LineMask {
    pub const EMPTY: Self = Self(0);

    pub fn contains(self, offset: LineOffset) -> bool {
        offset < 64 && self.0 & (1 << offset) != 0
    }
    pub fn len(self) -> u32 {
        self.0.count_ones()
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// The offsets, ascending.
    pub fn offsets(self) -> impl Iterator<Item = LineOffset> {
        (0..64u8).filter(move |&o| self.contains(o))
    }
    fn with(self, offset: LineOffset) -> Self {
        Self(self.0 | 1 << offset)
    }
    fn without(self, offset: LineOffset) -> Self {
        Self(self.0 & !(1 << offset))
    }
}

/// An inflight page buffer entry's state (§4.5 Fig. 7b). `Invalid` is "no
/// entry".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum PageState {
    /// In the page queue, not yet issued.
    Scheduled,
    /// Issued by the queue controller, on its way.
    Moved,
    /// Its dirty lines were flushed to remote; discard it on arrival and
    /// request it again (§4.3).
    Throttled,
    /// No entry: only [`ComputeEngine::page_state`] (tests) says it.
    #[cfg(test)]
    Invalid,
}

/// What a miss does about the page (§4.2 "Scheduling Page Granularity").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PageDecision {
    /// Added to the page queue and the inflight page buffer (scheduled).
    Scheduled,
    /// Already requested (scheduled, moved or throttled): not again.
    AlreadyInflight,
    /// The inflight page buffer (or the page queue) is full: not requested.
    BufferFull,
    /// The scheme moves no pages ([`Selection::LineOnly`]).
    Disabled,
}

/// What a miss does about its line (§4.2 "Scheduling Cache Line
/// Granularity").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LineDecision {
    /// Added to the sub-block queue and the inflight sub-block buffer.
    Sent,
    /// This very line is already requested.
    AlreadyInflight,
    /// The dirty data buffer holds this line (its page is inflight): serve
    /// it from there; remote memory is stale.
    HeldDirty,
    /// The page is scheduled and the selection unit prefers to wait for it
    /// (sub-block buffer not less utilized than the page buffer, or the page
    /// already left the page queue).
    Dropped,
    /// Should be sent but the sub-block queue or buffer is full.
    BufferFull,
    /// The scheme moves no lines ([`Selection::PageOnly`]).
    Disabled,
}

/// The selection unit's answer to one miss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MissAction {
    pub page: PageDecision,
    pub line: LineDecision,
}

impl MissAction {
    /// Nothing inflight or held will satisfy this miss (both buffers
    /// refused): the caller retries it later, e.g. after the next arrival.
    pub fn is_stalled(&self) -> bool {
        let page = matches!(
            self.page,
            PageDecision::Scheduled | PageDecision::AlreadyInflight
        );
        let line = matches!(
            self.line,
            LineDecision::Sent | LineDecision::AlreadyInflight | LineDecision::HeldDirty
        );
        !page && !line
    }
}

/// What to do with an arriving line packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LineArrival {
    /// Requested and still wanted: write it into the LLC.
    Deliver,
    /// Late (its page already arrived) or never requested: drop it.
    Ignored,
}

/// What to do with an arriving page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PageArrival {
    /// Write the page to local memory, then write the `merge` lines from
    /// the dirty data buffer over it (their slots are now free). `ignored`
    /// lines were still inflight; their packets will be ignored.
    Installed { merge: LineMask, ignored: LineMask },
    /// The page was throttled: drop its data. If `rerequested`, it is
    /// queued again (scheduled); if not (page queue full), it is no longer
    /// inflight and a later miss requests it.
    Discarded { rerequested: bool },
    /// Not an issued inflight page: ignore.
    Unexpected,
}

/// What to do with a dirty line evicted from the LLC that missed in local
/// memory (§4.3 scenario (ii)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DirtyAction {
    /// Its page is not inflight (or is throttled): write it to remote now.
    WriteRemote,
    /// Its page is inflight: keep it in the dirty buffer until it arrives.
    Hold,
    /// The buffer already holds this line: overwrite the held data.
    Replace,
    /// Past the threshold (or the buffer is full): write these lines of the
    /// page, the held ones and this one, to remote and forget them; the page
    /// is now throttled.
    FlushAndThrottle { flush: LineMask },
}

/// What the queue controller does in its next slot (§4.1). Test-only, as
/// [`Slot`] is: both bodies issue by request ([`ComputeEngine::issue_line`],
/// [`ComputeEngine::issue_page`]).
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Issue {
    /// Request this line from remote memory (it left the sub-block queue).
    Line(PageNo, LineOffset),
    /// Request this page (it left the page queue; its entry is now moved).
    Page(PageNo),
    /// The slot's queue is empty: leave the link idle for one slot of
    /// that class.
    Idle(Class),
}

/// Event counters, for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EngineStats {
    pub misses: u64,
    pub write_misses: u64,
    pub pages_scheduled: u64,
    pub pages_already_inflight: u64,
    pub pages_buffer_full: u64,
    pub lines_sent: u64,
    pub lines_already_inflight: u64,
    pub lines_held_dirty: u64,
    pub lines_dropped: u64,
    pub lines_buffer_full: u64,
    pub stalled_misses: u64,
    pub lines_issued: u64,
    pub pages_issued: u64,
    pub idle_line_slots: u64,
    pub idle_page_slots: u64,
    pub lines_delivered: u64,
    pub lines_ignored: u64,
    /// Queued lines taken out of the sub-block queue when their page came.
    pub lines_unqueued: u64,
    pub pages_installed: u64,
    pub pages_discarded: u64,
    pub pages_rerequested: u64,
    pub pages_unexpected: u64,
    pub dirty_written_remote: u64,
    pub dirty_held: u64,
    pub dirty_replaced: u64,
    pub dirty_merged: u64,
    pub dirty_flushed: u64,
    pub throttles: u64,
    /// Throttles forced by a full dirty buffer rather than the threshold.
    pub throttles_buffer_full: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PageEntry {
    state: PageState,
    /// Still waiting in the page queue.
    queued: bool,
    /// Offsets held in the dirty data buffer (§4.5 Fig. 7b).
    dirty: LineMask,
}

/// One compute node's DaeMon engine.
#[derive(Debug, Clone)]
pub struct ComputeEngine {
    config: EngineConfig,
    lines_per_page: u32,
    partitioner: BandwidthPartitioner,
    sub_block_queue: VecDeque<(PageNo, LineOffset)>,
    page_queue: VecDeque<PageNo>,
    /// Inflight sub-block buffer: page → offsets requested (scheduled);
    /// absent is invalid.
    inflight_lines: HashMap<PageNo, LineMask>,
    /// Inflight page buffer; absent is invalid.
    inflight_pages: HashMap<PageNo, PageEntry>,
    /// Lines held in the dirty data buffer, over all pages.
    dirty_used: usize,
    stats: EngineStats,
}

impl ComputeEngine {
    pub fn new(config: EngineConfig) -> Result<Self, DaemonError> {
        config.validate()?;
        Ok(Self {
            lines_per_page: config.lines_per_page()?,
            partitioner: BandwidthPartitioner::from_config(
                &config.selection.effective_partition(config.partition),
            )?,
            sub_block_queue: VecDeque::with_capacity(config.sub_block_queue.min(4096)),
            page_queue: VecDeque::with_capacity(config.page_queue.min(4096)),
            inflight_lines: HashMap::new(),
            inflight_pages: HashMap::new(),
            dirty_used: 0,
            stats: EngineStats::default(),
            config,
        })
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    fn check_offset(&self, offset: LineOffset) -> Result<(), DaemonError> {
        if u32::from(offset) < self.lines_per_page {
            Ok(())
        } else {
            Err(DaemonError::BadOffset {
                offset,
                lines_per_page: self.lines_per_page,
            })
        }
    }

    /// §4.2: sub-block buffer utilization strictly below the page buffer's,
    /// compared as exact fractions (a/A < b/B ⇔ a·B < b·A).
    fn sub_block_less_utilized(&self) -> bool {
        let a = self.inflight_lines.len() as u128;
        let b = self.inflight_pages.len() as u128;
        a * (self.config.inflight_page as u128) < b * (self.config.inflight_sub_block as u128)
    }

    /// A local-memory miss on `page` at `offset` (the LLC missed too). The
    /// caller calls this only when the page is not in local memory.
    pub fn on_miss(
        &mut self,
        page: PageNo,
        offset: LineOffset,
        is_write: bool,
    ) -> Result<MissAction, DaemonError> {
        self.check_offset(offset)?;
        self.stats.misses += 1;
        self.stats.write_misses += u64::from(is_write);
        // The page's state before this miss: §4.2 decides the line on
        // whether the page was already scheduled "by a previous request".
        let prior = self.inflight_pages.get(&page).copied();
        let line = self.decide_line(page, offset, prior);
        let page_decision = self.decide_page(page, prior);
        let action = MissAction {
            page: page_decision,
            line,
        };
        if action.is_stalled() {
            self.stats.stalled_misses += 1;
        }
        Ok(action)
    }

    fn decide_line(
        &mut self,
        page: PageNo,
        offset: LineOffset,
        prior: Option<PageEntry>,
    ) -> LineDecision {
        if prior.is_some_and(|e| e.dirty.contains(offset)) {
            self.stats.lines_held_dirty += 1;
            return LineDecision::HeldDirty;
        }
        if self.config.selection == Selection::PageOnly {
            return LineDecision::Disabled;
        }
        let mask = self.inflight_lines.get(&page).copied();
        // §4.2: the buffers exist to "avoid requesting the same data
        // multiple times".
        if mask.is_some_and(|m| m.contains(offset)) {
            self.stats.lines_already_inflight += 1;
            return LineDecision::AlreadyInflight;
        }
        // §4.2 second case: the page is already scheduled; send the line
        // only if (i) the sub-block buffer is less utilized than the page
        // buffer and (ii) the page still waits in the page queue.
        let drop = self.config.selection == Selection::Selective
            && prior.is_some_and(|e| !(self.sub_block_less_utilized() && e.queued));
        if drop {
            self.stats.lines_dropped += 1;
            return LineDecision::Dropped;
        }
        let room_in_buffer =
            mask.is_some() || self.inflight_lines.len() < self.config.inflight_sub_block;
        if self.sub_block_queue.len() >= self.config.sub_block_queue || !room_in_buffer {
            self.stats.lines_buffer_full += 1;
            return LineDecision::BufferFull;
        }
        self.sub_block_queue.push_back((page, offset));
        let m = self.inflight_lines.entry(page).or_default();
        *m = m.with(offset);
        self.stats.lines_sent += 1;
        LineDecision::Sent
    }

    fn decide_page(&mut self, page: PageNo, prior: Option<PageEntry>) -> PageDecision {
        if self.config.selection == Selection::LineOnly {
            return PageDecision::Disabled;
        }
        // §4.2: "If the page has already been requested or the inflight page
        // buffer is full, the selection granularity unit does not request
        // the page."
        if prior.is_some() {
            self.stats.pages_already_inflight += 1;
            return PageDecision::AlreadyInflight;
        }
        if self.inflight_pages.len() >= self.config.inflight_page
            || self.page_queue.len() >= self.config.page_queue
        {
            self.stats.pages_buffer_full += 1;
            return PageDecision::BufferFull;
        }
        self.page_queue.push_back(page);
        self.inflight_pages.insert(
            page,
            PageEntry {
                state: PageState::Scheduled,
                queued: true,
                dirty: LineMask::EMPTY,
            },
        );
        self.stats.pages_scheduled += 1;
        PageDecision::Scheduled
    }

    /// The queue controller takes the head of the sub-block queue (§4.2:
    /// its queue entry is released; the buffer entry stays until arrival).
    pub fn pop_line(&mut self) -> Option<(PageNo, LineOffset)> {
        let line = self.sub_block_queue.pop_front()?;
        self.stats.lines_issued += 1;
        Some(line)
    }

    /// The queue controller takes the head of the page queue; its entry
    /// becomes moved (§4.2), or stays throttled.
    pub fn pop_page(&mut self) -> Option<PageNo> {
        let page = self.page_queue.pop_front()?;
        if let Some(e) = self.inflight_pages.get_mut(&page) {
            e.queued = false;
            if e.state == PageState::Scheduled {
                e.state = PageState::Moved;
            }
        }
        self.stats.pages_issued += 1;
        Some(page)
    }

    /// The queue controller issues line (`page`, `offset`) wherever it sits
    /// in the sub-block queue: with several memory nodes each request goes
    /// out when its own node's path is free, not behind requests to a busier
    /// node. False if the line is not queued (its page arrived first).
    pub fn issue_line(&mut self, page: PageNo, offset: LineOffset) -> bool {
        let Some(i) = self
            .sub_block_queue
            .iter()
            .position(|&e| e == (page, offset))
        else {
            return false;
        };
        self.sub_block_queue.remove(i);
        self.stats.lines_issued += 1;
        true
    }

    /// As [`issue_line`](Self::issue_line) for a page: it leaves the page
    /// queue and its entry becomes moved (or stays throttled). False if the
    /// page is not queued.
    pub fn issue_page(&mut self, page: PageNo) -> bool {
        let Some(i) = self.page_queue.iter().position(|&p| p == page) else {
            return false;
        };
        self.page_queue.remove(i);
        if let Some(e) = self.inflight_pages.get_mut(&page) {
            e.queued = false;
            if e.state == PageState::Scheduled {
                e.state = PageState::Moved;
            }
        }
        self.stats.pages_issued += 1;
        true
    }

    /// Whether either queue has a request (when not, the caller may park the
    /// link instead of cycling idle slots).
    pub fn has_work(&self) -> bool {
        !self.sub_block_queue.is_empty() || !self.page_queue.is_empty()
    }

    /// One slot of the queue controller (§4.1): the partitioner picks the
    /// class; its queue's head is issued, or the slot is idle.
    #[cfg(test)]
    pub(crate) fn issue(&mut self) -> Issue {
        let slot = self.partitioner.next(
            !self.sub_block_queue.is_empty(),
            !self.page_queue.is_empty(),
        );
        match slot {
            Slot::Line => match self.pop_line() {
                Some((p, o)) => Issue::Line(p, o),
                None => Issue::Idle(Class::Line),
            },
            Slot::Page => match self.pop_page() {
                Some(p) => Issue::Page(p),
                None => Issue::Idle(Class::Page),
            },
            Slot::Idle(class) => {
                match class {
                    Class::Line => self.stats.idle_line_slots += 1,
                    Class::Page => self.stats.idle_page_slots += 1,
                }
                Issue::Idle(class)
            }
        }
    }

    /// The partitioner, for its slot sizes.
    pub fn partitioner(&self) -> &BandwidthPartitioner {
        &self.partitioner
    }

    /// The link was parked for `bytes` of transfer time; see
    /// [`BandwidthPartitioner::elapse_idle`].
    pub fn elapse_idle(&mut self, bytes: u64) -> u64 {
        self.partitioner.elapse_idle(bytes)
    }

    /// A line packet arrived (§4.2): release its bit; deliver it to the LLC
    /// only if it is still wanted.
    pub fn on_line_arrival(&mut self, page: PageNo, offset: LineOffset) -> LineArrival {
        let wanted = u32::from(offset) < self.lines_per_page
            && self
                .inflight_lines
                .get(&page)
                .is_some_and(|m| m.contains(offset));
        if !wanted {
            self.stats.lines_ignored += 1;
            return LineArrival::Ignored;
        }
        if let Some(m) = self.inflight_lines.get_mut(&page) {
            *m = m.without(offset);
            if m.is_empty() {
                self.inflight_lines.remove(&page);
            }
        }
        self.stats.lines_delivered += 1;
        LineArrival::Deliver
    }

    /// A page arrived (§4.2, §4.3).
    pub fn on_page_arrival(&mut self, page: PageNo) -> PageArrival {
        let Some(entry) = self.inflight_pages.get(&page).copied() else {
            self.stats.pages_unexpected += 1;
            return PageArrival::Unexpected;
        };
        if entry.queued {
            // Never issued, so this cannot be its data.
            self.stats.pages_unexpected += 1;
            return PageArrival::Unexpected;
        }
        if entry.state == PageState::Throttled {
            // §4.3: ignore it and "send a new request for that page to
            // receive the up-to-date data".
            self.stats.pages_discarded += 1;
            let rerequested = self.page_queue.len() < self.config.page_queue;
            if rerequested {
                self.page_queue.push_back(page);
                self.inflight_pages.insert(
                    page,
                    PageEntry {
                        state: PageState::Scheduled,
                        queued: true,
                        dirty: LineMask::EMPTY,
                    },
                );
                self.stats.pages_rerequested += 1;
            } else {
                self.inflight_pages.remove(&page);
            }
            return PageArrival::Discarded { rerequested };
        }
        // §4.2: release the page entry; remove the page's inflight line
        // entries so late line packets are ignored (§4.3 scenario (i)).
        self.inflight_pages.remove(&page);
        let ignored = self.inflight_lines.remove(&page).unwrap_or_default();
        if !ignored.is_empty() {
            let before = self.sub_block_queue.len();
            self.sub_block_queue.retain(|&(p, _)| p != page);
            self.stats.lines_unqueued += (before - self.sub_block_queue.len()) as u64;
        }
        // §4.3: flush the held dirty lines of the page into it.
        let merge = entry.dirty;
        self.dirty_used -= merge.len() as usize;
        self.stats.dirty_merged += u64::from(merge.len());
        self.stats.pages_installed += 1;
        PageArrival::Installed { merge, ignored }
    }

    /// A dirty line was evicted from the LLC and missed in local memory
    /// (§4.3 scenario (ii)).
    pub fn on_dirty_line_evicted(
        &mut self,
        page: PageNo,
        offset: LineOffset,
    ) -> Result<DirtyAction, DaemonError> {
        self.check_offset(offset)?;
        let throttle = self.config.dirty_throttle;
        let buffer_full = self.dirty_used >= self.config.dirty_buffer;
        let Some(entry) = self.inflight_pages.get_mut(&page) else {
            // "If there is no inflight page request ... the evicted dirty
            // cache line is directly migrated to remote memory."
            self.stats.dirty_written_remote += 1;
            return Ok(DirtyAction::WriteRemote);
        };
        if entry.state == PageState::Throttled {
            // Its arrival will be discarded; holding the line gains nothing.
            self.stats.dirty_written_remote += 1;
            return Ok(DirtyAction::WriteRemote);
        }
        if entry.dirty.contains(offset) {
            self.stats.dirty_replaced += 1;
            return Ok(DirtyAction::Replace);
        }
        let with = entry.dirty.with(offset);
        if with.len() > throttle || buffer_full {
            // "When the evicted dirty cache lines of the same page increase
            // beyond a predefined threshold (e.g., 8 cache lines), ... flushes
            // all dirty cache lines to remote memory, and marks the
            // corresponding entry ... as throttled."
            let held = entry.dirty.len() as usize;
            entry.dirty = LineMask::EMPTY;
            entry.state = PageState::Throttled;
            self.dirty_used -= held;
            self.stats.dirty_flushed += u64::from(with.len());
            self.stats.throttles += 1;
            if with.len() <= throttle {
                self.stats.throttles_buffer_full += 1;
            }
            return Ok(DirtyAction::FlushAndThrottle { flush: with });
        }
        entry.dirty = with;
        self.dirty_used += 1;
        self.stats.dirty_held += 1;
        Ok(DirtyAction::Hold)
    }

    /// Whether the dirty buffer holds this line (its data is the newest).
    pub fn dirty_held(&self, page: PageNo, offset: LineOffset) -> bool {
        self.inflight_pages
            .get(&page)
            .is_some_and(|e| e.dirty.contains(offset))
    }

    /// The lines of `page` held in the dirty buffer.
    pub fn dirty_lines(&self, page: PageNo) -> LineMask {
        self.inflight_pages
            .get(&page)
            .map_or(LineMask::EMPTY, |e| e.dirty)
    }

    /// The inflight page buffer's state for `page`.
    #[cfg(test)]
    pub(crate) fn page_state(&self, page: PageNo) -> PageState {
        self.inflight_pages
            .get(&page)
            .map_or(PageState::Invalid, |e| e.state)
    }

    /// The lines of `page` requested and not yet arrived.
    pub fn inflight_lines(&self, page: PageNo) -> LineMask {
        self.inflight_lines.get(&page).copied().unwrap_or_default()
    }

    /// Sub-block queue contents, head first.
    pub fn sub_block_queue(&self) -> impl ExactSizeIterator<Item = (PageNo, LineOffset)> + '_ {
        self.sub_block_queue.iter().copied()
    }

    /// Page queue contents, head first.
    pub fn page_queue(&self) -> impl ExactSizeIterator<Item = PageNo> + '_ {
        self.page_queue.iter().copied()
    }

    /// Entries in use in the inflight sub-block buffer (pages).
    pub fn inflight_sub_block_len(&self) -> usize {
        self.inflight_lines.len()
    }

    /// Entries in use in the inflight page buffer.
    pub fn inflight_page_len(&self) -> usize {
        self.inflight_pages.len()
    }

    /// Lines in use in the dirty data buffer.
    pub fn dirty_len(&self) -> usize {
        self.dirty_used
    }

    pub fn sub_block_utilization(&self) -> f64 {
        self.inflight_lines.len() as f64 / self.config.inflight_sub_block as f64
    }

    pub fn page_utilization(&self) -> f64 {
        self.inflight_pages.len() as f64 / self.config.inflight_page as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> ComputeEngine {
        ComputeEngine::new(EngineConfig::default()).unwrap()
    }

    fn with(f: impl FnOnce(&mut EngineConfig)) -> ComputeEngine {
        let mut c = EngineConfig::default();
        f(&mut c);
        ComputeEngine::new(c).unwrap()
    }

    fn sbq(e: &ComputeEngine) -> Vec<(PageNo, LineOffset)> {
        e.sub_block_queue().collect()
    }

    fn pq(e: &ComputeEngine) -> Vec<PageNo> {
        e.page_queue().collect()
    }

    fn miss(e: &mut ComputeEngine, page: PageNo, offset: LineOffset) -> MissAction {
        e.on_miss(page, offset, false).unwrap()
    }

    fn act(page: PageDecision, line: LineDecision) -> MissAction {
        MissAction { page, line }
    }

    fn mask(offsets: &[LineOffset]) -> LineMask {
        offsets.iter().fold(LineMask::EMPTY, |m, &o| m.with(o))
    }

    #[test]
    fn defaults_are_the_papers() {
        let c = EngineConfig::default();
        assert_eq!(
            (
                c.sub_block_queue,
                c.page_queue,
                c.inflight_sub_block,
                c.inflight_page,
                c.dirty_buffer,
                c.dirty_throttle
            ),
            (128, 256, 128, 256, 256, 8)
        );
        assert_eq!(c.lines_per_page().unwrap(), 64);
        let parsed: EngineConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(parsed, c);
        let parsed: EngineConfig =
            serde_json::from_str(r#"{"dirty_throttle": 4, "selection": "both"}"#).unwrap();
        assert_eq!(
            (parsed.dirty_throttle, parsed.selection),
            (4, Selection::Both)
        );
        assert!(serde_json::from_str::<EngineConfig>(r#"{"dirty_buffr": 4}"#).is_err());
    }

    #[test]
    fn bad_configs_and_offsets_are_errors() {
        let bad = |f: fn(&mut EngineConfig)| {
            let mut c = EngineConfig::default();
            f(&mut c);
            ComputeEngine::new(c).is_err()
        };
        assert!(bad(|c| c.page_queue = 0));
        assert!(bad(|c| c.dirty_buffer = 0));
        assert!(bad(|c| c.partition.page_bytes = 4000)); // not a multiple of 64
        assert!(bad(|c| c.partition.page_bytes = 8192)); // 128 lines > 64-bit mask
        let mut e = engine();
        assert_eq!(
            e.on_miss(1, 64, false),
            Err(DaemonError::BadOffset {
                offset: 64,
                lines_per_page: 64
            })
        );
        assert!(e.on_dirty_line_evicted(1, 200).is_err());
        assert_eq!(e.on_line_arrival(1, 200), LineArrival::Ignored);
        assert_eq!(e.stats().misses, 0);
    }

    #[test]
    fn first_miss_sends_line_and_page() {
        let mut e = engine();
        assert_eq!(
            miss(&mut e, 7, 3),
            act(PageDecision::Scheduled, LineDecision::Sent)
        );
        assert_eq!(sbq(&e), vec![(7, 3)]);
        assert_eq!(pq(&e), vec![7]);
        assert_eq!(e.page_state(7), PageState::Scheduled);
        assert_eq!(e.inflight_lines(7), mask(&[3]));
        // The same line again: neither is requested twice.
        assert_eq!(
            miss(&mut e, 7, 3),
            act(PageDecision::AlreadyInflight, LineDecision::AlreadyInflight)
        );
        assert_eq!((sbq(&e).len(), pq(&e).len()), (1, 1));
    }

    #[test]
    fn line_dropped_when_page_buffer_is_less_loaded() {
        // Default sizes: 1 of 128 sub-block entries is more than 1 of 256
        // page entries, so the scheduled page is expected to arrive first.
        let mut e = engine();
        miss(&mut e, 1, 0);
        assert_eq!(
            miss(&mut e, 1, 1),
            act(PageDecision::AlreadyInflight, LineDecision::Dropped)
        );
        assert_eq!(sbq(&e), vec![(1, 0)]);
        assert_eq!(pq(&e), vec![1]);
        assert_eq!(e.inflight_lines(1), mask(&[0]));
        assert_eq!(e.stats().lines_dropped, 1);
    }

    #[test]
    fn line_sent_when_page_buffer_is_more_loaded_and_page_still_queued() {
        let mut e = engine();
        for p in 1..=3 {
            miss(&mut e, p, 0);
        }
        // The 25% partition serves the three lines first; they arrive and
        // free the sub-block buffer while the pages still wait.
        for p in 1..=3 {
            assert_eq!(e.issue(), Issue::Line(p, 0));
            assert_eq!(e.on_line_arrival(p, 0), LineArrival::Deliver);
        }
        assert_eq!(e.inflight_sub_block_len(), 0);
        // 0/128 < 3/256 and page 2 is in the page queue: send the line.
        assert_eq!(
            miss(&mut e, 2, 7),
            act(PageDecision::AlreadyInflight, LineDecision::Sent)
        );
        assert_eq!(sbq(&e), vec![(2, 7)]);
        assert_eq!(pq(&e), vec![1, 2, 3]);
        // 1/128 < 3/256 still, but page 1 has left the queue (moved): drop.
        assert_eq!(e.pop_page(), Some(1));
        assert_eq!(e.page_state(1), PageState::Moved);
        assert_eq!(
            miss(&mut e, 1, 9),
            act(PageDecision::AlreadyInflight, LineDecision::Dropped)
        );
        // Page 3 still queued and 1/128 < 3/256: sent (a new entry).
        assert_eq!(
            miss(&mut e, 3, 4),
            act(PageDecision::AlreadyInflight, LineDecision::Sent)
        );
        // Now 2/128 is not below 3/256: dropped though page 3 still waits.
        assert_eq!(
            miss(&mut e, 3, 5),
            act(PageDecision::AlreadyInflight, LineDecision::Dropped)
        );
        assert_eq!(sbq(&e), vec![(2, 7), (3, 4)]);
        assert_eq!(pq(&e), vec![2, 3]);
    }

    #[test]
    fn full_page_buffer_sends_the_line_only() {
        let mut e = with(|c| {
            c.inflight_page = 2;
            c.inflight_sub_block = 2;
        });
        miss(&mut e, 1, 0);
        miss(&mut e, 2, 0);
        assert_eq!(
            miss(&mut e, 3, 0),
            act(PageDecision::BufferFull, LineDecision::BufferFull)
        );
        assert!(miss(&mut e, 3, 0).is_stalled());
        assert_eq!(e.issue(), Issue::Line(1, 0));
        assert_eq!(e.on_line_arrival(1, 0), LineArrival::Deliver);
        // §4.2 case one: the page is not scheduled, so the line always goes.
        assert_eq!(
            miss(&mut e, 3, 0),
            act(PageDecision::BufferFull, LineDecision::Sent)
        );
        assert_eq!(sbq(&e), vec![(2, 0), (3, 0)]);
        assert_eq!(pq(&e), vec![1, 2]);
        assert_eq!(e.stats().stalled_misses, 2);
    }

    #[test]
    fn throttled_page_discarded_on_arrival_and_rerequested() {
        let mut e = engine();
        miss(&mut e, 5, 0);
        assert_eq!(e.pop_page(), Some(5));
        for o in 10..18 {
            assert_eq!(e.on_dirty_line_evicted(5, o), Ok(DirtyAction::Hold));
        }
        assert_eq!(e.dirty_len(), 8);
        // The 9th goes past the threshold: all nine go to remote.
        let flush = mask(&[10, 11, 12, 13, 14, 15, 16, 17, 18]);
        assert_eq!(
            e.on_dirty_line_evicted(5, 18),
            Ok(DirtyAction::FlushAndThrottle { flush })
        );
        assert_eq!(e.dirty_len(), 0);
        assert_eq!(e.dirty_lines(5), LineMask::EMPTY);
        assert_eq!(e.page_state(5), PageState::Throttled);
        // Later dirty lines of the throttled page go straight to remote.
        assert_eq!(e.on_dirty_line_evicted(5, 30), Ok(DirtyAction::WriteRemote));
        // Misses still see the page as requested.
        assert_eq!(miss(&mut e, 5, 1).page, PageDecision::AlreadyInflight);
        assert_eq!(pq(&e), Vec::<PageNo>::new());
        assert_eq!(
            e.on_page_arrival(5),
            PageArrival::Discarded { rerequested: true }
        );
        assert_eq!(pq(&e), vec![5]);
        assert_eq!(e.page_state(5), PageState::Scheduled);
        assert_eq!(e.pop_page(), Some(5));
        assert_eq!(
            e.on_page_arrival(5),
            PageArrival::Installed {
                merge: LineMask::EMPTY,
                ignored: mask(&[0])
            }
        );
        assert_eq!(e.page_state(5), PageState::Invalid);
        let s = e.stats();
        assert_eq!(
            (
                s.throttles,
                s.dirty_flushed,
                s.pages_discarded,
                s.pages_rerequested
            ),
            (1, 9, 1, 1)
        );
    }

    #[test]
    fn throttle_while_still_queued_keeps_the_queue_entry() {
        let mut e = with(|c| c.dirty_throttle = 1);
        miss(&mut e, 2, 0);
        assert_eq!(e.on_dirty_line_evicted(2, 1), Ok(DirtyAction::Hold));
        assert_eq!(
            e.on_dirty_line_evicted(2, 2),
            Ok(DirtyAction::FlushAndThrottle {
                flush: mask(&[1, 2])
            })
        );
        assert_eq!(pq(&e), vec![2]);
        assert_eq!(e.on_page_arrival(2), PageArrival::Unexpected); // not issued
        assert_eq!(e.pop_page(), Some(2));
        assert_eq!(e.page_state(2), PageState::Throttled);
        assert_eq!(
            e.on_page_arrival(2),
            PageArrival::Discarded { rerequested: true }
        );
    }

    #[test]
    fn rerequest_with_full_page_queue_releases_the_entry() {
        let mut e = with(|c| {
            c.page_queue = 1;
            c.dirty_throttle = 0;
        });
        miss(&mut e, 1, 0);
        e.pop_page();
        assert!(matches!(
            e.on_dirty_line_evicted(1, 3),
            Ok(DirtyAction::FlushAndThrottle { .. })
        ));
        miss(&mut e, 2, 0); // fills the one-entry page queue
        assert_eq!(
            e.on_page_arrival(1),
            PageArrival::Discarded { rerequested: false }
        );
        assert_eq!(e.page_state(1), PageState::Invalid);
        assert_eq!(pq(&e), vec![2]);
    }

    #[test]
    fn late_lines_ignored_after_the_page_arrived() {
        let mut e = engine();
        miss(&mut e, 1, 3);
        for p in 2..=4 {
            miss(&mut e, p, 0);
        }
        assert_eq!(e.issue(), Issue::Line(1, 3)); // issued, still inflight
        for p in 2..=4 {
            assert_eq!(e.issue(), Issue::Line(p, 0));
            assert_eq!(e.on_line_arrival(p, 0), LineArrival::Deliver);
        }
        // 1/128 < 4/256 with page 1 still queued: more lines of it go.
        assert_eq!(miss(&mut e, 1, 4).line, LineDecision::Sent);
        assert_eq!(miss(&mut e, 1, 5).line, LineDecision::Sent);
        assert_eq!(miss(&mut e, 2, 6).line, LineDecision::Sent);
        assert_eq!(sbq(&e), vec![(1, 4), (1, 5), (2, 6)]);
        assert_eq!(e.issue(), Issue::Line(1, 4)); // issued; (1,5), (2,6) queued
        assert_eq!(e.pop_page(), Some(1));
        assert_eq!(
            e.on_page_arrival(1),
            PageArrival::Installed {
                merge: LineMask::EMPTY,
                ignored: mask(&[3, 4, 5])
            }
        );
        // The still-queued line of page 1 leaves the queue; page 2's stays.
        assert_eq!(sbq(&e), vec![(2, 6)]);
        assert_eq!(e.inflight_lines(1), LineMask::EMPTY);
        // The issued ones arrive late: ignored.
        assert_eq!(e.on_line_arrival(1, 3), LineArrival::Ignored);
        assert_eq!(e.on_line_arrival(1, 4), LineArrival::Ignored);
        assert_eq!(e.on_line_arrival(9, 9), LineArrival::Ignored);
        assert_eq!(e.on_page_arrival(1), PageArrival::Unexpected);
        let s = e.stats();
        assert_eq!((s.lines_unqueued, s.lines_ignored), (1, 3));
    }

    #[test]
    fn dirty_lines_held_and_merged_on_arrival() {
        let mut e = engine();
        assert_eq!(e.on_dirty_line_evicted(4, 2), Ok(DirtyAction::WriteRemote));
        miss(&mut e, 4, 0);
        assert_eq!(e.on_dirty_line_evicted(4, 2), Ok(DirtyAction::Hold));
        assert_eq!(e.on_dirty_line_evicted(4, 5), Ok(DirtyAction::Hold));
        assert_eq!(e.dirty_lines(4), mask(&[2, 5]));
        // A miss to a held line is served from the dirty buffer.
        assert_eq!(
            miss(&mut e, 4, 2),
            act(PageDecision::AlreadyInflight, LineDecision::HeldDirty)
        );
        assert_eq!(e.on_dirty_line_evicted(4, 2), Ok(DirtyAction::Replace));
        assert_eq!(e.dirty_len(), 2);
        assert_eq!(e.pop_page(), Some(4));
        assert_eq!(
            e.on_page_arrival(4),
            PageArrival::Installed {
                merge: mask(&[2, 5]),
                ignored: mask(&[0])
            }
        );
        assert_eq!(e.dirty_len(), 0);
        assert_eq!(e.on_dirty_line_evicted(4, 2), Ok(DirtyAction::WriteRemote));
        let s = e.stats();
        assert_eq!(
            (
                s.dirty_held,
                s.dirty_replaced,
                s.dirty_merged,
                s.dirty_written_remote
            ),
            (2, 1, 2, 2)
        );
    }

    #[test]
    fn full_dirty_buffer_throttles_instead_of_losing_the_line() {
        let mut e = with(|c| c.dirty_buffer = 3);
        miss(&mut e, 1, 0);
        miss(&mut e, 2, 0);
        for o in 0..3 {
            assert_eq!(e.on_dirty_line_evicted(1, o), Ok(DirtyAction::Hold));
        }
        assert_eq!(
            e.on_dirty_line_evicted(2, 9),
            Ok(DirtyAction::FlushAndThrottle { flush: mask(&[9]) })
        );
        assert_eq!(e.page_state(2), PageState::Throttled);
        assert_eq!(e.dirty_len(), 3);
        assert_eq!(e.stats().throttles_buffer_full, 1);
    }

    #[test]
    fn issue_takes_a_request_from_anywhere_in_its_queue() {
        let mut e = with(|c| c.selection = Selection::Both);
        for p in 1..=3 {
            miss(&mut e, p, 0);
        }
        assert_eq!(pq(&e), vec![1, 2, 3]);
        // Page 2's node is free first: it leaves ahead of page 1.
        assert!(e.issue_page(2));
        assert_eq!(pq(&e), vec![1, 3]);
        assert_eq!(e.page_state(2), PageState::Moved);
        assert_eq!(e.page_state(1), PageState::Scheduled);
        assert!(!e.issue_page(2));
        // Its arrival installs it while page 1 still waits (and takes its
        // queued line out).
        assert!(matches!(
            e.on_page_arrival(2),
            PageArrival::Installed { .. }
        ));
        assert_eq!(sbq(&e), vec![(1, 0), (3, 0)]);
        assert!(e.issue_line(3, 0));
        assert!(!e.issue_line(3, 0));
        assert_eq!(sbq(&e), vec![(1, 0)]);
        assert_eq!((e.stats().pages_issued, e.stats().lines_issued), (1, 1));
    }

    #[test]
    fn schemes_other_than_selective() {
        // BP: both granularities always, no selection drop.
        let mut e = with(|c| c.selection = Selection::Both);
        miss(&mut e, 1, 0);
        assert_eq!(
            miss(&mut e, 1, 1),
            act(PageDecision::AlreadyInflight, LineDecision::Sent)
        );
        assert_eq!(sbq(&e), vec![(1, 0), (1, 1)]);
        // Remote / LC: pages only.
        let mut e = with(|c| c.selection = Selection::PageOnly);
        assert_eq!(
            miss(&mut e, 1, 0),
            act(PageDecision::Scheduled, LineDecision::Disabled)
        );
        assert_eq!((sbq(&e), pq(&e)), (vec![], vec![1]));
        // Cache-line only: no page is ever inflight, dirty lines go remote.
        let mut e = with(|c| c.selection = Selection::LineOnly);
        assert_eq!(
            miss(&mut e, 1, 0),
            act(PageDecision::Disabled, LineDecision::Sent)
        );
        assert_eq!(e.on_dirty_line_evicted(1, 0), Ok(DirtyAction::WriteRemote));
        assert_eq!((sbq(&e), pq(&e)), (vec![(1, 0)], vec![]));
    }

    #[test]
    fn single_granularity_schemes_use_the_whole_link() {
        let mut e = with(|c| c.selection = Selection::PageOnly);
        for p in 0..3 {
            miss(&mut e, p, 0);
        }
        let got: Vec<_> = (0..4).map(|_| e.issue()).collect();
        assert_eq!(
            got,
            vec![
                Issue::Page(0),
                Issue::Page(1),
                Issue::Page(2),
                Issue::Idle(Class::Page)
            ]
        );
        let mut e = with(|c| c.selection = Selection::LineOnly);
        for p in 0..30 {
            miss(&mut e, p, 0);
        }
        assert!((0..30).all(|_| matches!(e.issue(), Issue::Line(..))));
    }

    #[test]
    fn issue_follows_the_25_percent_alternation() {
        let mut e = engine();
        for p in 0..30 {
            miss(&mut e, p, 1);
        }
        let got: Vec<Issue> = (0..44).map(|_| e.issue()).collect();
        let mut want: Vec<Issue> = (0..21).map(|p| Issue::Line(p, 1)).collect();
        want.push(Issue::Page(0));
        want.extend((21..30).map(|p| Issue::Line(p, 1)));
        want.extend([Issue::Idle(Class::Line); 12]); // lines ran out
        want.push(Issue::Page(1));
        assert_eq!(got, want);
        assert_eq!(e.page_state(0), PageState::Moved);
        assert_eq!(e.page_state(2), PageState::Scheduled);
        assert_eq!(e.stats().idle_line_slots, 12);
    }
}
