//! Scheme `farmem`, the runtime's own, on crafted access patterns: exact
//! fault, fetch and write-back counts, worked out by hand from the
//! runtime's rules (crates/farmem-runtime: resolve.rs, around.rs, evict.rs).

use farmem_sim::{ConfigBuilder, SimResult, simulate_accesses};
use farmem_workloads::Access;

const PAGE: u64 = 4096;
const BASE: u64 = 0x10_0000_0000;

/// Runs `acc` with the marks the counts below were worked out for (95%
/// and 85% of the room; the runtime's defaults are 99% and 97%).
fn run(sets: &[(&str, &str)], footprint: u64, acc: &[Access]) -> SimResult {
    let mut b = ConfigBuilder::preset("daemon").unwrap();
    b.set("local.watermarks", "{ high = 0.95, low = 0.85 }")
        .unwrap();
    for (k, v) in sets {
        b.set(k, v).unwrap();
    }
    simulate_accesses(&b.build().unwrap(), "farmem", footprint, acc).unwrap()
}

fn count(r: &SimResult, key: &str) -> u64 {
    r.stats
        .get(&format!("farmem.{key}"))
        .unwrap_or_else(|| panic!("no stat farmem.{key}")) as u64
}

/// Stores to lines 0, 1 and 2 of each of `pages` pages, then a load of
/// line 0 of each, both in page order.
fn write_three_lines_then_read(pages: u64) -> Vec<Access> {
    let mut acc: Vec<Access> = (0..pages)
        .flat_map(|p| (0..3).map(move |l| Access::store(BASE + p * PAGE + l * 64, 8, 0)))
        .collect();
    acc.extend((0..pages).map(|p| Access::load(BASE + p * PAGE, 8, 0)));
    acc
}

#[test]
fn fresh_pages_fill_with_zeros_and_stored_ones_are_fetched() {
    // 100 pages local, evicted between the runtime's marks (95 and 85
    // pages: a round of 11 after the install that passes 95), LRU,
    // fault-around off, diff bases uncapped (a 100 MiB limit).
    // Writing 200 pages: 200 faults on never-written pages, zeros, no
    // fetch; 10 rounds take pages 0..110 out, 3 written lines each.
    // Reading all 200 again: 0..110 are stored, so fetched; a page
    // written in its last residency is predicted to be written again
    // (farmem_policy::write_streak), so it comes in writable, unwatched,
    // over a snapshot. 10 rounds take out 110..200 (3 lines each) and
    // 0..20 (nothing written: nothing ships); then 110..200 are fetched
    // back, and 8 rounds take out 20..108. No write-protect fault.
    let n = 200;
    let sets = [
        ("local.size", "400KiB"),
        ("runtime.fault_around", "1"),
        ("runtime.limit", "\"100MiB\""),
    ];
    let r = run(&sets, n * PAGE, &write_three_lines_then_read(n));
    assert_eq!(count(&r, "faults_missing"), 400);
    assert_eq!(count(&r, "pages_zero_filled"), 200);
    assert_eq!(count(&r, "pages_fetched"), 200);
    assert_eq!(count(&r, "bytes_fetched"), 200 * PAGE);
    assert_eq!(count(&r, "faults_wp"), 0);
    assert_eq!(count(&r, "writes_predicted"), 200);
    assert_eq!(count(&r, "dirty_lines_shipped"), 600);
    assert_eq!(count(&r, "bytes_written_back"), 600 * 64);
    assert_eq!(count(&r, "pages_evicted_dirty"), 110 + 110 + 88);
    assert_eq!(count(&r, "pages_evicted_clean"), 0);
    assert_eq!(r.remote_bytes_read, 200 * PAGE);
    assert_eq!(r.remote_bytes_written, 600 * 64);

    // Page mode ships whole pages: those written, and those installed
    // writable on a prediction, written or not (the runtime cannot tell).
    let sets = [
        ("local.size", "400KiB"),
        ("runtime.fault_around", "1"),
        ("runtime.limit", "\"100MiB\""),
        ("runtime.dirty", "page"),
    ];
    let r = run(&sets, n * PAGE, &write_three_lines_then_read(n));
    assert_eq!(count(&r, "bytes_written_back"), 308 * PAGE);

    // With the runtime's cap on diff bases at a sixteenth of the limit
    // (6.25 of 100 pages), a predicted page keeps one only while fewer
    // than 7 are alive; past it, none, and it ships whole. Bases: pages
    // 0..7; once the 9th round takes those out, 94..101; as the 7th and
    // 8th rounds of the second half take those out, 3 and then 4 more
    // (pages evicted by then). 21 kept. Of the 108 predicted pages
    // evicted, the 14 with a base ship nothing, the other 94 ship whole.
    let sets = [
        ("local.size", "400KiB"),
        ("runtime.fault_around", "1"),
        ("runtime.diff_share", "\"1/16\""),
    ];
    let r = run(&sets, n * PAGE, &write_three_lines_then_read(n));
    assert_eq!(count(&r, "snapshots"), 21);
    assert_eq!(count(&r, "dirty_lines_shipped"), 600 + 94 * 64);
}

