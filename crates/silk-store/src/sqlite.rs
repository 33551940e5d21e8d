//! The SQLite backend: one database file (created if missing, with its directory), WAL
//! journal (readers never block the writer), `synchronous = FULL` (a committed call survives
//! power loss), a busy timeout (writers from other connections and processes queue instead of
//! failing). Every write transaction begins with `BEGIN IMMEDIATE`, so writes serialize at
//! their start; this is also what makes log ids and item seqs increase in commit order.
//! The lease clock is `julianday('now')` converted to ms: the clock of the process running
//! the statement, fixed for the whole statement; every process using a SQLite file is on the
//! same machine, so they share it.

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use std::path::Path;
use std::time::Duration;

/// How long a write waits for another writer before it fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections per store (one writes at a time; the others read).
const MAX_CONNECTIONS: u32 = 8;

/// A [`crate::MetaStore`] in a SQLite file.
pub(crate) struct SqliteStore {
    pool: SqlitePool,
    location: String,
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `path` and migrates it.
    pub(crate) async fn open(path: &Path) -> Result<Self, crate::StoreError> {
        let location = path.display().to_string();
        let fail = |reason: String| crate::StoreError::Connect {
            url: location.clone(),
            reason,
        };
        if path.as_os_str().is_empty() {
            return Err(fail("the SQLite path is empty".to_owned()));
        }
        if let Some(parent) = path.parent()
            && !parent.as_os_str().is_empty()
        {
            tokio::fs::create_dir_all(parent.to_path_buf())
                .await
                .map_err(|e| fail(format!("cannot create directory {}: {e}", parent.display())))?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(false);
        // Setting up a connection (`PRAGMA journal_mode = WAL`) can fail at once with
        // SQLITE_BUSY while another process migrates the same file, without waiting for the
        // busy timeout: try again for as long as that timeout.
        let deadline = tokio::time::Instant::now() + BUSY_TIMEOUT;
        let mut wait = Duration::from_millis(10);
        let pool = loop {
            let connected = SqlitePoolOptions::new()
                .max_connections(MAX_CONNECTIONS)
                .acquire_timeout(BUSY_TIMEOUT)
                .connect_with(options.clone())
                .await;
            match connected {
                Ok(pool) => break pool,
                Err(e) if is_busy(&e) && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_millis(500));
                }
                Err(e) => return Err(fail(e.to_string())),
            }
        };
        let store = Self { pool, location };
        store.migrate().await?;
        Ok(store)
    }

    /// Begins a write transaction, taking the database's write lock at once.
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, sqlx::Error> {
        self.pool.begin_with("BEGIN IMMEDIATE").await
    }
}

crate::sql::impl_meta_store!(
    store = SqliteStore,
    db = sqlx::Sqlite,
    backend = "sqlite",
    lock = None,
    c = "",
    now = "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)",
    share = ""
);
crate::sql_projects::impl_project_store!(
    store = SqliteStore,
    db = sqlx::Sqlite,
    c = "",
    update = ""
);
crate::sql_alerts::impl_alert_store!(store = SqliteStore, db = sqlx::Sqlite, c = "");
crate::sql_router_failures::impl_router_failure_store!(
    store = SqliteStore,
    db = sqlx::Sqlite,
    c = ""
);
crate::sql_request_archive::impl_request_archive_store!(store = SqliteStore, db = sqlx::Sqlite);

/// Whether `e` is SQLite's "database is locked" (SQLITE_BUSY, code 5, or one of its
/// extended codes).
fn is_busy(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .and_then(|c| c.parse::<i32>().ok())
        .is_some_and(|c| c & 0xff == 5)
}
