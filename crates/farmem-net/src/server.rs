//! The server side every daemon shares: accept, authenticate, then read
//! frames and let a [`Service`] answer them.
//!
//! One thread per connection: daemons serve a handful of compute nodes with
//! deep pipelines, so per-connection threads cost little and keep the hot
//! path free of wake-ups. Replies are buffered and flushed when no further
//! request is already waiting in the input buffer, which batches replies
//! under load and costs nothing when idle. Between requests a connection's
//! thread spins a while before it sleeps ([`farmem_policy::poll`]), so a
//! request that follows soon finds it awake: waking a thread whose vCPU went
//! idle costs several times a loopback round trip.

use std::io::{BufReader, BufWriter, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use farmem_policy::poll::{AdaptivePoll, PollConfig};
use farmem_wire::{
    ErrorCode, HEADER_LEN, LinkMode, MIN_PROTOCOL_VERSION, Msg, Op, PROTOCOL_VERSION, Packed, Role,
    auth,
};

use crate::NetError;
use crate::compress::{LinkStats, Packer, unpack};
use crate::delay::{EgressDelay, wait_until};
use crate::frame::{await_frame, read_frame};
use crate::lend::LentBatch;
pub use crate::service::{Lent, Peer, PendingRead, Refusal, ServerStats, Service, reply_stats};

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub token: Vec<u8>,
    pub max_frame: u32,
    /// A logged-in connection that sends nothing for this long is closed
    /// (with an `Error` frame saying why). farmem's clients reopen such a
    /// connection on their next request ([`crate::Connection`]).
    pub idle_timeout: Option<Duration>,
    /// Told to every client in its welcome: a memory node's, new at every
    /// start; 0 for a server that holds no data.
    pub incarnation: u64,
    /// Most connections open at once; past it a new one is answered with
    /// an `Error` frame naming the limit and closed.
    pub max_connections: usize,
    /// How long a connection's thread spins for the next request before it
    /// sleeps ([`farmem_policy::poll`]).
    pub poll: PollConfig,
    /// A delay on the way in (ThymesisFlow's injector on the lender's
    /// side): each request waits its turn at this gate before it is
    /// served, and its reply leaves its hold after that, the replies of a
    /// batch together. Shared by all the server's connections. The hold is
    /// waited in the connection's thread, which reads nothing meanwhile: a
    /// client that sends one request at a time on a connection gets a
    /// reply per gap and hold, not per gap.
    pub ingress_delay: Option<Arc<EgressDelay>>,
    /// Agree to link compression when a client asks for it (`Msg::Link`):
    /// read replies packed as the client's mode says, packed writes
    /// accepted. A memory node's; off for servers that move no pages.
    pub link_compression: bool,
    /// The newest protocol version served; a client asking for a newer
    /// one is refused with `VersionMismatch`. [`PROTOCOL_VERSION`] but in
    /// tests that stand in for an older server.
    pub max_version: u16,
}

/// Default idle timeout after login: long enough that no farmem client's
/// pause (a controller connection between a program's alloc and its exit)
/// costs more than one transparent reconnection.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a daemon's connection thread spins for the next request: up to
/// 1 ms, ten times a client's cap, because a daemon has little else to run
/// (and spins yielding to whoever does). On the demo's rack, the same
/// sitting: a remote fault's p50 19 µs against 39 µs with the client's
/// 100 µs cap, whose spin a program doing 20 µs of work between faults
/// outlasts; PageRank no slower.
pub const DEFAULT_SERVER_POLL: PollConfig = PollConfig {
    max_us: 1000,
    start_us: 10,
};
/// Default cap on open connections per daemon.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// How long a connection may take to authenticate.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection past the cap is given to send its `Hello` before
/// it is refused (on the accept thread, so kept short).
const OVER_LIMIT_HELLO_WAIT: Duration = Duration::from_millis(100);

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            token: Vec::new(),
            max_frame: farmem_wire::DEFAULT_MAX_FRAME,
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            incarnation: 0,
            poll: DEFAULT_SERVER_POLL,
            ingress_delay: None,
            link_compression: false,
            max_version: PROTOCOL_VERSION,
        }
    }
}

