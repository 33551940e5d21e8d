//! What a run is, as the API and the hub's files see it: [`RunRequest`] (what a user submits),
//! [`RunRecord`] (what the hub stores, `runs/{id}/run.json`), [`RunStats`] and [`RunView`]
//! (what `GET /api/v1/runs/{id}` answers).
//!
//! # States
//!
//! `pending` → `allocating` → `running` ⇄ `paused` → `stopping` → `succeeded` | `failed` |
//! `cancelled`. A run whose allocation cannot be satisfied goes from `allocating` to `failed`
//! with the reason. A hub that stops leaves its `running` and `paused` runs as they are and
//! resumes them at start; a run caught in `pending` or `allocating` by a hub stop is `failed`
//! at the next start (its allocation was never confirmed), and one caught in `stopping` is
//! `cancelled`. Terminal states never change.

use crate::allocation::{Allocation, OnAgentLost, Strategy};
use crate::error::HubError;
use crate::health::FailIf;
use serde::{Deserialize, Serialize};
use silk_core::spider::Spider;
use silk_core::{AgentId, HubId, RunId};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Default most requests sent and not yet returned, per run (design §4 back-pressure).
pub const DEFAULT_MAX_PENDING: u64 = 100;
/// Default time a run may wait with requests out and nothing coming back, ms.
pub const DEFAULT_STALL_TIMEOUT_MS: u64 = 60_000;
/// The request meta key that carries a routed task (the router's `silk.JobOutbound` puts it
/// there; a request's outcome line gives it back).
pub const TASK_META: &str = "task";

/// The state of a run (spelled on the wire as below, snake case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Accepted, not yet allocated.
    Pending,
    /// Agents are being allocated (synchronously: the submit call waits).
    Allocating,
    /// Dispatching.
    Running,
    /// No new dispatch; requests in flight finish and are recorded.
    Paused,
    /// Being cancelled.
    Stopping,
    /// Nothing left to fetch (or a limit reached).
    Succeeded,
    /// Ended on an error; `reason` says which.
    Failed,
    /// Cancelled by a user.
    Cancelled,
}

impl RunState {
    /// Whether the state is final.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunState::Succeeded | RunState::Failed | RunState::Cancelled
        )
    }

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Pending => "pending",
            RunState::Allocating => "allocating",
            RunState::Running => "running",
            RunState::Paused => "paused",
            RunState::Stopping => "stopping",
            RunState::Succeeded => "succeeded",
            RunState::Failed => "failed",
            RunState::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A run to start: the body of `POST /api/v1/runs`.
///
/// ```json
/// {"spider": "name: shop\nstart_urls: [...]\n", "strategy": "chained:2",
///  "on_agent_lost": "reassign", "max_pending": 200, "stall_timeout_ms": 60000,
///  "downloader": {"qps": 5, "trim": {"rules": [{"css": "main"}]}}}
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// The declarative spider, as YAML text.
    pub spider: String,
    /// How requests are spread over agents; default `random`.
    #[serde(default)]
    pub strategy: Option<Strategy>,
    /// What happens when an allocated agent dies; default `fail`.
    #[serde(default)]
    pub on_agent_lost: Option<OnAgentLost>,
    /// Most requests out at once; default 100.
    #[serde(default)]
    pub max_pending: Option<u64>,
    /// How long requests may be out with nothing returning before the run fails, ms;
    /// default 60000.
    #[serde(default)]
    pub stall_timeout_ms: Option<u64>,
    /// Downloader settings sent to the agents with the spider (`qps`, `trim`, `return_body`,
    /// `proxies`, `redial`: the agent's `DownloaderConfig` without `spider`).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub downloader: Option<serde_json::Map<String, serde_json::Value>>,
    /// Item sinks besides the run's JSON Lines file.
    #[serde(default)]
    pub sinks: Option<Sinks>,
    /// When the run, once it reached its end, counts as failed (default: every request
    /// failed, more than half failed, more than half the pages blocked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_if: Option<FailIf>,
}

/// Where a run's items go besides its JSON Lines file (`runs/{id}/items.jsonl`, always
/// written: it is the truth the other sinks are fed from, in order, at least once, so a
/// sink that is down delays nothing and loses nothing).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Sinks {
    /// Also insert items into the hub store's `items` table (insert-ignore on the run and
    /// the item key).
    #[serde(default)]
    pub sql: bool,
    /// Also POST items in batches to a URL.
    #[serde(default)]
    pub webhook: Option<WebhookSink>,
}

