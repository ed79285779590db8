//! DaeMon's data-movement engines (seed 000 §3, §4.1–4.5) as pure state
//! machines: no I/O, no clocks, no threads. Every event is a method that
//! returns what to do; the caller (the simulator, or the runtime where the
//! paper's line/page pair becomes demand page / bulk cluster, §4.7) moves the
//! bytes and charges the time.
//!
//! | type | paper | callers outside this crate |
//! |---|---|---|
//! | [`BandwidthPartitioner`], [`PartitionConfig`] | §4.1 approximate bandwidth partitioning (queue controller ⑦) | farmem-sim `scheme/daemon.rs` (its shares, via `ComputeEngine::partitioner`); farmem-runtime `join.rs` `demand_share` (4 KiB demand / 64 KiB bulk) |
//! | [`ShareServer`], [`Class`] | the same partitioning in continuous time: each class a FIFO server at its share | farmem-sim `scheme/daemon.rs` (the memory node's bus and the link's data direction, i.e. the memory engine's and compute engine's partitioned paths); farmem-net `delay.rs` `DelayGate::partitioned` under `farmem run --delay-partition` |
//! | [`ComputeEngine`], [`EngineConfig`], [`Selection`] | §4.1 queues ①②, §4.2 inflight buffers ③④ and selection unit ⑤, §4.3 dirty unit ⑧, sizes of §4.5 Table 1; §6 schemes (`Selective` is PQ/DaeMon, `Both` is BP, `PageOnly` is Remote/LC, `LineOnly` is cache-line only) | farmem-sim `scheme/daemon.rs` `Daemon`, `config.rs` (`daemon.compute`) |
//! | [`ComputeEngine::on_miss`] → [`MissAction`] ([`PageDecision`], [`LineDecision`]) | §4.2 "Scheduling Page / Cache Line Granularity Data Movements" | farmem-sim `Daemon::read_line` |
//! | [`ComputeEngine::on_line_arrival`] → [`LineArrival`], [`ComputeEngine::on_page_arrival`] → [`PageArrival`] ([`LineMask`]) | §4.2 (release entries, ignore late lines), §4.3 scenario (i) and the dirty flush | farmem-sim `Daemon::arrive` |
//! | [`ComputeEngine::on_dirty_line_evicted`] → [`DirtyAction`] | §4.3 scenario (ii), the 8-line throttle | farmem-sim `Daemon::write_back` |
//! | [`EngineStats`] | the engine's event counters | farmem-sim `Daemon::report` (`farmem sim --json`) |
//! | [`DaemonError`] | refused configs and offsets | farmem-sim `Config::validate`, `Daemon::read_line` |
//! | [`FaultSelector`], [`FaultConfig`], [`Fetch`], [`FaultStats`] | §4.2's selection unit on real faults, at §4.7's granularities (demand page / bulk cluster), over a [`ComputeEngine`] | farmem-runtime `daemon.rs` (`farmem run --engine daemon`) |
//!
//! Test-only (`#[cfg(test)]`, crate-private): the slot-by-slot queue
//! controller, `BandwidthPartitioner::next` → `Slot` and
//! `ComputeEngine::issue` → `Issue`, this crate's reference model of §4.1's
//! alternation, whose rounded pattern its tests pin and [`ShareServer`]
//! takes its shares from; and `ComputeEngine::page_state` → `PageState`
//! (§4.5 Fig. 7b's entry states, kept inside the engine). Neither body
//! steps slots: both issue by request ([`ComputeEngine::issue_line`],
//! [`ComputeEngine::issue_page`]) and charge the shares in continuous time.
//!
//! The memory engine (§4.1/§4.5: queues 512/1024 served on a partitioned
//! bus) has no type of its own. The simulator charges its partitioned bus
//! with [`ShareServer`] (farmem-sim `scheme/daemon.rs`, `Path::bus`); the
//! real memory node serves demand apart from bulk on two lanes
//! (farmem-net `lane.rs`), each connection on its own thread, so demand
//! never waits behind a bulk transfer and there is no shared bus to split.
//! A slot-by-slot memory engine had no caller in either body and was
//! removed.
//!
//! Link compression (§4.4) is not here: it changes how many bytes a served
//! page occupies the link, which is the caller's charge (the simulator's
//! `LinkCompression`; on the real link, farmem-net's `compress` module and
//! `farmem run --link-compression`).
//!
//! # Where the paper is ambiguous, and how we read it
//! - **Idle slots (§4.1).** "We retain this alternate serving ... even if
//!   either queue is empty (i.e., requests may be not issued in all cycles)."
//!   A slot whose queue is empty is idle and the other class may not use it;
//!   it holds the link for that class's nominal transfer (64 B or 4 KB at the
//!   link's bandwidth), so the reserved share stays reserved (BP's cost on
//!   high-locality workloads, §6.1, comes from this). The other reading,
//!   an idle slot costing one controller cycle, would leave nothing
//!   reserved whenever the line queue is momentarily empty, contrary to "to
//!   ensure this approximate partitioning is always maintained"; a caller
//!   that wants it charges idle slots zero time. The simulator offers both
//!   (`daemon.idle_slots`) and defaults to this one (`hold`), with a page
//!   slot crossing at the full bandwidth and the idle line slots after it
//!   reserved; docs/daemon.md compares the two. When both queues are empty
//!   the caller may park the link and either resume the pattern where it
//!   stopped or advance it by the parked time
//!   ([`BandwidthPartitioner::elapse_idle`]).
//! - **Rounding (§4.1).** Lines per page is rounded to nearest (21.33 → 21);
//!   lines come first in each period. See [`partition`].
//! - **"Page not scheduled" (§4.2)** is judged before this miss schedules its
//!   page, so the first miss to a page sends both the line and the page (the
//!   critical line is fast, the page brings the locality). "Scheduled" means
//!   any valid page-buffer entry (scheduled, moved or throttled); "still in
//!   the page queue" means not yet issued by the queue controller.
//! - **Utilization (§4.2)** is entries / capacity of each buffer, compared
//!   exactly in integers, before the miss adds anything. The sub-block buffer
//!   counts pages (it is indexed by page, §4.5), not lines.
//! - **No room (§4.2).** When the line should be sent but the sub-block queue
//!   or buffer is full the line is not sent ([`LineDecision::BufferFull`]);
//!   in hardware the LLC MSHRs bound this. A miss with neither page nor line
//!   in flight is reported ([`MissAction::is_stalled`]) for the caller to
//!   retry.
//! - **Lines still queued when their page arrives (§4.2).** The paper removes
//!   their inflight entries so their packets are ignored; we also take them
//!   out of the sub-block queue, since issuing them would only spend link
//!   bandwidth on packets that are dropped on arrival.
//! - **The throttle (§4.3).** "Increase beyond a predefined threshold (e.g.,
//!   8)": up to 8 lines of one page are held; the 9th flushes all 9 to remote
//!   and throttles the page. Later dirty lines of a throttled page go straight
//!   to remote (its arrival is discarded anyway). A full dirty buffer (256)
//!   throttles the page the same way rather than lose or stall the line.
//! - **A miss to a line held in the dirty buffer** is served from the buffer
//!   ([`LineDecision::HeldDirty`]): remote memory has stale data for it. The
//!   paper does not spell this out; it is needed for correctness.
//! - **Throttled pages that arrive** are discarded and re-requested (queued
//!   again, state scheduled). Their pending line requests stay valid.
//! - **Single-granularity schemes (§6).** Remote and LC move only pages and
//!   are described without partitioning, so [`Selection::PageOnly`] and
//!   [`Selection::LineOnly`] give their one class every slot
//!   ([`Selection::effective_partition`]).
//! - **Masks are 64 bits (§4.5)**, so a page holds at most 64 sub-blocks: 64 B
//!   lines in 4 KB pages, or e.g. 4 KB demand pages in a 64 KB cluster.
//! - **Sending the line and the page both (§4.2)** pays in hardware, where
//!   the line is a 64th of the page and the link is slow next to the core.
//!   A runtime's split costs a second read and a hand-off, so where the
//!   link moves a cluster in a few page reads' time the fault reads the
//!   two as one ([`FaultConfig::whole_within`]); the paper does not meet
//!   the case.
//!
//! # Driving it (simulator or runtime)
//! 1. A miss in the LLC and local memory: [`ComputeEngine::on_miss`]. Park
//!    the access on the page (if [`PageDecision::Scheduled`] or
//!    `AlreadyInflight`) and/or the line (`Sent` / `AlreadyInflight`); a
//!    [`LineDecision::HeldDirty`] is served from the dirty buffer at once.
//!    If [`MissAction::is_stalled`], retry it after the next arrival.
//! 2. The link: whenever it is free and [`ComputeEngine::has_work`], step
//!    the queue controller (in this crate's tests, `ComputeEngine::issue`). `Line`/`Page`: send the request; the reply
//!    occupies the link for its size (the page's compressed size with §4.4).
//!    `Idle(class)`: keep the link idle for
//!    `partitioner().slot_bytes(class)` at the link's bandwidth, then call
//!    again. With no work, park; on waking after `d` ns, optionally call
//!    [`ComputeEngine::elapse_idle`] with `d × bandwidth` and wait the bytes
//!    it returns. The simulator does not step slots: it charges each
//!    request's wait in its class's [`ShareServer`] share of the memory
//!    node's bus and of the link, and tells the engine when the request
//!    leaves its queue ([`ComputeEngine::issue_line`] /
//!    [`ComputeEngine::issue_page`]).
//! 3. A line reply: [`ComputeEngine::on_line_arrival`]; on `Deliver`, fill
//!    the LLC and wake the accesses parked on that line.
//! 4. A page reply: [`ComputeEngine::on_page_arrival`]. `Installed`: write
//!    the page to local memory (evicting per the local policy), overwrite
//!    the `merge` lines with the held dirty data, wake everything parked on
//!    the page (including those parked on its `ignored` lines). `Discarded`:
//!    drop the data; the page is queued again if `rerequested`, else wake
//!    its waiters to miss again.
//! 5. A dirty LLC eviction whose page is not in local memory:
//!    [`ComputeEngine::on_dirty_line_evicted`]. `WriteRemote`: send the line
//!    to remote; `Hold`/`Replace`: keep its bytes under (page, offset);
//!    `FlushAndThrottle`: send those held lines and this one to remote.
//!    Dirty writes to remote are link traffic too; the paper does not put
//!    them in either queue, so the caller charges them as it models writes.

pub mod engine;
pub mod fault;
pub mod partition;
pub mod share;

#[cfg(test)]
mod proptests;

pub use engine::{
    ComputeEngine, DirtyAction, EngineConfig, EngineStats, LineArrival, LineDecision, LineMask,
    MissAction, PageArrival, PageDecision, Selection,
};
#[cfg(test)]
pub(crate) use engine::{Issue, PageState};
pub use fault::{FaultConfig, FaultSelector, FaultStats, Fetch};
pub use partition::{BandwidthPartitioner, Class, PartitionConfig};
pub use share::ShareServer;

/// A page number (address / page size).
pub type PageNo = u64;
/// A sub-block's index within its page, `0..lines_per_page` (at most 64).
pub type LineOffset = u8;

/// Why a DaeMon engine could not be built or an input was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DaemonError {
    #[error("daemon config `{field}`: {why}")]
    BadConfig { field: &'static str, why: String },
    #[error("line offset {offset} is outside a page of {lines_per_page} lines")]
    BadOffset {
        offset: LineOffset,
        lines_per_page: u32,
    },
}
