//! Per-client quota (`farmem controller --quota SIZE`): the most bytes one
//! client name may hold, every copy and lost range counted. An `Alloc`
//! that would take a client past it is refused with `NoCapacity`, naming
//! the client, what it holds, what it asked and the quota.

use std::sync::atomic::Ordering;

use farmem_net::server::{Peer, Refusal};
use farmem_wire::ErrorCode;

use crate::Shared;

/// Bytes an `Alloc` of `size` with `replicas` copies takes from a quota:
/// the size rounded up to whole granules, once per copy.
pub(crate) fn asked_bytes(size: u64, granularity: u64, replicas: usize) -> u64 {
    let g = granularity.max(1);
    let copies = u64::try_from(replicas.max(1)).unwrap_or(u64::MAX);
    size.div_ceil(g).saturating_mul(g).saturating_mul(copies)
}

impl Shared {
    /// Refuses `peer` an allocation of `size` bytes in `replicas` copies
    /// that would take it past the quota, if there is one. Called with the
    /// lease guard held, as `Alloc` is, so two allocations of one client
    /// cannot both pass on the same holdings.
    pub(crate) fn check_quota(
        &self,
        peer: &Peer,
        size: u64,
        replicas: usize,
    ) -> Result<(), Refusal> {
        let Some(quota) = self.cfg.quota else {
            return Ok(());
        };
        let (held, asked) = {
            let t = self.table.lock();
            let held: u64 = t.tree.grants_of(&peer.name).iter().map(|g| g.len).sum();
            (held, asked_bytes(size, t.tree.granularity(), replicas))
        };
        if held.saturating_add(asked) <= quota {
            return Ok(());
        }
        self.refused_quota.fetch_add(1, Ordering::Relaxed);
        Err(Refusal::new(
            ErrorCode::NoCapacity,
            format!(
                "the controller refused `{}` (session {} from {}): it holds {held} bytes and asked for {asked} more ({size} bytes in {replicas} copies, whole granules), past its quota of {quota} bytes",
                peer.name, peer.session, peer.addr
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asked_bytes_round_up_per_copy_without_overflow() {
        assert_eq!(asked_bytes(1, 4096, 1), 4096);
        assert_eq!(asked_bytes(4096, 4096, 2), 8192);
        assert_eq!(asked_bytes(5000, 4096, 0), 8192);
        assert_eq!(asked_bytes(u64::MAX, 4096, 3), u64::MAX);
        assert_eq!(asked_bytes(10, 0, 1), 10);
    }
}
