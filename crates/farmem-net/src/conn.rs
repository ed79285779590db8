//! A pipelined client connection.
//!
//! Requests are written under a short lock; replies are matched to waiters
//! by request id. There is no reader thread: the first waiter to find the
//! socket free reads it for everyone until its own reply arrives, parking
//! replies meant for others in their slots and waking them, then hands the
//! socket on. A single synchronous caller therefore reads its own reply
//! directly, which keeps the round trip at the cost of the TCP round trip.
//! The reader spins a while before it sleeps on the socket
//! ([`farmem_policy::poll`]), yielding its CPU to anyone ready to run.

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use farmem_policy::delay::Traffic;
use farmem_policy::poll::AdaptivePoll;
use farmem_wire::{Cap, HEADER_LEN, LinkMode, Msg, Op, Packed};
use parking_lot::{Mutex, RwLock};

use crate::compress::{DecompressError, Packer, unpack};
use crate::frame::{await_frame, read_body, read_body_into, read_header, readable};
use crate::handshake::{Welcomed, open, present};
use crate::{ClientConfig, NetError};

/// A connection unused for this long is checked before its next request:
/// if the server closed it meanwhile (its idle timeout), it is reopened.
const IDLE_CHECK_AFTER: Duration = Duration::from_secs(1);

/// One reply frame, owned.
#[derive(Debug, Clone)]
pub struct Reply {
    pub op: u8,
    pub body: Vec<u8>,
    /// When it was read off the socket (a delay holds it from then).
    pub(crate) arrived: Instant,
}

impl Reply {
    /// Decodes the reply; a peer's `Error` becomes [`NetError::Remote`].
    pub fn msg(&self) -> Result<Msg<'_>, NetError> {
        match Msg::decode(self.op, &self.body)? {
            Msg::Error { code, message } => Err(NetError::Remote {
                code,
                message: message.to_string(),
            }),
            m => Ok(m),
        }
    }

    /// Checks the reply is `Done`.
    pub fn done(&self, request: &'static str) -> Result<(), NetError> {
        match self.msg()? {
            Msg::Done => Ok(()),
            other => Err(NetError::Unexpected {
                request,
                got: other.op(),
            }),
        }
    }
}

/// What waiting for a read's reply got (see [`Ticket::wait_into`]).
#[derive(Debug)]
pub enum Landed {
    /// The read's data is in the caller's buffer.
    Filled,
    /// Any other reply (a refusal, or a reply another thread read off the
    /// socket for us), for the caller to decode.
    Reply(Reply),
}

impl Landed {
    /// The read's data in `buf`: already there, or copied from the reply
    /// (its length checked); a refusal is [`NetError::Remote`].
    pub fn into_buf(self, buf: &mut [u8]) -> Result<(), NetError> {
        match self {
            Self::Filled => Ok(()),
            Self::Reply(reply) => copy_read_reply(&reply, buf),
        }
    }
}

/// What a waiter took off the socket or out of its slot.
enum Delivered {
    /// The data went straight into the waiter's buffer.
    Filled,
    Reply(Reply),
}

enum Slot {
    Waiting(Option<Thread>),
    Done(Result<Reply, String>),
}

struct ReadSide {
    stream: BufReader<TcpStream>,
    body: Vec<u8>,
    /// How long the reader spins for a reply before it sleeps.
    poll: AdaptivePoll,
}

struct Inner {
    peer: String,
    /// How the connection was made, to reopen it after an idle close.
    cfg: ClientConfig,
    born: Instant,
    /// When a request was last sent, in nanoseconds since `born`.
    last_sent: AtomicU64,
    writer: Mutex<(TcpStream, Vec<u8>)>,
    reader: Mutex<ReadSide>,
    slots: Mutex<HashMap<u64, Slot>>,
    /// Set once the connection has failed; every later call fails with it.
    dead: Mutex<Option<String>>,
    next_id: AtomicU64,
    max_frame: u32,
    /// The server's incarnation, from its welcome.
    incarnation: u64,
    timeout: Duration,
    delay: Option<Arc<crate::delay::EgressDelay>>,
    /// Capabilities the session holds, presented again on a reopened one
    /// (see [`Connection::present_on_reopen`]).
    resume: Mutex<Option<Arc<RwLock<Vec<Cap>>>>>,
    /// Link compression, when the server agreed to it: packed read replies
    /// are accepted only then, and writes packed by this packer.
    packer: Option<Mutex<Packer>>,
    link: LinkMode,
    /// Requests the delay gate had made wait when the packer last looked:
    /// a rise means the link has no headroom now.
    gate_waits: AtomicU64,
}

