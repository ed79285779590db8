//! `farmem bench swap --quick --json` for real, as root with cgroup v1's
//! memory controller: every config runs under its limit and swaps, all
//! compute the same ranks, and afterwards nothing of the bench's is left:
//! no swap device, no cgroup, zswap's `enabled` as it was.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use serde_json::Value;

const CGROUP_ROOT: &str = "/sys/fs/cgroup/memory";
const ZSWAP_ENABLED: &str = "/sys/module/zswap/parameters/enabled";

/// One bench at a time: another's swap device would make this one skip.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn farmem() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_farmem"))
}

/// The lock every kernel-swap bench holds while it runs (the same path as
/// kernel_swap.rs): holding it, no other bench's swap is on.
fn bench_lock() -> File {
    let dir = Path::new("/run/lock");
    let dir = if dir.is_dir() {
        dir.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("farmem-bench-swap.lock"))
        .unwrap();
    // SAFETY: flock on a descriptor we own; released when `f` closes.
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
    f
}

fn swaps() -> Vec<String> {
    std::fs::read_to_string("/proc/swaps")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

fn zswap_enabled() -> Option<String> {
    Some(
        std::fs::read_to_string(ZSWAP_ENABLED)
            .ok()?
            .trim()
            .to_string(),
    )
}

/// Why this machine cannot run the test, if it cannot.
fn unavailable() -> Option<String> {
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    if !Path::new(CGROUP_ROOT)
        .join("memory.limit_in_bytes")
        .is_file()
    {
        return Some(format!("no cgroup v1 memory controller at {CGROUP_ROOT}"));
    }
    let dir = farmem().parent().map(Path::to_path_buf).unwrap_or_default();
    if !dir.join("libfarmem_preload.so").is_file() {
        return Some(format!(
            "libfarmem_preload.so is not in {} (cargo build --release -p farmem-preload)",
            dir.display()
        ));
    }
    None
}

/// zswap's `enabled` before a bench, or why the test cannot run.
fn prepare() -> Result<Option<String>, String> {
    if let Some(why) = unavailable() {
        return Err(why);
    }
    let _lock = bench_lock();
    let on = swaps();
    if !on.is_empty() {
        return Err(format!(
            "swap is on already ({on:?}); the bench refuses to run beside it"
        ));
    }
    Ok(zswap_enabled())
}

/// Nothing of the bench run `pid` is left, and zswap is as it was.
/// Nothing of bench `pid`'s set-up is left (None: of any bench).
fn assert_undone(pid: Option<u32>, zswap_before: Option<String>) {
    // Under the lock no other bench is midway, so any swap on would be ours.
    let _lock = bench_lock();
    assert!(swaps().is_empty(), "swap left on: {:?}", swaps());
    let ours = pid.map_or("-".to_string(), |pid| format!("-{pid}-"));
    for dir in [PathBuf::from(CGROUP_ROOT), std::env::temp_dir()] {
        let left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("farmem-bench-") && n.contains(&ours))
            .collect();
        assert!(left.is_empty(), "left in {}: {left:?}", dir.display());
    }
    assert_eq!(zswap_enabled(), zswap_before);
}

#[test]
fn bench_swap_runs_every_config_and_undoes_its_setup() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let zswap_before = match prepare() {
        Ok(z) => z,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let child = Command::new(farmem())
        .args(["bench", "swap", "--quick", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stderr}", out.status);
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));

    let mut expected = vec![
        "local",
        "swapfile",
        "farmem",
        "farmem-compressed",
        "farmem-auto",
        "farmem-file",
    ];
    if Path::new("/sys/class/zram-control").exists() || Path::new("/sys/block/zram0").exists() {
        expected.push("zram");
    }
    if zswap_before.is_some() {
        expected.push("zswap");
    }
    let configs = v["configs"].as_array().expect("configs");
    let limit = v["local_mem_bytes"].as_u64().unwrap();
    assert!(
        limit > 0 && limit < v["footprint_bytes"].as_u64().unwrap(),
        "{v}"
    );
    for name in &expected {
        let c = configs
            .iter()
            .find(|c| c["name"] == *name)
            .unwrap_or_else(|| panic!("no {name} in {v}"));
        assert_eq!(c["skipped"], Value::Null, "{name}: {c}");
        assert_eq!(
            (c["runs"].as_u64(), c["ok"].as_u64()),
            (Some(1), Some(1)),
            "{name}: {c}"
        );
    }
    assert_eq!(v["results_match"], true, "{v}");
    for r in v["runs"].as_array().unwrap() {
        let name = r["config"].as_str().unwrap();
        match name {
            "local" => assert_eq!(r["swap_outs"], 0, "{r}"),
            // The limit held and the program's pages went to our device.
            "swapfile" | "zram" | "zswap" => {
                assert!(r["cgroup"]["peak_bytes"].as_u64().unwrap() <= limit, "{r}");
                assert!(r["swap_outs"].as_u64().unwrap() > 0, "{r}");
                assert_eq!(r["setup"]["backing"], name, "{r}");
            }
            "farmem" | "farmem-compressed" | "farmem-auto" | "farmem-file" => {
                assert!(r["farmem"]["faults_missing"].as_u64().unwrap() > 0, "{r}")
            }
            _ => panic!("unexpected config {name}"),
        }
    }

    assert_undone(Some(pid), zswap_before);
}

