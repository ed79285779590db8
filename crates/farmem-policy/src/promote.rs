//! UniMem's fully-used page promotion (seed 002 §3.3): which pages move from
//! device-attached memory (Filter-Cache, sub-page blocks) to host memory
//! (whole pages).
//!
//! Each sub-page of a page gets a hotness score from where it sits in the
//! Filter-Cache; the variance of a page's scores is its hotness
//! fragmentation. Hot pages with low fragmentation ("fully used") are
//! promoted, in batches (512 pages in the paper's setup, §4.1) so the
//! migration cost is amortized.
//!
//! The paper fixes only the order of the scores: "the sub-page in active list
//! is given the highest score, while the sub-page in refault queue receives
//! the lowest score". It gives no numbers and no thresholds, so the defaults
//! here are ours: active 3, inactive 2, refault 1, and 0 for a sub-page in
//! none of them (never fetched, or so long ago the ring forgot it), which
//! ranks a page with a recently used sub-page above one with an unused hole.
//!
//! Pure: the caller passes the cache state (any [`SubPageStates`]) and the
//! candidate pages, and gets the batch back. Moving the pages, charging the
//! 2 ms per batch and removing the promoted sub-pages from the Filter-Cache
//! (with [`ReplacementPolicy::remove`], which does not log them as refaults)
//! are the owner's job.

use serde::{Deserialize, Serialize};

use crate::BlockId;
pub use crate::cache::SubPageState;
use crate::cache::{PolicyError, ReplacementPolicy};

/// A page number: a block's number divided by the blocks per page.
pub type PageId = u64;

/// A cache that can say where a block sits, without touching it. Every
/// [`ReplacementPolicy`] is one (through its `sub_page_state`), boxed or not.
pub trait SubPageStates {
    fn state(&self, block: BlockId) -> SubPageState;
}

impl<P: ReplacementPolicy + ?Sized> SubPageStates for P {
    fn state(&self, block: BlockId) -> SubPageState {
        self.sub_page_state(block)
    }
}

/// The score of a sub-page in each position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HotnessScores {
    pub active: u32,
    pub inactive: u32,
    pub refault: u32,
    pub absent: u32,
}

impl Default for HotnessScores {
    fn default() -> Self {
        Self {
            active: 3,
            inactive: 2,
            refault: 1,
            absent: 0,
        }
    }
}

impl HotnessScores {
    pub fn of(&self, state: SubPageState) -> u32 {
        match state {
            SubPageState::Active => self.active,
            SubPageState::Inactive => self.inactive,
            SubPageState::Refault => self.refault,
            SubPageState::Absent => self.absent,
        }
    }
}

/// Fully-used page promotion parameters; defaults are the paper's where it
/// gives them (8 × 512 B sub-pages per 4 KiB page, batches of 512 pages).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PromotionConfig {
    /// Sub-page blocks per page (4 KiB / 512 B = 8).
    pub blocks_per_page: u32,
    /// Pages promoted together (paper: 512).
    pub batch_pages: u32,
    pub scores: HotnessScores,
    /// A page is hot when its mean score reaches this (default: the inactive
    /// score, i.e. on average every sub-page is cached).
    pub min_mean: f64,
    /// A page is fully used when its score variance is at most this. With the
    /// default scores, 1.0 admits 7 active + 1 absent sub-pages (0.984) and
    /// rejects 6 active + 2 absent (1.69).
    pub max_variance: f64,
}

impl Default for PromotionConfig {
    fn default() -> Self {
        Self {
            blocks_per_page: 8,
            batch_pages: 512,
            scores: HotnessScores::default(),
            min_mean: 2.0,
            max_variance: 1.0,
        }
    }
}

/// Largest accepted `blocks_per_page` (a 2 MiB page of 128 B blocks); keeps
/// the per-page scan bounded.
pub const MAX_BLOCKS_PER_PAGE: u32 = 1 << 14;

impl PromotionConfig {
    pub fn validate(&self) -> Result<(), PolicyError> {
        let bad = |why: String| {
            Err(PolicyError::BadConfig {
                policy: "promotion",
                why,
            })
        };
        if !(1..=MAX_BLOCKS_PER_PAGE).contains(&self.blocks_per_page) {
            return bad(format!(
                "blocks_per_page must be 1..={MAX_BLOCKS_PER_PAGE}, got {}",
                self.blocks_per_page
            ));
        }
        if self.batch_pages == 0 {
            return bad("batch_pages must be at least 1".into());
        }
        let s = self.scores;
        if !(s.active >= s.inactive && s.inactive >= s.refault && s.refault >= s.absent) {
            return bad(format!(
                "scores must not increase from active to absent (§3.3: active highest, \
                 refault lowest), got active {} inactive {} refault {} absent {}",
                s.active, s.inactive, s.refault, s.absent
            ));
        }
        for (name, v) in [
            ("min_mean", self.min_mean),
            ("max_variance", self.max_variance),
        ] {
            if !v.is_finite() || v < 0.0 {
                return bad(format!("{name} must be a finite number ≥ 0, got {v}"));
            }
        }
        Ok(())
    }
}

