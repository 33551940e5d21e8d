//! The rows of the store: a few indexed columns plus, where the hub keeps a richer shape, a
//! JSON document ([`serde_json::Value`]) that the store keeps as text and never interprets.
//! Times are milliseconds since the Unix epoch as `u64`; the store keeps them as `BIGINT`
//! and refuses values above `i64::MAX` with [`StoreError::BadData`].

use crate::error::StoreError;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The largest page [`crate::MetaStore::query_logs`] and [`crate::MetaStore::list_items`]
/// return; larger limits are capped to it.
pub const MAX_PAGE: u32 = 1000;

/// A job: a named, schedulable spider with its hub-defined spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRow {
    /// The job's id (primary key).
    pub id: String,
    /// The job's name, unique among its tenant's jobs.
    pub name: String,
    /// The tenant the job belongs to.
    pub tenant: String,
    /// Whether the scheduler fires the job.
    pub enabled: bool,
    /// The hub's job document (spider, schedule, run options…).
    pub spec: serde_json::Value,
    /// When the job was created.
    pub created_ms: u64,
    /// When the job was last changed.
    pub updated_ms: u64,
    /// When the scheduler fires it next, if it is scheduled.
    pub next_fire_ms: Option<u64>,
    /// When the scheduler fired it last.
    pub last_fire_ms: Option<u64>,
    /// Firings waiting for a previous run of the job to end.
    pub queued: u32,
}

/// A run: the hub's whole run record plus the columns runs are listed by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    /// The run's id (primary key).
    pub id: String,
    /// The job the run was started for, if any.
    pub job_id: Option<String>,
    /// The tenant the run belongs to (its job's).
    pub tenant: String,
    /// The run's state (`queued`, `running`, `finished`, …; the hub's vocabulary).
    pub state: String,
    /// When the run was created.
    pub created_ms: u64,
    /// When the run ended, once it has.
    pub finished_ms: Option<u64>,
    /// The hub's run record, stats included.
    pub record: serde_json::Value,
}

/// Which runs [`crate::MetaStore::list_runs`] and [`crate::MetaStore::count_runs`] return.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFilter {
    /// Only the runs of this job.
    pub job_id: Option<String>,
    /// Only the runs of this tenant.
    pub tenant: Option<String>,
    /// Only runs in one of these states; empty means any state.
    pub states: Vec<String>,
    /// At most this many runs (ignored by `count_runs`).
    pub limit: Option<u32>,
    /// Newest first (by `created_ms`, then id, both descending) instead of oldest first.
    pub newest_first: bool,
}

/// An agent the hub knows: its last registration and when it was sent and stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRow {
    /// The agent's id (primary key).
    pub id: String,
    /// The agent's registration message as the hub keeps it.
    pub register: serde_json::Value,
    /// When the agent sent the registration.
    pub sent_ms: u64,
    /// When the hub stored it.
    pub updated_ms: u64,
    /// Drained (`silk agents drain`): no new work for it. Changed only by
    /// `set_agent_drained`.
    #[serde(default)]
    pub drained: bool,
}

/// One agent in a run's confirmed allocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationRow {
    /// The run.
    pub run_id: String,
    /// The agent allocated to it.
    pub agent_id: String,
    /// When the agent confirmed the allocation.
    pub confirmed_ms: u64,
}

/// The severity of a log line, ordered from [`Level::Trace`] to [`Level::Error`]. Its serde
/// form and [`Level::as_str`] are lowercase (`"warn"`); [`FromStr`] accepts any case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something unusual that did not stop the run.
    Warn,
    /// A failure.
    Error,
}

impl Level {
    /// All levels, lowest first.
    pub const ALL: [Level; 5] = [
        Level::Trace,
        Level::Debug,
        Level::Info,
        Level::Warn,
        Level::Error,
    ];

    /// The lowercase name (`"trace"` … `"error"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }

    /// The level's rank as stored in the `level` column (0 = trace … 4 = error).
    pub(crate) fn rank(self) -> i64 {
        match self {
            Level::Trace => 0,
            Level::Debug => 1,
            Level::Info => 2,
            Level::Warn => 3,
            Level::Error => 4,
        }
    }

    /// The level stored as `rank`, if it is one.
    pub(crate) fn from_rank(rank: i64) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.rank() == rank)
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Level {
    type Err = StoreError;

    /// Parses `trace`, `debug`, `info`, `warn` or `error`, in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Level::ALL
            .into_iter()
            .find(|l| l.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                StoreError::bad(
                    "log level",
                    format!("unknown level {s:?}; expected one of trace, debug, info, warn, error"),
                )
            })
    }
}

/// A log line to append; the store assigns its id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewLogLine {
    /// The run the line belongs to.
    pub run_id: String,
    /// When the line was logged.
    pub ts_ms: u64,
    /// Its severity.
    pub level: Level,
    /// Who logged it (`hub`, an agent id, …).
    pub source: String,
    /// The text.
    pub message: String,
}

