//! libfarmem: UMap's C API (LLNL's user-space paging library) over
//! farmem's runtime, so programs written for UMap build unchanged against
//! `include/umap/umap.h` and run on farmem (issue 21; docs/umap.md).
//!
//! UMap's pieces and farmem's: its fault monitor and fillers are the
//! runtime's handler threads, its evictors the runtime's evictor (with
//! Kona's line-granular write-back), its buffer the runtime's local cache
//! and its file store [`file_store::FileStore`], one window per mapped
//! file. Layers: `settings` and `file_store` at the bottom, `maps` (the
//! process's state) above them, the `extern "C"` facade here on top.
//!
//! Every call that can fail sets `errno` and names its cause on stderr,
//! once per distinct message, as UMap prints its own.

pub mod file_store;
pub mod maps;
pub mod settings;

use std::collections::HashSet;
use std::sync::OnceLock;

use parking_lot::Mutex;

use maps::{Maps, Request, UmapError};
use settings::{EVICTORS, FAULT_EVENTS, Fixed, PAGE_SIZE, Settings};

const UMAP_FAILED: *mut libc::c_void = usize::MAX as *mut libc::c_void;

fn state() -> &'static Mutex<Maps> {
    static STATE: OnceLock<Mutex<Maps>> = OnceLock::new();
    STATE.get_or_init(|| {
        let available = available_bytes();
        let read = Settings::from_env(available, |k| std::env::var(k).ok(), &mut |w| say(&w));
        if let Err(e) = &read {
            say(e);
        }
        Mutex::new(Maps::new(read, Settings::defaults(available)))
    })
}

/// Memory available now (MemAvailable), for the default buffer.
fn available_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(1 << 30, |kib| kib * 1024)
}

/// Prints `msg` on stderr the first time it is said.
fn say(msg: &str) {
    static SAID: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    if SAID
        .get_or_init(Default::default)
        .lock()
        .insert(msg.to_string())
    {
        eprintln!("farmem umap: {msg}");
    }
}

fn fail(e: &UmapError) {
    say(&e.msg);
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = e.errno };
}

/// Maps `length` bytes of the file on `fd` from `offset` (see umap.h).
///
/// # Safety
/// `fd` must be an open descriptor or -1; the region returned must be
/// released only with [`uunmap`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umap(
    addr: *mut libc::c_void,
    length: libc::size_t,
    prot: libc::c_int,
    flags: libc::c_int,
    fd: libc::c_int,
    offset: libc::off_t,
) -> *mut libc::c_void {
    let req = Request {
        addr: addr as usize,
        length,
        prot,
        flags,
        fd,
        offset,
    };
    match state().lock().map(&req) {
        Ok(start) => start as *mut libc::c_void,
        Err(e) => {
            fail(&e);
            UMAP_FAILED
        }
    }
}

/// Writes the region at `addr` back and unmaps it; 0, or -1 with errno.
///
/// # Safety
/// No thread may touch the region during or after the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn uunmap(addr: *mut libc::c_void, _length: libc::size_t) -> libc::c_int {
    match state().lock().unmap(addr as usize) {
        Ok(()) => 0,
        Err(e) => {
            fail(&e);
            -1
        }
    }
}

/// Writes every region's dirty pages back; 0, or -1 with errno.
#[unsafe(no_mangle)]
pub extern "C" fn umap_flush() -> libc::c_int {
    match state().lock().flush() {
        Ok(()) => 0,
        Err(e) => {
            fail(&e);
            -1
        }
    }
}

/// UMap's prefetch item: the start of a page to bring in.
#[repr(C)]
pub struct UmapPrefetchItem {
    pub page_base_addr: *mut libc::c_void,
}

/// Brings the pages named into the buffer: each is read once, which
/// faults it in (with read-ahead, as any access). Addresses outside every
/// region are skipped and named.
///
/// # Safety
/// `page_array` must hold `npages` items; no region named may be unmapped
/// during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umap_prefetch(npages: libc::c_int, page_array: *const UmapPrefetchItem) {
    if page_array.is_null() || npages <= 0 {
        return;
    }
    // SAFETY: the caller passes npages items.
    let items = unsafe { std::slice::from_raw_parts(page_array, npages as usize) };
    for item in items {
        let addr = item.page_base_addr as usize;
        if !state().lock().contains(addr) {
            say(&format!(
                "umap_prefetch: {addr:#x} is in no region umap returned; skipped"
            ));
            continue;
        }
        // SAFETY: inside a live region (checked above); the read faults
        // the page in and its value is not needed.
        unsafe { std::ptr::read_volatile(addr as *const u8) };
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn umapcfg_get_system_page_size() -> libc::c_long {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) }
}

