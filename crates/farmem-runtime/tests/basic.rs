//! Single-threaded behaviour of far regions against MemStore.

use std::sync::Arc;

use farmem_policy::readahead::ReadaheadConfig;
use farmem_runtime::{Config, DirtyMode, FaultPath, MemStore, PAGE, RemoteStore, Runtime};

mod common;
use common::skip;

/// Fault-around off: these tests count faults and fetches page by page
/// (tests/fault_around.rs counts them with it).
fn cfg(local_pages: u64, dirty: DirtyMode) -> Config {
    Config {
        local_bytes: local_pages * PAGE,
        dirty,
        slab_batch: 64 << 20,
        fault_around: ReadaheadConfig { max_blocks: 0 },
        ..Config::default()
    }
}

/// A 64-page cache over zeroed slabs taken 4 MiB at a time: a large region
/// takes remote memory only where pages are written back.
fn lazy_runtime(store: &Arc<MemStore>) -> Runtime {
    let c = Config {
        zeroed_slabs: true,
        slab_batch: 4 << 20,
        ..cfg(64, DirtyMode::Line)
    };
    Runtime::new(c, store.clone(), store.clone()).unwrap()
}

#[test]
fn fresh_region_reads_zero_and_keeps_writes() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(1 << 30));
    let rt = Runtime::new(cfg(64, DirtyMode::Line), store.clone(), store.clone()).unwrap();
    let r = rt.region(16 * PAGE).unwrap();
    let mut b = [1u8; 100];
    r.read_at(5000, &mut b).unwrap();
    assert_eq!(b, [0u8; 100]);
    r.write_at(5000, b"hello far memory").unwrap();
    let mut b = [0u8; 16];
    r.read_at(5000, &mut b).unwrap();
    assert_eq!(&b, b"hello far memory");
    let s = rt.stats();
    assert_eq!(s.faults_missing, 1, "{s:?}");
    // One write-protect fault, or two when the write raced the end of the
    // fetch (it waits, is woken, and faults again).
    assert!((1..=2).contains(&s.faults_wp), "{s:?}");
    assert_eq!(s.snapshots, 1, "{s:?}");
    assert_eq!(s.pages_fetched, 1);
    assert!(r.read_at(16 * PAGE as usize - 1, &mut b).is_err());
}

fn evict_roundtrip(dirty: DirtyMode) -> (farmem_runtime::Stats, farmem_runtime::MemStoreStats) {
    let store = Arc::new(MemStore::new(1 << 30));
    let rt = Runtime::new(uncapped(cfg(64, dirty)), store.clone(), store.clone()).unwrap();
    let pages = 1024usize;
    let r = rt.region(pages as u64 * PAGE).unwrap();
    // One line per page, as Kona's microbenchmark.
    for p in 0..pages {
        r.write_at(
            p * PAGE as usize + 64 * (p % 64),
            &(p as u32 + 1).to_le_bytes(),
        )
        .unwrap();
    }
    for p in 0..pages {
        let mut b = [0u8; 4];
        r.read_at(p * PAGE as usize + 64 * (p % 64), &mut b)
            .unwrap();
        assert_eq!(u32::from_le_bytes(b), p as u32 + 1, "page {p}");
    }
    // The evictor may still be shipping: wait until the store has every
    // line the runtime counted and nothing more is landing.
    let (s, st) = (0..5000)
        .map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(1));
            let before = store.stats();
            (rt.stats(), store.stats(), before)
        })
        .find(|(s, st, before)| st == before && s.dirty_lines_shipped == st.lines_written)
        .map(|(s, st, _)| (s, st))
        .expect("write-backs settle");
    assert!(s.resident_pages <= 64, "{s:?}");
    assert!(s.pages_evicted_dirty > 0, "{s:?}");
    assert!(rt.last_error().is_none(), "{:?}", rt.last_error());
    (s, st)
}

