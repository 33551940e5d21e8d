//! Runs on the wire: [`RunRequest`] (the body of `POST /api/v1/runs`), [`RunView`] (what
//! `GET /api/v1/runs/{id}` answers), [`RunState`], [`RunStats`], the allocation
//! [`Strategy`] and [`OnAgentLost`] policy, item [`Sinks`] and a page of items.
//!
//! # States
//!
//! `pending` → `allocating` → `running` ⇄ `paused` → `stopping` → `succeeded` | `failed` |
//! `cancelled`. A run whose allocation cannot be satisfied goes from `allocating` to `failed`
//! with the reason. Terminal states never change.

use crate::health::FailIf;
use serde::{Deserialize, Serialize};
use silk_core::{AgentId, HubId, RunId};
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use thiserror::Error;

/// A strategy or policy string that does not parse; the message names the input.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ParseError {
    /// An allocation strategy string that does not parse.
    #[error(
        "invalid allocation strategy `{input}`: {reason} (expected `random`, `fixed:N`, `chained:N` or `hash:N`)"
    )]
    Strategy {
        /// The text given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An `on_agent_lost` policy string that does not parse.
    #[error("invalid on_agent_lost policy `{input}` (expected `fail` or `reassign`)")]
    Policy {
        /// The text given.
        input: String,
    },
}

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

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
    /// The declarative spider, as YAML text. With a `program`, optional: its start URLs
    /// seed the run's frontier and its settings (politeness, item key, lease timeout,
    /// downloader: user agent, headers, proxies, timeouts) apply to what the program asks of
    /// Silk.
    #[serde(default)]
    pub spider: String,
    /// Run a team's own crawler from a project version instead of (or beside) a spider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<crate::programs::ProgramSpec>,
    /// How requests are spread over agents; default `random`.
    #[serde(default)]
    pub strategy: Option<Strategy>,
    /// What happens when an allocated agent dies; default `fail`.
    #[serde(default)]
    pub on_agent_lost: Option<OnAgentLost>,
    /// Agent pools the run may use: only agents whose `pool` label (`silk agent --labels
    /// pool=eu`) is one of these are allocated and sent its requests; empty (the default):
    /// any agent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<String>,
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

impl RunRequest {
    /// A spider run's request with every setting left to its default.
    pub fn spider(spider: impl Into<String>) -> Self {
        Self {
            spider: spider.into(),
            program: None,
            strategy: None,
            on_agent_lost: None,
            pools: Vec::new(),
            max_pending: None,
            stall_timeout_ms: None,
            downloader: None,
            sinks: None,
            fail_if: None,
        }
    }
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
    /// Also deliver items to these item sink targets of the hub, by name: a NATS subject, a
    /// Redis stream, a Kafka topic, a Redis list or an HTTP endpoint that an admin declared
    /// (`silk hub --sink-targets FILE`) and granted to the run's tenant. Each item is one
    /// message `{"run": ID, "job": NAME, "key": K, "item": {...}}` whose delivery id is
    /// `RUN:K`, so targets that deduplicate (JetStream, the Redis stream) store it once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
}

/// The most item sink targets one run names.
pub const MAX_SINK_TARGETS: usize = 16;

/// Whether `name` may name an item sink target (1 to 64 letters, digits, `.`, `_`, `-`).
pub fn valid_target_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
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

/// Checks a run's or job's `pools`: each a label value of 1 to 64 letters, digits, `.`, `_`,
/// `-`, none twice; the error names the field.
pub fn check_pools(pools: &[String]) -> Result<(), String> {
    for (i, pool) in pools.iter().enumerate() {
        let ok = !pool.is_empty()
            && pool.len() <= 64
            && pool
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !ok {
            return Err(format!(
                "pools[{i}]: `{}` is not a pool name (1 to 64 letters, digits, `.`, `_`, `-`)",
                pool.escape_debug()
            ));
        }
        if pools[..i].contains(pool) {
            return Err(format!("pools[{i}]: `{pool}` is given twice"));
        }
    }
    Ok(())
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
        if self.targets.len() > MAX_SINK_TARGETS {
            return Err(format!(
                "sinks.targets: at most {MAX_SINK_TARGETS} ({} given)",
                self.targets.len()
            ));
        }
        check_target_names(&self.targets, "sinks.targets")
    }
}

