//! Built-in workloads and the trace format.
