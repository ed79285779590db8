//! The environment `farmem run` hands the LD_PRELOAD shim
//! (`farmem-preload`): every `FARMEM_*` variable's name and default, once.
//! `farmem run` writes a [`PreloadEnv`] into the program's environment
//! ([`PreloadEnv::vars`]); the shim reads it back ([`PreloadEnv::read`]),
//! through a getter of its own (it reads the C environment, inside a
//! program's allocator).
//!
//! Here rather than in the shim's crate: a program linking that crate
//! would get its `malloc`.

use std::ffi::{CStr, OsString};
use std::path::PathBuf;

use farmem_net::Redundancy;
use farmem_policy::cache::PolicyConfig;
use farmem_policy::delay::DelayModel;

use crate::backend::Backend;
use crate::config::{Config, DirtyMode, Engine, FaultPath, WaitMode};

/// Controller address (required unless the backend needs no rack:
/// without it, or such a backend, the shim stays local).
pub const CONTROLLER: &CStr = c"FARMEM_CONTROLLER";
/// Local cache for far pages, a byte size.
pub const LOCAL_MEM: &CStr = c"FARMEM_LOCAL_MEM";
/// Size of the far heap, a byte size.
pub const FAR_MEM: &CStr = c"FARMEM_FAR_MEM";
/// Smallest allocation placed far, a byte size.
pub const THRESHOLD: &CStr = c"FARMEM_THRESHOLD";
/// Where evicted pages go ([`Backend`]: `remote`, `compressed`, `file:PATH`, ...).
pub const BACKEND: &CStr = c"FARMEM_BACKEND";
/// `line` or `page`; unset: the backend's ([`Backend::default_dirty`]).
pub const DIRTY: &CStr = c"FARMEM_DIRTY";
/// `thread` or `signal`.
pub const FAULT_PATH: &CStr = c"FARMEM_FAULT_PATH";
/// What a remote fault fetches ([`Engine`]): `page` or `daemon`.
pub const ENGINE: &CStr = c"FARMEM_ENGINE";
/// How the fault handlers wait for the next fault ([`WaitMode`]).
pub const FAULT_WAIT: &CStr = c"FARMEM_FAULT_WAIT";
/// Most pages a fault installs around itself.
pub const FAULT_AROUND: &CStr = c"FARMEM_FAULT_AROUND";
/// Replacement policy name.
pub const POLICY: &CStr = c"FARMEM_POLICY";
/// Share of the local memory kept on probation before eviction
/// ([`Config::park_share`]).
pub const PROBATION: &CStr = c"FARMEM_PROBATION";
/// File that gets one JSON line per process that used far memory.
pub const STATS_JSON: &CStr = c"FARMEM_STATS_JSON";
/// Directory where each process keeps its live statistics, rewritten
/// every second, for `farmem run --metrics` to serve.
pub const METRICS_DIR: &CStr = c"FARMEM_METRICS_DIR";
/// Client name shown to the controller (the process is appended).
pub const NAME: &CStr = c"FARMEM_NAME";
/// File holding the cluster token.
pub const TOKEN_FILE: &CStr = c"FARMEM_TOKEN_FILE";
/// `fail` or `local`: what happens when the runtime cannot start.
pub const FALLBACK: &CStr = c"FARMEM_FALLBACK";
/// Copies of every far byte.
pub const REPLICAS: &CStr = c"FARMEM_REPLICAS";
/// Erasure coding or striping instead of copies, `rs:K+M` or `stripe:K`.
pub const REDUNDANCY: &CStr = c"FARMEM_REDUNDANCY";
/// A delay model for the program's link to the rack: one gate every
/// request to a memory node passes (ThymesisFlow's injector).
pub const DELAY: &CStr = c"FARMEM_DELAY";
/// DaeMon's partitioning at the `FARMEM_DELAY` gate: the share of the
/// link demand reads keep while write-backs also wait (a ratio: `25%`).
pub const DELAY_PARTITION: &CStr = c"FARMEM_DELAY_PARTITION";
/// Delay models for each memory node's path, `;`-separated: a gate per
/// node, node `id` taking model `id % count`.
pub const PATH_DELAY: &CStr = c"FARMEM_PATH_DELAY";
/// A shared link's name (`/dev/shm/farmem-link-NAME`, set up by `farmem
/// run --link`): its gate, shared with every process on it, is the
/// program's link to the rack; its delay is the link's, set live.
pub const LINK: &CStr = c"FARMEM_LINK";
/// Link compression of pages and clusters to and from memory nodes
/// (DaeMon §4.4): `off`, `auto`, `lz`, `fpc-bdi` or `fve`; unset: off.
pub const LINK_COMPRESSION: &CStr = c"FARMEM_LINK_COMPRESSION";
/// How long the controller keeps a silent process's remote memory, in ms.
pub const LEASE_MS: &CStr = c"FARMEM_LEASE_MS";
/// A `tracing` filter for what the runtime reports on stderr (default
/// `warn`: retries, memory nodes dropped, copies made again; `off`: nothing);
/// the user's, never set by `farmem run`.
pub const LOG: &CStr = c"FARMEM_LOG";

