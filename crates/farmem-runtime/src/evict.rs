//! Eviction Handler and Dirty Data Tracker: victims are chosen through the
//! replacement policy, write-protected, diffed against their snapshot into
//! the cache-line log, shipped, and unmapped only once the store has
//! acknowledged them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use farmem_policy::write_streak::Seen;

use crate::bufs::Buf;
use crate::config::DirtyMode;
use crate::error::RuntimeError;
use crate::page::{LINE, PAGE, RegionInner, State};
use crate::park::Parking;
use crate::shared::Shared;
use crate::store::StoreError;

const LINES_PER_PAGE: usize = (PAGE as usize) / LINE;

/// A page the evictor or a sync owns (state Busy) until its write-back ends.
pub(crate) struct Victim {
    region: Arc<RegionInner>,
    idx: usize,
    page: u64,
    /// Where its lines go; None until backed (see [`claim`]).
    remote: Option<u64>,
    snapshot: Option<Buf>,
    /// Without a snapshot: the store holds zeros, so diff against zero.
    zero_base: bool,
    /// Lines the page must ship regardless of the diff (after a failed batch).
    force: u64,
    /// Lines this write-back ships; re-forced if it fails.
    shipped: u64,
}

/// One segment of the cache-line log ring: the lines of whole pages (a page
/// never straddles segments, so a segment's acknowledgement completes
/// exactly its pages) and the pages waiting for it.
pub(crate) struct Segment {
    lines: Vec<(u64, [u8; 64])>,
    pages: Vec<Victim>,
    cap: usize,
    /// Sync: pages stay resident, clean. Eviction: pages are unmapped.
    keep: bool,
}

impl Segment {
    pub(crate) fn new(cap: usize, keep: bool) -> Self {
        Self {
            lines: Vec::with_capacity(cap),
            pages: Vec::new(),
            cap,
            keep,
        }
    }

    fn has_room(&self) -> bool {
        self.lines.len() + LINES_PER_PAGE <= self.cap
            && (self.pages.len() + 1) * LINES_PER_PAGE <= self.cap
    }
}

/// Takes ownership of a page for write-back: Dirty always, Clean only for
/// eviction. Returns the state it had.
fn claim(sh: &Shared, r: &Arc<RegionInner>, idx: usize, keep: bool) -> Option<(Victim, State)> {
    let mut m = r.pages.get(idx)?.lock();
    let was = m.state;
    if !keep && m.pins > 0 && matches!(was, State::Clean | State::Dirty) {
        // A system call is using it: it stays, and in the policy.
        sh.cache.reinsert(r.page_addr(idx) / PAGE, sh.now());
        sh.m.pages_pinned_passed.inc();
        return None;
    }
    let remote = match was {
        // None: a lazy region's chunk not backed yet; `diff_into` backs it
        // if the page has lines to ship.
        State::Dirty => r.remote(idx),
        // A clean page is dropped, never written: it needs no address.
        State::Clean if !keep => None,
        _ => return None,
    };
    m.state = State::Busy;
    if !keep {
        let seen = match (was, std::mem::take(&mut m.unwatched)) {
            (State::Dirty, true) => Seen::Unwatched,
            (State::Dirty, false) => Seen::Written,
            _ => Seen::Clean,
        };
        m.streak.evicted(seen);
    }
    let page = r.page_addr(idx);
    // Remove here too: the block may have been re-inserted after the
    // evictor popped it (a sync completed in between).
    sh.cache.lock_policy().remove(page / PAGE);
    let v = Victim {
        region: r.clone(),
        idx,
        page,
        remote,
        snapshot: m.snapshot.take(),
        zero_base: std::mem::take(&mut m.zero_base),
        // A freed page's store copy is stale: every line goes.
        force: if m.zeroed { u64::MAX } else { m.force },
        shipped: 0,
    };
    Some((v, was))
}

/// Index ranges of maximal runs of adjacent pages of one region in
/// `victims`, which must be sorted by address: one syscall per run instead
/// of one per page (each write-protect or unmap flushes the TLB).
fn runs(victims: &[Victim]) -> Vec<std::ops::Range<usize>> {
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for (i, v) in victims.iter().enumerate() {
        match out.last_mut() {
            Some(r)
                if Arc::ptr_eq(&victims[r.end - 1].region, &v.region)
                    && victims[r.end - 1].page + PAGE == v.page =>
            {
                r.end = i + 1
            }
            _ => out.push(i..i + 1),
        }
    }
    out
}

