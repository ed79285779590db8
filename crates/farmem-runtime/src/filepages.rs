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
//! left alone, as are writable mappings), from once a second. A page in
//! use comes back at its next touch, as after the cgroup's reclaim; the
//! ones not in use stay out, and their room goes to the cache.
//!
//! Unlike the cgroup's reclaim this cannot tell a page in use from a cold
//! one, and a page in use costs a read from disk each time. So the period
//! doubles (to a minute) while half of what the last reclaim took came
//! back as major faults, and halves again when it stays out; and nothing
//! is reclaimed while the process's other memory is charged at its cap
//! anyway (the room would not grow).

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The shortest and longest time between two reclaims.
const FASTEST: Duration = Duration::from_secs(1);
const SLOWEST: Duration = Duration::from_secs(64);

/// When the file pages were last reclaimed, and what came of it.
pub(crate) struct FilePages {
    state: Mutex<Trim>,
}

struct Trim {
    at: Instant,
    period: Duration,
    /// File pages the last reclaim took out of the process's memory.
    dropped: u64,
    /// The process's major faults just after it.
    majflt: u64,
}

impl FilePages {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(Trim {
                at: Instant::now(),
                period: FASTEST,
                dropped: 0,
                majflt: major_faults(),
            }),
        }
    }

    /// Reclaims the process's read-only file pages if its period has
    /// passed (see the module's docs); returns the pages it took.
    pub(crate) fn trim_if_due(&self) -> u64 {
        let mut t = self.state.lock();
        if t.at.elapsed() < t.period {
            return 0;
        }
        let came_back = major_faults().saturating_sub(t.majflt);
        t.period = if t.dropped > 0 && came_back * 2 >= t.dropped {
            (t.period * 2).min(SLOWEST)
        } else {
            (t.period / 2).max(FASTEST)
        };
        let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
            return 0;
        };
        let before = resident_file_pages();
        for (start, len) in read_only_file_mappings(&maps) {
            // SAFETY: advice on a mapping of this process; reclaiming a
            // clean file page loses nothing (it is read back on touch).
            unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_PAGEOUT) };
        }
        t.dropped = before.saturating_sub(resident_file_pages());
        t.majflt = major_faults();
        t.at = Instant::now();
        t.dropped
    }
}

/// The process's major faults so far (reads from disk).
fn major_faults() -> u64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0;
    }
    ru.ru_majflt as u64
}

/// The process's resident file-backed pages (/proc/self/statm's third
/// field), or 0 if unreadable.
fn resident_file_pages() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(2)?.parse().ok())
        .unwrap_or(0)
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