#[test]
fn eviction_writes_back_lines_or_pages() {
    if skip() {
        return;
    }
    let (line, lst) = evict_roundtrip(DirtyMode::Line);
    let (page, pst) = evict_roundtrip(DirtyMode::Page);
    eprintln!("line: {line:?}\n{lst:?}\npage: {page:?}\n{pst:?}");
    assert_eq!(line.bytes_written_back, line.dirty_lines_shipped * 64);
    // One line per page; a page evicted twice ships its line twice.
    assert!(line.dirty_lines_shipped >= 1024 - 64, "{line:?}");
    // At most one line per dirty eviction (none if a racing eviction already
    // shipped it and the rest of the write left the line as it was).
    assert!(
        line.dirty_lines_shipped <= line.pages_evicted_dirty,
        "{line:?}"
    );
    assert!(page.bytes_written_back >= 32 * line.bytes_written_back);
    // Whole pages only: one per dirty eviction, and one per page written
    // while its write-back was in flight (shipped, then kept dirty).
    assert_eq!(page.bytes_written_back, page.dirty_lines_shipped * 64);
    assert_eq!(page.dirty_lines_shipped % 64, 0, "{page:?}");
    assert!(
        page.dirty_lines_shipped >= page.pages_evicted_dirty * 64,
        "{page:?}"
    );
    assert_eq!(pst.lines_written, page.dirty_lines_shipped);
}

#[test]
fn synced_data_is_seen_by_a_fresh_runtime() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(1 << 30));
    let extents;
    {
        let rt = Runtime::new(cfg(64, DirtyMode::Line), store.clone(), store.clone()).unwrap();
        let r = rt.region(200 * PAGE).unwrap();
        for p in 0..200usize {
            r.write_at(p * PAGE as usize + 100, &[p as u8; 300])
                .unwrap();
        }
        r.sync().unwrap();
        extents = r.extents().unwrap();
        let s = rt.stats();
        assert!(s.pages_synced > 0);
    }
    // Bytes are on the store.
    let mut b = [0u8; 300];
    store.read(extents[0].0 + 7 * PAGE + 100, &mut b).unwrap();
    assert_eq!(b, [7u8; 300]);
    let rt = Runtime::new(cfg(64, DirtyMode::Line), store.clone(), store.clone()).unwrap();
    let r = rt.region_over(&extents).unwrap();
    for p in 0..200usize {
        r.read_at(p * PAGE as usize + 100, &mut b).unwrap();
        assert_eq!(b, [p as u8; 300], "page {p}");
    }
}

#[test]
fn concurrent_faults_on_the_same_pages_fetch_each_once() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(1 << 30));
    let pages = 2048usize;
    // Cache well past the region and a diff base of each page (both
    // count against it, the watermarks below it): no eviction, so every
    // page is fetched exactly once however the four threads interleave.
    let rt = Runtime::new(
        Config {
            fillers: 3,
            ..cfg(3 * pages as u64, DirtyMode::Line)
        },
        store.clone(),
        store.clone(),
    )
    .unwrap();
    let r = rt.region(pages as u64 * PAGE).unwrap();
    std::thread::scope(|s| {
        for t in 0..4usize {
            let r = &r;
            s.spawn(move || {
                for p in 0..pages {
                    // Threads write their own byte of each page, half of
                    // them in reverse order, so faults collide both ways.
                    let p = if t % 2 == 0 { p } else { pages - 1 - p };
                    r.write_at(p * PAGE as usize + t, &[t as u8 + 1]).unwrap();
                }
            });
        }
    });
    let s = rt.stats();
    assert_eq!(s.pages_fetched, pages as u64, "{s:?}");
    assert_eq!(store.stats().reads, pages as u64);
    let mut b = [0u8; 4];
    for p in 0..pages {
        r.read_at(p * PAGE as usize, &mut b).unwrap();
        assert_eq!(b, [1, 2, 3, 4], "page {p}");
    }
}

#[test]
fn stats_serialize_with_every_counter() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(1 << 30));
    let rt = Runtime::new(cfg(64, DirtyMode::Line), store.clone(), store.clone()).unwrap();
    let v: serde_json::Value = serde_json::to_value(rt.stats()).unwrap();
    for key in [
        "faults_missing",
        "faults_wp",
        "pages_fetched",
        "bytes_fetched",
        "pages_evicted_clean",
        "pages_evicted_dirty",
        "dirty_lines_shipped",
        "bytes_written_back",
        "log_batches",
        "fault_latency",
        "stages",
    ] {
        assert!(v.get(key).is_some(), "missing {key} in {v}");
    }
}

