//! The workloads: real algorithms on generated data that report each access
//! to their data arrays. Loop counters, accumulators and other values a
//! compiler keeps in registers are not reported; their instructions are the
//! `gap` before the next access.

// Indices are what gets traced, so loops index explicitly.
#![allow(clippy::needless_range_loop)]

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::graph::{Csr, rmat};
use crate::ligra::{
    self, Array, EdgeFn, Frontier, Graph as LigraGraph, NONE, Scratch, Slot, edge_map,
    vertex_filter, vertex_map,
};
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

/// PageRank as Ligra's `apps/PageRank.C` runs it: `double` ranks
/// (`p_curr` at 1/n, `p_next` at 0), a dense all-vertices frontier of
/// bools, one edgeMap pushing `p_curr[s] / degree(s)` into `p_next[d]`
/// (dense: each vertex pulls from its in-neighbours) and one vertexMap
/// applying the damping. The app breaks out of its loop after that first
/// iteration, so one iteration is what it runs.
pub fn pr<S: Sink + ?Sized>(sink: &mut S, p: &Params) {
    let g = ligra::graph(p.graph_scale(19), p.seed);
    let n = g.vertices();
    let mut space = Space::default();
    let lg = LigraGraph::alloc(&mut space, g);
    let mut p_curr = Array::alloc(&mut space, "p_curr", vec![0.0f64; n]);
    let mut p_next = Array::alloc(&mut space, "p_next", vec![0.0f64; n]);
    let front = Slot::alloc(&mut space, n, n, true);
    let out = Slot::alloc(&mut space, lg.threshold, n, true);
    let mut scratch = Scratch::alloc(&mut space, n, lg.threshold);
    begin(sink, &space);
    let mut em = Emitter::new(sink);
    lg.report(&mut em);
    p_curr.fill(&mut em, 1.0 / n.max(1) as f64);
    p_curr.sync(&mut em);
    p_next.fill(&mut em, 0.0);
    p_next.sync(&mut em);
    let mut frontier = Frontier::all(&mut em, n, front);
    // Each source's share, `p_curr[s] / degree(s)`, computed once per
    // vertex: the same values as dividing on every edge, for one random
    // host read per edge instead of three (the edges still read p_curr and
    // the vertex record, as traced).
    let share: Vec<f64> = (0..n)
        .map(|s| p_curr.vals[s] / lg.g.degree(s).max(1) as f64)
        .collect();
    struct PrF<'a> {
        lg: &'a LigraGraph,
        p_curr: &'a Array<f64>,
        share: &'a [f64],
        p_next: &'a mut Array<f64>,
    }
    impl EdgeFn for PrF<'_> {
        fn update<S: Sink + ?Sized>(
            &mut self,
            em: &mut Emitter<'_, S>,
            s: usize,
            d: usize,
        ) -> bool {
            em.ld(&self.p_curr.r, s as u64, 0);
            em.ld(&self.lg.v, s as u64, 0);
            em.ld(&self.p_next.r, d as u64, 0);
            self.p_next.vals[d] += self.share[s];
            em.st(&self.p_next.r, d as u64, 3);
            true
        }
    }
    let mut f = PrF {
        lg: &lg,
        p_curr: &p_curr,
        share: &share,
        p_next: &mut p_next,
    };
    let output = edge_map(&mut em, &lg, &mut frontier, &mut f, &mut scratch, out);
    p_next.sync(&mut em);
    let (damping, added) = (0.85, 0.15 / n.max(1) as f64);
    vertex_map(&mut em, &frontier, |em, i| {
        em.ld(&p_next.r, i as u64, 0);
        p_next.vals[i] = damping * p_next.vals[i] + added;
        em.st(&p_next.r, i as u64, 2);
    });
    p_next.sync(&mut em);
    std::hint::black_box((&p_next.vals, output.len()));
}

