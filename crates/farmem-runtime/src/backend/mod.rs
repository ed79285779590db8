//! Where evicted pages go (xDM's backends, seed 004 §3).
//!
//! | backend                   | store |
//! |---------------------------|-------|
//! | `remote`                  | the rack's memory nodes ([`crate::remote::RackStore`]) |
//! | `file:PATH`               | a file or block device, direct I/O ([`FileStore`]) |
//! | `compressed`              | [`CompressedStore`] over the memory nodes (`tiered:compressed,remote`) |
//! | `auto`                    | the same, its pool turned off while it costs the program fault stall ([`farmem_policy::tier::PoolTuner`], [`FaultClock`]) |
//! | `tiered:compressed,file:PATH` | [`CompressedStore`] over a file |
//!
//! A backend is chosen by name (`farmem run --backend`, `FARMEM_BACKEND`)
//! and built with [`Backend::build`]; only those ending in `remote` need a
//! rack.

pub mod compressed;
pub mod file;
pub mod stall;

use std::path::PathBuf;
use std::sync::Arc;

use farmem_policy::tier::CompressedTierConfig;

pub use compressed::{CompressedStats, CompressedStore};
pub use file::{FileBackendError, FileStats, FileStore};
pub use stall::{FAULT_CLOCK, FaultClock};

use crate::config::DirtyMode;
use crate::store::{RemoteStore, SlabSource};

const PAGE: u64 = farmem_core::PAGE_SIZE;
const LINE: usize = farmem_core::CACHE_LINE as usize;

/// One page's share of a batch of line records (`write_lines`).
pub(crate) struct PageGroup<'a> {
    /// The page's address.
    pub page: u64,
    pub lines: &'a [(u64, [u8; LINE])],
    /// The page's 64 lines in order: the whole page is written.
    pub whole: bool,
}

impl PageGroup<'_> {
    /// The lines as (offset in the page, bytes).
    pub fn parts(&self) -> Vec<(usize, &[u8])> {
        self.lines
            .iter()
            .map(|(a, l)| ((a - self.page) as usize, &l[..]))
            .collect()
    }
}

/// `lines` in runs of the same page, in order; None when a record
/// straddles two pages (never the runtime's), for the caller to write
/// record by record.
pub(crate) fn page_groups(
    lines: &[(u64, [u8; LINE])],
) -> Option<impl Iterator<Item = PageGroup<'_>>> {
    let page_of = |a: u64| a - a % PAGE;
    if !lines.iter().all(|(a, _)| a % PAGE + LINE as u64 <= PAGE) {
        return None;
    }
    Some(
        lines
            .chunk_by(move |x, y| page_of(x.0) == page_of(y.0))
            .map(move |group| {
                let page = page_of(group[0].0);
                let whole = group.len() as u64 == PAGE / LINE as u64
                    && group
                        .iter()
                        .enumerate()
                        .all(|(k, (a, _))| *a == page + (k * LINE) as u64);
                PageGroup {
                    page,
                    lines: group,
                    whole,
                }
            }),
    )
}

/// The last tier: where pages go that no tier above keeps.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Bottom {
    /// The rack's memory nodes.
    #[default]
    Remote,
    /// A file or block device.
    File(PathBuf),
}

/// A backend and its parameters; `auto` by default.
#[derive(Debug, Clone, PartialEq)]
pub struct Backend {
    /// A compressed pool in front of the bottom tier, within the local limit.
    pub compressed: Option<CompressedTierConfig>,
    pub bottom: Bottom,
}

impl Default for Backend {
    fn default() -> Self {
        Self::auto()
    }
}

/// The names [`Backend`] parses, for help and errors.
pub const NAMES: &str = "auto, remote, compressed, file:PATH, tiered:compressed,file:PATH";

fn bottom(s: &str) -> Option<Bottom> {
    match s {
        "remote" => Some(Bottom::Remote),
        _ => s
            .strip_prefix("file:")
            .filter(|p| !p.is_empty())
            .map(|p| Bottom::File(p.into())),
    }
}

impl std::str::FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let compressed = Some(CompressedTierConfig::default());
        let parsed = match s {
            "" => Some(Self::default()),
            "compressed" => Some(Self {
                compressed,
                bottom: Bottom::Remote,
            }),
            "auto" => Some(Self::auto()),
            _ => match s.strip_prefix("tiered:") {
                Some(tiers) => tiers
                    .strip_prefix("compressed,")
                    .and_then(bottom)
                    .map(|bottom| Self { compressed, bottom }),
                None => bottom(s).map(|bottom| Self {
                    compressed: None,
                    bottom,
                }),
            },
        };
        parsed.ok_or_else(|| format!("unknown backend {s:?}; expected one of: {NAMES}"))
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bottom = match &self.bottom {
            Bottom::Remote => "remote".to_string(),
            Bottom::File(p) => format!("file:{}", p.display()),
        };
        match (&self.compressed, &self.bottom) {
            (None, _) => f.write_str(&bottom),
            (Some(c), Bottom::Remote) if c.tuner.is_some() => f.write_str("auto"),
            (Some(_), Bottom::Remote) => f.write_str("compressed"),
            (Some(_), _) => write!(f, "tiered:compressed,{bottom}"),
        }
    }
}

