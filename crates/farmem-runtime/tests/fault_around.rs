//! Fault-around of fresh memory: exact fault counts on sequential and
//! random first touches, in both dirty modes and on both fault paths, and
//! the data landing on the store.

use std::sync::Arc;

use farmem_policy::readahead::ReadaheadConfig;
use farmem_runtime::{Config, DirtyMode, FaultPath, MemStore, PAGE, Runtime, Stats};

mod common;
use common::skip;

const PAGES: usize = 512;

fn cfg(dirty: DirtyMode, path: FaultPath, max: u32) -> Config {
    Config {
        // Room for every page: no eviction ends a window early.
        local_bytes: 2 * PAGES as u64 * PAGE,
        zeroed_slabs: true,
        slab_batch: 4 << 20,
        dirty,
        fault_path: path,
        fault_around: ReadaheadConfig { max_blocks: max },
        ..Config::default()
    }
}

/// Writes one line in each page in `order`, checks every page, syncs, and
/// checks a fresh runtime sees the same bytes through the store.
fn run(c: Config, order: &[usize]) -> Stats {
    let store = Arc::new(MemStore::new(1 << 30));
    let rt = Runtime::new(c.clone(), store.clone(), store.clone()).unwrap();
    let r = rt.region(PAGES as u64 * PAGE).unwrap();
    let line = |p: usize| [(p % 251) as u8 + 1; 64];
    let at = |p: usize| p * PAGE as usize + (p % 64) * 64;
    for &p in order {
        r.write_at(at(p), &line(p)).unwrap();
    }
    let stats = rt.stats();
    let mut b = [0u8; 64];
    for p in 0..PAGES {
        r.read_at(at(p), &mut b).unwrap();
        assert_eq!(b, line(p), "page {p}");
    }
    r.sync().unwrap();
    let extents = r.extents().unwrap();
    drop(r);
    drop(rt);
    let rt = Runtime::new(
        Config {
            zeroed_slabs: false,
            ..c
        },
        store.clone(),
        store,
    )
    .unwrap();
    let r = rt.region_over(&extents).unwrap();
    for p in 0..PAGES {
        r.read_at(at(p), &mut b).unwrap();
        assert_eq!(b, line(p), "page {p} on the store");
    }
    stats
}

/// Missing faults for `pages` touched in order with windows doubling from
/// 1 to `max`: 1, 2, 4, …, max, max, … pages per fault.
fn sequential_faults(pages: usize, max: usize) -> u64 {
    let (mut done, mut window, mut faults) = (0, 1, 0);
    while done < pages {
        done += window;
        faults += 1;
        window = (window * 2).min(max);
    }
    faults
}

/// Checks a fill of every page in order took a fault per window and no
/// write-protect fault; fault counts are exact on the signal path only.
/// (On the thread path the program runs on while its handler faults
/// around, and may fault on a page still being installed and wait; on the
/// signal path the faulting thread installs the window before it goes on.)
fn assert_one_fault_per_window(s: &Stats, faults: u64, path: FaultPath) {
    assert_eq!(
        s.pages_faulted_around,
        PAGES as u64 - faults,
        "{path}: {s:?}"
    );
    assert_eq!(s.faults_wp, 0, "{path}: {s:?}");
    if path == FaultPath::Signal {
        assert_eq!(s.faults_missing, faults, "{s:?}");
    }
}

