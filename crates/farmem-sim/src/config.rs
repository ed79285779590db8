//! Simulator configuration: TOML presets embedded in the binary, a config
//! file, and `key=value` overrides, all checked into one typed [`Config`].

use std::path::Path;

use farmem_codec::CodecKind;
use farmem_core::{ByteSize, CACHE_LINE, PAGE_SIZE, Ratio};
use farmem_policy::cache::{FilterConfig, PolicyConfig, SetRuleKind};
use farmem_policy::daemon::EngineConfig;
use farmem_policy::diffbase::DiffBaseConfig;
use farmem_policy::promote::PromotionConfig;
use farmem_policy::readahead::ReadaheadConfig;
use farmem_policy::watermark::Watermarks;
use serde::{Deserialize, Deserializer, Serialize};

/// A config that could not be read, or is not valid: where it came from
/// (a preset, a file, with the `--set`s applied) and why.
#[derive(Debug, thiserror::Error)]
#[error("config {source_name}: {message}")]
pub struct ConfigError {
    pub source_name: String,
    pub message: String,
}

/// The presets, by name.
pub const PRESETS: &[(&str, &str)] = &[
    ("daemon", include_str!("../presets/daemon.toml")),
    ("unimem", include_str!("../presets/unimem.toml")),
];

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub core: CoreConfig,
    pub l1d: CacheConfig,
    pub l2: CacheConfig,
    pub llc: CacheConfig,
    pub local: LocalConfig,
    pub link: LinkConfig,
    pub remote: RemoteConfig,
    /// DaeMon's engines (schemes `lc`, …); defaulted so older config files
    /// without the section still load.
    #[serde(default)]
    pub daemon: DaemonSimConfig,
    /// UniMem's and Kona's local caches (schemes `kona` … `unimem`).
    #[serde(default)]
    pub unimem: UniMemConfig,
    /// farmem's runtime (scheme `farmem`); defaulted likewise.
    #[serde(default)]
    pub runtime: RuntimeSimConfig,
}

/// Settings of the DaeMon schemes (seed 000).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonSimConfig {
    /// Page codec on the link (§4.4): `lz` (ratio-optimized), `fpc-bdi`,
    /// `fve` (latency-optimized), `none`.
    #[serde(default)]
    pub codec: CodecKind,
    /// The compute engine's sizes, throttle and partition (`bp`, `pq`,
    /// `daemon`); its `selection` is the scheme's, whatever is set here.
    #[serde(default)]
    pub compute: EngineConfig,
    /// What an idle partition slot costs (§4.1): `hold` (default) keeps the
    /// link for the slot's nominal transfer, `lend` lets the other class
    /// use it (docs/daemon.md: the two readings).
    #[serde(default)]
    pub idle_slots: IdleSlots,
    /// The codec streams (§4.4: LZ works on 1 KB at a time, FPC-BDI and
    /// FVE on a line), so only one unit's latency shows at each end;
    /// `false` compresses the whole page before sending it.
    #[serde(default = "yes")]
    pub codec_pipeline: bool,
    /// A what-if for data we do not have: `0` (default) sizes each page
    /// with the codec on its real bytes; a ratio `r >= 1` sends every page
    /// as `4096 / r` bytes, whatever it holds (the codec's latency stays).
    /// `farmem eval daemon` sets the paper's mean LZ ratio (4.47, §6.5) to
    /// show what its graph data's compressibility is worth.
    #[serde(default)]
    pub assume_ratio: f64,
}

/// How dirty data leaves, as `farmem run --dirty`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DirtyUnit {
    /// The lines written (Kona's cache-line log).
    #[default]
    Line,
    /// The whole page once any of it was written (Kona-VM).
    Page,
}

/// The settings of scheme `farmem`, the runtime's own (`[runtime]`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeSimConfig {
    /// Fault-around's largest window in pages (`farmem run
    /// --fault-around`); 0 or 1 turns it off.
    #[serde(default = "default_fault_around")]
    pub fault_around: u32,
    #[serde(default)]
    pub dirty: DirtyUnit,
    /// The run's whole local memory (`farmem run --local-mem`) when it is
    /// more than `local.size`, the cache's room: diff bases are capped at
    /// a share of it. 0: `local.size`.
    #[serde(default)]
    pub limit: ByteSize,
    /// Pages the evictor takes per batch (the runtime's `evict_batch`): a
    /// fault that finds the cache full goes on once the first is out.
    #[serde(default = "default_evict_batch")]
    pub evict_batch: u32,
    /// Most of `limit` diff bases alive at once may take (the runtime's
    /// `DiffBaseConfig::max_share`).
    #[serde(default = "default_diff_share")]
    pub diff_share: Ratio,
}

