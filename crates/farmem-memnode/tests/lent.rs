//! Read replies written straight from the store's pages (one vectored
//! write for a batch of pipelined reads): every reply carries exactly its
//! bytes, in request order, whatever mix of written, never-written and
//! refused reads shares the batch.

use farmem_memnode::store::CHUNK;
use farmem_memnode::{MemNode, MemNodeConfig};
use farmem_net::{ClientConfig, Connection, NetError};
use farmem_wire::{ErrorCode, Msg, Role};

fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf29ce484222325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

fn pattern(at: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| ((at + i).wrapping_mul(0x9e37_79b9) >> 11) as u8)
        .collect()
}

/// A standalone node of four chunks, chunks 0 and 1 written, 2 and 3 not.
fn node() -> (MemNode, Connection) {
    let node = MemNode::start(MemNodeConfig::new("127.0.0.1:0", 4 * CHUNK)).unwrap();
    let conn =
        Connection::connect(node.addr(), &ClientConfig::new("cn-lent", Role::Compute)).unwrap();
    for at in (0..2 * CHUNK).step_by(1 << 20) {
        conn.write(at, &pattern(at, 1 << 20)).unwrap();
    }
    (node, conn)
}

/// What a read of `len` at `at` must return.
fn expected(at: u64, len: usize) -> Vec<u8> {
    let mut want = pattern(at, len);
    for (i, b) in want.iter_mut().enumerate() {
        if at + i as u64 >= 2 * CHUNK {
            *b = 0;
        }
    }
    want
}

#[test]
fn a_batch_of_reads_comes_back_whole_and_in_order() {
    let (_node, conn) = node();
    // Pages, a read across the chunk boundary (two pieces), one across
    // the end of written memory into a never-written chunk (a piece and
    // zeros), a 256 KiB one, one out of range in the middle, and more.
    let reads: Vec<(u64, usize)> = vec![
        (4096, 4096),
        (CHUNK - 2048, 4096),
        (777, 64),
        (2 * CHUNK - 100, 4096),
        (3 * CHUNK, 4096),
        (CHUNK + 12_288, 256 << 10),
        (4 * CHUNK - 10, 4096),
        (123 * 4096, 4096),
        (2 * CHUNK + (256 << 10), 256 << 10),
        (8192, 1),
    ];
    for round in 0..3 {
        let msgs: Vec<Msg> = reads
            .iter()
            .map(|&(addr, len)| Msg::Read {
                addr,
                len: len as u32,
            })
            .collect();
        let tickets = conn.submit_batch(&msgs).unwrap();
        // Backwards in the last round: the first waiter reads every other
        // reply off the socket and hands it over.
        let mut order: Vec<_> = tickets.into_iter().zip(&reads).collect();
        if round == 2 {
            order.reverse();
        }
        for (ticket, &(addr, len)) in order {
            let mut buf = vec![0xeeu8; len];
            let got = ticket
                .wait_into(&mut buf)
                .and_then(|l| l.into_buf(&mut buf));
            if addr + len as u64 > 4 * CHUNK {
                assert!(
                    matches!(
                        &got,
                        Err(NetError::Remote {
                            code: ErrorCode::OutOfRange,
                            ..
                        })
                    ),
                    "{got:?}"
                );
                continue;
            }
            got.unwrap();
            assert_eq!(
                checksum(&buf),
                checksum(&expected(addr, len)),
                "round {round}: read of {len} at {addr:#x}"
            );
        }
    }
    assert!(conn.is_alive());
}

#[test]
fn a_write_between_reads_is_seen_by_the_reads_after_it_only() {
    let (_node, conn) = node();
    let at = CHUNK + 4096;
    let new = vec![0xabu8; 4096];
    let msgs = [
        Msg::Read {
            addr: at,
            len: 4096,
        },
        Msg::Write {
            addr: at,
            data: &new,
        },
        Msg::Read {
            addr: at,
            len: 4096,
        },
        // A never-written page written in the same batch.
        Msg::Read {
            addr: 3 * CHUNK,
            len: 4096,
        },
        Msg::Write {
            addr: 3 * CHUNK,
            data: &new,
        },
        Msg::Read {
            addr: 3 * CHUNK,
            len: 4096,
        },
    ];
    let mut tickets = conn.submit_batch(&msgs).unwrap().into_iter();
    let mut next = || tickets.next().unwrap();
    let read = |t: farmem_net::Ticket| {
        let mut buf = vec![0u8; 4096];
        t.wait_into(&mut buf).unwrap().into_buf(&mut buf).unwrap();
        buf
    };
    assert_eq!(read(next()), pattern(at, 4096), "read before the write");
    next().wait().unwrap().done("write").unwrap();
    assert_eq!(read(next()), new, "read after the write");
    assert_eq!(read(next()), vec![0u8; 4096], "never written");
    next().wait().unwrap().done("write").unwrap();
    assert_eq!(read(next()), new);
}

#[test]
fn a_node_that_dies_is_an_error_never_a_page_of_zeros() {
    let (mut node, conn) = node();
    let mut page = vec![0u8; 4096];
    conn.read(8192, &mut page).unwrap();
    node.shutdown();
    drop(node);
    let got = conn.read(8192, &mut page);
    assert!(got.is_err(), "read from a dead node: {got:?}");
    assert!(!conn.is_alive());
}
