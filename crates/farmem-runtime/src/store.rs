//! The two narrow interfaces the runtime needs from the rest of farmem, and an
//! in-memory implementation of both for tests and benchmarks.
//!
//! A [`RemoteStore`] is where pages live when they are not local; a
//! [`SlabSource`] hands out remote memory in large slabs (Kona's Resource
//! Manager asks the controller). The network client implements both over the
//! wire protocol; [`MemStore`] implements them over a sparse map in this
//! process, counts what moves, and can be told to fail.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use serde::Serialize;

use farmem_core::Counter;

// Its own names for the units, so the store depends on nothing in the crate.
const PAGE: u64 = farmem_core::PAGE_SIZE;
const LINE: usize = farmem_core::CACHE_LINE as usize;

/// Why a store operation failed. The runtime never drops data on any of
/// these: it retries or keeps the page resident, except for
/// [`StoreError::Lost`], where there is nothing left to retry.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The bytes asked for are gone, or the node holding them is (restarted,
    /// down past its deadline) and no copy is left: retrying cannot help,
    /// and serving anything in their place would be a wrong answer.
    #[error("{0}")]
    Lost(String),
    /// The store is up but declined the operation (full, read-only, fenced).
    #[error("store refused the operation")]
    Refused,
    #[error("store disconnected")]
    Disconnected,
    #[error("store operation timed out")]
    Timeout,
    /// Address range the store does not hold.
    #[error("address range {addr:#x}+{len} is outside the store")]
    OutOfRange { addr: u64, len: u64 },
    /// The store has no more memory to hand out.
    #[error("store exhausted: asked for {asked} bytes, {left} left")]
    Exhausted { asked: u64, left: u64 },
    #[error(transparent)]
    Other(#[from] Box<dyn std::error::Error + Send + Sync>),
}

impl StoreError {
    /// True when the data asked for cannot be had at all (see [`StoreError::Lost`]).
    pub fn is_lost(&self) -> bool {
        matches!(self, StoreError::Lost(_))
    }
}

/// The pieces of `len` bytes at `addr`, one per page they touch, in
/// order: (the page's address, offset in the page, range in the buffer).
pub(crate) fn page_pieces(
    addr: u64,
    len: usize,
) -> impl Iterator<Item = (u64, usize, std::ops::Range<usize>)> {
    let mut done = 0usize;
    std::iter::from_fn(move || {
        (done < len).then(|| {
            let a = addr + done as u64;
            let off = (a % PAGE) as usize;
            let n = (PAGE as usize - off).min(len - done);
            let piece = (a - off as u64, off, done..done + n);
            done += n;
            piece
        })
    })
}

/// Where pages live when they are not local. Addresses are global remote addresses.
pub trait RemoteStore: Send + Sync + 'static {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), StoreError>;
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), StoreError>;
    /// Apply many (address, 64-byte line) records; returns once they are durable on the store (acknowledged).
    fn write_lines(&self, lines: &[(u64, [u8; 64])]) -> Result<(), StoreError>;

    /// Reads like [`RemoteStore::read`] as bulk traffic: a cluster no
    /// fault is waiting on yet (`--engine daemon`), sent on the bulk lane
    /// so demand reads never queue behind it. A store without lanes reads
    /// as usual.
    fn read_bulk(&self, addr: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        self.read(addr, buf)
    }

    /// Makes [`RemoteStore::read_in_signal`] possible (again): opens what
    /// it needs, replaces what broke. False: this store has no such path.
    fn prepare_read_in_signal(&self) -> Result<bool, StoreError> {
        Ok(false)
    }

    /// Reads like [`RemoteStore::read`], from a signal handler on a thread
    /// that may hold any lock or be inside the allocator: no allocation,
    /// no parking on a lock. False when that is not possible now
    /// (unsupported, busy, failed; `buf` is then unspecified): the caller
    /// takes the ordinary path, which reports what is wrong.
    fn read_in_signal(&self, _addr: u64, _buf: &mut [u8]) -> bool {
        false
    }

    /// Local memory the store itself holds (a compressed pool), which the
    /// runtime counts against its limit like its own pages.
    fn local_bytes(&self) -> u64 {
        0
    }
}

