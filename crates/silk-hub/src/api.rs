//! The hub's HTTP API (JSON) under `/api/v1`, with the web UI, health and metrics.
//!
//! The routes, their parameters and their bodies are declared once, on the handlers
//! (`#[utoipa::path]`), and both the axum router and the OpenAPI document
//! (`GET /api/v1/openapi.json`) are built from those declarations, so the document cannot
//! drift from the code. `docs/api.md` is the guide.
//!
//! | method + path | answer |
//! |---|---|
//! | `GET /healthz` | `200 ok` while the process serves |
//! | `GET /readyz` | `200 ready` when the store answers and the bus subscriptions are open; `503` with the reason otherwise |
//! | `GET /metrics` | Prometheus text: agents, runs, per-run counters, log lines |
//! | `GET /api/v1/openapi.json` | the OpenAPI 3.1 document |
//! | `GET /api/v1/agents` | `[AgentView]` |
//! | `GET /api/v1/pools` | the declared pools: agents wanted, alive, deficit, scale command's state → `[PoolView]` |
//! | `POST /api/v1/agents/{id}/shutdown` | the agent stops (admin) → `202 AgentView` |
//! | `POST, DELETE /api/v1/agents/{id}/drain` | drain the agent: no new work, it finishes the runs that hold it; end the drain (admin) → `AgentView` |
//! | `GET, POST /api/v1/jobs` | `[Job]`; create from `JobSpec` → `201 Job` (`409 conflict` on a taken name) |
//! | `GET, PATCH, DELETE /api/v1/jobs/{id}` | `Job`; a JSON merge patch → `Job`; `204` |
//! | `GET, POST /api/v1/jobs/{id}/runs` | the job's runs, newest first; trigger (`{"args": {…}}`) → `201 RunView` |
//! | `GET, POST /api/v1/runs` | runs, newest first (`?job=&state=&limit=`); an ad-hoc `RunRequest` → `201 RunView` |
//! | `GET /api/v1/runs/{id}` | `RunView` |
//! | `POST /api/v1/runs/{id}/pause`, `/resume`, `/cancel` | `RunView`; `409 wrong_state` when it does not apply |
//! | `POST /api/v1/runs/{id}/restart` | `{"keep_frontier": bool}` → `201 RunView` of the new run |
//! | `GET /api/v1/runs/{id}/logs` | `{lines, next}`: `?level=&q=&since_ms=&until_ms=&after=&before=&limit=&order=` |
//! | `GET /api/v1/logs` | `{lines, next}` of every run, newest first: `?job=&run=&level=&q=&since_ms=&until_ms=&before=&limit=` |
//! | `GET /api/v1/runs/{id}/events` | server-sent events: `run` (RunView), `log` (LogLine), `end` |
//! | `GET /api/v1/runs/{id}/items` | `{items, next_cursor, done}`: `?cursor=&limit=` |
//! | `GET /api/v1/runs/{id}/requests` | the run's finished requests (the archive) → `{requests, counts, next}`: `?outcome=&error_code=&status=&requeued=&after=&limit=` |
//! | `POST /api/v1/runs/{id}/requests/requeue` | queue finished requests again (`{outcome, error_code, status, keys, limit}`, failed by default) → `{requeued, run, refused}` |
//! | `GET, POST /api/v1/tokens`, `DELETE /api/v1/tokens/{id}` | the tenant's tokens (owner or admin) |
//! | `GET, POST /api/v1/tenants`, `GET, PATCH, DELETE /api/v1/tenants/{name}` | tenants, their pool grants and quotas (admin; others see their own) |
//! | `GET /api/v1/tenants/{name}/usage` | what a tenant used today and its quotas (admin; others their own) |
//! | `/api/v1/projects…`, `POST /api/v1/webhooks/{name}` | projects, versions, builds, webhooks: see `api::projects` |
//! | `/api/v1/alerts/rules…`, `GET /api/v1/alerts/deliveries` | alert rules and their deliveries: see `api::alerts` |
//! | `GET /api/v1/router`, `POST /api/v1/router/check_task`, `GET /api/v1/router/failures`, `POST /api/v1/router/failures/replay` | the router the hub runs (`--router`) and its failure records: see `api::router` |
//!
//! Errors are `{"code": "...", "message": "..."}`: `400 bad_request`, `401 unauthorized`,
//! `403 forbidden`, `404 not_found`, `409 conflict` / `wrong_state` / `allocation_failed`,
//! `413 too_large` (bodies over [`MAX_BODY_BYTES`]), `503 bus` / `shutting_down` /
//! `not_ready`, `500` otherwise (its message names an incident id, never the detail: that
//! goes to the hub's log).
//!
//! Auth: every `/api/v1` route but the OpenAPI document needs `Authorization: Bearer
//! TOKEN` unless the API is built with [`ApiOptions::auth`] false (`--no-auth`, loopback
//! only). The web UI, `/healthz`, `/readyz` and `/metrics` are public.
//!
//! Tenants: a request acts in its token's tenant (an admin's: the one `X-Silk-Tenant`
//! names); every id a route takes is looked up through that tenant, and another tenant's
//! answers `404` like a missing one. A `viewer` token may only GET.

mod alerts;
mod projects;
mod router;

use crate::auth::{Principal, Role};
use crate::error::HubError;
use crate::hub::{HubHandle, RunQuery};
use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use silk_api::ErrorCode;
use silk_api::agents::AgentView;
use silk_api::jobs::{Job, JobSpec, TriggerRequest};
use silk_api::logs::{EventParams, LogLineView, LogPage, LogParams, LogSearchParams};
use silk_api::programs::{
    AckBatch, Acked, EnqueueBatch, Enqueued, FetchAsk, Fetched, ItemsAdded, ItemsBatch, LeaseAsk,
    Leases,
};
use silk_api::runs::{
    ItemsPage, ItemsParams, RequestsPage, RequestsParams, RequeueRequest, Requeued, RestartRequest,
    RunRequest, RunState, RunView, RunsParams,
};
use silk_api::tenants::{TenantRequest, TenantUsage, TenantView};
use silk_api::tokens::{NewToken, TokenRequest, TokenView};
use silk_core::RunId;
use silk_store::{Level, LogQuery};
use std::convert::Infallible;
use std::fmt::Write as _;
use std::time::Duration;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// How the API is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiOptions {
    /// Whether `/api/v1` needs a bearer token.
    pub auth: bool,
}

impl Default for ApiOptions {
    fn default() -> Self {
        Self { auth: true }
    }
}

/// An API error answer: the shared body ([`silk_api::ApiError`]), whose code (shared with the
/// router) decides the status.
#[derive(Debug)]
pub struct ApiError(silk_api::ApiError);

impl ApiError {
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self(silk_api::ApiError::new(code, message))
    }

    fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.0.code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

impl From<HubError> for ApiError {
    fn from(e: HubError) -> Self {
        let code = e.code();
        if code.is_server_error() {
            return internal_error(code, &e);
        }
        ApiError::new(code, e.to_string())
    }
}

