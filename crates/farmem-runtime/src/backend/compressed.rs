//! A compressed pool in local memory in front of another store (xDM's
//! `compressed` backend; the kernel's zswap in front of a swap device).
//!
//! Pages written whole are compressed with LZ4 and kept here when they
//! shrink enough ([`farmem_policy::tier`] decides); all-zero pages are kept
//! as a mark; the rest go to the store below. A page read back stays in the
//! pool, so a clean page evicted again costs nothing to evict and a
//! decompression to fetch. Past its size the pool demotes its oldest pages
//! to the store below, and only forgets one once the store below has it.
//!
//! Data that does not shrink is soon passed down untried
//! ([`CompressionGate`]), one page in sixteen still tried. Under `auto` a
//! pool that does not pay is turned off ([`PoolTuner`]): it demotes what
//! it holds, passes every page down as it comes, and is tried again later.
//! The tuner judges by the program's fault stall with the pool on and off,
//! which the fault path leaves in a [`FaultClock`]; the pool hands it the
//! totals as it is written and read.
//!
//! The pool's bytes are local memory: [`RemoteStore::local_bytes`] reports
//! them and the runtime counts them against its limit.
//!
//! Ordering: the runtime never reads a page while its write-back is in
//! flight, nor writes one page from two threads at once, so a page's own
//! calls arrive in order. Demotion is the pool's own doing and can overlap
//! them: a page is forgotten after its demotion only if nobody stored it
//! again meanwhile, and a page passed down waits for a demotion of its old
//! contents to land first, so the old bytes cannot overwrite the new below.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex};
use serde::Serialize;

use farmem_core::Counter;
use farmem_policy::tier::{Admit, CompressedTierConfig, CompressionGate, GateConfig, PoolTuner};

use super::page_groups;
use super::stall::{FAULT_CLOCK, FaultClock};
use crate::store::{RemoteStore, StoreError, page_pieces};

const PAGE: usize = farmem_core::PAGE_SIZE as usize;
const LINE: usize = farmem_core::CACHE_LINE as usize;
/// Bytes of bookkeeping charged per kept page besides its data (the map
/// entry, the allocation's header, the demotion queue's slot).
const ENTRY_OVERHEAD: u64 = 64;
/// Most pages one write-back demotes. A pool turned off drains over many
/// write-backs rather than in one batch, whose pages, decompressed into
/// line records, take local memory the limit does not count: draining a
/// fifth of 258 MiB at once took the demo's peak RSS to 1.2x its limit,
/// 256 pages at a time to 1.104x, 64 at a time to 1.08x (as without the
/// pool). A small pool turned off drains a sixteenth of its pages at a
/// time ([`demote_batch`]).
const DEMOTE_BATCH: usize = 64;

/// Most pages one batch drains from a pool of `max_bytes` turned off. A
/// batch goes below as line records (4.6 KiB a page), and the shipper's
/// heap stays resident at their peak, charged to the program's local
/// memory: 64 pages grew its line buffer to 433 KB, 7% of a 6 MiB limit,
/// whose pool holds some 300 pages.
fn demote_batch(max_bytes: u64) -> usize {
    ((max_bytes / PAGE as u64 / 16) as usize).clamp(4, DEMOTE_BATCH)
}

/// Most demotion batches one write-back ships while the pool is off: it
/// drains that much faster (its tuner waits for the drain to measure it
/// off), one batch's memory at a time.
const DRAIN_BATCHES: usize = 8;
/// A pool turned off counts as drained (its tuner may measure the epochs
/// without it) once it holds at most this share of its size.
const DRAINED_SHARE: u64 = 16;
/// The heap is trimmed once the pages the pool dropped add up to this
/// share of its size (see [`CompressedStore::trim_if_due`]).
const TRIM_SHARE: u64 = 4;

