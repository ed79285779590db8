//! LEB128 varints and LSB-first bit streams shared by the codecs.

/// Append `v` as an unsigned LEB128 varint.
pub(crate) fn write_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes `write_varint(v)` produces.
pub(crate) fn varint_len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Decode a varint; `None` if truncated, overlong or overflowing.
pub(crate) fn read_varint(data: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &b) in data.iter().enumerate().take(10) {
        let part = u64::from(b & 0x7f);
        if i == 9 && part > 1 {
            return None;
        }
        v |= part << (7 * i);
        if b & 0x80 == 0 {
            // Canonical form only, so every page has exactly one encoding.
            if i > 0 && b == 0 {
                return None;
            }
            return Some((v, i + 1));
        }
    }
    None
}

/// LSB-first bit writer appending to a byte vector.
pub(crate) struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    acc: u64,
    n: u32,
}

impl<'a> BitWriter<'a> {
    pub(crate) fn new(out: &'a mut Vec<u8>) -> Self {
        BitWriter { out, acc: 0, n: 0 }
    }

    /// Append the low `bits` bits of `v` (`bits` <= 32).
    pub(crate) fn put(&mut self, v: u64, bits: u32) {
        debug_assert!(bits <= 32);
        let mask = (1u64 << bits) - 1;
        self.acc |= (v & mask) << self.n;
        self.n += bits;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    /// Flush the partial byte (zero padded).
    pub(crate) fn finish(self) {
        if self.n > 0 {
            self.out.push(self.acc as u8);
        }
    }
}

/// LSB-first bit reader over a byte slice.
pub(crate) struct BitReader<'a> {
    data: &'a [u8],
    bitpos: usize,
}

impl<'a> BitReader<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        BitReader { data, bitpos: 0 }
    }

    /// Read `bits` bits (`bits` <= 32); `None` past the end.
    pub(crate) fn get(&mut self, mut bits: u32) -> Option<u64> {
        debug_assert!(bits <= 32);
        let at = self.bitpos >> 3;
        // Fast path: one unaligned 8-byte load covers off (<= 7) + 32 bits.
        if let Some(chunk) = self.data.get(at..at + 8) {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            let v = (u64::from_le_bytes(b) >> (self.bitpos & 7)) & ((1u64 << bits) - 1);
            self.bitpos += bits as usize;
            return Some(v);
        }
        let mut v = 0u64;
        let mut shift = 0;
        while bits > 0 {
            let byte = *self.data.get(self.bitpos >> 3)?;
            let off = (self.bitpos & 7) as u32;
            let take = (8 - off).min(bits);
            let chunk = (u64::from(byte) >> off) & ((1u64 << take) - 1);
            v |= chunk << shift;
            shift += take;
            bits -= take;
            self.bitpos += take as usize;
        }
        Some(v)
    }

    /// Whole bytes touched so far (the partial last byte counts).
    pub(crate) fn bytes_used(&self) -> usize {
        self.bitpos.div_ceil(8)
    }

    /// True if the padding bits of the last partial byte are all zero
    /// (the writer pads with zeros; anything else is corruption).
    pub(crate) fn padding_is_zero(&self) -> bool {
        let off = self.bitpos & 7;
        if off == 0 {
            return true;
        }
        self.data
            .get(self.bitpos >> 3)
            .is_none_or(|&b| b >> off == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trip_and_strictness() {
        for v in [0u64, 1, 127, 128, 4096, 1 << 21, u64::MAX] {
            let mut out = Vec::new();
            write_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v), "{v}");
            assert_eq!(read_varint(&out), Some((v, out.len())));
        }
        let mut out = Vec::new();
        write_varint(&mut out, 4096);
        assert_eq!(out, [0x80, 0x20]);
        assert_eq!(read_varint(&[0x80]), None); // truncated
        assert_eq!(read_varint(&[0x80, 0x00]), None); // overlong
        assert_eq!(read_varint(&[0xff; 10]), None); // overflow
        assert_eq!(read_varint(&[]), None);
    }

    #[test]
    fn fast_and_tail_reads_agree() {
        let mut out = Vec::new();
        let mut w = BitWriter::new(&mut out);
        let vals: Vec<(u64, u32)> = (0..200u64)
            .map(|i| ((i * 2_654_435_761) & 0xffff_ffff, (i % 32 + 1) as u32))
            .collect();
        for &(v, n) in &vals {
            w.put(v, n);
        }
        w.finish();
        let mut r = BitReader::new(&out);
        for &(v, n) in &vals {
            assert_eq!(r.get(n), Some(v & ((1u64 << n) - 1)));
        }
        assert!(r.padding_is_zero());
        assert_eq!(r.bytes_used(), out.len());
    }

    #[test]
    fn bits_round_trip() {
        let mut out = Vec::new();
        let mut w = BitWriter::new(&mut out);
        w.put(0b101, 3);
        w.put(0xdead_beef, 32);
        w.put(1, 1);
        w.finish();
        assert_eq!(out.len(), 5); // 36 bits
        let mut r = BitReader::new(&out);
        assert_eq!(r.get(3), Some(0b101));
        assert_eq!(r.get(32), Some(0xdead_beef));
        assert_eq!(r.get(1), Some(1));
        assert!(r.padding_is_zero());
        assert_eq!(r.bytes_used(), 5);
        assert_eq!(r.get(8), None);
    }
}