/// A stored log line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// Assigned by the store, strictly increasing in the order lines become visible (commit
    /// order, across all runs), so a reader that remembers the last id it saw and asks for
    /// `after_id` never misses a line: the follow cursor.
    pub id: i64,
    /// The run the line belongs to.
    pub run_id: String,
    /// When the line was logged.
    pub ts_ms: u64,
    /// Its severity.
    pub level: Level,
    /// Who logged it.
    pub source: String,
    /// The text.
    pub message: String,
}

impl LogLine {
    /// The line as appended, without its id.
    pub fn to_new(&self) -> NewLogLine {
        NewLogLine {
            run_id: self.run_id.clone(),
            ts_ms: self.ts_ms,
            level: self.level,
            source: self.source.clone(),
            message: self.message.clone(),
        }
    }
}

/// Which log lines of one run [`crate::MetaStore::query_logs`] returns. All conditions hold
/// together; lines come in id order (insertion order), oldest first unless `newest_first`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogQuery {
    /// The run.
    pub run_id: String,
    /// Only lines at this level or above.
    pub min_level: Option<Level>,
    /// Only lines whose message contains this text, ignoring case (ASCII case on SQLite,
    /// Unicode case on PostgreSQL); `%`, `_` and every other character match literally.
    pub text: Option<String>,
    /// Only lines with `ts_ms >= since_ms`.
    pub since_ms: Option<u64>,
    /// Only lines with `ts_ms < until_ms`.
    pub until_ms: Option<u64>,
    /// Only lines with `id > after_id` (following: pass the last id seen).
    pub after_id: Option<i64>,
    /// Only lines with `id < before_id` (paging back: pass the oldest id seen).
    pub before_id: Option<i64>,
    /// At most this many lines, capped at [`MAX_PAGE`]; 0 returns none.
    pub limit: u32,
    /// Newest lines first (and the limit keeps the newest).
    pub newest_first: bool,
}

impl LogQuery {
    /// All lines of `run_id`, oldest first, one full page ([`MAX_PAGE`]).
    pub fn new(run_id: impl Into<String>) -> Self {
        Self {
            run_id: run_id.into(),
            min_level: None,
            text: None,
            since_ms: None,
            until_ms: None,
            after_id: None,
            before_id: None,
            limit: MAX_PAGE,
            newest_first: false,
        }
    }
}

/// A search of log lines across runs (`GET /api/v1/logs`), newest first. Lines of build
/// logs (`build:…`) are runs too.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogSearch {
    /// Only this run's lines.
    pub run_id: Option<String>,
    /// Only lines of this job's runs (its id).
    pub job_id: Option<String>,
    /// Only lines of this tenant's runs (not build logs).
    pub tenant: Option<String>,
    /// Only lines at this level or above.
    pub min_level: Option<Level>,
    /// Only lines whose message contains this text, ignoring case (as [`LogQuery::text`]).
    pub text: Option<String>,
    /// Only lines with `ts_ms >= since_ms`.
    pub since_ms: Option<u64>,
    /// Only lines with `ts_ms < until_ms`.
    pub until_ms: Option<u64>,
    /// Only lines with `id < before_id` (the next page: the oldest id seen).
    pub before_id: Option<i64>,
    /// At most this many lines, capped at [`MAX_PAGE`]; 0 returns none.
    pub limit: u32,
}

/// An API token. The store keeps only the hash of its secret, which the caller computes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRow {
    /// The token's id (primary key; the public part of the token).
    pub id: String,
    /// A name for people.
    pub name: String,
    /// Hex SHA-256 of the token's secret, computed by the caller.
    pub hash: String,
    /// The tenant the token belongs to.
    pub tenant: String,
    /// Its role in the tenant (`admin`, `owner`, `member`, `viewer`; the hub's vocabulary).
    /// The store also keeps whether it is `admin` in a column of its own.
    pub role: String,
    /// When the token was created.
    pub created_ms: u64,
    /// When the token was last used, if ever.
    pub last_used_ms: Option<u64>,
}

/// An item of a run, as stored by the SQL item sink.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemRow {
    /// Assigned by the store, strictly increasing per run in commit order (the paging cursor
    /// of [`crate::MetaStore::list_items`]); unique within the run only.
    pub seq: i64,
    /// The run.
    pub run_id: String,
    /// The item key, unique within the run.
    pub key: String,
    /// When the item was produced.
    pub ts_ms: u64,
    /// The item.
    pub data: serde_json::Value,
}

/// A named lease: who holds it and until when. Times are milliseconds since the epoch on the
/// **database's** clock ([`crate::MetaStore::store_now_ms`]), so that processes with skewed
/// clocks agree on whether a lease has expired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRow {
    /// The lease's name (primary key): `run:{run_id}` ([`run_lease_name`]), `scheduler`, ….
    pub name: String,
    /// Who holds it (a hub's id). The row stays after it expires, until another holder takes
    /// it or the holder releases it.
    pub holder: String,
    /// When it expires: from then on (`expires_ms <= now`) any holder may take it.
    pub expires_ms: u64,
    /// When `holder` took it (renewals keep it).
    pub acquired_ms: u64,
}

/// The name of the lease that says which hub owns run `run_id`: `run:{run_id}`.
/// [`crate::MetaStore::delete_run`] removes it with the run.
pub fn run_lease_name(run_id: &str) -> String {
    format!("run:{run_id}")
}
