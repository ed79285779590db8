//! The process's UMap state: the settings, the buffers (a farmem runtime
//! over the file store, started by the first `umap` of a file, and one over
//! the rack, started by the first of far memory) and the regions they
//! serve, by start address.

use std::collections::BTreeMap;
use std::os::fd::RawFd;
use std::sync::Arc;

use farmem_runtime::preload_env::PreloadEnv;
use farmem_runtime::{Region, Runtime, join};

use crate::file_store::FileStore;
use crate::settings::Settings;

const PAGE: u64 = farmem_core::PAGE_SIZE;

/// Why a call failed: the errno C sees, and a message naming the cause.
#[derive(Debug, thiserror::Error)]
#[error("{msg}")]
pub struct UmapError {
    pub errno: i32,
    pub msg: String,
}

impl UmapError {
    pub fn new(errno: i32, msg: impl Into<String>) -> Self {
        Self {
            errno,
            msg: msg.into(),
        }
    }
}

fn inval(msg: impl Into<String>) -> UmapError {
    UmapError::new(libc::EINVAL, msg)
}

/// A started buffer: the runtime lives as long as the process, as
/// UMap's does, so its regions can borrow it for `'static`.
struct Buffer {
    rt: &'static Runtime,
    files: Arc<FileStore>,
}

struct Mapping {
    region: Region<'static>,
    /// The file store's window; None for far memory on the rack.
    window: Option<u64>,
}

pub struct Maps {
    pub settings: Settings,
    /// A `UMAP_*` variable that did not parse: every `umap` fails with it.
    env_error: Option<String>,
    buffer: Option<Buffer>,
    rack: Option<&'static Runtime>,
    regions: BTreeMap<usize, Mapping>,
}

/// What `umap` is asked to map.
pub struct Request {
    pub addr: usize,
    pub length: usize,
    pub prot: i32,
    pub flags: i32,
    pub fd: RawFd,
    pub offset: i64,
}

impl Maps {
    pub fn new(settings: Result<Settings, String>, fallback: Settings) -> Self {
        let (settings, env_error) = match settings {
            Ok(s) => (s, None),
            Err(e) => (fallback, Some(e)),
        };
        Self {
            settings,
            env_error,
            buffer: None,
            rack: None,
            regions: BTreeMap::new(),
        }
    }

    pub fn started(&self) -> bool {
        self.buffer.is_some() || self.rack.is_some()
    }

    /// Maps the request; returns the region's start.
    pub fn map(&mut self, req: &Request) -> Result<usize, UmapError> {
        check(req)?;
        if req.flags & libc::MAP_ANONYMOUS != 0 {
            let region = self.rack()?.region(req.length as u64).map_err(|e| {
                UmapError::new(libc::ENOMEM, format!("far memory on the rack: {e}"))
            })?;
            let start = region.as_ptr() as usize;
            keep_from_children(&region);
            self.regions.insert(
                start,
                Mapping {
                    region,
                    window: None,
                },
            );
            return Ok(start);
        }
        let buffer = self.buffer()?;
        let offset = req.offset as u64;
        let window = buffer
            .files
            .open(req.fd, offset, req.length as u64)
            .map_err(|e| {
                UmapError::new(
                    e.raw_os_error().unwrap_or(libc::EBADF),
                    format!("fd {}: {e}", req.fd),
                )
            })?;
        let span = (req.length as u64).div_ceil(PAGE) * PAGE;
        let region = match buffer.rt.region_over(&[(window, span)]) {
            Ok(r) => r,
            Err(e) => {
                buffer.files.close(window);
                return Err(UmapError::new(libc::ENOMEM, e.to_string()));
            }
        };
        let start = region.as_ptr() as usize;
        if req.prot & libc::PROT_WRITE == 0 {
            // Read-only, as asked: a store to it faults, so nothing is
            // ever written back to a file opened for reading.
            // SAFETY: the region's own pages, mapped by the runtime.
            let rc = unsafe { libc::mprotect(start as *mut _, region.len(), libc::PROT_READ) };
            if rc != 0 {
                let e = std::io::Error::last_os_error();
                drop(region);
                buffer.files.close(window);
                return Err(UmapError::new(
                    e.raw_os_error().unwrap_or(libc::EINVAL),
                    format!("making the region read-only: {e}"),
                ));
            }
        }
        keep_from_children(&region);
        self.regions.insert(
            start,
            Mapping {
                region,
                window: Some(window),
            },
        );
        Ok(start)
    }

    /// Writes the region at `addr` back to its file and unmaps it (a
    /// region of far memory is given up with its data, as munmap does).
    pub fn unmap(&mut self, addr: usize) -> Result<(), UmapError> {
        let Some(m) = self.regions.get(&addr) else {
            return Err(inval(format!(
                "{addr:#x} is not the start of a region umap returned"
            )));
        };
        // Written back first: a region that cannot be stays mapped, its
        // data still there for another try.
        if m.window.is_some() {
            m.region
                .sync()
                .map_err(|e| UmapError::new(libc::EIO, format!("writing the region back: {e}")))?;
        }
        if let Some(m) = self.regions.remove(&addr) {
            drop(m.region);
            if let (Some(window), Some(b)) = (m.window, &self.buffer) {
                b.files.close(window);
            }
        }
        Ok(())
    }

