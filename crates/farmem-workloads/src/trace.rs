//! The compact binary trace format, streamed in both directions.
//!
//! ```text
//! header (128 B): magic "FMTRACE\0", u32 version, u32 header length,
//!   u64 accesses, u64 instructions, u64 footprint pages, u64 page records,
//!   u32 threads, u32 flags (bit 0: summary complete), 64 B workload name,
//!   u64 declared footprint (bytes the workload's arrays span; 0 if unknown);
//!   all little-endian
//! records, each starting with a tag byte:
//!   bits 0-1  0 load, 1 store, 2 page content, 3 thread switch
//!   access:   bits 2-4 size code (0..=6: 1 << code bytes; 7: varint size follows)
//!             bit 5 a varint instruction gap follows (else 0)
//!             bit 6 address = this thread's previous address + its size
//!                   (else a zigzag varint delta from the previous address follows)
//!   page:     bit 2 all-zero page (no data); varint page number; 4096 B data
//!   thread:   varint thread id (applies to the following accesses)
//!   bit 7 is reserved and must be 0
//! ```
//!
//! Sequential accesses cost 1–2 bytes, a random one ~5. The writer patches
//! the header's summary when it finishes, so the reader knows the footprint
//! (for sizing local memory) before replaying.

use std::fs::File;
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use farmem_core::PAGE_SIZE;
use rustc_hash::FxHashSet;

use crate::record::{Access, Sink};

pub const MAGIC: &[u8; 8] = b"FMTRACE\0";
pub const VERSION: u32 = 1;
pub const HEADER_LEN: usize = 128;
const NAME_LEN: usize = 64;
const FLAG_COMPLETE: u32 = 1;

const T_LOAD: u8 = 0;
const T_STORE: u8 = 1;
const T_PAGE: u8 = 2;
const T_THREAD: u8 = 3;
const B_GAP: u8 = 1 << 5;
const B_SEQ: u8 = 1 << 6;
const B_ZERO_PAGE: u8 = 1 << 2;
/// Longest access record: tag, size, gap and address varints.
const MAX_ACCESS_LEN: usize = 1 + 3 + 5 + 10;

/// Why a trace could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("trace {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("trace {path}: not a farmem trace (bad magic)")]
    BadMagic { path: PathBuf },
    #[error("trace {path}: unsupported version {version} (this build reads {VERSION})")]
    BadVersion { path: PathBuf, version: u32 },
    #[error("trace {path}: truncated record at byte {offset}")]
    Truncated { path: PathBuf, offset: u64 },
    #[error("trace {path}: bad record tag {tag:#04x} at byte {offset}")]
    BadTag { path: PathBuf, offset: u64, tag: u8 },
    #[error("trace {path}: bad value at byte {offset}: {what}")]
    BadValue {
        path: PathBuf,
        offset: u64,
        what: &'static str,
    },
}

/// The trace's summary, written last by the writer.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TraceHeader {
    pub version: u32,
    pub workload: String,
    pub accesses: u64,
    pub instructions: u64,
    pub footprint_pages: u64,
    pub page_records: u64,
    pub threads: u32,
    /// False when the writer did not finish (the counts are then zero).
    pub complete: bool,
    /// Bytes the workload declared at `begin` (its arrays); 0 if unknown.
    pub declared_footprint: u64,
}

impl TraceHeader {
    /// The footprint to size local memory by: what the workload declared,
    /// else the pages it touched.
    pub fn footprint_bytes(&self) -> u64 {
        if self.declared_footprint > 0 {
            self.declared_footprint
        } else {
            self.footprint_pages * PAGE_SIZE
        }
    }
}