/// Ctrl-C (SIGINT) while zswap is on: the bench stops its program and
/// undoes everything before it exits.
#[test]
fn an_interrupted_bench_swap_undoes_its_setup() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let zswap_before = match prepare() {
        Ok(z) if z.is_some() => z,
        Ok(_) => return eprintln!("skipped: no zswap in this kernel"),
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let mut child = Command::new(farmem())
        .args(["bench", "swap", "--size", "64MiB", "--rounds", "1"])
        .args(["--configs", "local,zswap"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let started = line.contains("zswap at");
        seen.push(line);
        if started {
            break;
        }
    }
    assert!(
        seen.last().is_some_and(|l| l.contains("zswap at")),
        "{seen:?}"
    );
    // Midway through the zswap run (the local one took seconds).
    std::thread::sleep(std::time::Duration::from_millis(700));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert!(!status.success(), "{seen:?} {rest:?}");
    assert!(rest.iter().any(|l| l.contains("interrupted")), "{rest:?}");
    assert_undone(Some(pid), zswap_before);
}

/// `farmem eval xdm` gathers one bench swap per workload and share: every
/// config ran and agreed, and each row names the best of farmem's backends
/// and of the kernel's.
#[test]
fn eval_xdm_compares_every_backend_with_the_kernels_swap() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let zswap_before = match prepare() {
        Ok(z) => z,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let out = Command::new(farmem())
        .args(["eval", "xdm", "--quick", "--scale", "16MiB"])
        .args(["--workloads", "kv,sqlite", "--json"])
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stderr}", out.status);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["rows"].as_array().expect("rows");
    let seen: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r["workload"].as_str().unwrap(),
                r["local"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("kv", "25%"),
            ("kv", "50%"),
            ("sqlite", "25%"),
            ("sqlite", "50%")
        ]
    );
    for r in rows {
        assert_eq!(r["results_match"], true, "{r}");
        // The kernel may run out of memory (zswap did on kv here); farmem may not.
        assert_eq!(r["farmem_all_ok"], true, "{r}");
        for c in r["configs"].as_array().unwrap() {
            let failed = c["runs"].as_u64().unwrap() - c["ok"].as_u64().unwrap();
            assert_eq!(failed, c["oom_killed"].as_u64().unwrap(), "{c}");
        }
        let names: Vec<_> = r["configs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        for want in [
            "local",
            "swapfile",
            "farmem",
            "farmem-compressed",
            "farmem-auto",
            "farmem-file",
        ] {
            assert!(names.contains(&want), "{want} missing: {r}");
        }
        assert!(r["auto_to_best_single_backend"].as_f64().is_some(), "{r}");
        // Each farmem config says what reached its tiers.
        let config = |name: &str| {
            r["configs"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == name)
                .unwrap()
                .clone()
        };
        let pool = config("farmem-compressed");
        assert!(pool["tiers_median"]["pool_pages_kept"].is_u64(), "{pool}");
        let remote = config("farmem");
        assert!(
            remote["tiers_median"]["below_bytes_written"]
                .as_u64()
                .unwrap()
                > 0,
            "{remote}"
        );
        assert!(
            r["best_farmem"]["name"]
                .as_str()
                .unwrap()
                .starts_with("farmem"),
            "{r}"
        );
        assert!(
            r["best_farmem_to_best_kernel"].as_f64().unwrap() > 0.0,
            "{r}"
        );
    }
    assert_undone(None, zswap_before);
}
