//! The controller's state: the node and extent table, lost ranges and
//! the lease table ([`LeaseBook`]), as one JSON object, kept by a
//! [`Backend`]: a file (`--state FILE`, written atomically: a temporary
//! file beside it, then a rename) or a key in etcd (`--state
//! etcd://HOST:PORT/PREFIX`, see the `election` module), saved after every
//! change.
//!
//! The controller writes it once when it starts serving and refuses to
//! start when it cannot. A later save that fails is counted
//! (`state_save_errors`) and logged once per streak of failures; the
//! controller keeps serving from memory, and the next save that works
//! writes every change since. A save to etcd that finds another controller
//! leading is different: nothing is written, this one stands down, and the
//! request that made the change is refused ([`Shared::save`]).
//!
//! Files from before leases were kept load with no leases: their grants
//! stay granted until released, as do the grants of any owner that held no
//! lease (nothing tells the controller such an owner is gone).

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use farmem_net::server::Refusal;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::etcd::{Etcd, EtcdUrl};
use crate::leases::{LeaseBook, Leases};
use crate::{ControllerError, Shared, Table};

/// Where the state is kept (`--state`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateSpec {
    File(PathBuf),
    /// In etcd, with leader election among the controllers sharing it.
    Etcd(EtcdUrl),
}

impl FromStr for StateSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.starts_with("etcd://") {
            return s.parse().map(StateSpec::Etcd);
        }
        if s.contains("://") {
            return Err(format!(
                "`{s}`: --state takes a file or etcd://HOST:PORT/PREFIX"
            ));
        }
        Ok(StateSpec::File(PathBuf::from(s)))
    }
}

impl std::fmt::Display for StateSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateSpec::File(p) => write!(f, "{}", p.display()),
            StateSpec::Etcd(u) => write!(f, "{u}"),
        }
    }
}

/// Why a save wrote nothing.
#[derive(Debug)]
pub(crate) enum SaveError {
    /// The store failed (counted; the next save tries again).
    Failed(String),
    /// Another controller leads now: this one must not write.
    NotLeader,
}

/// Keeps the state's bytes.
pub(crate) trait Backend: Send + Sync {
    /// The saved state, or `None` when nothing was saved yet.
    fn load(&self) -> Result<Option<Vec<u8>>, ControllerError>;
    fn store(&self, bytes: &[u8]) -> Result<(), SaveError>;
    /// Where, for messages.
    fn describe(&self) -> String;
}

/// The file's one object: the table's fields, and `leases`.
#[derive(Serialize)]
struct Saved<'a> {
    #[serde(flatten)]
    table: &'a Table,
    leases: &'a LeaseBook,
}

/// The lease table of a state file; absent in files from before leases.
#[derive(Deserialize)]
struct SavedLeases {
    #[serde(default)]
    leases: LeaseBook,
}

pub(crate) fn encode(table: &Table, leases: &LeaseBook) -> Vec<u8> {
    // Serializing maps with string and integer keys cannot fail.
    serde_json::to_vec_pretty(&Saved { table, leases }).unwrap_or_default()
}

pub(crate) fn decode(bytes: &[u8], place: &str) -> Result<(Table, LeaseBook), ControllerError> {
    let corrupt = |error| ControllerError::StateCorrupt {
        place: place.to_string(),
        error,
    };
    let table: Table = serde_json::from_slice(bytes).map_err(corrupt)?;
    let SavedLeases { leases } = serde_json::from_slice(bytes).map_err(corrupt)?;
    Ok((table, leases))
}

/// Where the state goes before it is renamed over `path`.
fn tmp_path(path: &Path) -> PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    PathBuf::from(tmp)
}

/// `--state FILE`.
pub(crate) struct FileBackend(pub(crate) PathBuf);

impl FileBackend {
    /// Writes `bytes` to the file atomically: a reader sees the old file
    /// or the new one, never a part.
    fn write(&self, bytes: &[u8]) -> std::io::Result<()> {
        let tmp = tmp_path(&self.0);
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, &self.0).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }
}

