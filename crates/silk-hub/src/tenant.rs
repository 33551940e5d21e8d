//! A tenant's document as the store keeps it ([`TenantDoc`]), its API view, the pool
//! grants: which agent pools a tenant's runs may use ([`granted_pools`]), and the pure
//! rules of its quotas (counters' keys, slice sizes, who may run under `concurrent_runs`).

use crate::error::HubError;
use serde::{Deserialize, Serialize};
use silk_api::tenants::{Quotas, TenantView};
use silk_store::{QuotaClaim, TenantRow, UsageKey};

/// What the store keeps of a tenant besides its name and times.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TenantDoc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The agent pools its runs may use; `None`: every agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pools: Option<Vec<String>>,
    /// Its quotas (none set: no limit).
    #[serde(default, skip_serializing_if = "Quotas::is_empty")]
    pub quotas: Quotas,
    /// Its weight in the fair share of slots (`None`: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// Private ranges its runs may reach besides the agents' and hubs' own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_networks: Vec<silk_core::net::IpNet>,
    /// The item sink targets its runs may name; `None`: every one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink_targets: Option<Vec<String>>,
}

/// The most ranges a tenant's `allow_networks` holds (every fetch checks them in turn).
const MAX_NETWORKS: usize = 256;

/// The ranges of a tenant's `allow_networks` as an admin wrote them (CIDRs or addresses);
/// the error names the one that is not.
pub(crate) fn parse_networks(ranges: &[String]) -> Result<Vec<silk_core::net::IpNet>, HubError> {
    if ranges.len() > MAX_NETWORKS {
        return Err(HubError::BadTenant(format!(
            "allow_networks: at most {MAX_NETWORKS} ranges ({} given)",
            ranges.len()
        )));
    }
    let mut nets = Vec::with_capacity(ranges.len());
    for (i, text) in ranges.iter().enumerate() {
        let net = silk_core::net::parse_range(text).ok_or_else(|| {
            HubError::BadTenant(format!(
                "allow_networks[{i}]: `{text}` is no address range (CIDR such as 10.1.0.0/16)"
            ))
        })?;
        if !nets.contains(&net) {
            nets.push(net);
        }
    }
    Ok(nets)
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
        quotas: doc.quotas.clone(),
        weight: doc.weight,
        allow_networks: doc.allow_networks.iter().map(|n| n.to_string()).collect(),
        sink_targets: doc.sink_targets.clone(),
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
    if let Some(targets) = &doc.sink_targets {
        silk_api::runs::check_target_names(targets, "sink_targets").map_err(HubError::BadTenant)?;
    }
    if let Some(tz) = &doc.quotas.time_zone {
        silk_schedule::validate_timezone(tz)
            .map_err(|e| HubError::BadTenant(format!("quotas.time_zone: {e}")))?;
    }
    if doc.weight.is_some_and(|w| !(1..=1000).contains(&w)) {
        return Err(HubError::BadTenant("weight: 1 to 1000".into()));
    }
    if doc.quotas.agent_slots == Some(0) {
        return Err(HubError::BadTenant(
            "quotas.agent_slots: at least 1 (a tenant that may not run is given no pool)".into(),
        ));
    }
    if doc.quotas.concurrent_runs == Some(0) {
        return Err(HubError::BadTenant(
            "quotas.concurrent_runs: at least 1 (a tenant that may not run is given no pool)"
                .into(),
        ));
    }
    Ok(())
}

/// How a run paused by a quota gives its reason (`quota_exhausted: …`); a run stored with
/// it is resumed by the hub, not by a user.
pub(crate) const QUOTA_EXHAUSTED: &str = "quota_exhausted";

/// Whether `reason` is that of a run paused by a quota.
pub(crate) fn quota_paused(reason: Option<&str>) -> bool {
    reason.is_some_and(|r| r.starts_with(QUOTA_EXHAUSTED))
}

/// The day at `now_ms` in the zone of `quotas` (`YYYY-MM-DD`) and when the next one begins.
pub(crate) fn quota_day(quotas: &Quotas, now_ms: u64) -> Result<(String, u64), HubError> {
    silk_schedule::day_at(now_ms, quotas.time_zone.as_deref())
        .map_err(|e| HubError::BadTenant(format!("quotas.time_zone: {e}")))
}

/// The counter of a tenant's pages and bytes on `day`.
pub(crate) fn tenant_key(tenant: &str, day: &str) -> UsageKey {
    UsageKey {
        scope: format!("tenant:{tenant}"),
        period: day.to_owned(),
    }
}

/// The counter of a job's pages on `day`.
pub(crate) fn job_key(job_id: &str, day: &str) -> UsageKey {
    UsageKey {
        scope: format!("job:{job_id}"),
        period: day.to_owned(),
    }
}

