//! Random sequences of misses, issues, arrivals and dirty evictions against
//! a model of what the caller sees: no buffer ever exceeds its capacity, no
//! page or line is requested twice while inflight, and every dirty line is
//! accounted for exactly once (held, merged into its arrived page, written
//! to remote, or replaced by a newer eviction of the same line), and every
//! installed page, and in the end remote memory, holds the newest version of
//! every line (a stale page installed over flushed lines would fail this).

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;

use super::*;

#[derive(Debug, Clone)]
enum Op {
    Miss(PageNo, LineOffset, bool),
    Issue,
    PopLine,
    PopPage,
    /// Deliver the `i`-th (mod len) issued line packet still on the wire.
    ArriveLine(usize),
    /// Deliver the `i`-th (mod len) issued page packet still on the wire.
    ArrivePage(usize),
    /// A packet for this line or page: the earliest one on the wire if
    /// there is one (out of order), otherwise one nobody asked for.
    StrayLine(PageNo, LineOffset),
    StrayPage(PageNo),
    DirtyEvict(PageNo, LineOffset),
    /// Local memory drops a page (its write-back is not the engine's job).
    EvictLocal(PageNo),
}

const PAGES: PageNo = 6;
const OFFSETS: LineOffset = 10;

fn op() -> impl Strategy<Value = Op> {
    let page = 0..PAGES;
    let off = 0..OFFSETS;
    prop_oneof![
        4 => (page.clone(), off.clone(), any::<bool>()).prop_map(|(p, o, w)| Op::Miss(p, o, w)),
        3 => Just(Op::Issue),
        1 => Just(Op::PopLine),
        1 => Just(Op::PopPage),
        3 => any::<usize>().prop_map(Op::ArriveLine),
        2 => any::<usize>().prop_map(Op::ArrivePage),
        1 => (page.clone(), off.clone()).prop_map(|(p, o)| Op::StrayLine(p, o)),
        1 => page.clone().prop_map(Op::StrayPage),
        4 => (page.clone(), off).prop_map(|(p, o)| Op::DirtyEvict(p, o)),
        1 => page.prop_map(Op::EvictLocal),
    ]
}

fn config() -> impl Strategy<Value = EngineConfig> {
    (
        (1usize..6, 1usize..6, 1usize..5, 1usize..5),
        (1usize..8, 0u32..4),
        prop_oneof![
            Just(Selection::Selective),
            Just(Selection::Both),
            Just(Selection::PageOnly),
            Just(Selection::LineOnly)
        ],
        prop_oneof![Just(0.0), Just(0.25), Just(0.5), Just(1.0)],
    )
        .prop_map(
            |((sbq, pq, isb, ipg), (dirty, throttle), selection, r)| EngineConfig {
                sub_block_queue: sbq,
                page_queue: pq,
                inflight_sub_block: isb,
                inflight_page: ipg,
                dirty_buffer: dirty,
                dirty_throttle: throttle,
                selection,
                partition: PartitionConfig {
                    ratio: farmem_core::Ratio::new(r).unwrap(),
                    ..PartitionConfig::default()
                },
            },
        )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Merged,
    Remote,
    Replaced,
    /// Its page was local: written into local memory, not the engine's.
    Local,
}

/// A page's contents: the version (eviction number, 0 = initial) of each
/// line, absent meaning 0.
type Data = HashMap<LineOffset, usize>;

/// What the caller knows, built only from the engine's answers.
#[derive(Default)]
struct Model {
    local: HashSet<PageNo>,
    inflight_pages: HashSet<PageNo>,
    inflight_lines: HashSet<(PageNo, LineOffset)>,
    wire_lines: Vec<(PageNo, LineOffset)>,
    /// Issued pages with the remote contents read when they were issued.
    wire_pages: Vec<(PageNo, Data)>,
    /// The newest version of each line the program wrote back.
    latest: HashMap<(PageNo, LineOffset), usize>,
    remote: HashMap<PageNo, Data>,
    local_data: HashMap<PageNo, Data>,
    /// Held dirty line → the eviction (version) whose data it holds.
    held: HashMap<(PageNo, LineOffset), usize>,
    fates: Vec<Option<Fate>>,
}

