//! A local rack for the quick start, benchmarks and `farmem run`: a
//! controller and memory nodes started as child processes of this binary on
//! loopback, stopped (and reaped) when the value is dropped.
//!
//! Even this rack is authenticated: it makes a random cluster token of its
//! own (32 random bytes, hex) in a private temporary directory (0700, the
//! file 0600, removed on drop), starts its daemons with `--token-file`, and
//! its users connect with its token ([`connect_target`]) or pass
//! [`LocalRack::token_file`] on (`farmem run` to its programs).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

/// Child daemons on loopback.
pub struct LocalRack {
    pub controller: String,
    pub memnodes: Vec<String>,
    children: Vec<Child>,
    /// The private directory holding the token file.
    dir: PathBuf,
    token_file: PathBuf,
    token: Vec<u8>,
}

impl LocalRack {
    /// Starts a controller and `memnodes` memory nodes of `capacity` each,
    /// all holding a fresh random cluster token.
    pub fn start(memnodes: usize, capacity: u64, granularity: u64) -> anyhow::Result<Self> {
        let (dir, token_file, token) = make_token()?;
        let mut rack = Self {
            controller: String::new(),
            memnodes: Vec::new(),
            children: Vec::new(),
            dir,
            token_file,
            token,
        };
        let token_file = rack.token_file.to_string_lossy().into_owned();
        rack.controller = rack.spawn(
            "controller",
            &[
                "controller",
                "--listen",
                "127.0.0.1:0",
                "--granularity",
                &granularity.to_string(),
                "--token-file",
                &token_file,
                "--json",
            ],
        )?;
        // The memory nodes start side by side: each takes tens of ms to
        // come up and register, and none needs another.
        let ctl = rack.controller.clone();
        let capacity = capacity.to_string();
        let mut starting = Vec::with_capacity(memnodes);
        for i in 0..memnodes {
            let args = [
                "memnode",
                "--listen",
                "127.0.0.1:0",
                "--capacity",
                &capacity,
                "--controller",
                &ctl,
                "--token-file",
                &token_file,
                "--json",
            ];
            starting.push(rack.launch(&format!("memnode {}", i + 1), &args)?);
        }
        for announced in starting {
            rack.memnodes.push(announced.address()?);
        }
        Ok(rack)
    }

    /// The file holding this rack's token (readable by this user only;
    /// gone once the rack is dropped).
    pub fn token_file(&self) -> &Path {
        &self.token_file
    }

    /// This rack's token.
    pub fn token(&self) -> &[u8] {
        &self.token
    }

    /// Spawns `farmem ARGS…` and waits for the JSON line announcing its
    /// address.
    fn spawn(&mut self, role: &str, args: &[&str]) -> anyhow::Result<String> {
        self.launch(role, args)?.address()
    }

    /// Spawns `farmem ARGS…`; its address is announced on the returned
    /// value. What the daemon logs reaches our stderr as `farmem: ROLE: …`
    /// lines, so a program run under `farmem run` keeps its stderr readable.
    fn launch(&mut self, role: &str, args: &[&str]) -> anyhow::Result<Announced> {
        let exe = std::env::current_exe().context("finding the farmem binary")?;
        let mut cmd = Command::new(&exe);
        // SAFETY: prctl is async-signal-safe; it makes the daemon die with us
        // even if we are killed without a chance to clean up.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let mut child = cmd
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting `farmem {}`", args[0]))?;
        let stderr = child.stderr.take().expect("stderr was piped");
        let role = role.to_string();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let line = strip_ansi(&line);
                let line = line.strip_prefix("farmem: ").unwrap_or(&line);
                eprintln!("farmem: {role}: {}", line.trim_start());
            }
        });
        let stdout = child.stdout.take().expect("stdout was piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        self.children.push(child);
        Ok(Announced {
            command: args[0].to_string(),
            line: rx,
        })
    }
}

/// A daemon just spawned, whose first line of stdout announces its address.
struct Announced {
    command: String,
    line: std::sync::mpsc::Receiver<String>,
}

