//! The hub's facade for the router it runs (`--router`): its status for the web UI's Router
//! page and `check_task` from there, the failure sink that keeps the router's failure
//! records in the store (design §6), listing them, replaying them, and their retention
//! (with the logs', in `logs::retention`).
//!
//! **Replay** submits a record's task to the router again, through the inbound it came from
//! (so its convert chain runs again) when that inbound still exists, else straight to the
//! rules. **Choice**: a task that ended with `retries_exhausted` or `limits` is submitted as
//! a new task — without `task_result`, `outbound` and the retry counters — since as it was
//! it would end the same way at once; every other task is submitted as it was recorded. A
//! record is marked replayed once the router took its task; a task that fails again is a
//! new record.

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
        .and_then(|(t, id)| Some((t.parse().ok()?, id.to_owned())))
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

    /// Submits the selected records' tasks to the router again (see the module doc).
    pub async fn replay_router_failures(
        &self,
        request: &ReplayRequest,
    ) -> Result<ReplayAnswer, HubError> {
        let router = self.running_router()?;
        let limit = request.limit.unwrap_or(REPLAY.0).clamp(1, REPLAY.1);
        let filter = RouterFailureFilter {
            ids: request.ids.clone(),
            inbound: request.inbound.clone(),
            outbound: request.outbound.clone(),
            reason: request.reason.clone(),
            since_ms: request.since,
            until_ms: request.until,
            replayed: (!request.again).then_some(false),
            limit: Some(limit),
            ..RouterFailureFilter::default()
        };
        let store = &self.shared().store;
        let mut rows = store.list_router_failures(&filter).await?;
        rows.reverse();
        let config = router.config();
        let mut answers = Vec::with_capacity(rows.len());
        let mut taken = Vec::new();
        for row in rows {
            let Some(mut task) = row.task else {
                answers.push(ReplayedView {
                    id: row.id,
                    decision: None,
                    reason: None,
                    outbound: None,
                    why: "not replayed: the message was not a JSON object (its text is in `raw`)"
                        .into(),
                });
                continue;
            };
            if matches!(row.reason.as_str(), "retries_exhausted" | "limits")
                && let Some(map) = task.as_object_mut()
            {
                for key in RETURNING_KEYS {
                    map.remove(key);
                }
            }
            let inbound = row
                .inbound
                .as_deref()
                .and_then(|name| config.inbound_index(name))
                .filter(|&i| !config.inbounds[i].disable);
            match router.submit(inbound, task).await {
                Ok(outcome) => {
                    taken.push(row.id.clone());
                    answers.push(ReplayedView {
                        id: row.id,
                        decision: Some(outcome.decision.as_str().to_owned()),
                        reason: Some(outcome.reason.as_str().to_owned()),
                        outbound: outcome.outbound,
                        why: outcome.why,
                    });
                }
                Err(e) => answers.push(ReplayedView {
                    id: row.id,
                    decision: None,
                    reason: None,
                    outbound: None,
                    why: format!("not replayed: the router cannot take it now: {e}"),
                }),
            }
        }
        let now = self.shared().clock.now_ms();
        store.mark_router_failures_replayed(&taken, now).await?;
        Ok(ReplayAnswer { replayed: answers })
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
            .map_err(|e| HubError::Store(format!("check_task answer: {e}")))
    }
}
