//! What `farmem eval daemon-real` runs: the programs, the engine
//! configurations standing for the paper's schemes, and the bandwidth
//! points.

use crate::cmd::bench::workload::{self, Workload};
use farmem_core::ByteSize;

/// One of the evaluation's programs, with the simulator workload that
/// predicts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// The demo's PageRank (`farmem demo --worker --kind pagerank`).
    PageRank,
    /// Random key/value gets and sets (`--kind kv`).
    Kv,
    /// redis-server under redis-benchmark's GETs.
    Redis,
}

impl Program {
    pub const ALL: [Program; 3] = [Program::PageRank, Program::Kv, Program::Redis];
    /// `--quick`: the two that need no package.
    pub const QUICK: [Program; 2] = [Program::PageRank, Program::Kv];

    pub fn name(self) -> &'static str {
        match self {
            Program::PageRank => "pagerank",
            Program::Kv => "kv",
            Program::Redis => "redis",
        }
    }

    pub fn parse(s: &str) -> anyhow::Result<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| anyhow::anyhow!("unknown program `{s}`: pagerank, kv or redis"))
    }

    /// The simulator's workload of the same kind: Ligra's PageRank, a
    /// hash table's uniform gets and sets, Facebook's ETC mix of GETs.
    pub fn sim_workload(self) -> &'static str {
        match self {
            Program::PageRank => "pr",
            Program::Kv => "kv-uniform",
            Program::Redis => "etc",
        }
    }

    pub fn workload(self, bytes: u64, quick: bool) -> anyhow::Result<Workload> {
        let passes = if quick { 2 } else { 3 };
        match self {
            Program::PageRank | Program::Kv => {
                Workload::builtin(self.name(), ByteSize(bytes), passes)
            }
            Program::Redis => workload::redis_latency(bytes, if quick { 4000 } else { 20000 }),
        }
    }

    /// From a run's stdout: the result two runs must agree on, and what
    /// the program measured: the demo workers' own seconds (without
    /// `farmem run`'s start), redis's GETs per second.
    pub fn read(self, w: &Workload, stdout: &[u8]) -> (Option<String>, Option<f64>) {
        if self == Program::Redis {
            let (numbers, rest) = workload::split_redis_report(stdout);
            let result = w.result(&rest).0.filter(|_| !rest.is_empty());
            return (result, numbers.map(|n| n.rps));
        }
        w.result(stdout)
    }

    /// Whether more of [`Self::read`]'s measure is better (GETs per
    /// second) or less (seconds).
    pub fn more_is_better(self) -> bool {
        self == Program::Redis
    }
}

/// An engine configuration, named for the paper's scheme it stands for
/// (seed 000 §6: Remote, LC, BP, PQ, DaeMon).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    pub name: &'static str,
    /// The simulator's scheme for the same technique.
    pub scheme: &'static str,
    pub engine: &'static str,
    pub link_compression: &'static str,
    /// Demand first at the link's gate (`--delay-partition 25%`), where
    /// there is a gate: an uncapped link has nothing to share.
    pub partition: bool,
}

/// The paper's five schemes, on the real link.
pub const CONFIGS: [Config; 5] = [
    Config {
        name: "page",
        scheme: "remote",
        engine: "page",
        link_compression: "off",
        partition: false,
    },
    Config {
        name: "lc",
        scheme: "lc",
        engine: "page",
        link_compression: "auto",
        partition: false,
    },
    Config {
        name: "bp",
        scheme: "bp",
        engine: "page",
        link_compression: "off",
        partition: true,
    },
    Config {
        name: "pq",
        scheme: "pq",
        engine: "daemon",
        link_compression: "off",
        partition: true,
    },
    Config {
        name: "daemon",
        scheme: "daemon",
        engine: "daemon",
        link_compression: "auto",
        partition: true,
    },
];

/// The share of the link demand keeps under a partitioned gate: DaeMon's.
pub const PARTITION: &str = "25%";

/// A bandwidth point: its name (the paper's), and the fraction of the
/// reference rate it caps the link at (None: no cap).
pub const POINTS: [(&str, Option<f64>); 4] = [
    ("full", None),
    ("1/2", Some(0.5)),
    ("1/4", Some(0.25)),
    ("1/8", Some(0.125)),
];

/// DaeMon's speedup over Remote at each bandwidth factor, over all its
/// workloads (seed 000 §6, Fig. 8).
pub const PAPER: [(&str, f64); 3] = [("1/2", 1.85), ("1/4", 2.36), ("1/8", 2.97)];

/// Each program's footprint: 128 MiB times --scale, or the size given
/// (--quick: 64 MiB); a quarter of it is local.
pub fn footprint(scale: &str, quick: bool) -> anyhow::Result<u64> {
    let base: u64 = if quick { 64 << 20 } else { 128 << 20 };
    let bytes = match scale.parse::<f64>() {
        Ok(f) if f > 0.0 && f.is_finite() => (base as f64 * f) as u64,
        Ok(_) => anyhow::bail!("--scale must be positive"),
        Err(_) => scale
            .parse::<ByteSize>()
            .map_err(|e| {
                anyhow::anyhow!("--scale {scale}: a factor (0.5) or a size (256MiB): {e}")
            })?
            .bytes(),
    };
    anyhow::ensure!(
        bytes >= 8 << 20,
        "--scale {scale}: at least 8 MiB, so a quarter of it still pages"
    );
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_configs_and_sizes_parse_and_refuse() {
        assert_eq!(Program::parse("kv").unwrap(), Program::Kv);
        assert!(Program::parse("graph").is_err());
        assert_eq!(footprint("1", true).unwrap(), 64 << 20);
        assert_eq!(footprint("0.5", false).unwrap(), 64 << 20);
        assert_eq!(footprint("32MiB", true).unwrap(), 32 << 20);
        assert!(footprint("0", true).is_err());
        assert!(footprint("1MiB", true).is_err());
        assert!(footprint("lots", true).is_err());
        // Every config names a scheme the simulator has, and the first is
        // the baseline every speedup is over.
        assert_eq!(CONFIGS[0].name, "page");
        let schemes: Vec<_> = CONFIGS.iter().map(|c| c.scheme).collect();
        assert_eq!(schemes, ["remote", "lc", "bp", "pq", "daemon"]);
    }

    #[test]
    fn a_demo_program_is_judged_by_its_checksum() {
        let w = Program::Kv.workload(8 << 20, true).unwrap();
        let out = b"progress\nresult {\"checksum\":\"00ab\",\"seconds\":1.5}\n";
        assert_eq!(Program::Kv.read(&w, out), (Some("00ab".into()), Some(1.5)));
        assert_eq!(Program::Kv.read(&w, b"").0, None);
    }
}
