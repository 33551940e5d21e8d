//! Tenants: the hub's side of [`silk_store::TenantStore`]. A tenant is a name with a
//! document (`{"description": …}`); every job, run, project and token belongs to one, and a
//! token sees only its tenant's objects (the API's checks, see `api`). The tenant `default`
//! always exists: what was made before tenants belongs to it, and `--no-auth` acts in it.

use crate::error::HubError;
use crate::hub::HubHandle;
use silk_api::tenants::{TenantRequest, TenantView, valid_tenant_name};
use silk_store::{DEFAULT_TENANT, TenantRow};

fn tenant_view(row: TenantRow) -> TenantView {
    TenantView {
        description: row
            .doc
            .get("description")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned),
        name: row.name,
        created_ms: row.created_ms,
    }
}

impl HubHandle {
    /// Creates a tenant.
    pub async fn create_tenant(&self, request: &TenantRequest) -> Result<TenantView, HubError> {
        if !valid_tenant_name(&request.name) {
            return Err(HubError::BadTenant(format!(
                "name `{}`: use 1 to 64 letters, digits, `.`, `_` or `-`",
                request.name
            )));
        }
        if let Some(d) = &request.description
            && d.len() > 1000
        {
            return Err(HubError::BadTenant(
                "description: at most 1000 characters".into(),
            ));
        }
        let now = self.shared().clock.now_ms();
        let row = TenantRow {
            name: request.name.clone(),
            doc: serde_json::json!({ "description": request.description }),
            created_ms: now,
            updated_ms: now,
        };
        self.store()
            .create_tenant(&row)
            .await
            .map_err(|e| match e {
                silk_store::StoreError::Conflict { .. } => {
                    HubError::Conflict(format!("a tenant named `{}` exists already", row.name))
                }
                other => other.into(),
            })?;
        tracing::info!(tenant = %row.name, "tenant created");
        Ok(tenant_view(row))
    }

    /// Every tenant, by name.
    pub async fn tenants(&self) -> Result<Vec<TenantView>, HubError> {
        Ok(self
            .store()
            .list_tenants()
            .await?
            .into_iter()
            .map(tenant_view)
            .collect())
    }

    /// A tenant.
    pub async fn tenant(&self, name: &str) -> Result<TenantView, HubError> {
        match self.store().get_tenant(name).await? {
            Some(row) => Ok(tenant_view(row)),
            None => Err(HubError::NoSuchTenant(name.to_owned())),
        }
    }

    /// Deletes a tenant that owns nothing (no job, run, token or project; `409` naming
    /// what it still owns). The tenant `default` stays.
    pub async fn delete_tenant(&self, name: &str) -> Result<(), HubError> {
        if name == DEFAULT_TENANT {
            return Err(HubError::Conflict(
                "the tenant `default` cannot be deleted".into(),
            ));
        }
        let projects = self
            .store()
            .list_projects()
            .await?
            .iter()
            .filter(|row| crate::project::tenant_of(&row.doc) == name)
            .count();
        if projects > 0 {
            return Err(HubError::Conflict(format!(
                "tenant `{name}` still has {projects} projects"
            )));
        }
        match self.store().delete_tenant(name).await {
            Ok(true) => {
                tracing::info!(tenant = %name, "tenant deleted");
                Ok(())
            }
            Ok(false) => Err(HubError::NoSuchTenant(name.to_owned())),
            Err(silk_store::StoreError::Conflict { what }) => Err(HubError::Conflict(what)),
            Err(e) => Err(e.into()),
        }
    }
}
