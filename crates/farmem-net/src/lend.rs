//! Read replies written to the socket straight from where the service
//! keeps the bytes: the server collects a connection's pipelined reads,
//! the service lends their bytes (a memory node's store pages, held under
//! their read locks), and one vectored write sends the headers and pages
//! with no copy into a reply buffer. The socket's own copy is then the
//! only one on the server.
//!
//! The lent bytes are held only while the socket takes them without
//! waiting: what it does not take at once is copied out, the locks are
//! released, and the rest is written blocking. A peer that stops reading
//! thus never holds a store lock, and a writer of the same memory waits
//! for one non-blocking write at most.

use std::io::{self, IoSlice, Write};
use std::net::TcpStream;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::time::Instant;

use farmem_wire::{Msg, Op};

use crate::service::{Lent, Peer, PendingRead, Refusal, ServerStats, Service};

/// Zeros to send for never-written memory without allocating them.
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
/// Most iovecs one `sendmsg` takes (Linux's UIO_MAXIOV).
const MAX_IOV: usize = 1024;

/// A connection's reads waiting to be answered together.
#[derive(Default)]
pub(crate) struct LentBatch {
    reads: Vec<PendingRead>,
    /// When each read's frame was read, for the request latency.
    started: Vec<Instant>,
    /// Bytes the reads asked for.
    bytes: usize,
    /// The replies' headers (and refusals' whole frames).
    heads: Vec<u8>,
}

/// Where each piece of a flush comes from.
enum Piece {
    Head(Range<usize>),
    Parts(Range<usize>),
}

impl LentBatch {
    pub(crate) fn push(&mut self, read: PendingRead, started: Instant) {
        self.bytes += read.len as usize;
        self.reads.push(read);
        self.started.push(started);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.reads.is_empty()
    }

    /// True when the batch should go now rather than wait for more.
    pub(crate) fn full(&self, flush_at: usize) -> bool {
        self.bytes >= flush_at || self.reads.len() >= MAX_IOV / 4
    }

    /// Writes `out` (replies to earlier requests), then a reply to each
    /// pending read, in order, and empties both.
    pub(crate) fn flush<'s>(
        &mut self,
        stream: &TcpStream,
        out: &mut Vec<u8>,
        service: &'s dyn Service,
        peer: &Peer,
        stats: &ServerStats,
    ) -> io::Result<()> {
        if self.reads.is_empty() {
            stats.link.frame_bytes_sent.add(out.len() as u64);
            let written = (&*stream).write_all(out);
            out.clear();
            return written;
        }
        let mut parts: Vec<Lent<'s>> = Vec::with_capacity(self.reads.len() * 2);
        let mut answers = Vec::with_capacity(self.reads.len());
        service.lend_reads(peer, &self.reads, &mut parts, &mut answers);
        let pieces = self.replies(&parts, &mut answers, stats);
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(1 + pieces.len() + parts.len());
        if !out.is_empty() {
            slices.push(IoSlice::new(out));
        }
        for piece in &pieces {
            match piece {
                Piece::Head(r) => slices.push(IoSlice::new(&self.heads[r.clone()])),
                Piece::Parts(r) => {
                    for part in &parts[r.clone()] {
                        push_part(&mut slices, part);
                    }
                }
            }
        }
        let total: usize = slices.iter().map(|s| s.len()).sum();
        // Counted first, so a client that has its reply sees it counted.
        stats.link.frame_bytes_sent.add(total as u64);
        let rest = send_now(stream, &mut slices);
        drop(slices);
        // The locks go before anything that may wait for the peer.
        drop(parts);
        self.reads.clear();
        self.started.clear();
        self.bytes = 0;
        self.heads.clear();
        out.clear();
        match rest? {
            Some(rest) => (&*stream).write_all(&rest),
            None => Ok(()),
        }
    }

    /// Encodes each read's reply header (or its refusal) into `heads`:
    /// the pieces to send, in order. A read the service did not answer,
    /// or answered with the wrong number of bytes, is refused: a reply
    /// never claims bytes it does not carry.
    fn replies(
        &mut self,
        parts: &[Lent<'_>],
        answers: &mut Vec<Result<Range<usize>, Refusal>>,
        stats: &ServerStats,
    ) -> Vec<Piece> {
        let mut pieces = Vec::with_capacity(self.reads.len() * 2);
        answers.resize_with(self.reads.len().max(answers.len()), || {
            Err(Refusal::new(
                farmem_wire::ErrorCode::BadRequest,
                "the read was not answered",
            ))
        });
        for ((read, started), answer) in self.reads.iter().zip(&self.started).zip(answers.drain(..))
        {
            let at = self.heads.len();
            let lent = answer.and_then(|r| {
                let got: usize = parts
                    .get(r.clone())
                    .map_or(0, |p| p.iter().map(Lent::len).sum());
                if parts.get(r.clone()).is_none() || got != read.len as usize {
                    return Err(Refusal::new(
                        farmem_wire::ErrorCode::BadRequest,
                        format!("a read of {} bytes was lent {got}", read.len),
                    ));
                }
                farmem_wire::encode_header(&mut self.heads, Op::ReadOk as u8, read.id, got)
                    .map(|()| r)
                    .ok_or_else(|| Refusal::new(farmem_wire::ErrorCode::BadRequest, "too long"))
            });
            match lent {
                Ok(r) => {
                    stats.link.read_raw_bytes.add(u64::from(read.len));
                    stats.link.read_wire_bytes.add(u64::from(read.len));
                    pieces.push(Piece::Head(at..self.heads.len()));
                    pieces.push(Piece::Parts(r));
                }
                Err(refusal) => {
                    stats.refused.inc();
                    Msg::Error {
                        code: refusal.code,
                        message: &refusal.message,
                    }
                    .encode(read.id, &mut self.heads);
                    pieces.push(Piece::Head(at..self.heads.len()));
                }
            }
            stats.request_latency.record(started.elapsed());
        }
        pieces
    }
}

fn push_part<'a>(slices: &mut Vec<IoSlice<'a>>, part: &'a Lent<'_>) {
    match part {
        Lent::Held(bytes) => slices.push(IoSlice::new(bytes)),
        Lent::Zeros(n) => {
            let mut left = *n;
            while left > 0 {
                let take = left.min(ZEROS.len());
                slices.push(IoSlice::new(&ZEROS[..take]));
                left -= take;
            }
        }
    }
}

/// Sends what the socket takes without waiting; what it did not take,
/// copied (`None`: everything went).
fn send_now(stream: &TcpStream, mut slices: &mut [IoSlice<'_>]) -> io::Result<Option<Vec<u8>>> {
    while !slices.is_empty() {
        let batch = &slices[..slices.len().min(MAX_IOV)];
        // SAFETY: zeroed is a valid msghdr (no address, no control data).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        // IoSlice is ABI-compatible with iovec on Unix; sendmsg only reads them.
        msg.msg_iov = batch.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = batch.len() as _;
        // SAFETY: a socket we own, and iovecs over buffers that outlive the call.
        let n = unsafe {
            libc::sendmsg(
                stream.as_raw_fd(),
                &msg,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => break,
                _ => return Err(e),
            }
        }
        IoSlice::advance_slices(&mut slices, n as usize);
    }
    if slices.is_empty() {
        return Ok(None);
    }
    let mut rest = Vec::with_capacity(slices.iter().map(|s| s.len()).sum());
    for s in slices.iter() {
        rest.extend_from_slice(s);
    }
    Ok(Some(rest))
}