pub const DEFAULT_LOCAL_BYTES: u64 = 256 << 20;
pub const DEFAULT_FAR_BYTES: u64 = 8 << 30;
/// Far memory a process under the shim asks the rack for at a time.
pub const SLAB_BATCH: u64 = 256 << 20;
pub const DEFAULT_THRESHOLD: u64 = 1 << 20;
pub const DEFAULT_NAME: &str = "farmem-run";
pub const DEFAULT_LEASE_MS: u64 = 60_000;

/// Exit status of a process whose far memory could not be had, under
/// `FARMEM_FALLBACK=fail` (the default): 70, `EX_SOFTWARE` of sysexits.h.
/// `farmem run` exits with it too when it cannot reach far memory.
pub const NO_FAR_MEMORY_EXIT: i32 = 70;

/// The variable's name as a string.
pub fn key(var: &CStr) -> &str {
    var.to_str().unwrap_or_default()
}

/// What happens when the runtime cannot start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fallback {
    /// The process stops with [`NO_FAR_MEMORY_EXIT`] before it runs.
    #[default]
    Fail,
    /// The process runs on local memory.
    Local,
}

impl std::str::FromStr for Fallback {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "" | "fail" => Ok(Self::Fail),
            "local" => Ok(Self::Local),
            other => Err(format!(
                "{}={other:?}: expected `local` or `fail`",
                key(FALLBACK)
            )),
        }
    }
}

impl std::fmt::Display for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Fail => "fail",
            Self::Local => "local",
        })
    }
}

/// Everything `farmem run` tells the shim of one program.
#[derive(Debug, Clone, PartialEq)]
pub struct PreloadEnv {
    /// None only for a backend that needs no rack (`file:PATH`).
    pub controller: Option<String>,
    pub local_bytes: u64,
    pub far_bytes: u64,
    pub threshold: u64,
    pub backend: Backend,
    pub dirty: DirtyMode,
    pub fault_path: FaultPath,
    pub engine: Engine,
    pub fault_wait: WaitMode,
    pub fault_around: u32,
    /// Checked by [`PreloadEnv::read`]; None: the runtime's default.
    pub policy: Option<String>,
    /// [`Config::park_share`]; None: the runtime's default.
    pub probation: Option<f64>,
    pub stats_json: Option<PathBuf>,
    pub metrics_dir: Option<PathBuf>,
    /// The client name's prefix.
    pub name: String,
    pub token_file: Option<PathBuf>,
    pub fallback: Fallback,
    /// None: the rack client's default.
    pub replicas: Option<u8>,
    pub redundancy: Option<Redundancy>,
    /// Injected delay on the whole link, and on each memory node's path.
    pub delay: Option<DelayModel>,
    /// `delay`'s gate partitioned between demand and bulk: demand's share.
    pub delay_partition: Option<farmem_core::Ratio>,
    /// One per memory node, by node id modulo their number.
    pub path_delays: Vec<DelayModel>,
    /// A shared link instead of `delay` (see [`LINK`]).
    pub link: Option<String>,
    /// See [`LINK_COMPRESSION`].
    pub link_compression: farmem_wire::LinkMode,
    /// 0: no lease.
    pub lease_ms: u64,
}

