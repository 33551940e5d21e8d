//! The API of the router the hub runs (see the parent module for the conventions).
//!
//! | method + path | answer |
//! |---|---|
//! | `GET /api/v1/router` | `RouterView`: inbounds and outbounds with counters, backlogs read now; `503` when the hub runs no router |
//! | `POST /api/v1/router/check_task` | the router's dry run for `{inbound, task}` (nothing pushed or recorded): `POST /inbound/{name}/check_task/`'s answer |
//! | `GET /api/v1/router/failures` | `RouterFailuresPage`, newest first (`?inbound=&outbound=&reason=&since=&until=&replayed=&after=&limit=`) |
//! | `POST /api/v1/router/failures/replay` | submits the selected records' tasks again (`ReplayRequest`) → `ReplayAnswer`; `503` when the hub runs no router |
//!
//! Admin only: the router is the platform's, over every tenant.

use super::{ApiResult, Body, parse_body, require_admin_for};
use crate::auth::Principal;
use crate::hub::HubHandle;
use axum::Json;
use axum::extract::{Query, State};
use silk_api::router::{
    CheckTaskRequest, ReplayAnswer, ReplayRequest, RouterFailuresPage, RouterFailuresParams,
    RouterView,
};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

const ADMIN_ONLY: &str = "see or use the router (it is the platform's, over every tenant)";

/// The router's routes (all need a token).
pub(crate) fn routes() -> OpenApiRouter<HubHandle> {
    OpenApiRouter::new()
        .routes(routes!(status))
        .routes(routes!(check_task))
        .routes(routes!(failures))
        .routes(routes!(replay))
}

/// The router this hub runs: inbounds and outbounds with their counters (admin only).
#[utoipa::path(get, path = "/api/v1/router",
    responses((status = 200, body = RouterView), (status = 403, body = silk_api::ApiError), (status = 503, body = silk_api::ApiError)))]
async fn status(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
) -> ApiResult<Json<RouterView>> {
    require_admin_for(&principal, ADMIN_ONLY)?;
    Ok(Json(hub.router_view().await?))
}

/// What the router would do with a task arriving at an inbound: its convert chain runs,
/// nothing is pushed or recorded (admin only: the chain may run the operator's Python
/// converts).
#[utoipa::path(post, path = "/api/v1/router/check_task", request_body = CheckTaskRequest,
    responses((status = 200, body = Object), (status = 400, body = silk_api::ApiError),
        (status = 403, body = silk_api::ApiError), (status = 503, body = silk_api::ApiError)))]
async fn check_task(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Body(body): Body,
) -> ApiResult<Json<serde_json::Value>> {
    require_admin_for(&principal, ADMIN_ONLY)?;
    let request: CheckTaskRequest = parse_body(&body)?;
    Ok(Json(hub.router_check_task(&request).await?))
}

/// The router's failure records, newest first (admin only).
#[utoipa::path(get, path = "/api/v1/router/failures", params(RouterFailuresParams),
    responses((status = 200, body = RouterFailuresPage), (status = 400, body = silk_api::ApiError), (status = 403, body = silk_api::ApiError)))]
async fn failures(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Query(params): Query<RouterFailuresParams>,
) -> ApiResult<Json<RouterFailuresPage>> {
    require_admin_for(&principal, ADMIN_ONLY)?;
    Ok(Json(hub.router_failures(&params).await?))
}

/// Submits the selected failure records' tasks to the router again, oldest first (admin
/// only); each is marked replayed once the router took it.
#[utoipa::path(post, path = "/api/v1/router/failures/replay", request_body = ReplayRequest,
    responses((status = 200, body = ReplayAnswer), (status = 400, body = silk_api::ApiError),
        (status = 403, body = silk_api::ApiError), (status = 503, body = silk_api::ApiError)))]
async fn replay(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Body(body): Body,
) -> ApiResult<Json<ReplayAnswer>> {
    require_admin_for(&principal, ADMIN_ONLY)?;
    let request: ReplayRequest = parse_body(&body)?;
    Ok(Json(hub.replay_router_failures(&request).await?))
}
