//! Exact behaviour of the DaeMon schemes on crafted traces with page contents.

use std::path::{Path, PathBuf};

use farmem_codec::CodecKind;
use farmem_sim::{ConfigBuilder, Input, SimResult, simulate};
use farmem_workloads::{Access, Scale, Sink, TraceWriter};

const PAGE: u64 = 4096;
const BASE: u64 = 0x10_0000_0000;
const HEADER: u64 = 16;

/// A trace file scanning every line of `pages`, whose contents are given
/// (`None`: no content record for that page).
fn trace(name: &str, pages: &[Option<Vec<u8>>]) -> PathBuf {
    let acc: Vec<Access> = (0..pages.len() as u64 * 64)
        .map(|i| Access::load(BASE + i * 64, 8, 0))
        .collect();
    trace_of(name, pages, &acc)
}

/// A trace file of `acc` over `pages` (contents as in [`trace`]).
fn trace_of(name: &str, pages: &[Option<Vec<u8>>], acc: &[Access]) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "farmem-sim-daemon-{}-{name}.trace",
        std::process::id()
    ));
    let mut w = TraceWriter::create(&path, name, true).unwrap();
    w.begin(pages.len() as u64 * PAGE);
    for (i, c) in pages.iter().enumerate() {
        if let Some(c) = c {
            w.page(BASE + i as u64 * PAGE, c);
        }
    }
    for &a in acc {
        w.access(a);
    }
    w.finish().unwrap();
    path
}

fn run(scheme: &str, sets: &[(&str, &str)], path: &Path) -> SimResult {
    let mut b = ConfigBuilder::preset("daemon").unwrap();
    for (k, v) in sets {
        b.set(k, v).unwrap();
    }
    simulate(
        &b.build().unwrap(),
        scheme,
        &Input::Trace(path.to_path_buf()),
    )
    .unwrap()
}

fn stat(r: &SimResult, key: &str) -> f64 {
    r.stats.get(key).unwrap_or_else(|| panic!("no stat {key}"))
}

/// Deterministic incompressible bytes.
fn noise(seed: u64) -> Vec<u8> {
    farmem_core::noise::noise_bytes(PAGE as usize, seed)
}

#[test]
fn lc_moves_zero_pages_at_their_compressed_size() {
    let n = 200;
    let path = trace("zeros", &vec![Some(vec![0u8; PAGE as usize]); n as usize]);
    for (codec, kind) in [
        ("lz", CodecKind::Lz),
        ("fpc-bdi", CodecKind::FpcBdi),
        ("fve", CodecKind::Fve),
    ] {
        let zero = kind.codec().compressed_len(&[0u8; PAGE as usize]) as u64;
        assert!(zero < PAGE, "{codec}: {zero}");
        let sets = [("local.size", "0"), ("daemon.codec", codec)];
        let lc = run("lc", &sets, &path);
        assert_eq!(lc.remote_bytes_read, n * zero, "{codec}");
        assert_eq!(stat(&lc, "link0.down.bytes") as u64, n * (zero + HEADER));
        assert_eq!(stat(&lc, "lc.pages_with_contents") as u64, n);
        assert_eq!(stat(&lc, "lc.pages_sent_compressed") as u64, n);
        assert_eq!(stat(&lc, "local.misses") as u64, n);
        let remote = run("remote", &sets, &path);
        assert_eq!(remote.remote_bytes_read, n * PAGE);
        assert_eq!(
            stat(&remote, "link0.down.bytes") as u64,
            n * (PAGE + HEADER)
        );
        assert_eq!(lc.llc_misses, remote.llc_misses);
    }
    std::fs::remove_file(path).ok();
}