/// What the pool has done, for reports and tests.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct CompressedStats {
    /// Pages kept now, compressed or as zeros.
    pub pages: u64,
    /// Local bytes the pool takes now, bookkeeping included.
    pub bytes: u64,
    /// Pages written whole that were kept compressed, and as zeros.
    pub stored: u64,
    pub stored_zero: u64,
    /// Bytes of the pages kept compressed, before and after.
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Pages written whole that did not shrink enough, or were not tried
    /// (below), and went below.
    pub passed_down: u64,
    /// Of those, pages not even tried: the data was not shrinking.
    pub untried: u64,
    /// Pages moved below to keep the pool within its size.
    pub demoted: u64,
    /// Pages read from the pool, and from the store below.
    pub hits: u64,
    pub misses: u64,
    /// Pages passed down because the pool was off (`auto`), and times
    /// it was turned off or on.
    pub off_passed: u64,
    pub switches: u64,
    /// Times the heap was trimmed of the memory of dropped pages.
    pub trims: u64,
    /// What the stall tuner saw (`auto`): epochs of the program's run with
    /// the pool on and off, the mean ns it stalled in faults per epoch of
    /// each, and per 1000 ns of wall time; probes of the other setting,
    /// and those that won.
    pub epochs_on: u64,
    pub epochs_off: u64,
    pub epoch_stall_ns_on: u64,
    pub epoch_stall_ns_off: u64,
    pub stall_per_mille_on: u64,
    pub stall_per_mille_off: u64,
    pub probes: u64,
    pub probes_won: u64,
}

#[derive(Default)]
struct Counters {
    stored: Counter,
    stored_zero: Counter,
    bytes_in: Counter,
    bytes_out: Counter,
    passed_down: Counter,
    untried: Counter,
    demoted: Counter,
    hits: Counter,
    misses: Counter,
    off_passed: Counter,
    trims: Counter,
}

struct Entry {
    /// LZ4 block; None: the page is all zeros.
    data: Option<Box<[u8]>>,
    /// Which store of the page this is: a demotion forgets only the one it copied.
    seq: u64,
    demoting: bool,
}

impl Entry {
    fn charge(&self) -> u64 {
        ENTRY_OVERHEAD + self.data.as_ref().map_or(0, |d| d.len() as u64)
    }

    /// Decompresses into `out` (one page).
    fn load(&self, page: u64, out: &mut [u8]) -> Result<(), StoreError> {
        match &self.data {
            None => {
                out.fill(0);
                Ok(())
            }
            Some(d) => match lz4_flex::block::decompress_into(d, out) {
                Ok(n) if n == PAGE => Ok(()),
                Ok(n) => Err(corrupt(page, &format!("{n} bytes"))),
                Err(e) => Err(corrupt(page, &e.to_string())),
            },
        }
    }
}

fn corrupt(page: u64, what: &str) -> StoreError {
    StoreError::Lost(format!(
        "compressed page {page:#x} in the local pool does not decode ({what})"
    ))
}

/// A page being demoted: a copy of its entry when picked.
struct Victim {
    page: u64,
    seq: u64,
    data: Option<Box<[u8]>>,
}

#[derive(Default)]
struct Pool {
    pages: HashMap<u64, Entry>,
    /// Pages in the order they were stored, oldest first; an item whose
    /// seq no longer matches its page's entry is stale and skipped.
    order: VecDeque<(u64, u64)>,
    /// Local bytes charged for the kept pages.
    bytes: u64,
    /// Of `bytes`, those of pages being demoted now.
    demoting_bytes: u64,
    /// Bytes of pages dropped since the heap was last trimmed.
    freed_bytes: u64,
    next_seq: u64,
    /// Whether the pool takes pages now (`auto`); None: always.
    tuner: Option<PoolTuner>,
}

impl Pool {
    fn is_on(&self) -> bool {
        self.tuner.as_ref().is_none_or(PoolTuner::is_on)
    }