/// A webhook item sink: `POST url` with a JSON body `{"run": ID, "items": [{"key": K,
/// "item": {...}}, ...]}`; a non-2xx answer or a transport error is retried with back-off
/// (the run goes on; delivery resumes where it stopped, also after a hub restart).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookSink {
    /// Where to POST (http or https).
    pub url: String,
    /// Items per POST; default 100.
    #[serde(default)]
    pub batch: Option<u32>,
    /// Extra request headers (e.g. `Authorization`); their values are secrets: never shown
    /// by the API or logged.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

/// A page of items read from a run's JSON Lines file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ItemsPage {
    /// The items.
    #[schema(value_type = Vec<Object>)]
    pub items: Vec<serde_json::Value>,
    /// The cursor of the next page (a byte offset in the file).
    pub next_cursor: u64,
    /// Whether the file holds nothing more right now.
    pub done: bool,
}

/// Checks a request's downloader settings against the schema the agents compile
/// ([`silk_api::downloader::DownloaderConfig`]): an unknown key, a wrong type or a bad value
/// is a [`HubError::BadRun`] naming it (`downloader.proxies.switch_on_status[0]: …`), so that
/// a bad config is refused at submit instead of by every agent at allocation. What only an
/// agent can judge (selectors, commands, proxy URLs) is left to it.
fn check_downloader(
    downloader: &serde_json::Map<String, serde_json::Value>,
    spider: &str,
) -> Result<(), HubError> {
    let mut config = downloader.clone();
    config.insert(
        "spider".into(),
        serde_json::Value::String(spider.to_owned()),
    );
    let parsed: silk_api::downloader::DownloaderConfig =
        serde_path_to_error::deserialize(serde_json::Value::Object(config)).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            HubError::BadRun(if path == "." {
                format!("downloader: {inner}")
            } else {
                format!("downloader.{path}: {inner}")
            })
        })?;
    let problems = parsed.problems();
    if problems.is_empty() {
        Ok(())
    } else {
        let named: Vec<String> = problems.iter().map(|p| format!("downloader.{p}")).collect();
        Err(HubError::BadRun(named.join("; ")))
    }
}

impl RunRequest {
    /// Checks a run request; the compiled spider.
    pub(crate) fn check(&self) -> Result<Spider, HubError> {
        let request = self;
        let spider = Spider::from_yaml(&request.spider, "spider")
            .map_err(|e| HubError::BadRun(e.to_string()))?;
        if request.max_pending == Some(0) {
            return Err(HubError::BadRun("max_pending must be at least 1".into()));
        }
        if request.stall_timeout_ms == Some(0) {
            return Err(HubError::BadRun(
                "stall_timeout_ms must be at least 1".into(),
            ));
        }
        if let Some(d) = &request.downloader
            && d.contains_key("spider")
        {
            return Err(HubError::BadRun(
                "downloader.spider is not allowed: the run's spider is sent to the agents".into(),
            ));
        }
        if let Some(d) = &request.downloader {
            check_downloader(d, &request.spider)?;
        }
        if let Some(sinks) = &request.sinks {
            sinks.validate().map_err(HubError::BadRun)?;
        }
        if let Some(fail_if) = &request.fail_if {
            let problems = fail_if.problems();
            if !problems.is_empty() {
                return Err(HubError::BadRun(problems.join("; ")));
            }
        }
        Ok(spider)
    }
}

impl Sinks {
    /// A copy safe to show: header values replaced by `***`.
    pub fn redacted(&self) -> Sinks {
        let mut s = self.clone();
        if let Some(w) = &mut s.webhook {
            for v in w.headers.values_mut() {
                *v = "***".into();
            }
        }
        s
    }

    /// Checks the settings; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(w) = &self.webhook {
            let ok = w.url.starts_with("http://") || w.url.starts_with("https://");
            if !ok {
                return Err(format!(
                    "sinks.webhook.url `{}` must be an http:// or https:// URL",
                    w.url
                ));
            }
            if w.batch == Some(0) {
                return Err("sinks.webhook.batch must be at least 1".into());
            }
        }
        Ok(())
    }
}

