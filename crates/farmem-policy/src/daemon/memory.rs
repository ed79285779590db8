//! The DaeMon memory engine (seed 000 §4.1, §4.5): a sub-block queue (512)
//! and a page queue (1024), sized for up to 4 compute engines, served on the
//! memory bus (and the node's network egress) by the same approximate
//! bandwidth partitioning as the compute engine.
//!
//! Generic over the request `T` the caller queues (page, offset, source
//! node, ...): the engine only orders them.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::DaemonError;
use super::engine::Selection;
use super::partition::{BandwidthPartitioner, Class, PartitionConfig, Slot};

/// Memory-engine sizes (§4.5 Table 1: "M" rows) and its partition.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryEngineConfig {
    pub sub_block_queue: usize,
    pub page_queue: usize,
    pub partition: PartitionConfig,
}

impl Default for MemoryEngineConfig {
    fn default() -> Self {
        Self {
            sub_block_queue: 512,
            page_queue: 1024,
            partition: PartitionConfig::default(),
        }
    }
}

impl MemoryEngineConfig {
    pub fn validate(&self) -> Result<(), DaemonError> {
        for (field, v) in [
            ("memory.sub_block_queue", self.sub_block_queue),
            ("memory.page_queue", self.page_queue),
        ] {
            if v == 0 {
                return Err(DaemonError::BadConfig {
                    field,
                    why: "must be at least 1".into(),
                });
            }
        }
        self.partition.lines_per_page().map(|_| ())
    }
}

/// The queue was full; the request is handed back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("memory engine {class:?} queue is full")]
pub struct QueueFull<T> {
    pub class: Class,
    pub request: T,
}

/// What the memory engine does in its next slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Served<T> {
    Line(T),
    Page(T),
    /// The slot's queue is empty; the bus stays idle for one slot of that
    /// class (§4.1).
    Idle(Class),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MemoryStats {
    pub lines_served: u64,
    pub pages_served: u64,
    pub idle_line_slots: u64,
    pub idle_page_slots: u64,
    pub lines_refused: u64,
    pub pages_refused: u64,
}

/// One memory node's DaeMon engine.
#[derive(Debug, Clone)]
pub struct MemoryEngine<T> {
    config: MemoryEngineConfig,
    partitioner: BandwidthPartitioner,
    lines: VecDeque<T>,
    pages: VecDeque<T>,
    stats: MemoryStats,
}

impl<T> MemoryEngine<T> {
    pub fn new(config: MemoryEngineConfig) -> Result<Self, DaemonError> {
        Self::with_selection(config, Selection::Selective)
    }

    /// A memory engine for the scheme `selection`: single-granularity
    /// schemes serve their one class in every slot
    /// ([`Selection::effective_partition`]).
    pub fn with_selection(
        config: MemoryEngineConfig,
        selection: Selection,
    ) -> Result<Self, DaemonError> {
        config.validate()?;
        Ok(Self {
            partitioner: BandwidthPartitioner::from_config(
                &selection.effective_partition(config.partition),
            )?,
            lines: VecDeque::new(),
            pages: VecDeque::new(),
            stats: MemoryStats::default(),
            config,
        })
    }

    /// Queue a line request; a full queue hands it back (the sender retries
    /// or counts a drop; in hardware the compute engines' MSHRs bound it).
    pub fn push_line(&mut self, request: T) -> Result<(), QueueFull<T>> {
        if self.lines.len() >= self.config.sub_block_queue {
            self.stats.lines_refused += 1;
            return Err(QueueFull {
                class: Class::Line,
                request,
            });
        }
        self.lines.push_back(request);
        Ok(())
    }

    pub fn push_page(&mut self, request: T) -> Result<(), QueueFull<T>> {
        if self.pages.len() >= self.config.page_queue {
            self.stats.pages_refused += 1;
            return Err(QueueFull {
                class: Class::Page,
                request,
            });
        }
        self.pages.push_back(request);
        Ok(())
    }

    pub fn has_work(&self) -> bool {
        !self.lines.is_empty() || !self.pages.is_empty()
    }

