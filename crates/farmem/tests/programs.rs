//! Everyday programs under `farmem run` with a local limit below their
//! footprint: GNU sort, a Python job and a compressor (bzip2) each print
//! exactly what they print without farmem, while pages go to the memory
//! nodes and come back. (redis and sqlite have their own tests in run.rs.)

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;

use common::far_memory_unavailable as unavailable;
use common::installed;

/// `program`'s path, or None (a skip, said on stderr) when it is not
/// installed or this machine cannot run programs on far memory.
fn runnable(program: &str) -> Option<PathBuf> {
    if let Some(why) = unavailable() {
        eprintln!("skipping: {why}");
        return None;
    }
    installed(program)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("farmem-programs-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A deterministic pseudo-random stream (xorshift), so every run sorts and
/// compresses the same bytes.
fn numbers(seed: u64) -> impl Iterator<Item = u64> {
    let mut x = seed | 1;
    std::iter::repeat_with(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    })
}

/// `program args` run plain, then under `farmem run --local-mem LIMIT
/// [extra]`: asserts both succeed with the same stdout and that the far run
/// moved pages both ways; returns the local run's output and farmem's
/// stderr.
fn same_output_under_farmem(
    program: &Path,
    args: &[&str],
    limit: &str,
    extra: &[&str],
) -> (Output, String) {
    let local = Command::new(program).args(args).output().unwrap();
    assert!(local.status.success(), "{program:?} {args:?}: {local:?}");
    let stats = scratch("stats").join(format!(
        "{}.json",
        program.file_name().unwrap().to_string_lossy()
    ));
    let far = Command::new(env!("CARGO_BIN_EXE_farmem"))
        .args(["run", "--local-mem", limit])
        .args(extra)
        .arg("--stats-json")
        .arg(&stats)
        .arg("--")
        .arg(program)
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&far.stderr);
    assert_eq!(far.status.code(), Some(0), "{stderr}");
    assert!(
        far.stdout == local.stdout,
        "{program:?}: {} bytes under farmem differ from {} bytes without it; {stderr}",
        far.stdout.len(),
        local.stdout.len()
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let total = &report["total"];
    // Below its footprint the program's pages went out and came back.
    for key in ["bytes_written_back", "pages_fetched"] {
        assert!(total[key].as_u64().unwrap_or(0) > 0, "{key}: {report}");
    }
    let _ = std::fs::remove_file(&stats);
    (local, stderr.into_owned())
}

#[test]
fn gnu_sort_sorts_the_same_lines_on_far_memory() {
    let Some(sort) = runnable("sort") else {
        return;
    };
    let dir = scratch("sort");
    let input = dir.join("numbers.txt");
    let text: String = numbers(7)
        .take(300_000)
        .map(|n| format!("{}\n", n % 1_000_000_000_000))
        .collect();
    std::fs::write(&input, text).unwrap();
    let input = input.to_str().unwrap();
    // About 40 MiB resident without farmem.
    let (out, _) = same_output_under_farmem(&sort, &["-n", input], "16MiB", &[]);
    // Sorted, and every line kept.
    let lines: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(lines.len(), 300_000);
    assert!(lines.windows(2).all(|w| w[0] <= w[1]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Tuples built, sorted, indexed in a dict and summed, then a digest of a
/// sample: a mix of allocation, pointer chasing and rewriting.
const PYTHON_JOB: &str = "
import hashlib, random
r = random.Random(11)
rows = [(r.randrange(1 << 30), str(r.random())) for _ in range(50_000)]
rows.sort()
index = {k: v for k, v in rows}
print(len(index), sum(k for k, _ in rows), hashlib.sha256(repr(rows[::97]).encode()).hexdigest())
";

#[test]
fn a_python_job_prints_the_same_digest_on_far_memory() {
    let Some(python) = runnable("python3") else {
        return;
    };
    // About 30 MiB resident without farmem. The remote backend keeps the
    // test short: under `auto` the compressed pool's churn makes this job
    // several times slower (issue 17).
    let (out, _) = same_output_under_farmem(
        &python,
        &["-c", PYTHON_JOB],
        // Its anonymous memory, less what stays local: libraries are
        // not charged (a cgroup charges them to whoever read them first).
        "20MiB",
        &["--backend", "remote"],
    );
    let line = String::from_utf8_lossy(&out.stdout);
    assert_eq!(line.split_whitespace().count(), 3, "{line}");
}

#[test]
fn bzip2_compresses_to_the_same_bytes_on_far_memory() {
    let Some(bzip2) = runnable("bzip2") else {
        return;
    };
    let dir = scratch("bzip2");
    let input = dir.join("words.txt");
    // Words from a small vocabulary: compressible, as text is.
    let vocabulary: Vec<String> = numbers(3)
        .take(5000)
        .map(|n| format!("{:x}", n % 0xff_ffff))
        .collect();
    let mut text = String::new();
    for (i, n) in numbers(5).enumerate() {
        if text.len() >= 3 << 20 {
            break;
        }
        text.push_str(&vocabulary[n as usize % vocabulary.len()]);
        text.push(if i % 12 == 11 { '\n' } else { ' ' });
    }
    std::fs::write(&input, &text).unwrap();
    // bzip2 -9 takes about 8 MiB, most of it in one far allocation.
    let (out, stderr) =
        same_output_under_farmem(&bzip2, &["-9", "-c", input.to_str().unwrap()], "6MiB", &[]);
    // At 6 MiB the resident set passes the limit, and the summary says
    // why rather than leave the overrun unexplained: the libraries' file
    // pages, which the limit does not charge, and, when it takes more
    // than the half of the limit set aside for it, the anonymous memory
    // farmem cannot move (its own buffers under eviction, bzip2's small
    // allocations; since the latency histograms shrank it fits).
    assert!(
        stderr.contains("over --local-mem 6MiB")
            && (stderr.contains("the limit does not charge") || stderr.contains("does not move")),
        "{stderr}"
    );
    // And the bytes decompress to the input.
    let packed = dir.join("words.txt.bz2");
    std::fs::write(&packed, &out.stdout).unwrap();
    let back = Command::new(&bzip2)
        .arg("-dc")
        .arg(&packed)
        .output()
        .unwrap();
    assert!(back.stdout == text.as_bytes());
    let _ = std::fs::remove_dir_all(&dir);
}