/// Open connections by session, so shutdown can close them.
type OpenConns = Arc<parking_lot::Mutex<std::collections::HashMap<u64, TcpStream>>>;

/// A running server; dropping it stops accepting and closes every open
/// connection, so peers see the daemon go away as they would a crash.
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    open: OpenConns,
    stats: Arc<ServerStats>,
    accept: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds `listen` (port 0 picks a free port) and serves `service`.
    pub fn start(
        listen: &str,
        cfg: ServerConfig,
        service: Arc<dyn Service>,
    ) -> Result<Self, NetError> {
        let listener = TcpListener::bind(listen).map_err(|cause| NetError::Connect {
            addr: listen.to_string(),
            cause,
        })?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(ServerStats::default());
        let open = OpenConns::default();
        let accept = {
            let (stop, stats, open) = (stop.clone(), stats.clone(), open.clone());
            let cfg = Arc::new(cfg);
            thread::Builder::new()
                .name(format!("farmem-accept-{}", addr.port()))
                .spawn(move || accept_loop(listener, cfg, service, stop, stats, open))?
        };
        Ok(Self {
            addr,
            stop,
            open,
            stats,
            accept: Some(accept),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn stats(&self) -> &Arc<ServerStats> {
        &self.stats
    }

    /// Stops accepting, waits for the accept loop, and closes every open connection.
    pub fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept with a throwaway connection.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
        for (_, conn) in self.open.lock().drain() {
            let _ = conn.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn accept_loop(
    listener: TcpListener,
    cfg: Arc<ServerConfig>,
    service: Arc<dyn Service>,
    stop: Arc<AtomicBool>,
    stats: Arc<ServerStats>,
    open: OpenConns,
) {
    static SESSIONS: AtomicU64 = AtomicU64::new(1);
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let stream = match conn {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        stats.connections.inc();
        if stats.open.load(Ordering::SeqCst) >= cfg.max_connections as u64 {
            refuse_over_limit(stream, &cfg, &stats);
            continue;
        }
        stats.open.fetch_add(1, Ordering::SeqCst);
        let (cfg, service, stats) = (cfg.clone(), service.clone(), stats.clone());
        let session = SESSIONS.fetch_add(1, Ordering::Relaxed);
        if let Ok(handle) = stream.try_clone() {
            open.lock().insert(session, handle);
        }
        let open = open.clone();
        let stats_left = stats.clone();
        let spawned = thread::Builder::new()
            .name("farmem-conn".into())
            .spawn(move || {
                let peer_addr = stream.peer_addr().ok();
                if let Err(e) = serve_connection(stream, &cfg, &*service, &stats, session) {
                    match e {
                        NetError::Disconnected(_) => {}
                        e => tracing::debug!("connection from {peer_addr:?} closed: {e}"),
                    }
                }
                open.lock().remove(&session);
                stats.open.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot spawn a connection thread: {e}");
            stats_left.open.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Answers a connection past the cap: reads its `Hello` (briefly, so the
/// refusal is what it reads rather than a reset), replies with an `Error`
/// naming the limit, and closes.
fn refuse_over_limit(stream: TcpStream, cfg: &ServerConfig, stats: &ServerStats) {
    stats.over_limit.inc();
    let msg = format!(
        "this server has its limit of {} connections open; try again later",
        cfg.max_connections
    );
    tracing::warn!(
        "refused a connection from {:?}: {msg}",
        stream.peer_addr().ok()
    );
    let _ = stream.set_read_timeout(Some(OVER_LIMIT_HELLO_WAIT));
    let mut body = Vec::new();
    let id = read_frame(&mut &stream, &mut body, 4096).map_or(0, |h| h.id);
    let mut out = Vec::new();
    Msg::Error {
        code: ErrorCode::NoCapacity,
        message: &msg,
    }
    .encode(id, &mut out);
    let _ = (&stream).write_all(&out);
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

fn serve_connection(
    stream: TcpStream,
    cfg: &ServerConfig,
    service: &dyn Service,
    stats: &ServerStats,
    session: u64,
) -> Result<(), NetError> {
    stream.set_nodelay(true)?;
    let addr = stream.peer_addr()?;
    // The handshake must finish promptly whatever the idle policy is.
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let mut reader = BufReader::with_capacity(256 << 10, stream.try_clone()?);
    let mut writer = BufWriter::with_capacity(256 << 10, stream);
    let peer = match handshake(&mut reader, &mut writer, cfg, addr, session, stats) {
        Ok(peer) => peer,
        Err(e) => {
            stats.auth_failures.inc();
            stats.closed_handshake.inc();
            return Err(e);
        }
    };
    writer.get_ref().set_read_timeout(cfg.idle_timeout)?;
    let result = request_loop(&mut reader, &mut writer, cfg, service, stats, &peer);
    if let (Err(NetError::Timeout(_)), Some(idle)) = (&result, cfg.idle_timeout) {
        let why = format!("closing a connection idle for {idle:?}");
        reply_error(&mut writer, 0, ErrorCode::BadRequest, &why);
    }
    stats.closed(&result);
    service.disconnected(&peer);
    result
}

fn request_loop(
    reader: &mut BufReader<TcpStream>,
    writer: &mut BufWriter<TcpStream>,
    cfg: &ServerConfig,
    service: &dyn Service,
    stats: &ServerStats,
    peer: &Peer,
) -> Result<(), NetError> {
    // Replies accumulate in `out` and go to the socket in one write once no
    // further request is already buffered (or the batch is large): one copy
    // from the store into `out`, one into the kernel.
    const FLUSH_AT: usize = 256 << 10;
    let mut body = Vec::new();
    let mut out = Vec::with_capacity(FLUSH_AT + (64 << 10));
    let mut poll = AdaptivePoll::new(cfg.poll);
    // When the replies in `out` may leave, behind an ingress delay.
    let mut release: Option<Instant> = None;
    // Link compression, once the client asked for it and we agreed.
    let mut packer: Option<Packer> = None;
    let mut unpacked = Vec::new();
    // Reads answered from lent bytes: only where nothing rewrites a reply
    // (no packing) and nothing holds replies back (no ingress delay).
    let lends = service.lends_reads() && cfg.ingress_delay.is_none();
    let mut lent = LentBatch::default();
    loop {
        await_frame(reader, &mut poll);
        let header = match read_frame(reader, &mut body, cfg.max_frame) {
            Ok(h) => h,
            Err(NetError::Wire(e)) => {
                // A broken frame leaves the stream unframed: tell the peer why, then close.
                stats.protocol_errors.inc();
                if let Some(at) = release.take() {
                    wait_until(at);
                }
                lent.flush(writer.get_ref(), &mut out, service, peer, stats)?;
                reply_error(writer, 0, ErrorCode::BadRequest, &e.to_string());
                return Err(NetError::Wire(e));
            }
            Err(e) => return Err(e),
        };
        stats.requests.inc();
        let msg = match Msg::decode(header.op, &body) {
            Ok(m) => m,
            Err(e) => {
                stats.protocol_errors.inc();
                if let Some(at) = release.take() {
                    wait_until(at);
                }
                lent.flush(writer.get_ref(), &mut out, service, peer, stats)?;
                reply_error(writer, header.id, ErrorCode::BadRequest, &e.to_string());
                return Err(NetError::Wire(e));
            }
        };
        stats
            .link
            .frame_bytes_received
            .add((HEADER_LEN + body.len()) as u64);
        if let Some(delay) = &cfg.ingress_delay {
            let hold = delay.pass(msg.data_bytes(), crate::delay::traffic(&msg));
            let at = Instant::now() + hold;
            release = Some(release.map_or(at, |r| r.max(at)));
        }
        let started = Instant::now();
        if let Msg::Read { addr, len } = msg
            && lends
            && packer.is_none()
        {
            lent.push(
                PendingRead {
                    id: header.id,
                    addr,
                    len,
                },
                started,
            );
            if reader.buffer().is_empty() || lent.full(FLUSH_AT) {
                lent.flush(writer.get_ref(), &mut out, service, peer, stats)?;
            }
            continue;
        }
        if !lent.is_empty() {
            // Replies go in request order: the reads before this request first.
            lent.flush(writer.get_ref(), &mut out, service, peer, stats)?;
        }
        let mark = out.len();
        let handled = match msg {
            Msg::Link {
                mode,
                bytes_per_sec,
            } => {
                let agreed = if cfg.link_compression {
                    mode
                } else {
                    LinkMode::Off
                };
                packer = Packer::new(agreed, bytes_per_sec);
                Msg::Link {
                    mode: agreed,
                    bytes_per_sec: 0,
                }
                .encode(header.id, &mut out);
                Ok(())
            }
            Msg::WritePacked { addr, packed } => {
                match unpack_write(packer.is_some(), &packed, cfg, stats, &mut unpacked) {
                    Ok(()) => {
                        let write = Msg::Write {
                            addr,
                            data: &unpacked,
                        };
                        service.handle(peer, header.id, write, &mut out)
                    }
                    Err(refusal) => Err(refusal),
                }
            }
            Msg::Write { data, .. } => {
                stats.link.write_raw_bytes.add(data.len() as u64);
                stats.link.write_wire_bytes.add(data.len() as u64);
                service.handle(peer, header.id, msg, &mut out)
            }
            msg => service.handle(peer, header.id, msg, &mut out),
        };
        if handled.is_ok() {
            pack_read_reply(packer.as_mut(), &mut out, mark, header.id, &stats.link);
        }
        stats.request_latency.record(started.elapsed());
        if let Err(refusal) = handled {
            stats.refused.inc();
            out.truncate(mark);
            Msg::Error {
                code: refusal.code,
                message: &refusal.message,
            }
            .encode(header.id, &mut out);
        }
        if reader.buffer().is_empty() || out.len() >= FLUSH_AT {
            if let Some(at) = release.take() {
                wait_until(at);
            }
            // Counted first, so a client that has its reply sees it counted.
            stats.link.frame_bytes_sent.add(out.len() as u64);
            // Straight to the socket: BufWriter passes writes this large through.
            writer.get_mut().write_all(&out)?;
            out.clear();
        }
    }
}

/// Decodes a packed write into `raw`; a payload that does not decode to
/// what was sent is refused with `BadPayload`, and nothing is written.
fn unpack_write(
    agreed: bool,
    packed: &Packed<'_>,
    cfg: &ServerConfig,
    stats: &ServerStats,
    raw: &mut Vec<u8>,
) -> Result<(), Refusal> {
    let refuse = |why: String| {
        stats.link.decompress_errors.inc();
        Refusal::new(ErrorCode::BadPayload, why)
    };
    if !agreed {
        return Err(refuse(
            "a packed write on a session that did not agree to link compression".into(),
        ));
    }
    let start = Instant::now();
    unpack(packed, cfg.max_frame as usize, raw).map_err(|e| refuse(e.to_string()))?;
    stats.link.codec_ns.add(start.elapsed().as_nanos() as u64);
    stats.link.unpacked.inc();
    stats.link.write_raw_bytes.add(raw.len() as u64);
    stats.link.write_wire_bytes.add(packed.data.len() as u64);
    Ok(())
}

/// Rewrites the reply frame at `out[mark..]` as a packed one when it is a
/// read's and the session's packer finds it worth it: the service writes
/// pages straight from its store, and this stays its only copy when the
/// page goes raw.
fn pack_read_reply(
    packer: Option<&mut Packer>,
    out: &mut Vec<u8>,
    mark: usize,
    id: u64,
    stats: &LinkStats,
) {
    if out.len() < mark + HEADER_LEN || out[mark + 4] != Op::ReadOk as u8 {
        return;
    }
    let raw = &out[mark + HEADER_LEN..];
    stats.read_raw_bytes.add(raw.len() as u64);
    let Some(packer) = packer else {
        stats.read_wire_bytes.add(raw.len() as u64);
        return;
    };
    let Some(meta) = packer.pack(raw, false, stats) else {
        stats.read_wire_bytes.add(raw.len() as u64);
        return;
    };
    out.truncate(mark);
    let packed = Packed {
        codec: meta.codec,
        raw_len: meta.raw_len,
        crc: meta.crc,
        data: packer.packed(),
    };
    stats.read_wire_bytes.add(packed.data.len() as u64);
    Msg::ReadOkPacked { packed }.encode(id, out);
}

fn reply_error(writer: &mut BufWriter<TcpStream>, id: u64, code: ErrorCode, message: &str) {
    let mut out = Vec::new();
    Msg::Error { code, message }.encode(id, &mut out);
    let _ = writer.write_all(&out).and_then(|_| writer.flush());
}

fn handshake(
    reader: &mut BufReader<TcpStream>,
    writer: &mut BufWriter<TcpStream>,
    cfg: &ServerConfig,
    addr: SocketAddr,
    session: u64,
    stats: &ServerStats,
) -> Result<Peer, NetError> {
    const HANDSHAKE_MAX_FRAME: u32 = 4096;
    let mut body = Vec::new();
    let h = read_frame(reader, &mut body, HANDSHAKE_MAX_FRAME)?;
    let (role, name, client_nonce, version) = match Msg::decode(h.op, &body)? {
        Msg::Hello {
            version,
            role,
            name,
            nonce,
        } => {
            if !(MIN_PROTOCOL_VERSION..=cfg.max_version).contains(&version) {
                let msg = format!(
                    "protocol version {version} not supported; this server speaks {MIN_PROTOCOL_VERSION} to {}",
                    cfg.max_version
                );
                reply_error(writer, h.id, ErrorCode::VersionMismatch, &msg);
                return Err(NetError::Auth(msg));
            }
            (role, name.to_string(), nonce, version)
        }
        other => {
            let msg = format!("expected hello, got {:?}", other.op());
            reply_error(writer, h.id, ErrorCode::Unauthorized, &msg);
            return Err(NetError::Auth(msg));
        }
    };
    let server_nonce: [u8; 16] = rand::random();
    // The claimed role is proven with that role's key, derived from the secret.
    let key = auth::role_key(&cfg.token, role);
    let proof = auth::server_proof(&key, &client_nonce, &server_nonce, &name);
    let mut out = Vec::new();
    // The client's own version: a version-3 client knows no other, and
    // gets a version-3 session (no `Link`, no packed frames).
    Msg::Challenge {
        version,
        nonce: server_nonce,
        proof,
        max_frame: cfg.max_frame,
    }
    .encode(h.id, &mut out);
    writer.write_all(&out)?;
    writer.flush()?;
    let h = read_frame(reader, &mut body, HANDSHAKE_MAX_FRAME)?;
    let proved = |key: &[u8], proof: &[u8; auth::PROOF_LEN]| {
        auth::verify(
            &auth::client_proof(key, &client_nonce, &server_nonce, &name),
            proof,
        )
    };
    let refusal = match Msg::decode(h.op, &body)? {
        Msg::Auth { proof } if proved(&key, &proof) => None,
        Msg::Auth { proof } => Some(
            match Role::ALL
                .into_iter()
                .find(|&r| proved(&auth::role_key(&cfg.token, r), &proof))
            {
                Some(other) => {
                    stats.refused_role.inc();
                    format!(
                        "`{name}` at {addr} claimed role {} but holds only the {} key",
                        role.name(),
                        other.name()
                    )
                }
                None => format!(
                    "`{name}` at {addr} does not know the cluster token (claimed role {})",
                    role.name()
                ),
            },
        ),
        other => Some(format!(
            "`{name}` at {addr} sent {:?}, not auth",
            other.op()
        )),
    };
    if let Some(why) = refusal {
        reply_error(writer, h.id, ErrorCode::Unauthorized, &why);
        return Err(NetError::Auth(why));
    }
    out.clear();
    Msg::Welcome {
        session,
        incarnation: cfg.incarnation,
    }
    .encode(h.id, &mut out);
    writer.write_all(&out)?;
    writer.flush()?;
    Ok(Peer {
        name,
        role,
        addr,
        session,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClientConfig, Connection};

    struct Echo;

    impl Service for Echo {
        fn handle(&self, _: &Peer, id: u64, _: Msg<'_>, out: &mut Vec<u8>) -> Result<(), Refusal> {
            Msg::Done.encode(id, out);
            Ok(())
        }
    }

    /// Lends a read as its bytes but the last 3 from one buffer, then 3
    /// zeros; at 1 a byte short, at 2 nothing, and past 99 no answer.
    struct Lender(parking_lot::RwLock<Vec<u8>>);

    impl Service for Lender {
        fn handle(&self, _: &Peer, _: u64, msg: Msg<'_>, _: &mut Vec<u8>) -> Result<(), Refusal> {
            Err(Refusal::unsupported("lender", &msg))
        }

        fn lends_reads(&self) -> bool {
            true
        }

        fn lend_reads<'s>(
            &'s self,
            _: &Peer,
            reads: &[PendingRead],
            parts: &mut Vec<Lent<'s>>,
            answers: &mut Vec<Result<std::ops::Range<usize>, Refusal>>,
        ) {
            for r in reads.iter().filter(|r| r.addr < 100) {
                let start = parts.len();
                let len = (r.len as usize).saturating_sub(3 + usize::from(r.addr == 1));
                if r.addr != 2 {
                    let at = r.addr as usize;
                    let held = parking_lot::RwLockReadGuard::map(self.0.read_recursive(), |d| {
                        &d[at..at + len]
                    });
                    parts.push(Lent::Held(held));
                    parts.push(Lent::Zeros(3));
                }
                answers.push(Ok(start..parts.len()));
            }
        }
    }

    #[test]
    fn a_read_lent_the_wrong_bytes_or_none_is_refused_and_the_rest_go_whole() {
        let data: Vec<u8> = (0..256u32).map(|i| (i * 7) as u8).collect();
        let lender = Arc::new(Lender(parking_lot::RwLock::new(data.clone())));
        let server = Server::start("127.0.0.1:0", ServerConfig::default(), lender).unwrap();
        let client = ClientConfig::new("cn-0", Role::Compute);
        let conn = Connection::connect(&server.local_addr().to_string(), &client).unwrap();
        // Each lent as `len - 3` bytes and 3 zeros.
        let reads = [(10, 20), (1, 20), (40, 8), (2, 20), (7, 100), (200, 8)];
        let msgs: Vec<Msg> = reads
            .iter()
            .map(|&(addr, len)| Msg::Read { addr, len: len + 3 })
            .collect();
        let tickets = conn.submit_batch(&msgs).unwrap();
        for (t, &(addr, len)) in tickets.into_iter().zip(&reads) {
            let mut buf = vec![0xeeu8; len as usize + 3];
            let got = t.wait_into(&mut buf).and_then(|l| l.into_buf(&mut buf));
            if matches!(addr, 1 | 2 | 200) {
                assert!(
                    matches!(
                        &got,
                        Err(NetError::Remote {
                            code: ErrorCode::BadRequest,
                            ..
                        })
                    ),
                    "read at {addr}: {got:?}"
                );
                continue;
            }
            got.unwrap();
            let at = addr as usize;
            let mut want = data[at..at + len as usize].to_vec();
            want.extend([0; 3]);
            assert_eq!(buf, want, "read at {addr}");
        }
        assert!(conn.is_alive());
        assert_eq!(server.stats().refused.get(), 3);
    }

    fn until(what: &str, f: impl Fn() -> bool) {
        let start = std::time::Instant::now();
        while !f() {
            assert!(start.elapsed() < Duration::from_secs(10), "never: {what}");
            thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn connections_past_the_cap_are_refused_with_the_limit() {
        let cfg = ServerConfig {
            max_connections: 2,
            ..ServerConfig::default()
        };
        let server = Server::start("127.0.0.1:0", cfg, Arc::new(Echo)).unwrap();
        let addr = server.local_addr().to_string();
        let client = ClientConfig::new("cn-0", Role::Compute);
        let a = Connection::connect(&addr, &client).unwrap();
        let _b = Connection::connect(&addr, &client).unwrap();
        match Connection::connect(&addr, &client) {
            Err(NetError::Remote { code, message }) => {
                assert_eq!(code, ErrorCode::NoCapacity);
                assert!(message.contains("limit of 2 connections"), "{message}");
            }
            other => panic!("a third connection got {other:?}"),
        }
        assert_eq!(server.stats().over_limit.get(), 1);
        a.call(&Msg::Stats).unwrap().done("stats").unwrap();
        drop(a);
        until("the closed connection is counted", || {
            server.stats().closed_by_peer.get() == 1
        });
        let c = Connection::connect(&addr, &client).unwrap();
        c.call(&Msg::Stats).unwrap().done("stats").unwrap();
        assert_eq!(server.stats().open.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn an_ingress_delay_spaces_requests_and_holds_their_replies() {
        let gap: farmem_policy::delay::DelayModel = "30ms".parse().unwrap();
        let delay = Arc::new(EgressDelay::new(gap, 1));
        let cfg = ServerConfig {
            ingress_delay: Some(delay.clone()),
            ..ServerConfig::default()
        };
        let server = Server::start("127.0.0.1:0", cfg, Arc::new(Echo)).unwrap();
        let client = ClientConfig::new("cn-0", Role::Compute);
        let conn = Connection::connect(&server.local_addr().to_string(), &client).unwrap();
        // A lone request on an idle gate: served at once, its reply held
        // a gap. Three pipelined: each served a gap after the one before,
        // the last one's reply a gap after that.
        let start = Instant::now();
        conn.call(&Msg::Stats).unwrap().done("lone").unwrap();
        assert!(start.elapsed() >= Duration::from_millis(30));
        let start = Instant::now();
        let tickets: Vec<_> = (0..3).map(|_| conn.submit(&Msg::Stats).unwrap()).collect();
        for t in tickets {
            t.wait().unwrap().done("pipelined").unwrap();
        }
        assert!(
            start.elapsed() >= Duration::from_millis(90),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(delay.admitted.get(), 4);
    }

    #[test]
    fn idle_connections_are_closed_and_clients_reopen_them() {
        let cfg = ServerConfig {
            idle_timeout: Some(Duration::from_millis(100)),
            ..ServerConfig::default()
        };
        let server = Server::start("127.0.0.1:0", cfg, Arc::new(Echo)).unwrap();
        let client = ClientConfig::new("cn-0", Role::Compute);
        let conn = Connection::connect(&server.local_addr().to_string(), &client).unwrap();
        conn.call(&Msg::Stats).unwrap().done("stats").unwrap();
        until("the idle connection is closed", || {
            server.stats().closed_idle.get() == 1
        });
        assert_eq!(server.stats().open.load(Ordering::SeqCst), 0);
        // Idle for longer than the client's check: the next call reopens it.
        thread::sleep(Duration::from_millis(1100));
        conn.call(&Msg::Stats).unwrap().done("stats").unwrap();
        assert!(conn.is_alive());
        assert_eq!(server.stats().connections.get(), 2);
    }
}
