//! Erasure-coded far memory: `--redundancy rs:K+M`, the cheaper option to
//! replicas (as Hydra and Carbink do), surviving any M lost memory nodes
//! for (K+M)/K times the bytes instead of M+1 times.
//!
//! # Layout
//!
//! Every 4 KiB page is split into K data chunks of `4096 / K` bytes, from
//! which M parity chunks of the same size are computed (Reed-Solomon over
//! GF(2^16), the `reed-solomon-simd` crate). The K+M chunks of a page go to
//! the K+M shards of a stripe: granules of the controller's granularity on
//! K+M distinct memory nodes, asked for as one `Alloc` with `replicas`
//! K+M and `parity` M, so the controller places them like copies (distinct
//! nodes with room, all or nothing, a capability each). Shard `i` is the
//! extent's primary for `i = 0`, its mirror `i - 1` after that; shards
//! `0..K` hold data, `K..K+M` parity.
//!
//! A stripe of granule `g` holds `K * g` logical bytes, which the runtime
//! addresses at a logical base the cluster hands out in a range of its
//! own, from [`LOGICAL_BASE`] (2^62) up, far above any global address of
//! the rack, so the two never collide. Logical page `p` of a stripe lives
//! at offset `p * 4096 / K` in each of its shards; a run of pages is a run
//! of bytes in every shard, so reading or writing n pages takes one
//! request per shard.
//!
//! # Striping without parity
//!
//! `--redundancy stripe:K` is the same layout with no parity shards: each
//! page's K chunks on K distinct memory nodes, read and written in
//! parallel, so a stream moves over K paths at once (K times one path's
//! bandwidth when each path is the limit). It keeps one copy of every byte:
//! a lost shard fails reads of its stripe with the node's error, never
//! zeros, and nothing rebuilds it.
//!
//! # Reads and writes
//!
//! A read fetches the K data chunks of its pages from their shards in
//! parallel (live, healthy shards first; shards of nodes in a run of
//! failures last); when one fails, parity chunks are fetched in its place
//! and the missing data chunks reconstructed. Only when fewer than K
//! shards can be had is the page lost: the error is that of the node
//! ([`NetError::NodeDown`], [`NetError::NodeLost`]), never wrong data.
//!
//! A write of whole pages encodes them and writes every chunk to its live
//! shard, all in flight at once; it succeeds when every live shard
//! acknowledged and at least K did (a shard whose node is dropped on the
//! way is left behind: its node is never read again by this client). A
//! write of part of a page, and `write_lines` whose lines do not cover a
//! whole page, read the page first, apply the bytes, and write the whole
//! page again. Every page operation (read, write, read-modify-write) holds
//! a lock of its page (one of [`PAGE_LOCKS`], by page), so a read never
//! decodes chunks of two different writes and concurrent writers of one
//! page never undo each other.
//!
//! # Repair
//!
//! A shard whose memory node is dropped (lost or down; see the parent
//! module's slots) is made again, as [`Cluster::repair`] does for copies
//! (see `repair`): the controller grants a granule on a node none of the
//! stripe's live shards use ([`farmem_wire::Msg::Remirror`] of a live
//! shard's granule), the stripe is swapped for one naming the new shard as
//! being filled (every write reaches it, no read uses it), the shard's
//! chunks are rebuilt run by run under the page locks, from K live shards,
//! and the stripe is swapped once more for one that reads it. The old
//! shard's granule is kept with the stripe and given back with it.
//!
//! Operations look their stripe up again once they hold their page locks,
//! so an operation that began before a swap and waits for a page the
//! rebuild holds never writes that page to the shards of the old stripe.

mod io;
mod repair;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use farmem_wire::{Extent, Msg, Placement};
use parking_lot::{Mutex, MutexGuard, RwLock};

use super::Cluster;
use crate::NetError;

/// First logical address of erasure-coded stripes.
pub const LOGICAL_BASE: u64 = 1 << 62;

/// The unit of coding: one page.
pub(super) const PAGE: usize = 4096;

/// Locks serialising operations on one page (a page takes lock
/// `page number % PAGE_LOCKS`).
const PAGE_LOCKS: usize = 1024;

