//! Graph500's BFS and SSSP kernels with the specification's generator and
//! result validation, for ThymesisFlow's graph study (seed 003 Table I:
//! BFS and SSSP completion time per injected delay).
//!
//! - Generator (spec §3): a Kronecker graph of `2^scale` vertices and
//!   `edge_factor * 2^scale` undirected edges, initiator A=0.57, B=0.19,
//!   C=0.19 (D=0.05), vertex labels permuted, each edge with a weight
//!   uniform in [0, 1) for SSSP.
//! - Kernel 1: an undirected CSR (both directions of every edge; self
//!   loops dropped, duplicate edges kept).
//! - Kernel 2, BFS: level-synchronous top-down; returns the parent array.
//! - Kernel 3, SSSP: Dijkstra with a binary heap; distances and parents.
//! - Validation (spec §6): a parent tree rooted at the root with no cycles;
//!   BFS: every tree edge joins levels one apart and every input edge joins
//!   levels at most one apart, both ends reached or neither; SSSP: no edge
//!   shortens a distance, and each vertex's distance is its parent's plus
//!   the weight of an input edge between them. Every tree edge must be an
//!   input edge.
//!
//! Where this departs from the reference code: single-threaded; one
//! seeded generator (so every run of a size builds the same graph and
//! picks the same roots); no edge shuffle (see [`kronecker`]); kernel 1
//! builds in two ordered passes rather than one scatter, so that building
//! the graph under far memory does not dwarf the searches the study times;
//! distances in f32 as the reference keeps them (Dijkstra's relaxations
//! make the checks exact, not within a tolerance).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use farmem_core::mix64;

/// Graph500's Kronecker initiator.
const A: f64 = 0.57;
const B: f64 = 0.19;
const C: f64 = 0.19;

/// The input: an edge list with weights.
pub struct EdgeList {
    pub vertices: usize,
    pub edges: Vec<(u32, u32)>,
    pub weights: Vec<f32>,
}

/// Kernel 1's product: both directions of every edge that is not a loop.
pub struct Csr {
    offsets: Vec<u64>,
    targets: Vec<u32>,
    weights: Vec<f32>,
}

/// A search's result: each vertex's parent (`u32::MAX` if unreached; the
/// root is its own parent) and, for SSSP, its distance.
pub struct Tree {
    pub parent: Vec<u32>,
    pub dist: Option<Vec<f32>>,
}

/// Vertex not reached.
pub const NONE: u32 = u32::MAX;

/// Source ranges kernel 1 sorts edges into first.
const BUCKETS: usize = 256;

/// A uniform draw in [0, 1) from a hash.
fn unit(x: u64) -> f64 {
    (mix64(x) >> 11) as f64 / (1u64 << 53) as f64
}

/// The generator's random streams, each from its own hash of the seed, so
/// no two draw the same numbers whatever the seed.
fn stream(seed: u64, tag: u64) -> u64 {
    mix64(mix64(seed) ^ tag)
}

/// Bytes the generator, kernel 1 and one search hold at `scale` and
/// `edge_factor` at their peak, while kernel 1 runs: the edge list
/// (12 B/edge), its staging (24 B/edge) and the CSR (16 B/edge, 16 B/vertex
/// with the cursors).
pub fn footprint(scale: u32, edge_factor: u32) -> u64 {
    let n = 1u64 << scale;
    let m = n * u64::from(edge_factor);
    52 * m + 16 * n
}

/// The largest scale (at most 26) whose footprint fits `bytes`.
pub fn scale_for(bytes: u64, edge_factor: u32) -> u32 {
    (1..=26)
        .rev()
        .find(|&s| footprint(s, edge_factor) <= bytes)
        .unwrap_or(1)
}

