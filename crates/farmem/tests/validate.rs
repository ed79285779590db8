//! The simulator against the runtime (issue 24, point 3): a trace replayed
//! on far memory answers as on local memory, with its pages crossing the
//! rack; a compacted capture replays; and `farmem eval validate` sets the
//! two bodies side by side and writes its outputs.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// False (reason printed) where programs cannot run on far memory here.
fn far_memory_or_skip() -> bool {
    match common::far_memory_unavailable() {
        Some(why) => {
            eprintln!("skipped: {why}");
            false
        }
        None => true,
    }
}

fn farmem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_farmem"))
        .args(args)
        .output()
        .unwrap()
}

fn json_of(out: &Output, what: &str) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{what}: {e}: {line}"))
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("farmem-validate-{}-{name}", std::process::id()))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_replayed_trace_answers_on_far_memory_as_on_local_memory() {
    if !far_memory_or_skip() {
        return;
    }
    // Key/value gets and sets over 8 MiB at 2 MiB local: pages leave with
    // their written lines and come back, and every load feeds the checksum.
    let trace = tmp("kv.trace");
    json_of(
        &farmem(&[
            "trace",
            "gen",
            "--workload",
            "kv-uniform",
            "--scale",
            "8MiB",
            "--no-contents",
            "--out",
            s(&trace),
            "--json",
        ]),
        "trace gen",
    );
    let local = json_of(&farmem(&["trace", "replay", s(&trace), "--json"]), "replay");
    assert!(local["stores"].as_u64().unwrap() > 0, "{local}");
    let stats = tmp("kv-stats.json");
    let far = farmem(&[
        "run",
        "--local-mem",
        "2MiB",
        "--threshold",
        "2MiB",
        "--backend",
        "remote",
        "--stats-json",
        s(&stats),
        "--",
        env!("CARGO_BIN_EXE_farmem"),
        "trace",
        "replay",
        s(&trace),
        "--json",
    ]);
    let far = json_of(&far, "replay under farmem run");
    assert_eq!(far["checksum"], local["checksum"]);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let total = &report["total"];
    for k in ["bytes_fetched", "bytes_written_back", "room_pages_mean"] {
        assert!(total[k].as_u64().unwrap_or(0) > 0, "{k}: {report}");
    }
    let _ = std::fs::remove_file(&trace);
    let _ = std::fs::remove_file(&stats);
}

#[test]
fn replay_refuses_a_trace_whose_pages_it_cannot_lay_out() {
    // An import of a lackey log keeps its scattered addresses: replay
    // names the address and the way out; compacted, it replays.
    let log = tmp("scattered.lackey");
    std::fs::write(
        &log,
        " L 7ffd12345678,8\n S 555500001008,8\n L 555500001008,8\n",
    )
    .unwrap();
    let raw = tmp("scattered.trace");
    json_of(
        &farmem(&["trace", "import", s(&log), "--out", s(&raw), "--json"]),
        "import",
    );
    let refused = farmem(&["trace", "replay", s(&raw)]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("outside the footprint"), "{err}");
    assert!(err.contains("farmem trace compact"), "{err}");
    let compact = tmp("compact.trace");
    let h = json_of(
        &farmem(&["trace", "compact", s(&raw), "--out", s(&compact), "--json"]),
        "compact",
    );
    assert_eq!(h["accesses"], 3);
    let r = json_of(
        &farmem(&["trace", "replay", s(&compact), "--json"]),
        "replay",
    );
    assert_eq!(
        (r["loads"].as_u64(), r["stores"].as_u64()),
        (Some(2), Some(1))
    );
    for p in [log, raw, compact] {
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn eval_validate_sets_both_bodies_side_by_side() {
    if !far_memory_or_skip() {
        return;
    }
    let dir = tmp("eval");
    let out = farmem(&[
        "eval",
        "validate",
        "--quick",
        "--workloads",
        "linreg",
        "--scale",
        "8MiB",
        "--json",
        "--out",
        s(&dir),
    ]);
    // Exit 1 is a prediction off by more than the tolerance: a result.
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["eval"], "validate");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{v}");
    for r in rows {
        assert_eq!(r["identical"], true, "{r}");
        let faults = &r["metrics"]["faults_filled"];
        assert!(faults["measured"].as_f64().unwrap() > 0.0, "{r}");
        assert!(faults["predicted"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["room_pages_mean"].as_u64().unwrap() > 0, "{r}");
        // Two rounds, more where they disagree; each simulated at its room.
        let rounds = r["rounds"].as_u64().unwrap();
        assert!(
            (2..=v["rounds_max"].as_u64().unwrap()).contains(&rounds),
            "{r}"
        );
        let rooms = r["rooms"].as_array().unwrap();
        assert_eq!(rooms.len() as u64, rounds, "{r}");
        assert!(rooms.iter().all(|x| x.as_u64().unwrap() > 0), "{r}");
    }
    for f in ["validate.json", "validate.csv", "validate.svg"] {
        assert!(dir.join(f).exists(), "{f}");
    }
    let csv = std::fs::read_to_string(dir.join("validate.csv")).unwrap();
    // A header, and a line per metric of each row.
    assert_eq!(csv.lines().count(), 1 + 2 * 3);
    let _ = std::fs::remove_dir_all(&dir);
}