/// A pipelined, authenticated connection to a farmem daemon. Cheap to clone;
/// clones share the socket.
#[derive(Clone)]
pub struct Connection {
    inner: Arc<Inner>,
}

/// A request in flight; [`Ticket::wait`] returns its reply.
#[must_use = "a ticket must be waited on to learn the outcome"]
pub struct Ticket {
    conn: Connection,
    id: u64,
    /// The request's deadline: its submission plus the timeout, so time at
    /// the delay gate counts against it.
    deadline: Instant,
    /// When the request passed the delay gate, and how long the gate
    /// holds its reply once it lands.
    passed: Instant,
    hold: Duration,
    /// What the request is for: a demand read's hold is spun out to the
    /// microsecond, a bulk one's is slept (see [`EgressDelay::hold`]).
    traffic: Traffic,
    /// A read's bytes the delay gate charged it (what it asked for): its
    /// reply gives back what it did not put on the link. 0 for the rest.
    read_charged: u64,
}

impl Ticket {
    pub fn wait(mut self) -> Result<Reply, NetError> {
        let waited_from = Instant::now();
        let reply = match self.conn.wait(self.id, self.deadline, None)? {
            Delivered::Reply(reply) => reply,
            Delivered::Filled => unreachable!("no buffer to fill was given"),
        };
        let (reply, wire) = self.conn.unpack_reply(reply)?;
        if let Some(delay) = self.conn.inner.delay.as_ref()
            && self.read_charged > 0
        {
            // A packed reply crossed in fewer bytes than the read asked for.
            let saved = delay.refund(self.read_charged, wire, self.traffic);
            self.hold = self.hold.saturating_sub(saved);
        }
        // Called with no hold too: it counts the round trip.
        if let Some(delay) = self.conn.inner.delay.as_ref()
            && !delay.hold(
                self.passed,
                waited_from,
                reply.arrived,
                self.hold,
                self.deadline,
                self.traffic,
            )
        {
            return Err(NetError::Timeout(self.conn.inner.timeout));
        }
        Ok(reply)
    }
}

impl Ticket {
    /// Waits for a read's reply, reading its data straight into `buf` when
    /// this thread is the one that takes it off the socket and it is a
    /// plain `ReadOk` of `buf.len()` bytes: one copy (out of the socket's
    /// buffer) instead of three. Anything else comes back as a reply, as
    /// from [`Self::wait`]; [`Landed::into_buf`] finishes either. On an
    /// error `buf` may hold part of the data: it is not to be used.
    pub fn wait_into(self, buf: &mut [u8]) -> Result<Landed, NetError> {
        if self.conn.inner.delay.is_some() {
            // The delay gate holds a reply from when it arrived, and
            // refunds what it did not put on the link: the owned path.
            return self.wait().map(Landed::Reply);
        }
        match self.conn.wait(self.id, self.deadline, Some(buf))? {
            Delivered::Filled => {
                let stats = &self.conn.inner.cfg.link.stats;
                stats.read_raw_bytes.add(buf.len() as u64);
                stats.read_wire_bytes.add(buf.len() as u64);
                Ok(Landed::Filled)
            }
            Delivered::Reply(reply) => Ok(Landed::Reply(self.conn.unpack_reply(reply)?.0)),
        }
    }
}

impl Connection {
    /// Connects and authenticates.
    pub fn connect(addr: &str, cfg: &ClientConfig) -> Result<Self, NetError> {
        let (
            reader,
            writer,
            Welcomed {
                max_frame,
                incarnation,
                link,
                ..
            },
        ) = open(addr, cfg)?;
        Ok(Self {
            inner: Arc::new(Inner {
                peer: addr.to_string(),
                cfg: cfg.clone(),
                born: Instant::now(),
                last_sent: AtomicU64::new(0),
                writer: Mutex::new((writer, Vec::with_capacity(64 << 10))),
                reader: Mutex::new(ReadSide {
                    stream: reader,
                    body: Vec::new(),
                    poll: AdaptivePoll::new(cfg.poll),
                }),
                slots: Mutex::new(HashMap::new()),
                dead: Mutex::new(None),
                next_id: AtomicU64::new(1),
                max_frame,
                incarnation,
                timeout: cfg.timeout,
                delay: cfg.delay.clone(),
                resume: Mutex::new(None),
                packer: Packer::new(link, cfg.link.bytes_per_sec).map(Mutex::new),
                link,
                gate_waits: AtomicU64::new(0),
            }),
        })
    }

