//! The kernel's own swap as a baseline: a swap file, a zram device or zswap
//! in front of a swap file, and a cgroup v1 memory cgroup limiting a
//! program to the same local memory farmem gets.
//!
//! Each resource is a guard that undoes itself on drop (also when a bench
//! returns an error, or stops on Ctrl-C and unwinds): swapoff, zram reset,
//! zswap's parameter written back, the cgroup removed, the file deleted.
//! `farmem bench swap` uses it; so can an evaluation that puts the kernel
//! beside farmem.

mod cgroup;
mod device;

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, bail};
use serde_json::{Value, json};

pub use cgroup::Cgroup;
use device::swapoff;
pub use device::{SwapFile, Zram, ZswapSwitch};

/// Where cgroup v1's memory controller is mounted.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup/memory";
/// Name prefix of every cgroup and temp dir of ours.
const PREFIX: &str = "farmem-bench-";
const ZSWAP: &str = "/sys/module/zswap/parameters";

/// A kernel swap backing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backing {
    /// A swap file on the temp dir's file system.
    Swapfile,
    /// A compressed RAM block device as the swap device.
    Zram,
    /// zswap's compressed pool in front of a swap file.
    Zswap,
}

impl Backing {
    pub fn name(self) -> &'static str {
        match self {
            Backing::Swapfile => "swapfile",
            Backing::Zram => "zram",
            Backing::Zswap => "zswap",
        }
    }
}

/// Why kernel swap cannot be measured here, if it cannot: root and the
/// cgroup v1 memory controller are needed.
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("kernel swap needs root (swapon, cgroups)".into());
    }
    if !Path::new(CGROUP_ROOT)
        .join("memory.limit_in_bytes")
        .is_file()
    {
        return Some(format!(
            "kernel swap needs the cgroup v1 memory controller mounted at {CGROUP_ROOT}"
        ));
    }
    None
}

/// The swap devices in a /proc/swaps text.
pub fn parse_proc_swaps(text: &str) -> Vec<String> {
    text.lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        // /proc/swaps escapes blanks in a path as \040.
        .map(|p| p.replace("\\040", " "))
        .collect()
}

/// The swap devices on now.
pub fn active_swaps() -> Vec<String> {
    std::fs::read_to_string("/proc/swaps")
        .map(|t| parse_proc_swaps(&t))
        .unwrap_or_default()
}

/// The pid in a name of ours (`farmem-bench-...-PID-N`), if any.
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let mut parts = rest.rsplit('-');
    let _n: u32 = parts.next()?.parse().ok()?;
    parts.next()?.parse().ok()
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Takes down what a killed earlier run left (a swap file of ours still
/// on, an empty cgroup of ours), then refuses to go on beside any other
/// swap device: the kernel would spread the program's pages over both.
pub fn clear_the_way() -> anyhow::Result<()> {
    for dev in active_swaps() {
        let path = Path::new(&dev);
        let dir = path
            .parent()
            .and_then(Path::file_name)
            .and_then(|n| n.to_str());
        if let Some(pid) = dir.and_then(owner_pid).filter(|&p| !alive(p)) {
            eprintln!(
                "farmem: turning off {dev}, left on by an earlier run (pid {pid}) that was killed"
            );
            swapoff(path).with_context(|| format!("swapoff {dev}"))?;
            let _ = std::fs::remove_dir_all(path.parent().unwrap_or(path));
        }
    }
    let left = active_swaps();
    if !left.is_empty() {
        bail!(
            "swap is already on ({}); the kernel would spread the program's pages over it and ours, so the runs would not measure one backing. Turn it off first (swapoff {}) or run only --configs local,farmem",
            left.join(", "),
            left.join(" ")
        );
    }
    if let Ok(dir) = std::fs::read_dir(CGROUP_ROOT) {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if owner_pid(&name).is_some_and(|p| !alive(p)) {
                // Fails while a process of that run still lives in it; harmless.
                let _ = std::fs::remove_dir(e.path());
            }
        }
    }
    Ok(())
}