    /// `page` was written back: kept here in `kept` bytes, or not.
    fn written(&mut self, page: u64, kept: Option<u64>) {
        if let Some(t) = &mut self.tuner {
            t.written(page, kept);
        }
    }

    /// The pool, on, demotes `pages` to stay within its size.
    fn demoting(&mut self, pages: u32) {
        if let Some(t) = &mut self.tuner {
            t.demoted(pages);
        }
    }

    /// Hands the tuner the fault stall so far, and whether the pool (of
    /// at most `max_bytes`) has drained.
    fn tick(&mut self, clock: &FaultClock, max_bytes: u64) {
        if let Some(t) = &mut self.tuner {
            let (now, stall, faults) = clock.totals();
            let drained = self.bytes <= max_bytes / DRAINED_SHARE;
            t.progress(now, stall, faults, drained);
        }
    }

    /// `page` was read, from here or from below.
    fn read(&mut self, page: u64, from_pool: bool) {
        if let Some(t) = &mut self.tuner {
            t.read(page, from_pool);
        }
    }

    fn insert(&mut self, page: u64, data: Option<Box<[u8]>>) {
        self.next_seq += 1;
        let e = Entry {
            data,
            seq: self.next_seq,
            demoting: false,
        };
        self.bytes += e.charge();
        self.order.push_back((page, e.seq));
        if let Some(old) = self.pages.insert(page, e) {
            self.forget_charge(&old);
        }
        self.compact_order();
    }

    /// Drops the places in `order` of pages stored again or gone, once
    /// they outnumber the live ones: they leave only when they reach the
    /// front, and a pool that never fills would keep them all.
    fn compact_order(&mut self) {
        if self.order.len() <= 2 * self.pages.len() + 64 {
            return;
        }
        let pages = &self.pages;
        self.order
            .retain(|(p, seq)| pages.get(p).is_some_and(|e| e.seq == *seq && !e.demoting));
    }

    fn forget_charge(&mut self, e: &Entry) {
        self.bytes -= e.charge();
        self.freed_bytes += e.charge();
        if e.demoting {
            self.demoting_bytes -= e.charge();
        }
    }

    fn remove(&mut self, page: u64) {
        if let Some(old) = self.pages.remove(&page) {
            self.forget_charge(&old);
        }
        self.compact_order();
    }

    /// Marks the oldest pages for demotion until the rest fit in `max`,
    /// at most `most` of them; returns a copy of each.
    fn pick_victims(&mut self, max: u64, most: usize) -> Vec<Victim> {
        let mut victims = Vec::new();
        while self.bytes - self.demoting_bytes > max && victims.len() < most {
            let Some((page, seq)) = self.order.pop_front() else {
                break;
            };
            let Some(e) = self.pages.get_mut(&page) else {
                continue;
            };
            if e.seq != seq || e.demoting {
                continue;
            }
            e.demoting = true;
            let charge = e.charge();
            victims.push(Victim {
                page,
                seq,
                data: e.data.clone(),
            });
            self.demoting_bytes += charge;
        }
        victims
    }
}

/// What one page's part of a write does.
enum Staged {
    /// Kept in the pool (already inserted).
    Kept,
    /// For the store below, as given.
    Below,
    /// Patched here from the kept copy, then too big to keep: the whole
    /// page is for the store below, which never had the kept copy.
    Patched(Box<[u8; PAGE]>),
}

/// A compressed pool of at most `max_bytes` in front of `below`.
pub struct CompressedStore {
    below: Arc<dyn RemoteStore>,
    cfg: CompressedTierConfig,
    max_bytes: u64,
    pool: Mutex<Pool>,
    /// Whether compressing is paying off now.
    gate: Mutex<CompressionGate>,
    /// Signalled when demotions land.
    demoted: Condvar,
    /// `pool.bytes`, readable without the lock.
    bytes: AtomicU64,
    counters: Counters,
    /// Where the fault path leaves the stall the tuner decides on.
    clock: &'static FaultClock,
}

