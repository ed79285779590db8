//! Erasure-coded far memory (`rs:K+M`) on an in-process rack: what is
//! written reads back identically with any M memory nodes killed, never
//! wrong data with more, at (K+M)/K times the bytes. And its parity-free
//! form, `stripe:K`: one copy split over K nodes.

mod common;

use std::time::{Duration, Instant};

use common::{Rack, checksum};
use farmem_net::{Cluster, NetError, Redundancy};
use farmem_wire::{ErrorCode, Placement};
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

const MIB: u64 = 1 << 20;
const GRANULE: u64 = MIB;
const PAGE: usize = 4096;

/// A rack of `nodes` memory nodes of 256 MiB, granting 1 MiB granules.
fn rack(nodes: usize) -> Rack {
    let mut cfg = common::controller_config(Duration::from_secs(5));
    cfg.granularity = GRANULE;
    Rack::sized(cfg, nodes, 256 * MIB)
}

/// A client keeping every later allocation as rs:4+2.
fn ec_client(rack: &Rack, name: &str) -> Cluster {
    let c = rack.replicated_client(name, 1);
    c.set_redundancy("rs:4+2".parse().unwrap());
    c
}

/// Memory written through `c`, and what it should hold.
struct Written {
    base: u64,
    shadow: Vec<u8>,
}

/// Allocates 8 MiB (two stripes), writes seeded random pages in runs,
/// partial pages, whole pages of lines and scattered lines; checks every
/// byte reads back before anything is killed.
fn write_some(c: &Cluster, seed: u64) -> Written {
    let extents = c.allocate(8 * MIB, Placement::Default).unwrap();
    assert_eq!(extents.len(), 2, "{extents:?}");
    assert_eq!(extents[1].base, extents[0].base + 4 * MIB, "contiguous");
    let base = extents[0].base;
    let len = 8 * MIB as usize;
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut shadow = vec![0u8; len];
    rng.fill_bytes(&mut shadow);
    // Runs of 256 KiB, each crossing no stripe.
    for off in (0..len).step_by(256 << 10) {
        c.write(base + off as u64, &shadow[off..off + (256 << 10)])
            .unwrap();
    }
    // Parts of pages, at odd offsets, some across a page boundary.
    for _ in 0..200 {
        let n = rng.gen_range(1..600);
        let off = rng.gen_range(0..len - n);
        rng.fill_bytes(&mut shadow[off..off + n]);
        c.write(base + off as u64, &shadow[off..off + n]).unwrap();
    }
    // A whole page of lines, and scattered lines.
    let page = rng.gen_range(0..len / PAGE) * PAGE;
    rng.fill_bytes(&mut shadow[page..page + PAGE]);
    let mut lines: Vec<(u64, [u8; 64])> = (0..PAGE / 64)
        .map(|i| {
            let off = page + i * 64;
            (base + off as u64, shadow[off..off + 64].try_into().unwrap())
        })
        .collect();
    for _ in 0..300 {
        let off = rng.gen_range(0..len / 64) * 64;
        rng.fill_bytes(&mut shadow[off..off + 64]);
        lines.push((base + off as u64, shadow[off..off + 64].try_into().unwrap()));
    }
    c.write_lines(&lines).unwrap();
    let mut back = vec![0u8; len];
    c.read(base, &mut back).unwrap();
    assert_eq!(checksum(&back), checksum(&shadow));
    Written { base, shadow }
}

/// The ids of the running memory nodes, in order.
fn shard_nodes(rack: &Rack) -> Vec<u32> {
    let mut nodes: Vec<u32> = rack.memnodes.iter().map(|m| m.node_id()).collect();
    nodes.sort_unstable();
    nodes
}

#[test]
fn rs_4_2_costs_one_and_a_half_times_the_logical_bytes() {
    let rack = rack(6);
    let c = ec_client(&rack, "cn-ec-cost");
    let w = write_some(&c, 7);
    let stats = rack.controller.stats();
    assert_eq!(
        stats.granted_bytes,
        12 * MIB,
        "8 MiB logical in 6 shards of 2 MiB"
    );
    assert_eq!(stats.granted_bytes * 2, w.shadow.len() as u64 * 3);
    // Every node holds exactly one shard of each of the two stripes.
    for m in &rack.memnodes {
        let held = c.stripes().len() as u64 * GRANULE;
        assert_eq!(rack_granted(&rack, m.node_id()), held);
    }
    for (base, len) in c.stripes() {
        c.release(base, len).unwrap();
    }
    assert!(c.stripes().is_empty());
    assert_eq!(rack.controller.stats().granted_bytes, 0);
}

