//! The interposed C entry points, one file per call family, over the
//! process state. Layers, each using only the ones above it in this list:
//!
//! * `state`: the process state (runtime up or not, the far heap and its
//!   range, which thread is calling) and its helpers;
//! * `local`, `real`, `sigbus`, `touch`, `live`: what the interposers call
//!   below them (the allocators under us; glibc's real functions; masks
//!   without SIGBUS; far buffers made local before a system call; live
//!   statistics for `farmem run --metrics`);
//! * `child`, `exit`, `init`: a forked child's far memory; fork and exit;
//!   starting the runtime;
//! * `far`: the far heap's blocks;
//! * the interposers: `malloc`, `mmap`, `sigmask`, `fileio`, `socket`,
//!   `stdio`, `poll`.

mod state;

mod live;
mod local;
mod real;
mod sigbus;
mod touch;

mod child;
mod exit;
mod init;

mod far;

mod fileio;
mod malloc;
mod mmap;
mod poll;
mod sigmask;
mod socket;
mod stdio;
