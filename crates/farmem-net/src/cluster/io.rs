//! Reads and writes over a client's extents and their copies.
//!
//! An extent may have mirrors: the same bytes on other memory nodes. A
//! write goes to every live copy and succeeds once each has it; a read goes
//! to one copy, the first live one, and fails over to the next on any error.
//! A node that failed every request for `fail_after`, or that restarted, is
//! no longer live for this client: writes go on to the copies left, and an
//! operation fails for good ([`NetError::NodeDown`], [`NetError::NodeLost`])
//! only when no copy is left. A copy is never taken back once its slot is
//! dropped, so no copy that missed writes is ever read (the node may hold
//! new copies later, in a fresh slot); a copy being filled by
//! [`Cluster::repair`] is written to but not read from until it is full,
//! and writes hold the copy lock shared so no fill overtakes them.

use std::collections::HashMap;

use farmem_wire::{ErrorCode, LINE_LEN, LOG_RECORD_LEN, LogRecords, Msg};

use super::{Cluster, read_reply_into};
use crate::{Lane, NetError, Reply, Ticket};

/// One copy of a range: the node holding it and the address there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Copy {
    pub node: u32,
    pub addr: u64,
}

impl Cluster {
    /// The live copies of [addr, addr+len), which must lie inside one
    /// extent: healthy nodes first, then those in a run of failures; copies
    /// still being filled only when `writing`. With none live, the error of
    /// the first copy.
    pub(super) fn copies(&self, addr: u64, len: u64, writing: bool) -> Result<Vec<Copy>, NetError> {
        let all: Vec<Copy> = {
            let extents = self.extents.read();
            let e = match extents.range(..=addr).next_back() {
                Some((_, e))
                    if addr
                        .checked_add(len)
                        .is_some_and(|end| end <= e.base + e.len) =>
                {
                    e
                }
                _ => {
                    return Err(NetError::Routing(format!(
                        "[{addr:#x}, +{len}) is not inside one extent held by this client"
                    )));
                }
            };
            let off = addr - e.base;
            std::iter::once(Copy { node: e.node, addr })
                .chain(e.mirrors.iter().map(|m| Copy {
                    node: m.node,
                    addr: m.base + off,
                }))
                .collect()
        };
        let (mut live, mut failing) = (Vec::new(), Vec::new());
        // The error of the copy dropped last: the loss that left none.
        let mut gone: Option<(Option<std::time::Instant>, NetError)> = None;
        {
            let nodes = self.nodes.read();
            let filling = self.filling.read();
            for c in all {
                if !writing
                    && filling
                        .iter()
                        .any(|&(node, lo, hi)| node == c.node && (lo..hi).contains(&c.addr))
                {
                    continue;
                }
                let Some(n) = nodes.get(&c.node) else {
                    gone.get_or_insert((
                        None,
                        NetError::Routing(format!("no connection in slot {}", c.node)),
                    ));
                    continue;
                };
                match n.check_lost() {
                    Ok(()) if n.failing.load(std::sync::atomic::Ordering::Relaxed) => {
                        failing.push(c)
                    }
                    Ok(()) => live.push(c),
                    Err(e) => {
                        let at = *n.dropped_at.lock();
                        if gone.as_ref().is_none_or(|(last, _)| at > *last) {
                            gone = Some((at, e));
                        }
                    }
                }
            }
        }
        live.append(&mut failing);
        match (live.is_empty(), gone) {
            (true, Some((_, e))) => Err(self.with_held(e)),
            _ => Ok(live),
        }
    }

    /// The memory nodes holding live, filled copies of `addr`, in the
    /// order reads try them.
    pub fn live_copies(&self, addr: u64) -> Result<Vec<u32>, NetError> {
        let copies = self.copies(addr, 1, false)?;
        let nodes = self.nodes.read();
        Ok(copies.iter().map(|c| nodes.node_of(c.node)).collect())
    }

    /// The range of the extent holding `addr` (empty when none does:
    /// then [`Self::copies`] says why).
    fn extent_range(&self, addr: u64) -> std::ops::Range<u64> {
        let extents = self.extents.read();
        match extents.range(..=addr).next_back() {
            Some((_, e)) if addr < e.base + e.len => e.base..e.base + e.len,
            _ => addr..addr,
        }
    }

    /// Sends `msg` to `node` and waits for its reply, the node's health kept.
    pub(super) fn call_on(&self, node: u32, msg: &Msg<'_>) -> Result<Reply, NetError> {
        let sent = self.submit_to(node, msg);
        self.settle(node, sent.and_then(Ticket::wait))
    }

