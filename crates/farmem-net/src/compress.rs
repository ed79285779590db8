//! Link compression (DaeMon, seed 000 §4.4) on farmem's real link: pages
//! and clusters cross it compressed, per message, both ways (a client's
//! writes, a memory node's read replies), once both ends agreed to it with
//! `Msg::Link` on a version-4 session.
//!
//! The sender picks each message's codec ([`Packer`]): a forced codec
//! (`lz`, `fpc-bdi`, `fve`) always tries it and sends raw when it does not
//! shrink the payload by an eighth; `auto` first asks whether compression
//! can pay at all on this link (the time the saved bytes spend on it
//! against the codec's measured time at both ends), then checks a 1 KiB
//! sample with LZ4 and backs off on data that does not shrink, so
//! incompressible pages, and fast links, cost almost nothing. The
//! receiver decodes into a buffer of the claimed size, never more than a
//! frame, and checks the length and a CRC-32 of the decoded bytes: a
//! payload that does not decode to exactly what was sent is a
//! [`DecompressError`], never a wrong page.

use std::sync::Arc;
use std::time::Instant;

use farmem_codec::{CodecError, CodecKind};
use farmem_core::Counter;
use farmem_wire::{LinkMode, PackCodec, Packed};
use serde::Serialize;

/// Payloads smaller than this are never packed (log lines, small writes).
pub const MIN_PACKED: usize = 1024;
/// The auto mode's sample: LZ4's unit (farmem-codec's `lz` compresses 1 KiB
/// at a time).
const SAMPLE: usize = 1024;
/// A sample or payload must shrink to 7/8 of its size to be worth packing.
const SHRINK_NUM: usize = 7;
const SHRINK_DEN: usize = 8;
/// The link's speed when nothing throttles it: loopback TCP bulk transfer
/// on this kind of machine (SPEC: ≈ 9.7 GB/s).
const UNTHROTTLED_BYTES_PER_SEC: f64 = 9.7e9;
/// Auto re-measures the codec's speed on every this-many-th message even
/// when the link says compression cannot pay, so a slower link (a busier
/// gate) or cheaper data is noticed.
const REMEASURE_EVERY: u64 = 256;
/// Auto tries FPC+BDI on every this-many-th message it packs, to keep its
/// measured ratio and speed current beside LZ's.
const EXPLORE_EVERY: u64 = 32;

/// Why a packed payload was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecompressError {
    #[error("a packed {what} arrived on a session that did not agree to link compression")]
    NotNegotiated { what: &'static str },
    #[error("a packed payload claims {claimed} bytes, more than the {max} its frame may carry")]
    TooLarge { claimed: u32, max: usize },
    #[error("a packed payload does not decode: {0}")]
    Codec(#[from] CodecError),
    #[error("a packed {codec} payload decoded to {got} bytes, not the {claimed} it claims")]
    Length {
        codec: &'static str,
        claimed: u32,
        got: usize,
    },
    #[error(
        "a packed {codec} payload decoded to bytes whose CRC-32 is {got:#010x}, not the {want:#010x} sent: corrupted"
    )]
    Checksum {
        codec: &'static str,
        want: u32,
        got: u32,
    },
}

fn kind(codec: PackCodec) -> CodecKind {
    match codec {
        PackCodec::Lz => CodecKind::Lz,
        PackCodec::FpcBdi => CodecKind::FpcBdi,
        PackCodec::Fve => CodecKind::Fve,
    }
}

/// Decodes `packed` into `out` (cleared first): exactly `raw_len` bytes
/// whose CRC-32 is the one sent, and at most `max_len`.
pub fn unpack(
    packed: &Packed<'_>,
    max_len: usize,
    out: &mut Vec<u8>,
) -> Result<(), DecompressError> {
    if packed.raw_len as usize > max_len {
        return Err(DecompressError::TooLarge {
            claimed: packed.raw_len,
            max: max_len,
        });
    }
    let codec = kind(packed.codec).codec();
    out.clear();
    out.reserve_exact(packed.raw_len as usize);
    codec.decompress(packed.data, out)?;
    if out.len() != packed.raw_len as usize {
        return Err(DecompressError::Length {
            codec: codec.name(),
            claimed: packed.raw_len,
            got: out.len(),
        });
    }
    let got = crc32fast::hash(out);
    if got != packed.crc {
        return Err(DecompressError::Checksum {
            codec: codec.name(),
            want: packed.crc,
            got,
        });
    }
    Ok(())
}

