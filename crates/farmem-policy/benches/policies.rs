//! Accesses per second of every registered policy on a skewed block stream
//! (90% of accesses to 10% of the blocks), cache at 12.5% of the blocks.
//! Quick: `cargo bench -p farmem-policy`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use farmem_policy::cache::PolicyConfig;

const BLOCKS: u64 = 1 << 16;
const CAPACITY: usize = 1 << 13;
const ACCESSES: usize = 1 << 16;

/// A fixed pseudo-random stream (xorshift), hot set first.
fn stream() -> Vec<u64> {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    (0..ACCESSES)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x % 10 < 9 {
                (x >> 8) % (BLOCKS / 10)
            } else {
                (x >> 8) % BLOCKS
            }
        })
        .collect()
}

fn policies(c: &mut Criterion) {
    let s = stream();
    let mut g = c.benchmark_group("access");
    g.throughput(Throughput::Elements(ACCESSES as u64));
    g.sample_size(10);
    g.warm_up_time(Duration::from_millis(300));
    g.measurement_time(Duration::from_secs(1));
    for &name in PolicyConfig::NAMES {
        let cfg = PolicyConfig::from_name(name).unwrap();
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut p = cfg.build(CAPACITY).unwrap();
                for &blk in &s {
                    black_box(p.access(blk, 0));
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, policies);
criterion_main!(benches);
