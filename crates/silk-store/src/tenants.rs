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
}