fn default_diff_share() -> Ratio {
    Ratio::new(DiffBaseConfig::default().max_share).unwrap_or_default()
}

fn default_evict_batch() -> u32 {
    64
}

fn default_fault_around() -> u32 {
    ReadaheadConfig::default().max_blocks
}

impl Default for RuntimeSimConfig {
    fn default() -> Self {
        Self {
            fault_around: default_fault_around(),
            dirty: DirtyUnit::Line,
            limit: ByteSize(0),
            evict_batch: default_evict_batch(),
            diff_share: default_diff_share(),
        }
    }
}

fn yes() -> bool {
    true
}

/// §4.1's "requests may be not issued in all cycles", two readings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IdleSlots {
    /// Each class keeps its share even when it has nothing to send (§3: a
    /// fraction of the bandwidth is "always allocated" to lines).
    #[default]
    Hold,
    /// A class with nothing in service lends its share to the other (an
    /// idle slot costs one controller cycle).
    Lend,
}

impl Default for DaemonSimConfig {
    fn default() -> Self {
        Self {
            codec: CodecKind::Lz,
            compute: EngineConfig::default(),
            idle_slots: IdleSlots::default(),
            codec_pipeline: true,
            assume_ratio: 0.0,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoreConfig {
    /// `ooo` (interval-style out-of-order) or `in-order` (every load stalls).
    pub model: CoreKind,
    pub count: u32,
    pub freq_ghz: f64,
    pub width: f64,
    pub rob: u32,
    pub mlp: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    pub size: ByteSize,
    pub ways: u32,
    /// The sets' replacement rule: `lru` (default), `fifo`, `srrip`, `random`.
    #[serde(default)]
    pub replacement: SetRuleKind,
    #[serde(default)]
    pub latency_cycles: Option<f64>,
    /// Overrides `latency_cycles` (UniMem quotes nanoseconds).
    #[serde(default)]
    pub latency_ns: Option<f64>,
}

/// A size given directly or as a share of the workload's footprint.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum SizeSpec {
    Bytes(ByteSize),
    OfFootprint(f64),
}

impl SizeSpec {
    /// Bytes for a workload of `footprint` bytes.
    pub fn resolve(self, footprint: u64) -> u64 {
        match self {
            SizeSpec::Bytes(b) => b.0,
            SizeSpec::OfFootprint(r) => (footprint as f64 * r) as u64,
        }
    }
}

impl<'de> Deserialize<'de> for SizeSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Float(f64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(SizeSpec::Bytes(ByteSize(n))),
            Raw::Float(f) => Ratio::new(f)
                .map(|r| SizeSpec::OfFootprint(r.get()))
                .map_err(serde::de::Error::custom),
            Raw::Text(t) => {
                if t.contains('%') || t.contains('/') {
                    t.parse::<Ratio>()
                        .map(|r| SizeSpec::OfFootprint(r.get()))
                        .map_err(serde::de::Error::custom)
                } else {
                    t.parse::<ByteSize>()
                        .map(SizeSpec::Bytes)
                        .map_err(serde::de::Error::custom)
                }
            }
        }
    }
}

/// A positive factor: `0.25`, `1/4` or `25%`.
fn factor<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Num(f64),
        Text(String),
    }
    let v = match Raw::deserialize(d)? {
        Raw::Num(n) => n,
        Raw::Text(t) => {
            let t = t.trim();
            if let Some((n, dd)) = t.split_once('/') {
                let n: f64 = n.trim().parse().map_err(serde::de::Error::custom)?;
                let dd: f64 = dd.trim().parse().map_err(serde::de::Error::custom)?;
                n / dd
            } else if let Some(p) = t.strip_suffix('%') {
                p.trim().parse::<f64>().map_err(serde::de::Error::custom)? / 100.0
            } else {
                t.parse().map_err(serde::de::Error::custom)?
            }
        }
    };
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(serde::de::Error::custom(format!(
            "`{v}` is not a positive factor"
        )))
    }
}

