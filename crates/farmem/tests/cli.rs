//! The binary as a user runs it: daemons as child processes, one JSON object
//! per report, clear errors on bad flags.

use std::process::Command;

fn farmem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_farmem"))
}

/// Runs `farmem ARGS`, requires success, and parses its one JSON object.
fn json_of(args: &[&str]) -> serde_json::Value {
    let out = farmem().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "farmem {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn bench_wire_prints_one_json_object_with_every_key() {
    let out = farmem()
        .args([
            "bench",
            "wire",
            "--json",
            "--iters",
            "500",
            "--stream-bytes",
            "64MiB",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stdout.trim().lines().count(),
        1,
        "exactly one JSON line: {stdout}"
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    for key in [
        "tcp_rtt_us_p50",
        "read4k_us_p50",
        "read4k_us_p99",
        "read64_us_p50",
        "latency_ratio_4k",
        "tcp_stream_gbps",
        "read4k_stream_gbps",
        "throughput_ratio",
        "read256k_stream_gbps",
        "bulk_throughput_ratio",
        "tcp_cold_pages_stream_gbps",
        "throughput_ratio_cold_pages",
    ] {
        assert!(
            v[key].as_f64().is_some_and(|x| x > 0.0),
            "{key} missing or not positive in {v}"
        );
    }
}

#[test]
fn bench_sim_reports_each_scheme_over_its_rounds() {
    let v = json_of(&["bench", "sim", "--scale", "0.01", "--rounds", "2", "--json"]);
    assert_eq!(v["rounds"].as_u64(), Some(2), "{v}");
    let runs = v["runs"].as_array().unwrap();
    let schemes: Vec<&str> = runs.iter().map(|r| r["scheme"].as_str().unwrap()).collect();
    assert_eq!(schemes, ["remote", "daemon", "unimem"]);
    let records = runs[0]["records"].as_u64().unwrap();
    for r in runs {
        // Every scheme replays the same accesses, every round.
        assert_eq!(r["records"].as_u64(), Some(records), "{r}");
        assert_eq!(r["rounds"].as_u64(), Some(2), "{r}");
        for rate in ["records_per_sim_cpu_sec", "records_per_sec"] {
            let mid = r[rate].as_f64().unwrap();
            let range = &r[format!("{rate}_range")];
            let (lo, hi) = (range[0].as_f64().unwrap(), range[1].as_f64().unwrap());
            assert!(lo <= mid && mid <= hi, "{rate} in {r}");
        }
        // The simulating thread is one of the run's threads.
        assert!(
            r["sim_cpu_seconds"].as_f64() <= r["cpu_seconds"].as_f64(),
            "{r}"
        );
        assert_eq!(
            r["met"].as_bool(),
            Some(
                r["records_per_sim_cpu_sec"].as_f64().unwrap()
                    >= r["target_records_per_sim_cpu_sec"].as_f64().unwrap()
            ),
            "{r}"
        );
    }
    let out = farmem()
        .args(["bench", "sim", "--rounds", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rounds"));
}

#[test]
fn runtime_benches_report_both_modes_over_a_local_rack() {
    if !std::path::Path::new("/proc/sys/vm/unprivileged_userfaultfd").exists() {
        eprintln!("skipping: no userfaultfd");
        return;
    }
    let v = json_of(&[
        "bench", "kona", "--region", "16MiB", "--rounds", "1", "--json",
    ]);
    for mode in ["line", "page"] {
        assert!(v[mode]["pages_evicted"].as_u64().unwrap() > 0, "{v}");
    }
    // Kona-VM takes two faults per page written (missing, then
    // write-protect); line and page mode fault fresh memory around in
    // windows, mapped writable over zeros, so far fewer. A window stops
    // at pages still resident (the evictor writing them back), so how
    // much fewer varies from run to run.
    assert_eq!(v["kona_vm"]["faults"].as_u64(), Some(8192), "{v}");
    for mode in ["line", "page"] {
        assert!(v[mode]["faults"].as_u64().unwrap() < 4096 / 4, "{v}");
    }
    // One line per page written in line mode, whole pages in page mode.
    assert!(v["writeback_reduction"].as_f64().unwrap() > 8.0, "{v}");
    let v = json_of(&[
        "bench", "fault", "--pages", "200", "--reads", "200", "--json",
    ]);
    for key in [
        "fault_us_p50",
        "fault_us_p99",
        "wire_read4k_us_p50",
        "fault_ratio",
        "bare_fault_us_p50",
        "floor_ratio",
    ] {
        assert!(v[key].as_f64().is_some_and(|x| x > 0.0), "{key} in {v}");
    }
    // Every fault went to the store: the bare ones are served beside it.
    assert_eq!(v["stats"]["pages_fetched"].as_u64(), Some(200), "{v}");
    assert!(v["host"].is_object(), "{v}");
}

#[test]
fn bench_fault_times_a_real_programs_faults_beside_the_wire() {
    // PageRank over 16 MiB at a quarter local: it must fault, and fetch.
    let v = json_of(&[
        "bench",
        "fault",
        "--workload",
        "demo",
        "--size",
        "16MiB",
        "--iterations",
        "2",
        "--rounds",
        "1",
        "--reads",
        "200",
        "--json",
    ]);
    assert_eq!(v["answers_match"], true, "{v}");
    // A probe before the run and one after.
    assert_eq!(v["wire_reads"].as_u64(), Some(400), "{v}");
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{v}");
    let run = &runs[0];
    assert!(run["faults_missing"].as_u64().unwrap() > 0, "{v}");
    assert!(run["pages_fetched"].as_u64().unwrap() > 0, "{v}");
    for key in [
        "wire_read4k_us_p50",
        "fault_mean_ratio",
        "fault_p50_ratio",
        "stall_per_page_ratio",
    ] {
        assert!(v[key].as_f64().is_some_and(|x| x > 0.0), "{key} in {v}");
    }
    // The local limit comes from what the local run measured (a share,
    // at least 16 MiB), below it.
    let (limit, footprint) = (
        v["local_mem_bytes"].as_u64().unwrap(),
        v["footprint_bytes"].as_u64().unwrap(),
    );
    assert!(limit < footprint, "{v}");
    // A workload and a command together are refused, naming both.
    let out = farmem()
        .args(["bench", "fault", "--workload", "demo", "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--workload") && err.contains("--"), "{err}");
}

#[test]
fn trace_capture_converts_an_unmodified_program() {
    if Command::new("valgrind").arg("--version").output().is_err() {
        eprintln!("skipping: valgrind is not installed");
        return;
    }
    let dir = std::env::temp_dir().join(format!("farmem-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("true.trace");
    let out = farmem()
        .args(["trace", "capture", "--out"])
        .arg(&trace)
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("=="), "valgrind chatter leaked: {stderr}");
    let v = json_of(&["trace", "info", "--json", trace.to_str().unwrap()]);
    assert!(v["accesses"].as_u64().unwrap() > 1000, "{v}");
    assert_eq!(v["complete"], true);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_sizes_are_named_in_the_error() {
    let out = farmem()
        .args(["memnode", "--capacity", "12 parsecs"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--capacity") && err.contains("parsecs"),
        "{err}"
    );
}

#[test]
fn a_controller_that_cannot_write_its_state_refuses_to_start() {
    let dir = std::env::temp_dir().join(format!("farmem-cli-state-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // A path under a regular file: unwritable, even for root.
    let file = dir.join("a-file");
    std::fs::write(&file, b"").unwrap();
    let state = file.join("controller.json");
    let out = farmem()
        .args(["controller", "--listen", "127.0.0.1:0", "--state"])
        .arg(&state)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&state.display().to_string()) && err.contains("os error"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_time_flag_takes_units_and_a_bad_one_names_them() {
    // A bare number keeps the flag's unit; 30s, 1.5ms and 400ns parse.
    for lease in ["60", "30s", "1.5m"] {
        let out = farmem()
            .args(["run", "--lease", lease, "--local-mem", "8MiB", "--", "true"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "--lease {lease}: {err}");
    }
    let out = farmem()
        .args(["run", "--lease", "1.5ms", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("between 1 and 4000000 seconds"),
        "{err}"
    );
    for (sub, flag) in [
        ("run", "--lease"),
        ("controller", "--heartbeat-timeout-ms"),
        ("memnode", "--idle-secs"),
        ("batch", "--job-timeout"),
    ] {
        let out = farmem()
            .args([sub, flag, "30 fortnights"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{sub} {flag}");
        assert!(
            err.contains(flag) && err.contains("use ns, us, ms, s, m, h"),
            "{sub} {flag}: {err}"
        );
    }
}

#[test]
fn every_subcommand_has_help() {
    for sub in [
        "status",
        "memnode",
        "controller",
        "bench",
        "sim",
        "eval",
        "trace",
        "run",
        "demo",
    ] {
        let out = farmem().args([sub, "--help"]).output().unwrap();
        assert!(out.status.success(), "{sub} --help failed");
        assert!(!out.stdout.is_empty());
    }
}
