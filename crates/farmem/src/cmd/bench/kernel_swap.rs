//! The kernel's own swap as a baseline: a swap file, a zram device or zswap
//! in front of a swap file, and a cgroup v1 memory cgroup limiting a
//! program to the same local memory farmem gets.
//!
//! Each resource is a guard that undoes itself on drop (also when a bench
//! returns an error, or stops on Ctrl-C and unwinds): swapoff, zram reset,
//! zswap's parameter written back, the cgroup removed, the file deleted.
//! `farmem bench swap` uses it; so can an evaluation that puts the kernel
//! beside farmem.

use std::collections::HashMap;
use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Value, json};

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

/// A cgroup v1 memory cgroup of ours; removed on drop, after killing what
/// is still in it.
pub struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    /// A fresh cgroup limited to `limit` bytes (none: only accounted).
    pub fn create(tag: &str, limit: Option<u64>) -> anyhow::Result<Self> {
        let path = Path::new(CGROUP_ROOT).join(unique(tag));
        std::fs::create_dir(&path)
            .with_context(|| format!("creating cgroup {}", path.display()))?;
        let cg = Self { path };
        if let Some(limit) = limit {
            cg.write("memory.limit_in_bytes", &limit.to_string())?;
        }
        Ok(cg)
    }

    fn write(&self, file: &str, value: &str) -> anyhow::Result<()> {
        write_file(&self.path.join(file), value)
    }

    fn read_u64(&self, file: &str) -> Option<u64> {
        std::fs::read_to_string(self.path.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Makes the process `cmd` starts a member of this cgroup before it
    /// runs the program, so all its memory is charged here.
    pub fn adopt(&self, cmd: &mut Command) -> anyhow::Result<()> {
        let procs = self.path.join("cgroup.procs");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(&procs)
            .with_context(|| format!("opening {}", procs.display()))?;
        // SAFETY: the closure only calls write(2), async-signal-safe; "0"
        // stands for the writing process in cgroup v1.
        unsafe {
            cmd.pre_exec(move || f.write_all(b"0"));
        }
        Ok(())
    }

    /// The most memory charged at once (memory.max_usage_in_bytes).
    pub fn peak(&self) -> Option<u64> {
        self.read_u64("memory.max_usage_in_bytes")
    }

    /// The most memory plus swap charged at once.
    pub fn memsw_peak(&self) -> Option<u64> {
        self.read_u64("memory.memsw.max_usage_in_bytes")
    }

    /// The counters of memory.stat.
    pub fn stat(&self) -> HashMap<String, u64> {
        parse_counters(&std::fs::read_to_string(self.path.join("memory.stat")).unwrap_or_default())
    }

    /// Processes the kernel's OOM killer killed in this cgroup.
    pub fn oom_kills(&self) -> Option<u64> {
        let text = std::fs::read_to_string(self.path.join("memory.oom_control")).ok()?;
        parse_counters(&text).get("oom_kill").copied()
    }

    /// Settings worth reporting beside the numbers.
    pub fn describe(&self) -> Value {
        json!({
            "path": self.path,
            "limit_in_bytes": self.read_u64("memory.limit_in_bytes"),
            "swappiness": self.read_u64("memory.swappiness"),
        })
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            let procs = std::fs::read_to_string(self.path.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                // SAFETY: kill(2) on a process left in our own cgroup.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            // rmdir fails (EBUSY) until the last member is gone.
            if std::fs::remove_dir(&self.path).is_ok() || !self.path.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!(
            "farmem: could not remove cgroup {} (rmdir it by hand)",
            self.path.display()
        );
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

fn write_file(path: &Path, value: &str) -> anyhow::Result<()> {
    std::fs::write(path, value).with_context(|| format!("writing {value} to {}", path.display()))
}

fn read_trimmed(path: &Path) -> Option<String> {
    Some(std::fs::read_to_string(path).ok()?.trim().to_string())
}

fn cpath(path: &Path) -> anyhow::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).context("a path with a NUL byte")
}

fn swapon(path: &Path) -> anyhow::Result<()> {
    let c = cpath(path)?;
    // SAFETY: a NUL-terminated path; no flags.
    if unsafe { libc::swapon(c.as_ptr(), 0) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("swapon {}", path.display()));
    }
    Ok(())
}

fn swapoff(path: &Path) -> anyhow::Result<()> {
    let c = cpath(path)?;
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::swapoff(c.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}

fn mkswap(path: &Path) -> anyhow::Result<()> {
    let out = Command::new("mkswap")
        .arg(path)
        .output()
        .context("running mkswap (util-linux)")?;
    if !out.status.success() {
        bail!(
            "mkswap {} failed: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// A swap file in a temp dir of ours, on while this lives.
pub struct SwapFile {
    dir: PathBuf,
    path: PathBuf,
    bytes: u64,
    on: bool,
}

impl SwapFile {
    /// A swap file of `bytes` (allocated, not sparse: swapon refuses holes)
    /// under `parent`, turned on.
    pub fn create(parent: &Path, bytes: u64) -> anyhow::Result<Self> {
        let dir = parent.join(unique("swap"));
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut sf = Self {
            path: dir.join("swapfile"),
            dir,
            bytes,
            on: false,
        };
        let f = std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .open(&sf.path)
            .with_context(|| format!("creating {}", sf.path.display()))?;
        let len = libc::off_t::try_from(bytes).context("swap file size")?;
        // SAFETY: fallocate on a descriptor we own.
        if unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, len) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("allocating {bytes} bytes for {}", sf.path.display()));
        }
        drop(f);
        mkswap(&sf.path)?;
        swapon(&sf.path).context(
            "the temp dir's file system takes no swap file (tmpfs, overlayfs); point TMPDIR at a directory on ext4 or xfs",
        )?;
        sf.on = true;
        Ok(sf)
    }

    pub fn describe(&self) -> Value {
        json!({"path": self.path, "size_bytes": self.bytes})
    }
}

impl Drop for SwapFile {
    fn drop(&mut self) {
        if self.on
            && let Err(e) = swapoff(&self.path)
        {
            eprintln!(
                "farmem: swapoff {} failed ({e:#}); turn it off by hand",
                self.path.display()
            );
            return;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A zram device as the swap device, reset (and removed, if we added it)
/// on drop.
pub struct Zram {
    id: u32,
    added: bool,
    on: bool,
    algorithm: String,
    bytes: u64,
}

/// The compressors to ask zram for, best first: fast ones, as a user tuning
/// zram for swap would pick.
const ZRAM_ALGORITHMS: [&str; 3] = ["lz4", "zstd", "lzo-rle"];

/// The algorithm to pick from a comp_algorithm text (`lzo [lz4] zstd`).
pub fn pick_zram_algorithm(offered: &str) -> Option<String> {
    let names: Vec<&str> = offered
        .split_whitespace()
        .map(|a| a.trim_matches(|c| c == '[' || c == ']'))
        .collect();
    ZRAM_ALGORITHMS
        .iter()
        .find(|a| names.contains(a))
        .map(|a| a.to_string())
        .or_else(|| names.first().map(|a| a.to_string()))
}

impl Zram {
    fn sys(id: u32) -> PathBuf {
        PathBuf::from(format!("/sys/block/zram{id}"))
    }

    /// A free zram device: a new one from zram-control, else an existing
    /// one nobody sized, loading the module first when it is not there.
    fn find() -> anyhow::Result<(u32, bool)> {
        let control = Path::new("/sys/class/zram-control/hot_add");
        if !control.exists() && !Path::new("/sys/block/zram0").exists() {
            // Built as a module and not loaded yet; no modprobe is fine.
            let _ = Command::new("modprobe")
                .args(["zram", "num_devices=1"])
                .status();
        }
        if control.exists() {
            let id = read_trimmed(control)
                .and_then(|s| s.parse().ok())
                .context("reading a new zram device from /sys/class/zram-control/hot_add")?;
            return Ok((id, true));
        }
        for id in 0..32 {
            match read_trimmed(&Self::sys(id).join("disksize")) {
                Some(s) if s == "0" => return Ok((id, false)),
                Some(_) => continue,
                None => break,
            }
        }
        bail!(
            "no free zram device (no /sys/class/zram-control, no /sys/block/zramN of size 0; zram not in this kernel?)"
        )
    }

    /// A zram device of `bytes` (uncompressed), made swap and turned on.
    pub fn create(bytes: u64) -> anyhow::Result<Self> {
        let (id, added) = Self::find()?;
        let mut z = Self {
            id,
            added,
            on: false,
            algorithm: String::new(),
            bytes,
        };
        let sys = Self::sys(id);
        let offered = read_trimmed(&sys.join("comp_algorithm")).unwrap_or_default();
        if let Some(a) = pick_zram_algorithm(&offered) {
            write_file(&sys.join("comp_algorithm"), &a)?;
        }
        z.algorithm = read_trimmed(&sys.join("comp_algorithm"))
            .and_then(|s| {
                s.split_whitespace()
                    .find(|a| a.starts_with('['))
                    .map(|a| a.trim_matches(|c| c == '[' || c == ']').to_string())
            })
            .unwrap_or_default();
        write_file(&sys.join("disksize"), &bytes.to_string())?;
        let dev = z.dev();
        mkswap(&dev)?;
        swapon(&dev)?;
        z.on = true;
        Ok(z)
    }

    fn dev(&self) -> PathBuf {
        PathBuf::from(format!("/dev/zram{}", self.id))
    }

    pub fn describe(&self) -> Value {
        let mm: Vec<u64> = read_trimmed(&Self::sys(self.id).join("mm_stat"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|n| n.parse().ok())
            .collect();
        json!({
            "device": self.dev(),
            "comp_algorithm": self.algorithm,
            "disksize_bytes": self.bytes,
            // mm_stat: orig_data_size compr_data_size mem_used_total ... mem_used_max.
            "mem_used_max_bytes": mm.get(4),
        })
    }
}

impl Drop for Zram {
    fn drop(&mut self) {
        if self.on
            && let Err(e) = swapoff(&self.dev())
        {
            eprintln!(
                "farmem: swapoff {} failed ({e:#}); turn it off by hand",
                self.dev().display()
            );
            return;
        }
        if let Err(e) = write_file(&Self::sys(self.id).join("reset"), "1") {
            eprintln!("farmem: {e:#}");
        }
        if self.added {
            let _ = write_file(
                Path::new("/sys/class/zram-control/hot_remove"),
                &self.id.to_string(),
            );
        }
    }
}

/// zswap's `enabled` set for a run, its prior value written back on drop.
pub struct ZswapSwitch {
    prior: Option<String>,
}

impl ZswapSwitch {
    /// Turns zswap on or off (off for the other backings: it would sit in
    /// front of any swap device). Without zswap in the kernel, `off` is a
    /// no-op and `on` an error.
    pub fn set(on: bool) -> anyhow::Result<Self> {
        let path = Path::new(ZSWAP).join("enabled");
        let Some(prior) = read_trimmed(&path) else {
            anyhow::ensure!(!on, "zswap is not in this kernel (no {})", path.display());
            return Ok(Self { prior: None });
        };
        let want = if on { "Y" } else { "N" };
        if prior != want {
            write_file(&path, want)?;
        }
        Ok(Self { prior: Some(prior) })
    }

    /// The parameters a zswap run used.
    pub fn describe() -> Value {
        let p = |n: &str| read_trimmed(&Path::new(ZSWAP).join(n));
        json!({
            "enabled": p("enabled"),
            "compressor": p("compressor"),
            "zpool": p("zpool"),
            "max_pool_percent": p("max_pool_percent").and_then(|s| s.parse::<u64>().ok()),
            "accept_threshold_percent": p("accept_threshold_percent").and_then(|s| s.parse::<u64>().ok()),
            "shrinker_enabled": p("shrinker_enabled"),
        })
    }

    /// zswap's `enabled` now, for checking that it was put back.
    pub fn enabled_now() -> Option<String> {
        read_trimmed(&Path::new(ZSWAP).join("enabled"))
    }
}

impl Drop for ZswapSwitch {
    fn drop(&mut self) {
        let Some(prior) = &self.prior else { return };
        let path = Path::new(ZSWAP).join("enabled");
        if read_trimmed(&path).as_deref() != Some(prior.as_str())
            && let Err(e) = write_file(&path, prior)
        {
            eprintln!("farmem: {e:#}; zswap's `enabled` was {prior}");
        }
    }
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
    fn zram_gets_a_fast_compressor() {
        assert_eq!(
            pick_zram_algorithm("[lzo-rle] lzo lz4 zstd").as_deref(),
            Some("lz4")
        );
        assert_eq!(pick_zram_algorithm("lzo [zstd]").as_deref(), Some("zstd"));
        assert_eq!(
            pick_zram_algorithm("[deflate] 842").as_deref(),
            Some("deflate")
        );
        assert_eq!(pick_zram_algorithm(""), None);
    }

    #[test]
    fn counters_skip_what_is_not_a_number() {
        let c = parse_counters("oom_kill_disable 0\nunder_oom 0\noom_kill 2\nname x\n");
        assert_eq!(c.get("oom_kill"), Some(&2));
        assert_eq!(c.get("name"), None);
        assert_eq!(c.len(), 3);
    }
}
