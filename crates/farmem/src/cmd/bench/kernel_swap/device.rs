//! The swap devices: a swap file, a zram device, and zswap's switch.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::{ZSWAP, read_trimmed, unique, write_file};

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

pub(super) fn swapoff(path: &Path) -> anyhow::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
