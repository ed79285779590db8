//! YCSB's Zipfian generator (Gray et al., "Quickly generating billion-record
//! synthetic databases"), with YCSB's scrambling so hot keys are spread over
//! the key space instead of clustered at its start.

use rand::Rng;

#[derive(Debug, Clone)]
pub struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    scramble: bool,
}

fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

impl Zipf {
    /// Ranks `0..n` with skew `theta` (YCSB: 0.99). `n ≥ 1`.
    pub fn new(n: u64, theta: f64, scramble: bool) -> Self {
        let n = n.max(1);
        let zetan = zeta(n, theta);
        let zeta2 = zeta(2, theta);
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Self {
            n,
            theta,
            alpha,
            zetan,
            eta,
            scramble,
        }
    }

    pub fn sample<R: Rng>(&self, rng: &mut R) -> u64 {
        let u: f64 = rng.r#gen();
        let uz = u * self.zetan;
        let rank = if uz < 1.0 {
            0
        } else if uz < 1.0 + 0.5f64.powf(self.theta) {
            1
        } else {
            ((self.n as f64) * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
        };
        let rank = rank.min(self.n - 1);
        if self.scramble {
            fnv64(rank) % self.n
        } else {
            rank
        }
    }
}

/// FNV-1a over the 8 bytes of `x`, as YCSB scrambles ranks.
pub fn fnv64(x: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in x.to_le_bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    #[test]
    fn rank_zero_is_most_popular() {
        let z = Zipf::new(1000, 0.99, false);
        let mut rng = SmallRng::seed_from_u64(1);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[z.sample(&mut rng) as usize] += 1;
        }
        assert!(counts[0] > counts[1] && counts[1] > counts[10] && counts[10] > counts[500]);
        // With theta .99 over 1000 keys, rank 0 draws about 1/zeta(1000) ≈ 13%.
        assert!((10_000..16_000).contains(&counts[0]), "{}", counts[0]);
    }
}
