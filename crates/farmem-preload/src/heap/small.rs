//! Small blocks packed into far pages: size classes carved out of runs of
//! whole pages, as jemalloc's slabs and the kernel's kmalloc caches are.
//! Without them every far block below a page took a page of its own, so a
//! program of many small allocations either kept them local, past
//! `--local-mem`, or spent a far page, and a fault, on each.
//!
//! The book-keeping lives here, in local memory, never in the far pages:
//! freeing a block whose page went remote costs no fault, and a block's
//! neighbours are never read to find its size.

/// The page the runs are made of (the heap's, which imports this module).
const PAGE: usize = farmem_core::PAGE_SIZE as usize;

/// Block sizes: 16-byte steps up to 128 B, then four per doubling up to
/// 16 KiB (jemalloc's spacing), so a block wastes at most a fifth of its
/// class. Every class is a multiple of 16, so every block is aligned as
/// malloc's are.
const CLASSES: [u32; 36] = [
    16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024,
    1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 10240, 12288, 14336,
    16384,
];

/// The alignment every block has.
pub const ALIGN: usize = 16;

/// Most blocks in one run (the width of its bitmap).
const MAX_SLOTS: usize = 256;
/// Most pages in one run.
const MAX_RUN_PAGES: usize = 16;

/// A run's pages and block count for `size`: the fewest pages, up to
/// [`MAX_RUN_PAGES`], that leave the least of the run unused (3 pages hold
/// two 6 KiB blocks exactly; 1 page would hold none). Every class's run
/// comes out exact.
const fn geometry(size: usize) -> (usize, usize) {
    let mut best = (0, 0);
    let mut best_waste = usize::MAX;
    let mut pages = 1;
    while pages <= MAX_RUN_PAGES {
        let bytes = pages * PAGE;
        let slots = bytes / size;
        if slots > 0 && slots <= MAX_SLOTS {
            // Waste per byte of run, compared without division.
            let waste = (bytes - slots * size) * (MAX_RUN_PAGES * PAGE) / bytes;
            if waste < best_waste {
                best_waste = waste;
                best = (pages, slots);
            }
        }
        pages += 1;
    }
    best
}

/// [`geometry`] of every class.
const GEOMETRY: [(usize, usize); CLASSES.len()] = {
    let mut g = [(0, 0); CLASSES.len()];
    let mut c = 0;
    while c < CLASSES.len() {
        g[c] = geometry(CLASSES[c] as usize);
        c += 1;
    }
    g
};

/// The largest small block: larger ones take whole pages.
pub const MAX: usize = CLASSES[CLASSES.len() - 1] as usize;

/// The class of a `size`-byte block: None when pages suit it as well (a
/// size of whole pages) or it is past the largest class.
pub fn class_of(size: usize) -> Option<usize> {
    let size = size.max(1);
    let c = CLASSES.partition_point(|&s| (s as usize) < size);
    let class = *CLASSES.get(c)? as usize;
    (class < size.div_ceil(PAGE) * PAGE).then_some(c)
}

/// One run: `slots` blocks of its class from `base`.
#[derive(Debug, Clone)]
struct Run {
    base: usize,
    class: u8,
    live: u16,
    /// Blocks below this were handed out before and may hold old data;
    /// allocation takes the lowest free block, so the rest are as the run
    /// came.
    high_water: u16,
    /// Bytes at the start of the run that were in use before it was made
    /// (the page heap's `stale`).
    stale_below: u32,
    used: [u64; MAX_SLOTS / 64],
}

/// A block handed out: its address, its usable length and whether it may
/// hold old data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    pub addr: usize,
    pub len: usize,
    pub stale: bool,
}

/// What freeing a block did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freed {
    /// No small block starts at that address.
    NotOurs,
    /// Freed; its run still holds others, or is kept for the next block.
    Block,
    /// Freed, and its run is empty and out of the classes: the pages
    /// `[addr, addr + len)` go back to the page heap once the caller has
    /// discarded them.
    Run { addr: usize, len: usize },
}

