//! No data is lost when the store refuses writes or drops mid-batch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use farmem_runtime::{Config, FaultOp, MemStore, PAGE, Runtime, RuntimeError};

mod common;
use common::skip;

fn cfg(local_pages: u64) -> Config {
    Config {
        local_bytes: local_pages * PAGE,
        slab_batch: 64 << 20,
        store_attempts: 2,
        ..Config::default()
    }
}

fn verify_fresh(store: &Arc<MemStore>, extents: &[(u64, u64)], expect: impl Fn(usize) -> u8) {
    let rt = Runtime::new(cfg(64), store.clone(), store.clone()).unwrap();
    let r = rt.region_over(extents).unwrap();
    let mut page = vec![0u8; PAGE as usize];
    for p in 0..r.len() / PAGE as usize {
        r.read_at(p * PAGE as usize, &mut page).unwrap();
        assert!(page.iter().all(|&b| b == expect(p)), "page {p}");
    }
}

#[test]
fn refused_writes_keep_pages_resident_and_dirty() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(1 << 30));
    let rt = Runtime::new(cfg(64), store.clone(), store.clone()).unwrap();
    // Past the high watermark (60 of 64) but within the limit, so the
    // program never needs room the evictor cannot make.
    let pages = 62usize;
    let r = rt.region(pages as u64 * PAGE).unwrap();
    store.set_refuse_writes(true);
    for p in 0..pages {
        r.write_at(p * PAGE as usize, &[p as u8 + 1; PAGE as usize])
            .unwrap();
    }
    // The evictor tries on its own; wait until it has failed at least once.
    let deadline = Instant::now() + Duration::from_secs(20);
    while rt.stats().writeback_kept == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let s = rt.stats();
    assert!(s.writeback_errors > 0 && s.writeback_kept > 0, "{s:?}");
    assert_eq!(s.pages_evicted_dirty, 0, "{s:?}");
    assert!(rt.last_error().is_some());
    match r.sync() {
        Err(RuntimeError::Writeback { pages, .. }) => assert!(pages > 0),
        other => panic!("sync against a refusing store: {other:?}"),
    }
    // Still readable locally, unchanged.
    let mut b = [0u8; 8];
    for p in 0..pages {
        r.read_at(p * PAGE as usize + 100, &mut b).unwrap();
        assert_eq!(b, [p as u8 + 1; 8]);
    }
    store.set_refuse_writes(false);
    r.sync().unwrap();
    let extents = r.extents().unwrap();
    drop(r);
    drop(rt);
    verify_fresh(&store, &extents, |p| p as u8 + 1);
}

#[test]
fn half_applied_batch_is_rewritten_even_if_lines_return_to_old_values() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(1 << 30));
    let rt = Runtime::new(
        Config {
            store_attempts: 1,
            ..cfg(64)
        },
        store.clone(),
        store.clone(),
    )
    .unwrap();
    let pages = 8usize;
    let r = rt.region(pages as u64 * PAGE).unwrap();
    for p in 0..pages {
        r.write_at(p * PAGE as usize, &[9; PAGE as usize]).unwrap();
    }
    // The next write_lines drops after applying half its lines.
    store.fail_nth(0, FaultOp::Write);
    assert!(r.sync().is_err());
    // Back to the original zeros: equal to the snapshot, but the store may
    // hold 9s for the half that landed.
    for p in 0..pages {
        r.write_at(p * PAGE as usize, &[0; PAGE as usize]).unwrap();
    }
    r.sync().unwrap();
    let extents = r.extents().unwrap();
    drop(r);
    drop(rt);
    verify_fresh(&store, &extents, |_| 0);
}

