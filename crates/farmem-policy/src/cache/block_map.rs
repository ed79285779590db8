//! A hash map keyed by block number with a cheap hasher. Policies look a
//! block up several times per access and the simulator drives hundreds of
//! millions of accesses, so SipHash (std's default, built against hash
//! flooding, which block numbers from our own traces cannot mount) would
//! dominate the cost. rustc-hash's FxHasher is the same hasher the
//! simulator's page tables use.

use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

/// `HashMap<BlockId, V>` with rustc-hash's FxHasher.
pub(crate) type BlockMap<V> = HashMap<crate::BlockId, V, FxBuildHasher>;

/// Cap on up-front allocation, so a huge configured capacity only costs
/// memory as the cache fills.
pub(crate) const PREALLOC: usize = 1 << 16;

/// An empty map with room for `capacity` blocks (at most [`PREALLOC`]).
pub(crate) fn block_map<V>(capacity: usize) -> BlockMap<V> {
    BlockMap::with_capacity_and_hasher(capacity.min(PREALLOC), FxBuildHasher)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_keys_spread_over_low_bits() {
        // hashbrown picks buckets by the hash's low bits; block numbers of
        // a strided scan (all ≡ 0 mod 8) must still reach nearly all of them.
        use std::hash::BuildHasher;
        let mut seen = std::collections::HashSet::new();
        for k in (0..1024u64).map(|i| i * 8) {
            seen.insert(FxBuildHasher.hash_one(k) & 127);
        }
        assert!(seen.len() > 120, "{}", seen.len());
    }
}
