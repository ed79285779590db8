//! UniMem's Remote-Balloon extent tree (seed 002, §3.1).
//!
//! The whole memory pool is one global address space; each memory node owns a
//! contiguous, granularity-aligned range `[base, base + capacity)` of it. The
//! tree records `(base, size, owner)` entries for granted memory and hands out
//! exclusive ranges in multiples of the hot-plug granularity (128 MiB on
//! x86-64), so a compute node can online the range directly without a second
//! translation layer.
//!
//! Two ordered maps keyed by base address carry the state: one global map of
//! granted extents, and one map of free ranges per node. Both are kept fully
//! coalesced (adjacent free ranges merge; adjacent extents of one owner on one
//! node merge), which keeps metadata proportional to fragmentation rather than
//! to the number of allocations, as the paper intends.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Hot-plug granularity of x86-64 (the paper's default).
pub const DEFAULT_GRANULARITY: u64 = 128 << 20;

/// How `allocate` spreads the chunks of one request over memory nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// Stripe consecutive chunks over the up nodes, starting after the node
    /// used last (by any request), skipping nodes that are full.
    #[default]
    RoundRobin,
    /// Give each chunk to the up node with the most free bytes (ties: lowest id).
    LeastLoaded,
}

impl Placement {
    pub fn name(self) -> &'static str {
        match self {
            Placement::RoundRobin => "round-robin",
            Placement::LeastLoaded => "least-loaded",
        }
    }
}

impl std::str::FromStr for Placement {
    type Err = ExtentError;
    /// Accepts the config names `round-robin` and `least-loaded`.
    fn from_str(s: &str) -> Result<Self, ExtentError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "round-robin" | "roundrobin" | "rr" => Ok(Placement::RoundRobin),
            "least-loaded" | "leastloaded" => Ok(Placement::LeastLoaded),
            _ => Err(ExtentError::UnknownPlacement(s.to_string())),
        }
    }
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One exclusive range of the global pool held by `owner` on memory node `node`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub node: u32,
    pub base: u64,
    pub len: u64,
    pub owner: String,
}

impl Grant {
    /// One past the last byte of the grant.
    pub fn end(&self) -> u64 {
        self.base + self.len
    }
}

/// Summary of one memory node as the tree sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub node: u32,
    pub base: u64,
    pub capacity: u64,
    pub up: bool,
    pub free: u64,
    pub granted: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtentError {
    #[error(
        "not enough free remote memory: requested {requested} bytes, only {free} bytes free on up memory nodes"
    )]
    NoCapacity { requested: u64, free: u64 },
    #[error("range [{base:#x}, {base:#x} + {len:#x}) is not wholly granted to owner {owner:?}")]
    NotGranted { base: u64, len: u64, owner: String },
    #[error(
        "range [{base:#x}, {base:#x} + {len:#x}) is not aligned to the extent granularity {granularity:#x}"
    )]
    Unaligned {
        base: u64,
        len: u64,
        granularity: u64,
    },
    #[error("zero-sized request: size must be at least one byte")]
    ZeroSize,
    #[error("extent granularity must be non-zero")]
    ZeroGranularity,
    #[error("unknown memory node {node}")]
    UnknownNode { node: u32 },
    #[error(
        "memory node {node} range [{base:#x}, {end:#x}) overlaps memory node {other}'s range [{other_base:#x}, {other_end:#x})"
    )]
    NodeOverlap {
        node: u32,
        base: u64,
        end: u64,
        other: u32,
        other_base: u64,
        other_end: u64,
    },
    #[error(
        "memory node {node} is already registered with range [{base:#x}, +{capacity:#x}); re-registration must use the same range"
    )]
    NodeExists { node: u32, base: u64, capacity: u64 },
    #[error(
        "memory node {node} capacity {capacity} bytes is smaller than one extent granule ({granularity} bytes)"
    )]
    CapacityTooSmall {
        node: u32,
        capacity: u64,
        granularity: u64,
    },
    #[error(
        "memory node {node} range [{base:#x}, +{capacity:#x}) overflows the 64-bit address space"
    )]
    AddressOverflow { node: u32, base: u64, capacity: u64 },
    #[error(
        "memory node {node} still has {granted} bytes granted; release them before removing it"
    )]
    NodeBusy { node: u32, granted: u64 },
    #[error(
        "grant for owner {owner:?} at [{base:#x}, +{len:#x}) lies outside every memory node range"
    )]
    GrantOutsideNode { base: u64, len: u64, owner: String },
    #[error("unknown placement {0:?}; expected round-robin or least-loaded")]
    UnknownPlacement(String),
    #[error("extent tree state is inconsistent: {0}")]
    Corrupt(String),
}

/// Per-node bookkeeping. `free` maps base -> length of every free range.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeState {
    base: u64,
    capacity: u64,
    up: bool,
    free: BTreeMap<u64, u64>,
    free_bytes: u64,
}

impl NodeState {
    fn end(&self) -> u64 {
        self.base + self.capacity
    }

    /// Insert `[base, base+len)` into the free map, merging with neighbours.
    fn free_insert(&mut self, mut base: u64, mut len: u64) {
        if let Some((&pb, &pl)) = self.free.range(..base).next_back()
            && pb + pl == base
        {
            self.free.remove(&pb);
            base = pb;
            len += pl;
        }
        if let Some(nl) = self.free.get(&(base + len)).copied() {
            self.free.remove(&(base + len));
            len += nl;
        }
        self.free.insert(base, len);
    }

    /// Carve `want` bytes first-fit from the lowest addresses; returns the
    /// contiguous runs taken. Caller guarantees `want <= free_bytes`.
    fn take_lowest(&mut self, mut want: u64) -> Vec<(u64, u64)> {
        let mut runs = Vec::new();
        while want > 0 {
            let Some((&fb, &fl)) = self.free.iter().next() else {
                break;
            };
            let take = fl.min(want);
            self.free.remove(&fb);
            if take < fl {
                self.free.insert(fb + take, fl - take);
            }
            runs.push((fb, take));
            self.free_bytes -= take;
            want -= take;
        }
        runs
    }
}

/// A granted extent as stored in the tree (keyed by base).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Extent {
    len: u64,
    node: u32,
    owner: String,
}

/// The Remote-Balloon allocator. Serializes to a compact form (nodes and
/// grants); free ranges are rebuilt and every invariant re-checked on load, so
/// a damaged state file is refused with a clear error instead of corrupting
/// the pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "TreeRepr", into = "TreeRepr")]
pub struct ExtentTree {
    granularity: u64,
    nodes: BTreeMap<u32, NodeState>,
    grants: BTreeMap<u64, Extent>,
    rr_last: Option<u32>,
}

