//! The far heap's book-keeping: a first-fit allocator over one far region
//! (page-aligned ranges, a free list with coalescing, and a high-water mark
//! below which memory was used before and may need zeroing), with blocks
//! below a page packed into runs of its pages ([`small`]).

use std::collections::BTreeMap;

pub mod small;

use small::{Freed, Small};

/// Granularity of every far range.
pub const PAGE: usize = farmem_core::PAGE_SIZE as usize;

/// Book-keeping for one contiguous address range. Addresses are plain
/// integers; nothing here touches the memory.
#[derive(Debug)]
pub struct Heap {
    base: usize,
    end: usize,
    /// start → length of free ranges, never adjacent (coalesced).
    free: BTreeMap<usize, usize>,
    /// start → (length, kind) of live allocations.
    used: BTreeMap<usize, (usize, Kind)>,
    /// Everything at or above this was never handed out: still zero.
    fresh: usize,
    in_use: usize,
    peak: usize,
    small: Small,
}

/// Which interface a range was handed out through. A block is what the
/// malloc family may free or resize; a mapping came from `mmap` and may be
/// cut by `munmap`, and the program's allocator (jemalloc, say) carves its
/// own small blocks out of it, which `free` must not mistake for ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Block,
    Mapping,
    /// Pages holding small blocks ([`small`]); only the heap hands them out.
    Run,
}

/// What [`Heap::take`] took back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// A small block: nothing more to do.
    Block,
    /// Whole pages, out of use but not yet free: the caller discards them,
    /// then [`Heap::put_back`]s them.
    Pages { addr: usize, len: usize },
}

/// A range handed out by [`Heap::alloc`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub addr: usize,
    pub len: usize,
    /// Bytes at the start of the range that were used before and may hold
    /// old data (the rest reads as zero).
    pub stale: usize,
}

impl Heap {
    pub fn new(base: usize, len: usize) -> Self {
        let len = len / PAGE * PAGE;
        let mut free = BTreeMap::new();
        if len > 0 {
            free.insert(base, len);
        }
        Self {
            base,
            end: base + len,
            free,
            used: BTreeMap::new(),
            fresh: base,
            in_use: 0,
            peak: 0,
            small: Small::new(base),
        }
    }

    pub fn contains(&self, addr: usize) -> bool {
        addr >= self.base && addr < self.end
    }

    /// Bytes of pages currently allocated (small blocks count by their
    /// runs), and the most ever allocated at once.
    pub fn usage(&self) -> (usize, usize) {
        (self.in_use, self.peak)
    }

    /// `size` bytes aligned to `align`: a malloc-family block of a small
    /// class with malloc's alignment is packed into a run, anything else
    /// takes whole pages (first fit).
    pub fn alloc(&mut self, size: usize, kind: Kind, align: usize) -> Option<Grant> {
        let class = (kind == Kind::Block && align <= small::ALIGN)
            .then(|| small::class_of(size))
            .flatten();
        let Some(class) = class else {
            return self.alloc_pages(size, kind);
        };
        loop {
            if let Some(b) = self.small.alloc(class) {
                let stale = if b.stale { b.len } else { 0 };
                return Some(Grant {
                    addr: b.addr,
                    len: b.len,
                    stale,
                });
            }
            let run = self.alloc_pages(Small::run_bytes(class), Kind::Run)?;
            self.small.add_run(class, run.addr, run.stale);
        }
    }

    /// First fit of `size` bytes rounded up to pages.
    fn alloc_pages(&mut self, size: usize, kind: Kind) -> Option<Grant> {
        let len = size.checked_add(PAGE - 1)? / PAGE * PAGE;
        if len == 0 {
            return None;
        }
        let (&start, &flen) = self.free.iter().find(|&(_, &l)| l >= len)?;
        self.free.remove(&start);
        if flen > len {
            self.free.insert(start + len, flen - len);
        }
        self.used.insert(start, (len, kind));
        let stale = self.fresh.saturating_sub(start).min(len);
        self.fresh = self.fresh.max(start + len);
        self.in_use += len;
        self.peak = self.peak.max(self.in_use);
        Some(Grant {
            addr: start,
            len,
            stale,
        })
    }

    /// Length of the malloc-family block starting at `addr`.
    pub fn block_len(&self, addr: usize) -> Option<usize> {
        if self.small.covers(addr) {
            return self.small.block_len(addr);
        }
        match self.used.get(&addr) {
            Some(&(len, Kind::Block)) => Some(len),
            _ => None,
        }
    }

