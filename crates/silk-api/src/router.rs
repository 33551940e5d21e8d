//! The router's failure records in the hub's store (design §6), when the router runs in the
//! hub (`--router`): `GET /api/v1/router/failures` lists them, `POST
//! /api/v1/router/failures/replay` submits their tasks to the router again. Admin only: the
//! router is the platform's, over every tenant.

use serde::{Deserialize, Serialize};

/// One task that ended as failed in the router.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RouterFailureView {
    /// Unique, time-ordered.
    pub id: String,
    /// When it failed, ms since the epoch.
    pub time_ms: u64,
    /// The router config's `project`.
    pub project: String,
    /// The inbound it came from (`null`: posted straight to the rules).
    pub inbound: Option<String>,
    /// The outbound it was for, if any.
    pub outbound: Option<String>,
    /// Why, as the router's counter label (`retries_exhausted`, `no_route`, `refused`,
    /// `convert_failed`, `limits`, `bad_task`).
    pub reason: String,
    /// Why, for people.
    pub why: String,
    /// The task, when it was a JSON object.
    #[schema(value_type = Option<Object>)]
    pub task: Option<serde_json::Value>,
    /// The message's text, when it was not a JSON object (`bad_task`).
    pub raw: Option<String>,
    /// When its task was last submitted again, if ever.
    pub replayed_ms: Option<u64>,
}

/// Which records `GET /api/v1/router/failures` lists, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RouterFailuresParams {
    /// Only those that came from this inbound.
    pub inbound: Option<String>,
    /// Only those of this outbound.
    pub outbound: Option<String>,
    /// Only this reason.
    pub reason: Option<String>,
    /// Only those at or after this time, ms since the epoch.
    pub since: Option<u64>,
    /// Only those before this time, ms since the epoch.
    pub until: Option<u64>,
    /// Only those replayed (`true`) or never replayed (`false`).
    pub replayed: Option<bool>,
    /// The `next` of the previous page.
    pub after: Option<String>,
    /// At most this many (default 100, at most 1000).
    pub limit: Option<u32>,
}

impl RouterFailuresParams {
    /// The query string's pairs (absent fields left out).
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        crate::push_param(&mut p, "inbound", self.inbound.as_ref());
        crate::push_param(&mut p, "outbound", self.outbound.as_ref());
        crate::push_param(&mut p, "reason", self.reason.as_ref());
        crate::push_param(&mut p, "since", self.since.as_ref());
        crate::push_param(&mut p, "until", self.until.as_ref());
        crate::push_param(&mut p, "replayed", self.replayed.as_ref());
        crate::push_param(&mut p, "after", self.after.as_ref());
        crate::push_param(&mut p, "limit", self.limit.as_ref());
        p
    }
}

/// A page of failure records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RouterFailuresPage {
    /// Newest first.
    pub failures: Vec<RouterFailureView>,
    /// How many records match the filter in all.
    pub total: u64,
    /// Pass as `after` for the next page; `null` on the last.
    pub next: Option<String>,
}

/// Which records `POST /api/v1/router/failures/replay` submits again: `ids`, or a filter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// These records (at most 10000; the filter applies besides).
    #[serde(default)]
    pub ids: Option<Vec<String>>,
    /// Only those that came from this inbound.
    #[serde(default)]
    pub inbound: Option<String>,
    /// Only those of this outbound.
    #[serde(default)]
    pub outbound: Option<String>,
    /// Only this reason.
    #[serde(default)]
    pub reason: Option<String>,
    /// Only those at or after this time, ms since the epoch.
    #[serde(default)]
    pub since: Option<u64>,
    /// Only those before this time, ms since the epoch.
    #[serde(default)]
    pub until: Option<u64>,
    /// Also records replayed before (default false: each record is replayed once unless
    /// asked again).
    #[serde(default)]
    pub again: bool,
    /// At most this many, oldest first (default: as many as `ids`, else 1000; at most
    /// 10000).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// What became of one replayed record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReplayedView {
    /// The record.
    pub id: String,
    /// `routed`, `succeeded`, `failed` or `rejected` (as `POST /task/` answers); `null`
    /// when it was not submitted.
    pub decision: Option<String>,
    /// The router's reason.
    pub reason: Option<String>,
    /// The outbound that took it.
    pub outbound: Option<String>,
    /// Why, for people; or why it was not submitted (a message that was not a task, the
    /// router could not take it now).
    pub why: String,
}

/// The answer of a replay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReplayAnswer {
    /// One per selected record, oldest first.
    pub replayed: Vec<ReplayedView>,
}

/// The router the hub runs, as `GET /api/v1/router` shows it (the web UI's Router page).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RouterView {
    /// The config's `project`.
    pub project: String,
    /// Every inbound, in config order.
    pub inbounds: Vec<InboundView>,
    /// Every outbound, in the order rules are tried.
    pub outbounds: Vec<OutboundView>,
    /// Failure records in the store.
    pub failures: u64,
}

/// One inbound of the router.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InboundView {
    pub name: String,
    /// `kafka.KafkaInbound`, `http.HttpInbound`, …
    pub class: String,
    /// Where tasks come from (no credentials).
    pub source: String,
    pub disabled: bool,
    pub threads: u64,
    /// Its convert chain's steps, described.
    pub converts: Vec<String>,
    /// Tasks received since the router started.
    pub received: u64,
    /// The decisions of the tasks it received, by reason.
    pub counters: std::collections::BTreeMap<String, u64>,
}

/// One outbound of the router.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OutboundView {
    pub name: String,
    pub class: String,
    /// Where tasks go (no credentials).
    pub target: String,
    pub disabled: bool,
    pub selectors: Vec<String>,
    /// Tasks waiting at the target (read now), `null` when the target cannot say.
    pub backlog: Option<u64>,
    /// Why the backlog could not be read.
    pub backlog_error: Option<String>,
    /// `max_lag` (`-1`: none).
    pub max_lag: i64,
    /// Whether `max_lag` holds the outbound now.
    pub holding: bool,
    /// Tasks waiting in the router's memory for it.
    pub queued: u64,
    pub pushed: u64,
    pub push_errors: u64,
    /// Pushes per second over the last 10 s.
    pub rate_per_second: f64,
    /// `token_scope`: the token bucket it shares.
    pub token_scope: Option<String>,
    /// `token_per_second` of its bucket.
    pub token_per_second: Option<f64>,
    pub retry_limits: i64,
    pub failback: Option<String>,
    /// Decisions that involved it, by reason.
    pub counters: std::collections::BTreeMap<String, u64>,
}

/// `POST /api/v1/router/check_task`: what the router would do with a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckTaskRequest {
    /// The inbound that receives it.
    pub inbound: String,
    /// The task (a JSON object).
    #[schema(value_type = Object)]
    pub task: serde_json::Value,
}
