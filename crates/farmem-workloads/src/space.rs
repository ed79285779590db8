//! The simulated address space of a workload: page-aligned regions, one per
//! data array, and an emitter that turns array indexing into accesses.

use farmem_core::{CACHE_LINE, PAGE_SIZE};

use crate::record::{Access, Sink};

/// Where simulated arrays start: away from 0 so traces look like user heaps.
pub const BASE: u64 = 0x10_0000_0000;

/// One data array in the simulated address space.
#[derive(Debug, Clone, Copy)]
pub struct Region {
    pub base: u64,
    pub elem: u16,
    pub len: u64,
}

impl Region {
    #[inline]
    pub fn addr(&self, i: u64) -> u64 {
        self.base + i * self.elem as u64
    }
    pub fn bytes(&self) -> u64 {
        self.len * self.elem as u64
    }
}

/// Bump allocator of page-aligned regions.
#[derive(Debug, Clone)]
pub struct Space {
    next: u64,
    regions: Vec<(&'static str, Region)>,
}

impl Default for Space {
    fn default() -> Self {
        Self {
            next: BASE,
            regions: Vec::new(),
        }
    }
}

impl Space {
    pub fn alloc(&mut self, name: &'static str, elem: u16, len: u64) -> Region {
        let r = Region {
            base: self.next,
            elem,
            len,
        };
        let bytes = r.bytes().div_ceil(PAGE_SIZE).max(1) * PAGE_SIZE;
        self.next += bytes;
        self.regions.push((name, r));
        r
    }
    /// Bytes of all regions, rounded up to pages.
    pub fn footprint(&self) -> u64 {
        self.next - BASE
    }
    pub fn regions(&self) -> &[(&'static str, Region)] {
        &self.regions
    }
}

/// Plain values whose little-endian bytes are a page's real content.
pub trait Pod: Copy {
    const SIZE: usize;
    fn put(self, out: &mut [u8]);
}

macro_rules! pod {
    ($($t:ty),*) => {$(
        impl Pod for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline]
            fn put(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
pod!(u8, u32, u64, i32, i64, f32, f64);

impl Pod for bool {
    const SIZE: usize = 1;
    #[inline]
    fn put(self, out: &mut [u8]) {
        out[0] = self as u8;
    }
}

/// Turns array indexing into accesses on one thread.
pub struct Emitter<'a, S: Sink + ?Sized> {
    pub sink: &'a mut S,
    pub thread: u16,
}

impl<'a, S: Sink + ?Sized> Emitter<'a, S> {
    pub fn new(sink: &'a mut S) -> Self {
        Self { sink, thread: 0 }
    }
    #[inline]
    pub fn ld(&mut self, r: &Region, i: u64, gap: u32) {
        self.sink
            .access(Access::load(r.addr(i), r.elem, gap).on_thread(self.thread));
    }
    #[inline]
    pub fn st(&mut self, r: &Region, i: u64, gap: u32) {
        self.sink
            .access(Access::store(r.addr(i), r.elem, gap).on_thread(self.thread));
    }
    /// A `size`-byte access at byte `offset` of `r` (records, values).
    #[inline]
    pub fn ld_bytes(&mut self, r: &Region, offset: u64, size: u16, gap: u32) {
        self.sink
            .access(Access::load(r.base + offset, size, gap).on_thread(self.thread));
    }
    #[inline]
    pub fn st_bytes(&mut self, r: &Region, offset: u64, size: u16, gap: u32) {
        self.sink
            .access(Access::store(r.base + offset, size, gap).on_thread(self.thread));
    }
    /// Elements `from..to` of `r` touched in order by a loop that does
    /// little else (a fill, a flag scan, a prefix sum): one access per cache
    /// line, as the memory system sees it, carrying `gap_per_elem`
    /// instructions for each element it covers. Keeps byte-array passes
    /// from costing one trace record per byte.
    pub fn scan(&mut self, r: &Region, from: u64, to: u64, write: bool, gap_per_elem: u32) {
        let elem = u64::from(r.elem.max(1));
        let (mut a, end) = (r.addr(from), r.addr(to.min(r.len)));
        while a < end {
            let next = ((a / CACHE_LINE) + 1) * CACHE_LINE;
            let bytes = next.min(end) - a;
            let gap = gap_per_elem.saturating_mul(bytes.div_ceil(elem) as u32);
            let acc = if write {
                Access::store(a, bytes as u16, gap)
            } else {
                Access::load(a, bytes as u16, gap)
            };
            self.sink.access(acc.on_thread(self.thread));
            a = next;
        }
    }
    /// Reports the initial content of `r` from `values`, if the sink wants it.
    pub fn contents<T: Pod>(&mut self, r: &Region, values: &[T]) {
        if !self.sink.wants_contents() {
            return;
        }
        let per_page = PAGE_SIZE as usize / T::SIZE;
        for p in 0..values.len().div_ceil(per_page) {
            self.contents_page(r, values, p);
        }
    }
    /// Reports again the pages that hold elements `from..to` of `r`, from
    /// `values`: a kernel that fills an array in order calls it as it
    /// finishes each stretch, so a page crosses the link with the values it
    /// holds by then, not the ones it started with, at the cost of one page
    /// record per stretch rather than a comparison of the whole array.
    pub fn contents_span<T: Pod>(&mut self, r: &Region, values: &[T], from: usize, to: usize) {
        let to = to.min(values.len());
        if !self.sink.wants_contents() || from >= to {
            return;
        }
        let per_page = PAGE_SIZE as usize / T::SIZE;
        for p in from / per_page..=(to - 1) / per_page {
            self.contents_page(r, values, p);
        }
    }
    /// Reports the content of page `p` of `r` (a page record may come
    /// again later in a trace: it then replaces the earlier one).
    fn contents_page<T: Pod>(&mut self, r: &Region, values: &[T], p: usize) {
        let mut page = vec![0u8; PAGE_SIZE as usize];
        let per_page = PAGE_SIZE as usize / T::SIZE;
        let chunk = values.chunks(per_page).nth(p).unwrap_or(&[]);
        for (i, v) in chunk.iter().enumerate() {
            v.put(&mut page[i * T::SIZE..(i + 1) * T::SIZE]);
        }
        self.sink.page(r.base + p as u64 * PAGE_SIZE, &page);
    }
}

/// The last reported contents of an array that changes as the workload
/// runs, so that its pages can be reported again when they change (the
/// link compresses what a page holds when it moves, not what it held at
/// the start).
pub struct Snapshot<T> {
    prev: Vec<T>,
}

impl<T: Pod + PartialEq> Snapshot<T> {
    /// Reports `values` as `r`'s contents and remembers them.
    pub fn new<S: Sink + ?Sized>(em: &mut Emitter<'_, S>, r: &Region, values: &[T]) -> Self {
        em.contents(r, values);
        let prev = if em.sink.wants_contents() {
            values.to_vec()
        } else {
            Vec::new()
        };
        Self { prev }
    }
    /// Reports again each page of `r` whose values differ from the last
    /// report; returns how many.
    pub fn update<S: Sink + ?Sized>(
        &mut self,
        em: &mut Emitter<'_, S>,
        r: &Region,
        values: &[T],
    ) -> usize {
        if !em.sink.wants_contents() || self.prev.len() != values.len() {
            return 0;
        }
        let per_page = PAGE_SIZE as usize / T::SIZE;
        let mut changed = 0;
        for p in 0..values.len().div_ceil(per_page) {
            let span = p * per_page..((p + 1) * per_page).min(values.len());
            if self.prev[span.clone()] != values[span.clone()] {
                self.prev[span.clone()].copy_from_slice(&values[span]);
                em.contents_page(r, values, p);
                changed += 1;
            }
        }
        changed
    }
}
