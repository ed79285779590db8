//! What a daemon's request handler sees and answers with: the peer, a
//! refusal, the [`Service`] trait with the bytes it lends for reads, and
//! the counters every server keeps. The bottom of the server side: the
//! connection loop (`server`) and the lent-read writer (`lend`) both stand
//! on it.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;

use farmem_core::Counter;
use farmem_wire::{ErrorCode, Msg, Role};
use parking_lot::MappedRwLockReadGuard;

use crate::NetError;
use crate::compress::LinkStats;

/// Who is on the other end of a connection, once authenticated.
#[derive(Debug, Clone)]
pub struct Peer {
    pub name: String,
    pub role: Role,
    pub addr: SocketAddr,
    pub session: u64,
}

/// A refusal the service sends back as an `Error` frame; the connection stays open.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: String,
}

impl Refusal {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// `who` does not serve this kind of request at all.
    pub fn unsupported(who: &str, msg: &Msg<'_>) -> Self {
        Self::new(
            ErrorCode::BadRequest,
            format!("{who} does not answer {:?}", msg.op()),
        )
    }
}

/// Appends a `StatsOk` reply carrying `stats` as JSON.
pub fn reply_stats(id: u64, stats: &impl serde::Serialize, out: &mut Vec<u8>) {
    let json = serde_json::to_string(stats).unwrap_or_else(|_| "{}".into());
    Msg::StatsOk { json: &json }.encode(id, out);
}

/// A daemon's request handler.
pub trait Service: Send + Sync + 'static {
    /// Answers one request by appending exactly one reply frame with id `id`
    /// to `out`, or returns a refusal that becomes an `Error` reply.
    fn handle(&self, peer: &Peer, id: u64, msg: Msg<'_>, out: &mut Vec<u8>) -> Result<(), Refusal>;

    /// Called once per connection after its last request.
    fn disconnected(&self, _peer: &Peer) {}

    /// True when [`Self::lend_reads`] answers `Read`s: the server then
    /// collects a connection's pipelined reads and writes their replies
    /// straight from the lent bytes, with no copy.
    fn lends_reads(&self) -> bool {
        false
    }

    /// Answers `reads`, in order: for each, pushes exactly its `len` bytes
    /// to `parts` and the range of `parts` they took to `answers`, or a
    /// refusal. The parts stay borrowed (their locks held) while the
    /// replies are written, without waiting for the peer; the checks of
    /// every read are made before, or under the same locks as, its bytes
    /// are lent, so no read is answered with memory its check did not
    /// cover. A read left unanswered, or answered with a wrong length, is
    /// refused.
    fn lend_reads<'s>(
        &'s self,
        _peer: &Peer,
        _reads: &[PendingRead],
        _parts: &mut Vec<Lent<'s>>,
        _answers: &mut Vec<Result<std::ops::Range<usize>, Refusal>>,
    ) {
    }
}

/// Bytes a service lends for a read's reply (see [`Service::lend_reads`]).
pub enum Lent<'s> {
    /// Held under the read lock of where they are kept until the reply
    /// has been written (or copied out).
    Held(MappedRwLockReadGuard<'s, [u8]>),
    /// Never-written memory: this many zeros.
    Zeros(usize),
}

impl Lent<'_> {
    pub fn len(&self) -> usize {
        match self {
            Self::Held(b) => b.len(),
            Self::Zeros(n) => *n,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A pipelined read waiting for its bytes to be lent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingRead {
    /// The request's frame id, which its reply carries.
    pub id: u64,
    pub addr: u64,
    pub len: u32,
}

/// Connection-level counters every server keeps.
#[derive(Debug, Default)]
pub struct ServerStats {
    pub connections: Counter,
    pub auth_failures: Counter,
    pub protocol_errors: Counter,
    pub requests: Counter,
    pub refused: Counter,
    /// Connections open now.
    pub open: AtomicU64,
    /// Connections refused because `max_connections` were open.
    pub over_limit: Counter,
    /// Closes by reason: the peer hung up (or the server shut down), idle
    /// past `idle_timeout`, a failed or timed-out handshake, a malformed
    /// frame, an I/O error.
    pub closed_by_peer: Counter,
    pub closed_idle: Counter,
    pub closed_handshake: Counter,
    pub closed_protocol: Counter,
    pub closed_io: Counter,
    /// Handshakes that proved another role's key than the role claimed
    /// (also counted in `auth_failures`).
    pub refused_role: Counter,
    /// From a request's frame read to its reply encoded (not sent: a
    /// reply may wait for the next ones to leave in one write).
    pub request_latency: farmem_core::LatencyHistogram,
    /// Bytes of pages on the link and what compression did, every session.
    pub link: LinkStats,
}

impl ServerStats {
    /// Counts a logged-in connection's end under its reason.
    pub(crate) fn closed(&self, result: &Result<(), NetError>) {
        match result {
            Ok(()) | Err(NetError::Disconnected(_)) => self.closed_by_peer.inc(),
            Err(NetError::Timeout(_)) => self.closed_idle.inc(),
            Err(NetError::Wire(_)) => self.closed_protocol.inc(),
            Err(_) => self.closed_io.inc(),
        }
    }
}