/// Checks a list of item sink target names (`field`: how the error names the list): each
/// a valid name, none twice.
pub fn check_target_names(names: &[String], field: &str) -> Result<(), String> {
    for (i, name) in names.iter().enumerate() {
        if !valid_target_name(name) {
            return Err(format!(
                "{field}[{i}]: `{}` is not a target name (1 to 64 letters, digits, `.`, `_`, `-`)",
                name.escape_debug()
            ));
        }
        if names[..i].contains(name) {
            return Err(format!("{field}[{i}]: `{name}` is given twice"));
        }
    }
    Ok(())
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
    /// The allocation strategy (`random`, `fixed:N`, `chained:N`, `hash:N`).
    pub strategy: Strategy,
    /// The agent-lost policy.
    #[serde(default)]
    #[schema(required = true)]
    pub on_agent_lost: OnAgentLost,
    /// The agent pools it may use (empty: any agent).
    #[serde(default)]
    #[schema(required = true)]
    pub pools: Vec<String>,
    /// The agents allocated to the run: the fixed/chained agents, or for `random` every
    /// agent that received the run's downloader.
    #[schema(value_type = Vec<String>)]
    #[serde(default)]
    #[schema(required = true)]
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
    /// The tenant it belongs to (its job's, or its submitter's).
    #[serde(default = "crate::tenants::default_tenant")]
    #[schema(required = true)]
    pub tenant: String,
    /// The job it is a run of.
    pub job_id: Option<String>,
    /// The job's name.
    pub job_name: Option<String>,
    /// 0, or the retry number.
    #[serde(default)]
    #[schema(required = true)]
    pub attempt: u32,
    /// The run this one restarts.
    #[schema(value_type = Option<String>)]
    pub restart_of: Option<RunId>,
    /// The arguments the spider was filled with.
    #[serde(default)]
    #[schema(required = true)]
    pub args: BTreeMap<String, String>,
    /// The run timeout, ms.
    pub timeout_ms: Option<u64>,
    /// Item sinks besides the JSON Lines file (header values shown as `***`).
    #[serde(default)]
    #[schema(required = true)]
    pub sinks: Sinks,
    /// Set when the router feeds the run (see [`Feed`]).
    pub feed: Option<Feed>,
    /// The program the run runs, its version and its workers (absent for a spider run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<crate::programs::ProgramView>,
    /// The hub that drives (or last drove) the run.
    #[schema(value_type = Option<String>)]
    pub hub: Option<HubId>,
    /// Where the run's frontier is: `embedded` (the data dir of its hub) or `redis` (shared
    /// by the cluster's hubs; its items are then kept in the store).
    #[serde(default)]
    #[schema(required = true)]
    pub frontier: String,
    /// The frontier is its job's (`frontier: job`), shared by the job's runs: `stats.total`,
    /// `success`, `failed`, `dropped`, `duplicates` and `retries` count from the run's start,
    /// `pending`, `in_flight` and `left` are the frontier's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub job_frontier: bool,
    /// When the run counts as failed at its end (the thresholds in force, defaults filled).
    #[serde(default)]
    #[schema(required = true)]
    pub fail_if: FailIf,
    /// How far the spider's `expand` has been fed to the frontier (absent without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expand: Option<ExpandProgress>,
}

/// How far a run's expanded start requests have gone into its frontier: they are fed in
/// batches as it runs short, so `fed` grows to `total` while the run goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExpandProgress {
    /// Requests made from the templates and put into the frontier so far.
    pub fed: u64,
    /// Requests the templates give in all.
    pub total: u64,
}

impl RunView {
    /// Whether the run has ended (it changes no more).
    pub fn is_terminal(&self) -> bool {
        self.state.is_terminal()
    }
}

