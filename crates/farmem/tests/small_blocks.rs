//! Blocks below a page on far memory (`farmem run --threshold 16`): packed
//! into runs of far pages by size class, so a program of many small
//! allocations keeps its data, its zeros and its alignment, and takes
//! about the far memory it asked for, not a page a block.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

use common::compiled_or_skip;

/// The C test program `name` (under farmem-preload/tests/c), compiled; None
/// (reason printed) where these tests cannot run.
fn compiled(name: &str) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../farmem-preload/tests/c")
        .join(format!("{name}.c"));
    // Not `farmem-…`: the shim takes threads of that name for its own.
    compiled_or_skip(name, &src)
}

/// Runs `bin args` locally and under `farmem run --threshold 16` with
/// `local_mem`; asserts the same output and exit code, and returns the
/// far run's `--stats-json` report.
fn same_output_with_small_blocks_far(
    bin: &Path,
    args: &[&str],
    local_mem: &str,
) -> serde_json::Value {
    let local = Command::new(bin).args(args).output().unwrap();
    assert!(local.status.success(), "local run failed: {local:?}");
    let stats = std::env::temp_dir().join(format!(
        "farmem-small-blocks-{}-{}.json",
        bin.file_name().unwrap().to_string_lossy(),
        std::process::id()
    ));
    let far = Command::new(env!("CARGO_BIN_EXE_farmem"))
        .args([
            "run",
            "--threshold",
            "16",
            "--local-mem",
            local_mem,
            "--stats-json",
        ])
        .arg(&stats)
        .arg("--")
        .arg(bin)
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&far.stderr);
    assert_eq!(far.status.code(), Some(0), "stderr: {stderr}");
    assert_eq!(
        String::from_utf8_lossy(&far.stdout),
        String::from_utf8_lossy(&local.stdout),
        "stderr: {stderr}"
    );
    assert!(String::from_utf8_lossy(&far.stdout).ends_with("ok\n"));
    let report = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let _ = std::fs::remove_file(&stats);
    report
}

#[test]
fn small_blocks_keep_their_data_zeros_and_alignment_packed_into_far_pages() {
    let Some(bin) = compiled("small_test") else {
        return;
    };
    // Two threads of 100 k blocks, about 46 MB in all, over 8 MiB local.
    let report = same_output_with_small_blocks_far(&bin, &["100000"], "8MiB");
    let _ = std::fs::remove_file(&bin);
    let total = &report["total"];
    let n = |k: &str| total[k].as_u64().unwrap_or(0);
    assert!(n("faults_missing") > 0, "{report}");
    assert!(
        n("pages_evicted_dirty") > 0,
        "blocks went to the memory nodes: {report}"
    );
    // A page a block would be 200 k pages (800 MB) and more.
    let far = report["processes"][0]["far_bytes_peak"].as_u64().unwrap();
    assert!(
        far > 32 << 20 && far < 128 << 20,
        "far heap peak {far}: {report}"
    );
}

#[test]
fn the_allocation_torture_passes_with_small_blocks_far_too() {
    let Some(bin) = compiled("alloc_test") else {
        return;
    };
    // Threads, large blocks and mappings, 20 k small blocks, realloc across
    // the small and large heaps, calloc into reused space, fork+exec.
    let report = same_output_with_small_blocks_far(&bin, &["4", "8"], "16MiB");
    let _ = std::fs::remove_file(&bin);
    assert!(
        report["total"]["pages_evicted_dirty"].as_u64() > Some(0),
        "{report}"
    );
}