/// Unmaps pages whose data is safe on the store and makes them Absent;
/// returns how many. A page pinned since it was claimed
/// (`Runtime::pin`) stays, Clean: a read touching it found it
/// still mapped and took no fault, and the kernel's copy from it would
/// fail once it is gone. (One pinned between this check and the unmap is
/// left to the caller's retry on `EFAULT`.)
fn drop_pages(sh: &Shared, victims: Vec<Victim>) -> u64 {
    let (kept, mut victims): (Vec<Victim>, Vec<Victim>) = victims
        .into_iter()
        .partition(|v| v.region.pages[v.idx].lock().pins > 0);
    for v in kept {
        sh.m.pages_pinned_passed.inc();
        settle_clean(sh, v);
    }
    victims.sort_by_key(|v| v.page);
    let t = Instant::now();
    for r in runs(&victims) {
        let start = victims[r.start].page;
        let len = (r.len() as u64 * PAGE) as usize;
        // SAFETY: the pages belong to a live mapping (the victims hold its
        // Arc) and are write-protected, so no write is lost by discarding them.
        let rc = unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_DONTNEED) };
        if rc != 0 {
            sh.report(format!(
                "unmapping {start:#x}+{len}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    sh.m.st_unmap.since(t);
    // Snapshots go back to the pool in one go: a fault handler may be
    // waiting on the pool's lock for its next buffer.
    let spare: Vec<Buf> = victims
        .iter_mut()
        .filter_map(|v| v.snapshot.take())
        .collect();
    sh.cache.put_bufs(spare);
    let dropped = victims.len() as u64;
    for v in victims {
        let mut m = v.region.pages[v.idx].lock();
        m.state = State::Absent;
        sh.cache.put_buf(m.snapshot.take());
        m.force = 0;
        m.zeroed &= v.shipped == 0;
        let waiters = sh.take_waiters(&mut m, v.page);
        drop(m);
        sh.cache.release_page();
        if let Some(since) = waiters {
            // They retry, miss, and fetch the page back from the store.
            let _ = sh.uffd.wake(v.page, PAGE);
            sh.woke(since);
        }
    }
    dropped
}

/// Write-back of a kept (synced) page succeeded.
fn finish_kept(sh: &Shared, v: Victim) {
    if settle_clean(sh, v) {
        sh.m.pages_synced.inc();
    }
}

/// A page identical to the store stays resident, Clean (false if its
/// region was dropped meanwhile, and with it the page's slot).
fn settle_clean(sh: &Shared, mut v: Victim) -> bool {
    sh.cache.put_buf(v.snapshot.take());
    let mut m = v.region.pages[v.idx].lock();
    m.force = 0;
    m.zeroed &= v.shipped == 0;
    let waiters = sh.take_waiters(&mut m, v.page);
    if v.region.dead.load(Ordering::SeqCst) {
        // Its region was dropped meanwhile: the slot is ours to release.
        m.state = State::Absent;
        drop(m);
        sh.cache.release_page();
        return false;
    }
    // Still write-protected, now identical to the store: Clean.
    m.state = State::Clean;
    sh.cache.reinsert(v.page / PAGE, sh.now());
    drop(m);
    if let Some(since) = waiters {
        let _ = sh.uffd.wake(v.page, PAGE);
        sh.woke(since);
    }
    true
}

/// Write-back failed for good: the page stays resident and dirty with its
/// snapshot, and the lines that may be half-applied are forced next time.
fn revert(sh: &Shared, v: Victim, keep: bool) {
    if !keep {
        sh.cache.in_flight(1, false);
    }
    sh.m.writeback_kept.inc();
    let mut m = v.region.pages[v.idx].lock();
    if v.region.dead.load(Ordering::SeqCst) {
        m.state = State::Absent;
        sh.cache.put_buf(m.snapshot.take());
        sh.take_waiters(&mut m, v.page);
        drop(m);
        sh.cache.release_page();
        return;
    }
    m.state = State::Dirty;
    m.snapshot = v.snapshot;
    // Lines of a half-applied batch are forced; the rest are still zero there.
    m.zero_base = v.zero_base;
    m.force |= v.shipped;
    let waiters = sh.take_waiters(&mut m, v.page);
    sh.cache.reinsert(v.page / PAGE, sh.now());
    // Writable again; this also wakes writers that waited on the eviction.
    if let Err(e) = sh.uffd.writeprotect(v.page, PAGE, false) {
        sh.report(format!(
            "unprotecting {:#x} after failed write-back: {e}",
            v.page
        ));
    }
    if let Some(since) = waiters {
        sh.woke(since);
    }
}

/// Appends the page's dirty lines to the segment: those that differ from
/// the snapshot (line mode), or all 64 (page mode: the same log carries
/// whole pages, so the two modes differ only in tracking granularity; a
/// page over zeros goes whole once any line of it is not zero).
/// A page with lines to ship and no remote memory yet is backed here; if
/// none can be had it goes back to Dirty (reverted), and the error is
/// returned.
fn diff_into(sh: &Shared, mut v: Victim, seg: &mut Segment) -> Result<(), RuntimeError> {
    let t = Instant::now();
    let whole = sh.cfg.dirty == DirtyMode::Page;
    // SAFETY: the page is mapped (Busy pages are unmapped only by their
    // owner, us) and write-protected, so nothing writes it.
    let data = unsafe { std::slice::from_raw_parts(v.page as *const u8, PAGE as usize) };
    let mut mask = 0u64;
    for (i, cur) in data.chunks_exact(LINE).enumerate() {
        let changed = (whole && !v.zero_base)
            || v.force >> i & 1 == 1
            || match &v.snapshot {
                Some(s) => s[i * LINE..(i + 1) * LINE] != *cur,
                None if v.zero_base => cur.iter().any(|&b| b != 0),
                // No diff base: every line may be dirty.
                None => true,
            };
        mask |= (changed as u64) << i;
    }
    if v.snapshot.is_some() && !whole {
        sh.cache.observe_diff(mask.count_ones());
    }
    if whole && mask != 0 {
        mask = u64::MAX;
    }
    if mask != 0 {
        let remote = match v.remote {
            Some(r) => r,
            None => match v.region.remote_or_back(v.idx, &sh.rm) {
                Ok(r) => r,
                Err(e) => {
                    if !sh.cache.store_refusing() {
                        sh.report(format!(
                            "backing page {:#x} with remote memory: {e}; kept resident, \
                             and the local limit is soft until the store takes write-backs again",
                            v.page
                        ));
                    }
                    let keep = seg.keep;
                    revert(sh, v, keep);
                    sh.m.st_diff.since(t);
                    return Err(e);
                }
            },
        };
        // From the first write-back attempt on (even a failed, half-applied
        // one) the store may hold this page's data. A page whose lines all
        // still equal the zeros of a fresh slab (faulted around, never
        // written) stays unstored: its next touch is filled locally.
        v.region.pages[v.idx].lock().stored = true;
        for i in (0..LINES_PER_PAGE).filter(|i| mask >> i & 1 == 1) {
            let mut line = [0u8; 64];
            line.copy_from_slice(&data[i * LINE..(i + 1) * LINE]);
            seg.lines.push((remote + (i * LINE) as u64, line));
        }
    }
    v.shipped = mask;
    seg.pages.push(v);
    sh.m.st_diff.since(t);
    Ok(())
}

fn send_once(sh: &Shared, seg: &Segment) -> Result<(), StoreError> {
    if seg.lines.is_empty() {
        Ok(())
    } else {
        sh.store.write_lines(&seg.lines)
    }
}

/// Ships a segment until acknowledged (retrying), then completes or reverts
/// its pages. Returns the pages kept dirty and the last error, if any.
fn ship(sh: &Shared, seg: &mut Segment) -> Result<(), (usize, StoreError)> {
    let t = Instant::now();
    let mut result = Ok(());
    for attempt in 0..sh.cfg.store_attempts {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(attempt as u64));
        }
        result = send_once(sh, seg);
        match &result {
            Ok(()) => break,
            // The memory is being given back: nothing to retry or report.
            Err(_) if sh.exiting.load(Ordering::SeqCst) => break,
            Err(e) => {
                sh.m.writeback_errors.inc();
                sh.report(format!(
                    "write-back of {} pages failed (attempt {} of {}): {e}",
                    seg.pages.len(),
                    attempt + 1,
                    sh.cfg.store_attempts
                ));
            }
        }
    }
    sh.m.st_ship.since(t);
    let keep = seg.keep;
    let settled = match result {
        Ok(()) => {
            sh.m.log_batches.inc();
            sh.m.dirty_lines_shipped.add(seg.lines.len() as u64);
            sh.m.bytes_written_back.add((seg.lines.len() * LINE) as u64);
            seg.lines.clear();
            if keep {
                for v in seg.pages.drain(..) {
                    finish_kept(sh, v);
                }
            } else {
                let n = seg.pages.len() as u64;
                sh.cache.in_flight(n, false);
                let dropped = drop_pages(sh, seg.pages.drain(..).collect());
                sh.m.pages_evicted_dirty.add(dropped);
            }
            Ok(())
        }
        Err(e) => {
            let n = seg.pages.len();
            seg.lines.clear();
            for v in seg.pages.drain(..) {
                revert(sh, v, keep);
            }
            if e.is_lost() {
                // Kept resident, but the rest of this program's data on
                // that node is gone with it.
                sh.lost(format!("{n} dirty pages cannot be written back: {e}"));
            }
            Err((n, e))
        }
    };
    // Counted once the shipped pages have left the cache: a compressed
    // pool grows by less than the pages it took.
    sh.cache.set_store_bytes(sh.store.local_bytes());
    settled
}