/// Ligra's `apps/BFS.C` from vertex 0 (its `-r` default): `Parents` of
/// `uintE` filled with `UINT_E_MAX`, a compare-and-swap on each edge into
/// an unvisited vertex, frontiers switching between sparse ids and dense
/// bools as edgeMap decides.
pub fn bfs<S: Sink + ?Sized>(sink: &mut S, p: &Params) {
    let g = ligra::graph(p.graph_scale(19), p.seed);
    let n = g.vertices();
    let src = 0usize;
    let mut space = Space::default();
    let lg = LigraGraph::alloc(&mut space, g);
    let mut parents = Array::alloc(&mut space, "Parents", vec![NONE; n]);
    let (mut slots, max) = ligra::level_slots(&mut space, &lg.g, src);
    let mut scratch = Scratch::alloc(&mut space, max, lg.threshold);
    begin(sink, &space);
    let mut em = Emitter::new(sink);
    lg.report(&mut em);
    parents.fill(&mut em, NONE);
    parents.vals[src] = src as u32;
    em.st(&parents.r, src as u64, 1);
    parents.sync(&mut em);
    slots.reverse();
    let Some(first) = slots.pop() else { return };
    let mut frontier = Frontier::single(&mut em, n, src as u32, first);
    struct BfsF<'a> {
        parents: &'a mut Array<u32>,
    }
    impl EdgeFn for BfsF<'_> {
        fn cond<S: Sink + ?Sized>(&mut self, em: &mut Emitter<'_, S>, d: usize) -> bool {
            em.ld(&self.parents.r, d as u64, 0);
            self.parents.vals[d] == NONE
        }
        fn update<S: Sink + ?Sized>(
            &mut self,
            em: &mut Emitter<'_, S>,
            s: usize,
            d: usize,
        ) -> bool {
            em.ld(&self.parents.r, d as u64, 0);
            if self.parents.vals[d] == NONE {
                self.parents.vals[d] = s as u32;
                em.st(&self.parents.r, d as u64, 1);
                true
            } else {
                false
            }
        }
    }
    while !frontier.is_empty() {
        let Some(slot) = slots.pop() else { break };
        let mut f = BfsF {
            parents: &mut parents,
        };
        let out = edge_map(&mut em, &lg, &mut frontier, &mut f, &mut scratch, slot);
        parents.sync(&mut em);
        frontier = out;
    }
    std::hint::black_box(&parents.vals);
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