    /// One slot of the bus (§4.1).
    pub fn serve(&mut self) -> Served<T> {
        let slot = self
            .partitioner
            .next(!self.lines.is_empty(), !self.pages.is_empty());
        let served = match slot {
            Slot::Line => self.lines.pop_front().map(Served::Line),
            Slot::Page => self.pages.pop_front().map(Served::Page),
            Slot::Idle(_) => None,
        };
        match served {
            Some(s) => {
                match s {
                    Served::Line(_) => self.stats.lines_served += 1,
                    _ => self.stats.pages_served += 1,
                }
                s
            }
            None => {
                let class = slot.class();
                match class {
                    Class::Line => self.stats.idle_line_slots += 1,
                    Class::Page => self.stats.idle_page_slots += 1,
                }
                Served::Idle(class)
            }
        }
    }

    pub fn line_queue_len(&self) -> usize {
        self.lines.len()
    }

    pub fn page_queue_len(&self) -> usize {
        self.pages.len()
    }

    pub fn partitioner(&self) -> &BandwidthPartitioner {
        &self.partitioner
    }

    /// The bus was parked for `bytes` of transfer time; see
    /// [`BandwidthPartitioner::elapse_idle`].
    pub fn elapse_idle(&mut self, bytes: u64) -> u64 {
        self.partitioner.elapse_idle(bytes)
    }

    pub fn stats(&self) -> &MemoryStats {
        &self.stats
    }

    pub fn config(&self) -> &MemoryEngineConfig {
        &self.config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_papers() {
        let c = MemoryEngineConfig::default();
        assert_eq!((c.sub_block_queue, c.page_queue), (512, 1024));
        let c: MemoryEngineConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(c, MemoryEngineConfig::default());
    }

    #[test]
    fn full_queues_hand_requests_back() {
        let mut m = MemoryEngine::new(MemoryEngineConfig {
            sub_block_queue: 2,
            page_queue: 1,
            ..Default::default()
        })
        .unwrap();
        m.push_line(1u32).unwrap();
        m.push_line(2).unwrap();
        assert_eq!(
            m.push_line(3),
            Err(QueueFull {
                class: Class::Line,
                request: 3
            })
        );
        m.push_page(10).unwrap();
        assert_eq!(m.push_page(11).unwrap_err().request, 11);
        assert_eq!(m.stats().lines_refused + m.stats().pages_refused, 2);
    }

    #[test]
    fn served_in_the_partitioned_order_with_idle_slots() {
        // 50%: 64 line slots, then the page slot.
        let mut m = MemoryEngine::new(MemoryEngineConfig {
            partition: PartitionConfig {
                ratio: "50%".parse().unwrap(),
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap();
        for i in 0..3u32 {
            m.push_line(i).unwrap();
        }
        m.push_page(100).unwrap();
        let got: Vec<_> = (0..65).map(|_| m.serve()).collect();
        let mut want = vec![Served::Line(0), Served::Line(1), Served::Line(2)];
        want.extend(std::iter::repeat_n(Served::Idle(Class::Line), 61));
        want.push(Served::Page(100));
        assert_eq!(got, want);
        assert!(!m.has_work());
        let s = m.stats();
        assert_eq!(
            (s.lines_served, s.pages_served, s.idle_line_slots),
            (3, 1, 61)
        );
    }

    #[test]
    fn page_only_scheme_serves_pages_in_every_slot() {
        let mut m =
            MemoryEngine::with_selection(MemoryEngineConfig::default(), Selection::PageOnly)
                .unwrap();
        m.push_page(1u32).unwrap();
        m.push_page(2).unwrap();
        assert_eq!(m.serve(), Served::Page(1));
        assert_eq!(m.serve(), Served::Page(2));
    }

    #[test]
    fn zero_sizes_are_errors() {
        let bad = MemoryEngineConfig {
            page_queue: 0,
            ..Default::default()
        };
        assert!(MemoryEngine::<u32>::new(bad).is_err());
    }
}
