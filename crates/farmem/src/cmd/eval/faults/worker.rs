//! The soak's program: seeded writes over its far memory, each page
//! checked against what was last written there before it is overwritten.

use std::io::Write;
use std::time::Instant;

use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;

use super::{Flags, MISMATCH_EXIT, PAGE, PAGE_WORDS, REPORT_PAGES};
use crate::cmd::Outcome;

/// What a soak program does: seeded writes and checks, progress on stdout
/// as `progress VERIFIED MISMATCHED PASS` lines, `done VERIFIED MISMATCHED`
/// at the end.
pub(super) fn worker(f: &Flags) -> Outcome {
    // SAFETY: prctl on ourselves: die with `farmem run`, our parent.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    let start = Instant::now();
    let deadline = (!f.worker_ms.is_zero()).then(|| start + f.worker_ms);
    let pages = (f.size.bytes() / PAGE) as usize;
    let mut mem = vec![0u64; pages * PAGE_WORDS];
    const UNWRITTEN: u32 = u32::MAX;
    let mut version = vec![UNWRITTEN; pages];
    let mut rng = SmallRng::seed_from_u64(f.seed);
    let mut order: Vec<u32> = (0..pages as u32).collect();
    let mut out = std::io::stdout().lock();
    let (mut verified, mut mismatched, mut shown) = (0u64, 0u64, 0u32);
    let mut check = |p: usize, page: &[u64], v: u32, verified: &mut u64, mismatched: &mut u64| {
        for (w, &got) in page.iter().enumerate() {
            let want = pattern(f.seed, v, p, w);
            if got != want {
                let diff = got ^ want;
                *mismatched += (0..8).filter(|b| (diff >> (8 * b)) & 0xff != 0).count() as u64;
                if shown < 10 {
                    shown += 1;
                    eprintln!(
                        "farmem faults worker: MISMATCH at page {p} word {w}: wrote {want:016x} (pass {v}), read {got:016x}"
                    );
                }
            }
        }
        *verified += PAGE;
    };
    let late = |i: usize| deadline.is_some_and(|d| i.is_multiple_of(64) && Instant::now() >= d);
    'passes: for pass in 0..f.passes {
        order.shuffle(&mut rng);
        for (i, &p) in order.iter().enumerate() {
            if late(i) {
                break 'passes;
            }
            let p = p as usize;
            let page = &mut mem[p * PAGE_WORDS..(p + 1) * PAGE_WORDS];
            if version[p] != UNWRITTEN {
                check(p, page, version[p], &mut verified, &mut mismatched);
            }
            for (w, x) in page.iter_mut().enumerate() {
                *x = pattern(f.seed, pass, p, w);
            }
            version[p] = pass;
            if (i + 1).is_multiple_of(REPORT_PAGES) {
                writeln!(out, "progress {verified} {mismatched} {pass}")?;
                out.flush()?;
            }
        }
    }
    // Every page once more, in another order.
    order.shuffle(&mut rng);
    for (i, &p) in order.iter().enumerate() {
        let p = p as usize;
        if version[p] != UNWRITTEN {
            let page = &mem[p * PAGE_WORDS..(p + 1) * PAGE_WORDS];
            check(p, page, version[p], &mut verified, &mut mismatched);
        }
        if (i + 1).is_multiple_of(REPORT_PAGES) {
            writeln!(out, "progress {verified} {mismatched} {}", f.passes)?;
            out.flush()?;
        }
    }
    writeln!(out, "done {verified} {mismatched}")?;
    out.flush()?;
    Ok(if mismatched > 0 {
        std::process::ExitCode::from(MISMATCH_EXIT)
    } else {
        std::process::ExitCode::SUCCESS
    })
}

/// Word `w` of page `p` as written in pass `v`.
pub(super) fn pattern(seed: u64, v: u32, p: usize, w: usize) -> u64 {
    let mut z = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (u64::from(v) + 1).wrapping_mul(0xD1B5_4A32_D192_ED03)
        ^ (p as u64 * PAGE_WORDS as u64 + w as u64);
    // splitmix64's finaliser.
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_differ_by_pass_page_word_and_seed() {
        let a = pattern(1, 0, 0, 0);
        assert_ne!(a, pattern(1, 1, 0, 0));
        assert_ne!(a, pattern(1, 0, 1, 0));
        assert_ne!(a, pattern(1, 0, 0, 1));
        assert_ne!(a, pattern(2, 0, 0, 0));
        assert_eq!(a, pattern(1, 0, 0, 0));
    }
}
