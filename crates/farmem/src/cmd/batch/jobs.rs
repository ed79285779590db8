//! A batch file (JOBS.toml): the programs of a batch and the resources
//! they share.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail, ensure};
use farmem_core::ByteSize;
use serde::Deserialize;

use crate::cmd::bench::measure::MAX_CHILDREN;
use crate::cmd::bench::workload::{BUILTIN, Workload};

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    slots: Option<usize>,
    #[serde(default = "default_memnodes")]
    memnodes: usize,
    rack: ByteSize,
    #[serde(default = "default_replicas")]
    replicas: u8,
    file_dir: Option<PathBuf>,
    file: Option<ByteSize>,
    #[serde(default)]
    job: Vec<RawJob>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJob {
    name: String,
    workload: Option<String>,
    size: Option<ByteSize>,
    iterations: Option<usize>,
    command: Option<Vec<String>>,
    local_mem: ByteSize,
}

fn default_memnodes() -> usize {
    2
}

fn default_replicas() -> u8 {
    1
}

/// A checked batch.
#[derive(Debug, Clone)]
pub struct Jobs {
    /// Programs running at once.
    pub slots: usize,
    pub memnodes: usize,
    /// Far memory of the batch's rack, all memory nodes together.
    pub rack: u64,
    /// Copies of each far byte.
    pub replicas: u8,
    /// Where file backends make their files.
    pub file_dir: PathBuf,
    /// Room for file backends.
    pub file: u64,
    pub jobs: Vec<Job>,
}

/// One program of the batch.
#[derive(Debug, Clone)]
pub struct Job {
    pub name: String,
    pub workload: Workload,
    pub local_mem: u64,
}

/// An example, for `--help` and the docs.
pub const EXAMPLE: &str = r#"slots = 2            # programs at once (default: the CPUs)
memnodes = 2         # memory nodes of the batch's rack (default 2)
rack = "768MiB"      # far memory of the rack, all memory nodes together
replicas = 1         # copies of each far byte (default 1)
file_dir = "/var/tmp" # where file backends make their files (default: the temp dir)
file = "8GiB"        # room for file backends (default: half the free space there)

[[job]]
name = "rank"
workload = "pagerank" # built in: pagerank, kv, scan, text, noise
size = "256MiB"      # its memory (default 128MiB)
iterations = 3       # rounds or passes (default 3)
local_mem = "64MiB"  # farmem run --local-mem

[[job]]
name = "sort"
command = ["sort", "-n", "numbers.txt"]
local_mem = "32MiB"
"#;

