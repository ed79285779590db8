//! Far memory in a file or a block device (xDM's SSD backend; the kernel's
//! swap file, from user space).
//!
//! The file is opened with `O_DIRECT`, so pages written to it do not stay
//! in the page cache, where they would take the local memory the limit is
//! meant to free. A new file is unlinked as soon as it is open and its
//! whole size reserved with `fallocate` at once: a full disk is an error at
//! start, not a write failing mid-run, and nothing is left behind however
//! the program ends. Addresses start at 1 TiB, as the rack's do, so a
//! local address passed by mistake is refused instead of read.
//!
//! Direct I/O wants buffers, offsets and lengths aligned to the device's
//! block; the runtime's page buffers and whole-page writes are, and
//! anything else goes through an aligned bounce buffer.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde::Serialize;

use farmem_core::Counter;

use super::page_groups;
use crate::store::{RemoteStore, SlabSource, StoreError};

const PAGE: usize = farmem_core::PAGE_SIZE as usize;
const LINE: usize = farmem_core::CACHE_LINE as usize;
/// The first address: far from any a program maps.
const BASE: u64 = 1 << 40;

/// Why a file backend cannot start.
#[derive(Debug, thiserror::Error)]
pub enum FileBackendError {
    #[error("{path}: {what}: {source}")]
    Io {
        path: PathBuf,
        what: &'static str,
        source: std::io::Error,
    },
    #[error(
        "{path}: the filesystem does not support direct I/O (O_DIRECT): pages written there would stay in the page cache, in the local memory the limit is meant to free"
    )]
    NoDirectIo { path: PathBuf },
    #[error(
        "{path} is on tmpfs or ramfs: a file there is local memory, the memory the limit is meant to free"
    )]
    InMemory { path: PathBuf },
    #[error(
        "{path}: cannot reserve {want} bytes for far memory ({free} bytes free there); a smaller --far-mem needs less"
    )]
    NoSpace { path: PathBuf, want: u64, free: u64 },
    #[error("{path} exists and is not a directory or a block device; farmem will not overwrite it")]
    Exists { path: PathBuf },
    #[error("{path}: a block device of {have} bytes is smaller than the {want} bytes asked for")]
    DeviceTooSmall { path: PathBuf, have: u64, want: u64 },
}

/// What the file has seen, for reports and tests.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct FileStats {
    pub reads: u64,
    pub bytes_read: u64,
    pub writes: u64,
    pub bytes_written: u64,
    /// Pages written in part: read, patched and written whole.
    pub read_modify_writes: u64,
}

#[derive(Default)]
struct Counters {
    reads: Counter,
    bytes_read: Counter,
    writes: Counter,
    bytes_written: Counter,
    read_modify_writes: Counter,
}

