//! What the harness runs inputs against: the frame reader and message
//! decoder, and each daemon's request handler called in-process.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::net::SocketAddr;
use std::sync::Arc;

use farmem_net::server::{Peer, Refusal, Server, ServerConfig, Service};
use farmem_net::{NetError, read_frame};
use farmem_wire::{ABSOLUTE_MAX_FRAME, Cap, DEFAULT_MAX_FRAME, HEADER_LEN, Msg, Role};
use rand::Rng;
use rand::rngs::SmallRng;

use super::inputs::{self, Context};

/// What became of a target's inputs.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub inputs: u64,
    /// Frames decoded (frame target) or requests answered (daemons).
    pub accepted: u64,
    pub decode_errors: u64,
    pub decode_errors_by_kind: BTreeMap<String, u64>,
    pub refusals_by_code: BTreeMap<String, u64>,
    /// Reply kinds of answered requests.
    pub replies_by_op: BTreeMap<String, u64>,
}

impl Tally {
    fn decode_error(&mut self, kind: String) {
        self.decode_errors += 1;
        *self.decode_errors_by_kind.entry(kind).or_default() += 1;
    }

    pub fn merge(&mut self, o: &Tally) {
        self.inputs += o.inputs;
        self.accepted += o.accepted;
        self.decode_errors += o.decode_errors;
        for (mine, theirs) in [
            (&mut self.decode_errors_by_kind, &o.decode_errors_by_kind),
            (&mut self.refusals_by_code, &o.refusals_by_code),
            (&mut self.replies_by_op, &o.replies_by_op),
        ] {
            for (k, v) in theirs {
                *mine.entry(k.clone()).or_default() += v;
            }
        }
    }

    pub fn refusals(&self) -> u64 {
        self.refusals_by_code.values().sum()
    }
}

/// The variant name of an error's `Debug` form: `Truncated { .. }` → `Truncated`.
fn variant(e: &impl std::fmt::Debug) -> String {
    let s = format!("{e:?}");
    s.split(|c: char| !c.is_alphanumeric() && c != '_')
        .next()
        .unwrap_or("")
        .to_string()
}

fn net_kind(e: &NetError) -> String {
    match e {
        NetError::Wire(w) => variant(w),
        NetError::Disconnected(_) => "TruncatedStream".into(),
        e => variant(e),
    }
}

/// A fuzz target: makes inputs and runs them. `run` returns `Err` when a
/// contract is broken (a refusal is not that; a malformed reply is).
pub trait Rig {
    fn input(&mut self, rng: &mut SmallRng, out: &mut Vec<u8>);
    fn run(&mut self, rng: &mut SmallRng, input: &[u8], tally: &mut Tally) -> Result<(), String>;
    /// What an input means beyond its bytes (the peer it came from).
    fn describe(&self, input: &[u8]) -> String;
    /// Starts over with fresh state, so tables do not grow for ever.
    fn reset(&mut self) -> anyhow::Result<()>;
}

/// Frame limits inputs are read with: the handshake's, the default, the largest.
const MAX_FRAMES: [u32; 3] = [4096, DEFAULT_MAX_FRAME, ABSOLUTE_MAX_FRAME];

/// The frame reader and `Msg::decode` over a stream of one to three frames;
/// every decoded message must survive encode and decode unchanged.
pub struct FrameRig {
    ctx: Context,
    body: Vec<u8>,
}

impl FrameRig {
    pub fn new() -> Self {
        Self {
            ctx: Context::new(&["cn-0", "controller"], &[]),
            body: Vec::new(),
        }
    }
}

