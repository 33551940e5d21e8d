//! Run starts: a new run is checked, leased, stored, allocated (the agents' confirmations
//! awaited, at most `allocate_timeout_ms`), its frontier opened and seeded, and its driver
//! and sinks started ([`start_run`]). A run that cannot be allocated is stored as `failed`
//! with the reason.

use crate::allocation::{OnAgentLost, Strategy, allocate};
use crate::error::HubError;
use crate::live::Run;
use crate::repo::record_of;
use crate::run::{Feed, RunRecord, RunRequest, RunState, RunView};
use crate::runner::downloader_config;
use crate::state::HubCore;
use silk_bus::Command;
use silk_core::{AgentId, RunId};
use silk_store::{AllocationRow, Level};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// What a new run is made of besides its request.
#[derive(Debug, Clone)]
pub(crate) struct NewRun {
    pub(crate) request: RunRequest,
    /// The tenant: the job's, or the submitter's.
    pub(crate) tenant: String,
    /// The job (id, name).
    pub(crate) job: Option<(String, String)>,
    pub(crate) attempt: u32,
    pub(crate) restart_of: Option<RunId>,
    pub(crate) args: BTreeMap<String, String>,
    pub(crate) timeout_ms: Option<u64>,
    /// Take over this (ended) run's frontier.
    pub(crate) frontier_from: Option<RunId>,
    /// Fed by the router instead of seeded.
    pub(crate) feed: Option<Feed>,
    /// Keeps its requests in its job's frontier (`frontier: job`; needs `job`).
    pub(crate) job_frontier: bool,
}

/// The pools a run of `tenant` that asked for `asked` uses: limited to, or filled with, the
/// pools granted to the tenant (see [`crate::tenant::granted_pools`]); `403` naming
/// `pools[i]` for a pool not granted. The item sink targets of `sinks` are checked too
/// (declared on this hub, granted to the tenant: [`crate::tenant::granted_targets`]).
pub(crate) async fn run_pools(
    hub: &HubCore,
    tenant: &str,
    asked: &[String],
    sinks: Option<&silk_api::runs::Sinks>,
) -> Result<Vec<String>, HubError> {
    let targets = sinks.map_or(&[][..], |s| &s.targets[..]);
    Ok(run_grants(hub, tenant, asked, targets).await?.0)
}

/// The pools of [`run_pools`] and the private ranges an admin allowed the tenant (its runs
/// reach them besides what the agents and hubs allow themselves); checks that the item sink
/// `targets` are declared on this hub and granted to the tenant.
async fn run_grants(
    hub: &HubCore,
    tenant: &str,
    asked: &[String],
    targets: &[String],
) -> Result<(Vec<String>, Vec<silk_core::net::IpNet>), HubError> {
    let row = hub
        .store
        .get_tenant(tenant)
        .await?
        .ok_or_else(|| HubError::NoSuchTenant(tenant.to_owned()))?;
    let doc = crate::tenant::tenant_doc(&row)?;
    let pools = crate::tenant::granted_pools(tenant, &doc, asked)?;
    crate::tenant::granted_targets(tenant, &doc, &hub.config.sink_targets, targets)?;
    Ok((pools, doc.allow_networks))
}

