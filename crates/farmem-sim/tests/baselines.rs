//! Exact behaviour of the baseline schemes on crafted access patterns.

use farmem_sim::{ConfigBuilder, SimResult, simulate_accesses};
use farmem_workloads::Access;

const PAGE: u64 = 4096;
const BASE: u64 = 0x10_0000_0000;

fn run(scheme: &str, sets: &[(&str, &str)], footprint: u64, acc: &[Access]) -> SimResult {
    let mut b = ConfigBuilder::preset("daemon").unwrap();
    for (k, v) in sets {
        b.set(k, v).unwrap();
    }
    simulate_accesses(&b.build().unwrap(), scheme, footprint, acc).unwrap()
}

fn stat(r: &SimResult, key: &str) -> f64 {
    r.stats.get(key).unwrap_or_else(|| panic!("no stat {key}"))
}

/// Every line of `pages` pages, in order.
fn scan(pages: u64) -> Vec<Access> {
    (0..pages * 64)
        .map(|i| Access::load(BASE + i * 64, 8, 0))
        .collect()
}

#[test]
fn remote_scan_without_local_memory_moves_each_page_once() {
    let n = 300;
    let r = run("remote", &[("local.size", "0")], n * PAGE, &scan(n));
    assert_eq!(r.remote_bytes_read, n * PAGE);
    assert_eq!(r.remote_bytes_written, 0);
    assert_eq!(r.footprint_bytes, n * PAGE);
    assert_eq!(r.llc_misses, n * 64);
    // The page lands in a one-page buffer; its other 63 lines are served from it.
    assert_eq!(stat(&r, "local.misses") as u64, n);
    assert_eq!(stat(&r, "local.hits") as u64, 63 * n);
    assert_eq!(stat(&r, "local.evictions") as u64, n - 1);
}

#[test]
fn cache_line_moves_64_bytes_per_touched_line() {
    let n = 200;
    let acc: Vec<Access> = (0..n)
        .flat_map(|p| [0u64, 5, 17].map(|l| Access::load(BASE + p * PAGE + l * 64, 8, 2)))
        .collect();
    let r = run("cache-line", &[], n * PAGE, &acc);
    assert_eq!(r.remote_bytes_read, n * 3 * 64);
    assert_eq!(r.local_hit_ratio, 0.0);
    // The page-moving scheme moves whole pages for the same pattern.
    let r = run("remote", &[("local.size", "0")], n * PAGE, &acc);
    assert_eq!(r.remote_bytes_read, n * PAGE);
}

#[test]
fn cyclic_pattern_one_page_larger_than_local_memory_never_hits() {
    for policy in ["lru", "fifo"] {
        let acc: Vec<Access> = (0..50)
            .flat_map(|_| (0..17).map(|p| Access::load(BASE + p * PAGE, 8, 1)))
            .collect();
        let r = run(
            "remote",
            &[("local.size", "64KiB"), ("local.policy", policy)],
            17 * PAGE,
            &acc,
        );
        assert_eq!(r.local_hit_ratio, 0.0, "{policy}");
        assert_eq!(r.llc_misses, 50 * 17, "{policy}");
        assert_eq!(r.remote_bytes_read, 50 * 17 * PAGE, "{policy}");
        // One page fewer: after the first round everything stays local
        // (and in the LLC).
        let acc16: Vec<Access> = (0..50)
            .flat_map(|_| (0..16).map(|p| Access::load(BASE + p * PAGE, 8, 1)))
            .collect();
        let r = run(
            "remote",
            &[("local.size", "64KiB"), ("local.policy", policy)],
            16 * PAGE,
            &acc16,
        );
        assert_eq!(r.remote_bytes_read, 16 * PAGE, "{policy}");
    }
}

#[test]
fn local_never_touches_a_link() {
    let acc: Vec<Access> = (0..20_000u64)
        .map(|i| {
            let addr = BASE + (i.wrapping_mul(0x9e37_79b9) % (1 << 26)) / 8 * 8;
            if i % 3 == 0 {
                Access::store(addr, 8, 3)
            } else {
                Access::load(addr, 8, 3)
            }
        })
        .collect();
    let r = run("local", &[], 1 << 26, &acc);
    assert_eq!(r.remote_bytes_read, 0);
    assert_eq!(r.remote_bytes_written, 0);
    assert_eq!(stat(&r, "link0.up.bytes"), 0.0);
    assert_eq!(stat(&r, "link0.down.bytes"), 0.0);
    assert_eq!(r.local_hit_ratio, 1.0);
    assert!(r.llc_misses > 10_000);
}

