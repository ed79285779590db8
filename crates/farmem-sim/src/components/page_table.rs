//! The page table: every page the workload touched, by dense id.

use farmem_core::PAGE_SIZE;
use rustc_hash::FxHashMap;

use crate::Time;
use crate::config::{Config, Placement};

/// A touched page: its dense id is its index in [`PageTable::pages`].
#[derive(Debug, Clone, Copy)]
pub struct PageInfo {
    pub page: u64,
    pub node: u16,
    /// Resident in local memory (possibly still arriving).
    pub resident: bool,
    pub dirty: bool,
    /// When the page's data is in local memory.
    pub ready_at: Time,
}

/// Every page the workload touched, with its home node and local state.
/// Dense ids keep the per-page state in an array.
///
/// A page's id is found by direct index, not hashing: pages are grouped in
/// chunks of `CHUNK_PAGES` with a slot each, and a small direct-mapped
/// table of recent chunks finds a chunk's slots; only a chunk missing from
/// it is looked up in a hash map. Workloads touch dense ranges, so nearly
/// every lookup ends in the two arrays (a hash map per page was the
/// simulator's fourth-largest cost).
#[derive(Debug, Clone)]
pub struct PageTable {
    /// First page of a chunk (`page >> CHUNK_SHIFT`) to its first slot.
    chunks: FxHashMap<u64, u32>,
    /// Recent chunks by `chunk % RECENT_CHUNKS`: (chunk, first slot).
    recent: Box<[(u64, u32)]>,
    /// Dense id per slot, [`NO_ID`] for a page not touched yet.
    slots: Vec<u32>,
    pub pages: Vec<PageInfo>,
    nodes: u16,
    random: bool,
    seed: u64,
    last: (u64, u32),
}

/// Pages per chunk of the page table's direct index: small enough that a
/// sparse trace's chunks cost little (256 B each), large enough that a
/// dense one's recent chunks cover its footprint.
const CHUNK_SHIFT: u32 = 6;
const CHUNK_PAGES: u64 = 1 << CHUNK_SHIFT;
/// Entries of the recent-chunk table (a power of two): 64 MiB of pages.
const RECENT_CHUNKS: usize = 256;
const NO_ID: u32 = u32::MAX;

impl PageTable {
    pub fn new(cfg: &Config) -> Self {
        Self {
            chunks: FxHashMap::default(),
            recent: vec![(u64::MAX, 0); RECENT_CHUNKS].into_boxed_slice(),
            slots: Vec::new(),
            pages: Vec::new(),
            nodes: cfg.remote.nodes as u16,
            random: cfg.remote.placement == Placement::Random,
            seed: cfg.remote.seed,
            last: (u64::MAX, 0),
        }
    }

    /// The dense id of `page`, registering it on first touch.
    #[inline]
    pub fn id(&mut self, page: u64) -> u32 {
        if self.last.0 == page {
            return self.last.1;
        }
        let chunk = page >> CHUNK_SHIFT;
        let r = self.recent[chunk as usize % RECENT_CHUNKS];
        let first = if r.0 == chunk { r.1 } else { self.chunk(chunk) };
        let slot = first as usize + (page % CHUNK_PAGES) as usize;
        let mut id = self.slots[slot];
        if id == NO_ID {
            id = self.register(page);
            self.slots[slot] = id;
        }
        self.last = (page, id);
        id
    }

    /// The first slot of `chunk`, allocating its slots on first touch, and
    /// remembered as recent.
    #[cold]
    fn chunk(&mut self, chunk: u64) -> u32 {
        let next = self.slots.len() as u32;
        let first = *self.chunks.entry(chunk).or_insert(next);
        if first == next {
            self.slots
                .resize(self.slots.len() + CHUNK_PAGES as usize, NO_ID);
        }
        self.recent[chunk as usize % RECENT_CHUNKS] = (chunk, first);
        first
    }

    /// A new page's id and home node.
    fn register(&mut self, page: u64) -> u32 {
        let id = self.pages.len() as u32;
        let node = if self.random {
            (splitmix(page ^ self.seed) % self.nodes as u64) as u16
        } else {
            (id % self.nodes as u32) as u16
        };
        self.pages.push(PageInfo {
            page,
            node,
            resident: false,
            dirty: false,
            ready_at: 0.0,
        });
        id
    }

    pub fn footprint_bytes(&self) -> u64 {
        self.pages.len() as u64 * PAGE_SIZE
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn page_ids_are_dense_in_first_touch_order() {
        let mut t = PageTable::new(&Config::preset("daemon").unwrap());
        // Dense, repeated, far apart (chunks colliding in the recent
        // table), and the highest page numbers.
        let pages: Vec<u64> = [
            5,
            6,
            5,
            1 << 40,
            4,
            6 + 256 * 64,
            6,
            u64::MAX >> 12,
            1 << 40,
        ]
        .into_iter()
        .chain((0..3000).map(|i| (i * 7919) % 5000))
        .collect();
        let mut seen: Vec<u64> = Vec::new();
        for &p in &pages {
            let want = match seen.iter().position(|&q| q == p) {
                Some(i) => i,
                None => {
                    seen.push(p);
                    seen.len() - 1
                }
            };
            assert_eq!(t.id(p) as usize, want, "page {p}");
            assert_eq!(t.pages[want].page, p);
        }
        assert_eq!(t.pages.len(), seen.len());
    }
}