    /// Takes back the malloc-family block starting at `addr`; None if
    /// there is none. Pages it gives up stay out of use until
    /// [`put_back`](Self::put_back), so the caller can discard them first
    /// and no new owner's write is lost.
    pub fn take(&mut self, addr: usize) -> Option<Taken> {
        let addr = if self.small.covers(addr) {
            match self.small.free(addr) {
                Freed::NotOurs => return None,
                Freed::Block => return Some(Taken::Block),
                Freed::Run { addr, .. } => addr,
            }
        } else {
            addr
        };
        match self.used.get(&addr) {
            Some(&(len, Kind::Block | Kind::Run)) => {
                self.used.remove(&addr);
                self.in_use -= len;
                Some(Taken::Pages { addr, len })
            }
            _ => None,
        }
    }

    /// Makes pages [`take`](Self::take) gave up free again.
    pub fn put_back(&mut self, addr: usize, len: usize) {
        self.insert_free(addr, len);
    }

    /// Frees whatever part of `[addr, addr+len)` is allocated (munmap
    /// semantics: partial unmaps split allocations).
    pub fn release(&mut self, addr: usize, len: usize) {
        let start = addr / PAGE * PAGE;
        let end = addr.saturating_add(len).div_ceil(PAGE) * PAGE;
        let hits: Vec<(usize, usize, Kind)> = self
            .used
            .range(..end)
            .rev()
            .take_while(|&(&a, &(l, _))| a + l > start)
            // Runs hold other blocks; an munmap of one is the program's bug.
            .filter(|&(_, &(_, k))| k != Kind::Run)
            .map(|(&a, &(l, k))| (a, l, k))
            .collect();
        for (a, l, k) in hits {
            self.used.remove(&a);
            let (cut_s, cut_e) = (a.max(start), (a + l).min(end));
            if cut_s > a {
                self.used.insert(a, (cut_s - a, k));
            }
            if a + l > cut_e {
                self.used.insert(cut_e, (a + l - cut_e, k));
            }
            self.in_use -= cut_e - cut_s;
            self.insert_free(cut_s, cut_e - cut_s);
        }
    }

    /// Shrinks the block at `addr` to `size` bytes (rounded up to pages),
    /// freeing the tail; a small block stays only if `size` is of its
    /// class. False if the block cannot stay where it is.
    pub fn shrink(&mut self, addr: usize, size: usize) -> bool {
        if self.small.covers(addr) {
            return self.small.fits(addr, size);
        }
        let Some(len) = self.block_len(addr) else {
            return false;
        };
        let keep = size.div_ceil(PAGE).max(1) * PAGE;
        if keep < len {
            self.release(addr + keep, len - keep);
        }
        true
    }

