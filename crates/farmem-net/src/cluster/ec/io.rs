//! Reads and writes of erasure-coded stripes (see the parent module).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use farmem_wire::{LINE_LEN, Msg};

use super::{PAGE, Stripe};
use crate::cluster::{Cluster, read_reply_into};
use crate::{NetError, Ticket};

/// Most pages one run (one request per shard) covers.
const RUN_PAGES: usize = 64;

impl Cluster {
    /// Shards of `s` to read from (or, `writing`, to write to, including
    /// one being rebuilt), best first (live and healthy, data before
    /// parity; then those of nodes in a run of failures), and the error of
    /// the first shard whose node is gone.
    pub(super) fn shard_order(&self, s: &Stripe, writing: bool) -> (Vec<usize>, Option<NetError>) {
        let nodes = self.nodes.read();
        let (mut live, mut failing, mut gone) = (Vec::new(), Vec::new(), None);
        for (i, shard) in s.shards.iter().enumerate() {
            if !writing && s.filling == Some(i) {
                continue;
            }
            match nodes.get(&shard.node).map(|n| (n.check_lost(), n)) {
                Some((Ok(()), n)) if n.failing.load(Ordering::Relaxed) => failing.push(i),
                Some((Ok(()), _)) => live.push(i),
                Some((Err(e), _)) => {
                    gone.get_or_insert(e);
                }
                None => {
                    gone.get_or_insert(NetError::Routing(format!(
                        "no connection in slot {}",
                        shard.node
                    )));
                }
            }
        }
        live.append(&mut failing);
        (live, gone)
    }

    /// Reads shard `i`'s chunks of pages [first, first+n) of `s`, or says
    /// why not.
    fn submit_shard_read(&self, s: &Stripe, i: usize, first: u64, n: usize) -> ShardRead {
        let shard = s.shards[i];
        let c = s.chunk_len(i);
        let read = Msg::Read {
            addr: shard.base + first * c as u64,
            len: (n * c) as u32,
        };
        (i, shard.node, self.submit_to(shard.node, &read))
    }

    /// The K data chunks of pages [first, first+n) of `s`, each shard's
    /// run of them as one buffer (`None` for shards not read), fetched in
    /// parallel; parity shards take the place of those that fail.
    fn fetch_chunks(
        &self,
        s: &Stripe,
        first: u64,
        n: usize,
    ) -> Result<Vec<Option<Vec<u8>>>, NetError> {
        let (order, gone) = self.shard_order(s, false);
        let mut got: Vec<Option<Vec<u8>>> = vec![None; s.shards.len()];
        let (mut have, mut next, mut err) = (0, 0, gone);
        while have < s.k {
            let batch: Vec<usize> = order.iter().skip(next).take(s.k - have).copied().collect();
            if batch.is_empty() {
                let e = err.unwrap_or_else(|| {
                    NetError::Routing(format!("no shard of the stripe at {:#x} to read", s.base))
                });
                return Err(self.with_held(e));
            }
            next += batch.len();
            let sent: Vec<ShardRead> = batch
                .into_iter()
                .map(|i| self.submit_shard_read(s, i, first, n))
                .collect();
            for (i, node, ticket) in sent {
                let mut buf = vec![0u8; n * s.chunk_len(i)];
                let read = self.settle(node, ticket.and_then(Ticket::wait));
                match read.and_then(|r| read_reply_into(&r, &mut buf)) {
                    Ok(()) => {
                        got[i] = Some(buf);
                        have += 1;
                    }
                    // A transient error wins over a final one: the caller
                    // may retry while the node could still come back.
                    Err(e) if err.as_ref().is_none_or(|x| !x.is_transient()) => err = Some(e),
                    Err(_) => {}
                }
            }
        }
        Ok(got)
    }

