//! RMAT/Kronecker graphs with Graph500 parameters, as undirected CSR.

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

/// Graph500's initiator probabilities (d = 1 − a − b − c = 0.05).
pub const A: f64 = 0.57;
pub const B: f64 = 0.19;
pub const C: f64 = 0.19;

/// Compressed sparse rows: neighbours of `v` are `neigh[offsets[v]..offsets[v+1]]`, sorted.
#[derive(Debug, Clone)]
pub struct Csr {
    pub offsets: Vec<u64>,
    pub neigh: Vec<u32>,
}

impl Csr {
    pub fn vertices(&self) -> usize {
        self.offsets.len() - 1
    }
    pub fn edges(&self) -> usize {
        self.neigh.len()
    }
    pub fn degree(&self, v: usize) -> usize {
        (self.offsets[v + 1] - self.offsets[v]) as usize
    }
    pub fn neighbors(&self, v: usize) -> &[u32] {
        &self.neigh[self.offsets[v] as usize..self.offsets[v + 1] as usize]
    }
}

/// `2^scale` vertices, `edge_factor × 2^scale` generated edges, symmetrized,
/// without self loops or duplicates; vertex ids randomly permuted (as
/// Graph500 does) so that hubs are not clustered at low ids.
pub fn rmat(scale: u32, edge_factor: u32, seed: u64) -> Csr {
    let n = 1usize << scale;
    let m = n * edge_factor as usize;
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut perm: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        perm.swap(i, rng.gen_range(0..=i));
    }
    // The quadrant draws compare integer bits, branch-free, as in
    // `rmat_ligra`: the same draws and the same edges as the float
    // comparisons.
    let (t_a, t_ab, t_abc) = (below(A), below(A + B), below(A + B + C));
    let mut edges: Vec<(u32, u32)> = Vec::with_capacity(m);
    for _ in 0..m {
        let (mut u, mut v) = (0usize, 0usize);
        for bit in (0..scale).rev() {
            let k = unit_bits(&mut rng);
            // [A: none) [B: v) [C: u) [D: both)
            let ub = k >= t_ab;
            let vb = (k >= t_a && k < t_ab) | (k >= t_abc);
            u |= usize::from(ub) << bit;
            v |= usize::from(vb) << bit;
        }
        if u != v {
            edges.push((perm[u], perm[v]));
        }
    }
    from_edges(n, &edges)
}

/// Ligra's `rMatGraph` with its defaults (utils/rMatGraph.C, PBBS):
/// `2^scale` vertices, `10 × 2^scale` generated edges, a = 0.5, b = c = 0.1,
/// ids *not* permuted (low ids are the hubs), symmetrized (`-s`) without
/// self loops or duplicates. DaeMon's "1M vertices x 10M edges" is this
/// generator's default edge count at scale 20.
pub fn rmat_ligra(scale: u32, seed: u64) -> Csr {
    const LA: f64 = 0.5;
    const LB: f64 = 0.1;
    const LC: f64 = 0.1;
    let n = 1usize << scale;
    let m = n * 10;
    let mut rng = SmallRng::seed_from_u64(seed);
    // Each quadrant choice compares `rng.gen::<f64>()` with a threshold;
    // done on the draw's integer bits instead, branch-free (the branches
    // mispredicted half the time and made this a seventh of `farmem sim
    // --workload pr`), with the same draws and the same edges.
    let (t_a, t_ab, t_abc) = (below(LA), below(LA + LB), below(LA + LB + LC));
    let mut edges: Vec<(u32, u32)> = Vec::with_capacity(m);
    for _ in 0..m {
        let (mut u, mut v) = (0u32, 0u32);
        for bit in (0..scale).rev() {
            let k = unit_bits(&mut rng);
            // [A: none) [B: v) [C: u) [D: both)
            let ub = k >= t_ab;
            let vb = (k >= t_a && k < t_ab) | (k >= t_abc);
            u |= u32::from(ub) << bit;
            v |= u32::from(vb) << bit;
        }
        if u != v {
            edges.push((u, v));
        }
    }
    from_edges(n, &edges)
}

/// The 53 bits rand 0.8's `Standard` turns into an `f64` in [0, 1): the
/// draw is `unit_bits(rng) as f64 * 2^-53`, consuming the same `u64`.
#[inline(always)]
fn unit_bits(rng: &mut SmallRng) -> u64 {
    rng.next_u64() >> 11
}

/// The integer `t` such that a draw's [`unit_bits`] `k` is below `t`
/// exactly when its float `k * 2^-53` is below `p` (`p * 2^53` is exact).
fn below(p: f64) -> u64 {
    (p * (1u64 << 53) as f64).ceil() as u64
}

