//! Compute-node runtime: far regions served over userfaultfd.