/// How to restart a run (the optional body of `POST /api/v1/runs/{id}/restart`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RestartRequest {
    /// The new run takes over the old run's frontier (what was fetched is not fetched
    /// again).
    #[serde(default)]
    pub keep_frontier: bool,
}

/// How a run's requests are spread over agents. On the wire and in stores it is the same
/// string users type: `random`, `fixed:N`, `chained:N`, `hash:N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Strategy {
    /// Each request to a random live agent.
    Random,
    /// N agents fixed at run start.
    Fixed(u32),
    /// N agents fixed at run start, with affinity of discovered requests.
    Chained(u32),
    /// N agents fixed at run start; each request to the one its key (the host, or the
    /// request's `meta.hash_key`) ranks first by rendezvous hashing: a host's requests go to
    /// one agent, and when an agent leaves only its keys move.
    Hashed(u32),
}

impl utoipa::PartialSchema for Strategy {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .pattern(Some(
                r"^(random|fixed:[1-9][0-9]*|chained:[1-9][0-9]*|hash:[1-9][0-9]*)$",
            ))
            .description(Some("`random`, `fixed:N`, `chained:N` or `hash:N`"))
            .into()
    }
}

impl utoipa::ToSchema for Strategy {}

impl Strategy {
    /// How many distinct live agents the strategy needs at run start.
    pub fn agents_needed(self) -> usize {
        match self {
            Strategy::Random => 1,
            Strategy::Fixed(n) | Strategy::Chained(n) | Strategy::Hashed(n) => n as usize,
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Strategy::Random => f.write_str("random"),
            Strategy::Fixed(n) => write!(f, "fixed:{n}"),
            Strategy::Chained(n) => write!(f, "chained:{n}"),
            Strategy::Hashed(n) => write!(f, "hash:{n}"),
        }
    }
}

impl FromStr for Strategy {
    type Err = ParseError;

    fn from_str(input: &str) -> Result<Self, ParseError> {
        let bad = |reason: &str| ParseError::Strategy {
            input: input.to_owned(),
            reason: reason.to_owned(),
        };
        let text = input.trim();
        if text == "random" {
            return Ok(Strategy::Random);
        }
        let (name, n) = match text.split_once(':') {
            Some((name, n)) => (name, Some(n)),
            None => (text, None),
        };
        let make = match name {
            "fixed" => Strategy::Fixed,
            "chained" => Strategy::Chained,
            "hash" => Strategy::Hashed,
            "random" => return Err(bad("`random` takes no agent count")),
            _ => return Err(bad("unknown strategy")),
        };
        let n = n.ok_or_else(|| bad("missing the agent count N"))?;
        let n: u32 = n
            .parse()
            .map_err(|_| bad("the agent count N must be a whole number"))?;
        if n == 0 {
            return Err(bad("the agent count N must be at least 1"));
        }
        Ok(make(n))
    }
}

impl TryFrom<String> for Strategy {
    type Error = ParseError;
    fn try_from(s: String) -> Result<Self, ParseError> {
        s.parse()
    }
}

impl From<Strategy> for String {
    fn from(s: Strategy) -> String {
        s.to_string()
    }
}

/// What happens to a request whose agent died (`chained`), or to any request of a
/// `fixed`/`chained` run whose allocated agents all died.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum OnAgentLost {
    /// The request fails with `agent_lost` (the default, as the seeds).
    #[default]
    Fail,
    /// The request goes to another live agent, newly allocated if need be.
    Reassign,
}

impl OnAgentLost {
    /// `fail` or `reassign`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnAgentLost::Fail => "fail",
            OnAgentLost::Reassign => "reassign",
        }
    }
}

impl fmt::Display for OnAgentLost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OnAgentLost {
    type Err = ParseError;

    fn from_str(input: &str) -> Result<Self, ParseError> {
        match input.trim() {
            "fail" => Ok(OnAgentLost::Fail),
            "reassign" => Ok(OnAgentLost::Reassign),
            _ => Err(ParseError::Policy {
                input: input.to_owned(),
            }),
        }
    }
}