/// How each far byte is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redundancy {
    /// `n` full copies on distinct memory nodes.
    Replicas(u8),
    /// Reed-Solomon: each page in `k` data and `m` parity chunks on `k + m`
    /// distinct memory nodes; survives any `m` of them lost.
    ReedSolomon { k: u8, m: u8 },
    /// Each page in `k` chunks on `k` distinct memory nodes, no parity:
    /// `k` paths in parallel, one copy.
    Striped { k: u8 },
}

/// A `--redundancy` that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RedundancyError {
    #[error("redundancy `{0}`: expected rs:K+M, as rs:4+2, or stripe:K, as stripe:2")]
    Syntax(String),
    #[error(
        "redundancy rs:{k}+{m}: K must divide a 4096-byte page into chunks of an even number of bytes (1, 2, 4, ..., 128), M be at least 1, and K+M at most 255"
    )]
    Unsupported { k: u64, m: u64 },
    #[error(
        "redundancy stripe:{0}: K must be at least 2 and divide a 4096-byte page into chunks of an even number of bytes (2, 4, ..., 128)"
    )]
    UnsupportedStripe(u64),
}

/// Whether `k` chunks of a page each have an even number of bytes.
fn splits_page(k: u64) -> bool {
    k >= 1 && (PAGE as u64).is_multiple_of(k) && (PAGE as u64 / k).is_multiple_of(2)
}

impl Redundancy {
    /// Checks `rs:k+m` can be used: `4096 / k` an even number of bytes,
    /// at least one parity shard, at most 255 shards.
    pub fn reed_solomon(k: u64, m: u64) -> Result<Self, RedundancyError> {
        let ok = m >= 1 && k + m <= 255 && splits_page(k);
        match (u8::try_from(k), u8::try_from(m)) {
            (Ok(k), Ok(m)) if ok => Ok(Self::ReedSolomon { k, m }),
            _ => Err(RedundancyError::Unsupported { k, m }),
        }
    }

    /// Checks `stripe:k` can be used: at least two paths, `4096 / k` an
    /// even number of bytes.
    pub fn striped(k: u64) -> Result<Self, RedundancyError> {
        match u8::try_from(k) {
            Ok(k8) if k >= 2 && splits_page(k) => Ok(Self::Striped { k: k8 }),
            _ => Err(RedundancyError::UnsupportedStripe(k)),
        }
    }

    /// (data, parity) shards of each stripe; `None` for copies.
    pub fn shards(&self) -> Option<(u8, u8)> {
        match *self {
            Self::Replicas(_) => None,
            Self::ReedSolomon { k, m } => Some((k, m)),
            Self::Striped { k } => Some((k, 0)),
        }
    }
}

impl std::str::FromStr for Redundancy {
    type Err = RedundancyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let syntax = || RedundancyError::Syntax(s.to_string());
        if let Some(k) = s.strip_prefix("stripe:") {
            return Self::striped(k.trim().parse::<u64>().map_err(|_| syntax())?);
        }
        let (k, m) = s
            .strip_prefix("rs:")
            .and_then(|km| km.split_once('+'))
            .ok_or_else(syntax)?;
        let k = k.trim().parse::<u64>().map_err(|_| syntax())?;
        let m = m.trim().parse::<u64>().map_err(|_| syntax())?;
        Self::reed_solomon(k, m)
    }
}

impl std::fmt::Display for Redundancy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Replicas(n) => write!(f, "{n} replicas"),
            Self::ReedSolomon { k, m } => write!(f, "rs:{k}+{m}"),
            Self::Striped { k } => write!(f, "stripe:{k}"),
        }
    }
}

/// One shard of a stripe: a granule on a memory node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Shard {
    /// The shard's slot (see the parent module).
    pub node: u32,
    pub base: u64,
}

/// K+M shards holding `len` logical bytes from `base`.
#[derive(Debug, Clone)]
pub(super) struct Stripe {
    pub base: u64,
    pub len: u64,
    pub k: usize,
    pub m: usize,
    /// Bytes of each page in each data shard, in page order: `4096 / K`
    /// each under Reed-Solomon; under stripe:K each path's share.
    pub chunks: Vec<usize>,
    /// Bytes of each shard.
    pub shard_len: u64,
    pub shards: Vec<Shard>,
    /// The shard being rebuilt: written, not read.
    pub filling: Option<usize>,
    /// Granules of shards replaced by rebuilt ones, given back with the
    /// stripe.
    pub retired: Vec<u64>,
}

