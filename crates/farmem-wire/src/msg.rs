//! Every message of the protocol, its opcode and its body layout.

use crate::codec::{Reader, encode_frame, put_str};
use crate::link::{LinkMode, Packed};
use crate::{LINE_LEN, LOG_RECORD_LEN, WireError};

/// Who is speaking: decides what a peer may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Role {
    /// A compute node (runtime, benchmark, test client).
    Compute = 1,
    /// A memory node talking to the controller.
    MemNode = 2,
    /// The controller talking to a memory node (grants, revocations).
    Controller = 3,
    /// An operator tool: may read stats and take a memory node out of
    /// the controller's table (`RemoveNode`), nothing else.
    Admin = 4,
}

impl Role {
    /// The role's name, as role keys and messages spell it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Compute => "compute",
            Role::MemNode => "memnode",
            Role::Controller => "controller",
            Role::Admin => "admin",
        }
    }

    /// The role called `name` (see [`Role::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        [Role::Compute, Role::MemNode, Role::Controller, Role::Admin]
            .into_iter()
            .find(|r| r.name() == name)
    }

    pub const ALL: [Role; 4] = [Role::Compute, Role::MemNode, Role::Controller, Role::Admin];

    fn from_u8(v: u8) -> Result<Self, WireError> {
        Ok(match v {
            1 => Role::Compute,
            2 => Role::MemNode,
            3 => Role::Controller,
            4 => Role::Admin,
            _ => {
                return Err(WireError::BadValue {
                    what: "role",
                    value: v.into(),
                });
            }
        })
    }
}

/// How the controller spreads a grant over memory nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum Placement {
    /// The controller's configured default.
    #[default]
    Default = 0,
    RoundRobin = 1,
    LeastLoaded = 2,
}

impl Placement {
    fn from_u8(v: u8) -> Result<Self, WireError> {
        Ok(match v {
            0 => Placement::Default,
            1 => Placement::RoundRobin,
            2 => Placement::LeastLoaded,
            _ => {
                return Err(WireError::BadValue {
                    what: "placement",
                    value: v.into(),
                });
            }
        })
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum ErrorCode {
    /// The request was malformed or not allowed in this state.
    BadRequest = 1,
    /// Authentication failed or has not happened yet.
    Unauthorized = 2,
    /// The range is not granted to this client.
    NotOwner = 3,
    /// The range lies outside the node's capacity.
    OutOfRange = 4,
    /// Not enough free memory to satisfy an allocation.
    NoCapacity = 5,
    /// The named object (node, extent) does not exist.
    NotFound = 6,
    /// The peer speaks another protocol version.
    VersionMismatch = 7,
    /// Something failed inside the server.
    Internal = 8,
    /// The range's data is gone: its memory node restarted (a new
    /// incarnation) after the data was written, and no copy was restored.
    Lost = 9,
    /// The session presented no valid capability for the range, or a
    /// forged, tampered or stale one.
    NoCapability = 10,
    /// A standby controller: another holds the leadership (its address is
    /// in the message); ask that one.
    NotLeader = 11,
    /// `RemoveNode` of a node the controller still counts up: stop it
    /// first (or ask with `force`).
    NodeUp = 12,
    /// `RemoveNode` of a node that still holds clients' grants.
    NodeBusy = 13,
    /// A packed write whose payload does not decode to the bytes it
    /// claims (codec error, wrong length or checksum): nothing was written.
    BadPayload = 14,
}

impl ErrorCode {
    pub fn from_u16(v: u16) -> Self {
        match v {
            1 => Self::BadRequest,
            2 => Self::Unauthorized,
            3 => Self::NotOwner,
            4 => Self::OutOfRange,
            5 => Self::NoCapacity,
            6 => Self::NotFound,
            7 => Self::VersionMismatch,
            9 => Self::Lost,
            10 => Self::NoCapability,
            11 => Self::NotLeader,
            12 => Self::NodeUp,
            13 => Self::NodeBusy,
            14 => Self::BadPayload,
            _ => Self::Internal,
        }
    }
}

/// What a `Grant` tells a memory node about the range's contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum GrantKind {
    /// Re-sent after a reconnect to the same incarnation: the bytes are intact.
    Resend = 0,
    /// A new allocation: zeroed first, so no owner reads a previous owner's bytes.
    Fresh = 1,
    /// Held by the owner, but the bytes were lost when this node restarted:
    /// every access is refused with [`ErrorCode::Lost`], never served as zeros.
    Lost = 2,
}

impl GrantKind {
    fn from_u8(v: u8) -> Result<Self, WireError> {
        Ok(match v {
            0 => Self::Resend,
            1 => Self::Fresh,
            2 => Self::Lost,
            _ => {
                return Err(WireError::BadValue {
                    what: "grant kind",
                    value: v.into(),
                });
            }
        })
    }
}

/// A granted range of the global remote address space. Each memory node owns
/// a contiguous slice of that space (UniMem's Shadow-Region: one address
/// space for the whole pool, so there is no second translation).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Extent {
    pub node: u32,
    /// Where that memory node listens.
    pub addr: String,
    pub base: u64,
    pub len: u64,
    /// Copies of the same `len` bytes on other memory nodes (replication):
    /// every write goes to each, a read to any. Empty: one copy.
    pub mirrors: Vec<Mirror>,
    /// The controller's capability for this extent (none from a standalone node).
    pub cap: Option<Cap>,
}

