//! Workloads that run on ordinary memory, untraced: what `farmem demo`
//! runs once locally and once under `farmem run`.
//!
//! PageRank, pull style (each vertex sums the contributions of its
//! in-neighbours), over a generated graph with skewed popularity. The
//! graph is generated vertex by vertex, so building it writes its big
//! array once, in order, as a loader would; the iterations stream the
//! in-edges and read scattered contributions, PageRank's usual pattern.

use farmem_core::mix64;

/// In-edges in compressed rows: the sources of `v`'s edges are
/// `sources[offsets[v]..offsets[v + 1]]`.
#[derive(Debug)]
pub struct PullGraph {
    pub offsets: Vec<u64>,
    pub sources: Vec<u32>,
    pub out_degree: Vec<u32>,
}

impl PullGraph {
    pub fn vertices(&self) -> usize {
        self.out_degree.len()
    }
    pub fn edges(&self) -> usize {
        self.sources.len()
    }
    /// Bytes of the graph's arrays.
    pub fn bytes(&self) -> u64 {
        (self.offsets.len() * 8 + self.sources.len() * 4 + self.out_degree.len() * 4) as u64
    }
}

/// A graph of `2^scale` vertices with `edge_factor` in-edges per vertex on
/// average. Sources are skewed (density falling as the cube of a uniform
/// draw, like a power law's head) and scattered over the id space, so hubs
/// are not clustered at low ids. Deterministic in `seed`.
pub fn pull_graph(scale: u32, edge_factor: u32, seed: u64) -> PullGraph {
    let n = 1usize << scale.min(31);
    let ef = u64::from(edge_factor.max(1));
    // In-degree of v: uniform in 1..=2·ef−1, so the mean is ef.
    let degree = |v: usize| 1 + mix64(seed ^ v as u64) % (2 * ef - 1);
    let mut offsets = Vec::with_capacity(n + 1);
    let mut total = 0u64;
    offsets.push(0);
    for v in 0..n {
        total += degree(v);
        offsets.push(total);
    }
    let mut sources = Vec::with_capacity(total as usize);
    let mut out_degree = vec![0u32; n];
    let mask = n as u64 - 1;
    // An odd multiplier is a bijection modulo 2^scale: it scatters hubs.
    let scatter = mix64(seed.wrapping_add(1)) | 1;
    let mut x = mix64(seed.wrapping_add(2)) | 1;
    for v in 0..n {
        for _ in 0..degree(v) {
            // xorshift64: fast, and plenty for picking edges.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let r = (x >> 11) as f64 / (1u64 << 53) as f64;
            let popular = ((r * r * r) * n as f64) as u64;
            let u = (popular.wrapping_mul(scatter) & mask) as u32;
            sources.push(u);
            out_degree[u as usize] += 1;
        }
    }
    PullGraph {
        offsets,
        sources,
        out_degree,
    }
}

/// `iterations` rounds of PageRank (damping 0.85); `each(i)` is called after
/// round `i` (1-based). The order of floating-point operations is fixed, so
/// two runs over the same graph give bit-identical ranks.
pub fn pagerank(g: &PullGraph, iterations: usize, mut each: impl FnMut(usize)) -> Vec<f64> {
    let n = g.vertices();
    let mut rank = vec![1.0 / n as f64; n];
    let mut contrib = vec![0.0f64; n];
    let base = 0.15 / n as f64;
    for i in 1..=iterations {
        for ((c, r), &d) in contrib.iter_mut().zip(&rank).zip(&g.out_degree) {
            *c = r / f64::from(d.max(1));
        }
        for (r, edges) in rank.iter_mut().zip(g.offsets.windows(2)) {
            let sources = &g.sources[edges[0] as usize..edges[1] as usize];
            let sum: f64 = sources.iter().map(|&u| contrib[u as usize]).sum();
            *r = base + 0.85 * sum;
        }
        each(i);
    }
    rank
}

/// A checksum of the exact bits of `values`, to compare two runs.
pub fn checksum(values: &[f64]) -> u64 {
    values.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, v| {
        (h ^ v.to_bits()).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The `k` highest-ranked vertices, best first (ties by id).
pub fn top(rank: &[f64], k: usize) -> Vec<(u32, f64)> {
    let mut best: Vec<(u32, f64)> = Vec::with_capacity(k + 1);
    for (v, &r) in rank.iter().enumerate() {
        if best.len() < k || r > best[best.len() - 1].1 {
            let at = best.partition_point(|&(_, b)| b >= r);
            best.insert(at, (v as u32, r));
            best.truncate(k);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_is_deterministic_and_consistent() {
        let g = pull_graph(10, 8, 7);
        let h = pull_graph(10, 8, 7);
        assert_eq!(g.sources, h.sources);
        assert_eq!(g.vertices(), 1024);
        assert_eq!(*g.offsets.last().unwrap() as usize, g.edges());
        let out: u64 = g.out_degree.iter().map(|&d| u64::from(d)).sum();
        assert_eq!(out as usize, g.edges());
        // Mean in-degree is the edge factor, give or take sampling.
        let mean = g.edges() as f64 / 1024.0;
        assert!((7.0..9.0).contains(&mean), "{mean}");
        // Skewed: the most popular source has far more than the mean.
        assert!(*g.out_degree.iter().max().unwrap() > 40);
    }

    #[test]
    fn pagerank_keeps_its_mass_and_orders_its_top_list() {
        let g = pull_graph(10, 8, 1);
        let mut rounds = Vec::new();
        let r = pagerank(&g, 5, |i| rounds.push(i));
        assert_eq!(rounds, [1, 2, 3, 4, 5]);
        // Sinks (no out-edges) leak mass, so the total is at most 1.
        let total: f64 = r.iter().sum();
        assert!(total > 0.2 && total <= 1.0 + 1e-9, "{total}");
        let best = top(&r, 3);
        assert_eq!(best.len(), 3);
        assert!(best[0].1 >= best[1].1 && best[1].1 >= best[2].1);
        assert_eq!(checksum(&r), checksum(&pagerank(&g, 5, |_| {})));
    }
}
