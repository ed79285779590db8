//! UniMem's evaluation (seed 002 §4): AMAT and data amplification of the
//! local-cache systems across cache sizes, block sizes and host shares.