    /// Pages [first, first+n) of `s`, decoded; the caller holds their locks.
    pub(super) fn read_pages(&self, s: &Stripe, first: u64, n: usize) -> Result<Vec<u8>, NetError> {
        let got = self.fetch_chunks(s, first, n)?;
        // Parity needs chunks of one size: Reed-Solomon stripes have them.
        let c = s.chunk_len(0);
        let mut out = vec![0u8; n * PAGE];
        let all_data = got[..s.k].iter().all(Option::is_some);
        for p in 0..n {
            let page = &mut out[p * PAGE..(p + 1) * PAGE];
            let chunk = |v: &Vec<u8>| v[p * c..(p + 1) * c].to_vec();
            let restored = if all_data {
                BTreeMap::new()
            } else {
                let originals = (0..s.k).filter_map(|i| got[i].as_ref().map(|v| (i, chunk(v))));
                let recovery =
                    (s.k..s.k + s.m).filter_map(|i| got[i].as_ref().map(|v| (i - s.k, chunk(v))));
                reed_solomon_simd::decode(s.k, s.m, originals, recovery)
                    .map_err(|e| coding_error(s, e))?
            };
            for (i, got) in got.iter().enumerate().take(s.k) {
                let (start, c) = (s.chunk_start(i), s.chunk_len(i));
                let dst = &mut page[start..start + c];
                match (got, restored.get(&i)) {
                    (Some(v), _) => dst.copy_from_slice(&v[p * c..(p + 1) * c]),
                    (None, Some(r)) if r.len() == c => dst.copy_from_slice(r),
                    _ => {
                        return Err(NetError::Routing(format!(
                            "chunk {i} of a page of the stripe at {:#x} was not restored",
                            s.base
                        )));
                    }
                }
            }
        }
        Ok(out)
    }