/// A `500`: the detail (a store error, a path in the data dir) goes to the hub's log under
/// an incident id, and the answer says only the code and that id.
fn internal_error(code: ErrorCode, detail: &dyn std::fmt::Display) -> ApiError {
    let incident = uuid::Uuid::now_v7().simple().to_string();
    tracing::error!(incident = %incident, code = %code, error = %detail, "request failed inside the hub");
    ApiError::new(
        code,
        format!("internal error in the hub ({code}); the hub's log has it as incident {incident}"),
    )
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut response = (status, Json(&self.0)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"silk\""),
            );
        }
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            // The rest of the body was not read: the connection is closed after the answer,
            // and saying so keeps clients from sending their next request on it.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Silk hub API",
        description = "The control plane of Silk: jobs, runs, logs, items, agents, tokens."
    ),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    tags((name = "silk"))
)]
struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The API routes that need a token, those that do not (webhooks: their signature is the
/// authentication), and the OpenAPI document of both, from the same declarations.
fn api_routes() -> (
    Router<HubHandle>,
    Router<HubHandle>,
    utoipa::openapi::OpenApi,
) {
    let (authed, mut doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(list_agents))
        .routes(routes!(list_pools))
        .routes(routes!(shutdown_agent))
        .routes(routes!(drain_agent, undrain_agent))
        .routes(routes!(list_jobs, create_job))
        .routes(routes!(get_job, patch_job, delete_job))
        .routes(routes!(job_runs, trigger_job))
        .routes(routes!(list_runs, submit_run))
        .routes(routes!(get_run))
        .routes(routes!(pause_run))
        .routes(routes!(resume_run))
        .routes(routes!(cancel_run))
        .routes(routes!(restart_run))
        .routes(routes!(run_logs))
        .routes(routes!(search_logs))
        .routes(routes!(run_events))
        .routes(routes!(run_items, push_run_items))
        .routes(routes!(list_run_requests, enqueue_run_requests))
        .routes(routes!(requeue_run_requests))
        .routes(routes!(lease_run_requests))
        .routes(routes!(ack_run_requests))
        .routes(routes!(fetch_for_run))
        .routes(routes!(list_tokens, create_token))
        .routes(routes!(delete_token))
        .routes(routes!(list_tenants, create_tenant))
        .routes(routes!(get_tenant, patch_tenant, delete_tenant))
        .routes(routes!(get_tenant_usage))
        .merge(projects::routes())
        .merge(alerts::routes())
        .merge(router::routes())
        .split_for_parts();
    let (public, public_doc) = projects::public_routes().split_for_parts();
    doc.merge(public_doc);
    (authed, public, doc)
}

/// The OpenAPI document of the API.
pub fn openapi() -> utoipa::openapi::OpenApi {
    api_routes().2
}

impl HubHandle {
    /// The HTTP app (API with bearer-token auth, web UI, health, metrics; see `api`).
    pub fn router(&self) -> axum::Router {
        router(self.clone(), ApiOptions::default())
    }

    /// The HTTP app with `options` (e.g. without auth).
    pub fn router_with(&self, options: ApiOptions) -> axum::Router {
        router(self.clone(), options)
    }
}

/// The whole HTTP app: API (with auth per `options`), UI, health, metrics.
pub(crate) fn router(hub: HubHandle, options: ApiOptions) -> Router {
    let (api, public, doc) = api_routes();
    let doc_json = doc.to_pretty_json().unwrap_or_else(|_| "{}".into());
    let api = api
        .layer(axum::middleware::from_fn_with_state(
            (hub.clone(), options),
            authenticate,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES));
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route(
            "/api/v1/openapi.json",
            get(move || async move {
                (
                    [(header::CONTENT_TYPE, "application/json")],
                    doc_json.clone(),
                )
            }),
        )
        .merge(api)
        .merge(public.layer(axum::extract::DefaultBodyLimit::max(
            projects::MAX_WEBHOOK_BYTES,
        )))
        .fallback(|| async { ApiError::new(ErrorCode::NotFound, "no such route") })
        .with_state(hub)
        .merge(crate::ui::routes())
        .merge(crate::sdk::routes())
}

/// Checks the bearer token of `/api/v1` requests.
async fn authenticate(
    State((hub, options)): State<(HubHandle, ApiOptions)>,
    mut request: Request,
    next: Next,
) -> Response {
    if !options.auth {
        // Without tokens, any page a browser on this machine opens could send requests
        // here: state-changing ones are taken only from this hub's own pages (or from
        // clients that are not browsers, which send no `Origin`).
        if let Some(why) = cross_site(&request) {
            tracing::warn!(method = %request.method(), path = %request.uri().path(), "{why}");
            return ApiError::new(ErrorCode::Forbidden, why).into_response();
        }
        let asked = asked_tenant(&request);
        return match act_in_tenant(&hub, Principal::local_admin(), asked).await {
            Ok(principal) => {
                request.extensions_mut().insert(principal);
                next.run(request).await
            }
            Err(e) => e.into_response(),
        };
    }
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let Some(token) = header.and_then(|h| {
        h.strip_prefix("Bearer ")
            .or_else(|| h.strip_prefix("bearer "))
    }) else {
        return ApiError::new(
            ErrorCode::Unauthorized,
            "missing bearer token (Authorization: Bearer TOKEN)",
        )
        .into_response();
    };
    let token = token.trim();
    if token.starts_with(crate::run::RUN_TOKEN_PREFIX) {
        return match hub.authenticate_run(token).await {
            Ok(Some(scope)) => {
                if asked_tenant(&request).is_some_and(|t| !t.is_empty() && t != scope.tenant) {
                    return ApiError::new(
                        ErrorCode::Forbidden,
                        "X-Silk-Tenant: a run token acts only in its run's tenant",
                    )
                    .into_response();
                }
                if !run_token_reaches(&scope, request.method(), request.uri().path()) {
                    return ApiError::new(
                        ErrorCode::Forbidden,
                        format!(
                            "a run token reaches only its run's program routes (run `{}`)",
                            scope.run
                        ),
                    )
                    .into_response();
                }
                request.extensions_mut().insert(Principal {
                    token_id: format!("run:{}", scope.run),
                    role: crate::auth::Role::Member,
                    tenant: scope.tenant,
                    run: Some(scope.run),
                });
                next.run(request).await
            }
            Ok(None) => ApiError::new(
                ErrorCode::Unauthorized,
                "invalid run token, or its run has ended",
            )
            .into_response(),
            Err(e) => ApiError::from(e).into_response(),
        };
    }
    let principal = match hub.authenticate(token).await {
        Ok(Some(principal)) => principal,
        Ok(None) => {
            return ApiError::new(ErrorCode::Unauthorized, "invalid token").into_response();
        }
        Err(e) => return ApiError::from(e).into_response(),
    };
    let principal = match act_in_tenant(&hub, principal, asked_tenant(&request)).await {
        Ok(principal) => principal,
        Err(e) => return e.into_response(),
    };
    if principal.role == crate::auth::Role::Viewer
        && !matches!(
            *request.method(),
            axum::http::Method::GET | axum::http::Method::HEAD
        )
    {
        tracing::warn!(token = %principal.token_id, method = %request.method(), path = %request.uri().path(), "refused: a viewer token only reads");
        return ApiError::new(
            ErrorCode::Forbidden,
            "a viewer token only reads (GET); this needs a member, an owner or an admin",
        )
        .into_response();
    }
    request.extensions_mut().insert(principal);
    next.run(request).await
}

/// The tenant the request's `X-Silk-Tenant` header names, if any (trimmed).
fn asked_tenant(request: &Request) -> Option<String> {
    request
        .headers()
        .get(silk_api::tenants::TENANT_HEADER)
        .map(|v| v.to_str().unwrap_or("\u{fffd}").trim().to_owned())
}

/// The tenant a request acts in: the token's own, or for an admin the one the
/// `X-Silk-Tenant` header names (which must exist: `404` otherwise). Any other token
/// naming another tenant is refused (`403`).
async fn act_in_tenant(
    hub: &HubHandle,
    mut principal: Principal,
    asked: Option<String>,
) -> ApiResult<Principal> {
    let Some(tenant) = asked else {
        return Ok(principal);
    };
    let tenant = tenant.as_str();
    if tenant.is_empty() || tenant == principal.tenant {
        return Ok(principal);
    }
    if !principal.is_admin() {
        tracing::warn!(token = %principal.token_id, "refused: X-Silk-Tenant names another tenant");
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "X-Silk-Tenant: this token acts only in its own tenant `{}`",
                principal.tenant
            ),
        ));
    }
    if !silk_api::tenants::valid_tenant_name(tenant) {
        return Err(ApiError::new(
            ErrorCode::BadRequest,
            "X-Silk-Tenant: not a tenant name",
        ));
    }
    hub.tenant(tenant).await?;
    principal.tenant = tenant.to_owned();
    Ok(principal)
}