/// Write-protects claimed dirty pages so racing writes wait for us; returns
/// those protected, sorted by address.
fn protect(sh: &Shared, mut victims: Vec<Victim>, keep: bool) -> Vec<Victim> {
    victims.sort_by_key(|v| v.page);
    let t = Instant::now();
    let mut failed = vec![false; victims.len()];
    for r in runs(&victims) {
        let start = victims[r.start].page;
        if let Err(e) = sh.uffd.writeprotect(start, r.len() as u64 * PAGE, true) {
            sh.report(format!("write-protecting {start:#x}: {e}"));
            failed[r].fill(true);
        }
    }
    sh.m.st_protect.since(t);
    let mut out = Vec::with_capacity(victims.len());
    for (v, bad) in victims.into_iter().zip(failed) {
        if bad {
            // Unprotected, a write could land after the diff: keep the page.
            revert(sh, v, keep);
        } else {
            out.push(v);
        }
    }
    out
}

/// Pages evicted between two [`release_freed_heap`] calls: an eighth of
/// the limit, at most 64 MiB. What the runtime's threads free stays
/// resident until then, charged to the program's local memory: with a
/// fixed 64 MiB, a 6 MiB limit ran through its memory ten times between
/// trims (bzip2 -9 there: 1,002 pages of room against 1,069 with this and
/// 64 KiB connection buffers).
fn trim_every(limit_pages: u64) -> u64 {
    (limit_pages / 8).clamp(64, 16 << 10)
}