impl Model {
    fn settle(&mut self, v: usize, fate: Fate) -> Result<(), TestCaseError> {
        prop_assert!(self.fates[v - 1].is_none(), "dirty line {v} settled twice");
        self.fates[v - 1] = Some(fate);
        Ok(())
    }

    fn held_of(&self, page: PageNo) -> Vec<LineOffset> {
        let mut v: Vec<_> = self
            .held
            .keys()
            .filter(|k| k.0 == page)
            .map(|k| k.1)
            .collect();
        v.sort_unstable();
        v
    }

    fn issued(&mut self, issue: Issue) {
        match issue {
            Issue::Line(p, o) => self.wire_lines.push((p, o)),
            Issue::Page(p) => {
                // The memory node reads the page now: anything written to
                // remote after this is not in it.
                let snapshot = self.remote.get(&p).cloned().unwrap_or_default();
                self.wire_pages.push((p, snapshot));
            }
            Issue::Idle(_) => {}
        }
    }

    fn write_remote(&mut self, page: PageNo, offset: LineOffset, v: usize) {
        self.remote.entry(page).or_default().insert(offset, v);
    }

    /// Every line of `data` is the newest version of that line of `page`.
    fn fresh(&self, page: PageNo, data: &Data) -> Result<(), TestCaseError> {
        for o in 0..OFFSETS {
            let have = data.get(&o).copied().unwrap_or(0);
            let want = self.latest.get(&(page, o)).copied().unwrap_or(0);
            prop_assert_eq!(have, want, "page {} line {} is stale", page, o);
        }
        Ok(())
    }

    fn page_arrived(
        &mut self,
        e: &mut ComputeEngine,
        page: PageNo,
        mut data: Data,
    ) -> Result<(), TestCaseError> {
        match e.on_page_arrival(page) {
            PageArrival::Installed { merge, ignored } => {
                prop_assert!(self.inflight_pages.remove(&page));
                let merge: Vec<_> = merge.offsets().collect();
                prop_assert_eq!(&merge, &self.held_of(page));
                for o in merge {
                    let v = self.held.remove(&(page, o)).unwrap();
                    self.settle(v, Fate::Merged)?;
                    data.insert(o, v);
                }
                self.fresh(page, &data)?;
                self.local_data.insert(page, data);
                let mut lines: Vec<_> = self
                    .inflight_lines
                    .iter()
                    .filter(|k| k.0 == page)
                    .map(|k| k.1)
                    .collect();
                lines.sort_unstable();
                prop_assert_eq!(ignored.offsets().collect::<Vec<_>>(), lines);
                self.inflight_lines.retain(|k| k.0 != page);
                self.local.insert(page);
            }
            PageArrival::Discarded { rerequested } => {
                prop_assert!(self.inflight_pages.contains(&page));
                prop_assert!(self.held_of(page).is_empty());
                if !rerequested {
                    self.inflight_pages.remove(&page);
                }
            }
            PageArrival::Unexpected => {}
        }
        Ok(())
    }

