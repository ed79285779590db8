//! Resource Manager: remote memory obtained from the slab source in large
//! batches, carved into the extents that back regions. Asking for a batch
//! never happens on the fault path: eager regions take their extents when
//! they are created, lazy ones a chunk at a time when a page is first
//! written back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex};

use crate::error::RuntimeError;
use crate::store::SlabSource;

const PAGE: u64 = farmem_core::PAGE_SIZE;

pub(crate) struct ResourceManager {
    source: Arc<dyn SlabSource>,
    batch: u64,
    /// Free remote extents, in the order they were received.
    free: Mutex<Vec<(u64, u64)>>,
    /// A background top-up is asked for or under way.
    refilling: AtomicBool,
    /// Wakes the `farmem-slabs` thread ([`Self::serve`]).
    asked: Mutex<bool>,
    asked_cv: Condvar,
}

impl ResourceManager {
    pub(crate) fn new(source: Arc<dyn SlabSource>, batch: u64) -> Self {
        Self {
            source,
            batch,
            free: Mutex::new(Vec::new()),
            refilling: AtomicBool::new(false),
            asked: Mutex::new(false),
            asked_cv: Condvar::new(),
        }
    }

    /// Keeps at least half a batch in reserve by asking the slab source on
    /// the `farmem-slabs` thread ([`Self::serve`]), so the next region need
    /// not wait for it. Without that thread, the next region asks itself.
    pub(crate) fn top_up(&self) {
        let have: u64 = self.free.lock().iter().map(|e| e.1).sum();
        if have >= self.batch / 2 || self.refilling.swap(true, Ordering::SeqCst) {
            return;
        }
        self.wake();
    }

    /// Wakes the `farmem-slabs` thread: to top up, or to see `shutdown`.
    pub(crate) fn wake(&self) {
        *self.asked.lock() = true;
        self.asked_cv.notify_one();
    }

    /// The `farmem-slabs` thread's loop, until `shutdown`: tops up when
    /// asked. One thread for the runtime's life, started with the others:
    /// a thread spawned per top-up registered its thread-local destructors
    /// with the C library's `calloc` whenever it started, which under the
    /// preload shim is the program's allocator, whose arenas are far. On
    /// the signal fault path it faulted there while the evictor waited for
    /// its slabs (redis hung at 166% CPU).
    pub(crate) fn serve(&self, shutdown: &AtomicBool) {
        loop {
            {
                let mut asked = self.asked.lock();
                while !*asked && !shutdown.load(Ordering::SeqCst) {
                    self.asked_cv
                        .wait_for(&mut asked, std::time::Duration::from_millis(100));
                }
                *asked = false;
            }
            if shutdown.load(Ordering::SeqCst) {
                return;
            }
            if self.refilling.load(Ordering::SeqCst) {
                match self.source.allocate(self.batch) {
                    Ok(extents) => self.add(extents),
                    // Not fatal: the next region asks synchronously and reports.
                    Err(e) => tracing::warn!("background slab allocation failed: {e}"),
                }
                self.refilling.store(false, Ordering::SeqCst);
            }
        }
    }

    /// Adds slabs from the source, keeping only their page-aligned parts.
    fn add(&self, extents: Vec<(u64, u64)>) {
        let mut free = self.free.lock();
        for (base, len) in extents {
            // A region maps whole pages onto remote pages, so a slab that
            // is not page-aligned cannot back one; only its aligned middle is used.
            let start = base.div_ceil(PAGE) * PAGE;
            let end = (base.saturating_add(len)) / PAGE * PAGE;
            if end > start {
                free.push((start, end - start));
            } else {
                tracing::warn!(base, len, "slab too small to hold an aligned page; skipped");
            }
        }
    }