impl CompressedStore {
    /// A pool of at most `max_bytes` (from [`CompressedTierConfig::pool_bytes`]).
    pub fn new(below: Arc<dyn RemoteStore>, cfg: CompressedTierConfig, max_bytes: u64) -> Self {
        Self::with_clock(below, cfg, max_bytes, &FAULT_CLOCK)
    }

    /// The same, its tuner fed from `clock` rather than the runtime's.
    pub fn with_clock(
        below: Arc<dyn RemoteStore>,
        cfg: CompressedTierConfig,
        max_bytes: u64,
        clock: &'static FaultClock,
    ) -> Self {
        Self {
            below,
            cfg,
            max_bytes,
            pool: Mutex::new(Pool {
                tuner: cfg.tuner.map(|t| PoolTuner::new(t, max_bytes)),
                ..Pool::default()
            }),
            gate: Mutex::new(CompressionGate::new(GateConfig::default())),
            demoted: Condvar::new(),
            bytes: AtomicU64::new(0),
            counters: Counters::default(),
            clock,
        }
    }

    pub fn stats(&self) -> CompressedStats {
        let pool = self.pool.lock();
        let c = &self.counters;
        let ab = pool
            .tuner
            .as_ref()
            .and_then(PoolTuner::ab_stats)
            .unwrap_or_default();
        CompressedStats {
            pages: pool.pages.len() as u64,
            bytes: pool.bytes,
            stored: c.stored.get(),
            stored_zero: c.stored_zero.get(),
            bytes_in: c.bytes_in.get(),
            bytes_out: c.bytes_out.get(),
            passed_down: c.passed_down.get(),
            untried: c.untried.get(),
            demoted: c.demoted.get(),
            hits: c.hits.get(),
            misses: c.misses.get(),
            off_passed: c.off_passed.get(),
            switches: pool.tuner.as_ref().map_or(0, PoolTuner::switches),
            trims: c.trims.get(),
            epochs_on: ab.epochs_on,
            epochs_off: ab.epochs_off,
            epoch_stall_ns_on: ab.mean_stall_ns(true),
            epoch_stall_ns_off: ab.mean_stall_ns(false),
            stall_per_mille_on: ab.stall_per_mille(true),
            stall_per_mille_off: ab.stall_per_mille(false),
            probes: ab.probes,
            probes_won: ab.probes_won,
        }
    }

    fn publish(&self, pool: &Pool) {
        self.bytes.store(pool.bytes, Ordering::Relaxed);
    }

    /// Compresses a whole page and keeps it, or says it goes below (after
    /// forgetting any older copy here, once a demotion of it has landed).
    fn store_page(&self, page: u64, data: &[u8]) -> Staged {
        let on = {
            let mut pool = self.pool.lock();
            pool.tick(self.clock, self.max_bytes);
            pool.is_on()
        };
        if !on {
            self.counters.off_passed.inc();
            return self.pass_down(page);
        }
        let zero = data.iter().all(|&b| b == 0);
        let mut out = [0u8; lz4_flex::block::get_maximum_output_size(PAGE)];
        let tried = !zero && self.gate.lock().should_try();
        let compressed = if tried {
            lz4_flex::block::compress_into(data, &mut out).ok()
        } else {
            None
        };
        let admit = self.cfg.admit(PAGE, zero, compressed);
        if tried {
            self.gate.lock().observe(admit);
        } else if !zero {
            self.counters.untried.inc();
        }
        match admit {
            Admit::Zero => {
                let mut pool = self.pool.lock();
                pool.written(page, Some(0));
                pool.insert(page, None);
                self.publish(&pool);
                self.counters.stored_zero.inc();
                Staged::Kept
            }
            Admit::Pool => {
                let n = compressed.unwrap_or(PAGE);
                let mut pool = self.pool.lock();
                pool.written(page, Some(n as u64));
                pool.insert(page, Some(out[..n].into()));
                self.publish(&pool);
                self.counters.stored.inc();
                self.counters.bytes_in.add(PAGE as u64);
                self.counters.bytes_out.add(n as u64);
                Staged::Kept
            }
            Admit::Below => {
                self.counters.passed_down.inc();
                self.pass_down(page)
            }
        }
    }