/// One more copy of an [`Extent`], at `base` on memory node `node`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mirror {
    pub node: u32,
    pub addr: String,
    pub base: u64,
    /// The controller's capability for this copy.
    pub cap: Option<Cap>,
}

/// A capability: the controller's word that the session's client (the
/// owner name the MAC covers) may use `[base, base+len)` on memory node
/// `node` while that node runs the incarnation the MAC covers, under the
/// grant `stamp` (drawn per grant, so a later grant of the same range needs
/// a new capability). The MAC is the auth module's `cap_mac`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cap {
    pub node: u32,
    pub base: u64,
    pub len: u64,
    pub stamp: u64,
    pub mac: [u8; 32],
}

impl Cap {
    fn encode(&self, b: &mut Vec<u8>) {
        b.extend_from_slice(&self.node.to_le_bytes());
        b.extend_from_slice(&self.base.to_le_bytes());
        b.extend_from_slice(&self.len.to_le_bytes());
        b.extend_from_slice(&self.stamp.to_le_bytes());
        b.extend_from_slice(&self.mac);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(Self {
            node: r.u32()?,
            base: r.u64()?,
            len: r.u64()?,
            stamp: r.u64()?,
            mac: r.array()?,
        })
    }
}

/// An optional capability: a flag byte, then the capability.
fn put_cap(b: &mut Vec<u8>, cap: Option<&Cap>) {
    match cap {
        None => b.push(0),
        Some(cap) => {
            b.push(1);
            cap.encode(b);
        }
    }
}

fn get_cap(r: &mut Reader<'_>) -> Result<Option<Cap>, WireError> {
    match r.u8()? {
        0 => Ok(None),
        1 => Ok(Some(Cap::decode(r)?)),
        v => Err(WireError::BadValue {
            what: "capability flag",
            value: v.into(),
        }),
    }
}

/// A memory node as the controller knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub node: u32,
    pub addr: String,
    pub base: u64,
    pub capacity: u64,
    pub granted: u64,
    pub up: bool,
}

/// One cache line of the eviction log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRecord<'a> {
    pub addr: u64,
    pub line: &'a [u8; LINE_LEN],
}

/// A borrowed, already length-checked run of log records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRecords<'a>(&'a [u8]);

impl<'a> LogRecords<'a> {
    pub fn len(&self) -> usize {
        self.0.len() / LOG_RECORD_LEN
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn iter(&self) -> impl Iterator<Item = LogRecord<'a>> + 'a {
        self.0.chunks_exact(LOG_RECORD_LEN).map(|rec| LogRecord {
            addr: u64::from_le_bytes(rec[..8].try_into().expect("8 bytes")),
            line: rec[8..].try_into().expect("64 bytes"),
        })
    }
    /// Encodes records into the raw layout (for building a batch by hand).
    pub fn encode_into(out: &mut Vec<u8>, addr: u64, line: &[u8; LINE_LEN]) {
        out.extend_from_slice(&addr.to_le_bytes());
        out.extend_from_slice(line);
    }
    /// Wraps raw record bytes, checking they hold whole records.
    pub fn from_raw(raw: &'a [u8]) -> Result<Self, WireError> {
        if !raw.len().is_multiple_of(LOG_RECORD_LEN) {
            return Err(WireError::Truncated {
                what: "log record",
                need: LOG_RECORD_LEN - raw.len() % LOG_RECORD_LEN,
            });
        }
        Ok(Self(raw))
    }
    pub fn raw(&self) -> &'a [u8] {
        self.0
    }
}

macro_rules! ops {
    ($($name:ident = $code:expr),* $(,)?) => {
        /// Opcodes, one per message kind.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(u8)]
        pub enum Op { $($name = $code),* }
        impl Op {
            pub fn from_u8(v: u8) -> Result<Self, WireError> {
                match v { $($code => Ok(Op::$name),)* _ => Err(WireError::UnknownOp(v)) }
            }
        }
    };
}

