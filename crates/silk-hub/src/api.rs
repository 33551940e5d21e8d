//! The hub's HTTP API (JSON), under `/api/v1`:
//!
//! | method + path | answer |
//! |---|---|
//! | `GET /healthz` | `200 ok` while the process serves |
//! | `GET /api/v1/agents` | `200` `[AgentView]`: `id`, `state` (`alive`/`suspect`/`dead`), `cpu_pct`, `memory_bytes`, `active_downloaders`, `in_flight`, `qps`, `last_heartbeat_ms`, `phi`, `labels`, `capacity`, `host`, `version`, `cores`, `total_memory_bytes` |
//! | `GET /api/v1/runs` | `200` `[RunView]` (see `run`) |
//! | `POST /api/v1/runs` | body `RunRequest`; `201` `RunView` once allocated and started; `409 allocation_failed` when it cannot be allocated (the run is stored as failed) |
//! | `GET /api/v1/runs/{id}` | `200` `RunView` |
//! | `POST /api/v1/runs/{id}/pause`, `/resume`, `/cancel` | `200` `RunView`; `409 wrong_state` when the action does not apply |
//!
//! Errors are `{"code": "...", "message": "..."}` with the status of their kind: `400
//! bad_request`, `404 not_found`, `409 wrong_state` / `allocation_failed`, `503 bus` /
//! `shutting_down`, `500` otherwise.

use crate::error::HubError;
use crate::hub::HubHandle;
use crate::run::RunRequest;
use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;
use silk_core::RunId;

/// An API error.
#[derive(Debug, Serialize)]
struct ApiError {
    code: String,
    message: String,
    #[serde(skip)]
    status: StatusCode,
}

impl ApiError {
    fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            status,
        }
    }
}

impl From<HubError> for ApiError {
    fn from(e: HubError) -> Self {
        let code = e.code();
        let status = match code {
            "bad_request" => StatusCode::BAD_REQUEST,
            "not_found" => StatusCode::NOT_FOUND,
            "wrong_state" | "allocation_failed" => StatusCode::CONFLICT,
            "bus" | "shutting_down" => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, code, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(&self)).into_response()
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// The API router (state included).
pub(crate) fn router(hub: HubHandle) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/api/v1/agents", get(agents))
        .route("/api/v1/runs", get(runs).post(submit))
        .route("/api/v1/runs/{id}", get(run))
        .route("/api/v1/runs/{id}/{action}", post(act))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .with_state(hub)
}

async fn agents(State(hub): State<HubHandle>) -> impl IntoResponse {
    Json(hub.agents())
}

async fn runs(State(hub): State<HubHandle>) -> impl IntoResponse {
    Json(hub.runs().await)
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
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no run `{id}`"),
        ))
    }
}

async fn run(State(hub): State<HubHandle>, Path(id): Path<String>) -> ApiResult<Response> {
    let id = run_id(&id)?;
    Ok(Json(hub.run(&id).await?).into_response())
}

async fn submit(State(hub): State<HubHandle>, body: Bytes) -> ApiResult<Response> {
    let request: RunRequest = parse_body(&body)?;
    let view = hub.submit(request).await?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

/// Parses a JSON body; the error names the field (`spider: invalid type: …`) and the place.
fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> ApiResult<T> {
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
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("invalid request body: {at}{inner}"),
        )
    })
}

async fn act(
    State(hub): State<HubHandle>,
    Path((id, action)): Path<(String, String)>,
) -> ApiResult<Response> {
    let id = run_id(&id)?;
    let view = match action.as_str() {
        "pause" => hub.pause(&id).await?,
        "resume" => hub.resume(&id).await?,
        "cancel" => hub.cancel(&id).await?,
        other => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no run action `{other}` (expected pause, resume or cancel)"),
            ));
        }
    };
    Ok(Json(view).into_response())
}