#[test]
fn lc_sends_random_and_unknown_pages_raw() {
    let n = 50u64;
    // Random pages, then pages with no content record.
    let mut pages: Vec<Option<Vec<u8>>> = (0..n).map(|i| Some(noise(i + 7))).collect();
    pages.extend((0..n).map(|_| None));
    let path = trace("noise", &pages);
    let lz = CodecKind::Lz.codec();
    assert!(lz.compressed_len(&noise(7)) as u64 >= PAGE);
    let lc = run("lc", &[("local.size", "0")], &path);
    let remote = run("remote", &[("local.size", "0")], &path);
    assert_eq!(lc.remote_bytes_read, 2 * n * PAGE);
    assert_eq!(remote.remote_bytes_read, 2 * n * PAGE);
    assert_eq!(stat(&lc, "lc.pages_with_contents") as u64, n);
    assert_eq!(stat(&lc, "lc.pages_sent_compressed") as u64, 0);
    // Same link time as remote, plus only the compressor's latency.
    let busy = |r: &SimResult| stat(r, "link0.down.busy_ns");
    assert!((busy(&lc) - busy(&remote)).abs() < 1e-6);
    assert!(lc.sim_time_ns >= remote.sim_time_ns);
    std::fs::remove_file(path).ok();
}

#[test]
fn an_assumed_ratio_sizes_every_page_whatever_it_holds() {
    let n = 40u64;
    // Random pages, zero pages and pages without a record all move at
    // 4096 / 4 bytes; without the knob only the zero pages would shrink.
    let mut pages: Vec<Option<Vec<u8>>> = (0..n).map(|i| Some(noise(i + 3))).collect();
    pages.extend((0..n).map(|_| Some(vec![0u8; PAGE as usize])));
    pages.extend((0..n).map(|_| None));
    let path = trace("assumed", &pages);
    let sets = [("local.size", "0"), ("daemon.assume_ratio", "4")];
    let lc = run("lc", &sets, &path);
    assert_eq!(stat(&lc, "lc.pages_sent") as u64, 3 * n);
    assert_eq!(stat(&lc, "lc.pages_sent_compressed") as u64, 3 * n);
    assert_eq!(stat(&lc, "lc.wire_bytes") as u64, 3 * n * PAGE / 4);
    assert_eq!(stat(&lc, "lc.pages_with_contents") as u64, 0);
    let daemon = run("daemon", &sets, &path);
    let raw = stat(&daemon, "daemon.raw_bytes") as u64;
    assert!(raw >= PAGE, "daemon moved pages");
    assert_eq!(stat(&daemon, "daemon.wire_bytes") as u64, raw / 4);
    let mut b = ConfigBuilder::preset("daemon").unwrap();
    b.set("daemon.assume_ratio", "0.5").unwrap();
    assert!(b.build().is_err(), "a ratio below 1 is refused");
    std::fs::remove_file(path).ok();
}

#[test]
fn lc_charges_codec_latency_per_page() {
    // One page, one access: the miss costs remote's plus compress + decompress.
    let path = trace("one", &[Some(vec![0u8; PAGE as usize])]);
    let sets = [("daemon.codec", "lz")];
    let mut b = ConfigBuilder::preset("daemon").unwrap();
    b.set("daemon.codec", "lz").unwrap();
    let freq = b.build().unwrap().core.freq_ghz;
    let remote = run("remote", &[], &path);
    let zero = CodecKind::Lz.codec().compressed_len(&[0u8; PAGE as usize]) as f64;
    // Streaming (default) exposes one 1 KB unit per end (§4.4: 64 cycles);
    // without, the whole page (256 cycles).
    for (pipeline, unit) in [("true", 1024), ("false", PAGE as usize)] {
        let codec_ns = CodecKind::Lz.codec().latency_ns(unit, freq);
        assert!(codec_ns > 0.0);
        let lc = run("lc", &[sets[0], ("daemon.codec_pipeline", pipeline)], &path);
        assert_eq!(stat(&lc, "lc.codec_ns"), codec_ns);
        // Versus remote: the codec twice, minus the link time the
        // compression saves (link bandwidth 17 GB/s × 1/4 = 4.25 bytes/ns).
        let expect = 2.0 * codec_ns - (PAGE as f64 - zero) / 4.25;
        let got = lc.sim_time_ns - remote.sim_time_ns;
        assert!((got - expect).abs() < 1e-6, "{got} vs {expect}");
    }
    assert_eq!(CodecKind::Lz.codec().latency_ns(1024, freq), 64.0 / freq);
    // With `none` the codec adds nothing and the page is sent raw.
    let none = run("lc", &[("daemon.codec", "none")], &path);
    assert_eq!(none.remote_bytes_read, PAGE);
    assert_eq!(stat(&none, "lc.codec_ns"), 0.0);
    std::fs::remove_file(path).ok();
}

