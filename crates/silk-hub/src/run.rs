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

use crate::allocation::Allocation;
use crate::error::HubError;
use serde::{Deserialize, Serialize};
use silk_api::health::FailIf;
pub use silk_api::programs::{ProgramSpec, ProgramView, WorkerState, WorkerView};
pub use silk_api::runs::{
    Feed, ItemsPage, OnAgentLost, RunRequest, RunState, RunStats, RunView, Sinks, Strategy,
    WebhookSink,
};
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

/// Checks a run request; the compiled spider.
/// The prefix of a run token (`silkrun_{run}_{tag}`).
pub const RUN_TOKEN_PREFIX: &str = "silkrun_";
const RUN_TOKEN_PURPOSE: &str = "silk:run-token";

/// The token of a program run (`SILK_RUN_TOKEN`): the run id and its HMAC with the hub's key,
/// so every hub sharing the key checks it without storing it; it is good while the run has
/// not ended (the API checks that).
pub(crate) fn run_token(secrets: &silk_projects::secrets::SecretBox, run: &RunId) -> String {
    format!(
        "{RUN_TOKEN_PREFIX}{run}_{}",
        secrets.mac(RUN_TOKEN_PURPOSE, run.as_str())
    )
}

/// The run a run token is for, if it is one this hub's key made.
pub(crate) fn token_run(secrets: &silk_projects::secrets::SecretBox, token: &str) -> Option<RunId> {
    let (run, tag) = token.strip_prefix(RUN_TOKEN_PREFIX)?.rsplit_once('_')?;
    let valid = !run.is_empty()
        && run.len() <= 128
        && run
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !valid {
        return None;
    }
    let run = RunId::new(run);
    secrets
        .verify_mac(RUN_TOKEN_PURPOSE, run.as_str(), tag)
        .then_some(run)
}

/// The spider of a program run that gives none: settings only, no start URLs (the program
/// enqueues its own requests, if it uses the frontier at all).
pub(crate) fn program_spider(program: &ProgramSpec) -> String {
    format!("name: {}\nstart_urls: []\n", program.project)
}

/// Checks a run request; the run's spider (for a program run, its settings; see
/// [`program_spider`]).
pub(crate) fn check_request(request: &RunRequest) -> Result<Spider, HubError> {
    let spider = match &request.program {
        None => Spider::from_yaml(&request.spider, "spider"),
        Some(program) => {
            let problems = program.problems();
            if !problems.is_empty() {
                return Err(HubError::BadRun(problems.join("; ")));
            }
            if request.spider.trim().is_empty() {
                Spider::from_yaml_seedless(&program_spider(program), "spider")
            } else {
                Spider::from_yaml_seedless(&request.spider, "spider")
            }
        }
    }
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
    silk_api::runs::check_pools(&request.pools).map_err(HubError::BadRun)?;
    if let Some(fail_if) = &request.fail_if {
        let problems = fail_if.problems();
        if !problems.is_empty() {
            return Err(HubError::BadRun(problems.join("; ")));
        }
    }
    Ok(spider)
}

/// A run as the hub stores it (`runs/{id}/run.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run id.
    pub id: RunId,
    /// The tenant it belongs to (records from before tenants: `default`).
    #[serde(default = "silk_api::tenants::default_tenant")]
    pub tenant: String,
    /// The spider's YAML text.
    pub spider: String,
    /// The spider's `name`.
    pub spider_name: String,
    /// The allocation strategy.
    pub strategy: Strategy,
    /// The agent-lost policy.
    pub on_agent_lost: OnAgentLost,
    /// The agent pools it may use (empty: any agent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<String>,
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
    /// The program of a program run: what it runs and where its workers are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<ProgramRun>,
    /// The hub's default lease timeout, ms, when the spider sets none (at the run's start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_timeout_ms: Option<u64>,
    /// The hub's default retries of a request, when the spider sets none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// The pages of its tenant's (and job's) daily quota the run holds: reserved in the
    /// store's counters and not used yet (see `quotas`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<HeldSlice>,
    /// The private ranges an admin allowed its tenant when it started (sent to its agents
    /// with the allocation; its webhook sink may reach them too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_networks: Vec<silk_core::net::IpNet>,
    /// The spider's `expand`: how many requests its templates give (resolved at the start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expand_total: Option<u64>,
    /// The cursor of the spider's `expand`: the requests before it are in the frontier.
    #[serde(default)]
    pub expanded: u64,
    /// The run keeps its requests in its job's frontier (`frontier: job`), which the job's
    /// runs share, rather than in one of its own (see [`crate::job_frontier`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub job_frontier: bool,
    /// A job frontier's counters when the run first opened it: the run's own counters are
    /// the frontier's minus these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontier_base: Option<FrontierBase>,
}

