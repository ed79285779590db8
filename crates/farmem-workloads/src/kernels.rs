//! The workloads: real algorithms on generated data that report each access
//! to their data arrays. Loop counters, accumulators and other values a
//! compiler keeps in registers are not reported; their instructions are the
//! `gap` before the next access.

// Indices are what gets traced, so loops index explicitly.
#![allow(clippy::needless_range_loop)]

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::graph::{Csr, rmat};
use crate::record::Sink;
use crate::space::{Emitter, Region, Space};
use crate::zipf::Zipf;

/// Sizes scale with `factor` (1.0 = the default footprint).
#[derive(Debug, Clone, Copy)]
pub struct Params {
    pub factor: f64,
    pub seed: u64,
}

impl Params {
    fn count(&self, base: u64) -> u64 {
        ((base as f64 * self.factor).round() as u64).max(1)
    }
    /// Graph scale (log2 vertices): +1 per doubling of `factor`.
    fn graph_scale(&self, base: u32) -> u32 {
        let delta = self.factor.log2().round() as i64;
        (base as i64 + delta).clamp(4, 30) as u32
    }
}

/// The graph arrays every graph kernel reads.
struct GraphRegions {
    offsets: Region,
    neigh: Region,
}

fn begin<S: Sink + ?Sized>(sink: &mut S, space: &Space) {
    sink.begin(space.footprint());
}