/// Every class's runs.
#[derive(Debug)]
pub struct Small {
    runs: Vec<Run>,
    /// Ids of `runs` entries no run uses.
    vacant: Vec<u32>,
    /// The heap's first page: `owner` is indexed from it.
    base: usize,
    /// Per page of the heap (up to the last run's), the run holding it
    /// ([`NO_RUN`]: none). Four bytes a page, where a map would take
    /// several times that of the local memory the program is limited to.
    owner: Vec<u32>,
    /// Per class, the runs with a free block; the last is used first.
    partial: [Vec<u32>; CLASSES.len()],
    /// Per class, one empty run kept: a program that frees its only block
    /// of a class and allocates another does not take and give back
    /// pages (and discard them) each time.
    spare: [Option<u32>; CLASSES.len()],
    /// Bytes of live blocks (their classes' sizes).
    live_bytes: usize,
}

/// `owner` of a page no run holds.
const NO_RUN: u32 = u32::MAX;

impl Small {
    /// No runs yet, in a heap starting at `base`.
    pub fn new(base: usize) -> Self {
        Self {
            runs: Vec::new(),
            vacant: Vec::new(),
            base,
            owner: Vec::new(),
            partial: std::array::from_fn(|_| Vec::new()),
            spare: [None; CLASSES.len()],
            live_bytes: 0,
        }
    }

    /// The run holding the page of `addr`.
    fn owner_of(&self, addr: usize) -> Option<u32> {
        let page = addr.checked_sub(self.base)? / PAGE;
        self.owner.get(page).copied().filter(|&id| id != NO_RUN)
    }

    /// Marks the run's pages from `addr` as held by `id`.
    fn set_owner(&mut self, addr: usize, len: usize, id: u32) {
        let first = (addr - self.base) / PAGE;
        let end = first + len / PAGE;
        if self.owner.len() < end {
            self.owner.resize(end, NO_RUN);
        }
        self.owner[first..end].fill(id);
    }

    /// The bytes of one run of `class` (what [`Self::add_run`] wants).
    pub fn run_bytes(class: usize) -> usize {
        GEOMETRY[class].0 * PAGE
    }

    /// Bytes of live small blocks.
    pub fn live_bytes(&self) -> usize {
        self.live_bytes
    }

    /// A block of `class` from a run that has room; None when a run must
    /// be added first.
    pub fn alloc(&mut self, class: usize) -> Option<Block> {
        let id = match self.partial[class].last() {
            Some(&id) => id,
            None => {
                let id = self.spare[class].take()?;
                self.partial[class].push(id);
                id
            }
        };
        let (size, slots) = (CLASSES[class] as usize, GEOMETRY[class].1);
        let run = &mut self.runs[id as usize];
        let slot = run
            .used
            .iter()
            .enumerate()
            .find(|(_, w)| **w != u64::MAX)
            .map(|(i, w)| i * 64 + w.trailing_ones() as usize)
            .filter(|&s| s < slots)?;
        run.used[slot / 64] |= 1 << (slot % 64);
        run.live += 1;
        let stale = slot < usize::from(run.high_water) || slot * size < run.stale_below as usize;
        run.high_water = run.high_water.max(slot as u16 + 1);
        if usize::from(run.live) == slots {
            self.partial[class].pop();
        }
        self.live_bytes += size;
        Some(Block {
            addr: run.base + slot * size,
            len: size,
            stale,
        })
    }

    /// Makes the pages at `base` (`run_bytes(class)` of them, the first
    /// `stale` bytes used before) a run of `class`.
    pub fn add_run(&mut self, class: usize, base: usize, stale: usize) {
        let run = Run {
            base,
            class: class as u8,
            live: 0,
            high_water: 0,
            stale_below: stale.min(u32::MAX as usize) as u32,
            used: [0; MAX_SLOTS / 64],
        };
        let id = match self.vacant.pop() {
            Some(id) => {
                self.runs[id as usize] = run;
                id
            }
            None => {
                self.runs.push(run);
                (self.runs.len() - 1) as u32
            }
        };
        self.set_owner(base, Self::run_bytes(class), id);
        self.partial[class].push(id);
    }