#[test]
fn bp_sends_line_and_page_the_line_as_fast_as_cache_line() {
    let zero = Some(vec![0u8; PAGE as usize]);
    let path = trace_of("bp1", &[zero], &[Access::load(BASE, 8, 0)]);
    for idle in ["lend", "hold"] {
        let bp = run("bp", &[("daemon.idle_slots", idle)], &path);
        // Both granularities: the line, then the page; no idle bytes.
        assert_eq!(bp.remote_bytes_read, 64 + PAGE);
        assert_eq!(
            stat(&bp, "link0.down.bytes") as u64,
            (64 + HEADER) + (PAGE + HEADER)
        );
        // The demand line goes first on an idle path: under `lend` exactly
        // cache-line only; under `hold` it crosses at its 25% share.
        let cl = run("cache-line", &[], &path);
        if idle == "lend" {
            assert_eq!(bp.sim_time_ns, cl.sim_time_ns);
        } else {
            assert!(bp.sim_time_ns > cl.sim_time_ns);
        }
        // The page arrives after the last access: nothing applies it.
        assert_eq!(stat(&bp, "bp.pages_installed") as u64, 0);
    }
    std::fs::remove_file(path).ok();
}

#[test]
fn pq_sends_a_line_while_its_page_waits_in_the_page_queue() {
    let pages: Vec<_> = (0..3).map(|_| Some(vec![0u8; PAGE as usize])).collect();
    let p = |i: u64, line: u64| BASE + i * PAGE + line * 64;
    // Three independent misses send three lines and queue three pages; the
    // lines return long before the third page leaves the page queue (two
    // 4 KiB pages ahead of it at 4.25 GB/s). Then a miss to that third
    // page sends its line (the sub-block buffer is empty, the page buffer
    // holds 3), and a miss to the first page, already on the link, is
    // dropped.
    let acc = [
        Access::load(p(0, 0), 8, 0),
        Access::load(p(1, 0), 8, 0),
        Access::load(p(2, 0), 8, 0),
        Access::load(p(2, 5), 8, 2000),
        Access::load(p(0, 5), 8, 0),
    ];
    let path = trace_of("pq-queue", &pages, &acc);
    let pq = run("pq", &[], &path);
    assert_eq!(stat(&pq, "pq.pages_scheduled") as u64, 3);
    assert_eq!(stat(&pq, "pq.lines_sent") as u64, 4);
    assert_eq!(stat(&pq, "pq.lines_dropped") as u64, 1);
    assert_eq!(pq.remote_bytes_read, 4 * 64 + 3 * PAGE);
    // BP sends every line.
    let bp = run("bp", &[], &path);
    assert_eq!(stat(&bp, "bp.lines_sent") as u64, 5);
    std::fs::remove_file(path).ok();
}