#[derive(Serialize, Deserialize)]
struct NodeRepr {
    node: u32,
    base: u64,
    capacity: u64,
    up: bool,
}

#[derive(Serialize, Deserialize)]
struct TreeRepr {
    granularity: u64,
    nodes: Vec<NodeRepr>,
    grants: Vec<Grant>,
    #[serde(default)]
    rr_last: Option<u32>,
}

impl From<ExtentTree> for TreeRepr {
    fn from(t: ExtentTree) -> Self {
        TreeRepr {
            granularity: t.granularity,
            nodes: t
                .nodes
                .iter()
                .map(|(&node, n)| NodeRepr {
                    node,
                    base: n.base,
                    capacity: n.capacity,
                    up: n.up,
                })
                .collect(),
            grants: t.grants(),
            rr_last: t.rr_last,
        }
    }
}

impl TryFrom<TreeRepr> for ExtentTree {
    type Error = ExtentError;

    fn try_from(r: TreeRepr) -> Result<Self, ExtentError> {
        let mut t = ExtentTree::try_new(r.granularity)?;
        for n in &r.nodes {
            if t.nodes.contains_key(&n.node) {
                return Err(ExtentError::Corrupt(format!(
                    "memory node {} listed twice",
                    n.node
                )));
            }
            if n.capacity % t.granularity != 0 {
                return Err(ExtentError::Corrupt(format!(
                    "memory node {} capacity {:#x} is not a multiple of the granularity {:#x}",
                    n.node, n.capacity, t.granularity
                )));
            }
            t.add_node(n.node, n.base, n.capacity)?;
            t.set_up(n.node, n.up);
        }
        for g in r.grants {
            t.insert_grant(g)?;
        }
        if let Some(last) = r.rr_last
            && t.nodes.contains_key(&last)
        {
            t.rr_last = Some(last);
        }
        t.check_invariants()?;
        Ok(t)
    }
}

impl ExtentTree {
    /// A tree handing out multiples of `granularity` bytes. A zero granularity
    /// (which would make every size aligned and every division fail) falls
    /// back to [`DEFAULT_GRANULARITY`]; use [`ExtentTree::try_new`] to reject it.
    pub fn new(granularity: u64) -> Self {
        Self::try_new(granularity).unwrap_or_else(|_| {
            tracing::warn!("extent granularity 0 is invalid; using {DEFAULT_GRANULARITY}");
            Self::empty(DEFAULT_GRANULARITY)
        })
    }

    /// Like [`ExtentTree::new`] but refuses a zero granularity.
    pub fn try_new(granularity: u64) -> Result<Self, ExtentError> {
        if granularity == 0 {
            return Err(ExtentError::ZeroGranularity);
        }
        Ok(Self::empty(granularity))
    }

    fn empty(granularity: u64) -> Self {
        ExtentTree {
            granularity,
            nodes: BTreeMap::new(),
            grants: BTreeMap::new(),
            rr_last: None,
        }
    }

    pub fn granularity(&self) -> u64 {
        self.granularity
    }

    /// Register memory node `node` owning `[base, base + capacity)` of the
    /// global pool. `base` must be granularity-aligned (hot-plug blocks are);
    /// `capacity` is rounded down to the granularity. Registering the same
    /// node again with the same range is accepted (a restarted memnode) and
    /// marks it up; a different range is refused.
    pub fn add_node(&mut self, node: u32, base: u64, capacity: u64) -> Result<(), ExtentError> {
        let g = self.granularity;
        if !base.is_multiple_of(g) {
            return Err(ExtentError::Unaligned {
                base,
                len: capacity,
                granularity: g,
            });
        }
        let cap = capacity - capacity % g;
        if let Some(n) = self.nodes.get_mut(&node) {
            if n.base == base && n.capacity == cap {
                n.up = true;
                return Ok(());
            }
            return Err(ExtentError::NodeExists {
                node,
                base: n.base,
                capacity: n.capacity,
            });
        }
        if cap == 0 {
            return Err(ExtentError::CapacityTooSmall {
                node,
                capacity,
                granularity: g,
            });
        }
        let end = base.checked_add(cap).ok_or(ExtentError::AddressOverflow {
            node,
            base,
            capacity: cap,
        })?;
        for (&other, n) in &self.nodes {
            if base < n.end() && n.base < end {
                return Err(ExtentError::NodeOverlap {
                    node,
                    base,
                    end,
                    other,
                    other_base: n.base,
                    other_end: n.end(),
                });
            }
        }
        let mut free = BTreeMap::new();
        free.insert(base, cap);
        self.nodes.insert(
            node,
            NodeState {
                base,
                capacity: cap,
                up: true,
                free,
                free_bytes: cap,
            },
        );
        Ok(())
    }

    /// Forget a node that holds no grants.
    pub fn remove_node(&mut self, node: u32) -> Result<(), ExtentError> {
        let granted = self.granted_bytes(node);
        if !self.nodes.contains_key(&node) {
            return Err(ExtentError::UnknownNode { node });
        }
        if granted > 0 {
            return Err(ExtentError::NodeBusy { node, granted });
        }
        self.nodes.remove(&node);
        if self.rr_last == Some(node) {
            self.rr_last = None;
        }
        Ok(())
    }

    /// Mark a node up or down; down nodes keep their grants but receive no
    /// new ones. Unknown nodes are ignored.
    pub fn set_up(&mut self, node: u32, up: bool) {
        if let Some(n) = self.nodes.get_mut(&node) {
            n.up = up;
        }
    }

    /// `Some(up)` for a known node.
    pub fn is_up(&self, node: u32) -> Option<bool> {
        self.nodes.get(&node).map(|n| n.up)
    }

    /// Where a newly registering node's range may start: the end of the
    /// highest node range, rounded up to the granularity (0 for an empty pool).
    pub fn next_free_base(&self) -> u64 {
        let end = self.nodes.values().map(NodeState::end).max().unwrap_or(0);
        let g = self.granularity;
        end.div_ceil(g).saturating_mul(g)
    }

