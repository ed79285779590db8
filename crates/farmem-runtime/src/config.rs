//! Runtime configuration.

use serde::{Deserialize, Serialize};

use farmem_policy::cache::PolicyConfig;
use farmem_policy::diffbase::DiffBaseConfig;
use farmem_policy::readahead::ReadaheadConfig;
use farmem_policy::watermark::Watermarks;

use crate::error::RuntimeError;
use crate::page::MAX_FAULT_AROUND;

/// How dirty data is found and written back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DirtyMode {
    /// Kona: snapshot a page at its first write, diff at eviction, ship only
    /// the changed 64 B lines through the cache-line log.
    #[default]
    Line,
    /// Kona-VM baseline: write whole dirty pages (all 64 lines, through the
    /// same log, so only the tracking granularity differs).
    Page,
}

impl std::str::FromStr for DirtyMode {
    type Err = RuntimeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "line" => Ok(Self::Line),
            "page" => Ok(Self::Page),
            _ => Err(RuntimeError::Config(format!(
                "unknown dirty mode `{s}` (known: line, page)"
            ))),
        }
    }
}

impl std::fmt::Display for DirtyMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Line => "line",
            Self::Page => "page",
        })
    }
}

/// Which thread serves a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultPath {
    /// Handler threads read faults from the userfaultfd and resolve them
    /// while the faulting thread sleeps in the kernel: two thread wakeups
    /// per fault (handler, then the faulting thread). The default: a system
    /// call that reads or writes a far page not yet local waits for it.
    #[default]
    Thread,
    /// The kernel raises SIGBUS in the faulting thread (UFFD_FEATURE_SIGBUS)
    /// and its handler fetches and installs the page itself, with no
    /// allocation and no parking lock: no wakeup but the reply's. What it
    /// cannot do at once (every page reader busy, a read failing) it hands
    /// to a filler thread and retries. The process's SIGBUS handler is
    /// ours; a genuine SIGBUS is passed on to the one installed before.
    /// 2-7x faster where measured (crate README), but the kernel raises no
    /// signal for its own accesses: a system call that reads or writes a
    /// far page not yet local fails with EFAULT. For programs that do no
    /// I/O straight on far buffers.
    Signal,
}

impl std::str::FromStr for FaultPath {
    type Err = RuntimeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "thread" => Ok(Self::Thread),
            "signal" => Ok(Self::Signal),
            _ => Err(RuntimeError::Config(format!(
                "unknown fault path `{s}` (known: thread, signal)"
            ))),
        }
    }
}

impl std::fmt::Display for FaultPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Thread => "thread",
            Self::Signal => "signal",
        })
    }
}

/// What a remote fault fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    /// Its page, and the window its region's readahead grows along a
    /// stream (up to `fault_around`), in one demand read the fault waits
    /// for.
    #[default]
    Page,
    /// DaeMon's selection unit (seed 000 §4.2, farmem-policy
    /// `FaultSelector`): its page alone, the page and (at once, in the
    /// background, on the bulk lane) its 256 KiB cluster, or the cluster alone,
    /// by the demand and bulk lanes' occupancy and the locality the
    /// region's readahead sees. Thread fault path only.
    Daemon,
}

impl std::str::FromStr for Engine {
    type Err = RuntimeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "page" => Ok(Self::Page),
            "daemon" => Ok(Self::Daemon),
            _ => Err(RuntimeError::Config(format!(
                "unknown engine `{s}` (known: page, daemon)"
            ))),
        }
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Page => "page",
            Self::Daemon => "daemon",
        })
    }
}

/// How the fault monitor waits for the next userfaultfd message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WaitMode {
    /// Sleep in poll(2): no CPU while idle, a vCPU wake-up more per fault.
    Poll,
    /// Spin, yielding the CPU to any ready thread, for as long as recent
    /// gaps between faults say the next one comes soon, then sleep
    /// ([`farmem_policy::poll`], capped at `max_us`): a program faulting
    /// back to back finds its handler awake, an idle one costs nothing.
    Adaptive { max_us: u32 },
    /// Busy-read the non-blocking descriptor: burns a core, lowest latency.
    Spin,
    /// Spin for `spin_us` after the last fault, then fall back to poll.
    Hybrid { spin_us: u64 },
}

impl std::fmt::Display for WaitMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Poll => f.write_str("poll"),
            Self::Spin => f.write_str("spin"),
            Self::Adaptive { max_us } => write!(f, "adaptive:{max_us}"),
            Self::Hybrid { spin_us } => write!(f, "hybrid:{spin_us}"),
        }
    }
}