/// Counters of a run, read from counters (the frontier's and the hub's), never by scanning.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct RunStats {
    /// Unique requests ever enqueued.
    pub total: u64,
    /// Not finished yet (`pending + in_flight`).
    pub left: u64,
    /// Leased and not yet acked.
    pub in_flight: u64,
    /// Waiting to be dispatched.
    pub pending: u64,
    /// Fetched (acked done).
    pub success: u64,
    /// Failed for good.
    pub failed: u64,
    /// Dropped on purpose (robots.txt, off-domain redirect).
    pub dropped: u64,
    /// Duplicate requests rejected by dedup.
    pub duplicates: u64,
    /// Retryable failures that were re-queued.
    pub retries: u64,
    /// Items written (new keys).
    pub items: u64,
    /// Items not written because their key was already written.
    pub duplicate_items: u64,
    /// Body bytes fetched by the agents.
    pub bytes: u64,
    /// Bytes the agents' trimming rules cut.
    pub bytes_saved: u64,
    /// Successes per second since the run (re)started on this hub.
    pub pages_per_s: f64,
    /// Requests sent to agents (this hub session).
    pub sent: u64,
    /// Results matched to a request out (this hub session).
    pub returned: u64,
    /// Results for requests no longer out (late after a re-dispatch, or duplicates).
    pub late_results: u64,
    /// `chained`: results of requests bound to an agent (discovered on it) that it fetched.
    pub affinity_kept: u64,
    /// `chained`: results of requests bound to an agent that another agent fetched (0 unless
    /// an agent misbehaves: the hub only sends a bound request to its agent).
    pub affinity_broken: u64,
    /// `chained` + `reassign`: bound requests moved to another agent because theirs was lost.
    pub reassigned: u64,
    /// Results whose page was blocked (`proxy_banned`: a ban status or the ban regex), this
    /// hub session.
    pub blocked: u64,
    /// Requests given up as poison: their agent was lost while fetching them too often
    /// (`HubConfig::poison_after_losses`); counted in `failed` too.
    pub poisoned: u64,
    /// Results matched per agent (this hub session).
    pub by_agent: std::collections::BTreeMap<String, u64>,
}

/// A run as the hub stores it (`runs/{id}/run.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run id.
    pub id: RunId,
    /// The spider's YAML text.
    pub spider: String,
    /// The spider's `name`.
    pub spider_name: String,
    /// The allocation strategy.
    pub strategy: Strategy,
    /// The agent-lost policy.
    pub on_agent_lost: OnAgentLost,
    /// Back-pressure: most requests out.
    pub max_pending: u64,
    /// Back-pressure: stall timeout, ms.
    pub stall_timeout_ms: u64,
    /// Downloader settings sent with the spider.
    #[serde(default)]
    pub downloader: serde_json::Map<String, serde_json::Value>,
    /// The state.
    pub state: RunState,
    /// Why it failed (or was cancelled), for people.
    #[serde(default)]
    pub reason: Option<String>,
    /// The allocation decided at start (and after reassignments).
    #[serde(default)]
    pub allocation: Option<Allocation>,
    /// The agents that received the run's downloader (sorted).
    #[serde(default)]
    pub agents: Vec<AgentId>,
    /// When it was submitted, ms since the epoch.
    pub created_ms: u64,
    /// When it started running.
    #[serde(default)]
    pub started_ms: Option<u64>,
    /// When it reached a terminal state.
    #[serde(default)]
    pub finished_ms: Option<u64>,
    /// The counters at the end (terminal runs).
    #[serde(default)]
    pub final_stats: Option<RunStats>,
    /// The job it is a run of (none for an ad-hoc run).
    #[serde(default)]
    pub job_id: Option<String>,
    /// The job's name when the run was made.
    #[serde(default)]
    pub job_name: Option<String>,
    /// 0 for a first run; n for the job's n-th retry of a failed run.
    #[serde(default)]
    pub attempt: u32,
    /// The run this one restarts.
    #[serde(default)]
    pub restart_of: Option<RunId>,
    /// The arguments the spider was filled with.
    #[serde(default)]
    pub args: BTreeMap<String, String>,
    /// The job's run timeout, ms.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Item sinks besides the JSON Lines file.
    #[serde(default)]
    pub sinks: Sinks,
    /// Set when the run is fed by the router (`silk.JobOutbound`) instead of seeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feed: Option<Feed>,
    /// The key prefix of the run's frontier in the cluster's Redis (`silk hub --frontier
    /// redis://…`): any hub of the cluster can drive the run. `None`: the frontier is the
    /// embedded store in the data dir of the hub that started the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_frontier: Option<String>,
    /// The hub that drives the run (the holder of its lease in the store, see `ownership`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub: Option<HubId>,
    /// When the run counts as failed at its end (`None`: the defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_if: Option<FailIf>,
}

