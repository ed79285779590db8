//! UMap's knobs (`UMAP_*` variables and `umapcfg_set_*`) and what each
//! becomes in farmem's runtime [`Config`].
//!
//! | UMap                               | farmem                                   |
//! |------------------------------------|------------------------------------------|
//! | `UMAP_BUFSIZE` (pages)             | [`Config::local_bytes`]                  |
//! | `UMAP_PAGE_FILLERS`                | [`Config::handlers`]: threads that fill  |
//! | `UMAP_EVICT_HIGH/LOW_WATER_THRESHOLD` (%) | [`Config::high_watermark`], `low_watermark` |
//! | `UMAP_READ_AHEAD` (pages)          | [`Config::fault_around`]                 |
//! | `UMAP_PAGESIZE`                    | 4096 only: farmem moves 4 KiB pages      |
//! | `UMAP_PAGE_EVICTORS`, flushers     | 1: one evictor thread ships every region |
//! | `UMAP_MAX_FAULT_EVENTS`            | 1: a handler reads one fault at a time   |
//!
//! The last three are knobs of UMap's own thread structure; a value farmem
//! cannot honour is reported once and the getter returns what is in effect.

use farmem_runtime::{Config, MAX_FAULT_AROUND};

const PAGE: u64 = farmem_core::PAGE_SIZE;

/// What the next buffer (the runtime started by the first `umap`) will use.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub buf_pages: u64,
    pub fillers: u64,
    pub read_ahead: u64,
    pub high_pct: i32,
    pub low_pct: i32,
}

/// A knob fixed by farmem's design: its value, and why.
pub struct Fixed {
    pub var: &'static str,
    pub value: u64,
    pub why: &'static str,
}

pub const PAGE_SIZE: Fixed = Fixed {
    var: "UMAP_PAGESIZE",
    value: PAGE,
    why: "farmem moves 4 KiB pages (UMAP_READ_AHEAD sets how many one fault brings)",
};
pub const EVICTORS: Fixed = Fixed {
    var: "UMAP_PAGE_EVICTORS",
    value: 1,
    why: "one evictor thread writes back every region's pages",
};
pub const FAULT_EVENTS: Fixed = Fixed {
    var: "UMAP_MAX_FAULT_EVENTS",
    value: 1,
    why: "each filler reads one fault at a time",
};

impl Settings {
    /// farmem's defaults, but for the buffer: UMap's, 80% of the memory
    /// available now, so a program that sets nothing pages only when it
    /// must.
    pub fn defaults(available_bytes: u64) -> Self {
        let cfg = Config::default();
        Self {
            buf_pages: (available_bytes / 5 * 4 / PAGE).max(min_buf_pages(cfg.handlers as u64)),
            fillers: cfg.handlers as u64,
            read_ahead: u64::from(cfg.fault_around.max_blocks),
            high_pct: (cfg.high_watermark * 100.0).round() as i32,
            low_pct: (cfg.low_watermark * 100.0).round() as i32,
        }
    }

    /// The defaults with the `UMAP_*` variables `get` returns applied;
    /// warnings for knobs farmem fixes. A value that does not parse is an
    /// error naming the variable.
    pub fn from_env(
        available_bytes: u64,
        get: impl Fn(&str) -> Option<String>,
        warn: &mut dyn FnMut(String),
    ) -> Result<Self, String> {
        let mut s = Self::defaults(available_bytes);
        let num = |var: &str| -> Result<Option<u64>, String> {
            get(var)
                .map(|v| {
                    v.trim()
                        .parse::<u64>()
                        .map_err(|_| format!("{var}={v}: not a whole number"))
                })
                .transpose()
        };
        if let Some(v) = num("UMAP_BUFSIZE")? {
            s.buf_pages = v;
        }
        if let Some(v) = num("UMAP_PAGE_FILLERS")? {
            s.fillers = v;
        }
        if let Some(v) = num("UMAP_READ_AHEAD")? {
            s.read_ahead = v;
        }
        if let Some(v) = num("UMAP_EVICT_HIGH_WATER_THRESHOLD")? {
            s.high_pct = i32::try_from(v).unwrap_or(i32::MAX);
        }
        if let Some(v) = num("UMAP_EVICT_LOW_WATER_THRESHOLD")? {
            s.low_pct = i32::try_from(v).unwrap_or(i32::MAX);
        }
        for fixed in [&PAGE_SIZE, &EVICTORS, &FAULT_EVENTS] {
            if let Some(v) = num(fixed.var)?
                && v != fixed.value
            {
                warn(fixed.refusal(v));
            }
        }
        Ok(s)
    }

