//! One memory access, and where workloads send them.

/// A data access by one thread, after `gap` non-memory instructions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access {
    pub addr: u64,
    /// Non-memory instructions retired since this thread's previous access.
    pub gap: u32,
    pub thread: u16,
    /// Bytes accessed (1 or more).
    pub size: u16,
    pub write: bool,
}

impl Access {
    pub fn load(addr: u64, size: u16, gap: u32) -> Self {
        Self {
            addr,
            gap,
            thread: 0,
            size,
            write: false,
        }
    }
    pub fn store(addr: u64, size: u16, gap: u32) -> Self {
        Self {
            write: true,
            ..Self::load(addr, size, gap)
        }
    }
    pub fn on_thread(self, thread: u16) -> Self {
        Self { thread, ..self }
    }
}

/// Where accesses go: the simulator, a trace file, a test's vector.
pub trait Sink {
    /// Called once before any access, when the workload's data exists:
    /// `footprint` is the bytes of its data arrays (rounded up to pages).
    fn begin(&mut self, _footprint: u64) {}
    fn access(&mut self, a: Access);
    /// Several accesses in order; a sink that looks ahead (prefetching its
    /// state for later records) overrides it.
    #[inline]
    fn access_batch(&mut self, batch: &[Access]) {
        for &a in batch {
            self.access(a);
        }
    }
    /// Whether page contents are wanted (costly to produce; only traces and
    /// compression-aware schemes use them).
    fn wants_contents(&self) -> bool {
        false
    }
    /// The initial content of the page at `addr` (page-aligned, `data` is one page).
    fn page(&mut self, _addr: u64, _data: &[u8]) {}
}

impl Sink for Vec<Access> {
    fn access(&mut self, a: Access) {
        self.push(a);
    }
}

/// Counts what passes through (for `--dry-run` style summaries and tests).
#[derive(Debug, Default, Clone, Copy)]
pub struct CountingSink {
    pub accesses: u64,
    pub instructions: u64,
}

impl Sink for CountingSink {
    fn access(&mut self, a: Access) {
        self.accesses += 1;
        self.instructions += a.gap as u64 + 1;
    }
}
