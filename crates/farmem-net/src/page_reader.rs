//! A connection that reads one page at a time and never allocates after it
//! is made: the transport of a fault served inside the faulting thread's
//! signal handler, where that thread may have been stopped inside the
//! allocator or holding any lock. One request at a time, the reply read by
//! the caller itself: the same round trip as [`crate::Connection`]'s lone
//! caller, with a fixed buffer instead of an owned reply.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use farmem_policy::delay::Traffic;
use farmem_wire::{HEADER_LEN, Msg, decode_header};

use crate::delay::EgressDelay;
use crate::{ClientConfig, NetError};

/// Why a page read failed. Copy, carries no message: making one must not
/// allocate. Every error but [`PageReadError::Refused`] kills the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PageReadError {
    #[error("i/o error (os error {0})")]
    Io(i32),
    #[error("the memory node closed the connection")]
    Closed,
    #[error("the connection failed earlier")]
    Dead,
    #[error("malformed or unexpected reply")]
    Protocol,
    #[error("the memory node refused the read")]
    Refused,
    #[error("a read of {0} bytes does not fit the reader's buffer")]
    TooLong(usize),
}

/// An authenticated connection for single reads of at most `max_len` bytes.
pub struct PageReader {
    stream: TcpStream,
    max_frame: u32,
    next_id: u64,
    /// Encoded request; its capacity is reserved, so encoding never grows it.
    request: Vec<u8>,
    /// Room for the largest reply frame this reader accepts.
    frame: Box<[u8]>,
    delay: Option<Arc<EgressDelay>>,
    dead: bool,
    incarnation: u64,
}

/// How long a read polls for its reply before sleeping for it: longer
/// than a loopback round trip, shorter than anything worth a core.
const POLL_FOR: std::time::Duration = std::time::Duration::from_micros(200);

/// Request bytes a read needs: header plus address and length.
const READ_REQUEST_LEN: usize = HEADER_LEN + 12;

impl PageReader {
    /// Connects and authenticates (this part allocates, as any connect).
    pub fn connect(addr: &str, cfg: &ClientConfig, max_len: usize) -> Result<Self, NetError> {
        // No link compression: decoding a packed reply would allocate,
        // which a fault served in a signal handler must not.
        let (reader, stream, welcomed) = crate::handshake::session(addr, cfg, 8 << 10)?;
        let crate::handshake::Welcomed {
            max_frame,
            incarnation,
            ..
        } = welcomed;
        if !reader.buffer().is_empty() {
            return Err(NetError::Auth(format!(
                "{addr} sent bytes after its welcome"
            )));
        }
        Ok(Self {
            stream,
            max_frame,
            next_id: 1,
            request: Vec::with_capacity(READ_REQUEST_LEN * 2),
            // ReadOk's body is the data itself.
            frame: vec![0; HEADER_LEN + max_len].into_boxed_slice(),
            delay: cfg.delay.clone(),
            dead: false,
            incarnation,
        })
    }

    /// Presents capabilities to the node (see `Msg::Present`), waiting for
    /// its answer. Allocates: call it when the reader is made or a grant
    /// added, never from a fault handler. A failure other than the node's
    /// refusal kills the reader.
    pub fn present(&mut self, caps: &[farmem_wire::Cap]) -> Result<(), NetError> {
        if self.dead {
            return Err(NetError::Disconnected("page reader failed earlier".into()));
        }
        let id = self.next_id;
        self.next_id += 1;
        let mut request = Vec::new();
        Msg::Present {
            caps: caps.to_vec(),
        }
        .encode(id, &mut request);
        let result = (|| {
            self.stream.write_all(&request)?;
            let mut body = Vec::new();
            let h = crate::frame::read_frame(&mut self.stream, &mut body, self.max_frame)?;
            let reply = crate::Reply {
                op: h.op,
                body,
                arrived: std::time::Instant::now(),
            };
            if h.id != id {
                return Err(NetError::Routing(format!(
                    "reply {} to present request {id}",
                    h.id
                )));
            }
            reply.done("present")
        })();
        if result
            .as_ref()
            .is_err_and(|e| !matches!(e, NetError::Remote { .. }))
        {
            self.dead = true;
            let _ = self.stream.shutdown(std::net::Shutdown::Both);
        }
        result
    }

