//! Link compression on the wire (DaeMon §4.4): the packed payload that
//! [`Msg::ReadOkPacked`](crate::Msg::ReadOkPacked) and
//! [`Msg::WritePacked`](crate::Msg::WritePacked) carry, and the modes a
//! session agrees on with [`Msg::Link`](crate::Msg::Link).
//!
//! ```text
//! packed payload: codec u8 | raw_len u32 | crc32 u32 (of the raw bytes) | compressed bytes
//! ```
//!
//! This crate only frames the bytes; farmem-net compresses and checks them
//! (the checksum covers the decoded page, so a payload that decodes to
//! other bytes than were sent is caught, not only one that fails to decode).

use crate::WireError;
use crate::codec::Reader;

/// Bytes of a packed payload before the compressed bytes.
pub const PACKED_HEADER_LEN: usize = 9;

/// How a session compresses pages on the link, as [`Msg::Link`](crate::Msg::Link)
/// carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum LinkMode {
    /// No packed frames either way.
    #[default]
    Off = 0,
    /// Each message's codec (or none) chosen from the measured ratio and
    /// the link's headroom.
    Auto = 1,
    /// Every page and cluster through this codec (sent raw when it does
    /// not shrink).
    Lz = 2,
    FpcBdi = 3,
    Fve = 4,
}

impl LinkMode {
    pub const NAMES: &str = "off, auto, lz, fpc-bdi, fve";

    /// The name `--link-compression` takes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Auto => "auto",
            Self::Lz => "lz",
            Self::FpcBdi => "fpc-bdi",
            Self::Fve => "fve",
        }
    }

    pub fn from_u8(v: u8) -> Result<Self, WireError> {
        Ok(match v {
            0 => Self::Off,
            1 => Self::Auto,
            2 => Self::Lz,
            3 => Self::FpcBdi,
            4 => Self::Fve,
            _ => {
                return Err(WireError::BadValue {
                    what: "link mode",
                    value: v.into(),
                });
            }
        })
    }
}

impl std::str::FromStr for LinkMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        [Self::Off, Self::Auto, Self::Lz, Self::FpcBdi, Self::Fve]
            .into_iter()
            .find(|m| m.name() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| {
                format!(
                    "unknown link compression {s:?}; expected one of: {}",
                    Self::NAMES
                )
            })
    }
}

impl std::fmt::Display for LinkMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The codec of one packed payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PackCodec {
    Lz = 1,
    FpcBdi = 2,
    Fve = 3,
}

impl PackCodec {
    pub fn from_u8(v: u8) -> Result<Self, WireError> {
        Ok(match v {
            1 => Self::Lz,
            2 => Self::FpcBdi,
            3 => Self::Fve,
            _ => {
                return Err(WireError::BadValue {
                    what: "packed codec",
                    value: v.into(),
                });
            }
        })
    }
}

/// A compressed page or cluster, borrowed from its frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packed<'a> {
    pub codec: PackCodec,
    /// Bytes the payload decodes to; the receiver checks it, never trusts it.
    pub raw_len: u32,
    /// CRC-32 (IEEE) of the raw bytes.
    pub crc: u32,
    pub data: &'a [u8],
}

impl<'a> Packed<'a> {
    pub(crate) fn encode(&self, b: &mut Vec<u8>) {
        b.push(self.codec as u8);
        b.extend_from_slice(&self.raw_len.to_le_bytes());
        b.extend_from_slice(&self.crc.to_le_bytes());
        b.extend_from_slice(self.data);
    }

    pub(crate) fn decode(r: &mut Reader<'a>) -> Result<Self, WireError> {
        Ok(Self {
            codec: PackCodec::from_u8(r.u8()?)?,
            raw_len: r.u32()?,
            crc: r.u32()?,
            data: r.rest(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DEFAULT_MAX_FRAME, HEADER_LEN, Msg, Op, decode_header};

    fn round_trip(msg: Msg<'_>) -> Vec<u8> {
        let mut buf = Vec::new();
        msg.encode(9, &mut buf);
        let h = decode_header(buf[..HEADER_LEN].try_into().unwrap(), DEFAULT_MAX_FRAME).unwrap();
        assert_eq!(Msg::decode(h.op, &buf[HEADER_LEN..]).unwrap(), msg);
        buf
    }

    #[test]
    fn packed_messages_round_trip_with_their_exact_layout() {
        let packed = Packed {
            codec: PackCodec::Lz,
            raw_len: 4096,
            crc: 0xdead_beef,
            data: &[1, 2, 3],
        };
        let buf = round_trip(Msg::ReadOkPacked { packed });
        // Header, then codec, raw length, checksum, the bytes.
        assert_eq!(buf.len(), HEADER_LEN + PACKED_HEADER_LEN + 3);
        assert_eq!(
            &buf[HEADER_LEN..],
            &[1, 0, 0x10, 0, 0, 0xef, 0xbe, 0xad, 0xde, 1, 2, 3]
        );
        let buf = round_trip(Msg::WritePacked { addr: 64, packed });
        assert_eq!(buf.len(), HEADER_LEN + 8 + PACKED_HEADER_LEN + 3);
        round_trip(Msg::Link {
            mode: LinkMode::Auto,
            bytes_per_sec: 200 << 20,
        });
        let m = Msg::WritePacked { addr: 1, packed };
        assert_eq!(m.data_bytes(), 3, "what crosses the link");
    }

    #[test]
    fn bad_codecs_modes_and_short_headers_are_typed_errors() {
        let body = [9u8, 0, 16, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            Msg::decode(Op::ReadOkPacked as u8, &body),
            Err(WireError::BadValue {
                what: "packed codec",
                value: 9
            })
        );
        assert!(matches!(
            Msg::decode(Op::ReadOkPacked as u8, &[1, 0, 16]),
            Err(WireError::Truncated { .. })
        ));
        assert!(matches!(
            Msg::decode(Op::WritePacked as u8, &[0; 12]),
            Err(WireError::BadValue { .. })
        ));
        let mut link = vec![7u8];
        link.extend_from_slice(&0u64.to_le_bytes());
        assert_eq!("FPC-BDI".parse::<LinkMode>(), Ok(LinkMode::FpcBdi));
        assert_eq!("auto".parse::<LinkMode>().unwrap().to_string(), "auto");
        assert!(
            "zstd"
                .parse::<LinkMode>()
                .unwrap_err()
                .contains("off, auto")
        );
        assert_eq!(
            Msg::decode(Op::Link as u8, &link),
            Err(WireError::BadValue {
                what: "link mode",
                value: 7
            })
        );
    }
}
