//! Where an evicted page goes when a compressed pool sits in front of the
//! remote tier (xDM's `compressed` backend, seed 004 §3 "Swap Backend"; the
//! kernel's zswap in front of a swap device is the same shape).
//!
//! A page all zeros is kept as nothing. A page that compresses to no more
//! than [`CompressedTierConfig::max_ratio`] of its size is kept compressed
//! in local memory; one that does not is passed down, since keeping it
//! would spend nearly a page of local memory to save one remote write.
//! The pool is bounded by [`CompressedTierConfig::pool_share`] of the
//! local limit; past it the oldest kept pages are demoted to the tier
//! below, as zswap's shrinker writes its least recently stored back.
//!
//! Where the seed is silent: xDM chooses a backend per application, not per
//! page, and gives no pool size; the defaults here are zswap's
//! (`max_pool_percent` 20, pages that do not shrink are rejected), with the
//! rejection threshold lowered to 3/4 of a page because a slot of the pool's
//! allocator costs more than the bytes it holds.

/// The compressed pool's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompressedTierConfig {
    /// Most of the local limit the pool may take (0..=0.5; default 0.2):
    /// the rest is for pages the program can touch without a fault.
    pub pool_share: f64,
    /// Largest compressed size kept, as a share of the page (default 0.75).
    pub max_ratio: f64,
}

impl Default for CompressedTierConfig {
    fn default() -> Self {
        Self {
            pool_share: 0.2,
            max_ratio: 0.75,
        }
    }
}

/// Where one page goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// All zeros: kept as a mark, no bytes.
    Zero,
    /// Kept compressed in the pool.
    Pool,
    /// Passed down to the tier below as it is.
    Below,
}

impl CompressedTierConfig {
    /// The pool's size in bytes for a local limit of `local_bytes`.
    pub fn pool_bytes(&self, local_bytes: u64) -> u64 {
        (local_bytes as f64 * self.pool_share.clamp(0.0, 0.5)) as u64
    }

    /// Where a page of `page_len` bytes goes, given whether it is all zeros
    /// and its compressed length (None: the compressor gave up).
    pub fn admit(&self, page_len: usize, zero: bool, compressed: Option<usize>) -> Admit {
        if zero {
            return Admit::Zero;
        }
        match compressed {
            Some(len) if (len as f64) <= page_len as f64 * self.max_ratio => Admit::Pool,
            _ => Admit::Below,
        }
    }

    /// Rejects values that cannot mean anything.
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=0.5).contains(&self.pool_share) {
            return Err(format!(
                "compressed pool share {} is not between 0 and 0.5",
                self.pool_share
            ));
        }
        if !(0.0..=1.0).contains(&self.max_ratio) {
            return Err(format!(
                "compressed page ratio {} is not between 0 and 1",
                self.max_ratio
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_pages_take_nothing_and_incompressible_ones_pass_down() {
        let c = CompressedTierConfig::default();
        assert_eq!(c.admit(4096, true, Some(20)), Admit::Zero);
        assert_eq!(c.admit(4096, false, Some(3072)), Admit::Pool);
        assert_eq!(c.admit(4096, false, Some(3073)), Admit::Below);
        assert_eq!(c.admit(4096, false, None), Admit::Below);
    }

    #[test]
    fn pool_size_follows_the_limit() {
        let c = CompressedTierConfig::default();
        assert_eq!(c.pool_bytes(1000 * 4096), 200 * 4096);
        let none = CompressedTierConfig {
            pool_share: 0.0,
            ..c
        };
        assert_eq!(none.pool_bytes(1 << 30), 0);
        assert!(
            CompressedTierConfig {
                pool_share: 0.6,
                ..c
            }
            .validate()
            .is_err()
        );
        assert!(c.validate().is_ok());
    }
}
