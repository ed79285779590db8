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
/// `RESERVE_AHEAD` is taken only as the body arrives, so a lying header
/// costs nothing.
pub fn read_frame(
    r: &mut impl Read,
    body: &mut Vec<u8>,
    max_frame: u32,
) -> Result<FrameHeader, NetError> {
    let h = read_header(r, max_frame)?;
    read_body(r, &h, body)?;
    Ok(h)
}

/// Reads and checks one frame's header (its length against `max_frame`);
/// the body is the caller's to read next, with [`read_body`] or
/// [`read_body_into`].
pub(crate) fn read_header(r: &mut impl Read, max_frame: u32) -> Result<FrameHeader, NetError> {
    let mut header = [0u8; HEADER_LEN];
    r.read_exact(&mut header).map_err(eof_is_disconnect)?;
    Ok(decode_header(&header, max_frame)?)
}

/// Reads the body of the frame whose header `h` was just read into `body`.
pub(crate) fn read_body(
    r: &mut impl Read,
    h: &FrameHeader,
    body: &mut Vec<u8>,
) -> Result<(), NetError> {
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
    Ok(())
}

/// Reads a body of exactly `buf.len()` bytes (the caller checked the
/// header says so) straight into `buf`: a read reply's data, into the
/// caller's page with no reply buffer between.
pub(crate) fn read_body_into(r: &mut impl Read, buf: &mut [u8]) -> Result<(), NetError> {
    r.read_exact(buf).map_err(|e| match eof_is_disconnect(e) {
        NetError::Disconnected(_) => {
            NetError::Disconnected("peer closed the connection mid-frame".into())
        }
        e => e,
    })
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

    /// Hands out at most `step` bytes a read, as a socket may.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn a_body_split_across_reads_lands_whole_in_the_callers_buffer() {
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 31 + 7) as u8).collect();
        let mut frame = Vec::new();
        farmem_wire::encode_frame(&mut frame, 0x11, 3, |b| b.extend_from_slice(&data));
        let mut r = Trickle {
            data: &frame,
            step: 1000,
        };
        let h = read_header(&mut r, 1 << 20).unwrap();
        assert_eq!((h.id, h.body_len), (3, 4096));
        let mut page = vec![0u8; 4096];
        read_body_into(&mut r, &mut page).unwrap();
        assert_eq!(page, data);
        // Cut short: the end of the stream is a disconnect, not zeros.
        let mut short = Trickle {
            data: &frame[..HEADER_LEN + 100],
            step: 7,
        };
        read_header(&mut short, 1 << 20).unwrap();
        let got = read_body_into(&mut short, &mut page);
        assert!(matches!(got, Err(NetError::Disconnected(_))), "{got:?}");
    }
}
