//! A controller and two memory nodes in-process on loopback, driven through
//! the client library as a compute node would.

mod common;

use common::{GIB, Rack, TOKEN, checksum, controller_config};

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use farmem_controller::{Controller, ControllerConfig};
use farmem_memnode::{MemNode, MemNodeConfig};
use farmem_net::{ClientConfig, Cluster, NetError};
use farmem_wire::{ErrorCode, Placement, Role};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, RngCore, SeedableRng};

#[test]
fn a_gib_written_at_every_granularity_reads_back_identically() {
    let rack = Rack::start(2, Duration::from_secs(5));
    let a = rack.client("cn-a");
    let extents = a.allocate(GIB, Placement::Default).unwrap();
    assert_eq!(extents.iter().map(|e| e.len).sum::<u64>(), GIB);
    let nodes: std::collections::BTreeSet<u32> = extents.iter().map(|e| e.node).collect();
    assert_eq!(
        nodes.len(),
        2,
        "round-robin placement spreads over both nodes: {extents:?}"
    );

    // A shadow of what the remote memory should hold, addressed by offset
    // into the concatenation of our extents.
    let total = GIB as usize;
    let mut shadow = vec![0u8; total];
    let mut rng = SmallRng::seed_from_u64(42);
    rng.fill_bytes(&mut shadow);
    let addr_of = |off: usize| -> u64 {
        let mut off = off as u64;
        for e in &extents {
            if off < e.len {
                return e.base + off;
            }
            off -= e.len;
        }
        unreachable!("offset inside the allocation")
    };

    // 2 MiB clusters fill everything (extents are 128 MiB aligned multiples).
    const CLUSTER: usize = 2 << 20;
    for off in (0..total).step_by(CLUSTER) {
        a.write(addr_of(off), &shadow[off..off + CLUSTER]).unwrap();
    }
    // Then random overwrites at the line, sub-block and page granularities.
    for &size in &[64usize, 512, 4096, 64 << 10] {
        for _ in 0..2000 {
            let off = rng.gen_range(0..total / size) * size;
            rng.fill_bytes(&mut shadow[off..off + size]);
            a.write(addr_of(off), &shadow[off..off + size]).unwrap();
        }
    }
    // And cache lines through log batches.
    for _ in 0..20 {
        let lines: Vec<(u64, [u8; 64])> = (0..500)
            .map(|_| {
                let off = rng.gen_range(0..total / 64) * 64;
                rng.fill_bytes(&mut shadow[off..off + 64]);
                (addr_of(off), shadow[off..off + 64].try_into().unwrap())
            })
            .collect();
        // Later records for the same line win, as in the shadow.
        a.write_lines(&lines).unwrap();
    }

    // Read it all back with a fresh client of the same name (the runtime's
    // restart case), in 4 MiB reads.
    let b = rack.client("cn-a");
    b.adopt(extents.clone()).unwrap();
    let mut back = vec![0u8; total];
    const READ: usize = 4 << 20;
    for off in (0..total).step_by(READ) {
        // Reads never cross an extent: extents are multiples of 4 MiB.
        b.read(addr_of(off), &mut back[off..off + READ]).unwrap();
    }
    assert_eq!(checksum(&back), checksum(&shadow));
    assert!(back == shadow);

    let stats: Vec<farmem_memnode::MemNodeStats> =
        rack.memnodes.iter().map(|m| m.stats()).collect();
    assert_eq!(stats.iter().map(|s| s.log_lines).sum::<u64>(), 20 * 500);
    assert!(stats.iter().all(|s| s.refused_not_owner == 0));
}