/// Whether a run token of `scope` may call `method path`: its run (read), its items, its
/// frontier and fetch routes, and the artifact of its program's version. Anything else is
/// refused, whatever routes are added later.
fn run_token_reaches(
    scope: &crate::hub::RunScope,
    method: &axum::http::Method,
    path: &str,
) -> bool {
    use axum::http::Method;
    let run_base = format!("/api/v1/runs/{}", scope.run);
    if let Some(rest) = path.strip_prefix(&run_base) {
        return match rest {
            "" => *method == Method::GET,
            "/items" | "/requests" | "/lease" | "/ack" | "/fetch" => *method == Method::POST,
            _ => false,
        };
    }
    match &scope.version {
        Some((project, version)) => {
            *method == Method::GET
                && path == format!("/api/v1/projects/{project}/versions/{version}/artifact")
        }
        None => false,
    }
}

/// Why a state-changing request is refused as cross-site: its `Origin` is not this hub's
/// (the `Host` it was sent to), or the browser says `Sec-Fetch-Site: cross-site`.
fn cross_site(request: &Request) -> Option<String> {
    use axum::http::Method;
    if matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    ) {
        return None;
    }
    let headers = request.headers();
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if text("sec-fetch-site") == Some("cross-site") {
        return Some("cross-site request refused (Sec-Fetch-Site: cross-site)".into());
    }
    let origin = text("origin")?;
    let host = text("host").unwrap_or("");
    let origin_host = origin
        .parse::<axum::http::Uri>()
        .ok()
        .and_then(|u| u.authority().map(|a| a.as_str().to_ascii_lowercase()));
    if !host.is_empty() && origin_host.as_deref() == Some(host.to_ascii_lowercase().as_str()) {
        None
    } else {
        Some(format!(
            "cross-site request refused: Origin `{origin}` is not this hub (`{host}`); without \
             tokens (--no-auth) only the hub's own pages may change anything"
        ))
    }
}

/// Refuses a token below `role`, naming what it may not do.
pub(crate) fn require_role(
    principal: &Principal,
    role: crate::auth::Role,
    what: &str,
) -> ApiResult<()> {
    if principal.role >= role {
        Ok(())
    } else {
        tracing::warn!(token = %principal.token_id, "refused: only an {role} token may {what}");
        Err(ApiError::new(
            ErrorCode::Forbidden,
            format!("only an {role} (or admin) token may {what}"),
        ))
    }
}

/// The run `id` if it belongs to the principal's tenant; another tenant's run is no run
/// (`404`, as if it did not exist).
pub(crate) async fn own_run(
    hub: &HubHandle,
    principal: &Principal,
    id: &str,
) -> ApiResult<(RunId, RunView)> {
    let id = run_id(id)?;
    let view = hub.run(&id).await?;
    if view.tenant != principal.tenant {
        return Err(HubError::NoSuchRun(id).into());
    }
    Ok((id, view))
}

/// Refuses a token that is not an admin's, naming what only an admin may do.
pub(crate) fn require_admin_for(principal: &Principal, what: &str) -> ApiResult<()> {
    if principal.is_admin() {
        Ok(())
    } else {
        tracing::warn!(token = %principal.token_id, "refused: only an admin token may {what}");
        Err(ApiError::new(
            ErrorCode::Forbidden,
            format!("only an admin token may {what}"),
        ))
    }
}

/// Refuses a program from a token that is not an admin's: a program's command runs on the
/// agents (until tenants and their pools, only admins define what runs there).
fn check_program(principal: &Principal, program: bool) -> ApiResult<()> {
    if program && !principal.is_admin() {
        tracing::warn!(token = %principal.token_id, "refused: a program from a non-admin token");
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "program: only an admin token may run a program (its command runs on the agents)",
        ));
    }
    Ok(())
}

/// Refuses a raw command in a downloader config (`downloader.proxies.provider`,
/// `downloader.redial.command`; see `silk_core::command`) from a token that is not an
/// admin's: nothing a token holder sends may run code on a machine unless an admin defined
/// it. Non-admin tokens name commands the agents' admins defined (`{"command": NAME}`). An
/// admin's raw command is let through and logged, without the command (it may hold
/// secrets); the agents still run it only if they allow raw commands.
fn check_commands(
    principal: &Principal,
    downloader: Option<&serde_json::Map<String, serde_json::Value>>,
) -> ApiResult<()> {
    let Some(downloader) = downloader else {
        return Ok(());
    };
    let fields: Vec<String> = silk_core::command::raw_command_fields(downloader)
        .into_iter()
        .map(|f| format!("downloader.{f}"))
        .collect();
    if fields.is_empty() {
        return Ok(());
    }
    if !principal.is_admin() {
        tracing::warn!(token = %principal.token_id, fields = %fields.join(", "), "raw command refused: not an admin token");
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "{}: only an admin token may send a raw command; name a command defined on \
                 the agents instead: {{\"command\": NAME}}",
                fields.join(", ")
            ),
        ));
    }
    tracing::warn!(token = %principal.token_id, fields = %fields.join(", "), "raw command accepted from an admin token");
    Ok(())
}

async fn readyz(State(hub): State<HubHandle>) -> Response {
    match hub.ready().await {
        Ok(()) => "ready".into_response(),
        Err(reason) => ApiError::new(ErrorCode::NotReady, reason).into_response(),
    }
}

/// The largest request body the API reads; a larger one is `413 too_large`.
pub const MAX_BODY_BYTES: usize = 2 << 20;

/// A request body, read up to [`MAX_BODY_BYTES`]; a larger one, or one that cannot be read,
/// is refused with a JSON error (`413 too_large`, `400 bad_request`).
pub(crate) struct Body(pub(crate) Bytes);

impl<S: Send + Sync> axum::extract::FromRequest<S> for Body {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        match Bytes::from_request(request, state).await {
            Ok(bytes) => Ok(Body(bytes)),
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(ApiError::new(
                ErrorCode::TooLarge,
                format!("the request body is larger than {MAX_BODY_BYTES} bytes"),
            )),
            Err(e) => Err(ApiError::new(
                ErrorCode::BadRequest,
                format!("the request body could not be read: {}", e.body_text()),
            )),
        }
    }
}