/// Hands out remote memory in large slabs (Kona's Resource Manager asks the controller).
pub trait SlabSource: Send + Sync + 'static {
    fn allocate(&self, size: u64) -> Result<Vec<(u64 /*base*/, u64 /*len*/)>, StoreError>;
}

/// Which [`MemStore`] calls a fault applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultOp {
    Read,
    /// `write` and `write_lines`.
    Write,
    Any,
}

/// What [`MemStore`] has seen, for tests and reports.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct MemStoreStats {
    pub reads: u64,
    /// Of `reads`: those made on the bulk lane ([`RemoteStore::read_bulk`]).
    pub bulk_reads: u64,
    pub bytes_read: u64,
    pub writes: u64,
    pub bytes_written: u64,
    pub write_lines_calls: u64,
    pub lines_written: u64,
    pub failed_calls: u64,
    pub slab_allocations: u64,
    pub bytes_allocated: u64,
}

#[derive(Default)]
struct Counters {
    reads: Counter,
    bulk_reads: Counter,
    bytes_read: Counter,
    writes: Counter,
    bytes_written: Counter,
    write_lines_calls: Counter,
    lines_written: Counter,
    failed_calls: Counter,
    slab_allocations: Counter,
    bytes_allocated: Counter,
}

/// Sparse in-memory store: pages never written read as zeros and take no
/// memory, so a test can address gigabytes and pay only for what it touches.
pub struct MemStore {
    capacity: u64,
    /// Slabs are handed out from here upward; a non-zero base catches
    /// translation bugs that confuse local offsets with remote addresses.
    base: u64,
    next: Mutex<u64>,
    shards: Vec<Mutex<HashMap<u64, Box<[u8; PAGE as usize]>>>>,
    counters: Counters,
    refuse_writes: AtomicBool,
    refuse_reads: AtomicBool,
    /// Number of calls (reads, writes, write_lines) made so far.
    calls: AtomicU64,
    /// Fail the call whose number (0-based) equals this; u64::MAX = never.
    fail_at: AtomicU64,
    fail_op: Mutex<FaultOp>,
}

const SHARDS: usize = 64;

impl MemStore {
    /// A store holding `capacity` bytes starting at remote address 1 TiB.
    pub fn new(capacity: u64) -> Self {
        Self::with_base(1 << 40, capacity)
    }

    /// A store holding `capacity` bytes from `base`; a range reaching past
    /// the end of the address space is cut short there.
    pub fn with_base(base: u64, capacity: u64) -> Self {
        Self {
            capacity: capacity.min(u64::MAX - base),
            base,
            next: Mutex::new(base),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            counters: Counters::default(),
            refuse_writes: AtomicBool::new(false),
            refuse_reads: AtomicBool::new(false),
            calls: AtomicU64::new(0),
            fail_at: AtomicU64::new(u64::MAX),
            fail_op: Mutex::new(FaultOp::Any),
        }
    }

    /// While set, every write and write_lines returns [`StoreError::Refused`].
    pub fn set_refuse_writes(&self, refuse: bool) {
        self.refuse_writes.store(refuse, Ordering::SeqCst);
    }

    /// While set, every read returns [`StoreError::Refused`]: a store that
    /// answers but will not serve, which no retry mends.
    pub fn set_refuse_reads(&self, refuse: bool) {
        self.refuse_reads.store(refuse, Ordering::SeqCst);
    }

    /// Makes the `n`-th call from now (0 = the next one) of kind `op` fail
    /// with [`StoreError::Disconnected`], once. A failed `write_lines`
    /// applies the first half of its batch, as a connection dropped mid-batch.
    pub fn fail_nth(&self, n: u64, op: FaultOp) {
        *self.fail_op.lock() = op;
        let now = self.calls.load(Ordering::SeqCst);
        self.fail_at.store(now + n, Ordering::SeqCst);
    }