    fn insert_free(&mut self, mut start: usize, mut len: usize) {
        if len == 0 {
            return;
        }
        if let Some((&ps, &pl)) = self.free.range(..start).next_back()
            && ps + pl == start
        {
            self.free.remove(&ps);
            start = ps;
            len += pl;
        }
        if let Some(nl) = self.free.remove(&(start + len)) {
            len += nl;
        }
        self.free.insert(start, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frees as the shim does: take, (discard,) put back.
    fn free(h: &mut Heap, addr: usize) -> bool {
        match h.take(addr) {
            Some(Taken::Pages { addr, len }) => {
                h.put_back(addr, len);
                true
            }
            Some(Taken::Block) => true,
            None => false,
        }
    }

    #[test]
    fn first_fit_coalesces_and_tracks_stale_bytes() {
        let mut h = Heap::new(1 << 20, 16 * PAGE);
        let a = h.alloc(1, Kind::Block, PAGE).unwrap();
        assert_eq!((a.addr, a.len, a.stale), (1 << 20, PAGE, 0));
        let b = h.alloc(2 * PAGE, Kind::Block, PAGE).unwrap();
        let c = h.alloc(PAGE + 1, Kind::Block, PAGE).unwrap();
        assert_eq!(c.len, 2 * PAGE);
        assert!(free(&mut h, b.addr));
        assert!(!free(&mut h, b.addr));
        // reuse of b's range: stale
        let d = h.alloc(PAGE, Kind::Block, PAGE).unwrap();
        assert_eq!((d.addr, d.stale), (b.addr, PAGE));
        free(&mut h, d.addr);
        free(&mut h, a.addr);
        free(&mut h, c.addr);
        assert_eq!(h.usage().0, 0);
        // everything coalesced back into one range
        let all = h.alloc(16 * PAGE, Kind::Block, PAGE).unwrap();
        assert_eq!((all.addr, all.stale), (1 << 20, 5 * PAGE));
        assert!(h.alloc(1, Kind::Block, PAGE).is_none());
    }

    #[test]
    fn partial_release_and_shrink_split_allocations() {
        let mut h = Heap::new(0, 16 * PAGE);
        let a = h.alloc(8 * PAGE, Kind::Block, PAGE).unwrap();
        h.release(a.addr + 2 * PAGE, 2 * PAGE);
        assert_eq!(h.block_len(a.addr), Some(2 * PAGE));
        assert_eq!(h.block_len(a.addr + 4 * PAGE), Some(4 * PAGE));
        assert!(h.shrink(a.addr + 4 * PAGE, 1));
        assert_eq!(h.block_len(a.addr + 4 * PAGE), Some(PAGE));
        assert_eq!(h.usage().0, 3 * PAGE);
        h.release(0, 16 * PAGE);
        assert_eq!(h.usage(), (0, 8 * PAGE));
        assert_eq!(h.alloc(16 * PAGE, Kind::Block, PAGE).unwrap().addr, 0);
    }

    #[test]
    fn mappings_are_not_blocks() {
        let mut h = Heap::new(0, 16 * PAGE);
        let m = h.alloc(4 * PAGE, Kind::Mapping, PAGE).unwrap();
        // An allocator's small block inside the mapping is not ours to free.
        assert_eq!(h.block_len(m.addr), None);
        assert!(!free(&mut h, m.addr));
        assert!(!h.shrink(m.addr, PAGE));
        assert_eq!(h.usage().0, 4 * PAGE);
        // munmap semantics still apply, and keep the kind of what is left.
        h.release(m.addr, PAGE);
        assert_eq!(h.usage().0, 3 * PAGE);
        assert!(!free(&mut h, m.addr + PAGE));
        h.release(m.addr + PAGE, 3 * PAGE);
        assert_eq!(h.usage().0, 0);
    }

    #[test]
    fn small_blocks_share_a_page_and_an_emptied_run_comes_back_whole() {
        let mut h = Heap::new(0, 64 * PAGE);
        let a = h.alloc(100, Kind::Block, 16).unwrap();
        let b = h.alloc(100, Kind::Block, 16).unwrap();
        assert_eq!((a.addr, a.len, b.addr), (0, 112, 112));
        assert_eq!(h.block_len(b.addr), Some(112));
        assert_eq!(h.block_len(b.addr + 16), None);
        // Stricter alignment, whole pages, or a mapping: pages.
        let aligned = h.alloc(100, Kind::Block, 64).unwrap();
        let page = h.alloc(PAGE, Kind::Block, 16).unwrap();
        let map = h.alloc(100, Kind::Mapping, 16).unwrap();
        let run = Small::run_bytes(small::class_of(100).unwrap());
        assert_eq!(aligned.addr, run);
        assert_eq!((page.addr, map.addr), (run + PAGE, run + 2 * PAGE));
        assert_eq!(h.usage().0, run + 3 * PAGE);
        // An munmap over the run leaves its blocks alone.
        h.release(0, run);
        assert_eq!(h.block_len(a.addr), Some(112));
        // The run's last block kept it as the class's spare; a second
        // run emptied goes back, in pages, once taken and put back.
        assert_eq!(h.take(a.addr), Some(Taken::Block));
        assert_eq!(h.take(a.addr), None, "a double free is refused");
        assert_eq!(h.take(b.addr), Some(Taken::Block));
        assert_eq!(h.usage().0, run + 3 * PAGE, "the spare run stays");
        let big = h.alloc(9000, Kind::Block, 16).unwrap();
        let big_run = Small::run_bytes(small::class_of(9000).unwrap());
        assert_eq!(big.len, 10240);
        let first = h.alloc(9000, Kind::Block, 16).unwrap();
        let more: Vec<Grant> = (0..big_run / 10240)
            .map(|_| h.alloc(9000, Kind::Block, 16).unwrap())
            .collect();
        // `more` filled a second run; free it all: the first run emptied
        // is the spare, the second comes back.
        let mut back = None;
        for g in std::iter::once(big)
            .chain(std::iter::once(first))
            .chain(more)
        {
            if let Some(Taken::Pages { addr, len }) = h.take(g.addr) {
                back = Some((addr, len));
                h.put_back(addr, len);
            }
        }
        let (addr, len) = back.expect("one run given back");
        assert_eq!(len, big_run);
        // Its pages are handed out again, and known to be stale.
        let again = h.alloc(len, Kind::Block, PAGE).unwrap();
        assert_eq!((again.addr, again.stale), (addr, len));
    }
}
