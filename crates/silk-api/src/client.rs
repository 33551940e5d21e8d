//! The typed async HTTP client of the hub's API (`/api/v1`), over reqwest: one method per route,
//! answering the types of this crate ([`RunView`], [`Job`], …), and the raw calls under them
//! ([`Client::get`], [`Client::post`], …: the JSON answer as parsed and as sent, for `--json`
//! output and for tests that look at the wire).
//!
//! Errors are a [`ClientError`]: the hub's own error answer (status, code, message), or why no
//! answer came (unreachable, timed out), or an answer that is not the API's. The token is sent
//! as a bearer header marked sensitive, never shown in an error or a `Debug` print.

use crate::ErrorCode;
use crate::agents::AgentView;
use crate::alerts::{AlertRuleRequest, AlertRuleView, DeliveriesParams, DeliveryView};
use crate::jobs::{Job, JobSpec, TriggerRequest};
use crate::logs::{EventParams, LogPage, LogParams, LogSearchParams};
use crate::projects::{
    BuildLog, BuildLogParams, BuildRequest, NewProject, ProjectRequest, ProjectView, VersionView,
};
use crate::runs::{
    ItemsPage, ItemsParams, RequestsPage, RequestsParams, RequeueRequest, Requeued, RestartRequest,
    RunRequest, RunView, RunsParams,
};
use crate::tenants::{TenantRequest, TenantUsage, TenantView};
use crate::tokens::{NewToken, TokenRequest, TokenView};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::fmt;
use std::time::Duration;
use thiserror::Error;
use url::Url;

/// How long a request may wait for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a whole request may take by default (starting a run waits for the agents'
/// allocations).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// What can go wrong talking to the hub.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ClientError {
    /// No connection (refused, unknown host, reset, …).
    #[error("cannot reach the hub at {server}: {reason}")]
    Unreachable {
        /// The hub's address.
        server: String,
        /// The innermost cause.
        reason: String,
    },
    /// No answer in time.
    #[error("the hub at {server} did not answer within {} ms", after.as_millis())]
    Timeout {
        /// The hub's address.
        server: String,
        /// The time waited.
        after: Duration,
    },
    /// The hub refused the token (or wants one): HTTP 401.
    #[error("the hub at {server} refused the token: {message}")]
    Unauthorized {
        /// The hub's address.
        server: String,
        /// The hub's message.
        message: String,
    },
    /// The hub's own error answer.
    #[error("{message} ({code}, HTTP {status})")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The machine-readable code as sent (`allocation_failed`, `not_found`, …; see
        /// [`ClientError::code`]).
        code: String,
        /// What went wrong, for people.
        message: String,
    },
    /// An answer that is not what the API answers (wrong server, a proxy's error page, a body
    /// that is not the type the route answers, …).
    #[error("unexpected answer from {url} (HTTP {status}): {reason}")]
    Unexpected {
        /// The URL asked.
        url: String,
        /// The HTTP status.
        status: u16,
        /// What was wrong, with the beginning of the body.
        reason: String,
    },
    /// The client could not be made (a token with control characters, no TLS backend).
    #[error("{0}")]
    Setup(String),
}

impl ClientError {
    /// The API's error code of an error answer (`None` for a code this build does not know,
    /// and for errors that are not the hub's answer).
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Api { code, .. } => code.parse().ok(),
            ClientError::Unauthorized { .. } => Some(ErrorCode::Unauthorized),
            _ => None,
        }
    }

    /// The HTTP status of an answer (`None` when none came).
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } | ClientError::Unexpected { status, .. } => {
                Some(*status)
            }
            ClientError::Unauthorized { .. } => Some(401),
            _ => None,
        }
    }

    /// The message of the hub's error answer (`None` for errors that are not one).
    pub fn message(&self) -> Option<&str> {
        match self {
            ClientError::Api { message, .. } | ClientError::Unauthorized { message, .. } => {
                Some(message)
            }
            _ => None,
        }
    }

    /// The error answer's body as the hub sent it in substance (`{"code", "message"}`; `None`
    /// when no error answer came).
    pub fn body(&self) -> Option<Value> {
        match self {
            ClientError::Api { code, message, .. } => {
                Some(serde_json::json!({"code": code, "message": message}))
            }
            ClientError::Unauthorized { message, .. } => {
                Some(serde_json::json!({"code": "unauthorized", "message": message}))
            }
            _ => None,
        }
    }

    /// Whether the hub could not be reached at all (worth trying again later).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ClientError::Unreachable { .. } | ClientError::Timeout { .. }
        )
    }
}