    /// Remote extents covering exactly `size` bytes (a multiple of the page size).
    pub(crate) fn take(&self, size: u64) -> Result<Vec<(u64, u64)>, RuntimeError> {
        let have: u64 = self.free.lock().iter().map(|e| e.1).sum();
        if have < size {
            let want = (size - have).max(self.batch).div_ceil(PAGE) * PAGE;
            self.add(self.source.allocate(want)?);
        }
        let mut free = self.free.lock();
        let have: u64 = free.iter().map(|e| e.1).sum();
        if have < size {
            return Err(RuntimeError::Config(format!(
                "slab source returned {have} usable bytes, region needs {size}"
            )));
        }
        let mut out = Vec::new();
        let mut need = size;
        while need > 0 {
            let (base, len) = free[0];
            if len <= need {
                out.push((base, len));
                free.remove(0);
                need -= len;
            } else {
                out.push((base, need));
                free[0] = (base + need, len - need);
                need = 0;
            }
        }
        Ok(out)
    }

    /// One contiguous remote extent of `size` bytes (a multiple of the page
    /// size), for a lazy region's chunk. Free pieces too small are skipped,
    /// not split across chunks, so a chunk maps with one base address.
    pub(crate) fn take_contiguous(&self, size: u64) -> Result<u64, RuntimeError> {
        let carve = |free: &mut Vec<(u64, u64)>| {
            let i = free.iter().position(|e| e.1 >= size)?;
            let (base, len) = free[i];
            if len == size {
                free.remove(i);
            } else {
                free[i] = (base + size, len - size);
            }
            Some(base)
        };
        // Bound first: a guard in the `if let` scrutinee would live through the
        // body, and top_up locks `free` again.
        let carved = carve(&mut self.free.lock());
        if let Some(base) = carved {
            self.top_up();
            return Ok(base);
        }
        self.add(self.source.allocate(size.max(self.batch))?);
        let carved = carve(&mut self.free.lock());
        let base = carved.ok_or_else(|| {
            RuntimeError::Config(format!(
                "slab source returned no contiguous {size} bytes for a chunk"
            ))
        })?;
        self.top_up();
        Ok(base)
    }

    /// Fetches one batch ahead of demand.
    pub(crate) fn prefill(&self) -> Result<(), RuntimeError> {
        if self.free.lock().is_empty() {
            self.add(self.source.allocate(self.batch)?);
        }
        Ok(())
    }
}

/// Region offset to remote address: the slab table of one region.
#[derive(Debug, Clone)]
pub(crate) struct SlabTable {
    /// (region offset, remote base, len), sorted by offset, contiguous.
    entries: Vec<(u64, u64, u64)>,
}

impl SlabTable {
    pub(crate) fn new(extents: &[(u64, u64)]) -> Self {
        let mut off = 0;
        let entries = extents
            .iter()
            .map(|&(base, len)| {
                let e = (off, base, len);
                off += len;
                e
            })
            .collect();
        Self { entries }
    }

    pub(crate) fn remote(&self, offset: u64) -> Option<u64> {
        let i = self.entries.partition_point(|e| e.0 <= offset);
        let (off, base, len) = *self.entries.get(i.checked_sub(1)?)?;
        (offset - off < len).then(|| base + (offset - off))
    }

    pub(crate) fn extents(&self) -> Vec<(u64, u64)> {
        self.entries.iter().map(|e| (e.1, e.2)).collect()
    }

    pub(crate) fn len(&self) -> u64 {
        self.entries.iter().map(|e| e.2).sum()
    }
}

/// Bytes of a lazy region that one remote extent backs.
pub(crate) const CHUNK: u64 = 2 << 20;
const UNBACKED: u64 = u64::MAX;

/// Region offset to remote address, backed chunk by chunk when a page is
/// first written back: a process that reserves a large far heap takes
/// remote memory only for what it spills, so many processes can share a
/// rack. A chunk never backed holds zeros by definition (its pages were
/// never written back), so it is never read.
pub(crate) struct LazyTable {
    len: u64,
    /// Remote base per chunk, [`UNBACKED`] until a page of it is written back.
    chunks: Box<[AtomicU64]>,
    /// Serializes backing, so a chunk is backed once.
    backing: Mutex<()>,
}

