//! Run ownership among the hubs of a cluster: several `silk hub` processes sharing one store
//! (PostgreSQL), one bus (NATS) and, for frontiers, one Redis.
//!
//! Each run that has not ended is driven by exactly one hub, the holder of its lease
//! `run:{id}` in the store (`silk_store::MetaStore::acquire_lease`; the store's clock decides
//! expiry, so hubs with skewed clocks agree):
//! - a hub takes the lease of a run it creates before the run is stored as `running`, renews
//!   all its leases every third of `ownership_ttl_ms`, and gives the lease back when the run
//!   ends or the hub stops;
//! - every renewal round, a hub also looks at the stored runs that have not ended and are
//!   not active on it, and takes the lease of each one whose lease is free or has expired —
//!   provided it can drive the run: the run's frontier is in the cluster's Redis
//!   (`RunRecord::shared_frontier`) and this hub has one, or the run's embedded frontier is in
//!   this hub's data dir. Such a run is *adopted*: it resumes here as after a restart (runs
//!   caught before their allocation completed are failed, as after a restart). Opening the
//!   Redis frontier fences the previous owner's handle, and every request it had out is
//!   pending again;
//! - a hub whose renewal no longer returns a run's lease (it was away longer than the TTL and
//!   another hub took the run) stops driving that run at once without writing anything
//!   ([`crate::runner`]'s `Disowned` end); a run that ends checks that it still holds its
//!   lease before its final state is stored.
//!
//! So when one of two hubs dies, the other carries on with its runs within about
//! `ownership_ttl_ms`: the requests the dead hub had out are fetched again (results travel to
//! the hub that sent the download, `results.{hub id}`, so the dead hub's are never read), and
//! items already written are kept once (the store's items table is idempotent on the item
//! key, and written before each ack).
//!
//! The job scheduler (cron fires, retries, queued fires) runs on one hub at a time, the holder
//! of the lease `scheduler`; each hub times out the runs it drives.

use crate::error::HubError;
use crate::live::Run;
use crate::repo::{open_runs, record_of, run_lease};
use crate::run::{RunRecord, RunState};
use crate::state::HubCore;
use silk_core::RunId;
use silk_store::Level;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// The lease of the hub that runs the scheduler.
pub(crate) const SCHEDULER_LEASE: &str = "scheduler";

impl HubCore {
    /// Whether this hub can take `record` over: settle it (a run caught before its
    /// allocation completed: any hub fails it), or drive it — its frontier is in Redis and
    /// this hub has one, or its embedded frontier is this hub's (in its data dir, or the run
    /// is recorded as this hub's, or as nobody's: a run stored before hubs had ids).
    pub(crate) fn can_drive(&self, record: &RunRecord) -> bool {
        if matches!(record.state, RunState::Pending | RunState::Allocating) {
            return true;
        }
        match &record.shared_frontier {
            Some(_) => self.config.frontier_url.is_some(),
            None => {
                record.hub.as_ref().is_none_or(|h| h == &self.hub_id)
                    || self.files.frontier_dir_of(record).exists()
            }
        }
    }

    /// Whether this hub may run the scheduler now (it holds the `scheduler` lease).
    pub(crate) async fn holds_scheduler(&self) -> bool {
        match self
            .store
            .acquire_lease(
                SCHEDULER_LEASE,
                self.hub_id.as_str(),
                self.config.ownership_ttl_ms,
            )
            .await
        {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(error = %e, "scheduler lease not checked; skipping this tick");
                false
            }
        }
    }
}

/// Marks a run that this hub is starting, so that adoption leaves it alone; unmarks it when
/// dropped.
pub(crate) struct Starting<'a> {
    shared: &'a HubCore,
    id: RunId,
}

impl<'a> Starting<'a> {
    pub(crate) fn new(shared: &'a HubCore, id: RunId) -> Self {
        shared.starting.lock().insert(id.clone());
        Self { shared, id }
    }
}

impl Drop for Starting<'_> {
    fn drop(&mut self) {
        self.shared.starting.lock().remove(&self.id);
    }
}

