//! The PostgreSQL backend. The URL is a libpq-style URL as sqlx reads it
//! (`postgres://user:pass@host:port/db?sslmode=require&options=-c%20search_path%3Dmyschema`);
//! tables live in the connection's current schema. Write transactions run at READ COMMITTED;
//! log ids and item seqs come from a row of `seq_counters` that the writing transaction holds
//! until it commits, so they increase in commit order. Migrations run under a
//! transaction-scoped advisory lock keyed by the current schema, so concurrent opens wait
//! for each other. The lease clock is the server's `clock_timestamp()` in ms, so hubs on
//! machines with skewed clocks agree on when a lease expires.

use crate::redact::{redact_url, scrub};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use std::str::FromStr;
use std::time::Duration;

/// How long a call waits for a connection (also how long `open` retries a refused
/// connection).
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections per store.
const MAX_CONNECTIONS: u32 = 10;

/// The first key of the migration advisory lock (the second is the schema's hash).
const LOCK_SQL: &str = "SELECT pg_advisory_xact_lock(1936288875, hashtext(current_schema()))";

/// A [`crate::MetaStore`] in PostgreSQL.
pub(crate) struct PgStore {
    pool: PgPool,
    location: String,
}

impl PgStore {
    /// Connects to `url` and migrates the schema.
    pub(crate) async fn open(url: &str) -> Result<Self, crate::StoreError> {
        let location = redact_url(url);
        let fail = |reason: String| crate::StoreError::Connect {
            url: location.clone(),
            reason: scrub(reason, url),
        };
        let options = PgConnectOptions::from_str(url).map_err(|e| fail(e.to_string()))?;
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let store = Self {
            pool,
            location: location.clone(),
        };
        store.migrate().await.map_err(|e| match e {
            crate::StoreError::Migrate {
                location,
                migration,
                reason,
            } => crate::StoreError::Migrate {
                location,
                migration,
                reason: scrub(reason, url),
            },
            other => other,
        })?;
        store.ensure_search_index().await;
        Ok(store)
    }

    /// The log search across runs (`search_logs`) matches text with `LOWER(message) LIKE`;
    /// a trigram index on that makes it an index scan instead of a scan of every line. Best
    /// effort, outside the migrations: `pg_trgm` is a trusted extension (PostgreSQL 13+: a
    /// database owner may create it), but a server without the contrib modules or a role
    /// without the right leaves the search a scan, which is said once in the log.
    async fn ensure_search_index(&self) {
        if let Err(e) = self.search_index().await {
            tracing::warn!(store = %self.location, error = %e, "no trigram index for the log search (it scans instead)");
        }
    }

    async fn search_index(&self) -> Result<(), sqlx::Error> {
        sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_trgm")
            .execute(&self.pool)
            .await?;
        // The extension lives in one schema of the database, maybe not on this store's
        // search path: its operator class is named with that schema.
        let schema: String = sqlx::query_scalar(
            "SELECT n.nspname FROM pg_extension e \
             JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm'",
        )
        .fetch_one(&self.pool)
        .await?;
        let sql = format!(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS log_lines_message_trgm \
             ON log_lines USING gin (LOWER(message) \"{}\".gin_trgm_ops)",
            schema.replace('"', "\"\"")
        );
        sqlx::query(&sql).execute(&self.pool).await?;
        Ok(())
    }

    /// Begins a write transaction.
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
        self.pool.begin().await
    }
}

crate::sql::impl_meta_store!(
    store = PgStore,
    db = sqlx::Postgres,
    backend = "postgres",
    lock = Some(LOCK_SQL),
    c = " COLLATE \"C\"",
    now = "(extract(epoch from clock_timestamp()) * 1000)::bigint",
    share = " FOR KEY SHARE"
);
crate::sql_projects::impl_project_store!(
    store = PgStore,
    db = sqlx::Postgres,
    c = " COLLATE \"C\"",
    update = " FOR UPDATE"
);
crate::sql_alerts::impl_alert_store!(store = PgStore, db = sqlx::Postgres, c = " COLLATE \"C\"");
crate::sql_router_failures::impl_router_failure_store!(
    store = PgStore,
    db = sqlx::Postgres,
    c = " COLLATE \"C\""
);
crate::sql_request_archive::impl_request_archive_store!(store = PgStore, db = sqlx::Postgres);
