//! API tokens on the wire: [`TokenView`] (listed, never the secret), [`TokenRequest`] (the
//! body of `POST /api/v1/tokens`) and [`NewToken`] (its answer, the only place the secret
//! appears). A token belongs to a tenant and has a [`Role`] in it.

use serde::{Deserialize, Serialize};

/// A token as the API lists it (no secret).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenView {
    /// The token id (the part after `silk_`).
    pub id: String,
    /// Its name.
    pub name: String,
    /// The tenant it belongs to.
    pub tenant: String,
    /// Its role.
    pub role: Role,
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    /// For people.
    pub name: String,
    /// Its role (default `member`). Only an admin makes `admin` tokens; an owner makes
    /// tokens of its own tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// Its tenant (default: the caller's, or the one an admin acts in with `X-Silk-Tenant`).
    /// Only an admin names another tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Before roles: `true` is `role: admin`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub admin: bool,
}

impl TokenRequest {
    /// The role asked for: `role`, else `admin` when the old `admin` flag is set, else
    /// `member`.
    pub fn role(&self) -> Role {
        match self.role {
            Some(role) => role,
            None if self.admin => Role::Admin,
            None => Role::Member,
        }
    }
}

/// What a token may do in its tenant.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads its tenant's objects; changes nothing.
    Viewer,
    /// Jobs, runs, items, logs of its tenant.
    Member,
    /// A member that also manages its tenant's tokens.
    Owner,
    /// The platform: every tenant (acting in one with `X-Silk-Tenant`), agents, alerts,
    /// tenants, raw commands.
    Admin,
}

impl Role {
    /// The role's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Member => "member",
            Role::Owner => "owner",
            Role::Admin => "admin",
        }
    }

    /// The role named `text`.
    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "viewer" => Some(Role::Viewer),
            "member" => Some(Role::Member),
            "owner" => Some(Role::Owner),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
