//! What the API answers, as far as the tables need it (lenient: unknown fields ignored,
//! missing ones default). The counters are the hub's own type (`silk_hub::RunStats`, every
//! field defaulted).

use serde::Deserialize;
use serde_json::Value;

pub use silk_hub::RunStats;

/// One run (`GET /api/v1/runs/{id}`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct RunView {
    /// The run id.
    pub id: String,
    /// `pending`, `allocating`, `running`, `paused`, `stopping`, `succeeded`, `failed`,
    /// `cancelled`.
    pub state: String,
    /// Why it failed (or was cancelled).
    pub reason: Option<String>,
    /// The job it is a run of (none for an ad-hoc run).
    pub job_name: Option<String>,
    /// `random`, `fixed:N`, `chained:N`.
    pub strategy: String,
    /// The allocated agents (empty for `random`).
    pub agents: Vec<String>,
    /// When it was created, ms since the epoch.
    pub created_ms: Option<u64>,
    /// When it started, ms since the epoch.
    pub started_ms: Option<u64>,
    /// When it finished, ms since the epoch.
    pub finished_ms: Option<u64>,
    /// Where the hub writes the items.
    pub items_path: Option<String>,
    /// The counters.
    pub stats: RunStats,
    /// The hub that drives (or last drove) the run; absent from older hubs.
    #[serde(default)]
    pub hub: Option<String>,
}

impl RunView {
    /// Whether the run has ended (it changes no more).
    pub fn is_terminal(&self) -> bool {
        is_terminal(&self.state)
    }
}

/// Whether a run in `state` has ended.
pub fn is_terminal(state: &str) -> bool {
    matches!(state, "succeeded" | "failed" | "cancelled")
}

/// One agent (`GET /api/v1/agents`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct AgentView {
    pub id: String,
    /// `alive`, `suspect`, `dead`.
    pub state: String,
    pub cpu_pct: f64,
    pub memory_bytes: u64,
    pub active_downloaders: u64,
    pub in_flight: u64,
    pub qps: f64,
    /// ms since the epoch (hub clock); `None` before the first heartbeat.
    pub last_heartbeat_ms: Option<u64>,
    /// `None` when infinite (JSON has no infinity).
    pub phi: Option<f64>,
}

/// One job (`GET /api/v1/jobs/{id}`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct JobView {
    pub id: String,
    pub name: String,
    /// The `name` of its spider.
    pub spider_name: String,
    pub cron: Option<String>,
    pub timezone: Option<String>,
    pub enabled: Option<bool>,
    /// When cron fires next (null without cron or when disabled).
    pub next_fire_ms: Option<u64>,
    pub last_run: Option<LastRun>,
}

/// A job's latest run.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct LastRun {
    pub id: String,
    pub state: String,
}

/// One line of a run's log.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct LogLine {
    /// Increasing within a run: the cursor of `after` / `before`.
    pub id: u64,
    pub ts_ms: u64,
    /// `trace`, `debug`, `info`, `warn`, `error`.
    pub level: String,
    /// `hub` or `agent:ID`.
    pub source: String,
    pub message: String,
}

/// An API token as listed (never the secret).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct TokenView {
    pub id: String,
    pub name: String,
    pub admin: bool,
    pub created_ms: Option<u64>,
    pub last_used_ms: Option<u64>,
}

/// A string or number id as text (`"12"` for `12`): cursors are opaque.
pub fn cursor_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}
