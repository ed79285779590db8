//! Multi-path access: `farmem bench stripe` moves exactly its bytes over
//! each throttled path, on one path and striped over two, and a program
//! under `farmem run --path-delay` gets the same answer either way.

use std::process::Command;

fn farmem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_farmem"))
}

#[test]
fn bench_stripe_moves_each_layouts_bytes_over_its_paths() {
    const MIB: u64 = 1 << 20;
    const FAST: &str = "rate:419430400/s";
    let out = farmem()
        .args(["bench", "stripe", "--json", "--size", "4MiB", "--window"])
        .args(["64KiB", "--passes", "1", "--program-size", "8MiB"])
        .args(["--program-local", "4MiB", "--path-delay", "rate:400MiB/s"])
        .args(["--path-delay", "rate:100MiB/s"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = report["runs"].as_array().unwrap();
    // Bytes each path moved, fastest first.
    let moved = |run: &serde_json::Value| -> Vec<u64> {
        let mut paths = run["paths"].as_array().unwrap().clone();
        paths.sort_by_key(|p| p["delay"] != FAST);
        paths.iter().map(|p| p["bytes"].as_u64().unwrap()).collect()
    };
    // Each path alone: 4 MiB written and read back over it.
    assert_eq!(runs.len(), 4, "{report}");
    for run in &runs[..2] {
        assert_eq!(moved(run), vec![8 * MIB], "{run}");
    }
    // Striped: half of every page over each path, evenly...
    assert_eq!(
        runs[2]["split"],
        serde_json::json!([2048, 2048]),
        "{report}"
    );
    assert_eq!(moved(&runs[2]), vec![4 * MIB, 4 * MIB]);
    // ...or each path's share as measured: the faster carries more, and
    // each moved exactly its share of every page.
    let split: Vec<u64> = runs[3]["split"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap())
        .collect();
    assert_eq!(split.iter().sum::<u64>(), 4096);
    let bytes = moved(&runs[3]);
    assert!(bytes[0] > bytes[1], "{}", runs[3]);
    let mut want: Vec<u64> = split.iter().map(|s| 2 * 4 * MIB / 4096 * s).collect();
    want.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(bytes, want, "{}", runs[3]);
    let program = &report["program"];
    assert_eq!(program["results_match"], true, "{program}");
    assert_eq!(program["runs"].as_array().unwrap().len(), 2, "{program}");
}

#[test]
fn delay_without_a_link_is_refused() {
    let out = farmem()
        .args(["run", "--backend", "file:/var/tmp", "--path-delay", "20us"])
        .args(["--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--backend file:/var/tmp uses none"),
        "{stderr}"
    );
    let out = farmem()
        .args(["run", "--delay", "rate:0/s", "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("lets nothing through"), "{stderr}");
}