/// Ligra's `apps/BC.C` from vertex 0: `double` path counts, `bool`
/// visited flags, every level's frontier kept for the backward phase,
/// which accumulates `double` dependencies over the same levels in
/// reverse (the graph is symmetric, so its transpose is itself).
pub fn bc<S: Sink + ?Sized>(sink: &mut S, p: &Params) {
    let g = ligra::graph(p.graph_scale(18), p.seed);
    let n = g.vertices();
    let src = 0usize;
    let mut space = Space::default();
    let lg = LigraGraph::alloc(&mut space, g);
    let mut paths = Array::alloc(&mut space, "NumPaths", vec![0.0f64; n]);
    let mut visited = Array::alloc(&mut space, "Visited", vec![false; n]);
    let (mut slots, max) = ligra::level_slots(&mut space, &lg.g, src);
    let mut scratch = Scratch::alloc(&mut space, max, lg.threshold);
    let mut deps = Array::alloc(&mut space, "Dependencies", vec![0.0f64; n]);
    let mut spare = Slot::alloc(&mut space, lg.threshold, n, true);
    begin(sink, &space);
    let mut em = Emitter::new(sink);
    lg.report(&mut em);
    paths.fill(&mut em, 0.0);
    paths.vals[src] = 1.0;
    em.st(&paths.r, src as u64, 1);
    paths.sync(&mut em);
    visited.fill(&mut em, false);
    visited.vals[src] = true;
    em.st(&visited.r, src as u64, 1);
    visited.sync(&mut em);
    slots.reverse();
    let Some(first) = slots.pop() else { return };
    let mut frontier = Frontier::single(&mut em, n, src as u32, first);
    /// BC_F and BC_Back_F: add the source's value to each unvisited
    /// target's; a target joins the next frontier on its first addition.
    struct AddToUnvisited<'a> {
        vals: &'a mut Array<f64>,
        visited: &'a Array<bool>,
    }
    impl EdgeFn for AddToUnvisited<'_> {
        fn cond<S: Sink + ?Sized>(&mut self, em: &mut Emitter<'_, S>, d: usize) -> bool {
            em.ld(&self.visited.r, d as u64, 0);
            !self.visited.vals[d]
        }
        fn update<S: Sink + ?Sized>(
            &mut self,
            em: &mut Emitter<'_, S>,
            s: usize,
            d: usize,
        ) -> bool {
            em.ld(&self.vals.r, d as u64, 0);
            em.ld(&self.vals.r, s as u64, 0);
            let old = self.vals.vals[d];
            self.vals.vals[d] += self.vals.vals[s];
            em.st(&self.vals.r, d as u64, 1);
            old == 0.0
        }
    }
    let mut levels: Vec<Frontier> = Vec::new();
    while !frontier.is_empty() {
        let Some(slot) = slots.pop() else { break };
        let mut f = AddToUnvisited {
            vals: &mut paths,
            visited: &visited,
        };
        let out = edge_map(&mut em, &lg, &mut frontier, &mut f, &mut scratch, slot);
        vertex_map(&mut em, &out, |em, i| {
            visited.vals[i] = true;
            em.st(&visited.r, i as u64, 1);
        });
        paths.sync(&mut em);
        visited.sync(&mut em);
        levels.push(std::mem::replace(&mut frontier, out));
    }
    drop(frontier);
    deps.fill(&mut em, 0.0);
    deps.sync(&mut em);
    // NumPaths inverted in place.
    em.scan(&paths.r, 0, n as u64, false, 2);
    em.scan(&paths.r, 0, n as u64, true, 0);
    for x in paths.vals.iter_mut() {
        *x = 1.0 / *x;
    }
    paths.sync(&mut em);
    visited.fill(&mut em, false);
    visited.sync(&mut em);
    let back_vertex = |em: &mut Emitter<'_, S>,
                       i: usize,
                       visited: &mut Array<bool>,
                       deps: &mut Array<f64>,
                       inv: &Array<f64>| {
        visited.vals[i] = true;
        em.st(&visited.r, i as u64, 1);
        em.ld(&deps.r, i as u64, 0);
        em.ld(&inv.r, i as u64, 0);
        deps.vals[i] += inv.vals[i];
        em.st(&deps.r, i as u64, 1);
    };
    if let Some(mut frontier) = levels.pop() {
        vertex_map(&mut em, &frontier, |em, i| {
            back_vertex(em, i, &mut visited, &mut deps, &paths)
        });
        while let Some(prev) = levels.pop() {
            let mut f = AddToUnvisited {
                vals: &mut deps,
                visited: &visited,
            };
            let out = edge_map(&mut em, &lg, &mut frontier, &mut f, &mut scratch, spare);
            spare = out.into_slot();
            frontier = prev;
            vertex_map(&mut em, &frontier, |em, i| {
                back_vertex(em, i, &mut visited, &mut deps, &paths)
            });
            deps.sync(&mut em);
            visited.sync(&mut em);
        }
    }
    // Dependencies[i] = (Dependencies[i] - inv[i]) / inv[i].
    em.scan(&deps.r, 0, n as u64, false, 1);
    em.scan(&paths.r, 0, n as u64, false, 2);
    em.scan(&deps.r, 0, n as u64, true, 0);
    for (d, &inv) in deps.vals.iter_mut().zip(&paths.vals) {
        *d = (*d - inv) / inv;
    }
    std::hint::black_box(&deps.vals);
}

