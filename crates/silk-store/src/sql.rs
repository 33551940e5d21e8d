//! What the two backends share: value conversions, the migration list, and
//! [`impl_meta_store!`], which writes the [`crate::MetaStore`] implementation once for both
//! sqlx drivers. The SQL is the same text on both: `$N` placeholders (SQLite reads `$N` as
//! parameter N too), `ON CONFLICT` upserts, `RETURNING`, `LIKE … ESCAPE '!'`. The only
//! per-backend pieces are how a write transaction begins (SQLite: `BEGIN IMMEDIATE`, so a
//! writer queues on the busy timeout instead of failing to upgrade a read lock), the
//! migration lock (PostgreSQL: a transaction-scoped advisory lock), the collation suffix
//! of `ORDER BY` on text (PostgreSQL: `COLLATE "C"`, so text orders by bytes as on SQLite)
//! and the expression of the database's clock in ms that leases use.

use crate::error::StoreError;

/// Rows per multi-row `INSERT` (at most 11 parameters per row: well under SQLite's 32766 and
/// PostgreSQL's 65535 bind parameters per statement).
pub(crate) const CHUNK: usize = 1000;

/// The counter that assigns log line ids.
pub(crate) const LOG_COUNTER: &str = "log_lines";

/// The counter that assigns the item seqs of `run_id`.
pub(crate) fn item_counter(run_id: &str) -> String {
    format!("items:{run_id}")
}

/// One schema migration, embedded in the binary.
pub(crate) struct Migration {
    /// Its version (the number in the file name), increasing from 1.
    pub(crate) version: i64,
    /// Its name: the file name without `.sql`.
    pub(crate) name: &'static str,
    /// Its statements.
    pub(crate) sql: &'static str,
}

/// Every migration, in order. Each file in `migrations/` is listed here (a test checks it).
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_init",
        sql: include_str!("../migrations/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "0002_leases",
        sql: include_str!("../migrations/0002_leases.sql"),
    },
    Migration {
        version: 3,
        name: "0003_projects",
        sql: include_str!("../migrations/0003_projects.sql"),
    },
    Migration {
        version: 4,
        name: "0004_alerts",
        sql: include_str!("../migrations/0004_alerts.sql"),
    },
    Migration {
        version: 5,
        name: "0005_agent_drain",
        sql: include_str!("../migrations/0005_agent_drain.sql"),
    },
    Migration {
        version: 6,
        name: "0006_tenants",
        sql: include_str!("../migrations/0006_tenants.sql"),
    },
    Migration {
        version: 7,
        name: "0007_quota_usage",
        sql: include_str!("../migrations/0007_quota_usage.sql"),
    },
    Migration {
        version: 8,
        name: "0008_router_failures",
        sql: include_str!("../migrations/0008_router_failures.sql"),
    },
    Migration {
        version: 9,
        name: "0009_request_archive",
        sql: include_str!("../migrations/0009_request_archive.sql"),
    },
];

/// The table that records applied migrations (created at open if missing).
pub(crate) const MIGRATIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS silk_migrations (
    version    BIGINT NOT NULL PRIMARY KEY,
    name       TEXT   NOT NULL,
    checksum   TEXT   NOT NULL,
    applied_ms BIGINT NOT NULL
)";

/// The checksum recorded for a migration: xxh3 of its text without carriage returns (so a
/// CRLF checkout does not look like an edit).
pub(crate) fn checksum(sql: &str) -> String {
    let text: String = sql.chars().filter(|&c| c != '\r').collect();
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
}

/// Milliseconds since the epoch, for `silk_migrations.applied_ms` only.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The largest lease ttl: far above any use, and low enough that now + ttl cannot overflow a
/// `BIGINT` (SQLite would turn the sum into a float).
pub(crate) const MAX_LEASE_TTL_MS: u64 = i64::MAX as u64 / 2;

/// A lease ttl as a `BIGINT`, or [`StoreError::BadData`] naming `what` if it is above
/// [`MAX_LEASE_TTL_MS`].
pub(crate) fn lease_ttl(ttl_ms: u64, what: impl FnOnce() -> String) -> Result<i64, StoreError> {
    if ttl_ms > MAX_LEASE_TTL_MS {
        return Err(StoreError::bad(
            what(),
            format!("{ttl_ms} is above {MAX_LEASE_TTL_MS}"),
        ));
    }
    to_db(ttl_ms, what)
}

/// `v` as a `BIGINT`, or [`StoreError::BadData`] naming `what` if it is above `i64::MAX`.
pub(crate) fn to_db(v: u64, what: impl FnOnce() -> String) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::bad(what(), format!("{v} is above {}", i64::MAX)))
}

/// [`to_db`] for an optional value.
pub(crate) fn opt_to_db(
    v: Option<u64>,
    what: impl FnOnce() -> String,
) -> Result<Option<i64>, StoreError> {
    v.map(|v| to_db(v, what)).transpose()
}

/// A `BIGINT` read back as `u64`, or [`StoreError::BadData`] if it is negative.
pub(crate) fn from_db(v: i64, what: impl FnOnce() -> String) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::bad(what(), format!("{v} is negative")))
}

/// [`from_db`] for an optional value.
pub(crate) fn opt_from_db(
    v: Option<i64>,
    what: impl FnOnce() -> String,
) -> Result<Option<u64>, StoreError> {
    v.map(|v| from_db(v, what)).transpose()
}

/// The text of a JSON document.
pub(crate) fn json_text(
    v: &serde_json::Value,
    what: impl FnOnce() -> String,
) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::bad(what(), e.to_string()))
}

/// A JSON document read back.
pub(crate) fn parse_json(
    text: &str,
    what: impl FnOnce() -> String,
) -> Result<serde_json::Value, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::bad(what(), format!("not JSON: {e}")))
}

/// A `LIKE` pattern (with `ESCAPE '!'`) matching any text that contains `text`: `%`, `_`
/// and `!` in `text` match themselves.
pub(crate) fn contains_pattern(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('%');
    for c in text.chars() {
        if matches!(c, '%' | '_' | '!') {
            out.push('!');
        }
        out.push(c);
    }
    out.push('%');
    out
}

/// Whether `e` is a unique or primary key violation.
pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .is_some_and(|d| d.is_unique_violation())
}

/// `n` (a slice length) as `i64`.
pub(crate) fn len_i64(n: usize, what: &str) -> Result<i64, StoreError> {
    i64::try_from(n).map_err(|_| StoreError::bad(what, format!("{n} rows is too many")))
}

