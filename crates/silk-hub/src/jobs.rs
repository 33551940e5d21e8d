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

use crate::error::HubError;
use crate::run::{RunRequest, check_request};
pub use silk_api::jobs::{Job, JobSpec, LastRun, PendingRetry, TriggerRequest};
use silk_schedule::CronSchedule;
use std::collections::BTreeMap;

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

/// Checks everything in a job spec that can be checked without running: name, spider (with
/// the job's args), cron and zone, settings. Returns the spider's name and the schedule.
pub fn validate_spec(spec: &JobSpec) -> Result<(String, Option<CronSchedule>), HubError> {
    let name_ok = !spec.name.is_empty()
        && spec.name.len() <= 100
        && spec
            .name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !name_ok {
        return Err(HubError::BadJob(format!(
            "name `{}`: use 1 to 100 letters, digits, `.`, `_` or `-`",
            spec.name
        )));
    }
    let schedule = match &spec.cron {
        Some(cron) => Some(
            CronSchedule::parse(cron, spec.timezone.as_deref())
                .map_err(|e| HubError::BadJob(e.to_string()))?,
        ),
        None => {
            if let Some(tz) = &spec.timezone {
                silk_schedule::validate_timezone(tz)
                    .map_err(|e| HubError::BadJob(e.to_string()))?;
            }
            None
        }
    };
    spec.retry
        .validate()
        .map_err(|e| HubError::BadJob(e.to_string()))?;
    if spec.timeout_ms == Some(0) {
        return Err(HubError::BadJob("timeout_ms must be at least 1".into()));
    }
    if spec.log_retention_ms == Some(0) {
        return Err(HubError::BadJob(
            "log_retention_ms must be at least 1".into(),
        ));
    }
    let request = run_request(spec, &BTreeMap::new())?;
    let spider = check_request(&request)?;
    Ok((spider.spec.name, schedule))
}

/// The run request of a trigger of `spec` with `extra` args over the job's.
pub fn run_request(
    spec: &JobSpec,
    extra: &BTreeMap<String, String>,
) -> Result<RunRequest, HubError> {
    let args = spec.merged_args(extra);
    let spider = fill_args(&spec.spider, &args).map_err(HubError::BadJob)?;
    // `${args.NAME}` in a program's command and env are filled as in a spider.
    let program = match &spec.program {
        None => None,
        Some(p) => {
            let mut p = p.clone();
            for arg in &mut p.command {
                *arg = fill_args(arg, &args)
                    .map_err(|e| HubError::BadJob(format!("program.command: {e}")))?;
            }
            for (name, value) in &mut p.env {
                *value = fill_args(value, &args)
                    .map_err(|e| HubError::BadJob(format!("program.env.{name}: {e}")))?;
            }
            Some(p)
        }
    };
    Ok(RunRequest {
        spider,
        program,
        strategy: spec.strategy,
        on_agent_lost: spec.on_agent_lost,
        pools: spec.pools.clone(),
        max_pending: spec.max_pending,
        stall_timeout_ms: spec.stall_timeout_ms,
        downloader: spec.downloader.clone(),
        sinks: spec.sinks.clone(),
        fail_if: spec.fail_if.clone(),
    })
}

/// The store row of a job.
pub(crate) fn job_row(job: &Job) -> Result<silk_store::JobRow, HubError> {
    Ok(silk_store::JobRow {
        id: job.id.clone(),
        name: job.spec.name.clone(),
        tenant: job.tenant.clone(),
        enabled: job.spec.enabled,
        spec: serde_json::to_value(job)
            .map_err(|e| HubError::Store(format!("job `{}`: {e}", job.spec.name)))?,
        created_ms: job.created_ms,
        updated_ms: job.updated_ms,
        next_fire_ms: job.next_fire_ms,
        last_fire_ms: job.last_fire_ms,
        queued: job.queued,
    })
}

/// The job of a store row.
pub(crate) fn job_from_row(row: silk_store::JobRow) -> Result<Job, HubError> {
    serde_json::from_value(row.spec)
        .map_err(|e| HubError::Store(format!("job `{}` is unreadable: {e}", row.name)))
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
        let (name, schedule) = validate_spec(&s).unwrap();
        assert_eq!(name, "shop");
        assert!(schedule.is_some());
        let mut bad = s.clone();
        bad.name = "no spaces".into();
        assert!(
            validate_spec(&bad)
                .unwrap_err()
                .to_string()
                .contains("name")
        );
        let mut bad = s.clone();
        bad.cron = Some("61 * * * *".into());
        assert!(matches!(validate_spec(&bad), Err(HubError::BadJob(_))));
        let mut bad = s.clone();
        bad.timezone = Some("Mars/Olympus".into());
        assert!(
            validate_spec(&bad)
                .unwrap_err()
                .to_string()
                .contains("Mars/Olympus")
        );
        let mut bad = s;
        bad.spider = "name: [".into();
        assert!(matches!(validate_spec(&bad), Err(HubError::BadRun(_))));
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
