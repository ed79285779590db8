//! `engine: daemon` (DaeMon's selection unit on real faults): exact
//! decision counts on far data read in order and in a scattered order,
//! every page's bytes checked, and the reads the store saw.

use std::sync::Arc;

use farmem_policy::readahead::ReadaheadConfig;
use farmem_runtime::{
    Config, DirtyMode, Engine, FaultPath, MemStore, MemStoreStats, PAGE, Runtime, Stats,
};

mod common;
use common::skip;

const PAGES: usize = 512;
/// Pages per cluster (the selector's default, 256 KiB).
const CLUSTER: usize = 64;

fn cfg(engine: Engine) -> Config {
    Config {
        // Room for every page: nothing is evicted mid-test.
        local_bytes: 2 * PAGES as u64 * PAGE,
        zeroed_slabs: true,
        slab_batch: 4 << 20,
        dirty: DirtyMode::Line,
        fault_path: FaultPath::Thread,
        engine,
        // The decisions below are counted exactly: none may turn on the
        // reads' measured times.
        whole_within: 0,
        fault_around: ReadaheadConfig { max_blocks: 32 },
        ..Config::default()
    }
}

/// PAGES distinct pages written through one runtime: the store, and the
/// extents holding them.
fn stored_pages() -> (Arc<MemStore>, Vec<(u64, u64)>) {
    let store = Arc::new(MemStore::new(1 << 30));
    let rt = Runtime::new(cfg(Engine::Page), store.clone(), store.clone()).unwrap();
    let r = rt.region(PAGES as u64 * PAGE).unwrap();
    for p in 0..PAGES {
        r.write_at(p * PAGE as usize, &[(p % 251) as u8 + 1; PAGE as usize])
            .unwrap();
    }
    r.sync().unwrap();
    let extents = r.extents().unwrap();
    (store, extents)
}

/// Reads the pages in `order` through a fresh runtime, checking each;
/// returns its stats and the store's reads meanwhile.
fn read_pages(engine: Engine, order: &[usize]) -> (Stats, u64) {
    let (stats, reads) = read_pages_with(cfg(engine), order);
    (stats, reads.reads)
}

fn read_pages_with(cfg: Config, order: &[usize]) -> (Stats, MemStoreStats) {
    let (store, extents) = stored_pages();
    let before = store.stats();
    let rt = Runtime::new(cfg, store.clone(), store.clone()).unwrap();
    let r = rt.region_over(&extents).unwrap();
    let mut page = vec![0u8; PAGE as usize];
    for &p in order {
        r.read_at(p * PAGE as usize, &mut page).unwrap();
        assert!(page.iter().all(|&b| b == (p % 251) as u8 + 1), "page {p}");
    }
    let stats = rt.stats();
    drop(r);
    drop(rt);
    let after = store.stats();
    let reads = MemStoreStats {
        reads: after.reads - before.reads,
        bulk_reads: after.bulk_reads - before.bulk_reads,
        bytes_read: after.bytes_read - before.bytes_read,
        ..after
    };
    (stats, reads)
}

#[test]
fn demand_first_reads_each_page_alone_and_its_window_on_the_bulk_lane() {
    if skip() {
        return;
    }
    let order: Vec<usize> = (0..PAGES).collect();
    let all = PAGES as u64 * PAGE;
    // Faults that read (not those that found their page on its way).
    let fetching = |s: &Stats| s.faults_missing - s.faults_waited - s.faults_spurious;
    // One demand read per fault, window and page together.
    let (s, reads) = read_pages_with(cfg(Engine::Page), &order);
    assert_eq!(reads.bytes_read, all, "every page crossed once");
    assert_eq!((reads.reads, reads.bulk_reads), (fetching(&s), 0), "{s:?}");
    // The page alone on the demand lane, then its window on the bulk one.
    let demand_first = Config {
        demand_first: true,
        ..cfg(Engine::Page)
    };
    let (d, reads) = read_pages_with(demand_first, &order);
    assert_eq!(reads.bytes_read, all, "every page crossed once");
    let demand = reads.reads - reads.bulk_reads;
    assert_eq!(demand, fetching(&d), "{d:?}");
    // Each demand read a page alone: the rest came in windows, on the
    // bulk lane.
    assert_eq!(d.pages_fetched, PAGES as u64, "{d:?}");
    assert_eq!(d.pages_faulted_around, PAGES as u64 - demand, "{d:?}");
    assert!(reads.bulk_reads > 0, "{d:?}");
}

