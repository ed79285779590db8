//! farmem-net: how farmem processes talk.
//!
//! - [`Connection`]: a client connection with pipelining. Any number of
//!   threads may submit requests; completions arrive in any order and are
//!   matched by request id. Whoever waits first reads the socket for
//!   everyone (leader/followers), so a lone synchronous caller pays no
//!   thread hand-off on its round trip.
//! - [`server`]: the accept loop and per-connection loop every daemon uses,
//!   with the authentication handshake and protocol-error isolation.
//! - [`cluster`]: the compute node's view of a rack: a controller client and
//!   a pool of connections to memory nodes, routing by global address.
//! - [`Lane`]: reads and write-backs on connections of their own.
//! - [`link`]: a delay gate shared by several processes, set live.
//! - [`compress`]: link compression of pages and clusters (DaeMon §4.4).

pub mod cluster;
pub mod compress;
mod conn;
pub mod delay;
mod frame;
mod handshake;
mod lane;
mod lend;
pub mod link;
pub mod metrics;
mod page_reader;
pub mod server;
mod service;

use std::time::Duration;

pub use cluster::{
    Cluster, ControllerClient, LeaseKeeper, Redundancy, RedundancyError, Repaired, StripeSplit,
};
pub use conn::{Connection, Landed, Reply, Ticket};
pub use frame::{await_frame, read_frame, write_all_frames};
pub use lane::Lane;
pub use page_reader::{PageReadError, PageReader};

use farmem_wire::{ErrorCode, WireError};

/// Blocks, in the calling thread, every signal a program might send or
/// handle asynchronously, leaving the synchronous ones (SIGBUS, SIGSEGV,
/// SIGFPE, SIGILL, SIGTRAP, SIGSYS). Every background thread farmem runs
/// inside a program's process calls it first, so that the program's
/// process-directed signals (SIGCHLD, SIGALRM, SIGTERM, SIGUSR1, …) go to
/// the program's own threads: a program's handler run on one of ours could
/// touch far memory from the very thread that serves it.
pub fn block_async_signals() {
    // SAFETY: plain signal-set calls on a local set, and a mask change of
    // this thread only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        for sync in [
            libc::SIGBUS,
            libc::SIGSEGV,
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGTRAP,
            libc::SIGSYS,
        ] {
            libc::sigdelset(&mut set, sync);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// How long a memory node may fail every request before a [`Cluster`]
/// declares it down: long enough to ride out a reconnect, short enough that
/// a program whose only copy was there stops within seconds of the loss.
pub const DEFAULT_FAIL_AFTER: Duration = Duration::from_secs(3);

/// Settings every client connection needs.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Who we are; memory nodes check grants against this name.
    pub name: String,
    pub role: farmem_wire::Role,
    /// Shared cluster token; empty means an unauthenticated (loopback) cluster.
    pub token: Vec<u8>,
    /// How long a request may wait for its reply before the connection is
    /// declared dead.
    pub timeout: Duration,
    /// Injected egress delay, shared by every connection of this node.
    pub delay: Option<std::sync::Arc<delay::EgressDelay>>,
    /// Injected delay on each path instead: a [`Cluster`] gives every
    /// memory node a gate of its own, shared by that node's connections,
    /// in place of `delay` (several throttled links rather than one); node
    /// `id` gets model `id % len` of these.
    pub path_delays: Vec<farmem_policy::delay::DelayModel>,
    /// A memory node that fails every request for this long is declared
    /// down ([`NetError::NodeDown`]): a [`Cluster`] stops retrying it. Its
    /// requests time out after at most this long too.
    pub fail_after: Duration,
    /// How long a thread waiting for a reply spins before it sleeps
    /// ([`farmem_policy::poll`]).
    pub poll: farmem_policy::poll::PollConfig,
    /// Link compression this client asks memory nodes for, and the
    /// counters of bytes on the link its connections share.
    pub link: compress::LinkConfig,
}

impl ClientConfig {
    pub fn new(name: impl Into<String>, role: farmem_wire::Role) -> Self {
        Self {
            name: name.into(),
            role,
            token: Vec::new(),
            timeout: Duration::from_secs(10),
            delay: None,
            path_delays: Vec::new(),
            fail_after: DEFAULT_FAIL_AFTER,
            poll: Default::default(),
            link: Default::default(),
        }
    }

    /// Sends every request through `delay`'s gate.
    pub fn with_delay(mut self, delay: std::sync::Arc<delay::EgressDelay>) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Gives each memory node's path its own gate, of one of `models` (see
    /// [`Self::path_delays`]).
    pub fn with_path_delays(mut self, models: Vec<farmem_policy::delay::DelayModel>) -> Self {
        self.path_delays = models;
        self
    }

    pub fn with_token(mut self, token: impl Into<Vec<u8>>) -> Self {
        self.token = token.into();
        self
    }
}

/// What can go wrong talking to a peer.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// The cause is in the message, not a `source()`: a report that
    /// prints the chain would name it twice.
    #[error("cannot connect to {addr}: {cause}")]
    Connect { addr: String, cause: std::io::Error },
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol error: {0}")]
    Wire(#[from] WireError),
    /// A compressed page or cluster did not decode to what was sent.
    #[error("link compression: {0}")]
    Decompress(#[from] compress::DecompressError),
    #[error("authentication failed: {0}")]
    Auth(String),
    #[error("peer refused the request ({code:?}): {message}")]
    Remote { code: ErrorCode, message: String },
    #[error("unexpected reply {got:?} to {request}")]
    Unexpected {
        request: &'static str,
        got: farmem_wire::Op,
    },
    #[error("connection closed: {0}")]
    Disconnected(String),
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Routing(String),
    /// A memory node failed every request for the client's `fail_after`.
    #[error(
        "memory node {node} at {addr} has not answered for {waited:.1?} ({cause}); this client held {held} bytes there"
    )]
    NodeDown {
        node: u32,
        addr: String,
        waited: Duration,
        cause: String,
        held: u64,
    },
    /// A memory node restarted since this client wrote to it: what it held
    /// for us is gone.
    #[error(
        "memory node {node} at {addr} restarted (incarnation {was:#x} -> {now:#x}): the {held} bytes this client held there are lost"
    )]
    NodeLost {
        node: u32,
        addr: String,
        was: u64,
        now: u64,
        held: u64,
    },
}

impl NetError {
    /// True when retrying on a fresh connection could help.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            NetError::Io(_)
                | NetError::Disconnected(_)
                | NetError::Timeout(_)
                | NetError::Connect { .. }
        )
    }
}

/// Reads a token file: its contents with surrounding whitespace trimmed.
pub fn read_token_file(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    let raw = std::fs::read(path)?;
    let text = String::from_utf8_lossy(&raw);
    Ok(text.trim().as_bytes().to_vec())
}