#[test]
fn bandwidth_bound_scan_takes_bytes_over_bandwidth() {
    let n = 3000u64;
    let acc: Vec<Access> = (0..n)
        .map(|p| Access::load(BASE + p * PAGE, 8, 0))
        .collect();
    for factor in ["0.5", "0.25", "0.125"] {
        let r = run(
            "remote",
            &[("local.size", "100%"), ("link.bw_factor", factor)],
            n * PAGE,
            &acc,
        );
        let gbps = 17.0 * factor.parse::<f64>().unwrap();
        let expect = (n * (PAGE + 16)) as f64 / gbps;
        let err = (r.sim_time_ns - expect).abs() / expect;
        assert!(
            err < 0.05,
            "bw {factor}: {} ns vs {expect} ns",
            r.sim_time_ns
        );
        assert!(r.link_utilization > 0.95, "{}", r.link_utilization);
    }
}

#[test]
fn independent_misses_overlap_and_mlp_1_serializes_them() {
    let one = [Access::load(BASE, 8, 0)];
    let two = [
        Access::load(BASE, 8, 0),
        Access::load(BASE + 64 * PAGE, 8, 0),
    ];
    for scheme in ["cache-line", "remote", "local"] {
        let single = run(scheme, &[], 128 * PAGE, &one).sim_time_ns;
        let overlap = run(scheme, &[], 128 * PAGE, &two).sim_time_ns;
        let blocking = run(scheme, &[("core.mlp", "1")], 128 * PAGE, &two).sim_time_ns;
        // Overlapped: the second miss only adds its transfer behind the first.
        assert!(overlap < 1.8 * single, "{scheme}: {overlap} vs {single}");
        assert!(blocking > 1.95 * single, "{scheme}: {blocking} vs {single}");
        assert!(blocking > overlap);
    }
}

#[test]
fn reorder_window_bounds_overlap() {
    // Two misses 300 instructions apart cannot overlap in a 224-entry window.
    let acc = [
        Access::load(BASE, 8, 0),
        Access::load(BASE + 64 * PAGE, 8, 300),
    ];
    let single = run("cache-line", &[], 128 * PAGE, &acc[..1]).sim_time_ns;
    let apart = run("cache-line", &[], 128 * PAGE, &acc).sim_time_ns;
    assert!(apart > 1.95 * single, "{apart} vs {single}");
    let near = [
        Access::load(BASE, 8, 0),
        Access::load(BASE + 64 * PAGE, 8, 100),
    ];
    let close = run("cache-line", &[], 128 * PAGE, &near).sim_time_ns;
    assert!(close < 1.5 * single, "{close} vs {single}");
}

#[test]
fn dirty_pages_are_written_back_on_eviction() {
    // Write one line in each of 40 pages through a 16-page local memory.
    let acc: Vec<Access> = (0..40)
        .map(|p| Access::store(BASE + p * PAGE, 8, 1))
        .collect();
    let r = run("remote", &[("local.size", "64KiB")], 40 * PAGE, &acc);
    assert_eq!(r.remote_bytes_read, 40 * PAGE);
    assert_eq!(r.remote_bytes_written, 24 * PAGE);
    let r = run("cache-line", &[], 40 * PAGE, &acc);
    assert_eq!(r.remote_bytes_read, 40 * 64);
    assert_eq!(r.remote_bytes_written, 0, "no dirty line left the LLC");
    // A tiny LLC spills dirty lines, 64 B each, straight to remote memory.
    let small = [
        ("llc.size", "4KiB"),
        ("llc.ways", "4"),
        ("l2.size", "2KiB"),
        ("l2.ways", "2"),
        ("l1d.size", "1KiB"),
        ("l1d.ways", "2"),
    ];
    let r = run("cache-line", &small, 40 * PAGE, &acc);
    assert!(r.remote_bytes_written > 0);
    assert_eq!(r.remote_bytes_written % 64, 0);
    assert!(r.remote_bytes_written <= 40 * 64);
}

#[test]
fn pages_spread_over_nodes_round_robin() {
    let n = 64;
    let r = run(
        "remote",
        &[("remote.nodes", "4"), ("local.size", "0")],
        n * PAGE,
        &scan(n),
    );
    for i in 0..4 {
        assert_eq!(
            stat(&r, &format!("link{i}.down.bytes")),
            (16 * (PAGE + 16)) as f64
        );
    }
    let r = run(
        "remote",
        &[("remote.nodes", "4"), ("remote.placement", "random")],
        n * PAGE,
        &scan(n),
    );
    let total: f64 = (0..4)
        .map(|i| stat(&r, &format!("link{i}.down.bytes")))
        .sum();
    assert_eq!(total, (n * (PAGE + 16)) as f64);
}

