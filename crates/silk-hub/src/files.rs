//! The hub's files in its data dir, besides the metadata store (`silk.db` when it is the
//! default SQLite file):
//!
//! ```text
//! DATA_DIR/runs/{id}/frontier/        the run's frontier (embedded store)
//! DATA_DIR/runs/{id}/items.jsonl      the run's items (the truth the other sinks are fed from)
//! DATA_DIR/runs/{id}/sink-*.json      a sink's delivery offset in items.jsonl
//! DATA_DIR/admin.token                the admin token (mode 0600), written at first start
//! DATA_DIR/hub.id                     this hub's id in the cluster, made at first start
//! ```
//!
//! Every JSON file is replaced atomically (written to a temporary file, synced, renamed), so a
//! crash leaves the old or the new version, never a torn one.

use crate::error::HubError;
use serde::{Deserialize, Serialize};
use silk_bus::Register;
use silk_core::RunId;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A registered agent as remembered across hub restarts (the store's agent document).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnownAgent {
    /// Its last registration.
    pub register: Register,
    /// When the agent sent it (agent clock).
    pub sent_ms: u64,
}

/// The hub's data dir.
#[derive(Debug, Clone)]
pub(crate) struct HubFiles {
    dir: PathBuf,
}

fn io_error(path: &Path, e: impl std::fmt::Display) -> HubError {
    HubError::Storage {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

impl HubFiles {
    /// Creates the data dir (and `runs/`) if needed.
    pub(crate) fn open(dir: &Path) -> Result<Self, HubError> {
        let runs = dir.join("runs");
        std::fs::create_dir_all(&runs).map_err(|e| io_error(&runs, e))?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    /// This hub's id: the one kept in `hub.id`, or a new one (`hub-` and 12 hex digits)
    /// written there, so that a restarted hub keeps its leases and durables.
    pub(crate) fn hub_id(&self) -> Result<String, HubError> {
        let path = self.dir.join("hub.id");
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(text.trim().to_owned()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // The random tail of a v7 uuid (its head is the time).
                let id = format!("hub-{}", &uuid::Uuid::now_v7().simple().to_string()[20..]);
                let tmp = path.with_extension(format!("id.{}.tmp", std::process::id()));
                let write = || -> std::io::Result<()> {
                    let mut file = std::fs::File::create(&tmp)?;
                    file.write_all(format!("{id}\n").as_bytes())?;
                    file.sync_all()?;
                    std::fs::rename(&tmp, &path)
                };
                write().map_err(|e| io_error(&path, e))?;
                Ok(id)
            }
            Err(e) => Err(io_error(&path, e)),
        }
    }

    pub(crate) fn run_dir(&self, id: &RunId) -> PathBuf {
        self.dir.join("runs").join(id.as_str())
    }

    pub(crate) fn items_path(&self, id: &RunId) -> PathBuf {
        self.run_dir(id).join("items.jsonl")
    }

    pub(crate) fn frontier_dir(&self, id: &RunId) -> PathBuf {
        self.run_dir(id).join("frontier")
    }

    /// The embedded frontier of job `job_id` (`frontier: job`), which its runs share.
    pub(crate) fn job_frontier_dir(&self, job_id: &str) -> PathBuf {
        self.dir.join("jobs").join(job_id).join("frontier")
    }

    /// Where the embedded frontier of `record` is: its job's, or its own.
    pub(crate) fn frontier_dir_of(&self, record: &crate::run::RunRecord) -> PathBuf {
        match (&record.job_id, record.job_frontier) {
            (Some(job), true) => self.job_frontier_dir(job),
            _ => self.frontier_dir(&record.id),
        }
    }

    /// Moves the frontier of the ended run `from` to the new run `to` (restart with
    /// `keep_frontier`).
    pub(crate) fn take_frontier(&self, from: &RunId, to: &RunId) -> Result<(), HubError> {
        let src = self.frontier_dir(from);
        if !src.exists() {
            return Err(io_error(&src, "no frontier"));
        }
        let dst_dir = self.run_dir(to);
        std::fs::create_dir_all(&dst_dir).map_err(|e| io_error(&dst_dir, e))?;
        let dst = self.frontier_dir(to);
        std::fs::rename(&src, &dst).map_err(|e| io_error(&src, e))
    }

    /// Writes a small state file of a run atomically (e.g. a sink's delivery offset).
    pub(crate) fn write_state<T: Serialize + ?Sized>(
        &self,
        id: &RunId,
        name: &str,
        value: &T,
    ) -> Result<(), HubError> {
        let dir = self.run_dir(id);
        std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
        write_json(&dir.join(name), value)
    }

    /// Reads a state file of a run; `None` when it does not exist.
    pub(crate) fn read_state<T: for<'de> Deserialize<'de>>(
        &self,
        id: &RunId,
        name: &str,
    ) -> Result<Option<T>, HubError> {
        let path = self.run_dir(id).join(name);
        if !path.exists() {
            return Ok(None);
        }
        read_json(&path).map(Some)
    }

    /// Removes a state file of a run (absent is fine).
    pub(crate) fn remove_state(&self, id: &RunId, name: &str) {
        let _ = std::fs::remove_file(self.run_dir(id).join(name));
    }

    /// The runs that have a state file `name`.
    pub(crate) fn runs_with_state(&self, name: &str) -> Vec<RunId> {
        let Ok(entries) = std::fs::read_dir(self.dir.join("runs")) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|e| e.path().join(name).exists())
            .filter_map(|e| e.file_name().to_str().map(RunId::new))
            .collect()
    }
}

fn write_json<T: Serialize + ?Sized>(path: &Path, value: &T) -> Result<(), HubError> {
    // A temporary name of its own per write: concurrent writers never share one.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("json.{}.{n}.tmp", std::process::id()));
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| io_error(path, e))?;
    let mut file = std::fs::File::create(&tmp).map_err(|e| io_error(&tmp, e))?;
    file.write_all(&bytes).map_err(|e| io_error(&tmp, e))?;
    file.sync_all().map_err(|e| io_error(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io_error(path, e))
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, HubError> {
    let bytes = std::fs::read(path).map_err(|e| io_error(path, e))?;
    serde_json::from_slice(&bytes).map_err(|e| io_error(path, e))
}