impl Rig for FrameRig {
    fn input(&mut self, rng: &mut SmallRng, out: &mut Vec<u8>) {
        out.push(rng.r#gen());
        for _ in 0..rng.gen_range(1..=3) {
            let kind = rng.gen_range(0..inputs::KINDS);
            inputs::frame(rng, &self.ctx, kind, out);
        }
    }

    fn run(&mut self, _: &mut SmallRng, input: &[u8], tally: &mut Tally) -> Result<(), String> {
        let Some((&sel, stream)) = input.split_first() else {
            return Ok(());
        };
        let max = MAX_FRAMES[sel as usize % MAX_FRAMES.len()];
        let mut cur = Cursor::new(stream);
        while (cur.position() as usize) < stream.len() {
            let h = match read_frame(&mut cur, &mut self.body, max) {
                Ok(h) => h,
                Err(e) => {
                    // The stream is unframed from here: a server closes.
                    tally.decode_error(net_kind(&e));
                    break;
                }
            };
            match Msg::decode(h.op, &self.body) {
                Ok(msg) => {
                    tally.accepted += 1;
                    round_trip(&msg, h.id)?;
                }
                Err(e) => tally.decode_error(variant(&e)),
            }
        }
        Ok(())
    }

    fn describe(&self, input: &[u8]) -> String {
        let max = input
            .first()
            .map(|&s| MAX_FRAMES[s as usize % MAX_FRAMES.len()]);
        format!("a byte stream read with max_frame {max:?} (first byte)")
    }

    fn reset(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
}

/// A decoded message encodes to a frame that decodes to the same message.
fn round_trip(msg: &Msg<'_>, id: u64) -> Result<(), String> {
    let mut buf = Vec::new();
    msg.encode(id, &mut buf);
    let mut body = Vec::new();
    let h = read_frame(&mut Cursor::new(&buf), &mut body, ABSOLUTE_MAX_FRAME)
        .map_err(|e| format!("re-encoded {:?} does not frame: {e}", msg.op()))?;
    match Msg::decode(h.op, &body) {
        Ok(back) if back == *msg && h.id == id => Ok(()),
        Ok(back) => Err(format!(
            "{msg:?} came back as {back:?} (id {id} → {})",
            h.id
        )),
        Err(e) => Err(format!("re-encoded {msg:?} does not decode: {e}")),
    }
}

/// Checks a handler's output is exactly one well-formed reply to `id`.
fn check_reply(out: &[u8], id: u64) -> Result<Msg<'_>, String> {
    let mut cur = Cursor::new(out);
    let mut body = Vec::new();
    let h = read_frame(&mut cur, &mut body, ABSOLUTE_MAX_FRAME)
        .map_err(|e| format!("the reply does not frame: {e}"))?;
    if h.id != id {
        return Err(format!("reply id {} to request {id}", h.id));
    }
    if cur.position() as usize != out.len() {
        return Err(format!(
            "{} bytes after the reply",
            out.len() - cur.position() as usize
        ));
    }
    Msg::decode(h.op, &out[HEADER_LEN..]).map_err(|e| format!("the reply does not decode: {e}"))
}

/// Which daemon a [`ServiceRig`] drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Daemon {
    MemNode,
    Controller,
}

/// A memory node's store for the memnode target: small, so that a read of
/// all of it stays cheap; at a base like the controller assigns.
const MEMNODE_CAP: u64 = 16 << 20;
const MEMNODE_BASE: u64 = 1 << 40;
/// The controller target hands out multiples of 1 MiB of two 1 GiB nodes.
const GRANULARITY: u64 = 1 << 20;
const SINK_CAP: u64 = 1 << 30;

/// Stands in for a memory node the controller pushes grants to: takes
/// every grant and revocation, on loopback.
struct GrantSink;

impl Service for GrantSink {
    fn handle(&self, _: &Peer, id: u64, msg: Msg<'_>, out: &mut Vec<u8>) -> Result<(), Refusal> {
        match msg {
            Msg::Grant { .. } | Msg::Revoke { .. } => {
                Msg::Done.encode(id, out);
                Ok(())
            }
            other => Err(Refusal::unsupported("a grant sink", &other)),
        }
    }
}

/// A daemon's `Service::handle`, fed one frame per input from one of a
/// fixed set of peers (every role; two compute clients).
pub struct ServiceRig {
    daemon: Daemon,
    service: Arc<dyn Service>,
    peers: Vec<Peer>,
    ctx: Context,
    /// Controller target: where registered nodes are said to listen.
    /// Registrations in inputs are pointed here (or at a closed port), so
    /// the controller dials nothing but loopback.
    sinks: Vec<Server>,
    listen: Vec<String>,
    body: Vec<u8>,
    out: Vec<u8>,
}