/// A page-aligned heap buffer for direct I/O that the caller's is not.
struct Aligned {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

impl Aligned {
    fn zeroed(len: usize) -> Self {
        let len = len.max(PAGE).next_multiple_of(PAGE);
        let layout = std::alloc::Layout::from_size_align(len, PAGE).expect("page-aligned layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr =
            std::ptr::NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Self { ptr, len }
    }
}

impl std::ops::Deref for Aligned {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` bytes allocated (and zeroed) in `zeroed`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for Aligned {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and `&mut self` makes this the only borrow.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        let layout =
            std::alloc::Layout::from_size_align(self.len, PAGE).expect("page-aligned layout");
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
    }
}

/// Far memory in a file or block device.
pub struct FileStore {
    file: File,
    path: PathBuf,
    size: u64,
    next: Mutex<u64>,
    counters: Counters,
    /// While set, every write fails with EIO, as a failing disk's would
    /// ([`FileStore::fail_writes`]).
    failing: std::sync::atomic::AtomicBool,
}

fn io_error(path: &Path, what: &'static str) -> impl FnOnce(std::io::Error) -> FileBackendError {
    let path = path.to_path_buf();
    move |source| FileBackendError::Io { path, what, source }
}

impl FileStore {
    /// `size` bytes of far memory at `path`: in a new file there (unlinked
    /// at once), in a new file inside it if it is a directory, or on it if
    /// it is a block device (whose contents are overwritten).
    pub fn create(path: &Path, size: u64) -> Result<Self, FileBackendError> {
        let size = size.next_multiple_of(PAGE as u64);
        let meta = std::fs::metadata(path).ok();
        let device = meta
            .as_ref()
            .is_some_and(|m| m.file_type().is_block_device());
        let file_path = match &meta {
            Some(m) if m.is_dir() => path.join(format!(
                "farmem-far-{}-{:x}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos())
            )),
            Some(_) if device => path.to_path_buf(),
            Some(_) => return Err(FileBackendError::Exists { path: path.into() }),
            None => path.to_path_buf(),
        };
        let mut opts = OpenOptions::new();
        opts.read(true).write(true).custom_flags(libc::O_DIRECT);
        if !device {
            opts.create_new(true);
        }
        let file = match opts.open(&file_path) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                return Err(FileBackendError::NoDirectIo { path: file_path });
            }
            Err(e) => return Err(io_error(&file_path, "opening for direct I/O")(e)),
        };
        if in_memory(&file).unwrap_or(false) {
            if !device {
                let _ = std::fs::remove_file(&file_path);
            }
            return Err(FileBackendError::InMemory { path: file_path });
        }
        if device {
            let have =
                device_size(&file).map_err(io_error(&file_path, "reading the device's size"))?;
            if have < size {
                return Err(FileBackendError::DeviceTooSmall {
                    path: file_path,
                    have,
                    want: size,
                });
            }
        } else {
            // Gone from the directory now; its blocks go back when the process ends.
            std::fs::remove_file(&file_path).map_err(io_error(&file_path, "unlinking"))?;
            reserve(&file, size).map_err(|e| match e.raw_os_error() {
                Some(libc::ENOSPC | libc::EFBIG) => FileBackendError::NoSpace {
                    path: file_path.clone(),
                    want: size,
                    free: free_bytes(&file).unwrap_or(0),
                },
                _ => io_error(&file_path, "reserving space")(e),
            })?;
        }
        Ok(Self {
            file,
            path: file_path,
            size,
            next: Mutex::new(BASE),
            counters: Counters::default(),
            failing: std::sync::atomic::AtomicBool::new(false),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn stats(&self) -> FileStats {
        let c = &self.counters;
        FileStats {
            reads: c.reads.get(),
            bytes_read: c.bytes_read.get(),
            writes: c.writes.get(),
            bytes_written: c.bytes_written.get(),
            read_modify_writes: c.read_modify_writes.get(),
        }
    }

    /// The file offset of `len` bytes at `addr`, if the file holds them.
    fn offset(&self, addr: u64, len: usize) -> Result<u64, StoreError> {
        let out = || StoreError::OutOfRange {
            addr,
            len: len as u64,
        };
        let off = addr.checked_sub(BASE).ok_or_else(out)?;
        match off.checked_add(len as u64) {
            Some(end) if end <= self.size => Ok(off),
            _ => Err(out()),
        }
    }

    fn failed(&self, what: &str, addr: u64, e: std::io::Error) -> StoreError {
        StoreError::Other(format!("{}: {what} at {addr:#x}: {e}", self.path.display()).into())
    }

    /// Reads exactly `buf.len()` bytes at file offset `off` (aligned).
    fn pread_exact(&self, off: u64, buf: &mut [u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.read_exact_at(buf, off)
    }

    fn pwrite_all(&self, off: u64, data: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        self.file.write_all_at(data, off)
    }

    /// Makes every write fail with EIO while `fail` is set: a disk going
    /// bad mid-run, for tests of what the runtime does then.
    #[doc(hidden)]
    pub fn fail_writes(&self, fail: bool) {
        self.failing
            .store(fail, std::sync::atomic::Ordering::SeqCst);
    }

    /// Writes whole pages `data` at page-aligned `off`, through a bounce
    /// buffer if `data` is not aligned.
    fn write_pages(&self, off: u64, data: &[u8]) -> std::io::Result<()> {
        if aligned(data.as_ptr(), data.len()) {
            self.pwrite_all(off, data)
        } else {
            let mut b = Aligned::zeroed(data.len());
            b[..data.len()].copy_from_slice(data);
            self.pwrite_all(off, &b[..data.len()])
        }
    }

    /// Applies `parts` (offset in page, bytes) to the page at `page_off`:
    /// read, patch, write.
    fn patch_page(&self, page_off: u64, parts: &[(usize, &[u8])]) -> std::io::Result<()> {
        let mut b = Aligned::zeroed(PAGE);
        self.pread_exact(page_off, &mut b[..PAGE])?;
        for (o, bytes) in parts {
            b[*o..o + bytes.len()].copy_from_slice(bytes);
        }
        self.counters.read_modify_writes.inc();
        self.pwrite_all(page_off, &b[..PAGE])
    }
}

fn aligned(ptr: *const u8, len: usize) -> bool {
    (ptr as usize).is_multiple_of(PAGE) && len.is_multiple_of(PAGE)
}

/// Blocks for `size` bytes, allocated now.
fn reserve(file: &File, size: u64) -> std::io::Result<()> {
    // SAFETY: a valid descriptor; fallocate only reads its arguments.
    let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, size as libc::off_t) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn statfs(file: &File) -> std::io::Result<libc::statfs> {
    // SAFETY: statfs is plain old data, valid zeroed.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out-pointer for fstatfs.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

fn free_bytes(file: &File) -> std::io::Result<u64> {
    let st = statfs(file)?;
    Ok(st.f_bavail as u64 * st.f_bsize as u64)
}

/// Whether the file lives in memory (tmpfs, ramfs).
fn in_memory(file: &File) -> std::io::Result<bool> {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    Ok(matches!(
        statfs(file)?.f_type as i64,
        TMPFS_MAGIC | RAMFS_MAGIC
    ))
}

fn device_size(file: &File) -> std::io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    (&*file).seek(SeekFrom::End(0))
}

impl RemoteStore for FileStore {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        let off = self.offset(addr, buf.len())?;
        let direct = aligned(buf.as_ptr(), buf.len()) && off.is_multiple_of(PAGE as u64);
        let result = if direct {
            self.pread_exact(off, buf)
        } else {
            let start = off - off % PAGE as u64;
            let skip = (off - start) as usize;
            let mut b = Aligned::zeroed(skip + buf.len());
            let len = b.len().min((self.size - start) as usize);
            self.pread_exact(start, &mut b[..len]).map(|()| {
                buf.copy_from_slice(&b[skip..skip + buf.len()]);
            })
        };
        result.map_err(|e| self.failed("reading", addr, e))?;
        self.counters.reads.inc();
        self.counters.bytes_read.add(buf.len() as u64);
        Ok(())
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<(), StoreError> {
        let off = self.offset(addr, data.len())?;
        let mut done = 0;
        while done < data.len() {
            let o = off + done as u64;
            let in_page = o as usize % PAGE;
            let page_off = o - in_page as u64;
            let result = if in_page == 0 && data.len() - done >= PAGE {
                let whole = (data.len() - done) / PAGE * PAGE;
                let r = self.write_pages(o, &data[done..done + whole]);
                done += whole;
                r
            } else {
                let n = (PAGE - in_page).min(data.len() - done);
                let r = self.patch_page(page_off, &[(in_page, &data[done..done + n])]);
                done += n;
                r
            };
            result.map_err(|e| self.failed("writing", addr, e))?;
        }
        self.counters.writes.inc();
        self.counters.bytes_written.add(data.len() as u64);
        Ok(())
    }

    /// Whole pages in a row go out as one write; a page written in part is
    /// read, patched and written.
    fn write_lines(&self, lines: &[(u64, [u8; 64])]) -> Result<(), StoreError> {
        for (a, _) in lines {
            self.offset(*a, LINE)?;
        }
        let Some(groups) = page_groups(lines) else {
            return lines.iter().try_for_each(|(a, l)| self.write(*a, l));
        };
        let mut run = Aligned::zeroed(PAGE);
        let mut run_start: Option<u64> = None;
        let mut run_pages = 0usize;
        let flush = |run: &Aligned, start: Option<u64>, pages: usize| -> Result<(), StoreError> {
            match start {
                Some(s) if pages > 0 => self
                    .pwrite_all(s - BASE, &run[..pages * PAGE])
                    .map_err(|e| self.failed("writing", s, e)),
                _ => Ok(()),
            }
        };
        for g in groups {
            let page = g.page;
            if !g.whole {
                // Pages before it land first: a page in the run may be this one.
                flush(&run, run_start, run_pages)?;
                run_start = None;
                self.patch_page(page - BASE, &g.parts())
                    .map_err(|e| self.failed("writing", page, e))?;
                continue;
            }
            let continues = run_start.is_some_and(|s| s + (run_pages * PAGE) as u64 == page);
            if !continues {
                flush(&run, run_start, run_pages)?;
                run_start = Some(page);
                run_pages = 0;
            }
            if (run_pages + 1) * PAGE > run.len() {
                let mut bigger = Aligned::zeroed(run.len() * 2);
                bigger[..run.len()].copy_from_slice(&run);
                run = bigger;
            }
            for (k, (_, l)) in g.lines.iter().enumerate() {
                let at = run_pages * PAGE + k * LINE;
                run[at..at + LINE].copy_from_slice(l);
            }
            run_pages += 1;
        }
        flush(&run, run_start, run_pages)?;
        self.counters.writes.inc();
        self.counters.bytes_written.add((lines.len() * LINE) as u64);
        Ok(())
    }

    fn prepare_read_in_signal(&self) -> Result<bool, StoreError> {
        Ok(true)
    }

    /// pread is async-signal-safe; a buffer direct I/O cannot take goes
    /// the ordinary way.
    fn read_in_signal(&self, addr: u64, buf: &mut [u8]) -> bool {
        let Ok(off) = self.offset(addr, buf.len()) else {
            return false;
        };
        if !aligned(buf.as_ptr(), buf.len()) || !off.is_multiple_of(PAGE as u64) {
            return false;
        }
        self.pread_exact(off, buf).is_ok()
    }
}

impl SlabSource for FileStore {
    fn allocate(&self, size: u64) -> Result<Vec<(u64, u64)>, StoreError> {
        let size = size.next_multiple_of(PAGE as u64);
        let mut next = self.next.lock();
        let left = BASE + self.size - *next;
        if size > left {
            return Err(StoreError::Exhausted { asked: size, left });
        }
        let base = *next;
        *next += size;
        Ok(vec![(base, size)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = PAGE as u64;

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("farmem-file-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn store(size: u64) -> (FileStore, PathBuf) {
        let d = dir().join(format!("{size}"));
        std::fs::create_dir_all(&d).unwrap();
        (FileStore::create(&d, size).unwrap(), d)
    }

    #[test]
    fn pages_and_lines_cross_the_file_and_nothing_is_left_behind() {
        let (s, d) = store(64 * P);
        assert_eq!(
            std::fs::read_dir(&d).unwrap().count(),
            0,
            "unlinked at once"
        );
        let (base, len) = s.allocate(16 * P).unwrap()[0];
        assert_eq!(len, 16 * P);
        let mut page = vec![7u8; PAGE];
        s.read(base, &mut page).unwrap();
        assert!(page.iter().all(|&b| b == 0), "fresh far memory reads zeros");
        // Two whole pages in a row, a line of a third, an unaligned write.
        let mut lines = Vec::new();
        for p in 0..2u64 {
            for l in 0..64u64 {
                lines.push((base + p * P + l * 64, [(p * 64 + l) as u8; 64]));
            }
        }
        lines.push((base + 2 * P + 128, [9u8; 64]));
        s.write_lines(&lines).unwrap();
        s.write(base + 3 * P - 3, b"abcdef").unwrap();
        let mut got = vec![0u8; 4 * PAGE];
        s.read(base, &mut got).unwrap();
        for (i, (a, l)) in lines.iter().enumerate() {
            let at = (a - base) as usize;
            assert_eq!(&got[at..at + 64], l, "record {i}");
        }
        assert_eq!(&got[3 * PAGE - 3..3 * PAGE + 3], b"abcdef");
        // An unaligned read through the bounce buffer.
        let mut small = [0u8; 5];
        s.read(base + 2 * P + 126, &mut small).unwrap();
        assert_eq!(small, [0, 0, 9, 9, 9]);
        let st = s.stats();
        assert_eq!(st.read_modify_writes, 3, "{st:?}");
        // A signal handler's aligned page reads directly; another does not.
        let mut aligned_page = Aligned::zeroed(PAGE);
        assert!(s.read_in_signal(base + P, &mut aligned_page));
        assert_eq!(&aligned_page[..64], &lines[64].1);
        assert!(!s.read_in_signal(base + P + 64, &mut aligned_page[..64]));
        drop(s);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn what_the_file_cannot_hold_is_refused() {
        let (s, d) = store(8 * P);
        let (base, _) = s.allocate(8 * P).unwrap()[0];
        assert!(matches!(s.allocate(P), Err(StoreError::Exhausted { .. })));
        let mut b = [0u8; 64];
        assert!(matches!(
            s.read(base + 8 * P, &mut b),
            Err(StoreError::OutOfRange { .. })
        ));
        assert!(matches!(
            s.read(4096, &mut b),
            Err(StoreError::OutOfRange { .. })
        ));
        assert!(matches!(
            s.write_lines(&[(base, [1; 64]), (base + 8 * P, [1; 64])]),
            Err(StoreError::OutOfRange { .. })
        ));
        // Nothing of the refused batch was written.
        s.read(base, &mut b).unwrap();
        assert_eq!(b, [0; 64]);
        drop(s);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_file_that_cannot_be_had_is_a_clear_error() {
        let d = dir();
        let existing = d.join("precious");
        std::fs::write(&existing, b"data").unwrap();
        let e = FileStore::create(&existing, P).err().unwrap().to_string();
        assert!(
            e.contains("exists") && e.contains("will not overwrite"),
            "{e}"
        );
        assert_eq!(std::fs::read(&existing).unwrap(), b"data");
        let e = FileStore::create(Path::new("/nonexistent-dir/far"), P)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.starts_with("/nonexistent-dir/far: opening for direct I/O"),
            "{e}"
        );
        // More than the disk has: refused at once, with what is free.
        let e = FileStore::create(&d, 1 << 60).err().unwrap();
        assert!(matches!(e, FileBackendError::NoSpace { .. }), "{e}");
        assert!(e.to_string().contains("a smaller --far-mem"), "{e}");
        if std::fs::metadata("/dev/shm").is_ok_and(|m| m.is_dir()) {
            match FileStore::create(Path::new("/dev/shm"), P) {
                // Older kernels' tmpfs refuses O_DIRECT; 6.6+ takes it.
                Err(FileBackendError::InMemory { .. } | FileBackendError::NoDirectIo { .. }) => {}
                other => panic!("tmpfs: {:?}", other.map(|s| s.path().to_path_buf())),
            }
        }
        let _ = std::fs::remove_file(&existing);
    }
}