#[test]
fn a_sequential_fill_takes_one_fault_per_window() {
    if skip() {
        return;
    }
    let order: Vec<usize> = (0..PAGES).collect();
    let faults = sequential_faults(PAGES, 32);
    assert_eq!(faults, 21);
    for path in [FaultPath::Signal, FaultPath::Thread] {
        // Line mode: neighbours are mapped writable (zeros are their diff
        // base), so their writes take no fault at all.
        let s = run(cfg(DirtyMode::Line, path, 32), &order);
        assert_eq!(s.pages_zero_filled, PAGES as u64, "{path}: {s:?}");
        assert_one_fault_per_window(&s, faults, path);
        // Page mode too: a neighbour over zeros is shipped whole once
        // written, so its writes need no fault either.
        let s = run(cfg(DirtyMode::Page, path, 32), &order);
        assert_one_fault_per_window(&s, faults, path);
        // Off: a fault per page.
        let s = run(cfg(DirtyMode::Line, path, 0), &order);
        assert_eq!(s.pages_faulted_around, 0, "{path}: {s:?}");
        assert_eq!(s.faults_missing, PAGES as u64, "{path}: {s:?}");
    }
}

#[test]
fn a_descending_fill_takes_one_fault_per_window() {
    if skip() {
        return;
    }
    // From the top down, as GNU sort writes its table of lines.
    let order: Vec<usize> = (0..PAGES).rev().collect();
    let faults = sequential_faults(PAGES, 32);
    for path in [FaultPath::Signal, FaultPath::Thread] {
        let s = run(cfg(DirtyMode::Line, path, 32), &order);
        assert_eq!(s.pages_zero_filled, PAGES as u64, "{path}: {s:?}");
        assert_one_fault_per_window(&s, faults, path);
    }
}

#[test]
fn scattered_first_touches_get_no_fault_around() {
    if skip() {
        return;
    }
    // Every page once, never right after the page before it.
    let order: Vec<usize> = (0..PAGES).map(|i| i * 97 % PAGES).collect();
    for path in [FaultPath::Signal, FaultPath::Thread] {
        let s = run(cfg(DirtyMode::Line, path, 32), &order);
        assert_eq!(s.faults_missing, PAGES as u64, "{path}: {s:?}");
        assert_eq!(s.pages_faulted_around, 0, "{path}: {s:?}");
    }
}

#[test]
fn pages_faulted_around_and_never_written_cost_the_store_nothing() {
    if skip() {
        return;
    }
    for path in [FaultPath::Signal, FaultPath::Thread] {
        let store = Arc::new(MemStore::new(1 << 30));
        let rt = Runtime::new(
            Config {
                // 64 pages of cache: most pages are evicted.
                local_bytes: 64 * PAGE,
                ..cfg(DirtyMode::Line, path, 32)
            },
            store.clone(),
            store.clone(),
        )
        .unwrap();
        let r = rt.region(8 << 20).unwrap();
        // Pages 0..100 written in order: the last windows reach past 100.
        for p in 0..100usize {
            r.write_at(p * PAGE as usize, &[7; 8]).unwrap();
        }
        r.sync().unwrap();
        let s = rt.stats();
        assert!(s.pages_faulted_around > 0, "{path}: {s:?}");
        // Exactly the 100 written pages' first lines reached the store.
        assert_eq!(store.stats().lines_written, 100, "{path}: {s:?}");
        // Past page 100 nothing was written: read back as zeros, locally
        // (no fetch: the store was never given those pages).
        let fetched = s.pages_fetched;
        let mut b = [1u8; 8];
        for p in 100..140usize {
            r.read_at(p * PAGE as usize, &mut b).unwrap();
            assert_eq!(b, [0; 8], "{path}: page {p}");
        }
        let s = rt.stats();
        assert_eq!(s.pages_fetched, fetched, "{path}: {s:?}");
        // Only the chunk holding pages 0..100 was backed (2 MiB chunks).
        assert_eq!(r.backed_bytes(), 2 << 20, "{path}");
    }
}

/// Writes PAGES distinct pages through one runtime and returns the store
/// and the extents that hold them.
fn stored_pages() -> (Arc<MemStore>, Vec<(u64, u64)>) {
    let store = Arc::new(MemStore::new(1 << 30));
    let rt = Runtime::new(
        cfg(DirtyMode::Line, FaultPath::Thread, 0),
        store.clone(),
        store.clone(),
    )
    .unwrap();
    let r = rt.region(PAGES as u64 * PAGE).unwrap();
    for p in 0..PAGES {
        r.write_at(p * PAGE as usize, &[(p % 251) as u8 + 1; PAGE as usize])
            .unwrap();
    }
    r.sync().unwrap();
    let extents = r.extents().unwrap();
    (store, extents)
}

