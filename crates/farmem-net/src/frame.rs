//! Reading and writing whole frames on a byte stream.

use std::io::{self, Read, Write};

use farmem_wire::{FrameHeader, HEADER_LEN, decode_header};

use crate::NetError;

/// Reads one frame: its header, then exactly its body into `body` (resized;
/// capacity is reused across calls). The length is checked against
/// `max_frame` before the body is read, so a lying header costs nothing.
pub fn read_frame(
    r: &mut impl Read,
    body: &mut Vec<u8>,
    max_frame: u32,
) -> Result<FrameHeader, NetError> {
    let mut header = [0u8; HEADER_LEN];
    r.read_exact(&mut header).map_err(eof_is_disconnect)?;
    let h = decode_header(&header, max_frame)?;
    body.clear();
    // Exactly the body: read_to_end then fills spare capacity without
    // zeroing it and without growing the buffer.
    body.reserve_exact(h.body_len as usize);
    let got = r
        .take(u64::from(h.body_len))
        .read_to_end(body)
        .map_err(eof_is_disconnect)?;
    if got != h.body_len as usize {
        return Err(NetError::Disconnected(
            "peer closed the connection mid-frame".into(),
        ));
    }
    Ok(h)
}

/// Writes an already-encoded run of frames.
pub fn write_all_frames(w: &mut impl Write, frames: &[u8]) -> Result<(), NetError> {
    w.write_all(frames)?;
    Ok(())
}

fn eof_is_disconnect(e: io::Error) -> NetError {
    match e.kind() {
        io::ErrorKind::UnexpectedEof => NetError::Disconnected("peer closed the connection".into()),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            NetError::Timeout(std::time::Duration::ZERO)
        }
        _ => NetError::Io(e),
    }
}
