//! The hub's facade for tenants (the `HubHandle` methods the API calls; the documents and
//! pool grants are in `tenant`). A tenant is a name with a document (`description`, granted
//! `pools`); every job, run, project and token belongs to one, and a token sees only its
//! tenant's objects (the API's checks, see `api`). The tenant `default` always exists: what
//! was made before tenants belongs to it, and `--no-auth` acts in it.

use crate::error::HubError;
use crate::hub::HubHandle;
use crate::tenant::{TenantDoc, check_doc, tenant_doc, tenant_view};
use silk_api::tenants::{TenantRequest, TenantUsage, TenantView, valid_tenant_name};
use silk_store::{DEFAULT_TENANT, RunFilter, TenantRow};

fn doc_value(doc: &TenantDoc) -> Result<serde_json::Value, HubError> {
    serde_json::to_value(doc).map_err(|e| HubError::Store(e.to_string()))
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
        let doc = TenantDoc {
            description: request.description.clone(),
            pools: request.pools.clone(),
            quotas: request.quotas.clone().unwrap_or_default(),
            weight: request.weight,
            allow_networks: crate::tenant::parse_networks(&request.allow_networks)?,
            sink_targets: request.sink_targets.clone(),
        };
        check_doc(&doc)?;
        let now = self.shared().clock.now_ms();
        let row = TenantRow {
            name: request.name.clone(),
            doc: doc_value(&doc)?,
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
        tracing::info!(tenant = %row.name, pools = ?doc.pools, allow_networks = ?doc.allow_networks, sink_targets = ?doc.sink_targets, "tenant created");
        Ok(tenant_view(&row, &doc))
    }

    /// Changes a tenant with a JSON merge patch: `description`, `pools` (`null`: every
    /// agent again), `quotas` (the whole set), `weight`, `allow_networks` (the whole list;
    /// runs started afterwards get it), `sink_targets` (`null`: every target again).
    pub async fn update_tenant(
        &self,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<TenantView, HubError> {
        let serde_json::Value::Object(fields) = patch else {
            return Err(HubError::BadTenant(
                "the body must be a JSON object (a merge patch)".into(),
            ));
        };
        let row = self
            .store()
            .get_tenant(name)
            .await?
            .ok_or_else(|| HubError::NoSuchTenant(name.to_owned()))?;
        let mut doc = tenant_doc(&row)?;
        for (key, value) in fields {
            let bad = |e: serde_json::Error| HubError::BadTenant(format!("{key}: {e}"));
            match key.as_str() {
                "description" => {
                    doc.description = serde_json::from_value(value.clone()).map_err(bad)?
                }
                "pools" => doc.pools = serde_json::from_value(value.clone()).map_err(bad)?,
                "weight" => doc.weight = serde_json::from_value(value.clone()).map_err(bad)?,
                "sink_targets" => {
                    doc.sink_targets = serde_json::from_value(value.clone()).map_err(bad)?
                }
                // The whole list (`null`: none).
                "allow_networks" => {
                    let ranges: Option<Vec<String>> =
                        serde_json::from_value(value.clone()).map_err(bad)?;
                    doc.allow_networks =
                        crate::tenant::parse_networks(&ranges.unwrap_or_default())?;
                }
                // The whole set: a quota left out is no limit.
                "quotas" => {
                    let quotas: Option<silk_api::tenants::Quotas> =
                        serde_json::from_value(value.clone()).map_err(bad)?;
                    doc.quotas = quotas.unwrap_or_default();
                }
                "name" if value.as_str() == Some(name) => {}
                "name" => {
                    return Err(HubError::BadTenant(
                        "name: a tenant cannot be renamed".into(),
                    ));
                }
                other => {
                    return Err(HubError::BadTenant(format!(
                        "{other}: no such field (description, pools, quotas, weight, allow_networks, sink_targets)"
                    )));
                }
            }
        }
        check_doc(&doc)?;
        let updated = TenantRow {
            name: row.name.clone(),
            doc: doc_value(&doc)?,
            created_ms: row.created_ms,
            updated_ms: self.shared().clock.now_ms(),
        };
        self.store().update_tenant(&updated).await?;
        tracing::info!(tenant = %name, pools = ?doc.pools, quotas = ?doc.quotas, allow_networks = ?doc.allow_networks, sink_targets = ?doc.sink_targets, "tenant changed");
        Ok(tenant_view(&updated, &doc))
    }

    /// What a tenant used today (in its time zone) and its quotas.
    pub async fn tenant_usage(&self, name: &str) -> Result<TenantUsage, HubError> {
        let row = self
            .store()
            .get_tenant(name)
            .await?
            .ok_or_else(|| HubError::NoSuchTenant(name.to_owned()))?;
        let quotas = tenant_doc(&row)?.quotas;
        let now = self.shared().clock.now_ms();
        let (day, resets_ms) = crate::tenant::quota_day(&quotas, now)?;
        let usage = self
            .store()
            .get_usage(&crate::tenant::tenant_key(name, &day))
            .await?;
        let runs = |state: &str| RunFilter {
            tenant: Some(name.to_owned()),
            states: vec![state.to_owned()],
            ..RunFilter::default()
        };
        let running_runs = self.store().count_runs(&runs("running")).await?;
        let quota_paused_runs = self
            .store()
            .list_runs(&runs("paused"))
            .await?
            .iter()
            .filter(|r| {
                crate::tenant::quota_paused(r.record.get("reason").and_then(|v| v.as_str()))
            })
            .count() as u64;
        Ok(TenantUsage {
            tenant: name.to_owned(),
            day,
            time_zone: quotas.time_zone.clone().unwrap_or_else(|| "UTC".into()),
            resets_ms,
            pages: usage.as_ref().map_or(0, |u| u.pages),
            bytes: usage.as_ref().map_or(0, |u| u.bytes),
            reserved: usage.as_ref().map_or(0, |u| u.reserved),
            overshoot_pages: usage.as_ref().map_or(0, |u| u.overshoot),
            running_runs,
            quota_paused_runs,
            quotas,
        })
    }

    /// Every tenant, by name.
    pub async fn tenants(&self) -> Result<Vec<TenantView>, HubError> {
        let mut out = Vec::new();
        for row in self.store().list_tenants().await? {
            out.push(tenant_view(&row, &tenant_doc(&row)?));
        }
        Ok(out)
    }

    /// A tenant.
    pub async fn tenant(&self, name: &str) -> Result<TenantView, HubError> {
        match self.store().get_tenant(name).await? {
            Some(row) => Ok(tenant_view(&row, &tenant_doc(&row)?)),
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