/// A unique name of ours: `farmem-bench-TAG-PID-N`.
fn unique(tag: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{PREFIX}{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Only one kernel-swap bench at a time on a machine: two would see each
/// other's swap device. Held until dropped.
pub struct BenchLock(#[allow(dead_code)] File);

impl BenchLock {
    pub fn acquire() -> anyhow::Result<Self> {
        let dir = Path::new("/run/lock");
        let dir = if dir.is_dir() {
            dir.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let path = dir.join("farmem-bench-swap.lock");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            eprintln!(
                "farmem: waiting for another kernel-swap bench to finish ({})",
                path.display()
            );
            // SAFETY: as above; blocks until the other holder is done.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
                return Err(std::io::Error::last_os_error())
                    .with_context(|| format!("locking {}", path.display()));
            }
        }
        Ok(Self(f))
    }
}

/// `name value` lines (memory.stat, memory.oom_control, /proc/vmstat).
pub fn parse_counters(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// The kernel's swap counters (/proc/vmstat), machine-wide: with only our
/// device on, their change over a run is that run's.
pub fn swap_counters() -> HashMap<String, u64> {
    let all = parse_counters(&std::fs::read_to_string("/proc/vmstat").unwrap_or_default());
    all.into_iter()
        .filter(|(k, _)| {
            matches!(
                k.as_str(),
                "pswpin" | "pswpout" | "zswpin" | "zswpout" | "zswpwb"
            )
        })
        .collect()
}

pub(super) fn write_file(path: &Path, value: &str) -> anyhow::Result<()> {
    std::fs::write(path, value).with_context(|| format!("writing {value} to {}", path.display()))
}

pub(super) fn read_trimmed(path: &Path) -> Option<String> {
    Some(std::fs::read_to_string(path).ok()?.trim().to_string())
}

/// One backing set up for one run: our swap device on (and nothing
/// else), zswap on or off to match. Drops the device before zswap's
/// switch (field order).
pub struct KernelSwap {
    backing: Backing,
    file: Option<SwapFile>,
    zram: Option<Zram>,
    _zswap: ZswapSwitch,
}

impl KernelSwap {
    /// Sets up `backing` with room for `bytes` of swapped pages, a swap
    /// file going under `dir`.
    pub fn setup(backing: Backing, bytes: u64, dir: &Path) -> anyhow::Result<Self> {
        let zswap = ZswapSwitch::set(backing == Backing::Zswap)?;
        let (file, zram) = match backing {
            Backing::Swapfile | Backing::Zswap => (Some(SwapFile::create(dir, bytes)?), None),
            Backing::Zram => (None, Some(Zram::create(bytes)?)),
        };
        Ok(Self {
            backing,
            file,
            zram,
            _zswap: zswap,
        })
    }

    /// What was set up, for the report (read after the run: zram's use).
    pub fn describe(&self) -> Value {
        let mut v = json!({"backing": self.backing.name()});
        if let Some(f) = &self.file {
            v["swapfile"] = f.describe();
        }
        if let Some(z) = &self.zram {
            v["zram"] = z.describe();
        }
        if self.backing == Backing::Zswap {
            v["zswap"] = ZswapSwitch::describe();
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_swaps_lists_each_device() {
        let text = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n\
                    /dev/zram0                              partition\t4194300\t\t0\t\t100\n\
                    /tmp/a\\040b/swapfile file 1048572 0 -2\n";
        assert_eq!(
            parse_proc_swaps(text),
            vec!["/dev/zram0".to_string(), "/tmp/a b/swapfile".to_string()]
        );
        assert!(parse_proc_swaps("Filename Type Size Used Priority\n").is_empty());
        assert!(parse_proc_swaps("").is_empty());
    }

    #[test]
    fn our_names_carry_their_owner() {
        let name = unique("swap");
        assert_eq!(owner_pid(&name), Some(std::process::id()));
        assert_eq!(owner_pid("farmem-bench-swap-12-3"), Some(12));
        assert_eq!(owner_pid("farmem-bench-x"), None);
        assert_eq!(owner_pid("user.slice"), None);
        assert_ne!(unique("a"), unique("a"));
    }

    #[test]
    fn counters_skip_what_is_not_a_number() {
        let c = parse_counters("oom_kill_disable 0\nunder_oom 0\noom_kill 2\nname x\n");
        assert_eq!(c.get("oom_kill"), Some(&2));
        assert_eq!(c.get("name"), None);
        assert_eq!(c.len(), 3);
    }
}