/// What a client's connections are told to do: the mode, and the link's
/// rate for auto's arithmetic. Counters are shared by every connection
/// made with the same config.
#[derive(Debug, Clone, Default)]
pub struct LinkConfig {
    pub mode: LinkMode,
    /// The link's bytes per second (a `rate:` delay model), 0 when nothing
    /// throttles it.
    pub bytes_per_sec: u64,
    pub stats: Arc<LinkStats>,
}

/// Bytes on the link and what compression did, one side's view.
#[derive(Debug, Default)]
pub struct LinkStats {
    /// Every frame, headers included, each way.
    pub frame_bytes_sent: Counter,
    pub frame_bytes_received: Counter,
    /// Page and cluster payloads of reads (their replies) and writes: as
    /// the program sees them, and as they crossed the link.
    pub read_raw_bytes: Counter,
    pub read_wire_bytes: Counter,
    pub write_raw_bytes: Counter,
    pub write_wire_bytes: Counter,
    /// Payloads sent packed, by codec.
    pub packed_lz: Counter,
    pub packed_fpc_bdi: Counter,
    pub packed_fve: Counter,
    /// Payloads received packed.
    pub unpacked: Counter,
    /// Sent raw: compressed but did not shrink by an eighth (the codec's
    /// time spent for nothing).
    pub raw_no_gain: Counter,
    /// Sent raw by auto's cheap checks: the link too fast for the codec,
    /// the sample did not shrink, or backing off after such samples.
    pub raw_not_worth: Counter,
    pub raw_incompressible: Counter,
    /// Packed payloads refused ([`DecompressError`]).
    pub decompress_errors: Counter,
    /// Time in the codecs, both ways, ns.
    pub codec_ns: Counter,
}

/// [`LinkStats`] as numbers, with the ratio of all page payloads.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LinkSnapshot {
    pub frame_bytes_sent: u64,
    pub frame_bytes_received: u64,
    pub read_raw_bytes: u64,
    pub read_wire_bytes: u64,
    pub write_raw_bytes: u64,
    pub write_wire_bytes: u64,
    pub packed_lz: u64,
    pub packed_fpc_bdi: u64,
    pub packed_fve: u64,
    pub unpacked: u64,
    pub raw_no_gain: u64,
    pub raw_not_worth: u64,
    pub raw_incompressible: u64,
    pub decompress_errors: u64,
    pub codec_ns: u64,
    /// Raw over wire bytes of every page payload, both ways (1 when none
    /// moved).
    pub compression_ratio: f64,
}

impl LinkStats {
    pub fn snapshot(&self) -> LinkSnapshot {
        // Payloads before frames (see `Connection::encode`'s order).
        let (read_raw, read_wire) = (self.read_raw_bytes.get(), self.read_wire_bytes.get());
        let (write_raw, write_wire) = (self.write_raw_bytes.get(), self.write_wire_bytes.get());
        let raw = read_raw + write_raw;
        let wire = read_wire + write_wire;
        LinkSnapshot {
            frame_bytes_sent: self.frame_bytes_sent.get(),
            frame_bytes_received: self.frame_bytes_received.get(),
            read_raw_bytes: read_raw,
            read_wire_bytes: read_wire,
            write_raw_bytes: write_raw,
            write_wire_bytes: write_wire,
            packed_lz: self.packed_lz.get(),
            packed_fpc_bdi: self.packed_fpc_bdi.get(),
            packed_fve: self.packed_fve.get(),
            unpacked: self.unpacked.get(),
            raw_no_gain: self.raw_no_gain.get(),
            raw_not_worth: self.raw_not_worth.get(),
            raw_incompressible: self.raw_incompressible.get(),
            decompress_errors: self.decompress_errors.get(),
            codec_ns: self.codec_ns.get(),
            compression_ratio: if wire == 0 {
                1.0
            } else {
                raw as f64 / wire as f64
            },
        }
    }
}

