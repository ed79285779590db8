//! UMap's file store: the files `umap` maps, each a window of the
//! runtime's store address space.
//!
//! A window starts at its own base address and runs over the mapped part
//! of its file, so store address `base + i` is file offset `offset + i`.
//! Windows are a page apart, so no read or write-back spans two. Writes
//! stop at the window's end: like `mmap`, a region never grows its file
//! from the tail of its last page.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{BorrowedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use parking_lot::RwLock;

use farmem_runtime::{RemoteStore, SlabSource, StoreError};

const PAGE: u64 = farmem_core::PAGE_SIZE;
/// The first window's base: far from any address a program maps, as the
/// rack's are, so a local address passed by mistake is refused.
const FIRST_BASE: u64 = 1 << 40;

struct Window {
    file: File,
    offset: u64,
    len: u64,
}

/// The open windows, by base address.
pub struct FileStore {
    windows: RwLock<BTreeMap<u64, Arc<Window>>>,
    next_base: parking_lot::Mutex<u64>,
}

impl Default for FileStore {
    fn default() -> Self {
        Self {
            windows: RwLock::new(BTreeMap::new()),
            next_base: parking_lot::Mutex::new(FIRST_BASE),
        }
    }
}

impl FileStore {
    /// Opens a window over `len` bytes of the file on `fd` from `offset`
    /// (page-aligned), on a duplicate of `fd` so the caller may close its
    /// own; returns the window's base address.
    pub fn open(&self, fd: RawFd, offset: u64, len: u64) -> std::io::Result<u64> {
        // SAFETY: the caller passed an open descriptor; it is borrowed
        // only for the duplicate.
        let file = File::from(unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()?);
        let span = len.div_ceil(PAGE) * PAGE;
        let base = {
            let mut next = self.next_base.lock();
            let base = *next;
            *next = base
                .checked_add(span + PAGE)
                .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
            base
        };
        let window = Arc::new(Window { file, offset, len });
        self.windows.write().insert(base, window);
        Ok(base)
    }

    /// Closes the window at `base` (its descriptor with it).
    pub fn close(&self, base: u64) {
        self.windows.write().remove(&base);
    }

    /// The window holding `len` bytes at `addr`, and the file offset of
    /// `addr`.
    fn locate(&self, addr: u64, len: usize) -> Result<(Arc<Window>, u64, u64), StoreError> {
        let out = || StoreError::OutOfRange {
            addr,
            len: len as u64,
        };
        let windows = self.windows.read();
        let (base, w) = windows.range(..=addr).next_back().ok_or_else(out)?;
        let at = addr - base;
        let span = w.len.div_ceil(PAGE) * PAGE;
        if at.checked_add(len as u64).is_none_or(|end| end > span) {
            return Err(out());
        }
        Ok((w.clone(), at, w.offset + at))
    }
}

fn io(e: std::io::Error) -> StoreError {
    StoreError::Other(Box::new(e))
}

impl RemoteStore for FileStore {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        let (w, _, off) = self.locate(addr, buf.len())?;
        let mut done = 0;
        while done < buf.len() {
            match w.file.read_at(&mut buf[done..], off + done as u64) {
                // Past the end of the file: zeros, as mmap shows them.
                Ok(0) => {
                    buf[done..].fill(0);
                    break;
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io(e)),
            }
        }
        Ok(())
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<(), StoreError> {
        let (w, at, off) = self.locate(addr, data.len())?;
        let keep = w.len.saturating_sub(at).min(data.len() as u64) as usize;
        w.file.write_all_at(&data[..keep], off).map_err(io)
    }

    /// Lines that follow one another go out in one write: a page whose
    /// every line changed costs one system call, not 64.
    fn write_lines(&self, lines: &[(u64, [u8; 64])]) -> Result<(), StoreError> {
        let mut run: Vec<u8> = Vec::new();
        let mut run_addr = 0;
        for (addr, line) in lines {
            if run.is_empty() || run_addr + run.len() as u64 != *addr {
                if !run.is_empty() {
                    self.write(run_addr, &run)?;
                    run.clear();
                }
                run_addr = *addr;
            }
            run.extend_from_slice(line);
        }
        if run.is_empty() {
            return Ok(());
        }
        self.write(run_addr, &run)
    }
}

/// Windows are opened by `umap`, never allocated: a slab request means a
/// region was made the wrong way.
impl SlabSource for FileStore {
    fn allocate(&self, _size: u64) -> Result<Vec<(u64, u64)>, StoreError> {
        Err(StoreError::Refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn windows_map_store_addresses_to_their_files_and_stop_at_their_end() {
        let mut f = tempfile();
        std::io::Write::write_all(&mut f, &vec![7u8; 3 * PAGE as usize]).unwrap();
        let store = FileStore::default();
        // Pages 1.. of the file, 5000 bytes of them.
        let a = store.open(f.as_raw_fd(), PAGE, 5000).unwrap();
        let b = store.open(f.as_raw_fd(), 0, 100).unwrap();
        assert!(b >= a + 2 * PAGE + PAGE, "windows a page apart");
        let mut buf = vec![0u8; PAGE as usize];
        store.read(a + PAGE, &mut buf).unwrap();
        // The file's last page is bytes 8192..12288: the window's second
        // page is file page 2, all sevens.
        assert!(buf.iter().all(|&x| x == 7));
        store.write(a, &[1u8; 64]).unwrap();
        // 5000 - 4096 = 904 bytes of the second page are the window's.
        store.write(a + PAGE, &vec![2u8; PAGE as usize]).unwrap();
        let mut whole = vec![0u8; 3 * PAGE as usize];
        f.read_exact_at(&mut whole, 0).unwrap();
        assert!(whole[PAGE as usize..][..64].iter().all(|&x| x == 1));
        let tail = &whole[2 * PAGE as usize..];
        assert!(tail[..904].iter().all(|&x| x == 2));
        assert!(
            tail[904..].iter().all(|&x| x == 7),
            "past the window: untouched"
        );
        assert!(matches!(
            store.read(a + 2 * PAGE, &mut buf),
            Err(StoreError::OutOfRange { .. })
        ));
        assert!(store.read(a - PAGE, &mut buf).is_err());
        store.close(a);
        assert!(store.read(a, &mut buf).is_err());
        store.read(b, &mut buf).unwrap();
    }

    #[test]
    fn past_the_end_of_the_file_reads_zeros() {
        let mut f = tempfile();
        std::io::Write::write_all(&mut f, &[9u8; 10]).unwrap();
        let store = FileStore::default();
        let a = store.open(f.as_raw_fd(), 0, 2 * PAGE).unwrap();
        let mut buf = vec![1u8; 2 * PAGE as usize];
        store.read(a, &mut buf).unwrap();
        assert_eq!(&buf[..10], &[9u8; 10]);
        assert!(buf[10..].iter().all(|&x| x == 0));
    }

    fn tempfile() -> File {
        let dir = std::env::temp_dir();
        let path = dir.join(format!(
            "farmem-umap-store-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        f
    }
}
