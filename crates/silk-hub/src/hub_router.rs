//! The hub's facade for the router it runs (`--router`): its status for the web UI's Router
//! page and `check_task` from there, the failure sink that keeps the router's failure
//! records in the store (design §6), listing them, replaying them, and their retention
//! (with the logs', in `logs::retention`).
//!
//! **Replay** submits a record's task to the router again, oldest record first, one replay
//! at a time per hub, records of the running router's `project` only. A task that failed in
//! its inbound's convert chain (`convert_failed`, recorded as it arrived) goes through that
//! inbound again when it still exists; every other task was recorded after its inbound took
//! it and goes straight to the rules (its converts do not run twice). **Choice**: a task
//! that ended with `retries_exhausted` or `limits` is submitted as a new task — without
//! `task_result`, `outbound`, the retry counters and its `task_uuid` (kept as `replay_of`),
//! since as it was it would end the same way at once, or be dropped as a repeated delivery.
//! A record is marked replayed as soon as the router took its task; a task that fails again
//! is a new record.

use crate::error::HubError;
use crate::hub::HubHandle;
use silk_api::router::{
    CheckTaskRequest, ReplayAnswer, ReplayRequest, ReplayedView, RouterFailureView,
    RouterFailuresPage, RouterFailuresParams, RouterView,
};
use silk_router::{FailureRecord, FailureSink};
use silk_store::{MetaStore, RouterFailureFilter, RouterFailureRow};
use std::sync::Arc;

/// Default and largest page of `GET /api/v1/router/failures`.
const PAGE: (u32, u32) = (100, 1000);
/// Default and largest replay.
const REPLAY: (u32, u32) = (1000, 10_000);
/// Keys that make a recorded task a returning one, cleared for a fresh replay.
const RETURNING_KEYS: [&str; 5] = [
    "task_result",
    "outbound",
    "retry_times",
    "routed_count",
    "group_retry_times",
];

/// Keeps failure records in the store.
struct StoreSink {
    store: Arc<dyn MetaStore>,
}