    /// Reads `buf.len()` bytes at `addr`, in frame-sized pieces issued
    /// together, each from its first live copy, failing over to the others.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), NetError> {
        self.read_as(addr, buf, Lane::Demand)
    }

    /// [`Self::read`] on the bulk lane, as bulk traffic at a delay gate: a
    /// prefetch no fault waits on yet (DaeMon's bulk cluster), so demand
    /// reads never queue behind it on a connection or at a partitioned
    /// gate. Failover to other copies goes on the demand lane.
    pub fn read_bulk(&self, addr: u64, buf: &mut [u8]) -> Result<(), NetError> {
        self.read_as(addr, buf, Lane::Bulk)
    }

    fn read_as(&self, addr: u64, buf: &mut [u8], lane: Lane) -> Result<(), NetError> {
        if super::ec::is_logical(addr) {
            return self.ec_read(addr, buf);
        }
        let piece = self.max_piece();
        let mut sent = Vec::new();
        for (i, chunk) in buf.chunks(piece).enumerate() {
            let at = addr + (i * piece) as u64;
            let copies = self.copies(at, chunk.len() as u64, false)?;
            let first = copies[0];
            let read = Msg::Read {
                addr: first.addr,
                len: chunk.len() as u32,
            };
            sent.push((copies, self.submit_in(first.node, &read, lane)));
        }
        for ((copies, ticket), chunk) in sent.into_iter().zip(buf.chunks_mut(piece)) {
            let node = copies[0].node;
            // The data straight into the caller's buffer when it can
            // (`wait_into`); the transport's outcome settles the node's
            // health, the reply's (a refusal) only notes it, as before.
            let first = self
                .settle(node, ticket.and_then(|t| t.wait_into(chunk)))
                .and_then(|landed| landed.into_buf(chunk))
                .map_err(|e| self.note_refusal(node, e));
            if let Err(e) = first {
                self.read_from_others(&copies[1..], chunk, e)?;
            }
        }
        Ok(())
    }

    /// Reads `chunk` from the first of `others` that answers. If none does,
    /// a transient error wins over a final one: the caller may retry while
    /// some copy could still come back.
    fn read_from_others(
        &self,
        others: &[Copy],
        chunk: &mut [u8],
        first: NetError,
    ) -> Result<(), NetError> {
        let mut err = first;
        for c in others {
            let read = Msg::Read {
                addr: c.addr,
                len: chunk.len() as u32,
            };
            let got = self
                .call_on(c.node, &read)
                .and_then(|reply| read_reply_into(&reply, chunk))
                .map_err(|e| self.note_refusal(c.node, e));
            match got {
                Ok(()) => return Ok(()),
                Err(e) if !err.is_transient() => err = e,
                Err(_) => {}
            }
        }
        Err(err)
    }

    /// Writes `data` at `addr` to every live copy, in frame-sized pieces
    /// issued together.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), NetError> {
        if super::ec::is_logical(addr) {
            return self.ec_write(addr, data);
        }
        let _writing = self.copy_lock.read();
        let piece = self.max_piece();
        let mut sent = Vec::new();
        for (i, chunk) in data.chunks(piece).enumerate() {
            let at = addr + (i * piece) as u64;
            for c in self.copies(at, chunk.len() as u64, true)? {
                let write = Msg::Write {
                    addr: c.addr,
                    data: chunk,
                };
                sent.push((c.node, self.submit_to(c.node, &write)));
            }
        }
        let mut dropped = false;
        for (node, ticket) in sent {
            let acked = self.settle(node, ticket.and_then(Ticket::wait));
            let acked = acked
                .and_then(|r| r.done("write"))
                .map_err(|e| self.note_refusal(node, e));
            self.survivable(acked, &mut dropped)?;
        }
        if dropped {
            // A copy was dropped on the way: every piece must still have one.
            for (i, chunk) in data.chunks(piece).enumerate() {
                self.copies(addr + (i * piece) as u64, chunk.len() as u64, true)?;
            }
        }
        Ok(())
    }

    /// Applies cache lines to every live copy, all requests in flight at
    /// once; returns when each is acknowledged. Runs of at least
    /// `RUN_LINES` contiguous lines (a page rewritten whole, a struct
    /// streamed) go as one plain write each; the other lines as log records
    /// grouped per node into batches. A line given twice is applied as its
    /// last. A refused request is applied by its node not at all, so the
    /// caller may retry the whole call.
    pub fn write_lines(&self, lines: &[(u64, [u8; LINE_LEN])]) -> Result<(), NetError> {
        if lines.iter().any(|(addr, _)| super::ec::is_logical(*addr)) {
            let (coded, copied): (Vec<_>, Vec<_>) = lines
                .iter()
                .partition(|(addr, _)| super::ec::is_logical(*addr));
            self.ec_write_lines(&coded)?;
            return self.write_lines(&copied);
        }
        let lines = in_address_order(lines);
        let _writing = self.copy_lock.read();
        let mut per_node: HashMap<u32, Vec<u8>> = HashMap::new();
        let mut sent = Vec::new();
        // Copies are looked up once per extent, not per line: a line's
        // address in each copy is at the same offset as in the first.
        let mut known: Option<(std::ops::Range<u64>, u64, Vec<Copy>)> = None;
        let most = (self.max_piece() / LINE_LEN).max(1);
        let mut i = 0;
        while i < lines.len() {
            let addr = lines[i].0;
            let (extent, first, copies) = match known.take() {
                Some(k) if k.0.contains(&addr) && addr + LINE_LEN as u64 <= k.0.end => k,
                _ => (
                    self.extent_range(addr),
                    addr,
                    self.copies(addr, LINE_LEN as u64, true)?,
                ),
            };
            let run = run_len(&lines[i..], extent.end).min(most);
            if run >= RUN_LINES {
                // Sized up front: collected from a flat_map, it grew by
                // doubling, some fifteen reallocations for 64 pages.
                let mut data = Vec::with_capacity(run * LINE_LEN);
                for (_, line) in &lines[i..i + run] {
                    data.extend_from_slice(*line);
                }
                for c in &copies {
                    let write = Msg::Write {
                        addr: c.addr.wrapping_add(addr.wrapping_sub(first)),
                        data: &data,
                    };
                    sent.push((c.node, None, self.submit_to(c.node, &write)));
                }
                i += run;
            } else {
                for c in &copies {
                    let at = c.addr.wrapping_add(addr.wrapping_sub(first));
                    LogRecords::encode_into(per_node.entry(c.node).or_default(), at, lines[i].1);
                }
                i += 1;
            }
            known = Some((extent, first, copies));
        }
        let per_frame = (self.max_piece() / LOG_RECORD_LEN) * LOG_RECORD_LEN;
        for (&node, raw) in &per_node {
            for chunk in raw.chunks(per_frame) {
                let records = LogRecords::from_raw(chunk)?;
                let ticket = self.submit_to(node, &Msg::LogBatch { records });
                sent.push((node, Some(records.len()), ticket));
            }
        }
        let mut dropped = false;
        for (node, count, ticket) in sent {
            let acked = self.settle(node, ticket.and_then(Ticket::wait));
            let acked = acked
                .and_then(|r| match count {
                    None => r.done("write"),
                    Some(count) => check_log_ack(&r, count),
                })
                .map_err(|e| self.note_refusal(node, e));
            self.survivable(acked, &mut dropped)?;
        }
        if dropped {
            for (addr, _) in &lines {
                self.copies(*addr, LINE_LEN as u64, true)?;
            }
        }
        Ok(())
    }

    /// Judges one copy's write: Ok(true) written; Ok(false) its node was
    /// dropped (down or restarted) and the other copies carry the data, which
    /// the caller checks once all are in; Err for anything else.
    fn survivable(
        &self,
        acked: Result<(), NetError>,
        dropped: &mut bool,
    ) -> Result<bool, NetError> {
        match acked {
            Ok(()) => Ok(true),
            Err(NetError::NodeDown { .. } | NetError::NodeLost { .. }) => {
                *dropped = true;
                Ok(false)
            }
            // The node restarted and holds no copy of ours (see `settle`).
            Err(NetError::Remote {
                code: ErrorCode::Lost,
                ..
            }) => {
                *dropped = true;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

/// Shortest run of contiguous lines sent as one plain write rather than as
/// log records: 16 lines, 1 KiB, past which a record's 8-byte address per
/// line costs more than a request of its own.
pub const RUN_LINES: usize = 16;

/// `lines` by address, each address once (its last value): runs are found
/// by walking them, and a line's two values must not race as a record and
/// a write.
fn in_address_order(lines: &[(u64, [u8; LINE_LEN])]) -> Vec<(u64, &[u8; LINE_LEN])> {
    let mut out: Vec<(u64, &[u8; LINE_LEN])> = lines.iter().map(|(a, l)| (*a, l)).collect();
    if !out.is_sorted_by(|a, b| a.0 < b.0) {
        // Stable, so of equal addresses the last given stays last.
        out.sort_by_key(|l| l.0);
        out.reverse();
        out.dedup_by_key(|l| l.0);
        out.reverse();
    }
    out
}

/// How many of `lines` (in address order) follow each other without a
/// gap from the first, inside an extent ending at `end`.
fn run_len(lines: &[(u64, &[u8; LINE_LEN])], end: u64) -> usize {
    let first = lines[0].0;
    lines
        .iter()
        .enumerate()
        .take_while(|(k, l)| {
            let at = first.checked_add((*k * LINE_LEN) as u64);
            at == Some(l.0) && l.0 + LINE_LEN as u64 <= end
        })
        .count()
}

fn check_log_ack(reply: &Reply, count: usize) -> Result<(), NetError> {
    match reply.msg()? {
        Msg::LogAck { applied } if applied as usize == count => Ok(()),
        Msg::LogAck { applied } => Err(NetError::Routing(format!(
            "log batch of {count} lines acknowledged {applied}"
        ))),
        other => Err(NetError::Unexpected {
            request: "log batch",
            got: other.op(),
        }),
    }
}
