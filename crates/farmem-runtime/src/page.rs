//! The bottom layer: a page's state and lock, the page buffers faults
//! fetch into, and a region's table of pages over its remote backing.

use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use parking_lot::Mutex;

use farmem_policy::readahead::Readahead;
use farmem_policy::write_streak::WriteStreak;

use crate::bufs::{Buf, map_anonymous};
use crate::error::RuntimeError;
use crate::slab::{Backing, ResourceManager};

/// Page size the runtime maps, fetches and tracks.
pub const PAGE: u64 = farmem_core::PAGE_SIZE;
/// Dirty-tracking granularity in line mode.
pub const LINE: usize = farmem_core::CACHE_LINE as usize;
/// Most pages a fault installs around itself (a window beyond it is cut).
pub use farmem_policy::readahead::MAX_FAULT_AROUND;

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
    /// Not mapped; its data is on the store. Zero: see [`PageTable`].
    Absent = 0,
    /// A filler owns it and is fetching it.
    Fetching,
    /// Mapped, write-protected, identical to the store.
    Clean,
    /// Mapped and writable; differs (or may) from the store.
    Dirty,
    /// The evictor or a sync owns it: write-protected, being written back.
    Busy,
    /// On probation (`park.rs`): still resident and counted, but its
    /// frame moved to a parking slot, so the program's next touch faults
    /// and tells the cache the page is in use. Clean or dirty as
    /// `parked_dirty` says.
    Parked,
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
    /// Line mode without a snapshot: the page held zeros when it came in
    /// (the store holds zeros for it, or it is `zeroed`, whose every line
    /// is forced anyway), so zero is the diff base and no copy is needed.
    /// Pages a program fills from scratch cost no snapshot.
    pub zero_base: bool,
    /// The page was written back, so the store holds its data even if the
    /// region's slabs started zeroed ([`RegionInner::all_stored`]).
    pub stored: bool,
    /// The program freed the page (`Runtime::discard`): it reads as zeros,
    /// filled locally, while the store keeps what it last had, so its next
    /// write-back ships every line. Cleared once one has.
    pub zeroed: bool,
    /// Its writes over past residencies: a fetch installs it writable when
    /// it predicts one ([`farmem_policy::write_streak`]).
    pub streak: WriteStreak,
    /// Installed writable on its streak: Dirty without a write seen.
    pub unwatched: bool,
    /// Parked: the parking slot holding its frame, and whether it was
    /// Dirty (else Clean) when parked.
    pub slot: Option<std::num::NonZeroU32>,
    pub parked_dirty: bool,
    /// The number of its last parking (`park.rs`).
    pub parking: u32,
    /// Calls in flight whose buffers hold this page (`Runtime::pin`):
    /// the evictor passes it by, so the kernel finds it mapped.
    pub pins: u32,
}

impl PageMeta {
    /// Whether the page's next fetch is zeros, filled locally with nothing
    /// read: the store holds zeros for it, or the program freed it.
    pub(crate) fn reads_zero(&self, r: &RegionInner) -> bool {
        self.zeroed || self.store_zero(r)
    }

    /// Whether the store holds zeros for the page: its region's slabs
    /// started zeroed and it was never written back.
    pub(crate) fn store_zero(&self, r: &RegionInner) -> bool {
        !(self.stored || r.all_stored)
    }
}

/// One lock and state per page of a region, in a mapping of its own: all
/// zero bytes at first (an 8 GiB region has 2 Mi entries), and backed
/// only where pages were touched, so the table costs nothing for pages
/// never used, and what it costs is what the kernel says is resident
/// ([`PageTable::resident_pages`]).
pub(crate) struct PageTable {
    entries: NonNull<Mutex<PageMeta>>,
    len: usize,
    /// Bytes mapped: the entries rounded up to whole pages.
    mapped: usize,
}

// SAFETY: the table owns its entries, which are Mutexes.
unsafe impl Send for PageTable {}
// SAFETY: as above: shared access goes through each entry's lock.
unsafe impl Sync for PageTable {}

impl PageTable {
    pub(crate) fn new(pages: usize) -> Result<Self, RuntimeError> {
        let bytes = pages
            .checked_mul(std::mem::size_of::<Mutex<PageMeta>>())
            .ok_or_else(|| RuntimeError::Config(format!("a table of {pages} pages")))?;
        let mapped = bytes.max(1).next_multiple_of(PAGE as usize);
        // 4 KiB pages: a touch backs 128 entries, not 64 Ki.
        let p = map_anonymous(mapped).map_err(RuntimeError::Mmap)?;
        Ok(Self {
            entries: p.cast(),
            len: pages,
            mapped,
        })
    }

