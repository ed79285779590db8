//! Scheme `farmem`, the runtime's own, on crafted access patterns: exact
//! fault, fetch and write-back counts, worked out by hand from the
//! runtime's rules (crates/farmem-runtime: resolve.rs, around.rs, evict.rs).

use farmem_sim::{ConfigBuilder, SimResult, simulate_accesses};
use farmem_workloads::Access;

const PAGE: u64 = 4096;
const BASE: u64 = 0x10_0000_0000;

fn run(sets: &[(&str, &str)], footprint: u64, acc: &[Access]) -> SimResult {
    let mut b = ConfigBuilder::preset("daemon").unwrap();
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
    // 100 pages local (LRU, one victim per install), fault-around off.
    // Writing 200 pages: 200 faults on never-written pages, zeros, no
    // fetch; pages 0..100 leave with their 3 written lines each. Reading
    // them again: pages 0..100 are stored (fetched), each pushing out one
    // of 100..200 (3 lines each), which are then fetched in turn, pushing
    // out the clean 0..100. A write fault installs its page writable, so
    // no write-protect fault is taken.
    let n = 200;
    let sets = [("local.size", "400KiB"), ("runtime.fault_around", "1")];
    let r = run(&sets, n * PAGE, &write_three_lines_then_read(n));
    assert_eq!(count(&r, "faults_missing"), 400);
    assert_eq!(count(&r, "pages_zero_filled"), 200);
    assert_eq!(count(&r, "pages_fetched"), 200);
    assert_eq!(count(&r, "bytes_fetched"), 200 * PAGE);
    assert_eq!(count(&r, "faults_wp"), 0);
    assert_eq!(count(&r, "dirty_lines_shipped"), 600);
    assert_eq!(count(&r, "bytes_written_back"), 600 * 64);
    assert_eq!(count(&r, "pages_evicted_dirty"), 200);
    assert_eq!(count(&r, "pages_evicted_clean"), 100);
    assert_eq!(r.remote_bytes_read, 200 * PAGE);
    assert_eq!(r.remote_bytes_written, 600 * 64);

    // Page mode ships the whole page of each of those 200.
    let sets = [
        ("local.size", "400KiB"),
        ("runtime.fault_around", "1"),
        ("runtime.dirty", "page"),
    ];
    let r = run(&sets, n * PAGE, &write_three_lines_then_read(n));
    assert_eq!(count(&r, "bytes_written_back"), 200 * PAGE);
}

#[test]
fn a_read_then_a_write_takes_a_write_protect_fault() {
    // Everything fits: 50 read faults (zeros), then the first write to
    // each page is a write-protect fault; its second write is not.
    let n = 50;
    let mut acc: Vec<Access> = (0..n)
        .map(|p| Access::load(BASE + p * PAGE, 8, 0))
        .collect();
    for _ in 0..2 {
        acc.extend((0..n).map(|p| Access::store(BASE + p * PAGE + 128, 8, 0)));
    }
    let sets = [("local.size", "400KiB"), ("runtime.fault_around", "1")];
    let r = run(&sets, n * PAGE, &acc);
    assert_eq!(count(&r, "faults_missing"), n);
    assert_eq!(count(&r, "faults_wp"), n);
    assert_eq!(count(&r, "bytes_written_back"), 0);
}

#[test]
fn fault_around_doubles_its_window_and_stops_at_the_region_end() {
    // A store per page over 64 fresh pages, windows up to 8: faults at
    // pages 0 (window 1), 1 (2), 3 (4), 7, 15, … 55 (8 each), and 63,
    // whose window of 8 is cut at the region's end: 11 faults, exactly
    // the 64 pages filled, none past the region.
    let n = 64;
    let acc: Vec<Access> = (0..n)
        .map(|p| Access::store(BASE + p * PAGE, 8, 0))
        .collect();
    let r = run(&[("runtime.fault_around", "8")], n * PAGE, &acc);
    assert_eq!(count(&r, "faults_missing"), 11);
    assert_eq!(count(&r, "pages_zero_filled"), 64);
    assert_eq!(count(&r, "pages_faulted_around"), 53);
    // Pages filled around a write start writable: no write-protect fault.
    assert_eq!(count(&r, "faults_wp"), 0);
}

#[test]
fn fault_around_reads_stored_pages_below_a_descending_fault() {
    // Write 64 pages with 16 local, one victim per install: pages 0..48
    // are stored. Read them from the top down: a descending stream of
    // stored pages, each window read in one request below the fault.
    // Faults at 47 (window 1), 46 (2: 46, 45), 44 (4: 44..41), then
    // windows of 8 while stored pages last: 40..33, 32..25, 24..17,
    // 16..9, 8..1, and 0 alone: 9 faults, 48 pages fetched.
    let n = 64;
    let mut acc: Vec<Access> = (0..n)
        .map(|p| Access::store(BASE + p * PAGE, 8, 0))
        .collect();
    acc.extend((0..48).rev().map(|p| Access::load(BASE + p * PAGE, 8, 0)));
    let sets = [("local.size", "64KiB"), ("runtime.fault_around", "8")];
    let r = run(&sets, n * PAGE, &acc);
    let write_faults = 11;
    assert_eq!(count(&r, "faults_missing"), write_faults + 9);
    assert_eq!(count(&r, "pages_fetched"), 48);
    assert_eq!(count(&r, "bytes_fetched"), 48 * PAGE);
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
