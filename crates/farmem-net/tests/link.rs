//! Link compression on the wire (issue 23, point 3): packed writes and
//! read replies between a client and a server, corrupted payloads refused
//! by name both ways, exact bytes on the link, and peers without it.

use std::sync::Arc;

use farmem_net::compress::{DecompressError, LinkConfig, LinkStats};
use farmem_net::server::{Peer, Refusal, Server, ServerConfig, Service};
use farmem_net::{ClientConfig, Connection, NetError};
use farmem_wire::{ErrorCode, LinkMode, Msg, PackCodec, Packed, Role};
use parking_lot::Mutex;

const MEM: usize = 1 << 20;

/// A flat memory: reads and writes at an offset, nothing else.
struct Mem(Mutex<Vec<u8>>);

impl Service for Mem {
    fn handle(&self, _: &Peer, id: u64, msg: Msg<'_>, out: &mut Vec<u8>) -> Result<(), Refusal> {
        let range = |addr: u64, len: usize| {
            let at = addr as usize;
            (at.checked_add(len).is_some_and(|end| end <= MEM))
                .then_some(at..at + len)
                .ok_or_else(|| Refusal::new(ErrorCode::OutOfRange, "outside"))
        };
        match msg {
            Msg::Read { addr, len } => {
                let r = range(addr, len as usize)?;
                let mem = self.0.lock();
                Msg::ReadOk { data: &mem[r] }.encode(id, out);
            }
            Msg::Write { addr, data } => {
                let r = range(addr, data.len())?;
                self.0.lock()[r].copy_from_slice(data);
                Msg::Done.encode(id, out);
            }
            other => return Err(Refusal::unsupported("mem", &other)),
        }
        Ok(())
    }
}