#[test]
fn a_dropped_batch_during_eviction_is_retried() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(1 << 30));
    let rt = Runtime::new(cfg(64), store.clone(), store.clone()).unwrap();
    let pages = 512usize;
    let r = rt.region(pages as u64 * PAGE).unwrap();
    store.fail_nth(3, FaultOp::Write);
    for p in 0..pages {
        r.write_at(p * PAGE as usize + 64 * (p % 64), &[p as u8 | 1; 64])
            .unwrap();
    }
    r.sync().unwrap();
    assert_eq!(store.stats().failed_calls, 1);
    let s = rt.stats();
    assert_eq!(s.writeback_kept, 0, "{s:?}");
    let extents = r.extents().unwrap();
    drop(r);
    drop(rt);
    let rt = Runtime::new(cfg(64), store.clone(), store.clone()).unwrap();
    let r = rt.region_over(&extents).unwrap();
    for p in 0..pages {
        let mut b = [0u8; 64];
        r.read_at(p * PAGE as usize + 64 * (p % 64), &mut b)
            .unwrap();
        assert_eq!(b, [p as u8 | 1; 64], "page {p}");
    }
}

/// Writes `pages` pages of `r` with distinct bytes, then checks every one
/// reads back (from the cache, whatever the store did).
fn write_and_check(r: &farmem_runtime::Region<'_>, pages: usize) {
    for p in 0..pages {
        r.write_at(p * PAGE as usize, &[p as u8 | 1; PAGE as usize])
            .unwrap();
    }
    let mut page = vec![0u8; PAGE as usize];
    for p in 0..pages {
        r.read_at(p * PAGE as usize, &mut page).unwrap();
        assert!(page.iter().all(|&b| b == p as u8 | 1), "page {p}");
    }
}

#[test]
fn a_full_store_makes_the_limit_soft_instead_of_hanging_the_program() {
    if skip() {
        return;
    }
    // Room for 32 pages; the program writes 256 with a 64-page cache. Lazy
    // regions (as under `farmem run`) take remote memory only at write-back,
    // so the store runs out while the program is running.
    let store = Arc::new(MemStore::new(32 * PAGE));
    let rt = Runtime::new(
        Config {
            slab_batch: 32 * PAGE,
            zeroed_slabs: true,
            ..cfg(64)
        },
        store.clone(),
        store.clone(),
    )
    .unwrap();
    let r = rt.region(256 * PAGE).unwrap();
    write_and_check(&r, 256);
    let s = rt.stats();
    assert!(s.limit_overruns > 0 && s.writeback_kept > 0, "{s:?}");
    assert!(
        rt.last_error().is_some_and(|e| e.contains("exhausted")),
        "{:?}",
        rt.last_error()
    );
}

#[test]
fn refused_writes_past_the_limit_let_the_program_run_on_and_recover() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(1 << 30));
    let rt = Runtime::new(cfg(64), store.clone(), store.clone()).unwrap();
    let pages = 256usize;
    let r = rt.region(pages as u64 * PAGE).unwrap();
    store.set_refuse_writes(true);
    write_and_check(&r, pages);
    let s = rt.stats();
    assert!(s.limit_overruns > 0, "{s:?}");
    assert_eq!(s.pages_evicted_dirty, 0, "{s:?}");
    // The store takes writes again: everything lands, nothing lost.
    store.set_refuse_writes(false);
    r.sync().unwrap();
    let extents = r.extents().unwrap();
    drop(r);
    drop(rt);
    verify_fresh(&store, &extents, |p| p as u8 | 1);
}

#[test]
fn a_page_the_store_never_serves_stops_the_program_instead_of_hanging_it() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(1 << 30));
    let rt = Runtime::new(
        Config {
            give_up_after: Duration::from_millis(300),
            ..cfg(64)
        },
        store.clone(),
        store.clone(),
    )
    .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    rt.on_lost(move |what| {
        let _ = tx.send(what.to_string());
    });
    let rt: &'static Runtime = Box::leak(Box::new(rt));
    let pages = 256usize;
    let r: &'static _ = Box::leak(Box::new(rt.region(pages as u64 * PAGE).unwrap()));
    write_and_check(r, pages);
    r.sync().unwrap();
    // The first pages went far; now the store answers every read "no".
    store.set_refuse_reads(true);
    std::thread::spawn(move || {
        let mut b = [0u8; 8];
        let _ = r.read_at(0, &mut b);
    });
    let what = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the read was given up on");
    assert!(what.contains("could not be read for 300ms"), "{what}");
    assert!(what.contains("refused"), "{what}");
    // The access that needed it waits (the default hook ends the process).
}