    /// The link compression the server agreed to (`Off` for a server
    /// older than protocol version 4, or one that refused it).
    pub fn link_mode(&self) -> LinkMode {
        self.inner.link
    }

    /// Appends `msg` as frame `id`: a write packed when the session agreed
    /// to link compression and the packer finds it worth it. Returns the
    /// data bytes that go on the link (`msg.data_bytes()`, or a packed
    /// write's payload).
    fn encode(&self, msg: &Msg<'_>, id: u64, buf: &mut Vec<u8>) -> u64 {
        let mut on_wire = msg.data_bytes();
        let stats = &self.inner.cfg.link.stats;
        let start = buf.len();
        if let Msg::Write { addr, data } = msg {
            let mut wire = data.len() as u64;
            if let Some(packer) = &self.inner.packer {
                let saturated = self.inner.delay.as_ref().is_some_and(|d| {
                    let now = d.waited_ns.get();
                    self.inner.gate_waits.swap(now, Ordering::Relaxed) != now
                });
                let mut p = packer.lock();
                if let Some(meta) = p.pack(data, saturated, stats) {
                    let packed = Packed {
                        codec: meta.codec,
                        raw_len: meta.raw_len,
                        crc: meta.crc,
                        data: p.packed(),
                    };
                    wire = packed.data.len() as u64;
                    Msg::WritePacked {
                        addr: *addr,
                        packed,
                    }
                    .encode(id, buf);
                }
            }
            on_wire = wire;
        }
        if buf.len() == start {
            msg.encode(id, buf);
        }
        // The frame before its payload, and `LinkStats::snapshot` reads
        // them the other way round: a snapshot taken mid-send never shows
        // more payload than frames.
        stats.frame_bytes_sent.add((buf.len() - start) as u64);
        if let Msg::Write { data, .. } = msg {
            stats.write_raw_bytes.add(data.len() as u64);
            stats.write_wire_bytes.add(on_wire);
        }
        on_wire
    }

    /// A packed read reply decoded into a plain `ReadOk`, so every reader
    /// of replies sees the page, with the data bytes it put on the link
    /// (0 for a reply that is not a read's); a payload that does not
    /// decode to what was sent is [`NetError::Decompress`].
    fn unpack_reply(&self, mut reply: Reply) -> Result<(Reply, u64), NetError> {
        let stats = &self.inner.cfg.link.stats;
        if reply.op == Op::ReadOk as u8 {
            let wire = reply.body.len() as u64;
            stats.read_raw_bytes.add(wire);
            stats.read_wire_bytes.add(wire);
            return Ok((reply, wire));
        }
        if reply.op != Op::ReadOkPacked as u8 {
            return Ok((reply, 0));
        }
        let refused = |e: DecompressError| {
            stats.decompress_errors.inc();
            NetError::Decompress(e)
        };
        if self.inner.packer.is_none() {
            return Err(refused(DecompressError::NotNegotiated {
                what: "read reply",
            }));
        }
        let Msg::ReadOkPacked { packed } = Msg::decode(reply.op, &reply.body)? else {
            return Err(NetError::Unexpected {
                request: "read",
                got: Op::ReadOkPacked,
            });
        };
        let start = Instant::now();
        let mut raw = Vec::new();
        unpack(&packed, self.max_payload(), &mut raw).map_err(refused)?;
        stats.codec_ns.add(start.elapsed().as_nanos() as u64);
        stats.unpacked.inc();
        stats.read_raw_bytes.add(raw.len() as u64);
        let wire = packed.data.len() as u64;
        stats.read_wire_bytes.add(wire);
        reply.op = Op::ReadOk as u8;
        reply.body = raw;
        Ok((reply, wire))
    }

    /// Has a session reopened after the server closed it while idle present
    /// `caps` before its first request: a server binds capabilities (and a
    /// client name proven by them) to a session, so without them the
    /// reopened one would be refused what the closed one was granted.
    pub fn present_on_reopen(&self, caps: Arc<RwLock<Vec<Cap>>>) {
        *self.inner.resume.lock() = Some(caps);
    }

    /// The address this connection was made to.
    pub fn peer(&self) -> &str {
        &self.inner.peer
    }

    /// The server's incarnation: a memory node draws a new one at every
    /// start (0: a server that holds no data).
    pub fn incarnation(&self) -> u64 {
        self.inner.incarnation
    }

