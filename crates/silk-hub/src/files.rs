//! The hub's files in its data dir. Until the store of the control plane exists, the hub
//! keeps what must survive a restart here:
//!
//! ```text
//! DATA_DIR/agents.json            registered agents (the last Register of each, with sent_ms)
//! DATA_DIR/runs/{id}/run.json     the RunRecord
//! DATA_DIR/runs/{id}/frontier/    the run's frontier (embedded store)
//! DATA_DIR/runs/{id}/items.jsonl  the run's items
//! ```
//!
//! Every JSON file is replaced atomically (written to a temporary file, synced, renamed), so a
//! crash leaves the old or the new version, never a torn one.

use crate::error::HubError;
use crate::run::RunRecord;
use serde::{Deserialize, Serialize};
use silk_bus::Register;
use silk_core::RunId;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A registered agent as remembered across hub restarts.
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

    pub(crate) fn run_dir(&self, id: &RunId) -> PathBuf {
        self.dir.join("runs").join(id.as_str())
    }

    pub(crate) fn items_path(&self, id: &RunId) -> PathBuf {
        self.run_dir(id).join("items.jsonl")
    }

    pub(crate) fn frontier_dir(&self, id: &RunId) -> PathBuf {
        self.run_dir(id).join("frontier")
    }

    /// Stores a run record atomically.
    pub(crate) fn save_run(&self, record: &RunRecord) -> Result<(), HubError> {
        let dir = self.run_dir(&record.id);
        std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
        write_json(&dir.join("run.json"), record)
    }

    /// Every stored run, oldest first; unreadable records are logged and skipped.
    pub(crate) fn load_runs(&self) -> Vec<RunRecord> {
        let runs = self.dir.join("runs");
        let Ok(entries) = std::fs::read_dir(&runs) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path().join("run.json");
            if !path.exists() {
                continue;
            }
            match read_json::<RunRecord>(&path) {
                Ok(r) => out.push(r),
                Err(e) => tracing::warn!(error = %e, "run record skipped"),
            }
        }
        out.sort_by(|a, b| (a.created_ms, &a.id.0).cmp(&(b.created_ms, &b.id.0)));
        out
    }

    /// Stores the known agents atomically.
    pub(crate) fn save_agents(&self, agents: &[KnownAgent]) -> Result<(), HubError> {
        write_json(&self.dir.join("agents.json"), &agents)
    }

    /// The known agents (none when the file does not exist or cannot be read; logged).
    pub(crate) fn load_agents(&self) -> Vec<KnownAgent> {
        let path = self.dir.join("agents.json");
        if !path.exists() {
            return Vec::new();
        }
        read_json(&path).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "known agents not loaded");
            Vec::new()
        })
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
