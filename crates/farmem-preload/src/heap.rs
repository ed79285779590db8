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
    /// start → length of live allocations.
    used: BTreeMap<usize, usize>,
    /// Everything at or above this was never handed out: still zero.
    fresh: usize,
    in_use: usize,
    peak: usize,
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
    pub fn alloc(&mut self, size: usize) -> Option<Grant> {
        let len = size.checked_add(PAGE - 1)? / PAGE * PAGE;
        if len == 0 {
            return None;
        }
        let (&start, &flen) = self.free.iter().find(|&(_, &l)| l >= len)?;
        self.free.remove(&start);
        if flen > len {
            self.free.insert(start + len, flen - len);
        }
        self.used.insert(start, len);
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

    /// Length of the allocation starting at `addr`.
    pub fn len_of(&self, addr: usize) -> Option<usize> {
        self.used.get(&addr).copied()
    }

    /// Frees the allocation starting at `addr`; false if there is none.
    pub fn free(&mut self, addr: usize) -> bool {
        match self.used.remove(&addr) {
            Some(len) => {
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
        let hits: Vec<(usize, usize)> = self
            .used
            .range(..end)
            .rev()
            .take_while(|&(&a, &l)| a + l > start)
            .map(|(&a, &l)| (a, l))
            .collect();
        for (a, l) in hits {
            self.used.remove(&a);
            let (cut_s, cut_e) = (a.max(start), (a + l).min(end));
            if cut_s > a {
                self.used.insert(a, cut_s - a);
            }
            if a + l > cut_e {
                self.used.insert(cut_e, a + l - cut_e);
            }
            self.in_use -= cut_e - cut_s;
            self.insert_free(cut_s, cut_e - cut_s);
        }
    }

    /// Shrinks the allocation at `addr` to `size` bytes (rounded up to
    /// pages), freeing the tail. False if there is no such allocation.
    pub fn shrink(&mut self, addr: usize, size: usize) -> bool {
        let Some(len) = self.len_of(addr) else {
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
        let a = h.alloc(1).unwrap();
        assert_eq!((a.addr, a.len, a.stale), (1 << 20, PAGE, 0));
        let b = h.alloc(2 * PAGE).unwrap();
        let c = h.alloc(PAGE + 1).unwrap();
        assert_eq!(c.len, 2 * PAGE);
        assert!(h.free(b.addr));
        assert!(!h.free(b.addr));
        // reuse of b's range: stale
        let d = h.alloc(PAGE).unwrap();
        assert_eq!((d.addr, d.stale), (b.addr, PAGE));
        h.free(d.addr);
        h.free(a.addr);
        h.free(c.addr);
        assert_eq!(h.usage().0, 0);
        // everything coalesced back into one range
        let all = h.alloc(16 * PAGE).unwrap();
        assert_eq!((all.addr, all.stale), (1 << 20, 5 * PAGE));
        assert!(h.alloc(1).is_none());
    }

    #[test]
    fn partial_release_and_shrink_split_allocations() {
        let mut h = Heap::new(0, 16 * PAGE);
        let a = h.alloc(8 * PAGE).unwrap();
        h.release(a.addr + 2 * PAGE, 2 * PAGE);
        assert_eq!(h.len_of(a.addr), Some(2 * PAGE));
        assert_eq!(h.len_of(a.addr + 4 * PAGE), Some(4 * PAGE));
        assert!(h.shrink(a.addr + 4 * PAGE, 1));
        assert_eq!(h.len_of(a.addr + 4 * PAGE), Some(PAGE));
        assert_eq!(h.usage().0, 3 * PAGE);
        h.release(0, 16 * PAGE);
        assert_eq!(h.usage(), (0, 8 * PAGE));
        assert_eq!(h.alloc(16 * PAGE).unwrap().addr, 0);
    }
}