#[test]
fn pq_drops_a_line_whose_page_is_already_on_its_way_and_bp_does_not() {
    let zero = Some(vec![0u8; PAGE as usize]);
    // Two independent loads to lines 0 and 1 of one page, back to back.
    let acc = [Access::load(BASE, 8, 0), Access::load(BASE + 64, 8, 0)];
    let path = trace_of("pq2", &[zero], &acc);
    let bp = run("bp", &[], &path);
    assert_eq!(stat(&bp, "bp.lines_sent") as u64, 2);
    assert_eq!(stat(&bp, "bp.lines_dropped") as u64, 0);
    assert_eq!(bp.remote_bytes_read, 2 * 64 + PAGE);
    let pq = run("pq", &[], &path);
    assert_eq!(stat(&pq, "pq.lines_sent") as u64, 1);
    assert_eq!(stat(&pq, "pq.lines_dropped") as u64, 1);
    assert_eq!(stat(&pq, "pq.pages_scheduled") as u64, 1);
    assert_eq!(pq.remote_bytes_read, 64 + PAGE);
    // The line served the first miss (remote); the page serves the second
    // (local memory, as `remote` counts a miss to an arriving page).
    assert_eq!(stat(&pq, "local.misses") as u64, 1);
    assert_eq!(stat(&pq, "local.hits") as u64, 1);
    // The dropped line waits for its page: pq finishes no earlier than bp.
    assert!(pq.sim_time_ns >= bp.sim_time_ns);
    std::fs::remove_file(path).ok();
}

#[test]
fn daemon_compresses_the_page_and_not_the_line() {
    let zero = vec![0u8; PAGE as usize];
    let path = trace_of("d1", &[Some(zero.clone())], &[Access::load(BASE, 8, 0)]);
    let clen = CodecKind::Lz.codec().compressed_len(&zero) as u64;
    let d = run("daemon", &[], &path);
    assert_eq!(d.remote_bytes_read, 64 + clen);
    assert_eq!(stat(&d, "daemon.wire_bytes") as u64, clen);
    assert_eq!(stat(&d, "daemon.raw_bytes") as u64, PAGE);
    let pq = run("pq", &[], &path);
    assert_eq!(pq.remote_bytes_read, 64 + PAGE);
    // The critical line is not delayed by the codec.
    assert_eq!(d.sim_time_ns, pq.sim_time_ns);
    std::fs::remove_file(path).ok();
}

#[test]
fn daemon_schemes_run_real_workloads() {
    let mut b = ConfigBuilder::preset("daemon").unwrap();
    for (k, v) in [
        ("llc.size", "256KiB"),
        ("l2.size", "32KiB"),
        ("l1d.size", "8KiB"),
    ] {
        b.set(k, v).unwrap();
    }
    let cfg = b.build().unwrap();
    for w in ["stream", "pr"] {
        let input = Input::Workload {
            name: w.into(),
            scale: Scale::Factor(1.0 / 16.0),
            seed: 1,
        };
        let remote = simulate(&cfg, "remote", &input).unwrap();
        for s in ["lc", "bp", "pq", "daemon"] {
            let r = simulate(&cfg, s, &input).unwrap();
            println!(
                "{w:<8} {s:<7} time {:>12.0} vs remote {:.3}  hit {:.3}  read {}",
                r.sim_time_ns,
                remote.sim_time_ns / r.sim_time_ns,
                r.local_hit_ratio,
                r.remote_bytes_read
            );
            assert_eq!(r.records, remote.records);
            assert!(r.sim_time_ns > 0.0 && r.local_hit_ratio <= 1.0);
        }
    }
}