fn rack_granted(rack: &Rack, node: u32) -> u64 {
    let nodes = rack.controller.nodes();
    nodes.iter().find(|n| n.node == node).unwrap().granted
}

#[test]
fn any_two_killed_nodes_of_six_lose_nothing() {
    for a in 0..6 {
        for b in a + 1..6 {
            let mut rack = rack(6);
            let ids = shard_nodes(&rack);
            let c = ec_client(&rack, &format!("cn-ec-{a}{b}"));
            let mut w = write_some(&c, (a * 6 + b) as u64);
            rack.kill(ids[a]);
            rack.kill(ids[b]);
            // Reads reconstruct at once, before the nodes are declared down.
            let mut back = vec![0u8; w.shadow.len()];
            c.read(w.base, &mut back).unwrap();
            assert_eq!(
                checksum(&back),
                checksum(&w.shadow),
                "nodes {a} and {b} killed"
            );
            // Page by page too (one page's chunks from 4 shards each time).
            for p in (0..w.shadow.len()).step_by(97 * PAGE) {
                let mut page = [0u8; PAGE];
                c.read(w.base + p as u64, &mut page).unwrap();
                assert!(page[..] == w.shadow[p..p + PAGE]);
            }
            // Writes go on to the four shards left once the two are down:
            // whole pages, parts (read-modify-write from 4 shards) and lines.
            let mut rng = SmallRng::seed_from_u64(99);
            let off = 3 * PAGE + 100;
            let mut fresh = vec![0u8; 2 * PAGE];
            rng.fill_bytes(&mut fresh);
            retry(|| c.write(w.base + off as u64, &fresh));
            w.shadow[off..off + fresh.len()].copy_from_slice(&fresh);
            let line = [0x5a; 64];
            let at = 5 * MIB as usize + 640;
            retry(|| c.write_lines(&[(w.base + at as u64, line)]));
            w.shadow[at..at + 64].copy_from_slice(&line);
            c.read(w.base, &mut back).unwrap();
            assert_eq!(
                checksum(&back),
                checksum(&w.shadow),
                "after writes, {a} {b}"
            );
        }
    }
}