    /// The largest frame the server accepts.
    pub fn max_frame(&self) -> u32 {
        self.inner.max_frame
    }

    /// Largest payload that fits one frame next to its header and fields.
    pub fn max_payload(&self) -> usize {
        self.inner.max_frame as usize - HEADER_LEN - 64
    }

    /// Sends a request and returns at once. Its deadline starts now: if its
    /// turn at the delay gate comes too late, it is not sent and fails with
    /// [`NetError::Timeout`] at the deadline.
    pub fn submit(&self, msg: &Msg<'_>) -> Result<Ticket, NetError> {
        self.submit_as(msg, crate::delay::traffic(msg))
    }

    /// [`Self::submit`] in the class `traffic` at the delay gate: a read
    /// nothing waits for (a bulk cluster) passes as bulk.
    pub fn submit_as(&self, msg: &Msg<'_>, traffic: Traffic) -> Result<Ticket, NetError> {
        let deadline = Instant::now() + self.inner.timeout;
        let mut hold = match &self.inner.delay {
            None => Duration::ZERO,
            Some(delay) => match delay.pass_by(deadline, msg.data_bytes(), traffic) {
                Some(hold) => hold,
                None => {
                    tracing::debug!(
                        "a request to {} waited its whole {:?} at the delay gate",
                        self.inner.peer,
                        self.inner.timeout
                    );
                    return Err(NetError::Timeout(self.inner.timeout));
                }
            },
        };
        let passed = Instant::now();
        self.reopen_if_closed_while_idle();
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        self.check_alive()?;
        self.inner.slots.lock().insert(id, Slot::Waiting(None));
        let mut w = self.inner.writer.lock();
        let (stream, buf) = &mut *w;
        buf.clear();
        let on_wire = self.encode(msg, id, buf);
        if let Err(e) = stream.write_all(buf) {
            drop(w);
            self.inner.slots.lock().remove(&id);
            let e = NetError::Io(e);
            self.fail(&e.to_string());
            return Err(e);
        }
        drop(w);
        if let Some(delay) = &self.inner.delay {
            // A packed write crossed in fewer bytes than it was admitted for.
            hold = hold.saturating_sub(delay.refund(msg.data_bytes(), on_wire, traffic));
        }
        let read_charged = match msg {
            Msg::Read { len, .. } => u64::from(*len),
            _ => 0,
        };
        Ok(Ticket {
            conn: self.clone(),
            id,
            deadline,
            passed,
            hold,
            traffic,
            read_charged,
        })
    }

    /// Sends several requests with one write (one syscall for a whole
    /// pipeline refill) and returns their tickets in order.
    pub fn submit_batch(&self, msgs: &[Msg<'_>]) -> Result<Vec<Ticket>, NetError> {
        if self.inner.delay.is_some() {
            // Each request passes the gate on its own, as on the link.
            return msgs.iter().map(|m| self.submit(m)).collect();
        }
        let deadline = Instant::now() + self.inner.timeout;
        self.reopen_if_closed_while_idle();
        self.check_alive()?;
        let first = self
            .inner
            .next_id
            .fetch_add(msgs.len() as u64, Ordering::Relaxed);
        let ids: Vec<u64> = (first..first + msgs.len() as u64).collect();
        {
            let mut slots = self.inner.slots.lock();
            for &id in &ids {
                slots.insert(id, Slot::Waiting(None));
            }
        }
        let mut w = self.inner.writer.lock();
        let (stream, buf) = &mut *w;
        buf.clear();
        for (msg, &id) in msgs.iter().zip(&ids) {
            self.encode(msg, id, buf);
        }
        if let Err(e) = stream.write_all(buf) {
            drop(w);
            let mut slots = self.inner.slots.lock();
            for id in &ids {
                slots.remove(id);
            }
            drop(slots);
            let e = NetError::Io(e);
            self.fail(&e.to_string());
            return Err(e);
        }
        Ok(ids
            .into_iter()
            .map(|id| Ticket {
                conn: self.clone(),
                id,
                deadline,
                passed: deadline,
                hold: Duration::ZERO,
                traffic: Traffic::Bulk,
                read_charged: 0,
            })
            .collect())
    }

    /// Sends a request and waits for its reply.
    pub fn call(&self, msg: &Msg<'_>) -> Result<Reply, NetError> {
        self.submit(msg)?.wait()
    }

    /// Reads `buf.len()` bytes at `addr` in one request, the data read
    /// off the socket straight into `buf` ([`Ticket::wait_into`]).
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), NetError> {
        self.submit(&Msg::Read {
            addr,
            len: buf.len() as u32,
        })?
        .wait_into(buf)?
        .into_buf(buf)
    }

