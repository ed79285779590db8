//! What schemes act on: the shared hardware of one compute node and its
//! memory nodes, with the moves every scheme is made of (read from or write
//! to a memory node over its link, install or evict a local page).

use farmem_core::PAGE_SIZE;
use farmem_policy::cache::PolicyConfig;

use crate::Time;
use crate::components::{
    Caches, Dir, Link, LocalMemory, Memory, PageTable, build_link, build_memory,
};
use crate::config::Config;
use crate::stats::{Component, Stats};

/// Traffic and hit counters every scheme shares.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counters {
    pub llc_misses: u64,
    /// LLC misses served from local memory (pages already there or arriving).
    pub local_hits: u64,
    pub local_misses: u64,
    pub remote_bytes_read: u64,
    pub remote_bytes_written: u64,
    pub remote_reads: u64,
    pub remote_writes: u64,
}

/// Pages an install evicted, each with whether it was dirty: one at most
/// without watermarks, so that case allocates nothing.
#[derive(Debug, Default)]
pub struct Evicted {
    first: Option<(u32, bool)>,
    rest: Vec<(u32, bool)>,
}

impl Evicted {
    /// How many pages were evicted.
    pub fn len(&self) -> usize {
        self.first.is_some() as usize + self.rest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    /// Adds one evicted page.
    pub fn push(&mut self, v: (u32, bool)) {
        if self.first.is_none() {
            self.first = Some(v);
        } else {
            self.rest.push(v);
        }
    }
}

impl IntoIterator for Evicted {
    type Item = (u32, bool);
    type IntoIter =
        std::iter::Chain<std::option::IntoIter<(u32, bool)>, std::vec::IntoIter<(u32, bool)>>;

    fn into_iter(self) -> Self::IntoIter {
        self.first.into_iter().chain(self.rest)
    }
}

pub struct Machine {
    pub caches: Caches,
    pub local: LocalMemory,
    pub local_dram: Box<dyn Memory>,
    pub links: Vec<Box<dyn Link>>,
    pub nodes: Vec<Box<dyn Memory>>,
    pub pages: PageTable,
    pub counters: Counters,
    translation: bool,
    header: u64,
    policy: PolicyConfig,
}

impl Machine {
    /// `local_bytes` of local memory (schemes that use none get one page).
    pub fn new(cfg: &Config, local_bytes: u64) -> Self {
        let policy = cfg.local.policy;
        let nodes = cfg.remote.nodes as usize;
        Self {
            caches: Caches::new(cfg),
            local: LocalMemory::new(policy, cfg.local.watermarks, local_bytes),
            local_dram: build_memory(cfg.local.latency_ns, cfg.local.bw_gbps),
            links: (0..nodes).map(|_| build_link(cfg)).collect(),
            nodes: (0..nodes)
                .map(|_| build_memory(cfg.remote.latency_ns, cfg.remote.bw_gbps))
                .collect(),
            pages: PageTable::new(cfg),
            counters: Counters::default(),
            translation: cfg.remote.translation,
            header: cfg.link.header_bytes as u64,
            policy,
        }
    }

    /// Resizes local memory (before any access: the footprint is known late).
    pub fn resize_local(&mut self, bytes: u64) {
        self.local = LocalMemory::new(self.policy, self.local.watermarks, bytes);
    }

    /// Reads `bytes` from memory node `node` at `now`: a request up the
    /// link, translation and DRAM at the node, the data down the link.
    /// Returns when the data arrives at the compute node.
    #[inline]
    pub fn remote_read(&mut self, node: u16, now: Time, bytes: u64) -> Time {
        self.remote_read_encoded(node, now, bytes, bytes, 0.0)
    }

    /// Like [`Machine::remote_read`] for data encoded at the node (link
    /// compression): the node's DRAM reads `dram_bytes`, an encoder spends
    /// `encode_ns`, and `wire_bytes` go down the link. Byte counters count
    /// what crosses the link.
    #[inline]
    pub fn remote_read_encoded(
        &mut self,
        node: u16,
        now: Time,
        dram_bytes: u64,
        wire_bytes: u64,
        encode_ns: f64,
    ) -> Time {
        let n = node as usize;
        let at_node = self.links[n].send(Dir::Up, now, self.header);
        let ready = self.nodes[n].access(at_node, dram_bytes, self.translation) + encode_ns;
        self.counters.remote_bytes_read += wire_bytes;
        self.counters.remote_reads += 1;
        self.links[n].send(Dir::Down, ready, wire_bytes + self.header)
    }

    /// A dirty line leaves the LLC. With its page resident, inclusive local
    /// memory absorbs it (the page turns dirty); otherwise the page's memory
    /// node is returned and the scheme decides how the line travels.
    #[inline]
    pub fn absorb_dirty_line(&mut self, now: Time, line: u64) -> Option<u16> {
        let id = self.pages.id(line / crate::LINES_PER_PAGE);
        let p = &mut self.pages.pages[id as usize];
        if p.resident {
            p.dirty = true;
            self.local_dram.occupy(now, farmem_core::CACHE_LINE);
            None
        } else {
            Some(p.node)
        }
    }