/// Undirected CSR from an edge list.
pub fn from_edges(n: usize, edges: &[(u32, u32)]) -> Csr {
    let mut deg = vec![0u64; n + 1];
    for &(u, v) in edges {
        deg[u as usize] += 1;
        deg[v as usize] += 1;
    }
    let mut offsets = vec![0u64; n + 1];
    for v in 0..n {
        offsets[v + 1] = offsets[v] + deg[v];
    }
    let mut fill = offsets.clone();
    let mut neigh = vec![0u32; offsets[n] as usize];
    for &(u, v) in edges {
        neigh[fill[u as usize] as usize] = v;
        fill[u as usize] += 1;
        neigh[fill[v as usize] as usize] = u;
        fill[v as usize] += 1;
    }
    // Sort and deduplicate each list, compacting in place.
    let mut out = 0usize;
    let mut new_offsets = vec![0u64; n + 1];
    for v in 0..n {
        let (s, e) = (offsets[v] as usize, offsets[v + 1] as usize);
        neigh[s..e].sort_unstable();
        let mut last = u32::MAX;
        for i in s..e {
            let w = neigh[i];
            if w != last {
                neigh[out] = w;
                out += 1;
                last = w;
            }
        }
        new_offsets[v + 1] = out as u64;
    }
    neigh.truncate(out);
    Csr {
        offsets: new_offsets,
        neigh,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmat_is_symmetric_sorted_and_skewed() {
        let g = rmat(12, 8, 7);
        assert_eq!(g.vertices(), 4096);
        for v in 0..g.vertices() {
            let ns = g.neighbors(v);
            assert!(ns.windows(2).all(|w| w[0] < w[1]));
            for &u in ns {
                assert_ne!(u as usize, v);
                assert!(g.neighbors(u as usize).binary_search(&(v as u32)).is_ok());
            }
        }
        let max = (0..g.vertices()).map(|v| g.degree(v)).max().unwrap();
        let avg = g.edges() / g.vertices();
        assert!(max > 10 * avg, "max {max} avg {avg}");
    }

    /// The float comparisons `rmat_ligra` replaced, as the reference.
    fn rmat_ligra_floats(scale: u32, seed: u64) -> Csr {
        let (la, lb, lc) = (0.5, 0.1, 0.1);
        let n = 1usize << scale;
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut edges = Vec::new();
        for _ in 0..n * 10 {
            let (mut u, mut v) = (0u32, 0u32);
            for bit in (0..scale).rev() {
                let r: f64 = rng.r#gen();
                if r < la {
                } else if r < la + lb {
                    v |= 1 << bit;
                } else if r < la + lb + lc {
                    u |= 1 << bit;
                } else {
                    u |= 1 << bit;
                    v |= 1 << bit;
                }
            }
            if u != v {
                edges.push((u, v));
            }
        }
        from_edges(n, &edges)
    }

    /// The float comparisons `rmat` replaced, as the reference.
    fn rmat_floats(scale: u32, edge_factor: u32, seed: u64) -> Csr {
        let n = 1usize << scale;
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut perm: Vec<u32> = (0..n as u32).collect();
        for i in (1..n).rev() {
            perm.swap(i, rng.gen_range(0..=i));
        }
        let mut edges = Vec::new();
        for _ in 0..n * edge_factor as usize {
            let (mut u, mut v) = (0usize, 0usize);
            for bit in (0..scale).rev() {
                let r: f64 = rng.r#gen();
                let (du, dv) = if r < A {
                    (0, 0)
                } else if r < A + B {
                    (0, 1)
                } else if r < A + B + C {
                    (1, 0)
                } else {
                    (1, 1)
                };
                u |= du << bit;
                v |= dv << bit;
            }
            if u != v {
                edges.push((perm[u], perm[v]));
            }
        }
        from_edges(n, &edges)
    }

    #[test]
    fn rmat_draws_the_same_graph_as_float_comparisons() {
        for (scale, ef, seed) in [(4, 8, 1), (10, 8, 1), (12, 16, 7)] {
            let (a, b) = (rmat(scale, ef, seed), rmat_floats(scale, ef, seed));
            assert_eq!(a.offsets, b.offsets, "scale {scale} seed {seed}");
            assert_eq!(a.neigh, b.neigh, "scale {scale} seed {seed}");
        }
    }

    #[test]
    fn ligra_rmat_draws_the_same_graph_as_float_comparisons() {
        for (scale, seed) in [(4, 1), (10, 1), (12, 7)] {
            let (a, b) = (rmat_ligra(scale, seed), rmat_ligra_floats(scale, seed));
            assert_eq!(a.offsets, b.offsets, "scale {scale} seed {seed}");
            assert_eq!(a.neigh, b.neigh, "scale {scale} seed {seed}");
        }
        // The thresholds sit where the floats do.
        assert_eq!(below(0.5), 1 << 52);
        assert!(((below(0.6) - 1) as f64 / (1u64 << 53) as f64) < 0.6);
        assert!((below(0.6) as f64 / (1u64 << 53) as f64) >= 0.6);
    }
}
