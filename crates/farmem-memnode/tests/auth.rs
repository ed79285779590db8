//! Roles and client names are proven, not claimed: per-role keys at the
//! handshake, controller-signed capabilities at the memory nodes, and
//! client names bound to their sessions at the controller.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use farmem_controller::{Controller, ControllerConfig};
use farmem_memnode::{MemNode, MemNodeConfig};
use farmem_net::{ClientConfig, Cluster, Connection, NetError};
use farmem_wire::{
    Cap, ErrorCode, Extent, GrantKind, Msg, PROTOCOL_VERSION, Placement, Role, auth,
};

const GIB: u64 = 1 << 30;
const SECRET: &[u8] = b"test-cluster-secret";

struct Rack {
    controller: Controller,
    memnodes: Vec<MemNode>,
    token: Vec<u8>,
}

fn rack(nodes: usize, token: &[u8]) -> Rack {
    let mut cfg = ControllerConfig::new("127.0.0.1:0");
    cfg.token = token.to_vec();
    let controller = Controller::start(cfg).expect("controller starts");
    let ctl = controller.local_addr().to_string();
    let memnodes = (0..nodes)
        .map(|_| {
            let mut m = MemNodeConfig::new("127.0.0.1:0", 4 * GIB);
            m.controller = Some(ctl.clone());
            m.token = token.to_vec();
            m.heartbeat = Duration::from_millis(50);
            MemNode::start(m).expect("memnode starts")
        })
        .collect();
    Rack {
        controller,
        memnodes,
        token: token.to_vec(),
    }
}

impl Rack {
    fn ctl(&self) -> String {
        self.controller.local_addr().to_string()
    }

    fn cfg(&self, name: &str) -> ClientConfig {
        ClientConfig::new(name, Role::Compute).with_token(self.token.clone())
    }

    fn client(&self, name: &str) -> Cluster {
        Cluster::connect(&self.ctl(), self.cfg(name), 2).expect("client connects")
    }

    fn node_of(&self, e: &Extent) -> &MemNode {
        self.memnodes
            .iter()
            .find(|m| m.node_id() == e.node)
            .expect("extent on a node of the rack")
    }
}

fn refused<T: std::fmt::Debug>(r: Result<T, NetError>, want: ErrorCode) -> String {
    match r {
        Err(NetError::Remote { code, message }) if code == want => message,
        other => panic!("expected a {want:?} refusal, got {other:?}"),
    }
}

