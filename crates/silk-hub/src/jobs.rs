//! Jobs: a named spider with a schedule and policies, the thing a team runs every day.
//!
//! A [`JobSpec`] is what a user writes (`POST /api/v1/jobs`); a [`Job`] is the spec plus
//! what the hub keeps about it (id, times, the next and last fire, the last run, a queued
//! fire, a pending retry). The store holds a job as a row whose JSON document is the whole
//! [`Job`].
//!
//! # Scheduling ([`scheduler`])
//!
//! One task owns every job change the schedule makes; API changes take the same lock
//! (`HubCore::jobs_lock`), so two writers never interleave. Every `schedule_tick_ms` it:
//! - fires each enabled job with a `cron` whose fire time has come. Fires missed while the
//!   hub was down (or the job disabled) coalesce into one (`silk_schedule::due`): a job that
//!   missed 3 hourly fires runs once, not 3 times. What a fire does depends on the job's
//!   `overlap` policy and its runs still active: `skip` (not started), `queue` (at most one
//!   queued fire, started when the active run ends), `replace` (the active runs are
//!   cancelled, then a new run starts);
//! - starts a retry whose time has come (a failed run of a job with `retry.max_retries`
//!   left; a cancelled run is never retried);
//! - fails runs past the job's `timeout_ms` ("timed out after …"; the retry policy applies);
//! - and, as runs end (reported by the hub), records the job's last run, plans its retry
//!   and starts a queued fire.
//!
//! Time comes from the hub's [`Clock`](silk_core::Clock), so tests drive the schedule with a
//! manual clock.
//!
//! # Arguments
//!
//! `args` (strings) fill `${args.NAME}` placeholders in the spider text when a run is made;
//! a trigger may pass more args that override the job's. A placeholder without a value is an
//! error naming it, both when the job is saved and when it is triggered.

use crate::allocation::{OnAgentLost, Strategy};
use crate::error::HubError;
use crate::run::{RunRequest, RunState, Sinks};
use serde::{Deserialize, Serialize};
use silk_core::RunId;
use silk_schedule::{CronSchedule, Overlap, RetryPolicy};
use std::collections::BTreeMap;

/// What a user writes to define a job (`POST /api/v1/jobs`). Only `name` and `spider` are
/// required.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// Unique name: letters, digits, `.`, `_`, `-`; at most 100 characters.
    pub name: String,
    /// The declarative spider, as YAML text (may hold `${args.NAME}` placeholders).
    pub spider: String,
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
    pub fail_if: Option<crate::health::FailIf>,
    /// Whether the schedule fires (manual triggers always work); default true.
    #[serde(default = "yes")]
    pub enabled: bool,
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