/// Reads one variable; None when it is unset.
pub type Getter<'a> = &'a dyn Fn(&CStr) -> Option<String>;

/// A variable that is set and not empty.
fn non_empty(get: Getter<'_>, var: &CStr) -> Option<String> {
    get(var).filter(|v| !v.is_empty())
}

/// A byte size (`256MiB`, `1048576`), or `default` when unset.
fn size(get: Getter<'_>, var: &CStr, default: u64) -> Result<u64, String> {
    match get(var) {
        None => Ok(default),
        Some(s) => s
            .trim()
            .parse::<farmem_core::ByteSize>()
            .map(|b| b.bytes())
            .map_err(|e| format!("{}={s:?}: {e}", key(var))),
    }
}

/// `FARMEM_CONTROLLER`, if set: whether far memory was asked for at all.
pub fn controller(get: Getter<'_>) -> Option<String> {
    non_empty(get, CONTROLLER)
}

/// Whether far memory was asked for: a controller, or a backend that
/// needs none.
pub fn asked(get: Getter<'_>) -> bool {
    controller(get).is_some()
        || non_empty(get, BACKEND)
            .and_then(|b| b.parse::<Backend>().ok())
            .is_some_and(|b| !b.needs_rack())
}

/// `FARMEM_FALLBACK`.
pub fn fallback(get: Getter<'_>) -> Result<Fallback, String> {
    get(FALLBACK).as_deref().unwrap_or("").parse()
}

/// `FARMEM_THRESHOLD`.
pub fn threshold(get: Getter<'_>) -> Result<u64, String> {
    size(get, THRESHOLD, DEFAULT_THRESHOLD)
}

/// `FARMEM_STATS_JSON`, if set.
pub fn stats_json(get: Getter<'_>) -> Option<PathBuf> {
    non_empty(get, STATS_JSON).map(PathBuf::from)
}

/// `FARMEM_METRICS_DIR`, if set.
pub fn metrics_dir(get: Getter<'_>) -> Option<PathBuf> {
    non_empty(get, METRICS_DIR).map(PathBuf::from)
}

/// `FARMEM_LOG`, `warn` when unset: a program stalled on a failing rack
/// says why on its stderr unless told to keep quiet.
pub fn log(get: Getter<'_>) -> String {
    non_empty(get, LOG).unwrap_or_else(|| "warn".into())
}

