//! The bottom layer: a page's state and lock, the page buffers faults
//! fetch into, and a region's table of pages over its remote backing.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use parking_lot::Mutex;

use farmem_policy::readahead::Readahead;

use crate::bufs::Buf;
use crate::error::RuntimeError;
use crate::slab::{Backing, ResourceManager};

/// Page size the runtime maps, fetches and tracks.
pub const PAGE: u64 = farmem_core::PAGE_SIZE;
/// Dirty-tracking granularity in line mode.
pub const LINE: usize = farmem_core::CACHE_LINE as usize;
/// Most pages a fault installs around itself (a window beyond it is cut).
pub const MAX_FAULT_AROUND: u32 = 256;

/// One page of memory, aligned as UFFDIO_COPY requires of its source.
#[repr(C, align(4096))]
pub(crate) struct PageBuf(pub [u8; PAGE as usize]);

impl PageBuf {
    pub(crate) fn zeroed() -> Box<Self> {
        Box::new(Self([0; PAGE as usize]))
    }
}

/// A fetching thread's buffers: its fault's page, and the pages it reads
/// ahead after it.
pub(crate) struct FetchBufs {
    pub page: Box<PageBuf>,
    pub run: RunBuf,
}

impl FetchBufs {
    pub(crate) fn new() -> Self {
        Self {
            page: PageBuf::zeroed(),
            run: RunBuf(Vec::new()),
        }
    }
}

/// Room for a read-ahead window, grown at first use.
pub(crate) struct RunBuf(Vec<PageBuf>);

impl RunBuf {
    /// `n` contiguous, page-aligned pages (n <= MAX_FAULT_AROUND), as bytes.
    pub(crate) fn run(&mut self, n: usize) -> &mut [u8] {
        if self.0.len() < n {
            self.0.resize_with(n, || PageBuf([0; PAGE as usize]));
        }
        // SAFETY: PageBuf is repr(C) around [u8; PAGE], so the Vec's first
        // n elements are n * PAGE initialised bytes in one allocation.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast(), n * PAGE as usize) }
    }
}

/// Where a page is. Transitions happen only under the page's lock; see the
/// crate docs for the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum State {
    /// Not mapped; its data is on the store. Zero: see [`page_table`].
    Absent = 0,
    /// A filler owns it and is fetching it.
    Fetching,
    /// Mapped, write-protected, identical to the store.
    Clean,
    /// Mapped and writable; differs (or may) from the store.
    Dirty,
    /// The evictor or a sync owns it: write-protected, being written back.
    Busy,
}

pub(crate) struct PageMeta {
    pub state: State,
    /// A fault found the page in a transition; wake the range when it ends.
    pub waiters: bool,
    /// The page as of its first write (line mode): the diff base.
    pub snapshot: Option<Buf>,
    /// Lines that must be shipped even if they equal the snapshot, because a
    /// failed batch may have half-applied them on the store.
    pub force: u64,
    /// Line mode without a snapshot: the store holds zeros for this page
    /// (zeroed slab, never written back), so zero is the diff base and no
    /// copy is needed. Pages a program fills from scratch cost no snapshot.
    pub zero_base: bool,
    /// The page was written back, so the store holds its data even if the
    /// region's slabs started zeroed ([`RegionInner::all_stored`]).
    pub stored: bool,
}

/// One lock and state per page of a `len`-byte region, all zero bytes: an
/// 8 GiB region has 2 Mi entries, and zeroed memory stays unbacked until a
/// page is first touched, so the table costs nothing for pages never used.
pub(crate) fn page_table(pages: usize) -> Box<[Mutex<PageMeta>]> {
    if pages == 0 {
        return Box::new([]);
    }
    let layout = std::alloc::Layout::array::<Mutex<PageMeta>>(pages).expect("page table size");
    // SAFETY: all-zero bytes are a valid unlocked `Mutex<PageMeta>` (raw
    // mutex state 0 = unlocked; Absent = 0, false, None = null, 0, false…;
    // `zeroed_page_table_is_the_initial_state` checks it), and the pointer
    // is owned by the returned Box, allocated with the Global allocator and
    // that layout.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout) as *mut Mutex<PageMeta>;
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, pages))
    }
}

pub(crate) struct RegionInner {
    pub start: u64,
    pub len: u64,
    pub pages: Box<[Mutex<PageMeta>]>,
    /// The store may hold something other than zeros for every page (else
    /// the slabs were zeroed, and a page never written back is filled
    /// locally instead of fetched).
    pub all_stored: bool,
    pub backing: Backing,
    pub dead: AtomicBool,
    /// Where first touches of never-written pages run in order: how many
    /// such pages a fault installs around itself (`Shared::reserve_around`).
    pub readahead: Mutex<Readahead>,
}