    fn apply(&mut self, e: &mut ComputeEngine, op: Op) -> Result<(), TestCaseError> {
        match op {
            Op::Miss(p, o, w) => {
                if self.local.contains(&p) {
                    return Ok(());
                }
                let a = e.on_miss(p, o, w).unwrap();
                prop_assert_eq!(
                    a.line == LineDecision::HeldDirty,
                    self.held.contains_key(&(p, o))
                );
                match a.page {
                    PageDecision::Scheduled => {
                        prop_assert!(self.inflight_pages.insert(p), "page {p} scheduled twice");
                    }
                    PageDecision::AlreadyInflight => {
                        prop_assert!(self.inflight_pages.contains(&p))
                    }
                    PageDecision::BufferFull | PageDecision::Disabled => {
                        prop_assert!(!self.inflight_pages.contains(&p))
                    }
                }
                match a.line {
                    LineDecision::Sent => {
                        prop_assert!(self.inflight_lines.insert((p, o)), "line sent twice")
                    }
                    LineDecision::AlreadyInflight => {
                        prop_assert!(self.inflight_lines.contains(&(p, o)))
                    }
                    _ => {}
                }
            }
            Op::Issue => {
                let i = e.issue();
                self.issued(i);
            }
            Op::PopLine => {
                if let Some((p, o)) = e.pop_line() {
                    self.issued(Issue::Line(p, o));
                }
            }
            Op::PopPage => {
                if let Some(p) = e.pop_page() {
                    self.issued(Issue::Page(p));
                }
            }
            Op::ArriveLine(i) => {
                if self.wire_lines.is_empty() {
                    return Ok(());
                }
                let (p, o) = self.wire_lines.swap_remove(i % self.wire_lines.len());
                match e.on_line_arrival(p, o) {
                    LineArrival::Deliver => prop_assert!(self.inflight_lines.remove(&(p, o))),
                    LineArrival::Ignored => prop_assert!(!self.inflight_lines.contains(&(p, o))),
                }
            }
            Op::ArrivePage(i) => {
                if self.wire_pages.is_empty() {
                    return Ok(());
                }
                let (p, data) = self.wire_pages.swap_remove(i % self.wire_pages.len());
                self.page_arrived(e, p, data)?;
            }
            Op::StrayLine(p, o) => {
                if let Some(i) = self.wire_lines.iter().position(|&l| l == (p, o)) {
                    return self.apply(e, Op::ArriveLine(i));
                }
                if e.sub_block_queue().any(|l| l == (p, o)) {
                    return Ok(()); // its real packet is yet to be issued
                }
                prop_assert_eq!(e.on_line_arrival(p, o), LineArrival::Ignored);
            }
            Op::StrayPage(p) => {
                if let Some(i) = self.wire_pages.iter().position(|w| w.0 == p) {
                    let (_, data) = self.wire_pages.remove(i);
                    return self.page_arrived(e, p, data);
                }
                prop_assert_eq!(e.on_page_arrival(p), PageArrival::Unexpected);
            }
            Op::DirtyEvict(p, o) => {
                let v = self.fates.len() + 1; // 0 is the initial version
                self.fates.push(None);
                self.latest.insert((p, o), v);
                if self.local.contains(&p) {
                    self.local_data.entry(p).or_default().insert(o, v);
                    return self.settle(v, Fate::Local);
                }
                match e.on_dirty_line_evicted(p, o).unwrap() {
                    DirtyAction::WriteRemote => {
                        // A held older copy would later overwrite this one.
                        prop_assert!(!self.held.contains_key(&(p, o)));
                        self.write_remote(p, o, v);
                        self.settle(v, Fate::Remote)?;
                    }
                    DirtyAction::Hold => {
                        prop_assert!(self.inflight_pages.contains(&p));
                        prop_assert!(self.held.insert((p, o), v).is_none());
                    }
                    DirtyAction::Replace => {
                        let old = self.held.insert((p, o), v);
                        prop_assert!(old.is_some());
                        self.settle(old.unwrap(), Fate::Replaced)?;
                    }
                    DirtyAction::FlushAndThrottle { flush } => {
                        prop_assert!(flush.contains(o));
                        let mut want = self.held_of(p);
                        want.push(o);
                        want.sort_unstable();
                        prop_assert_eq!(flush.offsets().collect::<Vec<_>>(), want);
                        for off in flush.offsets().filter(|&x| x != o) {
                            let old = self.held.remove(&(p, off)).unwrap();
                            self.write_remote(p, off, old);
                            self.settle(old, Fate::Remote)?;
                        }
                        self.write_remote(p, o, v);
                        self.settle(v, Fate::Remote)?;
                    }
                }
            }
            Op::EvictLocal(p) => {
                // The caller writes the page back (Kona-style line diffs or
                // the whole page; here the whole page).
                if self.local.remove(&p) {
                    let data = self.local_data.remove(&p).unwrap_or_default();
                    self.remote.insert(p, data);
                }
            }
        }
        Ok(())
    }

