//! DaeMon's full evaluation (seed 000 §6): the grid of workloads,
//! bandwidth factors and switch latencies, and the sensitivity studies.