/// Repairs until a pass succeeds, as the runtime's repair thread does (a
/// pass can fail on a node only slow under load).
fn repair_until_done(c: &Cluster, rate: u64) -> farmem_net::Repaired {
    let start = Instant::now();
    let mut done = farmem_net::Repaired::default();
    loop {
        match c.repair(rate) {
            Ok(more) => {
                done.copies += more.copies;
                done.bytes += more.bytes;
                if !c.needs_repair() {
                    return done;
                }
            }
            Err(e) => assert!(start.elapsed() < Duration::from_secs(30), "{e}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `op` until it succeeds, while its errors are transient (nodes
/// only suspected, not yet declared down).
fn retry(op: impl Fn() -> Result<(), NetError>) {
    let start = Instant::now();
    while let Err(e) = op() {
        assert!(e.is_transient(), "{e}");
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never declared down: {e}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn three_killed_nodes_of_six_fail_reads_never_returning_wrong_data() {
    let mut rack = rack(6);
    let ids = shard_nodes(&rack);
    let c = ec_client(&rack, "cn-ec-three");
    let w = write_some(&c, 3);
    for &id in &ids[1..4] {
        rack.kill(id);
    }
    let start = Instant::now();
    let mut page = [0u8; PAGE];
    let err = loop {
        match c.read(w.base + 8 * PAGE as u64, &mut page) {
            Err(e) if e.is_transient() => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => break e,
            Ok(()) => panic!("a page read back from 3 of 6 shards of rs:4+2"),
        }
        assert!(start.elapsed() < Duration::from_secs(30));
    };
    match err {
        NetError::NodeDown { node, held, .. } | NetError::NodeLost { node, held, .. } => {
            assert!(ids[1..4].contains(&node), "{node}");
            assert_eq!(held, 2 * GRANULE, "two stripes' shards on the node");
        }
        other => panic!("expected a node down or lost, got {other}"),
    }
    // Writes fail too: fewer than 4 shards would take them.
    assert!(matches!(
        c.write(w.base, &[1u8; PAGE]),
        Err(NetError::NodeDown { .. } | NetError::NodeLost { .. })
    ));
}

#[test]
fn rs_4_2_needs_six_nodes_and_says_so() {
    let rack = rack(5);
    let c = ec_client(&rack, "cn-ec-five");
    match c.allocate(4 * MIB, Placement::Default) {
        Err(NetError::Remote { code, message }) => {
            assert_eq!(code, ErrorCode::NoCapacity);
            assert!(message.contains("rs:4+2"), "{message}");
            assert!(message.contains("6"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(rack.controller.stats().granted_bytes, 0);
}

#[test]
fn redundancy_parses_usable_codes_only() {
    assert_eq!(
        "rs:4+2".parse::<Redundancy>(),
        Ok(Redundancy::ReedSolomon { k: 4, m: 2 })
    );
    assert_eq!(
        "rs:4+2".parse::<Redundancy>().unwrap().to_string(),
        "rs:4+2"
    );
    assert_eq!(
        "stripe:2".parse::<Redundancy>(),
        Ok(Redundancy::Striped { k: 2 })
    );
    assert_eq!(
        "stripe:4".parse::<Redundancy>().unwrap().to_string(),
        "stripe:4"
    );
    for bad in [
        "stripe:1",
        "stripe:3",
        "stripe:0",
        "stripe:256",
        "stripe:two",
        "rs:3+2",
        "rs:4+0",
        "rs:0+2",
        "rs:4",
        "4+2",
        "rs:256+1",
        "rs:128+128",
    ] {
        assert!(bad.parse::<Redundancy>().is_err(), "{bad}");
    }
}

#[test]
fn lost_shards_are_rebuilt_under_writes_so_restarts_in_turn_lose_nothing() {
    // Four nodes of six restart in turn: without rebuilt shards the stripes
    // would have lost four, two more than rs:4+2 survives.
    let mut rack = rack(6);
    let ids = shard_nodes(&rack);
    let c = ec_client(&rack, "cn-ec-rebuild");
    let w = write_some(&c, 11);
    let shadow = std::sync::Mutex::new(w.shadow);
    let mut rng = SmallRng::seed_from_u64(5);
    for (round, &id) in ids.iter().take(4).enumerate() {
        rack.restart(id);
        let start = Instant::now();
        loop {
            c.probe();
            if c.needs_repair() {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "round {round}");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Pages written while the shards are rebuilt (slowly) reach them.
        let seed = rng.r#gen::<u64>();
        let done = std::thread::scope(|scope| {
            let writer = scope.spawn(|| {
                let mut rng = SmallRng::seed_from_u64(seed);
                for _ in 0..64 {
                    let off = rng.gen_range(0..8 * MIB as usize / PAGE - 1) * PAGE + 100;
                    let mut fresh = vec![0u8; PAGE];
                    rng.fill_bytes(&mut fresh);
                    let mut shadow = shadow.lock().unwrap();
                    retry(|| c.write(w.base + off as u64, &fresh));
                    shadow[off..off + PAGE].copy_from_slice(&fresh);
                }
            });
            let done = repair_until_done(&c, 4 * MIB);
            writer.join().unwrap();
            done
        });
        assert_eq!(done.copies, 2, "round {round}: a shard of each stripe");
        assert_eq!(done.bytes, 2 * GRANULE, "round {round}");
        assert!(!c.needs_repair(), "round {round}");
        let mut back = vec![0u8; 8 * MIB as usize];
        c.read(w.base, &mut back).unwrap();
        assert_eq!(
            checksum(&back),
            checksum(&shadow.lock().unwrap()),
            "round {round}"
        );
    }
    // Kill two nodes that never restarted: every read now needs the four
    // rebuilt shards, so they hold what was written, before and during.
    rack.kill(ids[4]);
    rack.kill(ids[5]);
    let mut back = vec![0u8; 8 * MIB as usize];
    c.read(w.base, &mut back).unwrap();
    assert_eq!(checksum(&back), checksum(&shadow.lock().unwrap()));
}

#[test]
fn stripe_2_keeps_one_copy_over_two_nodes_and_a_lost_one_fails_reads() {
    let mut rack = rack(3);
    let c = rack.replicated_client("cn-stripe", 1);
    c.set_redundancy("stripe:2".parse().unwrap());
    // Half of each page on each node (not as measured: a busy host's
    // loopback paths measure unequal now and then).
    c.set_stripe_split(farmem_net::StripeSplit::Even);
    assert_eq!(c.redundancy(), Redundancy::Striped { k: 2 });
    let extents = c.allocate(4 * MIB, Placement::Default).unwrap();
    assert_eq!(extents.len(), 2, "two stripes of 2 MiB: {extents:?}");
    assert_eq!(extents[1].base, extents[0].base + 2 * MIB, "contiguous");
    assert_eq!(
        rack.controller.stats().granted_bytes,
        4 * MIB,
        "one copy: 4 MiB logical in 4 granules"
    );
    let base = extents[0].base;
    let len = 4 * MIB as usize;
    let mut rng = SmallRng::seed_from_u64(21);
    let mut shadow = vec![0u8; len];
    rng.fill_bytes(&mut shadow);
    for off in (0..len).step_by(256 << 10) {
        c.write(base + off as u64, &shadow[off..off + (256 << 10)])
            .unwrap();
    }
    // Part of a page across a page boundary, and lines.
    let off = 7 * PAGE - 50;
    rng.fill_bytes(&mut shadow[off..off + 100]);
    c.write(base + off as u64, &shadow[off..off + 100]).unwrap();
    let at = 3 * MIB as usize + 64 * 5;
    shadow[at..at + 64].fill(0xa5);
    c.write_lines(&[(base + at as u64, [0xa5; 64])]).unwrap();
    let mut back = vec![0u8; len];
    c.read(base, &mut back).unwrap();
    assert_eq!(checksum(&back), checksum(&shadow));
    // The node holding most shards goes: no read of its stripes returns.
    let busiest = shard_nodes(&rack)
        .into_iter()
        .max_by_key(|&n| rack_granted(&rack, n))
        .unwrap();
    assert_eq!(
        rack_granted(&rack, busiest),
        2 * MIB,
        "a shard of each stripe"
    );
    rack.kill(busiest);
    let start = Instant::now();
    let err = loop {
        match c.read(base, &mut back) {
            Err(e) if e.is_transient() => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => break e,
            Ok(()) => panic!("read half of every page from a killed node"),
        }
        assert!(start.elapsed() < Duration::from_secs(30));
    };
    match err {
        NetError::NodeDown { node, .. } | NetError::NodeLost { node, .. } => {
            assert_eq!(node, busiest)
        }
        other => panic!("expected the killed node named, got {other}"),
    }
}

#[test]
fn each_path_has_its_own_gate_charged_by_the_bytes_it_moves() {
    let rack = rack(2);
    let mut cfg = farmem_net::ClientConfig::new("cn-paths", farmem_wire::Role::Compute)
        .with_token(common::TOKEN)
        .with_path_delays(vec!["rate:100GiB/s".parse().unwrap()]);
    cfg.fail_after = Duration::from_millis(300);
    let c = Cluster::connect(&rack.controller_addr(), cfg, 2).unwrap();
    c.set_redundancy("stripe:2".parse().unwrap());
    c.set_stripe_split(farmem_net::StripeSplit::Even);
    let base = c.allocate(2 * MIB, Placement::Default).unwrap()[0].base;
    let data: Vec<u8> = (0..64 * PAGE).map(|i| (i * 7 % 251) as u8).collect();
    c.write(base, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    c.read(base, &mut back).unwrap();
    assert!(back == data);
    let gates = c.path_delays();
    assert_eq!(
        gates.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        shard_nodes(&rack),
        "one gate per memory node"
    );
    for (node, gate) in &gates {
        // Half of each of the 64 pages written, then read: 2 x 128 KiB.
        assert_eq!(gate.bytes.get(), 2 * 32 * PAGE as u64, "node {node}");
    }
    // The 64 pages again as cache lines, every line of each: one write
    // per path for all of them. One page short of a line costs a read
    // and a write more on each.
    let admitted: Vec<u64> = gates.iter().map(|(_, g)| g.admitted.get()).collect();
    let mut lines: Vec<(u64, [u8; 64])> = (0..64 * PAGE / 64)
        .map(|i| (base + (i * 64) as u64, [i as u8; 64]))
        .collect();
    c.write_lines(&lines).unwrap();
    for ((node, gate), was) in gates.iter().zip(&admitted) {
        assert_eq!(gate.admitted.get() - was, 1, "node {node}");
    }
    lines.truncate(lines.len() - 1);
    c.write_lines(&lines).unwrap();
    for ((node, gate), was) in gates.iter().zip(&admitted) {
        // 63 whole pages in one write, the last read and written.
        assert_eq!(gate.admitted.get() - was, 4, "node {node}");
    }
    c.read(base, &mut back).unwrap();
    for (i, line) in back.chunks(64).enumerate() {
        assert!(line.iter().all(|&b| b == i as u8), "line {i}");
    }
}

#[test]
fn a_stripe_split_by_bandwidth_reads_back_what_was_written() {
    let rack = rack(2);
    let mut cfg = farmem_net::ClientConfig::new("cn-split", farmem_wire::Role::Compute)
        .with_token(common::TOKEN)
        .with_path_delays(vec![
            "rate:400MiB/s".parse().unwrap(),
            "rate:100MiB/s".parse().unwrap(),
        ]);
    cfg.fail_after = Duration::from_millis(300);
    let c = Cluster::connect(&rack.controller_addr(), cfg, 2).unwrap();
    c.set_redundancy("stripe:2".parse().unwrap());
    let extents = c.allocate(2 * MIB, Placement::Default).unwrap();
    let base = extents[0].base;
    let held: u64 = extents.iter().map(|e| e.len).sum();
    assert!(held >= 2 * MIB, "{extents:?}");
    let split = c.stripe_chunks(base).unwrap();
    assert_eq!(split.iter().sum::<usize>(), PAGE);
    assert_ne!(
        split[0], split[1],
        "paths 4x apart split unevenly: {split:?}"
    );
    let len = 2 * MIB as usize;
    let mut rng = SmallRng::seed_from_u64(5);
    let mut shadow = vec![0u8; len];
    rng.fill_bytes(&mut shadow);
    for off in (0..len).step_by(192 << 10) {
        let end = (off + (192 << 10)).min(len);
        c.write(base + off as u64, &shadow[off..end]).unwrap();
    }
    // Bytes across the split inside a page, and across pages.
    for off in [split[0] - 10, 3 * PAGE - 7, 9 * PAGE + split[0]] {
        rng.fill_bytes(&mut shadow[off..off + 20]);
        c.write(base + off as u64, &shadow[off..off + 20]).unwrap();
    }
    let at = 40 * PAGE + 64 * 3;
    shadow[at..at + 64].fill(0x3c);
    c.write_lines(&[(base + at as u64, [0x3c; 64])]).unwrap();
    let mut back = vec![0u8; len];
    c.read(base, &mut back).unwrap();
    assert_eq!(checksum(&back), checksum(&shadow));
    // And a page at a time through the signal path's readers.
    c.keep_page_readers(1).unwrap();
    let mut by_readers = 0;
    for p in (0..len / PAGE).step_by(13) {
        let mut page = [0u8; PAGE];
        let addr = base + (p * PAGE) as u64;
        match c.read_without_allocating(addr, &mut page) {
            Some(r) => {
                r.unwrap();
                by_readers += 1;
            }
            None => c.read(addr, &mut page).unwrap(),
        }
        assert!(page[..] == shadow[p * PAGE..(p + 1) * PAGE], "page {p}");
    }
    assert!(by_readers > 0, "no page came through the readers");
}
