//! The fault and Kona benchmarks over a real rack: a controller and two
//! memory nodes in this process on loopback, reached through the wire
//! protocol. `cargo run --release --example rack_bench -- [fault|kona MiB]`

use std::sync::Arc;

use farmem_controller::{Controller, ControllerConfig};
use farmem_memnode::{MemNode, MemNodeConfig};
use farmem_net::ClientConfig;
use farmem_runtime::bench::{FaultOpts, KonaOpts, fault, kona};
use farmem_runtime::remote::RackStore;
use farmem_runtime::{Config, WaitMode};
use farmem_wire::Role;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut cfg = ControllerConfig::new("127.0.0.1:0");
    cfg.granularity = 64 << 20;
    let controller = Controller::start(cfg).expect("controller");
    let _nodes: Vec<MemNode> = (0..2)
        .map(|_| {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            let addr = probe.local_addr().expect("addr").to_string();
            drop(probe);
            let mut m = MemNodeConfig::new(addr.clone(), 8 << 30);
            m.controller = Some(controller.local_addr().to_string());
            m.advertise = Some(addr);
            MemNode::start(m).expect("memnode")
        })
        .collect();
    let store = || {
        let c = ClientConfig::new("cn-bench", Role::Compute);
        Arc::new(RackStore::connect(&controller.local_addr().to_string(), c, 2).expect("connect"))
    };
    match args.first().map(String::as_str).unwrap_or("fault") {
        "fault" => {
            for (name, wait, handlers) in [
                ("poll 1h", WaitMode::Poll, 1),
                ("poll 2h", WaitMode::Poll, 2),
                ("spin 1h", WaitMode::Spin, 1),
            ] {
                let s = store();
                let opts = FaultOpts {
                    pages: 5000,
                    reads: 5000,
                    base: Config {
                        wait,
                        handlers,
                        ..Config::default()
                    },
                };
                let r = fault(&opts, s.clone(), s).expect("fault bench");
                println!(
                    "{name:8} fault p50 {:6.2} us p99 {:7.2} us | wire read4k p50 {:6.2} us | ratio {:.2}",
                    r.fault_us_p50, r.fault_us_p99, r.wire_read4k_us_p50, r.fault_ratio
                );
            }
        }
        "kona" => {
            let mib: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(256);
            let s = store();
            let opts = KonaOpts {
                rounds: 1,
                warm_bytes: 0,
                threads: 1,
                region_bytes: mib << 20,
                local_fraction: 0.5,
                base: Config::default(),
            };
            let r = kona(&opts, s.clone(), s).expect("kona bench");
            for (m, x) in [("line", &r.line), ("page", &r.page)] {
                println!(
                    "{m}: {:.2} s, {} B written back, {} evicted, {} faults",
                    x.seconds, x.bytes_written_back, x.pages_evicted, x.faults
                );
                println!(
                    "  fault latency {:?}\n  stages {:?}",
                    x.stats.fault_latency, x.stats.stages
                );
            }
            println!(
                "speedup {:.2}, writeback_reduction {:.1}",
                r.speedup, r.writeback_reduction
            );
        }
        other => eprintln!("unknown benchmark `{other}` (fault, kona)"),
    }
}
