//! Reading and writing whole frames on a byte stream.

use std::io::{self, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::Instant;

use farmem_policy::poll::AdaptivePoll;
use farmem_wire::{FrameHeader, HEADER_LEN, decode_header};

use crate::NetError;

/// Most a frame's claimed length reserves before its bytes arrive; the rest
/// grows as they do.
const RESERVE_AHEAD: usize = 256 << 10;

/// Reads one frame: its header, then exactly its body into `body` (resized;
/// capacity is reused across calls). The length is checked against
/// `max_frame` before the body is read, and memory beyond
/// [`RESERVE_AHEAD`] is taken only as the body arrives, so a lying header
/// costs nothing.
pub fn read_frame(
    r: &mut impl Read,
    body: &mut Vec<u8>,
    max_frame: u32,
) -> Result<FrameHeader, NetError> {
    let mut header = [0u8; HEADER_LEN];
    r.read_exact(&mut header).map_err(eof_is_disconnect)?;
    let h = decode_header(&header, max_frame)?;
    body.clear();
    // read_to_end fills spare capacity without zeroing it, and grows the
    // buffer (amortized; reused across calls) only for bytes that came.
    body.reserve_exact((h.body_len as usize).min(RESERVE_AHEAD));
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

/// True when `stream` has something to read now: a frame, or the end of
/// the stream, or an error.
pub(crate) fn readable(stream: &BufReader<TcpStream>) -> bool {
    if !stream.buffer().is_empty() {
        return true;
    }
    let mut byte = 0u8;
    // SAFETY: a one-byte peek into a local, on a socket we own.
    let n = unsafe {
        libc::recv(
            stream.get_ref().as_raw_fd(),
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock
}

/// Before a blocking read of the next frame: spins for `poll`'s budget
/// waiting for it, then sleeps up to `poll`'s cap, and tells `poll` how
/// long the wait was (or that it outlasted the cap). Returns with the frame
/// readable, or with the cap passed; the caller's read then blocks as
/// usual, with the socket's own timeout.
pub fn await_frame(stream: &BufReader<TcpStream>, poll: &mut AdaptivePoll) {
    if !stream.buffer().is_empty() || poll.cap() == 0 {
        return;
    }
    let start = Instant::now();
    let waited = || start.elapsed().as_nanos() as u64;
    loop {
        if readable(stream) {
            return poll.waited(waited());
        }
        if waited() >= poll.budget() {
            break;
        }
        // Spin politely: any other thread ready on this CPU runs first, so
        // a spin takes only time nobody else wanted.
        std::thread::yield_now();
    }
    let left = poll.cap().saturating_sub(waited());
    let mut fd = libc::pollfd {
        fd: stream.get_ref().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let timeout = libc::timespec {
        tv_sec: (left / 1_000_000_000) as libc::time_t,
        tv_nsec: (left % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: one pollfd on a socket we own, and a valid timeout.
    let ready = left > 0 && unsafe { libc::ppoll(&mut fd, 1, &timeout, std::ptr::null()) } > 0;
    poll.waited(if ready { waited() } else { u64::MAX });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claimed_length_is_not_reserved_before_its_bytes_arrive() {
        let mut frame = Vec::new();
        farmem_wire::encode_frame(&mut frame, 0x01, 7, |b| b.extend_from_slice(&[9u8; 100]));
        // Claim 32 MiB, send 100 bytes, close.
        let claimed: u32 = 32 << 20;
        frame[0..4].copy_from_slice(&claimed.to_le_bytes());
        let mut body = Vec::new();
        let got = read_frame(&mut &frame[..], &mut body, u32::MAX);
        assert!(matches!(got, Err(NetError::Disconnected(_))), "{got:?}");
        assert!(body.capacity() <= RESERVE_AHEAD, "{}", body.capacity());
        // A whole frame still reads back exactly.
        let mut whole = Vec::new();
        farmem_wire::encode_frame(&mut whole, 0x01, 8, |b| {
            b.extend_from_slice(&[5u8; 300_000])
        });
        let h = read_frame(&mut &whole[..], &mut body, u32::MAX).unwrap();
        assert_eq!((h.id, body.len()), (8, 300_000));
        assert!(body.iter().all(|&b| b == 5));
    }
}