    /// Grant `size` bytes (rounded up to the granularity) to `owner`.
    ///
    /// The request is split into granularity chunks placed per `placement`;
    /// inside a node the lowest free addresses are used first. Chunks that
    /// land contiguously on one node are returned as one grant; the result is
    /// sorted by base. All-or-nothing: on `NoCapacity` nothing changes.
    pub fn allocate(
        &mut self,
        owner: &str,
        size: u64,
        placement: Placement,
    ) -> Result<Vec<Grant>, ExtentError> {
        if size == 0 {
            return Err(ExtentError::ZeroSize);
        }
        let g = self.granularity;
        let chunks = size.div_ceil(g);
        let free = self.available_bytes();
        let requested = chunks.saturating_mul(g);
        // Free ranges are whole granules, so byte-count sufficiency is exact:
        // checking it up front is what makes the allocation all-or-nothing.
        if chunks.checked_mul(g).is_none() || requested > free {
            return Err(ExtentError::NoCapacity { requested, free });
        }

        // Plan chunk counts per node (on copies of the free counters), then carve.
        let mut cands: Vec<(u32, u64)> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.up)
            .map(|(&id, n)| (id, n.free_bytes / g))
            .collect();
        let mut counts = vec![0u64; cands.len()];
        match placement {
            Placement::RoundRobin => {
                // Index of the first node strictly after the last one used.
                let mut i = match self.rr_last {
                    Some(last) => cands.iter().position(|&(id, _)| id > last).unwrap_or(0),
                    None => 0,
                };
                let mut left = chunks;
                while left > 0 {
                    // One full lap hands one chunk to every node that has room;
                    // for huge requests do whole laps at once.
                    let with_room = cands.iter().filter(|c| c.1 > 0).count() as u64;
                    let min_room = cands
                        .iter()
                        .filter(|c| c.1 > 0)
                        .map(|c| c.1)
                        .min()
                        .unwrap_or(0);
                    let laps = (left / with_room.max(1)).min(min_room).saturating_sub(1);
                    if laps > 0 {
                        for (k, c) in cands.iter_mut().enumerate() {
                            if c.1 > 0 {
                                c.1 -= laps;
                                counts[k] += laps;
                            }
                        }
                        left -= laps * with_room;
                        continue;
                    }
                    // Pre-check guarantees some node has room.
                    while cands[i].1 == 0 {
                        i = (i + 1) % cands.len();
                    }
                    cands[i].1 -= 1;
                    counts[i] += 1;
                    self.rr_last = Some(cands[i].0);
                    left -= 1;
                    i = (i + 1) % cands.len();
                }
            }
            Placement::LeastLoaded => {
                let mut left = chunks;
                while left > 0 {
                    // Most free first, lowest id on ties (max_by_key keeps the last max).
                    let Some(k) = (0..cands.len()).rev().max_by_key(|&k| cands[k].1) else {
                        break;
                    };
                    // Give the leader enough chunks to fall to the runner-up's level.
                    let runner_up = (0..cands.len())
                        .filter(|&j| j != k)
                        .map(|j| cands[j].1)
                        .max();
                    let step = match runner_up {
                        Some(r) if r < cands[k].1 => (cands[k].1 - r).min(left),
                        Some(_) => 1,
                        None => left,
                    };
                    cands[k].1 -= step;
                    counts[k] += step;
                    left -= step;
                }
            }
        }