ops! {
    Hello = 0x01, Challenge = 0x02, Auth = 0x03, Welcome = 0x04, Link = 0x05,
    Done = 0x0f,
    Read = 0x10, ReadOk = 0x11, Write = 0x12, ReadOkPacked = 0x13, LogBatch = 0x14, LogAck = 0x15,
    WritePacked = 0x16,
    Alloc = 0x20, AllocOk = 0x21, Release = 0x22, Lease = 0x23, Register = 0x24, Registered = 0x25,
    Heartbeat = 0x26, Leave = 0x27, Grant = 0x28, Revoke = 0x29, ListNodes = 0x2a, NodesOk = 0x2b,
    Present = 0x2c, Remirror = 0x2d, RemoveNode = 0x2e,
    Stats = 0x30, StatsOk = 0x31,
    Error = 0x7f,
}

/// Every message. Requests and responses share one enum because decoding
/// does not depend on direction; who may send what is the server's check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg<'a> {
    /// First message of a connection, client → server.
    Hello {
        version: u16,
        role: Role,
        name: &'a str,
        nonce: [u8; 16],
    },
    /// Server's answer: its nonce, its proof of the token, and its frame limit.
    Challenge {
        version: u16,
        nonce: [u8; 16],
        proof: [u8; 32],
        max_frame: u32,
    },
    /// Client's proof of the token.
    Auth {
        proof: [u8; 32],
    },
    /// Authentication succeeded. `incarnation` is the server's: a memory
    /// node draws a new one at every start, so a client that reconnects and
    /// sees another knows the node's memory is not what it wrote (0: a
    /// server that holds no data).
    Welcome {
        session: u64,
        incarnation: u64,
    },
    /// Compute → memory node, first request of a version-4 session: the
    /// link compression the client wants (its own sends follow `mode`;
    /// `bytes_per_sec` is its link's rate, 0 when unthrottled, which the
    /// server's `Auto` weighs). The answer is a `Link` with the mode the
    /// server agrees to (`Off`: no packed frames either way).
    Link {
        mode: LinkMode,
        bytes_per_sec: u64,
    },
    /// Generic success for requests with nothing to return.
    Done,
    /// Read `len` bytes at global address `addr`.
    Read {
        addr: u64,
        len: u32,
    },
    ReadOk {
        data: &'a [u8],
    },
    /// Write `data` at global address `addr`; answered with `Done`.
    Write {
        addr: u64,
        data: &'a [u8],
    },
    /// A `ReadOk` whose data is compressed; only on a session that agreed
    /// to it with `Link`.
    ReadOkPacked {
        packed: Packed<'a>,
    },
    /// A `Write` whose data is compressed; only on a session that agreed
    /// to it with `Link`. Answered with `Done`.
    WritePacked {
        addr: u64,
        packed: Packed<'a>,
    },
    /// Apply many cache lines in one message; acknowledged once.
    LogBatch {
        records: LogRecords<'a>,
    },
    LogAck {
        applied: u32,
    },
    /// Ask the controller for `size` bytes of remote memory, each byte
    /// held on `replicas` distinct memory nodes (0 counts as 1).
    ///
    /// With `parity` above 0 the `replicas` granules of each set are the
    /// shards of an erasure-coded stripe, `replicas - parity` of data and
    /// `parity` of parity: placed exactly like copies (distinct nodes, all
    /// or nothing), only named so in the controller's answers. Sent only
    /// when non-zero, so an `Alloc` without it decodes as before.
    ///
    /// `request`, when non-zero, names the request: sent again (its reply
    /// was lost, the leader changed), it gets the grants it got the first
    /// time, not a second set. Sent only when non-zero.
    Alloc {
        size: u64,
        placement: Placement,
        replicas: u8,
        parity: u8,
        request: u64,
    },
    AllocOk {
        extents: Vec<Extent>,
    },
    /// Give a granted range back; answered with `Done`.
    Release {
        base: u64,
        len: u64,
    },
    /// Compute → controller: give back every grant of this client if the
    /// controller hears no `Lease` from it for `ms` milliseconds (a client
    /// that dies without releasing); sent again to renew, `ms` = 0 ends
    /// the lease. Answered with `Done`.
    Lease {
        ms: u32,
    },
    /// A memory node joins the controller; a new `incarnation` (drawn at
    /// every start) tells the controller that the node's memory is empty.
    Register {
        listen: &'a str,
        capacity: u64,
        incarnation: u64,
    },
    Registered {
        node: u32,
        base: u64,
    },
    /// A memory node is alive; answered with `Done`.
    Heartbeat {
        node: u32,
        used: u64,
    },
    /// A memory node is stopping (SIGTERM): the controller marks it down
    /// at once, as it would after missed heartbeats; answered with `Done`.
    Leave {
        node: u32,
    },
    /// Admin → controller: forget memory node `node` (it is gone); refused
    /// while it is up unless `force`, and while it holds grants. Answered
    /// with `Done`.
    RemoveNode {
        node: u32,
        force: bool,
    },
    /// Controller → memory node: `owner` holds the range; `kind` says
    /// whether its bytes are new (zeroed), intact (re-sent) or lost.
    /// `stamp` names the grant in its capabilities (0 on a re-send: the
    /// node keeps the stamp it had).
    Grant {
        owner: &'a str,
        base: u64,
        len: u64,
        kind: GrantKind,
        stamp: u64,
    },
    /// Compute → memory node or controller: the capabilities this session
    /// uses (see [`Cap`]); a memory node answers `Done` once all are
    /// verified, a controller once one is (it proves the client's name).
    Present {
        caps: Vec<Cap>,
    },
    /// Compute → controller: one more copy of the client's granule
    /// [base, +len) (a primary it holds, whose copies are fewer than it
    /// asked for), on a memory node other than those in `avoid`. Answered
    /// with `AllocOk` holding the new range as one extent, which the client
    /// fills from a surviving copy. `request` as in `Alloc`.
    Remirror {
        base: u64,
        len: u64,
        request: u64,
        avoid: Vec<u32>,
    },
    /// Controller → memory node: the range is no longer anyone's.
    Revoke {
        base: u64,
        len: u64,
    },
    ListNodes,
    NodesOk {
        nodes: Vec<NodeInfo>,
    },
    Stats,
    /// Statistics as a JSON object.
    StatsOk {
        json: &'a str,
    },
    Error {
        code: ErrorCode,
        message: &'a str,
    },
}

