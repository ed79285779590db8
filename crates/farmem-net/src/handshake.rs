//! Opening a session with a server: dialing it, the handshake that
//! proves both sides know the cluster token's key for their roles (at our
//! protocol version, or the oldest we speak), the capabilities a client
//! presents, and the link compression the two agree on. Client
//! connections (`conn.rs`) and the page reader open theirs here; this
//! module knows neither.

use std::io::{BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};

use farmem_wire::{
    Cap, ErrorCode, HEADER_LEN, LinkMode, MIN_PROTOCOL_VERSION, Msg, PROTOCOL_VERSION, auth,
};

use crate::frame::read_frame;
use crate::{ClientConfig, NetError};

/// The frame limit during the handshake, before the server has told us its own.
const HANDSHAKE_MAX_FRAME: u32 = 4096;

/// A client connection's read buffer. Replies pass through it; the rest of
/// a read reply at least this long goes straight into the caller's buffer.
/// A runtime keeps a connection per memory node and lane, each buffer
/// resident at the most it ever held, and charged to the program's local
/// memory: 256 KiB buffers cost bzip2 -9 at a 6 MiB limit 20-40 of its
/// 1,536 pages against 32 KiB ones. `farmem bench wire` streamed 4 KiB
/// reads at the same rate with 32, 64 and 256 KiB, within its run-to-run
/// noise.
const READ_BUFFER: usize = 64 << 10;

/// Dials and authenticates: the read side, the write side, and what the
/// server said in its welcome.
pub(crate) fn open(
    addr: &str,
    cfg: &ClientConfig,
) -> Result<(BufReader<TcpStream>, TcpStream, Welcomed), NetError> {
    let (mut reader, mut writer, mut welcomed) = session(addr, cfg, READ_BUFFER)?;
    if welcomed.version >= 4 && cfg.link.mode != LinkMode::Off {
        welcomed.link = agree_link(&mut reader, &mut writer, cfg)?;
    }
    Ok((reader, writer, welcomed))
}

/// Dials and authenticates at our protocol version, and again at the
/// oldest we speak if the server refuses it (a memory node from before
/// link compression): the read side, the write side and the welcome.
pub(crate) fn session(
    addr: &str,
    cfg: &ClientConfig,
    read_buffer: usize,
) -> Result<(BufReader<TcpStream>, TcpStream, Welcomed), NetError> {
    let mut version = PROTOCOL_VERSION;
    loop {
        let stream = dial(addr, cfg)?;
        let mut reader = BufReader::with_capacity(read_buffer, stream.try_clone()?);
        let mut writer = stream;
        match handshake(&mut reader, &mut writer, cfg, addr, version) {
            Err(NetError::Remote {
                code: ErrorCode::VersionMismatch,
                ..
            }) if version > MIN_PROTOCOL_VERSION => {
                tracing::debug!(
                    "{addr} refused protocol version {version}; trying {MIN_PROTOCOL_VERSION}"
                );
                version = MIN_PROTOCOL_VERSION;
            }
            result => return result.map(|w| (reader, writer, w)),
        }
    }
}

/// Asks the server for `cfg.link`'s compression (the session's first
/// request); the mode it agreed to.
fn agree_link(
    reader: &mut BufReader<TcpStream>,
    writer: &mut TcpStream,
    cfg: &ClientConfig,
) -> Result<LinkMode, NetError> {
    let mut out = Vec::new();
    Msg::Link {
        mode: cfg.link.mode,
        bytes_per_sec: cfg.link.bytes_per_sec,
    }
    .encode(0, &mut out);
    writer.write_all(&out)?;
    let mut body = Vec::new();
    let h = read_frame(reader, &mut body, HANDSHAKE_MAX_FRAME)?;
    // Counted as the server counts them: every frame after the handshake.
    let stats = &cfg.link.stats;
    stats.frame_bytes_sent.add(out.len() as u64);
    stats
        .frame_bytes_received
        .add((HEADER_LEN + body.len()) as u64);
    match Msg::decode(h.op, &body)? {
        Msg::Link { mode, .. } => Ok(mode),
        Msg::Error { code, message } => Err(NetError::Remote {
            code,
            message: message.to_string(),
        }),
        other => Err(NetError::Unexpected {
            request: "link",
            got: other.op(),
        }),
    }
}

