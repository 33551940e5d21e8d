//! The job scheduler task (cron fires, retries, timeouts, queued fires) and the job
//! operations behind [`HubHandle`](crate::HubHandle)'s job methods (see `jobs` for the
//! semantics).

use crate::dispatch::Desired;
use crate::error::HubError;
use crate::jobs::{
    Job, JobSpec, LastRun, PendingRetry, TriggerRequest, job_from_row, job_row, patch_spec,
    run_request, validate_spec,
};
use crate::launch::{NewRun, start_run};
use crate::live::Run;
use crate::run::{RunRecord, RunState, RunView};
use crate::state::HubCore;
use silk_core::RunId;
use silk_schedule::{FireAction, due, on_fire, timed_out};
use silk_store::Level;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Runs the schedule until the hub stops: ticks, and ended runs as they come.
pub(crate) async fn scheduler(shared: Arc<HubCore>, mut ended: mpsc::UnboundedReceiver<RunRecord>) {
    let mut stop = shared.stop.subscribe();
    let mut tick =
        tokio::time::interval(Duration::from_millis(shared.config.schedule_tick_ms.max(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            Some(record) = ended.recv() => on_run_end(&shared, record).await,
            _ = tick.tick() => {
                // Each hub times out the runs it drives; one hub of a cluster fires the
                // jobs: the holder of the scheduler lease.
                time_out_runs(&shared);
                if !shared.holds_scheduler().await {
                    shared.schedule_ticks.send_modify(|n| *n += 1);
                    continue;
                }
                if let Err(e) = tick_once(&shared).await {
                    tracing::warn!(error = %e, "scheduler tick failed; trying again at the next one");
                }
                shared.schedule_ticks.send_modify(|n| *n += 1);
            }
        }
    }
}

/// The job `reference` names: its id, `TENANT/NAME`, or a name of the tenant `default`.
pub(crate) async fn load(shared: &HubCore, reference: &str) -> Result<Job, HubError> {
    if let Some(row) = shared.store.get_job(reference).await? {
        return job_from_row(row);
    }
    let (tenant, name) = reference
        .split_once('/')
        .unwrap_or((silk_store::DEFAULT_TENANT, reference));
    match shared.store.get_job_by_name(tenant, name).await? {
        Some(row) => job_from_row(row),
        None => Err(HubError::NoSuchJob(reference.to_owned())),
    }
}

/// The job of `tenant` with id or name `id_or_name`: another tenant's job is no job.
pub(crate) async fn load_in(
    shared: &HubCore,
    tenant: &str,
    id_or_name: &str,
) -> Result<Job, HubError> {
    let row = match shared.store.get_job(id_or_name).await? {
        Some(row) if row.tenant == tenant => Some(row),
        _ => shared.store.get_job_by_name(tenant, id_or_name).await?,
    };
    match row {
        Some(row) => job_from_row(row),
        None => Err(HubError::NoSuchJob(id_or_name.to_owned())),
    }
}

async fn save(shared: &HubCore, job: &Job) -> Result<(), HubError> {
    shared.store.update_job(&job_row(job)?).await?;
    Ok(())
}

/// Starts a run of `job` (attempt 0 for a fire or a trigger).
async fn start_job_run(
    shared: &Arc<HubCore>,
    job: &Job,
    extra: &BTreeMap<String, String>,
    attempt: u32,
) -> Result<RunView, HubError> {
    let request = run_request(&job.spec, extra)?;
    start_run(
        shared,
        NewRun {
            request,
            tenant: job.tenant.clone(),
            job: Some((job.id.clone(), job.spec.name.clone())),
            attempt,
            restart_of: None,
            args: job.spec.merged_args(extra),
            timeout_ms: job.spec.timeout_ms,
            frontier_from: None,
            feed: None,
            job_frontier: job.spec.frontier == silk_api::jobs::FrontierScope::Job,
        },
    )
    .await
}

/// Records `run` as the job's last run.
pub(crate) async fn note_run(shared: &HubCore, job_id: &str, run: &RunId, state: RunState) {
    let _guard = shared.jobs_lock.lock().await;
    let Ok(mut job) = load(shared, job_id).await else {
        return;
    };
    job.last_run = Some(LastRun {
        id: run.clone(),
        state,
    });
    if let Err(e) = save(shared, &job).await {
        tracing::warn!(job = %job.spec.name, error = %e, "job's last run not stored");
    }
}

/// Starts a run for the scheduler (a fire, a retry, a queued fire), recording it on `job`.
async fn start_for(shared: &Arc<HubCore>, job: &mut Job, attempt: u32, why: &str) {
    match start_job_run(shared, job, &BTreeMap::new(), attempt).await {
        Ok(view) => {
            tracing::info!(job = %job.spec.name, run = %view.id, why, "job run started");
            shared.logs.hub(
                &view.id,
                Level::Info,
                format!("started by the scheduler: {why}"),
            );
            job.last_run = Some(LastRun {
                id: view.id,
                state: view.state,
            });
        }
        Err(HubError::AllocationFailed { run, reason }) => {
            tracing::warn!(job = %job.spec.name, run = %run, reason = %reason, why, "job run could not be allocated");
            job.last_run = Some(LastRun {
                id: run,
                state: RunState::Failed,
            });
        }
        Err(e) => {
            tracing::warn!(job = %job.spec.name, error = %e, why, "job run could not start");
        }
    }
}

/// Fails the runs this hub drives that are still active `timeout_ms` after they started.
fn time_out_runs(shared: &HubCore) {
    let run_now = shared.clock.now_ms();
    let active: Vec<Arc<Run>> = {
        let runs = shared.runs.lock();
        runs.values().cloned().collect()
    };
    for run in active {
        let record = run.record();
        if !record.state.is_terminal() && timed_out(record.started_ms, record.timeout_ms, run_now) {
            let ms = record.timeout_ms.unwrap_or(0);
            run.fail(format!(
                "timed out: still active {} after it started (timeout_ms {ms})",
                humanize(ms)
            ));
        }
    }
}

async fn tick_once(shared: &Arc<HubCore>) -> Result<(), HubError> {
    let now = shared.schedule_clock.now_ms();
    for row in shared.store.list_jobs().await? {
        let _guard = shared.jobs_lock.lock().await;
        // Read again under the lock: the API may have changed it.
        let mut job = match load(shared, &row.id).await {
            Ok(job) => job,
            Err(HubError::NoSuchJob(_)) => continue,
            Err(e) => {
                tracing::warn!(job = %row.name, error = %e, "job skipped by the scheduler");
                continue;
            }
        };
        let before = job.clone();
        if job.spec.enabled
            && let Some(schedule) = job.schedule()
        {
            let baseline = job
                .last_fire_ms
                .unwrap_or(job.schedule_from_ms)
                .max(job.schedule_from_ms);
            let d = due(&schedule, Some(baseline), job.schedule_from_ms, now);
            if let Some(fire) = d.fire {
                job.last_fire_ms = Some(fire.scheduled_ms);
                if fire.missed > 0 {
                    tracing::info!(job = %job.spec.name, missed = fire.missed, "fires missed while the hub was away or the job disabled: running once");
                }
                let active = shared.active_runs_of(&job.id);
                let elsewhere = runs_elsewhere(shared, &job.id).await?;
                match on_fire(job.spec.overlap, active.len() + elsewhere.len(), job.queued) {
                    FireAction::Start => start_for(shared, &mut job, 0, "cron").await,
                    FireAction::Skip => {
                        tracing::info!(job = %job.spec.name, "cron fire skipped: a run of the job is still active (overlap)");
                    }
                    FireAction::Queue => job.queued += 1,
                    FireAction::ReplaceThenStart if !elsewhere.is_empty() => {
                        // Another hub of the cluster drives a run of the job: it cannot be
                        // cancelled from here, so the fire waits for it instead.
                        tracing::warn!(job = %job.spec.name, runs = %silk_core::ids::list(&elsewhere), "cron fire queued: a run of the job is driven by another hub (overlap: replace cancels only this hub's runs)");
                        job.queued += 1;
                    }
                    FireAction::ReplaceThenStart => {
                        for run in active {
                            shared.logs.hub(
                                &run.id,
                                Level::Warn,
                                "replaced by a new cron fire of its job (overlap: replace)",
                            );
                            if run.control(&shared.runs_cx, Desired::Cancel).await.is_ok() {
                                run.finished().await;
                            }
                        }
                        start_for(shared, &mut job, 0, "cron (replacing the active run)").await;
                    }
                }
            }
            job.next_fire_ms = d.next_fire_ms;
        } else {
            job.next_fire_ms = None;
        }
        if let Some(retry) = job.retry_pending.clone()
            && retry.at_ms <= now
        {
            job.retry_pending = None;
            let why = format!("retry {} of failed run {}", retry.attempt, retry.of);
            start_for(shared, &mut job, retry.attempt, &why).await;
        }
        if job.queued > 0
            && shared.active_runs_of(&job.id).is_empty()
            && runs_elsewhere(shared, &job.id).await?.is_empty()
        {
            job.queued -= 1;
            start_for(shared, &mut job, 0, "queued cron fire").await;
        }
        if job != before {
            save(shared, &job).await?;
        }
    }
    Ok(())
}

/// A run ended: the job's last run, a retry if it failed, a queued fire.
async fn on_run_end(shared: &Arc<HubCore>, record: RunRecord) {
    let Some(job_id) = &record.job_id else {
        return;
    };
    let _guard = shared.jobs_lock.lock().await;
    let mut job = match load(shared, job_id).await {
        Ok(job) => job,
        Err(_) => return,
    };
    let latest = job.last_run.as_ref().is_none_or(|l| l.id == record.id);
    if latest {
        job.last_run = Some(LastRun {
            id: record.id.clone(),
            state: record.state,
        });
    }
    // A fed run is the router's: the router retries its tasks, the job does not retry it.
    if record.state == RunState::Failed && record.restart_of.is_none() && record.feed.is_none() {
        let now = shared.schedule_clock.now_ms();
        let attempt = record.attempt + 1;
        match job.spec.retry.retry_at(attempt, now) {
            Some(at_ms) => {
                shared.logs.hub(
                    &record.id,
                    Level::Info,
                    format!(
                        "the job will retry (attempt {attempt} of {}) in {}",
                        job.spec.retry.max_retries,
                        humanize(at_ms.saturating_sub(now))
                    ),
                );
                job.retry_pending = Some(PendingRetry {
                    of: record.id.clone(),
                    attempt,
                    at_ms,
                });
            }
            None if job.spec.retry.max_retries > 0 => {
                shared.logs.hub(
                    &record.id,
                    Level::Warn,
                    format!(
                        "no retry left ({} of {} used)",
                        record.attempt, job.spec.retry.max_retries
                    ),
                );
            }
            None => {}
        }
    }
    if job.queued > 0
        && shared.active_runs_of(&job.id).is_empty()
        && runs_elsewhere(shared, &job.id)
            .await
            .is_ok_and(|r| r.is_empty())
    {
        job.queued -= 1;
        start_for(shared, &mut job, 0, "queued cron fire").await;
    }
    if let Err(e) = save(shared, &job).await {
        tracing::warn!(job = %job.spec.name, error = %e, "job not stored after its run ended");
    }
}

/// The job's runs that have not ended and are not active on this hub (another hub of the
/// cluster drives them), the router's fed runs left out (overlap rules ignore those).
async fn runs_elsewhere(shared: &HubCore, job_id: &str) -> Result<Vec<RunId>, HubError> {
    let filter = crate::repo::open_runs(Some(job_id.to_owned()));
    let mut out = Vec::new();
    for row in shared.store.list_runs(&filter).await? {
        let id = RunId::new(row.id.clone());
        if shared.active_run(&id).is_some() || shared.starting.lock().contains(&id) {
            continue;
        }
        if let Ok(record) = crate::repo::record_of(row)
            && record.feed.is_none()
        {
            out.push(id);
        }
    }
    Ok(out)
}

/// Creates a job of `tenant`.
pub(crate) async fn create_job(
    shared: &HubCore,
    tenant: &str,
    spec: JobSpec,
) -> Result<Job, HubError> {
    let (spider_name, _) = validate_spec(&spec)?;
    // The job's pools and item sink targets must be granted to its tenant (checked again at
    // every run).
    crate::launch::run_pools(shared, tenant, &spec.pools, spec.sinks.as_ref()).await?;
    let now = shared.schedule_clock.now_ms();
    let mut job = Job {
        id: uuid::Uuid::now_v7().simple().to_string(),
        tenant: tenant.to_owned(),
        spec,
        spider_name,
        created_ms: now,
        updated_ms: now,
        next_fire_ms: None,
        last_fire_ms: None,
        schedule_from_ms: now,
        last_run: None,
        queued: 0,
        retry_pending: None,
    };
    job.refresh_next_fire();
    let _guard = shared.jobs_lock.lock().await;
    if shared
        .store
        .get_job_by_name(&job.tenant, &job.spec.name)
        .await?
        .is_some()
    {
        return Err(HubError::Conflict(format!(
            "a job named `{}` exists already",
            job.spec.name
        )));
    }
    shared
        .store
        .create_job(&job_row(&job)?)
        .await
        .map_err(|e| match e {
            silk_store::StoreError::Conflict { .. } => {
                HubError::Conflict(format!("a job named `{}` exists already", job.spec.name))
            }
            other => other.into(),
        })?;
    tracing::info!(job = %job.spec.name, id = %job.id, "job created");
    Ok(job)
}

/// Every job, by name.
pub(crate) async fn jobs(shared: &HubCore) -> Result<Vec<Job>, HubError> {
    let rows = shared.store.list_jobs().await?;
    let mut jobs = Vec::with_capacity(rows.len());
    for row in rows {
        match job_from_row(row) {
            Ok(job) => jobs.push(job),
            Err(e) => tracing::warn!(error = %e, "stored job skipped"),
        }
    }
    Ok(jobs)
}

/// Changes a job with a JSON merge patch (see [`patch_spec`]).
pub(crate) async fn update_job(
    shared: &HubCore,
    id_or_name: &str,
    patch: &serde_json::Value,
) -> Result<Job, HubError> {
    let _guard = shared.jobs_lock.lock().await;
    let mut job = load(shared, id_or_name).await?;
    let spec = patch_spec(&job.spec, patch)?;
    let (spider_name, _) = validate_spec(&spec)?;
    crate::launch::run_pools(shared, &job.tenant, &spec.pools, spec.sinks.as_ref()).await?;
    if spec.name != job.spec.name
        && shared
            .store
            .get_job_by_name(&job.tenant, &spec.name)
            .await?
            .is_some()
    {
        return Err(HubError::Conflict(format!(
            "a job named `{}` exists already",
            spec.name
        )));
    }
    let now = shared.schedule_clock.now_ms();
    let schedule_changed = spec.cron != job.spec.cron
        || spec.timezone != job.spec.timezone
        || spec.enabled != job.spec.enabled;
    if schedule_changed {
        // Count fires from now: no catching up on fires from before the change.
        job.schedule_from_ms = now;
        job.last_fire_ms = None;
        if !spec.enabled {
            job.queued = 0;
        }
    }
    job.spec = spec;
    job.spider_name = spider_name;
    job.updated_ms = now;
    job.refresh_next_fire();
    save(shared, &job).await?;
    Ok(job)
}

/// Deletes a job (its runs stay) and its job frontier (`frontier: job`, now or before), which
/// is refused while a run of the job on that frontier is open. A job whose spec is not
/// `frontier: job` is deleted even when its frontier's store cannot be reached (a Redis
/// down): an earlier spec may have left one, which is then named in a warning.
pub(crate) async fn delete_job(shared: &HubCore, id_or_name: &str) -> Result<(), HubError> {
    let _guard = shared.jobs_lock.lock().await;
    let job = load(shared, id_or_name).await?;
    let open = shared
        .store
        .list_runs(&crate::repo::open_runs(Some(job.id.clone())))
        .await?;
    for row in open {
        let record = crate::repo::record_of(row)?;
        if record.job_frontier {
            return Err(HubError::Conflict(format!(
                "run `{}` of job `{}` has not ended and uses the job's frontier, which deleting the job deletes: cancel the run, or wait for it to end",
                record.id, job.spec.name
            )));
        }
    }
    {
        // Whatever the job's spec says now: an earlier spec may have had one.
        let prefix =
            shared.config.frontier_url.as_ref().map(|_| {
                crate::job_frontier::redis_prefix(&shared.config.frontier_prefix, &job.id)
            });
        let deleted = shared
            .runs_cx
            .job_frontiers
            .delete(
                &shared.runs_cx.job_frontier_env(),
                &job.id,
                prefix.as_deref(),
            )
            .await;
        match deleted {
            Ok(()) => {}
            Err(HubError::Store(e)) if job.spec.frontier != silk_api::jobs::FrontierScope::Job => {
                tracing::warn!(job = %job.spec.name, redis_prefix = ?prefix, error = %e, "job deleted, but its frontier's Redis could not be reached: keys that a job frontier of an earlier spec may have left under this prefix were not deleted");
            }
            Err(e) => return Err(e),
        }
    }
    if !shared.store.delete_job(&job.id).await? {
        return Err(HubError::NoSuchJob(id_or_name.to_owned()));
    }
    tracing::info!(job = %job.spec.name, "job deleted");
    Ok(())
}

/// Triggers a job now (whatever its schedule, enabled or not).
pub(crate) async fn trigger(
    shared: &Arc<HubCore>,
    id_or_name: &str,
    trigger: TriggerRequest,
) -> Result<RunView, HubError> {
    let job = load(shared, id_or_name).await?;
    let result = start_job_run(shared, &job, &trigger.args, 0).await;
    match &result {
        Ok(view) => {
            shared
                .logs
                .hub(&view.id, Level::Info, "triggered by a user");
            note_run(shared, &job.id, &view.id, view.state).await;
        }
        Err(HubError::AllocationFailed { run, .. }) => {
            note_run(shared, &job.id, run, RunState::Failed).await;
        }
        Err(_) => {}
    }
    result
}

fn humanize(ms: u64) -> String {
    if ms >= 3_600_000 && ms.is_multiple_of(60_000) {
        format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60)
    } else if ms >= 60_000 {
        format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60)
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}
