//! Exact results of built-in workloads under every main scheme, at a small
//! scale: speed work on the simulator or the workloads' generators must not
//! change what is simulated, and these counters say if it did. The values
//! were taken from `farmem sim --workload pr,spmv --scale 0.015625` (daemon
//! preset, seed 1) before the speed work of issue 24, point 1; change them
//! only with a change that means to change results.

use farmem_sim::config::ConfigBuilder;
use farmem_sim::{Input, simulate};
use farmem_workloads::Scale;

/// records, llc_misses, remote bytes read, remote bytes written,
/// local-memory misses, simulated time (ns, rounded).
type Counters = [u64; 6];

const PINNED: &[(&str, &str, Counters)] = &[
    (
        "pr",
        "remote",
        [1076546, 56387, 4182016, 405504, 1021, 1811369],
    ),
    (
        "pr",
        "daemon",
        [1076546, 54641, 1985150, 156852, 1139, 1169373],
    ),
    ("pr", "unimem", [1076546, 16491, 1056768, 0, 2059, 2941182]),
    ("pr", "kona", [1076546, 16491, 1056768, 0, 258, 1021000]),
    ("pr", "pq", [1076546, 54238, 3963456, 405504, 1257, 1584740]),
    ("pr", "bp", [1076546, 52619, 4213504, 405504, 5125, 1462365]),
    (
        "spmv",
        "remote",
        [344520, 22242, 1462272, 12288, 357, 588624],
    ),
    (
        "spmv",
        "daemon",
        [344520, 22242, 531684, 12288, 468, 380371],
    ),
    ("spmv", "unimem", [344520, 10896, 701440, 0, 1364, 2088700]),
    ("spmv", "kona", [344520, 10896, 708608, 0, 173, 505861]),
    ("spmv", "pq", [344520, 22242, 1492608, 12288, 474, 618282]),
    ("spmv", "bp", [344520, 22240, 1914752, 12288, 5037, 589422]),
];

#[test]
fn small_workloads_give_their_pinned_counters() {
    let cfg = ConfigBuilder::preset("daemon").unwrap().build().unwrap();
    let mut wrong = Vec::new();
    for &(workload, scheme, want) in PINNED {
        let input = Input::Workload {
            name: workload.to_string(),
            scale: Scale::Factor(1.0 / 64.0),
            seed: 1,
        };
        let r = simulate(&cfg, scheme, &input).unwrap();
        let got: Counters = [
            r.records,
            r.llc_misses,
            r.remote_bytes_read,
            r.remote_bytes_written,
            r.stats.get("local.misses").unwrap_or(-1.0) as u64,
            r.sim_time_ns.round() as u64,
        ];
        if got != want {
            wrong.push(format!("{workload}/{scheme}: got {got:?}, pinned {want:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