#[test]
fn bp_ratio_is_settable_and_hold_keeps_the_line_share() {
    // Eight misses to eight pages at once: their pages queue back to back.
    // Under `hold` the line slots between them stay reserved, so the pages
    // wait longer in the page queue, the longer the higher the line ratio;
    // under `lend` idle line slots go to pages.
    let pages: Vec<_> = (0..8).map(|i| Some(noise(i + 1))).collect();
    let acc: Vec<Access> = (0..8)
        .map(|i| Access::load(BASE + i * PAGE, 8, 0))
        .collect();
    let path = trace_of("bp-ratio", &pages, &acc);
    let t = |ratio: &str, idle: &str| {
        run(
            "bp",
            &[
                ("daemon.compute.partition.ratio", ratio),
                ("daemon.idle_slots", idle),
            ],
            &path,
        )
    };
    let (h25, h50, l25) = (t("25%", "hold"), t("50%", "hold"), t("25%", "lend"));
    assert_eq!(
        stat(&h25, "bp.line_share"),
        21.0 * 64.0 / (21.0 * 64.0 + 4096.0)
    );
    assert_eq!(stat(&h50, "bp.line_share"), 0.5);
    let wait = |r: &SimResult| stat(r, "bp.page_queue_wait_ns");
    assert!(wait(&h50) > wait(&h25), "{} {}", wait(&h50), wait(&h25));
    assert!(wait(&h25) > wait(&l25), "{} {}", wait(&h25), wait(&l25));
    // Same bytes either way: idle slots move nothing.
    assert_eq!(h25.remote_bytes_read, l25.remote_bytes_read);
    std::fs::remove_file(path).ok();
}

#[test]
fn a_page_to_an_idle_node_leaves_before_one_queued_earlier_to_a_busy_node() {
    // Two memory nodes, pages placed round-robin by first touch (even
    // touches on node 0). Twelve pages are touched, then evicted but the
    // last four (local memory holds four). Then misses to pages 0, 2, 4
    // (node 0) and page 1 (node 1) (line 1: line 0 is still in the LLC):
    // page 1 is queued behind three pages but
    // its node is idle, so it leaves and arrives before page 4 leaves. It
    // must be installed all the same: the last four accesses hit.
    let pages: Vec<_> = (0..12).map(|i| Some(noise(i + 1))).collect();
    let p = |i: u64, line: u64| BASE + i * PAGE + line * 64;
    let mut acc: Vec<Access> = (0..12).map(|i| Access::load(p(i, 0), 8, 0)).collect();
    for (k, i) in [0, 2, 4, 1].into_iter().enumerate() {
        let gap = if k == 0 { 200_000 } else { 0 };
        acc.push(Access::load(p(i, 1), 8, gap));
    }
    for (k, i) in [1, 0, 2, 4].into_iter().enumerate() {
        let gap = if k == 0 { 200_000 } else { 0 };
        acc.push(Access::load(p(i, 5), 8, gap));
    }
    let path = trace_of("two-nodes", &pages, &acc);
    let r = run(
        "pq",
        &[("remote.nodes", "2"), ("local.size", "16KiB")],
        &path,
    );
    assert_eq!(stat(&r, "pq.stalls"), 0.0);
    // 16 misses served by their lines, then 4 local hits.
    assert_eq!(r.local_hit_ratio, 4.0 / 20.0);
    assert_eq!(stat(&r, "pq.pages_installed"), 16.0);
    std::fs::remove_file(path).ok();
}

#[test]
fn background_traffic_slows_every_scheme_only_in_its_periods() {
    let pages: Vec<_> = (0..16).map(|i| Some(noise(i + 1))).collect();
    let path = trace("bg", &pages);
    for scheme in ["remote", "daemon"] {
        let quiet = run(scheme, &[], &path);
        // The first period is quiet: a period longer than the run changes
        // nothing.
        let late = run(
            scheme,
            &[
                ("link.background", "0.5"),
                ("link.background_period_ns", "1e9"),
            ],
            &path,
        );
        assert_eq!(late.sim_time_ns, quiet.sim_time_ns, "{scheme}");
        let busy = run(
            scheme,
            &[
                ("link.background", "0.5"),
                ("link.background_period_ns", "2000"),
            ],
            &path,
        );
        assert!(busy.sim_time_ns > quiet.sim_time_ns, "{scheme}");
        assert_eq!(busy.remote_bytes_read, quiet.remote_bytes_read);
    }
    std::fs::remove_file(path).ok();
}
