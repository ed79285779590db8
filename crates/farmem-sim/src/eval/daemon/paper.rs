//! DaeMon §6's grid and the paper's numbers: the schemes, the network
//! points of Fig. 8, the workload classes of §6.1 and the headline results
//! the summary is set beside.

/// The schemes of §6 (Local is not simulated: Fig. 8 is over Remote).
pub const SCHEMES: &[&str] = &["remote", "lc", "bp", "pq", "daemon"];
/// Bandwidth factors: `--set` value and the JSON key.
pub const BANDWIDTHS: &[(&str, &str)] = &[("1/2", "0.5"), ("1/4", "0.25"), ("1/8", "0.125")];
pub const SWITCH_NS: &[&str] = &["100", "400"];
/// Workloads whose pages have poor spatial locality (§6.1's first class:
/// kc, tr, pr, nw) and high locality (§6.1's third class; spmv is the
/// paper's `sp`, stream and linreg are scans).
pub const LOW_LOCALITY: &[&str] = &["pr", "nw", "kc", "tc"];
pub const HIGH_LOCALITY: &[&str] = &["spmv", "stream", "linreg"];

/// The paper's mean LZ ratio over its workloads (§6.5).
pub const PAPER_LZ_RATIO: f64 = 4.47;
/// The study that reruns pq's low-locality losses with every page
/// compressing by [`PAPER_LZ_RATIO`] (`daemon.assume_ratio`), labelled
/// `remote`, `pq`, `daemon` and [`AT_PAPER_RATIO`].
pub const COMPRESSIBILITY: &str = "compressibility";
pub const AT_PAPER_RATIO: &str = "daemon at the paper's ratio";

/// The paper's headline numbers, for the side-by-side table.
pub const PAPER: &[(&str, f64)] = &[
    ("daemon geomean speedup over remote, bw 1/2", 1.85),
    ("daemon geomean speedup over remote, bw 1/4", 2.36),
    ("daemon geomean speedup over remote, bw 1/8", 2.97),
    ("pq geomean speedup over remote, switch 100 ns", 1.60),
    ("pq geomean speedup over remote, switch 400 ns", 1.51),
    ("remote local hit ratio (mean)", 0.977),
    ("daemon local hit ratio below remote (mean, points)", 0.004),
    ("lz compression ratio (mean)", 4.47),
    ("partition 25% over 50%, switch 100 ns (daemon)", 1.02),
    ("partition 25% over 80%, switch 100 ns (daemon)", 1.07),
    ("lz over fpc-bdi (lc)", 1.54),
    ("lz over fve (lc)", 1.44),
    ("daemon over lc under disturbance", 2.85),
    ("daemon over pq under disturbance", 1.19),
    ("daemon over remote, several cores", 1.96),
    ("daemon over remote, several memory nodes", 3.25),
];
