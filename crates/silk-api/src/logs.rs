//! Run logs on the wire: [`LogLineView`] (one line, in a [`LogPage`] of
//! `GET /api/v1/runs/{id}/logs` and in the `log` events of the run's event stream) and its
//! [`Level`].

use serde::{Deserialize, Serialize};
use std::fmt;

/// The severity of a log line, lowest first; lowercase on the wire (`"warn"`).
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
}

impl std::str::FromStr for Level {
    type Err = String;

    /// A level by name, in any case (`WARN`, `warn`; `warning` is `warn`).
    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "trace" => Ok(Level::Trace),
            "debug" => Ok(Level::Debug),
            "info" => Ok(Level::Info),
            "warn" | "warning" => Ok(Level::Warn),
            "error" => Ok(Level::Error),
            _ => Err(format!(
                "unknown log level `{text}` (expected trace, debug, info, warn or error)"
            )),
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A run's log line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LogLineView {
    /// Increasing id: the cursor.
    pub id: i64,
    /// The run.
    pub run_id: String,
    /// When, ms since the epoch.
    pub ts_ms: u64,
    /// `trace`, `debug`, `info`, `warn` or `error`.
    #[schema(value_type = String)]
    pub level: Level,
    /// `hub` or `agent:ID`.
    pub source: String,
    /// The text.
    pub message: String,
}

/// A page of log lines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LogPage {
    /// The lines.
    pub lines: Vec<LogLineView>,
    /// The cursor of the next page (`after` when ascending, `before` when descending).
    pub next: Option<i64>,
}

/// Which log lines.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogParams {
    /// Lowest level: trace, debug, info, warn, error.
    pub level: Option<String>,
    /// Text the message contains (case-insensitive).
    pub q: Option<String>,
    /// Not before, ms since the epoch.
    pub since_ms: Option<u64>,
    /// Not after, ms since the epoch.
    pub until_ms: Option<u64>,
    /// Lines after this id.
    pub after: Option<i64>,
    /// Lines before this id.
    pub before: Option<i64>,
    /// At most this many (default 100, at most 1000).
    pub limit: Option<u32>,
    /// `asc` (default) or `desc`.
    pub order: Option<String>,
}

impl LogParams {
    /// The query string's pairs (absent fields left out).
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        crate::push_param(&mut p, "level", self.level.as_ref());
        crate::push_param(&mut p, "q", self.q.as_ref());
        crate::push_param(&mut p, "since_ms", self.since_ms.as_ref());
        crate::push_param(&mut p, "until_ms", self.until_ms.as_ref());
        crate::push_param(&mut p, "after", self.after.as_ref());
        crate::push_param(&mut p, "before", self.before.as_ref());
        crate::push_param(&mut p, "limit", self.limit.as_ref());
        crate::push_param(&mut p, "order", self.order.as_ref());
        p
    }
}

/// A search of log lines across runs (`GET /api/v1/logs`), newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogSearchParams {
    /// Only lines of this job's runs (its name or id).
    pub job: Option<String>,
    /// Only this run's lines.
    pub run: Option<String>,
    /// Lowest level: trace, debug, info, warn, error.
    pub level: Option<String>,
    /// Text the message contains (case-insensitive).
    pub q: Option<String>,
    /// Not before, ms since the epoch.
    pub since_ms: Option<u64>,
    /// Before this, ms since the epoch.
    pub until_ms: Option<u64>,
    /// Lines older than this id (the next page: the page's `next`).
    pub before: Option<i64>,
    /// At most this many (default 100, at most 1000).
    pub limit: Option<u32>,
}

impl LogSearchParams {
    /// The query string's pairs (absent fields left out).
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        crate::push_param(&mut p, "job", self.job.as_ref());
        crate::push_param(&mut p, "run", self.run.as_ref());
        crate::push_param(&mut p, "level", self.level.as_ref());
        crate::push_param(&mut p, "q", self.q.as_ref());
        crate::push_param(&mut p, "since_ms", self.since_ms.as_ref());
        crate::push_param(&mut p, "until_ms", self.until_ms.as_ref());
        crate::push_param(&mut p, "before", self.before.as_ref());
        crate::push_param(&mut p, "limit", self.limit.as_ref());
        p
    }
}

/// What the event stream carries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventParams {
    /// Also the log tail (default true).
    pub logs: Option<bool>,
    /// Log lines after this id (default: the last 100 lines).
    pub after: Option<i64>,
    /// Lowest log level.
    pub level: Option<String>,
}

impl EventParams {
    /// The query string's pairs (absent fields left out).
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        crate::push_param(&mut p, "logs", self.logs.as_ref());
        crate::push_param(&mut p, "after", self.after.as_ref());
        crate::push_param(&mut p, "level", self.level.as_ref());
        p
    }
}
