//! Test support for code that runs on the store: a throwaway PostgreSQL schema on the server
//! named by `SILK_TEST_POSTGRES`, so that tests of the store (its conformance suite) and of
//! what is built on it (the hub) each get a database of their own on a shared server.

use crate::error::StoreError;
use crate::redact::redact_url;
use sqlx::Connection;

/// The variable naming the PostgreSQL server of tests.
pub const POSTGRES_VAR: &str = "SILK_TEST_POSTGRES";

/// A schema `silk_t_<random>` on the test server, and the store URL whose connections use it
/// (`options=-c search_path=<schema>`). Create it with [`create`](Self::create), drop it with
/// [`drop_schema`](Self::drop_schema).
#[derive(Debug, Clone)]
pub struct PgTestSchema {
    /// The server URL (from the environment).
    pub base: String,
    /// The schema's name.
    pub schema: String,
    /// The store URL that puts the store's tables in the schema.
    pub url: String,
}

impl PgTestSchema {
    /// A new schema name on the server of `SILK_TEST_POSTGRES`; `None` (after printing
    /// `skipped: …`) when the variable is not set.
    pub fn from_env() -> Option<Self> {
        let base = match std::env::var(POSTGRES_VAR) {
            Ok(url) if !url.trim().is_empty() => url,
            _ => {
                println!("skipped: {POSTGRES_VAR} is not set");
                return None;
            }
        };
        let schema = format!("silk_t_{:016x}", rand::random::<u64>());
        let mut url = url::Url::parse(&base).ok()?;
        url.query_pairs_mut()
            .append_pair("options", &format!("-c search_path={schema}"));
        Some(Self {
            base,
            schema,
            url: url.to_string(),
        })
    }

    async fn admin(&self, sql: &str) -> Result<(), StoreError> {
        let fail = |e: sqlx::Error| StoreError::Connect {
            url: redact_url(&self.base),
            reason: e.to_string(),
        };
        let mut conn = sqlx::PgConnection::connect(&self.base)
            .await
            .map_err(fail)?;
        sqlx::Executor::execute(&mut conn, sqlx::raw_sql(sql))
            .await
            .map_err(fail)?;
        conn.close().await.map_err(fail)
    }

    /// Creates the schema. The log search's `pg_trgm` goes into `public` first (best
    /// effort), where no test's schema drop takes it (and the other tests' indexes) away.
    pub async fn create(&self) -> Result<(), StoreError> {
        let _ = self
            .admin("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public")
            .await;
        self.admin(&format!("CREATE SCHEMA {}", self.schema)).await
    }

    /// Drops the schema and everything in it (best effort; a failure is printed).
    pub async fn drop_schema(&self) {
        let sql = format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema);
        if let Err(e) = self.admin(&sql).await {
            eprintln!("cleanup: cannot drop schema {}: {e}", self.schema);
        }
    }
}