/// Implements [`crate::MetaStore`] for `$store`, a struct with fields `pool` (a sqlx pool of
/// `$db`) and `location`, and an inherent `async fn begin_write(&self) ->
/// Result<sqlx::Transaction<'static, $db>, sqlx::Error>`. Also adds an inherent
/// `migrate(&self)` that takes `$lock` (an `Option<&str>` statement run first in the
/// migration transaction), and a `Debug` that shows the location only (never the pool). `$c`
/// is appended to text columns in `ORDER BY`. `$now` is an SQL expression of the database's
/// clock: milliseconds since the Unix epoch as a `BIGINT` (the lease calls' "now").
macro_rules! impl_meta_store {
    (
        store = $store:ty,
        db = $db:ty,
        backend = $backend:literal,
        lock = $lock:expr,
        c = $c:literal,
        now = $now:literal,
        share = $share:literal
    ) => {
        use $crate::error::StoreError;

        /// The condition that the tenant bound to `$param` exists; on PostgreSQL it locks the
        /// tenant's row (`FOR KEY SHARE`) until the statement's transaction ends, so a
        /// `delete_tenant` (which locks it `FOR UPDATE` before counting what the tenant
        /// owns) either waits for the new row and sees it, or deletes the tenant first and
        /// the row is not written. SQLite runs one writer at a time.
        fn tenant_exists(param: &str) -> String {
            format!("EXISTS (SELECT 1 FROM tenants WHERE name = {param}{})", $share)
        }

        /// The error of a `what` named `name` of a tenant that does not exist (deleted
        /// meanwhile).
        fn no_tenant(tenant: &str, what: &str, name: &str) -> StoreError {
            StoreError::NotFound {
                what: format!("tenant {tenant:?} (of {what} {name:?})"),
            }
        }
        use $crate::model::{
            AgentRow, AllocationRow, ItemRow, JobRow, LeaseRow, Level, LogLine, LogQuery, LogSearch,
            MAX_PAGE, NewLogLine, RunFilter, RunRow, TokenRow, run_lease_name,
        };
        use $crate::sql::{
            CHUNK, LOG_COUNTER, MIGRATIONS, MIGRATIONS_TABLE, checksum, contains_pattern,
            from_db, is_unique_violation, item_counter, json_text, lease_ttl, len_i64, now_ms,
            opt_from_db, opt_to_db, parse_json, to_db,
        };
        use sqlx::{QueryBuilder, Row as _};

        type DbRow = <$db as sqlx::Database>::Row;

        /// A statement with its binds.
        type Query<'q> = sqlx::query::Query<'q, $db, <$db as sqlx::Database>::Arguments<'q>>;

        /// A statement that returns one `BIGINT`, with its binds.
        type Scalar<'q> =
            sqlx::query::QueryScalar<'q, $db, i64, <$db as sqlx::Database>::Arguments<'q>>;

        /// Decodes one row of a table.
        type FromRow<T> = fn(&DbRow) -> Result<T, StoreError>;

        /// Runs `query` on `conn` (the pool or a transaction) and returns the rows it touched.
        async fn execute<'c, E>(
            conn: E,
            query: Query<'_>,
            op: &'static str,
        ) -> Result<u64, StoreError>
        where
            E: sqlx::Executor<'c, Database = $db>,
        {
            let done = query.execute(conn).await.map_err(|e| StoreError::query(op, e))?;
            Ok(done.rows_affected())
        }

        /// Adds the filters log queries share to a `WHERE`: level at least, text contained
        /// (ignoring case), `since` ≤ `ts_ms` < `until`.
        fn push_log_filters(
            qb: &mut QueryBuilder<'_, $db>,
            min_level: Option<Level>,
            text: Option<&str>,
            since: Option<i64>,
            until: Option<i64>,
        ) {
            if let Some(level) = min_level {
                qb.push(" AND level >= ").push_bind(level.rank());
            }
            if let Some(text) = text {
                qb.push(" AND LOWER(message) LIKE LOWER(")
                    .push_bind(contains_pattern(text))
                    .push(") ESCAPE '!'");
            }
            if let Some(since) = since {
                qb.push(" AND ts_ms >= ").push_bind(since);
            }
            if let Some(until) = until {
                qb.push(" AND ts_ms < ").push_bind(until);
            }
        }

        /// Runs the multi-row `INSERT` built in `qb` inside a write transaction and returns
        /// the rows it inserted. Its text depends on the batch size, so it is not cached.
        async fn execute_batch(
            conn: &mut <$db as sqlx::Database>::Connection,
            qb: &mut QueryBuilder<'_, $db>,
            op: &'static str,
        ) -> Result<u64, StoreError> {
            execute(conn, qb.build().persistent(false), op).await
        }

        /// Runs `query` and decodes the row it returns, if any.
        /// Inserts or replaces a run of a tenant that exists; with `held = Some((lease,
        /// holder))` only while `holder` holds `lease` (`INSERT … SELECT … WHERE EXISTS`,
        /// whose WHERE also keeps SQLite from reading the ON CONFLICT as a join constraint).
        /// Returns the rows written.
        async fn upsert_run(
            pool: &sqlx::Pool<$db>,
            run: &RunRow,
            held: Option<(&str, &str)>,
        ) -> Result<u64, StoreError> {
            let w = |col: &str| format!("run {:?} {col}", run.id);
            let record = json_text(&run.record, || w("record"))?;
            let created_ms = to_db(run.created_ms, || w("created_ms"))?;
            let finished_ms = opt_to_db(run.finished_ms, || w("finished_ms"))?;
            let (source, op) = match held {
                None => (
                    format!("SELECT $1, $2, $3, $4, $5, $6, $7 WHERE {}", tenant_exists("$7")),
                    "put_run",
                ),
                Some(_) => (
                    format!(
                        "SELECT $1, $2, $3, $4, $5, $6, $7 WHERE EXISTS \
                         (SELECT 1 FROM leases WHERE name = $8 AND holder = $9) AND {}",
                        tenant_exists("$7")
                    ),
                    "put_run_held",
                ),
            };
            let sql = format!(
                "INSERT INTO runs (id, job_id, state, created_ms, finished_ms, record, tenant) \
                 {source} ON CONFLICT (id) DO UPDATE SET job_id = excluded.job_id, \
                 tenant = excluded.tenant, \
                 state = excluded.state, created_ms = excluded.created_ms, \
                 finished_ms = excluded.finished_ms, record = excluded.record"
            );
            let mut query = sqlx::query(&sql)
                .bind(&run.id)
                .bind(run.job_id.as_deref())
                .bind(&run.state)
                .bind(created_ms)
                .bind(finished_ms)
                .bind(&record)
                .bind(&run.tenant);
            if let Some((lease, holder)) = held {
                query = query.bind(lease).bind(holder);
            }
            execute(pool, query, op).await
        }

        async fn fetch_opt<T>(
            pool: &sqlx::Pool<$db>,
            query: Query<'_>,
            op: &'static str,
            from_row: FromRow<T>,
        ) -> Result<Option<T>, StoreError> {
            query
                .fetch_optional(pool)
                .await
                .map_err(|e| StoreError::query(op, e))?
                .as_ref()
                .map(from_row)
                .transpose()
        }

        /// Runs `query` and decodes every row it returns, in order.
        async fn fetch_list<T>(
            pool: &sqlx::Pool<$db>,
            query: Query<'_>,
            op: &'static str,
            from_row: FromRow<T>,
        ) -> Result<Vec<T>, StoreError> {
            query
                .fetch_all(pool)
                .await
                .map_err(|e| StoreError::query(op, e))?
                .iter()
                .map(from_row)
                .collect()
        }

        /// Runs `query`, a `SELECT COUNT(*)`, and returns the count (`what` names it in the
        /// error if it is negative).
        async fn fetch_count(
            pool: &sqlx::Pool<$db>,
            query: Scalar<'_>,
            op: &'static str,
            what: impl FnOnce() -> String,
        ) -> Result<u64, StoreError> {
            let n = query.fetch_one(pool).await.map_err(|e| StoreError::query(op, e))?;
            from_db(n, what)
        }

        /// Deletes the row of `table` with key `id`; whether there was one.
        async fn delete_by_id(
            pool: &sqlx::Pool<$db>,
            table: &'static str,
            id: &str,
            op: &'static str,
        ) -> Result<bool, StoreError> {
            let sql = format!("DELETE FROM {table} WHERE id = $1");
            Ok(execute(pool, sqlx::query(&sql).bind(id), op).await? > 0)
        }

        /// The columns of `row`, a row of `table` with key `id` (`"?"` while the key itself is
        /// read), converted to their model types; an error names the table, key and column.
        struct Cols<'r, 'k> {
            row: &'r DbRow,
            table: &'static str,
            id: &'k str,
        }

        impl<'r, 'k> Cols<'r, 'k> {
            fn new(row: &'r DbRow, table: &'static str, id: &'k str) -> Self {
                Self { row, table, id }
            }

            /// What column `col` is, for an error.
            fn what(&self, col: &str) -> String {
                format!("{} {:?} {col}", self.table, self.id)
            }

            /// Column `col` as it is.
            fn get<T>(&self, col: &str) -> Result<T, StoreError>
            where
                T: sqlx::Decode<'r, $db> + sqlx::Type<$db>,
            {
                self.row
                    .try_get(col)
                    .map_err(|e| StoreError::bad(self.what(col), e.to_string()))
            }

            /// A `BIGINT` column as `u64`.
            fn u64(&self, col: &str) -> Result<u64, StoreError> {
                from_db(self.get(col)?, || self.what(col))
            }

            /// A nullable `BIGINT` column as `Option<u64>`.
            fn opt_u64(&self, col: &str) -> Result<Option<u64>, StoreError> {
                opt_from_db(self.get(col)?, || self.what(col))
            }

            /// A `TEXT` column holding a JSON document.
            fn json(&self, col: &str) -> Result<serde_json::Value, StoreError> {
                let text: String = self.get(col)?;
                parse_json(&text, || self.what(col))
            }

            /// A `BIGINT` 0/1 column as `bool`.
            fn bool(&self, col: &str) -> Result<bool, StoreError> {
                match self.get::<i64>(col)? {
                    0 => Ok(false),
                    1 => Ok(true),
                    other => Err(StoreError::bad(
                        self.what(col),
                        format!("{other} is not a boolean (0 or 1)"),
                    )),
                }
            }
        }

        const JOB_COLS: &str = "id, name, enabled, spec, created_ms, updated_ms, next_fire_ms, \
                                last_fire_ms, queued, tenant";

        fn job_from_row(row: &DbRow) -> Result<JobRow, StoreError> {
            let id: String = Cols::new(row, "job", "?").get("id")?;
            let c = Cols::new(row, "job", &id);
            let queued: i64 = c.get("queued")?;
            let queued = u32::try_from(queued).map_err(|_| {
                StoreError::bad(format!("job {id:?} queued"), format!("{queued} is not a u32"))
            })?;
            Ok(JobRow {
                name: c.get("name")?,
                enabled: c.bool("enabled")?,
                spec: c.json("spec")?,
                created_ms: c.u64("created_ms")?,
                updated_ms: c.u64("updated_ms")?,
                next_fire_ms: c.opt_u64("next_fire_ms")?,
                last_fire_ms: c.opt_u64("last_fire_ms")?,
                queued,
                tenant: c.get("tenant")?,
                id,
            })
        }

        /// A job's columns converted for binding.
        struct JobBinds {
            spec: String,
            created_ms: i64,
            updated_ms: i64,
            next_fire_ms: Option<i64>,
            last_fire_ms: Option<i64>,
        }

        impl JobBinds {
            fn new(job: &JobRow) -> Result<Self, StoreError> {
                let w = |col: &str| format!("job {:?} {col}", job.id);
                Ok(Self {
                    spec: json_text(&job.spec, || w("spec"))?,
                    created_ms: to_db(job.created_ms, || w("created_ms"))?,
                    updated_ms: to_db(job.updated_ms, || w("updated_ms"))?,
                    next_fire_ms: opt_to_db(job.next_fire_ms, || w("next_fire_ms"))?,
                    last_fire_ms: opt_to_db(job.last_fire_ms, || w("last_fire_ms"))?,
                })
            }

            /// Binds `$1` to `$10` of `query`: the columns of `job` in [`JOB_COLS`] order.
            fn bind<'q>(&'q self, job: &'q JobRow, query: Query<'q>) -> Query<'q> {
                query
                    .bind(&job.id)
                    .bind(&job.name)
                    .bind(i64::from(job.enabled))
                    .bind(&self.spec)
                    .bind(self.created_ms)
                    .bind(self.updated_ms)
                    .bind(self.next_fire_ms)
                    .bind(self.last_fire_ms)
                    .bind(i64::from(job.queued))
                    .bind(&job.tenant)
            }
        }

        const RUN_COLS: &str = "id, job_id, state, created_ms, finished_ms, record, tenant";

        fn run_from_row(row: &DbRow) -> Result<RunRow, StoreError> {
            let id: String = Cols::new(row, "run", "?").get("id")?;
            let c = Cols::new(row, "run", &id);
            Ok(RunRow {
                job_id: c.get("job_id")?,
                state: c.get("state")?,
                created_ms: c.u64("created_ms")?,
                finished_ms: c.opt_u64("finished_ms")?,
                record: c.json("record")?,
                tenant: c.get("tenant")?,
                id,
            })
        }

        /// Appends the `WHERE` clause of `filter`.
        fn push_run_filter<'a>(qb: &mut QueryBuilder<'a, $db>, filter: &'a RunFilter) {
            let mut sep = " WHERE ";
            if let Some(job_id) = &filter.job_id {
                qb.push(sep).push("job_id = ").push_bind(job_id.as_str());
                sep = " AND ";
            }
            if let Some(tenant) = &filter.tenant {
                qb.push(sep).push("tenant = ").push_bind(tenant.as_str());
                sep = " AND ";
            }
            if !filter.states.is_empty() {
                qb.push(sep).push("state IN (");
                let mut list = qb.separated(", ");
                for state in &filter.states {
                    list.push_bind(state.as_str());
                }
                list.push_unseparated(")");
            }
        }

        const AGENT_COLS: &str = "id, register, sent_ms, updated_ms, drained";

        fn agent_from_row(row: &DbRow) -> Result<AgentRow, StoreError> {
            let id: String = Cols::new(row, "agent", "?").get("id")?;
            let c = Cols::new(row, "agent", &id);
            Ok(AgentRow {
                register: c.json("register")?,
                sent_ms: c.u64("sent_ms")?,
                updated_ms: c.u64("updated_ms")?,
                drained: c.u64("drained")? != 0,
                id,
            })
        }

        fn allocation_from_row(row: &DbRow) -> Result<AllocationRow, StoreError> {
            let run_id: String = Cols::new(row, "allocation", "?").get("run_id")?;
            let agent_id: String = Cols::new(row, "allocation", &run_id).get("agent_id")?;
            let key = format!("{run_id}/{agent_id}");
            let c = Cols::new(row, "allocation", &key);
            Ok(AllocationRow {
                confirmed_ms: c.u64("confirmed_ms")?,
                run_id,
                agent_id,
            })
        }

        fn log_from_row(row: &DbRow) -> Result<LogLine, StoreError> {
            let id: i64 = Cols::new(row, "log line", "?").get("id")?;
            let key = id.to_string();
            let c = Cols::new(row, "log line", &key);
            let rank: i64 = c.get("level")?;
            let level = Level::from_rank(rank).ok_or_else(|| {
                StoreError::bad(
                    format!("log line {id} level"),
                    format!("unknown level rank {rank}"),
                )
            })?;
            Ok(LogLine {
                id,
                run_id: c.get("run_id")?,
                ts_ms: c.u64("ts_ms")?,
                level,
                source: c.get("source")?,
                message: c.get("message")?,
            })
        }

        const TOKEN_COLS: &str = "id, name, hash, tenant, role, created_ms, last_used_ms";

        fn token_from_row(row: &DbRow) -> Result<TokenRow, StoreError> {
            let id: String = Cols::new(row, "token", "?").get("id")?;
            let c = Cols::new(row, "token", &id);
            Ok(TokenRow {
                name: c.get("name")?,
                hash: c.get("hash")?,
                tenant: c.get("tenant")?,
                role: c.get("role")?,
                created_ms: c.u64("created_ms")?,
                last_used_ms: c.opt_u64("last_used_ms")?,
                id,
            })
        }

        fn item_from_row(row: &DbRow) -> Result<ItemRow, StoreError> {
            let run_id: String = Cols::new(row, "item", "?").get("run_id")?;
            let key: String = Cols::new(row, "item", &run_id).get("item_key")?;
            let what = format!("{run_id}/{key}");
            let c = Cols::new(row, "item", &what);
            Ok(ItemRow {
                seq: c.get("seq")?,
                ts_ms: c.u64("ts_ms")?,
                data: c.json("data")?,
                run_id,
                key,
            })
        }

        const LEASE_COLS: &str = "name, holder, expires_ms, acquired_ms";

        fn lease_from_row(row: &DbRow) -> Result<LeaseRow, StoreError> {
            let name: String = Cols::new(row, "lease", "?").get("name")?;
            let c = Cols::new(row, "lease", &name);
            Ok(LeaseRow {
                holder: c.get("holder")?,
                expires_ms: c.u64("expires_ms")?,
                acquired_ms: c.u64("acquired_ms")?,
                name,
            })
        }

        /// Reserves `n` values of counter `name` (inside the caller's write transaction, which
        /// holds the counter's row until it ends) and returns the first.
        async fn reserve(
            conn: &mut <$db as sqlx::Database>::Connection,
            name: &str,
            n: i64,
            op: &'static str,
        ) -> Result<i64, StoreError> {
            let last: i64 = sqlx::query_scalar(
                "INSERT INTO seq_counters (name, last_seq) VALUES ($1, $2) \
                 ON CONFLICT (name) DO UPDATE \
                 SET last_seq = seq_counters.last_seq + excluded.last_seq \
                 RETURNING last_seq",
            )
            .bind(name)
            .bind(n)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| StoreError::query(op, e))?;
            Ok(last - n + 1)
        }

        impl std::fmt::Debug for $store {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($store))
                    .field("location", &self.location)
                    .finish_non_exhaustive()
            }
        }

        impl $store {
            /// Brings the schema up to date: one write transaction that creates the history
            /// table if missing, checks the recorded migrations against the embedded ones and
            /// applies the missing ones. Concurrent opens serialize on the transaction (and
            /// `$lock`), so the second one finds everything applied.
            async fn migrate(&self) -> Result<(), StoreError> {
                let fail = |migration: &str, reason: String| StoreError::Migrate {
                    location: self.location.clone(),
                    migration: migration.to_owned(),
                    reason,
                };
                let mut tx = self
                    .begin_write()
                    .await
                    .map_err(|e| fail("lock", e.to_string()))?;
                let lock: Option<&str> = $lock;
                if let Some(lock) = lock {
                    sqlx::query(lock)
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| fail("lock", e.to_string()))?;
                }
                sqlx::Executor::execute(&mut *tx, sqlx::raw_sql(MIGRATIONS_TABLE))
                    .await
                    .map_err(|e| fail("history", e.to_string()))?;
                let applied: Vec<(i64, String, String)> = sqlx::query_as(
                    "SELECT version, name, checksum FROM silk_migrations ORDER BY version",
                )
                .fetch_all(&mut *tx)
                .await
                .map_err(|e| fail("history", e.to_string()))?;
                for (version, name, sum) in &applied {
                    match MIGRATIONS.iter().find(|m| m.version == *version) {
                        None => {
                            return Err(fail(
                                name,
                                format!(
                                    "the database has schema version {version}, newer than this \
                                     build knows ({}); use a newer silk",
                                    MIGRATIONS.len()
                                ),
                            ));
                        }
                        Some(m) if checksum(m.sql) != *sum => {
                            return Err(fail(
                                name,
                                "was changed after it was applied (checksum differs)".to_owned(),
                            ));
                        }
                        Some(_) => {}
                    }
                }
                let mut done = 0;
                for m in MIGRATIONS {
                    if applied.iter().any(|(v, _, _)| *v == m.version) {
                        continue;
                    }
                    sqlx::Executor::execute(&mut *tx, sqlx::raw_sql(m.sql))
                        .await
                        .map_err(|e| fail(m.name, e.to_string()))?;
                    sqlx::query(
                        "INSERT INTO silk_migrations (version, name, checksum, applied_ms) \
                         VALUES ($1, $2, $3, $4)",
                    )
                    .bind(m.version)
                    .bind(m.name)
                    .bind(checksum(m.sql))
                    .bind(now_ms())
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| fail(m.name, e.to_string()))?;
                    done += 1;
                }
                tx.commit().await.map_err(|e| fail("commit", e.to_string()))?;
                if done > 0 {
                    tracing::info!(
                        location = %self.location,
                        applied = done,
                        "metadata store migrated"
                    );
                }
                Ok(())
            }

            /// Whether a job with this id exists (to name the key of a conflict).
            async fn job_id_exists(&self, id: &str, op: &'static str) -> Result<bool, StoreError> {
                let query = sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE id = $1").bind(id);
                Ok(fetch_count(&self.pool, query, op, || format!("count of job {id:?}")).await? > 0)
            }
        }

        #[async_trait::async_trait]
        impl $crate::store::MetaStore for $store {
            fn backend(&self) -> &'static str {
                $backend
            }

            fn location(&self) -> &str {
                &self.location
            }

            async fn ping(&self) -> Result<(), StoreError> {
                let _clock = $crate::held::hold_clock();
                execute(&self.pool, sqlx::query("SELECT 1"), "ping").await?;
                Ok(())
            }

            async fn close(&self) {
                let _clock = $crate::held::hold_clock();
                self.pool.close().await;
            }

            // ---- jobs -----------------------------------------------------------------

            async fn create_job(&self, job: &JobRow) -> Result<(), StoreError> {
                let _clock = $crate::held::hold_clock();
                const OP: &str = "create_job";
                let b = JobBinds::new(job)?;
                let sql = format!(
                    "INSERT INTO jobs ({JOB_COLS}) SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10 \
                     WHERE {}",
                    tenant_exists("$10")
                );
                let res = b.bind(job, sqlx::query(&sql)).execute(&self.pool).await;
                match res {
                    Ok(done) if done.rows_affected() == 0 => {
                        Err(no_tenant(&job.tenant, "job", &job.name))
                    }
                    Ok(_) => Ok(()),
                    Err(e) if is_unique_violation(&e) => {
                        let what = if self.job_id_exists(&job.id, OP).await? {
                            format!("job id {:?}", job.id)
                        } else {
                            format!("job name {:?}", job.name)
                        };
                        Err(StoreError::Conflict { what })
                    }
                    Err(e) => Err(StoreError::query(OP, e)),
                }
            }

            async fn update_job(&self, job: &JobRow) -> Result<(), StoreError> {
                let _clock = $crate::held::hold_clock();
                const OP: &str = "update_job";
                let b = JobBinds::new(job)?;
                let update = sqlx::query(
                    "UPDATE jobs SET name = $2, enabled = $3, spec = $4, created_ms = $5, \
                     updated_ms = $6, next_fire_ms = $7, last_fire_ms = $8, queued = $9, \
                     tenant = $10 WHERE id = $1",
                );
                let res = b.bind(job, update).execute(&self.pool).await;
                match res {
                    Ok(done) if done.rows_affected() == 0 => Err(StoreError::NotFound {
                        what: format!("job {:?}", job.id),
                    }),
                    Ok(_) => Ok(()),
                    Err(e) if is_unique_violation(&e) => Err(StoreError::Conflict {
                        what: format!("job name {:?}", job.name),
                    }),
                    Err(e) => Err(StoreError::query(OP, e)),
                }
            }

            async fn get_job(&self, id: &str) -> Result<Option<JobRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!("SELECT {JOB_COLS} FROM jobs WHERE id = $1");
                let query = sqlx::query(&sql).bind(id);
                fetch_opt(&self.pool, query, "get_job", job_from_row).await
            }

            async fn get_job_by_name(
                &self,
                tenant: &str,
                name: &str,
            ) -> Result<Option<JobRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!("SELECT {JOB_COLS} FROM jobs WHERE tenant = $1 AND name = $2");
                let query = sqlx::query(&sql).bind(tenant).bind(name);
                fetch_opt(&self.pool, query, "get_job_by_name", job_from_row).await
            }

            async fn list_jobs(&self) -> Result<Vec<JobRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!("SELECT {JOB_COLS} FROM jobs ORDER BY name{}", $c);
                fetch_list(&self.pool, sqlx::query(&sql), "list_jobs", job_from_row).await
            }

            async fn delete_job(&self, id: &str) -> Result<bool, StoreError> {
                let _clock = $crate::held::hold_clock();
                delete_by_id(&self.pool, "jobs", id, "delete_job").await
            }

            // ---- runs -----------------------------------------------------------------

            async fn put_run(&self, run: &RunRow) -> Result<(), StoreError> {
                let _clock = $crate::held::hold_clock();
                if upsert_run(&self.pool, run, None).await? == 0 {
                    return Err(no_tenant(&run.tenant, "run", &run.id));
                }
                Ok(())
            }

            async fn put_run_held(
                &self,
                run: &RunRow,
                lease: &str,
                holder: &str,
            ) -> Result<bool, StoreError> {
                let _clock = $crate::held::hold_clock();
                if upsert_run(&self.pool, run, Some((lease, holder))).await? > 0 {
                    return Ok(true);
                }
                // Not written: the lease is another's, or the tenant is gone.
                if $crate::tenants::TenantStore::get_tenant(self, &run.tenant)
                    .await?
                    .is_none()
                {
                    return Err(no_tenant(&run.tenant, "run", &run.id));
                }
                Ok(false)
            }

            async fn get_run(&self, id: &str) -> Result<Option<RunRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!("SELECT {RUN_COLS} FROM runs WHERE id = $1");
                let query = sqlx::query(&sql).bind(id);
                fetch_opt(&self.pool, query, "get_run", run_from_row).await
            }

            async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let mut qb = QueryBuilder::<$db>::new(format!("SELECT {RUN_COLS} FROM runs"));
                push_run_filter(&mut qb, filter);
                if filter.newest_first {
                    qb.push(format!(" ORDER BY created_ms DESC, id{} DESC", $c));
                } else {
                    qb.push(format!(" ORDER BY created_ms, id{}", $c));
                }
                if let Some(limit) = filter.limit {
                    qb.push(" LIMIT ").push_bind(i64::from(limit));
                }
                fetch_list(&self.pool, qb.build(), "list_runs", run_from_row).await
            }

            async fn count_runs(&self, filter: &RunFilter) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                let mut qb = QueryBuilder::<$db>::new("SELECT COUNT(*) FROM runs");
                push_run_filter(&mut qb, filter);
                let query = qb.build_query_scalar();
                fetch_count(&self.pool, query, "count_runs", || "run count".to_owned()).await
            }

            async fn delete_run(&self, id: &str) -> Result<bool, StoreError> {
                let _clock = $crate::held::hold_clock();
                const OP: &str = "delete_run";
                let mut tx = self.begin_write().await.map_err(|e| StoreError::query(OP, e))?;
                let run = sqlx::query("DELETE FROM runs WHERE id = $1").bind(id);
                let deleted = execute(&mut *tx, run, OP).await?;
                for sql in [
                    "DELETE FROM allocations WHERE run_id = $1",
                    "DELETE FROM log_lines WHERE run_id = $1",
                    "DELETE FROM items WHERE run_id = $1",
                    "DELETE FROM run_requests WHERE run = $1",
                ] {
                    execute(&mut *tx, sqlx::query(sql).bind(id), OP).await?;
                }
                let counter =
                    sqlx::query("DELETE FROM seq_counters WHERE name = $1").bind(item_counter(id));
                execute(&mut *tx, counter, OP).await?;
                let lease = sqlx::query("DELETE FROM leases WHERE name = $1").bind(run_lease_name(id));
                execute(&mut *tx, lease, OP).await?;
                tx.commit().await.map_err(|e| StoreError::query(OP, e))?;
                Ok(deleted > 0)
            }

            // ---- agents ---------------------------------------------------------------

            async fn put_agent(&self, agent: &AgentRow) -> Result<(), StoreError> {
                let _clock = $crate::held::hold_clock();
                let w = |col: &str| format!("agent {:?} {col}", agent.id);
                let register = json_text(&agent.register, || w("register"))?;
                let sent_ms = to_db(agent.sent_ms, || w("sent_ms"))?;
                let updated_ms = to_db(agent.updated_ms, || w("updated_ms"))?;
                let query = sqlx::query(
                    "INSERT INTO agents (id, register, sent_ms, updated_ms, drained) \
                     VALUES ($1, $2, $3, $4, $5) \
                     ON CONFLICT (id) DO UPDATE SET register = excluded.register, \
                     sent_ms = excluded.sent_ms, updated_ms = excluded.updated_ms",
                )
                .bind(&agent.id)
                .bind(&register)
                .bind(sent_ms)
                .bind(updated_ms)
                .bind(i64::from(agent.drained));
                execute(&self.pool, query, "put_agent").await?;
                Ok(())
            }

            async fn set_agent_drained(&self, id: &str, drained: bool) -> Result<bool, StoreError> {
                let _clock = $crate::held::hold_clock();
                let query = sqlx::query("UPDATE agents SET drained = $1 WHERE id = $2")
                    .bind(i64::from(drained))
                    .bind(id);
                Ok(execute(&self.pool, query, "set_agent_drained").await? > 0)
            }

            async fn list_drained_agents(&self) -> Result<Vec<String>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!("SELECT id FROM agents WHERE drained <> 0 ORDER BY id{}", $c);
                fetch_list(&self.pool, sqlx::query(&sql), "list_drained_agents", |row| {
                    Cols::new(row, "agent", "?").get("id")
                })
                .await
            }

            async fn get_agent(&self, id: &str) -> Result<Option<AgentRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!("SELECT {AGENT_COLS} FROM agents WHERE id = $1");
                let query = sqlx::query(&sql).bind(id);
                fetch_opt(&self.pool, query, "get_agent", agent_from_row).await
            }

            async fn list_agents(&self) -> Result<Vec<AgentRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!("SELECT {AGENT_COLS} FROM agents ORDER BY id{}", $c);
                fetch_list(&self.pool, sqlx::query(&sql), "list_agents", agent_from_row).await
            }

            async fn delete_agent(&self, id: &str) -> Result<bool, StoreError> {
                let _clock = $crate::held::hold_clock();
                delete_by_id(&self.pool, "agents", id, "delete_agent").await
            }

            // ---- allocations ----------------------------------------------------------

            async fn put_allocations(
                &self,
                run_id: &str,
                rows: &[AllocationRow],
            ) -> Result<(), StoreError> {
                let _clock = $crate::held::hold_clock();
                const OP: &str = "put_allocations";
                let mut binds = Vec::with_capacity(rows.len());
                let mut seen = std::collections::HashSet::with_capacity(rows.len());
                for row in rows {
                    if row.run_id != run_id {
                        return Err(StoreError::bad(
                            format!("allocation of run {run_id:?}"),
                            format!("a row is for run {:?}", row.run_id),
                        ));
                    }
                    if !seen.insert(row.agent_id.as_str()) {
                        return Err(StoreError::Conflict {
                            what: format!(
                                "agent {:?} in the allocation of run {run_id:?}",
                                row.agent_id
                            ),
                        });
                    }
                    let confirmed_ms = to_db(row.confirmed_ms, || {
                        format!("allocation {run_id:?}/{:?} confirmed_ms", row.agent_id)
                    })?;
                    binds.push((row.agent_id.as_str(), confirmed_ms));
                }
                let mut tx = self.begin_write().await.map_err(|e| StoreError::query(OP, e))?;
                let clear = sqlx::query("DELETE FROM allocations WHERE run_id = $1").bind(run_id);
                execute(&mut *tx, clear, OP).await?;
                for chunk in binds.chunks(CHUNK) {
                    let mut qb = QueryBuilder::<$db>::new(
                        "INSERT INTO allocations (run_id, agent_id, confirmed_ms) ",
                    );
                    qb.push_values(chunk, |mut b, (agent_id, confirmed_ms)| {
                        b.push_bind(run_id).push_bind(*agent_id).push_bind(*confirmed_ms);
                    });
                    execute_batch(&mut *tx, &mut qb, OP).await?;
                }
                tx.commit().await.map_err(|e| StoreError::query(OP, e))?;
                Ok(())
            }

            async fn list_allocations(
                &self,
                run_id: &str,
            ) -> Result<Vec<AllocationRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!(
                    "SELECT run_id, agent_id, confirmed_ms FROM allocations WHERE run_id = $1 \
                     ORDER BY agent_id{}",
                    $c
                );
                let query = sqlx::query(&sql).bind(run_id);
                fetch_list(&self.pool, query, "list_allocations", allocation_from_row).await
            }

            async fn delete_allocations(&self, run_id: &str) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                let query = sqlx::query("DELETE FROM allocations WHERE run_id = $1").bind(run_id);
                execute(&self.pool, query, "delete_allocations").await
            }

            // ---- logs -----------------------------------------------------------------

            async fn append_logs(&self, lines: &[NewLogLine]) -> Result<(), StoreError> {
                let _clock = $crate::held::hold_clock();
                const OP: &str = "append_logs";
                if lines.is_empty() {
                    return Ok(());
                }
                let n = len_i64(lines.len(), "log lines")?;
                let ts = lines
                    .iter()
                    .map(|l| to_db(l.ts_ms, || format!("log line of run {:?} ts_ms", l.run_id)))
                    .collect::<Result<Vec<i64>, _>>()?;
                let mut tx = self.begin_write().await.map_err(|e| StoreError::query(OP, e))?;
                let first = reserve(&mut tx, LOG_COUNTER, n, OP).await?;
                let mut next = first;
                for (chunk, chunk_ts) in lines.chunks(CHUNK).zip(ts.chunks(CHUNK)) {
                    let mut qb = QueryBuilder::<$db>::new(
                        "INSERT INTO log_lines (id, run_id, ts_ms, level, source, message) ",
                    );
                    qb.push_values(chunk.iter().zip(chunk_ts), |mut b, (line, ts_ms)| {
                        b.push_bind(next)
                            .push_bind(line.run_id.as_str())
                            .push_bind(*ts_ms)
                            .push_bind(line.level.rank())
                            .push_bind(line.source.as_str())
                            .push_bind(line.message.as_str());
                        next += 1;
                    });
                    execute_batch(&mut *tx, &mut qb, OP).await?;
                }
                tx.commit().await.map_err(|e| StoreError::query(OP, e))?;
                Ok(())
            }

            async fn query_logs(&self, query: &LogQuery) -> Result<Vec<LogLine>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let limit = query.limit.min(MAX_PAGE);
                if limit == 0 {
                    return Ok(Vec::new());
                }
                let w = |what: &str| format!("log query of run {:?}: {what}", query.run_id);
                let since = opt_to_db(query.since_ms, || w("since_ms"))?;
                let until = opt_to_db(query.until_ms, || w("until_ms"))?;
                let mut qb = QueryBuilder::<$db>::new(
                    "SELECT id, run_id, ts_ms, level, source, message FROM log_lines \
                     WHERE run_id = ",
                );
                qb.push_bind(query.run_id.as_str());
                push_log_filters(&mut qb, query.min_level, query.text.as_deref(), since, until);
                if let Some(after) = query.after_id {
                    qb.push(" AND id > ").push_bind(after);
                }
                if let Some(before) = query.before_id {
                    qb.push(" AND id < ").push_bind(before);
                }
                qb.push(if query.newest_first {
                    " ORDER BY id DESC"
                } else {
                    " ORDER BY id"
                });
                qb.push(" LIMIT ").push_bind(i64::from(limit));
                fetch_list(&self.pool, qb.build(), "query_logs", log_from_row).await
            }

            async fn search_logs(&self, search: &LogSearch) -> Result<Vec<LogLine>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let limit = search.limit.min(MAX_PAGE);
                if limit == 0 {
                    return Ok(Vec::new());
                }
                let w = |what: &str| format!("log search: {what}");
                let since = opt_to_db(search.since_ms, || w("since_ms"))?;
                let until = opt_to_db(search.until_ms, || w("until_ms"))?;
                let mut qb = QueryBuilder::<$db>::new(
                    "SELECT id, run_id, ts_ms, level, source, message FROM log_lines WHERE 1 = 1",
                );
                if let Some(run) = &search.run_id {
                    qb.push(" AND run_id = ").push_bind(run.as_str());
                }
                if let Some(job) = &search.job_id {
                    qb.push(" AND run_id IN (SELECT id FROM runs WHERE job_id = ")
                        .push_bind(job.as_str())
                        .push(")");
                }
                if let Some(tenant) = &search.tenant {
                    qb.push(" AND run_id IN (SELECT id FROM runs WHERE tenant = ")
                        .push_bind(tenant.as_str())
                        .push(")");
                }
                push_log_filters(&mut qb, search.min_level, search.text.as_deref(), since, until);
                if let Some(before) = search.before_id {
                    qb.push(" AND id < ").push_bind(before);
                }
                qb.push(" ORDER BY id DESC LIMIT ").push_bind(i64::from(limit));
                fetch_list(&self.pool, qb.build(), "search_logs", log_from_row).await
            }

            async fn delete_job_logs_before(
                &self,
                job_id: &str,
                ts_ms: u64,
            ) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                let ts_ms = to_db(ts_ms, || format!("log retention cutoff of job {job_id:?}"))?;
                let query = sqlx::query(
                    "DELETE FROM log_lines WHERE ts_ms < $1 \
                     AND run_id IN (SELECT id FROM runs WHERE job_id = $2)",
                )
                .bind(ts_ms)
                .bind(job_id);
                execute(&self.pool, query, "delete_job_logs_before").await
            }

            async fn delete_logs_before(&self, ts_ms: u64) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                let ts_ms = to_db(ts_ms, || "log retention cutoff".to_owned())?;
                let query = sqlx::query("DELETE FROM log_lines WHERE ts_ms < $1").bind(ts_ms);
                execute(&self.pool, query, "delete_logs_before").await
            }

            async fn delete_run_logs(&self, run_id: &str) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                let query = sqlx::query("DELETE FROM log_lines WHERE run_id = $1").bind(run_id);
                execute(&self.pool, query, "delete_run_logs").await
            }

            // ---- tokens ---------------------------------------------------------------

            async fn create_token(&self, token: &TokenRow) -> Result<(), StoreError> {
                let _clock = $crate::held::hold_clock();
                let w = |col: &str| format!("token {:?} {col}", token.id);
                let created_ms = to_db(token.created_ms, || w("created_ms"))?;
                let last_used_ms = opt_to_db(token.last_used_ms, || w("last_used_ms"))?;
                let sql = format!(
                    "INSERT INTO tokens (id, name, hash, admin, created_ms, last_used_ms, tenant, \
                     role) SELECT $1, $2, $3, $4, $5, $6, $7, $8 WHERE {}",
                    tenant_exists("$7")
                );
                let res = sqlx::query(&sql)
                .bind(&token.id)
                .bind(&token.name)
                .bind(&token.hash)
                .bind(i64::from(token.role == "admin"))
                .bind(created_ms)
                .bind(last_used_ms)
                .bind(&token.tenant)
                .bind(&token.role)
                .execute(&self.pool)
                .await;
                match res {
                    Ok(done) if done.rows_affected() == 0 => {
                        Err(no_tenant(&token.tenant, "token", &token.name))
                    }
                    Ok(_) => Ok(()),
                    Err(e) if is_unique_violation(&e) => Err(StoreError::Conflict {
                        what: format!("token id {:?}", token.id),
                    }),
                    Err(e) => Err(StoreError::query("create_token", e)),
                }
            }

            async fn get_token(&self, id: &str) -> Result<Option<TokenRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!("SELECT {TOKEN_COLS} FROM tokens WHERE id = $1");
                let query = sqlx::query(&sql).bind(id);
                fetch_opt(&self.pool, query, "get_token", token_from_row).await
            }

            async fn list_tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!("SELECT {TOKEN_COLS} FROM tokens ORDER BY created_ms, id{}", $c);
                fetch_list(&self.pool, sqlx::query(&sql), "list_tokens", token_from_row).await
            }

            async fn delete_token(&self, id: &str) -> Result<bool, StoreError> {
                let _clock = $crate::held::hold_clock();
                delete_by_id(&self.pool, "tokens", id, "delete_token").await
            }

            async fn touch_token(&self, id: &str, used_ms: u64) -> Result<bool, StoreError> {
                let _clock = $crate::held::hold_clock();
                let used_ms = to_db(used_ms, || format!("token {id:?} last_used_ms"))?;
                let query = sqlx::query(
                    "UPDATE tokens SET last_used_ms = CASE \
                     WHEN last_used_ms IS NULL OR last_used_ms < $2 THEN $2 \
                     ELSE last_used_ms END WHERE id = $1",
                )
                .bind(id)
                .bind(used_ms);
                Ok(execute(&self.pool, query, "touch_token").await? > 0)
            }

            async fn count_tokens(&self) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                let query = sqlx::query_scalar("SELECT COUNT(*) FROM tokens");
                fetch_count(&self.pool, query, "count_tokens", || "token count".to_owned()).await
            }

            // ---- items ----------------------------------------------------------------

            async fn insert_items(
                &self,
                run_id: &str,
                items: &[(String, u64, serde_json::Value)],
            ) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                const OP: &str = "insert_items";
                if items.is_empty() {
                    return Ok(0);
                }
                let n = len_i64(items.len(), "items")?;
                let mut binds = Vec::with_capacity(items.len());
                for (key, ts_ms, data) in items {
                    let w = |col: &str| format!("item {run_id:?}/{key:?} {col}");
                    binds.push((
                        key.as_str(),
                        to_db(*ts_ms, || w("ts_ms"))?,
                        json_text(data, || w("data"))?,
                    ));
                }
                let mut tx = self.begin_write().await.map_err(|e| StoreError::query(OP, e))?;
                let first = reserve(&mut tx, &item_counter(run_id), n, OP).await?;
                let mut next = first;
                let mut inserted = 0;
                for chunk in binds.chunks(CHUNK) {
                    let mut qb = QueryBuilder::<$db>::new(
                        "INSERT INTO items (run_id, item_key, seq, ts_ms, data) ",
                    );
                    qb.push_values(chunk, |mut b, (key, ts_ms, data)| {
                        b.push_bind(run_id)
                            .push_bind(*key)
                            .push_bind(next)
                            .push_bind(*ts_ms)
                            .push_bind(data.as_str());
                        next += 1;
                    });
                    qb.push(" ON CONFLICT (run_id, item_key) DO NOTHING");
                    inserted += execute_batch(&mut *tx, &mut qb, OP).await?;
                }
                tx.commit().await.map_err(|e| StoreError::query(OP, e))?;
                Ok(inserted)
            }

            async fn list_items(
                &self,
                run_id: &str,
                after_seq: i64,
                limit: u32,
            ) -> Result<Vec<ItemRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let limit = limit.min(MAX_PAGE);
                if limit == 0 {
                    return Ok(Vec::new());
                }
                let query = sqlx::query(
                    "SELECT run_id, item_key, seq, ts_ms, data FROM items \
                     WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                )
                .bind(run_id)
                .bind(after_seq)
                .bind(i64::from(limit));
                fetch_list(&self.pool, query, "list_items", item_from_row).await
            }

            async fn count_items(&self, run_id: &str) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                let query =
                    sqlx::query_scalar("SELECT COUNT(*) FROM items WHERE run_id = $1").bind(run_id);
                let what = || format!("item count of run {run_id:?}");
                fetch_count(&self.pool, query, "count_items", what).await
            }

            async fn delete_items(&self, run_id: &str) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                let query = sqlx::query("DELETE FROM items WHERE run_id = $1").bind(run_id);
                execute(&self.pool, query, "delete_items").await
            }

            // ---- leases ---------------------------------------------------------------

            async fn store_now_ms(&self) -> Result<u64, StoreError> {
                let _clock = $crate::held::hold_clock();
                let now: i64 = sqlx::query_scalar(concat!("SELECT ", $now))
                    .fetch_one(&self.pool)
                    .await
                    .map_err(|e| StoreError::query("store_now_ms", e))?;
                from_db(now, || "the database clock".to_owned())
            }

            async fn acquire_lease(
                &self,
                name: &str,
                holder: &str,
                ttl_ms: u64,
            ) -> Result<bool, StoreError> {
                let _clock = $crate::held::hold_clock();
                let ttl = lease_ttl(ttl_ms, || format!("lease {name:?} ttl_ms"))?;
                // One statement, so racers get exactly one winner: the insert takes a free
                // lease; on a taken one the update runs only if the caller holds it (a
                // renewal, which keeps `acquired_ms`) or it expired. A refused update touches
                // no row (both databases then report 0 rows). The clock is read once: on
                // PostgreSQL `clock_timestamp()` moves within a statement, and two readings
                // could round to different milliseconds (an expiry short of `acquired + ttl`).
                // (`WHERE 1 = 1` is SQLite's required marker before an upsert's ON CONFLICT.)
                let query = sqlx::query(concat!(
                    "INSERT INTO leases (name, holder, expires_ms, acquired_ms) \
                     SELECT $1, $2, clock.ms + $3, clock.ms FROM (SELECT ",
                    $now,
                    " AS ms) AS clock WHERE 1 = 1 \
                     ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
                     expires_ms = excluded.expires_ms, \
                     acquired_ms = CASE WHEN leases.holder = excluded.holder \
                     THEN leases.acquired_ms ELSE excluded.acquired_ms END \
                     WHERE leases.holder = excluded.holder \
                     OR leases.expires_ms <= excluded.acquired_ms"
                ))
                .bind(name)
                .bind(holder)
                .bind(ttl);
                Ok(execute(&self.pool, query, "acquire_lease").await? > 0)
            }

            async fn renew_leases(
                &self,
                holder: &str,
                ttl_ms: u64,
            ) -> Result<Vec<String>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let ttl = lease_ttl(ttl_ms, || format!("lease ttl_ms of holder {holder:?}"))?;
                let mut names: Vec<String> = sqlx::query_scalar(concat!(
                    "UPDATE leases SET expires_ms = ",
                    $now,
                    " + $2 WHERE holder = $1 RETURNING name"
                ))
                .bind(holder)
                .bind(ttl)
                .fetch_all(&self.pool)
                .await
                .map_err(|e| StoreError::query("renew_leases", e))?;
                names.sort_unstable();
                Ok(names)
            }

            async fn release_lease(&self, name: &str, holder: &str) -> Result<bool, StoreError> {
                let _clock = $crate::held::hold_clock();
                let query = sqlx::query("DELETE FROM leases WHERE name = $1 AND holder = $2")
                    .bind(name)
                    .bind(holder);
                Ok(execute(&self.pool, query, "release_lease").await? > 0)
            }

            async fn get_lease(&self, name: &str) -> Result<Option<LeaseRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                let sql = format!("SELECT {LEASE_COLS} FROM leases WHERE name = $1");
                let query = sqlx::query(&sql).bind(name);
                fetch_opt(&self.pool, query, "get_lease", lease_from_row).await
            }

            async fn list_leases(&self, prefix: &str) -> Result<Vec<LeaseRow>, StoreError> {
                let _clock = $crate::held::hold_clock();
                // `substr` on characters, not `LIKE`: exact (case-sensitive on SQLite too) and
                // no wildcard to escape.
                let chars = len_i64(prefix.chars().count(), "lease prefix characters")?;
                let sql = format!(
                    "SELECT {LEASE_COLS} FROM leases \
                     WHERE substr(name, 1, CAST($2 AS INTEGER)) = $1 ORDER BY name{}",
                    $c
                );
                let query = sqlx::query(&sql).bind(prefix).bind(chars);
                fetch_list(&self.pool, query, "list_leases", lease_from_row).await
            }
        }
    };
}