    pub fn stats(&self) -> MemStoreStats {
        let c = &self.counters;
        MemStoreStats {
            reads: c.reads.get(),
            bulk_reads: c.bulk_reads.get(),
            bytes_read: c.bytes_read.get(),
            writes: c.writes.get(),
            bytes_written: c.bytes_written.get(),
            write_lines_calls: c.write_lines_calls.get(),
            lines_written: c.lines_written.get(),
            failed_calls: c.failed_calls.get(),
            slab_allocations: c.slab_allocations.get(),
            bytes_allocated: c.bytes_allocated.get(),
        }
    }

    /// Counts one call of kind `op` and decides whether it is the injected failure.
    fn admit(&self, op: FaultOp) -> Result<(), StoreError> {
        let want = *self.fail_op.lock();
        if (want == FaultOp::Any || want == op)
            && self.calls.fetch_add(1, Ordering::SeqCst) == self.fail_at.load(Ordering::SeqCst)
        {
            self.fail_at.store(u64::MAX, Ordering::SeqCst);
            self.counters.failed_calls.inc();
            return Err(StoreError::Disconnected);
        }
        let refused = match op {
            FaultOp::Write => &self.refuse_writes,
            FaultOp::Read => &self.refuse_reads,
            FaultOp::Any => return Ok(()),
        };
        if refused.load(Ordering::SeqCst) {
            self.counters.failed_calls.inc();
            return Err(StoreError::Refused);
        }
        Ok(())
    }

    fn end(&self) -> u64 {
        self.base + self.capacity
    }

    fn check_range(&self, addr: u64, len: u64) -> Result<(), StoreError> {
        let end = addr.checked_add(len);
        match end {
            Some(end) if addr >= self.base && end <= self.end() => Ok(()),
            _ => Err(StoreError::OutOfRange { addr, len }),
        }
    }

    /// The shard holding the page at address `page`.
    fn shard(&self, page: u64) -> &Mutex<HashMap<u64, Box<[u8; PAGE as usize]>>> {
        &self.shards[(page / PAGE) as usize % SHARDS]
    }

    fn put(&self, addr: u64, data: &[u8]) {
        for (page, off, r) in page_pieces(addr, data.len()) {
            let mut shard = self.shard(page).lock();
            let p = shard
                .entry(page)
                .or_insert_with(|| Box::new([0u8; PAGE as usize]));
            p[off..off + r.len()].copy_from_slice(&data[r]);
        }
    }
}

