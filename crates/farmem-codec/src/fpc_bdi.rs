//! Latency-optimized FPC+BDI hybrid (the paper's `fpcbdi`, 4 cycles/line).
//!
//! Each 64 B line is coded on its own with whichever is smaller:
//! - Frequent Pattern Compression (Alameldeen & Wood): per 32-bit word a
//!   3-bit prefix and 0–32 data bits (zero runs, sign-extended 4/8/16-bit
//!   values, zero-padded halfword, two sign-extended bytes, repeated bytes,
//!   raw word), packed as a byte-aligned bit stream per line;
//! - Base-Delta-Immediate (Pekhimenko et al.): the line as 8, 4 or 2-byte
//!   elements, each a 1/2/4-byte signed delta from either zero or one
//!   explicit base (one mask bit per element says which), plus the all-zero
//!   and repeated-8-byte-value special cases.
//!
//! Format: `varint(len)`, then one 4-bit tag per line (two per byte, low
//! nibble first), then the line payloads in order. A last partial line is
//! coded as if zero padded to 64 B; the length header trims it.

use crate::bits::{BitReader, BitWriter, varint_len, write_varint};
use crate::{CodecError, PageCodec, read_len};

/// Bytes per line (the unit of both schemes).
pub const LINE: usize = 64;
/// Latency per line (from the paper's Fig. 12 setup).
pub const CYCLES_PER_LINE: u64 = 4;
const NAME: &str = "fpc-bdi";
const WORDS: usize = LINE / 4;

const TAG_ZERO: u8 = 0;
const TAG_RAW: u8 = 1;
const TAG_FPC: u8 = 2;
const TAG_REP8: u8 = 3;
/// BDI variants: (tag, base bytes, delta bytes), smallest payload first.
const BDI: [(u8, usize, usize); 6] = [
    (4, 8, 1),
    (7, 4, 1),
    (5, 8, 2),
    (8, 4, 2),
    (9, 2, 1),
    (6, 8, 4),
];

/// FPC+BDI hybrid, per 64 B line.
#[derive(Debug, Clone, Copy, Default)]
pub struct FpcBdi;

/// Payload bytes of a BDI line: base, one mask bit per element, deltas.
const fn bdi_size(base: usize, delta: usize) -> usize {
    let n = LINE / base;
    base + n / 8 + n * delta
}

fn mask(bytes: usize) -> u64 {
    if bytes >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * bytes)) - 1
    }
}

/// Sign-extend the low `bits` bits of `v` (1 <= bits <= 64).
fn sext_bits(v: u64, bits: u32) -> i64 {
    let sh = 64 - bits;
    ((v << sh) as i64) >> sh
}

/// Sign-extend the low `bytes` bytes of `v`.
fn sext(v: u64, bytes: usize) -> i64 {
    sext_bits(v, 8 * bytes as u32)
}

/// Does the `base`-byte value `v` fit a `delta`-byte signed immediate?
fn fits(v: u64, base: usize, delta: usize) -> bool {
    let s = sext(v, base);
    let half = 1i64 << (8 * delta - 1);
    (-half..half).contains(&s)
}

fn elem(line: &[u8; LINE], base: usize, i: usize) -> u64 {
    // Fixed-size loads per element width (this is the hot loop of `choose`).
    let at = i * base;
    match base {
        8 => u64::from_le_bytes(line[at..at + 8].try_into().unwrap_or([0; 8])),
        4 => u64::from(u32::from_le_bytes(
            line[at..at + 4].try_into().unwrap_or([0; 4]),
        )),
        _ => u64::from(u16::from_le_bytes(
            line[at..at + 2].try_into().unwrap_or([0; 2]),
        )),
    }
}

/// BDI with bases {0, B}: `Some((B, mask))` if every element fits.
fn bdi_try(line: &[u8; LINE], base: usize, delta: usize) -> Option<(u64, u32)> {
    let mut b = None;
    let mut bits = 0u32;
    for i in 0..LINE / base {
        let v = elem(line, base, i);
        if fits(v, base, delta) {
            continue;
        }
        let bv = *b.get_or_insert(v);
        if !fits(v.wrapping_sub(bv) & mask(base), base, delta) {
            return None;
        }
        bits |= 1 << i;
    }
    Some((b.unwrap_or(0), bits))
}