/// The counters a run's pages on `day` go to, with their limits: always its tenant's (so its
/// usage is known even without a limit), and its job's when the job limits its pages per day.
pub(crate) fn claims(
    tenant: &str,
    quotas: &Quotas,
    job: Option<(&str, u64)>,
    day: &str,
) -> Vec<QuotaClaim> {
    let mut claims = vec![QuotaClaim {
        key: tenant_key(tenant, day),
        max_pages: quotas.pages_per_day,
        max_bytes: quotas.bytes_per_day,
    }];
    if let Some((job_id, max)) = job {
        claims.push(QuotaClaim {
            key: job_key(job_id, day),
            max_pages: Some(max),
            max_bytes: None,
        });
    }
    claims
}

/// How many seconds of a run's measured speed one slice of pages covers.
pub(crate) const SLICE_SECONDS: u64 = 10;
/// The largest slice.
pub(crate) const MAX_SLICE: u64 = 10_000;

/// The slice of pages a run asks for: what it fetches in [`SLICE_SECONDS`] at its measured
/// speed (pages per second), at least enough to fill its `max_pending` (and 10), at most
/// [`MAX_SLICE`]. A fast run holds more, a slow one less, so the day's pages are handed out
/// by processing speed and what a run holds unused when it ends is little.
pub(crate) fn slice_want(pages_per_s: f64, max_pending: u64) -> u64 {
    let floor = max_pending.clamp(10, MAX_SLICE);
    let by_speed = if pages_per_s.is_finite() && pages_per_s > 0.0 {
        (pages_per_s * SLICE_SECONDS as f64).ceil() as u64
    } else {
        0
    };
    by_speed.clamp(floor, MAX_SLICE)
}

/// Whether a run may dispatch under `concurrent_runs = limit`, given the tenant's runs that
/// dispatch now, oldest first (by creation, then id), and whether it is one of them: the
/// oldest `limit` dispatch, and a waiting run starts only while fewer than `limit` do (two
/// that start at once: the younger pauses again at its next check).
pub(crate) fn may_run(running: &[String], me: &str, limit: u32) -> bool {
    let rank = running
        .iter()
        .position(|id| id == me)
        .unwrap_or(running.len());
    rank < limit as usize
}

/// Checks a run's item sink targets: each declared on this hub (`declared`; else `400`) and
/// granted to the tenant with `doc` (else `403`), naming `sinks.targets[i]`.
pub(crate) fn granted_targets(
    tenant: &str,
    doc: &TenantDoc,
    declared: &crate::SinkTargets,
    asked: &[String],
) -> Result<(), HubError> {
    for (i, name) in asked.iter().enumerate() {
        if declared.get(name).is_none() {
            return Err(HubError::BadRun(format!(
                "sinks.targets[{i}]: this hub has no item sink target `{name}` ({})",
                declared.names_text()
            )));
        }
        if let Some(granted) = &doc.sink_targets
            && !granted.contains(name)
        {
            return Err(HubError::Forbidden(format!(
                "sinks.targets[{i}]: item sink target `{name}` is not granted to tenant `{tenant}` (granted: {})",
                if granted.is_empty() {
                    "none".to_owned()
                } else {
                    granted.join(", ")
                }
            )));
        }
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
    fn allowed_networks_are_checked_named_and_capped() {
        let nets = parse_networks(&[
            "10.1.0.0/16".into(),
            "10.2.3.4".into(),
            "10.1.0.0/16".into(),
        ])
        .unwrap();
        assert_eq!(nets.len(), 2, "no range twice");
        assert_eq!(nets[1].to_string(), "10.2.3.4/32");
        let e = parse_networks(&["::1".into(), "intranet".into()]).unwrap_err();
        assert!(e.to_string().contains("allow_networks[1]"), "{e}");
        let many: Vec<String> = (0..=MAX_NETWORKS)
            .map(|i| format!("10.9.{}.0/24", i % 256))
            .collect();
        assert!(
            parse_networks(&many)
                .unwrap_err()
                .to_string()
                .contains("at most")
        );
    }

    #[test]
    fn slices_follow_speed_within_bounds() {
        assert_eq!(slice_want(0.0, 100), 100);
        assert_eq!(slice_want(0.0, 1), 10);
        assert_eq!(slice_want(f64::NAN, 5), 10);
        assert_eq!(slice_want(55.5, 100), 555);
        assert_eq!(slice_want(1e9, 100), MAX_SLICE);
    }

    #[test]
    fn the_oldest_runs_may_run() {
        let running: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        assert!(may_run(&running, "a", 2));
        assert!(may_run(&running, "b", 2));
        assert!(!may_run(&running, "c", 2));
        // Not dispatching: only when fewer than the limit do.
        assert!(!may_run(&running, "d", 3));
        assert!(may_run(&running, "d", 4));
        assert!(quota_paused(Some("quota_exhausted: pages_per_day")));
        assert!(!quota_paused(Some("paused by a user")));
        assert!(!quota_paused(None));
    }

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