/// Ligra's `apps/Triangle.C`: `long` counts, an all-vertices frontier, a
/// vertexMap that zeroes each count and sorts (here: reads, the lists are
/// sorted) each neighbour list, and one edgeMap whose update merges the
/// two endpoints' lists below both ids ("directed" triangles) and adds
/// the common count to `counts[s]`.
pub fn tc<S: Sink + ?Sized>(sink: &mut S, p: &Params) {
    let g = ligra::graph(p.graph_scale(16), p.seed);
    let n = g.vertices();
    let mut space = Space::default();
    let lg = LigraGraph::alloc(&mut space, g);
    let mut counts = Array::alloc(&mut space, "counts", vec![0i64; n]);
    let front = Slot::alloc(&mut space, n, n, true);
    let out = Slot::alloc(&mut space, lg.threshold, n, true);
    let mut scratch = Scratch::alloc(&mut space, n, lg.threshold);
    begin(sink, &space);
    let mut em = Emitter::new(sink);
    lg.report(&mut em);
    counts.sync(&mut em);
    let mut frontier = Frontier::all(&mut em, n, front);
    vertex_map(&mut em, &frontier, |em, i| {
        em.st(&counts.r, i as u64, 1);
        em.ld(&lg.v, i as u64, 1);
        em.scan(&lg.edges, lg.g.offsets[i], lg.g.offsets[i + 1], false, 3);
    });
    struct Count<'a> {
        lg: &'a LigraGraph,
        counts: &'a mut Array<i64>,
    }
    impl EdgeFn for Count<'_> {
        fn update<S: Sink + ?Sized>(
            &mut self,
            em: &mut Emitter<'_, S>,
            s: usize,
            d: usize,
        ) -> bool {
            if s <= d {
                return true;
            }
            let g = &self.lg.g;
            em.ld(&self.lg.v, s as u64, 1);
            em.ld(&self.lg.v, d as u64, 0);
            let (a, b) = (g.neighbors(s), g.neighbors(d));
            let (oa, ob) = (g.offsets[s], g.offsets[d]);
            let (mut i, mut j, mut ans) = (0usize, 0usize, 0i64);
            if !a.is_empty() && !b.is_empty() {
                em.ld(&self.lg.edges, oa, 0);
                em.ld(&self.lg.edges, ob, 0);
            }
            while i < a.len() && j < b.len() && (a[i] as usize) < s && (b[j] as usize) < d {
                let (step_a, step_b) = match a[i].cmp(&b[j]) {
                    std::cmp::Ordering::Equal => (true, true),
                    std::cmp::Ordering::Less => (true, false),
                    std::cmp::Ordering::Greater => (false, true),
                };
                ans += (step_a && step_b) as i64;
                if step_a {
                    i += 1;
                    if i < a.len() {
                        em.ld(&self.lg.edges, oa + i as u64, 2);
                    }
                }
                if step_b {
                    j += 1;
                    if j < b.len() {
                        em.ld(&self.lg.edges, ob + j as u64, 1);
                    }
                }
            }
            em.ld(&self.counts.r, s as u64, 1);
            self.counts.vals[s] += ans;
            em.st(&self.counts.r, s as u64, 0);
            true
        }
    }
    let mut f = Count {
        lg: &lg,
        counts: &mut counts,
    };
    let output = edge_map(&mut em, &lg, &mut frontier, &mut f, &mut scratch, out);
    counts.sync(&mut em);
    em.scan(&counts.r, 0, n as u64, false, 1);
    let total: i64 = counts.vals.iter().sum();
    std::hint::black_box((total, output.len()));
}