/// Keys a preset may leave out (they have defaults) that `--set` may
/// still set; any other key must be in the preset, so a misspelt one is
/// an error rather than ignored.
pub const OPTIONAL_KEYS: &[&str] = &[
    "local.watermarks",
    "runtime.fault_around",
    "runtime.dirty",
    "runtime.limit",
    "runtime.evict_batch",
    "runtime.diff_share",
];

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalConfig {
    pub size: SizeSpec,
    pub policy: PolicyConfig,
    /// When and how far to evict, as `farmem run`'s runtime does
    /// (`[local.watermarks] high = 0.99, low = 0.97`: its defaults); none,
    /// one victim per page installed, as the papers' hardware caches do.
    #[serde(default)]
    pub watermarks: Option<Watermarks>,
    pub latency_ns: f64,
    pub bw_gbps: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    pub model: LinkModel,
    pub base_gbps: f64,
    #[serde(deserialize_with = "factor")]
    pub bw_factor: f64,
    pub switch_ns: f64,
    pub header_bytes: u32,
    pub interval_ns: f64,
    /// Other compute nodes' traffic on the link (DaeMon §6.6): this share
    /// of its bandwidth is taken in every other `background_period_ns`
    /// (the first period is quiet). 0 = none.
    #[serde(default)]
    pub background: f64,
    #[serde(default = "default_background_period")]
    pub background_period_ns: f64,
}

fn default_background_period() -> f64 {
    1_000_000.0
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteConfig {
    pub model: RemoteModel,
    pub nodes: u32,
    pub placement: Placement,
    pub latency_ns: f64,
    pub bw_gbps: f64,
    pub translation: bool,
    pub seed: u64,
}

impl CacheConfig {
    pub fn latency_ns(&self, freq_ghz: f64) -> f64 {
        self.latency_ns
            .unwrap_or_else(|| self.latency_cycles.unwrap_or(0.0) / freq_ghz)
    }
}

/// A config under construction: a TOML tree that overrides edit before it
/// is checked into a [`Config`].
#[derive(Debug, Clone)]
pub struct ConfigBuilder {
    source: String,
    tree: toml::Table,
}

impl ConfigBuilder {
    pub fn preset(name: &str) -> Result<Self, ConfigError> {
        let text = PRESETS
            .iter()
            .find(|p| p.0 == name)
            .map(|p| p.1)
            .ok_or_else(|| ConfigError {
                source_name: "--preset".into(),
                message: format!(
                    "unknown preset `{name}` (known: {})",
                    PRESETS.iter().map(|p| p.0).collect::<Vec<_>>().join(", ")
                ),
            })?;
        Self::parse(&format!("preset `{name}`"), text)
    }

    pub fn file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            source_name: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::parse(&path.display().to_string(), &text)
    }

    pub fn parse(source: &str, text: &str) -> Result<Self, ConfigError> {
        let tree: toml::Table = toml::from_str(text).map_err(|e| ConfigError {
            source_name: source.to_string(),
            message: e.to_string(),
        })?;
        Ok(Self {
            source: source.to_string(),
            tree,
        })
    }

    /// Layers `other` over this config (a file over the preset it starts from).
    pub fn merge(&mut self, other: &ConfigBuilder) {
        fn merge(into: &mut toml::Table, from: &toml::Table) {
            for (k, v) in from {
                match (into.get_mut(k), v) {
                    (Some(toml::Value::Table(a)), toml::Value::Table(b)) => merge(a, b),
                    _ => {
                        into.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        merge(&mut self.tree, &other.tree);
        self.source = format!("{} + {}", self.source, other.source);
    }

    /// Sets `key` (dotted, `link.bw_factor`; a key the preset lacks only
    /// if it is one of [`OPTIONAL_KEYS`]) to `value`, read as a TOML
    /// value when it is one (`0.25`, `true`, `"lru"`) and as a string otherwise.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let bad = |message: String| ConfigError {
            source_name: format!("--set {key}={value}"),
            message,
        };
        let parsed = toml::from_str::<toml::Table>(&format!("v = {value}"))
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(value.to_string()));
        let parts: Vec<&str> = key.split('.').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return Err(bad("empty key segment".into()));
        }
        let optional = OPTIONAL_KEYS.contains(&key);
        let mut table = &mut self.tree;
        for p in &parts[..parts.len() - 1] {
            if optional && !table.contains_key(*p) {
                // A section of defaults the preset leaves out.
                table.insert(p.to_string(), toml::Value::Table(toml::Table::new()));
            }
            let entry = table
                .get_mut(*p)
                .ok_or_else(|| bad(format!("no section `{p}`")))?;
            table = entry
                .as_table_mut()
                .ok_or_else(|| bad(format!("`{p}` is not a section")))?;
        }
        let last = parts[parts.len() - 1];
        if !table.contains_key(last)
            && !matches!(last, "latency_ns" | "latency_cycles")
            && !optional
        {
            return Err(bad(format!("no key `{key}`")));
        }
        if last == "latency_ns" {
            table.remove("latency_cycles");
        } else if last == "latency_cycles" {
            table.remove("latency_ns");
        }
        table.insert(last.to_string(), parsed);
        // Checked when the config is built: its error then names the
        // --set along with the preset it changed.
        self.source = format!("{} with --set {key}={value}", self.source);
        Ok(())
    }

    pub fn build(&self) -> Result<Config, ConfigError> {
        let cfg: Config =
            toml::Value::Table(self.tree.clone())
                .try_into()
                .map_err(|e: toml::de::Error| ConfigError {
                    source_name: self.source.clone(),
                    message: e.to_string(),
                })?;
        cfg.validate().map_err(|message| ConfigError {
            source_name: self.source.clone(),
            message,
        })?;
        Ok(cfg)
    }
}

