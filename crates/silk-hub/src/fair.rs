//! Weighted fair share of dispatch slots (issue 15 item 6), pure: given the slots of the
//! agents runs share and what each run wants now, how many requests each may have out.
//!
//! Tenants get slots by weighted max-min fairness (water-filling): every tenant with demand
//! gets `capacity × weight / Σ weights`; a tenant that wants less keeps only what it wants
//! and the rest is shared again among the others by weight, so no slot idles while a run
//! wants it (work-conserving). Within a tenant, its share is split among its runs the same
//! way with equal weights. When everything wanted fits, or only one tenant wants slots, there
//! is no limit (agents queue what passes their capacity, as without tenants). A run's demand
//! is what it would have out: its `max_pending` while its frontier gives all it asks for,
//! else a little more than it has, so that it can always grow.
//! Shares are rounded down, and a run that wants anything gets at least one slot (no run
//! starves; the sum may pass the capacity by the number of runs at most).

use std::collections::BTreeMap;

/// What one run wants now.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Want {
    pub run: String,
    pub tenant: String,
    /// The tenant's weight (at least 1).
    pub weight: u32,
    /// Requests it would have out if it could.
    pub demand: u64,
    /// The agents it may send to (runs share slots only with runs that share an agent).
    pub agents: Vec<String>,
    /// Its tenant's `agent_slots`: most requests out of all its runs (on this hub).
    pub tenant_slots: Option<u64>,
}

/// Run `run`'s part of its tenant's `slots` (`agent_slots`), shared with the tenant's other
/// runs in `wants` by what they want (water-filling, equal weights; at least 1 to a run
/// that wants anything).
pub(crate) fn tenant_part(slots: u64, run: &str, wants: &[Want]) -> u64 {
    let Some(me) = wants.iter().find(|w| w.run == run) else {
        return slots;
    };
    let runs: Vec<(String, f64, f64)> = wants
        .iter()
        .filter(|w| w.tenant == me.tenant)
        .map(|w| (w.run.clone(), 1.0, w.demand as f64))
        .collect();
    let part = water_fill(slots as f64, &runs)
        .get(run)
        .map_or(0.0, |s| (s + 1e-6).floor()) as u64;
    if me.demand > 0 { part.max(1) } else { 0 }
}

/// Water-fills `capacity` over `(key, weight, demand)`: each key's share.
fn water_fill(capacity: f64, claims: &[(String, f64, f64)]) -> BTreeMap<String, f64> {
    let mut given: BTreeMap<String, f64> =
        claims.iter().map(|(k, _, _)| (k.clone(), 0.0)).collect();
    let mut active: Vec<&(String, f64, f64)> = claims.iter().filter(|c| c.2 > 0.0).collect();
    let mut left = capacity.max(0.0);
    while !active.is_empty() && left > 1e-9 {
        let weights: f64 = active.iter().map(|c| c.1).sum();
        let per_weight = left / weights;
        type Claim<'a> = &'a (String, f64, f64);
        let (full, open): (Vec<Claim>, Vec<Claim>) = active
            .iter()
            .copied()
            .partition(|c| c.2 - given[&c.0] <= per_weight * c.1 + 1e-9);
        if full.is_empty() {
            for c in &open {
                *given.entry(c.0.clone()).or_default() += per_weight * c.1;
            }
            break;
        }
        for c in &full {
            let g = given.entry(c.0.clone()).or_default();
            left -= c.2 - *g;
            *g = c.2;
        }
        active = open;
    }
    given
}