impl Stripe {
    /// Bytes of a page in shard `i` (a parity shard: as each data shard,
    /// all of them the same under Reed-Solomon).
    pub fn chunk_len(&self, i: usize) -> usize {
        self.chunks.get(i).copied().unwrap_or(PAGE / self.k.max(1))
    }

    /// Where data shard `i`'s bytes of a page start in the page.
    pub fn chunk_start(&self, i: usize) -> usize {
        self.chunks[..i.min(self.chunks.len())].iter().sum()
    }

    /// The most bytes of a page any shard holds: a shard of `shard_len`
    /// bytes holds `shard_len / widest` pages.
    pub fn widest(&self) -> usize {
        self.chunks.iter().copied().max().unwrap_or(PAGE).max(1)
    }
}

/// How stripe:K splits each page over its K paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StripeSplit {
    /// Each path's share follows its bandwidth, measured when the stripe
    /// is allocated ([`farmem_policy::stripe`]).
    #[default]
    Measured,
    /// The same share each.
    Even,
}

/// Bytes each path's bandwidth is measured with when a stripe is made.
const PROBE_BYTES: u64 = 512 << 10;
/// Reads in flight while measuring.
const PROBE_READ: u64 = 64 << 10;
/// Rounds of measuring; each path keeps its best.
const PROBE_ROUNDS: usize = 3;

/// The erasure-coded stripes a cluster holds.
pub(super) struct Stripes {
    /// (k, m) of later allocations; `None`: replicas.
    code: Mutex<Option<(u8, u8)>>,
    split: Mutex<StripeSplit>,
    map: RwLock<BTreeMap<u64, Arc<Stripe>>>,
    next: AtomicU64,
    locks: Box<[Mutex<()>]>,
}

impl Default for Stripes {
    fn default() -> Self {
        Self {
            code: Mutex::new(None),
            split: Mutex::new(StripeSplit::default()),
            map: RwLock::new(BTreeMap::new()),
            next: AtomicU64::new(LOGICAL_BASE),
            locks: (0..PAGE_LOCKS).map(|_| Mutex::new(())).collect(),
        }
    }
}

impl Stripes {
    /// Locks pages [first, first+n) of `stripe`, in lock order.
    pub fn lock_pages(&self, stripe: &Stripe, first: u64, n: usize) -> Vec<MutexGuard<'_, ()>> {
        let page0 = stripe.base / PAGE as u64 + first;
        let mut slots: Vec<usize> = (0..n as u64)
            .map(|i| ((page0 + i) % PAGE_LOCKS as u64) as usize)
            .collect();
        slots.sort_unstable();
        slots.dedup();
        slots.into_iter().map(|i| self.locks[i].lock()).collect()
    }
}

/// Whether `addr` is in the logical range of erasure-coded stripes.
pub(super) fn is_logical(addr: u64) -> bool {
    addr >= LOGICAL_BASE
}

impl Cluster {
    /// Every later allocation keeps its bytes as `r` says: replicas
    /// (see [`Self::set_replicas`]) or Reed-Solomon stripes (see the
    /// module docs of `ec`).
    pub fn set_redundancy(&self, r: Redundancy) {
        match r {
            Redundancy::Replicas(n) => {
                *self.stripes.code.lock() = None;
                self.set_replicas(n);
            }
            coded => {
                *self.stripes.code.lock() = coded.shards();
                self.set_replicas(1);
            }
        }
    }

    /// The redundancy of later allocations.
    pub fn redundancy(&self) -> Redundancy {
        match *self.stripes.code.lock() {
            Some((k, 0)) => Redundancy::Striped { k },
            Some((k, m)) => Redundancy::ReedSolomon { k, m },
            None => Redundancy::Replicas(self.replicas.load(Ordering::Relaxed)),
        }
    }

    /// How later stripe:K allocations split their pages.
    pub fn set_stripe_split(&self, split: StripeSplit) {
        *self.stripes.split.lock() = split;
    }