pub(crate) use impl_meta_store;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_migration_file_is_listed_in_order() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .expect("migrations dir")
            .map(|e| {
                e.expect("dir entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .filter(|n| n.ends_with(".sql"))
            .collect();
        files.sort();
        let listed: Vec<String> = MIGRATIONS
            .iter()
            .map(|m| format!("{}.sql", m.name))
            .collect();
        assert_eq!(files, listed);
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(
                m.version,
                i64::try_from(i).expect("small") + 1,
                "{}",
                m.name
            );
            assert!(
                m.name.starts_with(&format!("{:04}_", m.version)),
                "{}",
                m.name
            );
        }
    }

    #[test]
    fn pattern_escapes_like_wildcards() {
        assert_eq!(contains_pattern("50%_off!"), "%50!%!_off!!%");
        assert_eq!(contains_pattern(""), "%%");
    }

    /// A store made before tenants (schema 5, with a job, a run, an admin and a plain
    /// token) opened by this build: everything belongs to `default`, the admin stays admin.
    #[tokio::test]
    async fn data_before_tenants_moves_to_the_default_tenant() {
        use sqlx::Connection;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("old.db");
        let url = format!("sqlite://{}?mode=rwc", path.display());
        let mut conn = sqlx::SqliteConnection::connect(&url)
            .await
            .expect("connect");
        sqlx::Executor::execute(&mut conn, sqlx::raw_sql(MIGRATIONS_TABLE))
            .await
            .expect("history");
        for m in MIGRATIONS.iter().filter(|m| m.version <= 5) {
            sqlx::Executor::execute(&mut conn, sqlx::raw_sql(m.sql))
                .await
                .expect(m.name);
            sqlx::query(
                "INSERT INTO silk_migrations (version, name, checksum, applied_ms) \
                 VALUES ($1, $2, $3, 0)",
            )
            .bind(m.version)
            .bind(m.name)
            .bind(checksum(m.sql))
            .execute(&mut conn)
            .await
            .expect("record");
        }
        let old = "INSERT INTO jobs (id, name, enabled, spec, created_ms, updated_ms, queued) \
                   VALUES ('j1', 'nightly', 1, '{}', 1, 1, 0); \
                   INSERT INTO runs (id, job_id, state, created_ms, record) \
                   VALUES ('r1', 'j1', 'succeeded', 1, '{}'); \
                   INSERT INTO tokens (id, name, hash, admin, created_ms) \
                   VALUES ('a1', 'root', 'h', 1, 1), ('m1', 'ci', 'h', 0, 2);";
        sqlx::Executor::execute(&mut conn, sqlx::raw_sql(old))
            .await
            .expect("old rows");
        conn.close().await.expect("close");

        let store = crate::open_sqlite(&path).await.expect("migrates");
        let job = store.get_job("j1").await.expect("job").expect("kept");
        assert_eq!(job.tenant, crate::DEFAULT_TENANT);
        let by_name = store
            .get_job_by_name(crate::DEFAULT_TENANT, "nightly")
            .await;
        assert_eq!(by_name.expect("by name"), Some(job));
        let run = store.get_run("r1").await.expect("run").expect("kept");
        assert_eq!(run.tenant, crate::DEFAULT_TENANT);
        let roles: Vec<(String, String, String)> = store
            .list_tokens()
            .await
            .expect("tokens")
            .into_iter()
            .map(|t| (t.id, t.tenant, t.role))
            .collect();
        let d = crate::DEFAULT_TENANT.to_owned();
        assert_eq!(
            roles,
            [
                ("a1".to_owned(), d.clone(), "admin".to_owned()),
                ("m1".to_owned(), d.clone(), "member".to_owned())
            ]
        );
        let tenants = store.list_tenants().await.expect("tenants");
        assert_eq!(tenants.len(), 1);
        assert_eq!(tenants[0].name, d);
        store.close().await;
    }

    #[test]
    fn checksum_ignores_carriage_returns() {
        assert_eq!(checksum("a\r\nb"), checksum("a\nb"));
        assert_ne!(checksum("a"), checksum("b"));
    }
}