#[test]
fn bad_config_is_rejected_with_a_reason() {
    let store = Arc::new(MemStore::new(1 << 30));
    let err = Runtime::new(cfg(4, DirtyMode::Line), store.clone(), store.clone())
        .err()
        .unwrap();
    assert!(err.to_string().contains("local_bytes"), "{err}");
    let err = Runtime::new(
        Config {
            low_watermark: 0.99,
            ..cfg(64, DirtyMode::Line)
        },
        store.clone(),
        store,
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("watermarks"), "{err}");
}

#[test]
fn dropping_a_region_frees_its_cache_slots() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(1 << 30));
    let rt = Runtime::new(cfg(64, DirtyMode::Line), store.clone(), store.clone()).unwrap();
    for round in 0..3u8 {
        let r = rt.region(256 * PAGE).unwrap();
        for p in 0..256usize {
            r.write_at(p * PAGE as usize, &[round + 1; 64]).unwrap();
        }
        let mut b = [0u8; 64];
        r.read_at(255 * PAGE as usize, &mut b).unwrap();
        assert_eq!(b, [round + 1; 64]);
        drop(r);
        // Pages mid-write-back are released by the shipper when it is done.
        rt.sync().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while rt.stats().resident_pages != 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert_eq!(
            rt.stats().resident_pages,
            0,
            "round {round}: {}",
            rt.census()
        );
    }
}

#[test]
fn runtime_and_regions_are_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Runtime>();
    assert_send_sync::<farmem_runtime::Region<'static>>();
    assert_send_sync::<MemStore>();
}

#[test]
fn zeroed_slabs_skip_the_store_until_first_written_back() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(1 << 30));
    let zcfg = Config {
        zeroed_slabs: true,
        ..cfg(64, DirtyMode::Line)
    };
    let extents;
    {
        let rt = Runtime::new(zcfg.clone(), store.clone(), store.clone()).unwrap();
        let pages = 512usize;
        let r = rt.region(pages as u64 * PAGE).unwrap();
        for p in 0..pages {
            r.write_at(p * PAGE as usize + 64, &[p as u8 | 1; 8])
                .unwrap();
        }
        // Fresh pages diff against zero: no snapshot copies, and each page
        // ships exactly the one line written, evicted or synced.
        r.sync().unwrap();
        let s = rt.stats();
        assert_eq!(s.snapshots, 0, "{s:?}");
        assert!(s.pages_evicted_dirty > 0, "{s:?}");
        assert_eq!(s.dirty_lines_shipped, pages as u64, "{s:?}");
        // Pages evicted above were written back, so these reads fetch them.
        for p in 0..pages {
            let mut b = [0u8; 8];
            r.read_at(p * PAGE as usize + 64, &mut b).unwrap();
            assert_eq!(b, [p as u8 | 1; 8], "page {p}");
        }
        let s = rt.stats();
        assert_eq!(s.pages_zero_filled, pages as u64, "{s:?}");
        assert_eq!(store.stats().reads, s.pages_fetched, "{s:?}");
        assert!(s.pages_fetched > 0, "{s:?}");
        r.sync().unwrap();
        extents = r.extents().unwrap();
    }
    // A region over existing extents always reads the store.
    let rt = Runtime::new(zcfg, store.clone(), store.clone()).unwrap();
    let r = rt.region_over(&extents).unwrap();
    let mut b = [0u8; 8];
    r.read_at(7 * PAGE as usize + 64, &mut b).unwrap();
    assert_eq!(b, [7 | 1; 8]);
    assert_eq!(rt.stats().pages_zero_filled, 0);
}

