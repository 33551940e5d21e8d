//! The archive of finished requests (seed 002's "finish → archive"): the
//! [`RequestArchiveStore`] part of the store (every [`crate::MetaStore`] is one). A request
//! of a run that reached its final outcome is one row: its canonical URL, the outcome
//! (`done`, `failed`, `dropped`), the HTTP status, Silk's error code, how many attempts it
//! took, the agent, when, and the other facts as a JSON document. Rows are keyed by run and
//! `key` (unique within the run), written in batches (a row written again replaces the
//! first: an outcome is written twice only when a hub was killed before its ack), listed
//! per run in the order they finished with a cursor, counted by outcome, marked requeued,
//! and deleted by age. A NUL character in the texts is stored as U+FFFD (PostgreSQL's
//! text cannot hold it); the document is JSON text, which escapes it.

use crate::error::StoreError;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// One finished request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArchivedRequest {
    /// Its run.
    pub run: String,
    /// Unique within the run.
    pub key: String,
    /// When it finished (the hub got its last result).
    pub time_ms: u64,
    /// `done`, `failed` or `dropped`.
    pub outcome: String,
    /// Its canonical URL.
    pub url: String,
    /// The HTTP status of its last attempt, when a response arrived.
    pub status: Option<u16>,
    /// Silk's error code (`http_503`, `timeout`, `robots_disallowed`, …), when it did not
    /// end done.
    pub error_code: Option<String>,
    /// How many times it was fetched (or tried).
    pub attempts: u32,
    /// The agent of its last attempt.
    pub agent: Option<String>,
    /// The other facts (method, depth, error message, bytes, …), a JSON object.
    pub doc: serde_json::Value,
    /// When it was last queued again, if ever.
    pub requeued_ms: Option<u64>,
}

/// Which rows of a run [`RequestArchiveStore::list_archived`] and
/// [`RequestArchiveStore::count_archived`] take.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveFilter {
    /// The run.
    pub run: String,
    /// Only these keys (all of them when `None`).
    pub keys: Option<Vec<String>>,
    /// Only this outcome.
    pub outcome: Option<String>,
    /// Only this error code.
    pub error_code: Option<String>,
    /// Only this HTTP status.
    pub status: Option<u16>,
    /// Only those requeued (true) or never requeued (false).
    pub requeued: Option<bool>,
    /// Paging: only those after this row (by time, then key), as listed.
    pub after: Option<(u64, String)>,
    /// At most this many (ignored by `count_archived`); in the order they finished.
    pub limit: Option<u32>,
}

/// The archive of finished requests. Every call is one transaction.
#[async_trait]
pub trait RequestArchiveStore: Send + Sync {
    /// Writes `rows` in one write: a row whose run and key are stored already replaces it
    /// (its `requeued_ms` kept). Returns how many rows were written.
    async fn archive_requests(&self, rows: &[ArchivedRequest]) -> Result<u64, StoreError>;

    /// The rows matching `filter`, oldest (`time_ms`, then key) first.
    async fn list_archived(
        &self,
        filter: &ArchiveFilter,
    ) -> Result<Vec<ArchivedRequest>, StoreError>;

    /// How many rows match `filter`, per outcome (outcomes with none left out).
    async fn count_archived(
        &self,
        filter: &ArchiveFilter,
    ) -> Result<std::collections::BTreeMap<String, u64>, StoreError>;

    /// Sets `requeued_ms` of the rows `keys` of `run`; how many exist.
    async fn mark_archived_requeued(
        &self,
        run: &str,
        keys: &[String],
        at_ms: u64,
    ) -> Result<u64, StoreError>;

    /// Removes the rows older than `before_ms`, at most `limit` of them; how many.
    async fn delete_archived_before(&self, before_ms: u64, limit: u32) -> Result<u64, StoreError>;
}
