//! The HTTP API contract that Silk's servers (the hub, the router) and their clients share:
//!
//! - [`ErrorCode`], the one set of machine-readable error codes with the HTTP status each one
//!   is answered with, and [`ApiError`], the body of every error answer;
//! - the request and response types of the hub's API: [`runs`], [`jobs`], [`agents`],
//!   [`tokens`], [`tenants`], [`logs`], [`projects`], [`alerts`], with a run's [`health`] thresholds; their OpenAPI schemas are
//!   derived here (the hub's document is made from them);
//! - [`downloader`], the schema of a run's downloader config (what the hub checks at submit
//!   and the agents compile);
//! - with the `client` feature, [`client::Client`], the typed async HTTP client the CLI and
//!   the tests use.
//!
//! Ids are `silk_core`'s typed ids ([`silk_core::RunId`], [`silk_core::AgentId`],
//! [`silk_core::HubId`]). Apart from the client, this crate knows no server, no framework and
//! no I/O: statuses are plain numbers, which the servers turn into their framework's type.

pub mod agents;
pub mod alerts;
#[cfg(feature = "client")]
pub mod client;
pub mod downloader;
pub mod health;
pub mod jobs;
pub mod logs;
pub mod programs;
pub mod projects;
pub mod router;
pub mod runs;
pub mod tenants;
pub mod tokens;

use serde::{Deserialize, Serialize};
use std::fmt;

/// Why a request was refused or failed, as the `code` field of an error body says it. The
/// same string on the wire for every server; each has one HTTP status ([`ErrorCode::status`]).
/// A `5xx` answer's message never holds internal detail (paths, store errors): the server
/// logs that under an incident id and says only the code and the id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The body, a parameter or a path id is invalid (the message names it).
    BadRequest,
    /// No valid token.
    Unauthorized,
    /// The token may not do this (the message names the field or the right).
    Forbidden,
    /// No such resource or route.
    NotFound,
    /// The resource exists already (a job's name).
    Conflict,
    /// The run's state does not allow the action.
    WrongState,
    /// No agents could be allocated to the run.
    AllocationFailed,
    /// Another hub drives the run.
    OwnedElsewhere,
    /// The body is larger than the server reads.
    TooLarge,
    /// The server is not ready to serve (readiness).
    NotReady,
    /// The bus refused a publish or a subscribe (after its retries).
    Bus,
    /// The server is shutting down.
    ShuttingDown,
    /// A target the request needs is unavailable (the router's outbounds).
    Unavailable,
    /// The server's configuration is invalid.
    BadConfig,
    /// The server's storage failed (detail in its log).
    Storage,
    /// Anything else that failed inside the server (detail in its log).
    Internal,
}

impl ErrorCode {
    /// Every code, for documentation and tests.
    pub const ALL: [ErrorCode; 16] = [
        ErrorCode::BadRequest,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::NotFound,
        ErrorCode::Conflict,
        ErrorCode::WrongState,
        ErrorCode::AllocationFailed,
        ErrorCode::OwnedElsewhere,
        ErrorCode::TooLarge,
        ErrorCode::NotReady,
        ErrorCode::Bus,
        ErrorCode::ShuttingDown,
        ErrorCode::Unavailable,
        ErrorCode::BadConfig,
        ErrorCode::Storage,
        ErrorCode::Internal,
    ];

    /// The HTTP status the code is answered with.
    pub fn status(self) -> u16 {
        match self {
            ErrorCode::BadRequest => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::Conflict
            | ErrorCode::WrongState
            | ErrorCode::AllocationFailed
            | ErrorCode::OwnedElsewhere => 409,
            ErrorCode::TooLarge => 413,
            ErrorCode::NotReady
            | ErrorCode::Bus
            | ErrorCode::ShuttingDown
            | ErrorCode::Unavailable => 503,
            ErrorCode::BadConfig | ErrorCode::Storage | ErrorCode::Internal => 500,
        }
    }

    /// Whether the answer is a server error, whose message must hold no internal detail.
    pub fn is_server_error(self) -> bool {
        self.status() >= 500 && self.status() != 503
    }

    /// The code as it is on the wire (`bad_request`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Conflict => "conflict",
            ErrorCode::WrongState => "wrong_state",
            ErrorCode::AllocationFailed => "allocation_failed",
            ErrorCode::OwnedElsewhere => "owned_elsewhere",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::NotReady => "not_ready",
            ErrorCode::Bus => "bus",
            ErrorCode::ShuttingDown => "shutting_down",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::BadConfig => "bad_config",
            ErrorCode::Storage => "storage",
            ErrorCode::Internal => "internal",
        }
    }
}

impl std::str::FromStr for ErrorCode {
    type Err = String;

    /// The code of its wire spelling (`not_found`); an unknown spelling is an error naming it.
    fn from_str(text: &str) -> Result<Self, String> {
        ErrorCode::ALL
            .into_iter()
            .find(|c| c.as_str() == text)
            .ok_or_else(|| format!("unknown error code `{text}`"))
    }
}

/// The body of every error answer, `{"code": "...", "message": "..."}`, code first.
/// The code decides the status ([`ErrorCode::status`]); the message is for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ApiError {
    /// Machine-readable code (`bad_request`, `not_found`, `conflict`, …).
    #[schema(value_type = String)]
    pub code: ErrorCode,
    /// For people.
    pub message: String,
}

impl ApiError {
    /// An error answer with `code` and `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// Adds `key=value` to a query string's pairs when there is a value (the query types'
/// `pairs`).
pub(crate) fn push_param(
    pairs: &mut Vec<(&'static str, String)>,
    key: &'static str,
    value: Option<&impl ToString>,
) {
    if let Some(v) = value {
        pairs.push((key, v.to_string()));
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_string_is_the_serde_form_and_round_trips() {
        for code in ErrorCode::ALL {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            let back: ErrorCode = serde_json::from_str(&json).unwrap();
            assert_eq!(back, code);
            assert_eq!(code.as_str().parse::<ErrorCode>(), Ok(code));
        }
    }

    #[test]
    fn statuses() {
        let table = [
            (ErrorCode::BadRequest, 400),
            (ErrorCode::Unauthorized, 401),
            (ErrorCode::Forbidden, 403),
            (ErrorCode::NotFound, 404),
            (ErrorCode::Conflict, 409),
            (ErrorCode::WrongState, 409),
            (ErrorCode::AllocationFailed, 409),
            (ErrorCode::OwnedElsewhere, 409),
            (ErrorCode::TooLarge, 413),
            (ErrorCode::NotReady, 503),
            (ErrorCode::Bus, 503),
            (ErrorCode::ShuttingDown, 503),
            (ErrorCode::Unavailable, 503),
            (ErrorCode::BadConfig, 500),
            (ErrorCode::Storage, 500),
            (ErrorCode::Internal, 500),
        ];
        assert_eq!(table.len(), ErrorCode::ALL.len());
        for (code, status) in table {
            assert_eq!(code.status(), status, "{code}");
            assert_eq!(code.is_server_error(), status == 500, "{code}");
        }
    }
}