    /// The run and block index of the live block starting at `addr`.
    fn find(&self, addr: usize) -> Option<(u32, usize)> {
        let id = self.owner_of(addr)?;
        let run = &self.runs[id as usize];
        let class = usize::from(run.class);
        let size = CLASSES[class] as usize;
        let off = addr - run.base;
        let slot = off / size;
        // (A pointer into the run's unused tail is no block either.)
        let live = off.is_multiple_of(size)
            && slot < GEOMETRY[class].1
            && run.used[slot / 64] & (1 << (slot % 64)) != 0;
        live.then_some((id, slot))
    }

    /// The usable length of the live block starting at `addr`.
    pub fn block_len(&self, addr: usize) -> Option<usize> {
        self.find(addr)
            .map(|(id, _)| CLASSES[usize::from(self.runs[id as usize].class)] as usize)
    }

    /// Whether the block at `addr` would be a block of the class of
    /// `size` bytes (a realloc that can stay where it is).
    pub fn fits(&self, addr: usize, size: usize) -> bool {
        self.find(addr).is_some_and(|(id, _)| {
            class_of(size) == Some(usize::from(self.runs[id as usize].class))
        })
    }

    /// Whether `addr` lies in a run's pages.
    pub fn covers(&self, addr: usize) -> bool {
        self.owner_of(addr).is_some()
    }