fn words(line: &[u8; LINE]) -> [u32; WORDS] {
    let mut w = [0u32; WORDS];
    for (i, c) in line.chunks_exact(4).enumerate() {
        w[i] = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
    w
}

/// Walk the FPC code of a line: `emit(prefix, data, data_bits)` per symbol.
fn fpc_walk(w: &[u32; WORDS], mut emit: impl FnMut(u64, u64, u32)) {
    let mut i = 0;
    while i < WORDS {
        if w[i] == 0 {
            let run = w[i..].iter().take(8).take_while(|&&x| x == 0).count();
            emit(0, run as u64 - 1, 3);
            i += run;
            continue;
        }
        let x = w[i];
        let s = x as i32;
        let (hi, lo) = ((x >> 16) as u16 as i16, x as u16 as i16);
        let bytes = x.to_le_bytes();
        let (p, d, n) = if (-8..8).contains(&s) {
            (1, x & 0xf, 4)
        } else if (-128..128).contains(&s) {
            (2, x & 0xff, 8)
        } else if bytes.iter().all(|&b| b == bytes[0]) {
            (6, x & 0xff, 8)
        } else if (-32768..32768).contains(&s) {
            (3, x & 0xffff, 16)
        } else if x & 0xffff == 0 {
            (4, x >> 16, 16)
        } else if (-128..128).contains(&hi) && (-128..128).contains(&lo) {
            (5, ((hi as u32 & 0xff) << 8) | (lo as u32 & 0xff), 16)
        } else {
            (7, x, 32)
        };
        emit(p, u64::from(d), n);
        i += 1;
    }
}

fn fpc_size(w: &[u32; WORDS]) -> usize {
    let mut bits = 0usize;
    fpc_walk(w, |_, _, n| bits += 3 + n as usize);
    bits.div_ceil(8)
}

/// How one line is coded.
enum Enc {
    Zero,
    Raw,
    Rep8,
    Fpc(usize),
    Bdi {
        tag: u8,
        b: usize,
        d: usize,
        base: u64,
        bits: u32,
    },
}

impl Enc {
    fn tag(&self) -> u8 {
        match self {
            Enc::Zero => TAG_ZERO,
            Enc::Raw => TAG_RAW,
            Enc::Rep8 => TAG_REP8,
            Enc::Fpc(_) => TAG_FPC,
            Enc::Bdi { tag, .. } => *tag,
        }
    }

    /// Payload bytes.
    fn size(&self) -> usize {
        match self {
            Enc::Zero => 0,
            Enc::Raw => LINE,
            Enc::Rep8 => 8,
            Enc::Fpc(n) => *n,
            Enc::Bdi { b, d, .. } => bdi_size(*b, *d),
        }
    }
}

/// The cheapest encoding of a line (ties go to BDI: simpler decode).
fn choose(line: &[u8; LINE]) -> Enc {
    if line.iter().all(|&b| b == 0) {
        return Enc::Zero;
    }
    if line.chunks_exact(8).all(|c| c == &line[..8]) {
        return Enc::Rep8;
    }
    let mut best = Enc::Raw;
    for (tag, b, d) in BDI {
        if bdi_size(b, d) < best.size()
            && let Some((base, bits)) = bdi_try(line, b, d)
        {
            best = Enc::Bdi {
                tag,
                b,
                d,
                base,
                bits,
            };
        }
    }
    let f = fpc_size(&words(line));
    if f < best.size() {
        best = Enc::Fpc(f);
    }
    best
}

fn line_at(page: &[u8], i: usize) -> [u8; LINE] {
    let mut line = [0u8; LINE];
    let src = &page[i * LINE..page.len().min((i + 1) * LINE)];
    line[..src.len()].copy_from_slice(src);
    line
}

fn encode_payload(line: &[u8; LINE], enc: &Enc, out: &mut Vec<u8>) {
    match *enc {
        Enc::Zero => {}
        Enc::Raw => out.extend_from_slice(line),
        Enc::Rep8 => out.extend_from_slice(&line[..8]),
        Enc::Fpc(_) => {
            let mut w = BitWriter::new(out);
            fpc_walk(&words(line), |p, d, n| {
                w.put(p, 3);
                w.put(d, n);
            });
            w.finish();
        }
        Enc::Bdi {
            b, d, base, bits, ..
        } => {
            let n = LINE / b;
            out.extend_from_slice(&base.to_le_bytes()[..b]);
            out.extend_from_slice(&bits.to_le_bytes()[..n / 8]);
            for i in 0..n {
                let v = elem(line, b, i);
                let delta = if bits >> i & 1 == 1 {
                    v.wrapping_sub(base)
                } else {
                    v
                };
                out.extend_from_slice(&delta.to_le_bytes()[..d]);
            }
        }
    }
}

fn truncated(what: &'static str) -> CodecError {
    CodecError::Truncated { codec: NAME, what }
}

/// Decode one line payload from the front of `data`; returns bytes used.
fn decode_line(
    tag: u8,
    index: usize,
    data: &[u8],
    line: &mut [u8; LINE],
) -> Result<usize, CodecError> {
    match tag {
        TAG_ZERO => {
            *line = [0; LINE];
            Ok(0)
        }
        TAG_RAW => {
            line.copy_from_slice(data.get(..LINE).ok_or_else(|| truncated("raw line"))?);
            Ok(LINE)
        }
        TAG_REP8 => {
            let v = data.get(..8).ok_or_else(|| truncated("repeated value"))?;
            for c in line.chunks_exact_mut(8) {
                c.copy_from_slice(v);
            }
            Ok(8)
        }
        TAG_FPC => {
            let mut r = BitReader::new(data);
            let mut i = 0;
            while i < WORDS {
                let p = r.get(3).ok_or_else(|| truncated("FPC prefix"))?;
                let bits = [3, 4, 8, 16, 16, 16, 8, 32][p as usize];
                let d = r.get(bits).ok_or_else(|| truncated("FPC data"))?;
                if p == 0 {
                    let run = d as usize + 1;
                    if i + run > WORDS {
                        return Err(CodecError::Corrupt {
                            codec: NAME,
                            detail: format!(
                                "line {index}: zero run of {run} words overflows the line"
                            ),
                        });
                    }
                    line[i * 4..(i + run) * 4].fill(0);
                    i += run;
                    continue;
                }
                let w: u32 = match p {
                    1 => sext_bits(d, 4) as u32,
                    2 => sext(d, 1) as u32,
                    3 => sext(d, 2) as u32,
                    4 => (d as u32) << 16,
                    5 => {
                        let hi = sext(d >> 8, 1) as u32 & 0xffff;
                        let lo = sext(d & 0xff, 1) as u32 & 0xffff;
                        (hi << 16) | lo
                    }
                    6 => (d as u32) * 0x0101_0101,
                    _ => d as u32,
                };
                line[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
                i += 1;
            }
            if !r.padding_is_zero() {
                return Err(CodecError::Corrupt {
                    codec: NAME,
                    detail: format!("line {index}: non-zero FPC padding"),
                });
            }
            Ok(r.bytes_used())
        }
        _ => {
            let &(_, b, d) = BDI.iter().find(|v| v.0 == tag).ok_or(CodecError::BadTag {
                codec: NAME,
                tag,
                line: index,
            })?;
            let n = LINE / b;
            let size = bdi_size(b, d);
            let p = data.get(..size).ok_or_else(|| truncated("BDI line"))?;
            let mut base = [0u8; 8];
            base[..b].copy_from_slice(&p[..b]);
            let base = u64::from_le_bytes(base);
            let mut m = [0u8; 4];
            m[..n / 8].copy_from_slice(&p[b..b + n / 8]);
            let bits = u32::from_le_bytes(m);
            let deltas = &p[b + n / 8..];
            for i in 0..n {
                let mut raw = [0u8; 8];
                raw[..d].copy_from_slice(&deltas[i * d..(i + 1) * d]);
                let delta = sext(u64::from_le_bytes(raw), d) as u64;
                let v = if bits >> i & 1 == 1 {
                    base.wrapping_add(delta)
                } else {
                    delta
                } & mask(b);
                line[i * b..(i + 1) * b].copy_from_slice(&v.to_le_bytes()[..b]);
            }
            Ok(size)
        }
    }
}

impl PageCodec for FpcBdi {
    fn name(&self) -> &'static str {
        NAME
    }

    fn compress(&self, page: &[u8], out: &mut Vec<u8>) {
        write_varint(out, page.len() as u64);
        let lines = page.len().div_ceil(LINE);
        let tags_at = out.len();
        out.resize(tags_at + lines.div_ceil(2), 0);
        for i in 0..lines {
            let line = line_at(page, i);
            let enc = choose(&line);
            out[tags_at + i / 2] |= enc.tag() << (4 * (i % 2));
            encode_payload(&line, &enc, out);
        }
    }

    fn compressed_len(&self, page: &[u8]) -> usize {
        let lines = page.len().div_ceil(LINE);
        let body: usize = (0..lines).map(|i| choose(&line_at(page, i)).size()).sum();
        varint_len(page.len() as u64) + lines.div_ceil(2) + body
    }

    fn decompress(&self, data: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        // A zero line costs half a byte (its tag): 128 output bytes per input byte.
        let (len, rest) = read_len(NAME, data, 2 * LINE as u64)?;
        let lines = len.div_ceil(LINE);
        let tag_bytes = lines.div_ceil(2);
        let tags = rest
            .get(..tag_bytes)
            .ok_or_else(|| truncated("line tags"))?;
        if lines % 2 == 1 && tags[tag_bytes - 1] >> 4 != 0 {
            return Err(CodecError::Corrupt {
                codec: NAME,
                detail: "non-zero unused tag nibble".into(),
            });
        }
        let mut pos = tag_bytes;
        out.reserve(len.min(1 << 20));
        let mut line = [0u8; LINE];
        for i in 0..lines {
            let tag = (tags[i / 2] >> (4 * (i % 2))) & 0xf;
            pos += decode_line(tag, i, &rest[pos..], &mut line)?;
            let keep = (len - i * LINE).min(LINE);
            out.extend_from_slice(&line[..keep]);
        }
        if pos != rest.len() {
            return Err(CodecError::TrailingBytes {
                codec: NAME,
                extra: rest.len() - pos,
            });
        }
        Ok(())
    }

    fn cycles(&self, bytes: usize) -> u64 {
        bytes.div_ceil(LINE) as u64 * CYCLES_PER_LINE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_u64(v: impl IntoIterator<Item = u64>) -> Vec<u8> {
        v.into_iter().flat_map(u64::to_le_bytes).collect()
    }
    fn from_u32(v: impl IntoIterator<Item = u32>) -> Vec<u8> {
        v.into_iter().flat_map(u32::to_le_bytes).collect()
    }
    fn from_u16(v: impl IntoIterator<Item = u16>) -> Vec<u8> {
        v.into_iter().flat_map(u16::to_le_bytes).collect()
    }

    /// Compress a single 64 B line: (tag, payload bytes), and check the round trip.
    fn one_line(line: &[u8]) -> (u8, usize) {
        assert_eq!(line.len(), LINE);
        let mut out = Vec::new();
        FpcBdi.compress(line, &mut out);
        // varint(64) is one byte, then one tag byte.
        let mut back = Vec::new();
        FpcBdi.decompress(&out, &mut back).unwrap();
        assert_eq!(back, line);
        (out[1] & 0xf, out.len() - 2)
    }

    #[test]
    fn every_encoding_is_chosen_where_it_wins() {
        assert_eq!(one_line(&[0; 64]), (TAG_ZERO, 0));
        assert_eq!(
            one_line(&from_u64([0x1122_3344_5566_7788; 8])),
            (TAG_REP8, 8)
        );
        let b8 = 0x0000_7f00_dead_0000u64;
        assert_eq!(one_line(&from_u64((0..8).map(|i| b8 + i * 8))), (4, 17));
        assert_eq!(one_line(&from_u64((0..8).map(|i| b8 + i * 1000))), (5, 25));
        assert_eq!(
            one_line(&from_u64((0..8).map(|i| b8 + i * 100_000_000))),
            (6, 41)
        );
        // Small deltas on 4-byte elements, plus a zero-base element (mask bit 0).
        let mut w: Vec<u32> = (0..16).map(|i| 0x1234_5600 + i).collect();
        w[3] = 7;
        assert_eq!(one_line(&from_u32(w)), (7, 22));
        assert_eq!(
            one_line(&from_u32((0..16).map(|i| 0x1234_0000 + i * 2000))),
            (8, 38)
        );
        assert_eq!(
            one_line(&from_u16((0..32).map(|i| 0x4000 + i * 3))),
            (9, 38)
        );
        // Mixed small words: FPC. Random bytes: raw.
        assert_eq!(
            one_line(&from_u32([
                0,
                1,
                2,
                3,
                0xffff_fff0,
                100,
                0,
                0,
                5,
                6,
                7,
                1,
                2,
                3,
                4,
                5
            ]))
            .0,
            TAG_FPC
        );
        let random: Vec<u8> = (0u32..64)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        assert_eq!(one_line(&random), (TAG_RAW, 64));
    }

    #[test]
    fn fpc_covers_every_prefix() {
        let w: [u32; WORDS] = [
            0,
            0,
            5,                  // 4-bit
            (-100i32) as u32,   // 8-bit
            0x7f7f_7f7f,        // repeated bytes
            (-30000i32) as u32, // 16-bit
            0x1234_0000,        // halfword padded with zeros
            0x0005_fffd,        // two sign-extended bytes (5, -3)
            0xdead_beef,        // raw
            0,
            0,
            0,
            0,
            0,
            0,
            0,
        ];
        let mut prefixes = Vec::new();
        fpc_walk(&w, |p, _, _| prefixes.push(p));
        assert_eq!(prefixes, [0, 1, 2, 6, 3, 4, 5, 7, 0]);
        // 2 runs (6 bits each) + 7+11+11+19+19+19+35 bits = 133 bits = 17 bytes.
        assert_eq!(fpc_size(&w), 17);
        let line: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(one_line(&line), (TAG_FPC, 17));
    }
}