    /// Writes `bytes` back to memory node `node` at `now`; returns when they
    /// are in its DRAM (nobody waits for it: writebacks leave the critical path).
    #[inline]
    pub fn remote_write(&mut self, node: u16, now: Time, bytes: u64) -> Time {
        self.remote_write_encoded(node, now, bytes, bytes)
    }

    /// Like [`Machine::remote_write`] for data encoded before the link:
    /// `wire_bytes` cross it, the node's DRAM writes `dram_bytes`.
    #[inline]
    pub fn remote_write_encoded(
        &mut self,
        node: u16,
        now: Time,
        dram_bytes: u64,
        wire_bytes: u64,
    ) -> Time {
        let n = node as usize;
        let at_node = self.links[n].send(Dir::Up, now, wire_bytes + self.header);
        self.counters.remote_bytes_written += wire_bytes;
        self.counters.remote_writes += 1;
        self.nodes[n].access(at_node, dram_bytes, self.translation)
    }

    /// If page `id` is in local memory, touches it and returns when its data
    /// is there (later than `now` while it is still arriving).
    #[inline]
    pub fn local_lookup(&mut self, id: u32, now: Time) -> Option<Time> {
        let p = &self.pages.pages[id as usize];
        if !p.resident {
            return None;
        }
        let ready = p.ready_at;
        self.local.policy.touch(id as u64, now as u64);
        Some(ready)
    }

    /// Makes page `id` resident, its data there at `ready`. Returns the
    /// pages evicted for it, each with whether it was dirty (its own dirty
    /// bit or dirty lines back-invalidated from the CPU caches): the one
    /// the policy pushed out, or with watermarks a round down to the low
    /// mark (the runtime's rule, [`farmem_policy::watermark`]).
    pub fn install_page(&mut self, id: u32, now: Time, ready: Time) -> Evicted {
        let mut out = match self.local.watermarks {
            Some(w) => {
                let resident = self.local.policy.len() as u64 + 1;
                let room = self.local.capacity_pages as u64;
                let n = if w.should_evict(resident, 0, room) {
                    w.to_evict(resident, 0, room)
                } else {
                    0
                };
                self.evict_pages(n, now)
            }
            None => Evicted::default(),
        };
        if let Some(v) = self.insert_page(id, now, ready) {
            out.push(self.evict_page(v));
        }
        out
    }

    /// Makes page `id` resident, its data there at `ready`, with no
    /// eviction round: the victim a full policy pushed out, if any (still
    /// resident; [`Machine::evict_page`] takes it out).
    pub fn insert_page(&mut self, id: u32, now: Time, ready: Time) -> Option<u32> {
        let p = &mut self.pages.pages[id as usize];
        p.resident = true;
        p.dirty = false;
        p.ready_at = ready;
        self.local
            .policy
            .insert(id as u64, now as u64)
            .map(|v| v as u32)
    }

    /// Evicts up to `n` pages in the policy's order.
    pub fn evict_pages(&mut self, n: u64, now: Time) -> Evicted {
        let mut out = Evicted::default();
        for _ in 0..n {
            match self.local.policy.evict(now as u64) {
                Some(v) => out.push(self.evict_page(v as u32)),
                None => break,
            }
        }
        out
    }

    /// Takes page `victim` out of local memory: whether it was dirty.
    pub fn evict_page(&mut self, victim: u32) -> (u32, bool) {
        let page = self.pages.pages[victim as usize].page;
        let lines_dirty = self.caches.invalidate_page(page) > 0;
        let v = &mut self.pages.pages[victim as usize];
        v.resident = false;
        let dirty = std::mem::replace(&mut v.dirty, false) || lines_dirty;
        self.local.evictions += 1;
        self.local.dirty_evictions += dirty as u64;
        (victim, dirty)
    }

    pub fn node_of(&self, id: u32) -> u16 {
        self.pages.pages[id as usize].node
    }

    pub fn report(&self, sim_time_ns: f64, out: &mut Stats) {
        for (c, (l1, l2)) in self.caches.l1.iter().zip(&self.caches.l2).enumerate() {
            l1.report(&format!("core{c}.l1d"), sim_time_ns, out);
            l2.report(&format!("core{c}.l2"), sim_time_ns, out);
        }
        self.caches.llc.report("llc", sim_time_ns, out);
        self.local.report("local", sim_time_ns, out);
        self.local_dram.report("local.dram", sim_time_ns, out);
        for (i, l) in self.links.iter().enumerate() {
            l.report(&format!("link{i}"), sim_time_ns, out);
        }
        for (i, n) in self.nodes.iter().enumerate() {
            n.report(&format!("node{i}.dram"), sim_time_ns, out);
        }
        let c = &self.counters;
        out.put("local", "hits", c.local_hits as f64);
        out.put("local", "misses", c.local_misses as f64);
        out.put("remote", "reads", c.remote_reads as f64);
        out.put("remote", "writes", c.remote_writes as f64);
        out.put("pages", "touched", self.pages.pages.len() as f64);
    }

    pub fn page_size(&self) -> u64 {
        PAGE_SIZE
    }
}
