//! Restoring copies after a memory node is lost.
//!
//! An extent whose copies fell below the count this client asked for (a
//! node declared down, or restarted) gets a new copy: the controller grants
//! a granule on a node none of its live copies use ([`Msg::Remirror`]) —
//! possibly a node that held a copy before it was dropped, now in a fresh
//! slot (see the parent module) — the
//! client adds it to the extent as a copy being filled (every write goes to
//! it, no read), fills it from a live copy piece by piece, each piece under
//! the copy lock so no write lands between its read and its write, and then
//! lets reads use it. The client does it, not the controller: it is the
//! only writer of its memory and holds the capabilities to read and write
//! every copy.

use std::time::{Duration, Instant};

use farmem_wire::{Extent, Mirror, Msg};

use super::{Cluster, ControllerClient};
use crate::NetError;

impl ControllerClient {
    /// One more copy of the granule [base, +len) this client holds, on a
    /// memory node not in `avoid`.
    pub fn remirror(&self, base: u64, len: u64, avoid: Vec<u32>) -> Result<Extent, NetError> {
        let ask = Msg::Remirror {
            base,
            len,
            request: super::controller::request_number(),
            avoid,
        };
        match self.conn.call(&ask)?.msg()? {
            Msg::AllocOk { mut extents } if extents.len() == 1 => Ok(extents.remove(0)),
            other => Err(NetError::Unexpected {
                request: "remirror",
                got: other.op(),
            }),
        }
    }
}

/// What [`Cluster::repair`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Repaired {
    /// New copies (or erasure-coded shards) made and filled.
    pub copies: u64,
    /// Bytes written into them.
    pub bytes: u64,
}

impl Cluster {
    /// Extents (by base) with at least one live copy but fewer than this
    /// client asks for, with the memory nodes a new copy must avoid: those
    /// of its live copies and of copies being filled.
    fn short_extents(&self) -> Vec<(Extent, Vec<u32>)> {
        let want = usize::from(self.replicas.load(std::sync::atomic::Ordering::Relaxed));
        if want <= 1 {
            return Vec::new();
        }
        let extents: Vec<Extent> = self.extents.read().values().cloned().collect();
        let nodes = self.nodes.read();
        let filling = self.filling.read();
        let in_use = |slot: u32| nodes.get(&slot).is_some_and(|n| !n.dropped());
        let is_filling =
            |slot: u32, base: u64| filling.iter().any(|&(f, lo, _)| f == slot && lo == base);
        extents
            .into_iter()
            .filter_map(|e| {
                let copies: Vec<(u32, u64)> = std::iter::once((e.node, e.base))
                    .chain(e.mirrors.iter().map(|m| (m.node, m.base)))
                    .filter(|&(slot, _)| in_use(slot))
                    .collect();
                let alive = copies.iter().filter(|&&(s, b)| !is_filling(s, b)).count();
                let avoid = copies
                    .iter()
                    .map(|&(slot, _)| nodes.node_of(slot))
                    .collect();
                (alive >= 1 && alive < want).then_some((e, avoid))
            })
            .collect()
    }

    /// Sends an empty read to every slot holding a copy for this client
    /// and not yet dropped, so a node lost while nothing touched it is
    /// declared down (after `fail_after`) and its copies made again before
    /// another loss could take the rest.
    pub fn probe(&self) {
        let mut held: Vec<(u32, u64)> = {
            let extents = self.extents.read();
            extents
                .values()
                .flat_map(|e| {
                    std::iter::once((e.node, e.base))
                        .chain(e.mirrors.iter().map(|m| (m.node, m.base)))
                })
                .collect()
        };
        held.extend(self.shard_slots());
        held.sort_unstable();
        held.dedup_by_key(|(slot, _)| *slot);
        for (slot, addr) in held {
            let dropped = self.nodes.read().get(&slot).is_none_or(|n| n.dropped());
            if !dropped {
                let _ = self.call_on(slot, &Msg::Read { addr, len: 0 });
            }
        }
    }

    /// True when some extent has fewer live copies than this client asks
    /// for (and at least one to copy from), or some erasure-coded stripe a
    /// lost shard it can rebuild.
    pub fn needs_repair(&self) -> bool {
        !self.short_extents().is_empty() || self.stripes_need_repair()
    }

