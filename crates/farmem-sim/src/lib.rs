//! Trace-driven simulator of the disaggregated memory hierarchy.
