//! farmem-wire: the protocol every farmem process speaks.
//!
//! A frame is a little-endian header followed by one message body:
//!
//! ```text
//! offset size field
//!      0    4 len       bytes after this field (12 + body), at most the negotiated maximum
//!      4    1 op        message kind (see [`Op`])
//!      5    1 flags     reserved, must be zero
//!      6    2 reserved  must be zero
//!      8    8 id        request id; a response carries its request's id
//!     16    … body      op-specific, see [`Msg`]
//! ```
//!
//! Request ids make pipelining possible: a client may have many requests in
//! flight on one connection and completions may arrive in any order.
//! Decoding borrows from the frame buffer, checks every length against the
//! bytes actually present and never allocates what a frame merely claims.

pub mod auth;
mod codec;
pub mod link;
mod msg;

pub use codec::{FrameHeader, Reader, decode_header, encode_frame, encode_header};
pub use link::{LinkMode, PACKED_HEADER_LEN, PackCodec, Packed};
pub use msg::{
    Cap, ErrorCode, Extent, GrantKind, LogRecord, LogRecords, Mirror, Msg, NodeInfo, Op, Placement,
    Role,
};

/// Protocol version spoken by this build. Version 4 added link
/// compression ([`Msg::Link`] and the packed read and write frames), which
/// a session uses only once both ends agreed to it.
pub const PROTOCOL_VERSION: u16 = 4;
/// The oldest version a server still serves (as that version: no packed
/// frames); clients fall back to it when a server refuses theirs.
pub const MIN_PROTOCOL_VERSION: u16 = 3;
/// Bytes of frame header, including the length field.
pub const HEADER_LEN: usize = 16;
/// Bytes of one cache-line log record: an address and one 64 B line.
pub const LOG_RECORD_LEN: usize = 8 + LINE_LEN;
/// The cache line the log carries.
pub const LINE_LEN: usize = 64;
/// Default largest frame: room for a 4 MiB cluster plus its header.
pub const DEFAULT_MAX_FRAME: u32 = (4 << 20) + 4096;
/// A frame no peer may ever announce, whatever it negotiates.
pub const ABSOLUTE_MAX_FRAME: u32 = 64 << 20;

/// Why bytes could not be decoded as a frame or message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("frame of {len} bytes exceeds the maximum of {max}")]
    FrameTooLarge { len: u64, max: u32 },
    #[error("frame length {0} is shorter than the header")]
    FrameTooShort(u32),
    #[error("truncated {what}: needs {need} more bytes")]
    Truncated { what: &'static str, need: usize },
    #[error("unknown opcode {0:#04x}")]
    UnknownOp(u8),
    #[error("reserved header bits set ({0:#06x})")]
    ReservedBits(u32),
    #[error("{0} trailing bytes after the message body")]
    Trailing(usize),
    #[error("{what} is not valid UTF-8")]
    BadUtf8 { what: &'static str },
    #[error("invalid value {value} for {what}")]
    BadValue { what: &'static str, value: u64 },
    #[error("string of {0} bytes is too long for the wire (max 255)")]
    StringTooLong(usize),
}