/// Parses a JSON body; the error names the field (`spider: invalid type: …`) and the place.
pub(crate) fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> ApiResult<T> {
    let mut de = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let at = if path == "." {
            String::new()
        } else {
            format!("`{path}`: ")
        };
        ApiError::new(
            ErrorCode::BadRequest,
            format!("invalid request body: {at}{inner}"),
        )
    })
}

/// An optional JSON body: empty means the default.
fn parse_optional_body<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> ApiResult<T> {
    if body.iter().all(u8::is_ascii_whitespace) {
        Ok(T::default())
    } else {
        parse_body(body)
    }
}

fn run_id(id: &str) -> ApiResult<RunId> {
    let valid = !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if valid {
        Ok(RunId::new(id))
    } else {
        Err(ApiError::new(ErrorCode::NotFound, format!("no run `{id}`")))
    }
}

/// Agents known to the hub, with their state and load.
#[utoipa::path(get, path = "/api/v1/agents", responses((status = 200, body = [AgentView])))]
async fn list_agents(State(hub): State<HubHandle>) -> Json<Vec<AgentView>> {
    Json(hub.agents())
}

/// The agent pools the hub's config declares (`--pools`): the agents each needs, those alive,
/// the deficit and the scale command's state (never the command; its output to admins only).
#[utoipa::path(get, path = "/api/v1/pools", responses((status = 200, body = [silk_api::agents::PoolView])))]
async fn list_pools(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
) -> Json<Vec<silk_api::agents::PoolView>> {
    let mut pools = hub.pools();
    if !principal.is_admin() {
        for p in &mut pools {
            p.scale.last_message = None;
        }
    }
    Json(pools)
}

/// Tells an agent to stop (admin only): it finishes or gives back its work within its grace
/// and exits; its runs go on as for an agent that died.
#[utoipa::path(post, path = "/api/v1/agents/{id}/shutdown", params(("id" = String, Path, description = "agent id")),
    responses((status = 202, body = AgentView), (status = 403, body = silk_api::ApiError),
        (status = 404, body = silk_api::ApiError), (status = 503, body = silk_api::ApiError)))]
async fn shutdown_agent(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    require_admin_for(&principal, "stop agents")?;
    let view = hub.shutdown_agent(&silk_core::AgentId::new(id)).await?;
    Ok((StatusCode::ACCEPTED, Json(view)).into_response())
}

/// Drains an agent (admin only): it takes no new work — it is not picked for new runs or
/// reassignments, `random` runs send it no requests — and finishes the runs that hold it.
#[utoipa::path(post, path = "/api/v1/agents/{id}/drain", params(("id" = String, Path, description = "agent id")),
    responses((status = 200, body = AgentView), (status = 403, body = silk_api::ApiError),
        (status = 404, body = silk_api::ApiError)))]
async fn drain_agent(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<AgentView>> {
    set_drain(&hub, &principal, id, true).await
}

async fn set_drain(
    hub: &HubHandle,
    principal: &Principal,
    id: String,
    drained: bool,
) -> ApiResult<Json<AgentView>> {
    require_admin_for(principal, "drain agents")?;
    let view = hub
        .drain_agent(&silk_core::AgentId::new(id), drained)
        .await?;
    Ok(Json(view))
}

/// Ends an agent's drain (admin only): it takes new work again.
#[utoipa::path(delete, path = "/api/v1/agents/{id}/drain", params(("id" = String, Path, description = "agent id")),
    responses((status = 200, body = AgentView), (status = 403, body = silk_api::ApiError),
        (status = 404, body = silk_api::ApiError)))]
async fn undrain_agent(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<AgentView>> {
    set_drain(&hub, &principal, id, false).await
}

/// Every job, by name.
#[utoipa::path(get, path = "/api/v1/jobs", responses((status = 200, body = [Job])))]
async fn list_jobs(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
) -> ApiResult<Json<Vec<Job>>> {
    let mut jobs = hub.jobs().await?;
    jobs.retain(|j| j.tenant == principal.tenant);
    Ok(Json(jobs))
}

/// Creates a job.
#[utoipa::path(post, path = "/api/v1/jobs", request_body = JobSpec,
    responses((status = 201, body = Job), (status = 400, body = silk_api::ApiError), (status = 403, body = silk_api::ApiError), (status = 409, body = silk_api::ApiError)))]
async fn create_job(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Body(body): Body,
) -> ApiResult<Response> {
    let spec: JobSpec = parse_body(&body)?;
    check_commands(&principal, spec.downloader.as_ref())?;
    check_program(&principal, spec.program.is_some())?;
    let job = hub.create_job_in(&principal.tenant, spec).await?;
    Ok((StatusCode::CREATED, Json(job)).into_response())
}

/// A job, by id or name.
#[utoipa::path(get, path = "/api/v1/jobs/{id}", params(("id" = String, Path, description = "job id or name")),
    responses((status = 200, body = Job), (status = 404, body = silk_api::ApiError)))]
async fn get_job(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<Job>> {
    Ok(Json(hub.job_in(&principal.tenant, &id).await?))
}

/// Changes a job: a JSON merge patch of `JobSpec` fields (`null` resets one).
#[utoipa::path(patch, path = "/api/v1/jobs/{id}", params(("id" = String, Path, description = "job id or name")),
    request_body = Object,
    responses((status = 200, body = Job), (status = 400, body = silk_api::ApiError), (status = 403, body = silk_api::ApiError), (status = 404, body = silk_api::ApiError)))]
async fn patch_job(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
    Body(body): Body,
) -> ApiResult<Json<Job>> {
    let patch: serde_json::Value = parse_body(&body)?;
    check_program(&principal, patch.get("program").is_some())?;
    check_commands(
        &principal,
        patch
            .get("downloader")
            .and_then(serde_json::Value::as_object),
    )?;
    let job = hub.job_in(&principal.tenant, &id).await?;
    Ok(Json(hub.update_job(&job.id, &patch).await?))
}

/// Deletes a job (its runs stay).
#[utoipa::path(delete, path = "/api/v1/jobs/{id}", params(("id" = String, Path, description = "job id or name")),
    responses((status = 204), (status = 404, body = silk_api::ApiError)))]
async fn delete_job(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let job = hub.job_in(&principal.tenant, &id).await?;
    hub.delete_job(&job.id).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn parse_states(text: Option<&str>) -> ApiResult<Vec<RunState>> {
    let Some(text) = text else {
        return Ok(Vec::new());
    };
    text.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            serde_json::from_value(serde_json::Value::String(s.trim().to_owned())).map_err(|_| {
                ApiError::new(
                    ErrorCode::BadRequest,
                    format!("state `{s}`: expected pending, allocating, running, paused, stopping, succeeded, failed or cancelled"),
                )
            })
        })
        .collect()
}

/// The job's runs, newest first.
#[utoipa::path(get, path = "/api/v1/jobs/{id}/runs", params(("id" = String, Path, description = "job id or name"), ("limit" = Option<u32>, Query, description = "at most this many")),
    responses((status = 200, body = [RunView]), (status = 404, body = silk_api::ApiError)))]
async fn job_runs(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
    Query(params): Query<RunsParams>,
) -> ApiResult<Json<Vec<RunView>>> {
    let job = hub.job_in(&principal.tenant, &id).await?;
    Ok(Json(hub.job_runs(&job.id, params.limit).await?))
}