/// The spec's generator, deterministic in `seed`.
pub fn kronecker(scale: u32, edge_factor: u32, seed: u64) -> EdgeList {
    let scale = scale.clamp(1, 31);
    let n = 1usize << scale;
    let m = n * edge_factor as usize;
    let ab = A + B;
    let c_norm = C / (1.0 - ab);
    let a_norm = A / ab;
    let (bits, labels, weights) = (stream(seed, 1), stream(seed, 2), stream(seed, 3));
    let mut edges = Vec::with_capacity(m);
    for e in 0..m as u64 {
        let (mut u, mut v) = (0u32, 0u32);
        for bit in 0..scale {
            // Two draws per bit: k's low bit is free.
            let k = bits ^ (e << 8 | u64::from(bit)) << 1;
            let ii = unit(k) > ab;
            let jj = unit(k ^ 1) > if ii { c_norm } else { a_norm };
            u |= u32::from(ii) << bit;
            v |= u32::from(jj) << bit;
        }
        edges.push((u, v));
    }
    // Permute the labels (Fisher-Yates), as the spec does, so vertex
    // numbers carry no structure. The spec also shuffles the edges; here
    // each edge is drawn from its own hash, so their order carries none
    // already, and a shuffle's random swaps over the whole list would
    // only time the generator under far memory.
    let mut label: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        label.swap(i, (mix64(labels ^ i as u64) % (i as u64 + 1)) as usize);
    }
    for e in &mut edges {
        *e = (label[e.0 as usize], label[e.1 as usize]);
    }
    // 24 random bits, exactly an f32's [0, 1) (a rounded f64 could be 1.0).
    let weights = (0..m as u64)
        .map(|e| (mix64(weights ^ e) >> 40) as f32 / (1u32 << 24) as f32)
        .collect();
    EdgeList {
        vertices: n,
        edges,
        weights,
    }
}

impl Csr {
    /// Kernel 1, in two passes that touch memory in order: each directed
    /// edge is appended to its source's bucket (a range of sources, and so
    /// a contiguous range of the CSR), then each bucket is placed within
    /// itself. A single scatter would write each edge to a random place in
    /// arrays of 16 B per edge.
    pub fn build(g: &EdgeList) -> Csr {
        let n = g.vertices;
        let real = || g.edges.iter().zip(&g.weights).filter(|(e, _)| e.0 != e.1);
        let mut offsets = vec![0u64; n + 1];
        for (&(u, v), _) in real() {
            offsets[u as usize + 1] += 1;
            offsets[v as usize + 1] += 1;
        }
        for i in 0..n {
            offsets[i + 1] += offsets[i];
        }
        let total = offsets[n] as usize;
        let per_bucket = n.div_ceil(BUCKETS);
        let bucket_start = |b: usize| offsets[(b * per_bucket).min(n)];
        let mut cursor: Vec<u64> = (0..BUCKETS).map(bucket_start).collect();
        // Pass 1: (source, target, weight) in the source's bucket.
        let mut staged = vec![(0u32, 0u32, 0f32); total];
        for (&(u, v), &w) in real() {
            for (from, to) in [(u, v), (v, u)] {
                let c = &mut cursor[from as usize / per_bucket];
                staged[*c as usize] = (from, to, w);
                *c += 1;
            }
        }
        // Pass 2: each bucket to its sources' places, within the bucket.
        let mut targets = vec![0u32; total];
        let mut weights = vec![0f32; total];
        let mut next = offsets.clone();
        for b in 0..BUCKETS {
            let range = bucket_start(b) as usize..bucket_start(b + 1) as usize;
            for &(from, to, w) in &staged[range] {
                let at = next[from as usize] as usize;
                targets[at] = to;
                weights[at] = w;
                next[from as usize] += 1;
            }
        }
        Csr {
            offsets,
            targets,
            weights,
        }
    }

    fn around(&self, v: u32) -> impl Iterator<Item = (u32, f32)> + '_ {
        let r = self.offsets[v as usize] as usize..self.offsets[v as usize + 1] as usize;
        self.targets[r.clone()]
            .iter()
            .copied()
            .zip(self.weights[r].iter().copied())
    }

    pub fn degree(&self, v: u32) -> u64 {
        self.offsets[v as usize + 1] - self.offsets[v as usize]
    }

    pub fn vertices(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Kernel 2.
    pub fn bfs(&self, root: u32) -> Tree {
        let mut parent = vec![NONE; self.vertices()];
        parent[root as usize] = root;
        let mut frontier = vec![root];
        while !frontier.is_empty() {
            let mut next = Vec::new();
            for &u in &frontier {
                for (v, _) in self.around(u) {
                    if parent[v as usize] == NONE {
                        parent[v as usize] = u;
                        next.push(v);
                    }
                }
            }
            frontier = next;
        }
        Tree { parent, dist: None }
    }

    /// Kernel 3.
    pub fn sssp(&self, root: u32) -> Tree {
        let n = self.vertices();
        let mut parent = vec![NONE; n];
        let mut dist = vec![f32::INFINITY; n];
        let mut done = vec![false; n];
        parent[root as usize] = root;
        dist[root as usize] = 0.0;
        // Non-negative f32s order as their bits do.
        let mut heap = BinaryHeap::from([Reverse((0u32, root))]);
        while let Some(Reverse((_, u))) = heap.pop() {
            if std::mem::replace(&mut done[u as usize], true) {
                continue;
            }
            let du = dist[u as usize];
            for (v, w) in self.around(u) {
                let d = du + w;
                if d < dist[v as usize] {
                    dist[v as usize] = d;
                    parent[v as usize] = u;
                    heap.push(Reverse((d.to_bits(), v)));
                }
            }
        }
        Tree {
            parent,
            dist: Some(dist),
        }
    }
}

