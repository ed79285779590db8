//! Probation (victims parked before eviction), and discarding and zeroing
//! freed memory.

use std::sync::Arc;

use farmem_policy::cache::PolicyConfig;
use farmem_policy::readahead::ReadaheadConfig;
use farmem_runtime::{Config, MemStore, PAGE, Runtime};

mod common;
use common::skip;

const P: usize = PAGE as usize;

fn cfg(local_pages: u64, park_share: f64) -> Config {
    Config {
        local_bytes: local_pages * PAGE,
        slab_batch: 64 << 20,
        zeroed_slabs: true,
        fault_around: ReadaheadConfig { max_blocks: 0 },
        // Fault-only LRU: what probation adds is plain to see.
        policy: PolicyConfig::Lru,
        park_share,
        ..Config::default()
    }
}

/// Whether this kernel can park pages (UFFDIO_MOVE, Linux 6.8+).
fn can_park() -> bool {
    let store = Arc::new(MemStore::new(64 << 20));
    let rt = Runtime::new(cfg(64, 0.25), store.clone(), store).unwrap();
    let r = rt.region(256 * PAGE).unwrap();
    for p in 0..256 {
        r.write_at(p * P, &[1]).unwrap();
    }
    rt.stats().pages_parked > 0
}

/// Eight hot pages read between every four pages of a scan 32 times the
/// cache: the stats before the scan is read back.
fn hot_pages_beside_a_scan(park_share: f64) -> farmem_runtime::Stats {
    let store = Arc::new(MemStore::new(1 << 30));
    let rt = Runtime::new(cfg(64, park_share), store.clone(), store.clone()).unwrap();
    let r = rt.region(4096 * PAGE).unwrap();
    for h in 0..8 {
        r.write_at(h * P, &[h as u8 + 1; 64]).unwrap();
    }
    for s in 0..2048 {
        r.write_at((64 + s) * P, &(s as u32).to_le_bytes()).unwrap();
        if s % 4 == 3 {
            for h in 0..8 {
                let mut b = [0u8; 64];
                r.read_at(h * P, &mut b).unwrap();
                assert_eq!(b, [h as u8 + 1; 64], "hot page {h} after scan page {s}");
            }
        }
    }
    let stats = rt.stats();
    for s in (0..2048).step_by(97) {
        let mut b = [0u8; 4];
        r.read_at((64 + s) * P, &mut b).unwrap();
        assert_eq!(u32::from_le_bytes(b), s as u32, "scan page {s}");
    }
    assert!(rt.last_error().is_none(), "{:?}", rt.last_error());
    stats
}

#[test]
fn pages_in_use_stay_through_a_scan_only_on_probation() {
    if skip() || !can_park() {
        return;
    }
    let lru = hot_pages_beside_a_scan(0.0);
    let parked = hot_pages_beside_a_scan(0.25);
    eprintln!("lru: {lru:?}\nparked: {parked:?}");
    assert_eq!((lru.pages_parked, lru.pages_unparked), (0, 0), "{lru:?}");
    // LRU on faults alone pushes every hot page out once per cache's
    // worth of scan (2048 / 64 times), and fetches it back.
    assert!(lru.pages_fetched >= 100, "{lru:?}");
    // On probation a hot page is touched while parked and kept: the scan
    // leaves and the hot pages stay (a few may go before their first touch).
    assert!(parked.pages_unparked >= 100, "{parked:?}");
    assert!(parked.pages_fetched <= 16, "{parked:?}");
    assert!(parked.pages_fetched * 10 <= lru.pages_fetched, "{parked:?}");
    assert!(parked.pages_evicted_dirty >= 2048 - 64, "{parked:?}");
}