impl Jobs {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading batch file {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("batch file {}", path.display()))
    }

    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let raw: Raw = toml::from_str(text)?;
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let slots = raw.slots.unwrap_or(cpus);
        ensure!(
            (1..=MAX_CHILDREN).contains(&slots),
            "slots = {slots}: between 1 and {MAX_CHILDREN}"
        );
        ensure!(raw.memnodes >= 1, "memnodes must be at least 1");
        ensure!(raw.rack.bytes() > 0, "rack must be positive");
        ensure!(
            (1..=8).contains(&raw.replicas) && usize::from(raw.replicas) <= raw.memnodes,
            "replicas = {}: between 1 and memnodes ({})",
            raw.replicas,
            raw.memnodes
        );
        ensure!(!raw.job.is_empty(), "no [[job]] given");
        let file_dir = raw.file_dir.unwrap_or_else(std::env::temp_dir);
        let file = match raw.file {
            Some(b) => b.bytes(),
            None => free_bytes(&file_dir)? / 2,
        };
        let mut names = HashSet::new();
        let jobs = raw
            .job
            .into_iter()
            .map(|j| {
                let name = j.name.clone();
                ensure!(!name.trim().is_empty(), "a job has an empty name");
                ensure!(names.insert(name.clone()), "job `{name}` is given twice");
                job(j).with_context(|| format!("job `{name}`"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Self {
            slots,
            memnodes: raw.memnodes,
            rack: raw.rack.bytes(),
            replicas: raw.replicas,
            file_dir,
            file,
            jobs,
        })
    }
}

fn job(j: RawJob) -> anyhow::Result<Job> {
    let workload = match (j.workload, j.command) {
        (Some(w), None) => {
            let iterations = j.iterations.unwrap_or(3);
            ensure!(iterations >= 1, "iterations must be at least 1");
            let size = j.size.unwrap_or(ByteSize::mib(128));
            ensure!(size.bytes() > 0, "size must be positive");
            Workload::builtin(&w, size, iterations)?
        }
        (None, Some(argv)) => {
            ensure!(
                j.size.is_none() && j.iterations.is_none(),
                "size and iterations are for a built-in workload, not a command"
            );
            ensure!(
                argv.first().is_some_and(|a| !a.is_empty()),
                "command is empty"
            );
            Workload::command(argv.into_iter().map(Into::into).collect())
        }
        (Some(_), Some(_)) => bail!("give a workload or a command, not both"),
        (None, None) => bail!("give a workload ({BUILTIN}) or a command"),
    };
    ensure!(j.local_mem.bytes() > 0, "local_mem must be positive");
    Ok(Job {
        name: j.name,
        workload,
        local_mem: j.local_mem.bytes(),
    })
}

/// Bytes the filesystem holding `dir` has free for this user.
fn free_bytes(dir: &Path) -> anyhow::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .with_context(|| format!("file_dir {}: a NUL in the path", dir.display()))?;
    // SAFETY: statvfs is plain data the call fills; the path is NUL-ended.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("file_dir {}: finding its free space", dir.display()));
    }
    Ok(st.f_bavail * st.f_frsize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_parses() {
        let j = Jobs::parse(EXAMPLE).unwrap();
        assert_eq!((j.slots, j.memnodes, j.replicas), (2, 2, 1));
        assert_eq!((j.rack, j.file), (768 << 20, 8 << 30));
        assert_eq!(j.jobs.len(), 2);
        assert!(j.jobs[0].workload.demo);
        assert_eq!(j.jobs[0].local_mem, 64 << 20);
        assert_eq!(j.jobs[1].workload.shown(), "sort -n numbers.txt");
    }

    #[test]
    fn bad_batches_are_refused_naming_the_fault() {
        let refused = |text: &str, says: &str| {
            let e = format!("{:#}", Jobs::parse(text).unwrap_err());
            assert!(e.contains(says), "{e:?} should say {says:?}");
        };
        let head = "rack = \"1GiB\"\nfile = \"1GiB\"\n";
        let job =
            |body: &str| format!("{head}[[job]]\nname = \"a\"\nlocal_mem = \"8MiB\"\n{body}\n");
        refused(head, "no [[job]]");
        refused(
            "file = \"1GiB\"\n[[job]]\nname=\"a\"\nlocal_mem=\"1MiB\"\nworkload=\"kv\"",
            "rack",
        );
        refused(&job("workload = \"kv\"\ncommand = [\"ls\"]"), "not both");
        refused(&job(""), "give a workload");
        refused(&job("workload = \"quicksort\""), "quicksort");
        refused(&job("command = []"), "command is empty");
        refused(&job("command = [\"ls\"]\nsize = \"1MiB\""), "built-in");
        refused(&job("workload = \"kv\"\nspeed = 3"), "speed");
        refused(&job("workload = \"kv\"\niterations = 0"), "iterations");
        refused(&format!("slots = 0\n{}", job("workload = \"kv\"")), "slots");
        refused(
            &format!("replicas = 3\n{}", job("workload = \"kv\"")),
            "replicas",
        );
        refused(
            &format!(
                "{}[[job]]\nname = \"a\"\nlocal_mem = \"8MiB\"\nworkload = \"kv\"\n",
                job("workload = \"kv\"")
            ),
            "twice",
        );
        refused(
            &format!("{head}[[job]]\nname = \"a\"\nlocal_mem = \"lots\"\nworkload = \"kv\"\n"),
            "local_mem",
        );
        refused(
            "file_dir = \"/nonexistent/farmem\"\nrack = \"1GiB\"\n[[job]]\nname = \"a\"\nlocal_mem = \"8MiB\"\nworkload = \"kv\"\n",
            "/nonexistent/farmem",
        );
    }
}
