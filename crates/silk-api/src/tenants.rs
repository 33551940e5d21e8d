//! Tenants on the wire: [`TenantView`] (listed) and [`TenantRequest`] (the body of
//! `POST /api/v1/tenants`). Every job, run, project, token and what they own belongs to one
//! tenant; a token sees only its tenant's objects.

use serde::{Deserialize, Serialize};

/// The header in which an admin token names the tenant it acts in (default: its own).
pub const TENANT_HEADER: &str = "x-silk-tenant";

/// The tenant everything made before tenants belongs to.
pub const DEFAULT_TENANT: &str = "default";

/// [`DEFAULT_TENANT`], for serde defaults of documents stored before tenants.
pub fn default_tenant() -> String {
    DEFAULT_TENANT.to_owned()
}

/// A tenant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TenantView {
    /// Its name (letters, digits, `.`, `_`, `-`).
    pub name: String,
    /// For people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The agent pools (agents labelled `pool=NAME`) its runs may use; absent: every agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pools: Option<Vec<String>>,
    /// Created, ms since the epoch.
    pub created_ms: u64,
}

/// A tenant to create (admin).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantRequest {
    /// Its name: 1 to 64 letters, digits, `.`, `_` or `-`.
    pub name: String,
    /// For people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The agent pools its runs may use (a run naming no pool uses all of these; one naming
    /// another pool is refused with `403`); absent: every agent. `[]`: none (its runs are
    /// refused until an admin grants a pool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pools: Option<Vec<String>>,
}

/// Whether `name` may name a tenant (1 to 64 letters, digits, `.`, `_`, `-`).
pub fn valid_tenant_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}