    /// Frees the block starting at `addr`.
    pub fn free(&mut self, addr: usize) -> Freed {
        let Some((id, slot)) = self.find(addr) else {
            return Freed::NotOurs;
        };
        let run = &mut self.runs[id as usize];
        let class = usize::from(run.class);
        let (size, slots) = (CLASSES[class] as usize, GEOMETRY[class].1);
        let was_full = usize::from(run.live) == slots;
        run.used[slot / 64] &= !(1 << (slot % 64));
        run.live -= 1;
        self.live_bytes -= size;
        if was_full {
            self.partial[class].push(id);
        }
        if run.live > 0 {
            return Freed::Block;
        }
        // Empty: out of the partial list; kept as the spare if there is none.
        let base = run.base;
        if let Some(i) = self.partial[class].iter().rposition(|&r| r == id) {
            self.partial[class].swap_remove(i);
        }
        if self.spare[class].is_none() {
            self.spare[class] = Some(id);
            return Freed::Block;
        }
        let len = Self::run_bytes(class);
        self.set_owner(base, len, NO_RUN);
        self.vacant.push(id);
        Freed::Run { addr: base, len }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small_with_run(class: usize, base: usize) -> Small {
        let mut s = Small::new(0);
        s.add_run(class, base, 0);
        s
    }

    #[test]
    fn classes_fit_their_sizes_and_leave_whole_pages_to_the_page_heap() {
        assert_eq!(class_of(0).map(|c| CLASSES[c]), Some(16));
        assert_eq!(class_of(1).map(|c| CLASSES[c]), Some(16));
        assert_eq!(class_of(17).map(|c| CLASSES[c]), Some(32));
        assert_eq!(class_of(200).map(|c| CLASSES[c]), Some(224));
        assert_eq!(
            class_of(4000).map(|c| CLASSES[c]),
            None,
            "a page is as good"
        );
        assert_eq!(class_of(4096), None);
        // sqlite's page-cache entries: a 4 KiB page and its header.
        assert_eq!(class_of(4096 + 272).map(|c| CLASSES[c]), Some(5120));
        assert_eq!(class_of(8192), None);
        assert_eq!(class_of(16384), None);
        assert_eq!(class_of(16385), None);
        for (c, &size) in CLASSES.iter().enumerate() {
            let (pages, slots) = geometry(size as usize);
            assert!(
                pages >= 1 && (1..=MAX_SLOTS).contains(&slots),
                "class {size}"
            );
            assert!((size as usize).is_multiple_of(ALIGN));
            // Every class fills its run exactly.
            assert_eq!(pages * PAGE, slots * size as usize, "class {size}");
            assert_eq!(Small::run_bytes(c), pages * PAGE);
        }
        assert_eq!(geometry(6144), (3, 2));
        assert_eq!(geometry(16), (1, 256));
        assert_eq!(std::mem::size_of::<Run>(), 56, "local memory per run");
    }

    #[test]
    fn blocks_pack_a_run_lowest_first_and_a_full_run_asks_for_another() {
        let c = class_of(48).unwrap();
        let (pages, slots) = geometry(48);
        let mut s = small_with_run(c, 1 << 20);
        let blocks: Vec<Block> = (0..slots).map(|_| s.alloc(c).unwrap()).collect();
        assert_eq!(
            blocks[0],
            Block {
                addr: 1 << 20,
                len: 48,
                stale: false
            }
        );
        assert_eq!(blocks[slots - 1].addr, (1 << 20) + (slots - 1) * 48);
        assert!(blocks.last().unwrap().addr + 48 <= (1 << 20) + pages * PAGE);
        assert_eq!(s.alloc(c), None, "full: the caller adds a run");
        assert_eq!(s.live_bytes(), slots * 48);
        // A freed block is the next one handed out, and it is stale.
        assert_eq!(s.free(blocks[7].addr), Freed::Block);
        assert_eq!(s.block_len(blocks[7].addr), None);
        assert_eq!(s.block_len(blocks[8].addr), Some(48));
        let again = s.alloc(c).unwrap();
        assert_eq!((again.addr, again.stale), (blocks[7].addr, true));
    }

    #[test]
    fn interior_pointers_and_double_frees_are_not_blocks() {
        let c = class_of(100).unwrap();
        let mut s = small_with_run(c, 0);
        let a = s.alloc(c).unwrap();
        let b = s.alloc(c).unwrap();
        assert_eq!(s.free(a.addr + 16), Freed::NotOurs);
        assert_eq!(
            s.free(b.addr + 112),
            Freed::NotOurs,
            "past b, not allocated"
        );
        assert_eq!(s.free(a.addr), Freed::Block);
        assert_eq!(s.free(a.addr), Freed::NotOurs);
        assert_eq!(s.free(1 << 30), Freed::NotOurs, "no run there");
        assert!(s.covers(a.addr) && !s.covers(1 << 30));
    }

    #[test]
    fn an_emptied_run_is_kept_once_then_given_back() {
        let c = class_of(5000).unwrap();
        let len = Small::run_bytes(c);
        let mut s = small_with_run(c, 0);
        s.add_run(c, len, len);
        let a = s.alloc(c).unwrap();
        assert_eq!(a.addr, len, "the run added last is used first");
        assert!(a.stale, "its pages were used before");
        // Fill the second run so the first is used too.
        let mut rest = vec![];
        while let Some(b) = s.alloc(c) {
            rest.push(b);
        }
        assert!(rest.iter().any(|b| b.addr < len) && rest.iter().any(|b| b.addr >= len));
        for b in rest.iter().filter(|b| b.addr < len) {
            assert!(!b.stale, "fresh pages read as zeros");
        }
        // Empty the first run: it is kept as the class's spare.
        for b in rest.iter().filter(|b| b.addr < len) {
            assert_eq!(s.free(b.addr), Freed::Block);
        }
        assert!(s.covers(0));
        // Empty the second: it is given back, whole.
        assert_eq!(s.free(a.addr), Freed::Block);
        let last = rest
            .iter()
            .filter(|b| b.addr >= len)
            .map(|b| s.free(b.addr))
            .last();
        assert_eq!(last, Some(Freed::Run { addr: len, len }));
        assert!(!s.covers(len) && s.covers(0));
        assert_eq!(s.live_bytes(), 0);
        // The spare serves the next block.
        assert_eq!(s.alloc(c).unwrap().addr, 0);
    }

    #[test]
    fn fits_keeps_a_realloc_in_its_class() {
        let c = class_of(200).unwrap();
        let mut s = small_with_run(c, 0);
        let a = s.alloc(c).unwrap();
        assert!(s.fits(a.addr, 193) && s.fits(a.addr, 224));
        assert!(!s.fits(a.addr, 100) && !s.fits(a.addr, 225));
    }
}