/// Ligra's `apps/KCore.C`: for k = 1, 2, … the active vertices are
/// filtered (vertexFilter: fresh dense bools) into those whose remaining
/// degree (`intE`) is below k, which get core number k−1 (`uintE`) and are
/// removed, their edgeMap decrementing their neighbours' degrees, until
/// none is removed; it stops when no vertex is left.
pub fn kc<S: Sink + ?Sized>(sink: &mut S, p: &Params) {
    let g = ligra::graph(p.graph_scale(18), p.seed);
    let n = g.vertices();
    let mut space = Space::default();
    let lg = LigraGraph::alloc(&mut space, g);
    let front = Slot::alloc(&mut space, 0, n, true);
    let mut core = Array::alloc(&mut space, "coreNumbers", vec![0u32; n]);
    let mut degrees = Array::alloc(&mut space, "Degrees", vec![0i32; n]);
    let mut spare = Slot::alloc(&mut space, 0, n, true);
    let mut remove_slot = Slot::alloc(&mut space, n, n, true);
    let mut out_slot = Slot::alloc(&mut space, lg.threshold, n, true);
    let mut scratch = Scratch::alloc(&mut space, n, lg.threshold);
    begin(sink, &space);
    let mut em = Emitter::new(sink);
    lg.report(&mut em);
    let mut frontier = Frontier::all(&mut em, n, front);
    for i in 0..n {
        em.ld(&lg.v, i as u64, 1);
        core.vals[i] = 0;
        degrees.vals[i] = lg.g.degree(i) as i32;
        em.st(&core.r, i as u64, 0);
        em.st(&degrees.r, i as u64, 0);
    }
    core.sync(&mut em);
    degrees.sync(&mut em);
    struct UpdateDeg<'a> {
        degrees: &'a mut Array<i32>,
    }
    impl EdgeFn for UpdateDeg<'_> {
        fn update<S: Sink + ?Sized>(
            &mut self,
            em: &mut Emitter<'_, S>,
            _s: usize,
            d: usize,
        ) -> bool {
            em.ld(&self.degrees.r, d as u64, 0);
            self.degrees.vals[d] -= 1;
            em.st(&self.degrees.r, d as u64, 1);
            true
        }
    }
    for k in 1..=n as i64 {
        loop {
            let mut to_remove = vertex_filter(
                &mut em,
                &mut frontier,
                |em, i| {
                    em.ld(&degrees.r, i as u64, 1);
                    if i64::from(degrees.vals[i]) < k {
                        core.vals[i] = (k - 1) as u32;
                        em.st(&core.r, i as u64, 1);
                        true
                    } else {
                        false
                    }
                },
                remove_slot,
            );
            let remaining = vertex_filter(
                &mut em,
                &mut frontier,
                |em, i| {
                    em.ld(&degrees.r, i as u64, 1);
                    i64::from(degrees.vals[i]) >= k
                },
                spare,
            );
            spare = std::mem::replace(&mut frontier, remaining).into_slot();
            if to_remove.is_empty() {
                remove_slot = to_remove.into_slot();
                break;
            }
            let mut f = UpdateDeg {
                degrees: &mut degrees,
            };
            let out = edge_map(&mut em, &lg, &mut to_remove, &mut f, &mut scratch, out_slot);
            out_slot = out.into_slot();
            remove_slot = to_remove.into_slot();
            core.sync(&mut em);
            degrees.sync(&mut em);
        }
        if frontier.is_empty() {
            break;
        }
    }
    std::hint::black_box(&core.vals);
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
/// (`stiffness_matrix`), two iterations.
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

/// BLOSUM62 among the ten residues Rodinia's `nw` draws (its symbols
/// 1..=10: R, N, D, C, Q, E, G, H, I, L), the scores its reference matrix
/// holds.
const BLOSUM62_10: [[i8; 10]; 10] = [
    [5, 0, -2, -3, 1, 0, -2, 0, -3, -2],
    [0, 6, 1, -3, 0, 0, 0, 1, -3, -3],
    [-2, 1, 6, -3, 0, 2, -1, -1, -3, -4],
    [-3, -3, -3, 9, -3, -4, -3, -3, -1, -1],
    [1, 0, 0, -3, 5, 2, -2, 0, -3, -2],
    [0, 0, 2, -4, 2, 5, -2, 0, -3, -3],
    [-2, 0, -1, -3, -2, -2, 6, -2, -4, -4],
    [0, 1, -1, -3, 0, 0, -2, 8, -3, -3],
    [-3, -3, -3, -1, -3, -3, -4, -3, 4, 2],
    [-2, -3, -4, -1, -2, -3, -4, -3, 2, 4],
];

