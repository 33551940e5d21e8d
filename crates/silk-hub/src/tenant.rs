//! A tenant's document as the store keeps it ([`TenantDoc`]), its API view, and the pool
//! grants: which agent pools a tenant's runs may use ([`granted_pools`]).

use crate::error::HubError;
use serde::{Deserialize, Serialize};
use silk_api::tenants::TenantView;
use silk_store::TenantRow;

/// What the store keeps of a tenant besides its name and times.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TenantDoc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The agent pools its runs may use; `None`: every agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pools: Option<Vec<String>>,
}

/// A tenant row's document (an unreadable one is an error naming the tenant).
pub(crate) fn tenant_doc(row: &TenantRow) -> Result<TenantDoc, HubError> {
    serde_json::from_value(row.doc.clone())
        .map_err(|e| HubError::Store(format!("tenant {:?}: unreadable document: {e}", row.name)))
}

/// The API's view of a tenant.
pub(crate) fn tenant_view(row: &TenantRow, doc: &TenantDoc) -> TenantView {
    TenantView {
        name: row.name.clone(),
        description: doc.description.clone(),
        pools: doc.pools.clone(),
        created_ms: row.created_ms,
    }
}

/// Checks a tenant's settings; the error names the field.
pub(crate) fn check_doc(doc: &TenantDoc) -> Result<(), HubError> {
    if doc.description.as_ref().is_some_and(|d| d.len() > 1000) {
        return Err(HubError::BadTenant(
            "description: at most 1000 characters".into(),
        ));
    }
    if let Some(pools) = &doc.pools {
        silk_api::runs::check_pools(pools).map_err(HubError::BadTenant)?;
    }
    Ok(())
}

/// The pools a run of the tenant with `doc` uses, given the pools it asked for: with no
/// grant, what it asked for (any agent when none); with a grant, the granted pools when it
/// asked for none, else what it asked for if every one is granted. A pool not granted is
/// refused naming `pools[i]`.
pub(crate) fn granted_pools(
    tenant: &str,
    doc: &TenantDoc,
    asked: &[String],
) -> Result<Vec<String>, HubError> {
    let Some(granted) = &doc.pools else {
        return Ok(asked.to_vec());
    };
    if asked.is_empty() {
        if granted.is_empty() {
            return Err(HubError::Forbidden(format!(
                "pools: tenant `{tenant}` is granted no agent pool; an admin grants pools \
                 (PATCH /api/v1/tenants/{tenant} {{\"pools\": [...]}})"
            )));
        }
        return Ok(granted.clone());
    }
    for (i, pool) in asked.iter().enumerate() {
        if !granted.contains(pool) {
            return Err(HubError::Forbidden(format!(
                "pools[{i}]: pool `{pool}` is not granted to tenant `{tenant}` (granted: {})",
                if granted.is_empty() {
                    "none".to_owned()
                } else {
                    granted.join(", ")
                }
            )));
        }
    }
    Ok(asked.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_limits_and_fills_a_runs_pools() {
        let open = TenantDoc::default();
        assert_eq!(
            granted_pools("t", &open, &[]).unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(granted_pools("t", &open, &["x".into()]).unwrap(), ["x"]);
        let eu = TenantDoc {
            pools: Some(vec!["eu".into(), "eu2".into()]),
            ..TenantDoc::default()
        };
        assert_eq!(granted_pools("t", &eu, &[]).unwrap(), ["eu", "eu2"]);
        assert_eq!(granted_pools("t", &eu, &["eu2".into()]).unwrap(), ["eu2"]);
        let e = granted_pools("t", &eu, &["eu".into(), "us".into()]).unwrap_err();
        assert!(
            matches!(&e, HubError::Forbidden(m) if m.starts_with("pools[1]: pool `us`")),
            "{e}"
        );
        let none = TenantDoc {
            pools: Some(Vec::new()),
            ..TenantDoc::default()
        };
        let e = granted_pools("t", &none, &[]).unwrap_err();
        assert!(
            matches!(&e, HubError::Forbidden(m) if m.contains("granted no agent pool")),
            "{e}"
        );
    }
}
