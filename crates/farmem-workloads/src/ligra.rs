//! Ligra (Shun & Blelloch, PPoPP'13) as it holds a graph and its kernels'
//! state in memory: DaeMon runs Ligra's kc, tc, pr, bf and bc on a
//! 1M-vertex, 10M-edge graph (§5, Table 3), so what its link compresses
//! and how its pages are reused are Ligra's, which this module reproduces:
//!
//! * the graph: an array of vertex records (`symmetricVertex`: a pointer
//!   into the edge array, a `uintT` degree, 4 bytes of padding; 16 B) and
//!   the edge array of `uintE` (u32) ids, sorted per vertex (IO.h frees the
//!   file's offsets once the records are built);
//! * per-vertex state as each app allocates and fills it (parents at
//!   `UINT_E_MAX`, `double` path counts, `bool` flags, `intE` degrees);
//! * frontiers (`vertexSubset`): a sparse array of ids or a dense array of
//!   n bools, `edgeMap` switching to dense when the frontier and its out-
//!   edges exceed m/20, with its temporaries (degrees, frontier vertex
//!   records, `outEdges` holding `UINT_E_MAX` for rejected edges).
//!
//! Array contents are reported when they change (at the end of each
//! edgeMap, vertexMap or filter), so a page crossing the link is sized by
//! what it holds then.

// Indices are what gets traced, so loops index explicitly.
#![allow(clippy::needless_range_loop)]

use crate::graph::{Csr, rmat_ligra};
use crate::record::Sink;
use crate::space::{Emitter, Pod, Region, Snapshot, Space};

/// Ligra's `UINT_E_MAX`: no parent, a rejected edge in `outEdges`.
pub const NONE: u32 = u32::MAX;

/// The graph as Ligra holds it.
pub struct Graph {
    pub g: Csr,
    /// 16 B vertex records.
    pub v: Region,
    /// u32 neighbour ids.
    pub edges: Region,
    /// edgeMap's default switch point, m/20.
    pub threshold: usize,
}

impl Graph {
    pub fn alloc(space: &mut Space, g: Csr) -> Self {
        let n = g.vertices() as u64;
        let v = space.alloc("V", 16, n);
        let edges = space.alloc("edges", 4, g.edges().max(1) as u64);
        let threshold = g.edges() / 20;
        Self {
            g,
            v,
            edges,
            threshold,
        }
    }

    /// The vertex records' and edges' bytes: each record's pointer is the
    /// simulated address of its first neighbour.
    pub fn report<S: Sink + ?Sized>(&self, em: &mut Emitter<'_, S>) {
        if !em.sink.wants_contents() {
            return;
        }
        let words: Vec<u64> = (0..self.g.vertices())
            .flat_map(|v| [self.edges.addr(self.g.offsets[v]), self.g.degree(v) as u64])
            .collect();
        em.contents(&self.v, &words);
        em.contents(&self.edges, &self.g.neigh);
    }

    pub fn n(&self) -> usize {
        self.g.vertices()
    }

    fn range(&self, v: usize) -> std::ops::Range<u64> {
        self.g.offsets[v]..self.g.offsets[v + 1]
    }
}

/// A per-vertex array, its simulated region and its last reported bytes.
pub struct Array<T> {
    pub r: Region,
    pub vals: Vec<T>,
    snap: Option<Snapshot<T>>,
}

impl<T: Pod + PartialEq> Array<T> {
    pub fn alloc(space: &mut Space, name: &'static str, vals: Vec<T>) -> Self {
        let r = space.alloc(name, T::SIZE as u16, vals.len().max(1) as u64);
        Self {
            r,
            vals,
            snap: None,
        }
    }
    /// Reports the contents (first call) or the pages changed since.
    pub fn sync<S: Sink + ?Sized>(&mut self, em: &mut Emitter<'_, S>) {
        match &mut self.snap {
            None => self.snap = Some(Snapshot::new(em, &self.r, &self.vals)),
            Some(s) => {
                s.update(em, &self.r, &self.vals);
            }
        }
    }
    /// `for i in 0..len: a[i] = x` (Ligra's parallel_for fills).
    pub fn fill<S: Sink + ?Sized>(&mut self, em: &mut Emitter<'_, S>, x: T) {
        self.vals.fill(x);
        em.scan(&self.r, 0, self.vals.len() as u64, true, 1);
    }
}

