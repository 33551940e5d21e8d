//! The router's HTTP server: `POST /task/`, `POST /inbound/{name}/check_task/`,
//! `GET /outbound/{prefix}`, `GET /metrics`, `GET /healthz` (paths work with and without
//! the trailing slash). [`app`] builds the axum `Router` so tests call it without a socket.
//!
//! Errors are JSON `{"error": {"code": "...", "message": "..."}}` through [`ApiError`]:
//! `bad_request` (400: not JSON, not an object), `not_found` (404: unknown inbound),
//! `unavailable` (503: the target is down or the router is stopping; the task was not
//! taken and may be sent again). This module must not route: it hands tasks to
//! [`Router`].

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::RouterError;
use crate::outcome::{Decision, Outcome};
use crate::router::Router;
pub use silk_api::ErrorCode;

/// The HTTP status of `code` (`silk_api::ErrorCode::status`).
fn status_of(code: ErrorCode) -> StatusCode {
    StatusCode::from_u16(code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        (status_of(self.code), Json(body)).into_response()
    }
}

impl From<RouterError> for ApiError {
    fn from(e: RouterError) -> Self {
        let code = match &e {
            RouterError::BadTask(_) | RouterError::Config(_) | RouterError::Refused { .. } => {
                ErrorCode::BadRequest
            }
            RouterError::UnknownInbound(_) | RouterError::InboundDisabled(_) => ErrorCode::NotFound,
            _ => ErrorCode::Unavailable,
        };
        ApiError {
            code,
            message: e.to_string(),
        }
    }
}

fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError {
        code: ErrorCode::BadRequest,
        message: format!("request body is not JSON: {e}"),
    })
}

/// The axum app of `router`.
pub fn app(router: Router) -> axum::Router {
    axum::Router::new()
        .route("/task", post(submit))
        .route("/task/", post(submit))
        .route("/inbound/{name}/check_task", post(check_task))
        .route("/inbound/{name}/check_task/", post(check_task))
        .route("/outbound", get(outbounds_all))
        .route("/outbound/", get(outbounds_all))
        .route("/outbound/{prefix}", get(outbounds))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(router)
}

#[derive(Debug, Deserialize)]
struct SubmitQuery {
    inbound: Option<String>,
}

/// `POST /task/`: one task (a JSON object), or a JSON array of tasks (Silk: answered with
/// an array of outcomes, in order). 200 with the outcome once the task is delivered,
/// ended or recorded.
async fn submit(
    State(router): State<Router>,
    Query(query): Query<SubmitQuery>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let inbound = router.http_inbound(query.inbound.as_deref())?;
    match parse_body(&body)? {
        Value::Array(tasks) => {
            let outcomes = futures::future::join_all(tasks.into_iter().map(|task| {
                let router = router.clone();
                async move {
                    if !task.is_object() {
                        return Err(ApiError {
                            code: ErrorCode::BadRequest,
                            message: "every element of the array must be a JSON object".into(),
                        });
                    }
                    router.submit(inbound, task).await.map_err(ApiError::from)
                }
            }))
            .await;
            let mut failed = None;
            let answers: Vec<Answer> = outcomes
                .into_iter()
                .map(|outcome| match outcome {
                    Ok(o) => Answer::Done(OutcomeWire::of(o)),
                    Err(e) => {
                        failed.get_or_insert(e.code);
                        Answer::Error {
                            error: ErrorBody {
                                code: e.code,
                                message: e.message,
                            },
                        }
                    }
                })
                .collect();
            let status = failed.map_or(StatusCode::OK, status_of);
            Ok((status, Json(answers)).into_response())
        }
        task @ Value::Object(_) => {
            let outcome = router.submit(inbound, task).await?;
            Ok(Json(OutcomeWire::of(outcome)).into_response())
        }
        _ => Err(ApiError {
            code: ErrorCode::BadRequest,
            message: "a task is a JSON object (or an array of them)".into(),
        }),
    }
}

/// The answer to one submitted task.
#[derive(Debug, Serialize)]
struct OutcomeWire {
    /// Whether the inbound's selectors accepted it.
    accepted: bool,
    #[serde(flatten)]
    outcome: Outcome,
}

impl OutcomeWire {
    fn of(outcome: Outcome) -> OutcomeWire {
        OutcomeWire {
            accepted: outcome.decision != Decision::Rejected,
            outcome,
        }
    }
}

#[derive(Debug, Serialize)]
struct ErrorBody {
    code: ErrorCode,
    message: String,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Answer {
    Done(OutcomeWire),
    Error { error: ErrorBody },
}

/// `POST /inbound/{name}/check_task/`: the dry run.
async fn check_task(
    State(router): State<Router>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    if router.config().inbound_index(&name).is_none() {
        return Err(RouterError::UnknownInbound(name).into());
    }
    let task = parse_body(&body)?;
    Ok(Json(router.check_task(&name, &task).await).into_response())
}

async fn outbounds_all(State(router): State<Router>) -> Response {
    Json(router.outbound_status("").await).into_response()
}

/// `GET /outbound/{prefix}`: outbounds whose name starts with `prefix`.
async fn outbounds(State(router): State<Router>, Path(prefix): Path<String>) -> Response {
    Json(router.outbound_status(&prefix).await).into_response()
}

async fn metrics(State(router): State<Router>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        router.metrics_text(),
    )
        .into_response()
}
