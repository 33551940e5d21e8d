//! The quotas of a run that dispatches on this hub ([`RunQuota`]): its share of its
//! tenant's (and job's) daily page and byte quotas, and its place under the tenant's
//! `concurrent_runs`.
//!
//! No counter is touched per page. The run holds a *slice*: pages reserved in the store's
//! counters ([`silk_store::TenantStore::reserve_quota`], one locking transaction, so several
//! hubs never hand out more than a limit). It leases at most what its slice has left, asks for
//! the next slice when it is used up — sized by its measured speed ([`slice_want`]) — and
//! gives back what it holds when it pauses or ends. What it fetched is added to the counters
//! every [`FLUSH_MS`] and at the end. When no slice is to be had, or the run is past the
//! tenant's `concurrent_runs`, it pauses with the reason `quota_exhausted: …` and asks again
//! every [`CHECK_MS`] and at the day's reset; it resumes by itself.
//!
//! Bounds: a hub run never fetches past its slice (it leases within it, counting results
//! being applied as out; a late result of an expired lease is ignored). A run that pauses
//! keeps only the pages of its requests still out; one that ends or whose hub stops gives
//! the rest back after its frontier closed. After a crash the slice is in the run's record
//! and the hub that resumes the run carries it on; up to one flush interval of pages is then
//! not counted. Bytes are
//! known only after the fetch: a run may pass `bytes_per_day` by what one slice downloads.
//! Pages past a slice (none on this path) are added to the counters' `overshoot`.
//!
//! A program run's pages are its fetches through the download center: its driver
//! (`programs::drive`) takes the same turns, and the fetch route takes each fetch from the
//! room its slice leaves.

use crate::error::HubError;
use crate::run::{HeldSlice, RunRecord};
use crate::tenant::{QUOTA_EXHAUSTED, claims, may_run, quota_day, slice_want, tenant_doc};
use silk_api::tenants::Quotas;
use silk_store::MetaStore;
use silk_store::{QuotaClaim, RunFilter, UsageDelta, UsageKey};

/// How often what a run fetched is added to its counters, ms.
pub(crate) const FLUSH_MS: u64 = 2_000;
/// How often a run looks at its tenant's quotas again (and a paused one asks again), ms.
pub(crate) const CHECK_MS: u64 = 5_000;

/// What one turn of the dispatch loop may do under the quotas.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct QuotaTurn {
    /// Most requests it may lease now besides those out (`None`: no page limit per day).
    pub room: Option<u64>,
    /// Why it may not dispatch (`quota_exhausted: …`).
    pub blocked: Option<String>,
    /// The tenant's `pages_per_run`.
    pub pages_per_run: Option<u64>,
    /// The tenant's weight in the fair share.
    pub weight: u32,
    /// The tenant's `agent_slots`.
    pub agent_slots: Option<u64>,
}

/// The quota state of one run on this hub.
pub(crate) struct RunQuota {
    tenant: String,
    job_id: Option<String>,
    max_pending: u64,
    state: tokio::sync::Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The tenant's quotas, weight and the job's pages per day, as last read.
    quotas: Quotas,
    weight: u32,
    job_pages_per_day: Option<u64>,
    /// The day counted (in the tenant's zone), when it ends, and its counters with limits.
    day: Option<String>,
    resets_ms: u64,
    claims: Vec<QuotaClaim>,
    /// The counters the pages held are reserved on, and how many.
    held_keys: Vec<UsageKey>,
    held: u64,
    /// The run's session counters (successes, bytes) already added to the store.
    counted_pages: u64,
    counted_bytes: u64,
    flushed_ms: u64,
    /// When the limits are read again.
    next_check_ms: u64,
    /// When a slice may be asked for again after none was given.
    next_ask_ms: u64,
    /// Why the run may not go on.
    day_blocked: Option<String>,
    runs_blocked: Option<String>,
    /// Where the speed of the current slice is measured from: (ms, session pages).
    since: (u64, u64),
    /// Whether the record's slice must be stored again.
    dirty: bool,
}