/// Where one vertexSubset lives: its sparse ids and its dense flags.
pub struct Slot {
    s: Array<u32>,
    d: Array<bool>,
}

impl Slot {
    /// `sparse` ids of room; dense flags for `n` vertices when `dense`.
    pub fn alloc(space: &mut Space, sparse: usize, n: usize, dense: bool) -> Self {
        Self {
            s: Array::alloc(space, "frontier.s", vec![0u32; sparse]),
            d: Array::alloc(space, "frontier.d", vec![false; if dense { n } else { 0 }]),
        }
    }
    fn sync<S: Sink + ?Sized>(&mut self, em: &mut Emitter<'_, S>) {
        self.s.sync(em);
        self.d.sync(em);
    }
}

/// A vertexSubset: sparse, dense, or both after a conversion.
pub struct Frontier {
    n: usize,
    slot: Slot,
    sparse: Option<Vec<u32>>,
    dense: Option<Vec<bool>>,
    is_dense: bool,
    m: usize,
}

impl Frontier {
    /// `vertexSubset(n, v)`: one vertex, sparse.
    pub fn single<S: Sink + ?Sized>(
        em: &mut Emitter<'_, S>,
        n: usize,
        v: u32,
        mut slot: Slot,
    ) -> Self {
        if let Some(x) = slot.s.vals.first_mut() {
            *x = v;
        }
        em.st(&slot.s.r, 0, 1);
        slot.sync(em);
        Self {
            n,
            slot,
            sparse: Some(vec![v]),
            dense: None,
            is_dense: false,
            m: 1,
        }
    }
    /// `vertexSubset(n, n, frontier)` over a bool array set to all 1.
    pub fn all<S: Sink + ?Sized>(em: &mut Emitter<'_, S>, n: usize, mut slot: Slot) -> Self {
        slot.d.fill(em, true);
        slot.sync(em);
        Self {
            n,
            slot,
            sparse: None,
            dense: Some(vec![true; n]),
            is_dense: true,
            m: n,
        }
    }
    fn from_dense<S: Sink + ?Sized>(em: &mut Emitter<'_, S>, d: Vec<bool>, mut slot: Slot) -> Self {
        // The constructor counts the members: one pass over the flags.
        em.scan(&slot.d.r, 0, d.len() as u64, false, 1);
        let m = d.iter().filter(|&&b| b).count();
        let n = d.len();
        let k = slot.d.vals.len().min(n);
        slot.d.vals[..k].copy_from_slice(&d[..k]);
        slot.sync(em);
        Self {
            n,
            slot,
            sparse: None,
            dense: Some(d),
            is_dense: true,
            m,
        }
    }
    fn from_sparse<S: Sink + ?Sized>(
        em: &mut Emitter<'_, S>,
        n: usize,
        s: Vec<u32>,
        mut slot: Slot,
    ) -> Self {
        let k = slot.s.vals.len().min(s.len());
        slot.s.vals[..k].copy_from_slice(&s[..k]);
        em.scan(&slot.s.r, 0, k as u64, true, 1);
        slot.sync(em);
        let m = s.len();
        Self {
            n,
            slot,
            sparse: Some(s),
            dense: None,
            is_dense: false,
            m,
        }
    }
    pub fn len(&self) -> usize {
        self.m
    }
    pub fn is_empty(&self) -> bool {
        self.m == 0
    }
    pub fn is_dense(&self) -> bool {
        self.is_dense
    }
    /// Gives the storage back once the subset is deleted.
    pub fn into_slot(self) -> Slot {
        self.slot
    }
    /// The members in Ligra's order (sparse order, or ascending ids).
    pub fn members(&self) -> Vec<u32> {
        match (&self.sparse, &self.dense) {
            (Some(s), _) if !self.is_dense => s.clone(),
            (_, Some(d)) => (0..d.len() as u32).filter(|&i| d[i as usize]).collect(),
            (Some(s), None) => s.clone(),
            (None, None) => Vec::new(),
        }
    }