    /// `page` goes below: any older copy here is forgotten, once a
    /// demotion of it has landed.
    fn pass_down(&self, page: u64) -> Staged {
        let mut pool = self.pool.lock();
        pool.written(page, None);
        while pool.pages.get(&page).is_some_and(|e| e.demoting) {
            self.demoted.wait(&mut pool);
        }
        pool.remove(page);
        self.publish(&pool);
        Staged::Below
    }

    /// Parts of one page, as (offset, bytes): applied to the kept copy if
    /// there is one, else all for below.
    fn patch(&self, page: u64, parts: &[(usize, &[u8])]) -> Result<Staged, StoreError> {
        let mut whole = [0u8; PAGE];
        {
            let pool = self.pool.lock();
            match pool.pages.get(&page) {
                Some(e) => e.load(page, &mut whole)?,
                None => return Ok(Staged::Below),
            }
        }
        for (off, bytes) in parts {
            whole[*off..off + bytes.len()].copy_from_slice(bytes);
        }
        Ok(match self.store_page(page, &whole) {
            Staged::Below => Staged::Patched(Box::new(whole)),
            kept => kept,
        })
    }

    /// Applies `records` one by one through [`RemoteStore::write`]: lines
    /// that do not sit within one page (never the runtime's).
    fn write_each(&self, records: &[(u64, [u8; LINE])]) -> Result<(), StoreError> {
        records.iter().try_for_each(|(a, l)| self.write(*a, l))
    }

    /// Ships `below` and the demotion batch the pool needs now, together;
    /// a pool turned off then drains a few more batches, one at a time.
    fn send_below(&self, mut below: Vec<(u64, [u8; LINE])>) -> Result<(), StoreError> {
        let mut landed = self.ship_with_demotions(&mut below);
        for _ in 1..DRAIN_BATCHES {
            if landed.is_err() || self.pool.lock().is_on() {
                break;
            }
            below.clear();
            landed = self.ship_with_demotions(&mut below);
            if below.is_empty() {
                break;
            }
        }
        self.trim_if_due();
        landed
    }

    /// Appends one demotion batch to `below` and writes it below.
    fn ship_with_demotions(&self, below: &mut Vec<(u64, [u8; LINE])>) -> Result<(), StoreError> {
        let victims = self.demote_into(below)?;
        let landed = if below.is_empty() {
            Ok(())
        } else {
            self.below.write_lines(below)
        };
        self.finish_demotion(&victims, landed.is_ok());
        landed
    }

    /// Gives the heap's free pages back to the system once the pool has
    /// dropped a [`TRIM_SHARE`] of its size since the last time. Its pages
    /// are a few hundred bytes to 3 KiB each, scattered over the heap, so
    /// freeing them returns little on its own: on Python at 96 MiB the
    /// heap held 21.6 MiB resident for a pool of 10.8 MiB, and a pool
    /// turned off kept the cache it had taken. The runtime counts the
    /// process's resident memory against its limit, so what the heap
    /// keeps is room the cache loses.
    fn trim_if_due(&self) {
        let due = {
            let mut pool = self.pool.lock();
            let due = pool.freed_bytes >= self.max_bytes / TRIM_SHARE;
            if due {
                pool.freed_bytes = 0;
            }
            due
        };
        if due {
            self.counters.trims.inc();
            trim_heap();
        }
    }