#[test]
fn a_stream_takes_a_cluster_per_fault_after_its_first() {
    if skip() {
        return;
    }
    let order: Vec<usize> = (0..PAGES).collect();
    let (s, reads) = read_pages(Engine::Daemon, &order);
    let clusters = (PAGES / CLUSTER) as u64;
    // Page 0 starts the stream (no locality yet): its page alone. Page 1
    // continues it: page 1, and the rest of cluster 0 (pages 2-63) in the
    // background. Every cluster after starts where the last ended.
    assert_eq!(s.engine_pages_only, 1, "{s:?}");
    assert_eq!(s.engine_no_locality, 1, "{s:?}");
    assert_eq!(s.engine_page_and_cluster, clusters, "{s:?}");
    assert_eq!(s.engine_cluster_only, 0, "{s:?}");
    assert_eq!(s.engine_bulk_reads, clusters, "{s:?}");
    assert_eq!(
        s.engine_bulk_pages,
        (CLUSTER - 2) as u64 + (clusters - 1) * (CLUSTER - 1) as u64,
        "{s:?}"
    );
    assert_eq!(s.pages_fetched, PAGES as u64, "{s:?}");
    // A read per demand page and one per cluster.
    assert_eq!(reads, 1 + 2 * clusters);
}

#[test]
fn scattered_faults_fetch_their_pages_alone() {
    if skip() {
        return;
    }
    // 101 is prime to 512, so every page comes once; and no page comes
    // within 63 faults of a neighbour (k·101 mod 512 is never ±1 for
    // k < 64), so none continues any of the readahead's 16 streams. (With
    // 239, page 1 comes 15 faults after page 0: a stream, and locality.)
    let order: Vec<usize> = (0..PAGES).map(|i| i * 101 % PAGES).collect();
    let (s, reads) = read_pages(Engine::Daemon, &order);
    assert_eq!(s.engine_pages_only, PAGES as u64, "{s:?}");
    assert_eq!(s.engine_no_locality, PAGES as u64, "{s:?}");
    assert_eq!(s.engine_page_and_cluster + s.engine_cluster_only, 0);
    assert_eq!((s.engine_bulk_reads, s.engine_bulk_pages), (0, 0));
    assert_eq!(reads, PAGES as u64);
    // The page engine on the same order: the same pages, no decisions.
    let (p, page_reads) = read_pages(Engine::Page, &order);
    assert_eq!(p.engine_pages_only + p.engine_page_and_cluster, 0);
    assert_eq!(page_reads, PAGES as u64);
    assert_eq!(p.pages_fetched, s.pages_fetched);
}

#[test]
fn a_stream_past_a_cluster_takes_its_readahead_window() {
    if skip() {
        return;
    }
    // Windows up to 128 pages, clusters of 64. The stream's windows double
    // from its second fault: 2 at page 1, 4 at 64, 8, 16, 32, 64 at 320,
    // 128 at 384. Each fault takes its aligned cluster, and the one at 384
    // its window, 384-511, two clusters in one bulk read: 7 clusters
    // where the aligned ones alone were 8.
    let order: Vec<usize> = (0..PAGES).collect();
    let cfg = Config {
        fault_around: ReadaheadConfig { max_blocks: 128 },
        ..cfg(Engine::Daemon)
    };
    let (s, reads) = read_pages_with(cfg, &order);
    assert_eq!(s.engine_pages_only, 1, "{s:?}");
    assert_eq!(s.engine_page_and_cluster, 7, "{s:?}");
    assert_eq!(s.engine_bulk_reads, 7, "{s:?}");
    assert_eq!(s.engine_bulk_pages, 62 + 5 * 63 + 127, "{s:?}");
    assert_eq!(s.pages_fetched, PAGES as u64, "{s:?}");
    assert_eq!(reads.reads, 1 + 2 * 7);
}