impl Backend for FileBackend {
    fn load(&self) -> Result<Option<Vec<u8>>, ControllerError> {
        match std::fs::read(&self.0) {
            Ok(bytes) => Ok(Some(bytes)),
            // No file yet (or none can be there: the write at start says why).
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                Ok(None)
            }
            Err(error) => Err(ControllerError::StateRead {
                place: self.describe(),
                error: error.to_string(),
            }),
        }
    }

    fn store(&self, bytes: &[u8]) -> Result<(), SaveError> {
        self.write(bytes)
            .map_err(|e| SaveError::Failed(e.to_string()))
    }

    fn describe(&self) -> String {
        self.0.display().to_string()
    }
}

/// `--state etcd://...`: the state under `PREFIX/state`, written only
/// while this controller holds the leader key in the life it created
/// (`fence`: that key's create revision, set by the election).
pub(crate) struct EtcdBackend {
    pub(crate) etcd: Etcd,
    pub(crate) url: EtcdUrl,
    pub(crate) fence: Arc<Mutex<Option<i64>>>,
}

impl Backend for EtcdBackend {
    fn load(&self) -> Result<Option<Vec<u8>>, ControllerError> {
        let kv =
            self.etcd
                .get(&self.etcd.key("state"))
                .map_err(|e| ControllerError::StateRead {
                    place: self.describe(),
                    error: e.to_string(),
                })?;
        Ok(kv.map(|kv| kv.value))
    }

    fn store(&self, bytes: &[u8]) -> Result<(), SaveError> {
        let Some(rev) = *self.fence.lock() else {
            return Err(SaveError::NotLeader);
        };
        let (fence, key) = (self.etcd.key("leader"), self.etcd.key("state"));
        match self.etcd.put_fenced(&fence, rev, &key, bytes) {
            Ok(true) => Ok(()),
            Ok(false) => Err(SaveError::NotLeader),
            Err(e) => Err(SaveError::Failed(e.to_string())),
        }
    }

    fn describe(&self) -> String {
        self.url.to_string()
    }
}

/// The backend `spec` names.
pub(crate) fn backend(spec: &StateSpec, fence: Arc<Mutex<Option<i64>>>) -> Arc<dyn Backend> {
    match spec {
        StateSpec::File(path) => Arc::new(FileBackend(path.clone())),
        StateSpec::Etcd(url) => Arc::new(EtcdBackend {
            etcd: Etcd::new(url, crate::etcd::ETCD_TIMEOUT),
            url: url.clone(),
            fence,
        }),
    }
}

/// The table and leases kept in `backend`, if any (nodes get one
/// heartbeat timeout, leases one length, from now), else empty ones.
pub(crate) fn load(
    backend: &dyn Backend,
    granularity: u64,
) -> Result<(Table, Leases), ControllerError> {
    let now = Instant::now();
    let Some(bytes) = backend.load()? else {
        return Ok((Table::new(granularity), Leases::default()));
    };
    let (mut table, book) = decode(&bytes, &backend.describe())?;
    for n in table.nodes.values_mut() {
        n.last_seen = Some(now);
    }
    let leases = Leases::from_book(&book, now);
    tracing::info!(
        "loaded {} nodes, {} grants and {} leases from {}",
        table.nodes.len(),
        table.tree.grants().len(),
        leases.held.len(),
        backend.describe()
    );
    Ok((table, leases))
}

/// Loads the state and writes it back at once, so a controller that could
/// not keep it refuses to start (or, elected, to lead).
pub(crate) fn open(
    backend: &dyn Backend,
    granularity: u64,
) -> Result<(Table, Leases), ControllerError> {
    let (table, leases) = load(backend, granularity)?;
    match backend.store(&encode(&table, &leases.book())) {
        Ok(()) => Ok((table, leases)),
        Err(SaveError::NotLeader) => Err(ControllerError::NotLeader),
        Err(SaveError::Failed(error)) => Err(ControllerError::StateWrite {
            place: backend.describe(),
            error,
        }),
    }
}