/// The cumulative counters of a shared frontier when a run started (see
/// [`RunRecord::frontier_base`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrontierBase {
    pub total: u64,
    pub success: u64,
    pub failed: u64,
    pub dropped: u64,
    pub duplicates: u64,
    pub retries: u64,
}

impl FrontierBase {
    /// The counters of `stats` that count from its frontier's creation.
    pub fn of(stats: &silk_frontier::FrontierStats) -> FrontierBase {
        FrontierBase {
            total: stats.total,
            success: stats.success,
            failed: stats.failed,
            dropped: stats.dropped,
            duplicates: stats.duplicates,
            retries: stats.retries,
        }
    }

    /// `stats` with its cumulative counters counted from this base on.
    pub fn since(&self, mut stats: silk_frontier::FrontierStats) -> silk_frontier::FrontierStats {
        stats.total = stats.total.saturating_sub(self.total);
        stats.success = stats.success.saturating_sub(self.success);
        stats.failed = stats.failed.saturating_sub(self.failed);
        stats.dropped = stats.dropped.saturating_sub(self.dropped);
        stats.duplicates = stats.duplicates.saturating_sub(self.duplicates);
        stats.retries = stats.retries.saturating_sub(self.retries);
        stats
    }
}

/// A slice of quota a run holds: `pages` reserved on the counters `scopes` of day `period`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldSlice {
    pub period: String,
    pub scopes: Vec<String>,
    pub pages: u64,
}

/// What a program run runs: the program, the version it resolved to, and its workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgramRun {
    pub spec: ProgramSpec,
    /// The version (never `latest`).
    pub version: String,
    /// The version's packed directory (`command` versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<silk_bus::ArtifactRef>,
    /// The version's image (`container` versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The workers, once placed.
    #[serde(default)]
    pub workers: Vec<WorkerView>,
}

impl RunRecord {
    /// The run's agents: its allocation's (`fixed:N`, `chained:N`), else every agent that
    /// confirmed.
    pub(crate) fn run_agents(&self) -> Vec<AgentId> {
        match &self.allocation {
            Some(a) if !a.agents().is_empty() => a.agents().to_vec(),
            _ => self.agents.clone(),
        }
    }

    /// Whether the run runs a program.
    pub fn is_program(&self) -> bool {
        self.program.is_some()
    }

    /// The run's spider, compiled (a program run's may have no start URLs).
    pub(crate) fn compiled_spider(&self) -> Result<Spider, HubError> {
        let compiled = if self.is_program() {
            Spider::from_yaml_seedless(&self.spider, "spider")
        } else {
            Spider::from_yaml(&self.spider, "spider")
        };
        compiled.map_err(|e| HubError::BadRun(e.to_string()))
    }
}

/// The API's view of `record` with `stats`.
pub fn run_view(record: &RunRecord, stats: RunStats, items_path: Option<PathBuf>) -> RunView {
    let agents = record.run_agents();
    RunView {
        id: record.id.clone(),
        state: record.state,
        reason: record.reason.clone(),
        strategy: record.strategy,
        on_agent_lost: record.on_agent_lost,
        pools: record.pools.clone(),
        agents,
        spider_name: record.spider_name.clone(),
        max_pending: record.max_pending,
        stall_timeout_ms: record.stall_timeout_ms,
        created_ms: record.created_ms,
        started_ms: record.started_ms,
        finished_ms: record.finished_ms,
        items_path,
        stats,
        tenant: record.tenant.clone(),
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
        job_frontier: record.job_frontier,
        fail_if: record.fail_if.clone().unwrap_or_default(),
        program: record.program.as_ref().map(|p| ProgramView {
            spec: p.spec.clone(),
            version: p.version.clone(),
            workers: p.workers.clone(),
        }),
        expand: record
            .expand_total
            .map(|total| silk_api::runs::ExpandProgress {
                fed: record.expanded.min(total),
                total,
            }),
    }
}
