//! `farmem run --engine page|daemon` (issue 23, point 2): the demo's
//! PageRank under eviction computes the same ranks with DaeMon's selection
//! unit as with whole pages and as on local memory, --stats-json reports
//! the engine and its decisions, and a pairing the runtime cannot serve is
//! refused before the program starts.

use std::path::PathBuf;
use std::process::Command;

mod common;

use common::far_memory_unavailable as unavailable;

fn farmem() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_farmem"))
}

const WORKER: [&str; 8] = [
    "demo",
    "--worker",
    "--kind",
    "pagerank",
    "--size",
    "48MiB",
    "--iterations",
    "2",
];

/// The checksum in the worker's `result {json}` line on stdout.
fn checksum(stdout: &[u8]) -> String {
    let text = String::from_utf8_lossy(stdout);
    let line = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("result "))
        .unwrap_or_else(|| panic!("no result in {text}"));
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    v["checksum"].as_str().unwrap().to_string()
}

#[test]
fn pagerank_ranks_are_the_same_with_either_engine_and_the_decisions_are_reported() {
    if let Some(why) = unavailable() {
        eprintln!("skipping: {why}");
        return;
    }
    let local = Command::new(farmem()).args(WORKER).output().unwrap();
    assert!(local.status.success(), "{local:?}");
    let want = checksum(&local.stdout);
    for engine in ["page", "daemon"] {
        let stats = std::env::temp_dir().join(format!(
            "farmem-engine-test-{engine}-{}.json",
            std::process::id()
        ));
        let far = Command::new(farmem())
            .args(["run", "--local-mem", "16MiB", "--engine", engine])
            .arg("--stats-json")
            .arg(&stats)
            .arg("--")
            .arg(farmem())
            .args(WORKER)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&far.stderr);
        assert!(far.status.success(), "{engine}: {stderr}");
        assert_eq!(checksum(&far.stdout), want, "{engine}: {stderr}");
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
        let _ = std::fs::remove_file(&stats);
        assert_eq!(report["engine"], engine);
        let n = |k: &str| report["total"][k].as_u64().unwrap();
        let decided =
            n("engine_pages_only") + n("engine_page_and_cluster") + n("engine_cluster_only");
        // 48 MiB of graph at 16 MiB local: stored pages are read back.
        assert!(n("pages_fetched") > 0, "{report}");
        if engine == "page" {
            assert_eq!(decided, 0, "{report}");
            assert_eq!(n("engine_bulk_reads"), 0, "{report}");
        } else {
            // Every remote fault that fetched met the selector: at most
            // one decision per fetched page, the clusters' pages aside.
            assert!(decided > 0, "{report}");
            assert!(
                decided + n("engine_bulk_pages") <= n("pages_fetched"),
                "{report}"
            );
            assert!(
                n("engine_no_locality") + n("engine_cluster_refused") + n("engine_stalled")
                    == n("engine_pages_only"),
                "{report}"
            );
            // PageRank streams its edge arrays: clusters were read.
            assert!(n("engine_page_and_cluster") > 0, "{report}");
            assert!(n("engine_bulk_pages") > 0, "{report}");
        }
    }
}

#[test]
fn the_daemon_engine_on_the_signal_path_is_refused_before_the_program_runs() {
    let out = Command::new(farmem())
        .args([
            "run",
            "--engine",
            "daemon",
            "--fault-path",
            "signal",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--fault-path thread"), "{stderr}");
    let help = Command::new(farmem())
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--engine <page|daemon>"), "{help}");
}
