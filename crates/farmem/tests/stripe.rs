//! Multi-path access: `farmem bench stripe` moves exactly its bytes over
//! each throttled path, on one path and striped over two, and a program
//! under `farmem run --path-delay` gets the same answer either way.

use std::process::Command;

fn farmem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_farmem"))
}

#[test]
fn bench_stripe_moves_each_layouts_bytes_over_its_paths() {
    let out = farmem()
        .args(["bench", "stripe", "--json", "--size", "4MiB", "--window"])
        .args(["64KiB", "--passes", "1", "--program-size", "8MiB"])
        .args(["--program-local", "4MiB", "--path-delay", "rate:4GiB/s"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = report["runs"].as_array().unwrap();
    let per_path = |i: usize| -> Vec<u64> {
        let bytes = runs[i]["bytes_per_path"].as_array().unwrap();
        bytes.iter().map(|b| b.as_u64().unwrap()).collect()
    };
    const MIB: u64 = 1 << 20;
    // Written once, read once: 4 MiB each way over the one path, half of
    // every page over each of two.
    assert_eq!(runs[0]["layout"], "one path");
    assert_eq!(per_path(0), vec![8 * MIB]);
    assert_eq!(runs[1]["layout"], "stripe:2");
    assert_eq!(per_path(1), vec![4 * MIB, 4 * MIB]);
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