#[test]
fn kona_vm_marks_written_pages_dirty_with_a_second_fault() {
    if skip() {
        return;
    }
    for (writable, wp_faults) in [(true, 0u64), (false, 8)] {
        let store = Arc::new(MemStore::new(1 << 30));
        let c = Config {
            writable_on_write_fault: writable,
            ..cfg(64, DirtyMode::Page)
        };
        let rt = Runtime::new(c, store.clone(), store.clone()).unwrap();
        let r = rt.region(8 * PAGE).unwrap();
        // One write per page, through the pointer: the first touch is a write.
        for p in 0..8usize {
            // SAFETY: in bounds of a live region only this thread uses.
            unsafe {
                r.as_ptr()
                    .add(p * PAGE as usize + 8)
                    .write_volatile(p as u8 + 1)
            };
        }
        r.sync().unwrap();
        let s = rt.stats();
        assert_eq!(s.faults_missing, 8, "{s:?}");
        // Pages a write-protect fault made dirty (a write racing the
        // fetch's end may fault once more and just wait).
        assert_eq!(s.wp_latency.count, wp_faults, "{s:?}");
        // Either way every written page is dirty and written back whole.
        assert_eq!(s.bytes_written_back, 8 * PAGE, "{s:?}");
        let mut b = [0u8; 1];
        r.read_at(3 * PAGE as usize + 8, &mut b).unwrap();
        assert_eq!(b, [4]);
    }
}

#[test]
fn a_large_zeroed_region_takes_remote_memory_only_for_what_it_writes_back() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(8 << 30));
    let rt = lazy_runtime(&store);
    // An 8 GiB far heap, as `farmem run` gives every process.
    let r = rt.region(8 << 30).unwrap();
    assert_eq!(store.stats().slab_allocations, 0);
    assert_eq!(r.backed_bytes(), 0);
    // Reading untouched memory needs none either.
    let mut b = [1u8; 64];
    r.read_at(5 << 30, &mut b).unwrap();
    assert_eq!(b, [0u8; 64]);
    // 4 MiB written at 1 GiB (two 2 MiB chunks) through a 256 KiB cache.
    let base = 1usize << 30;
    let pages = 1024usize;
    for p in 0..pages {
        r.write_at(base + p * PAGE as usize + 8, &(p as u64 + 7).to_le_bytes())
            .unwrap();
    }
    r.sync().unwrap();
    assert_eq!(r.backed_bytes(), 4 << 20);
    // One batch, and at most one background top-up of the reserve.
    let taken = store.stats().bytes_allocated;
    assert!((4 << 20..=8 << 20).contains(&taken), "{taken}");
    for p in 0..pages {
        let mut b = [0u8; 8];
        r.read_at(base + p * PAGE as usize + 8, &mut b).unwrap();
        assert_eq!(u64::from_le_bytes(b), p as u64 + 7, "page {p}");
    }
    let s = rt.stats();
    assert!(s.pages_fetched > 0 && s.pages_evicted_dirty > 0, "{s:?}");
    assert_eq!(s.fetch_errors + s.writeback_errors, 0, "{s:?}");
}

/// The kernel's own access to a far page that is not local (here a read(2)
/// into a page never touched): the thread path makes it wait for the page
/// like any fault; the signal path cannot (the kernel raises no signal for
/// its own accesses), so the call fails with EFAULT, as documented.
#[test]
fn system_calls_on_far_pages_wait_on_the_thread_path_and_fail_on_the_signal_path() {
    if skip() {
        return;
    }
    for path in [FaultPath::Thread, FaultPath::Signal] {
        let store = Arc::new(MemStore::new(1 << 30));
        let cfg = Config {
            fault_path: path,
            ..cfg(64, DirtyMode::Line)
        };
        let rt = Runtime::new(cfg, store.clone(), store.clone()).unwrap();
        let r = rt.region(16 * PAGE).unwrap();
        let (rd, mut wr) = std::io::pipe().unwrap();
        std::io::Write::write_all(&mut wr, b"into far memory").unwrap();
        let at = 3 * PAGE as usize;
        // SAFETY: 15 bytes inside the region, read from our own pipe.
        let got = unsafe {
            libc::read(
                std::os::fd::AsRawFd::as_raw_fd(&rd),
                r.as_ptr().add(at).cast(),
                15,
            )
        };
        let err = std::io::Error::last_os_error();
        match path {
            FaultPath::Thread => {
                assert_eq!(got, 15, "{err}");
                let mut b = [0u8; 15];
                r.read_at(at, &mut b).unwrap();
                assert_eq!(&b, b"into far memory");
            }
            FaultPath::Signal => {
                assert_eq!((got, err.raw_os_error()), (-1, Some(libc::EFAULT)));
            }
        }
    }
}

