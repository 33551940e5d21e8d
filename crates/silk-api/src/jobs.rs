//! Jobs on the wire: a [`JobSpec`] is what a user writes (`POST /api/v1/jobs`); a [`Job`] is
//! the spec plus what the hub keeps about it (id, times, the next and last fire, the last
//! run, a queued fire, a pending retry), as the API shows it and the store keeps it.

use crate::health::FailIf;
use crate::runs::{OnAgentLost, RunState, Sinks, Strategy};
use serde::{Deserialize, Serialize};
use silk_core::RunId;
use silk_schedule::CronSchedule;
pub use silk_schedule::{Overlap, RetryPolicy};
use std::collections::BTreeMap;

/// What a user writes to define a job (`POST /api/v1/jobs`). Only `name` and `spider` are
/// required.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// Unique name: letters, digits, `.`, `_`, `-`; at most 100 characters.
    pub name: String,
    /// The declarative spider, as YAML text (may hold `${args.NAME}` placeholders); optional
    /// with a `program` (see `RunRequest::spider`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub spider: String,
    /// A team's own crawler to run (see `silk_api::programs`); `${args.NAME}` in its command
    /// and env are filled when a run is made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<crate::programs::ProgramSpec>,
    /// A cron expression (5 fields, or 6 with seconds, or `@daily` …); none: manual only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The IANA time zone of `cron`; default `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Values of the spider's `${args.NAME}` placeholders.
    #[serde(default, deserialize_with = "string_map")]
    pub args: BTreeMap<String, String>,
    /// Free text for people.
    #[serde(default)]
    pub remarks: String,
    /// What a fire does while a run of the job is active: `skip` (default), `queue`,
    /// `replace`.
    #[serde(default)]
    #[schema(value_type = String, example = "skip")]
    pub overlap: Overlap,
    /// A run still active this long after it started is failed ("timed out"), ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Retries of failed runs.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub retry: RetryPolicy,
    /// Allocation strategy of its runs; default `random`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
    /// The runs' agent-lost policy; default `fail`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_agent_lost: Option<OnAgentLost>,
    /// Agent pools its runs may use (see `RunRequest::pools`); empty: any agent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<String>,
    /// Back-pressure of its runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pending: Option<u64>,
    /// Stall timeout of its runs, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_timeout_ms: Option<u64>,
    /// Downloader settings of its runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub downloader: Option<serde_json::Map<String, serde_json::Value>>,
    /// Item sinks of its runs besides the JSON Lines file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sinks: Option<Sinks>,
    /// When its runs, once they reached their end, count as failed (defaults: see
    /// `FailIf`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_if: Option<FailIf>,
    /// Whether the schedule fires (manual triggers always work); default true.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Log lines of its runs older than this are deleted, ms (the hub's `log_retention`
    /// applies to every run; this can only keep a job's lines for less).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_retention_ms: Option<u64>,
    /// Most pages its runs fetch per day, together (days in its tenant's time zone); a run
    /// past it pauses with `quota_exhausted` until the next day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pages_per_day: Option<u64>,
    /// Where its runs keep their frontier: `run` (default: each run a frontier of its own) or
    /// `job` (one frontier across the job's runs, so that with the spider's
    /// `recrawl_segment` a URL seen in the current segment is skipped by every run of the job
    /// and fetched again in the next segment; an incremental crawl).
    #[serde(default, skip_serializing_if = "FrontierScope::is_run")]
    #[schema(value_type = String, example = "run")]
    pub frontier: FrontierScope,
}

/// Which runs share a frontier (see [`JobSpec::frontier`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrontierScope {
    /// Each run has a frontier of its own, dropped with the run.
    #[default]
    Run,
    /// The job's runs share one frontier, which outlives them.
    Job,
}

impl FrontierScope {
    /// Whether it is the default, `run`.
    pub fn is_run(&self) -> bool {
        *self == FrontierScope::Run
    }
}

fn yes() -> bool {
    true
}

/// Accepts strings, numbers and booleans as argument values (`{"page": 3}` is `"3"`).
fn string_map<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    let raw = Option::<BTreeMap<String, serde_json::Value>>::deserialize(d)?.unwrap_or_default();
    raw.into_iter()
        .map(|(k, v)| {
            let s = match v {
                serde_json::Value::String(s) => s,
                serde_json::Value::Number(n) => n.to_string(),
                serde_json::Value::Bool(b) => b.to_string(),
                other => {
                    return Err(serde::de::Error::custom(format!(
                        "argument `{k}` must be a string, number or boolean, not {other}"
                    )));
                }
            };
            Ok((k, s))
        })
        .collect()
}

/// A run of a job, as the job remembers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LastRun {
    /// The run.
    #[schema(value_type = String)]
    pub id: RunId,
    /// Its state when last seen.
    pub state: RunState,
}

/// A retry the scheduler will start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PendingRetry {
    /// The failed run.
    #[schema(value_type = String)]
    pub of: RunId,
    /// The attempt the retry will be (1 = first retry).
    pub attempt: u32,
    /// When, ms since the epoch.
    pub at_ms: u64,
}

/// A job as the hub keeps it and the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Job {
    /// The job id.
    pub id: String,
    /// The tenant it belongs to.
    #[serde(default = "crate::tenants::default_tenant")]
    #[schema(required = true)]
    pub tenant: String,
    /// The definition.
    #[serde(flatten)]
    pub spec: JobSpec,
    /// The spider's `name`.
    pub spider_name: String,
    /// Created, ms since the epoch.
    pub created_ms: u64,
    /// Last changed.
    pub updated_ms: u64,
    /// The next scheduled fire (none without cron, or when disabled).
    pub next_fire_ms: Option<u64>,
    /// The last fire handled (started, skipped, queued).
    pub last_fire_ms: Option<u64>,
    /// Fires are counted from here (creation, or the last change of the schedule or of
    /// `enabled`): a new or re-enabled job does not make up fires from before.
    pub schedule_from_ms: u64,
    /// The latest run.
    pub last_run: Option<LastRun>,
    /// A fire waiting for the active run to end (`overlap: queue`).
    pub queued: u32,
    /// A retry waiting for its time.
    pub retry_pending: Option<PendingRetry>,
}

impl JobSpec {
    /// The args of a trigger with `extra` over the job's.
    pub fn merged_args(&self, extra: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        let mut args = self.args.clone();
        args.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        args
    }
}

impl Job {
    /// The schedule, if the job has a cron (it was validated when saved).
    pub fn schedule(&self) -> Option<CronSchedule> {
        let cron = self.spec.cron.as_ref()?;
        CronSchedule::parse(cron, self.spec.timezone.as_deref()).ok()
    }

    /// Recomputes `next_fire_ms`: the first fire after the last one handled (or after
    /// `schedule_from_ms`); in the past when a fire is due.
    pub fn refresh_next_fire(&mut self) {
        self.next_fire_ms = match (self.spec.enabled, self.schedule()) {
            (true, Some(s)) => {
                let from = self
                    .last_fire_ms
                    .unwrap_or(self.schedule_from_ms)
                    .max(self.schedule_from_ms);
                s.next_after(from)
            }
            _ => None,
        };
    }
}

/// A trigger of a job (`POST /api/v1/jobs/{id}/runs`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggerRequest {
    /// Arguments over the job's.
    #[serde(default)]
    pub args: BTreeMap<String, String>,
}