fn peer(name: &str, role: Role) -> Peer {
    // A session per peer: a memory node keeps presented capabilities per session.
    static SESSIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    Peer {
        name: name.into(),
        role,
        addr: SocketAddr::from(([127, 0, 0, 1], 1)),
        session: SESSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
    }
}

impl ServiceRig {
    /// Presents a valid capability for a grant the memory node took, from
    /// its owner's session (when the owner is one of our peers), as the
    /// controller would have issued it: so accesses get past the
    /// capability check to the paths behind it.
    fn present_as_owner(&mut self, owner: &str, mut cap: Cap) {
        let Some(owner_peer) = self.peers.iter().find(|p| p.name == owner).cloned() else {
            return;
        };
        // The fuzzing memory node runs with the empty secret, incarnation 1.
        cap.mac = farmem_wire::auth::cap_mac(b"", owner, &cap, 1);
        let mut out = Vec::new();
        let _ = self
            .service
            .handle(&owner_peer, 0, Msg::Present { caps: vec![cap] }, &mut out);
    }

    pub fn new(daemon: Daemon) -> anyhow::Result<Self> {
        let peers = vec![
            peer("cn-0", Role::Compute),
            peer("cn-1", Role::Compute),
            peer("memnode@127.0.0.1:1", Role::MemNode),
            peer("controller", Role::Controller),
            peer("admin", Role::Admin),
        ];
        let names: Vec<&str> = peers.iter().map(|p| p.name.as_str()).collect();
        let mut rig = Self {
            daemon,
            service: farmem_memnode::service_for_fuzzing(MEMNODE_CAP, MEMNODE_BASE),
            ctx: Context::new(&names, &[]),
            peers,
            sinks: Vec::new(),
            listen: Vec::new(),
            body: Vec::new(),
            out: Vec::new(),
        };
        if daemon == Daemon::Controller {
            for _ in 0..2 {
                let s = Server::start("127.0.0.1:0", ServerConfig::default(), Arc::new(GrantSink))?;
                rig.listen.push(s.local_addr().to_string());
                rig.sinks.push(s);
            }
            // Nothing listens on port 1: a grant pushed there is refused at once.
            rig.listen.push("127.0.0.1:1".into());
        }
        rig.reset()?;
        Ok(rig)
    }

    fn peer_of(&self, input: &[u8]) -> &Peer {
        &self.peers[input.first().copied().unwrap_or(0) as usize % self.peers.len()]
    }

    /// Registers the sinks as memory nodes, as they would themselves.
    fn register_sinks(&mut self) -> anyhow::Result<()> {
        let node = peer("memnode@sink", Role::MemNode);
        for listen in &self.listen[..self.sinks.len()] {
            self.out.clear();
            let reg = Msg::Register {
                listen,
                capacity: SINK_CAP,
                incarnation: 1,
            };
            self.service
                .handle(&node, 0, reg, &mut self.out)
                .map_err(|r| anyhow::anyhow!("registering a sink: {}", r.message))?;
            if let Ok(Msg::Registered { base, .. }) = check_reply(&self.out, 0) {
                self.ctx.dict.extend([base, base + SINK_CAP]);
            }
        }
        Ok(())
    }
}

/// Values a learned request or reply adds to the dictionary.
fn learned(msg: &Msg<'_>) -> Vec<u64> {
    match msg {
        Msg::Grant { base, len, .. } | Msg::Release { base, len } | Msg::Revoke { base, len } => {
            vec![*base, *len, base.wrapping_add(*len)]
        }
        Msg::AllocOk { extents } => extents.iter().flat_map(|e| [e.base, e.len]).collect(),
        Msg::Registered { base, .. } => vec![*base],
        _ => Vec::new(),
    }
}

