//! The compressed backend under a real runtime: evicted pages kept
//! compressed within the local limit, passed down or demoted to the store
//! below, and nothing lost when the store below fails.

use std::sync::Arc;
use std::time::{Duration, Instant};

use farmem_runtime::backend::{Backend, CompressedStore};
use farmem_runtime::{Config, DirtyMode, FaultPath, MemStore, PAGE, Region, Runtime};

mod common;
use common::skip;

const LOCAL_PAGES: u64 = 64;

/// Watermarks at 95% and 85%: 62 pages are past the high one, with room
/// left below the limit for the failure tests to fill.
fn cfg() -> Config {
    Config {
        local_bytes: LOCAL_PAGES * PAGE,
        dirty: DirtyMode::Page,
        slab_batch: 16 << 20,
        store_attempts: 2,
        high_watermark: 0.95,
        low_watermark: 0.85,
        ..Config::default()
    }
}

/// A compressed pool over `below`, sized for [`cfg`]'s limit.
fn pool(below: &Arc<MemStore>) -> Arc<CompressedStore> {
    let backend: Backend = "compressed".parse().unwrap();
    let built = backend
        .build(
            Some((below.clone(), below.clone())),
            LOCAL_PAGES * PAGE,
            1 << 30,
        )
        .unwrap();
    built.pool.expect("a compressed pool")
}

/// Page `p`'s bytes: every 7th page all zeros, every 5th noise, the rest
/// half noise, half zeros (about 2 KiB compressed: a few fill the pool).
fn page(p: usize) -> Vec<u8> {
    let mut x = (p as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut noise = || farmem_core::noise::xorshift64(&mut x) as u8;
    let n = PAGE as usize;
    match p {
        _ if p.is_multiple_of(7) => vec![0; n],
        _ if p.is_multiple_of(5) => (0..n).map(|_| noise()).collect(),
        _ => (0..n)
            .map(|i| if i < n / 2 { noise() } else { 0 })
            .collect(),
    }
}

/// Writes [`page`]`(p)` into each of the first `pages` pages of `r`.
fn write_pages(r: &Region<'_>, pages: usize) {
    for p in 0..pages {
        r.write_at(p * PAGE as usize, &page(p)).unwrap();
    }
}

/// Reads back each page in `order`: it must be [`page`]`(p)` (`when` says
/// in what circumstances, for a failure).
fn check_pages(r: &Region<'_>, order: impl Iterator<Item = usize>, when: &str) {
    let mut got = vec![0u8; PAGE as usize];
    for p in order {
        r.read_at(p * PAGE as usize, &mut got).unwrap();
        assert!(got == page(p), "{when}: page {p}");
    }
}

/// Waits (20 s at most) until the evictor has tried to write back and kept
/// the pages it could not.
fn wait_for_kept_writeback(rt: &Runtime) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while rt.stats().writeback_kept == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn the_pool_keeps_evicted_pages_within_the_limit_and_loses_none() {
    if skip() {
        return;
    }
    for path in [FaultPath::Thread, FaultPath::Signal] {
        keeps_within_the_limit(path, DirtyMode::Page);
    }
    // Line tracking: pages without a diff base come whole, the rest as lines.
    keeps_within_the_limit(FaultPath::Thread, DirtyMode::Line);
}

fn keeps_within_the_limit(fault_path: FaultPath, dirty: DirtyMode) {
    let below = Arc::new(MemStore::new(1 << 30));
    let pool = pool(&below);
    let c = Config {
        fault_path,
        dirty,
        ..cfg()
    };
    let rt = Runtime::new(c, pool.clone(), below.clone()).unwrap();
    let pages = 512usize;
    let r = rt.region(pages as u64 * PAGE).unwrap();
    write_pages(&r, pages);
    // Newest first: the pages evicted last are in the pool; the older
    // ones were passed down or demoted.
    check_pages(&r, (0..pages).rev(), &format!("{fault_path}"));
    // Waits out write-backs in flight, so the counters agree.
    r.sync().unwrap();
    let s = rt.stats();
    let c = pool.stats();
    assert!(c.stored > 0 && c.stored_zero > 0, "{c:?}");
    assert!(c.passed_down > 0 && c.demoted > 0, "{c:?}");
    assert!(c.hits > 0 && c.misses > 0, "{c:?}");
    // The pool counts against the limit, and stays within its share: an
    // eviction takes a page from the cache and gives the pool less than
    // one (one more for rounding up the pool's bytes).
    let pool_pages = (LOCAL_PAGES * PAGE / 5).div_ceil(PAGE);
    assert!(s.store_pages > 0 && s.store_pages <= pool_pages, "{s:?}");
    assert!(
        s.resident_pages + s.store_pages <= s.limit_pages + 1,
        "{s:?}"
    );
    assert_eq!(s.limit_overruns, 0, "{s:?}");
    // Only what did not stay in the pool crossed to the store below.
    let lines = below.stats().lines_written;
    if dirty == DirtyMode::Page {
        assert_eq!(lines, 64 * (c.passed_down + c.demoted), "{c:?}");
    } else {
        assert!(lines >= 64 * (c.passed_down + c.demoted), "{c:?}");
    }
}

#[test]
fn a_failing_store_below_keeps_pages_resident_and_dirty_and_loses_none() {
    if skip() {
        return;
    }
    let below = Arc::new(MemStore::new(1 << 30));
    let pool = pool(&below);
    let rt = Runtime::new(cfg(), pool.clone(), below.clone()).unwrap();
    // Past the high watermark: the evictor writes back, the pool takes
    // what it can until it must demote, and the store below refuses.
    let pages = 62usize;
    let r = rt.region(pages as u64 * PAGE).unwrap();
    below.set_refuse_writes(true);
    write_pages(&r, pages);
    wait_for_kept_writeback(&rt);
    let s = rt.stats();
    assert!(s.writeback_errors > 0 && s.writeback_kept > 0, "{s:?}");
    assert!(rt.last_error().is_some());
    check_pages(&r, 0..pages, "while the store refuses");
    below.set_refuse_writes(false);
    r.sync().unwrap();
    let extents = r.extents().unwrap();
    drop(r);
    drop(rt);
    // A new runtime over the same pool and store reads every page back.
    let rt = Runtime::new(cfg(), pool.clone(), below.clone()).unwrap();
    let r = rt.region_over(&extents).unwrap();
    check_pages(&r, 0..pages, "after the store came back");
}

/// A file below, alone and behind the pool: every page written crosses
/// it and reads back, on both fault paths.
#[test]
fn a_file_backend_keeps_every_page_alone_and_behind_the_pool() {
    if skip() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("farmem-backend-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["file", "tiered:compressed,file"] {
        for fault_path in [FaultPath::Thread, FaultPath::Signal] {
            let backend: Backend = format!("{name}:{}", dir.display()).parse().unwrap();
            let built = backend.build(None, LOCAL_PAGES * PAGE, 16 << 20).unwrap();
            let file = built.file.clone().expect("a file");
            let c = Config {
                fault_path,
                ..cfg()
            };
            let rt = Runtime::new(c, built.store.clone(), built.slabs.clone()).unwrap();
            let pages = 400usize;
            let r = rt.region(pages as u64 * PAGE).unwrap();
            write_pages(&r, pages);
            check_pages(&r, (0..pages).rev(), &format!("{name} {fault_path}"));
            r.sync().unwrap();
            let f = file.stats();
            assert!(f.writes > 0 && f.reads > 0, "{name} {fault_path}: {f:?}");
            if let Some(pool) = &built.pool {
                assert!(pool.stats().stored > 0, "{:?}", pool.stats());
            } else {
                // Alone, it holds every page evicted dirty.
                assert!(
                    f.bytes_written >= (pages as u64 - LOCAL_PAGES) * PAGE,
                    "{f:?}"
                );
            }
        }
    }
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing left behind"
    );
    let _ = std::fs::remove_dir(&dir);
}

