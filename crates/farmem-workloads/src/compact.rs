//! Compacting a trace's address space: a captured program's pages lie
//! scattered over 47 bits (heap, mappings, stack); compacted, they run on
//! from [`BASE`] in their order, so the trace can be replayed on one buffer
//! (`farmem trace replay`) and simulated on the same pages.
//!
//! A gap between two touched pages is kept up to [`MAX_GAP`] pages and
//! shortened to it beyond: fault-around windows (at most 256 pages) see the
//! same neighbours, touched or not, as in the original layout, and never
//! reach across a gap that was longer.

use std::path::Path;

use farmem_core::PAGE_SIZE;
use rustc_hash::FxHashMap;

use crate::space::BASE;
use crate::trace::{TraceError, TraceHeader, TraceReader, TraceRecord, TraceWriter};
use crate::{Access, Sink};

/// The longest run of untouched pages kept between two touched ones.
pub const MAX_GAP: u64 = 256;

/// The new page of every touched page: `BASE`'s page onwards, in order,
/// gaps kept up to [`MAX_GAP`].
pub fn page_map(pages: &mut Vec<u64>) -> FxHashMap<u64, u64> {
    pages.sort_unstable();
    pages.dedup();
    let mut map = FxHashMap::default();
    let mut next = BASE / PAGE_SIZE;
    let mut prev: Option<u64> = None;
    for &p in pages.iter() {
        if let Some(q) = prev {
            next += (p - q).min(MAX_GAP);
        }
        map.insert(p, next);
        prev = Some(p);
    }
    map
}

/// Writes `input` compacted to `output`; returns the new header (its
/// declared footprint spans the compacted pages).
pub fn compact(input: &Path, output: &Path) -> Result<TraceHeader, TraceError> {
    let mut pages = Vec::new();
    let mut reader = TraceReader::open(input)?;
    let name = reader.header().workload.clone();
    let mut contents = false;
    while let Some(r) = reader.next_record()? {
        match r {
            TraceRecord::Access(a) => pages.push(a.addr / PAGE_SIZE),
            TraceRecord::Page { addr, .. } => {
                contents = true;
                pages.push(addr / PAGE_SIZE);
            }
        }
    }
    let map = page_map(&mut pages);
    let span = match (pages.first(), pages.last()) {
        (Some(_), Some(&last)) => (map[&last] + 1) * PAGE_SIZE - BASE,
        _ => 0,
    };
    let mut out = Remap {
        map,
        writer: TraceWriter::create(output, &name, contents)?,
    };
    out.writer.begin(span);
    let mut reader = TraceReader::open(input)?;
    while let Some(r) = reader.next_record()? {
        match r {
            TraceRecord::Access(a) => out.access(a),
            TraceRecord::Page { addr, data } => {
                let zeros = [0u8; PAGE_SIZE as usize];
                let addr = out.moved(addr);
                out.writer.page(addr, data.unwrap_or(&zeros));
            }
        }
    }
    out.writer.finish()
}

struct Remap {
    map: FxHashMap<u64, u64>,
    writer: TraceWriter<std::io::BufWriter<std::fs::File>>,
}

impl Remap {
    fn moved(&self, addr: u64) -> u64 {
        // Every page was mapped in the first pass.
        let page = self.map.get(&(addr / PAGE_SIZE)).copied().unwrap_or(0);
        page * PAGE_SIZE + addr % PAGE_SIZE
    }
}

impl Sink for Remap {
    fn access(&mut self, a: Access) {
        let addr = self.moved(a.addr);
        self.writer.access(Access { addr, ..a });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_keep_their_order_and_short_gaps() {
        let mut pages = vec![0x7fff_0000, 10, 11, 11, 20, 10 + 1000];
        let m = page_map(&mut pages);
        let b = BASE / PAGE_SIZE;
        assert_eq!(m[&10], b);
        assert_eq!(m[&11], b + 1);
        // A gap of 9 is kept, one of 990 shortened to MAX_GAP.
        assert_eq!(m[&20], b + 10);
        assert_eq!(m[&1010], b + 10 + MAX_GAP);
        assert_eq!(m[&0x7fff_0000], b + 10 + 2 * MAX_GAP);
    }

    #[test]
    fn a_compacted_trace_keeps_every_access_within_its_span() {
        let dir = std::env::temp_dir().join(format!("farmem-compact-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (input, output) = (dir.join("in.trace"), dir.join("out.trace"));
        let mut w = TraceWriter::create(&input, "scattered", false).unwrap();
        let addrs = [
            0x5555_0000_1008u64,
            0x7ffd_1234_5678,
            0x5555_0000_3010,
            0x40,
        ];
        for (i, &a) in addrs.iter().enumerate() {
            w.access(if i % 2 == 0 {
                Access::load(a, 8, 1)
            } else {
                Access::store(a, 8, 1)
            });
        }
        w.finish().unwrap();
        let h = compact(&input, &output).unwrap();
        assert_eq!(h.accesses, 4);
        assert_eq!(h.footprint_pages, 4);
        let mut got = Vec::new();
        TraceReader::open(&output)
            .unwrap()
            .replay(&mut got)
            .unwrap();
        let b = BASE / PAGE_SIZE;
        // Pages 0, 0x5555_0000_1, 0x5555_0000_3 and 0x7ffd_1234_5 become
        // b, b + MAX_GAP, b + MAX_GAP + 2 and b + 2 MAX_GAP + 2.
        let want = [
            (b + MAX_GAP) * PAGE_SIZE + 0x008,
            (b + 2 * MAX_GAP + 2) * PAGE_SIZE + 0x678,
            (b + MAX_GAP + 2) * PAGE_SIZE + 0x010,
            b * PAGE_SIZE + 0x40,
        ];
        assert_eq!(got.iter().map(|a| a.addr).collect::<Vec<_>>(), want);
        assert_eq!(
            got.iter().map(|a| a.write).collect::<Vec<_>>(),
            [false, true, false, true]
        );
        assert_eq!(h.declared_footprint, (2 * MAX_GAP + 3) * PAGE_SIZE);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