    /// Allocates `size` logical bytes as rs:k+m stripes: `size / k` bytes
    /// (rounded up to granules) on each of k+m distinct nodes; stripe:K
    /// (m = 0) splits pages by measured bandwidth and asks again while the
    /// stripes made hold less than `size`. Returns the logical extents (base
    /// and len in the logical range; node and address those of shard 0, no
    /// capability or mirrors of their own).
    pub(super) fn allocate_stripes(
        &self,
        size: u64,
        placement: Placement,
        k: u8,
        m: u8,
    ) -> Result<Vec<Extent>, NetError> {
        let mut out: Vec<Extent> = Vec::new();
        let mut held = 0;
        while held < size {
            match self.allocate_stripe_sets(size - held, placement, k, m) {
                Ok(more) if more.iter().any(|e| e.len > 0) => {
                    held += more.iter().map(|e| e.len).sum::<u64>();
                    out.extend(more);
                }
                Ok(empty) => {
                    for x in out.iter().chain(&empty) {
                        let _ = self.release_stripes(x.base, x.len);
                    }
                    return Err(NetError::Routing(format!(
                        "stripe:{k} granules of this rack hold no whole page of the split"
                    )));
                }
                Err(e) => {
                    for x in &out {
                        let _ = self.release_stripes(x.base, x.len);
                    }
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    /// One `Alloc` of sets of k+m shards for `size` logical bytes, each set
    /// made a stripe.
    fn allocate_stripe_sets(
        &self,
        size: u64,
        placement: Placement,
        k: u8,
        m: u8,
    ) -> Result<Vec<Extent>, NetError> {
        let ctl = self
            .controller
            .as_ref()
            .ok_or_else(|| NetError::Routing("a standalone cluster cannot allocate".into()))?;
        let shards = k
            .checked_add(m)
            .ok_or_else(|| NetError::Routing(format!("rs:{k}+{m} has more than 255 shards")))?;
        let extents = ctl.alloc_coded(size.div_ceil(u64::from(k.max(1))), placement, shards, m)?;
        if let Some(e) = extents
            .iter()
            .find(|e| e.mirrors.len() + 1 != usize::from(shards))
        {
            self.release_grants(&extents);
            return Err(NetError::Routing(format!(
                "the controller answered rs:{k}+{m} with a set of {} shards of {} bytes",
                e.mirrors.len() + 1,
                e.len
            )));
        }
        let mut out = Vec::new();
        for (n, e) in extents.iter().enumerate() {
            let made = self.make_stripe(e, usize::from(k), usize::from(m));
            match made {
                Ok(x) => out.push(x),
                Err(err) => {
                    for x in &out {
                        let _ = self.release_stripes(x.base, x.len);
                    }
                    self.release_grants(&extents[n..]);
                    return Err(err);
                }
            }
        }
        Ok(out)
    }

    /// Connects to the shards of the set `e` and makes them a stripe.
    fn make_stripe(&self, e: &Extent, k: usize, m: usize) -> Result<Extent, NetError> {
        let node = e.node;
        let e = self.adopt_copies(e.clone())?;
        let shards: Vec<Shard> = std::iter::once(Shard {
            node: e.node,
            base: e.base,
        })
        .chain(e.mirrors.iter().map(|s| Shard {
            node: s.node,
            base: s.base,
        }))
        .collect();
        let chunks = match (m, *self.stripes.split.lock()) {
            (0, StripeSplit::Measured) if k > 1 => {
                let bandwidths = self.measure_paths(&shards[..k], e.len);
                farmem_policy::stripe::SplitConfig::default().split(&bandwidths, PAGE)
            }
            _ => vec![PAGE / k.max(1); k],
        };
        let mut stripe = Stripe {
            base: 0,
            len: 0,
            k,
            m,
            chunks,
            shard_len: e.len,
            shards,
            filling: None,
            retired: Vec::new(),
        };
        // As many pages as the shard holding most of each fits.
        let len = e.len / stripe.widest() as u64 * PAGE as u64;
        let base = self.stripes.next.fetch_add(len, Ordering::SeqCst);
        (stripe.base, stripe.len) = (base, len);
        self.stripes.map.write().insert(base, Arc::new(stripe));
        Ok(Extent {
            node,
            addr: e.addr.clone(),
            base,
            len,
            cap: None,
            mirrors: Vec::new(),
        })
    }

    /// Each shard's path bandwidth in bytes per second, measured one path
    /// at a time with reads of its (fresh) granule, several in flight, the
    /// best of [`PROBE_ROUNDS`] rounds (a busy host only ever slows a
    /// measurement, and one slowed on the fast path would split the stripe
    /// evenly); 0 for a path that failed.
    fn measure_paths(&self, shards: &[Shard], shard_len: u64) -> Vec<f64> {
        let mut best = vec![0.0f64; shards.len()];
        for _ in 0..PROBE_ROUNDS {
            for (b, m) in best
                .iter_mut()
                .zip(self.measure_paths_once(shards, shard_len))
            {
                *b = b.max(m);
            }
        }
        best
    }

    /// One round of [`Self::measure_paths`].
    fn measure_paths_once(&self, shards: &[Shard], shard_len: u64) -> Vec<f64> {
        let bytes = PROBE_BYTES.min(shard_len);
        shards
            .iter()
            .map(|shard| {
                let start = std::time::Instant::now();
                let sent: Vec<_> = (0..bytes.div_ceil(PROBE_READ))
                    .map(|i| {
                        let len = PROBE_READ.min(bytes - i * PROBE_READ) as u32;
                        let read = Msg::Read {
                            addr: shard.base + i * PROBE_READ,
                            len,
                        };
                        self.submit_to(shard.node, &read)
                    })
                    .collect();
                let ok = sent
                    .into_iter()
                    .all(|t| t.and_then(crate::Ticket::wait).is_ok());
                let secs = start.elapsed().as_secs_f64();
                if ok && secs > 0.0 {
                    bytes as f64 / secs
                } else {
                    0.0
                }
            })
            .collect()
    }

    /// Gives the granules of `extents` (and their mirrors) back, as far as
    /// the controller takes them.
    fn release_grants(&self, extents: &[Extent]) {
        if let Some(ctl) = &self.controller {
            for e in extents {
                let _ = ctl.release(e.base, e.len);
                for m in &e.mirrors {
                    let _ = ctl.release(m.base, e.len);
                }
            }
        }
    }

    /// The erasure-coded stripes held: (logical base, logical len).
    pub fn stripes(&self) -> Vec<(u64, u64)> {
        let map = self.stripes.map.read();
        map.values().map(|s| (s.base, s.len)).collect()
    }

    /// Bytes of each page in each data shard of the stripe at `base`.
    pub fn stripe_chunks(&self, base: u64) -> Option<Vec<usize>> {
        self.stripes.map.read().get(&base).map(|s| s.chunks.clone())
    }

    /// The stripe holding logical `addr`.
    pub(super) fn stripe_at(&self, addr: u64) -> Result<Arc<Stripe>, NetError> {
        let map = self.stripes.map.read();
        match map.range(..=addr).next_back() {
            Some((_, s)) if addr - s.base < s.len => Ok(s.clone()),
            _ => Err(NetError::Routing(format!(
                "{addr:#x} is not inside an erasure-coded stripe held by this client"
            ))),
        }
    }

    /// Gives the stripes inside logical [base, base+len) back to the
    /// controller, every shard of each; a stripe only partly inside is
    /// refused (stripes are released whole).
    pub(super) fn release_stripes(&self, base: u64, len: u64) -> Result<(), NetError> {
        let end = base.saturating_add(len);
        let inside: Vec<Arc<Stripe>> = {
            let map = self.stripes.map.read();
            let mut inside = Vec::new();
            for s in map
                .values()
                .filter(|s| s.base < end && s.base + s.len > base)
            {
                if s.base < base || s.base + s.len > end {
                    return Err(NetError::Routing(format!(
                        "[{base:#x}, +{len}) splits the stripe [{:#x}, +{}): stripes are released whole",
                        s.base, s.len
                    )));
                }
                inside.push(s.clone());
            }
            inside
        };
        for s in inside {
            if let Some(ctl) = &self.controller {
                for shard in &s.shards {
                    ctl.release(shard.base, s.shard_len)?;
                }
                for &base in &s.retired {
                    // Best effort: a lost granule may be gone already.
                    let _ = ctl.release(base, s.shard_len);
                }
            }
            self.stripes.map.write().remove(&s.base);
        }
        Ok(())
    }

    /// Bytes of stripe shards this client holds in slot `node`.
    pub(super) fn shards_on(&self, node: u32) -> u64 {
        let map = self.stripes.map.read();
        map.values()
            .map(|s| s.shards.iter().filter(|x| x.node == node).count() as u64 * s.shard_len)
            .sum()
    }
}