impl Config {
    pub fn preset(name: &str) -> Result<Self, ConfigError> {
        ConfigBuilder::preset(name)?.build()
    }

    fn validate(&self) -> Result<(), String> {
        let c = &self.core;
        if c.count == 0 || c.count > 1024 {
            return Err(format!("core.count must be 1..=1024, got {}", c.count));
        }
        if !(c.freq_ghz > 0.0 && c.width > 0.0) {
            return Err("core.freq_ghz and core.width must be positive".into());
        }
        if c.rob == 0 || c.rob > 1 << 20 || c.mlp == 0 || c.mlp > 4096 {
            return Err(format!(
                "core.rob must be 1..=1048576 and core.mlp 1..=4096, got {} and {}",
                c.rob, c.mlp
            ));
        }
        for (name, cache) in [("l1d", &self.l1d), ("l2", &self.l2), ("llc", &self.llc)] {
            if cache.ways == 0 || cache.size.0 < 64 * cache.ways as u64 {
                return Err(format!(
                    "{name}: size {} cannot hold {} ways of 64 B lines",
                    cache.size, cache.ways
                ));
            }
            if cache.size.0 > 1 << 30 {
                return Err(format!("{name}: size {} is above 1GiB", cache.size));
            }
            let lat = cache.latency_ns(c.freq_ghz);
            if !(lat.is_finite() && lat >= 0.0) {
                return Err(format!("{name}: latency must be a non-negative number"));
            }
        }
        let pos = |v: f64, what: &str| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(format!("{what} must be positive, got {v}"))
            }
        };
        let nonneg = |v: f64, what: &str| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(format!("{what} must be non-negative, got {v}"))
            }
        };
        pos(self.local.bw_gbps, "local.bw_gbps")?;
        nonneg(self.local.latency_ns, "local.latency_ns")?;
        pos(self.link.base_gbps, "link.base_gbps")?;
        nonneg(self.link.switch_ns, "link.switch_ns")?;
        if !(0.0..0.95).contains(&self.link.background) {
            return Err(format!(
                "link.background must be in [0, 0.95), got {}",
                self.link.background
            ));
        }
        pos(self.link.background_period_ns, "link.background_period_ns")?;
        if !(self.link.interval_ns >= 1000.0 && self.link.interval_ns.is_finite()) {
            return Err(format!(
                "link.interval_ns must be at least 1000, got {}",
                self.link.interval_ns
            ));
        }
        pos(self.remote.bw_gbps, "remote.bw_gbps")?;
        nonneg(self.remote.latency_ns, "remote.latency_ns")?;
        if self.remote.nodes == 0 || self.remote.nodes > 4096 {
            return Err(format!(
                "remote.nodes must be 1..=4096, got {}",
                self.remote.nodes
            ));
        }
        if let Some(w) = &self.local.watermarks {
            w.validate().map_err(|e| format!("local.watermarks: {e}"))?;
        }
        let ar = self.daemon.assume_ratio;
        if !(ar == 0.0 || (ar.is_finite() && ar >= 1.0)) {
            return Err(format!(
                "daemon.assume_ratio must be 0 (measure each page) or at least 1, got {ar}"
            ));
        }
        let dc = &self.daemon.compute;
        dc.validate().map_err(|e| format!("daemon.compute: {e}"))?;
        // The engine's sub-blocks are the simulator's lines and pages.
        if dc.partition.line_bytes != farmem_core::CACHE_LINE
            || dc.partition.page_bytes != farmem_core::PAGE_SIZE
        {
            return Err(format!(
                "daemon.compute.partition: the simulator moves 64 B lines and 4 KiB pages, got {} and {}",
                dc.partition.line_bytes, dc.partition.page_bytes
            ));
        }
        self.unimem.validate()?;
        Ok(())
    }
}

