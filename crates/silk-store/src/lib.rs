//! `silk-store`: the control plane's metadata store — jobs, runs, agents, allocations, run
//! logs, API tokens, (for the SQL item sink) items and named leases (which of several hubs
//! sharing the store owns a run, fires the scheduler) — behind one trait, [`MetaStore`], with
//! two backends through sqlx: SQLite (the default: one file in the data dir) and PostgreSQL.
//! [`open`] picks the backend from a URL.
//!
//! The store is generic: it does not know the hub's types. A row is a few columns the store
//! filters and orders by, plus a JSON document (job spec, run record, agent registration,
//! item) that it keeps as text and hands back unchanged.
//!
//! Map:
//! - [`store`] — the [`MetaStore`] trait: every call, its ordering and its errors.
//! - [`model`] — the rows and queries ([`JobRow`], [`RunRow`], [`LogQuery`], [`Level`], …).
//! - [`error`] — [`StoreError`], the one error type of the crate.
//! - `sql` — what both backends share: the migrations and the implementation of the trait,
//!   written once over sqlx (the same SQL text runs on both databases).
//! - `sqlite`, `postgres` — connecting, pool settings, transaction start, migration lock.
//! - `held` — every call holds a paused tokio clock still while it runs (sqlx's SQLite runs
//!   on a thread tokio does not see), so time-driven tests over a real store are exact.
//! - [`conformance`] — the suite every backend passes (`tests/sqlite.rs`, `tests/postgres.rs`).
//!
//! # Schema
//!
//! One set of migrations (`migrations/NNNN_name.sql`, embedded in the binary) runs unchanged
//! on both databases, so the schemas are identical. It is portable SQL: integers (times in
//! ms, counters, ids) are `BIGINT`, booleans are `BIGINT` 0/1, JSON documents are `TEXT`, and
//! no column is `SERIAL`/`AUTOINCREMENT`: the store assigns ids itself from `seq_counters`.
//!
//! - `jobs` — key `id`, unique `name`; `enabled`, `spec` (JSON), `created_ms`, `updated_ms`,
//!   `next_fire_ms`, `last_fire_ms`, `queued`.
//! - `runs` — key `id`; `job_id`, `state`, `created_ms`, `finished_ms`, `record` (JSON).
//! - `agents` — key `id`; `register` (JSON), `sent_ms`, `updated_ms`, `drained` (0/1).
//! - `allocations` — key (`run_id`, `agent_id`); `confirmed_ms`.
//! - `log_lines` — key `id`; `run_id`, `ts_ms`, `level` (0 trace … 4 error), `source`,
//!   `message`.
//! - `tokens` — key `id`; `name`, `hash` (hex SHA-256 of the secret), `admin`, `created_ms`,
//!   `last_used_ms`.
//! - `items` — key (`run_id`, `item_key`), unique (`run_id`, `seq`); `ts_ms`, `data` (JSON).
//! - `leases` — key `name` (`run:{run_id}`, `scheduler`, …); `holder`, `expires_ms`,
//!   `acquired_ms`, on the database's clock (see below).
//! - `seq_counters` — key `name`; `last_seq`, the last value counter `name` handed out.
//! - `tenants` — key `name`; `doc` (JSON), `created_ms`, `updated_ms`.
//! - `quota_usage` — key (`scope`, `period`); `pages`, `bytes`, `reserved`, `overshoot`,
//!   `updated_ms`: quota counters, reserved in one locking transaction
//!   ([`TenantStore::reserve_quota`]).
//! - `silk_migrations` — key `version`; `name`, `checksum`, `applied_ms`: the applied
//!   migrations.
//!
//! Indexes: `runs (created_ms, id)`, `runs (job_id, created_ms)`, `runs (state, created_ms)`,
//! `log_lines (run_id, id)`, `log_lines (ts_ms)`, `jobs (next_fire_ms)`, `leases (holder)`.
//!
//! Log ids come from counter `log_lines`, the item seqs of a run from counter
//! `items:{run_id}`: a write transaction advances the counter row first and holds it until it
//! commits (SQLite: the whole write is serialized by `BEGIN IMMEDIATE`), so ids increase in
//! commit order and a reader following with "after the last id I saw" never misses a row.
//!
//! Lease times are read from the database's clock, never the caller's (SQLite: `julianday('now')`
//! of the process that runs the statement; PostgreSQL: `clock_timestamp()` of the server), so
//! hubs with skewed clocks agree on expiry. Taking a lease is one conditional upsert (`INSERT …
//! ON CONFLICT DO UPDATE … WHERE` the caller holds it or it expired): racers on one lease get
//! exactly one winner.
//!
//! Migrations run at open, in one write transaction (SQLite: `BEGIN IMMEDIATE`; PostgreSQL:
//! plus an advisory lock keyed by the schema): re-applying is a no-op, concurrent opens wait
//! for each other, an edited migration (checksum) or a database newer than the binary is a
//! [`StoreError::Migrate`].
//!
//! # Invariants
//!
//! No call panics on input or on data read from the database: bad values are
//! [`StoreError::BadData`]. No error or log line carries a password (see [`redact_url`]).

