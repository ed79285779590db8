//! The soak's controllers: one (a [`LocalRack`]'s, never touched), or
//! `--controllers N` sharing their state in an etcd the soak starts for
//! itself, one leading; the chaos kills the leader with SIGKILL and
//! restarts it on its address a few seconds later (a standby from then on).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, bail};
use farmem_controller::local_etcd::EtcdProcess;
use farmem_net::{ClientConfig, ControllerClient};
use serde_json::Value;

use super::children::own_group_dying_with_us;
use crate::cmd::local::{LocalRack, make_token};

/// Where the soak's programs and memory nodes find their controller.
pub(super) enum Rack {
    One(LocalRack),
    Elected(Elected),
}

impl Rack {
    /// `--controller` for memory nodes and programs: every address.
    pub(super) fn controller(&self) -> String {
        match self {
            Rack::One(r) => r.controller.clone(),
            Rack::Elected(e) => e.addrs.join(","),
        }
    }

    pub(super) fn token_file(&self) -> &Path {
        match self {
            Rack::One(r) => r.token_file(),
            Rack::Elected(e) => &e.token_file,
        }
    }

    pub(super) fn elected(&mut self) -> Option<&mut Elected> {
        match self {
            Rack::One(_) => None,
            Rack::Elected(e) => Some(e),
        }
    }
}

/// Controllers on etcd, children of this binary on fixed loopback ports.
pub(super) struct Elected {
    pub(super) addrs: Vec<String>,
    children: Vec<Option<Child>>,
    exe: PathBuf,
    logs: PathBuf,
    state: String,
    granularity: u64,
    token: Vec<u8>,
    token_dir: PathBuf,
    token_file: PathBuf,
    // Dropped after the controllers (fields drop in order).
    _etcd: EtcdProcess,
}

fn free_addr() -> anyhow::Result<String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(l.local_addr()?.to_string())
}

impl Elected {
    /// Starts etcd (its data in `logs/etcd`) and `n` controllers on it.
    pub(super) fn start(
        n: usize,
        exe: &Path,
        logs: &Path,
        granularity: u64,
    ) -> anyhow::Result<Self> {
        if !EtcdProcess::installed() {
            bail!(
                "--controllers {n} needs etcd on PATH (Debian: apt-get install etcd-server); the soak starts its own"
            );
        }
        let etcd = EtcdProcess::spawn(logs.join("etcd")).map_err(anyhow::Error::msg)?;
        let (token_dir, token_file, token) = make_token()?;
        let mut rack = Self {
            addrs: (0..n).map(|_| free_addr()).collect::<anyhow::Result<_>>()?,
            children: (0..n).map(|_| None).collect(),
            exe: exe.to_path_buf(),
            logs: logs.to_path_buf(),
            state: etcd.url("faults").to_string(),
            granularity,
            token,
            token_dir,
            token_file,
            _etcd: etcd,
        };
        for i in 0..n {
            rack.spawn(i)?;
        }
        Ok(rack)
    }

    /// Starts controller `i` on its address; waits until it listens.
    pub(super) fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.logs.join(format!("controller-{i}.log")))?;
        let mut cmd = Command::new(&self.exe);
        cmd.args(["controller", "--listen", &self.addrs[i]])
            .args(["--state", &self.state])
            .arg(format!("--granularity={}", self.granularity))
            .arg("--token-file")
            .arg(&self.token_file)
            .arg("--json")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log);
        own_group_dying_with_us(&mut cmd);
        let mut child = cmd.spawn().context("starting `farmem controller`")?;
        let stdout = child.stdout.take().expect("stdout was piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_default();
        let v = serde_json::from_str::<Value>(line.trim()).unwrap_or_default();
        if v["addr"].as_str().is_none() {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "controller {i} did not start on {} (see {})",
                self.addrs[i],
                self.logs.display()
            );
        }
        self.children[i] = Some(child);
        Ok(())
    }

    /// The controller that leads now, asking each one running.
    pub(super) fn leader(&self) -> Option<usize> {
        let cfg = ClientConfig::new("faults-soak", farmem_wire::Role::Compute)
            .with_token(self.token.clone());
        (0..self.addrs.len()).find(|&i| {
            self.children[i].is_some()
                && ControllerClient::connect(&self.addrs[i], &cfg)
                    .and_then(|c| c.stats_json())
                    .ok()
                    .and_then(|j| serde_json::from_str::<Value>(&j).ok())
                    .is_some_and(|v| v["standby"] == false)
        })
    }

    /// SIGKILLs controller `i`.
    pub(super) fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub(super) fn running(&self, i: usize) -> bool {
        self.children[i].is_some()
    }
}

impl Drop for Elected {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.token_dir);
    }
}
