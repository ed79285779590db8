//! Deterministic pseudo-random bytes (xorshift64): data that does not
//! compress and is the same from the same seed, for the tests of every
//! crate.

/// Steps a xorshift64 stream and returns its new state (a nonzero state
/// never becomes zero).
pub fn xorshift64(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// `len` bytes of `seed`'s stream, the low byte of each step (an even
/// seed is made odd, so 0 is a seed too).
pub fn noise_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len).map(|_| xorshift64(&mut x) as u8).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_bytes_and_others_differ() {
        assert_eq!(noise_bytes(64, 7), noise_bytes(64, 7));
        assert_ne!(noise_bytes(64, 7), noise_bytes(64, 9));
        assert_eq!(noise_bytes(64, 0), noise_bytes(64, 1));
        let mut x = 1;
        assert_eq!(xorshift64(&mut x), 0x4082_2041);
    }
}