/// Expands sweep values: `0.5,0.25` → two values; quoted strings stay whole.
pub fn sweep_values(value: &str) -> Vec<String> {
    if value.starts_with('"') || value.starts_with('[') {
        return vec![value.to_string()];
    }
    value.split(',').map(|s| s.trim().to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_build() {
        for (name, _) in PRESETS {
            let c = Config::preset(name).unwrap();
            assert!(c.llc.size.0 >= 4 << 20);
        }
        let d = Config::preset("daemon").unwrap();
        assert_eq!(d.core.rob, 224);
        assert_eq!(d.local.size, SizeSpec::OfFootprint(0.2));
        assert_eq!(d.link.bw_factor, 0.25);
    }

    #[test]
    fn overrides_are_typed_and_checked() {
        let mut b = ConfigBuilder::preset("daemon").unwrap();
        b.set("link.bw_factor", "1/8").unwrap();
        b.set("local.size", "64MiB").unwrap();
        b.set("local.policy", "fifo").unwrap();
        b.set("llc.latency_ns", "10").unwrap();
        let c = b.build().unwrap();
        assert_eq!(c.link.bw_factor, 0.125);
        assert_eq!(c.local.size, SizeSpec::Bytes(ByteSize(64 << 20)));
        assert_eq!(c.llc.latency_ns(3.6), 10.0);
        assert!(b.set("link.bandwidth", "1").is_err());
        assert!(b.set("nosuch.x", "1").is_err());
        let mut b2 = b.clone();
        b2.set("local.policy", "mru").unwrap();
        let e = b2.build().unwrap_err().to_string();
        assert!(e.contains("mru"), "{e}");
        let mut b3 = b.clone();
        b3.set("link.bw_factor", "-1").unwrap();
        assert!(b3.build().is_err());
        let mut b4 = b;
        b4.set("core.mlp", "lots").unwrap();
        let e = b4.build().unwrap_err().to_string();
        assert!(e.contains("--set core.mlp=lots"), "{e}");
    }

    #[test]
    fn codec_is_settable_and_checked() {
        let mut b = ConfigBuilder::preset("daemon").unwrap();
        assert_eq!(b.build().unwrap().daemon.codec, CodecKind::Lz);
        b.set("daemon.codec", "fpc-bdi").unwrap();
        assert_eq!(b.build().unwrap().daemon.codec, CodecKind::FpcBdi);
        b.set("daemon.codec", "zstd").unwrap();
        assert!(b.build().is_err());
        // A config without the section gets the default codec.
        let mut t = ConfigBuilder::preset("unimem").unwrap();
        t.tree.remove("daemon");
        assert_eq!(t.build().unwrap().daemon.codec, CodecKind::Lz);
        // Engine knobs.
        let mut e = ConfigBuilder::preset("daemon").unwrap();
        e.set("daemon.compute.partition.ratio", "50%").unwrap();
        e.set("daemon.compute.dirty_throttle", "4").unwrap();
        let c = e.build().unwrap();
        assert_eq!(c.daemon.compute.partition.ratio.get(), 0.5);
        assert_eq!(c.daemon.compute.dirty_throttle, 4);
        e.set("daemon.compute.page_queue", "0").unwrap();
        assert!(e.build().is_err());
    }

    #[test]
    fn sweeps_split_on_commas() {
        assert_eq!(
            sweep_values("0.5,0.25, 0.125"),
            vec!["0.5", "0.25", "0.125"]
        );
        assert_eq!(sweep_values("lru"), vec!["lru"]);
    }
}

/// `core.model`: the core models by name (the core module builds them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CoreKind {
    /// Interval-style out-of-order core (`OooCore`).
    #[default]
    Ooo,
    /// In-order core that waits for every load (`InOrderCore`).
    InOrder,
}

/// `link.model`: how a link carries transfers (the components module
/// builds it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkModel {
    /// FIFO serialization at the link's bandwidth plus a switch latency
    /// per traversal (`FifoLink`).
    #[default]
    Fifo,
}

impl LinkModel {
    pub const NAMES: &'static [&'static str] = &["fifo"];
}

/// `remote.model`: the memory node's device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RemoteModel {
    /// Fixed latency plus bus serialization (`Dram`).
    #[default]
    Dram,
}