#[test]
fn two_workloads_share_the_link_on_two_cores() {
    use farmem_sim::{Input, simulate};
    use farmem_workloads::Scale;
    let mut b = ConfigBuilder::preset("daemon").unwrap();
    b.set("core.count", "2").unwrap();
    let cfg2 = b.build().unwrap();
    let one = |w: &str| Input::Workload {
        name: w.into(),
        scale: Scale::Factor(1.0 / 32.0),
        seed: 1,
    };
    let both = Input::Multi(vec![one("stream"), one("linreg")]);
    let r = simulate(&cfg2, "remote", &both).unwrap();
    let cfg1 = ConfigBuilder::preset("daemon").unwrap().build().unwrap();
    let a = simulate(&cfg1, "remote", &one("stream")).unwrap();
    let l = simulate(&cfg1, "remote", &one("linreg")).unwrap();
    assert_eq!(r.records, a.records + l.records);
    assert_eq!(r.footprint_bytes, a.footprint_bytes + l.footprint_bytes);
    // Sharing one link, the pair takes longer than the slower alone.
    assert!(r.sim_time_ns > a.sim_time_ns.max(l.sim_time_ns));
    assert_eq!(stat(&r, "core0.records") as u64, a.records);
    assert_eq!(stat(&r, "core1.records") as u64, l.records);
    // One input per core, or a clear error.
    assert!(simulate(&cfg1, "remote", &both).is_err());
}

/// Several inputs keep their page contents (each in its own address space),
/// so link compression sees them; before, a multi-input run compressed
/// nothing and lc only paid its codec latency.
#[test]
fn several_inputs_carry_their_page_contents_to_link_compression() {
    use farmem_sim::{Input, simulate};
    use farmem_workloads::Scale;
    let one = |w: &str| Input::Workload {
        name: w.into(),
        scale: Scale::Factor(1.0 / 32.0),
        seed: 1,
    };
    let mut b = ConfigBuilder::preset("daemon").unwrap();
    b.set("core.count", "2").unwrap();
    let both = simulate(
        &b.build().unwrap(),
        "lc",
        &Input::Multi(vec![one("stream"), one("spmv")]),
    )
    .unwrap();
    let cfg1 = ConfigBuilder::preset("daemon").unwrap().build().unwrap();
    let alone = |w: &str| simulate(&cfg1, "lc", &one(w)).unwrap();
    let (a, m) = (alone("stream"), alone("spmv"));
    assert_eq!(
        stat(&both, "lc.pages_with_contents"),
        stat(&a, "lc.pages_with_contents") + stat(&m, "lc.pages_with_contents")
    );
    // stream's pages compress far better than spmv's; the pair sits between.
    let ratio = |r| stat(r, "lc.compression_ratio");
    assert!(ratio(&m) > 1.5, "spmv {}", ratio(&m));
    assert!(ratio(&both) > ratio(&m) && ratio(&both) < ratio(&a));
}

#[test]
fn absurd_configs_are_errors_not_aborts() {
    for (k, v) in [
        ("core.mlp", "4000000000"),
        ("core.rob", "0"),
        ("llc.size", "1TiB"),
        ("link.interval_ns", "0.001"),
        ("l1d.ways", "0"),
        ("remote.nodes", "0"),
        ("local.size", "lots"),
        ("link.bw_factor", "0"),
    ] {
        let mut b = ConfigBuilder::preset("daemon").unwrap();
        b.set(k, v).unwrap();
        assert!(b.build().is_err(), "{k}={v} accepted");
    }
    // A local memory far larger than the footprint is capped to it.
    let r = run("remote", &[("local.size", "1TiB")], 4 * PAGE, &scan(4));
    assert_eq!(r.local_memory_bytes, 4 * PAGE);
}