#[test]
fn parked_pages_keep_their_data_and_writes_after_a_clean_return() {
    if skip() || !can_park() {
        return;
    }
    let store = Arc::new(MemStore::new(1 << 30));
    let rt = Runtime::new(cfg(64, 0.25), store.clone(), store.clone()).unwrap();
    let r = rt.region(2048 * PAGE).unwrap();
    let word = |h: usize, round: u8| [h as u8, round, 0xA5, 0x5A];
    let at = |h: usize| h * P + 64 * (h % 64);
    for h in 0..8 {
        r.write_at(at(h), &word(h, 1)).unwrap();
    }
    for round in 2..6u8 {
        // Every hot page clean: parked from now on, it goes clean and comes
        // back write-protected, so the write below must still be seen.
        rt.sync().unwrap();
        for s in 0..256 {
            r.write_at((64 + s) * P, &[round; 8]).unwrap();
            if s % 4 == 3 {
                for h in 0..8 {
                    let mut b = [0u8; 4];
                    r.read_at(at(h), &mut b).unwrap();
                    let last = if h % 2 == 0 { round - 1 } else { 1 };
                    assert_eq!(b, word(h, last), "hot page {h} in round {round}");
                }
            }
        }
        for h in (0..8).step_by(2) {
            r.write_at(at(h), &word(h, round)).unwrap();
        }
    }
    rt.sync().unwrap();
    let s = rt.stats();
    eprintln!("{s:?}");
    assert!(s.pages_unparked >= 50, "{s:?}");
    assert!(rt.last_error().is_none(), "{:?}", rt.last_error());
    // What reached the store, through a second runtime over it.
    let extents = r.extents().unwrap();
    let rt2 = Runtime::new(cfg(64, 0.0), store.clone(), store.clone()).unwrap();
    let r2 = rt2.region_over(&extents).unwrap();
    for h in 0..8 {
        let mut b = [0u8; 4];
        r2.read_at(at(h), &mut b).unwrap();
        let last = if h % 2 == 0 { 5 } else { 1 };
        assert_eq!(b, word(h, last), "stored hot page {h}");
    }
}

#[test]
fn freed_pages_leave_the_cache_without_a_write_back() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(1 << 30));
    let rt = Runtime::new(cfg(64, 0.125), store.clone(), store.clone()).unwrap();
    let r = rt.region(64 * PAGE).unwrap();
    // Page 0 stored with "A", then rewritten "B" and freed.
    r.write_at(0, b"AAAA").unwrap();
    rt.sync().unwrap();
    r.write_at(0, b"BBBB").unwrap();
    for p in 1..32 {
        r.write_at(p * P, &[7; 8]).unwrap();
    }
    // A fault's page is in use before its handler has settled its state:
    // wait for that (discard leaves a page mid-fetch as it is).
    for p in 0..32 {
        let settled = (0..1000).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(1));
            !r.page_state(p * P).starts_with("Fetching")
        });
        assert!(settled, "page {p}: {}", r.page_state(p * P));
    }
    let written = store.stats().lines_written;
    let before = rt.stats().resident_pages;
    // A range that starts and ends mid-page drops only the pages inside.
    let base = r.as_ptr() as u64;
    assert_eq!(rt.discard(base + 1, 32 * PAGE - 2), 30);
    assert_eq!(rt.discard(base, 32 * PAGE), 2);
    let s = rt.stats();
    assert_eq!(s.pages_discarded, 32, "{s:?}");
    assert_eq!(s.resident_pages, before - 32, "{s:?}");
    rt.sync().unwrap();
    assert_eq!(
        store.stats().lines_written,
        written,
        "nothing freed is written"
    );
    // Freed pages read zeros, a stored one too, with nothing fetched.
    let fetched = rt.stats().pages_fetched;
    let mut b = [1u8; 8];
    r.read_at(5 * P, &mut b).unwrap();
    assert_eq!(b, [0; 8]);
    let mut b = [1u8; 4];
    r.read_at(0, &mut b).unwrap();
    assert_eq!(b, [0; 4]);
    assert_eq!(rt.stats().pages_fetched, fetched);
    // Outside every region, or less than a page: nothing.
    assert_eq!(rt.discard(8, PAGE), 0);
    assert_eq!(rt.discard(base + 40 * PAGE, PAGE - 1), 0);
}