impl TraceHeader {
    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&self.version.to_le_bytes());
        h[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        h[16..24].copy_from_slice(&self.accesses.to_le_bytes());
        h[24..32].copy_from_slice(&self.instructions.to_le_bytes());
        h[32..40].copy_from_slice(&self.footprint_pages.to_le_bytes());
        h[40..48].copy_from_slice(&self.page_records.to_le_bytes());
        h[48..52].copy_from_slice(&self.threads.to_le_bytes());
        let flags = if self.complete { FLAG_COMPLETE } else { 0 };
        h[52..56].copy_from_slice(&flags.to_le_bytes());
        let name = self.workload.as_bytes();
        let n = name.len().min(NAME_LEN);
        h[56..56 + n].copy_from_slice(&name[..n]);
        h[120..128].copy_from_slice(&self.declared_footprint.to_le_bytes());
        h
    }

    fn decode(path: &Path, h: &[u8; HEADER_LEN]) -> Result<Self, TraceError> {
        if &h[0..8] != MAGIC {
            return Err(TraceError::BadMagic { path: path.into() });
        }
        let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().unwrap_or([0; 4]));
        let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap_or([0; 8]));
        let version = u32_at(8);
        if version != VERSION || u32_at(12) as usize != HEADER_LEN {
            return Err(TraceError::BadVersion {
                path: path.into(),
                version,
            });
        }
        let name = &h[56..56 + NAME_LEN];
        let end = name.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
        Ok(Self {
            version,
            workload: String::from_utf8_lossy(&name[..end]).into_owned(),
            accesses: u64_at(16),
            instructions: u64_at(24),
            footprint_pages: u64_at(32),
            page_records: u64_at(40),
            threads: u32_at(48),
            complete: u32_at(52) & FLAG_COMPLETE != 0,
            declared_footprint: u64_at(120),
        })
    }
}

#[inline]
fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline]
fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

/// Per-thread previous address, for delta coding.
#[derive(Default)]
struct Prev {
    next_seq: Vec<u64>,
}

impl Prev {
    #[inline]
    fn get(&mut self, thread: u16) -> &mut u64 {
        let t = thread as usize;
        if t >= self.next_seq.len() {
            self.next_seq.resize(t + 1, 0);
        }
        &mut self.next_seq[t]
    }
}

/// Streams accesses and page contents into a trace file.
pub struct TraceWriter<W: Write + Seek = BufWriter<File>> {
    out: W,
    path: PathBuf,
    buf: Vec<u8>,
    header: TraceHeader,
    thread: u16,
    prev_addr: Prev,
    pages: FxHashSet<u64>,
    last_page: u64,
    with_contents: bool,
    error: Option<io::Error>,
}

impl TraceWriter<BufWriter<File>> {
    pub fn create(path: &Path, workload: &str, with_contents: bool) -> Result<Self, TraceError> {
        let io = |source| TraceError::Io {
            path: path.into(),
            source,
        };
        let f = File::create(path).map_err(io)?;
        Self::new(
            BufWriter::with_capacity(1 << 20, f),
            path,
            workload,
            with_contents,
        )
    }
}

impl<W: Write + Seek> TraceWriter<W> {
    /// Writes a provisional header; `path` names the output in errors.
    pub fn new(
        mut out: W,
        path: &Path,
        workload: &str,
        with_contents: bool,
    ) -> Result<Self, TraceError> {
        let header = TraceHeader {
            version: VERSION,
            workload: workload.to_string(),
            ..Default::default()
        };
        out.write_all(&header.encode())
            .map_err(|source| TraceError::Io {
                path: path.into(),
                source,
            })?;
        Ok(Self {
            out,
            path: path.into(),
            buf: Vec::with_capacity(1 << 16),
            header,
            thread: 0,
            prev_addr: Prev::default(),
            pages: FxHashSet::default(),
            last_page: u64::MAX,
            with_contents,
            error: None,
        })
    }

    fn flush_buf(&mut self) {
        if self.error.is_none()
            && let Err(e) = self.out.write_all(&self.buf)
        {
            self.error = Some(e);
        }
        self.buf.clear();
    }