impl RemoteModel {
    pub const NAMES: &'static [&'static str] = &["dram"];
}

/// `remote.placement`: which memory node a page lives on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// Pages in first-touch order, node after node.
    #[default]
    RoundRobin,
    /// Each page on a node drawn from `remote.seed`.
    Random,
}

impl Placement {
    pub const NAMES: &'static [&'static str] = &["round-robin", "random"];
}

/// Settings of the UniMem schemes (`--set unimem.KEY=V`); defaults are
/// Table 1 and §4.1.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UniMemConfig {
    /// Filter-Cache block size, a power of two from 64 to 4096 (paper: 512).
    pub block_bytes: u64,
    /// Share of local memory that is host memory under `unimem` (paper: 30%).
    pub host_share: farmem_core::Ratio,
    /// Host memory access (paper: 80 ns). Device memory is `local.latency_ns`.
    pub host_ns: f64,
    /// Kona's fake-physical address translation, per device access (paper: 14 ns).
    pub translation_ns: f64,
    /// Remote fetch of a block of at most 512 B (paper: 2 µs, also for 128
    /// and 256 B, §4.5), of 2 KiB (3 µs) and of 4 KiB (4 µs); sizes between
    /// are interpolated on log2 of the size.
    pub fetch_512_ns: f64,
    pub fetch_2k_ns: f64,
    pub fetch_4k_ns: f64,
    /// Promoting a full batch of `promotion.batch_pages` pages (paper: 2 ms).
    pub promote_batch_ns: f64,
    pub filter: FilterConfig,
    /// Hotness scores, thresholds and batch size; `blocks_per_page` is
    /// always `4096 / block_bytes`.
    pub promotion: PromotionConfig,
}

impl Default for UniMemConfig {
    fn default() -> Self {
        Self {
            block_bytes: 512,
            host_share: farmem_core::Ratio::new(0.3).unwrap_or_else(|_| unreachable!()),
            host_ns: 80.0,
            translation_ns: 14.0,
            fetch_512_ns: 2000.0,
            fetch_2k_ns: 3000.0,
            fetch_4k_ns: 4000.0,
            promote_batch_ns: 2e6,
            filter: FilterConfig::default(),
            promotion: PromotionConfig::default(),
        }
    }
}

impl UniMemConfig {
    pub fn validate(&self) -> Result<(), String> {
        let b = self.block_bytes;
        if !(b.is_power_of_two() && (CACHE_LINE..=PAGE_SIZE).contains(&b)) {
            return Err(format!(
                "unimem.block_bytes must be a power of two from 64 to 4096, got {b}"
            ));
        }
        for (k, v) in [
            ("host_ns", self.host_ns),
            ("translation_ns", self.translation_ns),
            ("fetch_512_ns", self.fetch_512_ns),
            ("fetch_2k_ns", self.fetch_2k_ns),
            ("fetch_4k_ns", self.fetch_4k_ns),
            ("promote_batch_ns", self.promote_batch_ns),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("unimem.{k} must be a non-negative number, got {v}"));
            }
        }
        // Capacity is checked when the cache is built; any capacity works here.
        self.filter
            .validate(usize::MAX)
            .map_err(|e| format!("unimem.filter: {e}"))?;
        self.promotion()
            .validate()
            .map_err(|e| format!("unimem.promotion: {e}"))?;
        Ok(())
    }

    /// The promotion settings with the page split into this block size.
    pub fn promotion(&self) -> PromotionConfig {
        PromotionConfig {
            blocks_per_page: (PAGE_SIZE / self.block_bytes.clamp(1, PAGE_SIZE)) as u32,
            ..self.promotion
        }
    }

    /// Remote fetch latency of a `bytes` block.
    pub fn fetch_ns(&self, bytes: u64) -> f64 {
        let x = (bytes.max(1) as f64).log2();
        // (log2 size, ns) knots: 512 B, 2 KiB, 4 KiB; flat below 512 B,
        // extended along the last segment above 4 KiB.
        let knots = [
            (9.0, self.fetch_512_ns),
            (11.0, self.fetch_2k_ns),
            (12.0, self.fetch_4k_ns),
        ];
        if x <= knots[0].0 {
            return knots[0].1;
        }
        let seg = if x <= knots[1].0 {
            (knots[0], knots[1])
        } else {
            (knots[1], knots[2])
        };
        let ((x0, y0), (x1, y1)) = seg;
        y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    }
}