#[test]
fn another_client_cannot_touch_my_extents() {
    let rack = Rack::start(2, Duration::from_secs(5));
    let a = rack.client("cn-a");
    let extents = a.allocate(256 << 20, Placement::Default).unwrap();
    a.write(extents[0].base, &[7u8; 4096]).unwrap();

    let intruder = rack.client("cn-b");
    // cn-a's capabilities are no good to cn-b (see tests/auth.rs): it
    // tries without them.
    let bare: Vec<_> = extents
        .iter()
        .map(|e| farmem_wire::Extent {
            cap: None,
            ..e.clone()
        })
        .collect();
    intruder.adopt(bare).unwrap();
    let mut buf = [0u8; 4096];
    let read = intruder.read(extents[0].base, &mut buf);
    assert!(
        matches!(
            read,
            Err(NetError::Remote {
                code: ErrorCode::NotOwner,
                ..
            })
        ),
        "{read:?}"
    );
    let write = intruder.write(extents[0].base, &[0u8; 64]);
    assert!(
        matches!(
            write,
            Err(NetError::Remote {
                code: ErrorCode::NotOwner,
                ..
            })
        ),
        "{write:?}"
    );
    let log = intruder.write_lines(&[(extents[0].base, [1u8; 64])]);
    assert!(
        matches!(
            log,
            Err(NetError::Remote {
                code: ErrorCode::NotOwner,
                ..
            })
        ),
        "{log:?}"
    );
    // The owner's data is untouched and the intruder cannot release it either.
    a.read(extents[0].base, &mut buf).unwrap();
    assert_eq!(buf, [7u8; 4096]);
    assert!(
        intruder
            .controller()
            .unwrap()
            .release(extents[0].base, extents[0].len)
            .is_err()
    );
    let refused: u64 = rack
        .memnodes
        .iter()
        .map(|m| m.stats().refused_not_owner)
        .sum();
    assert_eq!(refused, 3);

    // Released memory is no longer the owner's either.
    for e in &extents {
        a.release(e.base, e.len).unwrap();
    }
    let stats = rack.controller.stats();
    assert_eq!(stats.granted_bytes, 0);
    // The next owner of that memory finds it zeroed, not the last owner's bytes.
    let heir = rack.client("cn-c");
    let inherited = heir.allocate(256 << 20, Placement::Default).unwrap();
    assert!(
        inherited.iter().any(|e| e.base == extents[0].base),
        "{inherited:?}"
    );
    heir.read(extents[0].base, &mut buf).unwrap();
    assert_eq!(buf, [0u8; 4096]);
    let b2 = rack.client("cn-a");
    b2.adopt(extents.clone()).unwrap();
    assert!(matches!(
        b2.read(extents[0].base, &mut buf),
        Err(NetError::Remote {
            code: ErrorCode::NotOwner,
            ..
        })
    ));
}