impl RunQuota {
    /// The quota state of `record`'s run; the slice its record holds (from an earlier hub
    /// session) is held again.
    pub(crate) fn new(record: &RunRecord, now_ms: u64) -> Self {
        let mut state = State {
            since: (now_ms, 0),
            flushed_ms: now_ms,
            ..State::default()
        };
        if let Some(slice) = &record.quota {
            state.held = slice.pages;
            state.held_keys = slice
                .scopes
                .iter()
                .map(|scope| UsageKey {
                    scope: scope.clone(),
                    period: slice.period.clone(),
                })
                .collect();
            state.day = Some(slice.period.clone());
        }
        Self {
            tenant: record.tenant.clone(),
            job_id: record.job_id.clone(),
            max_pending: record.max_pending.max(1),
            state: tokio::sync::Mutex::new(state),
        }
    }

    /// One turn of a run that goes on: reads the limits again when due (a new day gives back
    /// the old day's slice), adds what was fetched, asks for a slice when the one held is
    /// used up. `pages` and `bytes` are the run's session counters, `out` its requests out,
    /// `dispatching` whether its state is `running`.
    pub(crate) async fn turn(
        &self,
        store: &dyn MetaStore,
        id: &str,
        now_ms: u64,
        (pages, bytes): (u64, u64),
        out: u64,
        dispatching: bool,
    ) -> Result<QuotaTurn, HubError> {
        let mut s = self.state.lock().await;
        if now_ms >= s.next_check_ms || (s.day.is_some() && now_ms >= s.resets_ms) {
            self.check(store, &mut s, id, now_ms, (pages, bytes), dispatching)
                .await?;
        }
        if now_ms.saturating_sub(s.flushed_ms) >= FLUSH_MS {
            self.flush(store, &mut s, now_ms, (pages, bytes)).await?;
        }
        let limited = s.quotas.limits_days() || s.job_pages_per_day.is_some();
        let mut turn = QuotaTurn {
            room: None,
            blocked: s.runs_blocked.clone(),
            pages_per_run: s.quotas.pages_per_run,
            weight: s.weight.max(1),
            agent_slots: s.quotas.agent_slots.map(u64::from),
        };
        if turn.blocked.is_some() {
            // Waiting under concurrent_runs: it holds only what is out.
            give_back(store, &mut s, out, now_ms).await?;
            return Ok(turn);
        }
        if !limited {
            return Ok(turn);
        }
        let unflushed = pages.saturating_sub(s.counted_pages);
        let mut left = s.held.saturating_sub(unflushed);
        if left <= out && now_ms >= s.next_ask_ms {
            let keys: Vec<UsageKey> = s.claims.iter().map(|c| c.key.clone()).collect();
            if s.held > 0 && s.held_keys != keys {
                // The counters changed (a job limit set, a new day): what was fetched is
                // counted on the old ones and what is held there goes back before the new
                // slice.
                self.flush(store, &mut s, now_ms, (pages, bytes)).await?;
                give_back(store, &mut s, 0, now_ms).await?;
                left = 0;
            }
            let elapsed_ms = now_ms.saturating_sub(s.since.0).max(1);
            let speed = pages.saturating_sub(s.since.1) as f64 * 1000.0 / elapsed_ms as f64;
            let want = slice_want(speed, self.max_pending);
            let granted = store.reserve_quota(&s.claims, want, now_ms).await?;
            if granted > 0 {
                s.held_keys = keys;
                s.held += granted;
                left += granted;
                s.since = (now_ms, pages);
                s.day_blocked = None;
                s.dirty = true;
            } else if left <= out {
                s.day_blocked = Some(self.why_none(store, &s).await?);
                s.next_ask_ms = (now_ms + CHECK_MS).min(s.resets_ms.max(now_ms + 1));
            }
        }
        turn.room = Some(left.saturating_sub(out));
        if left <= out {
            turn.blocked = s.day_blocked.clone();
        }
        Ok(turn)
    }

    /// Adds what the run fetched and gives back the pages it holds but `keep` (its requests
    /// still out): the run pauses, ends, or its hub stops. Nothing to do when it holds no
    /// more and counted everything.
    pub(crate) async fn release(
        &self,
        store: &dyn MetaStore,
        now_ms: u64,
        (pages, bytes): (u64, u64),
        keep: u64,
    ) -> Result<(), HubError> {
        let mut s = self.state.lock().await;
        self.flush(store, &mut s, now_ms, (pages, bytes)).await?;
        give_back(store, &mut s, keep, now_ms).await?;
        s.next_check_ms = 0;
        Ok(())
    }

