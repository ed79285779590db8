//! The server side every daemon shares: accept, authenticate, then read
//! frames and let a [`Service`] answer them.
//!
//! One thread per connection: daemons serve a handful of compute nodes with
//! deep pipelines, so per-connection threads cost little and keep the hot
//! path free of wake-ups. Replies are buffered and flushed when no further
//! request is already waiting in the input buffer, which batches replies
//! under load and costs nothing when idle.

use std::io::{BufReader, BufWriter, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use farmem_core::Counter;
use farmem_wire::{ErrorCode, Msg, PROTOCOL_VERSION, Role, auth};

use crate::NetError;
use crate::frame::read_frame;

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
}

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub token: Vec<u8>,
    pub max_frame: u32,
    /// A connection that sends nothing for this long is closed.
    pub idle_timeout: Option<Duration>,
    /// Told to every client in its welcome: a memory node's, new at every
    /// start; 0 for a server that holds no data.
    pub incarnation: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            token: Vec::new(),
            max_frame: farmem_wire::DEFAULT_MAX_FRAME,
            idle_timeout: None,
            incarnation: 0,
        }
    }
}

/// Connection-level counters every server keeps.
#[derive(Debug, Default)]
pub struct ServerStats {
    pub connections: Counter,
    pub auth_failures: Counter,
    pub protocol_errors: Counter,
    pub requests: Counter,
    pub refused: Counter,
    /// Handshakes that proved another role's key than the role claimed
    /// (also counted in `auth_failures`).
    pub refused_role: Counter,
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
        let listener = TcpListener::bind(listen).map_err(|source| NetError::Connect {
            addr: listen.to_string(),
            source,
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
        let (cfg, service, stats) = (cfg.clone(), service.clone(), stats.clone());
        let session = SESSIONS.fetch_add(1, Ordering::Relaxed);
        if let Ok(handle) = stream.try_clone() {
            open.lock().insert(session, handle);
        }
        let open = open.clone();
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
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot spawn a connection thread: {e}");
        }
    }
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
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::with_capacity(256 << 10, stream.try_clone()?);
    let mut writer = BufWriter::with_capacity(256 << 10, stream);
    let peer = match handshake(&mut reader, &mut writer, cfg, addr, session, stats) {
        Ok(peer) => peer,
        Err(e) => {
            stats.auth_failures.inc();
            return Err(e);
        }
    };
    writer.get_ref().set_read_timeout(cfg.idle_timeout)?;
    let result = request_loop(&mut reader, &mut writer, cfg, service, stats, &peer);
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
    loop {
        let header = match read_frame(reader, &mut body, cfg.max_frame) {
            Ok(h) => h,
            Err(NetError::Wire(e)) => {
                // A broken frame leaves the stream unframed: tell the peer why, then close.
                stats.protocol_errors.inc();
                writer.write_all(&out)?;
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
                writer.write_all(&out)?;
                reply_error(writer, header.id, ErrorCode::BadRequest, &e.to_string());
                return Err(NetError::Wire(e));
            }
        };
        let mark = out.len();
        if let Err(refusal) = service.handle(peer, header.id, msg, &mut out) {
            stats.refused.inc();
            out.truncate(mark);
            Msg::Error {
                code: refusal.code,
                message: &refusal.message,
            }
            .encode(header.id, &mut out);
        }
        if reader.buffer().is_empty() || out.len() >= FLUSH_AT {
            // Straight to the socket: BufWriter passes writes this large through.
            writer.get_mut().write_all(&out)?;
            out.clear();
        }
    }
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
    let (role, name, client_nonce) = match Msg::decode(h.op, &body)? {
        Msg::Hello {
            version,
            role,
            name,
            nonce,
        } => {
            if version != PROTOCOL_VERSION {
                let msg = format!(
                    "protocol version {version} not supported; this server speaks {PROTOCOL_VERSION}"
                );
                reply_error(writer, h.id, ErrorCode::VersionMismatch, &msg);
                return Err(NetError::Auth(msg));
            }
            (role, name.to_string(), nonce)
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
    Msg::Challenge {
        version: PROTOCOL_VERSION,
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