    /// `toSparse`: packs the flags into ids (a pass over the flags, the
    /// ids written in order).
    fn make_sparse<S: Sink + ?Sized>(&mut self, em: &mut Emitter<'_, S>) {
        if self.sparse.is_none() && self.m > 0 {
            let ids = self.members();
            em.scan(&self.slot.d.r, 0, self.n as u64, false, 1);
            let k = self.slot.s.vals.len().min(ids.len());
            self.slot.s.vals[..k].copy_from_slice(&ids[..k]);
            em.scan(&self.slot.s.r, 0, k as u64, true, 1);
            self.slot.s.sync(em);
            self.sparse = Some(ids);
        }
        self.is_dense = false;
    }

    /// `toDense`: clears n flags and sets the members'.
    fn make_dense<S: Sink + ?Sized>(&mut self, em: &mut Emitter<'_, S>) {
        if self.dense.is_none() {
            let ids = self.sparse.clone().unwrap_or_default();
            let mut d = vec![false; self.n];
            em.scan(&self.slot.d.r, 0, self.n as u64, true, 1);
            for (i, &v) in ids.iter().enumerate() {
                if (i as u64).is_multiple_of(16) {
                    em.scan(&self.slot.s.r, i as u64, i as u64 + 1, false, 0);
                }
                d[v as usize] = true;
                em.st(&self.slot.d.r, u64::from(v), 1);
            }
            let k = self.slot.d.vals.len().min(self.n);
            self.slot.d.vals[..k].copy_from_slice(&d[..k]);
            self.slot.d.sync(em);
            self.dense = Some(d);
        }
        self.is_dense = true;
    }
}

