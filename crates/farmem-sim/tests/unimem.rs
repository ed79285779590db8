//! UniMem's and Kona's schemes driven directly, miss by miss, with exact
//! latencies and traffic (Table 1 prices from the `unimem` preset).

use farmem_sim::config::ConfigBuilder;
use farmem_sim::machine::Machine;
use farmem_sim::scheme::Scheme;
use farmem_sim::scheme::unimem::{System, UniMemConfig, UniMemScheme};
use farmem_sim::{Config, Stats};

const LINES_PER_PAGE: u64 = 64;

fn config(sets: &[(&str, &str)]) -> Config {
    let mut b = ConfigBuilder::preset("unimem").unwrap();
    for (k, v) in sets {
        b.set(k, v).unwrap();
    }
    b.build().unwrap()
}

/// A scheme over `local_bytes` of local memory.
fn setup(system: System, local_bytes: u64, sets: &[(&str, &str)]) -> (UniMemScheme, Machine) {
    let cfg = config(sets);
    let mut s = UniMemScheme::new(system);
    s.configure(&cfg);
    (s, Machine::new(&cfg, local_bytes))
}

fn stat(s: &UniMemScheme, key: &str) -> f64 {
    let mut out = Stats::default();
    s.report(&mut out);
    out.get(&format!("{}.{key}", s.name())).unwrap_or(f64::NAN)
}

fn line(page: u64, i: u64) -> u64 {
    page * LINES_PER_PAGE + i
}

#[test]
fn fetch_latency_by_block_size() {
    let c = UniMemConfig::default();
    for (bytes, ns) in [
        (128, 2000.0),
        (256, 2000.0),
        (512, 2000.0),
        (1024, 2500.0),
        (2048, 3000.0),
        (4096, 4000.0),
    ] {
        assert_eq!(c.fetch_ns(bytes), ns, "{bytes} B");
    }
}

#[test]
fn each_system_prices_hits_and_misses_exactly() {
    // Line 0 (miss), line 1 (same 512 B block and page), line 8 (same page,
    // next 512 B block).
    let lines = [line(0, 0), line(0, 1), line(0, 8)];
    for (system, want, read) in [
        (System::Srrb4sc, [4150.0, 150.0, 150.0], 4096),
        (System::Kona, [4164.0, 164.0, 164.0], 4096),
        (System::KonaPc, [4164.0, 164.0, 164.0], 4096),
        (System::NoPromote, [2150.0, 150.0, 2150.0], 1024),
    ] {
        let (mut s, mut m) = setup(system, 64 << 10, &[]);
        let mut now = 1000.0;
        for (l, w) in lines.iter().zip(want) {
            let done = s.read_line(&mut m, now, *l, false);
            assert_eq!(done - now, w, "{system:?} line {l}");
            now = done;
        }
        assert_eq!(m.counters.remote_bytes_read, read, "{system:?}");
        let amat = want.iter().sum::<f64>() / 3.0;
        assert_eq!(s.amat_miss_ns(), Some(amat));
        assert_eq!(m.counters.local_hits + m.counters.local_misses, 3);
    }
}

#[test]
fn dirty_blocks_are_written_back_whole_and_uncached_lines_alone() {
    // Kona's cache of two pages (one set of two ways).
    let (mut s, mut m) = setup(System::Srrb4sc, 8 << 10, &[]);
    s.read_line(&mut m, 0.0, line(0, 0), true);
    s.write_back(&mut m, 10.0, line(0, 0)); // page 0 turns dirty
    s.read_line(&mut m, 20.0, line(1, 0), false);
    assert_eq!(m.counters.remote_bytes_written, 0);
    s.read_line(&mut m, 30.0, line(2, 0), false); // evicts page 0 (LRU)
    assert_eq!(m.counters.remote_bytes_written, 4096);
    s.write_back(&mut m, 40.0, line(7, 3)); // not cached: the line alone
    assert_eq!(m.counters.remote_bytes_written, 4096 + 64);
    s.read_line(&mut m, 50.0, line(3, 0), false); // evicts page 1, clean
    assert_eq!(m.counters.remote_bytes_written, 4096 + 64);
    assert_eq!(stat(&s, "dirty_block_writebacks"), 1.0);
    assert_eq!(stat(&s, "line_writebacks"), 1.0);
    assert_eq!(stat(&s, "device_evictions"), 2.0);

    // Filter-Cache, one pair of 8 blocks (one page of local memory): a
    // dirty 512 B block leaves whole.
    let (mut s, mut m) = setup(
        System::NoPromote,
        4096,
        &[("unimem.filter.pairs", "1"), ("unimem.filter.batch", "1")],
    );
    for b in 0..8u64 {
        s.read_line(&mut m, b as f64, b * 8, false);
    }
    s.write_back(&mut m, 9.0, 8); // block 1 dirty
    s.read_line(&mut m, 10.0, 8 * 8, false); // FIFO: evicts block 0, clean
    assert_eq!(m.counters.remote_bytes_written, 0);
    s.read_line(&mut m, 11.0, 9 * 8, false); // evicts block 1, dirty
    assert_eq!(m.counters.remote_bytes_written, 512);
    assert_eq!(m.counters.remote_bytes_read, 10 * 512);
}