/// How a run fed by the router's `silk.JobOutbound` lives: it is not seeded with the
/// spider's `start_urls` (the routed tasks are its requests), it ignores `max_pages` and
/// `max_duration` (the router decides how much comes), and it succeeds once nothing was fed,
/// queued or out for `idle_ms`. The next task then starts a new run of the job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Feed {
    /// The router outbound that feeds it.
    pub outbound: String,
    /// How long the run waits idle for more tasks before it ends, ms.
    pub idle_ms: u64,
}

/// A run as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunView {
    /// The run id.
    #[schema(value_type = String)]
    pub id: RunId,
    /// The state.
    pub state: RunState,
    /// Why it failed or was cancelled.
    pub reason: Option<String>,
    /// The allocation strategy (`random`, `fixed:N`, `chained:N`).
    pub strategy: Strategy,
    /// The agent-lost policy.
    pub on_agent_lost: OnAgentLost,
    /// The agents allocated to the run: the fixed/chained agents, or for `random` every
    /// agent that received the run's downloader.
    #[schema(value_type = Vec<String>)]
    pub agents: Vec<AgentId>,
    /// The spider's name.
    pub spider_name: String,
    /// Back-pressure settings.
    pub max_pending: u64,
    /// Stall timeout, ms.
    pub stall_timeout_ms: u64,
    /// Submitted, ms since the epoch.
    pub created_ms: u64,
    /// Started.
    pub started_ms: Option<u64>,
    /// Finished.
    pub finished_ms: Option<u64>,
    /// The JSON Lines file of the run's items, its item log; absent for a run with a Redis
    /// frontier, whose item log is the store's items table (see the items route).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub items_path: Option<PathBuf>,
    /// The counters.
    pub stats: RunStats,
    /// The job it is a run of.
    pub job_id: Option<String>,
    /// The job's name.
    pub job_name: Option<String>,
    /// 0, or the retry number.
    pub attempt: u32,
    /// The run this one restarts.
    #[schema(value_type = Option<String>)]
    pub restart_of: Option<RunId>,
    /// The arguments the spider was filled with.
    pub args: BTreeMap<String, String>,
    /// The run timeout, ms.
    pub timeout_ms: Option<u64>,
    /// Item sinks besides the JSON Lines file (header values shown as `***`).
    pub sinks: Sinks,
    /// Set when the router feeds the run (see [`Feed`]).
    pub feed: Option<Feed>,
    /// The hub that drives (or last drove) the run.
    #[schema(value_type = Option<String>)]
    pub hub: Option<HubId>,
    /// Where the run's frontier is: `embedded` (the data dir of its hub) or `redis` (shared
    /// by the cluster's hubs; its items are then kept in the store).
    pub frontier: String,
    /// When the run counts as failed at its end (the thresholds in force, defaults filled).
    pub fail_if: FailIf,
}

impl RunView {
    /// The view of `record` with `stats`.
    pub fn new(record: &RunRecord, stats: RunStats, items_path: Option<PathBuf>) -> Self {
        let agents = match &record.allocation {
            Some(a) if !a.agents().is_empty() => a.agents().to_vec(),
            _ => record.agents.clone(),
        };
        RunView {
            id: record.id.clone(),
            state: record.state,
            reason: record.reason.clone(),
            strategy: record.strategy,
            on_agent_lost: record.on_agent_lost,
            agents,
            spider_name: record.spider_name.clone(),
            max_pending: record.max_pending,
            stall_timeout_ms: record.stall_timeout_ms,
            created_ms: record.created_ms,
            started_ms: record.started_ms,
            finished_ms: record.finished_ms,
            items_path,
            stats,
            job_id: record.job_id.clone(),
            job_name: record.job_name.clone(),
            attempt: record.attempt,
            restart_of: record.restart_of.clone(),
            args: record.args.clone(),
            timeout_ms: record.timeout_ms,
            sinks: record.sinks.redacted(),
            feed: record.feed.clone(),
            hub: record.hub.clone(),
            frontier: if record.shared_frontier.is_some() {
                "redis".into()
            } else {
                "embedded".into()
            },
            fail_if: record.fail_if.clone().unwrap_or_default(),
        }
    }
}