impl Default for WaitMode {
    fn default() -> Self {
        Self::Adaptive {
            max_us: farmem_policy::poll::PollConfig::default().max_us,
        }
    }
}

impl std::str::FromStr for WaitMode {
    type Err = RuntimeError;
    /// `poll`, `spin`, `adaptive` (`adaptive:<cap µs>`) or `hybrid:<spin µs>`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            RuntimeError::Config(format!(
                "unknown wait mode `{s}` (known: poll, spin, adaptive, adaptive:<µs>, hybrid:<µs>)"
            ))
        };
        match s {
            "poll" => Ok(Self::Poll),
            "spin" => Ok(Self::Spin),
            "adaptive" => Ok(Self::default()),
            _ => {
                if let Some(us) = s.strip_prefix("hybrid:") {
                    let spin_us = us.parse().map_err(|_| bad())?;
                    Ok(Self::Hybrid { spin_us })
                } else if let Some(us) = s.strip_prefix("adaptive:") {
                    let max_us = us.parse().map_err(|_| bad())?;
                    Ok(Self::Adaptive { max_us })
                } else {
                    Err(bad())
                }
            }
        }
    }
}

/// Everything `Runtime::new` needs besides the store.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Config {
    /// Local cache size in bytes: resident pages never exceed this.
    pub local_bytes: u64,
    /// Eviction starts when resident pages exceed this share of the
    /// cache's room ([`farmem_policy::watermark`]: the limit less what
    /// else is charged against it; default 0.99)...
    pub high_watermark: f64,
    /// ... and stops once they are at or below this share (default 0.97).
    pub low_watermark: f64,
    /// Victim selection; every [`farmem_policy::cache::ReplacementPolicy`]
    /// plugs in here. Default: `workingset` (Linux's active/inactive lists
    /// with its refault-distance test).
    pub policy: PolicyConfig,
    pub dirty: DirtyMode,
    pub fault_path: FaultPath,
    /// What a remote fault fetches ([`Engine`]).
    #[serde(default)]
    pub engine: Engine,
    /// `engine: daemon`: a fault's page and cluster are read as one when
    /// the cluster's read takes at most this many demand reads' time
    /// ([`farmem_policy::daemon::FaultConfig::whole_within`]; 0: never).
    #[serde(default = "default_whole_within")]
    pub whole_within: u32,
    /// Engine `page` on a link whose gate is partitioned between demand
    /// and bulk (`--delay-partition`, DaeMon's BP, seed 000 §4.1): a
    /// stored page's fault reads its page alone on the demand lane,
    /// installs it, then reads the fault-around window on the bulk lane,
    /// as BP sends a line and its page. False: the page and its window in
    /// one demand read, which under a partition squeezes whole windows
    /// into the demand share. On the signal path, where a filler reads a
    /// handler's window after its page anyway, the filler reads it on the
    /// bulk lane.
    #[serde(default)]
    pub demand_first: bool,
    /// How handler threads wait (fault path `thread`).
    pub wait: WaitMode,
    /// Threads reading the userfaultfd. Each resolves the faults it reads
    /// itself (no hand-off: one wakeup less per fault), so this many faults
    /// can be fetched at once.
    pub handlers: usize,
    /// Extra filler threads; when non-zero, handlers pass missing faults to
    /// them instead of fetching themselves.
    pub fillers: usize,
    /// Remote memory is requested from the slab source in batches of at least this.
    pub slab_batch: u64,
    /// Fresh slabs read as zeros until written (MemStore; memnodes that
    /// zero on allocation). Pages of new regions are then zero-filled
    /// locally on first touch instead of fetched, until first written back.
    pub zeroed_slabs: bool,
    /// Lines per cache-line log segment (one `write_lines` call each).
    pub log_lines: usize,
    /// Log segments in the ring: how many batches can await acknowledgement.
    pub log_segments: usize,
    /// Threads shipping log segments, each with one in flight (no more
    /// than `log_segments` run). A page is in at most one segment in
    /// flight (it is claimed until its segment lands), so their order does
    /// not matter. One by default; under the shim, the backend's choice
    /// (`Backend::shippers`): a second overlaps round
    /// trips to the memory nodes, but where the store compresses (`auto`'s
    /// pool) it is a second compressor on the program's CPUs. Measured on
    /// the 2-core VM, three interleaved pairs each, `farmem run` of the
    /// demo's PageRank: over 256 MiB at 64 MiB local, two took 3.53-4.53 s
    /// against 3.81-5.67 s, and `--backend remote` under a `rate:80MB/s`
    /// link 2.99-3.22 s against 3.51-3.78 s; over 1 GiB at 258 MiB local
    /// (the demo, `auto`), 20.1-26.0 s against 18.5-21.1 s.
    pub shippers: usize,
    /// Victims claimed per eviction round.
    pub evict_batch: usize,
    /// Attempts per store call before the operation is reported failed.
    pub store_attempts: u32,
    /// A far page that cannot be read for this long ends the program with
    /// the last error (as a lost copy does at once): a rack failing in a
    /// way the client cannot name (a node that answers but refuses) never
    /// becomes a hang. Well past the time a node is given up on (3 s) and
    /// a copy takes over. (Write-backs that fail keep their pages
    /// resident instead: the program runs on.)
    pub give_up_after: std::time::Duration,
    /// A write fault on a missing page installs it writable (and dirty)
    /// at once. Off: it is installed write-protected and the write takes a
    /// second, write-protect fault to mark it dirty, as Kona-VM does (seed
    /// 001 §5.1: "two page faults for caching a remote page"); the
    /// benchmark's faithful baseline.
    pub writable_on_write_fault: bool,
    /// Fault-around of fresh memory: a fault on a never-written page in a
    /// sequential stream also installs the never-written pages after it,
    /// up to this window ([`farmem_policy::readahead`]; at most
    /// [`MAX_FAULT_AROUND`] pages, and 1/32 of `local_bytes` besides the
    /// fault's own, [`farmem_policy::watermark::around_allowance`]; 0 or
    /// 1 turns it off).
    pub fault_around: ReadaheadConfig,
    /// Line mode: when a first write keeps a diff base (a page copy, which
    /// counts against `local_bytes`) and when pages are written back whole
    /// instead ([`farmem_policy::diffbase`]).
    pub diff_base: DiffBaseConfig,
    /// `local_bytes` bounds the process's resident memory, as a cgroup's
    /// limit would, not the cache alone: the process's anonymous pages
    /// that the cache does not count (its own heap and stacks, the
    /// runtime's books), measured as it runs, are charged against it, up
    /// to half of it. File pages (libraries, program text) are not: a
    /// cgroup charges the page cache to whoever first read it. On for `farmem run`; off by default, where the
    /// process holds more than the runtime's program (a test's in-memory
    /// store).
    pub limit_counts_process: bool,
    /// Share of `local_bytes` whose pages are kept on probation before
    /// eviction (`park.rs`): the policy's victims are unmapped first,
    /// and evicted only if the program does not touch them while they
    /// wait, so pages in use stay although faults never show their use.
    /// 0 (the default) evicts victims at once: on loopback a touch of a
    /// parked page costs most of what the fetch it saves costs (the same
    /// handler hand-off), so fewer faults did not mean less time (PageRank
    /// over 1 GiB at 25%: 13.9 k faults against 25.8 k, and 0.98x zswap's
    /// time against 0.92x). Needs `UFFDIO_MOVE` (Linux 6.8+).
    #[serde(default = "default_park_share")]
    pub park_share: f64,
}

