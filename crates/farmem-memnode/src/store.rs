//! The memory node's backing store: its slice of the global address space,
//! allocated lazily in chunks so a node can advertise 64 GiB and cost nothing
//! until written. Reads of never-written memory return zeros.

use farmem_net::server::Lent;
use parking_lot::{RwLock, RwLockReadGuard};

/// Bytes per lazily allocated chunk. Large enough that the table stays tiny
/// (32 Ki entries for 64 GiB), small enough that a sparse write costs little.
pub const CHUNK: u64 = 2 << 20;

/// Lazily allocated memory, `capacity` bytes, addressed from zero.
pub struct ChunkStore {
    capacity: u64,
    chunks: Vec<RwLock<Option<Box<[u8]>>>>,
}

/// An access outside the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("range [{offset:#x}, +{len}) lies outside the store's {capacity} bytes")]
pub struct OutOfRange {
    pub offset: u64,
    pub len: u64,
    pub capacity: u64,
}

impl ChunkStore {
    pub fn new(capacity: u64) -> Self {
        let n = capacity.div_ceil(CHUNK) as usize;
        Self {
            capacity,
            chunks: (0..n).map(|_| RwLock::new(None)).collect(),
        }
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes actually backed by memory.
    pub fn resident_bytes(&self) -> u64 {
        self.chunks.iter().filter(|c| c.read().is_some()).count() as u64 * CHUNK
    }

    fn check(&self, offset: u64, len: u64) -> Result<(), OutOfRange> {
        match offset.checked_add(len) {
            Some(end) if end <= self.capacity => Ok(()),
            _ => Err(OutOfRange {
                offset,
                len,
                capacity: self.capacity,
            }),
        }
    }

    /// Splits [offset, offset+len) at chunk boundaries.
    fn pieces(offset: u64, len: u64) -> impl Iterator<Item = (usize, usize, usize, usize)> {
        // (chunk index, offset in chunk, length, offset in caller's buffer)
        let mut done = 0u64;
        std::iter::from_fn(move || {
            (done < len).then(|| {
                let at = offset + done;
                let in_chunk = at % CHUNK;
                let n = (CHUNK - in_chunk).min(len - done);
                let piece = (
                    (at / CHUNK) as usize,
                    in_chunk as usize,
                    n as usize,
                    done as usize,
                );
                done += n;
                piece
            })
        })
    }

    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), OutOfRange> {
        self.check(offset, buf.len() as u64)?;
        for (chunk, at, n, pos) in Self::pieces(offset, buf.len() as u64) {
            let dst = &mut buf[pos..pos + n];
            match &*self.chunks[chunk].read() {
                Some(data) => dst.copy_from_slice(&data[at..at + n]),
                None => dst.fill(0),
            }
        }
        Ok(())
    }

    /// Appends `len` bytes at `offset` to `out` (saves a copy when building replies).
    pub fn read_append(&self, offset: u64, len: u64, out: &mut Vec<u8>) -> Result<(), OutOfRange> {
        self.check(offset, len)?;
        // Straight from the chunks: no zero fill to overwrite.
        out.reserve(len as usize);
        for (chunk, at, n, _) in Self::pieces(offset, len) {
            match &*self.chunks[chunk].read() {
                Some(data) => out.extend_from_slice(&data[at..at + n]),
                None => out.resize(out.len() + n, 0),
            }
        }
        Ok(())
    }

    /// Lends the bytes of [offset, offset+len) for a reply written
    /// straight from them: each chunk's piece held under its read lock,
    /// never-written pieces as zeros. The lock is taken recursively: a
    /// connection holds several pieces at once, and a writer queued on a
    /// chunk after the first must not make its second piece wait on it.
    pub fn lend<'s>(
        &'s self,
        offset: u64,
        len: u64,
        parts: &mut Vec<Lent<'s>>,
    ) -> Result<(), OutOfRange> {
        self.check(offset, len)?;
        for (chunk, at, n, _) in Self::pieces(offset, len) {
            let held = RwLockReadGuard::try_map(self.chunks[chunk].read_recursive(), |c| {
                c.as_deref().and_then(|data| data.get(at..at + n))
            });
            parts.push(match held {
                Ok(bytes) => Lent::Held(bytes),
                Err(_) => Lent::Zeros(n),
            });
        }
        Ok(())
    }

    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), OutOfRange> {
        self.check(offset, data.len() as u64)?;
        for (chunk, at, n, pos) in Self::pieces(offset, data.len() as u64) {
            let mut slot = self.chunks[chunk].write();
            let chunk_len = (self.capacity - chunk as u64 * CHUNK).min(CHUNK) as usize;
            // calloc-backed: the kernel maps zero pages lazily, so even an
            // allocated chunk only costs what is written into it.
            let data_chunk = slot.get_or_insert_with(|| vec![0u8; chunk_len].into_boxed_slice());
            data_chunk[at..at + n].copy_from_slice(&data[pos..pos + n]);
        }
        Ok(())
    }
}