/// Applies a setter to the settings the next buffer starts with; after
/// the first `umap` the buffer is running and the change cannot reach it.
fn set(what: &str, f: impl FnOnce(&mut Settings)) {
    let mut maps = state().lock();
    if maps.started() {
        say(&format!(
            "umapcfg_set_{what} after the first umap has no effect: the buffer is already running"
        ));
        return;
    }
    f(&mut maps.settings);
}

fn get<T>(f: impl FnOnce(&Settings) -> T) -> T {
    f(&state().lock().settings)
}

fn set_fixed(what: &str, fixed: &Fixed, asked: u64) {
    if asked != fixed.value {
        say(&format!("umapcfg_set_{what}: {}", fixed.refusal(asked)));
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn umapcfg_get_umap_page_size() -> u64 {
    PAGE_SIZE.value
}

#[unsafe(no_mangle)]
pub extern "C" fn umapcfg_set_umap_page_size(page_size: u64) {
    set_fixed("umap_page_size", &PAGE_SIZE, page_size);
}

#[unsafe(no_mangle)]
pub extern "C" fn umapcfg_get_max_pages_in_buffer() -> u64 {
    get(|s| s.buf_pages)
}

#[unsafe(no_mangle)]
pub extern "C" fn umapcfg_set_max_pages_in_buffer(max_pages: u64) {
    set("max_pages_in_buffer", |s| s.buf_pages = max_pages);
}

#[unsafe(no_mangle)]
pub extern "C" fn umapcfg_get_num_fillers() -> u64 {
    get(|s| s.fillers)
}

#[unsafe(no_mangle)]
pub extern "C" fn umapcfg_set_num_fillers(num_fillers: u64) {
    set("num_fillers", |s| s.fillers = num_fillers);
}

#[unsafe(no_mangle)]
pub extern "C" fn umapcfg_get_num_evictors() -> u64 {
    EVICTORS.value
}

#[unsafe(no_mangle)]
pub extern "C" fn umapcfg_set_num_evictors(num_evictors: u64) {
    set_fixed("num_evictors", &EVICTORS, num_evictors);
}

/// UMap's older name for its evictors.
#[unsafe(no_mangle)]
pub extern "C" fn umapcfg_get_num_flushers() -> u64 {
    EVICTORS.value
}

#[unsafe(no_mangle)]
pub extern "C" fn umapcfg_set_num_flushers(num_flushers: u64) {
    set_fixed("num_flushers", &EVICTORS, num_flushers);
}

#[unsafe(no_mangle)]
pub extern "C" fn umapcfg_get_max_fault_events() -> u64 {
    FAULT_EVENTS.value
}

#[unsafe(no_mangle)]
pub extern "C" fn umapcfg_set_max_fault_events(max_events: u64) {
    set_fixed("max_fault_events", &FAULT_EVENTS, max_events);
}

#[unsafe(no_mangle)]
pub extern "C" fn umapcfg_get_read_ahead() -> u64 {
    get(|s| s.read_ahead)
}

#[unsafe(no_mangle)]
pub extern "C" fn umapcfg_set_read_ahead(pages: u64) {
    set("read_ahead", |s| s.read_ahead = pages);
}

#[unsafe(no_mangle)]
pub extern "C" fn umapcfg_get_evict_low_water_threshold() -> libc::c_int {
    get(|s| s.low_pct)
}

#[unsafe(no_mangle)]
pub extern "C" fn umapcfg_set_evict_low_water_threshold(percent: libc::c_int) {
    set("evict_low_water_threshold", |s| s.low_pct = percent);
}

#[unsafe(no_mangle)]
pub extern "C" fn umapcfg_get_evict_high_water_threshold() -> libc::c_int {
    get(|s| s.high_pct)
}

#[unsafe(no_mangle)]
pub extern "C" fn umapcfg_set_evict_high_water_threshold(percent: libc::c_int) {
    set("evict_high_water_threshold", |s| s.high_pct = percent);
}