    /// Moves the oldest pages below until the pool fits, as one batch.
    /// Appends their lines to `lines` for the caller's one write below;
    /// returns the victims for [`Self::finish_demotion`].
    fn demote_into(
        &self,
        lines: &mut Vec<(u64, [u8; LINE])>,
    ) -> Result<Vec<(u64, u64)>, StoreError> {
        let victims = {
            let mut pool = self.pool.lock();
            // Off, the pool gives all its memory back to the cache.
            let on = pool.is_on();
            let max = if on { self.max_bytes } else { 0 };
            // On, a batch frees what the write-back just added, which keeps
            // the pool within its size; off, a small pool drains in small
            // batches.
            let most = if on {
                DEMOTE_BATCH
            } else {
                demote_batch(self.max_bytes)
            };
            let victims = pool.pick_victims(max, most);
            if on {
                pool.demoting(victims.len() as u32);
            }
            victims
        };
        let mut done = Vec::with_capacity(victims.len());
        let mut page_buf = [0u8; PAGE];
        let mut failed = None;
        for Victim { page, seq, data } in victims {
            let e = Entry {
                data,
                seq,
                demoting: true,
            };
            if failed.is_none() {
                match e.load(page, &mut page_buf) {
                    Ok(()) => push_lines(lines, page, &page_buf),
                    Err(err) => failed = Some(err),
                }
            }
            done.push((page, seq));
        }
        match failed {
            None => Ok(done),
            Some(e) => {
                self.finish_demotion(&done, false);
                Err(e)
            }
        }
    }

    /// The demotion batch landed below (`ok`) or did not: forget the pages
    /// not stored again since, or keep them all.
    fn finish_demotion(&self, victims: &[(u64, u64)], ok: bool) {
        if victims.is_empty() {
            return;
        }
        let mut pool = self.pool.lock();
        for &(page, seq) in victims {
            let Some(e) = pool.pages.get_mut(&page) else {
                continue;
            };
            if e.seq != seq {
                continue;
            }
            if ok {
                pool.remove(page);
                self.counters.demoted.inc();
            } else {
                e.demoting = false;
                let charge = e.charge();
                pool.demoting_bytes -= charge;
                pool.order.push_front((page, seq));
            }
        }
        self.publish(&pool);
        drop(pool);
        self.demoted.notify_all();
    }
}

impl CompressedStore {
    /// Whether the pool is off and drained, out of the way of a write of
    /// `groups`: then their pages are only noted for the tuner, and the
    /// caller writes them below as they are.
    fn out_of_the_way<'a>(&self, groups: impl Iterator<Item = super::PageGroup<'a>>) -> bool {
        let mut pool = self.pool.lock();
        pool.tick(self.clock, self.max_bytes);
        if pool.is_on() || !pool.pages.is_empty() {
            return false;
        }
        for g in groups {
            pool.written(g.page, None);
            self.counters.off_passed.inc();
        }
        true
    }
}

/// Returns the allocator's free pages to the system (glibc's
/// `malloc_trim`, which also drops free pages inside its arenas).
fn trim_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes the allocator's own locks; any thread may call it.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn push_lines(lines: &mut Vec<(u64, [u8; LINE])>, page: u64, data: &[u8]) {
    for (i, chunk) in data.chunks_exact(LINE).enumerate() {
        let mut line = [0u8; LINE];
        line.copy_from_slice(chunk);
        lines.push((page + (i * LINE) as u64, line));
    }
}

