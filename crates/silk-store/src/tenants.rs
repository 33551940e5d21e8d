//! Tenants: the [`TenantStore`] part of the store (every [`crate::MetaStore`] is one).
//!
//! A tenant is a named document (the hub's JSON: its settings); jobs, runs and tokens carry
//! their tenant in a column of their own, a project in its document. The tenant `default`
//! exists from the migration that brought tenants, and everything made before it belongs
//! to it.

use crate::error::StoreError;
use async_trait::async_trait;

/// The tenant everything made before tenants belongs to.
pub const DEFAULT_TENANT: &str = "default";

/// A tenant: its name and the hub's document.
pub type TenantRow = crate::projects::DocRow;

/// Tenants. Every call is one transaction.
#[async_trait]
pub trait TenantStore: Send + Sync {
    /// Adds a tenant. [`StoreError::Conflict`] if one has the same name.
    async fn create_tenant(&self, tenant: &TenantRow) -> Result<(), StoreError>;

    /// Replaces the tenant with `tenant.name`. [`StoreError::NotFound`] if there is none.
    async fn update_tenant(&self, tenant: &TenantRow) -> Result<(), StoreError>;

    /// The tenant named `name`.
    async fn get_tenant(&self, name: &str) -> Result<Option<TenantRow>, StoreError>;

    /// Every tenant, by name.
    async fn list_tenants(&self) -> Result<Vec<TenantRow>, StoreError>;

    /// Removes a tenant that owns no job, run or token (checked in the same transaction;
    /// [`StoreError::Conflict`] naming what it still owns). Whether it existed. Projects
    /// keep their tenant in their document: the caller checks them.
    async fn delete_tenant(&self, name: &str) -> Result<bool, StoreError>;

    /// Reserves up to `want` pages in every counter of `claims` at once, in one transaction
    /// (rows are made as needed and locked in (scope, period) order, so racing hubs never
    /// hand out more than a limit): the pages granted, `min(want, free)` where a claim's free
    /// pages are `max_pages - pages - reserved`, and 0 when a claim's `bytes` reached its
    /// `max_bytes`. A claim with no limit only makes its row.
    async fn reserve_quota(
        &self,
        claims: &[QuotaClaim],
        want: u64,
        now_ms: u64,
    ) -> Result<u64, StoreError>;

    /// Adds `delta` to every counter of `keys` (rows are made as needed); `reserved` goes
    /// down by `delta.unreserve`, never below 0.
    async fn add_usage(
        &self,
        keys: &[UsageKey],
        delta: &UsageDelta,
        now_ms: u64,
    ) -> Result<(), StoreError>;

    /// The counter of `key` (`None`: nothing counted yet).
    async fn get_usage(&self, key: &UsageKey) -> Result<Option<UsageRow>, StoreError>;
}

/// One quota counter: a scope (`tenant:NAME`, `job:ID`) over a period (a day,
/// `2026-11-28`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct UsageKey {
    /// What is counted.
    pub scope: String,
    /// Over which period.
    pub period: String,
}

/// A counter and the limits a reservation on it must respect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaClaim {
    /// The counter.
    pub key: UsageKey,
    /// Most pages in the period (`None`: no page limit).
    pub max_pages: Option<u64>,
    /// Most bytes in the period (`None`: no byte limit).
    pub max_bytes: Option<u64>,
}

/// What a run adds to its counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageDelta {
    /// Pages fetched.
    pub pages: u64,
    /// Bytes downloaded.
    pub bytes: u64,
    /// Reserved pages given back or used up.
    pub unreserve: u64,
    /// Pages fetched past the run's reservation.
    pub overshoot: u64,
}

/// A quota counter as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRow {
    /// The counter.
    pub key: UsageKey,
    /// Pages fetched.
    pub pages: u64,
    /// Bytes downloaded.
    pub bytes: u64,
    /// Pages reserved by runs and not used yet.
    pub reserved: u64,
    /// Pages fetched past a reservation.
    pub overshoot: u64,
    /// Last change, ms since the epoch.
    pub updated_ms: u64,
}