/// How often the evictor recounts the pages the page tables take (a
/// mincore over each table: microseconds; the tables grow by 8 KiB per MiB
/// of far memory touched).
const TABLES_EVERY: Duration = Duration::from_millis(50);

/// Hands memory the runtime's threads freed back to the kernel. Fetch
/// buffers, snapshots and log segments churn through glibc's per-thread
/// arenas, which keep freed memory resident: without this the runtime's
/// footprint grew to about twice the local limit under steady eviction.
fn release_freed_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory; any thread may call it.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The evictor thread: waits until the cache passes the high watermark,
/// then evicts down to the low one, handing log segments to the shipper.
pub(crate) fn evictor(sh: Arc<Shared>, ship_tx: Sender<Segment>, free_rx: Receiver<Segment>) {
    let mut seg: Option<Segment> = None;
    let mut trimmed_at = 0u64;
    let mut tables_counted = Instant::now();
    // Pinned pages passed by since a page was last evicted.
    let mut pinned_streak = 0u64;
    loop {
        let evicted = sh.m.pages_evicted_clean.get() + sh.m.pages_evicted_dirty.get();
        if evicted - trimmed_at >= trim_every(sh.cache.limit()) {
            trimmed_at = evicted;
            release_freed_heap();
        }
        if tables_counted.elapsed() >= TABLES_EVERY {
            tables_counted = Instant::now();
            sh.count_table_pages();
        }
        sh.cache.measure_process();
        sh.cache.wait_for_work(&sh.shutdown);
        if sh.is_shutdown() {
            break;
        }
        sh.cache.top_up_for_handlers();
        let kept_before = sh.m.writeback_kept.get();
        loop {
            // Throttled inside: a long run of rounds still sees the
            // process's memory grow.
            sh.cache.measure_process();
            let blocks = sh.cache.victims(sh.cfg.evict_batch, sh.now());
            // The policy has nothing left but pages on probation: their
            // probation ends now.
            let all = blocks.is_empty()
                && sh.park.as_ref().is_some_and(|p| p.parked() > 0)
                && sh.cache.wants_room();
            if blocks.is_empty() && !all {
                break;
            }
            let pinned_before = sh.m.pages_pinned_passed.get();
            let claimed = evict_round(&sh, blocks, all, &mut seg, &ship_tx, &free_rx);
            if claimed > 0 {
                pinned_streak = 0;
            } else {
                pinned_streak += sh.m.pages_pinned_passed.get() - pinned_before;
            }
            if pinned_streak > 0 && pinned_streak >= sh.cache.resident() {
                // The policy offered nothing but pinned pages, every
                // resident one's worth: faults have slots for them
                // (`Cache::try_reserve`), so back off rather than spin
                // until a call ends.
                pinned_streak = 0;
                std::thread::sleep(Duration::from_millis(1));
                break;
            }
            // Ship what the round produced now rather than wait for a full
            // segment: fillers may be waiting on these pages' slots.
            if let Some(s) = seg.take() {
                if s.pages.is_empty() {
                    seg = Some(s);
                } else if let Err(e) = ship_tx.send(s) {
                    ship_inline(&sh, e.into_inner());
                }
            }
            if sh.m.writeback_kept.get() != kept_before {
                // The store is refusing: pages went back to Dirty. Let the
                // program past the limit (waiting would hang it), and back
                // off instead of cycling the same pages through failing writes.
                sh.cache.set_store_refusing(true);
                std::thread::sleep(Duration::from_millis(10));
                break;
            }
            sh.cache.set_store_refusing(false);
        }
    }
    if let Some(s) = seg.filter(|s| !s.pages.is_empty())
        && let Err(e) = ship_tx.send(s)
    {
        ship_inline(&sh, e.into_inner());
    }
}