impl RegionInner {
    pub(crate) fn page_addr(&self, idx: usize) -> u64 {
        self.start + idx as u64 * PAGE
    }
    /// The index of the page holding `addr`, which must be in the region.
    pub(crate) fn page_index(&self, addr: u64) -> usize {
        ((addr - self.start) / PAGE) as usize
    }
    pub(crate) fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr < self.start + self.len
    }
    pub(crate) fn remote(&self, idx: usize) -> Option<u64> {
        self.backing.remote(idx as u64 * PAGE)
    }
    /// Where page `idx` is written back to, backing its chunk if needed.
    pub(crate) fn remote_or_back(
        &self,
        idx: usize,
        rm: &Arc<ResourceManager>,
    ) -> Result<u64, RuntimeError> {
        self.backing.remote_or_back(idx as u64 * PAGE, rm)
    }
}

impl RegionInner {
    /// Pages of local memory the region's page table takes: it is mapped
    /// whole but costs memory only where pages were touched (32 bytes per
    /// far page, 8 MiB per GiB used), which only the kernel knows.
    pub(crate) fn table_pages(&self) -> u64 {
        let bytes = std::mem::size_of_val(&*self.pages);
        if bytes == 0 {
            return 0;
        }
        let start = self.pages.as_ptr() as usize & !(PAGE as usize - 1);
        let end = (self.pages.as_ptr() as usize + bytes).next_multiple_of(PAGE as usize);
        let mut resident = vec![0u8; (end - start) / PAGE as usize];
        // SAFETY: the range covers the table's own allocation (rounded out
        // to pages, all mapped), with one output byte per page.
        let rc = unsafe {
            libc::mincore(
                start as *mut libc::c_void,
                end - start,
                resident.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return 0;
        }
        resident.iter().filter(|&&b| b & 1 != 0).count() as u64
    }
}

impl Drop for RegionInner {
    fn drop(&mut self) {
        // SAFETY: the mapping was created by us with this start and length,
        // and no thread holds a reference into it any more (last Arc).
        unsafe { libc::munmap(self.start as *mut libc::c_void, self.len as usize) };
    }
}

/// A page a fault (or fault-around) has taken (state Fetching) to fill.
pub(crate) struct FetchJob {
    pub region: Arc<RegionInner>,
    pub idx: usize,
    pub write: bool,
    /// Never written to the store: zero-fill instead of reading it.
    pub zero: bool,
    /// Its slot in the cache is taken already (a fault handed over by a
    /// signal handler).
    pub reserved: bool,
    pub t0: Instant,
}

/// A read-only anonymous mapping: reads see the kernel's shared zero page,
/// so it is a source of zeros for UFFDIO_COPY that takes no memory.
pub(crate) struct Zeros {
    addr: u64,
    len: u64,
}

impl Zeros {
    pub(crate) fn map(len: u64) -> std::io::Result<Self> {
        // SAFETY: a fresh anonymous mapping; nothing else refers to it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self {
            addr: p as u64,
            len,
        })
    }

    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.addr as *const u8
    }
}

impl Drop for Zeros {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len as usize) };
    }
}

/// A fresh private anonymous mapping of `len` bytes for userfaultfd to
/// serve, in 4 KiB pages only: a huge page would be fetched and tracked as
/// one block. Returns its address.
pub(crate) fn map_pages(len: u64) -> Result<u64, RuntimeError> {
    // SAFETY: a fresh anonymous mapping; nothing else refers to it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(RuntimeError::Mmap(std::io::Error::last_os_error()));
    }
    // SAFETY: advice on our own mapping.
    unsafe { libc::madvise(p, len as usize, libc::MADV_NOHUGEPAGE) };
    Ok(p as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_page_table_is_the_initial_state() {
        let table = page_table(3);
        assert_eq!(table.len(), 3);
        for m in table.iter() {
            let g = m.try_lock().expect("a zeroed mutex is unlocked");
            assert_eq!(g.state, State::Absent);
            assert!(!g.waiters && !g.stored && !g.zero_base);
            assert!(g.snapshot.is_none() && g.force == 0);
        }
        // Entries lock independently.
        let _a = table[0].lock();
        assert!(table[1].try_lock().is_some());
        assert!(page_table(0).is_empty());
    }
}