/// Writes `fill(pass, page)` over every page of `r`, `passes` times, then
/// checks the last pass reads back.
fn rewrite(r: &farmem_runtime::Region<'_>, pages: usize, passes: u8, whole: bool) {
    for pass in 1..=passes {
        for p in 0..pages {
            let v = pass.wrapping_mul(31).wrapping_add(p as u8);
            if whole {
                r.write_at(p * PAGE as usize, &[v; PAGE as usize]).unwrap();
            } else {
                r.write_at(p * PAGE as usize + 64, &[v; 8]).unwrap();
            }
        }
    }
    let mut b = [0u8; 8];
    for p in 0..pages {
        let v = passes.wrapping_mul(31).wrapping_add(p as u8);
        r.read_at(p * PAGE as usize + 64, &mut b).unwrap();
        assert_eq!(b, [v; 8], "page {p}");
    }
}

#[test]
fn pages_rewritten_whole_keep_no_diff_bases_and_the_limit_counts_them() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(1 << 30));
    let rt = Runtime::new(cfg(256, DirtyMode::Line), store.clone(), store.clone()).unwrap();
    let pages = 2048;
    let r = rt.region(pages as u64 * PAGE).unwrap();
    rewrite(&r, pages, 4, true);
    let s = rt.stats();
    assert!(s.snapshots_skipped > 0, "{s:?}");
    assert!(s.snapshots < s.snapshots_skipped, "{s:?}");
    assert!(
        s.resident_pages + s.snapshot_pages <= s.limit_pages,
        "pages and their diff bases within the limit: {s:?}"
    );
}

#[test]
fn diff_bases_take_no_more_than_their_share_of_the_cache() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(1 << 30));
    let mut c = cfg(256, DirtyMode::Line);
    c.diff_base.max_share = 1.0 / 16.0;
    let rt = Runtime::new(c, store.clone(), store.clone()).unwrap();
    let pages = 2048;
    let r = rt.region(pages as u64 * PAGE).unwrap();
    // 8 bytes a page: diffing pays, but only 16 bases (a sixteenth of 256
    // pages) may be alive at once, plus a pool of 8.
    rewrite(&r, pages, 2, false);
    let s = rt.stats();
    assert!(s.snapshots > 0, "{s:?}");
    assert!(s.snapshots_skipped > s.snapshots, "{s:?}");
    assert!(s.snapshot_pages <= 16 + 8, "{s:?}");
    // Pages written back whole and pages diffed both read back (rewrite checks).
    assert!(rt.last_error().is_none(), "{:?}", rt.last_error());
}

/// `c` with diff bases allowed the whole cache: for tests of how lines are
/// tracked, not of how many bases the cache affords.
fn uncapped(mut c: Config) -> Config {
    c.diff_base.max_share = 1.0;
    c
}

#[test]
fn sparse_writes_get_their_diff_bases_back() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(1 << 30));
    let rt = Runtime::new(
        uncapped(cfg(256, DirtyMode::Line)),
        store.clone(),
        store.clone(),
    )
    .unwrap();
    let pages = 2048;
    let r = rt.region(pages as u64 * PAGE).unwrap();
    // Filled whole first: pages come back all dirty, bases stop.
    rewrite(&r, pages, 2, true);
    let whole = rt.stats().snapshots_skipped;
    assert!(whole > 0);
    // Then 8 bytes a page: the sampled bases show it, and every first
    // write keeps one again within a pass.
    rewrite(&r, pages, 2, false);
    let settled = rt.stats().snapshots_skipped;
    rewrite(&r, pages, 2, false);
    let s = rt.stats();
    assert_eq!(s.snapshots_skipped, settled, "{s:?}");
    assert!(
        s.resident_pages + s.snapshot_pages <= s.limit_pages,
        "{s:?}"
    );
}

