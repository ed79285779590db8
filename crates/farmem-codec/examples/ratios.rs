//! Print each codec's compression ratio and latency on a few page kinds.
//!
//! `cargo run -p farmem-codec --example ratios --release`

use std::time::Instant;

use farmem_codec::CodecKind;

const PAGE: usize = 4096;

/// Deterministic xorshift so the example needs no dependencies.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn pages() -> Vec<(&'static str, Vec<u8>)> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let zero = vec![0u8; PAGE];
    let random: Vec<u8> = (0..PAGE).map(|_| rng.next() as u8).collect();
    let small_ints: Vec<u8> = (0..PAGE / 4)
        .flat_map(|_| ((rng.next() % 100) as u32).to_le_bytes())
        .collect();
    let pointers: Vec<u8> = (0..PAGE / 8)
        .flat_map(|_| (0x0000_7f3a_1c00_0000u64 + (rng.next() % 65536) * 16).to_le_bytes())
        .collect();
    let words = [
        "the", "far", "memory", "page", "of", "a", "node", "is", "cache", "line", "remote", "and",
    ];
    let mut text = Vec::new();
    while text.len() < PAGE {
        text.extend_from_slice(words[(rng.next() % words.len() as u64) as usize].as_bytes());
        text.push(if rng.next().is_multiple_of(9) {
            b'\n'
        } else {
            b' '
        });
    }
    text.truncate(PAGE);
    let doubles: Vec<u8> = (0..PAGE / 8)
        .flat_map(|i| (1.5f64 + i as f64 * 0.25).to_le_bytes())
        .collect();
    let sparse: Vec<u8> = {
        let mut p = vec![0u8; PAGE];
        for _ in 0..40 {
            let at = (rng.next() as usize % (PAGE / 8)) * 8;
            p[at..at + 8].copy_from_slice(&rng.next().to_le_bytes());
        }
        p
    };
    vec![
        ("zero", zero),
        ("random", random),
        ("small-ints", small_ints),
        ("pointers", pointers),
        ("text", text),
        ("doubles", doubles),
        ("sparse", sparse),
    ]
}

fn main() {
    // `ratios bench CODEC OP` loops one operation (for `perf stat`).
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 4 && args[1] == "bench" {
        let c = CodecKind::from_name(&args[2]).expect("codec name").codec();
        let all = pages();
        let encoded: Vec<Vec<u8>> = all
            .iter()
            .map(|(_, p)| {
                let mut v = Vec::new();
                c.compress(p, &mut v);
                v
            })
            .collect();
        let mut buf = Vec::with_capacity(2 * PAGE);
        let mut sink = 0usize;
        for _ in 0..1000 {
            for (i, (_, p)) in all.iter().enumerate() {
                buf.clear();
                match args[3].as_str() {
                    "compress" => c.compress(p, &mut buf),
                    "decompress" => c
                        .decompress(&encoded[i], &mut buf)
                        .expect("own output decodes"),
                    _ => sink += c.compressed_len(p),
                }
                sink += buf.len();
            }
        }
        println!("{sink}");
        return;
    }
    print!("{:<12}", "page");
    for k in CodecKind::ALL {
        print!("{:>18}", k.name());
    }
    println!();
    for (name, page) in pages() {
        print!("{name:<12}");
        for k in CodecKind::ALL {
            let c = k.codec();
            let len = c.compressed_len(&page);
            print!(
                "{:>18}",
                format!("{len} B ({:.2}x)", PAGE as f64 / len as f64)
            );
        }
        println!();
    }
    print!("{:<12}", "ns @2GHz");
    for k in CodecKind::ALL {
        print!("{:>18}", format!("{:.0}", k.codec().latency_ns(PAGE, 2.0)));
    }
    println!();
    // Software cost on this CPU (what the real runtime pays per page).
    let all = pages();
    let rounds = 200;
    for (label, decode) in [("compress", false), ("decompress", true)] {
        print!("{:<12}", format!("{label} us"));
        for k in CodecKind::ALL {
            let c = k.codec();
            let encoded: Vec<Vec<u8>> = all
                .iter()
                .map(|(_, p)| {
                    let mut v = Vec::new();
                    c.compress(p, &mut v);
                    v
                })
                .collect();
            let mut buf = Vec::with_capacity(2 * PAGE);
            let t = Instant::now();
            for _ in 0..rounds {
                for (i, (_, p)) in all.iter().enumerate() {
                    buf.clear();
                    if decode {
                        c.decompress(&encoded[i], &mut buf)
                            .expect("own output decodes");
                    } else {
                        c.compress(p, &mut buf);
                    }
                }
            }
            let per_page = t.elapsed().as_secs_f64() * 1e6 / (rounds * all.len()) as f64;
            print!("{:>18}", format!("{per_page:.2}"));
        }
        println!();
    }
}