/// Each vertex's depth in `parent`'s tree from `root` (`NONE` if unreached),
/// or the first vertex whose parents never reach the root.
fn depths(root: u32, parent: &[u32]) -> Result<Vec<u32>, String> {
    let n = parent.len();
    if root as usize >= n || parent[root as usize] != root {
        return Err(format!("the root {root} is not its own parent"));
    }
    let mut depth = vec![NONE; n];
    depth[root as usize] = 0;
    let mut path = Vec::new();
    for start in 0..n as u32 {
        let mut v = start;
        // Climb to a vertex of known depth; a path longer than n is a cycle.
        while depth[v as usize] == NONE && parent[v as usize] != NONE {
            path.push(v);
            if path.len() > n {
                return Err(format!("vertex {start}'s parents form a cycle"));
            }
            v = parent[v as usize];
            if v as usize >= n {
                return Err(format!("a parent {v} is not a vertex"));
            }
        }
        if depth[v as usize] == NONE && !path.is_empty() {
            return Err(format!("vertex {start}'s parents never reach the root"));
        }
        let mut d = depth[v as usize];
        while let Some(p) = path.pop() {
            d = d.saturating_add(1);
            depth[p as usize] = d;
        }
    }
    Ok(depth)
}

/// The spec's validation of one search from `root` over the input `g`.
pub fn validate(g: &EdgeList, root: u32, tree: &Tree) -> Result<(), String> {
    let n = g.vertices;
    if tree.parent.len() != n {
        return Err(format!("{} parents for {n} vertices", tree.parent.len()));
    }
    let depth = depths(root, &tree.parent)?;
    if let Some(dist) = &tree.dist {
        if dist.len() != n {
            return Err(format!("{} distances for {n} vertices", dist.len()));
        }
        if dist[root as usize] != 0.0 {
            return Err(format!(
                "the root {root} is at distance {}",
                dist[root as usize]
            ));
        }
    }
    let reached = |v: u32| tree.parent[v as usize] != NONE;
    // A tree edge is confirmed once an input edge joins the vertex and its
    // parent (with the right distance for SSSP).
    let mut confirmed = vec![false; n];
    confirmed[root as usize] = true;
    for (&(u, v), &w) in g.edges.iter().zip(&g.weights) {
        if reached(u) != reached(v) {
            return Err(format!(
                "edge {u}-{v} joins a reached and an unreached vertex"
            ));
        }
        if !reached(u) || u == v {
            continue;
        }
        match &tree.dist {
            None => {
                if depth[u as usize].abs_diff(depth[v as usize]) > 1 {
                    return Err(format!("edge {u}-{v} spans more than one BFS level"));
                }
                for (a, b) in [(u, v), (v, u)] {
                    if tree.parent[b as usize] == a && depth[b as usize] == depth[a as usize] + 1 {
                        confirmed[b as usize] = true;
                    }
                }
            }
            Some(dist) => {
                for (a, b) in [(u, v), (v, u)] {
                    let through = dist[a as usize] + w;
                    if dist[b as usize] > through {
                        return Err(format!("edge {a}-{b} shortens {b}'s distance"));
                    }
                    if tree.parent[b as usize] == a && dist[b as usize] == through {
                        confirmed[b as usize] = true;
                    }
                }
            }
        }
    }
    match (0..n).find(|&v| reached(v as u32) && !confirmed[v]) {
        Some(v) => Err(format!(
            "vertex {v}'s tree edge to {} is not an input edge of the right length",
            tree.parent[v]
        )),
        None => Ok(()),
    }
}

/// `count` search roots, as the spec picks them: vertices with an edge
/// (other than a loop), drawn with `seed`, no repeats where enough exist.
pub fn roots(csr: &Csr, count: usize, seed: u64) -> Vec<u32> {
    let n = csr.vertices() as u64;
    let mut picked = Vec::new();
    for i in 0..n.saturating_mul(4) {
        if picked.len() == count {
            break;
        }
        let v = (mix64(stream(seed, 4) ^ i) % n) as u32;
        if csr.degree(v) > 0 && !picked.contains(&v) {
            picked.push(v);
        }
    }
    picked
}

