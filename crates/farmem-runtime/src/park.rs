//! Probation: how the cache learns which resident pages the program uses.
//!
//! The runtime sees faults, not accesses: a page faulted in once and then
//! used all the time looks, to a fault-fed policy, exactly like one never
//! touched again, so the policy's victims are whatever came in longest ago.
//! The kernel's own reclaim reads the accessed bits in the page tables
//! instead; a process cannot (no idle page tracking, soft-dirty or DAMON
//! for virtual addresses in this kind of kernel), so the runtime asks the
//! program, as NUMA balancing's hinting faults do: a victim the policy
//! chooses is first *parked*, its frame moved (`UFFDIO_MOVE`, no copy) to a
//! slot of a mapping the program never sees. The page stays resident and
//! counted. If the program touches it, the fault moves the frame back and
//! the page re-enters the replacement order as a page in use (a soft fault:
//! no store read). Only pages still parked when the queue moves past them
//! are evicted. The kernel's inactive list plays the same part, with the
//! accessed bit where this has the fault.
//!
//! The cost is one soft fault per page in use that the policy would have
//! evicted; a page it would keep costs nothing, and nothing is parked while
//! the cache has room. Without `UFFDIO_MOVE` (kernels before 6.8) there is
//! no parking and victims are evicted at once, as before.

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use parking_lot::Mutex;

use farmem_core::sync::lock_without_parking;
use farmem_policy::BlockId;

use crate::bufs::map_anonymous;
use crate::error::RuntimeError;
use crate::page::{PAGE, PageMeta, State};
use crate::uffd::Uffd;

/// The parking slots and the probation queue.
pub(crate) struct Parking {
    area: u64,
    len: u64,
    /// Free slot indices. Taken by the evictor, given back by whoever
    /// unparks (a signal handler too: never held across a call).
    free: Mutex<Vec<u32>>,
    /// Pages in the order they were parked, with the parking's number.
    /// Entries whose page has been unparked since stay until they reach
    /// the front (cheaper than a removal), so it may hold more than
    /// `parked`; the number tells a page parked again from its old entry.
    queue: Mutex<VecDeque<(BlockId, u32)>>,
    /// Parkings so far (wrapping), numbering them.
    parkings: AtomicU32,
    /// Pages in state Parked now.
    parked: AtomicU64,
    /// Pages kept on probation.
    target: u64,
}

impl Parking {
    /// Parking for a cache of `limit` pages keeping `share` of them on
    /// probation, its slots registered with `uffd` (a move's destination
    /// must be); None when the share is 0 or the kernel cannot move pages.
    pub(crate) fn new(
        uffd: &Uffd,
        limit: u64,
        share: f64,
        batch: usize,
    ) -> Result<Option<Self>, RuntimeError> {
        let target = (limit as f64 * share) as u64;
        if target == 0 || !uffd.can_move() {
            return Ok(None);
        }
        // Room beyond the target for a round's parking before its
        // overflow is evicted.
        let slots = target + 2 * batch as u64;
        let len = slots * PAGE;
        let area = map_anonymous(len as usize).map_err(RuntimeError::Mmap)?;
        let area = area.as_ptr() as u64;
        // A forked child would share the parked frames, and the kernel
        // moves no frame that was ever shared: the child has no use for
        // them (it cannot touch far memory), so it does not get them.
        // SAFETY: advice on our own fresh mapping.
        unsafe { libc::madvise(area as *mut libc::c_void, len as usize, libc::MADV_DONTFORK) };
        if let Err(e) = uffd.register(area, len) {
            // SAFETY: our own fresh mapping, unmapped once.
            unsafe { libc::munmap(area as *mut libc::c_void, len as usize) };
            return Err(RuntimeError::Uffd(e));
        }
        Ok(Some(Self {
            area,
            len,
            free: Mutex::new((0..slots as u32).rev().collect()),
            queue: Mutex::new(VecDeque::with_capacity(slots as usize)),
            parked: AtomicU64::new(0),
            parkings: AtomicU32::new(0),
            target,
        }))
    }

    fn slot_addr(&self, slot: NonZeroU32) -> u64 {
        self.area + (slot.get() - 1) as u64 * PAGE
    }

    /// Pages parked now.
    pub(crate) fn parked(&self) -> u64 {
        self.parked.load(Ordering::SeqCst)
    }