    /// The slice to store in the run's record, when it changed since the last call.
    pub(crate) async fn changed_slice(&self) -> Option<Option<HeldSlice>> {
        let mut s = self.state.lock().await;
        if !s.dirty {
            return None;
        }
        s.dirty = false;
        Some((s.held > 0).then(|| {
            HeldSlice {
                period: s
                    .held_keys
                    .first()
                    .map(|k| k.period.clone())
                    .unwrap_or_default(),
                scopes: s.held_keys.iter().map(|k| k.scope.clone()).collect(),
                pages: s.held,
            }
        }))
    }

    /// Reads the tenant's quotas and the job's limit, rolls the day, and checks
    /// `concurrent_runs`.
    async fn check(
        &self,
        store: &dyn MetaStore,
        s: &mut State,
        id: &str,
        now_ms: u64,
        counters: (u64, u64),
        dispatching: bool,
    ) -> Result<(), HubError> {
        s.next_check_ms = now_ms + CHECK_MS;
        let doc = match store.get_tenant(&self.tenant).await? {
            Some(row) => tenant_doc(&row)?,
            // A tenant deleted under a run (it cannot be while it has runs): no quotas.
            None => crate::tenant::TenantDoc::default(),
        };
        s.quotas = doc.quotas;
        s.weight = doc.weight.unwrap_or(1);
        s.job_pages_per_day = match &self.job_id {
            Some(job) => match store.get_job(job).await? {
                Some(row) => row
                    .spec
                    .get("max_pages_per_day")
                    .and_then(serde_json::Value::as_u64),
                None => None,
            },
            None => None,
        };
        let (day, resets_ms) = quota_day(&s.quotas, now_ms)?;
        if s.day.as_deref() != Some(day.as_str()) {
            // A new day: what was fetched goes to the old day, its slice is given back.
            if s.day.is_some() {
                self.flush(store, s, now_ms, counters).await?;
                give_back(store, s, 0, now_ms).await?;
            }
            s.day = Some(day.clone());
            s.day_blocked = None;
            s.next_ask_ms = 0;
        }
        s.resets_ms = resets_ms;
        let job = self.job_id.as_deref().zip(s.job_pages_per_day);
        s.claims = claims(&self.tenant, &s.quotas, job, &day);
        s.runs_blocked = match s.quotas.concurrent_runs {
            None => None,
            Some(limit) => {
                let filter = RunFilter {
                    tenant: Some(self.tenant.clone()),
                    states: vec!["running".into()],
                    ..RunFilter::default()
                };
                let mut running: Vec<(u64, String)> = store
                    .list_runs(&filter)
                    .await?
                    .into_iter()
                    .map(|r| (r.created_ms, r.id))
                    .collect();
                running.sort();
                let mut ids: Vec<String> = running.into_iter().map(|(_, id)| id).collect();
                if !dispatching {
                    ids.retain(|r| r != id);
                }
                (!may_run(&ids, id, limit)).then(|| {
                    format!(
                        "{QUOTA_EXHAUSTED}: concurrent_runs of tenant `{}` is {limit} and as many of its runs are running; this one starts when one of them ends",
                        self.tenant
                    )
                })
            }
        };
        Ok(())
    }

    /// Adds the pages and bytes fetched since the last flush; pages past the slice held are
    /// overshoot.
    async fn flush(
        &self,
        store: &dyn MetaStore,
        s: &mut State,
        now_ms: u64,
        (pages, bytes): (u64, u64),
    ) -> Result<(), HubError> {
        s.flushed_ms = now_ms;
        let new_pages = pages.saturating_sub(s.counted_pages);
        let new_bytes = bytes.saturating_sub(s.counted_bytes);
        if new_pages == 0 && new_bytes == 0 {
            return Ok(());
        }
        let keys: Vec<UsageKey> = if s.held_keys.is_empty() {
            s.claims.iter().map(|c| c.key.clone()).collect()
        } else {
            s.held_keys.clone()
        };
        if keys.is_empty() {
            // Not checked yet: counted at the next flush.
            return Ok(());
        }
        let used = new_pages.min(s.held);
        let delta = UsageDelta {
            pages: new_pages,
            bytes: new_bytes,
            unreserve: used,
            overshoot: new_pages - used,
        };
        store.add_usage(&keys, &delta, now_ms).await?;
        s.counted_pages = pages;
        s.counted_bytes = bytes;
        if used > 0 {
            s.held -= used;
            s.dirty = true;
        }
        if s.held == 0 {
            s.held_keys.clear();
        }
        Ok(())
    }