/// Fallback when the shipper is gone (shutdown): ship on this thread.
fn ship_inline(sh: &Shared, mut seg: Segment) {
    let _ = ship(sh, &mut seg);
}

/// Probation ([`crate::park`]): parks this round's victims and returns
/// the blocks to evict instead, those parked longest past the target
/// (every parked one with `all`: the policy has no victim left). A clean
/// one leaves here; a dirty one comes back into sight (Dirty) for the
/// write-back to take like any other. Victims that cannot be parked are
/// evicted at once.
fn probation(sh: &Shared, park: &Parking, blocks: Vec<u64>, all: bool) -> Vec<u64> {
    let mut out = Vec::new();
    for b in blocks {
        let addr = b * PAGE;
        let Some(r) = sh.lookup(addr) else { continue };
        let mut m = r.pages[r.page_index(addr)].lock();
        // A pinned page goes on to `claim`, which passes it by.
        if matches!(m.state, State::Clean | State::Dirty)
            && m.pins == 0
            && park.park(&sh.uffd, addr, &mut m)
        {
            sh.m.pages_parked.inc();
        } else {
            out.push(b);
        }
    }
    let mut discarded = 0;
    for (b, parking) in park.overflow(all) {
        let addr = b * PAGE;
        let Some(r) = sh.lookup(addr) else { continue };
        let mut m = r.pages[r.page_index(addr)].lock();
        if !Parking::still_parked(&m, parking) {
            // Touched and unparked since: in use (if parked again, its
            // probation starts over).
            continue;
        }
        if m.parked_dirty {
            match park.unpark(&sh.uffd, addr, &mut m) {
                Ok(()) => out.push(b),
                Err(e) => {
                    park.requeue(b, parking);
                    sh.report(format!("unparking {addr:#x} for write-back: {e}"));
                }
            }
        } else {
            m.streak.evicted(Seen::Clean);
            park.discard(&mut m);
            drop(m);
            sh.cache.release_page();
            discarded += 1;
        }
    }
    sh.m.pages_evicted_clean.add(discarded);
    out
}

/// A parked dirty page of `r` back in sight (Dirty), for a sync to write
/// back; a page in any other state is left as it is.
fn unpark_for_sync(sh: &Shared, r: &RegionInner, idx: usize) -> Result<(), RuntimeError> {
    let mut m = r.pages[idx].lock();
    match &sh.park {
        Some(park) if m.state == State::Parked && m.parked_dirty => park
            .unpark(&sh.uffd, r.page_addr(idx), &mut m)
            .map_err(RuntimeError::Uffd),
        _ => Ok(()),
    }
}