impl RemoteStore for MemStore {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        self.admit(FaultOp::Read)?;
        self.check_range(addr, buf.len() as u64)?;
        for (page, off, r) in page_pieces(addr, buf.len()) {
            let shard = self.shard(page).lock();
            match shard.get(&page) {
                Some(p) => buf[r.clone()].copy_from_slice(&p[off..off + r.len()]),
                None => buf[r].fill(0),
            }
        }
        self.counters.reads.inc();
        self.counters.bytes_read.add(buf.len() as u64);
        Ok(())
    }

    fn read_bulk(&self, addr: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        self.read(addr, buf)?;
        self.counters.bulk_reads.inc();
        Ok(())
    }

    fn prepare_read_in_signal(&self) -> Result<bool, StoreError> {
        Ok(true)
    }

    fn read_in_signal(&self, addr: u64, buf: &mut [u8]) -> bool {
        let Some(want) = self.fail_op.try_lock().map(|g| *g) else {
            return false;
        };
        if want == FaultOp::Any || want == FaultOp::Read {
            if self.fail_at.load(Ordering::SeqCst) != u64::MAX {
                // An injected failure is armed: the ordinary path takes it.
                return false;
            }
            self.calls.fetch_add(1, Ordering::SeqCst);
        }
        if self.check_range(addr, buf.len() as u64).is_err() {
            return false;
        }
        for (page, off, r) in page_pieces(addr, buf.len()) {
            let Some(shard) = self.shard(page).try_lock() else {
                return false;
            };
            match shard.get(&page) {
                Some(p) => buf[r.clone()].copy_from_slice(&p[off..off + r.len()]),
                None => buf[r].fill(0),
            }
        }
        self.counters.reads.inc();
        self.counters.bytes_read.add(buf.len() as u64);
        true
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<(), StoreError> {
        self.admit(FaultOp::Write)?;
        self.check_range(addr, data.len() as u64)?;
        self.put(addr, data);
        self.counters.writes.inc();
        self.counters.bytes_written.add(data.len() as u64);
        Ok(())
    }

    fn write_lines(&self, lines: &[(u64, [u8; 64])]) -> Result<(), StoreError> {
        // Validate the whole batch first so a bad record applies nothing.
        for (addr, _) in lines {
            self.check_range(*addr, LINE as u64)?;
        }
        if let Err(e) = self.admit(FaultOp::Write) {
            if matches!(e, StoreError::Disconnected) {
                // The connection dropped mid-batch: the first half landed.
                for (addr, line) in &lines[..lines.len() / 2] {
                    self.put(*addr, line);
                }
            }
            return Err(e);
        }
        for (addr, line) in lines {
            self.put(*addr, line);
        }
        self.counters.write_lines_calls.inc();
        self.counters.lines_written.add(lines.len() as u64);
        self.counters
            .bytes_written
            .add(lines.len() as u64 * LINE as u64);
        Ok(())
    }
}

impl SlabSource for MemStore {
    fn allocate(&self, size: u64) -> Result<Vec<(u64, u64)>, StoreError> {
        // Slabs are whole pages so every page maps to one remote page.
        let size = size.div_ceil(PAGE) * PAGE;
        let mut next = self.next.lock();
        let left = self.end() - *next;
        if size > left {
            return Err(StoreError::Exhausted { asked: size, left });
        }
        let base = *next;
        *next += size;
        self.counters.slab_allocations.inc();
        self.counters.bytes_allocated.add(size);
        Ok(vec![(base, size)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_reads_zero_and_writes_span_pages() {
        let s = MemStore::new(1 << 20);
        let (base, len) = s.allocate(3 * PAGE).unwrap()[0];
        assert_eq!(len, 3 * PAGE);
        let mut buf = vec![1u8; 100];
        s.read(base + PAGE - 50, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
        let data: Vec<u8> = (0..100).collect();
        s.write(base + PAGE - 50, &data).unwrap();
        s.read(base + PAGE - 50, &mut buf).unwrap();
        assert_eq!(buf, data);
        s.write_lines(&[(base + 2 * PAGE, [7u8; 64])]).unwrap();
        let mut line = [0u8; 64];
        s.read(base + 2 * PAGE, &mut line).unwrap();
        assert_eq!(line, [7u8; 64]);
        let st = s.stats();
        assert_eq!(st.lines_written, 1);
        assert_eq!(st.bytes_written, 164);
    }

    #[test]
    fn faults_are_injected_and_ranges_checked() {
        let s = MemStore::new(1 << 20);
        let (base, _) = s.allocate(PAGE).unwrap()[0];
        s.set_refuse_writes(true);
        assert!(matches!(s.write(base, &[1]), Err(StoreError::Refused)));
        let mut b = [0u8; 1];
        s.read(base, &mut b).unwrap();
        s.set_refuse_writes(false);
        s.fail_nth(1, FaultOp::Write);
        s.write(base, &[1]).unwrap();
        assert!(matches!(
            s.write_lines(&[(base, [0; 64])]),
            Err(StoreError::Disconnected)
        ));
        s.write_lines(&[(base, [0; 64])]).unwrap();
        assert!(matches!(
            s.read(base - 1, &mut b),
            Err(StoreError::OutOfRange { .. })
        ));
        assert!(matches!(
            s.allocate(1 << 30),
            Err(StoreError::Exhausted { .. })
        ));
    }
}
