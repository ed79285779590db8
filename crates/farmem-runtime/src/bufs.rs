//! Page buffers for diff bases, from a mapping of the runtime's own.
//!
//! Boxed by the allocator, a freed buffer stays in the allocator's arena,
//! resident: the most diff bases ever held at once stayed in the process's
//! RSS for good (on the demo, two 64 MiB glibc thread heaps on top of a
//! 258 MiB cache). Here a buffer given back is discarded at once
//! (`MADV_DONTNEED`), so the local memory in use is what the cache counts.
//! Slots are reused, lowest free first, so the pages in use stay few and
//! dense.

use std::ptr::NonNull;

use parking_lot::Mutex;

/// Bytes in a buffer: one page.
const LEN: usize = farmem_core::PAGE_SIZE as usize;

/// One page of an [`Arena`]. Not freed by dropping: hand it back with
/// [`Arena::discard`] (a dropped one only leaks its slot until the arena
/// goes).
pub(crate) struct Buf(NonNull<[u8; LEN]>);

// SAFETY: a Buf is the only handle to its page, like a Box.
unsafe impl Send for Buf {}
// SAFETY: shared access is read-only through Deref.
unsafe impl Sync for Buf {}

impl std::ops::Deref for Buf {
    type Target = [u8; LEN];
    fn deref(&self) -> &Self::Target {
        // SAFETY: the slot is this Buf's alone, inside a live arena.
        unsafe { self.0.as_ref() }
    }
}

impl std::ops::DerefMut for Buf {
    fn deref_mut(&mut self) -> &mut Self::Target {
        // SAFETY: as in Deref, and &mut self makes it exclusive.
        unsafe { self.0.as_mut() }
    }
}

impl std::fmt::Debug for Buf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buf({:p})", self.0)
    }
}

/// A fresh private anonymous read-write mapping of `len` bytes in 4 KiB
/// pages, backed only where touched (no reservation, no huge pages: one
/// touched or discarded page is one page of memory). The runtime's own
/// memory is mapped this way: regions, their page tables, this arena.
pub(crate) fn map_anonymous(len: usize) -> std::io::Result<NonNull<u8>> {
    // SAFETY: a fresh anonymous mapping; nothing else refers to it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: advice on our own mapping.
    unsafe { libc::madvise(p, len, libc::MADV_NOHUGEPAGE) };
    Ok(NonNull::new(p.cast()).expect("mmap returned a mapping"))
}

/// A fixed reservation of page slots; memory is taken only by slots in use.
pub(crate) struct Arena {
    base: NonNull<u8>,
    slots: usize,
    /// Free slots, as a min-heap so the lowest is reused first.
    free: Mutex<FreeSlots>,
}

struct FreeSlots {
    heap: std::collections::BinaryHeap<std::cmp::Reverse<usize>>,
    /// Slots from here up were never used.
    fresh: usize,
}

// SAFETY: the mapping is shared by address only; slots are handed out
// under the lock, each to one Buf.
unsafe impl Send for Arena {}
// SAFETY: as above.
unsafe impl Sync for Arena {}

impl Arena {
    /// Reserves `slots` pages (address space only, until used).
    pub(crate) fn new(slots: usize) -> std::io::Result<Self> {
        let slots = slots.max(1);
        let len = slots
            .checked_mul(LEN)
            .ok_or_else(|| std::io::Error::other("buffer arena too large"))?;
        Ok(Self {
            base: map_anonymous(len)?,
            slots,
            free: Mutex::new(FreeSlots {
                heap: Default::default(),
                fresh: 0,
            }),
        })
    }

    /// A buffer of unspecified contents; None when every slot is in use.
    pub(crate) fn take(&self) -> Option<Buf> {
        let slot = {
            let mut f = self.free.lock();
            match f.heap.pop() {
                Some(std::cmp::Reverse(s)) => s,
                None if f.fresh < self.slots => {
                    f.fresh += 1;
                    f.fresh - 1
                }
                None => return None,
            }
        };
        // SAFETY: slot < slots, so the page lies inside the mapping.
        let p = unsafe { self.base.as_ptr().add(slot * LEN) };
        Some(Buf(NonNull::new(p.cast()).expect("inside the mapping")))
    }

    fn slot(&self, b: &Buf) -> usize {
        (b.0.as_ptr() as usize - self.base.as_ptr() as usize) / LEN
    }

    /// Gives buffers back: their memory is returned to the system, in one
    /// call per run of adjacent slots, and their slots reused.
    pub(crate) fn discard(&self, bufs: impl IntoIterator<Item = Buf>) {
        let mut slots: Vec<usize> = bufs.into_iter().map(|b| self.slot(&b)).collect();
        if slots.is_empty() {
            return;
        }
        slots.sort_unstable();
        let mut i = 0;
        while i < slots.len() {
            let mut j = i + 1;
            while j < slots.len() && slots[j] == slots[j - 1] + 1 {
                j += 1;
            }
            // SAFETY: slots i..j are ours (their Bufs were consumed) and
            // inside the mapping; discarding makes them read as zeros.
            unsafe {
                libc::madvise(
                    self.base.as_ptr().add(slots[i] * LEN).cast(),
                    (j - i) * LEN,
                    libc::MADV_DONTNEED,
                )
            };
            i = j;
        }
        let mut f = self.free.lock();
        f.heap.extend(slots.into_iter().map(std::cmp::Reverse));
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once; Bufs still alive must not
        // be read after this (the cache that owns the arena outlives them).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.slots * LEN) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident pages of the arena's mapping, by mincore.
    fn resident(a: &Arena) -> usize {
        let mut vec = vec![0u8; a.slots];
        // SAFETY: our own mapping, with one byte of output per page.
        let rc = unsafe { libc::mincore(a.base.as_ptr().cast(), a.slots * LEN, vec.as_mut_ptr()) };
        assert_eq!(rc, 0);
        vec.iter().filter(|&&b| b & 1 != 0).count()
    }

    #[test]
    fn discarded_buffers_give_their_memory_back_and_their_slots_are_reused() {
        let a = Arena::new(8).unwrap();
        let mut bufs: Vec<Buf> = (0..8).map(|_| a.take().unwrap()).collect();
        assert!(a.take().is_none(), "all eight slots in use");
        for (i, b) in bufs.iter_mut().enumerate() {
            b.fill(i as u8 + 1);
        }
        assert_eq!(resident(&a), 8);
        // Give back slots 1, 2, 3 and 6.
        let back: Vec<Buf> = [6, 3, 2, 1].iter().map(|&i| bufs.remove(i)).collect();
        a.discard(back);
        assert_eq!(resident(&a), 4);
        let kept: Vec<u8> = bufs.iter().map(|b| b[0]).collect();
        assert_eq!(kept, [1, 5, 6, 8], "the others keep their bytes");
        // The lowest free slot comes first, and reads as zeros.
        let again = a.take().unwrap();
        assert_eq!(a.slot(&again), 1);
        assert!(again.iter().all(|&b| b == 0));
    }
}
