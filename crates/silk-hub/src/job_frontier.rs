//! Job frontiers (`frontier: job` on a job): one frontier across the runs of a job, so that an
//! incremental crawl skips what an earlier run fetched in the current re-crawl segment.
//!
//! Where it is:
//! - embedded: `jobs/{job id}/frontier` in the data dir of the hub that opened it first;
//! - with `--frontier redis://…`: the key prefix `{frontier_prefix}:job:{job id}`, which any
//!   hub of the cluster can open (it is the run's `shared_frontier`, so adoption works as for
//!   a run's own frontier).
//!
//! Sharing:
//! - Every run of the job on one hub uses **one handle**, opened by the first and closed by
//!   the last ([`JobFrontiers`]). Leases are the handle's, so two runs of the job at once
//!   never hold the same request: each leases from the same queues, and a request goes back to
//!   them only when its lease is acked, released or expired.
//! - Between hubs, a job frontier in Redis is driven by **one hub at a time**: the holder of
//!   the store lease `frontier:{prefix}`, taken when the hub opens the frontier, renewed with
//!   its run leases and given back when its last run of the job closes it. A run of the job
//!   asked of another hub meanwhile is refused (`409`), and adoption leaves a run of it alone
//!   until that lease is free; so two hubs never fence each other's handle in turn.
//!
//! The frontier's settings (politeness, segments, retention) are those of the run that opened
//! the handle; a run that joins an open handle uses them too.

use crate::error::HubError;
use crate::files::HubFiles;
use crate::run::RunRecord;
use async_trait::async_trait;
use silk_core::Request;
use silk_frontier::{
    AckResult, EnqueueOutcome, FrontierConfig, FrontierError, FrontierStats, FrontierStore, Lease,
    LeaseId, Outcome,
};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// The name of the store lease of a job frontier in Redis.
pub(crate) fn lease_name(prefix: &str) -> String {
    format!("frontier:{prefix}")
}

/// The Redis key prefix of job `job_id`'s frontier.
pub(crate) fn redis_prefix(frontier_prefix: &str, job_id: &str) -> String {
    format!("{frontier_prefix}:job:{job_id}")
}

/// What opening a job frontier takes from the hub.
pub(crate) struct Env<'a> {
    pub(crate) files: &'a HubFiles,
    pub(crate) store: &'a Arc<dyn silk_store::MetaStore>,
    pub(crate) clock: Arc<dyn silk_core::Clock>,
    pub(crate) hub_id: &'a str,
    /// The cluster's Redis, if the hub has one.
    pub(crate) frontier_url: Option<&'a str>,
    /// How long the store lease of a frontier in Redis lasts unrenewed, ms.
    pub(crate) lease_ttl_ms: u64,
}

/// The job frontiers open on this hub: one handle per frontier, and how many runs use it.
#[derive(Default)]
pub(crate) struct JobFrontiers {
    open: tokio::sync::Mutex<HashMap<String, Open>>,
}

struct Open {
    store: Arc<dyn FrontierStore>,
    users: usize,
}

/// Where a job frontier is: its key in [`JobFrontiers`].
enum Place {
    Dir(PathBuf),
    Redis(String),
}

impl Place {
    fn key(&self) -> String {
        match self {
            Place::Dir(dir) => format!("dir:{}", dir.display()),
            Place::Redis(prefix) => format!("redis:{prefix}"),
        }
    }
}