impl<'a> Msg<'a> {
    /// The data bytes this message moves over the link, either way: what a
    /// read asks for, what a write or log batch carries; 0 for control
    /// messages. What a bandwidth throttle charges.
    pub fn data_bytes(&self) -> u64 {
        match self {
            Msg::Read { len, .. } => u64::from(*len),
            Msg::ReadOk { data } | Msg::Write { data, .. } => data.len() as u64,
            Msg::ReadOkPacked { packed } | Msg::WritePacked { packed, .. } => {
                packed.data.len() as u64
            }
            Msg::LogBatch { records } => (records.len() * LOG_RECORD_LEN) as u64,
            _ => 0,
        }
    }

    pub fn op(&self) -> Op {
        match self {
            Msg::Hello { .. } => Op::Hello,
            Msg::Challenge { .. } => Op::Challenge,
            Msg::Auth { .. } => Op::Auth,
            Msg::Welcome { .. } => Op::Welcome,
            Msg::Link { .. } => Op::Link,
            Msg::Done => Op::Done,
            Msg::Read { .. } => Op::Read,
            Msg::ReadOk { .. } => Op::ReadOk,
            Msg::Write { .. } => Op::Write,
            Msg::ReadOkPacked { .. } => Op::ReadOkPacked,
            Msg::WritePacked { .. } => Op::WritePacked,
            Msg::LogBatch { .. } => Op::LogBatch,
            Msg::LogAck { .. } => Op::LogAck,
            Msg::Alloc { .. } => Op::Alloc,
            Msg::AllocOk { .. } => Op::AllocOk,
            Msg::Release { .. } => Op::Release,
            Msg::Lease { .. } => Op::Lease,
            Msg::Register { .. } => Op::Register,
            Msg::Registered { .. } => Op::Registered,
            Msg::Heartbeat { .. } => Op::Heartbeat,
            Msg::Leave { .. } => Op::Leave,
            Msg::RemoveNode { .. } => Op::RemoveNode,
            Msg::Grant { .. } => Op::Grant,
            Msg::Revoke { .. } => Op::Revoke,
            Msg::Present { .. } => Op::Present,
            Msg::Remirror { .. } => Op::Remirror,
            Msg::ListNodes => Op::ListNodes,
            Msg::NodesOk { .. } => Op::NodesOk,
            Msg::Stats => Op::Stats,
            Msg::StatsOk { .. } => Op::StatsOk,
            Msg::Error { .. } => Op::Error,
        }
    }

    /// Appends this message as one frame with request id `id`.
    pub fn encode(&self, id: u64, out: &mut Vec<u8>) {
        encode_frame(out, self.op() as u8, id, |b| self.encode_body(b));
    }

