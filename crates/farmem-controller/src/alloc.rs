//! Handing out memory: the table's placement of granules and their copies
//! on distinct memory nodes, the lost ranges it keeps, and the requests
//! that allocate (`Alloc`) or add a copy (`Remirror`).

use std::collections::BTreeMap;

use farmem_net::server::Refusal;
use farmem_wire::ErrorCode;

use crate::answered::{Answer, Answered};
use crate::extent::{ExtentTree, Grant, Placement};
use crate::lost::LostRanges;
use crate::{NodeRecord, Shared, Table};

impl Table {
    /// Node `node`'s record, or the refusal a message about an unknown
    /// node gets.
    pub(crate) fn registered(&mut self, node: u32) -> Result<&mut NodeRecord, Refusal> {
        self.nodes.get_mut(&node).ok_or_else(|| {
            Refusal::new(
                ErrorCode::NotFound,
                format!("node {node} is not registered"),
            )
        })
    }

    /// Marks `node` down: no new grants go to it until it heartbeats.
    pub(crate) fn set_down(&mut self, node: u32) {
        if let Some(n) = self.nodes.get_mut(&node) {
            n.up = false;
        }
        self.tree.set_up(node, false);
    }

    pub(crate) fn new(granularity: u64) -> Self {
        Self {
            tree: ExtentTree::new(granularity),
            nodes: BTreeMap::new(),
            next_node: 0,
            lost: LostRanges::default(),
            answered: Answered::default(),
        }
    }

    /// Carves `size` bytes for `owner` as placed by `placement`, each
    /// granule of it copied on `replicas - 1` more nodes (the ones with the
    /// most room, never the granule's own): the primary grants, each with
    /// its mirrors. All or nothing.
    pub(crate) fn allocate(
        &mut self,
        owner: &str,
        size: u64,
        placement: Placement,
        replicas: usize,
    ) -> Result<Vec<(Grant, Vec<Grant>)>, String> {
        let with_room = self.tree.nodes_with_room().len();
        if replicas > with_room {
            return Err(format!(
                "{replicas} copies need {replicas} memory nodes with free memory; {with_room} have"
            ));
        }
        let primaries = self
            .tree
            .allocate(owner, size, placement)
            .map_err(|e| e.to_string())?;
        if replicas <= 1 {
            return Ok(primaries.into_iter().map(|g| (g, Vec::new())).collect());
        }
        let g = self.tree.granularity();
        let mut sets: Vec<(Grant, Vec<Grant>)> = Vec::new();
        for p in &primaries {
            for base in (p.base..p.end()).step_by(g as usize) {
                let chunk = Grant {
                    base,
                    len: g,
                    ..p.clone()
                };
                let mut mirrors: Vec<Grant> = Vec::new();
                for (node, _) in self.tree.nodes_with_room() {
                    if mirrors.len() + 1 == replicas {
                        break;
                    }
                    if node != chunk.node && mirrors.iter().all(|m| m.node != node) {
                        mirrors.extend(self.tree.allocate_granule_on(owner, node));
                    }
                }
                let short = mirrors.len() + 1 < replicas;
                sets.push((chunk, mirrors));
                if short {
                    for m in sets.iter().flat_map(|(_, ms)| ms) {
                        let _ = self.tree.release(owner, m.base, m.len);
                    }
                    for p in &primaries {
                        let _ = self.tree.release(owner, p.base, p.len);
                    }
                    return Err(format!(
                        "no room for {replicas} copies of {size} bytes on distinct memory nodes"
                    ));
                }
            }
        }
        Ok(sets)
    }

    /// Frees `released` in the lost set too: no longer anyone's.
    pub(crate) fn forget_lost(&mut self, released: &[Grant]) {
        for g in released {
            self.lost.remove(g.base, g.len);
        }
    }

    /// Marks every grant on `node` lost; returns how many and their bytes.
    pub(crate) fn lose_node(&mut self, node: u32) -> (usize, u64) {
        let grants: Vec<Grant> = self
            .tree
            .grants()
            .into_iter()
            .filter(|g| g.node == node)
            .collect();
        for g in &grants {
            self.lost.add(g.base, g.len);
        }
        (grants.len(), grants.iter().map(|g| g.len).sum())
    }
}

