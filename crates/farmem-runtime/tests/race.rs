//! Writes racing with eviction of the same page are never lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use farmem_runtime::{Config, DirtyMode, FaultPath, MemStore, PAGE, Runtime};

mod common;
use common::skip;

const HOT: usize = 8;
const COLD: usize = 2048;
/// Full sweeps of the cold pages the writer must overlap with.
const SWEEPS: usize = 4;

fn race(dirty: DirtyMode, fault_path: FaultPath) {
    let store = Arc::new(MemStore::new(1 << 30));
    let cfg = Config {
        local_bytes: 48 * PAGE,
        dirty,
        fault_path,
        slab_batch: 64 << 20,
        evict_batch: 8,
        ..Config::default()
    };
    let extents;
    let mut rounds = 0u64;
    {
        let rt = Runtime::new(cfg.clone(), store.clone(), store.clone()).unwrap();
        let region = rt.region(((HOT + COLD) * PAGE as usize) as u64).unwrap();
        let done = AtomicBool::new(false);
        let swept = AtomicUsize::new(0);
        let writer_at = AtomicUsize::new(0);
        std::thread::scope(|s| {
            // Diagnostics only: if the run stalls, say where pages are.
            let (rt, d, sw, at, reg) = (&rt, &done, &swept, &writer_at, &region);
            s.spawn(move || {
                let mut quiet = 0;
                while !d.load(Ordering::Relaxed) {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    quiet += 1;
                    if quiet % 100 == 0 {
                        let st = rt.stats();
                        eprintln!(
                            "stalled? writer at {:#x} page {} | swept {} missing {} wp {} fetched {} spurious {} waited {} | {} {:?}",
                            at.load(Ordering::Relaxed),
                            reg.page_state(at.load(Ordering::Relaxed)),
                            sw.load(Ordering::Relaxed),
                            st.faults_missing,
                            st.faults_wp,
                            st.pages_fetched,
                            st.faults_spurious,
                            st.faults_waited,
                            rt.census(),
                            rt.last_error()
                        );
                    }
                }
            });
            // Churn: sweeps cold pages so the hot ones are evicted again and
            // again while the writer keeps writing them.
            let (r, d, sw) = (&region, &done, &swept);
            s.spawn(move || {
                let mut b = [0u8; 1];
                let mut i = 0usize;
                while !d.load(Ordering::Relaxed) {
                    r.read_at((HOT + i % COLD) * PAGE as usize, &mut b).unwrap();
                    i += 1;
                    sw.store(i / COLD, Ordering::Relaxed);
                }
            });
            // Writer: a counter in a different line of each hot page every
            // round, each write checked right away.
            // Rounds continue until the churn has swept the cold pages
            // SWEEPS times, so the race does not depend on thread speed.
            while swept.load(Ordering::Relaxed) < SWEEPS {
                rounds += 1;
                let round = rounds;
                for h in 0..HOT {
                    let at = h * PAGE as usize + (round as usize % 64) * 64;
                    writer_at.store(at, Ordering::Relaxed);
                    region.write_at(at, &round.to_le_bytes()).unwrap();
                    let mut b = [0u8; 8];
                    region.read_at(at, &mut b).unwrap();
                    assert_eq!(u64::from_le_bytes(b), round, "hot page {h} round {round}");
                }
            }
            done.store(true, Ordering::Relaxed);
        });
        let st = rt.stats();
        eprintln!(
            "{dirty:?} {rounds} rounds: {}",
            serde_json::to_string(&st).unwrap()
        );
        assert!(st.pages_evicted_dirty > 0, "{st:?}");
        region.sync().unwrap();
        extents = region.extents().unwrap();
    }
    // Every line of every hot page holds the last round that wrote it.
    let rt = Runtime::new(cfg, store.clone(), store.clone()).unwrap();
    let region = rt.region_over(&extents).unwrap();
    for h in 0..HOT {
        for line in 0..64u64 {
            let last = (1..=rounds).rev().find(|r| r % 64 == line).unwrap_or(0);
            let mut b = [0u8; 8];
            region
                .read_at(h * PAGE as usize + line as usize * 64, &mut b)
                .unwrap();
            assert_eq!(u64::from_le_bytes(b), last, "hot page {h} line {line}");
        }
    }
}

#[test]
fn writes_racing_with_eviction_survive_line_mode() {
    if skip() {
        return;
    }
    race(DirtyMode::Line, FaultPath::Thread);
}

/// The same race with faults served in the writer's and the churner's own
/// SIGBUS handlers: a write to a page under write-back retries until the
/// page is gone, then fetches it back.
#[test]
fn writes_racing_with_eviction_survive_signal_path() {
    if skip() {
        return;
    }
    race(DirtyMode::Line, FaultPath::Signal);
}

#[test]
fn writes_racing_with_eviction_survive_page_mode() {
    if skip() {
        return;
    }
    race(DirtyMode::Page, FaultPath::Thread);
}