    /// Which limit gave no slice, for the run's reason.
    async fn why_none(&self, store: &dyn MetaStore, s: &State) -> Result<String, HubError> {
        let zone = s.quotas.time_zone.as_deref().unwrap_or("UTC");
        for claim in &s.claims {
            let Some(row) = store.get_usage(&claim.key).await? else {
                continue;
            };
            let whose = match claim.key.scope.split_once(':') {
                Some(("job", _)) => "max_pages_per_day of its job".to_owned(),
                _ => format!("pages_per_day of tenant `{}`", self.tenant),
            };
            if let Some(max) = claim.max_bytes
                && row.bytes >= max
            {
                return Ok(format!(
                    "{QUOTA_EXHAUSTED}: bytes_per_day of tenant `{}` ({max}) is used for {} ({zone}); the run resumes when it allows again",
                    self.tenant, claim.key.period
                ));
            }
            if let Some(max) = claim.max_pages
                && row.pages + row.reserved >= max
            {
                return Ok(format!(
                    "{QUOTA_EXHAUSTED}: {whose} ({max}) is used for {} ({zone}: {} fetched, {} held by running runs); the run resumes when it allows again",
                    claim.key.period, row.pages, row.reserved
                ));
            }
        }
        Ok(format!("{QUOTA_EXHAUSTED}: no pages left today"))
    }
}

/// Gives back the pages `s` holds beyond `keep`.
async fn give_back(
    store: &dyn MetaStore,
    s: &mut State,
    keep: u64,
    now_ms: u64,
) -> Result<(), HubError> {
    if s.held <= keep {
        return Ok(());
    }
    let delta = UsageDelta {
        unreserve: s.held - keep,
        ..UsageDelta::default()
    };
    store.add_usage(&s.held_keys, &delta, now_ms).await?;
    s.held = keep;
    s.dirty = true;
    if s.held == 0 {
        s.held_keys.clear();
    }
    Ok(())
}

/// How long a run's last word on what it wants counts in the fair share, ms (a run that
/// stopped asking — ended, paused, its hub gone — leaves it after this).
const WANT_TTL_MS: u64 = 2_000;

/// The fair share of this hub's runs ([`crate::fair`]): what each run that dispatches wants
/// now, and the slots it may have out.
#[derive(Default)]
pub(crate) struct FairTable {
    wants: parking_lot::Mutex<std::collections::BTreeMap<String, (crate::fair::Want, u64)>>,
}

impl FairTable {
    /// Notes what run `want.run` wants at `now_ms` and answers how many requests it may have
    /// out, of `capacity` slots (those of the agents it may use; the runs sharing agents
    /// share them), and within its part of its tenant's `agent_slots` (shared by the
    /// tenant's runs on this hub); `None`: no limit (nothing contended, no agent slots).
    pub(crate) fn cap(&self, want: crate::fair::Want, capacity: u64, now_ms: u64) -> Option<u64> {
        let mut wants = self.wants.lock();
        wants.retain(|_, (_, seen)| now_ms.saturating_sub(*seen) <= WANT_TTL_MS);
        let run = want.run.clone();
        // Only the runs that share an agent with it share its slots.
        let all: Vec<crate::fair::Want> = wants
            .values()
            .map(|(w, _)| w)
            .filter(|w| w.run != run && w.agents.iter().any(|a| want.agents.contains(a)))
            .cloned()
            .chain(std::iter::once(want.clone()))
            .collect();
        let tenant = want.tenant_slots.map(|slots| {
            let mine: Vec<crate::fair::Want> = wants
                .values()
                .map(|(w, _)| w)
                .filter(|w| w.run != run && w.tenant == want.tenant)
                .cloned()
                .chain(std::iter::once(want.clone()))
                .collect();
            crate::fair::tenant_part(slots, &run, &mine)
        });
        wants.insert(run.clone(), (want, now_ms));
        let fair = crate::fair::shares(capacity, &all).map(|s| s.get(&run).copied().unwrap_or(1));
        match (fair, tenant) {
            (Some(f), Some(t)) => Some(f.min(t)),
            (f, t) => f.or(t),
        }
    }

    /// The run no longer dispatches.
    pub(crate) fn leave(&self, run: &str) {
        self.wants.lock().remove(run);
    }
}