    /// Writes `data` at `addr` in one request.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), NetError> {
        self.call(&Msg::Write { addr, data })?.done("write")
    }

    /// False once the connection has failed; a failed connection never recovers.
    pub fn is_alive(&self) -> bool {
        self.inner.dead.lock().is_none()
    }

    fn check_alive(&self) -> Result<(), NetError> {
        match &*self.inner.dead.lock() {
            Some(why) => Err(NetError::Disconnected(why.clone())),
            None => Ok(()),
        }
    }

    /// Reopens the connection if it went unused for a while and the server
    /// closed it meanwhile (an idle timeout), so the next request goes out
    /// on a live one. Only with nothing in flight and nobody reading.
    fn reopen_if_closed_while_idle(&self) {
        let inner = &*self.inner;
        let now = inner.born.elapsed().as_nanos() as u64;
        let last = inner.last_sent.swap(now, Ordering::Relaxed);
        if now.saturating_sub(last) < IDLE_CHECK_AFTER.as_nanos() as u64 {
            return;
        }
        let Some(mut rd) = inner.reader.try_lock() else {
            return;
        };
        let mut w = inner.writer.lock();
        if !inner.slots.lock().is_empty() || !self.is_alive() || !readable(&rd.stream) {
            return;
        }
        match open(&inner.peer, &inner.cfg) {
            // Only to the same incarnation: a restarted server is the
            // caller's to notice (its memory is not what it was).
            // And with the same link compression: the packer sends packed
            // writes only to a session that agreed to them.
            Ok((mut reader, mut writer, welcomed))
                if welcomed.incarnation == inner.incarnation && welcomed.link == inner.link =>
            {
                let caps = inner.resume.lock().clone();
                let caps = caps.map(|c| c.read().clone()).unwrap_or_default();
                if let Err(e) = present(&mut reader, &mut writer, &caps, &mut rd.body) {
                    tracing::warn!("reopened the idle connection to {}, but {e}", inner.peer);
                    return;
                }
                tracing::debug!("reopened the idle connection to {}", inner.peer);
                rd.stream = reader;
                w.0 = writer;
            }
            Ok(_) => tracing::debug!("{} restarted while our connection was idle", inner.peer),
            Err(e) => tracing::debug!("cannot reopen the connection to {}: {e}", inner.peer),
        }
    }

    /// Marks the connection dead and fails every waiter.
    fn fail(&self, why: &str) {
        let mut dead = self.inner.dead.lock();
        if dead.is_none() {
            *dead = Some(why.to_string());
        }
        drop(dead);
        let _ = self
            .inner
            .writer
            .lock()
            .0
            .shutdown(std::net::Shutdown::Both);
        let mut slots = self.inner.slots.lock();
        for slot in slots.values_mut() {
            if let Slot::Waiting(t) = slot {
                if let Some(t) = t.take() {
                    t.unpark();
                }
                *slot = Slot::Done(Err(why.to_string()));
            }
        }
    }

    /// Waits for reply `id`; `into`: a read's buffer, filled straight from
    /// the socket when this thread reads that reply itself.
    fn wait(
        &self,
        id: u64,
        deadline: Instant,
        into: Option<&mut [u8]>,
    ) -> Result<Delivered, NetError> {
        let mut grace = true;
        loop {
            if let Some(result) = self.take_if_done(id) {
                return result.map(Delivered::Reply);
            }
            let late = Instant::now() >= deadline;
            if let Some(mut rd) = self.inner.reader.try_lock() {
                let result = if late {
                    self.collect(id, &mut rd, into)
                } else {
                    self.lead(id, &mut rd, into)
                };
                drop(rd);
                self.wake_one_waiter();
                return result;
            }
            // Late, with another thread reading: it hands ours over if it
            // came, at once; one short look before giving up.
            if late && !std::mem::take(&mut grace) {
                self.inner.slots.lock().remove(&id);
                return Err(NetError::Timeout(self.inner.timeout));
            }
            // The leader wakes us when our reply lands or when it steps down;
            // the timeout only guards against a missed wake-up.
            thread::park_timeout(Duration::from_millis(5));
        }
    }

    /// Reads replies for everyone until ours arrives.
    fn lead(
        &self,
        id: u64,
        rd: &mut ReadSide,
        mut into: Option<&mut [u8]>,
    ) -> Result<Delivered, NetError> {
        loop {
            // A previous leader may have delivered ours before handing over.
            if let Some(result) = self.take_if_done(id) {
                return result.map(Delivered::Reply);
            }
            // Only here: past the deadline a reply is read only once it is
            // known to be there, which is no wait to learn from.
            await_frame(&rd.stream, &mut rd.poll);
            if let Some(got) = self.next_reply(id, rd, into.as_deref_mut())? {
                return Ok(got);
            }
        }
    }

    /// Past the deadline: ours only if it already arrived. A caller waiting
    /// on several requests in turn (a write to every copy) comes to a later
    /// one only after the earlier ones; a reply that reached this machine
    /// in time is not timed out for that.
    fn collect(
        &self,
        id: u64,
        rd: &mut ReadSide,
        mut into: Option<&mut [u8]>,
    ) -> Result<Delivered, NetError> {
        loop {
            if let Some(result) = self.take_if_done(id) {
                return result.map(Delivered::Reply);
            }
            if !readable(&rd.stream) {
                self.inner.slots.lock().remove(&id);
                return Err(NetError::Timeout(self.inner.timeout));
            }
            if let Some(got) = self.next_reply(id, rd, into.as_deref_mut())? {
                return Ok(got);
            }
        }
    }

    /// Reads one reply: ours (`Some`), or another waiter's, handed over.
    /// A failed read fails the connection for everyone.
    /// Our own `ReadOk` of `into`'s length goes straight into `into`.
    fn next_reply(
        &self,
        id: u64,
        rd: &mut ReadSide,
        into: Option<&mut [u8]>,
    ) -> Result<Option<Delivered>, NetError> {
        let read = read_header(&mut rd.stream, self.inner.max_frame).and_then(|h| match into {
            Some(buf)
                if h.id == id && h.op == Op::ReadOk as u8 && h.body_len as usize == buf.len() =>
            {
                read_body_into(&mut rd.stream, buf).map(|()| (h, true))
            }
            _ => read_body(&mut rd.stream, &h, &mut rd.body).map(|()| (h, false)),
        });
        let (header, filled) = match read {
            Ok(read) => read,
            Err(e) => {
                let e = match e {
                    NetError::Timeout(_) => NetError::Timeout(self.inner.timeout),
                    e => e,
                };
                self.fail(&e.to_string());
                self.inner.slots.lock().remove(&id);
                return Err(e);
            }
        };
        self.inner
            .cfg
            .link
            .stats
            .frame_bytes_received
            .add((HEADER_LEN + header.body_len as usize) as u64);
        if filled {
            self.inner.slots.lock().remove(&id);
            return Ok(Some(Delivered::Filled));
        }
        let reply = Reply {
            op: header.op,
            body: std::mem::take(&mut rd.body),
            arrived: Instant::now(),
        };
        if header.id == id {
            self.inner.slots.lock().remove(&id);
            return Ok(Some(Delivered::Reply(reply)));
        }
        let mut slots = self.inner.slots.lock();
        // A reply nobody waits for any more (its waiter timed out) is dropped.
        if let Some(slot @ Slot::Waiting(_)) = slots.get_mut(&header.id)
            && let Slot::Waiting(Some(t)) = std::mem::replace(slot, Slot::Done(Ok(reply)))
        {
            t.unpark();
        }
        Ok(None)
    }

    /// Takes our result if it is there; otherwise records who to wake.
    fn take_if_done(&self, id: u64) -> Option<Result<Reply, NetError>> {
        let mut slots = self.inner.slots.lock();
        match slots.get_mut(&id) {
            Some(Slot::Done(_)) => match slots.remove(&id) {
                Some(Slot::Done(r)) => Some(r.map_err(NetError::Disconnected)),
                _ => unreachable!("slot checked above"),
            },
            Some(Slot::Waiting(t)) => {
                if t.is_none() {
                    *t = Some(thread::current());
                }
                None
            }
            None => Some(Err(NetError::Disconnected(
                self.inner
                    .dead
                    .lock()
                    .clone()
                    .unwrap_or_else(|| "request abandoned".into()),
            ))),
        }
    }

    /// Hands the socket to a follower so pending replies keep flowing.
    fn wake_one_waiter(&self) {
        let slots = self.inner.slots.lock();
        if let Some(t) = slots.values().find_map(|s| match s {
            Slot::Waiting(Some(t)) => Some(t.clone()),
            _ => None,
        }) {
            t.unpark();
        }
    }
}

