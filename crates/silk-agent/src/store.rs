//! The allocations file: the downloaders an agent holds, kept in `{data_dir}/allocations.json`
//! so that a restarted agent has them again without a new `allocate` (design §4).
//!
//! # Format (version 1)
//!
//! ```json
//! {"version":1,"allocations":{"r1":{"config":{…the allocate command's config…},"allocated_ms":1722500000000,"allow_networks":["10.1.0.0/16"]}}}
//! ```
//!
//! - `config` is stored as received, not as parsed, so that a newer agent re-reads it with
//!   its own defaults and an entry never changes meaning by being rewritten.
//! - Every write replaces the whole file atomically (a temp file in the same directory,
//!   fsync, rename, fsync of the directory): after a crash the file is the old or the new
//!   one, never a mix.
//! - A file that does not parse is moved aside (`allocations.json.corrupt-{ms}`) and the
//!   agent starts with none: the hub re-allocates when a download answers `no_downloader`.
//!
//! This module only reads and writes the file; it must not interpret configs.

use crate::error::AgentError;
use serde::{Deserialize, Serialize};
use silk_core::RunId;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The name of the allocations file in the data dir.
pub const ALLOCATIONS_FILE: &str = "allocations.json";

const FORMAT_VERSION: u32 = 1;

/// One stored allocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredAllocation {
    /// The `config` of the allocate command, as received.
    pub(crate) config: serde_json::Value,
    /// When it was allocated, ms since the epoch (agent clock).
    #[serde(default)]
    pub(crate) allocated_ms: u64,
    /// The private ranges the hub allowed this run besides the agent's own (its tenant's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) allow_networks: Vec<silk_core::net::IpNet>,
}

#[derive(Debug, Serialize, Deserialize)]
struct FileBody {
    version: u32,
    #[serde(default)]
    allocations: BTreeMap<RunId, StoredAllocation>,
}

/// Reads and writes the allocations file of one data dir.
#[derive(Debug)]
pub(crate) struct AllocationStore {
    path: PathBuf,
    /// Serialises writes, so that the last snapshot taken is the last one written.
    write: tokio::sync::Mutex<()>,
}

impl AllocationStore {
    pub(crate) fn new(data_dir: &Path) -> Self {
        Self {
            path: data_dir.join(ALLOCATIONS_FILE),
            write: tokio::sync::Mutex::new(()),
        }
    }

    #[cfg(test)]
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The stored allocations (none when there is no file). A corrupt file is moved aside
    /// and reported as an error alongside the (empty) result.
    pub(crate) fn load(&self) -> (BTreeMap<RunId, StoredAllocation>, Option<AgentError>) {
        let text = match std::fs::read(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (BTreeMap::new(), None),
            Err(source) => {
                return (
                    BTreeMap::new(),
                    Some(AgentError::Io {
                        what: "allocations file",
                        path: self.path.clone(),
                        source,
                    }),
                );
            }
        };
        let parsed = serde_json::from_slice::<FileBody>(&text)
            .map_err(|e| e.to_string())
            .and_then(|body| {
                if body.version == FORMAT_VERSION {
                    Ok(body.allocations)
                } else {
                    Err(format!(
                        "unsupported version {} (this agent reads version {FORMAT_VERSION})",
                        body.version
                    ))
                }
            });
        match parsed {
            Ok(allocations) => (allocations, None),
            Err(reason) => {
                let aside = self.path.with_extension(format!(
                    "json.corrupt-{}",
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_millis())
                        .unwrap_or(0)
                ));
                if let Err(e) = std::fs::rename(&self.path, &aside) {
                    tracing::warn!(path = %self.path.display(), error = %e, "could not move the corrupt allocations file aside");
                }
                (
                    BTreeMap::new(),
                    Some(AgentError::CorruptAllocations {
                        path: self.path.clone(),
                        reason,
                    }),
                )
            }
        }
    }

    /// Replaces the file with `snapshot()`, taken after earlier writes finished.
    pub(crate) async fn save(
        &self,
        snapshot: impl FnOnce() -> BTreeMap<RunId, StoredAllocation>,
    ) -> Result<(), AgentError> {
        let _guard = self.write.lock().await;
        let body = FileBody {
            version: FORMAT_VERSION,
            allocations: snapshot(),
        };
        let bytes = serde_json::to_vec_pretty(&body).map_err(|e| AgentError::Io {
            what: "allocations file",
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        let path = self.path.clone();
        let result = tokio::task::spawn_blocking(move || write_atomic(&path, &bytes)).await;
        let io = match result {
            Ok(r) => r,
            Err(join) => Err(std::io::Error::other(join.to_string())),
        };
        io.map_err(|source| AgentError::Io {
            what: "allocations file",
            path: self.path.clone(),
            source,
        })
    }
}

/// Writes `bytes` to `path` atomically: a temp file beside it, fsync, rename over `path`,
/// fsync of the directory.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    let tmp = dir.join(format!(".{name}.tmp-{}", uuid::Uuid::now_v7().simple()));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
        return written;
    }
    // The rename is durable once the directory is synced; not every platform can open a
    // directory, and the data is safe in the file either way.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn save_and_load_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let store = AllocationStore::new(dir.path());
        assert!(store.load().0.is_empty());
        let mut m = BTreeMap::new();
        m.insert(
            RunId::new("r1"),
            StoredAllocation {
                config: serde_json::json!({"spider": "name: x"}),
                allocated_ms: 5,
                allow_networks: vec!["10.1.0.0/16".parse().unwrap()],
            },
        );
        store.save(|| m.clone()).await.unwrap();
        let (back, err) = store.load();
        assert!(err.is_none());
        assert_eq!(back, m);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
            .collect();
        assert!(leftovers.is_empty());
    }

    #[test]
    fn corrupt_file_is_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        let store = AllocationStore::new(dir.path());
        std::fs::write(store.path(), b"{\"version\":1,\"allocations\":[").unwrap();
        let (m, err) = store.load();
        assert!(m.is_empty());
        let msg = err.unwrap().to_string();
        assert!(msg.contains("allocations.json"), "{msg}");
        assert!(!store.path().exists());
        std::fs::write(store.path(), b"{\"version\":9}").unwrap();
        let msg = store.load().1.unwrap().to_string();
        assert!(msg.contains("unsupported version 9"), "{msg}");
    }
}
