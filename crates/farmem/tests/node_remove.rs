//! `farmem node remove` against a live rack with a secret: a dead node
//! taken out of `farmem status` (and of the saved state), and every
//! refusal: an up node, an unknown id, a compute key, forged requests from
//! the compute and memory-node roles, a node still holding a client's grants.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use farmem_net::{ClientConfig, Connection, NetError};
use farmem_wire::{ErrorCode, Msg, Placement, Role};

mod common;
use common::{Daemon, daemon};

const SECRET: &str = "node-remove-test-secret";

fn farmem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_farmem"))
}

/// A scratch directory holding the secret, and the compute and admin keys
/// `farmem token` derives from it.
struct Keys {
    dir: PathBuf,
}

impl Keys {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("farmem-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("secret"), SECRET).unwrap();
        for role in ["compute", "admin"] {
            let out = farmem()
                .args(["token", "--role", role, "--token-file"])
                .arg(dir.join("secret"))
                .output()
                .unwrap();
            assert!(out.status.success());
            std::fs::write(dir.join(format!("{role}.key")), out.stdout).unwrap();
        }
        Self { dir }
    }

    fn file(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_string()
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn status(ctl: &str, keys: &Keys) -> serde_json::Value {
    status_with(ctl, &keys.file("compute.key"))
}

fn status_with(ctl: &str, token: &str) -> serde_json::Value {
    common::status_json(ctl, &["--token-file", token])
}

/// Polls `status` until `done` holds (or fails after 20 s).
fn until(
    ctl: &str,
    keys: &Keys,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let s = status(ctl, keys);
        if done(&s) {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "never {what}: {s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn node_ids(s: &serde_json::Value) -> Vec<u64> {
    s["node_table"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_u64().unwrap())
        .collect()
}

/// The id and state of the node at `addr` in `s`.
fn node_at(s: &serde_json::Value, addr: &str) -> (u64, bool) {
    let n = s["node_table"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["addr"] == addr)
        .unwrap_or_else(|| panic!("no node at {addr}: {s}"));
    (n["id"].as_u64().unwrap(), n["up"].as_bool().unwrap())
}

fn remove(ctl: &str, id: u64, token: &str, extra: &[&str]) -> Output {
    farmem()
        .args(["node", "remove", &id.to_string(), "--controller", ctl])
        .args(["--token-file", token])
        .args(extra)
        .output()
        .unwrap()
}

/// `output`'s failure (exit 2) and its stderr.
fn refused(output: Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    stderr
}

fn controller(keys: &Keys, state: &Path) -> (Daemon, String) {
    daemon(&[
        "controller",
        "--listen",
        "127.0.0.1:0",
        "--heartbeat-timeout-ms",
        "1000",
        "--granularity",
        "4MiB",
        "--token-file",
        &keys.file("secret"),
        "--state",
        state.to_str().unwrap(),
    ])
}

fn memnode(ctl: &str, keys: &Keys) -> (Daemon, String) {
    daemon(&[
        "memnode",
        "--listen",
        "127.0.0.1:0",
        "--capacity",
        "64MiB",
        "--controller",
        ctl,
        "--token-file",
        &keys.file("secret"),
    ])
}

/// A session of `role` holding the secret itself: it passes the handshake.
fn session(ctl: &str, role: Role, name: &str) -> Connection {
    Connection::connect(
        ctl,
        &ClientConfig::new(name, role).with_token(SECRET.as_bytes().to_vec()),
    )
    .unwrap()
}

#[test]
fn a_dead_node_leaves_status_and_the_state_and_every_refusal_is_named() {
    let keys = Keys::new("node-remove");
    let state = keys.dir.join("controller.json");
    let (mut ctl_daemon, ctl) = controller(&keys, &state);
    let (mut victim, victim_addr) = memnode(&ctl, &keys);
    let (_other, other_addr) = memnode(&ctl, &keys);
    let s = until(&ctl, &keys, "two nodes up", |s| s["nodes_up"] == 2);
    let (victim_id, _) = node_at(&s, &victim_addr);
    let (other_id, _) = node_at(&s, &other_addr);
    let admin = keys.file("admin.key");

    // Up: refused, naming why and what to do.
    let why = refused(remove(&ctl, victim_id, &admin, &[]));
    assert!(why.contains("(NodeUp)"), "{why}");
    assert!(why.contains(&format!("{victim_addr} is up")), "{why}");
    assert!(why.contains("stop it first"), "{why}");

    let _ = victim.0.kill();
    let _ = victim.0.wait();
    let s = until(&ctl, &keys, "the killed node down", |s| s["nodes_up"] == 1);
    assert_eq!(node_at(&s, &victim_addr), (victim_id, false), "{s}");

    // No such node.
    let why = refused(remove(&ctl, 999, &admin, &[]));
    assert!(why.contains("(NotFound)"), "{why}");
    assert!(why.contains("node 999 is not registered"), "{why}");
    // A program's compute key cannot remove nodes: refused before dialling.
    let why = refused(remove(&ctl, victim_id, &keys.file("compute.key"), &[]));
    assert!(why.contains("holds the compute key"), "{why}");
    // Nor can any session of the compute or memory-node role, forced or
    // not, even one holding the secret.
    for (role, name) in [(Role::Compute, "cn-evil"), (Role::MemNode, "mn-evil")] {
        let conn = session(&ctl, role, name);
        for force in [false, true] {
            let ask = Msg::RemoveNode {
                node: victim_id as u32,
                force,
            };
            match conn.call(&ask).and_then(|r| r.done("remove node")) {
                Err(NetError::Remote {
                    code: ErrorCode::Unauthorized,
                    message,
                }) => assert!(
                    message.contains(&format!(
                        "a {} peer may not remove a memory node",
                        role.name()
                    )),
                    "{message}"
                ),
                other => panic!("{role:?} removing a node: {other:?}"),
            }
        }
    }
    let s = status(&ctl, &keys);
    assert_eq!(node_ids(&s).len(), 2, "a refused removal removed: {s}");

    // The operator's removal, with the admin key, which reads the rack too.
    let out = remove(&ctl, victim_id, &admin, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = status_with(&ctl, &admin);
    assert_eq!(node_ids(&s), vec![other_id], "{s}");
    assert_eq!(
        (s["nodes"].as_u64(), s["nodes_up"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(s["capacity_bytes"], 64u64 << 20, "{s}");
    // Again: it is gone.
    let why = refused(remove(&ctl, victim_id, &admin, &[]));
    assert!(why.contains("(NotFound)"), "{why}");

    // Saved: a controller started on the same state knows only the other.
    let _ = ctl_daemon.0.kill();
    let _ = ctl_daemon.0.wait();
    let (_again, ctl) = controller(&keys, &state);
    assert_eq!(node_ids(&status(&ctl, &keys)), vec![other_id]);
}

#[test]
fn a_node_holding_grants_is_refused_until_its_client_releases_them() {
    let keys = Keys::new("node-remove-busy");
    let (_ctl, ctl) = controller(&keys, &keys.dir.join("controller.json"));
    let (mut victim, victim_addr) = memnode(&ctl, &keys);
    let (_other, _) = memnode(&ctl, &keys);
    let s = until(&ctl, &keys, "two nodes up", |s| s["nodes_up"] == 2);
    let (victim_id, _) = node_at(&s, &victim_addr);
    // A client holding two 4 MiB granules, round-robin: one on each node.
    let client = session(&ctl, Role::Compute, "cn-holder");
    let alloc = Msg::Alloc {
        size: 8 << 20,
        placement: Placement::RoundRobin,
        replicas: 1,
        parity: 0,
        request: 1,
    };
    let extents = match client.call(&alloc).unwrap().msg().unwrap() {
        Msg::AllocOk { extents } => extents,
        other => panic!("{other:?}"),
    };
    assert!(
        extents.iter().any(|e| u64::from(e.node) == victim_id),
        "{extents:?}"
    );
    let _ = victim.0.kill();
    let _ = victim.0.wait();
    until(&ctl, &keys, "the killed node down", |s| s["nodes_up"] == 1);

    let admin = keys.file("admin.key");
    let why = refused(remove(&ctl, victim_id, &admin, &["--force"]));
    assert!(why.contains("(NodeBusy)"), "{why}");
    assert!(
        why.contains("still holds 1 grant (4MiB) of 1 client (cn-holder)"),
        "{why}"
    );
    for e in &extents {
        client
            .call(&Msg::Release {
                base: e.base,
                len: e.len,
            })
            .and_then(|r| r.done("release"))
            .unwrap();
    }
    let out = remove(&ctl, victim_id, &admin, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!node_ids(&status(&ctl, &keys)).contains(&victim_id));
}
