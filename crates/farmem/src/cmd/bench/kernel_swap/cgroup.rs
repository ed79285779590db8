//! A cgroup v1 memory cgroup of ours, for one run.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};

use super::{CGROUP_ROOT, parse_counters, unique, write_file};

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