/// Which runs to list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RunsParams {
    /// Only this job's runs (id or name).
    pub job: Option<String>,
    /// Only runs in this state (or several, comma-separated).
    pub state: Option<String>,
    /// At most this many (default 100).
    pub limit: Option<u32>,
}

impl RunsParams {
    /// The query string's pairs (absent fields left out).
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        crate::push_param(&mut p, "job", self.job.as_ref());
        crate::push_param(&mut p, "state", self.state.as_ref());
        crate::push_param(&mut p, "limit", self.limit.as_ref());
        p
    }
}

/// Which items.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ItemsParams {
    /// Where to start (0, or a `next_cursor`).
    pub cursor: Option<u64>,
    /// At most this many (default 100, at most 1000).
    pub limit: Option<u32>,
}

impl ItemsParams {
    /// The query string's pairs (absent fields left out).
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        crate::push_param(&mut p, "cursor", self.cursor.as_ref());
        crate::push_param(&mut p, "limit", self.limit.as_ref());
        p
    }
}

/// How a finished request ended (the archive's `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RequestOutcome {
    /// Fetched, and the spider took the page (whatever its status).
    Done,
    /// Failed for good: a permanent error, or a retryable one past `max_retries`.
    Failed,
    /// Not fetched on purpose (robots.txt, off-domain after a redirect, a quota).
    Dropped,
}

impl RequestOutcome {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestOutcome::Done => "done",
            RequestOutcome::Failed => "failed",
            RequestOutcome::Dropped => "dropped",
        }
    }
}

impl fmt::Display for RequestOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RequestOutcome {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "done" => Ok(RequestOutcome::Done),
            "failed" => Ok(RequestOutcome::Failed),
            "dropped" => Ok(RequestOutcome::Dropped),
            other => Err(format!(
                "unknown outcome `{other}` (done, failed or dropped)"
            )),
        }
    }
}

/// Which archived requests of a run: the query of `GET /api/v1/runs/{id}/requests`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RequestsParams {
    /// Only those that ended so.
    pub outcome: Option<RequestOutcome>,
    /// Only those with this error code (`http_503`, `timeout`, `dns`, …).
    pub error_code: Option<String>,
    /// Only those whose last response had this HTTP status.
    pub status: Option<u16>,
    /// Only those queued again (`true`) or never queued again (`false`).
    pub requeued: Option<bool>,
    /// Paging: after this one (a `next`).
    pub after: Option<String>,
    /// At most this many (default 100, at most 1000).
    pub limit: Option<u32>,
}

impl RequestsParams {
    /// The query string's pairs (absent fields left out).
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        crate::push_param(&mut p, "outcome", self.outcome.as_ref());
        crate::push_param(&mut p, "error_code", self.error_code.as_ref());
        crate::push_param(&mut p, "status", self.status.as_ref());
        crate::push_param(&mut p, "requeued", self.requeued.as_ref());
        crate::push_param(&mut p, "after", self.after.as_ref());
        crate::push_param(&mut p, "limit", self.limit.as_ref());
        p
    }
}

/// One finished request of a run, from the archive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ArchivedRequestView {
    /// Its key within the run (for `requeue`'s `keys`).
    pub key: String,
    /// Its canonical URL.
    pub url: String,
    /// The HTTP method.
    pub method: String,
    /// How it ended.
    pub outcome: RequestOutcome,
    /// The HTTP status of its last attempt, when a response arrived.
    pub status: Option<u16>,
    /// Silk's error code, when it did not end done.
    pub error_code: Option<String>,
    /// The error, for people (`""` when done).
    pub error_msg: String,
    /// How many times it was tried.
    pub attempts: u32,
    /// Links from the start request.
    pub depth: u32,
    /// The agent of its last attempt.
    pub agent: Option<String>,
    /// When it finished, ms since the epoch.
    pub time_ms: u64,
    /// Bytes of its page.
    pub bytes: u64,
    /// Items its page gave.
    pub items: u64,
    /// When it was last queued again, if ever.
    pub requeued_ms: Option<u64>,
}