    fn encode_body(&self, b: &mut Vec<u8>) {
        match self {
            Msg::Hello {
                version,
                role,
                name,
                nonce,
            } => {
                b.extend_from_slice(&version.to_le_bytes());
                b.push(*role as u8);
                put_str(b, name);
                b.extend_from_slice(nonce);
            }
            Msg::Challenge {
                version,
                nonce,
                proof,
                max_frame,
            } => {
                b.extend_from_slice(&version.to_le_bytes());
                b.extend_from_slice(nonce);
                b.extend_from_slice(proof);
                b.extend_from_slice(&max_frame.to_le_bytes());
            }
            Msg::Auth { proof } => b.extend_from_slice(proof),
            Msg::Welcome {
                session,
                incarnation,
            } => {
                b.extend_from_slice(&session.to_le_bytes());
                b.extend_from_slice(&incarnation.to_le_bytes());
            }
            Msg::Link {
                mode,
                bytes_per_sec,
            } => {
                b.push(*mode as u8);
                b.extend_from_slice(&bytes_per_sec.to_le_bytes());
            }
            Msg::Done | Msg::ListNodes | Msg::Stats => {}
            Msg::Read { addr, len } => {
                b.extend_from_slice(&addr.to_le_bytes());
                b.extend_from_slice(&len.to_le_bytes());
            }
            Msg::ReadOk { data } => b.extend_from_slice(data),
            Msg::ReadOkPacked { packed } => packed.encode(b),
            Msg::WritePacked { addr, packed } => {
                b.extend_from_slice(&addr.to_le_bytes());
                packed.encode(b);
            }
            Msg::Write { addr, data } => {
                b.extend_from_slice(&addr.to_le_bytes());
                b.extend_from_slice(data);
            }
            Msg::LogBatch { records } => b.extend_from_slice(records.raw()),
            Msg::LogAck { applied } => b.extend_from_slice(&applied.to_le_bytes()),
            Msg::Lease { ms } => b.extend_from_slice(&ms.to_le_bytes()),
            Msg::Alloc {
                size,
                placement,
                replicas,
                parity,
                request,
            } => {
                b.extend_from_slice(&size.to_le_bytes());
                b.push(*placement as u8);
                b.push(*replicas);
                if *parity > 0 || *request > 0 {
                    b.push(*parity);
                }
                if *request > 0 {
                    b.extend_from_slice(&request.to_le_bytes());
                }
            }
            Msg::AllocOk { extents } => {
                for e in extents {
                    b.extend_from_slice(&e.node.to_le_bytes());
                    b.extend_from_slice(&e.base.to_le_bytes());
                    b.extend_from_slice(&e.len.to_le_bytes());
                    put_str(b, &e.addr);
                    put_cap(b, e.cap.as_ref());
                    // At most 255 copies; the controller never makes more.
                    b.push(e.mirrors.len().min(255) as u8);
                    for m in e.mirrors.iter().take(255) {
                        b.extend_from_slice(&m.node.to_le_bytes());
                        b.extend_from_slice(&m.base.to_le_bytes());
                        put_str(b, &m.addr);
                        put_cap(b, m.cap.as_ref());
                    }
                }
            }
            Msg::Present { caps } => caps.iter().for_each(|c| c.encode(b)),
            Msg::Remirror {
                base,
                len,
                request,
                avoid,
            } => {
                b.extend_from_slice(&base.to_le_bytes());
                b.extend_from_slice(&len.to_le_bytes());
                b.extend_from_slice(&request.to_le_bytes());
                avoid
                    .iter()
                    .for_each(|n| b.extend_from_slice(&n.to_le_bytes()));
            }
            Msg::Release { base, len } | Msg::Revoke { base, len } => {
                b.extend_from_slice(&base.to_le_bytes());
                b.extend_from_slice(&len.to_le_bytes());
            }
            Msg::Register {
                listen,
                capacity,
                incarnation,
            } => {
                b.extend_from_slice(&capacity.to_le_bytes());
                b.extend_from_slice(&incarnation.to_le_bytes());
                put_str(b, listen);
            }
            Msg::Registered { node, base } => {
                b.extend_from_slice(&node.to_le_bytes());
                b.extend_from_slice(&base.to_le_bytes());
            }
            Msg::Heartbeat { node, used } => {
                b.extend_from_slice(&node.to_le_bytes());
                b.extend_from_slice(&used.to_le_bytes());
            }
            Msg::Leave { node } => b.extend_from_slice(&node.to_le_bytes()),
            Msg::RemoveNode { node, force } => {
                b.extend_from_slice(&node.to_le_bytes());
                b.push(u8::from(*force));
            }
            Msg::Grant {
                owner,
                base,
                len,
                kind,
                stamp,
            } => {
                b.extend_from_slice(&base.to_le_bytes());
                b.extend_from_slice(&len.to_le_bytes());
                b.push(*kind as u8);
                b.extend_from_slice(&stamp.to_le_bytes());
                put_str(b, owner);
            }
            Msg::NodesOk { nodes } => {
                for n in nodes {
                    b.extend_from_slice(&n.node.to_le_bytes());
                    b.extend_from_slice(&n.base.to_le_bytes());
                    b.extend_from_slice(&n.capacity.to_le_bytes());
                    b.extend_from_slice(&n.granted.to_le_bytes());
                    b.push(n.up as u8);
                    put_str(b, &n.addr);
                }
            }
            Msg::StatsOk { json } => b.extend_from_slice(json.as_bytes()),
            Msg::Error { code, message } => {
                b.extend_from_slice(&(*code as u16).to_le_bytes());
                b.extend_from_slice(message.as_bytes());
            }
        }
    }

