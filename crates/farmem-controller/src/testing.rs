//! An etcd of the tests' own: a temporary data directory and free
//! loopback ports, killed when dropped. Not for production use.

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
    /// Starts etcd, or returns `None` with a message when it is not
    /// installed; panics instead under `FARMEM_TEST_REQUIRE_PROGRAMS`
    /// (scripts/test installs it), or when it does not come up.
    pub fn start(tag: &str) -> Option<Self> {
        let installed = std::env::var_os("PATH")
            .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join("etcd").is_file()));
        if !installed {
            assert!(
                std::env::var_os("FARMEM_TEST_REQUIRE_PROGRAMS").is_none(),
                "etcd is not installed (scripts/test installs etcd-server)"
            );
            eprintln!("skipping: etcd is not installed (apt-get install etcd-server)");
            return None;
        }
        let dir = std::env::temp_dir().join(format!("farmem-etcd-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (client, peer) = (free_port(), free_port());
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new("etcd")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--name", "farmem-test"])
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .arg("--initial-cluster")
            .arg(format!("farmem-test={peer_url}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting etcd");
        let etcd = Self {
            child,
            dir,
            endpoint: format!("127.0.0.1:{client}"),
        };
        let client = etcd.client("probe");
        let deadline = Instant::now() + Duration::from_secs(30);
        while client.get("probe").is_err() {
            assert!(Instant::now() < deadline, "etcd did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(etcd)
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