/// Reads every page of a region over `extents` in order, checking each.
fn read_in_order(store: &Arc<MemStore>, extents: &[(u64, u64)], c: Config) -> Stats {
    read_pages(store, extents, c, 0..PAGES)
}

/// Reads the pages of a region over `extents` in `order`, checking each.
fn read_pages(
    store: &Arc<MemStore>,
    extents: &[(u64, u64)],
    c: Config,
    order: impl Iterator<Item = usize>,
) -> Stats {
    let rt = Runtime::new(c, store.clone(), store.clone()).unwrap();
    let r = rt.region_over(extents).unwrap();
    let mut page = vec![0u8; PAGE as usize];
    for p in order {
        r.read_at(p * PAGE as usize, &mut page).unwrap();
        assert!(page.iter().all(|&b| b == (p % 251) as u8 + 1), "page {p}");
    }
    rt.stats()
}

#[test]
fn reading_far_data_in_order_takes_one_read_per_window() {
    if skip() {
        return;
    }
    let (store, extents) = stored_pages();
    let faults = sequential_faults(PAGES, 32);
    // On the signal path the handler reads its own page and a filler
    // thread the window after it; on the thread path the handler reads
    // both in one request.
    for path in [FaultPath::Thread, FaultPath::Signal] {
        let reads_before = store.stats().reads;
        let s = read_in_order(&store, &extents, cfg(DirtyMode::Line, path, 32));
        assert_eq!(s.pages_fetched, PAGES as u64, "{path}: {s:?}");
        assert_eq!(
            s.pages_faulted_around,
            PAGES as u64 - faults,
            "{path}: {s:?}"
        );
        assert_eq!(s.pages_zero_filled, 0, "{path}: {s:?}");
        // Signal path: a read per fault and one per window, except at the
        // first fault (a window of its own page only) and the last (its
        // window starts at the region's end). Thread path: one per fault.
        let reads = store.stats().reads - reads_before;
        let expected = match path {
            FaultPath::Thread => faults,
            FaultPath::Signal => 2 * faults - 2,
        };
        assert_eq!(reads, expected, "{path}: {s:?}");
    }
}

#[test]
fn reading_far_data_from_the_top_down_takes_one_read_per_window_below() {
    if skip() {
        return;
    }
    let (store, extents) = stored_pages();
    let faults = sequential_faults(PAGES, 32);
    // The thread path reads a descending window with its page, in one
    // request; the signal path's fillers read only above a fault.
    let reads_before = store.stats().reads;
    let c = cfg(DirtyMode::Line, FaultPath::Thread, 32);
    let s = read_pages(&store, &extents, c, (0..PAGES).rev());
    assert_eq!(s.pages_fetched, PAGES as u64, "{s:?}");
    assert_eq!(s.pages_faulted_around, PAGES as u64 - faults, "{s:?}");
    assert_eq!(store.stats().reads - reads_before, faults, "{s:?}");

    let reads_before = store.stats().reads;
    let c = cfg(DirtyMode::Line, FaultPath::Signal, 32);
    let s = read_pages(&store, &extents, c, (0..PAGES).rev());
    assert_eq!(s.pages_faulted_around, 0, "{s:?}");
    assert_eq!(store.stats().reads - reads_before, PAGES as u64, "{s:?}");
}