impl ChunkStore {
    /// Makes a range read as zeros again, freeing every chunk it covers whole.
    pub fn zero(&self, offset: u64, len: u64) -> Result<(), OutOfRange> {
        self.check(offset, len)?;
        for (chunk, at, n, _) in Self::pieces(offset, len) {
            let mut slot = self.chunks[chunk].write();
            let whole = at == 0 && n == slot.as_ref().map_or(CHUNK as usize, |d| d.len());
            if whole {
                *slot = None;
            } else if let Some(data) = slot.as_mut() {
                data[at..at + n].fill(0);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwritten_memory_reads_as_zero_and_costs_nothing() {
        let s = ChunkStore::new(64 << 30);
        let mut buf = [1u8; 4096];
        s.read(10 << 30, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
        assert_eq!(s.resident_bytes(), 0);
    }

    #[test]
    fn writes_across_chunk_boundaries_read_back() {
        let s = ChunkStore::new(3 * CHUNK + 100);
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let at = CHUNK - 5000;
        s.write(at, &data).unwrap();
        let mut back = vec![0u8; data.len()];
        s.read(at, &mut back).unwrap();
        assert_eq!(back, data);
        assert_eq!(s.resident_bytes(), 2 * CHUNK);
        // zeroing frees whole chunks and clears partial ones
        s.zero(CHUNK, CHUNK).unwrap();
        s.zero(at, 100).unwrap();
        s.read(at, &mut back).unwrap();
        assert!(back[..100].iter().all(|&b| b == 0));
        assert_eq!(&back[100..5000], &data[100..5000]);
        assert!(back[5000..].iter().all(|&b| b == 0));
        assert_eq!(s.resident_bytes(), CHUNK);
        // the short last chunk
        s.write(3 * CHUNK + 90, &[9; 10]).unwrap();
        assert!(s.write(3 * CHUNK + 91, &[9; 10]).is_err());
        assert!(s.read(u64::MAX - 2, &mut [0; 8]).is_err());
    }

    #[test]
    fn a_lent_read_spans_written_and_unwritten_chunks() {
        let s = ChunkStore::new(3 * CHUNK);
        s.write(CHUNK - 3, &[1, 2, 3]).unwrap();
        let mut parts = Vec::new();
        s.lend(CHUNK - 4, 6, &mut parts).unwrap();
        let mut got = Vec::new();
        for p in &parts {
            match p {
                Lent::Held(b) => got.extend_from_slice(b),
                Lent::Zeros(n) => got.resize(got.len() + n, 0),
            }
        }
        assert_eq!(got, [0, 1, 2, 3, 0, 0]);
        assert!(
            matches!(parts[1], Lent::Zeros(2)),
            "chunk 1 was never written"
        );
        // Held pieces do not keep another reader out.
        let mut back = [0u8; 3];
        s.read(CHUNK - 3, &mut back).unwrap();
        assert_eq!(back, [1, 2, 3]);
        drop(parts);
        assert!(s.lend(3 * CHUNK - 1, 2, &mut Vec::new()).is_err());
    }

    #[test]
    fn an_appended_read_spans_written_and_unwritten_chunks() {
        let s = ChunkStore::new(3 * CHUNK);
        s.write(CHUNK - 3, &[1, 2, 3]).unwrap();
        let mut out = vec![7u8, 7];
        s.read_append(CHUNK - 4, 6, &mut out).unwrap();
        assert_eq!(out, [7, 7, 0, 1, 2, 3, 0, 0]);
        assert!(s.read_append(3 * CHUNK - 1, 2, &mut out).is_err());
        assert_eq!(out.len(), 8, "a refused read appends nothing");
    }
}