impl PreloadEnv {
    /// Reads and checks every variable; the first one wrong is the error.
    pub fn read(get: Getter<'_>) -> Result<Self, String> {
        let backend: Backend = match get(BACKEND) {
            Some(b) => b.parse().map_err(|e| format!("{}: {e}", key(BACKEND)))?,
            None => Backend::default(),
        };
        let controller = controller(get);
        if controller.is_none() && backend.needs_rack() {
            return Err(format!("{} is not set", key(CONTROLLER)));
        }
        let fallback = fallback(get)?;
        let local_bytes = size(get, LOCAL_MEM, DEFAULT_LOCAL_BYTES)?;
        let far_bytes = size(get, FAR_MEM, DEFAULT_FAR_BYTES)?;
        let parsed = |var: &CStr, e: &dyn std::fmt::Display| format!("{}: {e}", key(var));
        let dirty = match get(DIRTY) {
            Some(d) => d.parse().map_err(|e| parsed(DIRTY, &e))?,
            None => backend.default_dirty(),
        };
        let fault_path = match get(FAULT_PATH) {
            Some(f) => f.parse().map_err(|e| parsed(FAULT_PATH, &e))?,
            None => FaultPath::default(),
        };
        let engine = match get(ENGINE) {
            Some(e) => e.parse().map_err(|e| parsed(ENGINE, &e))?,
            None => Engine::default(),
        };
        let fault_wait = match get(FAULT_WAIT) {
            Some(w) => w.parse().map_err(|e| parsed(FAULT_WAIT, &e))?,
            None => WaitMode::default(),
        };
        let fault_around = match get(FAULT_AROUND) {
            Some(n) => n
                .parse()
                .map_err(|e| format!("{} `{n}`: {e}", key(FAULT_AROUND)))?,
            None => Config::default().fault_around.max_blocks,
        };
        let policy = get(POLICY);
        if let Some(p) = &policy {
            p.parse::<farmem_policy::cache::PolicyConfig>()
                .map_err(|e| parsed(POLICY, &e))?;
        }
        let probation = match non_empty(get, PROBATION) {
            None => None,
            Some(v) => Some(
                v.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|s| (0.0..=0.5).contains(s))
                    .ok_or_else(|| {
                        format!("{} `{v}`: expected a share from 0 to 0.5", key(PROBATION))
                    })?,
            ),
        };
        let name = get(NAME).unwrap_or_else(|| DEFAULT_NAME.into());
        let lease_ms = match get(LEASE_MS) {
            None => DEFAULT_LEASE_MS,
            Some(v) => v
                .trim()
                .parse()
                .map_err(|e| format!("{} `{v}`: {e}", key(LEASE_MS)))?,
        };
        let replicas =
            match get(REPLICAS) {
                None => None,
                Some(n) => Some(n.trim().parse().ok().filter(|&n: &u8| n >= 1).ok_or_else(
                    || {
                        format!(
                            "{} `{n}`: expected a number of copies from 1 to 255",
                            key(REPLICAS)
                        )
                    },
                )?),
            };
        let redundancy = match get(REDUNDANCY) {
            None => None,
            Some(r) => Some(r.trim().parse().map_err(|e| parsed(REDUNDANCY, &e))?),
        };
        let delay_model = |var: &CStr| match non_empty(get, var) {
            None => Ok(None),
            Some(d) => d.parse().map(Some).map_err(|e| parsed(var, &e)),
        };
        let delay = delay_model(DELAY)?;
        let delay_partition = match non_empty(get, DELAY_PARTITION) {
            None => None,
            Some(r) => Some(r.trim().parse().map_err(|e| parsed(DELAY_PARTITION, &e))?),
        };
        let link = non_empty(get, LINK);
        let link_compression = match non_empty(get, LINK_COMPRESSION) {
            None => farmem_wire::LinkMode::Off,
            Some(m) => m
                .parse()
                .map_err(|e: String| format!("{}: {e}", key(LINK_COMPRESSION)))?,
        };
        let path_delays = match non_empty(get, PATH_DELAY) {
            None => Vec::new(),
            Some(list) => list
                .split(';')
                .map(|d| d.parse().map_err(|e| parsed(PATH_DELAY, &e)))
                .collect::<Result<_, _>>()?,
        };
        Ok(Self {
            controller,
            local_bytes,
            far_bytes,
            // A bad one is reported where it is used, at the shim's first
            // allocation, which goes on with the default.
            threshold: threshold(get).unwrap_or(DEFAULT_THRESHOLD),
            backend,
            dirty,
            fault_path,
            engine,
            fault_wait,
            fault_around,
            policy,
            probation,
            stats_json: stats_json(get),
            metrics_dir: metrics_dir(get),
            name,
            token_file: non_empty(get, TOKEN_FILE).map(PathBuf::from),
            fallback,
            replicas,
            redundancy,
            delay,
            delay_partition,
            path_delays,
            link,
            link_compression,
            lease_ms,
        })
    }

    /// The variables to set in the program's environment (Some) or take
    /// out of it (None: the shim's default, not whatever the caller had).
    /// `FARMEM_LOG` is the user's, and passed through.
    pub fn vars(&self) -> Vec<(&'static str, Option<OsString>)> {
        let path = |p: &Option<PathBuf>| p.clone().map(PathBuf::into_os_string);
        let vars = [
            (key(CONTROLLER), self.controller.clone().map(Into::into)),
            (key(LOCAL_MEM), Some(self.local_bytes.to_string().into())),
            (key(FAR_MEM), Some(self.far_bytes.to_string().into())),
            (key(THRESHOLD), Some(self.threshold.to_string().into())),
            (key(BACKEND), Some(self.backend.to_string().into())),
            (key(DIRTY), Some(self.dirty.to_string().into())),
            (key(FAULT_PATH), Some(self.fault_path.to_string().into())),
            (key(ENGINE), Some(self.engine.to_string().into())),
            (key(FAULT_WAIT), Some(self.fault_wait.to_string().into())),
            (
                key(FAULT_AROUND),
                Some(self.fault_around.to_string().into()),
            ),
            (key(STATS_JSON), path(&self.stats_json)),
            (key(METRICS_DIR), path(&self.metrics_dir)),
            (key(NAME), Some(self.name.clone().into())),
            (key(LEASE_MS), Some(self.lease_ms.to_string().into())),
            (key(REPLICAS), self.replicas.map(|n| n.to_string().into())),
            (key(FALLBACK), Some(self.fallback.to_string().into())),
            (
                key(REDUNDANCY),
                self.redundancy.map(|r| r.to_string().into()),
            ),
            (
                key(DELAY),
                self.delay.as_ref().map(|d| d.to_string().into()),
            ),
            (
                key(DELAY_PARTITION),
                self.delay_partition.map(|r| r.to_string().into()),
            ),
            (
                key(PATH_DELAY),
                (!self.path_delays.is_empty()).then(|| {
                    let models: Vec<String> =
                        self.path_delays.iter().map(ToString::to_string).collect();
                    models.join(";").into()
                }),
            ),
            (key(LINK), self.link.clone().map(Into::into)),
            (
                key(LINK_COMPRESSION),
                Some(self.link_compression.to_string().into()),
            ),
            (key(TOKEN_FILE), path(&self.token_file)),
            (key(POLICY), self.policy.clone().map(Into::into)),
            (key(PROBATION), self.probation.map(|s| s.to_string().into())),
        ];
        vars.into()
    }

    /// The runtime's configuration: the shim's choices (lazily backed
    /// slabs, in batches of [`SLAB_BATCH`]) and these variables'.
    pub fn config(&self) -> Result<Config, String> {
        let mut cfg = Config {
            local_bytes: self.local_bytes,
            zeroed_slabs: true,
            slab_batch: SLAB_BATCH,
            dirty: self.dirty,
            fault_path: self.fault_path,
            engine: self.engine,
            // The partition is demand's share of the gate: a window read
            // with its page would take it whole.
            demand_first: self.delay_partition.is_some(),
            wait: self.fault_wait,
            // --local-mem is what the process may hold, as the kernel's
            // swap under a cgroup limit of the same size is held to it.
            limit_counts_process: true,
            shippers: self.backend.shippers(),
            ..Config::default()
        };
        if self.fault_path == FaultPath::Signal {
            // A signal handler cannot wait for a frame, only retry: the
            // wider gap keeps frames free while the evictor catches up.
            (cfg.high_watermark, cfg.low_watermark) = (0.95, 0.85);
        }
        cfg.fault_around.max_blocks = self.fault_around;
        cfg.log_lines = log_lines_within(self.local_bytes, &cfg);
        if let Some(share) = self.probation {
            cfg.park_share = share;
        }
        cfg.policy = match &self.policy {
            Some(p) => p.parse().map_err(|e| format!("{}: {e}", key(POLICY)))?,
            // The signal path touches a call's far buffers, then lets the
            // kernel at them: they must still be resident, which LRU's
            // newest-last order keeps and kona-pc's does not (new pages
            // enter its inactive list, the first to go), so an fwrite
            // failed with EFAULT now and then.
            None if self.fault_path == FaultPath::Signal => PolicyConfig::Lru,
            None => cfg.policy,
        };
        Ok(cfg)
    }
}