/// Rodinia's `BLOCK_SIZE`: `nw` fills its matrix in tiles of this side.
const NW_TILE: usize = 16;

/// Needleman-Wunsch as Rodinia's `nw` (OpenMP `nw_optimized`, DaeMon's
/// \[20\]) runs it on two random sequences: an `int` score matrix
/// (`input_itemsets`) zeroed, the sequences put in its first row and
/// column, an `int` reference matrix of the same size filled with their
/// BLOSUM62 scores, then the first row and column set to the gap
/// penalties. The recurrence runs in 16×16 tiles along anti-diagonals
/// (the upper-left triangle of tiles, then the lower-right). Each tile
/// copies 16×16 reference scores and 17×17 scores (its top and left
/// borders too) into local arrays, computes there, and writes 16×16
/// scores back, so a tile touches 64–68 B of each of 33 rows: low
/// spatial locality within a page, unlike a row-by-row fill.
pub fn nw<S: Sink + ?Sized>(sink: &mut S, p: &Params) {
    let tiles = ((4096.0 * p.factor.sqrt()).round() as usize)
        .div_ceil(NW_TILE)
        .max(1);
    let len = tiles * NW_TILE;
    let dim = len + 1;
    let mut rng = SmallRng::seed_from_u64(p.seed ^ 0x2a);
    // Rodinia: `rand() % 10 + 1`, stored 0-based here.
    let a: Vec<usize> = (0..len).map(|_| rng.gen_range(0..10)).collect();
    let b: Vec<usize> = (0..len).map(|_| rng.gen_range(0..10)).collect();
    let mut space = Space::default();
    let m_r = space.alloc("input_itemsets", 4, (dim * dim) as u64);
    let r_r = space.alloc("referrence", 4, (dim * dim) as u64);
    begin(sink, &space);
    let mut em = Emitter::new(sink);
    let penalty = 10i32;
    let mut m = vec![0i32; dim * dim];
    let mut reference = vec![0i32; dim * dim];
    // Initialization, as Rodinia's main does it: zero the scores, put the
    // sequences in column and row 0, fill the reference row by row (each
    // row reads its symbol from column 0), set row and column 0 to the
    // penalties. Fills are one access per line.
    em.contents(&r_r, &reference);
    em.scan(&m_r, 0, (dim * dim) as u64, true, 1);
    for i in 1..dim {
        m[i * dim] = a[i - 1] as i32 + 1;
        m[i] = b[i - 1] as i32 + 1;
        em.st(&m_r, (i * dim) as u64, 1);
    }
    em.scan(&m_r, 1, dim as u64, true, 1);
    em.contents(&m_r, &m);
    for i in 1..dim {
        em.ld(&m_r, (i * dim) as u64, 1);
        for j in 1..dim {
            reference[i * dim + j] = i32::from(BLOSUM62_10[a[i - 1]][b[j - 1]]);
        }
        em.scan(&r_r, (i * dim + 1) as u64, ((i + 1) * dim) as u64, true, 2);
        em.contents_span(&r_r, &reference, i * dim, (i + 1) * dim);
    }
    for i in 0..dim {
        m[i * dim] = -(i as i32) * penalty;
        m[i] = -(i as i32) * penalty;
        em.st(&m_r, (i * dim) as u64, 1);
    }
    em.scan(&m_r, 0, dim as u64, true, 1);
    em.contents(&m_r, &m);

    let mut tile = |em: &mut Emitter<'_, S>, bx: usize, by: usize| {
        let (r0, c0) = (by * NW_TILE, bx * NW_TILE);
        for i in 0..NW_TILE {
            for j in 0..NW_TILE {
                em.ld(&r_r, ((r0 + i + 1) * dim + c0 + j + 1) as u64, 1);
            }
        }
        for i in 0..=NW_TILE {
            for j in 0..=NW_TILE {
                em.ld(&m_r, ((r0 + i) * dim + c0 + j) as u64, 1);
            }
        }
        for i in 1..=NW_TILE {
            for j in 1..=NW_TILE {
                let at = (r0 + i) * dim + c0 + j;
                m[at] = (m[at - dim - 1] + reference[at])
                    .max(m[at - 1] - penalty)
                    .max(m[at - dim] - penalty);
            }
        }
        for i in 1..=NW_TILE {
            let row = (r0 + i) * dim + c0;
            for j in 1..=NW_TILE {
                // The local recurrence's work is carried by the stores.
                em.st(&m_r, (row + j) as u64, 8);
            }
            // The tile's scores, as its pages will hold them when they move.
            em.contents_span(&m_r, &m, row + 1, row + NW_TILE + 1);
        }
    };
    for blk in 1..=tiles {
        for bx in 0..blk {
            tile(&mut em, bx, blk - 1 - bx);
        }
    }
    for blk in 2..=tiles {
        for bx in blk - 1..tiles {
            tile(&mut em, bx, tiles + blk - 2 - bx);
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
    use farmem_core::PAGE_SIZE;

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

    /// Ligra's pr: 16 B vertex records, 4 B edges, 8 B (`double`) ranks,
    /// and vertex 0's pull in the dense edgeMap: its record, then for each
    /// in-edge the neighbour id, its frontier flag, p_curr and the
    /// neighbour's record, p_next read and written, the output flag set.
    /// nw reports each tile's scores once it is computed: replaying the
    /// page records gives memory in which every cell satisfies the
    /// recurrence over the reported reference scores, and the last tile's
    /// pages are reported after the run's last store, so a page that moves
    /// later carries the scores, not the zeros it started with. The tiles
    /// run along anti-diagonals: the second tile written is (1, 0) or
    /// (0, 1), 16 rows away from the first in one of them.
    #[test]
    fn nw_runs_rodinias_tiles_and_its_pages_carry_the_scores() {
        #[derive(Default)]
        struct Capture {
            stores: Vec<u64>,
            /// (page address, data, stores seen before the record).
            pages: Vec<(u64, Vec<u8>, usize)>,
        }
        impl Sink for Capture {
            fn access(&mut self, a: Access) {
                if a.write {
                    self.stores.push(a.addr);
                }
            }
            fn wants_contents(&self) -> bool {
                true
            }
            fn page(&mut self, addr: u64, data: &[u8]) {
                self.pages.push((addr, data.to_vec(), self.stores.len()));
            }
        }
        let p = Params {
            factor: 1.0 / 1024.0,
            seed: 5,
        };
        let mut c = Capture::default();
        nw(&mut c, &p);
        // 4096 / 32 = 128 symbols, 8 tiles a side.
        let (tiles, dim) = (8usize, 129usize);
        let mut space = Space::default();
        let m_r = space.alloc("input_itemsets", 4, (dim * dim) as u64);
        let r_r = space.alloc("referrence", 4, (dim * dim) as u64);
        let mut mem: std::collections::HashMap<u64, Vec<u8>> = Default::default();
        for (addr, data, _) in &c.pages {
            mem.insert(*addr, data.clone());
        }
        let word = |r: &Region, i: usize| {
            let a = r.addr(i as u64);
            i32::from_le_bytes(std::array::from_fn(|k| {
                let b = a + k as u64;
                mem[&(b / PAGE_SIZE * PAGE_SIZE)][(b % PAGE_SIZE) as usize]
            }))
        };
        for i in 0..dim {
            assert_eq!(word(&m_r, i * dim), -10 * i as i32);
            assert_eq!(word(&m_r, i), -10 * i as i32);
        }
        for i in 1..dim {
            for j in 1..dim {
                let at = i * dim + j;
                let s = word(&r_r, at);
                assert!((-4..=9).contains(&s), "reference ({i}, {j}) = {s}");
                let want = (word(&m_r, at - dim - 1) + s)
                    .max(word(&m_r, at - 1) - 10)
                    .max(word(&m_r, at - dim) - 10);
                assert_eq!(word(&m_r, at), want, "cell ({i}, {j})");
            }
        }
        // Every cell off row and column 0 is stored once by the tiles.
        let tile_stores = &c.stores[c.stores.len() - tiles * tiles * 256..];
        let first = |k: usize| tile_stores[k * 256];
        assert_eq!(first(0), m_r.addr((dim + 1) as u64));
        assert!(
            first(1) == m_r.addr((dim + 17) as u64) || first(1) == m_r.addr((17 * dim + 1) as u64)
        );
        let mut cells: Vec<u64> = tile_stores.to_vec();
        cells.sort_unstable();
        cells.dedup();
        assert_eq!(cells.len(), tiles * tiles * 256);
        // The last tile's pages are reported after every store of the run.
        let last = m_r.addr((dim * dim - 1) as u64) / PAGE_SIZE * PAGE_SIZE;
        let (_, _, seen) = c.pages.iter().rev().find(|r| r.0 == last).unwrap();
        assert_eq!(*seen, c.stores.len());
    }

    #[test]
    fn pr_is_ligras_dense_pull() {
        let p = Params {
            factor: 1.0 / 1024.0,
            seed: 3,
        };
        let g = ligra::graph(p.graph_scale(19), p.seed);
        let (n, e) = (g.vertices() as u64, g.edges() as u64);
        let mut v: Vec<Access> = Vec::new();
        pr(&mut v, &p);
        let mut space = Space::default();
        let verts = space.alloc("V", 16, n);
        let edges = space.alloc("edges", 4, e);
        let p_curr = space.alloc("p_curr", 8, n);
        let p_next = space.alloc("p_next", 8, n);
        let front_s = space.alloc("frontier.s", 4, n);
        let front_d = space.alloc("frontier.d", 1, n);
        let _out_s = space.alloc("frontier.s", 4, e / 20);
        let next = space.alloc("frontier.d", 1, n);
        let in_region = |a: &Access, r: &Region| (r.base..r.base + r.bytes()).contains(&a.addr);
        // Loads have the element's width (the fill before is by lines).
        for (r, w) in [(&verts, 16), (&p_curr, 8)] {
            assert!(
                v.iter()
                    .filter(|a| !a.write && in_region(a, r))
                    .all(|a| a.size == w)
            );
        }
        // The pull of vertex 0 starts after its record is read in the dense loop.
        assert!(g.degree(0) > 0);
        let start = v
            .iter()
            .position(|a| *a == Access::load(verts.addr(0), 16, 1))
            .expect("vertex 0 pulled");
        let mut want = vec![Access::load(verts.addr(0), 16, 1)];
        for i in 0..g.degree(0) as u64 {
            let u = u64::from(g.neigh[i as usize]);
            want.push(Access::load(edges.addr(i), 4, 1));
            want.push(Access::load(front_d.addr(u), 1, 0));
            want.push(Access::load(p_curr.addr(u), 8, 0));
            want.push(Access::load(verts.addr(u), 16, 0));
            want.push(Access::load(p_next.addr(0), 8, 0));
            want.push(Access::store(p_next.addr(0), 8, 3));
            // The output flag, set by every update that returns true.
            want.push(Access::store(next.addr(0), 1, 0));
        }
        assert_eq!(&v[start..start + want.len()], &want[..]);
        // The all-vertices frontier is dense but edgeMap packs it sparse first.
        assert!(v.iter().any(|a| a.write && in_region(a, &front_s)));
    }
}