    /// Writes every region's dirty pages back.
    pub fn flush(&self) -> Result<(), UmapError> {
        let runtimes = self.buffer.as_ref().map(|b| b.rt).into_iter();
        for rt in runtimes.chain(self.rack) {
            rt.sync()
                .map_err(|e| UmapError::new(libc::EIO, format!("flushing: {e}")))?;
        }
        Ok(())
    }

    /// True when `addr` is inside a mapped region.
    pub fn contains(&self, addr: usize) -> bool {
        self.regions
            .range(..=addr)
            .next_back()
            .is_some_and(|(start, m)| addr < start + m.region.len())
    }

    fn buffer(&mut self) -> Result<&Buffer, UmapError> {
        if let Some(e) = &self.env_error {
            return Err(inval(e.clone()));
        }
        if self.buffer.is_none() {
            let cfg = self.settings.config().map_err(inval)?;
            let files = Arc::new(FileStore::default());
            let rt = Runtime::new(cfg, files.clone(), files.clone()).map_err(|e| {
                UmapError::new(libc::ENOMEM, format!("starting farmem's runtime: {e}"))
            })?;
            self.buffer = Some(Buffer {
                rt: Box::leak(Box::new(rt)),
                files,
            });
        }
        Ok(self.buffer.as_ref().expect("started above"))
    }

    fn rack(&mut self) -> Result<&'static Runtime, UmapError> {
        if let Some(e) = &self.env_error {
            return Err(inval(e.clone()));
        }
        if let Some(rt) = self.rack {
            return Ok(rt);
        }
        let rt = start_rack(&self.settings).map_err(|e| UmapError::new(libc::ENODEV, e))?;
        let rt: &'static Runtime = Box::leak(Box::new(rt));
        self.rack = Some(rt);
        Ok(rt)
    }
}

/// A forked child has no runtime and no userfaultfd registration: a page
/// not local at the fork would read as zeros there. Not inheriting the
/// region at all makes a child's touch a SIGSEGV instead of a wrong answer.
fn keep_from_children(region: &Region<'_>) {
    // SAFETY: the region's own mapping; the advice changes only whether a
    // child inherits it. Failure leaves it inherited, as without the call.
    unsafe { libc::madvise(region.as_ptr().cast(), region.len(), libc::MADV_DONTFORK) };
}

/// The runtime for far memory on the rack, started like `farmem run`'s
/// shim from the `FARMEM_*` variables (FARMEM_CONTROLLER, FARMEM_TOKEN_FILE,
/// FARMEM_BACKEND, ...), its buffer sized by the UMap settings.
fn start_rack(settings: &Settings) -> Result<Runtime, String> {
    let get = |var: &std::ffi::CStr| std::env::var(var.to_str().ok()?).ok();
    let env = PreloadEnv::read(&get).map_err(|e| format!("far memory needs a rack: {e}"))?;
    let mut cfg = env.config()?;
    settings.apply(&mut cfg)?;
    let rack = match &env.controller {
        Some(controller) if env.backend.needs_rack() => Some(join::connect(&env, controller)?),
        _ => None,
    };
    if let Some(rack) = &rack {
        join::keep_lease(rack, env.lease_ms, |e| {
            eprintln!("farmem umap: {e}; aborting");
            std::process::abort();
        })?;
    }
    let built = env
        .backend
        .build(
            rack.map(|r| (r.clone() as _, r as _)),
            cfg.local_bytes,
            env.far_bytes,
        )
        .map_err(|e| format!("backend {}: {e}", env.backend))?;
    Runtime::new(cfg, built.store, built.slabs)
        .map_err(|e| format!("starting farmem's runtime: {e}"))
}

fn check(req: &Request) -> Result<(), UmapError> {
    if req.length == 0 {
        return Err(inval("length 0: nothing to map"));
    }
    if req.flags & libc::MAP_FIXED != 0 {
        return Err(inval(
            "UMAP_FIXED is not supported: farmem places its regions itself (pass addr NULL)",
        ));
    }
    if req.flags & libc::MAP_SHARED != 0 || req.flags & libc::MAP_PRIVATE == 0 {
        return Err(inval(
            "flags must have UMAP_PRIVATE (UMap supports no other sharing)",
        ));
    }
    if req.prot & libc::PROT_READ == 0 || req.prot & !(libc::PROT_READ | libc::PROT_WRITE) != 0 {
        return Err(inval(format!(
            "prot {:#x}: PROT_READ, or PROT_READ | PROT_WRITE",
            req.prot
        )));
    }
    let anonymous = req.flags & libc::MAP_ANONYMOUS != 0;
    if anonymous != (req.fd == -1) {
        return Err(inval(
            "a region maps a file (fd >= 0) or, with UMAP_ANONYMOUS and fd -1, the rack",
        ));
    }
    if anonymous && (req.prot & libc::PROT_WRITE == 0 || req.offset != 0) {
        return Err(inval(
            "far memory (UMAP_ANONYMOUS) starts as zeros: map it PROT_READ | PROT_WRITE, at offset 0",
        ));
    }
    if req.offset < 0 || !(req.offset as u64).is_multiple_of(PAGE) {
        return Err(inval(format!(
            "offset {}: a non-negative multiple of the page size ({PAGE})",
            req.offset
        )));
    }
    let _ = req.addr; // a hint only, as for mmap without MAP_FIXED
    Ok(())
}
