//! Traces from other tools: a lackey log and a ChampSim trace each import
//! with their source's access count and simulate with it; a farmem trace
//! exported as a compressed ChampSim trace comes back access for access.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

fn farmem(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_farmem"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "farmem {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "farmem-trace-formats-{}-{name}",
        std::process::id()
    ))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Imports `src`, checks its counts and that `farmem sim` replays them all.
fn import_and_simulate(src: &Path, format: &str, records: u64, accesses: u64) {
    let out = tmp(&format!("{format}.trace"));
    let v = farmem(&["trace", "import", s(src), "--out", s(&out), "--json"]);
    assert_eq!(v["source"]["format"], format, "{v}");
    assert_eq!(v["source"]["read"]["source_records"], records, "{v}");
    assert_eq!(v["source"]["read"]["source_accesses"], accesses, "{v}");
    assert_eq!(v["accesses"], accesses, "{v}");
    let info = farmem(&["trace", "info", s(src), "--json"]);
    assert_eq!(info["format"], format, "{info}");
    let sim = farmem(&["sim", "--trace", s(&out), "--json"]);
    assert_eq!(sim["records"], accesses, "{sim}");
    let _ = std::fs::remove_file(out);
}

#[test]
fn a_lackey_log_imports_and_simulates_with_its_record_counts() {
    let log = tmp("lackey.log");
    let mut f = std::fs::File::create(&log).unwrap();
    writeln!(f, "==42== Lackey, an example Valgrind tool").unwrap();
    let (mut records, mut accesses) = (0u64, 0u64);
    for i in 0..5000u64 {
        writeln!(f, "I  {:08x},4", 0x400000 + i * 4).unwrap();
        let addr = 0x1000_0000 + (i * 7919 % 4096) * 64;
        let (kind, n) = match i % 3 {
            0 => ("L", 1),
            1 => ("S", 1),
            _ => ("M", 2),
        };
        writeln!(f, " {kind} {addr:08x},8").unwrap();
        records += 2;
        accesses += n;
        if i % 1000 == 0 {
            writeln!(f, "the program's own stderr").unwrap();
        }
    }
    drop(f);
    import_and_simulate(&log, "lackey", records, accesses);
    let _ = std::fs::remove_file(log);
}

#[test]
fn a_champsim_trace_imports_and_simulates_with_its_record_counts() {
    // Raw records: every third instruction loads, every fifth stores too.
    let raw = tmp("raw.champsimtrace");
    let mut bytes = Vec::new();
    let (mut records, mut accesses) = (0u64, 0u64);
    for i in 0..30_000u64 {
        let mut r = [0u8; 64];
        r[0..8].copy_from_slice(&(0x400000 + 4 * i).to_le_bytes());
        if i % 3 == 0 {
            r[32..40].copy_from_slice(&(0x2000_0000 + (i % 8192) * 64).to_le_bytes());
            accesses += 1;
        }
        if i % 5 == 0 {
            r[16..24].copy_from_slice(&(0x3000_0000 + (i % 4096) * 64).to_le_bytes());
            accesses += 1;
        }
        bytes.extend_from_slice(&r);
        records += 1;
    }
    std::fs::write(&raw, &bytes).unwrap();
    import_and_simulate(&raw, "champsim", records, accesses);
    // Cut mid-record: refused by name.
    std::fs::write(&raw, &bytes[..64 * 10 + 3]).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_farmem"))
        .args([
            "trace",
            "import",
            s(&raw),
            "--format",
            "champsim",
            "--out",
            s(&tmp("cut.trace")),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("3 bytes into a record"));
    let _ = std::fs::remove_file(raw);
    let _ = std::fs::remove_file(tmp("cut.trace"));
}

#[test]
fn an_exported_champsim_trace_comes_back_access_for_access() {
    let (generated, xz, back) = (
        tmp("gen.trace"),
        tmp("out.champsimtrace.xz"),
        tmp("back.trace"),
    );
    let g = farmem(&[
        "trace",
        "gen",
        "--workload",
        "ycsb-a",
        "--scale",
        "0.005",
        "--no-contents",
        "--out",
        s(&generated),
        "--json",
    ]);
    let e = farmem(&["trace", "export", s(&generated), "--out", s(&xz), "--json"]);
    assert_eq!(e["accesses"], g["accesses"]);
    let info = farmem(&["trace", "info", s(&xz), "--json"]);
    assert_eq!(
        (info["format"].as_str(), info["xz"].as_bool()),
        (Some("champsim"), Some(true))
    );
    assert_eq!(info["read"]["source_records"], e["records"]);
    farmem(&["trace", "import", s(&xz), "--out", s(&back), "--json"]);
    let (a, b) = (
        farmem(&["sim", "--trace", s(&generated), "--json"]),
        farmem(&["sim", "--trace", s(&back), "--json"]),
    );
    // The same accesses in the same order: the same simulation.
    for k in [
        "records",
        "llc_misses",
        "remote_bytes_read",
        "remote_bytes_written",
    ] {
        assert_eq!(a[k], b[k], "{k}: {a} against {b}");
    }
    for p in [generated, xz, back] {
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn a_file_in_no_known_format_is_refused_saying_what_was_looked_for() {
    let junk = tmp("junk.bin");
    std::fs::write(&junk, b"not a trace at all, 37 bytes long...").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_farmem"))
        .args(["trace", "import", s(&junk), "--out", s(&tmp("junk.trace"))])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not a farmem, lackey or ChampSim trace"),
        "{stderr}"
    );
    let _ = std::fs::remove_file(junk);
}