impl LazyTable {
    pub(crate) fn new(len: u64) -> Self {
        Self {
            len,
            chunks: (0..len.div_ceil(CHUNK))
                .map(|_| AtomicU64::new(UNBACKED))
                .collect(),
            backing: Mutex::new(()),
        }
    }

    pub(crate) fn remote(&self, offset: u64) -> Option<u64> {
        let base = self
            .chunks
            .get((offset / CHUNK) as usize)?
            .load(Ordering::Acquire);
        (base != UNBACKED && offset < self.len).then(|| base + offset % CHUNK)
    }

    /// The remote address of `offset`, backing its chunk first if needed.
    pub(crate) fn remote_or_back(
        &self,
        offset: u64,
        rm: &Arc<ResourceManager>,
    ) -> Result<u64, RuntimeError> {
        if let Some(r) = self.remote(offset) {
            return Ok(r);
        }
        if offset >= self.len {
            return Err(RuntimeError::Config(format!(
                "offset {offset} is outside the region"
            )));
        }
        let _g = self.backing.lock();
        if let Some(r) = self.remote(offset) {
            return Ok(r);
        }
        let i = offset / CHUNK;
        // The last chunk holds only what is left of the region.
        let size = CHUNK.min(self.len - i * CHUNK);
        let base = rm.take_contiguous(size)?;
        self.chunks[i as usize].store(base, Ordering::Release);
        Ok(base + offset % CHUNK)
    }

    /// Backs every chunk, then lists the extents in region order.
    pub(crate) fn back_all(&self, rm: &Arc<ResourceManager>) -> Result<SlabTable, RuntimeError> {
        let mut extents: Vec<(u64, u64)> = Vec::new();
        for i in 0..self.chunks.len() as u64 {
            let base = self.remote_or_back(i * CHUNK, rm)?;
            let len = CHUNK.min(self.len - i * CHUNK);
            match extents.last_mut() {
                Some(last) if last.0 + last.1 == base => last.1 += len,
                _ => extents.push((base, len)),
            }
        }
        Ok(SlabTable::new(&extents))
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Bytes of remote memory backing the region so far.
    pub(crate) fn backed_bytes(&self) -> u64 {
        (0..self.chunks.len() as u64)
            .filter(|&i| self.chunks[i as usize].load(Ordering::Acquire) != UNBACKED)
            .map(|i| CHUNK.min(self.len - i * CHUNK))
            .sum()
    }
}

/// The remote memory behind a region.
pub(crate) enum Backing {
    /// Every page's remote address fixed when the region was made.
    Eager(SlabTable),
    /// Chunks taken as pages are first written back.
    Lazy(LazyTable),
}

impl Backing {
    pub(crate) fn remote(&self, offset: u64) -> Option<u64> {
        match self {
            Self::Eager(t) => t.remote(offset),
            Self::Lazy(t) => t.remote(offset),
        }
    }

    /// The remote address `offset` is written back to, backing it if lazy.
    pub(crate) fn remote_or_back(
        &self,
        offset: u64,
        rm: &Arc<ResourceManager>,
    ) -> Result<u64, RuntimeError> {
        match self {
            Self::Eager(t) => t.remote(offset).ok_or_else(|| {
                RuntimeError::Config(format!("offset {offset} is outside the region"))
            }),
            Self::Lazy(t) => t.remote_or_back(offset, rm),
        }
    }

    /// The extents of the whole region, in order (a lazy region is backed
    /// whole first).
    pub(crate) fn extents(
        &self,
        rm: &Arc<ResourceManager>,
    ) -> Result<Vec<(u64, u64)>, RuntimeError> {
        match self {
            Self::Eager(t) => Ok(t.extents()),
            Self::Lazy(t) => Ok(t.back_all(rm)?.extents()),
        }
    }

