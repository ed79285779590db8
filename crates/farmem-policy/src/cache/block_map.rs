//! A hash map keyed by block number with a cheap hasher. Policies look a
//! block up several times per access and the simulator drives hundreds of
//! millions of accesses, so SipHash (std's default, built against hash
//! flooding, which block numbers from our own traces cannot mount) would
//! dominate the cost.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// `HashMap<BlockId, V>` with [`BlockHasher`].
pub(crate) type BlockMap<V> = HashMap<crate::BlockId, V, BuildHasherDefault<BlockHasher>>;

/// Cap on up-front allocation, so a huge configured capacity only costs
/// memory as the cache fills.
pub(crate) const PREALLOC: usize = 1 << 16;

/// An empty map with room for `capacity` blocks (at most [`PREALLOC`]).
pub(crate) fn block_map<V>(capacity: usize) -> BlockMap<V> {
    BlockMap::with_capacity_and_hasher(capacity.min(PREALLOC), Default::default())
}

/// A folded 64×64→128-bit multiply (as in wyhash): every input bit reaches
/// the low bits hashbrown indexes buckets with, so strided block numbers
/// (all ≡ 0 mod 8) still spread.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct BlockHasher(u64);

const K: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for BlockHasher {
    fn finish(&self) -> u64 {
        let p = u128::from(self.0 ^ K) * u128::from(K);
        (p as u64) ^ ((p >> 64) as u64)
    }
    fn write(&mut self, bytes: &[u8]) {
        // Not used for u64 keys; folds any other key in 8-byte words.
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(w));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(29) ^ n).wrapping_mul(K);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_keys_spread_over_low_bits() {
        use std::hash::BuildHasher;
        let b = BuildHasherDefault::<BlockHasher>::default();
        let mut seen = std::collections::HashSet::new();
        for k in (0..1024u64).map(|i| i * 8) {
            seen.insert(b.hash_one(k) & 127);
        }
        // 1024 keys into 128 buckets by low bits: nearly all buckets used.
        assert!(seen.len() > 120, "{}", seen.len());
    }
}