#[test]
fn garbage_and_oversized_frames_close_only_their_connection() {
    let rack = Rack::start(1, Duration::from_secs(5));
    let a = rack.client("cn-a");
    let extents = a.allocate(128 << 20, Placement::Default).unwrap();
    let addr = extents[0].base;
    a.write(addr, b"still here").unwrap();
    let memnode = rack.memnodes[0].addr().to_string();

    // Garbage before any handshake.
    let mut garbage = TcpStream::connect(&memnode).unwrap();
    garbage.write_all(&[0xff; 64]).unwrap();
    assert_closed(&mut garbage);

    // A header claiming a 4 GiB frame.
    let mut liar = TcpStream::connect(&memnode).unwrap();
    let mut header = [0u8; 16];
    header[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    header[4] = 0x01;
    liar.write_all(&header).unwrap();
    assert_closed(&mut liar);

    // Every other connection keeps being served.
    let mut buf = [0u8; 10];
    a.read(addr, &mut buf).unwrap();
    assert_eq!(&buf, b"still here");
    // Both were cut off during the handshake.
    assert_eq!(rack.memnodes[0].stats().auth_failures, 2);
}

#[test]
fn unknown_opcode_after_handshake_is_answered_and_isolated() {
    let rack = Rack::start(1, Duration::from_secs(5));
    let a = rack.client("cn-a");
    let extents = a.allocate(128 << 20, Placement::Default).unwrap();
    let memnode = rack.memnodes[0].addr().to_string();
    let mut raw = handshaken_socket(&memnode, "cn-a");
    let mut frame = Vec::new();
    farmem_wire::encode_frame(&mut frame, 0x5e, 9, |b| b.extend_from_slice(&[1, 2, 3]));
    raw.write_all(&frame).unwrap();
    // The node says why, then closes.
    let mut reply = [0u8; 16];
    raw.read_exact(&mut reply).unwrap();
    assert_eq!(reply[4], farmem_wire::Op::Error as u8);
    assert_closed(&mut raw);

    let mut raw = handshaken_socket(&memnode, "cn-a");
    let mut frame = Vec::new();
    farmem_wire::encode_frame(&mut frame, farmem_wire::Op::Read as u8, 3, |b| {
        b.extend_from_slice(&[1, 2])
    });
    raw.write_all(&frame).unwrap();
    raw.read_exact(&mut reply).unwrap();
    assert_eq!(reply[4], farmem_wire::Op::Error as u8);
    assert_closed(&mut raw);

    a.write(extents[0].base, &[1u8; 64]).unwrap();
    assert_eq!(rack.memnodes[0].stats().protocol_errors, 2);
}

#[test]
fn a_wrong_token_is_refused_without_revealing_it() {
    let rack = Rack::start(1, Duration::from_secs(5));
    let ctl = rack.controller.local_addr().to_string();
    let wrong = ClientConfig::new("cn-a", Role::Compute).with_token(b"guess".to_vec());
    let err = Cluster::connect(&ctl, wrong, 1).unwrap_err();
    assert!(matches!(err, NetError::Auth(_)), "{err}");
}

#[test]
fn a_silent_memnode_is_marked_down_and_gets_no_new_grants() {
    let mut rack = Rack::start(2, Duration::from_millis(300));
    let gone = rack.memnodes[1].node_id();
    rack.memnodes[1].shutdown();
    let deadline = Instant::now() + Duration::from_secs(10);
    while rack
        .controller
        .nodes()
        .iter()
        .any(|n| n.node == gone && n.up)
    {
        assert!(Instant::now() < deadline, "node never marked down");
        std::thread::sleep(Duration::from_millis(50));
    }
    let a = rack.client("cn-a");
    let extents = a.allocate(512 << 20, Placement::Default).unwrap();
    assert!(extents.iter().all(|e| e.node != gone), "{extents:?}");
}

#[test]
fn controller_state_survives_a_restart() {
    let dir = std::env::temp_dir().join(format!("farmem-ctl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state.json");
    let _ = std::fs::remove_file(&state);
    let mut cfg = ControllerConfig::new("127.0.0.1:0");
    cfg.state = Some(farmem_controller::StateSpec::File(state.clone()));
    let controller = Controller::start(cfg.clone()).unwrap();
    let ctl = controller.local_addr().to_string();
    let mut m = MemNodeConfig::new("127.0.0.1:0", 4 * GIB);
    m.controller = Some(ctl.clone());
    let memnode = MemNode::start(m).unwrap();
    let a = Cluster::connect(&ctl, ClientConfig::new("cn-a", Role::Compute), 1).unwrap();
    let extents = a.allocate(384 << 20, Placement::Default).unwrap();
    a.write(extents[0].base + 4096, b"persistent").unwrap();
    let before = controller.stats();
    drop(a);
    drop(controller);

    // Same port, same state file.
    cfg.listen = ctl.clone();
    let controller = Controller::start(cfg).unwrap();
    assert_eq!(controller.stats().granted_bytes, before.granted_bytes);
    assert_eq!(controller.nodes().len(), 1);
    let a = Cluster::connect(&ctl, ClientConfig::new("cn-a", Role::Compute), 1).unwrap();
    // The old grants are still ours: the next allocation lands after them.
    let more = a.allocate(128 << 20, Placement::Default).unwrap();
    assert!(more.iter().all(|e| {
        extents
            .iter()
            .all(|o| e.base >= o.base + o.len || e.base + e.len <= o.base)
    }));
    a.adopt(extents.clone()).unwrap();
    let mut buf = [0u8; 10];
    a.read(extents[0].base + 4096, &mut buf).unwrap();
    assert_eq!(&buf, b"persistent");
    drop(memnode);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_alloc_sent_again_gets_its_first_answer_even_from_a_restarted_controller() {
    let dir = scratch("alloc-again");
    let mut rack = Rack::with_state_in(&dir, 2);
    let ctl = rack.controller_addr();
    let first = alloc_request(&ctl, 0x51);
    let granted = rack.controller.stats().granted_bytes;
    assert_eq!(granted, 512 << 20);
    // The reply was lost: the same request again, on a new connection.
    assert_eq!(
        alloc_request(&ctl, 0x51),
        first,
        "the first answer, capabilities and all"
    );
    assert_eq!(rack.controller.stats().granted_bytes, granted);
    // Another request is another grant.
    let other = alloc_request(&ctl, 0x52);
    assert_ne!(other[0].base, first[0].base);
    assert_eq!(rack.controller.stats().granted_bytes, 2 * granted);
    // A controller that took over from the saved state answers the same.
    rack.restart_controller();
    assert_eq!(alloc_request(&ctl, 0x51), first);
    assert_eq!(rack.controller.stats().granted_bytes, 2 * granted);
    // What it names is usable: the memory nodes were told again.
    let client = ClientConfig::new("cn-again", Role::Compute).with_token(TOKEN);
    let a = Cluster::connect(&ctl, client, 1).unwrap();
    a.adopt(first.clone()).unwrap();
    a.write(first[0].base, b"granted once").unwrap();
    let mut back = [0u8; 12];
    a.read(first[0].base, &mut back).unwrap();
    assert_eq!(&back, b"granted once");
    drop(rack);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn adjacent_grants_resent_as_one_keep_each_capability_good() {
    // One node: a client's two allocations are adjacent there, and the
    // controller's table merges them; a restarted controller re-sends
    // them to the node as one grant.
    let dir = scratch("merged-resend");
    let mut rack = Rack::with_state_in(&dir, 1);
    let a = rack.client("cn-merged");
    let first = a.allocate(128 << 20, Placement::Default).unwrap();
    let second = a.allocate(128 << 20, Placement::Default).unwrap();
    assert_eq!(first[0].base + first[0].len, second[0].base, "adjacent");
    let grants_before = rack.memnodes[0].stats().grants_received;
    rack.restart_controller();
    // The node registers again and is told its grants once more.
    let start = Instant::now();
    while rack.memnodes[0].stats().grants_received == grants_before {
        assert!(start.elapsed() < Duration::from_secs(20), "never re-sent");
        std::thread::sleep(Duration::from_millis(20));
    }
    for e in first.iter().chain(&second) {
        a.write(e.base + 4096, b"each its own").unwrap();
        let mut back = [0u8; 12];
        a.read(e.base + 4096, &mut back).unwrap();
        assert_eq!(&back, b"each its own");
    }
    drop(rack);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_grant_a_dead_node_cannot_take_is_placed_on_another() {
    // The controller has not yet found the node silent (30 s): it places
    // grants there, the node does not take them, and they go elsewhere.
    let mut rack = Rack::start(2, Duration::from_secs(30));
    let dead = rack.memnodes[1].node_id();
    rack.kill(dead);
    let a = rack.client("cn-elsewhere");
    for _ in 0..4 {
        let extents = a.allocate(128 << 20, Placement::RoundRobin).unwrap();
        assert!(extents.iter().all(|e| e.node != dead), "{extents:?}");
        a.write(extents[0].base, b"placed").unwrap();
    }
    let nodes = rack.controller.nodes();
    assert!(nodes.iter().any(|n| n.node == dead && !n.up), "{nodes:?}");
}

#[test]
fn a_client_carries_on_with_its_restarted_controller() {
    let dir = scratch("ctl-carries-on");
    let mut rack = Rack::with_state_in(&dir, 1);
    let a = rack.client("cn-carries-on");
    let first = a.allocate(128 << 20, Placement::Default).unwrap();
    a.write(first[0].base, b"before").unwrap();
    rack.restart_controller();
    // The same client, its controller connection broken: it dials again,
    // proves its name, and is granted more.
    let more = a.allocate(128 << 20, Placement::Default).unwrap();
    assert_ne!(more[0].base, first[0].base);
    assert_eq!(rack.controller.stats().granted_bytes, 256 << 20);
    let mut back = [0u8; 6];
    a.read(first[0].base, &mut back).unwrap();
    assert_eq!(&back, b"before");
    drop(rack);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Asks the controller at `ctl` for 256 MiB in two copies as `cn-again`,
/// naming the request `request`, on a connection of its own; retries
/// while the controller still holds the name for the last one.
fn alloc_request(ctl: &str, request: u64) -> Vec<farmem_wire::Extent> {
    use farmem_wire::Msg;
    let client = ClientConfig::new("cn-again", Role::Compute).with_token(TOKEN);
    let ask = Msg::Alloc {
        size: 256 << 20,
        placement: Placement::Default,
        replicas: 2,
        parity: 0,
        request,
    };
    let start = Instant::now();
    loop {
        let conn = farmem_net::Connection::connect(ctl, &client).unwrap();
        match conn.call(&ask).unwrap().msg() {
            Ok(Msg::AllocOk { extents }) => return extents,
            Err(NetError::Remote {
                code: ErrorCode::Unauthorized,
                ..
            }) if start.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            other => panic!("{other:?}"),
        }
    }
}

fn handshaken_socket(addr: &str, name: &str) -> TcpStream {
    use farmem_wire::{Msg, PROTOCOL_VERSION, auth};
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let nonce = [9u8; 16];
    let mut out = Vec::new();
    Msg::Hello {
        version: PROTOCOL_VERSION,
        role: Role::Compute,
        name,
        nonce,
    }
    .encode(0, &mut out);
    s.write_all(&out).unwrap();
    let mut body = Vec::new();
    let h = farmem_net::read_frame(&mut s, &mut body, 4096).unwrap();
    let Msg::Challenge {
        nonce: server_nonce,
        ..
    } = Msg::decode(h.op, &body).unwrap()
    else {
        panic!("no challenge")
    };
    out.clear();
    Msg::Auth {
        proof: auth::client_proof(
            &auth::role_key(TOKEN, Role::Compute),
            &nonce,
            &server_nonce,
            name,
        ),
    }
    .encode(0, &mut out);
    s.write_all(&out).unwrap();
    let h = farmem_net::read_frame(&mut s, &mut body, 4096).unwrap();
    assert!(matches!(
        Msg::decode(h.op, &body).unwrap(),
        Msg::Welcome { .. }
    ));
    s
}

fn assert_closed(s: &mut TcpStream) {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => continue, // an Error frame explaining why
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) => panic!("connection not closed: {e}"),
        }
    }
}

#[test]
fn a_restarted_standalone_memnode_never_serves_zeros_for_old_data() {
    let mut node = MemNode::start(MemNodeConfig::new("127.0.0.1:0", GIB)).unwrap();
    let addr = node.addr().to_string();
    let client =
        Cluster::standalone(&addr, GIB, ClientConfig::new("cn-a", Role::Compute), 1).unwrap();
    client.write(4096, b"before").unwrap();
    node.shutdown();
    drop(node);
    // Same address, fresh (empty) memory, a new incarnation.
    let _node = MemNode::start(MemNodeConfig::new(addr.clone(), GIB)).unwrap();
    let mut buf = [9u8; 6];
    // The old connection is found dead by the first request...
    let first = client.read(4096, &mut buf);
    assert!(first.as_ref().is_err_and(|e| e.is_transient()), "{first:?}");
    // ...and the next reaches the restarted node, which is refused for
    // good: what it holds now is not what we wrote.
    for _ in 0..3 {
        match client.read(4096, &mut buf) {
            Err(NetError::NodeLost { addr: a, held, .. }) => {
                assert_eq!(a, addr);
                assert_eq!(held, GIB);
            }
            other => panic!("a restarted node must be refused, got {other:?} ({buf:?})"),
        }
    }
    assert_eq!(buf, [9u8; 6], "nothing was copied out");
}

#[test]
fn a_memnode_restarted_in_a_rack_refuses_its_lost_grants_until_released() {
    let mut rack = Rack::start(2, Duration::from_secs(5));
    let a = rack.client("cn-a");
    let extents = a.allocate(256 << 20, Placement::Default).unwrap();
    let pattern: Vec<u8> = (0..8192u32).map(|i| (i * 13) as u8).collect();
    for e in &extents {
        a.write(e.base, &pattern).unwrap();
    }
    // Restart the node holding the first extent, on the same address.
    let victim = rack
        .memnodes
        .iter()
        .position(|m| m.node_id() == extents[0].node)
        .unwrap();
    let addr = rack.memnodes[victim].addr().to_string();
    let mut old = rack.memnodes.remove(victim);
    old.shutdown();
    drop(old);
    let mut cfg = MemNodeConfig::new(addr.clone(), 64 * GIB);
    cfg.controller = Some(rack.controller.local_addr().to_string());
    cfg.token = TOKEN.to_vec();
    cfg.heartbeat = Duration::from_millis(50);
    rack.memnodes.push(MemNode::start(cfg).unwrap());
    let lost: u64 = extents
        .iter()
        .filter(|e| e.node == extents[0].node)
        .map(|e| e.len)
        .sum();
    let start = Instant::now();
    while rack.controller.stats().lost_bytes != lost {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{:?}",
            rack.controller.stats()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The client that wrote it learns the node restarted...
    let mut buf = vec![0u8; pattern.len()];
    let err = loop {
        match a.read(extents[0].base, &mut buf) {
            Err(e) if e.is_transient() => continue,
            other => break other.unwrap_err(),
        }
    };
    assert!(matches!(err, NetError::NodeLost { .. }), "{err}");
    // ...and, once the controller re-sent the grant as lost, a fresh
    // connection under its name is refused by the node itself: never zeros.
    let start = Instant::now();
    while rack.memnodes.last().unwrap().stats().lost_bytes != lost {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the grant was never re-sent"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let b = rack.client("cn-a");
    b.adopt(a.extents()).unwrap();
    match b.read(extents[0].base, &mut buf) {
        Err(NetError::Remote {
            code: ErrorCode::Lost,
            message,
        }) => assert!(message.contains(&addr), "{message}"),
        other => panic!("a lost range must be refused, got {other:?}"),
    }
    // After that refusal the client uses no copy on that node again.
    let again = b.read(extents[0].base, &mut buf);
    assert!(matches!(again, Err(NetError::NodeLost { .. })), "{again:?}");
    let st = rack.memnodes.last().unwrap().stats();
    assert_eq!(st.lost_bytes, lost, "{st:?}");
    assert!(st.refused_lost >= 1, "{st:?}");
    // The other node's data is intact.
    if let Some(e) = extents.iter().find(|e| e.node != extents[0].node) {
        b.read(e.base, &mut buf).unwrap();
        assert_eq!(buf, pattern);
    }
    // Releasing the lost range frees it for good.
    for e in extents.iter().filter(|e| e.node == extents[0].node) {
        a.release(e.base, e.len).unwrap();
    }
    assert_eq!(rack.controller.stats().lost_bytes, 0);
}

#[test]
fn a_killed_memnode_is_declared_down_after_the_deadline() {
    let mut node = MemNode::start(MemNodeConfig::new("127.0.0.1:0", GIB)).unwrap();
    let addr = node.addr().to_string();
    let mut cfg = ClientConfig::new("cn-a", Role::Compute);
    cfg.fail_after = Duration::from_millis(300);
    let client = Cluster::standalone(&addr, GIB, cfg, 1).unwrap();
    client.write(0, b"data").unwrap();
    node.shutdown();
    drop(node);
    let start = Instant::now();
    let mut buf = [0u8; 4];
    let err = loop {
        match client.read(0, &mut buf) {
            Err(e) if e.is_transient() => std::thread::sleep(Duration::from_millis(10)),
            other => break other.unwrap_err(),
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never declared down"
        );
    };
    match err {
        NetError::NodeDown { addr: a, held, .. } => {
            assert_eq!(a, addr);
            assert_eq!(held, GIB);
        }
        other => panic!("expected the node declared down, got {other}"),
    }
}

#[test]
fn a_silent_clients_lease_runs_out_and_a_renewed_one_does_not() {
    let rack = Rack::start(2, Duration::from_millis(400));
    let kept = rack.client("cn-kept");
    let dead = rack.client("cn-dead");
    let lost = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = lost.clone();
    let keeper = kept
        .keep_lease(Duration::from_secs(2), move |_| {
            flag.store(true, std::sync::atomic::Ordering::SeqCst)
        })
        .unwrap();
    let mine = kept.allocate(256 << 20, Placement::Default).unwrap();
    let theirs = dead.allocate(256 << 20, Placement::Default).unwrap();
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    kept.write(mine[0].base, &pattern).unwrap();
    dead.write(theirs[0].base, &pattern).unwrap();
    // The dead client takes a lease once and is never heard from again
    // (long enough to be seen held on a loaded machine).
    dead.controller()
        .unwrap()
        .lease(Duration::from_secs(1))
        .unwrap();
    assert_eq!(rack.controller.stats().leases, 2);

    // Wait for the reclaim, and past two of the kept lease's lengths.
    let start = Instant::now();
    while rack.controller.stats().grants_reclaimed == 0 || start.elapsed() < Duration::from_secs(4)
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the silent client's grants were never reclaimed: {:?}",
            rack.controller.stats()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let st = rack.controller.stats();
    assert_eq!(st.bytes_reclaimed, 256 << 20, "{st:?}");
    assert_eq!(st.granted_bytes, 256 << 20, "{st:?}");
    assert_eq!(st.leases, 1, "{st:?}");
    // The kept client's memory is still its own, byte for byte; the dead
    // one's is revoked on the memory node.
    let mut buf = vec![0u8; 4096];
    kept.read(mine[0].base, &mut buf).unwrap();
    assert_eq!(buf, pattern);
    match dead.read(theirs[0].base, &mut buf) {
        Err(NetError::Remote { code, .. }) => assert_eq!(code, ErrorCode::NotOwner),
        other => panic!("a revoked range must be refused, got {other:?}"),
    }
    // A client whose lease ran out is told so, not handed more memory.
    let refused = |r: Result<(), NetError>| {
        matches!(
            r,
            Err(NetError::Remote {
                code: ErrorCode::NotOwner,
                ..
            })
        )
    };
    assert!(refused(
        dead.controller().unwrap().lease(Duration::from_secs(1))
    ));
    assert!(refused(
        dead.allocate(128 << 20, Placement::Default).map(|_| ())
    ));
    assert!(!lost.load(std::sync::atomic::Ordering::SeqCst));
    // Dropping the keeper ends the lease; the grants stay until released.
    drop(keeper);
    assert_eq!(rack.controller.stats().leases, 0);
    assert_eq!(rack.controller.stats().granted_bytes, 256 << 20);
}

#[test]
fn a_session_closed_while_idle_reopens_with_its_capabilities() {
    let mut rack = Rack::start(0, Duration::from_secs(5));
    let mut m = MemNodeConfig::new("127.0.0.1:0", GIB);
    m.controller = Some(rack.controller_addr());
    m.token = TOKEN.to_vec();
    m.heartbeat = Duration::from_millis(50);
    m.idle_timeout = Some(Duration::from_millis(200));
    rack.memnodes.push(MemNode::start(m).unwrap());
    let a = rack.client("cn-idle");
    let e = a.allocate(64 << 20, Placement::Default).unwrap()[0].clone();
    let pattern: Vec<u8> = (0..(1u32 << 20)).map(|i| (i * 7 + 3) as u8).collect();
    a.write(e.base, &pattern).unwrap();
    let accepted_before = rack.memnodes[0].stats().caps_accepted;
    // Idle past the node's timeout (and the client's idle check): every
    // session is closed, and the next requests go out on reopened ones.
    std::thread::sleep(Duration::from_millis(1500));
    let mut back = vec![0u8; pattern.len()];
    a.read(e.base, &mut back).unwrap();
    assert!(back == pattern, "read back after the sessions reopened");
    a.write(e.base + 4096, &pattern[..4096]).unwrap();
    let st = rack.memnodes[0].stats();
    assert!(
        st.caps_accepted > accepted_before,
        "the reopened sessions presented their capabilities again: {st:?}"
    );
}

#[test]
fn a_controller_session_closed_while_idle_reopens_proving_its_name() {
    let mut cfg = controller_config(Duration::from_secs(5));
    cfg.idle_timeout = Some(Duration::from_millis(200));
    let rack = Rack::with(cfg, 1, false);
    let a = rack.client("cn-idle-ctl");
    a.allocate(128 << 20, Placement::Default).unwrap();
    // The lease keeper's session speaks for the name all along (it renews
    // more often than the idle timeout): the reopened one must prove it.
    let _lease = a.keep_lease(Duration::from_millis(400), |_| {}).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let more = a.allocate(128 << 20, Placement::Default).unwrap();
    a.write(more[0].base, b"after idle").unwrap();
    assert_eq!(rack.controller.stats().granted_bytes, 256 << 20);
}

#[test]
fn runs_of_lines_go_as_plain_writes_and_the_last_of_a_line_wins() {
    let rack = Rack::start(1, Duration::from_secs(5));
    let a = rack.client("cn-runs");
    let e = a.allocate(64 << 20, Placement::Default).unwrap()[0].clone();
    let mut expected = vec![0u8; 1 << 20];
    a.write(e.base, &expected).unwrap();
    let mut rng = SmallRng::seed_from_u64(17);
    let mut lines: Vec<(u64, [u8; 64])> = Vec::new();
    let line_at = |off: usize, rng: &mut SmallRng, expected: &mut Vec<u8>| {
        let mut l = [0u8; 64];
        rng.fill_bytes(&mut l);
        expected[off..off + 64].copy_from_slice(&l);
        (e.base + off as u64, l)
    };
    // A page rewritten whole, a run of 20 lines, and 10 lines apart.
    for k in 0..64 {
        lines.push(line_at(8 * 4096 + k * 64, &mut rng, &mut expected));
    }
    for k in 0..20 {
        lines.push(line_at(20 * 4096 + 640 + k * 64, &mut rng, &mut expected));
    }
    for k in 0..10 {
        lines.push(line_at(40 * 4096 + k * 256, &mut rng, &mut expected));
    }
    // Lines given twice: one inside the page, one apart; the later wins.
    lines.push(line_at(8 * 4096 + 5 * 64, &mut rng, &mut expected));
    lines.push(line_at(40 * 4096 + 256, &mut rng, &mut expected));
    lines.shuffle(&mut rng);
    // Shuffling may put a twice-given line's later value first: keep the
    // order given for those two, as the caller meant it.
    let later = |addr: u64, lines: &[(u64, [u8; 64])]| lines.iter().rposition(|l| l.0 == addr);
    for off in [8 * 4096 + 5 * 64, 40 * 4096 + 256] {
        let addr = e.base + off as u64;
        let last = later(addr, &lines).unwrap();
        let want: [u8; 64] = expected[off..off + 64].try_into().unwrap();
        let holds = lines
            .iter()
            .position(|l| l.0 == addr && l.1 == want)
            .unwrap();
        lines.swap(last, holds);
    }
    let before = rack.memnodes[0].stats();
    a.write_lines(&lines).unwrap();
    let after = rack.memnodes[0].stats();
    assert_eq!(
        after.writes - before.writes,
        2,
        "the page and the run of 20"
    );
    assert_eq!(after.log_lines - before.log_lines, 10, "the lines apart");
    // Each line once: the first value of a twice-given line is not sent.
    assert_eq!(
        after.bytes_written - before.bytes_written,
        (64 + 20 + 10) * 64
    );
    let mut back = vec![0u8; expected.len()];
    a.read(e.base, &mut back).unwrap();
    assert_eq!(checksum(&back), checksum(&expected));
}

#[test]
fn nothing_is_granted_on_a_restarted_node_before_it_registers_again() {
    let mut rack = Rack::start(1, Duration::from_secs(30));
    let a = rack.client("cn-early");
    a.allocate(64 << 20, Placement::Default).unwrap();
    // The node restarts on its address but has not registered yet (here:
    // never), while the controller still counts it up.
    let addr = rack.memnodes[0].addr().to_string();
    rack.memnodes.remove(0).shutdown();
    let mut m = MemNodeConfig::new(addr, 64 * GIB);
    m.token = TOKEN.to_vec();
    let _unregistered = MemNode::start(m).unwrap();
    let granted = rack.controller.stats().granted_bytes;
    let err = a.allocate(64 << 20, Placement::Default).unwrap_err();
    assert!(
        err.to_string().contains("has not registered again"),
        "{err}"
    );
    assert_eq!(
        rack.controller.stats().granted_bytes,
        granted,
        "the refused grant is not kept"
    );
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("farmem-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn an_unwritable_state_file_refuses_to_start_naming_it() {
    let dir = scratch("unwritable-state");
    // Its parent is a regular file: not even root can write there.
    let file = dir.join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let state = file.join("state.json");
    let mut cfg = controller_config(Duration::from_secs(5));
    cfg.state = Some(farmem_controller::StateSpec::File(state.clone()));
    let err = match Controller::start(cfg) {
        Ok(_) => panic!("a controller that cannot keep its state must not start"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains(&state.display().to_string()), "{err}");
    assert!(err.contains("os error"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn is_not_owner<T: std::fmt::Debug>(r: Result<T, NetError>) -> bool {
    matches!(
        r,
        Err(NetError::Remote {
            code: ErrorCode::NotOwner,
            ..
        })
    )
}

#[test]
fn leases_outlive_a_controller_restart_so_a_client_dead_meanwhile_loses_its_grants() {
    let dir = scratch("lease-state");
    let mut cfg = controller_config(Duration::from_millis(400));
    cfg.state = Some(farmem_controller::StateSpec::File(dir.join("state.json")));
    let mut rack = Rack::with(cfg.clone(), 1, false);
    cfg.listen = rack.controller.local_addr().to_string();
    let kept = rack.client("cn-kept");
    let dead = rack.client("cn-dead");
    let lost = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = lost.clone();
    let keeper = kept
        .keep_lease(Duration::from_secs(2), move |_| {
            flag.store(true, std::sync::atomic::Ordering::SeqCst)
        })
        .unwrap();
    let mine = kept.allocate(256 << 20, Placement::Default).unwrap();
    let theirs = dead.allocate(256 << 20, Placement::Default).unwrap();
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 11) as u8).collect();
    kept.write(mine[0].base, &pattern).unwrap();
    dead.write(theirs[0].base, &pattern).unwrap();
    // The dead client's last word: a lease, taken just before the
    // controller goes down. It never renews it.
    dead.controller()
        .unwrap()
        .lease(Duration::from_secs(4))
        .unwrap();

    // The controller restarts from its state file, on the same address.
    rack.controller.shutdown();
    rack.controller = Controller::start(cfg.clone()).unwrap();
    let st = rack.controller.stats();
    assert_eq!((st.leases, st.granted_bytes), (2, 512 << 20), "{st:?}");
    let start = Instant::now();
    while rack.controller.stats().grants_reclaimed == 0 || start.elapsed() < Duration::from_secs(5)
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the dead client's grants were never reclaimed: {:?}",
            rack.controller.stats()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let st = rack.controller.stats();
    assert_eq!(st.bytes_reclaimed, 256 << 20, "{st:?}");
    assert_eq!((st.leases, st.granted_bytes), (1, 256 << 20), "{st:?}");
    // The renewing client keeps its memory byte for byte; the dead one's is
    // revoked on the memory node.
    let mut buf = vec![0u8; pattern.len()];
    kept.read(mine[0].base, &mut buf).unwrap();
    assert_eq!(buf, pattern);
    assert!(is_not_owner(dead.read(theirs[0].base, &mut buf)));
    assert!(!lost.load(std::sync::atomic::Ordering::SeqCst));

    // Its lapse is kept too: refused after another restart.
    rack.controller.shutdown();
    rack.controller = Controller::start(cfg).unwrap();
    assert_eq!(rack.controller.stats().leases, 1);
    let again = rack.client("cn-dead");
    let ctl = again.controller().unwrap();
    assert!(is_not_owner(ctl.lease(Duration::from_secs(1))));
    drop(keeper);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_quota_refuses_past_the_cap_and_accepts_within_it() {
    const MIB: u64 = 1 << 20;
    let mut cfg = controller_config(Duration::from_secs(5));
    cfg.quota = Some(512 * MIB);
    let rack = Rack::with(cfg, 2, false);
    let a = rack.client("cn-a");
    a.allocate(384 * MIB, Placement::Default).unwrap();
    // 200 MiB takes two 128 MiB granules: past the quota.
    match a.allocate(200 * MIB, Placement::Default) {
        Err(NetError::Remote {
            code: ErrorCode::NoCapacity,
            message,
        }) => {
            for part in ["cn-a", "402653184", "268435456", "536870912"] {
                assert!(message.contains(part), "{part} missing in: {message}");
            }
        }
        other => panic!("an allocation past the quota must be refused, got {other:?}"),
    }
    // Every copy counts.
    a.set_replicas(2);
    let refused = a.allocate(128 * MIB, Placement::Default);
    assert!(
        matches!(
            refused,
            Err(NetError::Remote {
                code: ErrorCode::NoCapacity,
                ..
            })
        ),
        "{refused:?}"
    );
    a.set_replicas(1);
    // Up to the quota exactly, and another client has a quota of its own.
    let last = a.allocate(128 * MIB, Placement::Default).unwrap();
    let b = rack.client("cn-b");
    b.allocate(512 * MIB, Placement::Default).unwrap();
    let st = rack.controller.stats();
    assert_eq!(
        (st.refused_quota, st.granted_bytes),
        (2, 1024 * MIB),
        "{st:?}"
    );
    // What is given back may be taken again.
    a.release(last[0].base, last[0].len).unwrap();
    a.allocate(1, Placement::Default).unwrap();
    assert_eq!(rack.controller.stats().refused_quota, 2);
}
