//! UniMem §4's grid: the systems compared, the cache sizes, workloads and
//! the swept values of Fig. 9-14.

/// The systems compared (§4.1), in the paper's order.
pub const SYSTEMS: &[&str] = &["kona", "kona-pc", "srrb-4sc", "unimem-nopromote", "unimem"];
/// Local cache sizes, percent of the working set (§4.2).
pub const CACHE_PERCENTS: &[u32] = &[100, 75, 50, 25, 10];
/// The paper's six workloads, as our workload names.
pub const WORKLOADS: &[&str] = &["kv-uniform", "ycsb-a", "ycsb-b", "etc", "pr", "linreg"];
/// The key/value ones (Redis-Rand, YCSB-A/B, Facebook-ETC).
pub const KV_WORKLOADS: &[&str] = &["kv-uniform", "ycsb-a", "ycsb-b", "etc"];
/// The mixed run interleaves these four (§4.4: Redis-Rand, Facebook-ETC,
/// Page Rank, YCSB-A); its points use workload name [`MIXED`].
pub const MIXED_INPUTS: &[&str] = &["kv-uniform", "etc", "pr", "ycsb-a"];
pub const MIXED: &str = "mixed";
/// Block sizes of §4.5 (at 10%, promotion off).
pub const BLOCK_SIZES: &[u64] = &[128, 256, 512, 1024, 2048, 4096];
/// Host memory shares of §4.6, percent of local memory (at 10%).
pub const HOST_SHARES: &[u32] = &[0, 10, 20, 30, 40, 50, 60, 70, 80];
/// List pairs of §4.7 (at 10%).
pub const PAIRS: &[u32] = &[1, 2, 4, 8, 16];