    /// For each page of the table, whether the kernel has backed it (an
    /// entry on it was touched); None if it cannot say.
    fn residency(&self) -> Option<Vec<bool>> {
        let mut resident = vec![0u8; self.mapped / PAGE as usize];
        // SAFETY: our own mapping, with one output byte per page.
        let rc = unsafe {
            libc::mincore(
                self.entries.as_ptr().cast(),
                self.mapped,
                resident.as_mut_ptr(),
            )
        };
        (rc == 0).then(|| resident.iter().map(|&b| b & 1 != 0).collect())
    }

    /// Pages of the table the kernel has backed (touched entries).
    pub(crate) fn resident_pages(&self) -> u64 {
        self.residency()
            .map_or(0, |r| r.iter().filter(|&&b| b).count() as u64)
    }

    /// Indices of the entries that may have left their initial state:
    /// those on backed pages of the table. Any change takes the entry's
    /// lock, which writes it, so an entry on a page never backed is still
    /// Absent with nothing attached. Walking only these keeps a walk over
    /// a large, sparsely used region from backing its whole table.
    pub(crate) fn touched(&self) -> impl Iterator<Item = usize> + '_ {
        let resident = self.residency();
        let size = std::mem::size_of::<Mutex<PageMeta>>();
        let page = PAGE as usize;
        (0..self.len).filter(move |&i| match &resident {
            Some(r) => r[i * size / page] || r[((i + 1) * size - 1) / page],
            // Unknown: every entry, as before.
            None => true,
        })
    }
}

impl std::ops::Deref for PageTable {
    type Target = [Mutex<PageMeta>];
    fn deref(&self) -> &Self::Target {
        // SAFETY: all-zero bytes are a valid unlocked `Mutex<PageMeta>` (raw
        // mutex state 0 = unlocked; Absent = 0, false, None = null, 0,
        // false…; `zeroed_page_table_is_the_initial_state` checks it), and
        // the mapping holds `len` of them for the table's life.
        unsafe { std::slice::from_raw_parts(self.entries.as_ptr(), self.len) }
    }
}

impl Drop for PageTable {
    fn drop(&mut self) {
        // SAFETY: the entries are ours and dropped once (nothing in them
        // needs dropping today; this keeps it right if that changes), then
        // the mapping is unmapped once.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                self.entries.as_ptr(),
                self.len,
            ));
            libc::munmap(self.entries.as_ptr().cast(), self.mapped);
        }
    }
}

pub(crate) struct RegionInner {
    pub start: u64,
    pub len: u64,
    pub pages: PageTable,
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
    /// Pages of local memory the region's page table takes: 32 bytes per
    /// far page touched (8 MiB per GiB used).
    pub(crate) fn table_pages(&self) -> u64 {
        self.pages.resident_pages()
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
    /// Install writable and dirty: the access is a write, or the page's
    /// streak predicts one (then `unwatched` too).
    pub write: bool,
    pub unwatched: bool,
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
    let p = map_anonymous(len as usize).map_err(RuntimeError::Mmap)?;
    Ok(p.as_ptr() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_page_table_is_the_initial_state() {
        let table = PageTable::new(3).unwrap();
        assert_eq!(table.len(), 3);
        for m in table.iter() {
            let g = m.try_lock().expect("a zeroed mutex is unlocked");
            assert_eq!(g.state, State::Absent);
            assert!(!g.waiters && !g.stored && !g.zero_base);
            assert!(g.snapshot.is_none() && g.force == 0);
            assert!(g.slot.is_none() && !g.parked_dirty);
        }
        // Entries lock independently.
        let _a = table[0].lock();
        assert!(table[1].try_lock().is_some());
        assert!(PageTable::new(0).unwrap().is_empty());
        assert_eq!(table.resident_pages(), 1, "entries touched: one page");
    }
}

/// The pages fault-around took for a fault: `before` just below its page
/// (a descending stream of stored pages, read with the page by a thread)
/// and `after` just above it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Around {
    pub before: usize,
    pub after: usize,
}

impl Around {
    pub fn is_empty(&self) -> bool {
        self.before == 0 && self.after == 0
    }

    /// Its two runs beside page `idx` (first page, pages): below, above.
    pub fn runs(&self, idx: usize) -> [(usize, usize); 2] {
        [(idx - self.before, self.before), (idx + 1, self.after)]
    }
}

/// Which of the link's lanes a window is read on: a fault's own window
/// on the demand lane, `--engine daemon`'s clusters on the bulk lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    Demand,
    Bulk,
}
