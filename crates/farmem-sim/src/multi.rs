//! Several inputs at once, one core each, sharing the LLC, local memory and
//! links. Each input is a pull source (a trace reader, or a workload on its
//! own thread sending batches); the scheduler always advances the core whose
//! clock is furthest behind, so their requests reach the shared links in
//! virtual-time order rather than in input order.

use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

use farmem_workloads::{Access, Sink, TraceReader, TraceRecord, WorkloadError};

use crate::core::CoreModel;
use crate::engine::Engine;
use crate::error::SimError;
use crate::input::Input;

const BATCH: usize = 4096;
/// Records a core runs before the scheduler looks again.
const QUANTUM: usize = 64;
/// Each input gets its own address space (separate processes).
const SPACE_SHIFT: u32 = 48;

enum Msg {
    Begin(u64),
    Batch(Vec<Access>),
    /// A page's initial contents, for compression-aware schemes.
    Page(u64, Box<[u8]>),
}

/// Batches a workload's accesses into a channel.
struct ChannelSink {
    tx: SyncSender<Msg>,
    buf: Vec<Access>,
    closed: bool,
    wants_contents: bool,
}

impl ChannelSink {
    fn flush(&mut self) {
        if self.buf.is_empty() || self.closed {
            return;
        }
        let batch = std::mem::replace(&mut self.buf, Vec::with_capacity(BATCH));
        // The receiver only hangs up on an error elsewhere; stop sending then.
        self.closed = self.tx.send(Msg::Batch(batch)).is_err();
    }
}

impl Sink for ChannelSink {
    fn begin(&mut self, footprint: u64) {
        self.closed = self.tx.send(Msg::Begin(footprint)).is_err();
    }
    #[inline]
    fn access(&mut self, a: Access) {
        self.buf.push(a);
        if self.buf.len() == BATCH {
            self.flush();
        }
    }
    fn wants_contents(&self) -> bool {
        self.wants_contents
    }
    fn page(&mut self, addr: u64, data: &[u8]) {
        // Accesses before it go first, so the engine sees the workload's order.
        self.flush();
        if !self.closed {
            self.closed = self.tx.send(Msg::Page(addr, data.into())).is_err();
        }
    }
}

enum Source {
    Trace(Box<TraceReader>),
    Workload {
        rx: Receiver<Msg>,
        handle: Option<JoinHandle<Result<(), WorkloadError>>>,
    },
}

struct Lane {
    source: Source,
    footprint: u64,
    buf: Vec<Access>,
    pos: usize,
    done: bool,
    offset: u64,
    thread: u16,
}

impl Lane {
    /// `wants_contents`: whether the engine takes page contents (a
    /// workload only produces them then; they are costly).
    fn open(input: &Input, index: usize, wants_contents: bool) -> Result<Self, SimError> {
        let (source, footprint) = match input {
            Input::Trace(path) => {
                let r = TraceReader::open(path)?;
                let fp = if r.header().complete {
                    r.header().footprint_bytes()
                } else {
                    farmem_workloads::trace::scan_summary(path)?.footprint_bytes()
                };
                (Source::Trace(Box::new(r)), fp)
            }
            Input::Workload { name, scale, seed } => {
                let (tx, rx) = sync_channel(4);
                let (name, scale, seed) = (name.clone(), *scale, *seed);
                let handle = std::thread::spawn(move || {
                    let mut sink = ChannelSink {
                        tx,
                        buf: Vec::with_capacity(BATCH),
                        closed: false,
                        wants_contents,
                    };
                    farmem_workloads::run_workload(&name, scale, seed, &mut sink)?;
                    sink.flush();
                    Ok(())
                });
                let mut src = Source::Workload {
                    rx,
                    handle: Some(handle),
                };
                let fp = match &mut src {
                    Source::Workload { rx, handle } => match rx.recv() {
                        Ok(Msg::Begin(f)) => f,
                        _ => {
                            join(handle)?;
                            0
                        }
                    },
                    Source::Trace(_) => 0,
                };
                (src, fp)
            }
            Input::Multi(_) => {
                return Err(SimError::Config {
                    source_name: input.name(),
                    message: "inputs cannot nest".into(),
                });
            }
        };
        Ok(Self {
            source,
            footprint,
            buf: Vec::with_capacity(BATCH),
            pos: 0,
            done: false,
            offset: (index as u64) << SPACE_SHIFT,
            thread: index as u16,
        })
    }