fn default_park_share() -> f64 {
    Config::default().park_share
}

fn default_whole_within() -> u32 {
    farmem_policy::daemon::FaultConfig::default().whole_within
}

impl Default for Config {
    fn default() -> Self {
        Self {
            local_bytes: 256 << 20,
            high_watermark: Watermarks::default().high,
            low_watermark: Watermarks::default().low,
            // Linux's active/inactive lists with its refault-distance test:
            // the runtime sees only misses, and a page that misses again
            // soon after its eviction is what a scan must not push out. On
            // the demo (PageRank, 1 GiB at 25% local) 52 k faults against
            // kona-pc's 125 k and LRU's 184 k.
            policy: PolicyConfig::Workingset,
            dirty: DirtyMode::default(),
            fault_path: FaultPath::default(),
            engine: Engine::default(),
            whole_within: default_whole_within(),
            demand_first: false,
            wait: WaitMode::default(),
            handlers: 2,
            fillers: 0,
            slab_batch: 1 << 30,
            zeroed_slabs: false,
            log_lines: 4096,
            log_segments: 4,
            shippers: 1,
            evict_batch: 64,
            store_attempts: 3,
            give_up_after: std::time::Duration::from_secs(20),
            writable_on_write_fault: true,
            fault_around: ReadaheadConfig::default(),
            diff_base: DiffBaseConfig::default(),
            limit_counts_process: false,
            park_share: 0.0,
        }
    }
}

/// Smallest cache the runtime accepts, in pages: room for every filler's
/// page in flight plus an eviction batch.
pub const MIN_LOCAL_PAGES: u64 = 32;

