//! The API of projects, versions, builds and webhooks (see the parent module for the
//! conventions).
//!
//! | method + path | answer |
//! |---|---|
//! | `GET, POST /api/v1/projects` | `[ProjectView]`; create (admin) → `201 NewProject` (the webhook secret, once) |
//! | `GET, PATCH, DELETE /api/v1/projects/{name}` | `ProjectView`; merge patch (admin) → `ProjectView`; delete (admin) → `204` |
//! | `POST /api/v1/projects/{name}/builds` | `{"ref": …, "version"?: …}` → `202 VersionView` |
//! | `GET /api/v1/projects/{name}/versions` | `[VersionView]`, newest first |
//! | `GET, DELETE /api/v1/projects/{name}/versions/{version}` | `VersionView`; `204` |
//! | `GET /api/v1/projects/{name}/versions/{version}/log` | `BuildLog` (`?after=&limit=`), or server-sent events `log`, `version`, `end` with `Accept: text/event-stream` |
//! | `GET /api/v1/projects/{name}/versions/{version}/artifact` | the packed directory (`application/zstd`, `X-Silk-Sha256`) |
//! | `POST /api/v1/webhooks/{name}` | no token: the signature is the authentication; `202 BuildQueued`, `200 WebhookIgnored`, `401` |
//!
//! Creating, changing and deleting a project is an admin's action: its build command runs on
//! the hub's machine.

use super::{
    ApiError, ApiResult, Body, log_line_view, parse_body, require_admin_for, send_log_lines,
};
use crate::auth::Principal;
use crate::hub::HubHandle;
use crate::hub_projects::WebhookAnswer;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use silk_api::ErrorCode;
use silk_api::projects::{
    BuildLog, BuildLogParams, BuildQueued, BuildRequest, NewProject, ProjectRequest, ProjectView,
    VersionView, WebhookIgnored,
};
use silk_store::{LogQuery, build_log_key};
use std::convert::Infallible;
use std::time::Duration;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The largest webhook body read; a larger one is `413 too_large` (git services send far
/// less for a push).
pub const MAX_WEBHOOK_BYTES: usize = 1 << 20;

/// The routes that need a token.
pub(crate) fn routes() -> OpenApiRouter<HubHandle> {
    OpenApiRouter::new()
        .routes(routes!(list_projects, create_project))
        .routes(routes!(get_project, patch_project, delete_project))
        .routes(routes!(build_project))
        .routes(routes!(list_versions))
        .routes(routes!(get_version, delete_version))
        .routes(routes!(version_log))
        .routes(routes!(version_artifact))
}

/// The routes that need no token (webhooks).
pub(crate) fn public_routes() -> OpenApiRouter<HubHandle> {
    OpenApiRouter::new().routes(routes!(webhook))
}

/// Every project, by name (no passwords, no secrets).
#[utoipa::path(get, path = "/api/v1/projects", responses((status = 200, body = [ProjectView])))]
async fn list_projects(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
) -> ApiResult<Json<Vec<ProjectView>>> {
    let mut projects = hub.projects().await?;
    projects.retain(|p| p.tenant == principal.tenant);
    Ok(Json(projects))
}

/// The project `name` if it belongs to the principal's tenant; another tenant's project is
/// no project (`404`).
async fn own_project(hub: &HubHandle, principal: &Principal, name: &str) -> ApiResult<ProjectView> {
    let project = hub.project(name).await?;
    if project.tenant != principal.tenant {
        return Err(crate::error::HubError::NoSuchProject(name.to_owned()).into());
    }
    Ok(project)
}

/// Creates a project (admin only: its build command runs on the hub). The answer is the
/// only place its webhook secret appears.
#[utoipa::path(post, path = "/api/v1/projects", request_body = ProjectRequest,
    responses((status = 201, body = NewProject), (status = 400, body = silk_api::ApiError),
        (status = 403, body = silk_api::ApiError), (status = 409, body = silk_api::ApiError)))]
async fn create_project(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Body(body): Body,
) -> ApiResult<Response> {
    require_admin_for(
        &principal,
        "create projects (a build command runs on the hub)",
    )?;
    let request: ProjectRequest = parse_body(&body)?;
    let created = hub.create_project(&principal.tenant, request).await?;
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

/// One project.
#[utoipa::path(get, path = "/api/v1/projects/{name}", params(("name" = String, Path, description = "project name")),
    responses((status = 200, body = ProjectView), (status = 404, body = silk_api::ApiError)))]
async fn get_project(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(name): Path<String>,
) -> ApiResult<Json<ProjectView>> {
    Ok(Json(own_project(&hub, &principal, &name).await?))
}

/// Changes a project with a JSON merge patch of its request form (admin only); `password:
/// null` removes the password.
#[utoipa::path(patch, path = "/api/v1/projects/{name}", params(("name" = String, Path, description = "project name")),
    request_body = Object,
    responses((status = 200, body = ProjectView), (status = 400, body = silk_api::ApiError),
        (status = 403, body = silk_api::ApiError), (status = 404, body = silk_api::ApiError)))]