    /// Decodes a body of opcode `op`. Fails on unknown opcodes, short bodies,
    /// trailing bytes and invalid field values; never panics.
    pub fn decode(op: u8, body: &'a [u8]) -> Result<Self, WireError> {
        let op = Op::from_u8(op)?;
        let mut r = Reader::new(body, op_name(op));
        let msg = match op {
            Op::Hello => Msg::Hello {
                version: r.u16()?,
                role: Role::from_u8(r.u8()?)?,
                name: r.str("client name")?,
                nonce: r.array()?,
            },
            Op::Challenge => Msg::Challenge {
                version: r.u16()?,
                nonce: r.array()?,
                proof: r.array()?,
                max_frame: r.u32()?,
            },
            Op::Auth => Msg::Auth { proof: r.array()? },
            Op::Welcome => Msg::Welcome {
                session: r.u64()?,
                incarnation: r.u64()?,
            },
            Op::Link => Msg::Link {
                mode: LinkMode::from_u8(r.u8()?)?,
                bytes_per_sec: r.u64()?,
            },
            Op::Done => Msg::Done,
            Op::Read => Msg::Read {
                addr: r.u64()?,
                len: r.u32()?,
            },
            Op::ReadOk => Msg::ReadOk { data: r.rest() },
            Op::ReadOkPacked => Msg::ReadOkPacked {
                packed: Packed::decode(&mut r)?,
            },
            Op::WritePacked => Msg::WritePacked {
                addr: r.u64()?,
                packed: Packed::decode(&mut r)?,
            },
            Op::Write => Msg::Write {
                addr: r.u64()?,
                data: r.rest(),
            },
            Op::LogBatch => Msg::LogBatch {
                records: LogRecords::from_raw(r.rest())?,
            },
            Op::LogAck => Msg::LogAck { applied: r.u32()? },
            Op::Alloc => Msg::Alloc {
                size: r.u64()?,
                placement: Placement::from_u8(r.u8()?)?,
                replicas: r.u8()?,
                parity: if r.remaining() > 0 { r.u8()? } else { 0 },
                request: if r.remaining() > 0 { r.u64()? } else { 0 },
            },
            Op::AllocOk => {
                let mut extents = Vec::new();
                while r.remaining() > 0 {
                    let node = r.u32()?;
                    let base = r.u64()?;
                    let len = r.u64()?;
                    let addr = r.str("memnode address")?.to_string();
                    let cap = get_cap(&mut r)?;
                    let mut mirrors = Vec::new();
                    for _ in 0..r.u8()? {
                        mirrors.push(Mirror {
                            node: r.u32()?,
                            base: r.u64()?,
                            addr: r.str("mirror address")?.to_string(),
                            cap: get_cap(&mut r)?,
                        });
                    }
                    extents.push(Extent {
                        node,
                        addr,
                        base,
                        len,
                        mirrors,
                        cap,
                    });
                }
                Msg::AllocOk { extents }
            }
            Op::Release => Msg::Release {
                base: r.u64()?,
                len: r.u64()?,
            },
            Op::Lease => Msg::Lease { ms: r.u32()? },
            Op::Register => {
                let capacity = r.u64()?;
                let incarnation = r.u64()?;
                Msg::Register {
                    listen: r.str("listen address")?,
                    capacity,
                    incarnation,
                }
            }
            Op::Registered => Msg::Registered {
                node: r.u32()?,
                base: r.u64()?,
            },
            Op::Heartbeat => Msg::Heartbeat {
                node: r.u32()?,
                used: r.u64()?,
            },
            Op::Leave => Msg::Leave { node: r.u32()? },
            Op::RemoveNode => Msg::RemoveNode {
                node: r.u32()?,
                force: match r.u8()? {
                    0 => false,
                    1 => true,
                    v => {
                        return Err(WireError::BadValue {
                            what: "force",
                            value: v.into(),
                        });
                    }
                },
            },
            Op::Grant => {
                let base = r.u64()?;
                let len = r.u64()?;
                let kind = GrantKind::from_u8(r.u8()?)?;
                let stamp = r.u64()?;
                Msg::Grant {
                    owner: r.str("owner")?,
                    base,
                    len,
                    kind,
                    stamp,
                }
            }
            Op::Present => {
                let mut caps = Vec::new();
                while r.remaining() > 0 {
                    caps.push(Cap::decode(&mut r)?);
                }
                Msg::Present { caps }
            }
            Op::Remirror => {
                let (base, len, request) = (r.u64()?, r.u64()?, r.u64()?);
                let mut avoid = Vec::new();
                while r.remaining() > 0 {
                    avoid.push(r.u32()?);
                }
                Msg::Remirror {
                    base,
                    len,
                    request,
                    avoid,
                }
            }
            Op::Revoke => Msg::Revoke {
                base: r.u64()?,
                len: r.u64()?,
            },
            Op::ListNodes => Msg::ListNodes,
            Op::NodesOk => {
                let mut nodes = Vec::new();
                while r.remaining() > 0 {
                    let node = r.u32()?;
                    let base = r.u64()?;
                    let capacity = r.u64()?;
                    let granted = r.u64()?;
                    let up = r.u8()? != 0;
                    let addr = r.str("memnode address")?.to_string();
                    nodes.push(NodeInfo {
                        node,
                        addr,
                        base,
                        capacity,
                        granted,
                        up,
                    });
                }
                Msg::NodesOk { nodes }
            }
            Op::Stats => Msg::Stats,
            Op::StatsOk => Msg::StatsOk {
                json: std::str::from_utf8(r.rest())
                    .map_err(|_| WireError::BadUtf8 { what: "stats" })?,
            },
            Op::Error => {
                let code = ErrorCode::from_u16(r.u16()?);
                let message = std::str::from_utf8(r.rest()).map_err(|_| WireError::BadUtf8 {
                    what: "error message",
                })?;
                Msg::Error { code, message }
            }
        };
        r.finish()?;
        Ok(msg)
    }
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Hello => "hello",
        Op::Challenge => "challenge",
        Op::Auth => "auth",
        Op::Welcome => "welcome",
        Op::Link => "link",
        Op::Done => "done",
        Op::Read => "read",
        Op::ReadOk => "read reply",
        Op::Write => "write",
        Op::ReadOkPacked => "packed read reply",
        Op::WritePacked => "packed write",
        Op::LogBatch => "log batch",
        Op::LogAck => "log ack",
        Op::Alloc => "alloc",
        Op::AllocOk => "alloc reply",
        Op::Release => "release",
        Op::Lease => "lease",
        Op::Register => "register",
        Op::Registered => "register reply",
        Op::Heartbeat => "heartbeat",
        Op::Leave => "leave",
        Op::RemoveNode => "remove node",
        Op::Grant => "grant",
        Op::Revoke => "revoke",
        Op::Present => "present",
        Op::Remirror => "remirror",
        Op::ListNodes => "list nodes",
        Op::NodesOk => "nodes reply",
        Op::Stats => "stats",
        Op::StatsOk => "stats reply",
        Op::Error => "error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DEFAULT_MAX_FRAME, HEADER_LEN, decode_header};
    use proptest::prelude::*;