/// The bytes of `pages` pages of `r`'s store copy, read through a second
/// runtime over the same store.
fn stored_bytes(store: &Arc<MemStore>, r: &farmem_runtime::Region<'_>, pages: usize) -> Vec<u8> {
    let extents = r.extents().unwrap();
    let rt2 = Runtime::new(cfg(64, 0.0), store.clone(), store.clone()).unwrap();
    let r2 = rt2.region_over(&extents).unwrap();
    let mut b = vec![0u8; pages * P];
    r2.read_at(0, &mut b).unwrap();
    b
}

#[test]
fn a_freed_page_reads_zeros_and_its_next_write_back_replaces_the_stale_copy() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(1 << 30));
    let rt = Runtime::new(cfg(64, 0.0), store.clone(), store.clone()).unwrap();
    let r = rt.region(512 * PAGE).unwrap();
    // Pages 0 and 1 stored full of 0xAA; page 1 then evicted by a scan,
    // page 0 kept resident by touches.
    r.write_at(0, &[0xAA; 2 * P]).unwrap();
    rt.sync().unwrap();
    for p in 2..400 {
        r.write_at(p * P, &[1]).unwrap();
        let mut b = [0u8; 1];
        r.read_at(0, &mut b).unwrap();
    }
    assert!(r.page_state(P).starts_with("Absent"), "{}", r.page_state(P));
    assert!(
        !r.page_state(0).starts_with("Absent"),
        "{}",
        r.page_state(0)
    );
    let base = r.as_ptr() as u64;
    assert_eq!(rt.discard(base, 2 * PAGE), 1, "only page 0 was resident");
    let fetched = rt.stats().pages_fetched;
    for p in 0..2 {
        let mut b = [1u8; P];
        r.read_at(p * P, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 0), "page {p} reads zeros");
    }
    assert_eq!(rt.stats().pages_fetched, fetched, "nothing fetched");
    // One new word on each: the zeros around it must replace the old
    // 0xAA lines on the store, though they equal the page's diff base.
    r.write_at(100, b"CC").unwrap();
    r.write_at(P + 100, b"DD").unwrap();
    rt.sync().unwrap();
    assert!(rt.last_error().is_none(), "{:?}", rt.last_error());
    let stored = stored_bytes(&store, &r, 2);
    for (p, word) in [(0, b"CC"), (1, b"DD")] {
        let page = &stored[p * P..(p + 1) * P];
        assert_eq!(&page[100..102], word, "page {p}");
        let stale = (0..P)
            .filter(|&i| !(100..102).contains(&i) && page[i] != 0)
            .count();
        assert_eq!(
            stale, 0,
            "page {p}: bytes of the freed contents left on the store"
        );
    }
}

#[test]
fn zeroing_a_range_drops_whole_pages_and_writes_the_partial_ones() {
    if skip() {
        return;
    }
    let store = Arc::new(MemStore::new(1 << 30));
    let rt = Runtime::new(cfg(64, 0.0), store.clone(), store.clone()).unwrap();
    let r = rt.region(8 * PAGE).unwrap();
    r.write_at(0, &[0x5A; 4 * P]).unwrap();
    rt.sync().unwrap();
    let base = r.as_ptr() as u64;
    // From byte 100 of page 0 to byte 100 of page 3: pages 1 and 2 whole.
    rt.zero(base + 100, 3 * PAGE);
    assert_eq!(rt.stats().pages_discarded, 2);
    let mut b = vec![0u8; 4 * P];
    r.read_at(0, &mut b).unwrap();
    let zeroed = 100..3 * P + 100;
    for (i, &x) in b.iter().enumerate() {
        let want = if zeroed.contains(&i) { 0 } else { 0x5A };
        assert_eq!(x, want, "byte {i}");
    }
    // The partial pages were written, so a sync ships them; the whole ones
    // read zeros here without a write (the store keeps their old bytes).
    rt.sync().unwrap();
    let stored = stored_bytes(&store, &r, 4);
    for p in [0, 3] {
        let page = p * P..(p + 1) * P;
        assert!(stored[page.clone()] == b[page], "page {p} on the store");
    }
}