/// A JSON answer of the hub: its status, parsed, and as sent (to print it with its key order).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The HTTP status (a success: errors are [`ClientError`]s).
    pub status: u16,
    /// The parsed JSON (`Null` for an empty body).
    pub value: Value,
    /// The body as sent (`null` for an empty body).
    pub text: String,
    /// The URL asked.
    pub url: String,
}

impl Answer {
    /// The answer as a `T`; `what` names it in the error when it does not fit (`"a run"`).
    pub fn parse<T: DeserializeOwned>(&self, what: &str) -> Result<T, ClientError> {
        T::deserialize(&self.value).map_err(|e| ClientError::Unexpected {
            url: self.url.clone(),
            status: self.status,
            reason: format!("not {what}: {e}"),
        })
    }
}

/// An HTTP client of the hub's API.
#[derive(Clone)]
pub struct Client {
    base: Url,
    http: reqwest::Client,
    token: Option<String>,
    tenant: Option<reqwest::header::HeaderValue>,
    timeout: Duration,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the token.
        f.debug_struct("Client")
            .field("base", &self.base.as_str())
            .field("token", &self.token.as_ref().map(|_| "***"))
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client of the hub at `base` (`http://HOST:PORT`, possibly with a path prefix),
    /// sending `token` as a bearer token if any.
    pub fn new(base: Url, token: Option<String>) -> Result<Self, ClientError> {
        if let Some(token) = &token
            && reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")).is_err()
        {
            return Err(ClientError::Setup(
                "the token is not valid in an HTTP header (it has control characters)".into(),
            ));
        }
        // No overall timeout here: ordinary requests set theirs, event streams run as long as
        // their run.
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("silk/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ClientError::Setup(format!("cannot create the HTTP client: {e}")))?;
        Ok(Self {
            base,
            http,
            token,
            tenant: None,
            timeout: DEFAULT_REQUEST_TIMEOUT,
        })
    }

    /// The client acting in `tenant` (header `X-Silk-Tenant`; an admin token's choice, any
    /// other token may name only its own tenant).
    pub fn with_tenant(mut self, tenant: &str) -> Result<Self, ClientError> {
        let value = reqwest::header::HeaderValue::from_str(tenant).map_err(|_| {
            ClientError::Setup(format!("tenant `{tenant}`: not valid in an HTTP header"))
        })?;
        self.tenant = Some(value);
        Ok(self)
    }

    /// The client with another time limit per request.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The hub's address as given (without a trailing slash).
    pub fn server(&self) -> String {
        self.base.as_str().trim_end_matches('/').to_owned()
    }

    /// The URL of `segments` under the base (each segment percent-encoded) with `query`.
    pub fn url(&self, segments: &[&str], query: &[(&str, String)]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        if !query.is_empty() {
            url.query_pairs_mut()
                .extend_pairs(query.iter().map(|(k, v)| (k, v.as_str())));
        }
        url
    }

    // --------------------------------------------------------------------------------------
    // Raw calls.

    /// `GET` → the JSON answer.
    pub async fn get(&self, segments: &[&str]) -> Result<Answer, ClientError> {
        self.get_with(segments, &[]).await
    }

    /// `GET` with a query string → the JSON answer.
    pub async fn get_with(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> Result<Answer, ClientError> {
        let url = self.url(segments, query);
        self.send(self.http.get(url.clone()), &url).await
    }

    /// `POST` a JSON body → the JSON answer.
    pub async fn post(&self, segments: &[&str], body: &Value) -> Result<Answer, ClientError> {
        let url = self.url(segments, &[]);
        self.send(with_json(self.http.post(url.clone()), body), &url)
            .await
    }

    /// `POST` a body as is (any bytes, any content type) → the JSON answer.
    pub async fn post_bytes(
        &self,
        segments: &[&str],
        content_type: &str,
        body: Vec<u8>,
    ) -> Result<Answer, ClientError> {
        let url = self.url(segments, &[]);
        let request = self
            .http
            .post(url.clone())
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body);
        self.send(request, &url).await
    }

    /// `PATCH` a JSON body → the JSON answer.
    pub async fn patch(&self, segments: &[&str], body: &Value) -> Result<Answer, ClientError> {
        self.send_json(reqwest::Method::PATCH, segments, body).await
    }

    /// `PUT` a JSON body → the JSON answer.
    pub async fn put(&self, segments: &[&str], body: &Value) -> Result<Answer, ClientError> {
        self.send_json(reqwest::Method::PUT, segments, body).await
    }

    async fn send_json(
        &self,
        method: reqwest::Method,
        segments: &[&str],
        body: &Value,
    ) -> Result<Answer, ClientError> {
        let url = self.url(segments, &[]);
        self.send(
            with_json(self.http.request(method, url.clone()), body),
            &url,
        )
        .await
    }

    /// `DELETE` → the JSON answer (`Null` for 204).
    pub async fn delete(&self, segments: &[&str]) -> Result<Answer, ClientError> {
        let url = self.url(segments, &[]);
        self.send(self.http.delete(url.clone()), &url).await
    }

    /// A call by method and path under the base (`/api/v1/runs?state=running`, as in the API's
    /// documentation), with an optional JSON body: for routes the typed calls do not cover and
    /// for looking at the wire.
    pub async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, ClientError> {
        let mut base = self.base.clone();
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        let url = base
            .join(path.trim_start_matches('/'))
            .map_err(|e| ClientError::Setup(format!("bad path `{path}`: {e}")))?;
        let request = self.http.request(method, url.clone());
        let request = match body {
            Some(body) => with_json(request, body),
            None => request,
        };
        self.send(request, &url).await
    }

    /// Opens an event stream (`text/event-stream`) at `segments` + `query`; the answer's body
    /// is read chunk by chunk by the caller.
    pub async fn stream(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> Result<reqwest::Response, ClientError> {
        let url = self.url(segments, query);
        let request = self
            .authorized(self.http.get(url.clone()))
            .header(reqwest::header::ACCEPT, "text/event-stream");
        let response = request.send().await.map_err(|e| self.transport(&e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = response.bytes().await.unwrap_or_default();
        Err(self.error_answer(status, &body, &url))
    }

    // --------------------------------------------------------------------------------------
    // Typed calls, one per route.

    /// `GET /api/v1/agents`.
    pub async fn agents(&self) -> Result<Vec<AgentView>, ClientError> {
        self.get(&["api", "v1", "agents"])
            .await?
            .parse("a list of agents")
    }

    /// `GET /api/v1/jobs`.
    pub async fn jobs(&self) -> Result<Vec<Job>, ClientError> {
        self.get(&["api", "v1", "jobs"])
            .await?
            .parse("a list of jobs")
    }

    /// `GET /api/v1/jobs/{id}` (an id or a name).
    pub async fn job(&self, id: &str) -> Result<Job, ClientError> {
        self.get(&["api", "v1", "jobs", id]).await?.parse("a job")
    }

    /// `POST /api/v1/jobs`.
    pub async fn create_job(&self, spec: &JobSpec) -> Result<Job, ClientError> {
        self.post(&["api", "v1", "jobs"], &to_json(spec)?)
            .await?
            .parse("a job")
    }

    /// `PATCH /api/v1/jobs/{id}` with a JSON merge patch.
    pub async fn patch_job(&self, id: &str, patch: &Value) -> Result<Job, ClientError> {
        self.patch(&["api", "v1", "jobs", id], patch)
            .await?
            .parse("a job")
    }

    /// `DELETE /api/v1/jobs/{id}`.
    pub async fn delete_job(&self, id: &str) -> Result<(), ClientError> {
        self.delete(&["api", "v1", "jobs", id]).await.map(drop)
    }

    /// `GET /api/v1/jobs/{id}/runs`, newest first.
    pub async fn job_runs(
        &self,
        id: &str,
        limit: Option<u32>,
    ) -> Result<Vec<RunView>, ClientError> {
        let query: Vec<(&str, String)> = limit
            .map(|l| ("limit", l.to_string()))
            .into_iter()
            .collect();
        self.get_with(&["api", "v1", "jobs", id, "runs"], &query)
            .await?
            .parse("a list of runs")
    }

    /// `POST /api/v1/jobs/{id}/runs`: a run of the job now.
    pub async fn trigger_job(
        &self,
        id: &str,
        trigger: &TriggerRequest,
    ) -> Result<RunView, ClientError> {
        self.post(&["api", "v1", "jobs", id, "runs"], &to_json(trigger)?)
            .await?
            .parse("a run")
    }

    /// `GET /api/v1/runs`, newest first.
    pub async fn runs(&self, params: &RunsParams) -> Result<Vec<RunView>, ClientError> {
        self.get_with(&["api", "v1", "runs"], &params.pairs())
            .await?
            .parse("a list of runs")
    }

    /// `POST /api/v1/runs`: an ad-hoc run.
    pub async fn start_run(&self, request: &RunRequest) -> Result<RunView, ClientError> {
        self.post(&["api", "v1", "runs"], &to_json(request)?)
            .await?
            .parse("a run")
    }

    /// `GET /api/v1/runs/{id}`.
    pub async fn run(&self, id: &str) -> Result<RunView, ClientError> {
        self.get(&["api", "v1", "runs", id]).await?.parse("a run")
    }

    /// `POST /api/v1/runs/{id}/pause`.
    pub async fn pause_run(&self, id: &str) -> Result<RunView, ClientError> {
        self.run_action(id, "pause").await
    }

    /// `POST /api/v1/runs/{id}/resume`.
    pub async fn resume_run(&self, id: &str) -> Result<RunView, ClientError> {
        self.run_action(id, "resume").await
    }

    /// `POST /api/v1/runs/{id}/cancel`; answers once the run is recorded as cancelled.
    pub async fn cancel_run(&self, id: &str) -> Result<RunView, ClientError> {
        self.run_action(id, "cancel").await
    }

    async fn run_action(&self, id: &str, action: &str) -> Result<RunView, ClientError> {
        self.post(&["api", "v1", "runs", id, action], &Value::Null)
            .await?
            .parse("a run")
    }

    /// `POST /api/v1/runs/{id}/restart`: the new run.
    pub async fn restart_run(
        &self,
        id: &str,
        request: &RestartRequest,
    ) -> Result<RunView, ClientError> {
        self.post(&["api", "v1", "runs", id, "restart"], &to_json(request)?)
            .await?
            .parse("a run")
    }

    /// `GET /api/v1/runs/{id}/logs`.
    pub async fn logs(&self, id: &str, params: &LogParams) -> Result<LogPage, ClientError> {
        self.get_with(&["api", "v1", "runs", id, "logs"], &params.pairs())
            .await?
            .parse("a page of log lines")
    }

    /// `GET /api/v1/logs`: log lines of every run, newest first.
    pub async fn search_logs(&self, params: &LogSearchParams) -> Result<LogPage, ClientError> {
        self.get_with(&["api", "v1", "logs"], &params.pairs())
            .await?
            .parse("a page of log lines")
    }

    /// `GET /api/v1/runs/{id}/events`: the event stream, read by the caller.
    pub async fn events(
        &self,
        id: &str,
        params: &EventParams,
    ) -> Result<reqwest::Response, ClientError> {
        self.stream(&["api", "v1", "runs", id, "events"], &params.pairs())
            .await
    }

    /// `GET /api/v1/runs/{id}/items`: a page of the run's items, in the order written.
    pub async fn items(&self, id: &str, params: &ItemsParams) -> Result<ItemsPage, ClientError> {
        self.get_with(&["api", "v1", "runs", id, "items"], &params.pairs())
            .await?
            .parse("a page of items")
    }

    /// `GET /api/v1/runs/{id}/requests`: a page of the run's finished requests (the archive).
    pub async fn run_requests(
        &self,
        id: &str,
        params: &RequestsParams,
    ) -> Result<RequestsPage, ClientError> {
        self.get_with(&["api", "v1", "runs", id, "requests"], &params.pairs())
            .await?
            .parse("a page of finished requests")
    }

    /// `POST /api/v1/runs/{id}/requests/requeue`: queue finished requests again.
    pub async fn requeue_requests(
        &self,
        id: &str,
        ask: &RequeueRequest,
    ) -> Result<Requeued, ClientError> {
        self.post(
            &["api", "v1", "runs", id, "requests", "requeue"],
            &to_json(ask)?,
        )
        .await?
        .parse("what was queued again")
    }

    /// Every item of a run written so far, page after page from the start.
    pub async fn all_items(&self, id: &str) -> Result<Vec<Value>, ClientError> {
        let mut items = Vec::new();
        let mut params = ItemsParams {
            cursor: Some(0),
            limit: Some(1000),
        };
        loop {
            let page = self.items(id, &params).await?;
            let empty = page.items.is_empty();
            items.extend(page.items);
            if page.done || empty {
                return Ok(items);
            }
            params.cursor = Some(page.next_cursor);
        }
    }

    /// `POST /api/v1/agents/{id}/shutdown` (admin): the agent stops.
    pub async fn shutdown_agent(&self, id: &str) -> Result<AgentView, ClientError> {
        self.post(&["api", "v1", "agents", id, "shutdown"], &Value::Null)
            .await?
            .parse("an agent")
    }

    /// `POST /api/v1/agents/{id}/drain` (admin): the agent takes no new work and finishes the
    /// runs that hold it.
    pub async fn drain_agent(&self, id: &str) -> Result<AgentView, ClientError> {
        self.post(&["api", "v1", "agents", id, "drain"], &Value::Null)
            .await?
            .parse("an agent")
    }

    /// `DELETE /api/v1/agents/{id}/drain` (admin): the agent takes new work again.
    pub async fn undrain_agent(&self, id: &str) -> Result<AgentView, ClientError> {
        self.delete(&["api", "v1", "agents", id, "drain"])
            .await?
            .parse("an agent")
    }

    /// `GET /api/v1/tenants`: every tenant (admin), or the caller's.
    pub async fn tenants(&self) -> Result<Vec<TenantView>, ClientError> {
        self.get(&["api", "v1", "tenants"])
            .await?
            .parse("a list of tenants")
    }

    /// `POST /api/v1/tenants` (admin).
    pub async fn create_tenant(&self, request: &TenantRequest) -> Result<TenantView, ClientError> {
        self.post(&["api", "v1", "tenants"], &to_json(request)?)
            .await?
            .parse("a tenant")
    }

    /// `PATCH /api/v1/tenants/{name}` (admin): a merge patch of `description`, `pools`,
    /// `quotas`.
    pub async fn update_tenant(
        &self,
        name: &str,
        patch: &Value,
    ) -> Result<TenantView, ClientError> {
        self.patch(&["api", "v1", "tenants", name], patch)
            .await?
            .parse("a tenant")
    }

    /// `GET /api/v1/tenants/{name}/usage`: what the tenant used today and its quotas.
    pub async fn tenant_usage(&self, name: &str) -> Result<TenantUsage, ClientError> {
        self.get(&["api", "v1", "tenants", name, "usage"])
            .await?
            .parse("a tenant's usage")
    }

    /// `DELETE /api/v1/tenants/{name}` (admin): only a tenant that owns nothing.
    pub async fn delete_tenant(&self, name: &str) -> Result<(), ClientError> {
        self.delete(&["api", "v1", "tenants", name]).await.map(drop)
    }

    /// `GET /api/v1/tokens` (admin, or an owner: its tenant's).
    pub async fn tokens(&self) -> Result<Vec<TokenView>, ClientError> {
        self.get(&["api", "v1", "tokens"])
            .await?
            .parse("a list of tokens")
    }

    /// `POST /api/v1/tokens` (admin, or an owner in its tenant): the only answer that holds the token's secret.
    pub async fn create_token(&self, request: &TokenRequest) -> Result<NewToken, ClientError> {
        self.post(&["api", "v1", "tokens"], &to_json(request)?)
            .await?
            .parse("a new token")
    }

    /// `DELETE /api/v1/tokens/{id}` (admin, or an owner: its tenant's).
    pub async fn delete_token(&self, id: &str) -> Result<(), ClientError> {
        self.delete(&["api", "v1", "tokens", id]).await.map(drop)
    }

    /// `GET /api/v1/alerts/rules`.
    pub async fn alert_rules(&self) -> Result<Vec<AlertRuleView>, ClientError> {
        self.get(&["api", "v1", "alerts", "rules"])
            .await?
            .parse("a list of alert rules")
    }

    /// `GET /api/v1/alerts/rules/{name}`.
    pub async fn alert_rule(&self, name: &str) -> Result<AlertRuleView, ClientError> {
        self.get(&["api", "v1", "alerts", "rules", name])
            .await?
            .parse("an alert rule")
    }

    /// `POST /api/v1/alerts/rules` (admin).
    pub async fn create_alert_rule(
        &self,
        request: &AlertRuleRequest,
    ) -> Result<AlertRuleView, ClientError> {
        self.post(&["api", "v1", "alerts", "rules"], &to_json(request)?)
            .await?
            .parse("an alert rule")
    }

    /// `PUT /api/v1/alerts/rules/{name}` (admin): replaces the rule (secrets left out are
    /// kept).
    pub async fn put_alert_rule(
        &self,
        request: &AlertRuleRequest,
    ) -> Result<AlertRuleView, ClientError> {
        let name = request.name.clone();
        self.put(&["api", "v1", "alerts", "rules", &name], &to_json(request)?)
            .await?
            .parse("an alert rule")
    }

    /// `DELETE /api/v1/alerts/rules/{name}` (admin).
    pub async fn delete_alert_rule(&self, name: &str) -> Result<(), ClientError> {
        self.delete(&["api", "v1", "alerts", "rules", name])
            .await
            .map(drop)
    }

    /// `POST /api/v1/alerts/rules/{name}/test` (admin): queues a `test` delivery.
    pub async fn test_alert_rule(&self, name: &str) -> Result<DeliveryView, ClientError> {
        self.post(
            &["api", "v1", "alerts", "rules", name, "test"],
            &Value::Null,
        )
        .await?
        .parse("a delivery")
    }

    /// `GET /api/v1/alerts/deliveries`, newest first.
    pub async fn alert_deliveries(
        &self,
        params: &DeliveriesParams,
    ) -> Result<Vec<DeliveryView>, ClientError> {
        self.get_with(&["api", "v1", "alerts", "deliveries"], &params.pairs())
            .await?
            .parse("a list of deliveries")
    }

    /// `GET /api/v1/router/failures` (admin): a page of the router's failure records.
    pub async fn router_failures(
        &self,
        params: &crate::router::RouterFailuresParams,
    ) -> Result<crate::router::RouterFailuresPage, ClientError> {
        self.get_with(&["api", "v1", "router", "failures"], &params.pairs())
            .await?
            .parse("a page of failure records")
    }

    /// `POST /api/v1/router/failures/replay` (admin).
    pub async fn replay_router_failures(
        &self,
        request: &crate::router::ReplayRequest,
    ) -> Result<crate::router::ReplayAnswer, ClientError> {
        self.post(
            &["api", "v1", "router", "failures", "replay"],
            &to_json(request)?,
        )
        .await?
        .parse("a replay answer")
    }

    /// `GET /api/v1/projects`.
    pub async fn projects(&self) -> Result<Vec<ProjectView>, ClientError> {
        self.get(&["api", "v1", "projects"])
            .await?
            .parse("a list of projects")
    }

    /// `GET /api/v1/projects/{name}`.
    pub async fn project(&self, name: &str) -> Result<ProjectView, ClientError> {
        self.get(&["api", "v1", "projects", name])
            .await?
            .parse("a project")
    }

    /// `POST /api/v1/projects` (admin): the only answer that holds the webhook secret.
    pub async fn create_project(
        &self,
        request: &ProjectRequest,
    ) -> Result<NewProject, ClientError> {
        self.post(&["api", "v1", "projects"], &to_json(request)?)
            .await?
            .parse("a new project")
    }

    /// `PATCH /api/v1/projects/{name}` (admin) with a JSON merge patch.
    pub async fn patch_project(
        &self,
        name: &str,
        patch: &Value,
    ) -> Result<ProjectView, ClientError> {
        self.patch(&["api", "v1", "projects", name], patch)
            .await?
            .parse("a project")
    }

    /// `DELETE /api/v1/projects/{name}` (admin).
    pub async fn delete_project(&self, name: &str) -> Result<(), ClientError> {
        self.delete(&["api", "v1", "projects", name])
            .await
            .map(drop)
    }

    /// `POST /api/v1/projects/{name}/builds`: the queued version.
    pub async fn build_project(
        &self,
        name: &str,
        request: &BuildRequest,
    ) -> Result<VersionView, ClientError> {
        self.post(
            &["api", "v1", "projects", name, "builds"],
            &to_json(request)?,
        )
        .await?
        .parse("a version")
    }

    /// `GET /api/v1/projects/{name}/versions`, newest first.
    pub async fn versions(&self, name: &str) -> Result<Vec<VersionView>, ClientError> {
        self.get(&["api", "v1", "projects", name, "versions"])
            .await?
            .parse("a list of versions")
    }

    /// `GET /api/v1/projects/{name}/versions/{version}`.
    pub async fn version(&self, name: &str, version: &str) -> Result<VersionView, ClientError> {
        self.get(&["api", "v1", "projects", name, "versions", version])
            .await?
            .parse("a version")
    }

    /// `DELETE /api/v1/projects/{name}/versions/{version}`.
    pub async fn delete_version(&self, name: &str, version: &str) -> Result<(), ClientError> {
        self.delete(&["api", "v1", "projects", name, "versions", version])
            .await
            .map(drop)
    }

    /// `GET /api/v1/projects/{name}/versions/{version}/log`: a page of the build log.
    pub async fn build_log(
        &self,
        name: &str,
        version: &str,
        params: &BuildLogParams,
    ) -> Result<BuildLog, ClientError> {
        self.get_with(
            &["api", "v1", "projects", name, "versions", version, "log"],
            &params.pairs(),
        )
        .await?
        .parse("a build log")
    }

    /// `GET /api/v1/projects/{name}/versions/{version}/log` as server-sent events (`log`,
    /// `version`, `end`), read by the caller.
    pub async fn follow_build_log(
        &self,
        name: &str,
        version: &str,
        params: &BuildLogParams,
    ) -> Result<reqwest::Response, ClientError> {
        self.stream(
            &["api", "v1", "projects", name, "versions", version, "log"],
            &params.pairs(),
        )
        .await
    }

    /// `GET /api/v1/projects/{name}/versions/{version}/artifact`: the packed directory, read
    /// by the caller (`X-Silk-Sha256` is its SHA-256).
    pub async fn artifact(
        &self,
        name: &str,
        version: &str,
    ) -> Result<reqwest::Response, ClientError> {
        self.stream(
            &[
                "api", "v1", "projects", name, "versions", version, "artifact",
            ],
            &[],
        )
        .await
    }

    // --------------------------------------------------------------------------------------
    // Under the calls.

    /// The request with the token (marked sensitive: never logged).
    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let request = match &self.tenant {
            Some(tenant) => request.header(crate::tenants::TENANT_HEADER, tenant.clone()),
            None => request,
        };
        let Some(token) = &self.token else {
            return request;
        };
        match reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")) {
            Ok(mut value) => {
                value.set_sensitive(true);
                request.header(reqwest::header::AUTHORIZATION, value)
            }
            // Checked in `new`.
            Err(_) => request,
        }
    }

    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        url: &Url,
    ) -> Result<Answer, ClientError> {
        let request = self
            .authorized(request)
            .timeout(self.timeout)
            .header(reqwest::header::ACCEPT, "application/json");
        let response = request.send().await.map_err(|e| self.transport(&e))?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| self.transport(&e))?;
        if !status.is_success() {
            return Err(self.error_answer(status, &body, url));
        }
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Answer {
                status: status.as_u16(),
                value: Value::Null,
                text: "null".into(),
                url: url.to_string(),
            });
        }
        let value = serde_json::from_slice(&body).map_err(|e| ClientError::Unexpected {
            url: url.to_string(),
            status: status.as_u16(),
            reason: format!("not JSON ({e}): {}", excerpt(&body)),
        })?;
        Ok(Answer {
            status: status.as_u16(),
            value,
            // Valid JSON is UTF-8.
            text: String::from_utf8_lossy(&body).into_owned(),
            url: url.to_string(),
        })
    }

    /// The error of a non-success answer.
    pub fn error_answer(&self, status: reqwest::StatusCode, body: &[u8], url: &Url) -> ClientError {
        let error: Option<Value> = serde_json::from_slice(body).ok();
        let field = |name: &str| {
            error
                .as_ref()
                .and_then(|e| e.get(name))
                .and_then(Value::as_str)
                .map(|s| self.redact(s))
        };
        let (code, message) = (field("code"), field("message"));
        if status == reqwest::StatusCode::UNAUTHORIZED {
            return ClientError::Unauthorized {
                server: self.server(),
                message: message
                    .or(code)
                    .unwrap_or_else(|| "HTTP 401 unauthorized".into()),
            };
        }
        match (code, message) {
            (Some(code), message) => ClientError::Api {
                status: status.as_u16(),
                message: message.unwrap_or_else(|| code.clone()),
                code,
            },
            (None, Some(message)) => ClientError::Api {
                status: status.as_u16(),
                code: status
                    .canonical_reason()
                    .unwrap_or("error")
                    .to_lowercase()
                    .replace(' ', "_"),
                message,
            },
            (None, None) => ClientError::Unexpected {
                url: url.to_string(),
                status: status.as_u16(),
                reason: if body.is_empty() {
                    "empty body".into()
                } else {
                    self.redact(&excerpt(body))
                },
            },
        }
    }

    /// `text` with the token, should it appear, masked.
    fn redact(&self, text: &str) -> String {
        match &self.token {
            Some(token) if text.contains(token.as_str()) => text.replace(token.as_str(), "***"),
            _ => text.to_owned(),
        }
    }

    fn transport(&self, e: &reqwest::Error) -> ClientError {
        if e.is_timeout() {
            return ClientError::Timeout {
                server: self.server(),
                after: self.timeout,
            };
        }
        // The innermost cause says it best ("Connection refused (os error 111)").
        let mut reason = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            reason = s.to_string();
            source = s.source();
        }
        ClientError::Unreachable {
            server: self.server(),
            reason,
        }
    }
}

