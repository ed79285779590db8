//! Resource Manager: remote memory obtained from the slab source in large
//! batches, carved into the extents that back regions. Asking for a batch
//! only happens when a region is created, never on the fault path.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::RuntimeError;
use crate::store::SlabSource;

const PAGE: u64 = farmem_core::PAGE_SIZE;

pub(crate) struct ResourceManager {
    source: Arc<dyn SlabSource>,
    batch: u64,
    /// Free remote extents, in the order they were received.
    free: Mutex<Vec<(u64, u64)>>,
    /// A background top-up is under way.
    refilling: AtomicBool,
}

impl ResourceManager {
    pub(crate) fn new(source: Arc<dyn SlabSource>, batch: u64) -> Self {
        Self {
            source,
            batch,
            free: Mutex::new(Vec::new()),
            refilling: AtomicBool::new(false),
        }
    }

    /// Keeps at least half a batch in reserve by asking the slab source on
    /// a background thread, so the next region need not wait for it.
    pub(crate) fn top_up(self: &Arc<Self>) {
        let have: u64 = self.free.lock().iter().map(|e| e.1).sum();
        if have >= self.batch / 2 || self.refilling.swap(true, Ordering::SeqCst) {
            return;
        }
        let rm = self.clone();
        let spawned = std::thread::Builder::new()
            .name("farmem-slabs".into())
            .spawn(move || {
                match rm.source.allocate(rm.batch) {
                    Ok(extents) => rm.add(extents),
                    // Not fatal: the next region asks synchronously and reports.
                    Err(e) => tracing::warn!("background slab allocation failed: {e}"),
                }
                rm.refilling.store(false, Ordering::SeqCst);
            });
        if spawned.is_err() {
            self.refilling.store(false, Ordering::SeqCst);
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