/// Decides, confirms and stores the allocation of a new run; then starts it.
pub(crate) async fn start_run(hub: &Arc<HubCore>, new: NewRun) -> Result<RunView, HubError> {
    if *hub.stop.borrow() {
        return Err(HubError::ShuttingDown);
    }
    let mut request = new.request;
    let spider = crate::run::check_request(&request)?;
    let targets = request.sinks.as_ref().map_or(&[][..], |s| &s.targets[..]);
    let (pools, allow_networks) = run_grants(hub, &new.tenant, &request.pools, targets).await?;
    request.pools = pools;
    // A program run: its version resolved now (`latest` is the newest ready one), its
    // spider the settings it was given, or the defaults.
    let program = match &request.program {
        Some(spec) => Some(crate::programs::resolve(hub, &new.tenant, spec).await?),
        None => None,
    };
    if let Some(spec) = &request.program
        && request.spider.trim().is_empty()
    {
        request.spider = crate::run::program_spider(spec);
    }
    // The spider's expansion is resolved now (a missing file or arg is `400`), and again
    // whenever a hub opens the run (from the same version and args).
    let expand_total = match &new.feed {
        None => crate::expansion::resolve(&*hub.store, &spider, &new.args, program.as_ref())
            .await?
            .map(|e| e.total()),
        Some(_) => None,
    };
    let now = hub.clock.now_ms();
    let id = RunId::new(uuid::Uuid::now_v7().simple().to_string());
    let (job_id, job_name) = new.job.unzip();
    let job_frontier = new.job_frontier && job_id.is_some();
    // A run on its job's frontier finds what earlier runs left there: no takeover.
    let frontier_from = new.frontier_from.filter(|_| !job_frontier);
    // Adoption leaves the run alone while it is being created; its lease is taken
    // before it is stored, so no other hub takes it.
    let _starting = crate::ownership::Starting::new(hub, id.clone());
    // A takeover keeps the frontier where it is; a new frontier goes where this hub keeps
    // them.
    let shared_frontier = match (&frontier_from, &job_id) {
        (Some(from), _) => hub.repo.get(from).await?.and_then(|r| r.shared_frontier),
        (None, Some(job)) if job_frontier => hub
            .config
            .frontier_url
            .as_ref()
            .map(|_| crate::job_frontier::redis_prefix(&hub.config.frontier_prefix, job)),
        (None, _) => hub
            .config
            .frontier_url
            .as_ref()
            .map(|_| format!("{}:{id}", hub.config.frontier_prefix)),
    };
    if job_frontier && let Some(prefix) = &shared_frontier {
        crate::job_frontier::check_free(&*hub.store, hub.hub_id.as_str(), prefix).await?;
    }
    if let (Some(from), Some(prefix)) = (&frontier_from, &shared_frontier) {
        // A Redis frontier is not moved by a takeover: one open run at a time may use it.
        if let Some(user) = open_run_on_frontier(hub, prefix).await? {
            return Err(HubError::Conflict(format!(
                "the frontier of run `{from}` is in use by run `{user}`, which has not ended"
            )));
        }
    }
    if let Some(w) = request.sinks.as_ref().and_then(|s| s.webhook.as_ref()) {
        crate::sinks::check_webhook(&hub.config, &allow_networks, &w.url)?;
    }
    let defaults = hub.config.run_defaults;
    let unset = |key: &str| !silk_core::spider::SpiderSpec::sets(&request.spider, key);
    let lease_timeout_ms = unset("lease_timeout_ms").then_some(defaults.lease_timeout_ms);
    let max_retries = unset("max_retries").then_some(defaults.max_retries);
    let mut record = RunRecord {
        id: id.clone(),
        tenant: new.tenant,
        spider: request.spider,
        spider_name: spider.spec.name.clone(),
        strategy: request.strategy.unwrap_or(Strategy::Random),
        on_agent_lost: request.on_agent_lost.unwrap_or(OnAgentLost::Fail),
        pools: request.pools,
        max_pending: request.max_pending.unwrap_or(defaults.max_pending),
        stall_timeout_ms: request
            .stall_timeout_ms
            .unwrap_or(defaults.stall_timeout_ms),
        downloader: request.downloader.unwrap_or_default(),
        state: RunState::Allocating,
        reason: None,
        allocation: None,
        agents: Vec::new(),
        created_ms: now,
        started_ms: None,
        finished_ms: None,
        final_stats: None,
        job_id,
        job_name,
        attempt: new.attempt,
        restart_of: new.restart_of,
        args: new.args,
        timeout_ms: new.timeout_ms,
        sinks: request.sinks.unwrap_or_default(),
        feed: new.feed,
        shared_frontier,
        hub: Some(hub.hub_id.clone()),
        fail_if: request.fail_if,
        program,
        lease_timeout_ms,
        max_retries,
        quota: None,
        allow_networks,
        expand_total,
        expanded: 0,
        job_frontier,
        frontier_base: None,
    };
    if !hub.repo.hold(&id).await? {
        return Err(HubError::Store(format!(
            "the lease of the new run `{id}` is held by another hub"
        )));
    }
    if let Err(e) = hub.repo.save(&record).await {
        hub.repo.release(&id).await;
        return Err(e);
    }
    let what = match (&record.job_name, &record.restart_of) {
        (_, Some(of)) => format!("restart of run {of}"),
        (Some(job), None) if record.attempt > 0 => {
            format!("job `{job}`, retry {}", record.attempt)
        }
        (Some(job), None) => format!("job `{job}`"),
        (None, None) => "ad-hoc run".to_owned(),
    };
    let runs = match &record.program {
        Some(p) => format!(
            "program `{}` {} ({} worker(s), {})",
            p.spec.project,
            p.version,
            p.spec.workers,
            p.spec.runtime.as_str()
        ),
        None => format!("spider `{}`", record.spider_name),
    };
    hub.logs.hub(
        &id,
        Level::Info,
        format!(
            "run created ({what}): {runs}, strategy {}, allocating agents",
            record.strategy
        ),
    );
    if let Err(reason) = allocate_run(hub, &mut record).await {
        tracing::warn!(run = %id, reason = %reason, "run could not be allocated");
        hub.fail_stored(record, reason.clone()).await;
        return Err(HubError::AllocationFailed { run: id, reason });
    }
    let allocations: Vec<AllocationRow> = record
        .agents
        .iter()
        .map(|a| AllocationRow {
            run_id: id.to_string(),
            agent_id: a.to_string(),
            confirmed_ms: hub.clock.now_ms(),
        })
        .collect();
    if let Err(e) = hub.store.put_allocations(id.as_str(), &allocations).await {
        tracing::warn!(run = %id, error = %e, "allocations not stored (the run record has them)");
    }
    if let Some(from) = &frontier_from {
        // A frontier in Redis stays under its prefix (the record names it); an embedded
        // one moves to the new run's directory.
        let moved = match record.shared_frontier {
            Some(_) => Ok(()),
            None => hub.files.take_frontier(from, &id),
        };
        if let Err(e) = moved {
            release_agents(hub, &record).await;
            hub.fail_stored(
                record,
                format!("could not take over the frontier of run {from}: {e}"),
            )
            .await;
            return Err(e);
        }
        hub.logs.hub(
            &id,
            Level::Info,
            format!(
                "took over the frontier of run {from} (what it had fetched is not fetched again)"
            ),
        );
    }
    // Open and seed the frontier while the run is still `allocating`: a crash before it
    // is `running` fails the run at the next start instead of leaving it empty.
    let run = match Run::open(&hub.runs_cx, record.clone(), true).await {
        Ok(run) => run,
        Err(e) => {
            release_agents(hub, &record).await;
            hub.fail_stored(record, format!("could not open the run's storage: {e}"))
                .await;
            return Err(e);
        }
    };
    let started = hub.clock.now_ms();
    run.update(&hub.runs_cx, |r| {
        r.state = RunState::Running;
        r.started_ms = Some(started);
    })
    .await?;
    record.started_ms = Some(started);
    run.mark_allocated(&record.agents);
    tracing::info!(run = %id, spider = %record.spider_name, strategy = %record.strategy, agents = %silk_core::ids::list(&record.agents), "run started");
    let names: Vec<&str> = record.agents.iter().map(AgentId::as_str).collect();
    hub.logs.hub(
        &id,
        Level::Info,
        format!(
            "run started on {} agent(s): {}",
            names.len(),
            names.join(", ")
        ),
    );
    let view = run.view(hub.clock.now_ms()).await;
    crate::runner::spawn(hub, run);
    if let Err(e) = crate::sinks::start(hub, &record) {
        hub.logs
            .hub(&id, Level::Error, format!("item sinks not started: {e}"));
    }
    Ok(view)
}