/// Bytes a line takes in a log segment: its address and its 64 bytes.
const LOG_LINE_BYTES: u64 = 8 + 64;

/// Lines per log segment under a limit of `local_bytes`: the ring of
/// segments, which fills as the evictor ships dirty lines and is charged
/// against the limit like any of the process's memory, takes at most
/// 1/64 of it (the default's 1.2 MB from 75 MiB up; at 6 MiB, 96 KiB
/// where it took a fifth of the limit), but holds at least a page's lines.
fn log_lines_within(local_bytes: u64, cfg: &Config) -> usize {
    let segments = cfg.log_segments.max(1) as u64;
    let lines = local_bytes / 64 / segments / LOG_LINE_BYTES;
    (lines as usize).clamp(64, cfg.log_lines.max(64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn the_log_ring_takes_a_sixty_fourth_of_a_small_limit() {
        let cfg = Config::default();
        let ring = |local: u64| {
            log_lines_within(local, &cfg) as u64 * cfg.log_segments as u64 * LOG_LINE_BYTES
        };
        assert_eq!(log_lines_within(1 << 30, &cfg), cfg.log_lines);
        assert_eq!(log_lines_within(256 << 20, &cfg), cfg.log_lines);
        assert!(ring(16 << 20) <= (16 << 20) / 64);
        assert!(ring(6 << 20) <= (6 << 20) / 64);
        assert_eq!(
            log_lines_within(1 << 20, &cfg),
            64,
            "a page's lines at least"
        );
    }

    fn env(vars: &[(&str, &str)]) -> HashMap<String, String> {
        vars.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn read(vars: &HashMap<String, String>) -> Result<PreloadEnv, String> {
        PreloadEnv::read(&|var: &CStr| vars.get(key(var)).cloned())
    }

    #[test]
    fn what_farmem_run_writes_the_shim_reads_back() {
        let written = PreloadEnv {
            controller: Some("127.0.0.1:7000".into()),
            local_bytes: 64 << 20,
            far_bytes: 1 << 30,
            threshold: 4096,
            backend: "compressed".parse().unwrap(),
            dirty: DirtyMode::Page,
            fault_path: FaultPath::Signal,
            engine: Engine::Daemon,
            fault_wait: "hybrid:30".parse().unwrap(),
            fault_around: 0,
            policy: Some("kona-pc".into()),
            probation: Some(0.25),
            stats_json: Some("/tmp/stats.jsonl".into()),
            metrics_dir: Some("/tmp/farmem-metrics".into()),
            name: "farmem-run".into(),
            token_file: Some("/tmp/token".into()),
            fallback: Fallback::Local,
            replicas: Some(2),
            redundancy: None,
            delay: Some("uniform:10us..50us".parse().unwrap()),
            delay_partition: Some("25%".parse().unwrap()),
            path_delays: vec![
                "rate:100MiB/s".parse().unwrap(),
                "steps:0=0,1s=50us".parse().unwrap(),
            ],
            link: Some("lab-1".into()),
            link_compression: farmem_wire::LinkMode::Auto,
            lease_ms: 0,
        };
        let vars: HashMap<String, String> = written
            .vars()
            .into_iter()
            .filter_map(|(k, v)| Some((k.to_string(), v?.into_string().ok()?)))
            .collect();
        assert!(!vars.contains_key("FARMEM_REDUNDANCY"));
        assert_eq!(read(&vars).unwrap(), written);
        let cfg = written.config().unwrap();
        assert_eq!(cfg.local_bytes, 64 << 20);
        assert_eq!(
            (cfg.dirty, cfg.fault_path),
            (DirtyMode::Page, FaultPath::Signal)
        );
        assert_eq!(cfg.fault_around.max_blocks, 0);
        assert_eq!(cfg.park_share, 0.25);
        assert_eq!(cfg.engine, Engine::Daemon);
        // The pair is the runtime's to refuse: daemon needs fault path thread.
        assert!(cfg.validate().is_err());
    }

    #[test]
    fn unset_variables_take_their_defaults() {
        let e = read(&env(&[("FARMEM_CONTROLLER", "c:1")])).unwrap();
        assert_eq!(e.local_bytes, DEFAULT_LOCAL_BYTES);
        assert_eq!(e.far_bytes, DEFAULT_FAR_BYTES);
        assert_eq!(e.threshold, DEFAULT_THRESHOLD);
        assert_eq!(e.lease_ms, DEFAULT_LEASE_MS);
        assert_eq!(e.name, DEFAULT_NAME);
        assert_eq!(e.fallback, Fallback::Fail);
        assert_eq!((e.replicas, e.redundancy, e.policy), (None, None, None));
        assert_eq!(e.probation, None);
        assert_eq!(e.fault_around, Config::default().fault_around.max_blocks);
        assert_eq!(e.engine, Engine::Page, "the default stays page");
        assert_eq!(
            (&e.backend, e.dirty),
            (&Backend::default(), DirtyMode::Line)
        );
        let c = read(&env(&[
            ("FARMEM_CONTROLLER", "c:1"),
            ("FARMEM_BACKEND", "tiered:compressed,file:/var/tmp"),
        ]))
        .unwrap();
        assert_eq!(c.dirty, DirtyMode::Page, "a file writes whole blocks");
    }

    #[test]
    fn a_bad_variable_is_named_in_the_error() {
        assert_eq!(read(&env(&[])).unwrap_err(), "FARMEM_CONTROLLER is not set");
        let bad =
            |k: &str, v: &str| read(&env(&[("FARMEM_CONTROLLER", "c:1"), (k, v)])).unwrap_err();
        assert!(bad("FARMEM_LOCAL_MEM", "lots").starts_with("FARMEM_LOCAL_MEM=\"lots\""));
        assert!(bad("FARMEM_FALLBACK", "maybe").contains("expected `local` or `fail`"));
        assert!(bad("FARMEM_DIRTY", "word").starts_with("FARMEM_DIRTY: "));
        assert!(
            bad("FARMEM_BACKEND", "tape").contains("expected one of: auto, remote, compressed")
        );
        assert!(bad("FARMEM_PATH_DELAY", "rate:1MiB/s;warp:9").starts_with("FARMEM_PATH_DELAY: "));
        // A file needs no rack; everything else does.
        let file = read(&env(&[("FARMEM_BACKEND", "file:/var/tmp")])).unwrap();
        assert_eq!(file.controller, None);
        assert_eq!(file.dirty, DirtyMode::Page);
        assert!(asked(&|v: &CStr| (v == BACKEND).then(|| "file:/x".into())));
        assert!(!asked(
            &|v: &CStr| (v == BACKEND).then(|| "compressed".into())
        ));
        assert_eq!(
            read(&env(&[("FARMEM_BACKEND", "compressed")])).unwrap_err(),
            "FARMEM_CONTROLLER is not set"
        );
        assert!(bad("FARMEM_POLICY", "mru").contains("mru"));
        assert!(bad("FARMEM_REPLICAS", "0").contains("from 1 to 255"));
        assert!(bad("FARMEM_PROBATION", "0.9").contains("from 0 to 0.5"));
        assert!(bad("FARMEM_LEASE_MS", "-1").starts_with("FARMEM_LEASE_MS `-1`"));
        assert!(bad("FARMEM_REDUNDANCY", "rs:3").starts_with("FARMEM_REDUNDANCY: "));
    }

    #[test]
    fn the_signal_path_defaults_to_lru_and_a_chosen_policy_stands() {
        let policy = |vars: &[(&str, &str)]| {
            let mut all = vec![("FARMEM_CONTROLLER", "127.0.0.1:7000")];
            all.extend_from_slice(vars);
            read(&env(&all)).unwrap().config().unwrap().policy
        };
        assert_eq!(policy(&[]), PolicyConfig::Workingset);
        assert_eq!(
            policy(&[("FARMEM_FAULT_PATH", "signal")]),
            PolicyConfig::Lru
        );
        assert_eq!(
            policy(&[("FARMEM_FAULT_PATH", "signal"), ("FARMEM_POLICY", "clock")]),
            PolicyConfig::Clock
        );
    }
}
