//! Projects, versions, webhook deliveries, packed artifacts and store-wide settings: the
//! [`ProjectStore`] half of the store (every [`crate::MetaStore`] is one).
//!
//! A project's and a version's document is the hub's JSON (sealed secrets included: the store
//! never sees a password in clear). A version's build log lines are run log lines under the
//! key [`build_log_key`], so they share the log table's paging, follow and retention.
//! Artifacts are kept as numbered chunks of at most [`ARTIFACT_CHUNK`] bytes under their
//! SHA-256, so every hub that shares the store can serve them.

use crate::error::StoreError;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// The largest artifact chunk, bytes.
pub const ARTIFACT_CHUNK: usize = 1 << 20;

/// The run-log key of a build's lines.
pub fn build_log_key(build_id: &str) -> String {
    format!("build:{build_id}")
}

/// A named document of the hub's (a project, an alert rule): its name and the document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DocRow {
    /// Its name (primary key).
    pub name: String,
    /// The hub's document.
    pub doc: serde_json::Value,
    /// Created.
    pub created_ms: u64,
    /// Last changed.
    pub updated_ms: u64,
}

/// A project: its name and the hub's project document.
pub type ProjectRow = DocRow;

/// A version of a project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VersionRow {
    /// The project.
    pub project: String,
    /// The version (unique per project).
    pub version: String,
    /// The build's id (unique).
    pub build_id: String,
    /// `queued`, `building`, `ready`, `failed` (the hub's vocabulary).
    pub state: String,
    /// Queued.
    pub created_ms: u64,
    /// The SHA-256 of its packed artifact, once it has one.
    pub artifact: Option<String>,
    /// The hub's version document.
    pub doc: serde_json::Value,
}

/// Projects, versions, deliveries, artifacts, settings. Every call is one transaction.
#[async_trait]
pub trait ProjectStore: Send + Sync {
    /// Adds a project. [`StoreError::Conflict`] if one has the same name.
    async fn create_project(&self, project: &ProjectRow) -> Result<(), StoreError>;

    /// Replaces the project with `project.name`. [`StoreError::NotFound`] if there is none.
    async fn update_project(&self, project: &ProjectRow) -> Result<(), StoreError>;

    /// The project named `name`.
    async fn get_project(&self, name: &str) -> Result<Option<ProjectRow>, StoreError>;

    /// Every project, by name.
    async fn list_projects(&self) -> Result<Vec<ProjectRow>, StoreError>;

    /// Removes the project, its versions, their build log lines and its deliveries (not the
    /// artifacts: see [`ProjectStore::artifact_in_use`]). Whether the project existed.
    async fn delete_project(&self, name: &str) -> Result<bool, StoreError>;

    /// Adds a version unless the project has it already; whether it was added.
    /// [`StoreError::Conflict`] if another version has its `build_id`.
    async fn insert_version(&self, version: &VersionRow) -> Result<bool, StoreError>;

    /// Inserts or replaces the version (by project and version).
    async fn put_version(&self, version: &VersionRow) -> Result<(), StoreError>;

    /// As [`ProjectStore::put_version`], but only while `holder` holds lease `lease`;
    /// whether it was written.
    async fn put_version_held(
        &self,
        version: &VersionRow,
        lease: &str,
        holder: &str,
    ) -> Result<bool, StoreError>;

    /// One version.
    async fn get_version(
        &self,
        project: &str,
        version: &str,
    ) -> Result<Option<VersionRow>, StoreError>;

    /// The version built by `build_id`.
    async fn get_version_by_build(&self, build_id: &str) -> Result<Option<VersionRow>, StoreError>;

    /// The versions of a project, newest first (`created_ms`, then version, descending).
    async fn list_versions(&self, project: &str) -> Result<Vec<VersionRow>, StoreError>;

    /// The versions of every project in `state`, oldest first (`created_ms`, project,
    /// version).
    async fn list_versions_in_state(&self, state: &str) -> Result<Vec<VersionRow>, StoreError>;

    /// Removes a version and its build log lines. Whether it existed.
    async fn delete_version(&self, project: &str, version: &str) -> Result<bool, StoreError>;

    /// Records webhook delivery `delivery` of `project`; whether it was new (a redelivery is
    /// not).
    async fn record_delivery(
        &self,
        project: &str,
        delivery: &str,
        received_ms: u64,
    ) -> Result<bool, StoreError>;

    /// Retention: forgets deliveries received before `ts_ms`; how many went.
    async fn delete_deliveries_before(&self, ts_ms: u64) -> Result<u64, StoreError>;

    /// Stores chunk `seq` (from 0) of artifact `sha256` (replacing it). A chunk larger than
    /// [`ARTIFACT_CHUNK`] is [`StoreError::BadData`].
    async fn put_artifact_chunk(
        &self,
        sha256: &str,
        seq: u32,
        data: &[u8],
    ) -> Result<(), StoreError>;

    /// Chunk `seq` of artifact `sha256`.
    async fn get_artifact_chunk(
        &self,
        sha256: &str,
        seq: u32,
    ) -> Result<Option<Vec<u8>>, StoreError>;

    /// How many chunks artifact `sha256` has.
    async fn count_artifact_chunks(&self, sha256: &str) -> Result<u64, StoreError>;

    /// Removes artifact `sha256`; how many chunks went.
    async fn delete_artifact(&self, sha256: &str) -> Result<u64, StoreError>;

    /// Whether a version (of any project) has artifact `sha256`.
    async fn artifact_in_use(&self, sha256: &str) -> Result<bool, StoreError>;

    /// Setting `name`.
    async fn get_setting(&self, name: &str) -> Result<Option<String>, StoreError>;

    /// Stores `value` as setting `name` unless it has one; returns the value it has now
    /// (of concurrent callers, one value wins for all).
    async fn put_setting_if_absent(&self, name: &str, value: &str) -> Result<String, StoreError>;
}