#[test]
fn the_page_table_counts_where_pages_were_touched() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(1 << 30));
    let rt = Runtime::new(cfg(256, DirtyMode::Line), store.clone(), store.clone()).unwrap();
    // 64 MiB: 16384 entries of 32 bytes, 128 pages of table.
    let pages = 16384;
    let r = rt.region(pages as u64 * PAGE).unwrap();
    let before = rt.stats().table_pages;
    assert!(before <= 1, "an untouched table takes no memory: {before}");
    // One page in every 128: a first touch of every page of the table.
    for p in (0..pages).step_by(128) {
        r.write_at(p * PAGE as usize, &[1]).unwrap();
    }
    let s = rt.stats();
    assert!(
        (128..=130).contains(&s.table_pages),
        "every table page touched once: {s:?}"
    );
}

#[test]
fn a_sync_of_a_large_region_touches_only_the_table_it_used() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(8 << 30));
    let rt = lazy_runtime(&store);
    // 4 GiB, backed lazily: 1 Mi entries, 8192 pages of table.
    let r = rt.region(4 << 30).unwrap();
    for p in 0..16usize {
        r.write_at((1 << 30) + p * PAGE as usize, &[p as u8 + 1])
            .unwrap();
    }
    r.sync().unwrap();
    let s = rt.stats();
    assert!(
        s.table_pages <= 2,
        "16 adjacent entries, one or two table pages: {s:?}"
    );
    let mut b = [0u8];
    for p in 0..16usize {
        r.read_at((1 << 30) + p * PAGE as usize, &mut b).unwrap();
        assert_eq!(b, [p as u8 + 1]);
    }
    drop(r);
    assert_eq!(
        rt.stats().resident_pages,
        0,
        "a dropped region releases its pages"
    );
}

/// Pages read then written in every residency: after the first pass, a
/// page's streak installs it writable for two residencies in three, so it
/// takes a write-protect fault in one pass of three. What was written while
/// no fault watched still reaches the store: every pass reads back.
#[test]
fn pages_written_every_residency_are_fetched_writable() {
    for path in [FaultPath::Thread, FaultPath::Signal] {
        if skip() {
            return;
        }
        let store = Arc::new(MemStore::new(1 << 30));
        let c = Config {
            fault_path: path,
            ..cfg(64, DirtyMode::Line)
        };
        let rt = Runtime::new(c, store.clone(), store.clone()).unwrap();
        let pages = 512usize;
        let r = rt.region(pages as u64 * PAGE).unwrap();
        let passes = 7u8;
        for pass in 1..=passes {
            for p in 0..pages {
                let at = p * PAGE as usize + 8 * (p % 512);
                let mut b = [0u8; 1];
                r.read_at(at, &mut b).unwrap();
                let was = if pass == 1 {
                    0
                } else {
                    (pass - 1).wrapping_mul(7) ^ p as u8
                };
                assert_eq!(b[0], was, "pass {pass} page {p}");
                r.write_at(at, &[pass.wrapping_mul(7) ^ p as u8]).unwrap();
            }
        }
        let s = rt.stats();
        // Passes 1, 4 and 7 take the faults (without the streak, all 7
        // would); a page the evictor takes between its read and its write
        // restarts its streak, so the bounds leave room for the race.
        let pages = pages as u64;
        assert!(s.faults_wp <= 5 * pages, "{path:?}: {s:?}");
        assert!(s.writes_predicted >= 2 * pages, "{path:?}: {s:?}");
        assert!(rt.last_error().is_none(), "{:?}", rt.last_error());
    }
}

