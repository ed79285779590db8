//! One measured child process: wall time, its whole tree's resource usage
//! (wait4: major faults, peak RSS), its output; and Ctrl-C or SIGTERM
//! turned into an orderly stop, so the guards of a bench (swap devices,
//! cgroups) are undone rather than left behind by a killed process.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;

/// Most children measured at once (`farmem batch` runs several).
pub const MAX_CHILDREN: usize = 16;

/// The children being measured (0: a free place), for passing on a stop.
static CHILDREN: [AtomicI32; MAX_CHILDREN] = [const { AtomicI32::new(0) }; MAX_CHILDREN];
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_sig: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
    for child in &CHILDREN {
        let pid = child.load(Ordering::SeqCst);
        if pid > 0 {
            // SAFETY: kill(2) is async-signal-safe. SIGTERM rather than the
            // signal itself: `farmem run` ignores SIGINT (it waits for its
            // program) and passes SIGTERM on. To the child's whole process
            // group: a shell's pipeline would outlive the shell.
            unsafe { libc::kill(-pid, libc::SIGTERM) };
        }
    }
}

/// A child's place in [`CHILDREN`] while it is measured.
struct Registered(Option<&'static AtomicI32>);

impl Registered {
    fn new(pid: i32) -> Self {
        let place = CHILDREN.iter().find(|c| {
            c.compare_exchange(0, pid, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        });
        Self(place)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Some(c) = self.0 {
            c.store(0, Ordering::SeqCst);
        }
    }
}

/// From now on SIGINT, SIGTERM and SIGHUP stop the current child and
/// make [`interrupted`] true instead of killing this process.
pub fn catch_interrupts() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installs an async-signal-safe handler (atomics and kill).
        unsafe { libc::signal(sig, on_stop as *const () as libc::sighandler_t) };
    }
}

/// Whether a stop was asked for.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Fails once a stop was asked for, so the caller unwinds its guards.
pub fn check_interrupted() -> anyhow::Result<()> {
    anyhow::ensure!(!interrupted(), "interrupted; everything set up was undone");
    Ok(())
}

/// What a child did.
pub struct Measured {
    pub status: ExitStatus,
    pub seconds: f64,
    /// Major page faults of the child and every descendant it waited for.
    pub major_faults: u64,
    /// The largest peak resident set of the child or a waited-for descendant.
    pub max_rss_bytes: u64,
    pub stdout: Vec<u8>,
    /// The last lines of its stderr.
    pub stderr_tail: String,
    /// It ran past this limit and was stopped.
    pub timed_out: Option<Duration>,
}

impl Measured {
    /// `ok`, `exit N`, `signal N` or `timed out after D`.
    pub fn outcome(&self) -> String {
        use std::os::unix::process::ExitStatusExt;
        if let Some(limit) = self.timed_out {
            return format!("timed out after {}", humantime::format_duration(limit));
        }
        match (self.status.code(), self.status.signal()) {
            (Some(0), _) => "ok".into(),
            (Some(c), _) => format!("exit {c}"),
            (_, Some(s)) => format!("signal {s}"),
            _ => "unknown".into(),
        }
    }
}