#[test]
fn in_order_core_stalls_on_every_load_the_ooo_core_only_on_misses() {
    let cfg = farmem_sim::Config::preset("daemon").unwrap();
    let instr_ns = 1.0 / (cfg.core.freq_ghz * cfg.core.width);
    let l1_ns = cfg.l1d.latency_ns(cfg.core.freq_ghz);
    let miss = [Access::load(BASE, 8, 0)];
    // The miss, then nine L1 hits to its line, 3 other instructions apart.
    let mut hits = miss.to_vec();
    hits.extend((0..9).map(|_| Access::load(BASE, 8, 3)));
    for scheme in ["local", "remote"] {
        let in_order = [("core.model", "in-order")];
        let single = run(scheme, &in_order, PAGE, &miss).sim_time_ns;
        let all = run(scheme, &in_order, PAGE, &hits).sim_time_ns;
        // KCacheSim's model: instructions plus every load's latency.
        let expected = single + 9.0 * (4.0 * instr_ns + l1_ns);
        assert!(
            (all - expected).abs() < 1e-6,
            "{scheme}: {all} vs {expected}"
        );
        // Out of order, the hits retire under the miss.
        let single = run(scheme, &[], PAGE, &miss).sim_time_ns;
        assert_eq!(
            run(scheme, &[], PAGE, &hits).sim_time_ns,
            single,
            "{scheme}"
        );
    }
    // Two independent misses: the in-order core serializes them.
    let two = [
        Access::load(BASE, 8, 0),
        Access::load(BASE + 64 * PAGE, 8, 0),
    ];
    let set = [("core.model", "in-order")];
    let one = run("remote", &set, 128 * PAGE, &two[..1]).sim_time_ns;
    let both = run("remote", &set, 128 * PAGE, &two).sim_time_ns;
    assert!(both > 1.95 * one, "{both} vs {one}");
}

#[test]
fn cpu_cache_replacement_is_chosen_by_name() {
    // 17 lines of one set in every level (stride 4096 lines): fill the
    // LLC's 16 ways, reuse line 0 (gone from L1 and L2, 8 ways each), bring
    // line 16, then ask for line 1. LRU and SRRIP evicted line 1 for line
    // 16; FIFO evicted line 0, ignoring its reuse.
    let line = |i: u64| Access::load(BASE + i * 4096 * 64, 8, 0);
    let mut acc: Vec<Access> = (0..16).map(line).collect();
    acc.extend([line(0), line(16), line(1)]);
    for (rule, misses) in [("lru", 18), ("srrip", 18), ("fifo", 17)] {
        let r = run("local", &[("llc.replacement", rule)], 17 * PAGE, &acc);
        assert_eq!(r.llc_misses, misses, "{rule}");
        assert_eq!(stat(&r, "llc.misses") as u64, misses, "{rule}");
    }
    for (key, bad) in [("llc.replacement", "plru"), ("core.model", "gpu")] {
        let mut b = ConfigBuilder::preset("daemon").unwrap();
        b.set(key, bad).unwrap();
        let e = b.build().unwrap_err().to_string();
        assert!(e.contains(bad), "{key}: {e}");
    }
}

#[test]
fn watermarks_evict_in_rounds_as_the_runtime_does() {
    // 100 pages of local memory, 200 pages scanned once. One victim per
    // install: 100 evictions. The runtime's rule (farmem_policy::watermark,
    // high 95, low 85 pages): the 96th install first evicts 11, and every
    // 11th install after it another 11; 10 rounds, 110 pages, 90 left.
    let n = 200;
    let plain = run("remote", &[("local.size", "400KiB")], n * PAGE, &scan(n));
    assert_eq!(stat(&plain, "local.evictions") as u64, 100);
    let marks = [
        ("local.size", "400KiB"),
        ("local.watermarks", "{ high = 0.95, low = 0.85 }"),
    ];
    let r = run("remote", &marks, n * PAGE, &scan(n));
    assert_eq!(stat(&r, "local.misses") as u64, n);
    assert_eq!(stat(&r, "local.evictions") as u64, 110);
    // Pages 110..200 are the ones left: scanning them again misses none,
    // and page 109 then misses once.
    let mut again = scan(n);
    again.extend((110..n).map(|p| Access::load(BASE + p * PAGE, 8, 0)));
    let r = run("remote", &marks, n * PAGE, &again);
    assert_eq!(stat(&r, "local.misses") as u64, n);
    again.push(Access::load(BASE + 109 * PAGE, 8, 0));
    let r = run("remote", &marks, n * PAGE, &again);
    assert_eq!(stat(&r, "local.misses") as u64, n + 1);
    // Marks out of order are a configuration error.
    let mut b = ConfigBuilder::preset("daemon").unwrap();
    b.set("local.watermarks", "{ high = 0.8, low = 0.9 }")
        .unwrap();
    let e = b.build().unwrap_err().to_string();
    assert!(e.contains("local.watermarks"), "{e}");
}
