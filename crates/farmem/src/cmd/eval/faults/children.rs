//! Starting the soak's children (memory nodes, programs under `farmem
//! run`) and following the programs' progress.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

use super::{NO_FAR_MEMORY_EXIT, Program, Soak};

/// Far memory of a program started at a leader kill.
const PROBE_BYTES: u64 = 8 << 20;

impl Soak<'_> {
    /// Starts memory node `i` listening on `listen`; its stderr goes to
    /// its log. Returns it and the address it serves.
    pub(super) fn spawn_memnode(
        &self,
        i: usize,
        listen: &str,
    ) -> anyhow::Result<(Child, String, Option<u64>)> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.logs.join(format!("memnode-{i}.log")))?;
        let mut cmd = Command::new(&self.exe);
        cmd.args(["memnode", "--listen", listen, "--capacity", "4GiB"])
            .arg("--controller")
            .arg(self.rack.controller())
            .arg("--token-file")
            .arg(self.rack.token_file())
            .arg("--json")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log);
        own_group_dying_with_us(&mut cmd);
        let mut child = cmd.spawn().context("starting `farmem memnode`")?;
        let stdout = child.stdout.take().expect("stdout was piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_default();
        let v = serde_json::from_str::<Value>(line.trim()).unwrap_or_default();
        match v["addr"].as_str() {
            Some(a) => Ok((child, a.to_string(), v["node"].as_u64())),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "memory node {i} did not start on {listen} (see {})",
                    self.logs.display()
                )
            }
        }
    }

    /// Starts a soak program under `farmem run`, told to end by `deadline`.
    /// A `probe` is small and makes one pass (see [`super::chaos`]).
    pub(super) fn spawn_program(&mut self, deadline: Instant, probe: bool) -> anyhow::Result<()> {
        let args = self.args;
        let f = &args.faults;
        let id = self.next_id;
        self.next_id += 1;
        let log_path = self.logs.join(format!("program-{id}.log"));
        let log = File::create(&log_path)?;
        let ms = deadline
            .saturating_duration_since(Instant::now())
            .as_millis() as u64;
        let (size, passes) = if probe {
            (f.size.bytes().min(PROBE_BYTES), 1)
        } else {
            (f.size.bytes(), f.passes)
        };
        let mut cmd = Command::new(&self.exe);
        // What the rack client did about each fault, in the program's log.
        cmd.env("FARMEM_LOG", "info")
            .arg("run")
            .arg("--controller")
            .arg(self.rack.controller())
            .arg("--token-file")
            .arg(self.rack.token_file())
            .arg(format!("--replicas={}", f.replicas))
            .arg(format!("--local-mem={}", f.local_mem.bytes()))
            .arg("--")
            .arg(&self.exe)
            .args(["eval", "faults", "--worker"])
            .arg(format!("--size={size}"))
            .arg(format!("--passes={passes}"))
            .arg(format!("--seed={}", program_seed(f.seed, id)))
            .arg(format!("--worker-ms={}", ms.max(1)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log);
        own_group_dying_with_us(&mut cmd);
        let mut child = cmd.spawn().context("starting `farmem run`")?;
        let stdout = child.stdout.take().expect("stdout was piped");
        let tx = self.tx.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send((id, Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        self.programs.push(Program {
            id,
            child: Some(child),
            reader: Some(reader),
            log: log_path,
            started: Instant::now(),
            ended: None,
            code: None,
            hung: false,
            verified: 0,
            mismatched: 0,
            progress: Vec::new(),
            probe,
        });
        Ok(())
    }

    pub(super) fn handle_line(&mut self, id: u64, at: Instant, line: &str) {
        let mut it = line.split_whitespace();
        let (Some("progress" | "done"), Some(v), Some(m)) = (it.next(), it.next(), it.next())
        else {
            return;
        };
        if let Some(p) = self.programs.iter_mut().find(|p| p.id == id) {
            p.verified = v.parse().unwrap_or(p.verified);
            p.mismatched = m.parse().unwrap_or(p.mismatched);
            p.progress.push(at);
        }
    }

    pub(super) fn drain(&mut self) {
        while let Ok((id, at, line)) = self.rx.try_recv() {
            self.handle_line(id, at, &line);
        }
    }

    /// Collects programs that ended; returns how many.
    pub(super) fn reap(&mut self) -> usize {
        let mut ended = 0;
        for i in 0..self.programs.len() {
            let Some(child) = self.programs[i].child.as_mut() else {
                continue;
            };
            let Ok(Some(status)) = child.try_wait() else {
                continue;
            };
            let now = Instant::now();
            let p = &mut self.programs[i];
            p.child = None;
            p.ended = Some(now);
            p.code = Some(exit_code(status));
            if let Some(r) = p.reader.take() {
                let _ = r.join();
            }
            ended += 1;
        }
        if ended > 0 {
            self.drain();
        }
        ended
    }

    /// Kills the programs that made no progress for --hang-secs.
    pub(super) fn kill_hung(&mut self, now: Instant) {
        let hang = self.args.faults.hang_secs;
        for p in &mut self.programs {
            let last = p.progress.last().copied().unwrap_or(p.started);
            if now.duration_since(last) < hang {
                continue;
            }
            if let Some(mut c) = p.child.take() {
                dump_stacks(c.id(), &p.log);
                let _ = c.kill();
                let _ = c.wait();
                p.ended = Some(now);
                p.hung = true;
            }
        }
    }

    pub(super) fn refused(&self) -> usize {
        self.programs
            .iter()
            .filter(|p| p.code == Some(NO_FAR_MEMORY_EXIT))
            .count()
    }

    pub(super) fn running(&self) -> usize {
        self.programs.iter().filter(|p| p.child.is_some()).count()
    }
}

/// Appends the threads' stacks of a hung program and its children (the
/// worker runs under `farmem run`) to its log, with gdb when there is one:
/// a hang leaves nothing else to go on.
fn dump_stacks(pid: u32, log: &std::path::Path) {
    let Ok(out) = std::fs::OpenOptions::new().append(true).open(log) else {
        return;
    };
    for pid in std::iter::once(pid).chain(children_of(pid)) {
        let Ok(err) = out.try_clone() else { return };
        let Ok(o) = out.try_clone() else { return };
        let _ = Command::new("gdb")
            .args(["-batch", "-nx", "-p", &pid.to_string()])
            .args(["-ex", "thread apply all bt"])
            .stdin(Stdio::null())
            .stdout(o)
            .stderr(err)
            .status();
    }
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let path = format!("/proc/{pid}/task/{pid}/children");
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

pub(super) fn program_seed(seed: u64, id: u64) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ id.wrapping_add(1)
}

pub(super) fn exit_code(s: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        _ => 1,
    }
}

/// Puts the child in a process group of its own (a Ctrl-C at the terminal
/// reaches only us, and we stop it) and has it SIGKILLed if we die first.
pub(super) fn own_group_dying_with_us(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setpgid and prctl are async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::setpgid(0, 0);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}