#[test]
fn a_read_then_a_write_takes_a_write_protect_fault() {
    // Everything fits (50 pages touched of a 200-page region, 100 local):
    // 50 read faults (zeros), then the first write to each page is a
    // write-protect fault; its second write is not.
    let n = 50;
    let mut acc: Vec<Access> = (0..n)
        .map(|p| Access::load(BASE + p * PAGE, 8, 0))
        .collect();
    for _ in 0..2 {
        acc.extend((0..n).map(|p| Access::store(BASE + p * PAGE + 128, 8, 0)));
    }
    let sets = [("local.size", "400KiB"), ("runtime.fault_around", "1")];
    let r = run(&sets, 4 * n * PAGE, &acc);
    assert_eq!(count(&r, "faults_missing"), n);
    assert_eq!(count(&r, "faults_wp"), n);
    assert_eq!(count(&r, "bytes_written_back"), 0);
}

#[test]
fn fault_around_doubles_its_window_and_stops_at_the_region_end() {
    // A store per page over 64 fresh pages, windows up to 8 (a 1 MiB
    // limit allows 8 pages besides a fault's own), room for all: faults at pages 0 (window 1), 1 (2), 3 (4), 7, 15, … 55 (8
    // each), and 63, whose window of 8 is cut at the region's end: 11
    // faults, exactly the 64 pages filled, none past the region. From the
    // top down the same: faults at 63, 62 (with 61), 60 (57-60), 56, 48,
    // … 8 (8 each, below the fault), and 0, the region's first page.
    let n = 64;
    for down in [false, true] {
        let pages: Vec<u64> = if down {
            (0..n).rev().collect()
        } else {
            (0..n).collect()
        };
        let acc: Vec<Access> = pages
            .iter()
            .map(|p| Access::store(BASE + p * PAGE, 8, 0))
            .collect();
        let sets = [
            ("local.size", "400KiB"),
            ("runtime.fault_around", "8"),
            ("runtime.limit", "\"1MiB\""),
        ];
        let r = run(&sets, n * PAGE, &acc);
        assert_eq!(count(&r, "faults_missing"), 11, "down: {down}");
        assert_eq!(count(&r, "pages_zero_filled"), 64, "down: {down}");
        assert_eq!(count(&r, "pages_faulted_around"), 53, "down: {down}");
        // Pages filled around a write start writable: no write-protect fault.
        assert_eq!(count(&r, "faults_wp"), 0, "down: {down}");
    }
}

#[test]
fn fault_around_takes_its_window_past_the_room_and_reads_stored_pages_below() {
    // 16 pages local (marks at 15 and 13), windows up to 8, a 512 KiB
    // limit: a window takes at most 4 pages besides its fault's (1/32 of
    // 128), even past the room. Writing 64 pages: faults at 0, 1, 3 and 7
    // take 1, 2, 4 and 5 pages; 12 takes 5 more (17 resident, one past
    // the room), and each later fault first lands the round the last one
    // started (down to 13), then takes 5: 17, 22, … 57, and 62 with 63,
    // the region's last. 15 faults; 49..63 stay resident, 0..48 stored.
    // Reading 47..0 down: 47 alone (a new stream), 46 with 45, 44 with
    // 43..41, then 5 a fault: 40, 35, … 5, and 0 alone at the region's
    // start. 12 faults, 48 pages fetched, those below each fault in its
    // read. No window is cut short by a full cache.
    let n = 64;
    let mut acc: Vec<Access> = (0..n)
        .map(|p| Access::store(BASE + p * PAGE, 8, 0))
        .collect();
    acc.extend((0..48).rev().map(|p| Access::load(BASE + p * PAGE, 8, 0)));
    let sets = [
        ("local.size", "64KiB"),
        ("runtime.fault_around", "8"),
        ("runtime.limit", "\"512KiB\""),
    ];
    let r = run(&sets, n * PAGE, &acc);
    assert_eq!(count(&r, "faults_missing"), 15 + 12);
    assert_eq!(count(&r, "pages_zero_filled"), 64);
    assert_eq!(count(&r, "pages_fetched"), 48);
    assert_eq!(count(&r, "pages_faulted_around"), (64 - 15) + (48 - 12));
}

