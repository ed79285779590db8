//! Frequent Value Encoding (the paper's `fve`, 6 cycles/line).
//!
//! FVE keeps a small table of frequent 32-bit values (256 B in the paper,
//! i.e. up to 64 words) and codes each word either as a short index into it
//! or as a literal. Here the table is built per page from the page's own
//! most frequent words and shipped with it; its size D (0..=64) is chosen to
//! minimise the page's encoded size, so a page with no repeated words
//! degrades to plain literals (D = 0) rather than growing.
//!
//! Format: `varint(len)`, `D` (one byte), D dictionary words (u32 LE, most
//! frequent first), then an LSB-first bit stream over the page's words (the
//! last zero padded): with D = 0 each word is 32 literal bits; otherwise a
//! 1 bit means "dictionary hit" followed by ceil(log2 D) index bits, a 0 bit
//! is followed by a 32-bit literal.

use crate::bits::{BitReader, BitWriter, varint_len, write_varint};
use crate::{CodecError, PageCodec, read_len};

/// Most dictionary entries (the paper's 256 B table of 32-bit values).
pub const MAX_DICT: usize = 64;
/// Latency per 64 B line (from the paper's Fig. 12 setup).
pub const CYCLES_PER_LINE: u64 = 6;
const LINE: usize = 64;
const NAME: &str = "fve";

/// Per-page frequent value encoding.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fve;

fn page_words(page: &[u8]) -> Vec<u32> {
    page.chunks(4)
        .map(|c| {
            let mut b = [0u8; 4];
            b[..c.len()].copy_from_slice(c);
            u32::from_le_bytes(b)
        })
        .collect()
}

/// Index bits for a dictionary of `d` entries (d >= 1).
fn index_bits(d: usize) -> u32 {
    usize::BITS - (d - 1).leading_zeros()
}

/// (count, value) of every distinct word, by open-addressing hash table:
/// cheaper than sorting the page's words.
fn frequencies(words: &[u32]) -> Vec<(usize, u32)> {
    let cap = (2 * words.len()).next_power_of_two().max(16);
    let mask = cap - 1;
    let mut keys = vec![0u32; cap];
    let mut counts = vec![0usize; cap]; // 0 marks an empty slot
    for &w in words {
        let mut h = ((u64::from(w).wrapping_mul(0x9e37_79b9_7f4a_7c15)) >> 40) as usize & mask;
        while counts[h] != 0 && keys[h] != w {
            h = (h + 1) & mask;
        }
        keys[h] = w;
        counts[h] += 1;
    }
    counts
        .iter()
        .zip(&keys)
        .filter(|(c, _)| **c != 0)
        .map(|(&c, &k)| (c, k))
        .collect()
}

/// The chosen dictionary (most frequent first) and the encoded body size
/// in bytes after the length header.
fn plan(words: &[u32]) -> (Vec<u32>, usize) {
    let mut freq = frequencies(words);
    // Most frequent first; ties by value so the output is deterministic.
    let order = |a: &(usize, u32), b: &(usize, u32)| b.0.cmp(&a.0).then(a.1.cmp(&b.1));
    if freq.len() > MAX_DICT {
        freq.select_nth_unstable_by(MAX_DICT - 1, order);
        freq.truncate(MAX_DICT);
    }
    freq.sort_unstable_by(order);

    let n = words.len();
    let mut best_d = 0;
    let mut best = 1 + 4 * n;
    let mut hits = 0usize;
    for d in 1..=freq.len() {
        hits += freq[d - 1].0;
        let bits = hits * (1 + index_bits(d) as usize) + (n - hits) * 33;
        let size = 1 + 4 * d + bits.div_ceil(8);
        if size < best {
            best = size;
            best_d = d;
        }
    }
    (freq[..best_d].iter().map(|&(_, v)| v).collect(), best)
}

