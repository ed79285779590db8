//! `farmem batch`: programs profiled, dispatched onto backends within the
//! rack's room, every answer checked against the profile's; and batches
//! that cannot run refused by name.

use std::process::Command;

use serde_json::Value;

fn farmem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_farmem"))
}

/// A batch file in a fresh directory (removed on drop).
struct BatchFile {
    dir: std::path::PathBuf,
}

impl BatchFile {
    fn new(tag: &str, text: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("farmem-batch-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("jobs.toml"),
            text.replace("DIR", dir.to_str().unwrap()),
        )
        .unwrap();
        Self { dir }
    }

    fn path(&self) -> std::path::PathBuf {
        self.dir.join("jobs.toml")
    }

    /// `farmem batch` of this file with `flags`.
    fn run(&self, flags: &[&str]) -> std::process::Output {
        farmem()
            .arg("batch")
            .arg(self.path())
            .args(flags)
            .output()
            .unwrap()
    }
}

impl Drop for BatchFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const MIB: u64 = 1 << 20;
/// What a profile reserves beyond its peak: one slab batch per copy.
const SLAB_BATCH: u64 = 256 * MIB;

#[test]
fn a_batch_runs_each_program_where_its_features_say_within_the_racks_room() {
    // Each job reserves at least 512 MiB (a slab batch held, one more in
    // hand); the rack holds one at a time.
    let file = BatchFile::new(
        "mixed",
        r#"
slots = 2
rack = "768MiB"
file_dir = "DIR"
file = "4GiB"

[[job]]
name = "kv"
workload = "kv"
size = "16MiB"
iterations = 1
local_mem = "8MiB"

[[job]]
name = "scan"
workload = "scan"
size = "24MiB"
iterations = 2
local_mem = "8MiB"

[[job]]
name = "sort"
command = ["sh", "-c", "seq 200000 | sort -r | head -3"]
local_mem = "8MiB"
"#,
    );
    let out = file.run(&["--compare", "remote,file", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["rack_bytes"], 768 * MIB, "{report}");
    let jobs = report["jobs"].as_array().unwrap();
    for j in jobs {
        let p = &j["profile"];
        assert_eq!(
            p["reserve_bytes"].as_u64().unwrap(),
            p["peak_granted_bytes"].as_u64().unwrap() + SLAB_BATCH,
            "{j}"
        );
    }
    // kv and the scan went far: the rack granted them memory while alone.
    for j in &jobs[..2] {
        assert!(
            j["profile"]["peak_granted_bytes"].as_u64().unwrap() > 0,
            "{j}"
        );
    }
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3, "{report}");
    for run in runs {
        assert_eq!(run["all_ok"], true, "{run}");
        let names: Vec<_> = run["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["kv", "scan", "sort"], "{run}");
    }
    let backend =
        |run: &Value, job: usize| run["jobs"][job]["backend"].as_str().unwrap().to_string();
    let dispatch = runs.iter().find(|r| r["assignment"] == "dispatch").unwrap();
    // Random access first, on the rack: in the compressed pool in front of
    // it when its profile shows hot, compressible evictions (the default
    // thresholds: reuse 1/4, compressible 1/32), else on the memory nodes
    // alone; the stream beside it, on the file, as the rack holds one.
    let kv = &jobs[0]["profile"];
    let hot =
        kv["reuse"].as_f64().unwrap() >= 0.25 && kv["compressible"].as_f64().unwrap() >= 1.0 / 32.0;
    let kv_backend = if hot { "compressed" } else { "remote" };
    assert_eq!(backend(dispatch, 0), kv_backend, "{kv} {dispatch}");
    // The scan's share of pages brought around a fault is 0.8-0.95 from
    // run to run (how far each window reaches depends on the write-backs
    // behind it): under the stream threshold, it waits for the rack.
    let scan = &jobs[1]["profile"];
    let stream = scan["sequential"].as_f64().unwrap() >= 0.8;
    let scan_backend = if stream { "file" } else { "remote" };
    assert_eq!(backend(dispatch, 1), scan_backend, "{scan} {dispatch}");
    let remote = runs
        .iter()
        .find(|r| r["assignment"] == "all-remote")
        .unwrap();
    for j in 0..3 {
        assert_eq!(backend(remote, j), "remote");
        assert!(remote["jobs"][j]["fault_around"].is_null(), "{remote}");
    }
    // No two programs whose reservations the rack cannot hold together
    // ran at once.
    let reserve: Vec<u64> = jobs
        .iter()
        .map(|j| j["profile"]["reserve_bytes"].as_u64().unwrap())
        .collect();
    let span = |j: &Value| {
        (
            j["start_seconds"].as_f64().unwrap(),
            j["end_seconds"].as_f64().unwrap(),
        )
    };
    let on_rack = ["remote", "compressed", "auto"];
    for run in runs {
        let rj = run["jobs"].as_array().unwrap();
        for a in 0..rj.len() {
            for b in a + 1..rj.len() {
                let both_rack = on_rack.contains(&rj[a]["backend"].as_str().unwrap())
                    && on_rack.contains(&rj[b]["backend"].as_str().unwrap());
                if both_rack && reserve[a] + reserve[b] > 768 * MIB {
                    let (x, y) = (span(&rj[a]), span(&rj[b]));
                    assert!(
                        x.1 <= y.0 || y.1 <= x.0,
                        "jobs {a} and {b} overlapped: {run}"
                    );
                }
            }
        }
    }
    assert!(
        report["makespan_seconds"]["dispatch"].as_f64().is_some(),
        "{report}"
    );
    assert!(
        report["dispatch_to_static"]["all-file"].as_f64().is_some(),
        "{report}"
    );
}

#[test]
fn a_program_printing_other_than_its_profile_fails_the_batch() {
    let file = BatchFile::new(
        "differ",
        r#"
slots = 1
rack = "2GiB"
file = "1GiB"

[[job]]
name = "dice"
command = ["sh", "-c", "od -An -N8 -tx8 /dev/urandom"]
local_mem = "8MiB"
"#,
    );
    let out = file.run(&["--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let job = &report["runs"][0]["jobs"][0];
    assert_eq!(job["outcome"], "ok", "{job}");
    assert_eq!(job["result_matches_profile"], false, "{job}");
    assert!(
        stderr.contains("printed other than their profile"),
        "{stderr}"
    );
}

#[test]
fn batches_that_cannot_run_are_refused_by_name() {
    let out = farmem()
        .args(["batch", "/nonexistent/jobs.toml"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("/nonexistent/jobs.toml"), "{stderr}");

    // The rack cannot grant even one slab batch: the program would run
    // past its local memory, and the profile says so.
    let small = BatchFile::new(
        "small",
        r#"
rack = "64MiB"
file = "1GiB"

[[job]]
name = "tiny-rack"
workload = "scan"
size = "16MiB"
iterations = 1
local_mem = "4MiB"
"#,
    );
    let out = small.run(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr
            .contains("job `tiny-rack`: the rack could not back its far memory during its profile"),
        "{stderr}"
    );

    let out = farmem().args(["batch", "--example"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("[[job]]"));
}