/// A run that has not ended and uses the Redis frontier `prefix`.
async fn open_run_on_frontier(hub: &HubCore, prefix: &str) -> Result<Option<RunId>, HubError> {
    for row in hub.store.list_runs(&crate::repo::open_runs(None)).await? {
        if let Ok(record) = record_of(row)
            && record.shared_frontier.as_deref() == Some(prefix)
        {
            return Ok(Some(record.id));
        }
    }
    Ok(None)
}

async fn release_agents(hub: &HubCore, record: &RunRecord) {
    for agent in &record.agents {
        let release = Command::Release {
            run: record.id.clone(),
        };
        let _ = hub.link.send_command(agent, release).await;
    }
}

/// An allocation error of a run limited to `pools`, saying so.
fn in_pools(error: String, pools: &[String]) -> String {
    if pools.is_empty() {
        error
    } else {
        format!(
            "{error} (in pools {}: agents labelled pool=NAME, not drained)",
            pools.join(", ")
        )
    }
}

/// Picks the run's agents and gets their confirmation; the reason when it cannot.
async fn allocate_run(hub: &HubCore, record: &mut RunRecord) -> Result<(), String> {
    let live = hub.link.open_agents(&record.pools);
    let allocation = {
        let mut rng = hub.rng.lock();
        allocate(record.strategy, record.on_agent_lost, &live, &mut *rng)
            .map_err(|e| in_pools(e.to_string(), &record.pools))?
    };
    let targets: Vec<AgentId> = if allocation.agents().is_empty() {
        live
    } else {
        allocation.agents().to_vec()
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    hub.waiters.lock().insert(record.id.clone(), tx);
    let result = async {
        let config = downloader_config(record);
        for agent in &targets {
            let command = Command::Allocate {
                run: record.id.clone(),
                config: config.clone(),
                allow_networks: record.allow_networks.clone(),
            };
            hub.link
                .send_command(agent, command)
                .await
                .map_err(|e| format!("cannot send the allocation to agent `{agent}`: {e}"))?;
        }
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(hub.config.allocate_timeout_ms);
        let mut answers: BTreeMap<AgentId, Result<(), String>> = BTreeMap::new();
        while answers.len() < targets.len() {
            let reply = match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(reply)) => reply,
                Ok(None) | Err(_) => break,
            };
            if !targets.contains(&reply.agent) {
                continue;
            }
            let answer = if reply.ok {
                Ok(())
            } else {
                Err(reply.error.unwrap_or_else(|| "refused".into()))
            };
            answers.insert(reply.agent, answer);
        }
        let ok: Vec<AgentId> = answers
            .iter()
            .filter(|(_, a)| a.is_ok())
            .map(|(id, _)| id.clone())
            .collect();
        let refusals: Vec<String> = answers
            .iter()
            .filter_map(|(id, a)| a.as_ref().err().map(|e| format!("agent `{id}`: {e}")))
            .collect();
        let silent: Vec<&str> = targets
            .iter()
            .filter(|a| !answers.contains_key(*a))
            .map(AgentId::as_str)
            .collect();
        let all_needed = !allocation.agents().is_empty();
        if (all_needed && ok.len() < targets.len()) || ok.is_empty() {
            let mut why = Vec::new();
            if !refusals.is_empty() {
                why.push(format!("refused by {}", refusals.join("; ")));
            }
            if !silent.is_empty() {
                why.push(format!(
                    "no answer within {} ms from {}",
                    hub.config.allocate_timeout_ms,
                    silent.join(", ")
                ));
            }
            return Err(why.join("; "));
        }
        Ok(ok)
    }
    .await;
    hub.waiters.lock().remove(&record.id);
    let agents = result?;
    record.agents = agents;
    record.allocation = Some(allocation);
    Ok(())
}