async fn patch_project(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(name): Path<String>,
    Body(body): Body,
) -> ApiResult<Json<ProjectView>> {
    require_admin_for(
        &principal,
        "change projects (a build command runs on the hub)",
    )?;
    let patch: serde_json::Value = parse_body(&body)?;
    own_project(&hub, &principal, &name).await?;
    Ok(Json(hub.patch_project(&name, &patch).await?))
}

/// Deletes a project with its versions, build logs, artifacts and images (admin only).
#[utoipa::path(delete, path = "/api/v1/projects/{name}", params(("name" = String, Path, description = "project name")),
    responses((status = 204), (status = 403, body = silk_api::ApiError), (status = 404, body = silk_api::ApiError)))]
async fn delete_project(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    require_admin_for(&principal, "delete projects")?;
    own_project(&hub, &principal, &name).await?;
    hub.delete_project(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Builds a ref by hand: a tag matching the pattern, or any ref or commit with `version`.
#[utoipa::path(post, path = "/api/v1/projects/{name}/builds", params(("name" = String, Path, description = "project name")),
    request_body = BuildRequest,
    responses((status = 202, body = VersionView), (status = 400, body = silk_api::ApiError),
        (status = 404, body = silk_api::ApiError), (status = 409, body = silk_api::ApiError)))]
async fn build_project(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(name): Path<String>,
    Body(body): Body,
) -> ApiResult<Response> {
    let request: BuildRequest = parse_body(&body)?;
    own_project(&hub, &principal, &name).await?;
    let view = hub.build_project(&name, &request).await?;
    Ok((StatusCode::ACCEPTED, Json(view)).into_response())
}

/// A project's versions, newest first.
#[utoipa::path(get, path = "/api/v1/projects/{name}/versions", params(("name" = String, Path, description = "project name")),
    responses((status = 200, body = [VersionView]), (status = 404, body = silk_api::ApiError)))]
async fn list_versions(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(name): Path<String>,
) -> ApiResult<Json<Vec<VersionView>>> {
    own_project(&hub, &principal, &name).await?;
    Ok(Json(hub.versions(&name).await?))
}

/// One version.
#[utoipa::path(get, path = "/api/v1/projects/{name}/versions/{version}",
    params(("name" = String, Path, description = "project name"), ("version" = String, Path, description = "version")),
    responses((status = 200, body = VersionView), (status = 404, body = silk_api::ApiError)))]
async fn get_version(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path((name, version)): Path<(String, String)>,
) -> ApiResult<Json<VersionView>> {
    own_project(&hub, &principal, &name).await?;
    Ok(Json(hub.version(&name, &version).await?))
}

/// Deletes a version with its log and artifact (not while it builds).
#[utoipa::path(delete, path = "/api/v1/projects/{name}/versions/{version}",
    params(("name" = String, Path, description = "project name"), ("version" = String, Path, description = "version")),
    responses((status = 204), (status = 404, body = silk_api::ApiError), (status = 409, body = silk_api::ApiError)))]
async fn delete_version(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path((name, version)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    own_project(&hub, &principal, &name).await?;
    hub.delete_version(&name, &version).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A version's build log: lines (`BuildLog`), or, with `Accept: text/event-stream`,
/// server-sent events `log` (a line), `version` (the VersionView when it changes) and `end`
/// (the build is over; the stream closes).
#[utoipa::path(get, path = "/api/v1/projects/{name}/versions/{version}/log",
    params(("name" = String, Path, description = "project name"), ("version" = String, Path, description = "version"), BuildLogParams),
    responses((status = 200, body = BuildLog, description = "the lines; or `text/event-stream` events `log`, `version`, `end`"),
        (status = 404, body = silk_api::ApiError)))]
async fn version_log(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path((name, version)): Path<(String, String)>,
    Query(params): Query<BuildLogParams>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    own_project(&hub, &principal, &name).await?;
    let (build, state) = hub.version_build(&name, &version).await?;
    let sse = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/event-stream"));
    if sse {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Event>(256);
        tokio::spawn(follow_log(hub, name, version, build, params.after, tx));
        let stream = futures::stream::poll_fn(move |cx| {
            rx.poll_recv(cx).map(|e| e.map(Ok::<_, Infallible>))
        });
        return Ok(Sse::new(stream)
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
            .into_response());
    }
    let limit = params.limit.unwrap_or(1000).clamp(1, 1000);
    let lines = log_page(&hub, &build, params.after.unwrap_or(0), limit).await?;
    let next = (lines.len() as u32 == limit)
        .then(|| lines.last().map(|l| l.id))
        .flatten();
    Ok(Json(BuildLog { state, lines, next }).into_response())
}