impl Rig for ServiceRig {
    fn input(&mut self, rng: &mut SmallRng, out: &mut Vec<u8>) {
        use inputs::*;
        // Mostly what this daemon answers, from the role that may ask.
        let favoured: &[usize] = match self.daemon {
            Daemon::MemNode => &[READ, READ, WRITE, WRITE, LOG_BATCH, GRANT, REVOKE],
            Daemon::Controller => &[ALLOC, ALLOC, RELEASE, RELEASE, LEASE, REGISTER, HEARTBEAT],
        };
        let kind = if rng.gen_bool(0.8) {
            favoured[rng.gen_range(0..favoured.len())]
        } else {
            rng.gen_range(0..KINDS)
        };
        let role = match kind {
            READ | WRITE | LOG_BATCH | ALLOC | RELEASE | LEASE => Role::Compute,
            GRANT | REVOKE => Role::Controller,
            REGISTER | HEARTBEAT => Role::MemNode,
            _ => Role::Admin,
        };
        let matching: Vec<usize> = (0..self.peers.len())
            .filter(|&i| self.peers[i].role == role)
            .collect();
        let p = if rng.gen_bool(0.8) && !matching.is_empty() {
            matching[rng.gen_range(0..matching.len())]
        } else {
            rng.gen_range(0..self.peers.len())
        };
        out.push(p as u8);
        frame(rng, &self.ctx, kind, out);
    }

    fn run(&mut self, rng: &mut SmallRng, input: &[u8], tally: &mut Tally) -> Result<(), String> {
        let peer = self.peer_of(input).clone();
        let frame = input.get(1..).unwrap_or_default();
        let h = match read_frame(&mut Cursor::new(frame), &mut self.body, DEFAULT_MAX_FRAME) {
            Ok(h) => h,
            Err(e) => {
                tally.decode_error(net_kind(&e));
                return Ok(());
            }
        };
        let msg = match Msg::decode(h.op, &self.body) {
            Ok(Msg::Register {
                listen,
                capacity,
                incarnation,
            }) if self.daemon == Daemon::Controller => {
                let listen = &self.listen[listen.len() % self.listen.len()];
                Msg::Register {
                    listen,
                    capacity,
                    incarnation,
                }
            }
            Ok(m) => m,
            Err(e) => {
                tally.decode_error(variant(&e));
                return Ok(());
            }
        };
        let mut learn = learned(&msg);
        let granted = match msg {
            Msg::Grant {
                owner,
                base,
                len,
                stamp,
                ..
            } if peer.role == Role::Controller && stamp != 0 => Some((
                owner.to_string(),
                Cap {
                    node: 0,
                    base,
                    len,
                    stamp,
                    mac: [0; 32],
                },
            )),
            _ => None,
        };
        self.out.clear();
        match self.service.handle(&peer, h.id, msg, &mut self.out) {
            Ok(()) => {
                tally.accepted += 1;
                if let Some((owner, cap)) = granted {
                    self.present_as_owner(&owner, cap);
                }
                let reply = check_reply(&self.out, h.id)?;
                *tally
                    .replies_by_op
                    .entry(format!("{:?}", reply.op()))
                    .or_default() += 1;
                learn.extend(learned(&reply));
                for v in learn {
                    self.ctx.learn(rng, v);
                }
            }
            Err(r) => {
                *tally
                    .refusals_by_code
                    .entry(format!("{:?}", r.code))
                    .or_default() += 1
            }
        }
        Ok(())
    }

    fn describe(&self, input: &[u8]) -> String {
        let p = self.peer_of(input);
        format!(
            "one frame (after the first byte) from peer `{}` ({:?})",
            p.name, p.role
        )
    }

    fn reset(&mut self) -> anyhow::Result<()> {
        self.ctx.dict.clear();
        match self.daemon {
            Daemon::MemNode => {
                self.service = farmem_memnode::service_for_fuzzing(MEMNODE_CAP, MEMNODE_BASE);
                let end = MEMNODE_BASE + MEMNODE_CAP;
                self.ctx.span = Some((MEMNODE_BASE, end));
                self.ctx
                    .dict
                    .extend([MEMNODE_BASE, end, MEMNODE_CAP, MEMNODE_BASE + (2 << 20)]);
            }
            Daemon::Controller => {
                self.service = farmem_controller::service_for_fuzzing(GRANULARITY);
                self.ctx.dict.extend([GRANULARITY, SINK_CAP, 2 * SINK_CAP]);
                self.register_sinks()?;
            }
        }
        Ok(())
    }
}