/// Triggers a run of the job now.
#[utoipa::path(post, path = "/api/v1/jobs/{id}/runs", params(("id" = String, Path, description = "job id or name")),
    request_body(content = Object, description = "optional: {\"args\": {\"name\": \"value\"}}"),
    responses((status = 201, body = RunView), (status = 404, body = silk_api::ApiError), (status = 409, body = silk_api::ApiError)))]
async fn trigger_job(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
    Body(body): Body,
) -> ApiResult<Response> {
    let trigger: TriggerRequest = parse_optional_body(&body)?;
    let job = hub.job_in(&principal.tenant, &id).await?;
    let view = hub.trigger(&job.id, trigger).await?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

/// Runs, newest first.
#[utoipa::path(get, path = "/api/v1/runs", params(RunsParams), responses((status = 200, body = [RunView])))]
async fn list_runs(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Query(params): Query<RunsParams>,
) -> ApiResult<Json<Vec<RunView>>> {
    let job_id = match &params.job {
        Some(j) => Some(hub.job_in(&principal.tenant, j).await?.id),
        None => None,
    };
    let query = RunQuery {
        job_id,
        tenant: Some(principal.tenant.clone()),
        states: parse_states(params.state.as_deref())?,
        limit: params.limit,
    };
    Ok(Json(hub.runs(&query).await?))
}

/// Starts an ad-hoc run (no job): allocated synchronously.
#[utoipa::path(post, path = "/api/v1/runs", request_body = RunRequest,
    responses((status = 201, body = RunView), (status = 400, body = silk_api::ApiError), (status = 403, body = silk_api::ApiError), (status = 409, body = silk_api::ApiError)))]
async fn submit_run(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Body(body): Body,
) -> ApiResult<Response> {
    let request: RunRequest = parse_body(&body)?;
    check_commands(&principal, request.downloader.as_ref())?;
    check_program(&principal, request.program.is_some())?;
    let view = hub.submit_in(&principal.tenant, request).await?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

/// A run with its counters.
#[utoipa::path(get, path = "/api/v1/runs/{id}", params(("id" = String, Path, description = "run id")),
    responses((status = 200, body = RunView), (status = 404, body = silk_api::ApiError)))]
async fn get_run(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<RunView>> {
    Ok(Json(own_run(&hub, &principal, &id).await?.1))
}

/// Pauses a running run: no new dispatch; requests out finish.
#[utoipa::path(post, path = "/api/v1/runs/{id}/pause", params(("id" = String, Path, description = "run id")),
    responses((status = 200, body = RunView), (status = 409, body = silk_api::ApiError)))]
async fn pause_run(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<RunView>> {
    let (id, _) = own_run(&hub, &principal, &id).await?;
    Ok(Json(hub.pause(&id).await?))
}

/// Resumes a paused run.
#[utoipa::path(post, path = "/api/v1/runs/{id}/resume", params(("id" = String, Path, description = "run id")),
    responses((status = 200, body = RunView), (status = 409, body = silk_api::ApiError)))]
async fn resume_run(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<RunView>> {
    let (id, _) = own_run(&hub, &principal, &id).await?;
    Ok(Json(hub.resume(&id).await?))
}

/// Cancels a run; answers once it is recorded as cancelled.
#[utoipa::path(post, path = "/api/v1/runs/{id}/cancel", params(("id" = String, Path, description = "run id")),
    responses((status = 200, body = RunView), (status = 409, body = silk_api::ApiError)))]
async fn cancel_run(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Json<RunView>> {
    let (id, _) = own_run(&hub, &principal, &id).await?;
    Ok(Json(hub.cancel(&id).await?))
}

/// Restarts a run: stops it if active, then starts a new run of the same spider.
#[utoipa::path(post, path = "/api/v1/runs/{id}/restart", params(("id" = String, Path, description = "run id")),
    request_body(content = RestartRequest, description = "optional"),
    responses((status = 201, body = RunView), (status = 404, body = silk_api::ApiError), (status = 409, body = silk_api::ApiError)))]
async fn restart_run(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
    Body(body): Body,
) -> ApiResult<Response> {
    let request: RestartRequest = parse_optional_body(&body)?;
    let (id, _) = own_run(&hub, &principal, &id).await?;
    let view = hub.restart(&id, request.keep_frontier).await?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

/// The API's view of a stored log line.
pub(crate) fn log_line_view(l: silk_store::LogLine) -> LogLineView {
    use silk_api::logs::Level as L;
    LogLineView {
        id: l.id,
        run_id: l.run_id,
        ts_ms: l.ts_ms,
        level: match l.level {
            Level::Trace => L::Trace,
            Level::Debug => L::Debug,
            Level::Info => L::Info,
            Level::Warn => L::Warn,
            Level::Error => L::Error,
        },
        source: l.source,
        message: l.message,
    }
}

fn parse_level(text: Option<&str>) -> ApiResult<Option<Level>> {
    text.map(|t| {
        t.parse::<Level>()
            .map_err(|e| ApiError::new(ErrorCode::BadRequest, e.to_string()))
    })
    .transpose()
}

/// A run's log lines: by level, text, time range, paged by id.
#[utoipa::path(get, path = "/api/v1/runs/{id}/logs", params(("id" = String, Path, description = "run id"), LogParams),
    responses((status = 200, body = LogPage), (status = 404, body = silk_api::ApiError)))]
async fn run_logs(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
    Query(params): Query<LogParams>,
) -> ApiResult<Json<LogPage>> {
    let (id, _) = own_run(&hub, &principal, &id).await?;
    let newest_first = match params.order.as_deref() {
        None | Some("asc") => false,
        Some("desc") => true,
        Some(other) => {
            return Err(ApiError::new(
                ErrorCode::BadRequest,
                format!("order `{other}`: expected asc or desc"),
            ));
        }
    };
    let limit = params.limit.unwrap_or(100).clamp(1, 1000);
    let mut query = LogQuery::new(id.as_str());
    query.min_level = parse_level(params.level.as_deref())?;
    query.text = params.q.filter(|q| !q.is_empty());
    query.since_ms = stored_time(params.since_ms);
    query.until_ms = stored_time(params.until_ms);
    query.after_id = params.after;
    query.before_id = params.before;
    query.limit = limit;
    query.newest_first = newest_first;
    let lines = hub.store().query_logs(&query).await;
    log_page(lines, limit)
}

/// Log lines of every run (and build), newest first: by job, run, level, text and time;
/// the next page is `?before=` the page's `next`. On PostgreSQL the text match uses a
/// trigram index (when the server has `pg_trgm`); on SQLite it scans the lines in the time
/// range, so give `since_ms` on a large log.
#[utoipa::path(get, path = "/api/v1/logs", params(LogSearchParams),
    responses((status = 200, body = LogPage), (status = 400, body = silk_api::ApiError), (status = 404, body = silk_api::ApiError)))]
async fn search_logs(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Query(params): Query<LogSearchParams>,
) -> ApiResult<Json<LogPage>> {
    let limit = params.limit.unwrap_or(100).clamp(1, 1000);
    let job_id = match params.job.as_deref().filter(|j| !j.is_empty()) {
        Some(job) => Some(hub.job_in(&principal.tenant, job).await?.id),
        None => None,
    };
    let search = silk_store::LogSearch {
        run_id: params.run.filter(|r| !r.is_empty()),
        job_id,
        tenant: Some(principal.tenant.clone()),
        min_level: parse_level(params.level.as_deref())?,
        text: params.q.filter(|q| !q.is_empty()),
        since_ms: stored_time(params.since_ms),
        until_ms: stored_time(params.until_ms),
        before_id: params.before,
        limit,
    };
    let lines = hub.store().search_logs(&search).await;
    log_page(lines, limit)
}

