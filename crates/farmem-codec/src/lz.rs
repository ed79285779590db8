//! Ratio-optimized LZ link compression (DaeMon §4.4).
//!
//! The paper's engine (after IBM MXT) compresses 1 KB at a time in 64 cycles.
//! We compress each 1 KiB unit independently with LZ4, so the window never
//! spans units, as in the hardware, and a unit can be decoded on its own.
//!
//! Format: `varint(len)`, then per unit (the last may be short): `u16 LE
//! stored_len`, then `stored_len` bytes. `stored_len == unit_len` means the
//! unit is stored raw (it did not shrink); otherwise it is an LZ4 block.

use lz4_flex::block;

use crate::bits::{varint_len, write_varint};
use crate::{CodecError, PageCodec, read_len};

/// Bytes per independently compressed unit.
pub const UNIT: usize = 1024;
/// Engine latency per unit (64 cycles, from IBM MXT via the paper).
pub const CYCLES_PER_UNIT: u64 = 64;
const UNIT_HEADER: usize = 2;
const MAX_BLOCK: usize = block::get_maximum_output_size(UNIT);
const NAME: &str = "lz";

/// LZ4 over independent 1 KiB units with a raw fallback per unit.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lz;

/// Compress one unit into `scratch`; `Some(n)` only if it shrank.
fn compress_unit(unit: &[u8], scratch: &mut [u8; MAX_BLOCK]) -> Option<usize> {
    match block::compress_into(unit, scratch) {
        Ok(n) if n < unit.len() => Some(n),
        _ => None,
    }
}

impl PageCodec for Lz {
    fn name(&self) -> &'static str {
        NAME
    }

    fn compress(&self, page: &[u8], out: &mut Vec<u8>) {
        write_varint(out, page.len() as u64);
        let mut scratch = [0u8; MAX_BLOCK];
        for unit in page.chunks(UNIT) {
            match compress_unit(unit, &mut scratch) {
                Some(n) => {
                    out.extend_from_slice(&(n as u16).to_le_bytes());
                    out.extend_from_slice(&scratch[..n]);
                }
                None => {
                    out.extend_from_slice(&(unit.len() as u16).to_le_bytes());
                    out.extend_from_slice(unit);
                }
            }
        }
    }

    fn compressed_len(&self, page: &[u8]) -> usize {
        let mut scratch = [0u8; MAX_BLOCK];
        let body: usize = page
            .chunks(UNIT)
            .map(|u| UNIT_HEADER + compress_unit(u, &mut scratch).unwrap_or(u.len()))
            .sum();
        varint_len(page.len() as u64) + body
    }

    fn decompress(&self, data: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        // A unit costs at least its 2-byte header plus one byte.
        let (len, mut rest) = read_len(NAME, data, (UNIT / 3) as u64)?;
        // The bound above is loose; grow past 1 MiB only as units decode.
        out.reserve(len.min(1 << 20));
        let mut left = len;
        while left > 0 {
            let unit_len = left.min(UNIT);
            let [a, b, tail @ ..] = rest else {
                return Err(CodecError::Truncated {
                    codec: NAME,
                    what: "unit header",
                });
            };
            let stored = usize::from(u16::from_le_bytes([*a, *b]));
            if stored == 0 || stored > unit_len {
                return Err(CodecError::Corrupt {
                    codec: NAME,
                    detail: format!("unit of {unit_len} bytes claims {stored} stored bytes"),
                });
            }
            let Some(body) = tail.get(..stored) else {
                return Err(CodecError::Truncated {
                    codec: NAME,
                    what: "unit body",
                });
            };
            if stored == unit_len {
                out.extend_from_slice(body);
            } else {
                let start = out.len();
                out.resize(start + unit_len, 0);
                match block::decompress_into(body, &mut out[start..]) {
                    Ok(n) if n == unit_len => {}
                    Ok(n) => {
                        return Err(CodecError::Corrupt {
                            codec: NAME,
                            detail: format!("unit decoded to {n} bytes, expected {unit_len}"),
                        });
                    }
                    Err(e) => {
                        return Err(CodecError::Corrupt {
                            codec: NAME,
                            detail: format!("LZ4 block: {e}"),
                        });
                    }
                }
            }
            rest = &tail[stored..];
            left -= unit_len;
        }
        if !rest.is_empty() {
            return Err(CodecError::TrailingBytes {
                codec: NAME,
                extra: rest.len(),
            });
        }
        Ok(())
    }

    fn cycles(&self, bytes: usize) -> u64 {
        (bytes.div_ceil(UNIT) as u64) * CYCLES_PER_UNIT
    }
}