    fn check(&self, e: &ComputeEngine) -> Result<(), TestCaseError> {
        let c = e.config();
        prop_assert!(e.sub_block_queue().len() <= c.sub_block_queue);
        prop_assert!(e.page_queue().len() <= c.page_queue);
        prop_assert!(e.inflight_sub_block_len() <= c.inflight_sub_block);
        prop_assert!(e.inflight_page_len() <= c.inflight_page);
        prop_assert!(e.dirty_len() <= c.dirty_buffer);
        prop_assert_eq!(e.dirty_len(), self.held.len());
        let queued: Vec<_> = e.page_queue().collect();
        let distinct: HashSet<_> = queued.iter().collect();
        prop_assert_eq!(distinct.len(), queued.len(), "page queued twice");
        for p in 0..PAGES {
            let state = e.page_state(p);
            prop_assert_eq!(
                state != PageState::Invalid,
                self.inflight_pages.contains(&p)
            );
            let held: Vec<_> = e.dirty_lines(p).offsets().collect();
            prop_assert_eq!(&held, &self.held_of(p));
            prop_assert!(held.len() as u32 <= c.dirty_throttle);
            // Scheduled means queued; a queued page is scheduled or was
            // throttled before it left the queue.
            if state == PageState::Scheduled {
                prop_assert!(queued.contains(&p));
            }
            if queued.contains(&p) {
                prop_assert!(matches!(state, PageState::Scheduled | PageState::Throttled));
            }
            for o in 0..OFFSETS {
                prop_assert_eq!(
                    e.inflight_lines(p).contains(o),
                    self.inflight_lines.contains(&(p, o))
                );
            }
        }
        Ok(())
    }

    /// Issue and deliver everything until nothing is inflight.
    fn drain(&mut self, e: &mut ComputeEngine) -> Result<(), TestCaseError> {
        for _ in 0..64 {
            while let Some(l) = e.pop_line() {
                self.wire_lines.push(l);
            }
            while let Some(p) = e.pop_page() {
                self.issued(Issue::Page(p));
            }
            while let Some((p, o)) = self.wire_lines.pop() {
                if e.on_line_arrival(p, o) == LineArrival::Deliver {
                    self.inflight_lines.remove(&(p, o));
                }
            }
            while let Some((p, data)) = self.wire_pages.pop() {
                self.page_arrived(e, p, data)?;
            }
            self.check(e)?;
            if !e.has_work() && self.wire_pages.is_empty() && self.wire_lines.is_empty() {
                break;
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn engine_never_overflows_loses_dirty_data_or_double_requests(
        cfg in config(),
        ops in prop::collection::vec(op(), 0..200),
    ) {
        let mut e = ComputeEngine::new(cfg).unwrap();
        let mut m = Model::default();
        for op in ops {
            m.apply(&mut e, op)?;
            m.check(&e)?;
        }
        m.drain(&mut e)?;
        prop_assert_eq!(e.inflight_page_len(), 0);
        prop_assert_eq!(e.dirty_len(), 0);
        prop_assert!(m.held.is_empty());
        for (v, fate) in m.fates.iter().enumerate() {
            prop_assert!(fate.is_some(), "dirty line {} lost", v + 1);
        }
        // Nothing stale anywhere: local pages and remote memory both hold
        // the newest version of every line.
        for p in 0..PAGES {
            match m.local_data.get(&p) {
                Some(data) => m.fresh(p, data)?,
                None => m.fresh(p, &m.remote.get(&p).cloned().unwrap_or_default())?,
            }
        }
        let s = e.stats();
        let remote = m.fates.iter().filter(|f| **f == Some(Fate::Remote)).count() as u64;
        prop_assert_eq!(s.dirty_written_remote + s.dirty_flushed, remote);
        let merged = m.fates.iter().filter(|f| **f == Some(Fate::Merged)).count() as u64;
        prop_assert_eq!(s.dirty_merged, merged);
    }
}