impl PageCodec for Fve {
    fn name(&self) -> &'static str {
        NAME
    }

    fn compress(&self, page: &[u8], out: &mut Vec<u8>) {
        write_varint(out, page.len() as u64);
        let words = page_words(page);
        let (dict, _) = plan(&words);
        out.push(dict.len() as u8);
        for w in &dict {
            out.extend_from_slice(&w.to_le_bytes());
        }
        if dict.is_empty() {
            for w in &words {
                out.extend_from_slice(&w.to_le_bytes());
            }
            return;
        }
        // Sorted (value, index) pairs for lookup.
        let mut lookup: Vec<(u32, u64)> = dict
            .iter()
            .enumerate()
            .map(|(i, &v)| (v, i as u64))
            .collect();
        lookup.sort_unstable();
        let ib = index_bits(dict.len());
        let mut bw = BitWriter::new(out);
        for &w in &words {
            match lookup.binary_search_by_key(&w, |e| e.0) {
                Ok(k) => {
                    bw.put(1, 1);
                    bw.put(lookup[k].1, ib);
                }
                Err(_) => {
                    bw.put(0, 1);
                    bw.put(u64::from(w), 32);
                }
            }
        }
        bw.finish();
    }

    fn compressed_len(&self, page: &[u8]) -> usize {
        varint_len(page.len() as u64) + plan(&page_words(page)).1
    }

    fn decompress(&self, data: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        // Every word costs at least one bit: 32 output bytes per input byte.
        let (len, rest) = read_len(NAME, data, 32)?;
        let truncated = |what| CodecError::Truncated { codec: NAME, what };
        let (&d, rest) = rest
            .split_first()
            .ok_or_else(|| truncated("dictionary size"))?;
        let d = usize::from(d);
        if d > MAX_DICT {
            return Err(CodecError::Corrupt {
                codec: NAME,
                detail: format!("dictionary of {d} entries (max {MAX_DICT})"),
            });
        }
        let dict_bytes = rest.get(..4 * d).ok_or_else(|| truncated("dictionary"))?;
        let dict: Vec<u32> = dict_bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let body = &rest[4 * d..];
        let nwords = len.div_ceil(4);
        out.reserve(len.min(1 << 20));
        let start = out.len();
        let used = if d == 0 {
            let raw = body
                .get(..4 * nwords)
                .ok_or_else(|| truncated("literal words"))?;
            out.extend_from_slice(raw);
            raw.len()
        } else {
            let ib = index_bits(d);
            let mut r = BitReader::new(body);
            for _ in 0..nwords {
                let w = if r.get(1).ok_or_else(|| truncated("word flag"))? == 1 {
                    let i = r.get(ib).ok_or_else(|| truncated("dictionary index"))? as usize;
                    *dict.get(i).ok_or_else(|| CodecError::Corrupt {
                        codec: NAME,
                        detail: format!("dictionary index {i} out of {d} entries"),
                    })?
                } else {
                    r.get(32).ok_or_else(|| truncated("literal word"))? as u32
                };
                out.extend_from_slice(&w.to_le_bytes());
            }
            if !r.padding_is_zero() {
                return Err(CodecError::Corrupt {
                    codec: NAME,
                    detail: "non-zero bit padding".into(),
                });
            }
            r.bytes_used()
        };
        if used != body.len() {
            return Err(CodecError::TrailingBytes {
                codec: NAME,
                extra: body.len() - used,
            });
        }
        // Drop the zero padding of the last word.
        out.truncate(start + len);
        Ok(())
    }

    fn cycles(&self, bytes: usize) -> u64 {
        bytes.div_ceil(LINE) as u64 * CYCLES_PER_LINE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_bits_and_plan() {
        assert_eq!([1, 2, 3, 4, 5, 64].map(index_bits), [0, 1, 2, 2, 3, 6]);
        // 1000 copies of 7 and 24 distinct others: D = 1 ({7}) costs
        // 1 + 4 + ceil((1000 * 1 + 24 * 33) / 8) = 229; adding more entries
        // (1 index bit each for every hit) costs more.
        let mut w = vec![7u32; 1000];
        w.extend(100..124);
        let (dict, size) = plan(&w);
        assert_eq!(dict, [7]);
        assert_eq!(size, 1 + 4 + (1000 + 24 * 33usize).div_ceil(8));
        // No repeats at all: literals only.
        let (dict, size) = plan(&(0..1024).collect::<Vec<_>>());
        assert!(dict.is_empty());
        assert_eq!(size, 1 + 4096);
    }
}