/// A time bound of a query as the store keeps times (a signed 64-bit count of ms): later
/// ones mean "no bound on that side" as well.
fn stored_time(ms: Option<u64>) -> Option<u64> {
    ms.map(|ms| ms.min(i64::MAX as u64))
}

/// A page of log lines; `next` (the last id) when the page is full.
fn log_page(
    lines: Result<Vec<silk_store::LogLine>, silk_store::StoreError>,
    limit: u32,
) -> ApiResult<Json<LogPage>> {
    let lines: Vec<LogLineView> = lines
        .map_err(HubError::from)?
        .into_iter()
        .map(log_line_view)
        .collect();
    let next = if lines.len() as u32 == limit {
        lines.last().map(|l| l.id)
    } else {
        None
    };
    Ok(Json(LogPage { lines, next }))
}

/// Live run counters and log tail, as server-sent events: `run` (a RunView, at once and
/// then at most once a second while it changes), `log` (a LogLine), `end` (the run is over;
/// the stream closes).
#[utoipa::path(get, path = "/api/v1/runs/{id}/events", params(("id" = String, Path, description = "run id"), EventParams),
    responses((status = 200, content_type = "text/event-stream", description = "events `run`, `log`, `end`"), (status = 404, body = silk_api::ApiError)))]
async fn run_events(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
    Query(params): Query<EventParams>,
) -> ApiResult<Response> {
    let (id, _) = own_run(&hub, &principal, &id).await?;
    let level = parse_level(params.level.as_deref())?;
    let logs = params.logs.unwrap_or(true);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Event>(256);
    tokio::spawn(event_feed(hub, id, logs, params.after, level, tx));
    let stream =
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|e| e.map(Ok::<_, Infallible>)));
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

async fn event_feed(
    hub: HubHandle,
    id: RunId,
    logs: bool,
    after: Option<i64>,
    level: Option<Level>,
    tx: tokio::sync::mpsc::Sender<Event>,
) {
    let mut stored = hub.shared().logs.subscribe();
    let mut last_id = match after {
        Some(a) => a,
        None if logs => {
            let mut q = LogQuery::new(id.as_str());
            q.min_level = level;
            q.limit = 100;
            q.newest_first = true;
            match hub.store().query_logs(&q).await {
                Ok(lines) => lines.last().map_or(0, |l| l.id - 1),
                Err(_) => 0,
            }
        }
        None => 0,
    };
    let mut last_view = String::new();
    let mut ending = false;
    loop {
        let Ok(view) = hub.run(&id).await else {
            return;
        };
        let terminal = view.state.is_terminal();
        let json = serde_json::to_string(&view).unwrap_or_default();
        if json != last_view {
            if tx
                .send(Event::default().event("run").data(&json))
                .await
                .is_err()
            {
                return;
            }
            last_view = json;
        }
        if logs && !send_log_lines(&hub, id.as_str(), level, &mut last_id, &tx).await {
            return;
        }
        if ending {
            let _ = tx
                .send(Event::default().event("end").data(view.state.as_str()))
                .await;
            return;
        }
        if terminal {
            // One more round for the run's last log lines (the writer stores within a
            // fraction of a second).
            ending = true;
            let _ = tokio::time::timeout(
                Duration::from_millis(2 * crate::config::LOG_FLUSH_MS + 300),
                stored.changed(),
            )
            .await;
            continue;
        }
        tokio::select! {
            _ = tx.closed() => return,
            _ = stored.changed(), if logs => {
                // Coalesce bursts: at most ~10 rounds a second.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// Sends the stored lines of log `key` (a run id, or a build's `build:{id}`) after
/// `*last_id`, at `level` or above, as `log` events, moving `*last_id`; false when the
/// receiver is gone.
pub(crate) async fn send_log_lines(
    hub: &HubHandle,
    key: &str,
    level: Option<Level>,
    last_id: &mut i64,
    tx: &tokio::sync::mpsc::Sender<Event>,
) -> bool {
    const PAGE: u32 = 500;
    loop {
        let mut q = LogQuery::new(key);
        q.min_level = level;
        q.after_id = Some(*last_id);
        q.limit = PAGE;
        let Ok(lines) = hub.store().query_logs(&q).await else {
            return true;
        };
        let n = lines.len();
        for line in lines {
            *last_id = line.id;
            let data = serde_json::to_string(&log_line_view(line)).unwrap_or_default();
            let event = Event::default()
                .event("log")
                .id(last_id.to_string())
                .data(data);
            if tx.send(event).await.is_err() {
                return false;
            }
        }
        if n < PAGE as usize {
            return true;
        }
    }
}

/// A run's items, in the order they were written.
#[utoipa::path(get, path = "/api/v1/runs/{id}/items", params(("id" = String, Path, description = "run id"), ItemsParams),
    responses((status = 200, body = ItemsPage), (status = 404, body = silk_api::ApiError)))]
async fn run_items(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
    Query(params): Query<ItemsParams>,
) -> ApiResult<Json<ItemsPage>> {
    let (id, _) = own_run(&hub, &principal, &id).await?;
    let limit = params.limit.unwrap_or(100).clamp(1, 1000) as usize;
    let cursor = params.cursor.unwrap_or(0);
    Ok(Json(hub.run_items(&id, cursor, limit).await?))
}

/// Items a program pushes (bearer: its run token, or any token): written to the run's item
/// log, idempotent on the run's item key.
#[utoipa::path(post, path = "/api/v1/runs/{id}/items", params(("id" = String, Path, description = "run id")),
    request_body = ItemsBatch,
    responses((status = 200, body = ItemsAdded), (status = 400, body = silk_api::ApiError), (status = 404, body = silk_api::ApiError), (status = 409, body = silk_api::ApiError)))]
async fn push_run_items(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
    Body(body): Body,
) -> ApiResult<Json<ItemsAdded>> {
    let (id, _) = own_run(&hub, &principal, &id).await?;
    let batch: ItemsBatch = parse_body(&body)?;
    Ok(Json(hub.push_items(&id, batch).await?))
}

/// A run's finished requests, from the archive (canonical URL, outcome, status, error,
/// attempts, agent, time), in the order they finished, filtered; with the counts per
/// outcome of the filter.
#[utoipa::path(get, path = "/api/v1/runs/{id}/requests", params(("id" = String, Path, description = "run id"), RequestsParams),
    responses((status = 200, body = RequestsPage), (status = 400, body = silk_api::ApiError), (status = 404, body = silk_api::ApiError)))]
async fn list_run_requests(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
    Query(params): Query<RequestsParams>,
) -> ApiResult<Json<RequestsPage>> {
    let (id, _) = own_run(&hub, &principal, &id).await?;
    Ok(Json(hub.run_requests(&id, &params).await?))
}

/// Queues a run's finished requests again (by default its failed ones not queued again
/// yet), once each: into the run while it is active, else into its job's run for fed
/// requests (started for them when none is open).
#[utoipa::path(post, path = "/api/v1/runs/{id}/requests/requeue", params(("id" = String, Path, description = "run id")),
    request_body = RequeueRequest,
    responses((status = 200, body = Requeued), (status = 400, body = silk_api::ApiError), (status = 404, body = silk_api::ApiError), (status = 409, body = silk_api::ApiError)))]
