//! First-fit allocator over one far region: page-aligned ranges, a free list
//! with coalescing, and a high-water mark below which memory was used before
//! (and may need zeroing).

use std::collections::BTreeMap;

/// Granularity of every far range.
pub const PAGE: usize = 4096;

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
}

/// Which interface a range was handed out through. A block is what the
/// malloc family may free or resize; a mapping came from `mmap` and may be
/// cut by `munmap`, and the program's allocator (jemalloc, say) carves its
/// own small blocks out of it, which `free` must not mistake for ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Block,
    Mapping,
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
        }
    }

    pub fn contains(&self, addr: usize) -> bool {
        addr >= self.base && addr < self.end
    }

    /// Bytes currently allocated, and the most ever allocated at once.
    pub fn usage(&self) -> (usize, usize) {
        (self.in_use, self.peak)
    }

    /// First fit of `size` bytes rounded up to pages.
    pub fn alloc(&mut self, size: usize, kind: Kind) -> Option<Grant> {
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
        match self.used.get(&addr) {
            Some(&(len, Kind::Block)) => Some(len),
            _ => None,
        }
    }

    /// Frees the malloc-family block starting at `addr`; false if there is none.
    pub fn free(&mut self, addr: usize) -> bool {
        match self.block_len(addr) {
            Some(len) => {
                self.used.remove(&addr);
                self.in_use -= len;
                self.insert_free(addr, len);
                true
            }
            None => false,
        }
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
    /// freeing the tail. False if there is no such block.
    pub fn shrink(&mut self, addr: usize, size: usize) -> bool {
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

    #[test]
    fn first_fit_coalesces_and_tracks_stale_bytes() {
        let mut h = Heap::new(1 << 20, 16 * PAGE);
        let a = h.alloc(1, Kind::Block).unwrap();
        assert_eq!((a.addr, a.len, a.stale), (1 << 20, PAGE, 0));
        let b = h.alloc(2 * PAGE, Kind::Block).unwrap();
        let c = h.alloc(PAGE + 1, Kind::Block).unwrap();
        assert_eq!(c.len, 2 * PAGE);
        assert!(h.free(b.addr));
        assert!(!h.free(b.addr));
        // reuse of b's range: stale
        let d = h.alloc(PAGE, Kind::Block).unwrap();
        assert_eq!((d.addr, d.stale), (b.addr, PAGE));
        h.free(d.addr);
        h.free(a.addr);
        h.free(c.addr);
        assert_eq!(h.usage().0, 0);
        // everything coalesced back into one range
        let all = h.alloc(16 * PAGE, Kind::Block).unwrap();
        assert_eq!((all.addr, all.stale), (1 << 20, 5 * PAGE));
        assert!(h.alloc(1, Kind::Block).is_none());
    }

    #[test]
    fn partial_release_and_shrink_split_allocations() {
        let mut h = Heap::new(0, 16 * PAGE);
        let a = h.alloc(8 * PAGE, Kind::Block).unwrap();
        h.release(a.addr + 2 * PAGE, 2 * PAGE);
        assert_eq!(h.block_len(a.addr), Some(2 * PAGE));
        assert_eq!(h.block_len(a.addr + 4 * PAGE), Some(4 * PAGE));
        assert!(h.shrink(a.addr + 4 * PAGE, 1));
        assert_eq!(h.block_len(a.addr + 4 * PAGE), Some(PAGE));
        assert_eq!(h.usage().0, 3 * PAGE);
        h.release(0, 16 * PAGE);
        assert_eq!(h.usage(), (0, 8 * PAGE));
        assert_eq!(h.alloc(16 * PAGE, Kind::Block).unwrap().addr, 0);
    }

    #[test]
    fn mappings_are_not_blocks() {
        let mut h = Heap::new(0, 16 * PAGE);
        let m = h.alloc(4 * PAGE, Kind::Mapping).unwrap();
        // An allocator's small block inside the mapping is not ours to free.
        assert_eq!(h.block_len(m.addr), None);
        assert!(!h.free(m.addr));
        assert!(!h.shrink(m.addr, PAGE));
        assert_eq!(h.usage().0, 4 * PAGE);
        // munmap semantics still apply, and keep the kind of what is left.
        h.release(m.addr, PAGE);
        assert_eq!(h.usage().0, 3 * PAGE);
        assert!(!h.free(m.addr + PAGE));
        h.release(m.addr + PAGE, 3 * PAGE);
        assert_eq!(h.usage().0, 0);
    }
}
