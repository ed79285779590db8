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
