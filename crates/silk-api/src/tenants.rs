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
    /// Its quotas (no field: no limit).
    #[serde(default, skip_serializing_if = "Quotas::is_empty")]
    pub quotas: Quotas,
    /// Its weight in the fair share of agents' slots between tenants (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// Private address ranges (CIDR) its runs may reach besides what the agents and hubs
    /// allow themselves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_networks: Vec<String>,
    /// The hub's item sink targets its runs may deliver items to; absent: every one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink_targets: Option<Vec<String>>,
    /// Created, ms since the epoch.
    pub created_ms: u64,
}

/// A tenant's quotas, set by an admin; a field left out is no limit. Days are counted in
/// `time_zone`. A run that would pass a page or byte limit pauses with the reason
/// `quota_exhausted: …` and resumes by itself when the quota allows again (a new day, a raised
/// limit, another run ending).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Quotas {
    /// Most of its runs dispatching at once (the others wait, paused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrent_runs: Option<u32>,
    /// Most pages fetched per day, over all its runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages_per_day: Option<u64>,
    /// Most bytes downloaded per day, over all its runs (checked before each slice of pages
    /// a run gets: a run may pass it by what one slice downloads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_day: Option<u64>,
    /// Most pages of one run (a spider's `max_pages` above it is lowered to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages_per_run: Option<u64>,
    /// Most requests its spider runs have out at agents at once (agent slots), on each hub
    /// (its runs there share them: each run's share of the fair share is cut to its part).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_slots: Option<u32>,
    /// The IANA time zone its days are counted in (default `UTC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
}

impl Quotas {
    /// Whether no quota is set.
    pub fn is_empty(&self) -> bool {
        *self == Quotas::default()
    }

    /// Whether a page or byte counter per day is limited.
    pub fn limits_days(&self) -> bool {
        self.pages_per_day.is_some() || self.bytes_per_day.is_some()
    }
}

/// What a tenant used today (`GET /api/v1/tenants/{name}/usage`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TenantUsage {
    /// The tenant.
    pub tenant: String,
    /// Today in its time zone (`YYYY-MM-DD`).
    pub day: String,
    /// Its time zone.
    pub time_zone: String,
    /// When the day's counters start again, ms since the epoch.
    pub resets_ms: u64,
    /// Pages fetched today.
    pub pages: u64,
    /// Bytes downloaded today.
    pub bytes: u64,
    /// Pages reserved by its running runs (slices handed out and not used yet).
    pub reserved: u64,
    /// Pages fetched today past what the slices covered.
    pub overshoot_pages: u64,
    /// Its runs dispatching now.
    pub running_runs: u64,
    /// Its runs paused because a quota is used up.
    pub quota_paused_runs: u64,
    /// Its quotas.
    pub quotas: Quotas,
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
    /// Its quotas (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quotas: Option<Quotas>,
    /// Its weight in the fair share of agents' slots between tenants: 1 to 1000 (default 1).
    /// Runs of tenants weighted 1 and 3 that saturate the same agents get 25 % and 75 % of
    /// their slots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// Private address ranges (CIDR, e.g. `10.1.0.0/16`) its runs may reach: their fetches on
    /// any agent and their webhook sinks, besides the ranges the agents and hubs allow
    /// themselves (`allow_networks` in their settings). Without them a tenant's runs reach no
    /// loopback, link-local, RFC 1918, CGNAT, ULA or unspecified address (`private_address`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_networks: Vec<String>,
    /// The hub's item sink targets (`silk hub --sink-targets`) its runs may name in
    /// `sinks.targets`; absent: every one. `[]`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink_targets: Option<Vec<String>>,
}

/// Whether `name` may name a tenant (1 to 64 letters, digits, `.`, `_`, `-`).
pub fn valid_tenant_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}
