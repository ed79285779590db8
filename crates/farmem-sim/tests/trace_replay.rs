//! A trace replays exactly like the workload it was generated from.

use farmem_sim::{Config, Input, simulate};
use farmem_workloads::{Scale, TraceWriter};

#[test]
fn trace_of_a_workload_simulates_identically() {
    let dir = std::env::temp_dir().join(format!("farmem-sim-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bfs.fmt");
    let scale = Scale::Factor(1.0 / 32.0);
    let mut w = TraceWriter::create(&path, "bfs", true).unwrap();
    let info = farmem_workloads::run_workload("bfs", scale, 3, &mut w).unwrap();
    let h = w.finish().unwrap();
    assert_eq!(h.accesses, info.accesses);
    assert!(h.page_records > 0, "page contents are stored");
    let cfg = Config::preset("daemon").unwrap();
    let from_trace = simulate(&cfg, "remote", &Input::Trace(path.clone())).unwrap();
    let direct = simulate(
        &cfg,
        "remote",
        &Input::Workload {
            name: "bfs".into(),
            scale,
            seed: 3,
        },
    )
    .unwrap();
    assert_eq!(from_trace.records, direct.records);
    assert_eq!(from_trace.sim_time_ns, direct.sim_time_ns);
    assert_eq!(from_trace.remote_bytes_read, direct.remote_bytes_read);
    assert_eq!(from_trace.footprint_bytes, direct.footprint_bytes);
    // A corrupt trace is an error naming the file, not a panic.
    let bad = dir.join("bad.fmt");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&bad, &bytes[..bytes.len() / 2]).unwrap();
    let err = simulate(&cfg, "remote", &Input::Trace(bad.clone())).unwrap_err();
    assert!(err.to_string().contains("bad.fmt"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn threads_of_one_trace_run_on_their_cores_in_time_order() {
    use farmem_workloads::Access;
    let dir = std::env::temp_dir().join(format!("farmem-sim-demux-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("two.fmt");
    // Thread 0 misses on every access (page stride); thread 1 only computes
    // on one line. Written as thread 0's whole run, then thread 1's.
    let mut w = TraceWriter::create(&path, "two", false).unwrap();
    farmem_workloads::Sink::begin(&mut w, 2048 * 4096);
    for i in 0..1000u64 {
        farmem_workloads::Sink::access(&mut w, Access::load(0x10_0000_0000 + i * 4096, 8, 10));
    }
    for _ in 0..1000u64 {
        farmem_workloads::Sink::access(&mut w, Access::load(0x20_0000_0000, 8, 10).on_thread(1));
    }
    w.finish().unwrap();
    let mut b = farmem_sim::ConfigBuilder::preset("daemon").unwrap();
    b.set("core.count", "2").unwrap();
    let r = simulate(&b.build().unwrap(), "remote", &Input::Trace(path)).unwrap();
    assert_eq!(r.records, 2000);
    let t0 = r.stats.get("core0.time_ns").unwrap();
    let t1 = r.stats.get("core1.time_ns").unwrap();
    // Thread 1 ran beside thread 0, not after it: it finishes far earlier.
    assert!(t1 < t0 / 10.0, "core1 {t1} core0 {t0}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A workload is generated on a thread of its own and stepped in batches
/// with prefetching; the same accesses stepped one by one on this thread
/// must give the same run, for schemes that see contents (daemon) or not.
#[test]
fn a_piped_batched_run_equals_the_accesses_stepped_one_by_one() {
    let scale = Scale::Factor(1.0 / 32.0);
    let mut accesses: Vec<farmem_workloads::Access> = Vec::new();
    let info = farmem_workloads::run_workload("pr", scale, 2, &mut accesses).unwrap();
    assert!(accesses.len() > 2 * farmem_workloads::pipe::BATCH);
    let cfg = Config::preset("daemon").unwrap();
    for scheme in ["remote", "unimem"] {
        let piped = simulate(
            &cfg,
            scheme,
            &Input::Workload {
                name: "pr".into(),
                scale,
                seed: 2,
            },
        )
        .unwrap();
        let stepped =
            farmem_sim::simulate_accesses(&cfg, scheme, info.footprint_bytes, &accesses).unwrap();
        assert_eq!(piped.records, accesses.len() as u64, "{scheme}");
        assert_eq!(piped.records, stepped.records, "{scheme}");
        assert_eq!(piped.sim_time_ns, stepped.sim_time_ns, "{scheme}");
        assert_eq!(piped.llc_misses, stepped.llc_misses, "{scheme}");
        assert_eq!(
            piped.remote_bytes_read, stepped.remote_bytes_read,
            "{scheme}"
        );
        assert_eq!(
            piped.remote_bytes_written, stepped.remote_bytes_written,
            "{scheme}"
        );
        assert!(piped.sim_cpu_seconds <= piped.cpu_seconds, "{scheme}");
    }
}