/// Copies a `ReadOk` payload into `buf`, checking its length.
pub(crate) fn copy_read_reply(reply: &Reply, buf: &mut [u8]) -> Result<(), NetError> {
    match reply.msg()? {
        Msg::ReadOk { data } if data.len() == buf.len() => {
            buf.copy_from_slice(data);
            Ok(())
        }
        Msg::ReadOk { data } => Err(NetError::Routing(format!(
            "read reply of {} bytes for a {}-byte read",
            data.len(),
            buf.len()
        ))),
        other => Err(NetError::Unexpected {
            request: "read",
            got: other.op(),
        }),
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.inner.peer)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use farmem_policy::delay::DelayModel;
    use farmem_wire::{Msg, Role};

    use crate::delay::EgressDelay;
    use crate::server::{Peer, Refusal, Server, ServerConfig, Service};
    use crate::{ClientConfig, Connection, NetError};

    struct Echo;

    impl Service for Echo {
        fn handle(&self, _: &Peer, id: u64, _: Msg<'_>, out: &mut Vec<u8>) -> Result<(), Refusal> {
            Msg::Done.encode(id, out);
            Ok(())
        }
    }

    /// Answers a read at `addr` with bytes that depend on their address;
    /// refuses one at 0, and answers one at 1 a byte short.
    struct Pages;

    fn byte_at(at: u64) -> u8 {
        (at.wrapping_mul(0x9e37_79b9) >> 7) as u8
    }

    impl Service for Pages {
        fn handle(
            &self,
            _: &Peer,
            id: u64,
            msg: Msg<'_>,
            out: &mut Vec<u8>,
        ) -> Result<(), Refusal> {
            let Msg::Read { addr, len } = msg else {
                return Err(Refusal::unsupported("pages", &msg));
            };
            if addr == 0 {
                return Err(Refusal::new(farmem_wire::ErrorCode::OutOfRange, "not here"));
            }
            let len = if addr == 1 { len - 1 } else { len };
            let data: Vec<u8> = (0..u64::from(len)).map(|i| byte_at(addr + i)).collect();
            Msg::ReadOk { data: &data }.encode(id, out);
            Ok(())
        }
    }

    fn checksum(b: &[u8]) -> u64 {
        b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
            (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3)
        })
    }

    #[test]
    fn reads_land_in_the_callers_buffer_whoever_takes_them_off_the_socket() {
        let server =
            Server::start("127.0.0.1:0", ServerConfig::default(), Arc::new(Pages)).unwrap();
        let cfg = ClientConfig::new("cn-0", Role::Compute);
        let conn = Connection::connect(&server.local_addr().to_string(), &cfg).unwrap();
        let addrs: Vec<u64> = (0..64).map(|i| 4096 * (i + 1) + i * 13).collect();
        let want: Vec<u64> = addrs
            .iter()
            .map(|&a| checksum(&(a..a + 4096).map(byte_at).collect::<Vec<_>>()))
            .collect();
        // In order (each waiter reads its own reply: filled in place), then
        // backwards (the first waiter reads the others' replies and parks
        // them: copied from a reply), from two threads at once.
        std::thread::scope(|s| {
            for backwards in [false, true] {
                let (conn, addrs, want) = (&conn, &addrs, &want);
                s.spawn(move || {
                    let msgs: Vec<Msg> = addrs
                        .iter()
                        .map(|&addr| Msg::Read { addr, len: 4096 })
                        .collect();
                    let mut tickets: Vec<_> = conn
                        .submit_batch(&msgs)
                        .unwrap()
                        .into_iter()
                        .enumerate()
                        .collect();
                    if backwards {
                        tickets.reverse();
                    }
                    for (i, t) in tickets {
                        let mut page = vec![0u8; 4096];
                        t.wait_into(&mut page).unwrap().into_buf(&mut page).unwrap();
                        assert_eq!(checksum(&page), want[i], "read {i}");
                    }
                });
            }
        });
        let mut page = vec![0u8; 4096];
        conn.read(addrs[5], &mut page).unwrap();
        assert_eq!(checksum(&page), want[5]);
        // A refusal and a short reply are errors, and the connection lives on.
        let refused = conn.read(0, &mut page);
        assert!(
            matches!(refused, Err(NetError::Remote { .. })),
            "{refused:?}"
        );
        let short = conn.read(1, &mut page);
        assert!(matches!(short, Err(NetError::Routing(_))), "{short:?}");
        conn.read(addrs[7], &mut page).unwrap();
        assert_eq!(checksum(&page), want[7]);
        // A dead server is a named error, never a page of zeros.
        drop(server);
        page.fill(0);
        let dead = conn.read(addrs[9], &mut page);
        assert!(
            matches!(dead, Err(NetError::Disconnected(_) | NetError::Io(_))),
            "{dead:?}"
        );
    }

    #[test]
    fn time_at_the_delay_gate_counts_against_the_deadline() {
        let server = Server::start("127.0.0.1:0", ServerConfig::default(), Arc::new(Echo)).unwrap();
        // 400 ms gaps from the first request, none a second later.
        let gap: DelayModel = "steps:0=400ms,1s=0".parse().unwrap();
        let delay = Arc::new(EgressDelay::new(gap, 1));
        let mut cfg = ClientConfig::new("cn-0", Role::Compute).with_delay(delay.clone());
        cfg.timeout = Duration::from_millis(150);
        let conn = Connection::connect(&server.local_addr().to_string(), &cfg).unwrap();
        let timed_out = |err: NetError| matches!(err, NetError::Timeout(t) if t == cfg.timeout);
        // The first request passes an idle gate at once, but its reply is
        // held its 400 ms gap, past its 150 ms deadline.
        let start = Instant::now();
        assert!(timed_out(conn.call(&Msg::Stats).unwrap_err()));
        assert_eq!(delay.late.get(), 1);
        // The second's turn comes 400 ms after the first's, past its own.
        assert!(timed_out(conn.call(&Msg::Stats).unwrap_err()));
        assert_eq!(delay.late.get(), 2);
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        // The connection is still good once the gaps are gone.
        std::thread::sleep(Duration::from_millis(1200));
        conn.call(&Msg::Stats).unwrap().done("after").unwrap();
        assert_eq!(delay.late.get(), 2);
    }

    #[test]
    fn a_lone_request_is_held_its_gap_and_a_thread_waits_out_several_at_once() {
        let server = Server::start("127.0.0.1:0", ServerConfig::default(), Arc::new(Echo)).unwrap();
        let addr = server.local_addr().to_string();
        let gap: DelayModel = "30ms".parse().unwrap();
        // Two memory nodes' paths, a gate each, as `--path-delay` makes.
        let paths: Vec<_> = (0..2)
            .map(|i| Arc::new(EgressDelay::new(gap.clone(), i)))
            .collect();
        let conns: Vec<_> = paths
            .iter()
            .map(|d| {
                let cfg = ClientConfig::new("cn-0", Role::Compute).with_delay(d.clone());
                Connection::connect(&addr, &cfg).unwrap()
            })
            .collect();
        // One request on each path, then the waits: the holds overlap.
        let start = Instant::now();
        let tickets: Vec<_> = conns
            .iter()
            .map(|c| c.submit(&Msg::Stats).unwrap())
            .collect();
        for t in tickets {
            t.wait().unwrap().done("held").unwrap();
        }
        assert!(
            start.elapsed() >= Duration::from_millis(30),
            "no reply comes early"
        );
        for d in &paths {
            assert_eq!(d.waited_ns.get(), 0, "an idle gate lets a request by");
            let held = Duration::from_nanos(d.held_ns.get());
            assert!(held <= Duration::from_millis(30), "{held:?}");
        }
        // Held in turn they would add up to 60 ms: the second path's reply
        // was held no more than what was left of the first's.
        let total = paths.iter().map(|d| d.held_ns.get()).sum::<u64>();
        assert!(total < 60_000_000, "{total} ns");
    }

    #[test]
    fn a_reply_that_came_in_time_is_taken_even_when_waited_for_late() {
        let server = Server::start("127.0.0.1:0", ServerConfig::default(), Arc::new(Echo)).unwrap();
        let mut cfg = ClientConfig::new("cn-0", Role::Compute);
        cfg.timeout = Duration::from_millis(100);
        let conn = Connection::connect(&server.local_addr().to_string(), &cfg).unwrap();
        // As a write to two copies does: the caller waits on another
        // node's request first, and comes to this one past its deadline.
        let ticket = conn.submit(&Msg::Stats).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        ticket.wait().unwrap().done("answered in time").unwrap();
        assert!(conn.is_alive());
    }
}
