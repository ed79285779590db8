//! The programs of ThymesisFlow's study, as `farmem eval delay` runs them:
//! what each is, how big, and what it reports.

use farmem_core::ByteSize;
use serde_json::{Value, json};

use crate::cmd::bench::workload::{self, Workload};

/// One of the study's programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// STREAM's four kernels (farmem_workloads::stream): bandwidth.
    Stream,
    /// Graph500 BFS and SSSP (farmem_workloads::graph500): search time.
    Bfs,
    Sssp,
    /// redis-server under redis-benchmark's GETs: throughput and p99.
    Redis,
}

impl Program {
    pub const ALL: [Program; 4] = [Program::Stream, Program::Bfs, Program::Sssp, Program::Redis];

    pub fn name(self) -> &'static str {
        match self {
            Program::Stream => "stream",
            Program::Bfs => "bfs",
            Program::Sssp => "sssp",
            Program::Redis => "redis",
        }
    }

    pub fn parse(s: &str) -> anyhow::Result<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| anyhow::anyhow!("unknown program `{s}`: stream, bfs, sssp or redis"))
    }

    /// The figure of merit the study plots, and whether more is better.
    pub fn metric(self) -> (&'static str, bool) {
        match self {
            Program::Stream => ("triad_mb_s", true),
            Program::Bfs | Program::Sssp => ("search_seconds", false),
            Program::Redis => ("p99_ms", false),
        }
    }
}

/// How big and how long each program runs.
#[derive(Debug, Clone)]
pub struct Shape {
    /// Footprint of each program.
    pub bytes: u64,
    /// STREAM passes.
    pub passes: usize,
    /// Graph500 search roots, and the graph's scale and edge factor
    /// (scale: the largest that fits `bytes` unless given).
    pub roots: usize,
    pub graph_scale: Option<u32>,
    pub edge_factor: u32,
    /// redis-benchmark's GETs.
    pub gets: u64,
}

impl Shape {
    /// `p` over `bytes` (the contention study runs smaller copies).
    pub fn workload(&self, p: Program, bytes: u64) -> anyhow::Result<Workload> {
        let size = ByteSize(bytes);
        let mut w = match p {
            Program::Stream => Workload::builtin("stream", size, self.passes)?,
            Program::Bfs | Program::Sssp => Workload::builtin(p.name(), size, self.roots)?,
            Program::Redis => workload::redis_latency(bytes, self.gets)?,
        };
        if matches!(p, Program::Bfs | Program::Sssp) {
            if let Some(s) = self.graph_scale {
                w.argv
                    .extend(["--graph-scale".into(), s.to_string().into()]);
            }
            w.argv
                .extend(["--edge-factor".into(), self.edge_factor.to_string().into()]);
        }
        Ok(w)
    }
}

/// From a run's stdout: the result two runs must agree on, and what the
/// program measured (`null` fields where it printed nothing).
pub fn read(p: Program, w: &Workload, stdout: &[u8]) -> (Option<String>, Value) {
    if p == Program::Redis {
        let (numbers, rest) = workload::split_redis_report(stdout);
        let (result, _) = w.result(&rest);
        let result = result.filter(|_| !rest.is_empty());
        return (
            result,
            json!({"rps": numbers.map(|n| n.rps), "p99_ms": numbers.map(|n| n.p99_ms)}),
        );
    }
    let r = workload::result_line(stdout).unwrap_or_default();
    let result = r["checksum"].as_str().map(str::to_string);
    let measured = match p {
        Program::Stream => {
            let k = &r["kernels"];
            let means: Vec<f64> = ["copy", "scale", "add", "triad"]
                .iter()
                .filter_map(|n| k[n]["mean_mb_s"].as_f64())
                .collect();
            json!({
                "copy_mb_s": k["copy"]["best_mb_s"],
                "triad_mb_s": k["triad"]["best_mb_s"],
                "mean_mb_s": (means.len() == 4).then(|| means.iter().sum::<f64>() / 4.0),
            })
        }
        _ => json!({"search_seconds": r["search_seconds"], "teps": r["teps"], "scale": r["scale"]}),
    };
    (result, measured)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_program_reports_its_measure_and_its_result() {
        let shape = Shape {
            bytes: 8 << 20,
            passes: 2,
            roots: 3,
            graph_scale: Some(12),
            edge_factor: 8,
            gets: 100,
        };
        let bfs = shape.workload(Program::Bfs, 8 << 20).unwrap();
        assert!(
            bfs.shown().ends_with(
                "--kind bfs --size 8388608 --iterations 3 --graph-scale 12 --edge-factor 8"
            ),
            "{}",
            bfs.shown()
        );
        let out = br#"progress 1 x
result {"checksum":"00ff","search_seconds":1.5,"teps":2.0,"scale":12}
"#;
        let (result, m) = read(Program::Bfs, &bfs, out);
        assert_eq!(result.as_deref(), Some("00ff"));
        assert_eq!(m["search_seconds"], 1.5);
        let stream = shape.workload(Program::Stream, 8 << 20).unwrap();
        let out = br#"result {"checksum":"01","kernels":{"copy":{"best_mb_s":4.0,"mean_mb_s":1.0},"scale":{"mean_mb_s":2.0},"add":{"mean_mb_s":3.0},"triad":{"best_mb_s":8.0,"mean_mb_s":6.0}}}"#;
        let (result, m) = read(Program::Stream, &stream, out);
        assert_eq!(result.as_deref(), Some("01"));
        assert_eq!(
            (m["triad_mb_s"].as_f64(), m["mean_mb_s"].as_f64()),
            (Some(8.0), Some(3.0))
        );
        // A run that printed nothing has no result to compare.
        assert_eq!(read(Program::Stream, &stream, b"").0, None);
        assert!(Program::parse("graph").is_err());
        assert_eq!(Program::parse("sssp").unwrap(), Program::Sssp);
    }
}
