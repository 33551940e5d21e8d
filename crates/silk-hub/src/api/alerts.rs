//! The API of alerts (see the parent module for the conventions).
//!
//! | method + path | answer |
//! |---|---|
//! | `GET, POST /api/v1/alerts/rules` | `[AlertRuleView]`; create (admin) → `201 AlertRuleView` |
//! | `GET, PUT, DELETE /api/v1/alerts/rules/{name}` | `AlertRuleView`; replace (admin; secrets left out are kept) → `AlertRuleView`; delete (admin) → `204` |
//! | `POST /api/v1/alerts/rules/{name}/test` | queue a `test` delivery (admin) → `202 DeliveryView` |
//! | `GET /api/v1/alerts/deliveries` | `[DeliveryView]`, newest first (`?rule=&state=&limit=`) |
//!
//! Changing rules is an admin's action: a rule makes the hub send to an address of its
//! choosing, with the rule's credentials.

use super::{ApiResult, Body, parse_body, require_admin_for};
use crate::auth::Principal;
use crate::hub::HubHandle;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use silk_api::alerts::{AlertRuleRequest, AlertRuleView, DeliveriesParams, DeliveryView};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// What changing rules needs, said in a `403`.
const ADMIN_ONLY: &str = "change alert rules (the hub sends to their addresses)";
const READ_ADMIN_ONLY: &str =
    "read alert rules and deliveries (they are the platform's, over every tenant)";

/// The alerts' routes (all need a token).
pub(crate) fn routes() -> OpenApiRouter<HubHandle> {
    OpenApiRouter::new()
        .routes(routes!(list_rules, create_rule))
        .routes(routes!(get_rule, put_rule, delete_rule))
        .routes(routes!(test_rule))
        .routes(routes!(deliveries))
}

/// Every alert rule, by name (admin only: rules are the platform's and see every tenant's
/// runs; no secrets).
#[utoipa::path(get, path = "/api/v1/alerts/rules", responses((status = 200, body = [AlertRuleView]), (status = 403, body = silk_api::ApiError)))]
async fn list_rules(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
) -> ApiResult<Json<Vec<AlertRuleView>>> {
    require_admin_for(&principal, READ_ADMIN_ONLY)?;
    Ok(Json(hub.alert_rules().await?))
}

/// Creates an alert rule (admin only).
#[utoipa::path(post, path = "/api/v1/alerts/rules", request_body = AlertRuleRequest,
    responses((status = 201, body = AlertRuleView), (status = 400, body = silk_api::ApiError),
        (status = 403, body = silk_api::ApiError), (status = 409, body = silk_api::ApiError)))]
async fn create_rule(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Body(body): Body,
) -> ApiResult<Response> {
    require_admin_for(&principal, ADMIN_ONLY)?;
    let request: AlertRuleRequest = parse_body(&body)?;
    let view = hub.create_alert_rule(&request).await?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

/// One alert rule (admin only; no secrets).
#[utoipa::path(get, path = "/api/v1/alerts/rules/{name}", params(("name" = String, Path, description = "rule name")),
    responses((status = 200, body = AlertRuleView), (status = 403, body = silk_api::ApiError), (status = 404, body = silk_api::ApiError)))]
async fn get_rule(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(name): Path<String>,
) -> ApiResult<Json<AlertRuleView>> {
    require_admin_for(&principal, READ_ADMIN_ONLY)?;
    Ok(Json(hub.alert_rule(&name).await?))
}

/// Replaces an alert rule (admin only); the webhook URL, headers and SMTP password it leaves
/// out are kept.
#[utoipa::path(put, path = "/api/v1/alerts/rules/{name}", params(("name" = String, Path, description = "rule name")),
    request_body = AlertRuleRequest,
    responses((status = 200, body = AlertRuleView), (status = 400, body = silk_api::ApiError),
        (status = 403, body = silk_api::ApiError), (status = 404, body = silk_api::ApiError)))]
async fn put_rule(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(name): Path<String>,
    Body(body): Body,
) -> ApiResult<Json<AlertRuleView>> {
    require_admin_for(&principal, ADMIN_ONLY)?;
    let request: AlertRuleRequest = parse_body(&body)?;
    Ok(Json(hub.put_alert_rule(&name, &request).await?))
}

/// Deletes an alert rule (admin only); its pending deliveries are dropped.
#[utoipa::path(delete, path = "/api/v1/alerts/rules/{name}", params(("name" = String, Path, description = "rule name")),
    responses((status = 204), (status = 403, body = silk_api::ApiError), (status = 404, body = silk_api::ApiError)))]
async fn delete_rule(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    require_admin_for(&principal, ADMIN_ONLY)?;
    hub.delete_alert_rule(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Queues a `test` delivery of a rule (admin only), sent like any other.
#[utoipa::path(post, path = "/api/v1/alerts/rules/{name}/test", params(("name" = String, Path, description = "rule name")),
    responses((status = 202, body = DeliveryView), (status = 403, body = silk_api::ApiError),
        (status = 404, body = silk_api::ApiError)))]
async fn test_rule(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    require_admin_for(&principal, ADMIN_ONLY)?;
    let view = hub.test_alert_rule(&name).await?;
    Ok((StatusCode::ACCEPTED, Json(view)).into_response())
}

/// Deliveries, newest first (admin only).
#[utoipa::path(get, path = "/api/v1/alerts/deliveries", params(DeliveriesParams),
    responses((status = 200, body = [DeliveryView]), (status = 400, body = silk_api::ApiError), (status = 403, body = silk_api::ApiError)))]
async fn deliveries(
    State(hub): State<HubHandle>,
    axum::Extension(principal): axum::Extension<Principal>,
    Query(params): Query<DeliveriesParams>,
) -> ApiResult<Json<Vec<DeliveryView>>> {
    require_admin_for(&principal, READ_ADMIN_ONLY)?;
    Ok(Json(hub.alert_deliveries(&params).await?))
}