    fn round_trip(msg: Msg<'_>) {
        let mut buf = Vec::new();
        msg.encode(7, &mut buf);
        let header =
            decode_header(buf[..HEADER_LEN].try_into().unwrap(), DEFAULT_MAX_FRAME).unwrap();
        assert_eq!(header.id, 7);
        assert_eq!(header.body_len as usize, buf.len() - HEADER_LEN);
        let back = Msg::decode(header.op, &buf[HEADER_LEN..]).unwrap();
        assert_eq!(back, msg);
    }

    #[test]
    fn every_message_round_trips() {
        let line = [0xabu8; 64];
        let mut raw = Vec::new();
        LogRecords::encode_into(&mut raw, 4096, &line);
        LogRecords::encode_into(&mut raw, 8192 + 64, &line);
        let extent = Extent {
            node: 2,
            addr: "127.0.0.1:7001".into(),
            base: 1 << 40,
            len: 128 << 20,
            mirrors: vec![Mirror {
                node: 3,
                addr: "127.0.0.1:7002".into(),
                base: 1 << 41,
                cap: None,
            }],
            cap: None,
        };
        let cap = Cap {
            node: 2,
            base: 1 << 40,
            len: 128 << 20,
            stamp: 0xabc,
            mac: [7; 32],
        };
        for msg in [
            Msg::Hello {
                version: 1,
                role: Role::Compute,
                name: "cn-0",
                nonce: [3; 16],
            },
            Msg::Challenge {
                version: 1,
                nonce: [4; 16],
                proof: [5; 32],
                max_frame: 1 << 20,
            },
            Msg::Auth { proof: [6; 32] },
            Msg::Welcome {
                session: 99,
                incarnation: 0xfeed,
            },
            Msg::Done,
            Msg::Read {
                addr: 12345,
                len: 4096,
            },
            Msg::ReadOk { data: b"hello" },
            Msg::Write {
                addr: 64,
                data: &[1, 2, 3],
            },
            Msg::LogBatch {
                records: LogRecords::from_raw(&raw).unwrap(),
            },
            Msg::LogAck { applied: 2 },
            Msg::Alloc {
                size: 1 << 30,
                placement: Placement::LeastLoaded,
                replicas: 2,
                parity: 0,
                request: 0,
            },
            Msg::Alloc {
                size: 1 << 20,
                placement: Placement::Default,
                replicas: 6,
                parity: 2,
                request: 0x1234_5678_9abc_def1,
            },
            Msg::AllocOk {
                extents: vec![
                    extent.clone(),
                    Extent {
                        cap: Some(cap.clone()),
                        ..extent
                    },
                ],
            },
            Msg::Remirror {
                base: 1 << 40,
                len: 128 << 20,
                request: 7,
                avoid: vec![0, 3],
            },
            Msg::Present {
                caps: vec![cap.clone(), cap],
            },
            Msg::Release { base: 1, len: 2 },
            Msg::Lease { ms: 30_000 },
            Msg::Register {
                listen: "127.0.0.1:9",
                capacity: 1 << 36,
                incarnation: 77,
            },
            Msg::Registered {
                node: 3,
                base: 1 << 40,
            },
            Msg::Heartbeat { node: 3, used: 77 },
            Msg::Leave { node: 3 },
            Msg::RemoveNode {
                node: 4,
                force: false,
            },
            Msg::RemoveNode {
                node: u32::MAX,
                force: true,
            },
            Msg::Grant {
                owner: "cn-0",
                base: 5,
                len: 6,
                kind: GrantKind::Lost,
                stamp: 42,
            },
            Msg::Revoke { base: 5, len: 6 },
            Msg::ListNodes,
            Msg::NodesOk {
                nodes: vec![NodeInfo {
                    node: 1,
                    addr: "a:1".into(),
                    base: 0,
                    capacity: 9,
                    granted: 3,
                    up: true,
                }],
            },
            Msg::Stats,
            Msg::StatsOk { json: "{\"a\":1}" },
            Msg::Error {
                code: ErrorCode::NotOwner,
                message: "not yours",
            },
        ] {
            round_trip(msg);
        }
    }