/// Each run's slots out of `capacity`, by run; `None` when nothing is contended (what is
/// wanted fits, or one tenant alone wants slots): no limit then.
pub(crate) fn shares(capacity: u64, wants: &[Want]) -> Option<BTreeMap<String, u64>> {
    let total: u64 = wants.iter().map(|w| w.demand).sum();
    let one_tenant = wants.iter().all(|w| w.tenant == wants[0].tenant);
    if total <= capacity || one_tenant {
        return None;
    }
    let mut tenants: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    for w in wants {
        let t = tenants
            .entry(&w.tenant)
            .or_insert((f64::from(w.weight.max(1)), 0.0));
        t.1 += w.demand as f64;
    }
    let tenant_claims: Vec<(String, f64, f64)> = tenants
        .iter()
        .map(|(t, (weight, demand))| ((*t).to_owned(), *weight, *demand))
        .collect();
    let by_tenant = water_fill(capacity as f64, &tenant_claims);
    let mut out = BTreeMap::new();
    for (tenant, share) in &by_tenant {
        let runs: Vec<(String, f64, f64)> = wants
            .iter()
            .filter(|w| &w.tenant == tenant)
            .map(|w| (w.run.clone(), 1.0, w.demand as f64))
            .collect();
        for (run, slots) in water_fill(*share, &runs) {
            let demand = wants.iter().find(|w| w.run == run).map_or(0, |w| w.demand);
            let slots = (slots + 1e-6).floor() as u64;
            out.insert(run, if demand > 0 { slots.max(1) } else { 0 });
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn want(run: &str, tenant: &str, weight: u32, demand: u64) -> Want {
        Want {
            run: run.into(),
            tenant: tenant.into(),
            weight,
            demand,
            agents: Vec::new(),
            tenant_slots: None,
        }
    }

    #[test]
    fn a_tenants_agent_slots_are_split_among_its_runs() {
        let wants = [
            want("a1", "t1", 1, 100),
            want("a2", "t1", 1, 3),
            want("b", "t2", 1, 100),
        ];
        // 10 slots: the small run keeps its 3, the other gets the rest.
        assert_eq!(tenant_part(10, "a2", &wants), 3);
        assert_eq!(tenant_part(10, "a1", &wants), 7);
        // Fewer slots than runs: each run still gets one.
        assert_eq!(tenant_part(1, "a1", &wants), 1);
        // Another tenant's runs do not count; a run alone gets them all.
        assert_eq!(tenant_part(4, "b", &wants), 4);
    }

    #[test]
    fn slots_are_shared_by_weight_and_none_idles() {
        // Everything fits: no limit.
        assert_eq!(
            shares(32, &[want("a", "t1", 1, 10), want("b", "t2", 3, 10)]),
            None
        );
        let shares = |capacity, wants: &[Want]| shares(capacity, wants).expect("contended");
        // Both saturate: 1:3.
        let s = shares(32, &[want("a", "t1", 1, 100), want("b", "t2", 3, 100)]);
        assert_eq!((s["a"], s["b"]), (8, 24));
        // One wants less than its share: the rest goes to the other.
        let s = shares(32, &[want("a", "t1", 1, 100), want("b", "t2", 3, 10)]);
        assert_eq!((s["a"], s["b"]), (22, 10));
        // A third tenant: 1:3:1 of 40; its small run gets what it wants when that is less.
        let s = shares(
            40,
            &[
                want("a", "t1", 1, 100),
                want("b", "t2", 3, 100),
                want("c", "t3", 1, 4),
            ],
        );
        assert_eq!(s["c"], 4);
        assert_eq!(s["a"] + s["b"] + s["c"], 40);
        assert_eq!(s["b"], 27);
        // Runs of one tenant split its share.
        let s = shares(
            32,
            &[
                want("a1", "t1", 1, 100),
                want("a2", "t1", 1, 100),
                want("b", "t2", 1, 100),
            ],
        );
        assert_eq!((s["a1"], s["a2"], s["b"]), (8, 8, 16));
        // One tenant alone: no limit.
        assert_eq!(
            super::shares(32, &[want("a1", "t1", 1, 100), want("a2", "t1", 1, 100)]),
            None
        );
        // A run that wants anything gets a slot.
        let s = shares(
            2,
            &[
                want("a", "t1", 1, 5),
                want("b", "t2", 1000, 5),
                want("c", "t2", 1000, 0),
            ],
        );
        assert_eq!(s["a"], 1);
        assert_eq!(s["c"], 0);
    }
}
