//! Replacement policies for every cache farmem models or runs: CPU cache sets
//! in the simulator, the local memory that caches remote memory, and the
//! runtime's resident-page set.
//!
//! A policy only orders blocks; it never holds data or dirty bits. The cache
//! that owns it keeps those, so writing back a dirty victim is the cache's
//! job and no policy can lose one. Policies are chosen by name from config
//! ([`PolicyConfig`]).

mod block_map;
mod clock;
mod fifo;
mod filter;
mod lru;
mod set_assoc;
mod two_q;
mod workingset;

pub use clock::Clock;
pub use fifo::Fifo;
pub use filter::{FilterCache, FilterConfig, MAX_PAIRS};
pub use lru::Lru;
pub use set_assoc::{
    FifoRule, LruRule, Probe, RandomRule, SetAssoc, SetAssocLru, SetPrefetch, SetRule, SetRuleKind,
    SrripRule,
};
pub use two_q::TwoQ;
pub use workingset::Workingset;

use serde::{Deserialize, Serialize};

use crate::{BlockId, Nanos};

/// The result of one access through [`ReplacementPolicy::access`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Hit,
    /// The block was admitted; `evicted` made room for it.
    Miss {
        evicted: Option<BlockId>,
    },
}

/// Where a sub-page block sits in a two-list cache (what page promotion
/// ranks pages by).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubPageState {
    Active,
    Inactive,
    /// Not resident; its address is in the refault queue.
    Refault,
    Absent,
}

/// One replacement policy over a fixed number of block slots.
///
/// Hooks are narrow, after ChampSim: `touch` on a hit, `insert` on a fill
/// (which names the victim when the cache is full), `evict` when the owner
/// wants room ahead of demand (watermarks, batch eviction), `remove` when a
/// block leaves for another reason (invalidation, promotion).
pub trait ReplacementPolicy: Send {
    /// The name this policy is chosen by.
    fn name(&self) -> &'static str;
    /// Blocks it can hold.
    fn capacity(&self) -> usize;
    /// Blocks it holds.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn contains(&self, block: BlockId) -> bool;
    /// A resident block was accessed.
    fn touch(&mut self, block: BlockId, now: Nanos);
    /// Admits a block that is not resident. When the policy is full it first
    /// evicts, by its own order, and returns that victim.
    fn insert(&mut self, block: BlockId, now: Nanos) -> Option<BlockId>;
    /// Evicts one block by the policy's order; `None` when empty.
    fn evict(&mut self, now: Nanos) -> Option<BlockId>;
    /// Drops a block without choosing it as a victim; false if absent.
    fn remove(&mut self, block: BlockId) -> bool;

    /// Evicts up to `n` blocks by the policy's order (batch eviction ahead
    /// of demand); fewer when it runs empty.
    fn evict_batch(&mut self, n: usize, now: Nanos) -> Vec<BlockId> {
        (0..n).map_while(|_| self.evict(now)).collect()
    }

    /// Where `block` sits, for page promotion (the `promote` module), without
    /// touching it. Policies with active/inactive lists (and a refault
    /// history) say which; single-list policies report resident blocks as
    /// active.
    fn sub_page_state(&self, block: BlockId) -> SubPageState {
        if self.contains(block) {
            SubPageState::Active
        } else {
            SubPageState::Absent
        }
    }

    /// Touch on a hit, insert on a miss.
    fn access(&mut self, block: BlockId, now: Nanos) -> Access {
        if self.contains(block) {
            self.touch(block, now);
            Access::Hit
        } else {
            Access::Miss {
                evicted: self.insert(block, now),
            }
        }
    }
}

/// A replacement policy chosen by name in config files and on the command
/// line (`policy = "lru"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyConfig {
    /// Least recently used.
    #[default]
    Lru,
    /// First in, first out (DaeMon's sensitivity study).
    Fifo,
    /// 4-way set-associative true LRU (Kona's local cache).
    #[serde(rename = "4-way", alias = "set-assoc")]
    FourWay,
    /// CLOCK, second chance (the runtime's cheap default).
    Clock,
    /// Linux's active/inactive lists, active ≤ inactive (UniMem's Kona-PC).
    #[serde(alias = "2q")]
    KonaPc,
    /// UniMem's Filter-Cache with the paper's parameters; other parameters
    /// through [`FilterConfig::build`].
    Filter,
    /// Kona-PC's lists with Linux's refault-distance test: a block that
    /// misses again soon after its eviction enters the active list.
    Workingset,
}

/// Why a policy could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("unknown policy `{name}` (known: {known})")]
    Unknown { name: String, known: String },
    #[error("policy `{policy}` needs a capacity of at least {min} blocks, got {got}")]
    TooSmall {
        policy: &'static str,
        min: usize,
        got: usize,
    },
    #[error("policy `{policy}`: {why}")]
    BadConfig { policy: &'static str, why: String },
}

impl PolicyConfig {
    /// Every name, for `--help` and error messages. Also accepted:
    /// `set-assoc` for `4-way`, `2q` for `kona-pc`.
    pub const NAMES: &'static [&'static str] = &[
        "lru",
        "fifo",
        "4-way",
        "clock",
        "kona-pc",
        "filter",
        "workingset",
    ];

    /// The policy's name, as [`PolicyConfig::from_name`] reads it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lru => "lru",
            Self::Fifo => "fifo",
            Self::FourWay => "4-way",
            Self::Clock => "clock",
            Self::KonaPc => "kona-pc",
            Self::Filter => "filter",
            Self::Workingset => "workingset",
        }
    }

    pub fn from_name(name: &str) -> Result<Self, PolicyError> {
        match name {
            "lru" => Ok(Self::Lru),
            "fifo" => Ok(Self::Fifo),
            "4-way" | "set-assoc" => Ok(Self::FourWay),
            "clock" => Ok(Self::Clock),
            "kona-pc" | "2q" => Ok(Self::KonaPc),
            "filter" => Ok(Self::Filter),
            "workingset" => Ok(Self::Workingset),
            _ => Err(PolicyError::Unknown {
                name: name.to_string(),
                known: Self::NAMES.join(", "),
            }),
        }
    }

    /// Builds the policy for `capacity` blocks.
    pub fn build(self, capacity: usize) -> Result<Box<dyn ReplacementPolicy>, PolicyError> {
        if capacity == 0 {
            return Err(PolicyError::TooSmall {
                policy: "any",
                min: 1,
                got: 0,
            });
        }
        Ok(match self {
            Self::Lru => Box::new(Lru::new(capacity)),
            Self::Fifo => Box::new(Fifo::new(capacity)),
            Self::FourWay => Box::new(SetAssocLru::new(capacity, 4)),
            Self::Clock => Box::new(Clock::new(capacity)),
            Self::KonaPc => Box::new(TwoQ::new(capacity)),
            Self::Filter => Box::new(FilterConfig::for_capacity(capacity).build(capacity)?),
            Self::Workingset => Box::new(Workingset::new(capacity)),
        })
    }
}

impl std::str::FromStr for PolicyConfig {
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_name(s)
    }
}