/// A disk that fails mid-run: the write-backs fail with the file's name
/// and EIO, the pages stay resident and dirty and read back unchanged, and
/// once the disk works again a sync lands every one.
#[test]
fn a_file_failing_mid_run_keeps_pages_resident_and_dirty_and_loses_none() {
    if skip() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("farmem-backend-eio-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let backend: Backend = format!("file:{}", dir.display()).parse().unwrap();
    let built = backend.build(None, LOCAL_PAGES * PAGE, 16 << 20).unwrap();
    let file = built.file.clone().unwrap();
    let rt = Runtime::new(cfg(), built.store.clone(), built.slabs.clone()).unwrap();
    let pages = 62usize;
    let r = rt.region(pages as u64 * PAGE).unwrap();
    file.fail_writes(true);
    write_pages(&r, pages);
    wait_for_kept_writeback(&rt);
    let s = rt.stats();
    assert!(s.writeback_errors > 0 && s.writeback_kept > 0, "{s:?}");
    assert_eq!(s.pages_evicted_dirty, 0, "{s:?}");
    let err = rt.last_error().expect("the failure is reported");
    assert!(
        err.contains(&dir.display().to_string()) && err.contains("Input/output error"),
        "{err}"
    );
    check_pages(&r, 0..pages, "while the disk fails");
    file.fail_writes(false);
    r.sync().unwrap();
    let extents = r.extents().unwrap();
    drop(r);
    drop(rt);
    let rt = Runtime::new(cfg(), built.store.clone(), built.slabs.clone()).unwrap();
    let r = rt.region_over(&extents).unwrap();
    check_pages(&r, 0..pages, "after the disk came back");
    let _ = std::fs::remove_dir(&dir);
}