    /// Gives every extent that lost copies new ones, filled from a live
    /// copy, and every stripe that lost a shard a rebuilt one (see
    /// `ec`), at no more than `rate` bytes per second. Returns
    /// what it did; an error leaves the rest for the next call.
    pub fn repair(&self, rate: u64) -> Result<Repaired, NetError> {
        let ctl = self
            .controller
            .as_ref()
            .ok_or_else(|| NetError::Routing("a standalone cluster cannot make copies".into()))?;
        let mut done = Repaired::default();
        for (e, avoid) in self.short_extents() {
            let copy = ctl.remirror(e.base, e.len, avoid)?;
            let slot = match self.adopt_copy(&e, &copy) {
                Ok(slot) => slot,
                Err(err) => {
                    let _ = ctl.release(copy.base, copy.len);
                    return Err(err);
                }
            };
            let filled = self.fill(&e, slot, copy.base, rate);
            if filled.is_err() {
                // Half filled: it must never be read. Off the extent, and
                // back to the controller (at worst its lease reclaims it).
                self.drop_copy(&e, slot, copy.base);
                let _ = ctl.release(copy.base, copy.len);
            }
            self.filling
                .write()
                .retain(|&(s, lo, _)| !(s == slot && lo == copy.base));
            filled?;
            tracing::info!(
                "made a new copy of [{:#x}, +{}) on memory node {} at {}",
                e.base,
                e.len,
                copy.node,
                copy.addr
            );
            done.copies += 1;
            done.bytes += e.len;
        }
        self.repair_stripes(ctl, rate, &mut done)?;
        Ok(done)
    }

    /// Adds `copy` to extent `e` as a copy being filled: from now on every
    /// write reaches it. Returns the copy's slot.
    fn adopt_copy(&self, e: &Extent, copy: &Extent) -> Result<u32, NetError> {
        let slot = self.join(copy.node, &copy.addr, copy.cap.as_ref())?;
        // No write in flight: each one after this sees the new copy.
        let _alone = self.copy_lock.write();
        let mut extents = self.extents.write();
        let held = extents.get_mut(&e.base).ok_or_else(|| {
            NetError::Routing(format!(
                "[{:#x}, +{}) was released meanwhile",
                e.base, e.len
            ))
        })?;
        self.filling
            .write()
            .push((slot, copy.base, copy.base + copy.len));
        held.mirrors.push(Mirror {
            node: slot,
            addr: copy.addr.clone(),
            base: copy.base,
            cap: copy.cap.clone(),
        });
        Ok(slot)
    }

    /// Takes a copy that could not be filled off extent `e` again.
    fn drop_copy(&self, e: &Extent, slot: u32, base: u64) {
        let _alone = self.copy_lock.write();
        if let Some(held) = self.extents.write().get_mut(&e.base) {
            held.mirrors.retain(|m| !(m.node == slot && m.base == base));
        }
    }

    /// Copies `e`'s bytes into its new copy at `base` in `slot`, a piece
    /// at a time, paced to `rate`.
    fn fill(&self, e: &Extent, slot: u32, base: u64, rate: u64) -> Result<(), NetError> {
        let piece = self.max_piece().min(e.len as usize);
        let mut buf = vec![0u8; piece];
        let start = Instant::now();
        let mut off = 0u64;
        while off < e.len {
            let n = piece.min((e.len - off) as usize);
            {
                let _alone = self.copy_lock.write();
                self.read(e.base + off, &mut buf[..n])?;
                let write = Msg::Write {
                    addr: base + off,
                    data: &buf[..n],
                };
                self.call_on(slot, &write)?.done("write")?;
            }
            off += n as u64;
            pace(start, off, rate);
        }
        Ok(())
    }
}

/// Sleeps until `done` bytes since `start` are no more than `rate` bytes
/// per second (0: no limit): the pace of every repair.
pub(super) fn pace(start: Instant, done: u64, rate: u64) {
    if rate > 0 {
        let due = Duration::from_secs_f64(done as f64 / rate as f64);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
    }
}
