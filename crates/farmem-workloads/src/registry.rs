//! Workloads by name.

use std::str::FromStr;

use farmem_core::ByteSize;

use crate::kernels::{self, Params};
use crate::record::{CountingSink, Sink};

/// Every built-in workload: name and what it runs.
pub const WORKLOADS: &[(&str, &str)] = &[
    ("pr", "Ligra PageRank (one iteration) on a Ligra rMat graph"),
    ("bfs", "Ligra BFS from vertex 0 on a Ligra rMat graph"),
    (
        "bc",
        "Ligra betweenness centrality from vertex 0 on a Ligra rMat graph",
    ),
    (
        "cc",
        "connected components (Shiloach-Vishkin) on an RMAT graph",
    ),
    ("tc", "Ligra triangle counting on a Ligra rMat graph"),
    (
        "kc",
        "Ligra k-core decomposition (peeling by k) on a Ligra rMat graph",
    ),
    (
        "spmv",
        "sparse matrix-vector multiply, CSR, a stiffness matrix shaped like pkustk14",
    ),
    (
        "nw",
        "Needleman-Wunsch (Rodinia): two 4096-symbol sequences, 16x16 tiles along anti-diagonals, a reference matrix",
    ),
    ("stream", "STREAM copy/scale/add/triad over three arrays"),
    (
        "kv-uniform",
        "hash-table gets/sets (10:1), uniform keys, 128 B values",
    ),
    (
        "ycsb-a",
        "YCSB A: 50% read, 50% update, Zipf 0.99, 1 KB records",
    ),
    (
        "ycsb-b",
        "YCSB B: 95% read, 5% update, Zipf 0.99, 1 KB records",
    ),
    (
        "linreg",
        "linear regression: one streaming pass over points",
    ),
    (
        "etc",
        "Facebook ETC-like mix: 30:1 get:set, Zipf 0.9, values 64 B-4 KiB",
    ),
];

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WorkloadError {
    #[error("unknown workload `{name}` (known: {known})")]
    Unknown { name: String, known: String },
    #[error(
        "bad scale `{input}`: use a factor up to 256 (0.5, 2) or a footprint up to 16GiB (64MiB)"
    )]
    BadScale { input: String },
}

/// How big a workload runs: a factor of its default size, or a target footprint.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scale {
    Factor(f64),
    Footprint(u64),
}

impl Default for Scale {
    fn default() -> Self {
        Scale::Factor(1.0)
    }
}

impl FromStr for Scale {
    type Err = WorkloadError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || WorkloadError::BadScale {
            input: s.to_string(),
        };
        let t = s.trim();
        if t.chars().any(|c| c.is_ascii_alphabetic()) {
            let b: ByteSize = t.parse().map_err(|_| bad())?;
            if b.0 == 0 || b.0 > 16 << 30 {
                return Err(bad());
            }
            return Ok(Scale::Footprint(b.0));
        }
        match t.parse::<f64>() {
            Ok(f) if f.is_finite() && f > 0.0 && f <= 256.0 => Ok(Scale::Factor(f)),
            _ => Err(bad()),
        }
    }
}

/// What ran.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WorkloadInfo {
    pub name: String,
    pub footprint_bytes: u64,
    pub accesses: u64,
    pub instructions: u64,
}

/// Counts the footprint without reporting accesses: `begin` comes first,
/// so a sink that stops caring after it costs only the data generation.
struct FootprintProbe {
    footprint: u64,
}

impl Sink for FootprintProbe {
    fn begin(&mut self, footprint: u64) {
        self.footprint = footprint;
    }
    fn access(&mut self, _a: crate::Access) {}
}

fn dispatch<S: Sink + ?Sized>(name: &str, sink: &mut S, p: &Params) -> Result<(), WorkloadError> {
    match name {
        "pr" => kernels::pr(sink, p),
        "bfs" => kernels::bfs(sink, p),
        "bc" => kernels::bc(sink, p),
        "cc" => kernels::cc(sink, p),
        "tc" => kernels::tc(sink, p),
        "kc" => kernels::kc(sink, p),
        "spmv" => kernels::spmv(sink, p),
        "nw" => kernels::nw(sink, p),
        "stream" => kernels::stream(sink, p),
        "kv-uniform" => kernels::kv_uniform(sink, p),
        "ycsb-a" => kernels::ycsb_a(sink, p),
        "ycsb-b" => kernels::ycsb_b(sink, p),
        "linreg" => kernels::linreg(sink, p),
        "etc" => kernels::etc(sink, p),
        _ => {
            return Err(WorkloadError::Unknown {
                name: name.to_string(),
                known: WORKLOADS.iter().map(|w| w.0).collect::<Vec<_>>().join(", "),
            });
        }
    }
    Ok(())
}