    /// The runtime configuration for mapped files: farmem's defaults with
    /// these settings applied.
    pub fn config(&self) -> Result<Config, String> {
        let mut cfg = Config {
            // A file's pages are all on the store from the start: no slab
            // is ever taken, so none is allocated ahead.
            zeroed_slabs: true,
            ..Config::default()
        };
        self.apply(&mut cfg)?;
        Ok(cfg)
    }

    /// Sets the buffer's size, fillers, watermarks and read-ahead in
    /// `cfg`, or says which setting cannot be.
    pub fn apply(&self, cfg: &mut Config) -> Result<(), String> {
        if self.fillers == 0 || self.fillers > 64 {
            return Err(format!(
                "UMAP_PAGE_FILLERS {}: between 1 and 64 threads",
                self.fillers
            ));
        }
        cfg.handlers = self.fillers as usize;
        let min = min_buf_pages(self.fillers);
        if self.buf_pages < min {
            return Err(format!(
                "UMAP_BUFSIZE {} pages: the buffer needs at least {min} (room for every filler's page and an eviction batch)",
                self.buf_pages
            ));
        }
        cfg.local_bytes = self.buf_pages.saturating_mul(PAGE);
        if !(0 < self.low_pct && self.low_pct < self.high_pct && self.high_pct <= 100) {
            return Err(format!(
                "UMAP_EVICT_LOW_WATER_THRESHOLD {} and UMAP_EVICT_HIGH_WATER_THRESHOLD {}: percentages with 0 < low < high <= 100",
                self.low_pct, self.high_pct
            ));
        }
        cfg.high_watermark = f64::from(self.high_pct) / 100.0;
        cfg.low_watermark = f64::from(self.low_pct) / 100.0;
        if self.read_ahead > u64::from(MAX_FAULT_AROUND) {
            return Err(format!(
                "UMAP_READ_AHEAD {}: at most {MAX_FAULT_AROUND} pages",
                self.read_ahead
            ));
        }
        cfg.fault_around.max_blocks = self.read_ahead as u32;
        cfg.validate().map_err(|e| e.to_string())
    }
}

impl Fixed {
    pub fn refusal(&self, asked: u64) -> String {
        format!(
            "{} {asked} ignored: farmem uses {} ({})",
            self.var, self.value, self.why
        )
    }
}

fn min_buf_pages(fillers: u64) -> u64 {
    farmem_runtime::config::MIN_LOCAL_PAGES + fillers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn variables_become_the_runtime_config() {
        let mut warnings = Vec::new();
        let s = Settings::from_env(
            1 << 30,
            env(&[
                ("UMAP_BUFSIZE", "100"),
                ("UMAP_PAGE_FILLERS", "3"),
                ("UMAP_READ_AHEAD", "4"),
                ("UMAP_EVICT_HIGH_WATER_THRESHOLD", "90"),
                ("UMAP_EVICT_LOW_WATER_THRESHOLD", "70"),
            ]),
            &mut |w| warnings.push(w),
        )
        .unwrap();
        let cfg = s.config().unwrap();
        assert_eq!(cfg.local_bytes, 100 * 4096);
        assert_eq!(cfg.handlers, 3);
        assert_eq!(cfg.fault_around.max_blocks, 4);
        assert_eq!((cfg.high_watermark, cfg.low_watermark), (0.9, 0.7));
        assert!(warnings.is_empty());
    }

    #[test]
    fn the_default_buffer_is_umaps_eighty_percent_of_what_is_available() {
        let s = Settings::defaults(1000 * 4096 * 5);
        assert_eq!(s.buf_pages, 4000);
        s.config().unwrap();
    }

    #[test]
    fn bad_values_are_named_and_fixed_knobs_warned() {
        let err =
            Settings::from_env(1 << 30, env(&[("UMAP_BUFSIZE", "lots")]), &mut |_| {}).unwrap_err();
        assert!(err.contains("UMAP_BUFSIZE=lots"), "{err}");
        let mut warnings = Vec::new();
        let s = Settings::from_env(
            1 << 30,
            env(&[("UMAP_PAGESIZE", "65536"), ("UMAP_PAGE_EVICTORS", "1")]),
            &mut |w| warnings.push(w),
        )
        .unwrap();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("UMAP_PAGESIZE 65536 ignored"));
        let small = Settings {
            buf_pages: 3,
            ..s.clone()
        };
        assert!(small.config().unwrap_err().contains("UMAP_BUFSIZE 3"));
        let upside_down = Settings {
            high_pct: 50,
            low_pct: 60,
            ..s.clone()
        };
        assert!(upside_down.config().unwrap_err().contains("0 < low < high"));
        let no_fillers = Settings { fillers: 0, ..s };
        assert!(no_fillers.config().is_err());
    }
}