/// Presents `caps` on a session just opened, before any other request.
pub(crate) fn present(
    reader: &mut BufReader<TcpStream>,
    writer: &mut TcpStream,
    caps: &[Cap],
    body: &mut Vec<u8>,
) -> Result<(), NetError> {
    if caps.is_empty() {
        return Ok(());
    }
    let mut out = Vec::new();
    Msg::Present {
        caps: caps.to_vec(),
    }
    .encode(0, &mut out);
    writer.write_all(&out)?;
    let h = read_frame(reader, body, HANDSHAKE_MAX_FRAME)?;
    match Msg::decode(h.op, body)? {
        Msg::Done => Ok(()),
        Msg::Error { code, message } => Err(NetError::Remote {
            code,
            message: message.to_string(),
        }),
        other => Err(NetError::Unexpected {
            request: "present",
            got: other.op(),
        }),
    }
}

/// A TCP connection to `addr` as every client wants it: within the
/// timeout, no Nagle delay, reads bounded by the timeout.
pub(crate) fn dial(addr: &str, cfg: &ClientConfig) -> Result<TcpStream, NetError> {
    let connect_err = |cause| NetError::Connect {
        addr: addr.to_string(),
        cause,
    };
    let sock_addr = addr
        .to_socket_addrs()
        .map_err(connect_err)?
        .next()
        .ok_or_else(|| connect_err(std::io::Error::other("address resolves to nothing")))?;
    let stream = TcpStream::connect_timeout(&sock_addr, cfg.timeout).map_err(connect_err)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(cfg.timeout))?;
    Ok(stream)
}

/// What a server told us in the handshake.
pub(crate) struct Welcomed {
    pub max_frame: u32,
    pub incarnation: u64,
    /// The protocol version of the session.
    pub version: u16,
    /// The link compression the server agreed to (`Off` until asked).
    pub link: LinkMode,
}

pub(crate) fn handshake(
    reader: &mut BufReader<TcpStream>,
    writer: &mut TcpStream,
    cfg: &ClientConfig,
    addr: &str,
    version: u16,
) -> Result<Welcomed, NetError> {
    let key = auth::client_key(&cfg.token, cfg.role)
        .map_err(|e| NetError::Auth(format!("cannot connect to {addr}: {e}")))?;
    let client_nonce: [u8; 16] = rand::random();
    let mut out = Vec::new();
    Msg::Hello {
        version,
        role: cfg.role,
        name: &cfg.name,
        nonce: client_nonce,
    }
    .encode(0, &mut out);
    writer.write_all(&out)?;
    let mut body = Vec::new();
    let h = read_frame(reader, &mut body, HANDSHAKE_MAX_FRAME)?;
    let (server_nonce, max_frame) = match Msg::decode(h.op, &body)? {
        Msg::Challenge {
            version: theirs,
            nonce,
            proof,
            max_frame,
        } => {
            if theirs != version {
                return Err(NetError::Auth(format!(
                    "{addr} answered protocol version {theirs} to our {version}"
                )));
            }
            let expected = auth::server_proof(&key, &client_nonce, &nonce, &cfg.name);
            if !auth::verify(&expected, &proof) {
                return Err(NetError::Auth(format!(
                    "{addr} does not know the {} key of the cluster token",
                    cfg.role.name()
                )));
            }
            (nonce, max_frame)
        }
        Msg::Error { code, message } => {
            return Err(NetError::Remote {
                code,
                message: message.to_string(),
            });
        }
        other => {
            return Err(NetError::Unexpected {
                request: "hello",
                got: other.op(),
            });
        }
    };
    out.clear();
    let proof = auth::client_proof(&key, &client_nonce, &server_nonce, &cfg.name);
    Msg::Auth { proof }.encode(0, &mut out);
    writer.write_all(&out)?;
    let h = read_frame(reader, &mut body, HANDSHAKE_MAX_FRAME)?;
    match Msg::decode(h.op, &body)? {
        Msg::Welcome { incarnation, .. } => Ok(Welcomed {
            max_frame,
            incarnation,
            version,
            link: LinkMode::Off,
        }),
        Msg::Error { code, message } => Err(NetError::Auth(format!(
            "{addr} refused us ({code:?}): {message}"
        ))),
        other => Err(NetError::Unexpected {
            request: "auth",
            got: other.op(),
        }),
    }
}