#[test]
fn page_mode_ships_a_page_over_zeros_whole_once_written_and_never_if_not() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(1 << 30));
    let c = Config {
        zeroed_slabs: true,
        fault_around: ReadaheadConfig::default(),
        ..cfg(256, DirtyMode::Page)
    };
    let rt = Runtime::new(c, store.clone(), store.clone()).unwrap();
    let r = rt.region(64 * PAGE).unwrap();
    // Written in order, so later pages come in around the faults as
    // zeros, writable.
    let written = |p: usize| p < 16;
    for p in (0..64).filter(|&p| written(p)) {
        r.write_at(p * PAGE as usize + 100, &[p as u8 + 1]).unwrap();
    }
    r.sync().unwrap();
    let s = rt.stats();
    assert!(s.pages_faulted_around > 16, "{s:?}");
    assert_eq!(s.faults_wp, 0, "no write needed a fault: {s:?}");
    // The pages written, each whole; the untouched neighbours not at all.
    assert_eq!(s.bytes_written_back, 16 * PAGE, "{s:?}");
    assert_eq!(store.stats().bytes_written, 16 * PAGE);
    let extents = r.extents().unwrap();
    drop(r);
    drop(rt);
    let rt = Runtime::new(cfg(64, DirtyMode::Page), store.clone(), store.clone()).unwrap();
    let r = rt.region_over(&extents).unwrap();
    for p in 0..64usize {
        let mut page = vec![0u8; PAGE as usize];
        r.read_at(p * PAGE as usize, &mut page).unwrap();
        let w = written(p);
        assert_eq!(page[100], if w { p as u8 + 1 } else { 0 }, "page {p}");
        assert_eq!(page.iter().filter(|&&x| x != 0).count(), w as usize);
    }
}

/// Whether the page at `addr` is mapped in local memory.
fn resident(addr: *mut u8) -> bool {
    let mut v = [0u8; 1];
    // SAFETY: a page-aligned address of a live mapping, one page.
    let rc = unsafe { libc::mincore(addr.cast(), PAGE as usize, v.as_mut_ptr()) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    v[0] & 1 == 1
}

/// A runtime of 64 local pages in LRU order, where the policy's next
/// victim is plain to see.
fn lru_runtime() -> Runtime {
    let store = Arc::new(MemStore::new(1 << 30));
    let c = Config {
        policy: farmem_policy::cache::PolicyConfig::Lru,
        ..cfg(64, DirtyMode::Page)
    };
    Runtime::new(c, store.clone(), store).unwrap()
}

#[test]
fn a_pinned_page_stays_resident_while_the_cache_turns_over() {
    if skip() {
        return;
    }
    let rt = lru_runtime();
    let pages = 1024;
    let r = rt.region(pages as u64 * PAGE).unwrap();
    r.write_at(100, &[7; 8]).unwrap();
    let first = r.as_ptr();
    let pin = rt.pin(first as usize + 100, 8);
    // Sixteen times the cache goes by; the policy's first victim stays.
    rewrite(&r, pages, 1, false);
    assert!(resident(first), "the pinned page was evicted");
    assert!(rt.stats().pages_pinned_passed > 0);
    drop(pin);
    for p in 1..pages {
        r.write_at(p * PAGE as usize, &[1; 8]).unwrap();
    }
    assert!(!resident(first), "the page stayed pinned");
    let mut b = [0u8; 8];
    r.read_at(100, &mut b).unwrap();
    assert_eq!(b, [7; 8]);
}

#[test]
fn a_pin_that_outlives_its_region_leaves_the_next_regions_pins_alone() {
    if skip() {
        return;
    }
    let rt = lru_runtime();
    let pages = 1024;
    let old = rt.region(pages as u64 * PAGE).unwrap();
    old.write_at(100, &[1; 8]).unwrap();
    let stale = rt.pin(old.as_ptr() as usize + 100, 8);
    drop(old);
    // A new region, perhaps at the old one's addresses, its first page
    // pinned by a guard of its own; the old guard goes first.
    let r = rt.region(pages as u64 * PAGE).unwrap();
    r.write_at(100, &[7; 8]).unwrap();
    let first = r.as_ptr();
    let pin = rt.pin(first as usize + 100, 8);
    drop(stale);
    rewrite(&r, pages, 1, false);
    assert!(resident(first), "the pinned page was evicted");
    drop(pin);
    let mut b = [0u8; 8];
    r.read_at(100, &mut b).unwrap();
    assert_eq!(b, [7; 8]);
}

#[test]
fn pins_over_the_whole_cache_let_faults_past_the_limit_rather_than_hang() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(1 << 30));
    let rt = Runtime::new(cfg(64, DirtyMode::Page), store.clone(), store.clone()).unwrap();
    let r = rt.region(1024 * PAGE).unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            // A call's buffer of 128 pages, twice the cache, pinned whole.
            let _pin = rt.pin(r.as_ptr() as usize, 128 * PAGE as usize);
            for p in 0..128 {
                r.write_at(p * PAGE as usize, &[p as u8; 8]).unwrap();
            }
            done_tx.send(()).unwrap();
        });
        // A hang would leave the scope waiting forever: fail the binary.
        if done_rx
            .recv_timeout(std::time::Duration::from_secs(120))
            .is_err()
        {
            eprintln!("touching pinned pages hung: {}", rt.census());
            std::process::exit(101);
        }
    });
    let s = rt.stats();
    // Past the room by the pinned pages, not by a limit gone soft.
    assert!(s.pinned_overruns > 0 && s.limit_overruns == 0, "{s:?}");
    assert!(s.resident_pages <= s.limit_pages + 128, "{s:?}");
    let mut b = [0u8; 8];
    for p in 0..128 {
        r.read_at(p * PAGE as usize, &mut b).unwrap();
        assert_eq!(b, [p as u8; 8], "page {p}");
    }
}