async fn requeue_run_requests(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
    Body(body): Body,
) -> ApiResult<Json<Requeued>> {
    let (id, _) = own_run(&hub, &principal, &id).await?;
    let ask: RequeueRequest = parse_optional_body(&body)?;
    Ok(Json(hub.requeue_requests(&id, &ask).await?))
}

/// Requests a program puts in its run's frontier (bearer: its run token, or any token),
/// deduplicated on Silk's canonical key unless `dont_filter`.
#[utoipa::path(post, path = "/api/v1/runs/{id}/requests", params(("id" = String, Path, description = "run id")),
    request_body = EnqueueBatch,
    responses((status = 200, body = Enqueued), (status = 400, body = silk_api::ApiError), (status = 404, body = silk_api::ApiError), (status = 409, body = silk_api::ApiError)))]
async fn enqueue_run_requests(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
    Body(body): Body,
) -> ApiResult<Json<Enqueued>> {
    let (id, _) = own_run(&hub, &principal, &id).await?;
    let batch: EnqueueBatch = parse_body(&body)?;
    Ok(Json(hub.enqueue_requests(&id, batch).await?))
}

/// Leases requests of the run's frontier to a program: politeness and aging as for spider
/// runs; waits up to `wait_ms` for one; nothing while the run is paused or ending.
#[utoipa::path(post, path = "/api/v1/runs/{id}/lease", params(("id" = String, Path, description = "run id")),
    request_body = LeaseAsk,
    responses((status = 200, body = Leases), (status = 400, body = silk_api::ApiError), (status = 404, body = silk_api::ApiError), (status = 409, body = silk_api::ApiError)))]
async fn lease_run_requests(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
    Body(body): Body,
) -> ApiResult<Json<Leases>> {
    let (id, _) = own_run(&hub, &principal, &id).await?;
    let ask: LeaseAsk = parse_body(&body)?;
    Ok(Json(hub.lease_requests(&id, ask).await?))
}

/// Acks a program's leases (done, retry, failed, dropped, release), each with the new
/// requests it gave, enqueued atomically with the ack.
#[utoipa::path(post, path = "/api/v1/runs/{id}/ack", params(("id" = String, Path, description = "run id")),
    request_body = AckBatch,
    responses((status = 200, body = Acked), (status = 400, body = silk_api::ApiError), (status = 404, body = silk_api::ApiError), (status = 409, body = silk_api::ApiError)))]
async fn ack_run_requests(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
    Body(body): Body,
) -> ApiResult<Json<Acked>> {
    let (id, _) = own_run(&hub, &principal, &id).await?;
    let batch: AckBatch = parse_body(&body)?;
    Ok(Json(hub.ack_requests(&id, batch).await?))
}

/// Fetches one request through the download center for a program: by one of the run's
/// agents with that agent's downloader for the run (proxies, cookies, rate limit, robots.txt,
/// ban handling, trimming); the response as it is. `503` when no agent of the run answers.
#[utoipa::path(post, path = "/api/v1/runs/{id}/fetch", params(("id" = String, Path, description = "run id")),
    request_body = FetchAsk,
    responses((status = 200, body = Fetched), (status = 400, body = silk_api::ApiError), (status = 404, body = silk_api::ApiError), (status = 409, body = silk_api::ApiError), (status = 503, body = silk_api::ApiError)))]
async fn fetch_for_run(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
    Body(body): Body,
) -> ApiResult<Json<Fetched>> {
    let (id, _) = own_run(&hub, &principal, &id).await?;
    let ask: FetchAsk = parse_body(&body)?;
    Ok(Json(hub.fetch_for_program(&id, ask).await?))
}

/// The tokens of the tenant (owner or admin; no secrets).
#[utoipa::path(get, path = "/api/v1/tokens", responses((status = 200, body = [TokenView]), (status = 403, body = silk_api::ApiError)))]
async fn list_tokens(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
) -> ApiResult<Json<Vec<TokenView>>> {
    require_role(&principal, Role::Owner, "manage tokens")?;
    let mut tokens = hub.tokens(Some(&principal.tenant)).await?;
    if !principal.is_admin() {
        // The platform's tokens are not an owner's business.
        tokens.retain(|t| t.role != Role::Admin);
    }
    Ok(Json(tokens))
}

/// Creates a token (an owner in its tenant, an admin in any; only an admin makes admin
/// tokens); the answer is the only place its secret appears.
#[utoipa::path(post, path = "/api/v1/tokens", request_body = TokenRequest,
    responses((status = 201, body = NewToken), (status = 403, body = silk_api::ApiError), (status = 404, body = silk_api::ApiError)))]
async fn create_token(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Body(body): Body,
) -> ApiResult<Response> {
    require_role(&principal, Role::Owner, "manage tokens")?;
    let request: TokenRequest = parse_body(&body)?;
    let role = request.role();
    if role == Role::Admin {
        require_admin_for(&principal, "make admin tokens")?;
    }
    let tenant = request.tenant.as_deref().unwrap_or(&principal.tenant);
    if tenant != principal.tenant {
        require_admin_for(&principal, "make tokens of another tenant")?;
    }
    let token = hub.create_token(&request.name, role, tenant).await?;
    Ok((StatusCode::CREATED, Json(token)).into_response())
}

/// Deletes a token of the tenant (owner or admin; only an admin deletes an admin token).
#[utoipa::path(delete, path = "/api/v1/tokens/{id}", params(("id" = String, Path, description = "token id")),
    responses((status = 204), (status = 403, body = silk_api::ApiError), (status = 404, body = silk_api::ApiError)))]
async fn delete_token(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    require_role(&principal, Role::Owner, "manage tokens")?;
    let token = hub.token(&id).await?;
    if token.tenant != principal.tenant {
        return Err(HubError::NoSuchToken(id).into());
    }
    if token.role == Role::Admin {
        require_admin_for(&principal, "delete admin tokens")?;
    }
    hub.delete_token(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Tenants: every one (admin), or the caller's own.
#[utoipa::path(get, path = "/api/v1/tenants", responses((status = 200, body = [TenantView])))]
async fn list_tenants(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
) -> ApiResult<Json<Vec<TenantView>>> {
    if principal.is_admin() {
        Ok(Json(hub.tenants().await?))
    } else {
        Ok(Json(vec![hub.tenant(&principal.tenant).await?]))
    }
}

/// Creates a tenant (admin only).
#[utoipa::path(post, path = "/api/v1/tenants", request_body = TenantRequest,
    responses((status = 201, body = TenantView), (status = 400, body = silk_api::ApiError), (status = 403, body = silk_api::ApiError), (status = 409, body = silk_api::ApiError)))]
async fn create_tenant(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Body(body): Body,
) -> ApiResult<Response> {
    require_admin_for(&principal, "create tenants")?;
    let request: TenantRequest = parse_body(&body)?;
    let tenant = hub.create_tenant(&request).await?;
    Ok((StatusCode::CREATED, Json(tenant)).into_response())
}

/// A tenant (admin, or a token of that tenant).
#[utoipa::path(get, path = "/api/v1/tenants/{name}", params(("name" = String, Path, description = "tenant name")),
    responses((status = 200, body = TenantView), (status = 404, body = silk_api::ApiError)))]