impl JobFrontiers {
    /// The handle of `record`'s job frontier for one more run: the open one, or a new one
    /// (taking the store lease of a frontier in Redis). Close it with
    /// [`FrontierStore::close`], once per run. `Conflict` when another hub drives it.
    pub(crate) async fn open(
        self: &Arc<Self>,
        cx: &Env<'_>,
        record: &RunRecord,
        config: FrontierConfig,
    ) -> Result<Arc<dyn FrontierStore>, HubError> {
        let storage = |e: &dyn std::fmt::Display| HubError::RunStorage {
            run: record.id.clone(),
            reason: format!("its job's frontier: {e}"),
        };
        let place = match (&record.shared_frontier, &record.job_id) {
            (Some(prefix), _) => Place::Redis(prefix.clone()),
            (None, Some(job)) => Place::Dir(cx.files.job_frontier_dir(job)),
            (None, None) => return Err(storage(&"the run has no job")),
        };
        let key = place.key();
        let lease = match &place {
            Place::Redis(prefix) => Some(lease_name(prefix)),
            Place::Dir(_) => None,
        };
        let mut open = self.open.lock().await;
        let inner = match open.get_mut(&key) {
            Some(o) => {
                o.users += 1;
                o.store.clone()
            }
            None => {
                let store = self.open_new(cx, &place, config, storage).await?;
                open.insert(
                    key.clone(),
                    Open {
                        store: store.clone(),
                        users: 1,
                    },
                );
                store
            }
        };
        Ok(Arc::new(Shared {
            key,
            inner,
            all: self.clone(),
            lease,
            cx_store: cx.store.clone(),
            hub: cx.hub_id.to_owned(),
            closed: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// Opens the frontier at `place` (taking the store lease of one in Redis).
    async fn open_new(
        &self,
        cx: &Env<'_>,
        place: &Place,
        config: FrontierConfig,
        storage: impl Fn(&dyn std::fmt::Display) -> HubError,
    ) -> Result<Arc<dyn FrontierStore>, HubError> {
        match place {
            Place::Dir(dir) => {
                let store = silk_frontier::EmbeddedFrontier::open(dir, config, cx.clock.clone())
                    .map_err(|e| storage(&e))?;
                Ok(Arc::new(store))
            }
            Place::Redis(prefix) => {
                let Some(url) = cx.frontier_url else {
                    return Err(storage(&format!(
                        "it is in Redis (prefix `{prefix}`) and this hub has none (start it with --frontier redis://…)"
                    )));
                };
                let lease = lease_name(prefix);
                let held = cx
                    .store
                    .acquire_lease(&lease, cx.hub_id, cx.lease_ttl_ms)
                    .await?;
                if !held {
                    let holder = cx.store.get_lease(&lease).await?.map(|l| l.holder);
                    return Err(in_use(prefix, holder.as_deref()));
                }
                match silk_frontier::RedisFrontier::open(url, prefix, config, cx.clock.clone())
                    .await
                {
                    Ok(store) => Ok(Arc::new(store)),
                    Err(e) => {
                        let _ = cx.store.release_lease(&lease, cx.hub_id).await;
                        Err(storage(&e))
                    }
                }
            }
        }
    }

    /// Deletes job `job_id`'s frontier: the embedded one in this hub's data dir, and the one
    /// in Redis under `redis_prefix` (the hub has a Redis). `Conflict` while a handle of it is
    /// open here or another hub drives it. The caller has checked that no run of the job is
    /// open; the registry's lock (and the store lease of one in Redis, held while its keys are
    /// deleted) keeps a run from opening it meanwhile.
    pub(crate) async fn delete(
        &self,
        cx: &Env<'_>,
        job_id: &str,
        redis_prefix: Option<&str>,
    ) -> Result<(), HubError> {
        let storage = |e: &dyn std::fmt::Display| {
            HubError::Store(format!("the frontier of job `{job_id}` not deleted: {e}"))
        };
        let dir = cx.files.job_frontier_dir(job_id);
        let mut places = vec![Place::Dir(dir.clone())];
        places.extend(redis_prefix.map(|p| Place::Redis(p.to_owned())));
        let open = self.open.lock().await;
        if places.iter().any(|p| open.contains_key(&p.key())) {
            return Err(HubError::Conflict(format!(
                "the frontier of job `{job_id}` is open here (a run of the job is ending); try again when it has ended"
            )));
        }
        if let (Some(prefix), Some(url)) = (redis_prefix, cx.frontier_url) {
            let lease = lease_name(prefix);
            if !cx
                .store
                .acquire_lease(&lease, cx.hub_id, cx.lease_ttl_ms)
                .await?
            {
                let holder = cx.store.get_lease(&lease).await?.map(|l| l.holder);
                return Err(in_use(prefix, holder.as_deref()));
            }
            let destroyed = silk_frontier::RedisFrontier::destroy(url, prefix).await;
            if let Err(e) = cx.store.release_lease(&lease, cx.hub_id).await {
                tracing::warn!(lease = %lease, error = %e, "job frontier lease not given back (it expires)");
            }
            destroyed.map_err(|e| storage(&e))?;
        }
        match tokio::fs::remove_dir_all(&dir).await {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(storage(&format!("{}: {e}", dir.display()))),
        }
        if let Some(job_dir) = dir.parent() {
            // Empty once its frontier is gone (nothing else is kept there).
            let _ = tokio::fs::remove_dir(job_dir).await;
        }
        drop(open);
        Ok(())
    }

    /// One run less on `shared`'s handle; the last one closes it and gives its lease back,
    /// both under the registry's lock, so that a run of the job opening it meanwhile waits
    /// for the store to be free and takes the lease anew.
    async fn leave(&self, shared: &Shared) -> Result<(), FrontierError> {
        let mut open = self.open.lock().await;
        let Some(o) = open.get_mut(&shared.key) else {
            return Ok(());
        };
        o.users = o.users.saturating_sub(1);
        if o.users > 0 {
            drop(open);
            // Other runs of the job still use it: this run's calls are made durable.
            return shared.inner.sync().await;
        }
        let closed = match open.remove(&shared.key) {
            Some(o) => o.store.close().await,
            None => Ok(()),
        };
        if let Some(lease) = &shared.lease
            && let Err(e) = shared.cx_store.release_lease(lease, &shared.hub).await
        {
            tracing::warn!(lease = %lease, error = %e, "job frontier lease not given back (it expires)");
        }
        closed
    }
}

/// Whether another hub drives the job frontier in Redis `prefix` now (its store lease is
/// held by another hub and has not expired): the error to give, if so.
pub(crate) async fn check_free(
    store: &dyn silk_store::MetaStore,
    hub: &str,
    prefix: &str,
) -> Result<(), HubError> {
    let Some(lease) = store.get_lease(&lease_name(prefix)).await? else {
        return Ok(());
    };
    if lease.holder == hub || lease.expires_ms <= store.store_now_ms().await? {
        return Ok(());
    }
    Err(in_use(prefix, Some(&lease.holder)))
}

fn in_use(prefix: &str, holder: Option<&str>) -> HubError {
    HubError::Conflict(format!(
        "the job's frontier (Redis prefix `{prefix}`) is driven by hub `{}`: the runs of a job that share its frontier run on one hub at a time; start it there, or when its runs there have ended",
        holder.unwrap_or("another hub")
    ))
}

/// One run's use of a job frontier: every call goes to the shared handle; `close` ends this
/// run's use only (the last run's close closes the handle).
struct Shared {
    key: String,
    inner: Arc<dyn FrontierStore>,
    all: Arc<JobFrontiers>,
    lease: Option<String>,
    cx_store: Arc<dyn silk_store::MetaStore>,
    hub: String,
    closed: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn check(&self) -> Result<(), FrontierError> {
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            Err(FrontierError::Closed)
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl FrontierStore for Shared {
    async fn enqueue(&self, requests: Vec<Request>) -> Result<EnqueueOutcome, FrontierError> {
        self.check()?;
        self.inner.enqueue(requests).await
    }

    async fn lease(&self, max: usize) -> Result<Vec<Lease>, FrontierError> {
        self.check()?;
        self.inner.lease(max).await
    }

    async fn next_ready_ms(&self) -> Result<Option<u64>, FrontierError> {
        self.check()?;
        self.inner.next_ready_ms().await
    }

    async fn ack(&self, lease: LeaseId, outcome: Outcome) -> Result<AckResult, FrontierError> {
        self.check()?;
        self.inner.ack(lease, outcome).await
    }

    async fn ack_many(
        &self,
        acks: Vec<(LeaseId, Outcome)>,
    ) -> Result<Vec<AckResult>, FrontierError> {
        self.check()?;
        self.inner.ack_many(acks).await
    }

    async fn ack_and_enqueue(
        &self,
        lease: LeaseId,
        outcome: Outcome,
        discovered: Vec<Request>,
    ) -> Result<(AckResult, EnqueueOutcome), FrontierError> {
        self.check()?;
        self.inner.ack_and_enqueue(lease, outcome, discovered).await
    }

    async fn ack_many_and_enqueue(
        &self,
        acks: Vec<(LeaseId, Outcome)>,
        discovered: Vec<Request>,
    ) -> Result<(Vec<AckResult>, EnqueueOutcome), FrontierError> {
        self.check()?;
        self.inner.ack_many_and_enqueue(acks, discovered).await
    }

    async fn expire(&self) -> Result<usize, FrontierError> {
        self.check()?;
        self.inner.expire().await
    }

    async fn set_host_delay(&self, host: &str, delay_ms: u64) -> Result<(), FrontierError> {
        self.check()?;
        self.inner.set_host_delay(host, delay_ms).await
    }

    async fn stats(&self) -> Result<FrontierStats, FrontierError> {
        self.check()?;
        self.inner.stats().await
    }

    async fn sync(&self) -> Result<(), FrontierError> {
        self.check()?;
        self.inner.sync().await
    }

    async fn close(&self) -> Result<(), FrontierError> {
        if self.closed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        self.all.leave(self).await
    }
}