impl CompressedStore {
    /// Reads from the pool what it holds and the rest from below, as bulk
    /// traffic there when `bulk` ([`RemoteStore::read_bulk`]).
    fn read_in(&self, addr: u64, buf: &mut [u8], bulk: bool) -> Result<(), StoreError> {
        // Pieces the pool does not hold, read below in contiguous runs.
        let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
        let mut whole = [0u8; PAGE];
        self.pool.lock().tick(self.clock, self.max_bytes);
        for (page, off, r) in page_pieces(addr, buf.len()) {
            let mut pool = self.pool.lock();
            let Some(e) = pool.pages.get(&page) else {
                pool.read(page, false);
                drop(pool);
                self.counters.misses.inc();
                match runs.last_mut() {
                    Some(last) if last.end == r.start => last.end = r.end,
                    _ => runs.push(r),
                }
                continue;
            };
            self.counters.hits.inc();
            if r.len() == PAGE {
                e.load(page, &mut buf[r])?;
            } else {
                e.load(page, &mut whole)?;
                buf[r.clone()].copy_from_slice(&whole[off..off + r.len()]);
            }
            pool.read(page, true);
        }
        for r in runs {
            let piece = &mut buf[r.clone()];
            if bulk {
                self.below.read_bulk(addr + r.start as u64, piece)?;
            } else {
                self.below.read(addr + r.start as u64, piece)?;
            }
        }
        Ok(())
    }
}

impl RemoteStore for CompressedStore {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        self.read_in(addr, buf, false)
    }

    fn read_bulk(&self, addr: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        self.read_in(addr, buf, true)
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<(), StoreError> {
        for (page, off, r) in page_pieces(addr, data.len()) {
            let bytes = &data[r.clone()];
            let staged = if r.len() == PAGE {
                self.store_page(page, bytes)
            } else {
                self.patch(page, &[(off, bytes)])?
            };
            match staged {
                Staged::Kept => {}
                Staged::Below => self.below.write(page + off as u64, bytes)?,
                Staged::Patched(whole) => self.below.write(page, &whole[..])?,
            }
        }
        self.send_below(Vec::new())
    }

    fn write_lines(&self, lines: &[(u64, [u8; 64])]) -> Result<(), StoreError> {
        let Some(groups) = page_groups(lines) else {
            return self.write_each(lines);
        };
        if self.out_of_the_way(groups) {
            return self.below.write_lines(lines);
        }
        let Some(groups) = page_groups(lines) else {
            return self.write_each(lines);
        };
        let mut below = Vec::new();
        for g in groups {
            let staged = if g.whole {
                let mut data = [0u8; PAGE];
                for (chunk, (_, l)) in data.chunks_exact_mut(LINE).zip(g.lines) {
                    chunk.copy_from_slice(l);
                }
                self.store_page(g.page, &data)
            } else {
                self.patch(g.page, &g.parts())?
            };
            match staged {
                Staged::Kept => {}
                Staged::Below => below.extend_from_slice(g.lines),
                Staged::Patched(whole) => push_lines(&mut below, g.page, &whole[..]),
            }
        }
        self.send_below(below)
    }

    fn prepare_read_in_signal(&self) -> Result<bool, StoreError> {
        self.below.prepare_read_in_signal()
    }

    /// From the pool when every page asked for is there, from below when
    /// none is; a mix takes the ordinary path.
    fn read_in_signal(&self, addr: u64, buf: &mut [u8]) -> bool {
        let Some(mut pool) = self.pool.try_lock() else {
            return false;
        };
        let mut kept = 0;
        let mut total = 0;
        for (page, _, _) in page_pieces(addr, buf.len()) {
            total += 1;
            kept += pool.pages.contains_key(&page) as usize;
        }
        if kept == 0 {
            for (page, _, _) in page_pieces(addr, buf.len()) {
                pool.read(page, false);
            }
            drop(pool);
            return self.below.read_in_signal(addr, buf);
        }
        if kept < total || !(addr as usize).is_multiple_of(PAGE) || !buf.len().is_multiple_of(PAGE)
        {
            return false;
        }
        let ok = buf.chunks_exact_mut(PAGE).enumerate().all(|(i, out)| {
            let page = addr + (i * PAGE) as u64;
            pool.pages
                .get(&page)
                .is_some_and(|e| e.load(page, out).is_ok())
        });
        if ok {
            self.counters.hits.add(total as u64);
            for (page, _, _) in page_pieces(addr, buf.len()) {
                pool.read(page, true);
            }
        }
        ok
    }

    fn local_bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests;