fn to_json<T: Serialize>(body: &T) -> Result<Value, ClientError> {
    serde_json::to_value(body)
        .map_err(|e| ClientError::Setup(format!("cannot write the request body: {e}")))
}

fn with_json(request: reqwest::RequestBuilder, body: &Value) -> reqwest::RequestBuilder {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    request
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(bytes)
}

/// The beginning of a body, on one line.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > 200 {
        one_line = one_line.chars().take(200).collect::<String>() + "…";
    }
    one_line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_a_path_prefix_and_encode_ids_and_queries() {
        let c = Client::new(Url::parse("http://h:1/silk/").unwrap(), None).unwrap();
        assert_eq!(
            c.url(&["api", "v1", "runs", "a/b"], &[]).as_str(),
            "http://h:1/silk/api/v1/runs/a%2Fb"
        );
        assert_eq!(
            c.url(&["api", "v1", "runs"], &[("job", "a b&c".into())])
                .as_str(),
            "http://h:1/silk/api/v1/runs?job=a+b%26c"
        );
        assert_eq!(c.server(), "http://h:1/silk");
    }

    #[tokio::test]
    async fn a_path_is_asked_under_the_base_with_its_query() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut buf).await.unwrap();
                assert!(n > 0, "the request ended early");
                head.extend_from_slice(&buf[..n]);
            }
            let body = br#"{"code":"not_found","message":"no run x"}"#;
            let answer = format!(
                "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            socket.write_all(answer.as_bytes()).await.unwrap();
            socket.write_all(body).await.unwrap();
            String::from_utf8_lossy(&head).into_owned()
        });
        let base = Url::parse(&format!("http://{addr}/silk")).unwrap();
        let c = Client::new(base, Some("silk_t".into())).unwrap();
        let e = c
            .request(reqwest::Method::GET, "/api/v1/runs/x?logs=true", None)
            .await
            .unwrap_err();
        assert_eq!(
            (e.code(), e.status()),
            (Some(ErrorCode::NotFound), Some(404))
        );
        assert_eq!(
            e.body(),
            Some(serde_json::json!({"code": "not_found", "message": "no run x"}))
        );
        let head = server.await.unwrap();
        assert!(
            head.starts_with("GET /silk/api/v1/runs/x?logs=true HTTP/1.1\r\n"),
            "{head}"
        );
        assert!(
            head.to_lowercase().contains("authorization: bearer silk_t"),
            "{head}"
        );
    }

    #[test]
    fn a_token_with_control_characters_is_refused_without_showing_it() {
        let e = Client::new(Url::parse("http://h:1").unwrap(), Some("sec\nret".into()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("control characters") && !e.contains("sec"),
            "{e}"
        );
    }

    #[test]
    fn error_answers_are_typed_and_never_echo_the_token() {
        let c = Client::new(
            Url::parse("http://h:1").unwrap(),
            Some("silk_x_secret".into()),
        )
        .unwrap();
        let url = Url::parse("http://h:1/api/v1/runs").unwrap();
        let e = c.error_answer(
            reqwest::StatusCode::UNAUTHORIZED,
            br#"{"code":"unauthorized","message":"bad token silk_x_secret"}"#,
            &url,
        );
        assert!(matches!(e, ClientError::Unauthorized { .. }));
        assert!(!e.to_string().contains("silk_x_secret"), "{e}");
        let e = c.error_answer(
            reqwest::StatusCode::CONFLICT,
            br#"{"code":"allocation_failed","message":"no live agent"}"#,
            &url,
        );
        assert_eq!(e.to_string(), "no live agent (allocation_failed, HTTP 409)");
        assert_eq!(
            (e.code(), e.status(), e.message()),
            (
                Some(ErrorCode::AllocationFailed),
                Some(409),
                Some("no live agent")
            )
        );
        let e = c.error_answer(reqwest::StatusCode::NOT_FOUND, b"{}", &url);
        assert!(matches!(e, ClientError::Unexpected { status: 404, .. }));
        assert_eq!(e.code(), None);
        assert!(!format!("{c:?}").contains("secret"));
    }

    #[test]
    fn an_answer_of_the_wrong_shape_names_what_was_expected() {
        let answer = Answer {
            status: 200,
            value: serde_json::json!({"id": 3}),
            text: r#"{"id":3}"#.into(),
            url: "http://h:1/api/v1/runs/x".into(),
        };
        let e = answer.parse::<RunView>("a run").unwrap_err().to_string();
        assert!(
            e.starts_with("unexpected answer from http://h:1/api/v1/runs/x (HTTP 200): not a run:"),
            "{e}"
        );
    }
}
