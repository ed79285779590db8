//! Small programs with one memory behaviour each, for comparing far-memory
//! backends (xDM's evaluation, seed 004 §5: workloads that prefer one
//! backend or another by their data and access pattern). Each runs on
//! ordinary memory, knows nothing of far memory, and returns a checksum
//! that two runs must agree on.
//!
//! | kind    | memory                                   | favours |
//! |---------|------------------------------------------|---------|
//! | `kv`    | random reads and writes of 256 B records (a quarter of the table per pass) | low latency per page |
//! | `scan`  | sequential passes over a read-only array | read-ahead, bandwidth |
//! | `text`  | pages of words, rewritten and re-read    | a compressed pool |
//! | `noise` | pages of random bytes, rewritten and re-read | not compression |

use farmem_core::mix64;

/// Which program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Kv,
    Scan,
    Text,
    Noise,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Kv, Kind::Scan, Kind::Text, Kind::Noise];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Kv => "kv",
            Kind::Scan => "scan",
            Kind::Text => "text",
            Kind::Noise => "noise",
        }
    }
}

impl std::str::FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                format!("unknown workload {s:?}; expected one of: kv, scan, text, noise")
            })
    }
}

const RECORD: usize = 256;
const WORDS: [&[u8]; 16] = [
    b"far ", b"memory ", b"page ", b"node ", b"rack ", b"cache ", b"line ", b"swap ", b"fault ",
    b"evict ", b"local ", b"remote ", b"tier ", b"pool ", b"link ", b"zero ",
];

/// Runs `kind` over `bytes` of memory for `passes` passes; calls
/// `each(pass)` after each (1-based). The checksum depends only on the
/// arguments.
pub fn run(kind: Kind, bytes: u64, passes: usize, seed: u64, mut each: impl FnMut(usize)) -> u64 {
    let len = (bytes as usize).max(RECORD) / RECORD * RECORD;
    let mut mem = vec![0u8; len];
    let mut sum = 0u64;
    match kind {
        Kind::Kv => {
            for (i, rec) in mem.chunks_exact_mut(RECORD).enumerate() {
                fill_text(rec, seed ^ i as u64);
            }
            let records = len / RECORD;
            // Each pass makes a quarter as many requests as the table has
            // records, at random: under a quarter local, most miss.
            for pass in 1..=passes {
                for op in 0..(records / 4).max(1) as u64 {
                    let r = mix64(seed ^ (pass as u64) << 40 ^ op) as usize % records;
                    let rec = &mut mem[r * RECORD..(r + 1) * RECORD];
                    sum = sum
                        .wrapping_mul(31)
                        .wrapping_add(u64::from(rec[(op % 8) as usize * 32]));
                    if op % 4 == 0 {
                        // A put: the record's value changes.
                        rec[(op as usize / 4) % RECORD] = (op as u8) | 1;
                    }
                }
                each(pass);
            }
        }
        Kind::Scan => {
            for (i, w) in mem.chunks_exact_mut(8).enumerate() {
                w.copy_from_slice(&mix64(seed << 32 ^ i as u64).to_le_bytes());
            }
            for pass in 1..=passes {
                for w in mem.chunks_exact(8) {
                    let v = u64::from_le_bytes(w.try_into().unwrap_or_default());
                    sum = sum.wrapping_add(v.rotate_left(pass as u32));
                }
                each(pass);
            }
        }
        Kind::Text | Kind::Noise => {
            for pass in 1..=passes {
                for (i, page) in mem.chunks_mut(4096).enumerate() {
                    let s = seed ^ (pass as u64) << 32 ^ i as u64;
                    if kind == Kind::Text {
                        fill_text(page, s);
                    } else {
                        fill_noise(page, s);
                    }
                }
                for page in mem.chunks(4096) {
                    sum = page.iter().fold(sum, |h, &b| {
                        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
                    });
                }
                each(pass);
            }
        }
    }
    sum
}

/// Words picked at random: text that LZ4 shrinks about 2x.
fn fill_text(out: &mut [u8], seed: u64) {
    let mut i = 0;
    let mut x = seed;
    while i < out.len() {
        x = mix64(x);
        let w = WORDS[(x % WORDS.len() as u64) as usize];
        let n = w.len().min(out.len() - i);
        out[i..i + n].copy_from_slice(&w[..n]);
        i += n;
    }
}

fn fill_noise(out: &mut [u8], seed: u64) {
    for (j, c) in out.chunks_mut(8).enumerate() {
        let v = mix64(seed ^ (j as u64) << 48).to_le_bytes();
        c.copy_from_slice(&v[..c.len()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_deterministic_and_distinct() {
        let mut sums = Vec::new();
        for k in Kind::ALL {
            let mut passes = 0;
            let a = run(k, 64 << 10, 2, 7, |p| passes = p);
            assert_eq!(passes, 2);
            assert_eq!(a, run(k, 64 << 10, 2, 7, |_| {}), "{k:?}");
            assert_ne!(a, run(k, 64 << 10, 2, 8, |_| {}), "{k:?}");
            sums.push(a);
            assert_eq!(k.name().parse::<Kind>().unwrap(), k);
        }
        sums.dedup();
        assert_eq!(sums.len(), 4);
        assert!("mru".parse::<Kind>().is_err());
    }

    #[test]
    fn text_compresses_and_noise_does_not() {
        let mut text = vec![0u8; 4096];
        fill_text(&mut text, 1);
        let mut noise = vec![0u8; 4096];
        fill_noise(&mut noise, 1);
        let t = lz4_flex::block::compress(&text).len();
        let n = lz4_flex::block::compress(&noise).len();
        assert!(t < 2560, "text to {t} bytes");
        assert!(n > 4000, "noise to {n} bytes");
    }
}