impl Config {
    /// The eviction rule's two marks.
    pub fn watermarks(&self) -> Watermarks {
        Watermarks {
            high: self.high_watermark,
            low: self.low_watermark,
        }
    }

    pub fn validate(&self) -> Result<(), RuntimeError> {
        let pages = self.local_bytes / farmem_core::PAGE_SIZE;
        let err = |m: String| Err(RuntimeError::Config(m));
        let min = MIN_LOCAL_PAGES + (self.fillers + self.handlers) as u64;
        if pages < min {
            return err(format!(
                "local_bytes {} is below the minimum of {min} pages",
                self.local_bytes
            ));
        }
        if self.handlers == 0 {
            return err("handlers must be at least 1".into());
        }
        self.watermarks().validate().map_err(RuntimeError::Config)?;
        if !(0.0..=0.5).contains(&self.park_share) {
            return err(format!(
                "park_share {} is not between 0 and 0.5",
                self.park_share
            ));
        }
        if self.log_lines < 64 {
            return err(format!(
                "log_lines {} must hold at least one page (64 lines)",
                self.log_lines
            ));
        }
        if self.give_up_after.is_zero() {
            return err("give_up_after must be positive".into());
        }
        if self.log_segments == 0 || self.evict_batch == 0 || self.store_attempts == 0 {
            return err("log_segments, evict_batch and store_attempts must be positive".into());
        }
        if self.shippers == 0 {
            return err("shippers must be at least 1".into());
        }
        if self.fault_around.max_blocks > MAX_FAULT_AROUND {
            return err(format!(
                "fault_around.max_blocks {} is above the most, {}",
                self.fault_around.max_blocks, MAX_FAULT_AROUND
            ));
        }
        if self.slab_batch == 0 {
            return err("slab_batch must be positive".into());
        }
        if self.engine == Engine::Daemon && self.fault_path != FaultPath::Thread {
            return err(
                "engine `daemon` needs fault path `thread`: a signal handler cannot wait for the selection unit"
                    .into(),
            );
        }
        Ok(())
    }

    /// The selection unit's sizes for `engine: daemon`: 256 KiB clusters, a
    /// demand slot per fault handler, eight clusters on the bulk lane.
    pub fn daemon_config(&self) -> farmem_policy::daemon::FaultConfig {
        farmem_policy::daemon::FaultConfig {
            demand_slots: self.handlers.max(1),
            whole_within: self.whole_within,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_by_name_and_reject_others() {
        assert_eq!("line".parse::<DirtyMode>().unwrap(), DirtyMode::Line);
        assert_eq!("page".parse::<DirtyMode>().unwrap(), DirtyMode::Page);
        assert!(
            "word"
                .parse::<DirtyMode>()
                .unwrap_err()
                .to_string()
                .contains("word")
        );
        assert_eq!("spin".parse::<WaitMode>().unwrap(), WaitMode::Spin);
        assert_eq!(
            "hybrid:50".parse::<WaitMode>().unwrap(),
            WaitMode::Hybrid { spin_us: 50 }
        );
        assert!("hybrid:x".parse::<WaitMode>().is_err());
        assert_eq!(
            "adaptive:40".parse::<WaitMode>().unwrap(),
            WaitMode::Adaptive { max_us: 40 }
        );
        assert_eq!("adaptive".parse::<WaitMode>().unwrap(), WaitMode::default());
        assert!("adaptive:-1".parse::<WaitMode>().is_err());
        for wait in [
            WaitMode::Poll,
            WaitMode::Spin,
            WaitMode::default(),
            WaitMode::Hybrid { spin_us: 7 },
        ] {
            assert_eq!(wait.to_string().parse::<WaitMode>().unwrap(), wait);
        }
        for path in [FaultPath::Thread, FaultPath::Signal] {
            assert_eq!(path.to_string().parse::<FaultPath>().unwrap(), path);
        }
        assert!("irq".parse::<FaultPath>().is_err());
        for engine in [Engine::Page, Engine::Daemon] {
            assert_eq!(engine.to_string().parse::<Engine>().unwrap(), engine);
        }
        assert!("dma".parse::<Engine>().is_err());
        Config::default().validate().unwrap();
        let no_shipper = Config {
            shippers: 0,
            ..Config::default()
        };
        assert!(no_shipper.validate().is_err());
        let signal_daemon = Config {
            engine: Engine::Daemon,
            fault_path: FaultPath::Signal,
            ..Config::default()
        };
        assert!(signal_daemon.validate().is_err());
    }
}