    /// The server's incarnation (see [`crate::Connection::incarnation`]).
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    pub fn is_alive(&self) -> bool {
        !self.dead
    }

    /// Reads `out.len()` bytes at global address `addr` into `out`, without
    /// allocating. Blocks for the round trip (at most the timeout).
    pub fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), PageReadError> {
        if self.dead {
            return Err(PageReadError::Dead);
        }
        if HEADER_LEN + out.len() > self.frame.len() {
            return Err(PageReadError::TooLong(out.len()));
        }
        let result = self.round_trip(addr, out);
        if matches!(
            result,
            Err(PageReadError::Io(_)
                | PageReadError::Closed
                | PageReadError::Protocol
                | PageReadError::Dead)
        ) {
            // Whatever is left of the reply would be read as the next one.
            self.dead = true;
            let _ = self.stream.shutdown(std::net::Shutdown::Both);
        }
        result
    }

    fn round_trip(&mut self, addr: u64, out: &mut [u8]) -> Result<(), PageReadError> {
        let hold = self
            .delay
            .as_ref()
            .map(|d| d.pass(out.len() as u64, farmem_policy::delay::Traffic::Demand));
        let passed = std::time::Instant::now();
        let id = self.next_id;
        self.next_id += 1;
        self.request.clear();
        Msg::Read {
            addr,
            len: out.len() as u32,
        }
        .encode(id, &mut self.request);
        self.stream.write_all(&self.request).map_err(io_error)?;
        // The whole reply usually arrives at once: read into one buffer,
        // header and body together, so one receive call takes it.
        let mut got = 0;
        while got < HEADER_LEN {
            got += self.receive(got)?;
        }
        let header: &[u8; HEADER_LEN] = self.frame[..HEADER_LEN].try_into().expect("16 bytes");
        let h = decode_header(header, self.max_frame).map_err(|_| PageReadError::Protocol)?;
        let end = HEADER_LEN + h.body_len as usize;
        if h.id != id || end > self.frame.len() || got > end {
            return Err(PageReadError::Protocol);
        }
        while got < end {
            got += self.receive(got)?;
        }
        if let (Some(delay), Some(hold)) = (&self.delay, hold) {
            // The link's latency; this reader's caller waited all along.
            let arrived = std::time::Instant::now();
            delay.hold(
                passed,
                passed,
                arrived,
                hold,
                arrived + hold,
                Traffic::Demand,
            );
        }
        match Msg::decode(h.op, &self.frame[HEADER_LEN..end]) {
            Ok(Msg::ReadOk { data }) if data.len() == out.len() => {
                out.copy_from_slice(data);
                Ok(())
            }
            Ok(Msg::Error { .. }) => Err(PageReadError::Refused),
            _ => Err(PageReadError::Protocol),
        }
    }
}

impl PageReader {
    /// One receive into the frame buffer from `at`; 0 bytes is the end.
    /// Polls first: the caller is a thread stopped on a page fault, with
    /// nothing else to do, and a thread that sleeps for the reply costs a
    /// wakeup (on a VM, a halted vCPU's) on top of the round trip.
    fn receive(&mut self, at: usize) -> Result<usize, PageReadError> {
        let started = std::time::Instant::now();
        let mut polls = 0u32;
        while started.elapsed() < POLL_FOR {
            let buf = &mut self.frame[at..];
            // SAFETY: a receive into our own buffer, never blocking.
            let n = unsafe {
                libc::recv(
                    std::os::fd::AsRawFd::as_raw_fd(&self.stream),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            match n {
                0 => return Err(PageReadError::Closed),
                n if n > 0 => return Ok(n as usize),
                _ => {
                    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
                    if errno != libc::EAGAIN && errno != libc::EINTR {
                        return Err(PageReadError::Io(errno));
                    }
                }
            }
            polls += 1;
            if polls.is_multiple_of(64) {
                // Let a memory node sharing this CPU run.
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        loop {
            match self.stream.read(&mut self.frame[at..]) {
                Ok(0) => return Err(PageReadError::Closed),
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_error(e)),
            }
        }
    }
}

/// An errno; an end of stream has none (read_exact's own error).
fn io_error(e: std::io::Error) -> PageReadError {
    e.raw_os_error()
        .map_or(PageReadError::Closed, PageReadError::Io)
}

impl std::fmt::Debug for PageReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageReader")
            .field("alive", &!self.dead)
            .finish()
    }
}