    #[test]
    fn log_records_iterate_in_order() {
        let mut raw = Vec::new();
        for i in 0..3u8 {
            LogRecords::encode_into(&mut raw, u64::from(i) * 64, &[i; 64]);
        }
        let recs = LogRecords::from_raw(&raw).unwrap();
        let got: Vec<_> = recs.iter().map(|r| (r.addr, r.line[0])).collect();
        assert_eq!(got, vec![(0, 0), (64, 1), (128, 2)]);
    }

    #[test]
    fn oversized_frames_are_refused_before_allocation() {
        let mut header = [0u8; HEADER_LEN];
        header[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode_header(&header, DEFAULT_MAX_FRAME),
            Err(WireError::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn malformed_bodies_get_typed_errors() {
        assert_eq!(Msg::decode(0x55, &[]), Err(WireError::UnknownOp(0x55)));
        assert!(matches!(
            Msg::decode(Op::Read as u8, &[1, 2, 3]),
            Err(WireError::Truncated { .. })
        ));
        assert!(matches!(
            Msg::decode(Op::Done as u8, &[0]),
            Err(WireError::Trailing(1))
        ));
        assert!(matches!(
            Msg::decode(Op::LogBatch as u8, &[0; 73]),
            Err(WireError::Truncated { .. })
        ));
        assert!(matches!(
            Msg::decode(Op::Hello as u8, &[1, 0, 9, 0]),
            Err(WireError::BadValue { what: "role", .. })
        ));
        // `force` is a flag byte: other values are reserved, not "true".
        assert_eq!(
            Msg::decode(Op::RemoveNode as u8, &[1, 0, 0, 0, 2]),
            Err(WireError::BadValue {
                what: "force",
                value: 2
            })
        );
    }

    proptest! {
        #[test]
        fn decoder_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if bytes.len() >= HEADER_LEN
                && let Ok(h) = decode_header(bytes[..HEADER_LEN].try_into().unwrap(), DEFAULT_MAX_FRAME)
            {
                let end = (HEADER_LEN + h.body_len as usize).min(bytes.len());
                let _ = Msg::decode(h.op, &bytes[HEADER_LEN..end]);
            }
            if let Some((&op, body)) = bytes.split_first() {
                let _ = Msg::decode(op, body);
            }
        }

        #[test]
        fn any_valid_op_with_random_body_never_panics(op in 0u8..0x80, body in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = Msg::decode(op, &body);
        }
    }
}