/// Placements tried for one request, each without the memory nodes that
/// did not take a grant of the one before.
const PLACEMENTS: usize = 3;

impl Shared {
    /// Grants `size` bytes to `owner`, each byte on `replicas` distinct
    /// memory nodes, tells the nodes (which zero them) before answering,
    /// and hands the owner a capability for every copy. A repeated
    /// `request` gets what it got before (see [`crate::answered`]).
    pub(crate) fn alloc(
        &self,
        owner: &str,
        size: u64,
        placement: Placement,
        replicas: usize,
        request: u64,
    ) -> Result<Vec<farmem_wire::Extent>, Refusal> {
        self.place_until_taken(owner, "grant", || {
            self.place(owner, size, placement, replicas, request)
        })
    }

    /// The answer to `owner`'s `request` (see [`Self::alloc`]).
    fn place(
        &self,
        owner: &str,
        size: u64,
        placement: Placement,
        replicas: usize,
        request: u64,
    ) -> Result<Answer, Refusal> {
        self.answer(owner, request, |t| {
            let sets = t
                .allocate(owner, size, placement, replicas)
                .map_err(|e| Refusal::new(ErrorCode::NoCapacity, e))?;
            let stamped = |g: Grant| (g, fresh_stamp());
            let sets = sets
                .into_iter()
                .map(|(p, ms)| std::iter::once(p).chain(ms).map(stamped).collect())
                .collect();
            Ok(Answer { request, sets })
        })
    }

    /// One more copy of `owner`'s granule at `base`, on a node not in
    /// `avoid` (the nodes its copies are or were on): the client lost a
    /// copy and fills this one from a survivor. A repeated `request` gets
    /// what it got before.
    pub(crate) fn remirror(
        &self,
        owner: &str,
        base: u64,
        len: u64,
        avoid: &[u32],
        request: u64,
    ) -> Result<farmem_wire::Extent, Refusal> {
        let mut extents = self.place_until_taken(owner, "copy's grant", || {
            self.place_copy(owner, base, len, avoid, request)
        })?;
        extents
            .pop()
            .ok_or_else(|| Refusal::new(ErrorCode::Internal, "a copy granted nothing".to_string()))
    }

    /// The answer to `owner`'s `request` (see [`Self::remirror`]).
    fn place_copy(
        &self,
        owner: &str,
        base: u64,
        len: u64,
        avoid: &[u32],
        request: u64,
    ) -> Result<Answer, Refusal> {
        self.answer(owner, request, |t| {
            let g = t.tree.granularity();
            if len != g || !base.is_multiple_of(g) || t.tree.owner_of(base) != Some(owner) {
                return Err(Refusal::new(
                    ErrorCode::NotOwner,
                    format!("`{owner}` holds no granule [{base:#x}, +{len}) to copy"),
                ));
            }
            let node = t
                .tree
                .nodes_with_room()
                .into_iter()
                .map(|(node, _)| node)
                .find(|node| !avoid.contains(node));
            let grant = node.and_then(|node| t.tree.allocate_granule_on(owner, node));
            let Some(grant) = grant else {
                return Err(Refusal::new(
                    ErrorCode::NoCapacity,
                    format!("no memory node up outside {avoid:?} has room for another copy"),
                ));
            };
            Ok(Answer {
                request,
                sets: vec![vec![(grant, fresh_stamp())]],
            })
        })
    }

    /// `owner`'s answer to `request`: the one it got before (see
    /// [`crate::answered`]), or the grants `fresh` makes in the table,
    /// recorded and saved (fenced) before any memory node hears of them: a
    /// leader that lost the election must not zero what another granted.
    fn answer(
        &self,
        owner: &str,
        request: u64,
        fresh: impl FnOnce(&mut Table) -> Result<Answer, Refusal>,
    ) -> Result<Answer, Refusal> {
        let mut t = self.table.lock();
        if let Some(answer) = t.answered.find(owner, request) {
            return again(owner, answer, &t.tree);
        }
        let answer = fresh(&mut t)?;
        let Table { answered, tree, .. } = &mut *t;
        answered.record(owner, answer.clone(), tree);
        self.save(&t)?;
        Ok(answer)
    }