/// One codec's measured ratio and compression speed (moving averages).
#[derive(Debug, Clone, Copy)]
struct Measured {
    ratio: f64,
    ns_per_byte: f64,
}

impl Measured {
    fn update(&mut self, ratio: f64, ns_per_byte: f64) {
        // Recent messages weigh most: a program's data changes by phase.
        self.ratio += (ratio - self.ratio) / 8.0;
        self.ns_per_byte += (ns_per_byte - self.ns_per_byte) / 8.0;
    }
}

/// The header fields of a payload [`Packer::pack`] compressed; its bytes
/// are [`Packer::packed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedMeta {
    pub codec: PackCodec,
    pub raw_len: u32,
    pub crc: u32,
}

/// One sender's choice of codec per message, and its output buffer.
#[derive(Debug)]
pub struct Packer {
    mode: LinkMode,
    link_ns_per_byte: f64,
    lz: Measured,
    fpc: Measured,
    /// Messages auto sends raw without a sample (backing off after samples
    /// that did not shrink), and how many such samples came in a row.
    skip: u32,
    misses: u32,
    turn: u64,
    out: Vec<u8>,
}

impl Packer {
    /// A packer for `mode` on a link of `bytes_per_sec` (0: unthrottled);
    /// none for `Off`.
    pub fn new(mode: LinkMode, bytes_per_sec: u64) -> Option<Self> {
        if mode == LinkMode::Off {
            return None;
        }
        let rate = if bytes_per_sec == 0 {
            UNTHROTTLED_BYTES_PER_SEC
        } else {
            bytes_per_sec as f64
        };
        // Until measured: LZ4 at about 1 GB/s, FPC+BDI slower and
        // unknown in ratio, so auto's first messages sample LZ.
        Some(Self {
            mode,
            link_ns_per_byte: 1e9 / rate,
            lz: Measured {
                ratio: 1.0,
                ns_per_byte: 1.0,
            },
            fpc: Measured {
                ratio: 1.0,
                ns_per_byte: 2.0,
            },
            skip: 0,
            misses: 0,
            turn: 0,
            out: Vec::new(),
        })
    }

    /// The bytes of the payload [`pack`](Self::pack) last compressed.
    pub fn packed(&self) -> &[u8] {
        &self.out
    }

    /// Compresses `raw` when the mode and the measurements say so;
    /// `saturated` is true when the link is queueing requests now (no
    /// headroom: every byte saved shortens everyone's wait). `None`: send
    /// it raw.
    pub fn pack(&mut self, raw: &[u8], saturated: bool, stats: &LinkStats) -> Option<PackedMeta> {
        if raw.len() < MIN_PACKED || u32::try_from(raw.len()).is_err() {
            return None;
        }
        self.turn += 1;
        let codec = match self.mode {
            LinkMode::Off => return None,
            LinkMode::Lz => PackCodec::Lz,
            LinkMode::FpcBdi => PackCodec::FpcBdi,
            LinkMode::Fve => PackCodec::Fve,
            LinkMode::Auto => self.choose(raw, saturated, stats)?,
        };
        let start = Instant::now();
        self.out.clear();
        kind(codec).codec().compress(raw, &mut self.out);
        let ns = start.elapsed().as_nanos() as u64;
        stats.codec_ns.add(ns);
        let ratio = raw.len() as f64 / self.out.len().max(1) as f64;
        let speed = ns as f64 / raw.len() as f64;
        match codec {
            PackCodec::Lz => self.lz.update(ratio, speed),
            PackCodec::FpcBdi => self.fpc.update(ratio, speed),
            PackCodec::Fve => {}
        }
        if self.out.len() * SHRINK_DEN > raw.len() * SHRINK_NUM {
            stats.raw_no_gain.inc();
            return None;
        }
        match codec {
            PackCodec::Lz => stats.packed_lz.inc(),
            PackCodec::FpcBdi => stats.packed_fpc_bdi.inc(),
            PackCodec::Fve => stats.packed_fve.inc(),
        }
        Some(PackedMeta {
            codec,
            raw_len: raw.len() as u32,
            crc: crc32fast::hash(raw),
        })
    }