#[test]
fn runtime_settings_are_checked() {
    let mut b = ConfigBuilder::preset("daemon").unwrap();
    b.set("runtime.dirty", "\"sector\"").unwrap();
    let e = b.build().unwrap_err().to_string();
    assert!(e.contains("sector"), "{e}");
    let mut b = ConfigBuilder::preset("daemon").unwrap();
    assert!(b.set("runtime.fault_round", "4").is_err());
}

#[test]
fn bases_the_shipper_holds_count_against_the_cap_until_the_next_fault() {
    // 16 pages local (marks at 15 and 13: a round of 3 lands at the fault
    // after the install that fills the cache), LRU, fault-around off, a
    // 256 KiB limit, bases capped at a sixteenth of it: 4 of 64 pages.
    // Writing line 0 of 32 fresh pages: rounds at faults 16, 19, … 31 take
    // pages 0..18 out, stored, each written in its last residency.
    // Loading 0..20: each is predicted written, installed writable and
    // asks for a base; rounds land at the loads of 2, 5, 8, 11, 14 and 17
    // (18..32, then 0 at 14's, 1..4 at 17's). Bases kept: 0..4 (4, the
    // cap); at 14's fault page 0's base is still with the shipper (3
    // resident + 1: refused), at 15's it is back (kept); at 17's 1..4 are
    // with the shipper (refused), at 18's and 19's they are back (kept).
    // Without the shipper's hold 14, 17, 18 and 19 would keep theirs.
    let mut acc: Vec<Access> = (0..32)
        .map(|p| Access::store(BASE + p * PAGE, 8, 0))
        .collect();
    acc.extend((0..20).map(|p| Access::load(BASE + p * PAGE, 8, 0)));
    let sets = [
        ("local.size", "64KiB"),
        ("runtime.fault_around", "1"),
        ("runtime.limit", "\"256KiB\""),
        ("runtime.diff_share", "\"1/16\""),
    ];
    let r = run(&sets, 32 * PAGE, &acc);
    assert_eq!(count(&r, "faults_missing"), 52);
    assert_eq!(count(&r, "pages_zero_filled"), 32);
    assert_eq!(count(&r, "pages_fetched"), 20);
    assert_eq!(count(&r, "writes_predicted"), 20);
    assert_eq!(count(&r, "snapshots"), 7);
    assert_eq!(count(&r, "snapshots_skipped"), 13);
    assert_eq!(count(&r, "snapshots_capped"), 13);
    // 32 fresh pages' line 0 each (18 in the first part, 14 in the
    // second); 0..4, evicted over their bases unwritten, ship nothing.
    assert_eq!(count(&r, "dirty_lines_shipped"), 32);
}

#[test]
fn a_window_stops_at_a_page_its_own_fault_is_still_shipping() {
    // 16 pages local (marks at 15 and 13), windows up to 8, a 512 KiB
    // limit (4 pages besides a fault's). Writing 22 fresh pages: faults
    // at 0, 1, 3, 7, 12 and 17 (as above); 17's round takes 0..3 out, and
    // lands 4..8 at the next fault. Reading 2..13 up (0..3 stored, 4..21
    // resident): 2 alone (a new stream; its round takes 4..8),
    // 3 with 4, 5 with 6..8 (its round takes 9..11), then 9, whose round
    // takes 12..15: those are still shipping while 9 reads (the runtime
    // drops a victim only once its batch is acknowledged), so 9's window
    // takes 10 and 11 and stops at 12. 12 takes 13..15 and stops at 16,
    // taken by its own round. Without the hold, 9 would read 12 and 13
    // back in the fault whose round had just written them out.
    let mut acc: Vec<Access> = (0..22)
        .map(|p| Access::store(BASE + p * PAGE, 8, 0))
        .collect();
    acc.extend((2..14).map(|p| Access::load(BASE + p * PAGE, 8, 0)));
    let sets = [
        ("local.size", "64KiB"),
        ("runtime.fault_around", "8"),
        ("runtime.limit", "\"512KiB\""),
    ];
    let r = run(&sets, 22 * PAGE, &acc);
    assert_eq!(count(&r, "faults_missing"), 6 + 5);
    assert_eq!(count(&r, "pages_zero_filled"), 22);
    assert_eq!(count(&r, "pages_fetched"), 1 + 2 + 4 + 3 + 4);
    assert_eq!(count(&r, "pages_faulted_around"), 16 + (1 + 3 + 2 + 3));
    assert_eq!(count(&r, "pages_evicted_dirty"), 4 + 5 + 3 + 4 + 3);
}
