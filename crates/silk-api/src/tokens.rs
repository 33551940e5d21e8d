//! API tokens on the wire: [`TokenView`] (listed, never the secret), [`TokenRequest`] (the
//! body of `POST /api/v1/tokens`) and [`NewToken`] (its answer, the only place the secret
//! appears).

use serde::{Deserialize, Serialize};

/// A token as the API lists it (no secret).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenView {
    /// The token id (the part after `silk_`).
    pub id: String,
    /// Its name.
    pub name: String,
    /// Whether it may manage tokens.
    pub admin: bool,
    /// Created, ms since the epoch.
    pub created_ms: u64,
    /// Last used (to the minute), ms since the epoch.
    pub last_used_ms: Option<u64>,
}

/// A token just created: the only time its secret is shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NewToken {
    /// The token id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// The bearer token (`silk_<id>_<secret>`); keep it: it cannot be shown again.
    pub token: String,
    /// Created, ms since the epoch.
    pub created_ms: u64,
}

/// A token to create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    /// For people.
    pub name: String,
    /// May manage tokens (default false).
    #[serde(default)]
    pub admin: bool,
}