/// A store holding local memory of its own, as a compressed pool does:
/// `local` bytes, charged against the cache's limit.
struct HoldingStore {
    inner: Arc<MemStore>,
    local: u64,
}

impl RemoteStore for HoldingStore {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), farmem_runtime::StoreError> {
        self.inner.read(addr, buf)
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), farmem_runtime::StoreError> {
        self.inner.write(addr, data)
    }
    fn write_lines(&self, lines: &[(u64, [u8; 64])]) -> Result<(), farmem_runtime::StoreError> {
        self.inner.write_lines(lines)
    }
    fn local_bytes(&self) -> u64 {
        self.local
    }
}

/// One load of the 8 bytes at `p`, a single instruction even where they
/// straddle two pages.
#[cfg(target_arch = "x86_64")]
fn load_u64(p: *const u8) -> u64 {
    let v: u64;
    // SAFETY: the caller's 8 bytes, mapped (far pages fault in).
    unsafe {
        std::arch::asm!("mov {v}, qword ptr [{p}]", p = in(reg) p, v = out(reg) v,
            options(readonly, nostack, preserves_flags));
    }
    v
}

#[cfg(target_arch = "x86_64")]
#[test]
fn charges_filling_the_limit_leave_room_for_an_access_across_two_pages() {
    if skip() {
        return;
    }
    let mem = Arc::new(MemStore::new(1 << 30));
    // The store's own memory takes the whole limit once it is counted
    // (after the first write-back): without a floor the room was 0, the
    // cache held one page, and a load needing two evicted each for the
    // other forever.
    let store = Arc::new(HoldingStore {
        inner: mem.clone(),
        local: 64 * PAGE,
    });
    let rt = Runtime::new(cfg(64, DirtyMode::Page), store, mem).unwrap();
    let pages = 256;
    let r = rt.region(pages * PAGE).unwrap();
    for p in 0..pages as usize {
        r.write_at(p * PAGE as usize, &[p as u8; PAGE as usize])
            .unwrap();
    }
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            // Pages 10 and 11 went far long ago; one load takes both.
            let at = r.as_ptr() as usize + 11 * PAGE as usize - 4;
            done_tx.send(load_u64(at as *const u8)).unwrap();
        });
        match done_rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(v) => assert_eq!(v.to_le_bytes(), [10, 10, 10, 10, 11, 11, 11, 11]),
            Err(_) => {
                // A hang would leave the scope waiting forever: fail the binary.
                eprintln!("a load across two far pages hung: {}", rt.census());
                std::process::exit(101);
            }
        }
    });
    let s = rt.stats();
    assert_eq!(s.store_pages, 64, "{s:?}");
    assert!(s.room_floored > 0, "{s:?}");
    // The limit is exceeded by the floor at most: 16 pages here.
    assert!(s.resident_pages <= 16, "{s:?}");
}
