//! An in-process rack for the memory node's tests: a controller and memory
//! nodes on loopback, each node optionally behind a [`Gate`] that can hold
//! its traffic (a paused process, a partition) without closing anything.

#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use farmem_controller::extent::Placement as TreePlacement;
use farmem_controller::{Controller, ControllerConfig};
use farmem_memnode::{MemNode, MemNodeConfig};
use farmem_net::{ClientConfig, Cluster};
use farmem_wire::Role;

pub const GIB: u64 = 1 << 30;
pub const TOKEN: &[u8] = b"test-cluster-token";

pub struct Rack {
    pub controller: Controller,
    pub memnodes: Vec<MemNode>,
    /// The gate in front of each node started gated, by node id.
    pub gates: Vec<(u32, Gate)>,
    /// Each memory node's capacity.
    pub capacity: u64,
    /// How the controller was started, on the address it bound.
    controller_cfg: ControllerConfig,
}

impl Rack {
    /// `nodes` memory nodes of 64 GiB each, heartbeating every 50 ms.
    pub fn start(nodes: usize, heartbeat_timeout: Duration) -> Self {
        Self::with(controller_config(heartbeat_timeout), nodes, false)
    }

    /// As [`Self::start`], every node behind a gate (see [`Self::gate`]).
    pub fn gated(nodes: usize, heartbeat_timeout: Duration) -> Self {
        Self::with(controller_config(heartbeat_timeout), nodes, true)
    }

    pub fn with(cfg: ControllerConfig, nodes: usize, gated: bool) -> Self {
        Self::build(cfg, nodes, gated, 64 * GIB)
    }

    /// `nodes` memory nodes of `capacity` each, none gated.
    pub fn sized(cfg: ControllerConfig, nodes: usize, capacity: u64) -> Self {
        Self::build(cfg, nodes, false, capacity)
    }

    fn build(mut cfg: ControllerConfig, nodes: usize, gated: bool, capacity: u64) -> Self {
        let controller = Controller::start(cfg.clone()).expect("controller starts");
        cfg.listen = controller.local_addr().to_string();
        let mut rack = Self {
            controller,
            memnodes: Vec::new(),
            gates: Vec::new(),
            capacity,
            controller_cfg: cfg,
        };
        for _ in 0..nodes {
            if gated {
                let gate = Gate::bind();
                let node = rack.start_node("127.0.0.1:0", Some(gate.addr.clone()));
                gate.open_to(node.local_addr().to_string());
                rack.gates.push((node.node_id(), gate));
                rack.memnodes.push(node);
            } else {
                let node = rack.start_node("127.0.0.1:0", None);
                rack.memnodes.push(node);
            }
        }
        rack
    }

    fn start_node(&self, listen: &str, advertise: Option<String>) -> MemNode {
        let mut m = MemNodeConfig::new(listen, self.capacity);
        m.controller = Some(self.controller.local_addr().to_string());
        m.token = TOKEN.to_vec();
        m.heartbeat = Duration::from_millis(50);
        m.advertise = advertise;
        MemNode::start(m).expect("memnode starts")
    }

    pub fn controller_addr(&self) -> String {
        self.controller.local_addr().to_string()
    }

    /// A compute client named `name` with two connections per node.
    pub fn client(&self, name: &str) -> Cluster {
        let cfg = ClientConfig::new(name, Role::Compute).with_token(TOKEN);
        Cluster::connect(&self.controller_addr(), cfg, 2).expect("client connects")
    }

    /// A client declaring a node down after 300 ms of failed requests,
    /// keeping `replicas` copies of what it allocates.
    pub fn replicated_client(&self, name: &str, replicas: u8) -> Cluster {
        let mut cfg = ClientConfig::new(name, Role::Compute).with_token(TOKEN);
        cfg.fail_after = Duration::from_millis(300);
        let c = Cluster::connect(&self.controller_addr(), cfg, 2).expect("client connects");
        c.set_replicas(replicas);
        c
    }