    /// Encodes pages [first, first+n) of `s` from `pages` and writes every
    /// chunk to its live shard; succeeds once every live shard and at least
    /// K acknowledged. The caller holds the pages' locks.
    fn write_pages(&self, s: &Stripe, first: u64, pages: &[u8]) -> Result<(), NetError> {
        let n = pages.len() / PAGE;
        let mut shards: Vec<Vec<u8>> = (0..s.shards.len())
            .map(|i| vec![0u8; n * s.chunk_len(i)])
            .collect();
        for (p, page) in pages.chunks_exact(PAGE).enumerate() {
            for (i, shard) in shards.iter_mut().enumerate().take(s.k) {
                let (start, c) = (s.chunk_start(i), s.chunk_len(i));
                shard[p * c..(p + 1) * c].copy_from_slice(&page[start..start + c]);
            }
            if s.m > 0 {
                let c = s.chunk_len(0);
                let parity = reed_solomon_simd::encode(s.k, s.m, page.chunks(c))
                    .map_err(|e| coding_error(s, e))?;
                for (shard, chunk) in shards[s.k..].iter_mut().zip(&parity) {
                    shard[p * c..(p + 1) * c].copy_from_slice(chunk);
                }
            }
        }
        let (live, mut gone) = self.shard_order(s, true);
        let sent: Vec<(u32, Result<Ticket, NetError>)> = live
            .iter()
            .map(|&i| {
                let shard = s.shards[i];
                let write = Msg::Write {
                    addr: shard.base + first * s.chunk_len(i) as u64,
                    data: &shards[i],
                };
                (shard.node, self.submit_to(shard.node, &write))
            })
            .collect();
        let mut acked = 0;
        let mut failed = None;
        for (node, ticket) in sent {
            let done = self.settle(node, ticket.and_then(Ticket::wait));
            match done.and_then(|r| r.done("write")) {
                Ok(()) => acked += 1,
                Err(e @ (NetError::NodeDown { .. } | NetError::NodeLost { .. })) => {
                    gone.get_or_insert(e);
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None if acked >= s.k => Ok(()),
            None => Err(self.with_held(gone.unwrap_or_else(|| {
                NetError::Routing(format!("no shard of the stripe at {:#x} to write", s.base))
            }))),
        }
    }

    /// Reads logical `buf.len()` bytes at `addr`, a run of pages at a time.
    pub(in crate::cluster) fn ec_read(&self, addr: u64, buf: &mut [u8]) -> Result<(), NetError> {
        let mut done = 0;
        while done < buf.len() {
            let at = addr.saturating_add(done as u64);
            let s = self.stripe_at(at)?;
            let (first, n, skip, take) = self.run_of(&s, at, buf.len() - done);
            let _locks = self.stripes.lock_pages(&s, first, n);
            let s = self.stripe_at(at)?;
            let pages = self.read_pages(&s, first, n)?;
            buf[done..done + take].copy_from_slice(&pages[skip..skip + take]);
            done += take;
        }
        Ok(())
    }

    /// Writes `data` at logical `addr`, a run of pages at a time; pages
    /// written only in part are read first.
    pub(in crate::cluster) fn ec_write(&self, addr: u64, data: &[u8]) -> Result<(), NetError> {
        let mut done = 0;
        while done < data.len() {
            let at = addr.saturating_add(done as u64);
            let s = self.stripe_at(at)?;
            let (first, n, skip, take) = self.run_of(&s, at, data.len() - done);
            let _locks = self.stripes.lock_pages(&s, first, n);
            let s = self.stripe_at(at)?;
            let src = &data[done..done + take];
            if skip == 0 && take == n * PAGE {
                self.write_pages(&s, first, src)?;
            } else {
                let mut pages = self.read_pages(&s, first, n)?;
                pages[skip..skip + take].copy_from_slice(src);
                self.write_pages(&s, first, &pages)?;
            }
            done += take;
        }
        Ok(())
    }

    /// Applies cache lines at logical addresses: pages whose every line is
    /// here are assembled and written, runs of consecutive ones as one
    /// request per shard; any other page is read, patched and written
    /// again. A line given twice is applied as its last.
    pub(in crate::cluster) fn ec_write_lines(
        &self,
        lines: &[(u64, [u8; LINE_LEN])],
    ) -> Result<(), NetError> {
        let mut pages: BTreeMap<u64, Vec<&Line>> = BTreeMap::new();
        for line in lines {
            if line.0.is_multiple_of(LINE_LEN as u64) {
                pages.entry(line.0 / PAGE as u64).or_default().push(line);
            } else {
                self.ec_write(line.0, &line.1)?;
            }
        }
        let mut run: Vec<PageLines> = Vec::new();
        for (page, lines) in pages {
            let mut covered = [false; PAGE / LINE_LEN];
            for (addr, _) in &lines {
                covered[(addr % PAGE as u64) as usize / LINE_LEN] = true;
            }
            if !covered.iter().all(|&c| c) {
                self.patch_page(page, &lines)?;
                continue;
            }
            if run.last().is_some_and(|(last, _)| *last + 1 != page) {
                self.write_whole_pages(&std::mem::take(&mut run))?;
            }
            run.push((page, lines));
        }
        self.write_whole_pages(&run)
    }

    /// Writes pages every line of which is given, consecutive, a stripe's
    /// run at a time.
    fn write_whole_pages(&self, pages: &[PageLines]) -> Result<(), NetError> {
        let mut done = 0;
        while done < pages.len() {
            let at = pages[done].0 * PAGE as u64;
            let s = self.stripe_at(at)?;
            let first = (at - s.base) / PAGE as u64;
            let in_stripe = ((s.len / PAGE as u64) - first) as usize;
            let n = (pages.len() - done).min(self.run_pages(&s)).min(in_stripe);
            let _locks = self.stripes.lock_pages(&s, first, n);
            let s = self.stripe_at(at)?;
            let mut buf = vec![0u8; n * PAGE];
            for (i, (_, lines)) in pages[done..done + n].iter().enumerate() {
                for (addr, line) in lines {
                    let off = i * PAGE + (addr % PAGE as u64) as usize;
                    buf[off..off + LINE_LEN].copy_from_slice(line);
                }
            }
            self.write_pages(&s, first, &buf)?;
            done += n;
        }
        Ok(())
    }

    /// Reads `page`, applies `lines` to it and writes it again.
    fn patch_page(&self, page: u64, lines: &[&Line]) -> Result<(), NetError> {
        let at = page * PAGE as u64;
        let s = self.stripe_at(at)?;
        let first = (at - s.base) / PAGE as u64;
        let _lock = self.stripes.lock_pages(&s, first, 1);
        let s = self.stripe_at(at)?;
        let mut buf = self.read_pages(&s, first, 1)?;
        for (addr, line) in lines {
            let off = (addr % PAGE as u64) as usize;
            buf[off..off + LINE_LEN].copy_from_slice(line);
        }
        self.write_pages(&s, first, &buf)
    }
}

impl Cluster {
    /// Reads one logical page into `out` from its K data shards through
    /// idle page readers, without allocating or parking on a lock (see
    /// [`Cluster::read_without_allocating`]): `None` unless every data
    /// shard's node is healthy with a reader free and the page unlocked;
    /// anything needing parity takes the ordinary path.
    pub(in crate::cluster) fn ec_read_without_allocating(
        &self,
        addr: u64,
        out: &mut [u8],
    ) -> Option<Result<(), crate::PageReadError>> {
        let map = self.stripes.map.try_read()?;
        let (_, s) = map.range(..=addr).next_back()?;
        let rel = addr - s.base;
        if out.len() != PAGE || !rel.is_multiple_of(PAGE as u64) || rel >= s.len {
            return None;
        }
        let first = rel / PAGE as u64;
        if s.filling.is_some_and(|i| i < s.k) {
            return None;
        }
        let slot = ((s.base / PAGE as u64 + first) % self.stripes.locks.len() as u64) as usize;
        let _lock = self.stripes.locks[slot].try_lock()?;
        let nodes = self.nodes.try_read()?;
        for (i, shard) in s.shards[..s.k].iter().enumerate() {
            let (start, c) = (s.chunk_start(i), s.chunk_len(i));
            let dst = &mut out[start..start + c];
            let n = nodes.get(&shard.node)?;
            if n.lost.load(Ordering::Relaxed)
                || n.is_down.load(Ordering::Relaxed)
                || n.failing.load(Ordering::Relaxed)
            {
                return None;
            }
            let readers = n.readers.try_read()?;
            let mut reader = readers
                .iter()
                .filter_map(|r| r.try_lock())
                .find(|r| r.is_alive())?;
            if let Err(e) = reader.read(shard.base + first * c as u64, dst) {
                return Some(Err(e));
            }
        }
        Some(Ok(()))
    }
}

/// A cache line to write: its logical address and bytes.
type Line = (u64, [u8; LINE_LEN]);

/// A page's number and the lines given for it.
type PageLines<'a> = (u64, Vec<&'a Line>);

/// A shard read in flight: shard index, node, ticket.
type ShardRead = (usize, u32, Result<Ticket, NetError>);

impl Cluster {
    /// The run of pages of `s` from logical `at` (inside it) for up to
    /// `left` bytes, each shard's part of it one request: (first page,
    /// pages, offset of `at` in the first, bytes of it to use).
    pub(super) fn run_of(&self, s: &Stripe, at: u64, left: usize) -> (u64, usize, usize, usize) {
        let rel = at - s.base;
        let first = rel / PAGE as u64;
        let skip = (rel % PAGE as u64) as usize;
        let in_stripe = usize::try_from(s.len - rel).unwrap_or(usize::MAX);
        let take = left.min(in_stripe).min(self.run_pages(s) * PAGE - skip);
        (first, (skip + take).div_ceil(PAGE), skip, take)
    }
}

impl Cluster {
    /// Most pages of `s` one request per shard covers.
    fn run_pages(&self, s: &Stripe) -> usize {
        RUN_PAGES.min(self.max_piece() / s.widest()).max(1)
    }
}

pub(super) fn coding_error(s: &Stripe, e: reed_solomon_simd::Error) -> NetError {
    NetError::Routing(format!(
        "rs:{}+{} coding of the stripe at {:#x} failed: {e}",
        s.k, s.m, s.base
    ))
}