#![warn(missing_docs)]

pub mod alerts;
pub mod conformance;
pub mod error;
mod held;
pub mod model;
mod postgres;
pub mod projects;
mod redact;
pub mod request_archive;
pub mod router_failures;
mod sql;
mod sql_alerts;
mod sql_projects;
mod sql_request_archive;
mod sql_router_failures;
mod sqlite;
pub mod store;
pub mod tenants;
pub mod testing;

pub use alerts::{ALERT_PENDING, AlertFilter, AlertRow, AlertRuleRow, AlertStore};
pub use error::StoreError;
pub use model::{
    AgentRow, AllocationRow, ItemRow, JobRow, LeaseRow, Level, LogLine, LogQuery, LogSearch,
    MAX_PAGE, NewLogLine, RunFilter, RunRow, TokenRow, run_lease_name,
};
pub use projects::{ARTIFACT_CHUNK, DocRow, ProjectRow, ProjectStore, VersionRow, build_log_key};
pub use redact::redact_url;
pub use request_archive::{ArchiveFilter, ArchivedRequest, RequestArchiveStore};
pub use router_failures::{RouterFailureFilter, RouterFailureRow, RouterFailureStore};
pub use store::MetaStore;
pub use tenants::{
    DEFAULT_TENANT, QuotaClaim, TenantRow, TenantStore, UsageDelta, UsageKey, UsageRow,
};

use std::path::Path;
use std::sync::Arc;

/// Opens the store at `url`, creating and migrating it as needed:
///
/// - `sqlite://PATH` or `sqlite:PATH` — a SQLite file (`sqlite:///abs/meta.db`,
///   `sqlite://data/meta.db` relative to the working directory); the file and its directory
///   are created if missing. No URL parameters (use [`open_sqlite`] for any path).
/// - `postgres://…` or `postgresql://…` — PostgreSQL, with the URL parameters of sqlx
///   (`sslmode`, `options=-c search_path=…`, …).
///
/// Errors are [`StoreError::Connect`] (with the URL redacted) or [`StoreError::Migrate`].
pub async fn open(url: &str) -> Result<Arc<dyn MetaStore>, StoreError> {
    let url = url.trim();
    let fail = |reason: &str| StoreError::Connect {
        url: redact_url(url),
        reason: reason.to_owned(),
    };
    if let Some(rest) = strip_prefix_ignore_case(url, "sqlite:") {
        let path = rest.strip_prefix("//").unwrap_or(rest);
        if path.is_empty() {
            return Err(fail("the SQLite URL has no path (sqlite://PATH)"));
        }
        if path.contains('?') {
            return Err(fail(
                "SQLite URLs take no parameters (the file is created if missing, in WAL mode)",
            ));
        }
        if path == ":memory:" || path.starts_with(":memory") {
            return Err(fail(
                "in-memory SQLite is not supported (each connection would get its own \
                 database): use a file",
            ));
        }
        return open_sqlite(Path::new(path)).await;
    }
    if strip_prefix_ignore_case(url, "postgres://").is_some()
        || strip_prefix_ignore_case(url, "postgresql://").is_some()
    {
        let _clock = held::hold_clock();
        let store = postgres::PgStore::open(url).await?;
        tracing::info!(location = %store.location(), "metadata store open (postgres)");
        return Ok(Arc::new(store));
    }
    Err(fail(
        "unsupported store URL: expected sqlite://PATH, sqlite:PATH, postgres://… or \
         postgresql://…",
    ))
}

/// Opens (creating if missing, with its directory) the SQLite store at `path` and migrates
/// it. Errors are [`StoreError::Connect`] or [`StoreError::Migrate`].
pub async fn open_sqlite(path: &Path) -> Result<Arc<dyn MetaStore>, StoreError> {
    let _clock = held::hold_clock();
    let store = sqlite::SqliteStore::open(path).await?;
    tracing::info!(location = %store.location(), "metadata store open (sqlite)");
    Ok(Arc::new(store))
}

/// `s` without `prefix`, compared ignoring ASCII case.
fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `open` and `open_sqlite` futures are `Send` (callers spawn them and box them in
    /// traits); checked at compile time, the futures are never polled.
    #[test]
    fn open_futures_are_send() {
        fn is_send<T: Send>(_: &T) {}
        is_send(&open("sqlite://x"));
        is_send(&open_sqlite(Path::new("x")));
    }

    #[test]
    fn prefix_ignores_case() {
        assert_eq!(strip_prefix_ignore_case("SQLite:a", "sqlite:"), Some("a"));
        assert_eq!(strip_prefix_ignore_case("sql", "sqlite:"), None);
        assert_eq!(strip_prefix_ignore_case("sqlité:", "sqlite:"), None);
    }
}