    /// Refills the buffer, handing page contents met on the way to
    /// `engine` (in this input's address space); false when the input is
    /// exhausted.
    fn refill<C: CoreModel>(&mut self, engine: &mut Engine<C>) -> Result<bool, SimError> {
        self.buf.clear();
        self.pos = 0;
        match &mut self.source {
            Source::Trace(r) => {
                while self.buf.len() < BATCH {
                    match r.next_record()? {
                        Some(TraceRecord::Access(a)) => self.buf.push(a),
                        Some(TraceRecord::Page { addr, data }) => {
                            if engine.wants_contents() {
                                let addr = addr.wrapping_add(self.offset);
                                engine.page(addr, data.unwrap_or(&ZERO_PAGE));
                            }
                        }
                        None => break,
                    }
                }
            }
            Source::Workload { rx, handle } => loop {
                match rx.recv() {
                    Ok(Msg::Batch(b)) => {
                        self.buf = b;
                        break;
                    }
                    Ok(Msg::Page(addr, data)) => engine.page(addr.wrapping_add(self.offset), &data),
                    Ok(Msg::Begin(_)) => {}
                    Err(_) => {
                        join(handle)?;
                        break;
                    }
                }
            },
        }
        for a in &mut self.buf {
            a.addr = a.addr.wrapping_add(self.offset);
            a.thread = self.thread;
        }
        Ok(!self.buf.is_empty())
    }
}

fn join(handle: &mut Option<JoinHandle<Result<(), WorkloadError>>>) -> Result<(), SimError> {
    if let Some(h) = handle.take() {
        match h.join() {
            Ok(r) => r?,
            Err(_) => {
                return Err(SimError::Config {
                    source_name: "workload thread".into(),
                    message: "the workload generator panicked".into(),
                });
            }
        }
    }
    Ok(())
}

/// Runs every input on its own core of `engine` (which needs one core per input).
pub fn run<C: CoreModel>(engine: &mut Engine<C>, inputs: &[Input]) -> Result<(), SimError> {
    let mut lanes = inputs
        .iter()
        .enumerate()
        .map(|(i, input)| Lane::open(input, i, engine.wants_contents()))
        .collect::<Result<Vec<_>, _>>()?;
    engine.begin(lanes.iter().map(|l| l.footprint).sum());
    loop {
        // The core furthest behind in virtual time goes next.
        let mut next: Option<usize> = None;
        for (i, l) in lanes.iter().enumerate() {
            if l.done {
                continue;
            }
            if next.is_none_or(|n| engine.core_time(i) < engine.core_time(n)) {
                next = Some(i);
            }
        }
        let Some(i) = next else { break };
        let lane = &mut lanes[i];
        for _ in 0..QUANTUM {
            if lane.pos == lane.buf.len() && !lane.refill(engine)? {
                lane.done = true;
                break;
            }
            engine.access(lane.buf[lane.pos]);
            lane.pos += 1;
        }
    }
    Ok(())
}

/// A zero page is recorded in a trace without its bytes.
static ZERO_PAGE: [u8; farmem_core::PAGE_SIZE as usize] = [0; farmem_core::PAGE_SIZE as usize];

/// Records a demultiplexed trace may read ahead of the core furthest behind.
const READ_AHEAD: usize = 1 << 20;

/// Replays a trace of several threads on several cores (thread `t` on core
/// `t mod cores`), advancing the core furthest behind in virtual time: the
/// trace's interleaving only decides the order within a core. Reads ahead at
/// most `READ_AHEAD` records to find the next access of that core.
pub fn run_demux<C: CoreModel>(
    engine: &mut Engine<C>,
    reader: &mut TraceReader,
    cores: usize,
) -> Result<(), SimError> {
    use std::collections::VecDeque;
    let mut queues: Vec<VecDeque<Access>> = (0..cores).map(|_| VecDeque::new()).collect();
    let mut buffered = 0usize;
    let mut eof = false;
    loop {
        // The core furthest behind among those that may still have work.
        let mut next: Option<usize> = None;
        for (c, q) in queues.iter().enumerate() {
            if q.is_empty() && eof {
                continue;
            }
            if next.is_none_or(|n| engine.core_time(c) < engine.core_time(n)) {
                next = Some(c);
            }
        }
        let Some(mut c) = next else { break };
        // Read until that core has work (or the read-ahead bound is hit).
        while queues[c].is_empty() && !eof {
            if buffered >= READ_AHEAD {
                // Too far ahead: run the most-behind core that has work.
                match (0..cores)
                    .filter(|&k| !queues[k].is_empty())
                    .min_by(|&a, &b| engine.core_time(a).total_cmp(&engine.core_time(b)))
                {
                    Some(k) => c = k,
                    None => break,
                }
                break;
            }
            match reader.next_record()? {
                Some(TraceRecord::Access(a)) => {
                    queues[a.thread as usize % cores].push_back(a);
                    buffered += 1;
                }
                Some(TraceRecord::Page { addr, data }) => {
                    if engine.wants_contents() {
                        engine.page(addr, data.unwrap_or(&ZERO_PAGE));
                    }
                }
                None => eof = true,
            }
        }
        for _ in 0..QUANTUM {
            let Some(a) = queues[c].pop_front() else {
                break;
            };
            buffered -= 1;
            engine.access(a);
        }
    }
    Ok(())
}