    /// Flushes, patches the header's summary and returns it.
    pub fn finish(self) -> Result<TraceHeader, TraceError> {
        self.finish_into().map(|(h, _)| h)
    }

    /// As [`finish`](Self::finish), also handing back the output.
    pub fn finish_into(mut self) -> Result<(TraceHeader, W), TraceError> {
        self.flush_buf();
        let path = self.path.clone();
        let io = |source| TraceError::Io {
            path: path.clone(),
            source,
        };
        if let Some(e) = self.error.take() {
            return Err(io(e));
        }
        self.header.footprint_pages = self.pages.len() as u64;
        self.header.threads = self.prev_addr.next_seq.len().max(1) as u32;
        self.header.complete = true;
        let bytes = self.header.encode();
        self.out.seek(SeekFrom::Start(0)).map_err(io)?;
        self.out.write_all(&bytes).map_err(io)?;
        self.out.flush().map_err(io)?;
        Ok((self.header, self.out))
    }
}

impl<W: Write + Seek> Sink for TraceWriter<W> {
    fn begin(&mut self, footprint: u64) {
        self.header.declared_footprint = footprint;
    }

    #[inline]
    fn access(&mut self, a: Access) {
        if a.thread != self.thread {
            self.buf.push(T_THREAD);
            put_varint(&mut self.buf, a.thread as u64);
            self.thread = a.thread;
        }
        let size = a.size.max(1);
        let code = if size.is_power_of_two() && size <= 64 {
            size.trailing_zeros() as u8
        } else {
            7
        };
        let mut tag = if a.write { T_STORE } else { T_LOAD } | (code << 2);
        if a.gap != 0 {
            tag |= B_GAP;
        }
        let prev = self.prev_addr.get(a.thread);
        let seq = a.addr == *prev;
        let delta = a.addr.wrapping_sub(*prev) as i64;
        *prev = a.addr.wrapping_add(size as u64);
        if seq {
            tag |= B_SEQ;
        }
        self.buf.push(tag);
        if code == 7 {
            put_varint(&mut self.buf, size as u64);
        }
        if a.gap != 0 {
            put_varint(&mut self.buf, a.gap as u64);
        }
        if !seq {
            put_varint(&mut self.buf, zigzag(delta));
        }
        self.header.accesses += 1;
        self.header.instructions += a.gap as u64 + 1;
        let page = a.addr / PAGE_SIZE;
        if page != self.last_page {
            self.last_page = page;
            self.pages.insert(page);
        }
        if self.buf.len() >= (1 << 16) - 64 {
            self.flush_buf();
        }
    }

    fn wants_contents(&self) -> bool {
        self.with_contents
    }

    fn page(&mut self, addr: u64, data: &[u8]) {
        let zero = data.iter().all(|&b| b == 0);
        self.buf.push(T_PAGE | if zero { B_ZERO_PAGE } else { 0 });
        put_varint(&mut self.buf, addr / PAGE_SIZE);
        if !zero {
            let mut page = [0u8; PAGE_SIZE as usize];
            let n = data.len().min(page.len());
            page[..n].copy_from_slice(&data[..n]);
            self.buf.extend_from_slice(&page);
        }
        self.header.page_records += 1;
        if self.buf.len() >= (1 << 16) - 64 {
            self.flush_buf();
        }
    }
}

/// One decoded record. Page data borrows the reader's buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum TraceRecord<'a> {
    Access(Access),
    /// Initial content of the page at `addr`; `None` for an all-zero page.
    Page {
        addr: u64,
        data: Option<&'a [u8]>,
    },
}

/// Streams records out of a trace, through a fixed buffer.
pub struct TraceReader<R: Read = File> {
    input: R,
    path: PathBuf,
    header: TraceHeader,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    eof: bool,
    /// File offset of `buf[0]`.
    base: u64,
    thread: u16,
    prev_addr: Prev,
}