    /// Places grants with `place` and hands them out; a memory node that
    /// does not take its grant (killed, and not yet found silent) is
    /// marked down, the grants undone, and they are placed again without
    /// it, up to [`PLACEMENTS`] times.
    fn place_until_taken(
        &self,
        owner: &str,
        what: &str,
        place: impl Fn() -> Result<Answer, Refusal>,
    ) -> Result<Vec<farmem_wire::Extent>, Refusal> {
        let mut attempt = 1;
        // Why the last placement failed: the cause to name should none
        // be left to try.
        let mut untaken: Option<Refusal> = None;
        loop {
            let answer = match (place(), untaken) {
                (Ok(answer), _) => answer,
                (Err(e), None) => return Err(e),
                (Err(e), Some(mut before)) => {
                    before.message = format!("{}; and placed again: {}", before.message, e.message);
                    return Err(before);
                }
            };
            match self.hand_out(owner, &answer, what) {
                Ok(extents) => return Ok(extents),
                Err((Some(node), refusal)) if attempt < PLACEMENTS => {
                    self.suspect(node, &refusal.message)?;
                    untaken = Some(refusal);
                    attempt += 1;
                }
                Err((_, refusal)) => return Err(refusal),
            }
        }
    }

    /// Marks `node` down (until its next heartbeat): it did not take a grant.
    fn suspect(&self, node: u32, why: &str) -> Result<(), Refusal> {
        tracing::warn!("{why}; marking memory node {node} down until it heartbeats");
        let mut t = self.table.lock();
        t.set_down(node);
        self.save(&t)
    }

    /// Tells the memory nodes of `answer`'s grants (which zero them), then
    /// answers with its extents and a capability for every copy. A node
    /// that does not take its grant undoes the whole answer.
    fn hand_out(
        &self,
        owner: &str,
        answer: &Answer,
        what: &str,
    ) -> Result<Vec<farmem_wire::Extent>, (Option<u32>, Refusal)> {
        let (all, stamps) = answer.grants();
        if let Err((node, e)) = self.push_fresh(&all, &stamps) {
            let mut t = self.table.lock();
            for g in &all {
                let _ = t.tree.release(&g.owner, g.base, g.len);
            }
            t.answered.forget(owner, answer.request);
            self.save(&t).map_err(|r| (None, r))?;
            return Err((
                Some(node),
                Refusal::new(
                    ErrorCode::Internal,
                    format!("memory node {node} did not take the {what}: {e}"),
                ),
            ));
        }
        let t = self.table.lock();
        let copy = |(g, stamp): &(Grant, u64)| farmem_wire::Mirror {
            node: g.node,
            addr: t
                .nodes
                .get(&g.node)
                .map(|n| n.addr.clone())
                .unwrap_or_default(),
            base: g.base,
            cap: Some(self.issue_cap(&t, g, *stamp)),
        };
        Ok(answer
            .sets
            .iter()
            .filter_map(|set| {
                let (first, rest) = set.split_first()?;
                let p = copy(first);
                Some(farmem_wire::Extent {
                    node: p.node,
                    addr: p.addr,
                    base: p.base,
                    len: first.0.len,
                    cap: p.cap,
                    mirrors: rest.iter().map(copy).collect(),
                })
            })
            .collect())
    }
}

/// A grant's stamp; never 0, which a memory node reads as "keep the stamp".
fn fresh_stamp() -> u64 {
    rand::random::<u64>() | 1
}

/// A repeated request's answer, if its grants are still `owner`'s (its
/// memory nodes are told again: the first leader may have died first).
fn again(owner: &str, answer: &Answer, tree: &ExtentTree) -> Result<Answer, Refusal> {
    if !answer.still_held(owner, tree) {
        return Err(Refusal::new(
            ErrorCode::NotOwner,
            format!(
                "request {:#x} of `{owner}` was answered, and its grants taken back since",
                answer.request
            ),
        ));
    }
    tracing::info!(
        "`{owner}` asked again (request {:#x}): answered as before",
        answer.request
    );
    Ok(answer.clone())
}
