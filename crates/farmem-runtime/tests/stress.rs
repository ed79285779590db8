//! The stress test: two threads randomly read and write a 1 GiB far
//! region through a 64 MiB local cache against a shadow copy; every byte
//! matches at the end, and a fresh runtime reads the same bytes back. And
//! the same over a small region through a tiny cache, where every page is
//! evicted, fetched and rewritten over and over while several shippers
//! have its write-backs in flight.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use farmem_runtime::{Config, DirtyMode, FaultPath, MemStore, PAGE, Region, Runtime};

mod common;
use common::skip;

const REGION: u64 = 1 << 30;
const LOCAL: u64 = 64 << 20;
const THREADS: usize = 2;
const OPS_PER_THREAD: usize = 100_000;

/// Ordinary memory holding what the region should contain. Threads own
/// disjoint 64 B lines (line % THREADS), so they never touch the same bytes.
struct Shadow(*mut u8);
// SAFETY: accesses from different threads are to disjoint lines.
unsafe impl Send for Shadow {}
unsafe impl Sync for Shadow {}

fn cfg(dirty: DirtyMode, fault_path: FaultPath) -> Config {
    Config {
        local_bytes: LOCAL,
        dirty,
        fault_path,
        slab_batch: REGION,
        ..Config::default()
    }
}

fn worker(t: usize, region: &Region<'_>, shadow: &Shadow, mismatches: &AtomicU64) {
    let mut rng = SmallRng::seed_from_u64(0x5eed + t as u64);
    let lines = region.len() / 64;
    let mut buf = [0u8; 64];
    for _ in 0..OPS_PER_THREAD {
        let line = rng.gen_range(0..lines / THREADS) * THREADS + t;
        let off = rng.gen_range(0..64);
        let len = rng.gen_range(1..=64 - off);
        let at = line * 64 + off;
        // SAFETY: this thread alone owns `line` in the shadow.
        let sh = unsafe { std::slice::from_raw_parts_mut(shadow.0.add(at), len) };
        if rng.gen_bool(0.5) {
            rng.fill(&mut buf[..len]);
            region.write_at(at, &buf[..len]).unwrap();
            sh.copy_from_slice(&buf[..len]);
        } else {
            region.read_at(at, &mut buf[..len]).unwrap();
            if buf[..len] != *sh {
                mismatches.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn compare_all(region: &Region<'_>, shadow: &[u8]) -> usize {
    let mut page = vec![0u8; PAGE as usize];
    let mut bad = 0;
    for (p, want) in shadow.chunks(PAGE as usize).enumerate() {
        region.read_at(p * PAGE as usize, &mut page).unwrap();
        if page != want {
            bad += 1;
        }
    }
    bad
}

fn stress(dirty: DirtyMode, path: FaultPath) {
    stress_with(cfg(dirty, path), REGION);
}

fn stress_with(cfg: Config, region_bytes: u64) {
    let (dirty, path, local) = (cfg.dirty, cfg.fault_path, cfg.local_bytes);
    let store = Arc::new(MemStore::new(2 * region_bytes));
    // Zero-filled by the OS lazily: only touched shadow pages cost memory.
    let mut shadow = vec![0u8; region_bytes as usize];
    let extents;
    {
        let rt = Runtime::new(cfg.clone(), store.clone(), store.clone()).unwrap();
        let region = rt.region(region_bytes).unwrap();
        let mismatches = AtomicU64::new(0);
        let sp = Shadow(shadow.as_mut_ptr());
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (region, sp, mismatches) = (&region, &sp, &mismatches);
                s.spawn(move || worker(t, region, sp, mismatches));
            }
        });
        let st = rt.stats();
        eprintln!(
            "{dirty:?} {path} after workload: {}",
            serde_json::to_string(&st).unwrap()
        );
        assert_eq!(
            mismatches.load(Ordering::Relaxed),
            0,
            "reads disagreed with the shadow"
        );
        assert!(st.resident_pages <= local / PAGE);
        assert!(st.pages_evicted_dirty > 0 && st.pages_evicted_clean > 0);
        assert_eq!(
            compare_all(&region, &shadow),
            0,
            "pages differ from the shadow"
        );
        region.sync().unwrap();
        assert!(rt.last_error().is_none(), "{:?}", rt.last_error());
        extents = region.extents().unwrap();
    }
    let rt = Runtime::new(cfg, store.clone(), store.clone()).unwrap();
    let region = rt.region_over(&extents).unwrap();
    assert_eq!(
        compare_all(&region, &shadow),
        0,
        "fresh runtime sees other bytes"
    );
    eprintln!("{dirty:?} store: {:?}", store.stats());
}

#[test]
fn two_threads_random_1g_region_64m_cache_line_mode() {
    if skip() {
        return;
    }
    stress(DirtyMode::Line, FaultPath::Thread);
}

#[test]
fn two_threads_random_1g_region_64m_cache_page_mode() {
    if skip() {
        return;
    }
    stress(DirtyMode::Page, FaultPath::Thread);
}

/// Faults served in the faulting threads' SIGBUS handlers, racing each
/// other and the evictor for the same pages.
#[test]
fn two_threads_random_1g_region_64m_cache_signal_path() {
    if skip() {
        return;
    }
    stress(DirtyMode::Line, FaultPath::Signal);
}

/// Every page of 8 MiB evicted, fetched and rewritten hundreds of times
/// through 2 MiB, with four shippers (each a log segment in flight): a
/// page's next write-back never overtakes its last one.
#[test]
fn four_shippers_rewriting_a_small_region_through_a_tiny_cache() {
    if skip() {
        return;
    }
    let region = 8 << 20;
    stress_with(
        Config {
            local_bytes: 2 << 20,
            shippers: 4,
            log_segments: 4,
            slab_batch: region,
            ..Config::default()
        },
        region,
    );
}