/// Hello, challenge and auth by hand: claims `role`, proves with `key`.
/// Returns the server's verdict (welcome or its refusal).
fn raw_handshake(addr: &str, role: Role, key: &[u8], name: &str) -> Result<(), String> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let nonce = [5u8; 16];
    let mut out = Vec::new();
    Msg::Hello {
        version: PROTOCOL_VERSION,
        role,
        name,
        nonce,
    }
    .encode(0, &mut out);
    s.write_all(&out).unwrap();
    let mut body = Vec::new();
    let h = farmem_net::read_frame(&mut s, &mut body, 4096).unwrap();
    let Ok(Msg::Challenge { nonce: theirs, .. }) = Msg::decode(h.op, &body) else {
        panic!("no challenge")
    };
    out.clear();
    Msg::Auth {
        proof: auth::client_proof(key, &nonce, &theirs, name),
    }
    .encode(0, &mut out);
    s.write_all(&out).unwrap();
    let h = farmem_net::read_frame(&mut s, &mut body, 4096).unwrap();
    match Msg::decode(h.op, &body).unwrap() {
        Msg::Welcome { .. } => Ok(()),
        Msg::Error { message, .. } => Err(message.to_string()),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn a_compute_key_cannot_pass_as_controller_or_memnode() {
    let rack = rack(1, SECRET);
    let node = rack.memnodes[0].addr().to_string();
    let compute = auth::role_key(SECRET, Role::Compute);
    assert_eq!(
        raw_handshake(&node, Role::Compute, &compute, "cn-a"),
        Ok(())
    );
    let why = raw_handshake(&node, Role::Controller, &compute, "evil").unwrap_err();
    assert!(
        why.contains("claimed role controller but holds only the compute key"),
        "{why}"
    );
    raw_handshake(&rack.ctl(), Role::MemNode, &compute, "evil").unwrap_err();
    assert_eq!(rack.memnodes[0].stats().refused_role_handshake, 1);
    assert_eq!(rack.controller.stats().refused_role_handshake, 1);
    // The secret's own key for the role passes.
    let ctl_key = auth::role_key(SECRET, Role::Controller);
    assert_eq!(
        raw_handshake(&node, Role::Controller, &ctl_key, "c"),
        Ok(())
    );

    // A client given only the compute key (what `farmem token` prints)
    // works as a compute node, and cannot even try another role.
    let key_file = auth::format_role_key(Role::Compute, &compute);
    let cfg = ClientConfig::new("cn-k", Role::Compute).with_token(key_file.clone());
    let c = Cluster::connect(&rack.ctl(), cfg, 1).unwrap();
    let e = c.allocate(128 << 20, Placement::Default).unwrap();
    c.write(e[0].base, b"by key").unwrap();
    let mut buf = [0u8; 6];
    c.read(e[0].base, &mut buf).unwrap();
    assert_eq!(&buf, b"by key");
    let as_ctl = ClientConfig::new("evil", Role::Controller).with_token(key_file);
    let err = Connection::connect(&node, &as_ctl).unwrap_err();
    assert!(err.to_string().contains("not for role controller"), "{err}");
}

#[test]
fn only_the_controller_grants_and_revokes() {
    let rack = rack(1, SECRET);
    let a = rack.client("cn-a");
    let e = a.allocate(128 << 20, Placement::Default).unwrap().remove(0);
    a.write(e.base, &[7u8; 64]).unwrap();
    let node = rack.node_of(&e).addr().to_string();
    let evil = Connection::connect(&node, &rack.cfg("evil")).unwrap();
    let grant = Msg::Grant {
        owner: "evil",
        base: e.base,
        len: e.len,
        kind: GrantKind::Fresh,
        stamp: 1,
    };
    let why = refused(
        evil.call(&grant).and_then(|r| r.done("grant")),
        ErrorCode::Unauthorized,
    );
    assert!(
        why.contains("refused `evil`") && why.contains("may not grant"),
        "{why}"
    );
    let revoke = Msg::Revoke {
        base: e.base,
        len: e.len,
    };
    refused(
        evil.call(&revoke).and_then(|r| r.done("revoke")),
        ErrorCode::Unauthorized,
    );
    // A memory node's key is no controller's either.
    let memnode = ClientConfig::new("mn", Role::MemNode).with_token(SECRET);
    let mn = Connection::connect(&node, &memnode).unwrap();
    refused(
        mn.call(&revoke).and_then(|r| r.done("revoke")),
        ErrorCode::Unauthorized,
    );
    assert_eq!(rack.memnodes[0].stats().refused_role, 3);
    let mut buf = [0u8; 64];
    a.read(e.base, &mut buf).unwrap();
    assert_eq!(buf, [7u8; 64], "the owner's bytes were not touched");
}

#[test]
fn another_session_with_my_name_cannot_use_or_release_my_memory() {
    let rack = rack(1, SECRET);
    let a = rack.client("cn-a");
    let e = a.allocate(128 << 20, Placement::Default).unwrap().remove(0);
    a.write(e.base, &[9u8; 64]).unwrap();
    // Same name, but none of the capabilities the controller gave `a`.
    let thief = rack.client("cn-a");
    thief
        .adopt(vec![Extent {
            cap: None,
            ..e.clone()
        }])
        .unwrap();
    let mut buf = [0u8; 64];
    let why = refused(thief.read(e.base, &mut buf), ErrorCode::NoCapability);
    assert!(
        why.contains("refused `cn-a`") && why.contains("no capability"),
        "{why}"
    );
    refused(thief.write(e.base, &[0u8; 64]), ErrorCode::NoCapability);
    refused(
        thief.write_lines(&[(e.base, [0u8; 64])]),
        ErrorCode::NoCapability,
    );
    assert_eq!(rack.node_of(&e).stats().refused_capability, 3);
    // Nor release it, nor end or shorten its lease, at the controller.
    let ctl = thief.controller().unwrap();
    let why = refused(ctl.release(e.base, e.len), ErrorCode::Unauthorized);
    assert!(
        why.contains("another live session holds that name"),
        "{why}"
    );
    refused(ctl.lease(Duration::from_millis(1)), ErrorCode::Unauthorized);
    refused(ctl.lease(Duration::ZERO), ErrorCode::Unauthorized);
    assert_eq!(rack.controller.stats().refused_name, 3);
    assert_eq!(rack.controller.stats().granted_bytes, e.len);
    a.read(e.base, &mut buf).unwrap();
    assert_eq!(buf, [9u8; 64]);
    // Presenting one of the name's capabilities proves the session.
    let proof = a.extents()[0].cap.clone().unwrap();
    let present = Msg::Present { caps: vec![proof] };
    let second = Connection::connect(&rack.ctl(), &rack.cfg("cn-a")).unwrap();
    second.call(&present).unwrap().done("present").unwrap();
    second
        .call(&Msg::Lease { ms: 60_000 })
        .unwrap()
        .done("lease")
        .unwrap();
    // And the owner itself releases as before.
    a.release(e.base, e.len).unwrap();
    assert_eq!(rack.controller.stats().granted_bytes, 0);
}

#[test]
fn forged_tampered_or_borrowed_capabilities_are_refused() {
    let rack = rack(1, SECRET);
    let a = rack.client("cn-a");
    let e = a.allocate(256 << 20, Placement::Default).unwrap().remove(0);
    let cap = e.cap.clone().unwrap();
    let node = rack.node_of(&e).addr().to_string();
    let present = |name: &str, cap: Cap| {
        let c = Connection::connect(&node, &rack.cfg(name)).unwrap();
        let r = c.call(&Msg::Present { caps: vec![cap] });
        (c, r.and_then(|r| r.done("present")))
    };
    let mut mac = cap.clone();
    mac.mac[0] ^= 1;
    let wider = Cap {
        len: cap.len * 2,
        ..cap.clone()
    };
    let restamped = Cap {
        stamp: cap.stamp ^ 2,
        ..cap.clone()
    };
    let forged = Cap {
        mac: auth::cap_mac(b"guess", "cn-a", &cap, 0),
        ..cap.clone()
    };
    for bad in [mac, wider, restamped, forged] {
        let why = refused(present("cn-a", bad).1, ErrorCode::NoCapability);
        assert!(why.contains("was not issued to it"), "{why}");
    }
    // A genuine capability is no good under another name.
    refused(present("cn-b", cap.clone()).1, ErrorCode::NoCapability);
    assert_eq!(rack.node_of(&e).stats().refused_capability, 5);
    // The genuine one under its own name works on a bare connection.
    let (c, ok) = present("cn-a", cap.clone());
    ok.unwrap();
    c.write(e.base, b"mine").unwrap();
    // Once released, the capability no longer opens the range, even when
    // the same range is granted to the same name again.
    a.release(e.base, e.len).unwrap();
    let mut buf = [0u8; 4];
    refused(c.read(e.base, &mut buf), ErrorCode::NotOwner);
    let again = a.allocate(256 << 20, Placement::Default).unwrap().remove(0);
    assert_eq!(again.base, e.base);
    refused(c.read(e.base, &mut buf), ErrorCode::NoCapability);
    a.read(e.base, &mut buf).unwrap();
    assert_eq!(buf, [0u8; 4]);
}

fn normal_path(token: &[u8]) {
    let rack = rack(2, token);
    let a = rack.client("cn-a");
    a.keep_page_readers(1).unwrap();
    let extents = a.allocate(512 << 20, Placement::RoundRobin).unwrap();
    assert!(extents.iter().all(|e| e.cap.is_some()));
    for (i, e) in extents.iter().enumerate() {
        let page = vec![i as u8 + 1; 4096];
        a.write(e.base, &page).unwrap();
        a.write_lines(&[(e.base + 4096, [i as u8 + 7; 64])])
            .unwrap();
        let mut back = vec![0u8; 4096];
        a.read(e.base, &mut back).unwrap();
        assert_eq!(back, page);
        let mut fast = [0u8; 4096];
        match a.read_without_allocating(e.base, &mut fast) {
            Some(r) => r.unwrap(),
            None => panic!("no idle page reader for node {}", e.node),
        }
        assert_eq!(&fast[..], &page[..]);
        let mut line = [0u8; 64];
        a.read(e.base + 4096, &mut line).unwrap();
        assert_eq!(line, [i as u8 + 7; 64]);
    }
    for m in &rack.memnodes {
        let st = m.stats();
        assert_eq!(st.refused_capability + st.refused_not_owner, 0, "{st:?}");
        assert!(st.caps_accepted >= 1, "{st:?}");
    }
    for e in &extents {
        a.release(e.base, e.len).unwrap();
    }
}

#[test]
fn the_normal_path_works_with_capabilities_with_a_secret() {
    normal_path(SECRET);
}

#[test]
fn the_normal_path_works_with_capabilities_without_a_secret() {
    normal_path(b"");
}

#[test]
fn a_memory_node_key_cannot_speak_for_another_node() {
    let rack = rack(2, SECRET);
    let victim = rack.memnodes[0].node_id();
    let evil = Connection::connect(
        &rack.ctl(),
        &ClientConfig::new("mn-evil", Role::MemNode).with_token(SECRET),
    )
    .unwrap();
    for msg in [
        Msg::Leave { node: victim },
        Msg::Heartbeat {
            node: victim,
            used: 0,
        },
    ] {
        let why = refused(
            evil.call(&msg).and_then(|r| r.done("leave")),
            ErrorCode::Unauthorized,
        );
        assert!(why.contains("was not registered on this session"), "{why}");
    }
    let nodes = rack.controller.nodes();
    assert!(
        nodes.iter().all(|n| n.up),
        "a node was taken out: {nodes:?}"
    );
    // Registered on its own session, a node may take itself out.
    let own = match evil
        .call(&Msg::Register {
            listen: "127.0.0.1:9",
            capacity: GIB,
            incarnation: 7,
        })
        .unwrap()
        .msg()
        .unwrap()
    {
        Msg::Registered { node, .. } => node,
        other => panic!("{other:?}"),
    };
    evil.call(&Msg::Leave { node: own })
        .and_then(|r| r.done("leave"))
        .unwrap();
    let nodes = rack.controller.nodes();
    assert!(nodes.iter().any(|n| n.node == own && !n.up), "{nodes:?}");
    assert_eq!(nodes.iter().filter(|n| n.up).count(), 2, "{nodes:?}");
}
