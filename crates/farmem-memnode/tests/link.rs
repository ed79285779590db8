//! Link compression across a rack (issue 23, point 3): pages and clusters
//! of every kind of content written to memory nodes and read back through
//! a client that packs them, checked by checksum, with the bytes on the
//! link counted at both ends.

mod common;

use std::time::Duration;

use common::{Rack, TOKEN, checksum};
use farmem_net::{ClientConfig, Cluster};
use farmem_wire::{LinkMode, Placement, Role};
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};

fn client(rack: &Rack, mode: LinkMode) -> Cluster {
    let mut cfg = ClientConfig::new(format!("link-{mode}"), Role::Compute).with_token(TOKEN);
    cfg.link.mode = mode;
    // A slow link, so auto finds packing worth it.
    cfg.link.bytes_per_sec = 100 << 20;
    Cluster::connect(&rack.controller_addr(), cfg, 2).expect("client connects")
}

/// Pages of integers, text, zeros and noise, and 64 KiB clusters of each.
fn contents() -> Vec<Vec<u8>> {
    let mut rng = SmallRng::seed_from_u64(23);
    let mut out = Vec::new();
    for len in [4096usize, 64 << 10] {
        let ints: Vec<u8> = (0..len as u64 / 8)
            .flat_map(|i| (i * 3 % 1000).to_le_bytes())
            .collect();
        let text: Vec<u8> = b"farmem moves pages; DaeMon compresses them. "
            .iter()
            .copied()
            .cycle()
            .take(len)
            .collect();
        let mut noise = vec![0u8; len];
        rng.fill_bytes(&mut noise);
        out.extend([ints, text, vec![0; len], noise]);
    }
    out
}

#[test]
fn pages_cross_the_rack_packed_and_read_back_intact() {
    let rack = Rack::start(2, Duration::from_secs(5));
    let data = contents();
    let total: u64 = data.iter().map(|d| d.len() as u64).sum();
    let mut wire = (0, 0);
    for mode in [
        LinkMode::Auto,
        LinkMode::Lz,
        LinkMode::FpcBdi,
        LinkMode::Off,
    ] {
        let c = client(&rack, mode);
        let extents = c.allocate(4 << 20, Placement::Default).unwrap();
        let base = extents.iter().map(|e| e.base).min().unwrap();
        let mut at = base;
        let mut placed = Vec::new();
        for d in &data {
            c.write(at, d).unwrap();
            placed.push((at, d));
            at += d.len() as u64;
        }
        for (addr, d) in placed {
            let mut back = vec![0xeeu8; d.len()];
            c.read(addr, &mut back).unwrap();
            assert_eq!(checksum(&back), checksum(d), "{mode} at {addr:#x}");
        }
        let s = c.link_stats();
        wire = (wire.0 + s.read_wire_bytes, wire.1 + s.write_wire_bytes);
        assert_eq!(
            (s.write_raw_bytes, s.read_raw_bytes),
            (total, total),
            "{mode}"
        );
        assert_eq!(s.decompress_errors, 0);
        if mode == LinkMode::Off {
            assert_eq!(s.write_wire_bytes + s.read_wire_bytes, 2 * total);
        } else if mode == LinkMode::Auto {
            // Auto packs when its measured codec time beats the link time
            // saved: a loaded host may find it not worth it (a run in the
            // suite sent its reads raw), so only the bound holds here;
            // its choices are tested on their own in farmem-net's compress.
            assert!(s.write_wire_bytes <= total, "{mode}: {s:?}");
            assert!(s.read_wire_bytes <= total, "{mode}: {s:?}");
        } else {
            // The noise (a quarter) crosses raw, and FPC+BDI leaves text
            // nearly as it was; zeros and integers (half) shrink to little.
            assert!(s.write_wire_bytes < total * 3 / 4, "{mode}: {s:?}");
            assert!(s.read_wire_bytes < total * 3 / 4, "{mode}: {s:?}");
            // Every compressible payload under LZ; FPC+BDI leaves text
            // raw: still the integers and zeros.
            let least = if mode == LinkMode::Lz { 6 } else { 4 };
            assert!(s.unpacked >= least, "{mode}: {s:?}");
        }
    }
    // The memory nodes saw the same bytes cross, from their side.
    let nodes: Vec<_> = rack.memnodes.iter().map(|m| m.stats()).collect();
    let sum = |f: fn(&farmem_memnode::MemNodeStats) -> u64| nodes.iter().map(f).sum::<u64>();
    assert_eq!(sum(|n| n.link_read_raw_bytes), 4 * total);
    assert_eq!(sum(|n| n.link_write_raw_bytes), 4 * total);
    assert_eq!(sum(|n| n.link_read_wire_bytes), wire.0);
    assert_eq!(sum(|n| n.link_write_wire_bytes), wire.1);
}
