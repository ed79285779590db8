//! Page compression codecs for link compression (DaeMon §4.4, Fig. 12).
//!
//! DaeMon compresses pages on the link with a ratio-optimized LZ engine
//! (IBM MXT style, 1 KB units, 64 cycles per unit) and compares it with two
//! latency-optimized schemes, FPC+BDI (4 cycles per 64 B line) and FVE
//! (6 cycles per line). Every codec here compresses and decompresses real
//! bytes, so compression ratios come from real page contents; the cycle
//! counts feed a latency model ([`PageCodec::latency_ns`]) for the simulator.
//!
//! All formats start with the uncompressed length as a LEB128 varint, so
//! pages of any length (4 KiB pages, 64 KiB clusters, 2 MiB huge pages) work.
//! Decoders never panic on corrupt input, never trust a claimed length beyond
//! what the input could possibly encode, and reject trailing bytes.

mod bits;
pub mod fpc_bdi;
pub mod fve;
pub mod lz;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use fpc_bdi::FpcBdi;
pub use fve::Fve;
pub use lz::Lz;

/// Largest uncompressed length any decoder accepts. Far above a 2 MiB huge
/// page; it only exists so a corrupt header cannot ask for gigabytes.
pub const MAX_DECODED_LEN: usize = 256 << 20;

/// Why a compressed buffer could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("{codec}: compressed data truncated ({what})")]
    Truncated {
        codec: &'static str,
        what: &'static str,
    },
    #[error("{codec}: malformed length header")]
    BadLength { codec: &'static str },
    #[error("{codec}: declared length {len} is impossible for {input} input bytes (limit {limit})")]
    TooLarge {
        codec: &'static str,
        len: u64,
        input: usize,
        limit: u64,
    },
    #[error("{codec}: invalid tag {tag} at line {line}")]
    BadTag {
        codec: &'static str,
        tag: u8,
        line: usize,
    },
    #[error("{codec}: {detail}")]
    Corrupt { codec: &'static str, detail: String },
    #[error("{codec}: {extra} unexpected trailing bytes after the page")]
    TrailingBytes { codec: &'static str, extra: usize },
    #[error("unknown codec {0:?}; expected one of: lz, fpc-bdi, fve, none")]
    UnknownCodec(String),
}

/// A page compressor with a hardware latency model.
///
/// `compress` and `decompress` append to `out` (callers clear it if they
/// want only this page), which lets framing code write a header first.
pub trait PageCodec: Send + Sync {
    /// Stable name, the same as the [`CodecKind`] config name.
    fn name(&self) -> &'static str;

    /// Append the compressed form of `page` to `out`.
    fn compress(&self, page: &[u8], out: &mut Vec<u8>);

    /// Append the page encoded in `data` to `out`. On error `out` may hold
    /// a partial page; it never panics, whatever `data` holds.
    fn decompress(&self, data: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError>;

    /// Exactly `compress(page).len()`, computed without building the output
    /// where the format allows (the simulator calls this per page moved).
    fn compressed_len(&self, page: &[u8]) -> usize {
        let mut v = Vec::with_capacity(page.len() + 16);
        self.compress(page, &mut v);
        v.len()
    }

    /// Hardware cycles to compress (or decompress) `bytes` bytes.
    fn cycles(&self, bytes: usize) -> u64;

    /// Latency in ns of one (de)compression of `bytes` bytes on an engine
    /// clocked at `cpu_ghz`, from the paper's cycle counts. A non-positive
    /// or non-finite clock gives `f64::INFINITY` rather than a panic.
    fn latency_ns(&self, bytes: usize, cpu_ghz: f64) -> f64 {
        let cycles = self.cycles(bytes);
        if cycles == 0 {
            return 0.0;
        }
        if !(cpu_ghz.is_finite() && cpu_ghz > 0.0) {
            return f64::INFINITY;
        }
        cycles as f64 / cpu_ghz
    }

    /// Uncompressed over compressed size of `page` (1.0 for an empty page).
    fn ratio(&self, page: &[u8]) -> f64 {
        if page.is_empty() {
            return 1.0;
        }
        page.len() as f64 / self.compressed_len(page) as f64
    }
}

/// No compression: the page itself, no header. Latency zero.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCodec;

impl PageCodec for NoCodec {
    fn name(&self) -> &'static str {
        "none"
    }
    fn compress(&self, page: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(page);
    }
    fn decompress(&self, data: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        out.extend_from_slice(data);
        Ok(())
    }
    fn compressed_len(&self, page: &[u8]) -> usize {
        page.len()
    }
    fn cycles(&self, _bytes: usize) -> u64 {
        0
    }
}

/// Codec selection by config name (`"lz"`, `"fpc-bdi"`, `"fve"`, `"none"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CodecKind {
    #[default]
    Lz,
    FpcBdi,
    Fve,
    None,
}

static LZ: Lz = Lz;
static FPC_BDI: FpcBdi = FpcBdi;
static FVE: Fve = Fve;
static NONE: NoCodec = NoCodec;

impl CodecKind {
    pub const ALL: [CodecKind; 4] = [
        CodecKind::Lz,
        CodecKind::FpcBdi,
        CodecKind::Fve,
        CodecKind::None,
    ];

    pub fn from_name(name: &str) -> Result<Self, CodecError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "lz" => Ok(CodecKind::Lz),
            "fpc-bdi" | "fpcbdi" => Ok(CodecKind::FpcBdi),
            "fve" => Ok(CodecKind::Fve),
            "none" => Ok(CodecKind::None),
            _ => Err(CodecError::UnknownCodec(name.to_string())),
        }
    }

    pub fn name(self) -> &'static str {
        self.codec().name()
    }

    /// The (stateless) codec for this kind.
    pub fn codec(self) -> &'static dyn PageCodec {
        match self {
            CodecKind::Lz => &LZ,
            CodecKind::FpcBdi => &FPC_BDI,
            CodecKind::Fve => &FVE,
            CodecKind::None => &NONE,
        }
    }
}