#[test]
fn a_write_streams_window_is_installed_writable_and_its_writes_reach_the_store() {
    if skip() {
        return;
    }
    let (store, extents) = stored_pages();
    for order in [
        (0..PAGES).collect::<Vec<_>>(),
        (0..PAGES).rev().collect::<Vec<_>>(),
    ] {
        let c = cfg(DirtyMode::Line, FaultPath::Thread, 32);
        let rt = Runtime::new(c.clone(), store.clone(), store.clone()).unwrap();
        let r = rt.region_over(&extents).unwrap();
        // One line of each page rewritten: the window's pages take no
        // write-protect fault, and what is shipped (the line, or the page
        // where the diff-base policy kept no copy) lands in place.
        let line = |p: usize| [(p % 13) as u8 + 200; 64];
        for &p in &order {
            r.write_at(p * PAGE as usize + 128, &line(p)).unwrap();
        }
        // Counts of faults and windows are exact on the signal path only
        // (the program may fault on a page still being installed and
        // wait); that no write took a write-protect fault is exact here.
        let s = rt.stats();
        assert!(s.pages_faulted_around >= PAGES as u64 / 2, "{s:?}");
        assert_eq!(s.faults_wp, 0, "{s:?}");
        assert!(s.writes_predicted > 0, "{s:?}");
        r.sync().unwrap();
        drop(r);
        drop(rt);
        let rt = Runtime::new(c, store.clone(), store.clone()).unwrap();
        let r = rt.region_over(&extents).unwrap();
        let mut page = vec![0u8; PAGE as usize];
        for p in 0..PAGES {
            r.read_at(p * PAGE as usize, &mut page).unwrap();
            let old = (p % 251) as u8 + 1;
            assert!(page[..128].iter().all(|&b| b == old), "page {p}");
            assert_eq!(page[128..192], line(p), "page {p}");
            assert!(page[192..].iter().all(|&b| b == old), "page {p}");
        }
    }
}

#[test]
fn a_read_faults_window_comes_in_protected_whatever_its_pages_history() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(1 << 30));
    let c = Config {
        local_bytes: PAGES as u64 / 2 * PAGE,
        ..cfg(DirtyMode::Line, FaultPath::Thread, 32)
    };
    let rt = Runtime::new(c, store.clone(), store.clone()).unwrap();
    let r = rt.region(PAGES as u64 * PAGE).unwrap();
    // Every page written once and evicted: each one's history predicts a
    // write, so a read fault installs its own page writable.
    let p_ = PAGE as usize;
    for p in 0..PAGES {
        r.write_at(p * p_, &[(p % 251) as u8 + 1]).unwrap();
    }
    let before = rt.stats();
    let mut b = [0u8; 1];
    for p in 0..PAGES {
        r.read_at(p * p_, &mut b).unwrap();
        assert_eq!(b[0], (p % 251) as u8 + 1, "page {p}");
    }
    let s = rt.stats();
    let faults = s.faults_missing - before.faults_missing;
    let predicted = s.writes_predicted - before.writes_predicted;
    let around = s.pages_faulted_around - before.pages_faulted_around;
    assert!(around > faults, "read in windows: {s:?}");
    assert!(
        predicted <= faults,
        "only each fault's own page goes writable on its history: {predicted} of {faults} faults"
    );
    assert_eq!(s.faults_wp, before.faults_wp, "nothing was written");
}

#[test]
fn a_failed_read_ahead_leaves_each_page_to_its_own_fault() {
    if skip() {
        return;
    }
    let (store, extents) = stored_pages();
    // Reads from now: page 0 (its window is itself), pages 1 and 2 (a
    // window of 2, read with its page), then pages 3 to 6: that one fails,
    // page 3 is read alone and the window's pages are left to their faults.
    store.fail_nth(2, farmem_runtime::FaultOp::Read);
    let s = read_in_order(
        &store,
        &extents,
        cfg(DirtyMode::Line, FaultPath::Thread, 32),
    );
    assert_eq!(s.fetch_errors, 1, "{s:?}");
    assert_eq!(s.pages_fetched, PAGES as u64, "{s:?}");
    let around_without_failure = PAGES as u64 - sequential_faults(PAGES, 32);
    assert!(s.pages_faulted_around < around_without_failure, "{s:?}");
    assert!(s.pages_faulted_around > 0, "{s:?}");
}