/// One page's hotness: the mean of its sub-page scores and their variance
/// (population variance, the fragmentation).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PageScore {
    pub page: PageId,
    pub mean: f64,
    pub variance: f64,
}

/// Scores pages and picks promotion batches.
#[derive(Debug, Clone)]
pub struct Promoter {
    cfg: PromotionConfig,
}

impl Promoter {
    pub fn new(cfg: PromotionConfig) -> Result<Self, PolicyError> {
        cfg.validate()?;
        Ok(Self { cfg })
    }

    pub fn config(&self) -> &PromotionConfig {
        &self.cfg
    }

    /// The page holding `block`.
    pub fn page_of(&self, block: BlockId) -> PageId {
        block / u64::from(self.cfg.blocks_per_page)
    }

    /// The sub-page blocks of `page`; `None` past `u64::MAX`.
    pub fn blocks_of(&self, page: PageId) -> Option<std::ops::Range<BlockId>> {
        let n = u64::from(self.cfg.blocks_per_page);
        let first = page.checked_mul(n)?;
        Some(first..first.checked_add(n)?)
    }

    /// Scores `page`; `None` when its blocks would lie past `u64::MAX`.
    pub fn score<S: SubPageStates + ?Sized>(&self, states: &S, page: PageId) -> Option<PageScore> {
        let blocks = self.blocks_of(page)?;
        let n = u64::from(self.cfg.blocks_per_page);
        // Integer sums: exact for any config, so equal states give bitwise
        // equal scores and the ranking is deterministic.
        let (mut sum, mut sum_sq) = (0u128, 0u128);
        for b in blocks {
            let s = u128::from(self.cfg.scores.of(states.state(b)));
            sum += s;
            sum_sq += s * s;
        }
        let n = u128::from(n);
        let var_num = n * sum_sq - sum * sum;
        Some(PageScore {
            page,
            mean: sum as f64 / n as f64,
            variance: var_num as f64 / (n * n) as f64,
        })
    }

    /// The distinct pages of `blocks`, ascending: with the Filter-Cache's
    /// active blocks, the pages with a reused sub-page, our stand-in for the
    /// paper's "hot page depending on the process page cache".
    pub fn pages_of(&self, blocks: impl IntoIterator<Item = BlockId>) -> Vec<PageId> {
        let mut pages: Vec<PageId> = blocks.into_iter().map(|b| self.page_of(b)).collect();
        pages.sort_unstable();
        pages.dedup();
        pages
    }

    /// Every candidate that is hot (`mean ≥ min_mean`) and fully used
    /// (`variance ≤ max_variance`), least fragmented first, then hottest,
    /// then lowest page number. Duplicate candidates count once.
    pub fn rank<S: SubPageStates + ?Sized>(
        &self,
        states: &S,
        candidates: impl IntoIterator<Item = PageId>,
    ) -> Vec<PageScore> {
        let mut pages: Vec<PageId> = candidates.into_iter().collect();
        pages.sort_unstable();
        pages.dedup();
        let mut ranked: Vec<PageScore> = pages
            .into_iter()
            .filter_map(|p| self.score(states, p))
            .filter(|s| s.mean >= self.cfg.min_mean && s.variance <= self.cfg.max_variance)
            .collect();
        ranked.sort_by(|a, b| {
            a.variance
                .total_cmp(&b.variance)
                .then(b.mean.total_cmp(&a.mean))
                .then(a.page.cmp(&b.page))
        });
        ranked
    }

    /// The best `batch_pages` candidates (fewer when fewer qualify).
    pub fn batch<S: SubPageStates + ?Sized>(
        &self,
        states: &S,
        candidates: impl IntoIterator<Item = PageId>,
    ) -> Vec<PageScore> {
        let mut ranked = self.rank(states, candidates);
        ranked.truncate(self.cfg.batch_pages as usize);
        ranked
    }