        let mut out = Vec::new();
        for (k, &(id, _)) in cands.iter().enumerate() {
            if counts[k] == 0 {
                continue;
            }
            // Candidates were read from `self.nodes` above; nothing removed them.
            let Some(node) = self.nodes.get_mut(&id) else {
                continue;
            };
            for (base, len) in node.take_lowest(counts[k] * g) {
                out.push(Grant {
                    node: id,
                    base,
                    len,
                    owner: owner.to_string(),
                });
            }
        }
        for gr in &out {
            self.grants_insert_merge(gr.base, gr.len, gr.node, &gr.owner);
        }
        out.sort_by_key(|gr| gr.base);
        Ok(out)
    }

    /// Grants one granule on `node` to `owner`: a replica's home, chosen by
    /// the caller. None when the node is unknown, down or full.
    pub fn allocate_granule_on(&mut self, owner: &str, node: u32) -> Option<Grant> {
        let g = self.granularity;
        let state = self
            .nodes
            .get_mut(&node)
            .filter(|n| n.up && n.free_bytes >= g)?;
        let (base, len) = state.take_lowest(g).into_iter().next()?;
        self.grants_insert_merge(base, len, node, owner);
        Some(Grant {
            node,
            base,
            len,
            owner: owner.to_string(),
        })
    }

    /// Up nodes with a free granule, most free bytes first (lowest id on ties).
    pub fn nodes_with_room(&self) -> Vec<(u32, u64)> {
        let mut out: Vec<(u32, u64)> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.up && n.free_bytes >= self.granularity)
            .map(|(&id, n)| (id, n.free_bytes))
            .collect();
        out.sort_by_key(|&(id, free)| (std::cmp::Reverse(free), id));
        out
    }

    /// Return `[base, base + len)` from `owner` to the free pool. The range
    /// may be part of a grant (the grant is split) or span several of the
    /// owner's adjacent grants, but must be aligned and wholly granted to
    /// `owner`; otherwise nothing changes. Returns the released pieces.
    pub fn release(&mut self, owner: &str, base: u64, len: u64) -> Result<Vec<Grant>, ExtentError> {
        if len == 0 {
            return Err(ExtentError::ZeroSize);
        }
        let g = self.granularity;
        if !base.is_multiple_of(g) || !len.is_multiple_of(g) {
            return Err(ExtentError::Unaligned {
                base,
                len,
                granularity: g,
            });
        }
        let not_granted = || ExtentError::NotGranted {
            base,
            len,
            owner: owner.to_string(),
        };
        let end = base.checked_add(len).ok_or_else(not_granted)?;

        // Validate full coverage by `owner` before touching anything.
        let mut pieces: Vec<(u64, Extent)> = Vec::new();
        let mut cursor = base;
        let first = self
            .grants
            .range(..=base)
            .next_back()
            .map(|(&b, _)| b)
            .ok_or_else(not_granted)?;
        for (&eb, e) in self.grants.range(first..) {
            if cursor >= end {
                break;
            }
            if eb > cursor || eb + e.len <= cursor || e.owner != owner {
                return Err(not_granted());
            }
            pieces.push((eb, e.clone()));
            cursor = eb + e.len;
        }
        if cursor < end {
            return Err(not_granted());
        }

        let mut out = Vec::with_capacity(pieces.len());
        for (eb, e) in pieces {
            let ee = eb + e.len;
            let rb = eb.max(base);
            let re = ee.min(end);
            self.grants.remove(&eb);
            if eb < rb {
                self.grants.insert(
                    eb,
                    Extent {
                        len: rb - eb,
                        ..e.clone()
                    },
                );
            }
            if re < ee {
                self.grants.insert(
                    re,
                    Extent {
                        len: ee - re,
                        ..e.clone()
                    },
                );
            }
            if let Some(n) = self.nodes.get_mut(&e.node) {
                n.free_insert(rb, re - rb);
                n.free_bytes += re - rb;
            }
            out.push(Grant {
                node: e.node,
                base: rb,
                len: re - rb,
                owner: e.owner,
            });
        }
        Ok(out)
    }

    /// Release everything `owner` holds (e.g. a compute node that left).
    pub fn release_owner(&mut self, owner: &str) -> Vec<Grant> {
        let mine: Vec<(u64, u64)> = self
            .grants
            .iter()
            .filter(|(_, e)| e.owner == owner)
            .map(|(&b, e)| (b, e.len))
            .collect();
        let mut out = Vec::with_capacity(mine.len());
        for (b, l) in mine {
            // Each entry is wholly the owner's, so this cannot fail.
            if let Ok(mut r) = self.release(owner, b, l) {
                out.append(&mut r);
            }
        }
        out
    }

    /// Every granted extent, sorted by base.
    pub fn grants(&self) -> Vec<Grant> {
        self.grants
            .iter()
            .map(|(&base, e)| Grant {
                node: e.node,
                base,
                len: e.len,
                owner: e.owner.clone(),
            })
            .collect()
    }

    /// The extents held by `owner`, sorted by base.
    pub fn grants_of(&self, owner: &str) -> Vec<Grant> {
        self.grants()
            .into_iter()
            .filter(|g| g.owner == owner)
            .collect()
    }

    /// The extent containing `addr`, if granted.
    pub fn grant_at(&self, addr: u64) -> Option<Grant> {
        let (&base, e) = self.grants.range(..=addr).next_back()?;
        (addr < base + e.len).then(|| Grant {
            node: e.node,
            base,
            len: e.len,
            owner: e.owner.clone(),
        })
    }

    /// Owner of the byte at `addr`, if granted.
    pub fn owner_of(&self, addr: u64) -> Option<&str> {
        let (&base, e) = self.grants.range(..=addr).next_back()?;
        (addr < base + e.len).then_some(e.owner.as_str())
    }

    /// Memory node whose range contains `addr`.
    pub fn node_of(&self, addr: u64) -> Option<u32> {
        self.nodes
            .iter()
            .find(|(_, n)| n.base <= addr && addr < n.end())
            .map(|(&id, _)| id)
    }

    /// Free bytes of `node` (0 for an unknown node), whether up or down.
    pub fn free_bytes(&self, node: u32) -> u64 {
        self.nodes.get(&node).map_or(0, |n| n.free_bytes)
    }

    /// Granted bytes of `node` (0 for an unknown node).
    pub fn granted_bytes(&self, node: u32) -> u64 {
        self.nodes
            .get(&node)
            .map_or(0, |n| n.capacity - n.free_bytes)
    }

    /// Free `(base, len)` ranges of `node`, sorted by base.
    pub fn free_ranges(&self, node: u32) -> Vec<(u64, u64)> {
        self.nodes
            .get(&node)
            .map_or_else(Vec::new, |n| n.free.iter().map(|(&b, &l)| (b, l)).collect())
    }

    /// Free bytes over all up nodes: the most one `allocate` can grant.
    pub fn available_bytes(&self) -> u64 {
        self.nodes
            .values()
            .filter(|n| n.up)
            .map(|n| n.free_bytes)
            .sum()
    }

    /// Every registered node, by id.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        self.nodes
            .iter()
            .map(|(&node, n)| NodeInfo {
                node,
                base: n.base,
                capacity: n.capacity,
                up: n.up,
                free: n.free_bytes,
                granted: n.capacity - n.free_bytes,
            })
            .collect()
    }

    /// Insert an extent, merging with an adjacent extent of the same owner on
    /// the same node (keeps the tree one entry per contiguous run).
    fn grants_insert_merge(&mut self, mut base: u64, mut len: u64, node: u32, owner: &str) {
        if let Some((&pb, p)) = self.grants.range(..base).next_back()
            && pb + p.len == base
            && p.node == node
            && p.owner == owner
        {
            len += p.len;
            self.grants.remove(&pb);
            base = pb;
        }
        let next = base + len;
        if let Some(n) = self.grants.get(&next)
            && n.node == node
            && n.owner == owner
        {
            len += n.len;
            self.grants.remove(&next);
        }
        self.grants.insert(
            base,
            Extent {
                len,
                node,
                owner: owner.to_string(),
            },
        );
    }

    /// Re-grant a recorded extent (state load): it must be aligned, inside
    /// one node and entirely free.
    fn insert_grant(&mut self, g: Grant) -> Result<(), ExtentError> {
        let gran = self.granularity;
        if g.len == 0 {
            return Err(ExtentError::ZeroSize);
        }
        if !g.base.is_multiple_of(gran) || !g.len.is_multiple_of(gran) {
            return Err(ExtentError::Unaligned {
                base: g.base,
                len: g.len,
                granularity: gran,
            });
        }
        let outside = || ExtentError::GrantOutsideNode {
            base: g.base,
            len: g.len,
            owner: g.owner.clone(),
        };
        let end = g.base.checked_add(g.len).ok_or_else(outside)?;
        let n = self
            .nodes
            .get_mut(&g.node)
            .ok_or(ExtentError::UnknownNode { node: g.node })?;
        if g.base < n.base || end > n.end() {
            return Err(outside());
        }
        let (&fb, &fl) = n.free.range(..=g.base).next_back().ok_or_else(|| {
            ExtentError::Corrupt(format!("grant at {:#x} overlaps another grant", g.base))
        })?;
        if fb + fl < end {
            return Err(ExtentError::Corrupt(format!(
                "grant at {:#x} overlaps another grant",
                g.base
            )));
        }
        n.free.remove(&fb);
        if fb < g.base {
            n.free.insert(fb, g.base - fb);
        }
        if end < fb + fl {
            n.free.insert(end, fb + fl - end);
        }
        n.free_bytes -= g.len;
        self.grants_insert_merge(g.base, g.len, g.node, &g.owner);
        Ok(())
    }

    /// Recompute every invariant from scratch: grants lie inside their node,
    /// never overlap each other or free space; free + granted == capacity;
    /// free ranges and same-owner extents are fully coalesced; all aligned.
    pub fn check_invariants(&self) -> Result<(), ExtentError> {
        let bad = |m: String| Err(ExtentError::Corrupt(m));
        let g = self.granularity;
        let mut granted: BTreeMap<u32, u64> = BTreeMap::new();
        let mut prev: Option<(u64, &Extent)> = None;
        for (&b, e) in &self.grants {
            let Some(n) = self.nodes.get(&e.node) else {
                return bad(format!("grant at {b:#x} names unknown node {}", e.node));
            };
            if e.len == 0 || b % g != 0 || e.len % g != 0 {
                return bad(format!(
                    "grant at {b:#x} len {:#x} is empty or unaligned",
                    e.len
                ));
            }
            if b < n.base || b + e.len > n.end() {
                return bad(format!("grant at {b:#x} lies outside node {}", e.node));
            }
            if let Some((pb, p)) = prev {
                if pb + p.len > b {
                    return bad(format!("grants at {pb:#x} and {b:#x} overlap"));
                }
                if pb + p.len == b && p.node == e.node && p.owner == e.owner {
                    return bad(format!("grants at {pb:#x} and {b:#x} were not coalesced"));
                }
            }
            *granted.entry(e.node).or_default() += e.len;
            prev = Some((b, e));
        }
        for (&id, n) in &self.nodes {
            let mut sum = 0u64;
            let mut last_end: Option<u64> = None;
            for (&b, &l) in &n.free {
                if l == 0 || b % g != 0 || l % g != 0 || b < n.base || b + l > n.end() {
                    return bad(format!("node {id} free range {b:#x}+{l:#x} is invalid"));
                }
                if let Some(le) = last_end
                    && le >= b
                {
                    return bad(format!(
                        "node {id} free ranges overlap or are not coalesced at {b:#x}"
                    ));
                }
                if let Some((gb, ge)) = self.grants.range(..b + l).next_back()
                    && gb + ge.len > b
                {
                    return bad(format!(
                        "node {id} free range {b:#x} overlaps grant {gb:#x}"
                    ));
                }
                last_end = Some(b + l);
                sum += l;
            }
            if sum != n.free_bytes {
                return bad(format!(
                    "node {id} free counter {} != free ranges {sum}",
                    n.free_bytes
                ));
            }
            let gsum = granted.get(&id).copied().unwrap_or(0);
            if sum + gsum != n.capacity {
                return bad(format!(
                    "node {id}: free {sum} + granted {gsum} != capacity {}",
                    n.capacity
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = DEFAULT_GRANULARITY;

    fn grant(node: u32, base: u64, len: u64, owner: &str) -> Grant {
        Grant {
            node,
            base,
            len,
            owner: owner.to_string(),
        }
    }

    /// Three nodes of 4 granules each, back to back.
    fn three_nodes() -> ExtentTree {
        let mut t = ExtentTree::new(G);
        for id in 0..3 {
            let base = t.next_free_base();
            t.add_node(id, base, 4 * G).unwrap();
        }
        t
    }

    #[test]
    fn add_node_rounds_and_validates() {
        let mut t = ExtentTree::new(G);
        assert_eq!(t.next_free_base(), 0);
        t.add_node(0, 0, 1000 << 20).unwrap(); // 1000 MiB -> 7 granules
        assert_eq!(t.free_ranges(0), vec![(0, 7 * G)]);
        assert_eq!(t.free_bytes(0), 7 * G);
        assert_eq!(t.granted_bytes(0), 0);
        assert_eq!(t.next_free_base(), 7 * G);
        assert!(matches!(
            t.add_node(1, 5 * G, G),
            Err(ExtentError::NodeOverlap { other: 0, .. })
        ));
        assert!(matches!(
            t.add_node(1, 7 * G + 1, G),
            Err(ExtentError::Unaligned { .. })
        ));
        assert!(matches!(
            t.add_node(1, 7 * G, G - 1),
            Err(ExtentError::CapacityTooSmall { .. })
        ));
        let top = (u64::MAX / G) * G;
        assert!(matches!(
            t.add_node(1, top, 2 * G),
            Err(ExtentError::AddressOverflow { .. })
        ));
        // Same range again (a restarted memnode) is fine and marks it up.
        t.set_up(0, false);
        t.add_node(0, 0, 7 * G + 5).unwrap();
        assert_eq!(t.is_up(0), Some(true));
        assert!(matches!(
            t.add_node(0, 0, 3 * G),
            Err(ExtentError::NodeExists { node: 0, .. })
        ));
        t.set_up(42, false); // unknown: ignored
        assert_eq!(t.is_up(42), None);
        assert_eq!(t.node_of(7 * G - 1), Some(0));
        assert_eq!(t.node_of(7 * G), None);
    }

    #[test]
    fn placement_names() {
        for p in [Placement::RoundRobin, Placement::LeastLoaded] {
            assert_eq!(p.to_string().parse::<Placement>(), Ok(p));
            assert_eq!(serde_json::to_string(&p).unwrap(), format!("\"{p}\""));
        }
        let err = "random".parse::<Placement>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown placement \"random\"; expected round-robin or least-loaded"
        );
    }

    #[test]
    fn zero_granularity_and_sizes() {
        assert_eq!(
            ExtentTree::try_new(0).unwrap_err(),
            ExtentError::ZeroGranularity
        );
        assert_eq!(ExtentTree::new(0).granularity(), DEFAULT_GRANULARITY);
        let mut t = three_nodes();
        assert_eq!(
            t.allocate("a", 0, Placement::RoundRobin),
            Err(ExtentError::ZeroSize)
        );
        assert_eq!(t.release("a", 0, 0), Err(ExtentError::ZeroSize));
        assert!(matches!(
            t.allocate("a", u64::MAX, Placement::RoundRobin),
            Err(ExtentError::NoCapacity { .. })
        ));
    }

    #[test]
    fn round_robin_stripes_after_last_node_and_coalesces() {
        let mut t = three_nodes();
        let n1 = 4 * G;
        let n2 = 8 * G;
        // 1 byte rounds up to one granule on node 0.
        assert_eq!(
            t.allocate("a", 1, Placement::RoundRobin).unwrap(),
            vec![grant(0, 0, G, "a")]
        );
        // Next 4 chunks: node 1, 2, 0, 1. Node 1's two chunks are contiguous.
        assert_eq!(
            t.allocate("b", 4 * G, Placement::RoundRobin).unwrap(),
            vec![
                grant(0, G, G, "b"),
                grant(1, n1, 2 * G, "b"),
                grant(2, n2, G, "b")
            ]
        );
        // The cursor continues after node 1.
        assert_eq!(
            t.allocate("c", G, Placement::RoundRobin).unwrap(),
            vec![grant(2, n2 + G, G, "c")]
        );
        // A down node is skipped.
        t.set_up(0, false);
        assert_eq!(
            t.allocate("c", 2 * G, Placement::RoundRobin).unwrap(),
            vec![grant(1, n1 + 2 * G, G, "c"), grant(2, n2 + 2 * G, G, "c")]
        );
        // Same owner, adjacent, same node: one entry in the tree.
        assert_eq!(
            t.grants_of("c"),
            vec![grant(1, n1 + 2 * G, G, "c"), grant(2, n2 + G, 2 * G, "c")]
        );
        assert_eq!(t.owner_of(n2 + G + 5), Some("c"));
        assert_eq!(t.owner_of(n2 + 3 * G), None);
        t.check_invariants().unwrap();
    }

    #[test]
    fn round_robin_skips_full_nodes() {
        let mut t = ExtentTree::new(G);
        t.add_node(0, 0, G).unwrap();
        t.add_node(1, G, 3 * G).unwrap();
        assert_eq!(
            t.allocate("a", 4 * G, Placement::RoundRobin).unwrap(),
            vec![grant(0, 0, G, "a"), grant(1, G, 3 * G, "a")]
        );
        // One merged extent? No: different nodes never merge.
        assert_eq!(t.grants().len(), 2);
    }

    #[test]
    fn least_loaded_picks_most_free_lowest_id_on_ties() {
        let mut t = ExtentTree::new(G);
        t.add_node(0, 0, 4 * G).unwrap();
        t.add_node(1, 4 * G, 2 * G).unwrap();
        t.add_node(2, 6 * G, 4 * G).unwrap();
        // Free 4,2,4 -> node 0; 3,2,4 -> node 2; 3,2,3 -> node 0.
        assert_eq!(
            t.allocate("a", 3 * G, Placement::LeastLoaded).unwrap(),
            vec![grant(0, 0, 2 * G, "a"), grant(2, 6 * G, G, "a")]
        );
        // Free 2,2,3 -> 2; 2,2,2 -> 0; 1,2,2 -> 1; 1,1,2 -> 2.
        assert_eq!(
            t.allocate("b", 4 * G, Placement::LeastLoaded).unwrap(),
            vec![
                grant(0, 2 * G, G, "b"),
                grant(1, 4 * G, G, "b"),
                grant(2, 7 * G, 2 * G, "b")
            ]
        );
        assert_eq!(
            (t.free_bytes(0), t.free_bytes(1), t.free_bytes(2)),
            (G, G, G)
        );
    }

    #[test]
    fn no_capacity_changes_nothing() {
        let mut t = three_nodes();
        t.allocate("a", 5 * G, Placement::RoundRobin).unwrap();
        t.set_up(2, false);
        let before = t.clone();
        // Nodes 0 and 1 hold 2 granules each of "a"; node 2's 3 free granules
        // do not count while it is down.
        let err = t.allocate("b", 5 * G, Placement::LeastLoaded).unwrap_err();
        assert_eq!(
            err,
            ExtentError::NoCapacity {
                requested: 5 * G,
                free: 4 * G
            }
        );
        assert_eq!(t, before);
        assert!(
            err.to_string()
                .contains("requested 671088640 bytes, only 536870912 bytes free"),
            "{err}"
        );
    }

    #[test]
    fn release_splits_and_coalesces() {
        let mut t = ExtentTree::new(G);
        t.add_node(7, 0, 8 * G).unwrap();
        assert_eq!(
            t.allocate("a", 4 * G, Placement::RoundRobin).unwrap(),
            vec![grant(7, 0, 4 * G, "a")]
        );
        assert_eq!(t.release("a", G, G).unwrap(), vec![grant(7, G, G, "a")]);
        assert_eq!(
            t.grants(),
            vec![grant(7, 0, G, "a"), grant(7, 2 * G, 2 * G, "a")]
        );
        assert_eq!(t.free_ranges(7), vec![(G, G), (4 * G, 4 * G)]);
        // Already free, wrong owner, unaligned: refused, nothing changes.
        let before = t.clone();
        assert!(matches!(
            t.release("a", G, G),
            Err(ExtentError::NotGranted { .. })
        ));
        assert!(matches!(
            t.release("a", 0, 2 * G),
            Err(ExtentError::NotGranted { .. })
        ));
        assert!(matches!(
            t.release("b", 0, G),
            Err(ExtentError::NotGranted { .. })
        ));
        assert!(matches!(
            t.release("a", 1, G),
            Err(ExtentError::Unaligned { .. })
        ));
        assert!(matches!(
            t.release("a", 0, G + 1),
            Err(ExtentError::Unaligned { .. })
        ));
        assert!(matches!(
            t.release("a", u64::MAX / G * G, 2 * G),
            Err(ExtentError::NotGranted { .. })
        ));
        assert_eq!(t, before);
        // Freed space is reused lowest-address first.
        assert_eq!(
            t.allocate("b", 2 * G, Placement::RoundRobin).unwrap(),
            vec![grant(7, G, G, "b"), grant(7, 4 * G, G, "b")]
        );
        t.release("b", G, G).unwrap();
        t.release("a", 0, G).unwrap();
        assert_eq!(t.free_ranges(7), vec![(0, 2 * G), (5 * G, 3 * G)]);
        assert_eq!(t.release_owner("a"), vec![grant(7, 2 * G, 2 * G, "a")]);
        assert_eq!(t.release_owner("b"), vec![grant(7, 4 * G, G, "b")]);
        assert_eq!(t.free_ranges(7), vec![(0, 8 * G)]);
        assert!(t.grants().is_empty());
        assert!(t.release_owner("nobody").is_empty());
    }

    #[test]
    fn release_may_span_adjacent_extents_across_nodes() {
        let mut t = ExtentTree::new(G);
        t.add_node(0, 0, 2 * G).unwrap();
        t.add_node(1, 2 * G, 2 * G).unwrap();
        assert_eq!(
            t.allocate("a", 4 * G, Placement::RoundRobin).unwrap(),
            vec![grant(0, 0, 2 * G, "a"), grant(1, 2 * G, 2 * G, "a")]
        );
        assert_eq!(
            t.release("a", G, 2 * G).unwrap(),
            vec![grant(0, G, G, "a"), grant(1, 2 * G, G, "a")]
        );
        assert_eq!(
            t.grants(),
            vec![grant(0, 0, G, "a"), grant(1, 3 * G, G, "a")]
        );
        t.check_invariants().unwrap();
    }

    #[test]
    fn remove_node_only_when_empty() {
        let mut t = three_nodes();
        t.allocate("a", G, Placement::RoundRobin).unwrap();
        assert_eq!(
            t.remove_node(0),
            Err(ExtentError::NodeBusy {
                node: 0,
                granted: G
            })
        );
        assert_eq!(t.remove_node(9), Err(ExtentError::UnknownNode { node: 9 }));
        t.remove_node(1).unwrap();
        assert_eq!(t.nodes().len(), 2);
    }

    #[test]
    fn serde_round_trip_and_corrupt_state_is_refused() {
        let mut t = three_nodes();
        t.allocate("a", 5 * G, Placement::RoundRobin).unwrap();
        t.allocate("b", 3 * G, Placement::LeastLoaded).unwrap();
        t.release("a", 4 * G, G).unwrap();
        t.set_up(1, false);
        let json = serde_json::to_string(&t).unwrap();
        let back: ExtentTree = serde_json::from_str(&json).unwrap();
        assert_eq!(back, t);
        // The cursor survives, so placement continues identically.
        let (mut a, mut b) = (t.clone(), back);
        assert_eq!(
            a.allocate("c", 2 * G, Placement::RoundRobin),
            b.allocate("c", 2 * G, Placement::RoundRobin)
        );

        let overlapping = r#"{"granularity":134217728,
            "nodes":[{"node":0,"base":0,"capacity":536870912,"up":true}],
            "grants":[{"node":0,"base":0,"len":268435456,"owner":"a"},
                      {"node":0,"base":134217728,"len":134217728,"owner":"b"}]}"#;
        let err = serde_json::from_str::<ExtentTree>(overlapping).unwrap_err();
        assert!(err.to_string().contains("overlaps another grant"), "{err}");
        let outside = r#"{"granularity":134217728,
            "nodes":[{"node":0,"base":0,"capacity":536870912,"up":true}],
            "grants":[{"node":0,"base":536870912,"len":134217728,"owner":"a"}]}"#;
        assert!(
            serde_json::from_str::<ExtentTree>(outside)
                .unwrap_err()
                .to_string()
                .contains("outside")
        );
        let zero = r#"{"granularity":0,"nodes":[],"grants":[]}"#;
        assert!(serde_json::from_str::<ExtentTree>(zero).is_err());
    }
}

/// Property tests against a naive per-granule model that applies the same
/// placement rules one chunk at a time.
#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Alloc {
            owner: usize,
            chunks: u64,
            shave: u64,
            placement: Placement,
        },
        Release {
            owner: usize,
            start: u64,
            chunks: u64,
        },
        ReleasePart {
            pick: usize,
            off: u64,
            chunks: u64,
        },
        ReleaseOwner {
            owner: usize,
        },
        SetUp {
            node: usize,
            up: bool,
        },
        RoundTrip,
    }

    fn op() -> impl Strategy<Value = Op> {
        let placement = prop_oneof![Just(Placement::RoundRobin), Just(Placement::LeastLoaded)];
        prop_oneof![
            4 => (0..3usize, 1..14u64, 0..u64::MAX, placement)
                .prop_map(|(owner, chunks, shave, placement)| Op::Alloc { owner, chunks, shave, placement }),
            2 => (0..3usize, 0..50u64, 1..6u64).prop_map(|(owner, start, chunks)| Op::Release { owner, start, chunks }),
            3 => (0..64usize, 0..8u64, 1..8u64).prop_map(|(pick, off, chunks)| Op::ReleasePart { pick, off, chunks }),
            1 => (0..3usize).prop_map(|owner| Op::ReleaseOwner { owner }),
            1 => (0..4usize, any::<bool>()).prop_map(|(node, up)| Op::SetUp { node, up }),
            1 => Just(Op::RoundTrip),
        ]
    }

    /// (id, gap before in chunks, capacity in chunks, extra bytes below one chunk)
    fn nodes() -> impl Strategy<Value = Vec<(u32, u64, u64, u64)>> {
        prop::collection::vec((0..3u32, 0..3u64, 1..12u64, 0..u64::MAX), 1..5).prop_map(|v| {
            let mut id = 0;
            v.into_iter()
                .map(|(step, gap, cap, extra)| {
                    id += step + 1;
                    (id, gap, cap, extra)
                })
                .collect()
        })
    }

    const OWNERS: [&str; 3] = ["a", "b", "c"];

    struct MNode {
        id: u32,
        first: u64, // first chunk index
        chunks: u64,
        up: bool,
    }

    /// Ownership of every granule, by global chunk index.
    struct Model {
        nodes: Vec<MNode>,
        owner: BTreeMap<u64, usize>,
        rr_last: Option<u32>,
    }

    impl Model {
        fn free_chunks(&self, n: &MNode) -> u64 {
            n.chunks
                - (n.first..n.first + n.chunks)
                    .filter(|c| self.owner.contains_key(c))
                    .count() as u64
        }

        fn node_of(&self, c: u64) -> Option<&MNode> {
            self.nodes
                .iter()
                .find(|n| n.first <= c && c < n.first + n.chunks)
        }

        fn alloc(&mut self, owner: usize, chunks: u64, placement: Placement) -> Option<Vec<u64>> {
            let free: u64 = self
                .nodes
                .iter()
                .filter(|n| n.up)
                .map(|n| self.free_chunks(n))
                .sum();
            if chunks > free {
                return None;
            }
            let mut taken = Vec::new();
            for _ in 0..chunks {
                let ups: Vec<usize> = (0..self.nodes.len())
                    .filter(|&i| self.nodes[i].up && self.free_chunks(&self.nodes[i]) > 0)
                    .collect();
                let pick = match placement {
                    Placement::RoundRobin => *ups
                        .iter()
                        .find(|&&i| self.rr_last.is_none_or(|l| self.nodes[i].id > l))
                        .unwrap_or(&ups[0]),
                    Placement::LeastLoaded => {
                        let best = ups
                            .iter()
                            .map(|&i| self.free_chunks(&self.nodes[i]))
                            .max()
                            .unwrap();
                        *ups.iter()
                            .find(|&&i| self.free_chunks(&self.nodes[i]) == best)
                            .unwrap()
                    }
                };
                let n = &self.nodes[pick];
                let c = (n.first..n.first + n.chunks)
                    .find(|c| !self.owner.contains_key(c))
                    .unwrap();
                if placement == Placement::RoundRobin {
                    self.rr_last = Some(n.id);
                }
                self.owner.insert(c, owner);
                taken.push(c);
            }
            taken.sort_unstable();
            Some(taken)
        }

        fn release(&mut self, owner: usize, start: u64, chunks: u64) -> bool {
            if (start..start + chunks).any(|c| self.owner.get(&c) != Some(&owner)) {
                return false;
            }
            for c in start..start + chunks {
                self.owner.remove(&c);
            }
            true
        }
    }

    fn expand(grants: &[Grant], g: u64) -> Vec<u64> {
        let mut v: Vec<u64> = grants
            .iter()
            .flat_map(|gr| (gr.base / g)..(gr.end() / g))
            .collect();
        v.sort_unstable();
        v
    }

    fn check(t: &ExtentTree, m: &Model, g: u64) -> Result<(), TestCaseError> {
        t.check_invariants()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let grants = t.grants();
        // No overlap between grants (sorted, so neighbours suffice).
        for w in grants.windows(2) {
            prop_assert!(w[0].end() <= w[1].base, "overlap {:?}", w);
        }
        let mut want: BTreeMap<u64, usize> = BTreeMap::new();
        for gr in &grants {
            let o = OWNERS.iter().position(|&o| o == gr.owner).unwrap();
            for c in gr.base / g..gr.end() / g {
                prop_assert!(want.insert(c, o).is_none());
                prop_assert_eq!(m.node_of(c).map(|n| n.id), Some(gr.node));
            }
        }
        prop_assert_eq!(&want, &m.owner);
        for n in &m.nodes {
            let cap = n.chunks * g;
            prop_assert_eq!(t.free_bytes(n.id), m.free_chunks(n) * g);
            prop_assert_eq!(t.free_bytes(n.id) + t.granted_bytes(n.id), cap);
            let listed: u64 = grants
                .iter()
                .filter(|gr| gr.node == n.id)
                .map(|gr| gr.len)
                .sum();
            prop_assert_eq!(listed, t.granted_bytes(n.id));
            let free_listed: u64 = t.free_ranges(n.id).iter().map(|r| r.1).sum();
            prop_assert_eq!(free_listed, t.free_bytes(n.id));
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn random_sequences_match_model(
            gsel in 0..3usize,
            layout in nodes(),
            ops in prop::collection::vec(op(), 1..60),
        ) {
            let g = [1u64, 4096, DEFAULT_GRANULARITY][gsel];
            let mut t = ExtentTree::new(g);
            let mut m = Model { nodes: Vec::new(), owner: BTreeMap::new(), rr_last: None };
            let mut next = 0u64;
            for &(id, gap, chunks, extra) in &layout {
                let first = next + gap;
                t.add_node(id, first * g, chunks * g + extra % g).unwrap();
                m.nodes.push(MNode { id, first, chunks, up: true });
                next = first + chunks;
                prop_assert_eq!(t.next_free_base(), next * g);
            }
            check(&t, &m, g)?;

            for op in ops {
                match op {
                    Op::Alloc { owner, chunks, shave, placement } => {
                        let size = chunks * g - shave % g;
                        let before = t.clone();
                        let got = t.allocate(OWNERS[owner], size, placement);
                        match m.alloc(owner, chunks, placement) {
                            Some(taken) => {
                                let got = got.map_err(|e| TestCaseError::fail(e.to_string()))?;
                                prop_assert_eq!(expand(&got, g), taken);
                                // Returned grants are coalesced runs, sorted.
                                for w in got.windows(2) {
                                    prop_assert!(w[0].end() < w[1].base || w[0].node != w[1].node);
                                }
                                prop_assert!(got.iter().all(|gr| gr.owner == OWNERS[owner]));
                            }
                            None => {
                                let is_no_capacity = matches!(got, Err(ExtentError::NoCapacity { .. }));
                                prop_assert!(is_no_capacity);
                                prop_assert_eq!(&t, &before);
                            }
                        }
                    }
                    Op::Release { owner, start, chunks } => {
                        let before = t.clone();
                        let got = t.release(OWNERS[owner], start * g, chunks * g);
                        if m.release(owner, start, chunks) {
                            let got = got.map_err(|e| TestCaseError::fail(e.to_string()))?;
                            prop_assert_eq!(expand(&got, g), (start..start + chunks).collect::<Vec<_>>());
                        } else {
                            let is_not_granted = matches!(got, Err(ExtentError::NotGranted { .. }));
                            prop_assert!(is_not_granted);
                            prop_assert_eq!(&t, &before);
                        }
                    }
                    Op::ReleasePart { pick, off, chunks } => {
                        let grants = t.grants();
                        if grants.is_empty() {
                            continue;
                        }
                        let gr = &grants[pick % grants.len()];
                        let n = gr.len / g;
                        let off = off % n;
                        let chunks = chunks.min(n - off);
                        let owner = OWNERS.iter().position(|&o| o == gr.owner).unwrap();
                        let start = gr.base / g + off;
                        let got = t.release(&gr.owner, start * g, chunks * g);
                        prop_assert!(m.release(owner, start, chunks));
                        prop_assert_eq!(got.map(|v| expand(&v, g)), Ok((start..start + chunks).collect::<Vec<_>>()));
                    }
                    Op::ReleaseOwner { owner } => {
                        let got = t.release_owner(OWNERS[owner]);
                        let mine: Vec<u64> = m.owner.iter().filter(|e| *e.1 == owner).map(|e| *e.0).collect();
                        for c in &mine {
                            m.owner.remove(c);
                        }
                        prop_assert_eq!(expand(&got, g), mine);
                    }
                    Op::SetUp { node, up } => {
                        let node = node % m.nodes.len();
                        m.nodes[node].up = up;
                        t.set_up(m.nodes[node].id, up);
                    }
                    Op::RoundTrip => {
                        let json = serde_json::to_string(&t).unwrap();
                        let back: ExtentTree = serde_json::from_str(&json).unwrap();
                        prop_assert_eq!(&back, &t);
                        t = back;
                    }
                }
                check(&t, &m, g)?;
            }

            // Releasing everything leaves exactly one free range per node.
            for o in OWNERS {
                t.release_owner(o);
            }
            prop_assert!(t.grants().is_empty());
            for n in &m.nodes {
                prop_assert_eq!(t.free_ranges(n.id), vec![(n.first * g, n.chunks * g)]);
            }
        }

        #[test]
        fn large_requests_are_fast_and_exact(chunks in 1..2_000_000u64, placement in prop_oneof![Just(Placement::RoundRobin), Just(Placement::LeastLoaded)]) {
            // Granularity 1 with millions of granules: the batched placement
            // must still split bytes exactly as per-chunk placement would.
            let mut t = ExtentTree::new(1);
            t.add_node(0, 0, 1_000_000).unwrap();
            t.add_node(1, 1_000_000, 700_000).unwrap();
            t.add_node(2, 1_700_000, 300_001).unwrap();
            match t.allocate("a", chunks, placement) {
                Ok(got) => {
                    prop_assert!(got.len() <= 3);
                    let per: Vec<u64> = (0..3).map(|n| t.granted_bytes(n)).collect();
                    prop_assert_eq!(per.iter().sum::<u64>(), chunks);
                    if placement == Placement::RoundRobin {
                        // Even stripes until a node fills up.
                        let mut left = chunks;
                        let mut room = [1_000_000u64, 700_000, 300_001];
                        let mut exp = [0u64; 3];
                        while left > 0 {
                            for k in 0..3 {
                                if left > 0 && room[k] > 0 { room[k] -= 1; exp[k] += 1; left -= 1; }
                            }
                        }
                        prop_assert_eq!(per, exp.to_vec());
                    }
                }
                Err(e) => prop_assert_eq!(e, ExtentError::NoCapacity { requested: chunks, free: 2_000_001 }),
            }
        }
    }
}
