//! Replicated far memory on an in-process rack: memory nodes killed,
//! restarted, or silent for a while and back with their memory intact (a
//! SIGSTOPped process, a partition). Writes go on to the copies left, lost
//! copies are made again, and nothing written is lost while one copy of
//! it is left.

mod common;

use std::time::{Duration, Instant};

use common::{Rack, checksum, repair_until_done};
use farmem_net::{Cluster, NetError};
use farmem_wire::Placement;

/// Writes `data` at `addr`, retrying while a node is only suspected.
fn write_through(a: &Cluster, addr: u64, data: &[u8]) {
    let start = Instant::now();
    while let Err(err) = a.write(addr, data) {
        assert!(err.is_transient(), "{err}");
        assert!(start.elapsed() < Duration::from_secs(30), "{err}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_paused_node_gets_fresh_copies_and_a_later_pause_of_another_loses_nothing() {
    let mut rack = Rack::gated(3, Duration::from_secs(5));
    let a = rack.replicated_client("cn-pauses", 2);
    let extents = a.allocate(3 * (128 << 20), Placement::Default).unwrap();
    let piece: Vec<u8> = (0..(1u32 << 20))
        .map(|i| (i.wrapping_mul(2654435761) >> 9) as u8)
        .collect();
    let mut expected: Vec<(u64, Vec<u8>)> = Vec::new();
    for e in &extents {
        a.write(e.base, &piece).unwrap();
        expected.push((e.base, piece.clone()));
    }
    let nodes: Vec<u32> = rack.memnodes.iter().map(|m| m.node_id()).collect();
    let (c, x, y) = (nodes[2], nodes[0], nodes[1]);

    // One node dies; its copies are made again on the other two.
    rack.kill(c);
    for (round, e) in extents.iter().enumerate() {
        write_through(&a, e.base + 4096, &[round as u8; 4096]);
        expected[round].1[4096..8192].fill(round as u8);
    }
    repair_until_done(&a);

    // Then each survivor in turn stops answering past the deadline and
    // comes back; between the two, the copies it held are made again.
    for (turn, paused) in [x, y].into_iter().enumerate() {
        for e in &extents {
            assert_eq!(a.live_copies(e.base).unwrap().len(), 2, "turn {turn}");
        }
        rack.gate(paused).hold(true);
        for (i, e) in extents.iter().enumerate() {
            let at = 8192 + turn * 4096;
            let fill = 0x40 + (turn * 8 + i) as u8;
            write_through(&a, e.base + at as u64, &[fill; 4096]);
            expected[i].1[at..at + 4096].fill(fill);
        }
        rack.gate(paused).hold(false);
        repair_until_done(&a);
    }
    for (base, want) in &expected {
        let mut back = vec![0u8; want.len()];
        a.read(*base, &mut back).unwrap();
        assert_eq!(checksum(&back), checksum(want), "extent at {base:#x}");
    }
}

#[test]
fn two_copies_survive_a_killed_node_and_are_released_together() {
    let mut rack = Rack::start(2, Duration::from_secs(5));
    let a = rack.replicated_client("cn-r", 2);
    let extents = a.allocate(256 << 20, Placement::Default).unwrap();
    assert_eq!(rack.controller.stats().granted_bytes, 512 << 20);
    for e in &extents {
        assert_eq!(e.mirrors.len(), 1, "{e:?}");
        assert_ne!(e.mirrors[0].node, e.node, "copies on distinct nodes: {e:?}");
    }
    let pattern: Vec<u8> = (0..(1u32 << 20)).map(|i| (i * 31 + 7) as u8).collect();
    let base = extents[0].base;
    a.write(base, &pattern).unwrap();
    let line = [0x5au8; 64];
    a.write_lines(&[(base + 4096, line)]).unwrap();
    let mut expected = pattern.clone();
    expected[4096..4160].copy_from_slice(&line);
    // Kill the node holding the first copy: reads fail over at once.
    let victim = rack
        .memnodes
        .iter()
        .position(|m| m.node_id() == extents[0].node)
        .unwrap();
    rack.memnodes.remove(victim).shutdown();
    let mut back = vec![0u8; pattern.len()];
    a.read(base, &mut back).unwrap();
    assert!(
        back == expected,
        "the surviving copy reads back what was written"
    );
    // Writes fail while the node is only suspected, then go on to the
    // copy left once it is declared down.
    let start = Instant::now();
    let line2 = [0xa5u8; 64];
    while let Err(e) = a.write_lines(&[(base + 8192, line2)]) {
        assert!(e.is_transient(), "{e}");
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never declared down"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    expected[8192..8256].copy_from_slice(&line2);
    a.read(base, &mut back).unwrap();
    assert!(back == expected);
    // Both copies go back to the controller.
    for e in a.extents() {
        a.release(e.base, e.len).unwrap();
    }
    assert_eq!(rack.controller.stats().granted_bytes, 0);
}

#[test]
fn a_lost_copy_is_made_again_and_survives_the_loss_of_the_other() {
    let mut rack = Rack::start(3, Duration::from_secs(5));
    let a = rack.replicated_client("cn-repair", 2);
    let extents = a.allocate(128 << 20, Placement::Default).unwrap();
    let e = extents[0].clone();
    let pattern: Vec<u8> = (0..(4u32 << 20))
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    a.write(e.base, &pattern).unwrap();
    assert!(!a.needs_repair());
    // Lose the first copy's node; a write finds it down after the deadline.
    rack.kill(e.node);
    let start = Instant::now();
    while let Err(err) = a.write(e.base, &pattern[..4096]) {
        assert!(err.is_transient(), "{err}");
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never declared down"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(a.needs_repair());
    let done = a.repair(0).unwrap();
    assert_eq!(done.copies, 1);
    assert_eq!(done.bytes, e.len);
    assert!(!a.needs_repair());
    // A write after the repair reaches the new copy too.
    let line = [0x77u8; 64];
    a.write_lines(&[(e.base + 64, line)]).unwrap();
    let mut expected = pattern.clone();
    expected[64..128].copy_from_slice(&line);
    // Now lose the other original copy: the new one holds everything.
    rack.kill(e.mirrors[0].node);
    let mut back = vec![0u8; expected.len()];
    let start = Instant::now();
    loop {
        match a.read(e.base, &mut back) {
            Ok(()) => break,
            Err(err) if err.is_transient() => {}
            Err(err) => panic!("the repaired copy must serve the data: {err}"),
        }
        assert!(start.elapsed() < Duration::from_secs(30));
    }
    assert!(
        back == expected,
        "the new copy holds what was written, before and after it was made"
    );
}

#[test]
fn with_every_copy_gone_the_error_names_the_last_node_lost() {
    let mut rack = Rack::start(3, Duration::from_secs(5));
    let a = rack.replicated_client("cn-last", 2);
    let e = a.allocate(64 << 20, Placement::Default).unwrap()[0].clone();
    a.write(e.base, &[7u8; 4096]).unwrap();
    // The first copy's node goes, and is found down; no repair is run.
    rack.kill(e.node);
    let start = Instant::now();
    while let Err(err) = a.write(e.base, &[8u8; 4096]) {
        assert!(err.is_transient(), "{err}");
        assert!(start.elapsed() < Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(20));
    }
    // Then the other: a write's error names it, the loss that left no
    // copy (not the first node, dropped long before).
    let last = e.mirrors[0].node;
    rack.kill(last);
    let start = Instant::now();
    let err = loop {
        match a.write_lines(&[(e.base + 64, [9u8; 64])]) {
            Err(err) if err.is_transient() => {
                assert!(start.elapsed() < Duration::from_secs(30));
                std::thread::sleep(Duration::from_millis(20));
            }
            other => break other.unwrap_err(),
        }
    };
    match err {
        NetError::NodeDown { node, .. } => assert_eq!(node, last, "{err}"),
        other => panic!("expected the last node down, got {other}"),
    }
}

#[test]
fn copies_return_to_restarted_nodes_so_restarts_in_turn_lose_nothing() {
    // Three nodes, two copies, five rounds each restarting a node holding a
    // copy: from the second round on, the only nodes left for a new copy
    // are ones this client saw restart.
    let mut rack = Rack::start(3, Duration::from_secs(5));
    let a = rack.replicated_client("cn-turns", 2);
    let e = a.allocate(128 << 20, Placement::Default).unwrap()[0].clone();
    let mut expected: Vec<u8> = (0..(4u32 << 20))
        .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
        .collect();
    a.write(e.base, &expected).unwrap();
    for round in 0..5u32 {
        let holders = a.live_copies(e.base).unwrap();
        assert_eq!(holders.len(), 2, "round {round}: {holders:?}");
        rack.restart(holders[(round % 2) as usize]);
        // The next write finds the restart and goes on to the other copy.
        let chunk = vec![round as u8 ^ 0xa5; 64 << 10];
        let at = u64::from(round) * (256 << 10);
        let start = Instant::now();
        while let Err(err) = a.write(e.base + at, &chunk) {
            assert!(err.is_transient(), "round {round}: {err}");
            assert!(start.elapsed() < Duration::from_secs(30), "round {round}");
            std::thread::sleep(Duration::from_millis(20));
        }
        expected[at as usize..at as usize + chunk.len()].copy_from_slice(&chunk);
        assert!(a.needs_repair(), "round {round}");
        let done = repair_until_done(&a);
        assert_eq!(done.copies, 1, "round {round}");
        let holders = a.live_copies(e.base).unwrap();
        assert_eq!(holders.len(), 2, "round {round}: {holders:?}");
        assert_ne!(holders[0], holders[1], "round {round}");
        let mut back = vec![0u8; expected.len()];
        a.read(e.base, &mut back).unwrap();
        assert_eq!(checksum(&back), checksum(&expected), "round {round}");
    }
    // Every node restarted at least once; a new allocation uses them.
    let fresh = a.allocate(256 << 20, Placement::Default).unwrap();
    for f in &fresh {
        a.write(f.base, &expected[..1 << 20]).unwrap();
        let mut back = vec![0u8; 1 << 20];
        a.read(f.base, &mut back).unwrap();
        assert_eq!(checksum(&back), checksum(&expected[..1 << 20]));
    }
}