/// Fills `${args.NAME}` placeholders; the error names a placeholder without a value.
pub fn fill_args(spider: &str, args: &BTreeMap<String, String>) -> Result<String, String> {
    const OPEN: &str = "${args.";
    let mut out = String::with_capacity(spider.len());
    let mut rest = spider;
    while let Some(at) = rest.find(OPEN) {
        out.push_str(&rest[..at]);
        let after = &rest[at + OPEN.len()..];
        let Some(end) = after.find('}') else {
            return Err(format!(
                "spider: unclosed placeholder `{}`",
                &rest[at..rest.len().min(at + 40)]
            ));
        };
        let name = &after[..end];
        match args.get(name) {
            Some(v) => out.push_str(v),
            None => {
                let known: Vec<&str> = args.keys().map(String::as_str).collect();
                return Err(format!(
                    "spider placeholder `${{args.{name}}}` has no value (args given: {})",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                ));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

impl JobSpec {
    /// Checks everything that can be checked without running: name, spider (with the job's
    /// args), cron and zone, settings. Returns the spider's name and the schedule.
    pub fn validate(&self) -> Result<(String, Option<CronSchedule>), HubError> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 100
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !name_ok {
            return Err(HubError::BadJob(format!(
                "name `{}`: use 1 to 100 letters, digits, `.`, `_` or `-`",
                self.name
            )));
        }
        let schedule = match &self.cron {
            Some(cron) => Some(
                CronSchedule::parse(cron, self.timezone.as_deref())
                    .map_err(|e| HubError::BadJob(e.to_string()))?,
            ),
            None => {
                if let Some(tz) = &self.timezone {
                    silk_schedule::validate_timezone(tz)
                        .map_err(|e| HubError::BadJob(e.to_string()))?;
                }
                None
            }
        };
        self.retry
            .validate()
            .map_err(|e| HubError::BadJob(e.to_string()))?;
        if self.timeout_ms == Some(0) {
            return Err(HubError::BadJob("timeout_ms must be at least 1".into()));
        }
        let request = self.run_request(&BTreeMap::new())?;
        let spider = request.check()?;
        Ok((spider.spec.name, schedule))
    }

    /// The run request of a trigger with `extra` args over the job's.
    pub fn run_request(&self, extra: &BTreeMap<String, String>) -> Result<RunRequest, HubError> {
        let mut args = self.args.clone();
        args.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        let spider = fill_args(&self.spider, &args).map_err(HubError::BadJob)?;
        Ok(RunRequest {
            spider,
            strategy: self.strategy,
            on_agent_lost: self.on_agent_lost,
            max_pending: self.max_pending,
            stall_timeout_ms: self.stall_timeout_ms,
            downloader: self.downloader.clone(),
            sinks: self.sinks.clone(),
            fail_if: self.fail_if.clone(),
        })
    }

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

    /// The store row of the job.
    pub(crate) fn row(&self) -> Result<silk_store::JobRow, HubError> {
        Ok(silk_store::JobRow {
            id: self.id.clone(),
            name: self.spec.name.clone(),
            enabled: self.spec.enabled,
            spec: serde_json::to_value(self)
                .map_err(|e| HubError::Store(format!("job `{}`: {e}", self.spec.name)))?,
            created_ms: self.created_ms,
            updated_ms: self.updated_ms,
            next_fire_ms: self.next_fire_ms,
            last_fire_ms: self.last_fire_ms,
            queued: self.queued,
        })
    }

    /// The job of a store row.
    pub(crate) fn from_row(row: silk_store::JobRow) -> Result<Job, HubError> {
        serde_json::from_value(row.spec)
            .map_err(|e| HubError::Store(format!("job `{}` is unreadable: {e}", row.name)))
    }
}

/// Applies a JSON merge patch (`PATCH /api/v1/jobs/{id}`) to a spec: a key replaces the
/// field, `null` resets it to its default. The result is validated like a new spec.
pub fn patch_spec(spec: &JobSpec, patch: &serde_json::Value) -> Result<JobSpec, HubError> {
    let serde_json::Value::Object(patch) = patch else {
        return Err(HubError::BadJob("the patch must be a JSON object".into()));
    };
    let mut doc = match serde_json::to_value(spec) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => return Err(HubError::BadJob("the job cannot be patched".into())),
    };
    for (k, v) in patch {
        if v.is_null() {
            doc.remove(k);
        } else {
            doc.insert(k.clone(), v.clone());
        }
    }
    let value = serde_json::Value::Object(doc);
    serde_path_to_error::deserialize(&value)
        .map_err(|e| HubError::BadJob(format!("`{}`: {}", e.path(), e.inner())))
}

/// A trigger of a job (`POST /api/v1/jobs/{id}/runs`).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerRequest {
    /// Arguments over the job's.
    #[serde(default)]
    pub args: BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn placeholders_are_filled_and_missing_ones_named() {
        let spider = "start_urls: [\"http://x/${args.cat}/${args.page}\"]";
        let out = fill_args(spider, &args(&[("cat", "shoes"), ("page", "2")])).unwrap();
        assert_eq!(out, "start_urls: [\"http://x/shoes/2\"]");
        let err = fill_args(spider, &args(&[("cat", "shoes")])).unwrap_err();
        assert!(err.contains("${args.page}") && err.contains("cat"), "{err}");
        let err = fill_args("a ${args.x", &BTreeMap::new()).unwrap_err();
        assert!(err.contains("unclosed"), "{err}");
        assert_eq!(
            fill_args("no placeholders $x {y}", &BTreeMap::new()).unwrap(),
            "no placeholders $x {y}"
        );
    }

    fn spec() -> JobSpec {
        serde_json::from_value(serde_json::json!({
            "name": "shop",
            "spider": "name: shop\nstart_urls: [\"http://127.0.0.1:1/\"]\n",
            "cron": "*/5 * * * *",
            "args": {"page": 3, "x": true}
        }))
        .unwrap()
    }

    #[test]
    fn specs_validate_and_args_accept_scalars() {
        let s = spec();
        assert_eq!(s.args.get("page").map(String::as_str), Some("3"));
        assert!(s.enabled);
        let (name, schedule) = s.validate().unwrap();
        assert_eq!(name, "shop");
        assert!(schedule.is_some());
        let mut bad = s.clone();
        bad.name = "no spaces".into();
        assert!(bad.validate().unwrap_err().to_string().contains("name"));
        let mut bad = s.clone();
        bad.cron = Some("61 * * * *".into());
        assert!(matches!(bad.validate(), Err(HubError::BadJob(_))));
        let mut bad = s.clone();
        bad.timezone = Some("Mars/Olympus".into());
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("Mars/Olympus")
        );
        let mut bad = s;
        bad.spider = "name: [".into();
        assert!(matches!(bad.validate(), Err(HubError::BadRun(_))));
    }

    #[test]
    fn patches_replace_fields_and_null_resets() {
        let s = spec();
        let p = patch_spec(
            &s,
            &serde_json::json!({"cron": null, "remarks": "hi", "enabled": false}),
        )
        .unwrap();
        assert_eq!(p.cron, None);
        assert_eq!(p.remarks, "hi");
        assert!(!p.enabled);
        assert_eq!(p.name, "shop");
        let err = patch_spec(&s, &serde_json::json!({"overlap": "sometimes"})).unwrap_err();
        assert!(err.to_string().contains("overlap"), "{err}");
        let err = patch_spec(&s, &serde_json::json!({"nope": 1})).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }
}