impl FromStr for CodecKind {
    type Err = CodecError;
    fn from_str(s: &str) -> Result<Self, CodecError> {
        Self::from_name(s)
    }
}

impl fmt::Display for CodecKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Read the varint length header and check it against what `rest` could
/// possibly encode (`max_expansion` output bytes per input byte), so a
/// corrupt header never drives a huge allocation.
pub(crate) fn read_len<'a>(
    codec: &'static str,
    data: &'a [u8],
    max_expansion: u64,
) -> Result<(usize, &'a [u8]), CodecError> {
    let (len, used) = bits::read_varint(data).ok_or(CodecError::BadLength { codec })?;
    let rest = &data[used..];
    let limit = (rest.len() as u64)
        .saturating_mul(max_expansion)
        .min(MAX_DECODED_LEN as u64);
    if len > limit {
        return Err(CodecError::TooLarge {
            codec,
            len,
            input: data.len(),
            limit,
        });
    }
    Ok((len as usize, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in CodecKind::ALL {
            assert_eq!(CodecKind::from_name(k.name()).unwrap(), k);
            assert_eq!(k.to_string().parse::<CodecKind>().unwrap(), k);
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.name()));
            assert_eq!(serde_json::from_str::<CodecKind>(&json).unwrap(), k);
        }
        assert_eq!(CodecKind::from_name("FPC-BDI").unwrap(), CodecKind::FpcBdi);
        let err = CodecKind::from_name("zstd").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown codec \"zstd\"; expected one of: lz, fpc-bdi, fve, none"
        );
        assert_eq!(CodecKind::default(), CodecKind::Lz);
    }

    #[test]
    fn latency_model_uses_paper_cycle_counts() {
        let page = 4096;
        // LZ: 64 cycles per 1 KiB unit -> 256 cycles per page.
        assert_eq!(Lz.cycles(page), 256);
        assert_eq!(Lz.cycles(1), 64);
        assert_eq!(Lz.cycles(1025), 128);
        // FPC+BDI: 4 cycles per 64 B line; FVE: 6.
        assert_eq!(FpcBdi.cycles(page), 256);
        assert_eq!(Fve.cycles(page), 384);
        assert_eq!(Fve.cycles(65), 12);
        assert_eq!(NoCodec.cycles(page), 0);
        assert_eq!(Lz.latency_ns(page, 2.0), 128.0);
        assert_eq!(Fve.latency_ns(page, 3.0), 128.0);
        assert_eq!(NoCodec.latency_ns(page, 0.0), 0.0);
        assert_eq!(Lz.latency_ns(page, 0.0), f64::INFINITY);
        assert_eq!(Lz.latency_ns(page, f64::NAN), f64::INFINITY);
        assert_eq!(Lz.latency_ns(0, 2.0), 0.0);
    }

    #[test]
    fn none_is_identity() {
        let mut out = Vec::new();
        NoCodec.compress(b"abc", &mut out);
        assert_eq!(out, b"abc");
        let mut back = Vec::new();
        NoCodec.decompress(&out, &mut back).unwrap();
        assert_eq!(back, b"abc");
        assert_eq!(NoCodec.ratio(&[0; 4096]), 1.0);
    }
}