impl TraceReader<File> {
    pub fn open(path: &Path) -> Result<Self, TraceError> {
        let f = File::open(path).map_err(|source| TraceError::Io {
            path: path.into(),
            source,
        })?;
        Self::new(f, path)
    }
}

impl<R: Read> TraceReader<R> {
    pub fn new(mut input: R, path: &Path) -> Result<Self, TraceError> {
        let mut h = [0u8; HEADER_LEN];
        input.read_exact(&mut h).map_err(|source| {
            if source.kind() == io::ErrorKind::UnexpectedEof {
                TraceError::BadMagic { path: path.into() }
            } else {
                TraceError::Io {
                    path: path.into(),
                    source,
                }
            }
        })?;
        let header = TraceHeader::decode(path, &h)?;
        Ok(Self {
            input,
            path: path.into(),
            header,
            buf: vec![0; 1 << 20],
            pos: 0,
            end: 0,
            eof: false,
            base: HEADER_LEN as u64,
            thread: 0,
            prev_addr: Prev::default(),
        })
    }

    pub fn header(&self) -> &TraceHeader {
        &self.header
    }

    /// Makes `n` bytes available unless the input ends first.
    #[inline(always)]
    fn fill(&mut self, n: usize) -> Result<(), TraceError> {
        if self.end - self.pos >= n || self.eof {
            return Ok(());
        }
        self.refill(n)
    }

    #[cold]
    #[inline(never)]
    fn refill(&mut self, n: usize) -> Result<(), TraceError> {
        self.buf.copy_within(self.pos..self.end, 0);
        self.base += self.pos as u64;
        self.end -= self.pos;
        self.pos = 0;
        while self.end < n && !self.eof {
            match self.input.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(k) => self.end += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(TraceError::Io {
                        path: self.path.clone(),
                        source,
                    });
                }
            }
        }
        Ok(())
    }

    fn truncated(&self) -> TraceError {
        TraceError::Truncated {
            path: self.path.clone(),
            offset: self.base + self.pos as u64,
        }
    }

    #[inline(always)]
    fn varint(&mut self) -> Result<u64, TraceError> {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let Some(&b) = self.buf[..self.end].get(self.pos) else {
                return Err(self.truncated());
            };
            self.pos += 1;
            if shift == 63 && b > 1 {
                return Err(TraceError::BadValue {
                    path: self.path.clone(),
                    offset: self.base + self.pos as u64,
                    what: "varint overflows 64 bits",
                });
            }
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
            shift += 7;
            if shift > 63 {
                return Err(TraceError::BadValue {
                    path: self.path.clone(),
                    offset: self.base + self.pos as u64,
                    what: "varint longer than 10 bytes",
                });
            }
        }
    }

    /// The next record, or `None` at the end of the trace.
    #[inline]
    pub fn next_record(&mut self) -> Result<Option<TraceRecord<'_>>, TraceError> {
        loop {
            self.fill(MAX_ACCESS_LEN)?;
            if self.pos == self.end {
                return Ok(None);
            }
            let start = self.pos;
            let tag = self.buf[self.pos];
            self.pos += 1;
            if tag & 0x80 != 0 {
                return Err(TraceError::BadTag {
                    path: self.path.clone(),
                    offset: self.base + start as u64,
                    tag,
                });
            }
            match tag & 3 {
                T_THREAD => {
                    let t = self.varint()?;
                    self.thread = u16::try_from(t).map_err(|_| TraceError::BadValue {
                        path: self.path.clone(),
                        offset: self.base + start as u64,
                        what: "thread id above 65535",
                    })?;
                }
                T_PAGE => {
                    let page = self.varint()?;
                    let addr = page.checked_mul(PAGE_SIZE).ok_or(TraceError::BadValue {
                        path: self.path.clone(),
                        offset: self.base + start as u64,
                        what: "page number out of range",
                    })?;
                    if tag & B_ZERO_PAGE != 0 {
                        return Ok(Some(TraceRecord::Page { addr, data: None }));
                    }
                    let n = PAGE_SIZE as usize;
                    self.fill(n)?;
                    if self.end - self.pos < n {
                        return Err(self.truncated());
                    }
                    let at = self.pos;
                    self.pos += n;
                    return Ok(Some(TraceRecord::Page {
                        addr,
                        data: Some(&self.buf[at..at + n]),
                    }));
                }
                kind => {
                    let code = (tag >> 2) & 7;
                    let size = if code == 7 {
                        let s = self.varint()?;
                        match u16::try_from(s) {
                            Ok(s) if s > 0 => s,
                            _ => {
                                return Err(TraceError::BadValue {
                                    path: self.path.clone(),
                                    offset: self.base + start as u64,
                                    what: "access size 0 or above 65535",
                                });
                            }
                        }
                    } else {
                        1u16 << code
                    };
                    let gap = if tag & B_GAP != 0 {
                        let g = self.varint()?;
                        u32::try_from(g).map_err(|_| TraceError::BadValue {
                            path: self.path.clone(),
                            offset: self.base + start as u64,
                            what: "instruction gap above 2^32",
                        })?
                    } else {
                        0
                    };
                    let thread = self.thread;
                    let delta = if tag & B_SEQ != 0 {
                        0
                    } else {
                        unzigzag(self.varint()?)
                    };
                    let prev = self.prev_addr.get(thread);
                    let addr = prev.wrapping_add(delta as u64);
                    *prev = addr.wrapping_add(size as u64);
                    return Ok(Some(TraceRecord::Access(Access {
                        addr,
                        gap,
                        thread,
                        size,
                        write: kind == T_STORE,
                    })));
                }
            }
        }
    }

    /// Replays the rest of the trace into `sink`; returns the accesses replayed.
    pub fn replay<S: Sink + ?Sized>(&mut self, sink: &mut S) -> Result<u64, TraceError> {
        let contents = sink.wants_contents();
        let mut n = 0;
        while let Some(r) = self.next_record()? {
            match r {
                TraceRecord::Access(a) => {
                    n += 1;
                    sink.access(a)
                }
                TraceRecord::Page { addr, data } if contents => match data {
                    Some(d) => sink.page(addr, d),
                    None => sink.page(addr, &[0u8; PAGE_SIZE as usize]),
                },
                TraceRecord::Page { .. } => {}
            }
        }
        Ok(n)
    }
}

