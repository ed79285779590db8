//! Structured random inputs: valid frames of every message kind with
//! values a decoder or handler finds interesting, then mutated byte-wise so
//! that the deep paths behind a correct header and opcode are reached.

use farmem_wire::{
    Cap, ErrorCode, Extent, GrantKind, HEADER_LEN, LogRecords, Mirror, Msg, NodeInfo,
    PROTOCOL_VERSION, Placement, Role,
};
use rand::Rng;
use rand::rngs::SmallRng;

/// What a target knows that makes inputs land: peer names, and addresses
/// and sizes worth aiming at (its range, extents it handed out).
pub struct Context {
    pub names: Vec<String>,
    pub dict: Vec<u64>,
    /// Where addresses worth aiming at lie, if the target has one range.
    pub span: Option<(u64, u64)>,
    /// Most learned values kept; older ones are replaced at random.
    pub dict_max: usize,
}

impl Context {
    pub fn new(names: &[&str], dict: &[u64]) -> Self {
        Self {
            names: names.iter().map(|s| s.to_string()).collect(),
            dict: dict.to_vec(),
            span: None,
            dict_max: 256,
        }
    }

    /// Remembers a value seen in a reply or an accepted request.
    pub fn learn(&mut self, rng: &mut SmallRng, v: u64) {
        if self.dict.len() < self.dict_max {
            self.dict.push(v);
        } else {
            let i = rng.gen_range(0..self.dict.len());
            self.dict[i] = v;
        }
    }
}

const EDGES: [u64; 14] = [
    0,
    1,
    63,
    64,
    4095,
    4096,
    1 << 20,
    2 << 20,
    128 << 20,
    i32::MAX as u64,
    u32::MAX as u64,
    i64::MAX as u64,
    1 << 63,
    u64::MAX,
];

/// A value near an edge, a learned value, or anything.
pub fn value(rng: &mut SmallRng, ctx: &Context) -> u64 {
    match rng.gen_range(0..10) {
        0..=4 if !ctx.dict.is_empty() => {
            let v = ctx.dict[rng.gen_range(0..ctx.dict.len())];
            match rng.gen_range(0..5) {
                0 => v.wrapping_add(rng.gen_range(0..4096)),
                1 => v.wrapping_sub(rng.gen_range(0..4096)),
                2 => v.wrapping_add(rng.gen_range(0..1 << 20) & !63),
                _ => v,
            }
        }
        5..=6 => {
            let v = EDGES[rng.gen_range(0..EDGES.len())];
            v.wrapping_add(rng.gen_range(0..3)).wrapping_sub(1)
        }
        7 => match ctx.span {
            Some((lo, hi)) if lo < hi => rng.gen_range(lo..hi) & !63,
            _ => rng.gen_range(0..1 << 16),
        },
        8 => rng.gen_range(0..1 << 16),
        _ => rng.r#gen(),
    }
}

/// An address: inside the target's range half the time, else any value.
fn address(rng: &mut SmallRng, ctx: &Context) -> u64 {
    match ctx.span {
        Some((lo, hi)) if lo < hi && rng.gen_bool(0.5) => {
            let a = rng.gen_range(lo..hi);
            if rng.gen_bool(0.7) { a & !63 } else { a }
        }
        _ => value(rng, ctx),
    }
}

fn value32(rng: &mut SmallRng, ctx: &Context) -> u32 {
    let v = value(rng, ctx);
    if v > u64::from(u32::MAX) && rng.gen_bool(0.5) {
        v as u32
    } else {
        v.min(u64::from(u32::MAX)) as u32
    }
}

/// A string: a peer's name, an address, empty, long, or multi-byte.
pub fn string(rng: &mut SmallRng, ctx: &Context) -> String {
    match rng.gen_range(0..6) {
        0 => String::new(),
        1 | 2 if !ctx.names.is_empty() => ctx.names[rng.gen_range(0..ctx.names.len())].clone(),
        3 => format!("127.0.0.1:{}", rng.gen_range(0..70_000u32)),
        4 => "é€😀".repeat(rng.gen_range(1..40)),
        _ => {
            let n = rng.gen_range(0..300);
            (0..n).map(|_| rng.gen_range(b' '..=b'~') as char).collect()
        }
    }
}

fn bytes(rng: &mut SmallRng, max: usize) -> Vec<u8> {
    let n = if rng.gen_bool(0.9) {
        rng.gen_range(0..=max.min(512))
    } else {
        rng.gen_range(0..=max)
    };
    let mut v = vec![0u8; n];
    rng.fill(&mut v[..]);
    v
}

fn role(rng: &mut SmallRng) -> Role {
    [Role::Compute, Role::MemNode, Role::Controller, Role::Admin][rng.gen_range(0..4)]
}

fn log_records(rng: &mut SmallRng, ctx: &Context) -> Vec<u8> {
    let mut raw = Vec::new();
    let start = address(rng, ctx) & !63;
    for _ in 0..rng.gen_range(0..32) {
        let mut line = [0u8; 64];
        rng.fill(&mut line[..]);
        // Mostly lines near one another, as a real batch is.
        let addr = if rng.gen_bool(0.8) {
            start.wrapping_add(rng.gen_range(0..256) * 64)
        } else {
            value(rng, ctx)
        };
        LogRecords::encode_into(&mut raw, addr, &line);
    }
    raw
}

