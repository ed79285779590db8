//! Rebuilding a stripe's lost shard (see the parent module's "Repair").

use std::sync::Arc;
use std::time::Instant;

use farmem_wire::Msg;

use super::io::coding_error;
use super::{PAGE, Shard, Stripe};
use crate::NetError;
use crate::cluster::repair::pace;
use crate::cluster::{Cluster, ControllerClient, Repaired};

/// A stripe with a shard to rebuild: the stripe, that shard, a live
/// shard's granule to ask a copy of, and the memory nodes to avoid.
struct Short {
    stripe: Arc<Stripe>,
    lost: usize,
    like: u64,
    avoid: Vec<u32>,
}

impl Cluster {
    /// Stripes with a shard in a dropped slot, none being rebuilt, and at
    /// least K live shards to rebuild it from.
    fn short_stripes(&self) -> Vec<Short> {
        let stripes: Vec<Arc<Stripe>> = self.stripes.map.read().values().cloned().collect();
        let nodes = self.nodes.read();
        let in_use = |slot: u32| nodes.get(&slot).is_some_and(|n| !n.dropped());
        stripes
            .into_iter()
            .filter(|s| s.filling.is_none())
            .filter_map(|s| {
                let live: Vec<&Shard> = s.shards.iter().filter(|x| in_use(x.node)).collect();
                let lost = s.shards.iter().position(|x| !in_use(x.node))?;
                (live.len() >= s.k).then(|| Short {
                    like: live[0].base,
                    avoid: live.iter().map(|x| nodes.node_of(x.node)).collect(),
                    lost,
                    stripe: s.clone(),
                })
            })
            .collect()
    }

    /// The slots holding stripe shards, each with an address there.
    pub(in crate::cluster) fn shard_slots(&self) -> Vec<(u32, u64)> {
        let map = self.stripes.map.read();
        map.values()
            .flat_map(|s| s.shards.iter().map(|x| (x.node, x.base)))
            .collect()
    }

    /// True when a stripe has a shard to rebuild (see [`Self::short_stripes`]).
    pub(in crate::cluster) fn stripes_need_repair(&self) -> bool {
        !self.short_stripes().is_empty()
    }

    /// Rebuilds every lost shard it can, at no more than `rate` bytes per
    /// second, adding to `done`; an error leaves the rest for later.
    pub(in crate::cluster) fn repair_stripes(
        &self,
        ctl: &ControllerClient,
        rate: u64,
        done: &mut Repaired,
    ) -> Result<(), NetError> {
        for short in self.short_stripes() {
            let s = &short.stripe;
            let grant = ctl.remirror(short.like, s.shard_len, short.avoid.clone())?;
            let slot = match self.join(grant.node, &grant.addr, grant.cap.as_ref()) {
                Ok(slot) => slot,
                Err(e) => {
                    let _ = ctl.release(grant.base, grant.len);
                    return Err(e);
                }
            };
            let new = Shard {
                node: slot,
                base: grant.base,
            };
            let old = s.shards[short.lost];
            self.swap_stripe(s, |x| {
                x.shards[short.lost] = new;
                x.filling = Some(short.lost);
            })?;
            match self.rebuild(s.base, short.lost, new, rate) {
                Ok(()) => {
                    self.swap_stripe(s, |x| {
                        x.filling = None;
                        x.retired.push(old.base);
                    })?;
                    tracing::info!(
                        "rebuilt shard {} of the stripe at {:#x} on memory node {} at {}",
                        short.lost,
                        s.base,
                        grant.node,
                        grant.addr
                    );
                    done.copies += 1;
                    done.bytes += s.shard_len;
                }
                Err(e) => {
                    // Half rebuilt: never read. The lost shard again, and
                    // the granule back.
                    let _ = self.swap_stripe(s, |x| {
                        x.shards[short.lost] = old;
                        x.filling = None;
                    });
                    let _ = ctl.release(grant.base, grant.len);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Replaces the stripe at `s.base` by a changed clone of itself.
    fn swap_stripe(&self, s: &Stripe, change: impl FnOnce(&mut Stripe)) -> Result<(), NetError> {
        let mut map = self.stripes.map.write();
        let held = map.get_mut(&s.base).ok_or_else(|| {
            NetError::Routing(format!(
                "the stripe at {:#x} was released meanwhile",
                s.base
            ))
        })?;
        let mut next = Stripe::clone(held);
        change(&mut next);
        *held = Arc::new(next);
        Ok(())
    }

    /// Writes shard `i` of the stripe at logical `base`, which is being
    /// filled at `new`, from the pages its other shards decode to: a run
    /// of pages at a time, under their locks, paced to `rate`.
    fn rebuild(&self, base: u64, i: usize, new: Shard, rate: u64) -> Result<(), NetError> {
        let start = Instant::now();
        let mut at = base;
        let mut written = 0u64;
        loop {
            let s = self.stripe_at(base)?;
            if at >= s.base + s.len {
                return Ok(());
            }
            let (first, n, _, take) = self.run_of(&s, at, usize::MAX);
            let _locks = self.stripes.lock_pages(&s, first, n);
            let s = self.stripe_at(base)?;
            if s.filling != Some(i) || s.shards[i] != new {
                return Err(NetError::Routing(format!(
                    "the stripe at {:#x} changed while shard {i} was rebuilt",
                    s.base
                )));
            }
            let pages = self.read_pages(&s, first, n)?;
            let chunks = shard_chunks(&s, i, &pages)?;
            let write = Msg::Write {
                addr: new.base + first * s.chunk_len(i) as u64,
                data: &chunks,
            };
            self.call_on(new.node, &write)?.done("write")?;
            at += take as u64;
            written += chunks.len() as u64;
            pace(start, written, rate);
        }
    }
}

/// Shard `i`'s chunks of whole `pages` of `s`: data chunks as they are,
/// parity chunks encoded.
fn shard_chunks(s: &Stripe, i: usize, pages: &[u8]) -> Result<Vec<u8>, NetError> {
    let c = s.chunk_len(i);
    let mut out = Vec::with_capacity(pages.len() / PAGE * c);
    for page in pages.chunks_exact(PAGE) {
        if i < s.k {
            let start = s.chunk_start(i);
            out.extend_from_slice(&page[start..start + c]);
        } else {
            let parity = reed_solomon_simd::encode(s.k, s.m, page.chunks(c))
                .map_err(|e| coding_error(s, e))?;
            out.extend_from_slice(&parity[i - s.k]);
        }
    }
    Ok(out)
}
