//! Reading a live process's writable memory, as KTracker does (Kona §4.4):
//! its writable mappings (/proc/PID/maps), which of their pages are in
//! memory (/proc/PID/pagemap) and their bytes (process_vm_readv), diffed
//! against the previous scan's copy.
//!
//! Soft-dirty bits would let a scan read only the pages written since the
//! last; kernels built without them (this machine's among them) report
//! none, so every resident page is read and compared. The copy costs as
//! much memory as the target's writable resident pages.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use super::diff::{Dirty, PAGE};

/// Pages read with one process_vm_readv.
const READ_PAGES: usize = 256;

/// A writable mapping of the target: [start, end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    pub start: u64,
    pub end: u64,
}

/// The writable mappings listed in the text of /proc/PID/maps.
pub fn writable_regions(maps: &str) -> Vec<Region> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let range = fields.next()?;
            let perms = fields.next()?;
            if !perms.starts_with("rw") {
                return None;
            }
            let (lo, hi) = range.split_once('-')?;
            let start = u64::from_str_radix(lo, 16).ok()?;
            let end = u64::from_str_radix(hi, 16).ok()?;
            (start < end && start % PAGE as u64 == 0).then_some(Region { start, end })
        })
        .collect()
}

/// What one scan found.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scan {
    pub dirty: Dirty,
    /// Resident writable pages read.
    pub pages: u64,
    /// Of those, pages not seen before (first touched, or newly mapped).
    pub new_pages: u64,
}

/// A target process and the copy of its pages from the last scan.
pub struct Tracker {
    pid: i32,
    copy: HashMap<u64, Box<[u8]>>,
    scans: u64,
}

impl Tracker {
    pub fn new(pid: i32) -> Self {
        Self {
            pid,
            copy: HashMap::new(),
            scans: 0,
        }
    }

    /// Reads every resident writable page and diffs it against the last
    /// scan's copy. The first scan is the baseline: it only copies.
    pub fn scan(&mut self) -> io::Result<Scan> {
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", self.pid))?;
        let pagemap = File::open(format!("/proc/{}/pagemap", self.pid))?;
        let baseline = self.scans == 0;
        self.scans += 1;
        let mut out = Scan::default();
        let mut seen = HashSet::with_capacity(self.copy.len());
        let mut buf = vec![0u8; READ_PAGES * PAGE];
        for region in writable_regions(&maps) {
            for (addr, n) in resident_runs(&pagemap, &region)? {
                let mut at = addr;
                let mut left = n;
                while left > 0 {
                    let take = left.min(READ_PAGES);
                    let got = self.read(at, &mut buf[..take * PAGE]);
                    for (i, page) in buf[..got / PAGE * PAGE].chunks(PAGE).enumerate() {
                        let page_addr = at + (i * PAGE) as u64;
                        self.compare(page_addr, page, baseline, &mut out);
                        seen.insert(page_addr);
                    }
                    at += (take * PAGE) as u64;
                    left -= take;
                }
            }
        }
        // Pages no longer resident or mapped: their copy goes.
        self.copy.retain(|addr, _| seen.contains(addr));
        Ok(out)
    }

    fn compare(&mut self, addr: u64, page: &[u8], baseline: bool, out: &mut Scan) {
        out.pages += 1;
        match self.copy.get_mut(&addr) {
            Some(old) => {
                if **old != *page {
                    out.dirty.add_page(old, page);
                    old.copy_from_slice(page);
                }
            }
            None => {
                if !baseline {
                    out.new_pages += 1;
                    out.dirty.add_new_page(page);
                }
                self.copy.insert(addr, page.into());
            }
        }
    }

    /// Reads the target's bytes at `addr` into `buf`; returns how many
    /// whole bytes came (fewer when part of the range went away).
    fn read(&self, addr: u64, buf: &mut [u8]) -> usize {
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // SAFETY: `local` covers `buf`, which we own mutably; the remote
        // range is only read by the kernel, which checks it.
        let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        usize::try_from(n).unwrap_or(0)
    }
}

/// Runs of resident (in memory or swapped) pages of `region`: (first
/// address, pages).
fn resident_runs(pagemap: &File, region: &Region) -> io::Result<Vec<(u64, usize)>> {
    const ENTRIES: usize = 1 << 16;
    let pages = ((region.end - region.start) / PAGE as u64) as usize;
    let mut runs: Vec<(u64, usize)> = Vec::new();
    let mut raw = vec![0u8; ENTRIES * 8];
    let mut done = 0;
    while done < pages {
        let n = (pages - done).min(ENTRIES);
        let first = region.start / PAGE as u64 + done as u64;
        let got = pagemap.read_at(&mut raw[..n * 8], first * 8)?;
        for (i, e) in raw[..got / 8 * 8].chunks_exact(8).enumerate() {
            let entry = u64::from_le_bytes(e.try_into().unwrap_or_default());
            let resident = entry & (3 << 62) != 0;
            let addr = region.start + ((done + i) * PAGE) as u64;
            match runs.last_mut() {
                Some((a, len)) if resident && *a + (*len * PAGE) as u64 == addr => *len += 1,
                _ if resident => runs.push((addr, 1)),
                _ => {}
            }
        }
        if got < n * 8 {
            break;
        }
        done += n;
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_writable_mappings_are_tracked() {
        let maps = "\
55d0c0a00000-55d0c0a21000 r--p 00000000 fe:01 123 /usr/bin/prog
55d0c0c21000-55d0c0c23000 rw-p 00021000 fe:01 123 /usr/bin/prog
7f0000000000-7f0000400000 rw-p 00000000 00:00 0
7f0000400000-7f0000401000 ---p 00000000 00:00 0
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
7ffd00100000-7ffd00102000 r--p 00000000 00:00 0 [vvar]
garbage line
";
        let r = writable_regions(maps);
        assert_eq!(
            r.iter().map(|r| (r.start, r.end)).collect::<Vec<_>>(),
            [
                (0x55d0c0c21000, 0x55d0c0c23000),
                (0x7f0000000000, 0x7f0000400000),
                (0x7ffd00000000, 0x7ffd00021000)
            ]
        );
    }

    #[test]
    fn a_scan_of_this_process_sees_a_word_written_per_page() {
        let pages = 64;
        let mut mem = vec![1u8; pages * PAGE + PAGE];
        // Page-aligned part of it, touched so every page is resident.
        let off = (PAGE - mem.as_ptr() as usize % PAGE) % PAGE;
        let mut t = Tracker::new(std::process::id() as i32);
        t.scan().unwrap();
        for p in 0..pages {
            let at = off + p * PAGE + 128;
            mem[at..at + 8].copy_from_slice(&0x0102_0304_0506_0708u64.to_le_bytes());
        }
        let s = t.scan().unwrap();
        // Other memory of the test process changes too (the scan's own
        // buffers, other threads): at least our words, in our pages.
        assert!(s.dirty.bytes >= (pages * 8) as u64, "{s:?}");
        assert!(s.dirty.units[3] >= pages as u64, "{s:?}");
        std::hint::black_box(&mem);
    }
}