/// Scans a trace for the summary its header may lack (unfinished writers).
pub fn scan_summary(path: &Path) -> Result<TraceHeader, TraceError> {
    let mut r = TraceReader::open(path)?;
    let mut h = r.header().clone();
    let (mut accesses, mut instructions, mut page_records) = (0u64, 0u64, 0u64);
    let mut pages = FxHashSet::default();
    let mut threads = 0u32;
    let mut last = u64::MAX;
    while let Some(rec) = r.next_record()? {
        match rec {
            TraceRecord::Access(a) => {
                accesses += 1;
                instructions += a.gap as u64 + 1;
                threads = threads.max(a.thread as u32 + 1);
                let p = a.addr / PAGE_SIZE;
                if p != last {
                    last = p;
                    pages.insert(p);
                }
            }
            TraceRecord::Page { .. } => page_records += 1,
        }
    }
    h.accesses = accesses;
    h.instructions = instructions;
    h.page_records = page_records;
    h.footprint_pages = pages.len() as u64;
    h.threads = threads.max(1);
    h.complete = true;
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn sample() -> Vec<Access> {
        vec![
            Access::load(0x1000, 8, 3),
            Access::load(0x1008, 8, 0),
            Access::store(0x1000, 4, 1),
            Access::load(0xdead_beef, 10, 7).on_thread(2),
            Access::load(0x10, 64, 0),
            Access::store(u64::MAX - 100, 1, u32::MAX).on_thread(2),
        ]
    }

    #[test]
    fn round_trips_accesses_and_pages() {
        let accesses = sample();
        let page: Vec<u8> = (0..4096).map(|i| (i % 251) as u8).collect();
        let mut w =
            TraceWriter::new(Cursor::new(Vec::new()), Path::new("mem"), "unit", true).unwrap();
        w.page(0x4000, &page);
        w.page(0x8000, &[0u8; 4096]);
        for &a in &accesses {
            w.access(a);
        }
        let (h, out) = w.finish_into().unwrap();
        let bytes = out.into_inner();
        assert_eq!(h.accesses, 6);
        assert_eq!(h.page_records, 2);
        assert_eq!(h.threads, 3);
        assert_eq!(h.workload, "unit");
        assert!(h.complete);
        let mut r = TraceReader::new(Cursor::new(bytes), Path::new("mem")).unwrap();
        assert_eq!(r.header(), &h);
        assert_eq!(
            r.next_record().unwrap(),
            Some(TraceRecord::Page {
                addr: 0x4000,
                data: Some(&page[..])
            })
        );
        assert_eq!(
            r.next_record().unwrap(),
            Some(TraceRecord::Page {
                addr: 0x8000,
                data: None
            })
        );
        let mut got = Vec::new();
        while let Some(TraceRecord::Access(a)) = r.next_record().unwrap() {
            got.push(a);
        }
        assert_eq!(got, accesses);
    }

    #[test]
    fn varints_of_every_length_round_trip() {
        let mut vals = vec![
            0u64,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            u32::MAX as u64,
            u64::MAX,
        ];
        for shift in 0..64 {
            vals.push(1u64 << shift);
            vals.push((1u64 << shift) - 1);
        }
        let mut w =
            TraceWriter::new(Cursor::new(Vec::new()), Path::new("mem"), "v", false).unwrap();
        let mut expect = Vec::new();
        let mut addr = 0u64;
        for (i, &v) in vals.iter().enumerate() {
            addr = addr.wrapping_add(v);
            let a = Access::load(addr, 8, (v % (1 << 32)) as u32).on_thread((i % 3) as u16);
            w.access(a);
            expect.push(a);
        }
        let (_, out) = w.finish_into().unwrap();
        let mut r = TraceReader::new(Cursor::new(out.into_inner()), Path::new("mem")).unwrap();
        let mut got = Vec::new();
        while let Some(TraceRecord::Access(a)) = r.next_record().unwrap() {
            got.push(a);
        }
        assert_eq!(got, expect);
    }

    #[test]
    fn corrupt_input_is_a_typed_error() {
        let mut w =
            TraceWriter::new(Cursor::new(Vec::new()), Path::new("mem"), "x", false).unwrap();
        w.access(Access::load(0x1234_5678, 8, 300));
        let (_, out) = w.finish_into().unwrap();
        let bytes = out.into_inner();
        // Cut the last varint short.
        let cut = &bytes[..bytes.len() - 1];
        let mut r = TraceReader::new(Cursor::new(cut.to_vec()), Path::new("cut")).unwrap();
        assert!(matches!(r.next_record(), Err(TraceError::Truncated { .. })));
        let mut bad = bytes.clone();
        bad[HEADER_LEN] |= 0x80;
        let mut r = TraceReader::new(Cursor::new(bad), Path::new("bad")).unwrap();
        assert!(matches!(r.next_record(), Err(TraceError::BadTag { .. })));
        let mut magic = bytes.clone();
        magic[0] = b'X';
        assert!(matches!(
            TraceReader::new(Cursor::new(magic), Path::new("m")),
            Err(TraceError::BadMagic { .. })
        ));
        assert!(matches!(
            TraceReader::new(Cursor::new(vec![1, 2, 3]), Path::new("short")),
            Err(TraceError::BadMagic { .. })
        ));
    }
}