/// Takes over every stored run that has not ended, is not active here, and whose lease is
/// free or expired, when this hub can drive it (see the module doc). At start (`startup`)
/// this is the restart recovery: this hub's own runs come back.
pub(crate) async fn adopt(shared: &Arc<HubCore>, startup: bool) -> Result<(), HubError> {
    // The holders as the round starts (for the log line of an adoption), in one read.
    let holders: HashMap<String, String> = shared
        .store
        .list_leases("run:")
        .await?
        .into_iter()
        .map(|l| (l.name, l.holder))
        .collect();
    for row in shared.store.list_runs(&open_runs(None)).await? {
        if *shared.stop.borrow() {
            // A run adopted now would not be waited for by the shutdown.
            return Ok(());
        }
        let id = RunId::new(row.id.clone());
        if shared.active_run(&id).is_some() || shared.starting.lock().contains(&id) {
            continue;
        }
        let record = match record_of(row) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(run = %id, error = %e, "stored run skipped");
                continue;
            }
        };
        if !shared.can_drive(&record) {
            let noted = shared.undrivable.lock().insert(id.clone());
            if noted {
                tracing::info!(run = %id, hub = %silk_core::ids::list(record.hub.as_slice()), "run left to its hub: its frontier is in that hub's data dir");
            }
            continue;
        }
        // A run on a job frontier in Redis goes with the hub that drives that frontier.
        if record.job_frontier
            && !matches!(record.state, RunState::Pending | RunState::Allocating)
            && let Some(prefix) = &record.shared_frontier
            && crate::job_frontier::check_free(&*shared.store, shared.hub_id.as_str(), prefix)
                .await
                .is_err()
        {
            continue;
        }
        let previous = holders.get(&run_lease(&id)).cloned();
        if !shared.repo.hold(&id).await? {
            continue;
        }
        // Read it again under the lease: its previous owner may have ended it meanwhile.
        let record = match shared.repo.get(&id).await? {
            Some(record) => record,
            None => {
                shared.repo.release(&id).await;
                continue;
            }
        };
        if record.state.is_terminal() {
            shared.repo.release(&id).await;
            continue;
        }
        let from = previous.filter(|p| p != shared.hub_id.as_str());
        take(shared, record, from, startup).await;
    }
    Ok(())
}

/// Drives (or settles) a run whose lease this hub has just taken.
async fn take(shared: &Arc<HubCore>, mut record: RunRecord, from: Option<String>, startup: bool) {
    let id = record.id.clone();
    match record.state {
        RunState::Pending | RunState::Allocating => {
            shared
                .fail_stored(
                    record,
                    "the hub stopped before the run's allocation completed".into(),
                )
                .await;
        }
        RunState::Running | RunState::Paused | RunState::Stopping => {
            let how = match (&from, startup) {
                (Some(hub), _) => format!("adopted from hub `{hub}` (its lease had expired)"),
                (None, true) => "hub restarted: run resumed".to_owned(),
                (None, false) => "run resumed (its lease was free)".to_owned(),
            };
            record.hub = Some(shared.hub_id.clone());
            // A run whose seeds never reached its frontier (a crash right after the
            // allocation) is seeded again: dedup makes that harmless.
            match Run::open(&shared.runs_cx, record.clone(), true).await {
                Ok(run) => {
                    if let Err(e) = shared.repo.save(&record).await {
                        tracing::warn!(run = %id, error = %e, "run's hub not stored");
                    }
                    tracing::info!(run = %id, state = %record.state, "{how}");
                    shared
                        .logs
                        .hub(&id, Level::Info, format!("{how} ({})", record.state));
                    crate::runner::spawn(shared, run);
                    if let Err(e) = crate::sinks::start(shared, &record) {
                        tracing::warn!(run = %id, error = %e, "item sinks not resumed");
                    }
                }
                Err(HubError::Conflict(why)) => {
                    // Its job's frontier went to another hub meanwhile: the run goes there.
                    tracing::info!(run = %id, reason = %why, "run left to the hub of its job's frontier");
                    shared.repo.release(&id).await;
                }
                Err(e) => {
                    tracing::error!(run = %id, error = %e, "run could not be resumed");
                    shared
                        .fail_stored(record, format!("could not be resumed: {e}"))
                        .await;
                }
            }
        }
        RunState::Succeeded | RunState::Failed | RunState::Cancelled => {
            shared.repo.release(&id).await;
        }
    }
}

/// Renews this hub's leases, stops driving runs it lost, and adopts runs whose hub is gone,
/// every third of `ownership_ttl_ms`, until the hub stops.
pub(crate) async fn ownership_loop(shared: Arc<HubCore>) {
    let mut stop = shared.stop.subscribe();
    let every = Duration::from_millis((shared.config.ownership_ttl_ms / 3).max(1));
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(every) => {}
        }
        // The runs active before the renewal: a run started meanwhile took its lease after
        // the renewal read them, and must not look lost.
        let active: Vec<Arc<Run>> = shared.runs.lock().values().cloned().collect();
        match shared
            .store
            .renew_leases(shared.hub_id.as_str(), shared.config.ownership_ttl_ms)
            .await
        {
            Ok(held) => {
                let held: HashSet<String> = held.into_iter().collect();
                for run in active {
                    if !held.contains(&run_lease(&run.id)) {
                        run.disown("its lease in the store is held by another hub now".into());
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "run leases not renewed; trying again"),
        }
        if let Err(e) = adopt(&shared, false).await {
            tracing::warn!(error = %e, "looking for runs to adopt failed; trying again");
        }
    }
}
