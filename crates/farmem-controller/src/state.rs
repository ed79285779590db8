//! The state file (`--state`): the node and extent table, lost ranges and
//! the lease table ([`LeaseBook`]), as one JSON object, written atomically
//! (a temporary file beside it, then a rename) after every change.
//!
//! The controller writes it once at start and refuses to start when it
//! cannot. A later save that fails is counted (`state_save_errors`) and
//! logged once per streak of failures; the controller keeps serving from
//! memory, and the next save that works writes every change since.
//!
//! Files from before leases were kept load with no leases: their grants
//! stay granted until released, as do the grants of any owner that held no
//! lease (nothing tells the controller such an owner is gone).

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::leases::{LeaseBook, Leases};
use crate::{ControllerConfig, ControllerError, Shared, Table};

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

/// Where the state goes before it is renamed over `path`.
fn tmp_path(path: &Path) -> PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    PathBuf::from(tmp)
}

/// Writes the state to `path` atomically: a reader sees the old file or
/// the new one, never a part.
pub(crate) fn write(path: &Path, table: &Table, leases: &LeaseBook) -> std::io::Result<()> {
    let bytes =
        serde_json::to_vec_pretty(&Saved { table, leases }).map_err(std::io::Error::other)?;
    let tmp = tmp_path(path);
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// The state kept in `path`, or `None` when there is no such file yet.
pub(crate) fn load(path: &Path) -> Result<Option<(Table, LeaseBook)>, ControllerError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        // No file yet (or none can be there: the write at start says why).
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(None);
        }
        Err(error) => {
            return Err(ControllerError::StateRead {
                path: path.to_path_buf(),
                error,
            });
        }
    };
    let corrupt = |error| ControllerError::StateCorrupt {
        path: path.to_path_buf(),
        error,
    };
    let table: Table = serde_json::from_slice(&bytes).map_err(corrupt)?;
    let SavedLeases { leases } = serde_json::from_slice(&bytes).map_err(corrupt)?;
    Ok(Some((table, leases)))
}

/// The table and leases a controller starts with: those of the state
/// file, if there is one (nodes get one heartbeat timeout, leases one
/// length, from now), else empty ones. The state is written back at once,
/// so a controller that could not keep it refuses to start.
pub(crate) fn open(cfg: &ControllerConfig) -> Result<(Table, Leases), ControllerError> {
    let Some(path) = &cfg.state else {
        return Ok((Table::new(cfg.granularity), Leases::default()));
    };
    let now = Instant::now();
    let (table, leases) = match load(path)? {
        Some((mut table, book)) => {
            for n in table.nodes.values_mut() {
                n.last_seen = Some(now);
            }
            let leases = Leases::from_book(&book, now);
            tracing::info!(
                "loaded {} nodes, {} grants and {} leases from {}",
                table.nodes.len(),
                table.tree.grants().len(),
                leases.held.len(),
                path.display()
            );
            (table, leases)
        }
        None => (Table::new(cfg.granularity), Leases::default()),
    };
    write(path, &table, &leases.book()).map_err(|error| ControllerError::StateWrite {
        path: path.clone(),
        error,
    })?;
    Ok((table, leases))
}

impl Shared {
    /// Saves the state, if kept; a failure is counted and logged once per
    /// streak (see the module docs).
    pub(crate) fn save(&self, table: &Table) {
        let Some(path) = &self.cfg.state else { return };
        let result = write(path, table, &self.lease_book.lock());
        match result {
            Ok(()) => {
                if self.save_failing.swap(false, Ordering::Relaxed) {
                    tracing::warn!("controller state saved to {} again", path.display());
                }
            }
            Err(e) => {
                self.state_save_errors.fetch_add(1, Ordering::Relaxed);
                if !self.save_failing.swap(true, Ordering::Relaxed) {
                    tracing::error!(
                        "cannot save controller state to {}: {e}; changes from now on would be lost with a restart until a save works (failures counted in state_save_errors, logged once)",
                        path.display()
                    );
                }
            }
        }
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
        write(&path, &table, &book).unwrap();
        assert!(!tmp_path(&path).exists());
        let (loaded, leases) = load(&path).unwrap().unwrap();
        assert_eq!(leases, book);
        assert_eq!(loaded.nodes.len(), 1);
        assert_eq!(loaded.tree.free_bytes(0), 8 << 20);

        // A file from before leases: the same object without `leases`.
        let mut old: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        old.as_object_mut().unwrap().remove("leases");
        std::fs::write(&path, serde_json::to_vec(&old).unwrap()).unwrap();
        let (loaded, leases) = load(&path).unwrap().unwrap();
        assert_eq!(leases, LeaseBook::default());
        assert_eq!(loaded.nodes[&0].incarnation, 7);
        assert!(load(&dir.join("absent.json")).unwrap().is_none());
        std::fs::write(&path, b"{not json").unwrap();
        assert!(matches!(
            load(&path),
            Err(ControllerError::StateCorrupt { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn failed_saves_are_counted_and_a_later_one_recovers() {
        let dir = scratch("failing");
        let path = dir.join("state.json");
        let mut cfg = ControllerConfig::new("127.0.0.1:0");
        cfg.state = Some(path.clone());
        let shared = Shared::new(cfg, Table::new(1 << 20));
        shared.save(&shared.table.lock());
        assert!(path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
        shared.save(&shared.table.lock());
        shared.save(&shared.table.lock());
        assert_eq!(shared.state_save_errors.load(Ordering::Relaxed), 2);
        assert!(shared.save_failing.load(Ordering::Relaxed));
        std::fs::create_dir_all(&dir).unwrap();
        shared.save(&shared.table.lock());
        assert!(path.exists());
        assert!(!shared.save_failing.load(Ordering::Relaxed));
        assert_eq!(shared.stats().state_save_errors, 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