impl Shared {
    /// Saves the state, if kept; a failure is counted and logged once per
    /// streak (see the module docs). Refused only when another controller
    /// leads: this one stands down and the change must not be acted on.
    pub(crate) fn save(&self, table: &Table) -> Result<(), Refusal> {
        let Some(backend) = &self.backend else {
            return Ok(());
        };
        let result = backend.store(&encode(table, &self.lease_book.lock()));
        match result {
            Ok(()) => {
                if self.save_failing.swap(false, Ordering::Relaxed) {
                    tracing::warn!("controller state saved to {} again", backend.describe());
                }
            }
            Err(SaveError::NotLeader) => {
                self.stand_down("a save found another controller leading");
                return Err(self.not_leader());
            }
            Err(SaveError::Failed(e)) => {
                self.state_save_errors.fetch_add(1, Ordering::Relaxed);
                if !self.save_failing.swap(true, Ordering::Relaxed) {
                    tracing::error!(
                        "cannot save controller state to {}: {e}; changes from now on would be lost with a restart until a save works (failures counted in state_save_errors, logged once)",
                        backend.describe()
                    );
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("farmem-state-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn state_round_trips_and_files_without_leases_load() {
        let dir = scratch("roundtrip");
        let path = dir.join("state.json");
        let mut table = Table::new(1 << 20);
        table.tree.add_node(0, 0, 8 << 20).unwrap();
        table.nodes.insert(
            0,
            crate::NodeRecord {
                addr: "127.0.0.1:1".into(),
                base: 0,
                capacity: 8 << 20,
                up: true,
                incarnation: 7,
                last_seen: None,
            },
        );
        let mut book = LeaseBook::default();
        book.held.insert("cn-a".into(), 1500);
        book.lapsed.push("cn-b".into());
        let file = FileBackend(path.clone());
        let load = |file: &FileBackend| {
            file.load()
                .and_then(|b| b.map(|b| decode(&b, "test")).transpose())
        };
        file.store(&encode(&table, &book)).unwrap();
        assert!(!tmp_path(&path).exists());
        let (loaded, leases) = load(&file).unwrap().unwrap();
        assert_eq!(leases, book);
        assert_eq!(loaded.nodes.len(), 1);
        assert_eq!(loaded.tree.free_bytes(0), 8 << 20);

        // A file from before leases: the same object without `leases`.
        let mut old: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        old.as_object_mut().unwrap().remove("leases");
        std::fs::write(&path, serde_json::to_vec(&old).unwrap()).unwrap();
        let (loaded, leases) = load(&file).unwrap().unwrap();
        assert_eq!(leases, LeaseBook::default());
        assert_eq!(loaded.nodes[&0].incarnation, 7);
        assert!(
            load(&FileBackend(dir.join("absent.json")))
                .unwrap()
                .is_none()
        );
        std::fs::write(&path, b"{not json").unwrap();
        assert!(matches!(
            load(&file),
            Err(ControllerError::StateCorrupt { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_state_spec_is_a_file_or_an_etcd_url() {
        let file: StateSpec = "/var/lib/farmem/c.json".parse().unwrap();
        assert_eq!(file, StateSpec::File("/var/lib/farmem/c.json".into()));
        let etcd: StateSpec = "etcd://127.0.0.1:2379/rack1".parse().unwrap();
        let StateSpec::Etcd(url) = &etcd else {
            panic!("{etcd:?}")
        };
        assert_eq!(url.prefix, "rack1");
        assert_eq!(etcd.to_string(), "etcd://127.0.0.1:2379/rack1");
        assert!("http://127.0.0.1:2379/x".parse::<StateSpec>().is_err());
        assert!("etcd://no-port/x".parse::<StateSpec>().is_err());
    }

    #[test]
    fn failed_saves_are_counted_and_a_later_one_recovers() {
        let dir = scratch("failing");
        let path = dir.join("state.json");
        let mut cfg = crate::ControllerConfig::new("127.0.0.1:0");
        cfg.state = Some(StateSpec::File(path.clone()));
        let shared = Shared::new(cfg, Table::new(1 << 20));
        shared.save(&shared.table.lock()).unwrap();
        assert!(path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
        shared.save(&shared.table.lock()).unwrap();
        shared.save(&shared.table.lock()).unwrap();
        assert_eq!(shared.state_save_errors.load(Ordering::Relaxed), 2);
        assert!(shared.save_failing.load(Ordering::Relaxed));
        std::fs::create_dir_all(&dir).unwrap();
        shared.save(&shared.table.lock()).unwrap();
        assert!(path.exists());
        assert!(!shared.save_failing.load(Ordering::Relaxed));
        assert_eq!(shared.stats().state_save_errors, 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
