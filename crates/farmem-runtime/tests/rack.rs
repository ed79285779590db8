//! The runtime over a real rack: a controller and two memory nodes in this
//! process on loopback, reached through the wire protocol. One run goes
//! through a proxy that cuts every connection after a few MiB, so write-backs
//! die mid-batch again and again; nothing may be lost.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use farmem_controller::{Controller, ControllerConfig};
use farmem_memnode::{MemNode, MemNodeConfig};
use farmem_net::ClientConfig;
use farmem_runtime::remote::RackStore;
use farmem_runtime::{Config, DirtyMode, FaultPath, PAGE, Runtime};
use farmem_wire::Role;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod common;
use common::skip;

const REGION: u64 = 256 << 20;
const LOCAL: u64 = 16 << 20;

struct Rack {
    controller: Controller,
    _nodes: Vec<MemNode>,
}

/// A rack whose memory nodes advertise `advertise(i, real_addr)`.
fn rack(advertise: impl Fn(usize, String) -> String) -> Rack {
    let mut cfg = ControllerConfig::new("127.0.0.1:0");
    cfg.granularity = 64 << 20;
    let controller = Controller::start(cfg).unwrap();
    let nodes = (0..2)
        .map(|i| {
            // Bind first to learn the address, then advertise the chosen one.
            let probe = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = probe.local_addr().unwrap().to_string();
            drop(probe);
            let mut m = MemNodeConfig::new(addr.clone(), 4 << 30);
            m.controller = Some(controller.local_addr().to_string());
            m.advertise = Some(advertise(i, addr));
            MemNode::start(m).unwrap()
        })
        .collect();
    Rack {
        controller,
        _nodes: nodes,
    }
}

fn store(rack: &Rack) -> Arc<RackStore> {
    let cfg = ClientConfig::new("cn-rack", Role::Compute);
    Arc::new(RackStore::connect(&rack.controller.local_addr().to_string(), cfg, 2).unwrap())
}

fn cfg(dirty: DirtyMode, fault_path: FaultPath) -> Config {
    Config {
        local_bytes: LOCAL,
        dirty,
        fault_path,
        slab_batch: REGION,
        ..Config::default()
    }
}

/// Random writes of random lengths through the region, mirrored in `shadow`,
/// then a read-back through a fresh runtime and a fresh connection.
fn round_trip(rack: &Rack, dirty: DirtyMode, path: FaultPath, ops: usize) {
    let mut shadow = vec![0u8; REGION as usize];
    let mut rng = SmallRng::seed_from_u64(7);
    let (extents, held);
    {
        let store = store(rack);
        let rt = Runtime::new(cfg(dirty, path), store.clone(), store.clone()).unwrap();
        let region = rt.region(REGION).unwrap();
        let mut buf = [0u8; 256];
        for _ in 0..ops {
            let len = rng.gen_range(1..=256);
            let at = rng.gen_range(0..REGION as usize - len);
            rng.fill(&mut buf[..len]);
            region.write_at(at, &buf[..len]).unwrap();
            shadow[at..at + len].copy_from_slice(&buf[..len]);
        }
        region.sync().unwrap();
        let st = rt.stats();
        eprintln!("{dirty:?} {path}: {}", serde_json::to_string(&st).unwrap());
        if path == FaultPath::Signal {
            assert!(
                st.pages_fetched > st.faults_handed_off,
                "most faults must be served in their own thread: {st:?}"
            );
        }
        assert!(
            st.pages_evicted_dirty > 0,
            "the workload must overflow the cache"
        );
        extents = region.extents().unwrap();
        held = store.cluster().extents();
    }
    let store = store(rack);
    // The first runtime's extents, with the capabilities issued for them.
    store.cluster().adopt(held).unwrap();
    let rt = Runtime::new(cfg(dirty, path), store.clone(), store.clone()).unwrap();
    let region = rt.region_over(&extents).unwrap();
    let mut page = vec![0u8; PAGE as usize];
    let mut bad = 0;
    for (p, want) in shadow.chunks(PAGE as usize).enumerate() {
        region.read_at(p * PAGE as usize, &mut page).unwrap();
        bad += usize::from(page != want);
    }
    assert_eq!(bad, 0, "pages read back differ from what was written");
}

#[test]
fn pages_written_through_the_runtime_read_back_from_memory_nodes() {
    if skip() {
        return;
    }
    let rack = rack(|_, addr| addr);
    // Each op is about one fault (random over 16 times the cache), so 80 k
    // ops evict the cache 20 times over; more only made the suite longer.
    round_trip(&rack, DirtyMode::Line, FaultPath::Thread, 80_000);
    round_trip(&rack, DirtyMode::Page, FaultPath::Thread, 30_000);
    // Fetched by the faulting thread through the nodes' page readers.
    round_trip(&rack, DirtyMode::Line, FaultPath::Signal, 80_000);
}

#[test]
fn connections_cut_mid_batch_lose_nothing() {
    if skip() {
        return;
    }
    let cuts = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let proxies = std::sync::Mutex::new(Vec::new());
    let rack = rack(|_, real| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (cuts, stop) = (cuts.clone(), stop.clone());
        proxies.lock().unwrap().push(std::thread::spawn(move || {
            cutting_proxy(listener, real, 3 << 20, cuts, stop)
        }));
        addr
    });
    // 25 k random writes: with diff bases capped at a 256th of the
    // cache most go back as whole pages, about 100 MB a run, so the
    // proxy cuts about 30 connections a run (60 k took 90 s a run under
    // the suite's load, every message paying the proxy's two thread
    // hand-offs and every cut a reconnection).
    round_trip(&rack, DirtyMode::Line, FaultPath::Thread, 25_000);
    // Page readers die with their connections too: faults go to the
    // fillers, which reopen them.
    round_trip(&rack, DirtyMode::Line, FaultPath::Signal, 25_000);
    assert!(
        cuts.load(Ordering::Relaxed) > 0,
        "the proxy never cut a connection"
    );
    stop.store(true, Ordering::Relaxed);
}

/// Forwards connections to `real`, closing each once `budget` bytes went
/// upstream (mid-frame, as a failing link would).
fn cutting_proxy(
    listener: TcpListener,
    real: String,
    budget: u64,
    cuts: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) {
    listener.set_nonblocking(true).unwrap();
    while !stop.load(Ordering::Relaxed) {
        let client = match listener.accept() {
            Ok((c, _)) => c,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        client.set_nonblocking(false).unwrap();
        let Ok(server) = TcpStream::connect(&real) else {
            continue;
        };
        let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
        let cuts = cuts.clone();
        // Downstream: copy until either side closes.
        std::thread::spawn(move || pump(s2, c2, u64::MAX));
        std::thread::spawn(move || {
            if pump(client, server, budget) {
                cuts.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}

/// Copies `from` to `to`; true if it stopped because the budget ran out.
fn pump(mut from: TcpStream, mut to: TcpStream, budget: u64) -> bool {
    let mut buf = [0u8; 16 << 10];
    let mut sent = 0u64;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let n = n.min((budget - sent) as usize);
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        sent += n as u64;
        if sent >= budget {
            let _ = from.shutdown(std::net::Shutdown::Both);
            let _ = to.shutdown(std::net::Shutdown::Both);
            return true;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
    false
}
