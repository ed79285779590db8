//! `Config::limit_counts_process`: the limit bounds the process's resident
//! memory, as a cgroup's would, not the cache alone. Its own test binary:
//! the test measures its whole process, so nothing else may run in it.

use std::sync::Arc;

use farmem_policy::readahead::ReadaheadConfig;
use farmem_runtime::{Config, MemStore, PAGE, Runtime, Stats};

mod common;
use common::skip;

const LIMIT_PAGES: u64 = 2048;

/// Writes every page of a region four times the limit, twice, then
/// checks every byte; returns the stats after the second pass.
fn fill_twice(counts_process: bool, ballast: &[u8]) -> Stats {
    let store = Arc::new(MemStore::new(1 << 30));
    let c = Config {
        local_bytes: LIMIT_PAGES * PAGE,
        slab_batch: 64 << 20,
        fault_around: ReadaheadConfig { max_blocks: 0 },
        limit_counts_process: counts_process,
        ..Config::default()
    };
    let rt = Runtime::new(c, store.clone(), store).unwrap();
    let pages = 4 * LIMIT_PAGES as usize;
    let r = rt.region(pages as u64 * PAGE).unwrap();
    for round in 0..2u8 {
        for p in 0..pages {
            r.write_at(p * PAGE as usize, &[round ^ (p as u8); 8])
                .unwrap();
        }
        // Time for the evictor to measure the process between passes.
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let mut b = [0u8; 8];
    for p in 0..pages {
        r.read_at(p * PAGE as usize, &mut b).unwrap();
        assert_eq!(b, [1 ^ (p as u8); 8], "page {p}");
    }
    assert!(ballast.iter().step_by(PAGE as usize).all(|&x| x == 3));
    rt.stats()
}

#[test]
fn the_process_memory_outside_the_cache_is_charged_against_its_limit() {
    if skip() {
        return;
    }
    // 16 MiB the process holds besides the runtime's cache (8 MiB limit),
    // with the in-memory store's copy of the region (32 MiB) beside it:
    // far more than half the limit.
    let ballast = vec![3u8; 16 << 20];
    let s = fill_twice(false, &ballast);
    assert_eq!(s.outside_pages, 0, "{s:?}");
    assert_eq!(s.outside_pages_peak, 0, "{s:?}");
    assert!(s.resident_pages > LIMIT_PAGES * 5 / 8, "{s:?}");

    let s = fill_twice(true, &ballast);
    // Charged up to half the limit: the cache keeps the other half, less
    // its diff bases and page tables, evicted down to the low watermark.
    assert!(s.outside_pages >= LIMIT_PAGES, "{s:?}");
    assert!(s.outside_pages_peak >= s.outside_pages, "{s:?}");
    assert!(s.resident_pages <= LIMIT_PAGES / 2, "{s:?}");
    assert!(s.resident_pages >= LIMIT_PAGES / 8, "{s:?}");
}
