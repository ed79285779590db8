//! Local memory: an inclusive page cache of remote memory.

use farmem_core::PAGE_SIZE;
use farmem_policy::cache::{PolicyConfig, ReplacementPolicy};
use farmem_policy::watermark::Watermarks;

use crate::stats::{Component, Stats};

/// Local memory as an inclusive page cache of remote memory: which pages
/// are resident is the replacement policy's business (farmem-policy), their
/// state is in the page table.
pub struct LocalMemory {
    pub policy: Box<dyn ReplacementPolicy>,
    pub capacity_pages: usize,
    /// Evict in rounds between two marks, as the runtime does; None: one
    /// victim per install, when full.
    pub watermarks: Option<Watermarks>,
    pub evictions: u64,
    pub dirty_evictions: u64,
}

impl LocalMemory {
    /// `bytes` of local memory, at least one page (a page must land somewhere).
    pub fn new(policy: PolicyConfig, watermarks: Option<Watermarks>, bytes: u64) -> Self {
        let capacity_pages = (bytes / PAGE_SIZE).max(1) as usize;
        Self {
            // Capacity ≥ 1, so building cannot fail.
            policy: policy
                .build(capacity_pages)
                .unwrap_or_else(|_| Box::new(farmem_policy::cache::Lru::new(capacity_pages))),
            capacity_pages,
            watermarks,
            evictions: 0,
            dirty_evictions: 0,
        }
    }
}

impl Component for LocalMemory {
    fn report(&self, prefix: &str, _t: f64, out: &mut Stats) {
        out.put(prefix, "capacity_pages", self.capacity_pages as f64);
        out.put(prefix, "evictions", self.evictions as f64);
        out.put(prefix, "dirty_evictions", self.dirty_evictions as f64);
    }
}
