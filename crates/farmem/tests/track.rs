//! `farmem track` (Kona's KTracker) on a crafted program whose dirty data
//! is known exactly: one 8-byte word per 4 KiB page per round, every byte
//! of it changed. Kona's Table 2 arithmetic gives 512x at a page, 8x at a
//! line, and 64x between them (Figure 6).

use std::path::PathBuf;
use std::process::Command;

const WORD_PER_PAGE: &str = r#"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
int main(int argc, char **argv) {
    size_t pages = strtoul(argv[1], 0, 10);
    int rounds = atoi(argv[2]);
    volatile uint64_t *mem = mmap(0, pages * 4096, PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return 1;
    struct timespec gap = {0, 100 * 1000 * 1000};
    for (int r = 0; r < rounds; r++) {
        /* Every byte differs from the last round's. */
        uint64_t v = 0x0101010101010101ULL * (uint64_t)(r % 200 + 1);
        for (size_t p = 0; p < pages; p++) mem[p * 512 + 3] = v;
        nanosleep(&gap, 0);
    }
    printf("wrote %zu pages %d times\n", pages, rounds);
    return 0;
}
"#;

fn farmem() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_farmem"))
}

/// The crafted program, compiled; `None` (skip) without a C compiler
/// unless the test run requires every program.
fn word_per_page() -> Option<PathBuf> {
    let dir = std::env::temp_dir().join(format!("farmem-track-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("word.c");
    std::fs::write(&src, WORD_PER_PAGE).unwrap();
    let bin = dir.join("word");
    match Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
    {
        Ok(s) if s.success() => Some(bin),
        Ok(s) => panic!("cc failed: {s}"),
        Err(_) if std::env::var_os("FARMEM_TEST_REQUIRE_PROGRAMS").is_some() => {
            panic!("no C compiler (cc)")
        }
        Err(_) => {
            eprintln!("skipping: no C compiler (cc)");
            None
        }
    }
}

fn near(got: &serde_json::Value, want: f64) -> bool {
    got.as_f64()
        .is_some_and(|x| (x - want).abs() <= want * 0.05)
}

#[test]
fn one_word_per_page_is_512x_at_a_page_8x_at_a_line_and_64x_between() {
    let Some(prog) = word_per_page() else { return };
    let out = Command::new(farmem())
        .args(["track", "--interval", "200ms", "--json", "--"])
        .arg(&prog)
        .args(["8192", "15"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The program's own output went to stderr, not into the JSON.
    assert!(String::from_utf8_lossy(&out.stderr).contains("wrote 8192 pages 15 times"));
    let overall = &report["overall"];
    let amp = &overall["amplification"];
    assert!(near(&amp["4096"], 512.0), "{overall}");
    assert!(near(&amp["1024"], 128.0), "{overall}");
    assert!(near(&amp["256"], 32.0), "{overall}");
    assert!(near(&amp["64"], 8.0), "{overall}");
    assert!(near(&overall["page_vs_line"], 64.0), "{overall}");
    assert!(report["intervals"].as_array().is_some_and(|r| r.len() >= 3));
    // Every round's words were seen: at least 8 bytes per page per round
    // that fell in a scanned interval, and never more than all rounds.
    let bytes = overall["dirty_bytes"].as_u64().unwrap();
    assert!(bytes <= 8192 * 8 * 15 + (64 << 10), "{bytes}");
    assert!(bytes >= 8192 * 8 * 3, "{bytes}");
}

#[test]
fn a_missing_process_is_a_named_error() {
    let out = Command::new(farmem())
        .args(["track", "--pid", "2147483646", "--interval", "10ms"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("process 2147483646"), "{err}");
}