/// The stores a runtime uses, built from a [`Backend`].
pub struct Built {
    pub store: Arc<dyn RemoteStore>,
    pub slabs: Arc<dyn SlabSource>,
    /// The compressed pool, when there is one.
    pub pool: Option<Arc<CompressedStore>>,
    /// The file, when the bottom tier is one.
    pub file: Option<Arc<FileStore>>,
}

impl Backend {
    /// `auto`: a compressed pool over the memory nodes, on only while the
    /// program stalls less in faults with it than without.
    pub fn auto() -> Self {
        Self {
            compressed: Some(CompressedTierConfig {
                tuner: Some(Default::default()),
                ..Default::default()
            }),
            bottom: Bottom::Remote,
        }
    }

    /// Whether the bottom tier is the rack's memory nodes.
    pub fn needs_rack(&self) -> bool {
        self.bottom == Bottom::Remote
    }

    /// The dirty tracking that suits the backend when none is asked for:
    /// whole pages for a file, which writes whole blocks (a line would cost
    /// a read and a write of its page); else line diffs (Kona: only changed
    /// lines cross the link, and a compressed pool patches the few lines of
    /// a page it keeps rather than take the whole page again).
    pub fn default_dirty(&self) -> DirtyMode {
        match self.bottom {
            Bottom::File(_) => DirtyMode::Page,
            Bottom::Remote => DirtyMode::default(),
        }
    }

    /// Log segments shipped at once ([`crate::Config::shippers`]): two
    /// where a shipper only waits on the wire or the disk, so a segment's
    /// round trip overlaps the next one's; one where a compressed pool
    /// compresses in the shipper, which a second would run beside the
    /// program on its CPUs. `farmem run` of the demo's PageRank over 256
    /// MiB at 64 MiB local, three interleaved pairs on the 2-core VM:
    /// `remote` 2.41-2.64 s with two against 2.91-2.95 s with one (file,
    /// two pairs: 3.74-4.03 s against 4.10-4.30 s). Behind `--delay 20us`,
    /// STREAM (32 MiB at 8 MiB) took 1.03-1.19 s against 1.45-1.71 s:
    /// each acknowledgement is held the delay, and one segment at a time
    /// left faults waiting for frames.
    pub fn shippers(&self) -> usize {
        if self.compressed.is_some() { 1 } else { 2 }
    }

    /// The stores for a runtime of `local_bytes` and a far heap of
    /// `far_bytes`: over `rack` (its store and slab source) when the
    /// bottom tier is remote, else over a file created here.
    pub fn build(
        &self,
        rack: Option<(Arc<dyn RemoteStore>, Arc<dyn SlabSource>)>,
        local_bytes: u64,
        far_bytes: u64,
    ) -> Result<Built, String> {
        let (bottom, slabs, file): (Arc<dyn RemoteStore>, Arc<dyn SlabSource>, _) =
            match (&self.bottom, rack) {
                (Bottom::Remote, Some((store, slabs))) => (store, slabs, None),
                (Bottom::Remote, None) => return Err("the remote backend needs a rack".into()),
                (Bottom::File(path), _) => {
                    let f =
                        Arc::new(FileStore::create(path, far_bytes).map_err(|e| e.to_string())?);
                    (f.clone(), f.clone(), Some(f))
                }
            };
        let pool = self.compressed.map(|cfg| {
            Arc::new(CompressedStore::new(
                bottom.clone(),
                cfg,
                cfg.pool_bytes(local_bytes),
            ))
        });
        let store = match &pool {
            Some(p) => p.clone(),
            None => bottom,
        };
        Ok(Built {
            store,
            slabs,
            pool,
            file,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_are_refused() {
        for name in [
            "auto",
            "remote",
            "compressed",
            "file:/var/tmp/far",
            "tiered:compressed,file:/dev/nvme0n1",
        ] {
            let b: Backend = name.parse().unwrap();
            assert_eq!(b.to_string(), name);
        }
        assert_eq!(
            "tiered:compressed,remote"
                .parse::<Backend>()
                .unwrap()
                .to_string(),
            "compressed"
        );
        for bad in [
            "tape",
            "file:",
            "tiered:file:/x,compressed",
            "tiered:compressed",
        ] {
            let e = bad.parse::<Backend>().unwrap_err();
            assert!(
                e.contains("expected one of: auto, remote, compressed, file:PATH"),
                "{e}"
            );
        }
        let b: Backend = "file:/x".parse().unwrap();
        assert!(!b.needs_rack());
        assert_eq!(b.default_dirty(), DirtyMode::Page);
        assert_eq!(Backend::default().default_dirty(), DirtyMode::Line);
        assert_eq!(Backend::default().to_string(), "auto");
        assert_eq!("".parse::<Backend>().unwrap(), Backend::auto());
        let pool: Backend = "compressed".parse().unwrap();
        assert_eq!(pool.default_dirty(), DirtyMode::Line);
        let remote: Backend = "remote".parse().unwrap();
        // A compressor in the shipper runs alone; a wire or disk overlaps two.
        assert_eq!((pool.shippers(), Backend::auto().shippers()), (1, 1));
        assert_eq!((b.shippers(), remote.shippers()), (2, 2));
    }
}