    /// The gate in front of `node` (the rack must be [`Self::gated`]).
    pub fn gate(&self, node: u32) -> &Gate {
        &self
            .gates
            .iter()
            .find(|(id, _)| *id == node)
            .expect("a gated node")
            .1
    }

    /// `nodes` memory nodes whose controller keeps its state in a file in
    /// `dir`, so [`Self::restart_controller`] brings it back as it was.
    pub fn with_state_in(dir: &std::path::Path, nodes: usize) -> Self {
        let mut cfg = controller_config(Duration::from_secs(5));
        cfg.state = Some(farmem_controller::StateSpec::File(dir.join("state.json")));
        Self::with(cfg, nodes, false)
    }

    /// Stops the controller and starts it again on its address, from its
    /// saved state: its clients' connections break, the memory nodes
    /// register again.
    pub fn restart_controller(&mut self) {
        self.controller.shutdown();
        self.controller =
            Controller::start(self.controller_cfg.clone()).expect("controller restarts");
    }

    /// Stops memory node `node` for good; returns its address.
    pub fn kill(&mut self, node: u32) -> String {
        let i = self
            .memnodes
            .iter()
            .position(|m| m.node_id() == node)
            .expect("a running node");
        let addr = self.memnodes[i].addr().to_string();
        self.memnodes.remove(i).shutdown();
        addr
    }

    /// Stops memory node `node` and starts it again on the same address:
    /// same id, new incarnation, empty memory.
    pub fn restart(&mut self, node: u32) {
        assert!(self.gates.is_empty(), "a gate's node is not restarted");
        let addr = self.kill(node);
        let node = self.start_node(&addr, None);
        self.memnodes.push(node);
    }
}

pub fn controller_config(heartbeat_timeout: Duration) -> ControllerConfig {
    let mut cfg = ControllerConfig::new("127.0.0.1:0");
    cfg.token = TOKEN.to_vec();
    cfg.heartbeat_timeout = heartbeat_timeout;
    cfg.placement = TreePlacement::RoundRobin;
    cfg
}

/// FNV-1a, enough to compare a GiB without keeping two copies around.
pub fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf29ce484222325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

/// Repairs until a pass succeeds, as the runtime's repair thread does: a
/// pass can fail on a node only slow under load, or on a restarted one
/// the controller has not seen register yet.
pub fn repair_until_done(c: &Cluster) -> farmem_net::Repaired {
    let start = Instant::now();
    let mut done = farmem_net::Repaired::default();
    loop {
        match c.repair(0) {
            Ok(pass) => {
                done.copies += pass.copies;
                done.bytes += pass.bytes;
                if !c.needs_repair() {
                    return done;
                }
            }
            Err(e) => assert!(start.elapsed() < Duration::from_secs(30), "{e}"),
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "repair never ends"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A TCP relay in front of a memory node whose traffic can be held, both
/// ways, for every connection at once: what its clients see of a node
/// stopped with SIGSTOP or cut off by the network, which answers again,
/// memory intact, once the gate opens.
pub struct Gate {
    pub addr: String,
    listener: Option<TcpListener>,
    held: Arc<AtomicBool>,
}

impl Gate {
    fn bind() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("gate binds");
        Self {
            addr: listener.local_addr().unwrap().to_string(),
            listener: Some(listener),
            held: Arc::default(),
        }
    }

    fn open_to(&self, upstream: String) {
        let listener = self.listener.as_ref().unwrap().try_clone().unwrap();
        let held = self.held.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                for (from, to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let held = held.clone();
                    std::thread::spawn(move || relay(from, to, &held));
                }
            }
        });
    }

    /// Holds (true) or lets through (false) every byte from now on.
    pub fn hold(&self, held: bool) {
        self.held.store(held, Ordering::SeqCst);
    }
}

fn relay(mut from: TcpStream, mut to: TcpStream, held: &AtomicBool) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(5)));
    let _ = to.set_nodelay(true);
    let mut buf = vec![0u8; 64 << 10];
    loop {
        if held.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