    /// Auto's choice for `raw`, or `None` to send it raw.
    fn choose(&mut self, raw: &[u8], saturated: bool, stats: &LinkStats) -> Option<PackCodec> {
        if self.skip > 0 {
            self.skip -= 1;
            stats.raw_incompressible.inc();
            return None;
        }
        // Compress here and decompress there: about twice one codec pass
        // (LZ4 decodes faster than it encodes, so this errs towards raw).
        let cost = |m: &Measured| 2.0 * m.ns_per_byte;
        let gain = |ratio: f64| (1.0 - 1.0 / ratio.max(1.0)) * self.link_ns_per_byte;
        // Even a payload that vanished would not pay for the codec on this
        // link: skip the sample, but keep the speed measured now and then.
        if !saturated
            && gain(f64::INFINITY) <= cost(&self.lz)
            && !self.turn.is_multiple_of(REMEASURE_EVERY)
        {
            stats.raw_not_worth.inc();
            return None;
        }
        let sample = &raw[..SAMPLE.min(raw.len())];
        let start = Instant::now();
        self.out.clear();
        CodecKind::Lz.codec().compress(sample, &mut self.out);
        let ns = start.elapsed().as_nanos() as u64;
        stats.codec_ns.add(ns);
        let ratio = sample.len() as f64 / self.out.len().max(1) as f64;
        self.lz.update(ratio, ns as f64 / sample.len() as f64);
        if self.out.len() * SHRINK_DEN > sample.len() * SHRINK_NUM {
            // Back off on data that does not shrink: 1, 3, 7 … 63 messages
            // raw before the next sample.
            self.misses = (self.misses + 1).min(6);
            self.skip = (1 << self.misses) - 1;
            stats.raw_incompressible.inc();
            return None;
        }
        self.misses = 0;
        let lz_net = gain(ratio) - cost(&self.lz);
        let fpc_net = gain(self.fpc.ratio) - cost(&self.fpc);
        if !saturated && lz_net.max(fpc_net) <= 0.0 {
            stats.raw_not_worth.inc();
            return None;
        }
        // Only where packing pays: exploring costs a codec pass.
        if self.turn.is_multiple_of(EXPLORE_EVERY) {
            return Some(PackCodec::FpcBdi);
        }
        Some(if fpc_net > lz_net {
            PackCodec::FpcBdi
        } else {
            PackCodec::Lz
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page of small integers: compresses well with every codec.
    fn compressible(len: usize) -> Vec<u8> {
        (0..len / 8)
            .flat_map(|i| ((i % 97) as u64).to_le_bytes())
            .collect()
    }

    fn random(len: usize, seed: u64) -> Vec<u8> {
        farmem_core::noise::noise_bytes(len, seed)
    }

    fn pack_one(mode: LinkMode, raw: &[u8]) -> Option<(PackedMeta, Vec<u8>)> {
        let mut p = Packer::new(mode, 0).unwrap();
        let meta = p.pack(raw, false, &LinkStats::default())?;
        Some((meta, p.packed().to_vec()))
    }

    #[test]
    fn every_codec_round_trips_a_page_and_a_cluster() {
        for mode in [LinkMode::Lz, LinkMode::FpcBdi, LinkMode::Fve] {
            for len in [4096, 64 << 10] {
                let raw = compressible(len);
                let (meta, data) = pack_one(mode, &raw).unwrap();
                assert!(data.len() * 2 < raw.len(), "{mode}: {}", data.len());
                let packed = Packed {
                    codec: meta.codec,
                    raw_len: meta.raw_len,
                    crc: meta.crc,
                    data: &data,
                };
                let mut out = Vec::new();
                unpack(&packed, 1 << 20, &mut out).unwrap();
                assert_eq!(out, raw);
            }
        }
    }

    #[test]
    fn incompressible_data_is_sent_raw_and_auto_backs_off() {
        let raw = random(4096, 7);
        assert!(pack_one(LinkMode::Lz, &raw).is_none());
        // Saturated, so the link's speed does not rule the sample out.
        let mut p = Packer::new(LinkMode::Auto, 100 << 20).unwrap();
        let stats = LinkStats::default();
        let packed = (0..64)
            .filter(|i| p.pack(&random(4096, *i), true, &stats).is_some())
            .count();
        assert_eq!(packed, 0);
        // Samples after 1, 3, 7, 15 and 31 raw messages, not 64.
        assert_eq!(stats.raw_incompressible.get(), 64);
        assert!(stats.codec_ns.get() > 0);
        assert_eq!(stats.raw_no_gain.get(), 0, "no whole page was compressed");
    }

    #[test]
    fn auto_compresses_on_a_slow_link_and_not_on_an_unthrottled_one() {
        let stats = LinkStats::default();
        let raw = compressible(4096);
        // 64 KiB/s: a page's saving (tens of ms) dwarfs any codec time a
        // loaded host measures (at 1 MiB/s, a few ms, a preempted pack
        // once took longer), so the choice does not hang on the clock.
        let mut slow = Packer::new(LinkMode::Auto, 64 << 10).unwrap();
        assert!((0..8).all(|_| slow.pack(&raw, false, &stats).is_some()));
        let mut fast = Packer::new(LinkMode::Auto, 0).unwrap();
        // Give it the speed a real codec has at least on this machine
        // class (LZ4 beats 10 GB/s only on all-zero pages).
        fast.lz.ns_per_byte = 0.2;
        assert!((1..8).all(|_| fast.pack(&raw, false, &stats).is_none()));
        assert_eq!(stats.raw_not_worth.get(), 7);
    }

    #[test]
    fn corrupt_payloads_are_typed_errors_never_wrong_bytes() {
        let raw = compressible(4096);
        for mode in [LinkMode::Lz, LinkMode::FpcBdi] {
            let (meta, data) = pack_one(mode, &raw).unwrap();
            fn packed(codec: PackCodec, data: &[u8], raw_len: u32, crc: u32) -> Packed<'_> {
                Packed {
                    codec,
                    raw_len,
                    crc,
                    data,
                }
            }
            let mut out = Vec::new();
            // Every single flipped byte: refused, or decoded to the very
            // page sent (a match offset moved by whole periods of this
            // periodic page copies the same bytes); never another page.
            let mut refused = 0;
            for i in 0..data.len() {
                let mut bad = data.clone();
                bad[i] ^= 0x5a;
                match unpack(
                    &packed(meta.codec, &bad, meta.raw_len, meta.crc),
                    1 << 20,
                    &mut out,
                ) {
                    Err(_) => refused += 1,
                    Ok(()) => assert_eq!(out, raw, "{mode}: flip at {i} gave another page"),
                }
            }
            assert!(refused > 0, "{mode}");
            // Truncated.
            let got = unpack(
                &packed(meta.codec, &data[..data.len() / 2], meta.raw_len, meta.crc),
                1 << 20,
                &mut out,
            );
            assert!(
                matches!(
                    got,
                    Err(DecompressError::Codec(_) | DecompressError::Length { .. })
                ),
                "{got:?}"
            );
            // A lying length, smaller and larger than the page.
            let got = unpack(
                &packed(meta.codec, &data, 4000, meta.crc),
                1 << 20,
                &mut out,
            );
            assert_eq!(
                got,
                Err(DecompressError::Length {
                    codec: kind(meta.codec).name(),
                    claimed: 4000,
                    got: 4096
                })
            );
            let got = unpack(
                &packed(meta.codec, &data, 8 << 20, meta.crc),
                1 << 20,
                &mut out,
            );
            assert_eq!(
                got,
                Err(DecompressError::TooLarge {
                    claimed: 8 << 20,
                    max: 1 << 20
                })
            );
            // A wrong checksum.
            let got = unpack(
                &packed(meta.codec, &data, meta.raw_len, meta.crc ^ 1),
                1 << 20,
                &mut out,
            );
            assert!(matches!(got, Err(DecompressError::Checksum { .. })));
        }
    }

    #[test]
    fn small_payloads_are_never_packed() {
        assert!(pack_one(LinkMode::Lz, &[0; MIN_PACKED - 1]).is_none());
        assert!(pack_one(LinkMode::Lz, &[0; MIN_PACKED]).is_some());
    }
}