async fn get_tenant(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(name): Path<String>,
) -> ApiResult<Json<TenantView>> {
    if !principal.is_admin() && name != principal.tenant {
        return Err(HubError::NoSuchTenant(name).into());
    }
    Ok(Json(hub.tenant(&name).await?))
}

/// What a tenant used today, in its time zone, and its quotas (admin, or a token of that
/// tenant).
#[utoipa::path(get, path = "/api/v1/tenants/{name}/usage", params(("name" = String, Path, description = "tenant name")),
    responses((status = 200, body = TenantUsage), (status = 404, body = silk_api::ApiError)))]
async fn get_tenant_usage(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(name): Path<String>,
) -> ApiResult<Json<TenantUsage>> {
    if !principal.is_admin() && name != principal.tenant {
        return Err(HubError::NoSuchTenant(name).into());
    }
    Ok(Json(hub.tenant_usage(&name).await?))
}

/// Changes a tenant (admin only): a JSON merge patch of `description`, `pools` (the
/// agent pools its runs may use; `null`: every agent) and `quotas` (the whole set; `null`:
/// none).
#[utoipa::path(patch, path = "/api/v1/tenants/{name}", params(("name" = String, Path, description = "tenant name")),
    request_body = Object,
    responses((status = 200, body = TenantView), (status = 400, body = silk_api::ApiError), (status = 403, body = silk_api::ApiError), (status = 404, body = silk_api::ApiError)))]
async fn patch_tenant(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(name): Path<String>,
    Body(body): Body,
) -> ApiResult<Json<TenantView>> {
    require_admin_for(&principal, "change tenants")?;
    let patch: serde_json::Value = parse_body(&body)?;
    Ok(Json(hub.update_tenant(&name, &patch).await?))
}

/// Deletes a tenant that owns nothing (admin only; `409` naming what it still owns).
#[utoipa::path(delete, path = "/api/v1/tenants/{name}", params(("name" = String, Path, description = "tenant name")),
    responses((status = 204), (status = 403, body = silk_api::ApiError), (status = 404, body = silk_api::ApiError), (status = 409, body = silk_api::ApiError)))]
async fn delete_tenant(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    require_admin_for(&principal, "delete tenants")?;
    hub.delete_tenant(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Escapes a Prometheus label value.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Prometheus text exposition (hand-written: a handful of gauges and counters read from
/// the hub's state at scrape time, which needs no metrics registry).
async fn metrics(State(hub): State<HubHandle>) -> Response {
    let mut out = String::new();
    let agents = hub.agents();
    let _ = writeln!(out, "# HELP silk_agents Agents known to the hub, by state.");
    let _ = writeln!(out, "# TYPE silk_agents gauge");
    for state in ["alive", "suspect", "dead"] {
        let n = agents.iter().filter(|a| a.state.as_str() == state).count();
        let _ = writeln!(out, "silk_agents{{state=\"{state}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "# HELP silk_agent_in_flight Requests an agent is fetching."
    );
    let _ = writeln!(out, "# TYPE silk_agent_in_flight gauge");
    for a in &agents {
        let _ = writeln!(
            out,
            "silk_agent_in_flight{{agent=\"{}\"}} {}",
            label(a.id.as_str()),
            a.in_flight
        );
    }
    let _ = writeln!(
        out,
        "# HELP silk_agent_qps Requests per second of an agent."
    );
    let _ = writeln!(out, "# TYPE silk_agent_qps gauge");
    for a in &agents {
        let _ = writeln!(
            out,
            "silk_agent_qps{{agent=\"{}\"}} {}",
            label(a.id.as_str()),
            a.qps
        );
    }
    let pools = hub.pools();
    type PoolGauge = (
        &'static str,
        &'static str,
        fn(&silk_api::agents::PoolView) -> u64,
    );
    let pool_gauges: [PoolGauge; 4] = [
        (
            "silk_pool_agents_wanted",
            "Live agents a declared pool needs.",
            |p| u64::from(p.agents),
        ),
        (
            "silk_pool_agents_alive",
            "Live, open agents of a declared pool.",
            |p| u64::from(p.alive),
        ),
        (
            "silk_pool_agents_deficit",
            "Agents a declared pool lacks.",
            |p| u64::from(p.deficit),
        ),
        (
            "silk_pool_scale_attempts",
            "Runs of a pool's scale command since it last had enough agents.",
            |p| u64::from(p.scale.attempts),
        ),
    ];
    for (name, help, value) in pool_gauges {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for p in &pools {
            let _ = writeln!(out, "{name}{{pool=\"{}\"}} {}", label(&p.name), value(p));
        }
    }
    let active = hub
        .runs(&RunQuery {
            job_id: None,
            tenant: None,
            states: vec![
                RunState::Pending,
                RunState::Allocating,
                RunState::Running,
                RunState::Paused,
                RunState::Stopping,
            ],
            limit: Some(10_000),
        })
        .await
        .unwrap_or_default();
    let _ = writeln!(out, "# HELP silk_runs_active Runs not ended, by state.");
    let _ = writeln!(out, "# TYPE silk_runs_active gauge");
    for state in ["pending", "allocating", "running", "paused", "stopping"] {
        let n = active.iter().filter(|r| r.state.as_str() == state).count();
        let _ = writeln!(out, "silk_runs_active{{state=\"{state}\"}} {n}");
    }
    type Gauge = (&'static str, &'static str, fn(&RunView) -> f64);
    let counters: [Gauge; 8] = [
        ("silk_run_total", "Unique requests of a run.", |r| {
            r.stats.total as f64
        }),
        ("silk_run_left", "Requests of a run not finished.", |r| {
            r.stats.left as f64
        }),
        (
            "silk_run_in_flight",
            "Requests of a run out at agents.",
            |r| r.stats.in_flight as f64,
        ),
        ("silk_run_success", "Requests of a run fetched.", |r| {
            r.stats.success as f64
        }),
        (
            "silk_run_failed",
            "Requests of a run failed for good.",
            |r| r.stats.failed as f64,
        ),
        ("silk_run_items", "Items a run wrote.", |r| {
            r.stats.items as f64
        }),
        ("silk_run_bytes", "Body bytes a run fetched.", |r| {
            r.stats.bytes as f64
        }),
        (
            "silk_run_pages_per_second",
            "Pages per second of a run.",
            |r| r.stats.pages_per_s,
        ),
    ];
    for (name, help, value) in counters {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for r in &active {
            let _ = writeln!(
                out,
                "{name}{{run=\"{}\",job=\"{}\"}} {}",
                label(r.id.as_str()),
                label(r.job_name.as_deref().unwrap_or("")),
                value(r)
            );
        }
    }
    let logs = &hub.shared().logs;
    let _ = writeln!(
        out,
        "# HELP silk_log_lines_stored_total Run log lines stored."
    );
    let _ = writeln!(out, "# TYPE silk_log_lines_stored_total counter");
    let _ = writeln!(out, "silk_log_lines_stored_total {}", logs.stored_total());
    let _ = writeln!(
        out,
        "# HELP silk_log_lines_dropped_total Run log lines dropped (queue full or store down)."
    );
    let _ = writeln!(out, "# TYPE silk_log_lines_dropped_total counter");
    let _ = writeln!(out, "silk_log_lines_dropped_total {}", logs.dropped_total());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
        .into_response()
}
