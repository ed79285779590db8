//! An etcd of our own, for tests and `farmem eval faults --controllers`:
//! a temporary data directory and free loopback ports, killed (and the
//! directory removed) when dropped. Not for keeping anything.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::etcd::{Etcd, EtcdUrl};

/// A running `etcd`, started by [`EtcdProcess::start`].
pub struct EtcdProcess {
    child: Child,
    dir: PathBuf,
    /// `HOST:PORT` of its client URL.
    pub endpoint: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

impl EtcdProcess {
    /// True when an `etcd` binary is on PATH.
    pub fn installed() -> bool {
        std::env::var_os("PATH")
            .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join("etcd").is_file()))
    }

    /// Starts etcd for a test, or returns `None` with a message when it is
    /// not installed; panics instead under `FARMEM_TEST_REQUIRE_PROGRAMS`
    /// (scripts/test installs it), or when it does not come up.
    pub fn start(tag: &str) -> Option<Self> {
        if !Self::installed() {
            assert!(
                std::env::var_os("FARMEM_TEST_REQUIRE_PROGRAMS").is_none(),
                "etcd is not installed (scripts/test installs etcd-server)"
            );
            eprintln!("skipping: etcd is not installed (apt-get install etcd-server)");
            return None;
        }
        let dir = std::env::temp_dir().join(format!("farmem-etcd-{tag}-{}", std::process::id()));
        Some(Self::spawn(dir).unwrap_or_else(|e| panic!("{e}")))
    }

    /// Starts etcd keeping its data in `dir` (emptied first), its output
    /// in `dir/etcd.log`, and waits until it answers.
    pub fn spawn(dir: PathBuf) -> Result<Self, String> {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let log = std::fs::File::create(dir.join("etcd.log"))
            .map_err(|e| format!("creating etcd's log in {}: {e}", dir.display()))?;
        let (client, peer) = (free_port(), free_port());
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new("etcd")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--name", "farmem"])
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .arg("--initial-cluster")
            .arg(format!("farmem={peer_url}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting etcd: {e}"))?;
        let etcd = Self {
            child,
            dir,
            endpoint: format!("127.0.0.1:{client}"),
        };
        let client = etcd.client("probe");
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Err(e) = client.get("probe") {
            if Instant::now() >= deadline {
                return Err(format!(
                    "etcd did not come up in 30 s: {e} (see {})",
                    etcd.dir.join("etcd.log").display()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(etcd)
    }

    /// `etcd://ENDPOINT/PREFIX`.
    pub fn url(&self, prefix: &str) -> EtcdUrl {
        EtcdUrl {
            endpoint: self.endpoint.clone(),
            prefix: prefix.to_string(),
        }
    }

    /// A client of keys under `prefix`.
    pub fn client(&self, prefix: &str) -> Etcd {
        Etcd::new(&self.url(prefix), Duration::from_secs(2))
    }
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