/// Runs `cmd` to its end with its stdout and stderr captured (stdin empty);
/// past `limit`, it is stopped as an interrupt would stop it (SIGTERM to
/// its process group, which it leads: `sh -c "a | b"` stops with `a` and
/// `b`, which would otherwise hold the output pipe open).
pub fn run(cmd: &mut Command, limit: Option<Duration>) -> anyhow::Result<Measured> {
    use std::os::unix::process::CommandExt;
    check_interrupted()?;
    let start = Instant::now();
    let mut child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {:?}", cmd.get_program()))?;
    let pid = child.id() as i32;
    let registered = Registered::new(pid);
    if interrupted() {
        on_stop(0);
    }
    let mut stderr = child.stderr.take().context("no stderr pipe")?;
    let errors = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = stderr.read_to_end(&mut text);
        text
    });
    // The watchdog stops the child at `limit` unless told it ended first:
    // its process group, then the child itself through a pidfd, which
    // names this process and no other even once it is reaped. (The group's
    // number cannot be reused while any process is in the group.)
    let (ended, ended_rx) = std::sync::mpsc::channel::<()>();
    let watchdog = match limit {
        Some(limit) => {
            // SAFETY: pidfd_open on our own child, not yet reaped.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
            if fd < 0 {
                let e = std::io::Error::last_os_error();
                let _ = child.kill();
                let _ = child.wait();
                return Err(e).context("watching the child for --run-timeout");
            }
            Some(std::thread::spawn(move || {
                let late = matches!(
                    ended_rx.recv_timeout(limit),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                );
                // SAFETY: our pidfd; the syscall reads nothing else (no
                // siginfo), and the fd is closed once, here.
                unsafe {
                    if late {
                        libc::kill(-pid, libc::SIGTERM);
                        let null = std::ptr::null::<libc::siginfo_t>();
                        libc::syscall(libc::SYS_pidfd_send_signal, fd, libc::SIGTERM, null, 0);
                    }
                    libc::close(fd as libc::c_int);
                }
                late
            }))
        }
        None => None,
    };
    let mut stdout = Vec::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_end(&mut stdout);
    }
    // wait4 rather than Child::wait: it also gives the child's rusage.
    let mut raw = 0;
    // SAFETY: rusage is plain data that wait4 fills.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: waits for our own child; valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut raw, 0, &mut usage) };
        if r == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e).context("waiting for the child");
        }
    }
    drop(registered);
    let seconds = start.elapsed().as_secs_f64();
    drop(ended);
    let late = watchdog.is_some_and(|w| w.join().unwrap_or(false));
    let errors = errors.join().unwrap_or_default();
    Ok(Measured {
        status: std::os::unix::process::ExitStatusExt::from_raw(raw),
        seconds,
        major_faults: usage.ru_majflt.max(0) as u64,
        max_rss_bytes: usage.ru_maxrss.max(0) as u64 * 1024,
        stdout,
        stderr_tail: tail(&String::from_utf8_lossy(&errors), 12),
        timed_out: limit.filter(|_| late),
    })
}

/// Brings the machine to the same state before every run, so no config
/// pays for the one before it: a kernel-swap run leaves its teardown
/// (freed swap entries, a fragmented free list, dirty page cache) behind,
/// and the next run measured 15-20% slower for it. As root: writes back
/// and drops the page cache and compacts free memory; then a second's rest.
/// Not root: only the rest. Returns what it did, for the report.
pub fn settle() -> &'static str {
    // SAFETY: no arguments, no memory.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        // SAFETY: no arguments, no memory.
        unsafe { libc::sync() };
        let drop = std::fs::write("/proc/sys/vm/drop_caches", "3");
        let compact = std::fs::write("/proc/sys/vm/compact_memory", "1");
        std::thread::sleep(std::time::Duration::from_secs(1));
        if drop.is_ok() && compact.is_ok() {
            return "sync, drop_caches=3, compact_memory=1, 1 s";
        }
    } else {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    "1 s"
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A `farmem run --stats-json` file in the temp dir, named for this
/// process and `tag` (and a count, so no two collide), removed on drop.
pub struct StatsFile(pub std::path::PathBuf);

impl StatsFile {
    pub fn new(tag: &str) -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        Self(std::env::temp_dir().join(format!(
            "farmem-{tag}-{}-{}.json",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        )))
    }

    /// The report `farmem run` wrote, if it wrote one that parses.
    pub fn read(&self) -> Option<serde_json::Value> {
        let text = std::fs::read_to_string(&self.0).ok()?;
        serde_json::from_str(&text).ok()
    }
}

impl Drop for StatsFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_measured_and_its_output_kept() {
        let m = run(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            Some(Duration::from_secs(600)),
        )
        .unwrap();
        assert_eq!(m.stdout, b"out\n");
        assert_eq!(m.stderr_tail, "err");
        assert_eq!(m.outcome(), "exit 3");
        assert!(m.max_rss_bytes > 0);
        let m = run(Command::new("sh").args(["-c", "kill -9 $$"]), None).unwrap();
        assert_eq!(m.outcome(), "signal 9");
    }

    #[test]
    fn a_child_past_its_limit_is_stopped_and_reported() {
        let m = run(
            Command::new("sh").args(["-c", "echo started; exec sleep 600"]),
            Some(Duration::from_millis(300)),
        )
        .unwrap();
        assert_eq!(m.outcome(), "timed out after 300ms");
        assert_eq!(m.stdout, b"started\n");
        // A pipeline outlives its shell unless its whole group is stopped.
        let m = run(
            Command::new("sh").args(["-c", "echo piped; sleep 600 | cat"]),
            Some(Duration::from_millis(300)),
        )
        .unwrap();
        assert_eq!(m.outcome(), "timed out after 300ms");
        assert_eq!(m.stdout, b"piped\n");
        assert!(m.seconds < 60.0, "{}", m.seconds);
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
        assert_eq!(tail("", 5), "");
    }
}