/// Starts a graph kernel: generates the graph, lays out its arrays plus the
/// kernel's own, begins the sink and reports the graph's contents.
fn graph_kernel<'a, S: Sink + ?Sized>(
    sink: &'a mut S,
    p: &Params,
    base_scale: u32,
    extra: &[(&'static str, u16)],
) -> (Csr, GraphRegions, Vec<Region>, Emitter<'a, S>) {
    let g = rmat(p.graph_scale(base_scale), 8, p.seed);
    let mut space = Space::default();
    let gr = GraphRegions {
        offsets: space.alloc("offsets", 8, g.offsets.len() as u64),
        neigh: space.alloc("neighbors", 4, g.neigh.len() as u64),
    };
    let n = g.vertices() as u64;
    let regions: Vec<Region> = extra
        .iter()
        .map(|&(name, elem)| space.alloc(name, elem, n))
        .collect();
    begin(sink, &space);
    let mut em = Emitter::new(sink);
    em.contents(&gr.offsets, &g.offsets);
    em.contents(&gr.neigh, &g.neigh);
    (g, gr, regions, em)
}

/// PageRank, pull direction (GAP `pr`, its Jacobi `PageRankPull`): 2
/// iterations, damping 0.85. Scores and contributions are `float`, as GAP's
/// `ScoreT`: the randomly read `contrib` array is 4 B per vertex.
pub fn pr<S: Sink + ?Sized>(sink: &mut S, p: &Params) {
    let (g, gr, r, mut em) = graph_kernel(sink, p, 19, &[("scores", 4), ("contrib", 4)]);
    let (scores_r, contrib_r) = (r[0], r[1]);
    let n = g.vertices();
    let mut scores = vec![1.0 / n as f32; n];
    let mut contrib = vec![0.0f32; n];
    em.contents(&scores_r, &scores);
    let base = (1.0 - 0.85) / n as f32;
    for _ in 0..2 {
        for v in 0..n {
            em.ld(&scores_r, v as u64, 1);
            em.ld(&gr.offsets, v as u64, 0);
            em.ld(&gr.offsets, v as u64 + 1, 0);
            contrib[v] = scores[v] / g.degree(v).max(1) as f32;
            em.st(&contrib_r, v as u64, 3);
        }
        for v in 0..n {
            em.ld(&gr.offsets, v as u64, 1);
            em.ld(&gr.offsets, v as u64 + 1, 0);
            let mut sum = 0.0f32;
            for e in g.offsets[v]..g.offsets[v + 1] {
                em.ld(&gr.neigh, e, 1);
                let u = g.neigh[e as usize] as usize;
                em.ld(&contrib_r, u as u64, 0);
                sum += contrib[u];
            }
            // GAP reads the old score for its convergence error.
            em.ld(&scores_r, v as u64, 1);
            scores[v] = base + 0.85 * sum;
            em.st(&scores_r, v as u64, 3);
        }
    }
    std::hint::black_box(&scores);
}

/// Top-down breadth-first search from the highest-degree vertex (GAP `bfs`).
pub fn bfs<S: Sink + ?Sized>(sink: &mut S, p: &Params) {
    let (g, gr, r, mut em) = graph_kernel(sink, p, 19, &[("parent", 4), ("queue", 4)]);
    let (parent_r, queue_r) = (r[0], r[1]);
    let n = g.vertices();
    let src = (0..n).max_by_key(|&v| g.degree(v)).unwrap_or(0);
    let mut parent = vec![u32::MAX; n];
    em.contents(&parent_r, &parent);
    let mut queue = vec![0u32; n];
    parent[src] = src as u32;
    queue[0] = src as u32;
    em.st(&parent_r, src as u64, 0);
    em.st(&queue_r, 0, 0);
    let (mut head, mut tail) = (0usize, 1usize);
    while head < tail {
        em.ld(&queue_r, head as u64, 1);
        let u = queue[head] as usize;
        head += 1;
        em.ld(&gr.offsets, u as u64, 0);
        em.ld(&gr.offsets, u as u64 + 1, 0);
        for e in g.offsets[u]..g.offsets[u + 1] {
            em.ld(&gr.neigh, e, 1);
            let v = g.neigh[e as usize] as usize;
            em.ld(&parent_r, v as u64, 0);
            if parent[v] == u32::MAX {
                parent[v] = u as u32;
                em.st(&parent_r, v as u64, 1);
                queue[tail] = v as u32;
                em.st(&queue_r, tail as u64, 0);
                tail += 1;
            }
        }
    }
    std::hint::black_box(&parent);
}

/// Connected components, Shiloach-Vishkin hooking and compression (GAP `cc_sv`).
pub fn cc<S: Sink + ?Sized>(sink: &mut S, p: &Params) {
    let (g, gr, r, mut em) = graph_kernel(sink, p, 18, &[("comp", 4)]);
    let comp_r = r[0];
    let n = g.vertices();
    let mut comp: Vec<u32> = (0..n as u32).collect();
    em.contents(&comp_r, &comp);
    let mut change = true;
    while change {
        change = false;
        for u in 0..n {
            em.ld(&gr.offsets, u as u64, 1);
            em.ld(&gr.offsets, u as u64 + 1, 0);
            for e in g.offsets[u]..g.offsets[u + 1] {
                em.ld(&gr.neigh, e, 1);
                let v = g.neigh[e as usize] as usize;
                em.ld(&comp_r, u as u64, 0);
                em.ld(&comp_r, v as u64, 0);
                let (cu, cv) = (comp[u], comp[v]);
                if cu == cv {
                    continue;
                }
                let (high, low) = if cu > cv { (cu, cv) } else { (cv, cu) };
                em.ld(&comp_r, high as u64, 2);
                if comp[high as usize] == high {
                    change = true;
                    comp[high as usize] = low;
                    em.st(&comp_r, high as u64, 0);
                }
            }
        }
        for v in 0..n {
            loop {
                em.ld(&comp_r, v as u64, 1);
                let c = comp[v] as usize;
                em.ld(&comp_r, c as u64, 0);
                if comp[v] == comp[c] {
                    break;
                }
                comp[v] = comp[c];
                em.st(&comp_r, v as u64, 0);
            }
        }
    }
    std::hint::black_box(&comp);
}

/// Betweenness centrality (Brandes) from 2 sources (GAP `bc`).
pub fn bc<S: Sink + ?Sized>(sink: &mut S, p: &Params) {
    let (g, gr, r, mut em) = graph_kernel(
        sink,
        p,
        18,
        &[
            ("depth", 4),
            ("sigma", 8),
            ("delta", 8),
            ("order", 4),
            ("scores", 8),
        ],
    );
    let (depth_r, sigma_r, delta_r, order_r, scores_r) = (r[0], r[1], r[2], r[3], r[4]);
    let n = g.vertices();
    let mut scores = vec![0.0f64; n];
    let mut depth = vec![u32::MAX; n];
    let mut sigma = vec![0.0f64; n];
    let mut delta = vec![0.0f64; n];
    let mut order = vec![0u32; n];
    let mut rng = SmallRng::seed_from_u64(p.seed ^ 0xbc);
    for _ in 0..2 {
        let src = loop {
            let v = rng.gen_range(0..n);
            if g.degree(v) > 0 {
                break v;
            }
        };
        depth.fill(u32::MAX);
        sigma.fill(0.0);
        delta.fill(0.0);
        depth[src] = 0;
        sigma[src] = 1.0;
        order[0] = src as u32;
        let (mut head, mut tail) = (0usize, 1usize);
        while head < tail {
            em.ld(&order_r, head as u64, 1);
            let u = order[head] as usize;
            head += 1;
            em.ld(&gr.offsets, u as u64, 0);
            em.ld(&gr.offsets, u as u64 + 1, 0);
            for e in g.offsets[u]..g.offsets[u + 1] {
                em.ld(&gr.neigh, e, 1);
                let v = g.neigh[e as usize] as usize;
                em.ld(&depth_r, v as u64, 0);
                if depth[v] == u32::MAX {
                    depth[v] = depth[u] + 1;
                    em.st(&depth_r, v as u64, 1);
                    order[tail] = v as u32;
                    em.st(&order_r, tail as u64, 0);
                    tail += 1;
                }
                if depth[v] == depth[u] + 1 {
                    em.ld(&sigma_r, u as u64, 1);
                    em.ld(&sigma_r, v as u64, 0);
                    sigma[v] += sigma[u];
                    em.st(&sigma_r, v as u64, 1);
                }
            }
        }
        for i in (0..tail).rev() {
            em.ld(&order_r, i as u64, 1);
            let u = order[i] as usize;
            em.ld(&gr.offsets, u as u64, 0);
            em.ld(&gr.offsets, u as u64 + 1, 0);
            for e in g.offsets[u]..g.offsets[u + 1] {
                em.ld(&gr.neigh, e, 1);
                let v = g.neigh[e as usize] as usize;
                em.ld(&depth_r, v as u64, 0);
                if depth[v] == depth[u].wrapping_add(1) {
                    em.ld(&sigma_r, v as u64, 1);
                    em.ld(&delta_r, v as u64, 0);
                    delta[u] += sigma[u] / sigma[v] * (1.0 + delta[v]);
                }
            }
            em.st(&delta_r, u as u64, 2);
            if u != src {
                em.ld(&scores_r, u as u64, 0);
                scores[u] += delta[u];
                em.st(&scores_r, u as u64, 1);
            }
        }
    }
    std::hint::black_box(&scores);
}

/// Triangle counting, ordered intersection (GAP `tc`).
pub fn tc<S: Sink + ?Sized>(sink: &mut S, p: &Params) {
    let (g, gr, _, mut em) = graph_kernel(sink, p, 16, &[]);
    let n = g.vertices();
    let mut total = 0u64;
    for u in 0..n {
        em.ld(&gr.offsets, u as u64, 1);
        em.ld(&gr.offsets, u as u64 + 1, 0);
        let (us, ue) = (g.offsets[u], g.offsets[u + 1]);
        for e in us..ue {
            em.ld(&gr.neigh, e, 1);
            let v = g.neigh[e as usize] as usize;
            if v > u {
                break;
            }
            let mut it = us;
            em.ld(&gr.offsets, v as u64, 1);
            em.ld(&gr.offsets, v as u64 + 1, 0);
            for f in g.offsets[v]..g.offsets[v + 1] {
                em.ld(&gr.neigh, f, 1);
                let w = g.neigh[f as usize] as usize;
                if w > v {
                    break;
                }
                while (g.neigh[it as usize] as usize) < w {
                    it += 1;
                    em.ld(&gr.neigh, it, 1);
                }
                if w == g.neigh[it as usize] as usize {
                    total += 1;
                }
            }
        }
    }
    std::hint::black_box(total);
}

/// k-core decomposition by bucket peeling (Batagelj-Zaversnik).
pub fn kc<S: Sink + ?Sized>(sink: &mut S, p: &Params) {
    let (g, gr, r, mut em) = graph_kernel(
        sink,
        p,
        18,
        &[("deg", 4), ("pos", 4), ("vert", 4), ("bin", 4)],
    );
    let (deg_r, pos_r, vert_r, bin_r) = (r[0], r[1], r[2], r[3]);
    let n = g.vertices();
    let mut deg: Vec<u32> = (0..n).map(|v| g.degree(v) as u32).collect();
    em.contents(&deg_r, &deg);
    let md = deg.iter().copied().max().unwrap_or(0) as usize;
    let mut bin = vec![0u32; md + 1];
    for &d in &deg {
        bin[d as usize] += 1;
    }
    let mut start = 0u32;
    for b in bin.iter_mut() {
        let c = *b;
        *b = start;
        start += c;
    }
    let mut pos = vec![0u32; n];
    let mut vert = vec![0u32; n];
    for v in 0..n {
        let d = deg[v] as usize;
        pos[v] = bin[d];
        vert[pos[v] as usize] = v as u32;
        bin[d] += 1;
    }
    for d in (1..=md).rev() {
        bin[d] = bin[d - 1];
    }
    bin[0] = 0;
    em.contents(&pos_r, &pos);
    em.contents(&vert_r, &vert);
    for i in 0..n {
        em.ld(&vert_r, i as u64, 1);
        let v = vert[i] as usize;
        em.ld(&gr.offsets, v as u64, 0);
        em.ld(&gr.offsets, v as u64 + 1, 0);
        for e in g.offsets[v]..g.offsets[v + 1] {
            em.ld(&gr.neigh, e, 1);
            let u = g.neigh[e as usize] as usize;
            em.ld(&deg_r, u as u64, 0);
            em.ld(&deg_r, v as u64, 0);
            if deg[u] > deg[v] {
                let du = deg[u] as usize;
                em.ld(&pos_r, u as u64, 1);
                em.ld(&bin_r, du as u64 % n as u64, 0);
                let pu = pos[u] as usize;
                let pw = bin[du] as usize;
                em.ld(&vert_r, pw as u64, 0);
                let w = vert[pw] as usize;
                if u != w {
                    pos[u] = pw as u32;
                    vert[pu] = w as u32;
                    pos[w] = pu as u32;
                    vert[pw] = u as u32;
                    em.st(&pos_r, u as u64, 0);
                    em.st(&vert_r, pu as u64, 0);
                    em.st(&pos_r, w as u64, 0);
                    em.st(&vert_r, pw as u64, 0);
                }
                bin[du] += 1;
                deg[u] -= 1;
                em.st(&bin_r, du as u64 % n as u64, 1);
                em.st(&deg_r, u as u64, 0);
            }
        }
    }
    std::hint::black_box(&deg);
}

/// Degrees of freedom per mesh node in a structural stiffness matrix:
/// three displacements and three rotations.
const DOF: usize = 6;

/// A CSR matrix shaped like DaeMon's `sp` input, pkustk14 (SuiteSparse
/// Chen/pkustk14, the stiffness matrix of a building structure): 6×6
/// blocks, one per pair of connected nodes, stored whole (pkustk14 has
/// 97.7 entries a row: 16 blocks of 6). Nodes are numbered in a banded
/// (bandwidth-reducing) order, with one long-range coupling in 16. The
/// six rows of a node share one column list, and columns come in runs of
/// six: what makes real stiffness matrices' index arrays compressible.
/// Values are those of an axis-aligned frame (columns and beams along x,
/// y and z) built from four member types: a member couples 10 of the 36
/// pairs of degrees of freedom, so the other entries of its block are
/// stored zeros, and members of one type share their values. We cannot
/// ship pkustk14 itself; DaeMon puts its compressibility above dr's and
/// rs's 1.42× (§6.1, §6.5), which uniform random values (1.02×) were not.
fn stiffness_matrix(nodes: usize, rng: &mut SmallRng) -> (Vec<u64>, Vec<u32>, Vec<f64>) {
    const BLOCKS_PER_NODE: usize = 16;
    let band = (2048 / DOF).min(nodes);
    // (EA/L, 12EI_y/L³, 6EI_y/L², EI_y/L, 12EI_z/L³, 6EI_z/L², EI_z/L, GJ/L)
    let member_types: Vec<[f64; 8]> = (0..4)
        .map(|_| std::array::from_fn(|_| rng.gen_range(1.0e5..1.0e9)))
        .collect();
    // Near-end (i,i) and far-end (i,j) blocks of a member along local x.
    let local_blocks = |m: &[f64; 8]| {
        let [ea, by, cy, ey, bz, cz, ez, gj] = *m;
        let mut near = [[0.0f64; DOF]; DOF];
        let mut far = [[0.0f64; DOF]; DOF];
        for (b, sign) in [(&mut near, 1.0), (&mut far, -1.0)] {
            b[0][0] = sign * ea;
            b[1][1] = sign * bz;
            b[2][2] = sign * by;
            b[3][3] = sign * gj;
        }
        (near[1][5], near[5][1], near[2][4], near[4][2]) = (cz, cz, -cy, -cy);
        (far[1][5], far[5][1], far[2][4], far[4][2]) = (cz, -cz, -cy, cy);
        (near[4][4], near[5][5], far[4][4], far[5][5]) = (4.0 * ey, 4.0 * ez, 2.0 * ey, 2.0 * ez);
        (near, far)
    };
    // A member along global axis a: local x → a, y → a+1, z → a+2.
    let rotate = |b: &[[f64; DOF]; DOF], axis: usize| {
        let g = |d: usize| (d / 3) * 3 + (d % 3 + axis) % 3;
        let mut out = [[0.0f64; DOF]; DOF];
        for r in 0..DOF {
            for c in 0..DOF {
                out[g(r)][g(c)] = b[r][c];
            }
        }
        out
    };
    let mut neighbours: Vec<Vec<usize>> = vec![Vec::new(); nodes];
    for i in 0..nodes {
        for k in 1..BLOCKS_PER_NODE / 2 {
            // Each node starts half its members; the other half come from
            // the nodes that link to it, so the pattern is symmetric.
            let j = if k == BLOCKS_PER_NODE / 2 - 1 {
                rng.gen_range(0..nodes)
            } else {
                let lo = i.saturating_sub(band / 2);
                let hi = (lo + band).min(nodes);
                rng.gen_range(lo..hi)
            };
            if j != i {
                neighbours[i].push(j);
                neighbours[j].push(i);
            }
        }
    }
    let member = |i: usize, j: usize| {
        let (a, b) = (i.min(j) as u64, i.max(j) as u64);
        let h = (a.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ b).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        (
            (h >> 32) as usize % member_types.len(),
            (h >> 40) as usize % 3,
        )
    };
    let mut rowptr = vec![0u64; nodes * DOF + 1];
    let mut cols: Vec<u32> = Vec::new();
    let mut vals: Vec<f64> = Vec::new();
    for i in 0..nodes {
        let list = &mut neighbours[i];
        list.push(i);
        list.sort_unstable();
        list.dedup();
        let mut diag = [[0.0f64; DOF]; DOF];
        let blocks: Vec<[[f64; DOF]; DOF]> = list
            .iter()
            .map(|&j| {
                if j == i {
                    return [[0.0; DOF]; DOF];
                }
                let (t, axis) = member(i, j);
                let (near, far) = local_blocks(&member_types[t]);
                let near = rotate(&near, axis);
                for r in 0..DOF {
                    for c in 0..DOF {
                        diag[r][c] += near[r][c];
                    }
                }
                rotate(&far, axis)
            })
            .collect();
        for r in 0..DOF {
            for (&j, block) in list.iter().zip(&blocks) {
                let block = if j == i { &diag } else { block };
                for c in 0..DOF {
                    cols.push((j * DOF + c) as u32);
                    vals.push(block[r][c]);
                }
            }
            rowptr[i * DOF + r + 1] = cols.len() as u64;
        }
    }
    (rowptr, cols, vals)
}

/// Sparse matrix-vector multiply (CSR) over a structural stiffness matrix
/// ([`stiffness_matrix`]), two iterations.
pub fn spmv<S: Sink + ?Sized>(sink: &mut S, p: &Params) {
    let nodes = (p.count(43_690) as usize).div_ceil(DOF);
    let rows = nodes * DOF;
    let mut rng = SmallRng::seed_from_u64(p.seed ^ 0x5b);
    let (rowptr, cols, vals) = stiffness_matrix(nodes, &mut rng);
    let mut space = Space::default();
    let rowptr_r = space.alloc("rowptr", 8, rowptr.len() as u64);
    let cols_r = space.alloc("cols", 4, cols.len() as u64);
    let vals_r = space.alloc("vals", 8, vals.len() as u64);
    let x_r = space.alloc("x", 8, rows as u64);
    let y_r = space.alloc("y", 8, rows as u64);
    begin(sink, &space);
    let mut em = Emitter::new(sink);
    let mut x: Vec<f64> = (0..rows).map(|i| 1.0 + (i % 7) as f64).collect();
    let mut y = vec![0.0f64; rows];
    em.contents(&rowptr_r, &rowptr);
    em.contents(&cols_r, &cols);
    em.contents(&vals_r, &vals);
    em.contents(&x_r, &x);
    for _ in 0..2 {
        for i in 0..rows {
            em.ld(&rowptr_r, i as u64, 1);
            em.ld(&rowptr_r, i as u64 + 1, 0);
            let mut sum = 0.0;
            for j in rowptr[i]..rowptr[i + 1] {
                em.ld(&cols_r, j, 1);
                em.ld(&vals_r, j, 0);
                let c = cols[j as usize] as usize;
                em.ld(&x_r, c as u64, 0);
                sum += vals[j as usize] * x[c];
            }
            y[i] = sum;
            em.st(&y_r, i as u64, 2);
        }
        std::mem::swap(&mut x, &mut y);
    }
    std::hint::black_box(&x);
}

/// Needleman-Wunsch global alignment over two random DNA sequences (Rodinia `nw`).
pub fn nw<S: Sink + ?Sized>(sink: &mut S, p: &Params) {
    let len = (4096.0 * p.factor.sqrt()).round().max(16.0) as usize;
    let dim = len + 1;
    let mut rng = SmallRng::seed_from_u64(p.seed ^ 0x2a);
    let a: Vec<u8> = (0..len).map(|_| b"ACGT"[rng.gen_range(0..4)]).collect();
    let b: Vec<u8> = (0..len).map(|_| b"ACGT"[rng.gen_range(0..4)]).collect();
    let mut space = Space::default();
    let m_r = space.alloc("score", 4, (dim * dim) as u64);
    let a_r = space.alloc("seq_a", 1, len as u64);
    let b_r = space.alloc("seq_b", 1, len as u64);
    begin(sink, &space);
    let mut em = Emitter::new(sink);
    em.contents(&a_r, &a);
    em.contents(&b_r, &b);
    let penalty = 10i32;
    let mut m = vec![0i32; dim * dim];
    for i in 0..dim {
        m[i * dim] = -(i as i32) * penalty;
        m[i] = -(i as i32) * penalty;
    }
    em.contents(&m_r, &m);
    for i in 1..dim {
        em.ld(&a_r, i as u64 - 1, 1);
        let mut left = m[i * dim];
        for j in 1..dim {
            em.ld(&m_r, ((i - 1) * dim + j - 1) as u64, 1);
            em.ld(&m_r, ((i - 1) * dim + j) as u64, 0);
            em.ld(&b_r, j as u64 - 1, 0);
            let s = if a[i - 1] == b[j - 1] { 5 } else { -3 };
            let v = (m[(i - 1) * dim + j - 1] + s)
                .max(left - penalty)
                .max(m[(i - 1) * dim + j] - penalty);
            m[i * dim + j] = v;
            left = v;
            em.st(&m_r, (i * dim + j) as u64, 6);
        }
    }
    std::hint::black_box(&m);
}

/// STREAM copy, scale, add, triad over three arrays, 2 repetitions.
pub fn stream<S: Sink + ?Sized>(sink: &mut S, p: &Params) {
    let n = p.count(2 << 20) as usize;
    let mut space = Space::default();
    let a_r = space.alloc("a", 8, n as u64);
    let b_r = space.alloc("b", 8, n as u64);
    let c_r = space.alloc("c", 8, n as u64);
    begin(sink, &space);
    let mut em = Emitter::new(sink);
    let mut a = vec![1.0f64; n];
    let mut b = vec![2.0f64; n];
    let mut c = vec![0.0f64; n];
    em.contents(&a_r, &a);
    em.contents(&b_r, &b);
    em.contents(&c_r, &c);
    let s = 3.0;
    for _ in 0..2 {
        for j in 0..n {
            em.ld(&a_r, j as u64, 1);
            c[j] = a[j];
            em.st(&c_r, j as u64, 0);
        }
        for j in 0..n {
            em.ld(&c_r, j as u64, 1);
            b[j] = s * c[j];
            em.st(&b_r, j as u64, 1);
        }
        for j in 0..n {
            em.ld(&a_r, j as u64, 1);
            em.ld(&b_r, j as u64, 0);
            c[j] = a[j] + b[j];
            em.st(&c_r, j as u64, 1);
        }
        for j in 0..n {
            em.ld(&b_r, j as u64, 1);
            em.ld(&c_r, j as u64, 0);
            a[j] = b[j] + s * c[j];
            em.st(&a_r, j as u64, 2);
        }
    }
    std::hint::black_box(&a);
}

/// An open-addressing hash table of `keys` records of `value_bytes`, the
/// shape of an in-memory key-value store (Redis, Memcached).
struct KvStore {
    buckets: Vec<u64>,
    mask: u64,
    value_bytes: u64,
    buckets_r: Region,
    values_r: Region,
}

/// An open-addressing table of `keys` keys (linear probing, twice as many
/// buckets as keys, rounded to a power of two); empty buckets hold u64::MAX.
fn hash_table(keys: u64) -> Vec<u64> {
    let nb = (keys * 2).next_power_of_two();
    let mut buckets = vec![u64::MAX; nb as usize];
    for k in 0..keys {
        let mut b = crate::zipf::fnv64(k) & (nb - 1);
        while buckets[b as usize] != u64::MAX {
            b = (b + 1) & (nb - 1);
        }
        buckets[b as usize] = k;
    }
    buckets
}

impl KvStore {
    fn build(space: &mut Space, keys: u64, value_bytes: u64) -> Self {
        let buckets = hash_table(keys);
        let nb = buckets.len() as u64;
        let buckets_r = space.alloc("buckets", 8, nb);
        let values_r = space.alloc("values", 8, keys * value_bytes / 8);
        Self {
            buckets,
            mask: nb - 1,
            value_bytes,
            buckets_r,
            values_r,
        }
    }

    /// Looks `key` up, then reads (or writes `write_bytes` of) its value.
    fn op<S: Sink + ?Sized>(&self, em: &mut Emitter<'_, S>, key: u64, write_bytes: Option<u64>) {
        let mut b = crate::zipf::fnv64(key) & self.mask;
        loop {
            em.ld(&self.buckets_r, b, 12);
            let k = self.buckets[b as usize];
            if k == key || k == u64::MAX {
                break;
            }
            b = (b + 1) & self.mask;
        }
        let base = key * self.value_bytes;
        let bytes = write_bytes
            .unwrap_or(self.value_bytes)
            .min(self.value_bytes);
        let mut off = 0;
        while off < bytes {
            let size = (bytes - off).min(64) as u16;
            if write_bytes.is_some() {
                em.st_bytes(&self.values_r, base + off, size, 2);
            } else {
                em.ld_bytes(&self.values_r, base + off, size, 2);
            }
            off += 64;
        }
    }

    fn contents<S: Sink + ?Sized>(&self, em: &mut Emitter<'_, S>, rng: &mut SmallRng) {
        if !em.sink.wants_contents() {
            return;
        }
        em.contents(&self.buckets_r, &self.buckets);
        // Values: printable text with some repetition, like serialized records.
        let words: Vec<u64> = (0..self.values_r.len)
            .map(|i| {
                if i % 4 == 0 {
                    i
                } else {
                    u64::from_le_bytes(std::array::from_fn(|_| b'a' + rng.gen_range(0..26u8)))
                }
            })
            .collect();
        em.contents(&self.values_r, &words);
    }
}

#[allow(clippy::too_many_arguments)]
fn kv<S: Sink + ?Sized>(
    sink: &mut S,
    p: &Params,
    keys: u64,
    value_bytes: u64,
    ops: u64,
    read_ratio: f64,
    update_bytes: u64,
    zipf: bool,
) {
    let keys = p.count(keys);
    let mut space = Space::default();
    let store = KvStore::build(&mut space, keys, value_bytes);
    begin(sink, &space);
    let mut em = Emitter::new(sink);
    let mut rng = SmallRng::seed_from_u64(p.seed ^ 0x4b);
    store.contents(&mut em, &mut rng);
    let z = zipf.then(|| Zipf::new(keys, 0.99, true));
    for _ in 0..p.count(ops) {
        let key = match &z {
            Some(z) => z.sample(&mut rng),
            None => rng.gen_range(0..keys),
        };
        let write = (!rng.gen_bool(read_ratio)).then_some(update_bytes);
        store.op(&mut em, key, write);
    }
}

/// Uniformly random gets and sets (1:10) of 128 B values (Redis-Rand, memtier defaults).
pub fn kv_uniform<S: Sink + ?Sized>(sink: &mut S, p: &Params) {
    kv(sink, p, 1 << 19, 128, 4 << 20, 10.0 / 11.0, 128, false)
}

/// YCSB workload A: 50% reads, 50% updates of one 100 B field, Zipf 0.99, 1 KB records.
pub fn ycsb_a<S: Sink + ?Sized>(sink: &mut S, p: &Params) {
    kv(sink, p, 1 << 16, 1024, 1 << 20, 0.5, 100, true)
}

/// YCSB workload B: 95% reads, 5% updates, Zipf 0.99, 1 KB records.
pub fn ycsb_b<S: Sink + ?Sized>(sink: &mut S, p: &Params) {
    kv(sink, p, 1 << 16, 1024, 1 << 20, 0.95, 100, true)
}

/// Facebook ETC-like Memcached mix (Atikoglu et al., SIGMETRICS'12, as
/// UniMem §4.1 runs it through Mutilate): 30:1 get:set, skewed key
/// popularity (Zipf 0.9, scrambled), values of mixed sizes, mostly small
/// (slab classes 64 B … 4 KiB, mean ~370 B). The hash bucket holds the
/// item's location, so a lookup reads buckets and then the value.
pub fn etc<S: Sink + ?Sized>(sink: &mut S, p: &Params) {
    // (size, cumulative percent) of the value-size classes.
    const CLASSES: [(u64, u32); 6] = [
        (64, 30),
        (128, 55),
        (256, 75),
        (512, 90),
        (1024, 97),
        (4096, 100),
    ];
    let keys = p.count(1 << 17);
    let mut rng = SmallRng::seed_from_u64(p.seed ^ 0xe7c);
    let mut offsets = Vec::with_capacity(keys as usize + 1);
    let mut total = 0u64;
    for _ in 0..keys {
        offsets.push(total);
        let r = rng.gen_range(0..100u32);
        let size = CLASSES.iter().find(|c| r < c.1).map_or(64, |c| c.0);
        total += size;
    }
    offsets.push(total);
    let mut space = Space::default();
    let buckets = hash_table(keys);
    let nb = buckets.len() as u64;
    let buckets_r = space.alloc("buckets", 8, nb);
    let values_r = space.alloc("values", 8, total / 8);
    begin(sink, &space);
    let mut em = Emitter::new(sink);
    if em.sink.wants_contents() {
        em.contents(&buckets_r, &buckets);
    }
    let z = Zipf::new(keys, 0.9, true);
    for _ in 0..p.count(2 << 20) {
        let key = z.sample(&mut rng);
        let write = rng.gen_range(0..31u32) == 0;
        let mut b = crate::zipf::fnv64(key) & (nb - 1);
        loop {
            em.ld(&buckets_r, b, 12);
            let k = buckets[b as usize];
            if k == key || k == u64::MAX {
                break;
            }
            b = (b + 1) & (nb - 1);
        }
        let (start, end) = (offsets[key as usize], offsets[key as usize + 1]);
        let mut off = start;
        while off < end {
            let size = (end - off).min(64) as u16;
            if write {
                em.st_bytes(&values_r, off, size, 2);
            } else {
                em.ld_bytes(&values_r, off, size, 2);
            }
            off += 64;
        }
    }
}

/// Linear regression (Metis `linear_regression`): one streaming pass over
/// (x, y) points accumulating the five sums, then the closed form.
pub fn linreg<S: Sink + ?Sized>(sink: &mut S, p: &Params) {
    let n = p.count(6 << 20);
    let mut space = Space::default();
    let pts_r = space.alloc("points", 8, 2 * n);
    begin(sink, &space);
    let mut em = Emitter::new(sink);
    let mut rng = SmallRng::seed_from_u64(p.seed ^ 0x11);
    let pts: Vec<i64> = (0..n)
        .flat_map(|i| {
            let x = (i % 1000) as i64;
            [x, 3 * x + rng.gen_range(-50..50)]
        })
        .collect();
    em.contents(&pts_r, &pts);
    let (mut sx, mut sy, mut sxx, mut syy, mut sxy) = (0i64, 0i64, 0i64, 0i64, 0i64);
    for i in 0..n as usize {
        em.ld(&pts_r, 2 * i as u64, 1);
        em.ld(&pts_r, 2 * i as u64 + 1, 0);
        let (x, y) = (pts[2 * i], pts[2 * i + 1]);
        sx = sx.wrapping_add(x);
        sy = sy.wrapping_add(y);
        sxx = sxx.wrapping_add(x * x);
        syy = syy.wrapping_add(y * y);
        sxy = sxy.wrapping_add(x * y);
    }
    std::hint::black_box((sx, sy, sxx, syy, sxy));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Access;

    /// The stiffness matrix's structure: 6×6 blocks stored whole, the six
    /// rows of a node sharing one sorted column list that holds the node
    /// itself, a symmetric node pattern, and 10 of 36 entries nonzero in
    /// each member's block.
    #[test]
    fn spmv_matrix_is_made_of_whole_node_blocks() {
        let nodes = 300;
        let (rowptr, cols, vals) = stiffness_matrix(nodes, &mut SmallRng::seed_from_u64(9));
        assert_eq!(rowptr.len(), nodes * DOF + 1);
        assert_eq!(*rowptr.last().unwrap() as usize, cols.len());
        assert_eq!(cols.len(), vals.len());
        let row = |r: usize| rowptr[r] as usize..rowptr[r + 1] as usize;
        let node_list = |i: usize| -> Vec<usize> {
            cols[row(i * DOF)]
                .chunks(DOF)
                .map(|c| c[0] as usize / DOF)
                .collect()
        };
        let mut blocks = 0;
        for i in 0..nodes {
            let first = &cols[row(i * DOF)];
            assert_eq!(first.len() % DOF, 0);
            for r in 1..DOF {
                assert_eq!(&cols[row(i * DOF + r)], first, "node {i} row {r}");
            }
            for run in first.chunks(DOF) {
                let expect: Vec<u32> = (run[0]..run[0] + DOF as u32).collect();
                assert_eq!(run, expect.as_slice());
                assert_eq!(run[0] as usize % DOF, 0);
            }
            let list = node_list(i);
            assert!(list.windows(2).all(|w| w[0] < w[1]), "sorted, no repeats");
            assert!(list.contains(&i));
            for (b, &j) in list.iter().enumerate() {
                assert!(node_list(j).contains(&i), "{i}–{j} not symmetric");
                if j != i {
                    let nonzero = (0..DOF)
                        .flat_map(|r| {
                            let start = rowptr[i * DOF + r] as usize + b * DOF;
                            vals[start..start + DOF].to_vec()
                        })
                        .filter(|&v| v != 0.0)
                        .count();
                    assert_eq!(nonzero, 10, "block {i}–{j}");
                }
            }
            blocks += list.len();
        }
        // About pkustk14's 16 blocks a row.
        let per_node = blocks as f64 / nodes as f64;
        assert!((14.0..=16.5).contains(&per_node), "{per_node}");
    }

    /// GAP's pr: 8 B offsets, 4 B neighbours, 4 B (`float`) scores and
    /// contributions, and per iteration a contrib pass (4 accesses per
    /// vertex) then a pull pass (2 offsets, 2 per in-edge, the old score
    /// read and the new one stored).
    #[test]
    fn pr_has_gaps_widths_and_accesses() {
        let p = Params {
            factor: 1.0 / 1024.0,
            seed: 3,
        };
        let g = rmat(p.graph_scale(19), 8, p.seed);
        let (n, e) = (g.vertices() as u64, g.edges() as u64);
        let mut v: Vec<Access> = Vec::new();
        pr(&mut v, &p);
        assert_eq!(v.len() as u64, 2 * (4 * n + 4 * n + 2 * e));
        let mut space = Space::default();
        let offsets = space.alloc("offsets", 8, n + 1);
        let neigh = space.alloc("neighbors", 4, e);
        let scores = space.alloc("scores", 4, n);
        let contrib = space.alloc("contrib", 4, n);
        let width = |r: &Region| {
            let mut sizes: Vec<u16> = v
                .iter()
                .filter(|a| (r.base..r.base + r.bytes()).contains(&a.addr))
                .map(|a| a.size)
                .collect();
            sizes.dedup();
            sizes
        };
        assert_eq!(width(&offsets), [8]);
        assert_eq!(width(&neigh), [4]);
        assert_eq!(width(&scores), [4]);
        assert_eq!(width(&contrib), [4]);
        // Vertex 0's pull in the first iteration: offsets, its in-edges
        // (neighbour then contrib), the old score, the new score.
        let pull = &v[4 * n as usize..];
        assert!(g.degree(0) > 0);
        let mut want = vec![
            Access::load(offsets.addr(0), 8, 1),
            Access::load(offsets.addr(1), 8, 0),
        ];
        for i in 0..g.degree(0) as u64 {
            let u = u64::from(g.neigh[i as usize]);
            want.push(Access::load(neigh.addr(i), 4, 1));
            want.push(Access::load(contrib.addr(u), 4, 0));
        }
        want.push(Access::load(scores.addr(0), 4, 1));
        want.push(Access::store(scores.addr(0), 4, 3));
        assert_eq!(&pull[..want.len()], &want[..]);
    }
}