    /// Parks the page at `page` (its meta `m` locked, Clean or Dirty):
    /// false when no slot is free or the kernel will not move the frame
    /// (a page shared with a child after fork); the caller evicts it.
    pub(crate) fn park(&self, uffd: &Uffd, page: u64, m: &mut PageMeta) -> bool {
        debug_assert!(matches!(m.state, State::Clean | State::Dirty));
        let Some(i) = self.free.lock().pop() else {
            return false;
        };
        let slot = NonZeroU32::new(i + 1).expect("i + 1 > 0");
        if uffd
            .move_pages(self.slot_addr(slot), page, PAGE, true)
            .is_err()
        {
            self.free.lock().push(i);
            return false;
        }
        m.parked_dirty = m.state == State::Dirty;
        m.state = State::Parked;
        m.slot = Some(slot);
        m.parking = self.parkings.fetch_add(1, Ordering::Relaxed);
        self.parked.fetch_add(1, Ordering::SeqCst);
        self.queue.lock().push_back((page / PAGE, m.parking));
        true
    }

    /// Puts a parked page's frame back at `page` (its meta `m` locked) and
    /// the page in the state it was parked in. A dirty frame moves back
    /// writable, as it left; a clean one is copied back write-protected
    /// (a moved frame would come back writable, and a write to it would go
    /// unseen). Safe in a signal handler.
    pub(crate) fn unpark(&self, uffd: &Uffd, page: u64, m: &mut PageMeta) -> std::io::Result<()> {
        debug_assert_eq!(m.state, State::Parked);
        let Some(slot) = m.slot else {
            return Err(std::io::Error::other("a parked page without a slot"));
        };
        let at = self.slot_addr(slot);
        if m.parked_dirty {
            if uffd.move_pages(page, at, PAGE, false).is_err() {
                // A frame the kernel will not move (one that was ever
                // shared with another process): copied back instead.
                // SAFETY: the slot holds the page's frame, readable.
                unsafe { uffd.copy(page, at as *const u8, PAGE, false) }?;
                self.drop_frame(at);
            }
            m.state = State::Dirty;
        } else {
            // SAFETY: the slot holds the page's frame, readable.
            unsafe { uffd.copy(page, at as *const u8, PAGE, true) }?;
            self.drop_frame(at);
            m.state = State::Clean;
        }
        self.release(m);
        Ok(())
    }

    /// A parked page leaves the cache without its frame: clean (the store
    /// has its data), freed by the program, or of a dropped region. The
    /// page is Absent.
    pub(crate) fn discard(&self, m: &mut PageMeta) {
        debug_assert_eq!(m.state, State::Parked);
        if let Some(slot) = m.slot {
            self.drop_frame(self.slot_addr(slot));
        }
        m.state = State::Absent;
        self.release(m);
    }

    /// Frees `m`'s slot, which no longer holds a frame.
    fn release(&self, m: &mut PageMeta) {
        if let Some(slot) = m.slot.take() {
            lock_without_parking(&self.free).push(slot.get() - 1);
            self.parked.fetch_sub(1, Ordering::SeqCst);
        }
        m.parked_dirty = false;
    }

    /// Puts a page back at the front of the queue (its eviction failed
    /// for now), so it is not left parked for good.
    pub(crate) fn requeue(&self, block: BlockId, parking: u32) {
        self.queue.lock().push_front((block, parking));
    }

    /// Whether `m` is still in the parking numbered `parking`.
    pub(crate) fn still_parked(m: &PageMeta, parking: u32) -> bool {
        m.state == State::Parked && m.parking == parking
    }

    fn drop_frame(&self, at: u64) {
        // SAFETY: a slot of our own mapping; nothing refers to its frame.
        unsafe { libc::madvise(at as *mut libc::c_void, PAGE as usize, libc::MADV_DONTNEED) };
    }

    /// Pages parked longest, past the target (or, with `all`, every one):
    /// the ones whose probation is over, with their parking's number. Some
    /// may have been unparked (and parked again) since: callers check
    /// each with [`Parking::still_parked`] under its lock.
    pub(crate) fn overflow(&self, all: bool) -> Vec<(BlockId, u32)> {
        let keep = if all { 0 } else { self.target };
        let over = self.parked().saturating_sub(keep) as usize;
        let mut q = self.queue.lock();
        let n = over.min(q.len());
        q.drain(..n).collect()
    }
}

impl Drop for Parking {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once; parked frames go with it.
        unsafe { libc::munmap(self.area as *mut libc::c_void, self.len as usize) };
    }
}