impl Announced {
    /// Waits for the address (20 s at most).
    fn address(self) -> anyhow::Result<String> {
        let what = self.command;
        let line = self
            .line
            .recv_timeout(Duration::from_secs(20))
            .with_context(|| format!("`farmem {what}` did not report its address within 20 s"))?;
        let v: serde_json::Value = serde_json::from_str(line.trim())
            .with_context(|| format!("`farmem {what}` printed {line:?} instead of its address"))?;
        match v.get("addr").and_then(|a| a.as_str()) {
            Some(addr) => Ok(addr.to_string()),
            None => bail!("`farmem {what}` printed no address: {line}"),
        }
    }
}

/// The rack a client of this binary talks to: `controller` with the token
/// in `token_file` when one is given, else a local rack from `start`, with
/// its own token. Returns the controller's address, the token, and the rack
/// to keep alive for as long as it is used.
pub fn connect_target(
    controller: Option<&str>,
    token_file: Option<&Path>,
    start: impl FnOnce() -> anyhow::Result<LocalRack>,
) -> anyhow::Result<(String, Vec<u8>, Option<LocalRack>)> {
    match controller {
        Some(c) => Ok((c.to_string(), super::load_token(token_file)?, None)),
        None => {
            let rack = start().context("starting a local rack")?;
            Ok((rack.controller.clone(), rack.token.clone(), Some(rack)))
        }
    }
}

/// A new private directory under the temp dir holding `token`: 32 random
/// bytes as hex, in a file only this user can read. The directory is made
/// with create-new semantics, so nobody can have planted it (or a link in
/// it) beforehand.
pub(crate) fn make_token() -> anyhow::Result<(PathBuf, PathBuf, Vec<u8>)> {
    let mut last = None;
    for _ in 0..8 {
        let dir = std::env::temp_dir().join(format!(
            "farmem-rack-{}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {
                let file = dir.join("token");
                let token = write_token(&file).inspect_err(|_| {
                    let _ = std::fs::remove_dir_all(&dir);
                })?;
                return Ok((dir, file, token));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "creating a private directory for the local rack's token in {}",
                        std::env::temp_dir().display()
                    )
                });
            }
        }
    }
    Err(last.expect("the loop ran"))
        .context("creating a private directory for the local rack's token")
}

/// Writes a fresh token to `file` (new, mode 0600) and returns it.
fn write_token(file: &Path) -> anyhow::Result<Vec<u8>> {
    let bytes: [u8; 32] = rand::random();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
        .with_context(|| format!("creating the local rack's token file {}", file.display()))?;
    writeln!(f, "{hex}")
        .with_context(|| format!("writing the local rack's token file {}", file.display()))?;
    Ok(hex.into_bytes())
}

/// `s` without ANSI escape sequences (log colours).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters… final byte in @..~
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// How often a stopping daemon is checked for its exit. One stops within a
/// few ms of SIGTERM; checked every 20 ms, the rack's teardown took 60 ms,
/// more than half of what a short program (GNU sort, 0.1 s) ran for.
const STOP_POLL: Duration = Duration::from_millis(1);

impl Drop for LocalRack {
    fn drop(&mut self) {
        // Memory nodes first, each gone before the next stops, the controller
        // last, so no node ever sees its controller vanish.
        for child in self.children.iter_mut().rev() {
            // SAFETY: plain kill(2) on our own child's pid.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
            }
            let deadline = std::time::Instant::now() + Duration::from_secs(3);
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if std::time::Instant::now() < deadline => {
                        std::thread::sleep(STOP_POLL)
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn colours_are_stripped() {
        assert_eq!(
            super::strip_ansi("\u{1b}[2m2026\u{1b}[0m \u{1b}[33m WARN\u{1b}[0m x"),
            "2026  WARN x"
        );
        assert_eq!(super::strip_ansi("plain"), "plain");
    }

    #[test]
    fn the_token_is_private_random_and_removed_with_its_directory() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, file, token) = super::make_token().unwrap();
        let (dir2, _, token2) = super::make_token().unwrap();
        assert_ne!(token, token2);
        assert_eq!(token.len(), 64);
        assert_eq!(farmem_net::read_token_file(&file).unwrap(), token);
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&file), 0o600);
        assert_eq!(mode(&dir), 0o700);
        for d in [dir, dir2] {
            std::fs::remove_dir_all(&d).unwrap();
        }
    }
}