/// Input edges in the searched component (both ends reached; loops too):
/// what the spec's TEPS counts per search.
pub fn edges_reached(g: &EdgeList, tree: &Tree) -> u64 {
    g.edges
        .iter()
        .filter(|(u, _)| tree.parent[*u as usize] != NONE)
        .count() as u64
}

/// What a search found, for a checksum two runs must agree on: vertices
/// reached, and the sum of depths (BFS) or of distances' bits (SSSP).
pub fn summary(root: u32, tree: &Tree) -> (u64, u64) {
    let reached = tree.parent.iter().filter(|&&p| p != NONE).count() as u64;
    let sum = match &tree.dist {
        Some(d) => d
            .iter()
            .filter(|x| x.is_finite())
            .fold(0u64, |s, x| s.wrapping_add(u64::from(x.to_bits()))),
        None => depths(root, &tree.parent)
            .map(|d| {
                d.iter()
                    .filter(|&&x| x != NONE)
                    .map(|&x| u64::from(x))
                    .sum()
            })
            .unwrap_or(0),
    };
    (reached, sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> (EdgeList, Csr) {
        let g = kronecker(10, 8, 7);
        let csr = Csr::build(&g);
        (g, csr)
    }

    #[test]
    fn the_generator_is_deterministic_and_skewed() {
        let g = kronecker(10, 8, 7);
        assert_eq!(g.vertices, 1024);
        assert_eq!(g.edges.len(), 8192);
        assert_eq!(g.weights.len(), 8192);
        assert!(g.weights.iter().all(|w| (0.0..1.0).contains(w)));
        assert_eq!(kronecker(10, 8, 7).edges, g.edges);
        assert_ne!(kronecker(10, 8, 8).edges, g.edges);
        // Kronecker graphs are heavy-tailed: the top vertex has far more
        // than the mean degree of 16.
        let csr = Csr::build(&g);
        let top = (0..1024).map(|v| csr.degree(v)).max().unwrap();
        assert!(top > 100, "max degree {top}");
        let loops = g.edges.iter().filter(|(u, v)| u == v).count() as u64;
        assert_eq!(csr.targets.len() as u64, 2 * (8192 - loops));
    }

    #[test]
    fn searches_pass_validation_and_agree_on_what_they_reach() {
        let (g, csr) = small();
        for root in roots(&csr, 4, 1) {
            let bfs = csr.bfs(root);
            let sssp = csr.sssp(root);
            assert_eq!(validate(&g, root, &bfs), Ok(()));
            assert_eq!(validate(&g, root, &sssp), Ok(()));
            assert_eq!(summary(root, &bfs).0, summary(root, &sssp).0);
        }
    }

    #[test]
    fn validation_catches_wrong_trees() {
        let (g, csr) = small();
        let root = (0..1024).max_by_key(|&v| csr.degree(v)).unwrap();
        let good = csr.bfs(root);
        let far = (0..1024u32)
            .find(|&v| {
                v != root && good.parent[v as usize] != NONE && good.parent[v as usize] != root
            })
            .unwrap();
        // A vertex claims the root as its parent with no edge between them.
        let mut zeroed = Tree {
            parent: good.parent.clone(),
            dist: None,
        };
        zeroed.parent[far as usize] = root;
        assert!(validate(&g, root, &zeroed).is_err());
        let mut cut = Tree {
            parent: good.parent.clone(),
            dist: None,
        };
        cut.parent[far as usize] = NONE;
        assert!(validate(&g, root, &cut).is_err());
        let mut cycle = Tree {
            parent: good.parent.clone(),
            dist: None,
        };
        let p = cycle.parent[far as usize];
        cycle.parent[p as usize] = far;
        assert!(validate(&g, root, &cycle).is_err());
        let mut sssp = csr.sssp(root);
        if let Some(d) = sssp.dist.as_mut() {
            d[far as usize] += 0.25;
        }
        assert!(validate(&g, root, &sssp).is_err());
        // Distances all zero (a zeroed page) or all infinite.
        for wrong in [0.0, f32::INFINITY] {
            let mut t = csr.sssp(root);
            t.dist.as_mut().unwrap().iter_mut().for_each(|d| *d = wrong);
            assert!(validate(&g, root, &t).is_err(), "{wrong}");
        }
    }

    #[test]
    fn the_footprint_picks_the_scale() {
        assert_eq!(footprint(20, 16), 52 * 16 * (1 << 20) + 16 * (1 << 20));
        assert_eq!(scale_for(footprint(18, 16), 16), 18);
        assert_eq!(scale_for(footprint(18, 16) - 1, 16), 17);
        assert_eq!(scale_for(0, 16), 1);
    }
}