async fn log_page(
    hub: &HubHandle,
    build: &str,
    after: i64,
    limit: u32,
) -> ApiResult<Vec<silk_api::logs::LogLineView>> {
    let mut query = LogQuery::new(build_log_key(build));
    query.after_id = Some(after);
    query.limit = limit;
    let lines = hub
        .store()
        .query_logs(&query)
        .await
        .map_err(crate::error::HubError::from)?;
    Ok(lines.into_iter().map(log_line_view).collect())
}

/// Sends a build's lines as they are stored, and the version when it changes, until the
/// build is over (then one more round for its last lines, and `end`).
async fn follow_log(
    hub: HubHandle,
    project: String,
    version: String,
    build: String,
    after: Option<i64>,
    tx: tokio::sync::mpsc::Sender<Event>,
) {
    let mut stored = hub.shared().logs.subscribe();
    let mut changed = hub.version_changes();
    let mut last_id = after.unwrap_or(0);
    let mut last_view = String::new();
    let mut ending = false;
    loop {
        let Ok(view) = hub.version(&project, &version).await else {
            let _ = tx.send(Event::default().event("end").data("deleted")).await;
            return;
        };
        if view.build != build {
            let _ = tx.send(Event::default().event("end").data("rebuilt")).await;
            return;
        }
        let json = serde_json::to_string(&view).unwrap_or_default();
        if json != last_view {
            if tx
                .send(Event::default().event("version").data(&json))
                .await
                .is_err()
            {
                return;
            }
            last_view = json;
        }
        if !send_log_lines(&hub, &build_log_key(&build), None, &mut last_id, &tx).await {
            return;
        }
        if ending {
            let _ = tx
                .send(Event::default().event("end").data(view.state.as_str()))
                .await;
            return;
        }
        if view.state.is_final() {
            // One more round for the build's last lines (stored within a fraction of a
            // second).
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
            _ = stored.changed() => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            _ = changed.changed() => {}
            // Another hub may build it: look now and then.
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// The packed directory of a ready command build (tar + zstd), streamed from the store;
/// `X-Silk-Sha256` is its SHA-256.
#[utoipa::path(get, path = "/api/v1/projects/{name}/versions/{version}/artifact",
    params(("name" = String, Path, description = "project name"), ("version" = String, Path, description = "version")),
    responses((status = 200, content_type = "application/zstd", description = "the packed directory"),
        (status = 404, body = silk_api::ApiError)))]
async fn version_artifact(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path((name, version)): Path<(String, String)>,
) -> ApiResult<Response> {
    own_project(&hub, &principal, &name).await?;
    let (sha256, bytes, chunks) = hub.artifact(&name, &version).await?;
    let chunks = u32::try_from(chunks).unwrap_or(u32::MAX);
    let sha = sha256.clone();
    let stream = futures::stream::unfold(0u32, move |seq| {
        let hub = hub.clone();
        let sha = sha.clone();
        async move {
            if seq >= chunks {
                return None;
            }
            let chunk = hub
                .artifact_chunk(&sha, seq)
                .await
                .map(axum::body::Bytes::from)
                .map_err(|e| std::io::Error::other(e.to_string()));
            Some((chunk, seq + 1))
        }
    });
    let mut response = axum::body::Body::from_stream(stream).into_response();
    let headers = response.headers_mut();
    let mut set = |name: header::HeaderName, value: String| {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(name, v);
        }
    };
    set(header::CONTENT_TYPE, "application/zstd".into());
    set(header::CONTENT_LENGTH, bytes.to_string());
    set(header::ETAG, format!("\"{sha256}\""));
    set(
        header::CONTENT_DISPOSITION,
        format!("attachment; filename=\"{name}-{version}.tar.zst\""),
    );
    set(header::HeaderName::from_static("x-silk-sha256"), sha256);
    Ok(response)
}

/// A git service's webhook (GitHub, GitLab, Gitea, Forgejo). No bearer token: the
/// signature with the project's webhook secret is the authentication. A tag matching the
/// project's pattern queues a build (`202`); anything else is ignored with the reason (`200`).
#[utoipa::path(post, path = "/api/v1/webhooks/{name}", params(("name" = String, Path, description = "project name")),
    request_body(content = Object, description = "the git service's event, as it sent it"),
    security(()),
    responses((status = 202, body = BuildQueued), (status = 200, body = WebhookIgnored),
        (status = 401, body = silk_api::ApiError), (status = 404, body = silk_api::ApiError),
        (status = 413, body = silk_api::ApiError)))]
async fn webhook(
    State(hub): State<HubHandle>,
    Path(name): Path<String>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    match hub.webhook(&name, &header, &body).await {
        Ok(WebhookAnswer::Queued(queued)) => {
            Ok((StatusCode::ACCEPTED, Json(queued)).into_response())
        }
        Ok(WebhookAnswer::Ignored(ignored)) => Ok((StatusCode::OK, Json(ignored)).into_response()),
        Err(e) => {
            if e.code() == ErrorCode::Unauthorized {
                tracing::warn!(project = %name, error = %e, "webhook refused");
            }
            Err(ApiError::from(e))
        }
    }
}