    /// A batch only once a full one has gathered, as the paper collects
    /// candidates before it activates a batch promotion.
    pub fn full_batch<S: SubPageStates + ?Sized>(
        &self,
        states: &S,
        candidates: impl IntoIterator<Item = PageId>,
    ) -> Option<Vec<PageScore>> {
        let batch = self.batch(states, candidates);
        (batch.len() == self.cfg.batch_pages as usize).then_some(batch)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use SubPageState::*;

    /// A hand-built cache state: unlisted blocks are absent.
    #[derive(Default)]
    struct States(HashMap<BlockId, SubPageState>);

    impl States {
        fn page(mut self, page: PageId, subs: [SubPageState; 8]) -> Self {
            for (i, s) in subs.into_iter().enumerate() {
                self.0.insert(page * 8 + i as u64, s);
            }
            self
        }
    }

    impl SubPageStates for States {
        fn state(&self, block: BlockId) -> SubPageState {
            self.0.get(&block).copied().unwrap_or(Absent)
        }
    }

    fn promoter() -> Promoter {
        Promoter::new(PromotionConfig::default()).unwrap()
    }

    #[test]
    fn exact_scores_and_variance() {
        let p = promoter();
        let st = States::default()
            .page(0, [Active; 8])
            .page(
                1,
                [
                    Active, Active, Active, Active, Inactive, Inactive, Inactive, Inactive,
                ],
            )
            .page(
                2,
                [
                    Active, Active, Active, Active, Active, Active, Active, Absent,
                ],
            )
            .page(
                3,
                [
                    Active, Active, Active, Active, Active, Active, Active, Refault,
                ],
            )
            .page(
                4,
                [
                    Active, Active, Active, Active, Absent, Absent, Absent, Absent,
                ],
            );
        let s = |page| p.score(&st, page).unwrap();
        assert_eq!((s(0).mean, s(0).variance), (3.0, 0.0));
        // Scores 3,3,3,3,2,2,2,2: mean 2.5, every deviation 0.5.
        assert_eq!((s(1).mean, s(1).variance), (2.5, 0.25));
        // 7×3 + 0: mean 21/8, variance (8·63 − 21²)/64 = 63/64.
        assert_eq!((s(2).mean, s(2).variance), (2.625, 0.984375));
        // 7×3 + 1: mean 22/8, variance (8·64 − 22²)/64 = 28/64.
        assert_eq!((s(3).mean, s(3).variance), (2.75, 0.4375));
        // Half hot, half never used: the most fragmented, variance 1.5².
        assert_eq!((s(4).mean, s(4).variance), (1.5, 2.25));
        // An untouched page.
        assert_eq!((s(9).mean, s(9).variance), (0.0, 0.0));
    }

    #[test]
    fn ranks_fully_used_pages_first_and_drops_fragmented_or_cold() {
        let p = promoter();
        let st = States::default()
            .page(
                10,
                [
                    Active, Active, Active, Active, Inactive, Inactive, Inactive, Inactive,
                ],
            )
            .page(11, [Active; 8])
            .page(
                12,
                [
                    Active, Active, Active, Active, Active, Active, Active, Absent,
                ],
            )
            .page(
                13,
                [
                    Active, Active, Active, Active, Absent, Absent, Absent, Absent,
                ],
            )
            .page(14, [Inactive; 8])
            .page(15, [Refault; 8])
            .page(16, [Active; 8]);
        let ranked = p.rank(&st, [16, 15, 14, 13, 12, 11, 10, 11]);
        let pages: Vec<PageId> = ranked.iter().map(|s| s.page).collect();
        // 11 and 16 tie (variance 0, mean 3): lower page first; 14 (variance
        // 0, mean 2) next; 13 is too fragmented and 15 too cold.
        assert_eq!(pages, vec![11, 16, 14, 10, 12]);
    }

    #[test]
    fn batches_are_limited_and_full_batches_wait() {
        let p = Promoter::new(PromotionConfig {
            batch_pages: 3,
            ..Default::default()
        })
        .unwrap();
        let st = (0..5).fold(States::default(), |st, pg| st.page(pg, [Active; 8]));
        assert_eq!(p.batch(&st, 0..5).len(), 3);
        assert_eq!(p.full_batch(&st, 0..2), None);
        let full = p.full_batch(&st, 0..5).unwrap();
        assert_eq!(
            full.iter().map(|s| s.page).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );

        // The paper's default: 512 pages per batch out of 600 candidates.
        let p = promoter();
        let st = (0..600).fold(States::default(), |st, pg| st.page(pg, [Active; 8]));
        assert_eq!(p.batch(&st, 0..600).len(), 512);
    }

    #[test]
    fn candidate_pages_come_from_blocks() {
        let p = promoter();
        assert_eq!(p.pages_of([17, 3, 16, 7, 64]), vec![0, 2, 8]);
        assert_eq!(p.blocks_of(2), Some(16..24));
        // A page whose blocks would pass u64::MAX is skipped, not a panic.
        assert_eq!(p.score(&States::default(), u64::MAX), None);
        assert!(p.rank(&States::default(), [u64::MAX]).is_empty());
    }

    #[test]
    fn odd_configs_are_typed_errors() {
        for cfg in [
            PromotionConfig {
                blocks_per_page: 0,
                ..Default::default()
            },
            PromotionConfig {
                batch_pages: 0,
                ..Default::default()
            },
            PromotionConfig {
                max_variance: f64::NAN,
                ..Default::default()
            },
            PromotionConfig {
                scores: HotnessScores {
                    refault: 5,
                    ..Default::default()
                },
                ..Default::default()
            },
        ] {
            assert!(matches!(
                Promoter::new(cfg),
                Err(PolicyError::BadConfig { .. })
            ));
        }
    }
}
