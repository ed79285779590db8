//! `farmem eval daemon` end to end on a tiny grid: one JSON object with the
//! issue's keys, and the CSV, JSON and figures in `--out`.

use std::process::Command;

#[test]
fn eval_daemon_tiny_grid_writes_every_output() {
    let out_dir = std::env::temp_dir().join(format!("farmem-eval-daemon-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_farmem"))
        .args(["eval", "daemon", "--quick", "--workloads", "pr,stream"])
        .args(["--scale", "0.01", "--json", "--out"])
        .arg(&out_dir)
        .output()
        .unwrap();
    // Exit 1 is a failed shape check (a tiny grid need not reproduce the
    // paper); anything else is an error.
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["eval"], "daemon");
    let s = &v["summary"];
    for scheme in ["lc", "bp", "pq", "daemon"] {
        for bw in ["0.5", "0.25", "0.125"] {
            assert!(
                s["geomean_speedup_over_remote"][scheme][bw].is_f64(),
                "{scheme} {bw}"
            );
        }
    }
    assert!(s["worst_daemon_vs_remote"].as_f64().unwrap() > 0.0);
    for scheme in ["remote", "pq", "daemon"] {
        for w in ["pr", "stream"] {
            let h = s["local_hit_ratio"][scheme][w].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&h), "{scheme} {w} {h}");
        }
    }
    for w in ["pr", "stream"] {
        assert!(s["compression_ratio"][w].as_f64().unwrap() >= 1.0);
    }
    assert_eq!(v["pass"], out.status.code() == Some(0));
    // 2 workloads x 5 schemes x 3 bandwidths x 2 switch latencies, plus
    // the studies.
    assert!(v["runs"].as_u64().unwrap() > 60);
    let csv = std::fs::read_to_string(out_dir.join("points.csv")).unwrap();
    assert!(csv.starts_with("study,workload,scheme,"));
    for study in [
        "grid,",
        "ratio,",
        "codec,",
        "disturbance,",
        "nodes,",
        "cores,",
    ] {
        assert!(csv.lines().any(|l| l.starts_with(study)), "{study}");
    }
    assert!(out_dir.join("summary.json").exists());
    assert!(out_dir.join("runs.json").exists());
    let figs = out_dir.join("figures");
    for f in [
        "fig8_bw0.25_sw100.svg",
        "geomean_by_bandwidth.svg",
        "fig10_local_hit_ratio.svg",
        "ratio.svg",
        "codec.svg",
        "disturbance.svg",
        "disturbance_hit_ratio.svg",
        "nodes.svg",
        "cores.svg",
    ] {
        let svg = std::fs::read_to_string(figs.join(f)).unwrap();
        assert!(svg.starts_with("<svg"), "{f}");
    }
    std::fs::remove_dir_all(out_dir).ok();
}