/// Answers every read with the same packed reply, whatever it asked.
struct Liar(Vec<u8>, Packed<'static>);

impl Service for Liar {
    fn handle(&self, _: &Peer, id: u64, _: Msg<'_>, out: &mut Vec<u8>) -> Result<(), Refusal> {
        let packed = Packed {
            data: &self.0,
            ..self.1
        };
        Msg::ReadOkPacked { packed }.encode(id, out);
        Ok(())
    }
}

fn server(service: Arc<dyn Service>, link: bool, max_version: u16) -> Server {
    let cfg = ServerConfig {
        link_compression: link,
        max_version,
        ..ServerConfig::default()
    };
    Server::start("127.0.0.1:0", cfg, service).unwrap()
}

fn client(server: &Server, mode: LinkMode) -> (Connection, Arc<LinkStats>) {
    let mut cfg = ClientConfig::new("cn-0", Role::Compute);
    cfg.link = LinkConfig {
        mode,
        ..LinkConfig::default()
    };
    let stats = cfg.link.stats.clone();
    let conn = Connection::connect(&server.local_addr().to_string(), &cfg).unwrap();
    (conn, stats)
}

/// A page of 64-bit counters: LZ4 and FPC+BDI both shrink it.
fn page(len: usize, seed: u64) -> Vec<u8> {
    (0..len as u64 / 8)
        .flat_map(|i| (seed + i % 61).to_le_bytes())
        .collect()
}

/// `page`'s bytes packed by the real packer, as a peer would send them.
fn packed_page(raw: &[u8], mode: LinkMode) -> (Vec<u8>, PackCodec, u32) {
    let mut p = farmem_net::compress::Packer::new(mode, 0).unwrap();
    let meta = p.pack(raw, false, &LinkStats::default()).unwrap();
    (p.packed().to_vec(), meta.codec, meta.crc)
}

#[test]
fn pages_and_clusters_cross_packed_both_ways_with_exact_byte_counts() {
    let mem = Arc::new(Mem(Mutex::new(vec![0; MEM])));
    let srv = server(mem.clone(), true, farmem_wire::PROTOCOL_VERSION);
    for mode in [LinkMode::Lz, LinkMode::FpcBdi, LinkMode::Off] {
        let (conn, stats) = client(&srv, mode);
        assert_eq!(conn.link_mode(), mode);
        let sizes = [4096usize, 64 << 10];
        let mut at = 0u64;
        for (i, &len) in sizes.iter().enumerate() {
            let data = page(len, i as u64 * 1000 + mode as u64);
            conn.write(at, &data).unwrap();
            assert_eq!(&mem.0.lock()[at as usize..at as usize + len], &data[..]);
            let mut back = vec![0; len];
            conn.read(at, &mut back).unwrap();
            assert_eq!(crc32fast::hash(&back), crc32fast::hash(&data));
            at += len as u64;
        }
        let s = stats.snapshot();
        let total = sizes.iter().sum::<usize>() as u64;
        assert_eq!((s.write_raw_bytes, s.read_raw_bytes), (total, total));
        if mode == LinkMode::Off {
            assert_eq!((s.write_wire_bytes, s.read_wire_bytes), (total, total));
            assert_eq!(s.compression_ratio, 1.0);
        } else {
            // Sent packed (each codec at least halves these pages) and
            // received packed, both payloads of both sizes.
            assert!(s.write_wire_bytes * 2 < total, "{s:?}");
            assert!(s.read_wire_bytes * 2 < total, "{s:?}");
            assert_eq!(s.packed_lz + s.packed_fpc_bdi, 2);
            assert_eq!(s.unpacked, 2);
            assert!(s.compression_ratio > 2.0);
        }
    }
    // Every frame either side sent, the other received, byte for byte.
    let server_side = srv.stats().link.snapshot();
    let before = srv.stats().link.snapshot();
    let (conn, stats) = client(&srv, LinkMode::Lz);
    conn.write(0, &page(4096, 5)).unwrap();
    let mut back = vec![0; 4096];
    conn.read(0, &mut back).unwrap();
    let after = srv.stats().link.snapshot();
    let c = stats.snapshot();
    assert_eq!(
        c.frame_bytes_sent,
        after.frame_bytes_received - before.frame_bytes_received
    );
    assert_eq!(
        c.frame_bytes_received,
        after.frame_bytes_sent - before.frame_bytes_sent
    );
    assert!(server_side.unpacked >= 4, "{server_side:?}");
}

#[test]
fn corrupted_packed_writes_are_refused_by_name_and_write_nothing() {
    let mem = Arc::new(Mem(Mutex::new(vec![0; MEM])));
    let srv = server(mem.clone(), true, farmem_wire::PROTOCOL_VERSION);
    let (conn, _) = client(&srv, LinkMode::Lz);
    let good = page(4096, 1);
    conn.write(0, &good).unwrap();
    let (data, codec, crc) = packed_page(&page(4096, 2), LinkMode::Lz);
    let mut flipped = data.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    let cases: [(&[u8], u32, &str); 4] = [
        (&flipped, 4096, "flipped"),
        (&data[..data.len() - 7], 4096, "truncated"),
        (&data, 4095, "lying length"),
        (&data, 1 << 30, "huge length"),
    ];
    for (bytes, raw_len, what) in cases {
        let packed = Packed {
            codec,
            raw_len,
            crc,
            data: bytes,
        };
        match conn
            .call(&Msg::WritePacked { addr: 0, packed })
            .unwrap()
            .done("w")
        {
            Err(NetError::Remote {
                code: ErrorCode::BadPayload,
                message,
            }) => assert!(message.contains("packed"), "{what}: {message}"),
            other => panic!("{what}: {other:?}"),
        }
        assert_eq!(&mem.0.lock()[..4096], &good[..], "{what} wrote");
    }
    assert_eq!(srv.stats().link.decompress_errors.get(), 4);
    // The session goes on: the stream was never out of frame.
    let mut back = vec![0; 4096];
    conn.read(0, &mut back).unwrap();
    assert_eq!(back, good);
}

#[test]
fn corrupted_packed_replies_are_typed_errors_never_a_wrong_page() {
    let raw = page(4096, 3);
    let (data, codec, crc) = packed_page(&raw, LinkMode::Lz);
    let mut flipped = data.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    let truncated = data[..data.len() - 5].to_vec();
    type Check = fn(&DecompressError) -> bool;
    let cases: [(Vec<u8>, u32, u32, Check); 5] = [
        (flipped, 4096, crc, |e| {
            matches!(
                e,
                DecompressError::Checksum { .. } | DecompressError::Codec(_)
            )
        }),
        (truncated, 4096, crc, |e| {
            matches!(
                e,
                DecompressError::Codec(_) | DecompressError::Length { .. }
            )
        }),
        (data.clone(), 2048, crc, |e| {
            *e == DecompressError::Length {
                codec: "lz",
                claimed: 2048,
                got: 4096,
            }
        }),
        (data.clone(), u32::MAX, crc, |e| {
            matches!(
                e,
                DecompressError::TooLarge {
                    claimed: u32::MAX,
                    ..
                }
            )
        }),
        (data.clone(), 4096, crc ^ 0x8000, |e| {
            matches!(e, DecompressError::Checksum { .. })
        }),
    ];
    for (i, (bytes, raw_len, crc, check)) in cases.into_iter().enumerate() {
        let template = Packed {
            codec,
            raw_len,
            crc,
            data: &[],
        };
        let srv = server(
            Arc::new(Liar(bytes, template)),
            true,
            farmem_wire::PROTOCOL_VERSION,
        );
        let (conn, stats) = client(&srv, LinkMode::Lz);
        let mut buf = vec![0u8; 4096];
        match conn.read(0, &mut buf) {
            Err(NetError::Decompress(e)) => assert!(check(&e), "case {i}: {e}"),
            other => panic!("case {i}: {other:?}"),
        }
        assert!(
            buf.iter().all(|&b| b == 0),
            "case {i}: the page was touched"
        );
        assert_eq!(stats.snapshot().decompress_errors, 1);
    }
    // A packed reply on a session that never agreed to it.
    let template = Packed {
        codec,
        raw_len: 4096,
        crc,
        data: &[],
    };
    let srv = server(
        Arc::new(Liar(data, template)),
        true,
        farmem_wire::PROTOCOL_VERSION,
    );
    let (conn, _) = client(&srv, LinkMode::Off);
    let mut buf = vec![0u8; 4096];
    assert!(matches!(
        conn.read(0, &mut buf),
        Err(NetError::Decompress(DecompressError::NotNegotiated { .. }))
    ));
}

#[test]
fn an_old_server_or_one_that_declines_gets_plain_frames() {
    for (link, max_version) in [(true, 3), (false, farmem_wire::PROTOCOL_VERSION)] {
        let mem = Arc::new(Mem(Mutex::new(vec![0; MEM])));
        let srv = server(mem.clone(), link, max_version);
        let (conn, stats) = client(&srv, LinkMode::Lz);
        assert_eq!(conn.link_mode(), LinkMode::Off);
        let data = page(64 << 10, 9);
        conn.write(4096, &data).unwrap();
        let mut back = vec![0; data.len()];
        conn.read(4096, &mut back).unwrap();
        assert_eq!(back, data);
        let s = stats.snapshot();
        assert_eq!(s.write_wire_bytes, s.write_raw_bytes);
        assert_eq!(s.read_wire_bytes, s.read_raw_bytes);
        assert_eq!(srv.stats().link.unpacked.get(), 0);
    }
}

/// The `rate:` gate charges what crossed, not what was asked for: a packed
/// write and a packed read reply each give the gate back their saving, so
/// its byte count is the payloads on the wire, exactly (issue 23's debt
/// from link compression). Plain frames are charged whole.
#[test]
fn a_rate_gate_charges_packed_payloads_their_bytes_on_the_wire() {
    use farmem_net::delay::{EgressDelay, GateStats};
    use farmem_policy::delay::DelayModel;
    let mem = Arc::new(Mem(Mutex::new(vec![0; MEM])));
    let srv = server(mem, true, farmem_wire::PROTOCOL_VERSION);
    for mode in [LinkMode::Lz, LinkMode::Off] {
        // Fast enough that the test does not wait on it.
        let gate = Arc::new(EgressDelay::new(
            DelayModel::Rate {
                bytes_per_sec: 1 << 30,
            },
            0,
        ));
        let mut cfg = ClientConfig::new("cn-0", Role::Compute).with_delay(gate.clone());
        cfg.link = LinkConfig {
            mode,
            ..LinkConfig::default()
        };
        let stats = cfg.link.stats.clone();
        let conn = Connection::connect(&srv.local_addr().to_string(), &cfg).unwrap();
        let data = page(64 << 10, 7);
        conn.write(0, &data).unwrap();
        let mut back = vec![0; data.len()];
        conn.read(0, &mut back).unwrap();
        assert_eq!(back, data);
        let s = stats.snapshot();
        let g = GateStats::of(std::slice::from_ref(&gate));
        assert_eq!(g.requests, 2);
        assert_eq!(gate.bytes.get(), 2 * data.len() as u64, "admitted as asked");
        assert_eq!(g.bytes, s.write_wire_bytes + s.read_wire_bytes, "{s:?}");
        if mode == LinkMode::Off {
            assert_eq!(gate.refunded.get(), 0);
            assert_eq!(g.bytes, 2 * data.len() as u64);
        } else {
            assert!(g.bytes * 2 < 2 * data.len() as u64, "{g:?} {s:?}");
            assert_eq!(
                gate.refunded.get(),
                2 * data.len() as u64 - s.write_wire_bytes - s.read_wire_bytes
            );
        }
    }
}

/// A gate counts the reads faults wait for apart from the rest, with
/// their round trips even when it holds nothing, so a delay's statistics
/// compare with none's (`farmem eval delay`'s `added`).
#[test]
fn a_gate_counts_demand_reads_and_their_round_trips_with_no_delay_too() {
    use farmem_net::delay::{EgressDelay, GateStats};
    use farmem_policy::delay::DelayModel;
    let mem = Arc::new(Mem(Mutex::new(vec![0; MEM])));
    let srv = server(mem, false, farmem_wire::PROTOCOL_VERSION);
    let gate = Arc::new(EgressDelay::new(DelayModel::None, 0));
    let cfg = ClientConfig::new("cn-0", Role::Compute).with_delay(gate.clone());
    let conn = Connection::connect(&srv.local_addr().to_string(), &cfg).unwrap();
    let data = page(4096, 3);
    conn.write(0, &data).unwrap();
    let mut back = vec![0; data.len()];
    for _ in 0..2 {
        conn.read(0, &mut back).unwrap();
        assert_eq!(back, data);
    }
    let g = GateStats::of(std::slice::from_ref(&gate));
    assert_eq!((g.requests, g.demand_reads), (3, 2), "{g:?}");
    assert_eq!(gate.demand.landed.get(), 2, "both replies counted");
    assert!(gate.demand.round_trip_ns.get() > 0);
    assert_eq!(gate.demand.held_ns.get(), 0, "no delay, no hold");
}