#[test]
fn a_fully_used_page_moves_to_host_memory_for_its_batch_cost() {
    // 4 pages of local memory: 2 host, 2 device (16 blocks, one pair), so a
    // promotion scan every 16 device accesses.
    let (mut s, mut m) = setup(
        System::UniMem,
        16 << 10,
        &[
            ("unimem.host_share", "\"50%\""),
            ("unimem.filter.pairs", "1"),
        ],
    );
    let mut now = 0.0;
    let mut lat = Vec::new();
    // Every block of page 0 four times: fetched (inactive), then hit
    // (active). Scans run at the 16th and 32nd device access; the page is
    // hot at the second one, having been used in both intervals.
    for pass in 0..4 {
        for b in 0..8 {
            let done = s.read_line(&mut m, now, line(0, b * 8 + pass), false);
            lat.push(done - now);
            now = done;
        }
    }
    assert_eq!(&lat[..8], &[2150.0; 8]);
    assert_eq!(&lat[8..31], &[150.0; 23]);
    // Page 0 (8 active sub-pages, variance 0) is promoted: 1 page of a
    // 512-page 2 ms batch.
    assert_eq!(lat[31], 150.0 + 2e6 / 512.0);
    assert_eq!(stat(&s, "promoted_pages"), 1.0);
    assert_eq!(stat(&s, "promotion_fetches"), 0.0);
    // Now page 0 is served by host memory.
    let done = s.read_line(&mut m, now, line(0, 63), false);
    assert_eq!(done - now, 80.0);
    assert_eq!(stat(&s, "host_hits"), 1.0);
    // Its write-backs dirty the host page, never the link.
    s.write_back(&mut m, now, line(0, 5));
    assert_eq!(m.counters.remote_bytes_written, 0);
    assert_eq!(m.counters.remote_bytes_read, 8 * 512);
}

/// The mechanism behind UniMem's data amplification on pr at 25%
/// (docs/unimem.md): host memory holds a promoted page only while it is
/// in use; one idle scan interval and the next promotion drops it (host
/// memory caches remote memory, so nothing is demoted), and its next
/// access fetches its blocks from remote memory again.
#[test]
fn an_idle_promoted_page_is_dropped_for_the_next_and_fetched_again() {
    // 3 pages of local memory: 1 host page, 16 device blocks (one pair),
    // so a promotion scan every 16 device accesses.
    let (mut s, mut m) = setup(
        System::UniMem,
        12 << 10,
        &[
            ("unimem.host_share", "\"34%\""),
            ("unimem.filter.pairs", "1"),
        ],
    );
    let mut now = 0.0;
    let mut touch = |s: &mut UniMemScheme, m: &mut Machine, page: u64| {
        for pass in 0..4 {
            for b in 0..8 {
                now = s.read_line(m, now, line(page, b * 8 + pass), false);
            }
        }
    };
    // Page 0 is promoted at the scan after its 32nd access (as above).
    touch(&mut s, &mut m, 0);
    assert_eq!(stat(&s, "host_pages"), 1.0);
    assert_eq!(stat(&s, "promoted_pages"), 1.0);
    // Page 1, used over the next two intervals while page 0 sits idle,
    // takes the only host page at the second scan.
    touch(&mut s, &mut m, 1);
    assert_eq!(stat(&s, "promoted_pages"), 2.0);
    assert_eq!(stat(&s, "host_evictions"), 1.0);
    assert_eq!(m.counters.remote_bytes_read, 16 * 512);
    // Page 0 comes back from remote memory, a block at a time.
    let t = now;
    let done = s.read_line(&mut m, t, line(0, 0), false);
    assert_eq!(done - t, 2150.0);
    assert_eq!(stat(&s, "fetches"), 17.0);
    assert_eq!(m.counters.remote_bytes_read, 17 * 512);
    // Page 1 is served by host memory.
    let done2 = s.read_line(&mut m, done, line(1, 1), false);
    assert_eq!(done2 - done, 80.0);
}

#[test]
fn nopromote_uses_all_local_memory_and_bad_settings_are_errors() {
    let (mut s, mut m) = setup(System::NoPromote, 64 << 10, &[]);
    s.read_line(&mut m, 0.0, 0, false);
    assert_eq!(stat(&s, "device_blocks"), 128.0);
    assert_eq!(stat(&s, "host_pages"), 0.0);
    let (mut s, mut m) = setup(System::UniMem, 64 << 10, &[]);
    s.read_line(&mut m, 0.0, 0, false);
    // 30% of 16 pages, rounded down to pages: 4 host pages, 12 device pages.
    assert_eq!(stat(&s, "host_pages"), 4.0);
    assert_eq!(stat(&s, "device_blocks"), 96.0);
    for (k, v) in [
        ("unimem.block_bytes", "768"),
        ("unimem.block_bytes", "8192"),
        ("unimem.filter.pairs", "0"),
        ("unimem.fetch_512_ns", "-1"),
        ("unimem.host_share", "\"120%\""),
    ] {
        let mut b = ConfigBuilder::preset("unimem").unwrap();
        b.set(k, v).unwrap();
        assert!(b.build().is_err(), "{k}={v}");
    }
}