/// What an edgeMap applies to each edge (Ligra's `F` with `cond` and
/// `update`); each reports the accesses it makes.
pub trait EdgeFn {
    /// Whether `d` may still be updated (Ligra's `cond_true` unless given).
    fn cond<S: Sink + ?Sized>(&mut self, _em: &mut Emitter<'_, S>, _d: usize) -> bool {
        true
    }
    /// Applies edge (s, d); whether d joins the output.
    fn update<S: Sink + ?Sized>(&mut self, em: &mut Emitter<'_, S>, s: usize, d: usize) -> bool;
}

/// edgeMap's temporaries: degrees and vertex records of a sparse frontier,
/// and sparse mode's `outEdges`.
pub struct Scratch {
    degrees: Array<u32>,
    fverts: Array<u64>,
    out_edges: Array<u32>,
}

impl Scratch {
    /// Room for frontiers of up to `cap` vertices.
    pub fn alloc(space: &mut Space, cap: usize, threshold: usize) -> Self {
        Self {
            degrees: Array::alloc(space, "degrees", vec![0u32; cap.max(1)]),
            fverts: Array::alloc(space, "frontierVertices", vec![0u64; 2 * cap.max(1)]),
            out_edges: Array::alloc(space, "outEdges", vec![0u32; threshold.max(1)]),
        }
    }
}

/// Ligra's `edgeMap` (ligra.h `edgeMapData`): the frontier's degrees are
/// gathered sparse; if it and its out-edges exceed m/20 the dense pull
/// (`edgeMapDense`, each vertex meeting `cond` scans its in-neighbours for
/// frontier members, stopping once `cond` fails) runs, else the sparse
/// push (`edgeMapSparse`, every out-edge tried, then `outEdges` filtered).
/// The output subset is built in `out`.
pub fn edge_map<S: Sink + ?Sized, F: EdgeFn>(
    em: &mut Emitter<'_, S>,
    g: &Graph,
    fr: &mut Frontier,
    f: &mut F,
    scratch: &mut Scratch,
    out: Slot,
) -> Frontier {
    let n = g.n();
    let m = fr.m;
    if m == 0 {
        return Frontier::from_sparse(em, n, Vec::new(), out);
    }
    fr.make_sparse(em);
    let ids = fr.sparse.clone().unwrap_or_default();
    let s_r = fr.slot.s.r;
    let cap = scratch.degrees.vals.len();
    let mut out_degrees = 0usize;
    for (i, &v) in ids.iter().enumerate() {
        let v = v as usize;
        em.ld(&s_r, i as u64, 1);
        em.ld(&g.v, v as u64, 0);
        let d = g.g.degree(v);
        out_degrees += d;
        if i < cap {
            scratch.degrees.vals[i] = d as u32;
            scratch.fverts.vals[2 * i] = g.edges.addr(g.g.offsets[v]);
            scratch.fverts.vals[2 * i + 1] = d as u64;
            em.st(&scratch.degrees.r, i as u64, 0);
            em.st_bytes(&scratch.fverts.r, 16 * i as u64, 16, 0);
        }
    }
    // plusReduce over the degrees.
    em.scan(&scratch.degrees.r, 0, m.min(cap) as u64, false, 1);
    scratch.degrees.sync(em);
    scratch.fverts.sync(em);
    if out_degrees == 0 {
        return Frontier::from_sparse(em, n, Vec::new(), out);
    }
    if m + out_degrees > g.threshold {
        fr.make_dense(em);
        let d_r = fr.slot.d.r;
        let flags = fr.dense.clone().unwrap_or_default();
        let next_r = out.d.r;
        let mut next = vec![false; n];
        for v in 0..n {
            if v.is_multiple_of(64) {
                em.scan(&next_r, v as u64, v as u64 + 64, true, 1);
            }
            if !f.cond(em, v) {
                continue;
            }
            em.ld(&g.v, v as u64, 1);
            for e in g.range(v) {
                em.ld(&g.edges, e, 1);
                let u = g.g.neigh[e as usize] as usize;
                em.ld(&d_r, u as u64, 0);
                if flags[u] && f.update(em, u, v) {
                    next[v] = true;
                    em.st(&next_r, v as u64, 0);
                }
                if !f.cond(em, v) {
                    break;
                }
            }
        }
        Frontier::from_dense(em, next, out)
    } else {
        // plusScan of the degrees into offsets, in place.
        em.scan(&scratch.degrees.r, 0, m as u64, false, 1);
        em.scan(&scratch.degrees.r, 0, m as u64, true, 0);
        let oe_r = scratch.out_edges.r;
        let mut o = 0usize;
        for (i, &v) in ids.iter().enumerate() {
            let v = v as usize;
            em.ld(&s_r, i as u64, 1);
            em.ld(&scratch.degrees.r, i as u64, 0);
            em.ld_bytes(&scratch.fverts.r, 16 * i as u64, 16, 0);
            for e in g.range(v) {
                em.ld(&g.edges, e, 1);
                let u = g.g.neigh[e as usize] as usize;
                let keep = f.cond(em, u) && f.update(em, v, u);
                if let Some(x) = scratch.out_edges.vals.get_mut(o) {
                    *x = if keep { u as u32 } else { NONE };
                }
                em.st(&oe_r, o as u64, 0);
                o += 1;
            }
        }
        scratch.out_edges.sync(em);
        // filter: a pass over outEdges, the kept ids written in order.
        em.scan(&oe_r, 0, o as u64, false, 2);
        let kept: Vec<u32> = scratch.out_edges.vals[..o.min(scratch.out_edges.vals.len())]
            .iter()
            .copied()
            .filter(|&x| x != NONE)
            .collect();
        Frontier::from_sparse(em, n, kept, out)
    }
}

/// Ligra's `vertexMap`: `f` on each member, by a pass over the flags when
/// dense or over the ids when sparse.
pub fn vertex_map<S: Sink + ?Sized>(
    em: &mut Emitter<'_, S>,
    fr: &Frontier,
    mut f: impl FnMut(&mut Emitter<'_, S>, usize),
) {
    if fr.is_dense {
        let d = fr.dense.as_deref().unwrap_or(&[]);
        for (i, &b) in d.iter().enumerate() {
            if i.is_multiple_of(64) {
                em.scan(&fr.slot.d.r, i as u64, i as u64 + 64, false, 1);
            }
            if b {
                f(em, i);
            }
        }
    } else {
        for (i, &v) in fr.sparse.as_deref().unwrap_or(&[]).iter().enumerate() {
            em.ld(&fr.slot.s.r, i as u64, 1);
            f(em, v as usize);
        }
    }
}

/// Ligra's `vertexFilter`: a dense subset of the members passing `keep`
/// (n flags cleared, then each member's flag set to `keep`).
pub fn vertex_filter<S: Sink + ?Sized>(
    em: &mut Emitter<'_, S>,
    fr: &mut Frontier,
    mut keep: impl FnMut(&mut Emitter<'_, S>, usize) -> bool,
    out: Slot,
) -> Frontier {
    fr.make_dense(em);
    let n = fr.n;
    let out_r = out.d.r;
    em.scan(&out_r, 0, n as u64, true, 1);
    let mut d = vec![false; n];
    let flags = fr.dense.clone().unwrap_or_default();
    for (i, &b) in flags.iter().enumerate() {
        if i.is_multiple_of(64) {
            em.scan(&fr.slot.d.r, i as u64, i as u64 + 64, false, 1);
        }
        if b {
            d[i] = keep(em, i);
            em.st(&out_r, i as u64, 0);
        }
    }
    Frontier::from_dense(em, d, out)
}

/// BFS levels from `src` (plain BFS on the CSR), so that each round's
/// output has room laid out before the run starts.
pub fn levels(g: &Csr, src: usize) -> Vec<Vec<u32>> {
    let n = g.vertices();
    let mut seen = vec![false; n];
    let mut out = Vec::new();
    if src >= n {
        return out;
    }
    seen[src] = true;
    let mut cur = vec![src as u32];
    while !cur.is_empty() {
        let mut next = Vec::new();
        for &u in &cur {
            for &v in g.neighbors(u as usize) {
                if !seen[v as usize] {
                    seen[v as usize] = true;
                    next.push(v);
                }
            }
        }
        out.push(cur);
        cur = next;
    }
    out.push(Vec::new());
    out
}

/// One slot per BFS level of `g` from `src`, each with room for its ids
/// and dense flags when edgeMap will build or read it dense.
pub fn level_slots(space: &mut Space, g: &Csr, src: usize) -> (Vec<Slot>, usize) {
    let lv = levels(g, src);
    let threshold = g.edges() / 20;
    let dense_in: Vec<bool> = lv
        .iter()
        .map(|l| {
            let deg: usize = l.iter().map(|&v| g.degree(v as usize)).sum();
            deg > 0 && l.len() + deg > threshold
        })
        .collect();
    let max = lv.iter().map(Vec::len).max().unwrap_or(1);
    let slots = (0..lv.len())
        .map(|i| {
            let made_dense = i > 0 && dense_in[i - 1];
            Slot::alloc(space, lv[i].len(), g.vertices(), made_dense || dense_in[i])
        })
        .collect();
    (slots, max)
}

/// Builds a Ligra graph for a kernel at `scale` (log2 vertices).
pub fn graph(scale: u32, seed: u64) -> Csr {
    rmat_ligra(scale, seed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::from_edges;
    use crate::record::Access;
    use farmem_core::PAGE_SIZE;

    /// Keeps accesses and page records.
    #[derive(Default)]
    struct Capture {
        acc: Vec<Access>,
        pages: Vec<(u64, Vec<u8>)>,
    }
    impl Sink for Capture {
        fn access(&mut self, a: Access) {
            self.acc.push(a);
        }
        fn wants_contents(&self) -> bool {
            true
        }
        fn page(&mut self, addr: u64, data: &[u8]) {
            self.pages.push((addr, data.to_vec()));
        }
    }

    /// A path 0-1-…-99 and a hub 100 with leaves 101..=160: m = 318
    /// directed edges, threshold 15.
    fn path_and_star() -> Csr {
        let mut e: Vec<(u32, u32)> = (0..99).map(|i| (i, i + 1)).collect();
        e.extend((101..=160).map(|l| (100, l)));
        // Listed out of order and twice: the CSR sorts and deduplicates.
        e.push((1, 0));
        from_edges(161, &e)
    }

    struct Bfs(Vec<u32>);
    impl EdgeFn for Bfs {
        fn cond<S: Sink + ?Sized>(&mut self, _: &mut Emitter<'_, S>, d: usize) -> bool {
            self.0[d] == NONE
        }
        fn update<S: Sink + ?Sized>(&mut self, _: &mut Emitter<'_, S>, s: usize, d: usize) -> bool {
            let new = self.0[d] == NONE;
            if new {
                self.0[d] = s as u32;
            }
            new
        }
    }

    #[test]
    fn vertex_records_point_into_sorted_edges() {
        let mut space = Space::default();
        let g = Graph::alloc(&mut space, path_and_star());
        assert_eq!(g.g.edges(), 318);
        assert_eq!(g.threshold, 15);
        assert_eq!(g.g.neighbors(1), &[0, 2]);
        assert_eq!(g.g.neighbors(100), &(101..=160).collect::<Vec<u32>>()[..]);
        let mut cap = Capture::default();
        let mut em = Emitter::new(&mut cap);
        g.report(&mut em);
        let vpage = &cap.pages.iter().find(|p| p.0 == g.v.base).expect("V").1;
        let rec = |v: usize| {
            let b = &vpage[16 * v..16 * v + 16];
            (
                u64::from_le_bytes(b[..8].try_into().unwrap()),
                u32::from_le_bytes(b[8..12].try_into().unwrap()),
                u32::from_le_bytes(b[12..].try_into().unwrap()),
            )
        };
        // Vertex 1's neighbours start after vertex 0's one: edges + 4 B.
        assert_eq!(rec(0), (g.edges.base, 1, 0));
        assert_eq!(rec(1), (g.edges.base + 4, 2, 0));
        assert_eq!(rec(100), (g.edges.addr(g.g.offsets[100]), 60, 0));
        let epage = &cap
            .pages
            .iter()
            .find(|p| p.0 == g.edges.base)
            .expect("edges")
            .1;
        let ids: Vec<u32> = epage[..12]
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(ids, [1, 0, 2]);
    }

    /// edgeMap goes sparse for a path vertex (1 + 1 ≤ 15) and dense for the
    /// hub (1 + 60 > 15), writing `UINT_E_MAX` for rejected edges in
    /// sparse mode and one flag byte per vertex in dense mode.
    #[test]
    fn edge_map_switches_between_sparse_and_dense() {
        let mut space = Space::default();
        let g = Graph::alloc(&mut space, path_and_star());
        let n = g.n();
        let mut scratch = Scratch::alloc(&mut space, n, g.threshold);
        let slots: Vec<Slot> = (0..4)
            .map(|_| Slot::alloc(&mut space, n, n, true))
            .collect();
        let mut cap = Capture::default();
        let mut em = Emitter::new(&mut cap);
        let mut slots = slots.into_iter();
        let mut parents = vec![NONE; n];
        parents[1] = 1;
        let mut f = Bfs(parents);
        let mut fr = Frontier::single(&mut em, n, 1, slots.next().unwrap());
        let out = edge_map(
            &mut em,
            &g,
            &mut fr,
            &mut f,
            &mut scratch,
            slots.next().unwrap(),
        );
        assert!(!out.is_dense());
        assert_eq!(out.members(), [0, 2]);
        assert_eq!(f.0[0], 1);
        // Revisit 1 from 0 and 2: rejected, so outEdges holds UINT_E_MAX.
        let mut fr2 = out;
        let out2 = edge_map(
            &mut em,
            &g,
            &mut fr2,
            &mut f,
            &mut scratch,
            slots.next().unwrap(),
        );
        assert_eq!(out2.members(), [3]);
        assert_eq!(&scratch.out_edges.vals[..3], &[NONE, NONE, 3]);
        // The hub's frontier goes dense.
        f.0[100] = 100;
        let mut hub = Frontier::single(&mut em, n, 100, slots.next().unwrap());
        let before = em.sink.acc.len();
        let dense = edge_map(&mut em, &g, &mut hub, &mut f, &mut scratch, fr.into_slot());
        assert!(dense.is_dense());
        assert_eq!(dense.len(), 60);
        assert_eq!(dense.members(), (101..=160).collect::<Vec<u32>>());
        // Dense mode reads every vertex that may still be updated.
        let reads_v = em.sink.acc[before..]
            .iter()
            .filter(|a| !a.write && (g.v.base..g.v.base + g.v.bytes()).contains(&a.addr))
            .count();
        assert!(reads_v > 60, "{reads_v}");
    }

    #[test]
    fn ligra_rmat_keeps_hubs_at_low_ids() {
        let g = rmat_ligra(12, 5);
        let n = g.vertices();
        assert_eq!(n, 4096);
        // 10n generated, symmetrized, less self loops and duplicates.
        assert!(g.edges() > 10 * n && g.edges() < 20 * n, "{}", g.edges());
        for v in 0..n {
            let ns = g.neighbors(v);
            assert!(ns.windows(2).all(|w| w[0] < w[1]));
            assert!(!ns.contains(&(v as u32)));
        }
        let max = (0..n).map(|v| g.degree(v)).max().unwrap();
        assert_eq!(g.degree(0), max, "vertex 0 is the biggest hub");
    }

    #[test]
    fn bfs_parents_start_at_uint_e_max_and_pages_are_reported_again() {
        let mut space = Space::default();
        let mut a = Array::alloc(&mut space, "Parents", vec![0u32; 2048]);
        let mut cap = Capture::default();
        let mut em = Emitter::new(&mut cap);
        a.fill(&mut em, NONE);
        // 8 KiB of u32: two pages, one store per 64 B line.
        assert_eq!(em.sink.acc.len(), 2 * PAGE_SIZE as usize / 64);
        assert!(
            em.sink
                .acc
                .iter()
                .all(|x| x.write && x.size == 64 && x.gap == 16)
        );
        a.sync(&mut em);
        assert_eq!(em.sink.pages.len(), 2);
        assert!(em.sink.pages[0].1.iter().all(|&b| b == 0xff));
        a.vals[1500] = 7;
        a.sync(&mut em);
        // Only the changed page comes again.
        assert_eq!(em.sink.pages.len(), 3);
        assert_eq!(em.sink.pages[2].0, a.r.base + PAGE_SIZE);
        a.sync(&mut em);
        assert_eq!(em.sink.pages.len(), 3);
    }

    #[test]
    fn bfs_level_slots_are_dense_where_edge_map_goes_dense() {
        let g = path_and_star();
        let mut space = Space::default();
        // From the hub: {100}, then its 60 leaves (built dense), then none.
        let (slots, max) = level_slots(&mut space, &g, 100);
        assert_eq!(slots.len(), 3);
        assert_eq!(max, 60);
        assert_eq!(slots[0].d.vals.len(), 161);
        assert_eq!(slots[1].d.vals.len(), 161);
        // From a path end, every level is one vertex and stays sparse.
        let (slots, _) = level_slots(&mut space, &g, 0);
        assert!(slots.iter().all(|s| s.d.vals.is_empty()));
    }
}