    pub(crate) fn backed_bytes(&self) -> u64 {
        match self {
            Self::Eager(t) => t.len(),
            Self::Lazy(t) => t.backed_bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemStore;
    use proptest::prelude::*;

    proptest! {
        /// Regions carved from batches are exact, disjoint, page-aligned,
        /// and every page translates into the extent that holds it.
        #[test]
        fn carving_is_exact_and_disjoint(sizes in prop::collection::vec(1u64..40, 1..20), batch in 1u64..64) {
            let store = Arc::new(MemStore::new(1 << 30));
            let rm = ResourceManager::new(store, batch * PAGE);
            let mut seen = std::collections::BTreeSet::new();
            for pages in sizes {
                let extents = rm.take(pages * PAGE).unwrap();
                prop_assert_eq!(extents.iter().map(|e| e.1).sum::<u64>(), pages * PAGE);
                let t = SlabTable::new(&extents);
                for p in 0..pages {
                    let remote = t.remote(p * PAGE).unwrap();
                    prop_assert_eq!(remote % PAGE, 0);
                    prop_assert!(seen.insert(remote), "remote page {:#x} handed out twice", remote);
                    prop_assert!(extents.iter().any(|&(b, l)| remote >= b && remote < b + l));
                }
                prop_assert_eq!(t.remote(pages * PAGE), None);
            }
        }
    }

    #[test]
    fn lazy_tables_back_a_chunk_on_first_write_back_only() {
        let store = Arc::new(MemStore::new(1 << 30));
        let rm = Arc::new(ResourceManager::new(store.clone(), 16 << 20));
        // 5 MiB: two whole chunks and a 1 MiB tail.
        let t = LazyTable::new(5 << 20);
        assert_eq!(t.remote(0), None);
        assert_eq!(store.stats().slab_allocations, 0);
        let a = t.remote_or_back(CHUNK + 3 * PAGE, &rm).unwrap();
        assert_eq!(store.stats().slab_allocations, 1);
        assert_eq!(t.backed_bytes(), CHUNK);
        // Same chunk: same base, nothing new taken.
        assert_eq!(
            t.remote_or_back(CHUNK + 5 * PAGE, &rm).unwrap(),
            a + 2 * PAGE
        );
        assert_eq!(t.remote(CHUNK), Some(a - 3 * PAGE));
        assert_eq!(t.remote(0), None);
        assert!(t.remote_or_back(5 << 20, &rm).is_err());
        // Backing the rest gives the whole region, each page once.
        let whole = t.back_all(&rm).unwrap();
        assert_eq!(whole.len(), 5 << 20);
        assert_eq!(t.backed_bytes(), 5 << 20);
        assert_eq!(whole.remote(CHUNK + 3 * PAGE), Some(a));
        let mut seen = std::collections::BTreeSet::new();
        for p in 0..(5 << 20) / PAGE {
            assert!(seen.insert(whole.remote(p * PAGE).unwrap()));
        }
        assert_eq!(store.stats().slab_allocations, 1);
    }

    #[test]
    fn carves_batches_and_translates() {
        let store = Arc::new(MemStore::new(1 << 30));
        let rm = ResourceManager::new(store.clone(), 1 << 20);
        let a = rm.take(3 * PAGE).unwrap();
        let b = rm.take(2 * PAGE).unwrap();
        assert_eq!(store.stats().slab_allocations, 1);
        assert_eq!(a[0].0 + 3 * PAGE, b[0].0);
        let t = SlabTable::new(&[(1 << 40, PAGE), (5 << 40, 2 * PAGE)]);
        assert_eq!(t.remote(0), Some(1 << 40));
        assert_eq!(t.remote(PAGE + 5), Some((5 << 40) + 5));
        assert_eq!(t.remote(3 * PAGE), None);
        assert_eq!(t.len(), 3 * PAGE);
    }
}
