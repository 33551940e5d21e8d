//! The router's failure records (design §6): the [`RouterFailureStore`] part of the store
//! (every [`crate::MetaStore`] is one). When the router runs in the hub, every task that
//! ends as failed is one row: when, the router's project, the inbound it came from and the
//! outbound it was for, the reason (`retries_exhausted`, `no_route`, `convert_failed`, …),
//! the sentence for people, and the task as it arrived (or the raw text of a message that
//! was not a JSON object). A row is listed, counted, marked replayed, and deleted by age.
//! Ids are unique (the hub gives time-ordered ones), so a record written twice is kept once.
//! The task and the raw text come back exactly as written; a NUL character in the other
//! texts is stored as U+FFFD (PostgreSQL's text cannot hold it).

use crate::error::StoreError;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// One task that ended as failed in the router.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouterFailureRow {
    /// Unique; time-ordered (a UUIDv7), so it orders records written in the same ms.
    pub id: String,
    /// When the task failed.
    pub time_ms: u64,
    /// The router config's `project`.
    pub project: String,
    /// The inbound the task came from (`None`: posted straight to the rules).
    pub inbound: Option<String>,
    /// The outbound it was routed to or came back from, if any.
    pub outbound: Option<String>,
    /// The router's reason (`retries_exhausted`, `no_route`, `refused`, `convert_failed`, …).
    pub reason: String,
    /// Why, for people.
    pub why: String,
    /// The task (a JSON object), when it was one.
    pub task: Option<serde_json::Value>,
    /// The message's text, when it was not a JSON object.
    pub raw: Option<String>,
    /// When it was last replayed, if ever.
    pub replayed_ms: Option<u64>,
}

/// Which records [`RouterFailureStore::list_router_failures`] and
/// [`RouterFailureStore::count_router_failures`] take.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouterFailureFilter {
    /// Only these ids (all of them when `None`).
    pub ids: Option<Vec<String>>,
    /// Only this project's.
    pub project: Option<String>,
    /// Only those that came from this inbound.
    pub inbound: Option<String>,
    /// Only those of this outbound.
    pub outbound: Option<String>,
    /// Only this reason.
    pub reason: Option<String>,
    /// Only those at or after this time.
    pub since_ms: Option<u64>,
    /// Only those before this time.
    pub until_ms: Option<u64>,
    /// Only those replayed (true) or never replayed (false).
    pub replayed: Option<bool>,
    /// Paging: only those older than this record (by time, then id), as listed.
    pub before: Option<(u64, String)>,
    /// At most this many (ignored by `count_router_failures`); newest first.
    pub limit: Option<u32>,
    /// List oldest first instead (`before` is then ignored).
    pub oldest_first: bool,
}

/// Failure records. Every call is one transaction.
#[async_trait]
pub trait RouterFailureStore: Send + Sync {
    /// Inserts the records whose id is new, in one write; how many were new.
    async fn insert_router_failures(&self, rows: &[RouterFailureRow]) -> Result<u64, StoreError>;

    /// Records matching `filter`, newest (`time_ms`, then id) first.
    async fn list_router_failures(
        &self,
        filter: &RouterFailureFilter,
    ) -> Result<Vec<RouterFailureRow>, StoreError>;

    /// How many records match `filter`.
    async fn count_router_failures(&self, filter: &RouterFailureFilter) -> Result<u64, StoreError>;

    /// Sets `replayed_ms` of the records `ids`; how many exist.
    async fn mark_router_failures_replayed(
        &self,
        ids: &[String],
        at_ms: u64,
    ) -> Result<u64, StoreError>;

    /// Removes the records older than `before_ms`; how many.
    async fn delete_router_failures_before(&self, before_ms: u64) -> Result<u64, StoreError>;
}
