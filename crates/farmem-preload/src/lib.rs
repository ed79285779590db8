//! LD_PRELOAD shim: places large allocations of an unmodified program in
//! farmem far memory (Kona's AllocLib, seed 001 §4).
//!
//! `farmem run` loads `libfarmem_preload.so` with `LD_PRELOAD` and sets:
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `FARMEM_CONTROLLER` | controller address (required) | — |
//! | `FARMEM_LOCAL_MEM` | local cache for far pages | 256MiB |
//! | `FARMEM_FAR_MEM` | size of the far heap | 8GiB |
//! | `FARMEM_THRESHOLD` | smallest allocation placed far | 1MiB |
//! | `FARMEM_DIRTY` | `line` or `page` | line |
//! | `FARMEM_FAULT_PATH` | `thread`, or `signal` (faults served in the faulting thread's SIGBUS handler; I/O calls' far buffers are made local first and SIGBUS is never blocked, see `shim::touch`) | thread |
//! | `FARMEM_ENGINE` | what a remote fault fetches: `page` (the page and its readahead window, in one read), or `daemon` (DaeMon's selection unit: page alone, page and at once its 256 KiB cluster on the bulk lane, or the cluster alone; thread path only) | page |
//! | `FARMEM_FAULT_WAIT` | how `thread`-path handlers wait for the next fault: `adaptive` (spin while faults come close together, else sleep), `adaptive:MICROS`, `poll`, `spin` | adaptive:100 |
//! | `FARMEM_POLICY` | replacement policy name | runtime default |
//! | `FARMEM_STATS_JSON` | file that gets one JSON line of stats per process that used far memory | — |
//! | `FARMEM_METRICS_DIR` | directory where each process rewrites its live statistics as `PID.json` every second and at exit (`farmem run --metrics` serves them) | — |
//! | `FARMEM_NAME` | client name shown to the controller (the process id is appended) | farmem-run |
//! | `FARMEM_TOKEN_FILE` | file holding the cluster token (whitespace trimmed) of a rack started with `--token-file`; the handshake proves it | none (an unauthenticated rack) |
//! | `FARMEM_FALLBACK` | when the runtime cannot start: `fail` stops the process with exit 70 ([`NO_FAR_MEMORY_EXIT`]) before it runs; `local` runs it on local memory | fail |
//! | `FARMEM_REPLICAS` | copies of every far byte, each on another memory node: writes reach all, reads fail over | 1 |
//! | `FARMEM_LOG` | what the runtime and the rack client report (retries, nodes dropped, copies made again) on stderr, as a `tracing` filter (`info`, `farmem_net=debug`; `off` for nothing) | `warn` |
//! | `FARMEM_LEASE_MS` | the controller gives back a process's remote memory once it has not heard from it this long (a killed process); 0: never | 60000 |
//!
//! `malloc`, `calloc`, `realloc`, `reallocarray`, `posix_memalign`,
//! `aligned_alloc`, `memalign`, `malloc_usable_size`, `free` and anonymous
//! private read-write `mmap`/`munmap` at or above the threshold are served
//! from one far region (a first-fit heap of whole pages; malloc-family
//! blocks under 16 KiB are packed into runs of its pages by size class,
//! with their book-keeping in local memory). Smaller blocks go
//! to the allocator the program would have had without us (found with
//! `dlsym(RTLD_NEXT)`: glibc's, or jemalloc for Debian's redis-server), so
//! its own extensions (`mallctl`, its `malloc_usable_size`) only ever see
//! its own blocks; when that allocator maps its arenas with `mmap`, the
//! arenas go far, and a `free` of a small block inside one goes back to it.
//! Fixed mappings over far memory (allocators decommit that way) are
//! emulated: read-write zeroes the range, `PROT_NONE` leaves it.
//!
//! The runtime starts when the library is loaded (if `FARMEM_CONTROLLER` is
//! set), before any allocator holds a lock: starting it from inside an
//! allocator's `mmap` would deadlock on that allocator. If it cannot start
//! (controller unreachable, token missing or refused, bad variable, no
//! userfaultfd), the shim prints one `farmem: …` line on stderr saying why
//! and, by default (`FARMEM_FALLBACK=fail`), ends the process with exit
//! status [`NO_FAR_MEMORY_EXIT`] before the program runs, so a program
//! never runs on local memory unnoticed; with `FARMEM_FALLBACK=local` the
//! whole process uses local memory instead. Either way a `fallback` line
//! (`{"pid", "fallback", "reason"}`) goes to `FARMEM_STATS_JSON`. Without
//! `FARMEM_CONTROLLER` nothing was asked of the shim: it stays local.
//! With fault path `signal` the runtime's SIGBUS handler serves far-memory
//! faults; `sigaction` and `signal` are interposed so that a program's own
//! SIGBUS handler is kept for the SIGBUSes that are not far faults instead
//! of replacing ours (a raw `rt_sigaction` system call would still replace it).
//! `mremap` of a far range fails with `ENOMEM` (glibc's `realloc` then
//! copies); `madvise(MADV_DONTNEED)` of a far range zeroes it.
//!
//! The shim's own Rust code allocates straight from glibc (its global
//! allocator), and the runtime's threads (named `farmem-…`) and the
//! thread initialising the runtime always get local memory, so the runtime
//! never serves its own faults.
//!
//! # fork and exec
//!
//! The parent is never affected. In a forked child the runtime's threads do
//! not exist and userfaultfd registrations are not inherited, so far pages
//! that were remote at the fork cannot be served. Rather than let the child
//! compute on zeros, the shim makes inherited far memory inaccessible in
//! the child: touching it raises SIGSEGV. A child that `exec`s, or only
//! uses memory it allocates itself (always local after a fork), works. So
//! `system()`, `popen()` and fork+exec work; redis' fork-based BGSAVE does
//! not (run it with `--save ""`). A program started by `exec`
//! (in the child or anywhere below) loads the shim again and gets a runtime
//! of its own, on the same controller.

pub mod heap;
pub mod io;

/// Exit status of a process whose far memory could not be had, under
/// `FARMEM_FALLBACK=fail` (the default): 70, `EX_SOFTWARE` of sysexits.h.
pub use farmem_runtime::preload_env::NO_FAR_MEMORY_EXIT;

// The shim proper: only in the library a program loads, never in this
// crate's unit tests (its `malloc` and global allocator would be theirs).
#[cfg(not(test))]
mod shim;
