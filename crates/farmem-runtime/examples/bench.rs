//! Quick numbers against MemStore: fault latency per wait mode and the Kona
//! microbenchmark. `cargo run --release --example bench -- [fault|kona] ...`

use std::sync::Arc;

use farmem_runtime::bench::{FaultOpts, KonaOpts, fault, kona};
use farmem_runtime::{Config, MemStore, WaitMode};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let what = args.first().map(String::as_str).unwrap_or("fault");
    match what {
        "fault" => {
            for (name, wait, handlers, fillers) in [
                ("poll 1h+2f", WaitMode::Poll, 1, 2),
                ("poll 1h", WaitMode::Poll, 1, 0),
                ("poll 2h", WaitMode::Poll, 2, 0),
                ("spin 1h", WaitMode::Spin, 1, 0),
                ("hybrid 1h", WaitMode::Hybrid { spin_us: 1000 }, 1, 0),
                ("hybrid 2h", WaitMode::Hybrid { spin_us: 1000 }, 2, 0),
            ] {
                let store = Arc::new(MemStore::new(1 << 30));
                let opts = FaultOpts {
                    pages: 20_000,
                    reads: 20_000,
                    base: Config {
                        wait,
                        handlers,
                        fillers,
                        ..Config::default()
                    },
                };
                let r = fault(&opts, store.clone(), store).unwrap();
                println!(
                    "{name:14} fault p50 {:6.2} us p99 {:7.2} us | store read p50 {:5.2} us | install {} ns/page",
                    r.fault_us_p50,
                    r.fault_us_p99,
                    r.wire_read4k_us_p50,
                    r.stats.stages.install_ns / r.stats.pages_fetched.max(1)
                );
            }
        }
        "kona" => {
            let threads = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1);
            let mib: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1024);
            let store = Arc::new(MemStore::new(16 << 30));
            let opts = KonaOpts {
                rounds: 1,
                warm_bytes: 0,
                threads,
                region_bytes: mib << 20,
                local_fraction: 0.5,
                base: Config::default(),
            };
            let r = kona(&opts, store.clone(), store).unwrap();
            println!("{}", serde_json::to_string_pretty(&r).unwrap());
        }
        other => eprintln!("unknown benchmark `{other}` (fault, kona)"),
    }
}