/// A page of a run's archived requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RequestsPage {
    /// In the order they finished.
    pub requests: Vec<ArchivedRequestView>,
    /// How many match the query (without `after` and `limit`), per outcome; on the first
    /// page only (a query without `after`).
    pub counts: Option<BTreeMap<String, u64>>,
    /// The `after` of the next page; `null` on the last.
    pub next: Option<String>,
}

/// Which archived requests to queue again: the body of
/// `POST /api/v1/runs/{id}/requests/requeue`. Requests already queued again are left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RequeueRequest {
    /// Only those that ended so (default `failed`).
    #[serde(default)]
    pub outcome: Option<RequestOutcome>,
    /// Only those with this error code.
    #[serde(default)]
    pub error_code: Option<String>,
    /// Only those whose last response had this HTTP status.
    #[serde(default)]
    pub status: Option<u16>,
    /// Only these (keys from the list; then any outcome unless `outcome` is given). A key
    /// not found, or queued again already, is named in `refused`.
    #[serde(default)]
    pub keys: Option<Vec<String>>,
    /// At most this many, oldest first (default and most: 10000).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// What a requeue did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Requeued {
    /// How many requests were queued again.
    pub requeued: u64,
    /// The run that takes them: the run itself while it is active, else its job's run
    /// started for them; `null` when none was queued.
    #[schema(value_type = Option<String>)]
    pub run: Option<RunId>,
    /// What could not be queued (a URL the spider no longer allows, a request that is not a
    /// GET, a key not found), each with why.
    pub refused: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_types_give_their_pairs_without_the_absent_ones() {
        let params = RunsParams {
            job: Some("shop".into()),
            state: None,
            limit: Some(5),
        };
        assert_eq!(
            params.pairs(),
            vec![("job", "shop".to_owned()), ("limit", "5".to_owned())]
        );
        assert!(RunsParams::default().pairs().is_empty());
        let items = ItemsParams {
            cursor: Some(0),
            limit: None,
        };
        assert_eq!(items.pairs(), vec![("cursor", "0".to_owned())]);
    }

    #[test]
    fn strategies_parse_and_print() {
        let ok: &[(&str, Strategy, &str)] = &[
            ("random", Strategy::Random, "random"),
            ("fixed:3", Strategy::Fixed(3), "fixed:3"),
            ("chained:1", Strategy::Chained(1), "chained:1"),
            (" fixed:12 ", Strategy::Fixed(12), "fixed:12"),
        ];
        for (input, want, shown) in ok {
            let s: Strategy = input.parse().unwrap();
            assert_eq!((s, s.to_string().as_str()), (*want, *shown), "{input:?}");
        }
        let bad: &[(&str, &str)] = &[
            ("", "unknown strategy"),
            ("fixed", "missing the agent count N"),
            ("chained:", "must be a whole number"),
            ("fixed:x", "must be a whole number"),
            ("fixed:-1", "must be a whole number"),
            ("fixed:0", "must be at least 1"),
            ("random:2", "`random` takes no agent count"),
            ("Random", "unknown strategy"),
            ("round-robin", "unknown strategy"),
        ];
        for (input, reason) in bad {
            let err = input.parse::<Strategy>().unwrap_err();
            let text = err.to_string();
            assert!(text.contains(&format!("`{input}`")), "{text}");
            assert!(text.contains(reason), "{text}");
            assert!(
                text.contains("expected `random`, `fixed:N`, `chained:N` or `hash:N`"),
                "{text}"
            );
        }
    }

    #[test]
    fn policies_parse_and_print() {
        assert_eq!("fail".parse(), Ok(OnAgentLost::Fail));
        assert_eq!("reassign".parse(), Ok(OnAgentLost::Reassign));
        assert_eq!(OnAgentLost::default(), OnAgentLost::Fail);
        assert_eq!(OnAgentLost::Reassign.to_string(), "reassign");
        let err = "retry".parse::<OnAgentLost>().unwrap_err().to_string();
        assert_eq!(
            err,
            "invalid on_agent_lost policy `retry` (expected `fail` or `reassign`)"
        );
    }
}