#[async_trait::async_trait]
impl FailureSink for StoreSink {
    async fn record(&self, records: &[FailureRecord]) -> Result<(), String> {
        let rows: Vec<RouterFailureRow> = records
            .iter()
            .map(|r| RouterFailureRow {
                id: uuid::Uuid::now_v7().to_string(),
                time_ms: r.time_ms,
                project: r.project.clone(),
                inbound: r.inbound.clone(),
                outbound: r.outbound.clone(),
                reason: r.reason.as_str().to_owned(),
                why: r.why.clone(),
                task: r.task.clone(),
                raw: r.raw.clone(),
                replayed_ms: None,
            })
            .collect();
        self.store
            .insert_router_failures(&rows)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

fn view(row: RouterFailureRow) -> RouterFailureView {
    RouterFailureView {
        id: row.id,
        time_ms: row.time_ms,
        project: row.project,
        inbound: row.inbound,
        outbound: row.outbound,
        reason: row.reason,
        why: row.why,
        task: row.task,
        raw: row.raw,
        replayed_ms: row.replayed_ms,
    }
}

/// `after` of a page: `{time_ms}:{id}` of the last record listed.
fn cursor(row: &RouterFailureRow) -> String {
    format!("{}:{}", row.time_ms, row.id)
}

fn parse_cursor(text: &str) -> Result<(u64, String), HubError> {
    text.split_once(':')
        .and_then(|(t, id)| {
            Some((
                t.parse::<i64>().ok().and_then(|t| u64::try_from(t).ok())?,
                id.to_owned(),
            ))
        })
        .filter(|(_, id)| !id.is_empty())
        .ok_or_else(|| {
            HubError::BadRun(format!(
                "after: `{text}` is not a page cursor (the `next` of a page)"
            ))
        })
}

impl HubHandle {
    /// Gives the hub the router it runs, for replays; false if it had one already.
    pub fn set_router(&self, router: silk_router::Router) -> bool {
        self.shared().router.set(router).is_ok()
    }

    /// A [`FailureSink`] keeping the router's failure records in this hub's store.
    pub fn router_failure_sink(&self) -> Arc<dyn FailureSink> {
        Arc::new(StoreSink {
            store: self.shared().store.clone(),
        })
    }

    /// Failure records, newest first.
    pub async fn router_failures(
        &self,
        params: &RouterFailuresParams,
    ) -> Result<RouterFailuresPage, HubError> {
        let limit = params.limit.unwrap_or(PAGE.0).clamp(1, PAGE.1);
        let mut filter = RouterFailureFilter {
            inbound: params.inbound.clone(),
            outbound: params.outbound.clone(),
            reason: params.reason.clone(),
            since_ms: params.since,
            until_ms: params.until,
            replayed: params.replayed,
            ..RouterFailureFilter::default()
        };
        check_time("since", params.since)?;
        check_time("until", params.until)?;
        let store = &self.shared().store;
        let total = store.count_router_failures(&filter).await?;
        filter.before = params.after.as_deref().map(parse_cursor).transpose()?;
        filter.limit = Some(limit + 1);
        let mut rows = store.list_router_failures(&filter).await?;
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next = if more { rows.last().map(cursor) } else { None };
        Ok(RouterFailuresPage {
            failures: rows.into_iter().map(view).collect(),
            total,
            next,
        })
    }

    /// Submits the selected records' tasks to the router again, oldest first (see the module
    /// doc). Runs on a task of its own, one replay at a time on this hub: a caller that
    /// hangs up does not stop it half way, and each record is marked as soon as the router
    /// took its task.
    pub async fn replay_router_failures(
        &self,
        request: &ReplayRequest,
    ) -> Result<ReplayAnswer, HubError> {
        let router = self.running_router()?;
        if let Some(ids) = &request.ids
            && ids.len() > REPLAY.1 as usize
        {
            return Err(HubError::BadRun(format!(
                "ids: {} given, at most {} at once",
                ids.len(),
                REPLAY.1
            )));
        }
        check_time("since", request.since)?;
        check_time("until", request.until)?;
        let default = request
            .ids
            .as_ref()
            .map_or(REPLAY.0, |ids| ids.len().max(1) as u32);
        let limit = request.limit.unwrap_or(default).clamp(1, REPLAY.1);
        let filter = RouterFailureFilter {
            ids: request.ids.clone(),
            project: Some(router.config().project.clone()),
            inbound: request.inbound.clone(),
            outbound: request.outbound.clone(),
            reason: request.reason.clone(),
            since_ms: request.since,
            until_ms: request.until,
            replayed: (!request.again).then_some(false),
            limit: Some(limit),
            oldest_first: true,
            ..RouterFailureFilter::default()
        };
        let hub = self.clone();
        tokio::spawn(async move {
            let shared = hub.shared();
            let _one_at_a_time = shared.replay_lock.lock().await;
            let rows = shared.store.list_router_failures(&filter).await?;
            let mut answers = Vec::with_capacity(rows.len());
            for row in rows {
                answers.push(replay_one(&hub, &router, row).await?);
            }
            Ok(ReplayAnswer { replayed: answers })
        })
        .await
        .map_err(|e| HubError::Store(format!("the replay stopped: {e}")))?
    }
}

/// `Err` when `ms` is past what the store keeps (`i64`).
fn check_time(what: &str, ms: Option<u64>) -> Result<(), HubError> {
    match ms {
        Some(ms) if i64::try_from(ms).is_err() => Err(HubError::BadRun(format!(
            "{what}: {ms} is not a time in ms since the epoch"
        ))),
        _ => Ok(()),
    }
}

/// Submits one record's task again; marks the record once the router took it.
async fn replay_one(
    hub: &HubHandle,
    router: &silk_router::Router,
    row: RouterFailureRow,
) -> Result<ReplayedView, HubError> {
    let not = |id: String, why: String| ReplayedView {
        id,
        decision: None,
        reason: None,
        outbound: None,
        why,
    };
    let Some(mut task) = row.task else {
        return Ok(not(
            row.id,
            "not replayed: the message was not a JSON object (its text is in `raw`)".into(),
        ));
    };
    if matches!(row.reason.as_str(), "retries_exhausted" | "limits")
        && let Some(map) = task.as_object_mut()
    {
        for key in RETURNING_KEYS {
            map.remove(key);
        }
        // A new task: a new uuid, so targets that drop repeated deliveries take it.
        if let Some(old) = map.remove("task_uuid") {
            map.insert("replay_of".into(), old);
        }
    }
    // A task that failed in its inbound's convert chain is recorded as it arrived: it goes
    // through the inbound again. Every other one was recorded after its inbound took it.
    let config = router.config();
    let inbound = if row.reason == "convert_failed" {
        row.inbound
            .as_deref()
            .and_then(|name| config.inbound_index(name))
            .filter(|&i| !config.inbounds[i].disable)
    } else {
        None
    };
    match router.submit(inbound, task).await {
        Ok(outcome) => {
            let now = hub.shared().clock.now_ms();
            hub.shared()
                .store
                .mark_router_failures_replayed(std::slice::from_ref(&row.id), now)
                .await?;
            Ok(ReplayedView {
                id: row.id,
                decision: Some(outcome.decision.as_str().to_owned()),
                reason: Some(outcome.reason.as_str().to_owned()),
                outbound: outcome.outbound,
                why: outcome.why,
            })
        }
        Err(e) => Ok(not(
            row.id,
            format!("not replayed: the router cannot take it now: {e}"),
        )),
    }
}

impl HubHandle {
    fn running_router(&self) -> Result<silk_router::Router, HubError> {
        self.shared().router.get().cloned().ok_or_else(|| {
            HubError::NoRouter("this hub runs no router (start it with `--router CONFIG`)".into())
        })
    }

    /// The router this hub runs: its inbounds and outbounds with their counters (backlogs
    /// read now), and how many failure records the store keeps.
    pub async fn router_view(&self) -> Result<RouterView, HubError> {
        let router = self.running_router()?;
        let failures = self
            .shared()
            .store
            .count_router_failures(&RouterFailureFilter::default())
            .await?;
        let inbounds = router.inbound_status();
        let outbounds = router.outbound_status("").await;
        Ok(RouterView {
            project: router.config().project.clone(),
            inbounds,
            outbounds,
            failures,
        })
    }

    /// The router's dry run for `request` (nothing pushed or recorded): what
    /// `POST /inbound/{name}/check_task/` answers.
    pub async fn router_check_task(
        &self,
        request: &CheckTaskRequest,
    ) -> Result<serde_json::Value, HubError> {
        let router = self.running_router()?;
        if router.config().inbound_index(&request.inbound).is_none() {
            return Err(HubError::BadRun(format!(
                "inbound: the router has no inbound `{}`",
                request.inbound
            )));
        }
        let answer = router.check_task(&request.inbound, &request.task).await;
        serde_json::to_value(&answer)
            .map_err(|e| HubError::BadRun(format!("task: the answer is not JSON: {e}")))
    }
}
