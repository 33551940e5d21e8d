//! The run repository: run records in the metadata store, written only under the run's lease.
//!
//! Each run that has not ended is driven by one hub, the holder of the store lease
//! `run:{id}` (see `ownership`). [`RunRepo::save`] writes a record only while this hub holds
//! that lease, so a hub that lost a run to another hub cannot overwrite what the new holder
//! stores. The rows' encoding ([`run_row`], [`record_of`]) lives here and nowhere else.

use crate::error::HubError;
use crate::run::RunRecord;
use silk_core::{HubId, RunId};
use silk_store::{MetaStore, RunFilter, RunRow};
use std::sync::Arc;

/// The run records of this hub's store, and the leases that guard them.
#[derive(Clone)]
pub(crate) struct RunRepo {
    store: Arc<dyn MetaStore>,
    /// The holder name of this hub's leases (its id).
    hub_id: HubId,
    /// How long a lease lasts without renewal, ms.
    ttl_ms: u64,
}

impl RunRepo {
    pub(crate) fn new(store: Arc<dyn MetaStore>, hub_id: HubId, ttl_ms: u64) -> Self {
        Self {
            store,
            hub_id,
            ttl_ms,
        }
    }

    /// The stored record of run `id`, if there is one.
    pub(crate) async fn get(&self, id: &RunId) -> Result<Option<RunRecord>, HubError> {
        match self.store.get_run(id.as_str()).await? {
            Some(row) => record_of(row).map(Some),
            None => Ok(None),
        }
    }

    /// Stores a run record (and its allocation), only while this hub holds the run's lease
    /// (`ownership`): a hub that lost the run to another hub gets
    /// [`HubError::OwnedElsewhere`] and writes nothing.
    pub(crate) async fn save(&self, record: &RunRecord) -> Result<(), HubError> {
        let lease = run_lease(&record.id);
        if self
            .store
            .put_run_held(&run_row(record)?, &lease, self.hub_id.as_str())
            .await?
        {
            return Ok(());
        }
        let holder = self.store.get_lease(&lease).await?.map_or_else(
            || "none (the lease was given back)".to_owned(),
            |l| l.holder,
        );
        Err(HubError::OwnedElsewhere {
            run: record.id.clone(),
            hub: holder,
        })
    }

    /// Takes (or renews) the lease of run `id`; whether this hub holds it now.
    pub(crate) async fn hold(&self, id: &RunId) -> Result<bool, HubError> {
        Ok(self
            .store
            .acquire_lease(&run_lease(id), self.hub_id.as_str(), self.ttl_ms)
            .await?)
    }

    /// Gives the lease of run `id` back (another hub may adopt the run at once).
    pub(crate) async fn release(&self, id: &RunId) {
        if let Err(e) = self
            .store
            .release_lease(&run_lease(id), self.hub_id.as_str())
            .await
        {
            tracing::warn!(run = %id, error = %e, "run lease not released (it expires)");
        }
    }
}

/// The store's lease name of a run.
pub(crate) fn run_lease(id: &RunId) -> String {
    silk_store::run_lease_name(id.as_str())
}

/// The states of runs that have not ended: some hub must drive or settle them.
const OPEN_STATES: [&str; 5] = ["pending", "allocating", "running", "paused", "stopping"];

/// The stored runs that have not ended (of one job, or all), oldest first.
pub(crate) fn open_runs(job_id: Option<String>) -> RunFilter {
    RunFilter {
        job_id,
        tenant: None,
        states: OPEN_STATES.map(String::from).to_vec(),
        limit: None,
        newest_first: false,
    }
}

/// The store row of a run record.
pub(crate) fn run_row(record: &RunRecord) -> Result<RunRow, HubError> {
    Ok(RunRow {
        id: record.id.to_string(),
        job_id: record.job_id.clone(),
        tenant: record.tenant.clone(),
        state: record.state.as_str().to_owned(),
        created_ms: record.created_ms,
        finished_ms: record.finished_ms,
        record: serde_json::to_value(record)
            .map_err(|e| HubError::Store(format!("run `{}`: {e}", record.id)))?,
    })
}

/// The run record of a store row.
pub(crate) fn record_of(row: RunRow) -> Result<RunRecord, HubError> {
    serde_json::from_value(row.record)
        .map_err(|e| HubError::Store(format!("run `{}` is unreadable: {e}", row.id)))
}