/// Evicts `blocks` (those still resident and not pinned); returns how
/// many it took.
fn evict_round(
    sh: &Shared,
    blocks: Vec<u64>,
    all: bool,
    seg: &mut Option<Segment>,
    ship_tx: &Sender<Segment>,
    free_rx: &Receiver<Segment>,
) -> usize {
    let blocks = match &sh.park {
        Some(park) => probation(sh, park, blocks, all),
        None => blocks,
    };
    let mut dirty = Vec::new();
    let mut clean = Vec::new();
    for b in blocks {
        let addr = b * PAGE;
        // A block of a dropped region, or one no longer resident: skip.
        let Some(r) = sh.lookup(addr) else { continue };
        let idx = ((addr - r.start) / PAGE) as usize;
        match claim(sh, &r, idx, false) {
            // Protected and identical to the store: nothing to write.
            Some((v, State::Clean)) => clean.push(v),
            Some((v, _)) => dirty.push(v),
            None => {}
        }
    }
    let claimed = clean.len() + dirty.len();
    let dropped = drop_pages(sh, clean);
    sh.m.pages_evicted_clean.add(dropped);
    sh.cache.in_flight(dirty.len() as u64, true);
    let dirty = protect(sh, dirty, false);
    for v in dirty {
        if seg.as_ref().is_some_and(|s| !s.has_room())
            && let Some(full) = seg.take()
            && let Err(e) = ship_tx.send(full)
        {
            ship_inline(sh, e.into_inner());
        }
        if seg.is_none() {
            // Ring back-pressure: waits while every segment awaits its ack.
            *seg = Some(
                free_rx
                    .recv()
                    .unwrap_or_else(|_| Segment::new(sh.cfg.log_lines, false)),
            );
        }
        if let Some(s) = seg.as_mut() {
            // A page that cannot be backed is reverted and counted there.
            let _ = diff_into(sh, v, s);
        }
    }
    claimed
}

/// The shipper thread: sends segments in order, completes their pages on
/// acknowledgement, and returns the emptied segments to the ring.
pub(crate) fn shipper(sh: Arc<Shared>, rx: Receiver<Segment>, free_tx: Sender<Segment>) {
    for mut seg in rx {
        let _ = ship(&sh, &mut seg);
        let _ = free_tx.send(seg);
    }
}

/// Writes back every dirty page of a region on the calling thread.
pub(crate) fn sync_region(sh: &Shared, r: &Arc<RegionInner>) -> Result<(), RuntimeError> {
    let mut failed = 0usize;
    let mut last: Option<StoreError> = None;
    let per_segment = (sh.cfg.log_lines / LINES_PER_PAGE).max(1);
    let mut batch = Vec::with_capacity(per_segment);
    // Protects, diffs and ships up to one segment's worth of claimed pages.
    let write_batch = |batch: Vec<Victim>, failed: &mut usize, last: &mut Option<StoreError>| {
        let n = batch.len();
        let batch = protect(sh, batch, true);
        *failed += n - batch.len();
        let mut seg = Segment::new(sh.cfg.log_lines, true);
        for v in batch {
            if let Err(e) = diff_into(sh, v, &mut seg) {
                *failed += 1;
                *last = Some(StoreError::Other(e.to_string().into()));
            }
        }
        if let Err((n, e)) = ship(sh, &mut seg) {
            *failed += n;
            *last = Some(e);
        }
    };
    for idx in r.pages.touched() {
        if let Err(e) = unpark_for_sync(sh, r, idx) {
            failed += 1;
            last = Some(StoreError::Other(e.to_string().into()));
            continue;
        }
        // A page mid-fetch may be about to turn dirty (a write fault is
        // installed writable before its state is set), and one mid-eviction
        // is not yet on the store: wait for both to settle.
        let v = loop {
            if let Some((v, _)) = claim(sh, r, idx, true) {
                break Some(v);
            }
            if !matches!(r.pages[idx].lock().state, State::Fetching | State::Busy) {
                break None;
            }
            std::thread::sleep(Duration::from_micros(20));
        };
        let Some(v) = v else { continue };
        batch.push(v);
        if batch.len() == per_segment {
            write_batch(std::mem::take(&mut batch), &mut failed, &mut last);
        }
    }
    if !batch.is_empty() {
        write_batch(batch, &mut failed, &mut last);
    }
    match last {
        None if failed == 0 => Ok(()),
        source => Err(RuntimeError::Writeback {
            pages: failed,
            source: source.unwrap_or(StoreError::Refused),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::trim_every;

    #[test]
    fn the_heap_is_trimmed_every_eighth_of_the_limit_within_bounds() {
        assert_eq!(trim_every(1536), 192, "6 MiB: every 768 KiB evicted");
        assert_eq!(trim_every(100), 64, "a tiny limit: not every batch");
        assert_eq!(trim_every(1 << 20), 16 << 10, "4 GiB: every 64 MiB");
    }
}
