//! Pure policy decisions (eviction, granularity selection, bandwidth
//! partitioning, promotion, backend choice): no I/O, time passed in, shared by
//! the runtime and the simulator.