/// Default footprints at factor 1, for turning a target footprint into a
/// factor without running the workload.
fn default_footprint(name: &str) -> u64 {
    match name {
        "stream" => 48 << 20,
        "linreg" => 96 << 20,
        "kv-uniform" => 72 << 20,
        "ycsb-a" | "ycsb-b" => 65 << 20,
        "etc" => 50 << 20,
        "spmv" => 50 << 20,
        "nw" => 128 << 20,
        "tc" => 3 << 20,
        "pr" | "bfs" => 40 << 20,
        _ => 20 << 20,
    }
}

/// Runs workload `name` into `sink`.
pub fn run_workload<S: Sink + ?Sized>(
    name: &str,
    scale: Scale,
    seed: u64,
    sink: &mut S,
) -> Result<WorkloadInfo, WorkloadError> {
    let factor = match scale {
        Scale::Factor(f) => f,
        Scale::Footprint(b) => b as f64 / default_footprint(name) as f64,
    };
    let p = Params { factor, seed };
    let mut counting = Tee {
        inner: sink,
        count: CountingSink::default(),
        footprint: 0,
    };
    dispatch(name, &mut counting, &p)?;
    Ok(WorkloadInfo {
        name: name.to_string(),
        footprint_bytes: counting.footprint,
        accesses: counting.count.accesses,
        instructions: counting.count.instructions,
    })
}

/// The footprint of workload `name` at `scale` (generates its data).
pub fn footprint(name: &str, scale: Scale, seed: u64) -> Result<u64, WorkloadError> {
    let mut probe = FootprintProbe { footprint: 0 };
    run_workload(name, scale, seed, &mut probe)?;
    Ok(probe.footprint)
}

struct Tee<'a, S: Sink + ?Sized> {
    inner: &'a mut S,
    count: CountingSink,
    footprint: u64,
}

impl<S: Sink + ?Sized> Sink for Tee<'_, S> {
    fn begin(&mut self, footprint: u64) {
        self.footprint = footprint;
        self.inner.begin(footprint);
    }
    #[inline]
    fn access(&mut self, a: crate::Access) {
        self.count.access(a);
        self.inner.access(a);
    }
    fn wants_contents(&self) -> bool {
        self.inner.wants_contents()
    }
    fn page(&mut self, addr: u64, data: &[u8]) {
        self.inner.page(addr, data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Access;

    #[test]
    fn every_workload_runs_small_and_stays_in_its_footprint() {
        for (name, _) in WORKLOADS {
            let mut v: Vec<Access> = Vec::new();
            let info = run_workload(name, Scale::Factor(1.0 / 64.0), 1, &mut v).unwrap();
            assert!(info.accesses > 1000, "{name}: {}", info.accesses);
            assert_eq!(info.accesses, v.len() as u64);
            let lo = crate::space::BASE;
            let hi = lo + info.footprint_bytes;
            assert!(
                v.iter()
                    .all(|a| a.addr >= lo && a.addr + a.size as u64 <= hi),
                "{name} accessed outside its arrays"
            );
        }
    }

    #[test]
    fn scales_parse() {
        assert_eq!("2".parse::<Scale>().unwrap(), Scale::Factor(2.0));
        assert_eq!(
            "64MiB".parse::<Scale>().unwrap(),
            Scale::Footprint(64 << 20)
        );
        assert!("-1".parse::<Scale>().is_err());
        assert!("0".parse::<Scale>().is_err());
        assert!("lots".parse::<Scale>().is_err());
        assert!("1000".parse::<Scale>().is_err());
        assert!("1TiB".parse::<Scale>().is_err());
        assert!(run_workload("nope", Scale::default(), 0, &mut Vec::new()).is_err());
    }
}