/// Message kinds [`valid_frame`] makes, in opcode order; a few by name.
pub const KINDS: usize = 29;
pub const READ: usize = 5;
pub const WRITE: usize = 7;
pub const LOG_BATCH: usize = 8;
pub const ALLOC: usize = 10;
pub const RELEASE: usize = 12;
pub const LEASE: usize = 13;
pub const REGISTER: usize = 14;
pub const HEARTBEAT: usize = 16;
pub const GRANT: usize = 17;
pub const REVOKE: usize = 18;

/// A peer's name most of the time (owners), else any string.
fn name(rng: &mut SmallRng, ctx: &Context) -> String {
    if rng.gen_bool(0.8) && !ctx.names.is_empty() {
        ctx.names[rng.gen_range(0..ctx.names.len())].clone()
    } else {
        string(rng, ctx)
    }
}

/// Appends one well-formed frame of message kind `kind` (below [`KINDS`]).
pub fn valid_frame(rng: &mut SmallRng, ctx: &Context, kind: usize, out: &mut Vec<u8>) {
    let id = if rng.gen_bool(0.8) {
        rng.gen_range(0..1 << 20)
    } else {
        rng.r#gen()
    };
    let name = if kind == GRANT {
        name(rng, ctx)
    } else {
        string(rng, ctx)
    };
    let raw = if kind == 8 {
        log_records(rng, ctx)
    } else {
        Vec::new()
    };
    let data = if kind == 6 || kind == 7 {
        bytes(rng, 64 << 10)
    } else {
        Vec::new()
    };
    let (a, b, mut c) = (address(rng, ctx), value(rng, ctx), value32(rng, ctx));
    if kind == READ && rng.gen_bool(0.5) {
        c = rng.gen_range(0..=8192);
    }
    let msg = match kind {
        0 => Msg::Hello {
            version: if rng.gen_bool(0.8) {
                PROTOCOL_VERSION
            } else {
                rng.r#gen()
            },
            role: role(rng),
            name: &name,
            nonce: rng.r#gen(),
        },
        1 => Msg::Challenge {
            version: PROTOCOL_VERSION,
            nonce: rng.r#gen(),
            proof: rng.r#gen(),
            max_frame: c,
        },
        2 => Msg::Auth { proof: rng.r#gen() },
        3 => Msg::Welcome {
            session: a,
            incarnation: b,
        },
        4 => Msg::Done,
        5 => Msg::Read { addr: a, len: c },
        6 => Msg::ReadOk { data: &data },
        7 => Msg::Write {
            addr: a,
            data: &data,
        },
        8 => Msg::LogBatch {
            records: LogRecords::from_raw(&raw).expect("whole records"),
        },
        9 => Msg::LogAck { applied: c },
        10 => Msg::Alloc {
            size: a,
            placement: [
                Placement::Default,
                Placement::RoundRobin,
                Placement::LeastLoaded,
            ][rng.gen_range(0..3)],
            replicas: rng.gen_range(0..4),
            parity: rng.gen_range(0..2),
            request: if rng.gen_bool(0.5) { b } else { 0 },
        },
        11 => Msg::AllocOk {
            extents: (0..rng.gen_range(0..4))
                .map(|_| Extent {
                    node: c,
                    addr: name.clone(),
                    base: a,
                    len: b,
                    cap: rng.gen_bool(0.5).then(|| cap(rng, a, b, c)),
                    mirrors: (0..rng.gen_range(0..3))
                        .map(|_| Mirror {
                            node: c,
                            addr: name.clone(),
                            base: b,
                            cap: rng.gen_bool(0.5).then(|| cap(rng, a, b, c)),
                        })
                        .collect(),
                })
                .collect(),
        },
        12 => Msg::Release { base: a, len: b },
        13 => Msg::Lease { ms: c },
        14 => Msg::Register {
            listen: &name,
            capacity: b,
            incarnation: a,
        },
        15 => Msg::Registered { node: c, base: a },
        16 => Msg::Heartbeat { node: c, used: b },
        17 => Msg::Grant {
            owner: &name,
            base: a,
            len: b,
            kind: [GrantKind::Resend, GrantKind::Fresh, GrantKind::Lost][rng.gen_range(0..3)],
            stamp: value(rng, ctx),
        },
        18 => Msg::Revoke { base: a, len: b },
        19 => Msg::ListNodes,
        20 => Msg::NodesOk {
            nodes: (0..rng.gen_range(0..4))
                .map(|_| NodeInfo {
                    node: c,
                    addr: name.clone(),
                    base: a,
                    capacity: b,
                    granted: a / 2,
                    up: rng.r#gen(),
                })
                .collect(),
        },
        21 => Msg::Stats,
        22 => Msg::StatsOk { json: &name },
        23 => Msg::Present {
            caps: (0..rng.gen_range(0..4))
                .map(|_| cap(rng, a, b, c))
                .collect(),
        },
        // Never forced: a forced removal takes an up node out, and a few
        // would empty the rig's rack and starve the allocation paths the
        // fuzzer is there to reach (tests/node_remove.rs covers forcing).
        24 => Msg::RemoveNode {
            node: c,
            force: false,
        },
        // Link compression: agreed to, then packed payloads whose bytes,
        // codec, length and checksum are random (refused by name).
        25 => Msg::Link {
            mode: farmem_wire::LinkMode::from_u8(rng.gen_range(0..5)).expect("a mode"),
            bytes_per_sec: b,
        },
        26 | 27 => {
            let packed = farmem_wire::Packed {
                codec: farmem_wire::PackCodec::from_u8(rng.gen_range(1..4)).expect("a codec"),
                raw_len: if rng.gen_bool(0.5) { 4096 } else { c },
                crc: rng.r#gen(),
                data: &data,
            };
            if kind == 26 {
                Msg::WritePacked { addr: a, packed }
            } else {
                Msg::ReadOkPacked { packed }
            }
        }
        _ => Msg::Error {
            code: ErrorCode::from_u16(rng.gen_range(0..10)),
            message: &name,
        },
    };
    msg.encode(id, out);
}

/// A capability for [base, +len) on `node`, its MAC random: refused by any
/// daemon with a secret, but it exercises the checks on the way.
fn cap(rng: &mut SmallRng, base: u64, len: u64, node: u32) -> Cap {
    Cap {
        node,
        base,
        len,
        stamp: rng.r#gen(),
        mac: rng.r#gen(),
    }
}

/// Applies one byte-level mutation to `buf`.
pub fn mutate(rng: &mut SmallRng, ctx: &Context, buf: &mut Vec<u8>) {
    let pos = |rng: &mut SmallRng, len: usize| rng.gen_range(0..len.max(1));
    match rng.gen_range(0..10) {
        0 if !buf.is_empty() => {
            let i = pos(rng, buf.len());
            buf[i] ^= 1 << rng.gen_range(0..8);
        }
        1 if !buf.is_empty() => {
            let i = pos(rng, buf.len());
            buf[i] = [0, 1, 0x7f, 0x80, 0xff, 0xfe][rng.gen_range(0..6)];
        }
        2 if buf.len() >= 4 => {
            let i = rng.gen_range(0..=buf.len() - 4);
            buf[i..i + 4].copy_from_slice(&value32(rng, ctx).to_le_bytes());
        }
        3 if buf.len() >= 8 => {
            let i = rng.gen_range(0..=buf.len() - 8);
            buf[i..i + 8].copy_from_slice(&value(rng, ctx).to_le_bytes());
        }
        4 => buf.truncate(pos(rng, buf.len() + 1)),
        5 => buf.extend(bytes(rng, 64)),
        6 if !buf.is_empty() => {
            let i = pos(rng, buf.len());
            let n = rng.gen_range(1..=16).min(buf.len() - i);
            buf.drain(i..i + n);
        }
        7 => {
            let i = pos(rng, buf.len() + 1).min(buf.len());
            let ins = bytes(rng, 16);
            buf.splice(i..i, ins);
        }
        8 if buf.len() > 4 => buf[4] = rng.gen_range(0..0x80),
        _ => {
            // Splice the start of another valid frame over our tail.
            let mut other = Vec::new();
            let kind = rng.gen_range(0..KINDS);
            valid_frame(rng, ctx, kind, &mut other);
            let i = pos(rng, buf.len() + 1).min(buf.len());
            let j = pos(rng, other.len());
            buf.truncate(i);
            buf.extend_from_slice(&other[j..]);
        }
    }
}

/// Sets the header's length to what follows it, so a mutated frame is
/// still framed and its body reaches the message decoder.
fn fix_length(buf: &mut [u8]) {
    if buf.len() >= HEADER_LEN {
        let len = (buf.len() - 4) as u32;
        buf[..4].copy_from_slice(&len.to_le_bytes());
    }
}

/// One frame's worth of input: a valid frame of `kind`, most often
/// mutated (its body alone, more often than not), or noise.
pub fn frame(rng: &mut SmallRng, ctx: &Context, kind: usize, out: &mut Vec<u8>) {
    let start = out.len();
    if rng.gen_bool(0.05) {
        out.extend(bytes(rng, 256));
        return;
    }
    valid_frame(rng, ctx, kind, out);
    if rng.gen_bool(0.3) {
        return;
    }
    let mut f = out.split_off(start);
    let mutations = rng.gen_range(1..=6);
    if rng.gen_bool(0.6) {
        let mut body = f.split_off(HEADER_LEN);
        for _ in 0..mutations {
            mutate(rng, ctx, &mut body);
        }
        f.extend_from_slice(&body);
    } else {
        for _ in 0..mutations {
            mutate(rng, ctx, &mut f);
        }
    }
    if rng.gen_bool(0.8) {
        fix_length(&mut f);
    }
    out.extend_from_slice(&f);
}
