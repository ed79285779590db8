//! Framing: header encode/decode and a bounds-checked body reader.

use crate::{ABSOLUTE_MAX_FRAME, HEADER_LEN, WireError};

/// The fixed part of every frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Length of the body (the bytes after the 16-byte header).
    pub body_len: u32,
    pub op: u8,
    pub id: u64,
}

/// Decodes a 16-byte header, checking the length against `max_frame`
/// (the negotiated limit) before anyone allocates for the body.
pub fn decode_header(bytes: &[u8; HEADER_LEN], max_frame: u32) -> Result<FrameHeader, WireError> {
    let len = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
    let max = max_frame.min(ABSOLUTE_MAX_FRAME);
    if len > max {
        return Err(WireError::FrameTooLarge {
            len: len as u64,
            max,
        });
    }
    if (len as usize) < HEADER_LEN - 4 {
        return Err(WireError::FrameTooShort(len));
    }
    let flags_reserved =
        u32::from(bytes[5]) | (u32::from(u16::from_le_bytes([bytes[6], bytes[7]])) << 8);
    if flags_reserved != 0 {
        return Err(WireError::ReservedBits(flags_reserved));
    }
    Ok(FrameHeader {
        body_len: len - (HEADER_LEN as u32 - 4),
        op: bytes[4],
        id: u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")),
    })
}

/// Appends one frame to `out`: a header for `op`/`id`, then whatever `body`
/// writes. The length is patched in afterwards, so bodies never compute it.
pub fn encode_frame(out: &mut Vec<u8>, op: u8, id: u64, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0u8; 4]);
    out.push(op);
    out.extend_from_slice(&[0u8; 3]);
    out.extend_from_slice(&id.to_le_bytes());
    body(out);
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// Appends the header of a frame whose `body_len` body bytes the caller
/// sends from elsewhere (a read reply written straight from the store's
/// pages). `None`, with nothing appended, for a body no frame can carry.
pub fn encode_header(out: &mut Vec<u8>, op: u8, id: u64, body_len: usize) -> Option<()> {
    let len = u32::try_from(body_len.checked_add(HEADER_LEN - 4)?).ok()?;
    if len > ABSOLUTE_MAX_FRAME {
        return None;
    }
    out.extend_from_slice(&len.to_le_bytes());
    out.push(op);
    out.extend_from_slice(&[0u8; 3]);
    out.extend_from_slice(&id.to_le_bytes());
    Some(())
}

/// Cursor over a message body; every read is bounds-checked.
pub struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Self { buf, what }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.buf.len() < n {
            return Err(WireError::Truncated {
                what: self.what,
                need: n - self.buf.len(),
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        Ok(self.bytes(N)?.try_into().expect("length checked"))
    }

    pub fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.array::<1>()?[0])
    }
    pub fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    pub fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A string of at most 255 bytes, prefixed by its length.
    pub fn str(&mut self, what: &'static str) -> Result<&'a str, WireError> {
        let len = self.u8()? as usize;
        std::str::from_utf8(self.bytes(len)?).map_err(|_| WireError::BadUtf8 { what })
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }

    pub fn finish(self) -> Result<(), WireError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(WireError::Trailing(self.buf.len()))
        }
    }
}

pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    // Callers validate lengths with `check_str` before encoding.
    let s = &s.as_bytes()[..s.len().min(255)];
    out.push(s.len() as u8);
    out.extend_from_slice(s);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_sent_apart_from_its_body_is_the_frames_own() {
        let body = [7u8; 4096];
        let mut whole = Vec::new();
        encode_frame(&mut whole, 0x11, 42, |b| b.extend_from_slice(&body));
        let mut head = Vec::new();
        encode_header(&mut head, 0x11, 42, body.len()).unwrap();
        assert_eq!(head[..], whole[..HEADER_LEN]);
        let h = decode_header(head[..].try_into().unwrap(), u32::MAX).unwrap();
        assert_eq!((h.op, h.id, h.body_len), (0x11, 42, 4096));
        // A body no frame can carry gets no header.
        let mut none = Vec::new();
        assert!(encode_header(&mut none, 0x11, 1, ABSOLUTE_MAX_FRAME as usize).is_none());
        assert!(encode_header(&mut none, 0x11, 1, usize::MAX).is_none());
        assert!(none.is_empty());
    }
}
