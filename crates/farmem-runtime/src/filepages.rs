//! The process's read-only file pages (program text, libraries' code and
//! constants) under a limit that counts them.
//!
//! A cgroup's limit charges the page cache a process brings in, and its
//! reclaim drops the cold part of it first: a library's code that ran once
//! at start costs the process nothing for long. When `--local-mem` bounds
//! the whole process, those pages are charged against the far cache's room
//! as they sit, and the cache cannot evict them: 12 MB of a Python job's
//! 96 MiB, of which most ran once. So, while the cache is evicting, the
//! runtime asks the kernel to reclaim the read-only file pages only this
//! process maps (`MADV_PAGEOUT`; a page shared with another process is
//! left alone, as are writable mappings), about once a second. A page in
//! use comes back at its next touch, as after the cgroup's reclaim; the
//! ones not in use stay out, and their room goes to the cache.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How often, at most, the file pages are reclaimed.
pub(crate) const TRIM_EVERY: Duration = Duration::from_secs(1);

/// When the file pages were last reclaimed.
pub(crate) struct FilePages {
    last: Mutex<Instant>,
}

impl FilePages {
    pub(crate) fn new() -> Self {
        Self {
            last: Mutex::new(Instant::now()),
        }
    }

    /// Reclaims the process's read-only file pages if [`TRIM_EVERY`] has
    /// passed since the last time; returns the mappings advised.
    pub(crate) fn trim_if_due(&self) -> usize {
        {
            let mut last = self.last.lock();
            if last.elapsed() < TRIM_EVERY {
                return 0;
            }
            *last = Instant::now();
        }
        let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
            return 0;
        };
        read_only_file_mappings(&maps)
            .filter(|&(start, len)| {
                // SAFETY: advice on a mapping of this process; reclaiming a
                // clean file page loses nothing (it is read back on touch).
                unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_PAGEOUT) == 0 }
            })
            .count()
    }
}

/// `(start, len)` of the private mappings in a `/proc/PID/maps` text
/// that are backed by a file and cannot be written: what reclaim may drop
/// and read back unchanged.
fn read_only_file_mappings(maps: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    maps.lines().filter_map(|line| {
        let mut f = line.split_ascii_whitespace();
        let range = f.next()?;
        let perms = f.next()?;
        let path = f.nth(3)?;
        let p = perms.as_bytes();
        if !path.starts_with('/') || p.get(1) != Some(&b'-') || p.get(3) != Some(&b'p') {
            return None;
        }
        let (a, b) = range.split_once('-')?;
        let (a, b) = (
            usize::from_str_radix(a, 16).ok()?,
            usize::from_str_radix(b, 16).ok()?,
        );
        (b > a).then_some((a, b - a))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_read_only_file_mappings_are_taken() {
        let maps = "\
55d0a000-55d0b000 r--p 00000000 08:01 123 /usr/bin/python3.11
55d0b000-55d0c000 r-xp 00001000 08:01 123 /usr/bin/python3.11
55d0c000-55d0d000 rw-p 00002000 08:01 123 /usr/bin/python3.11
55d0d000-55d0e000 rw-p 00000000 00:00 0 [heap]
7f000000-7f001000 rw-p 00000000 00:00 0
7f001000-7f003000 r--s 00000000 00:05 9 /dev/shm/farmem-link-x
7ffd0000-7ffd1000 r-xp 00000000 00:00 0 [vdso]
garbage line
7f00-7e00 r--p 0 0 0 /backwards
";
        let got: Vec<_> = read_only_file_mappings(maps).collect();
        assert_eq!(got, vec![(0x55d0a000, 0x1000), (0x55d0b000, 0x1000)]);
    }
}
