//! The hub's facade: [`Hub::start`] opens the data dir and the store, builds the shared
//! state and starts the services; [`HubHandle`] is what the API, the router classes and the
//! binary call. Its methods are thin: each checks, delegates to a service (`launch`,
//! `scheduler`, `runner` through the active run) or reads the state, and answers.
//!
//! Tasks started here, each independent so that an outage of one input never blocks
//! another: the subscriptions and the ticker of `presence`; the renewal and adoption loop
//! of `ownership`; the `scheduler`; the log writer and log retention (`logs`); one driver per
//! active run (`runner`); the sinks of runs with items to deliver (`sinks`).
//!
//! What must survive a restart is in the metadata store (`silk-store`: runs, jobs, agents,
//! allocations, logs, tokens); each run's frontier and items are files of the data dir
//! (`files`), or in Redis and the store for a run with a shared frontier.
//!
//! Submitting a run ([`HubHandle::submit`]) is synchronous: the allocation is decided from
//! the live agents, the `allocate` commands sent, and their replies awaited (at most
//! `allocate_timeout_ms`); a run that cannot be allocated is stored as `failed` with the
//! reason and the call returns [`HubError::AllocationFailed`].

use crate::dispatch::Desired;
use crate::error::HubError;
use crate::feeds;
use crate::files::{HubFiles, KnownAgent};
use crate::jobs::{Job, JobSpec, TriggerRequest};
use crate::launch::{NewRun, start_run};
use crate::link::AgentLink;
use crate::live::{Run, RunContext, RunSettings};
use crate::logs::RunLogs;
use crate::presence::{beacon_loop, subscription_loop, tick_loop};
use crate::registry::{AgentRegistry, AgentView};
use crate::repo::{RunRepo, record_of};
use crate::routed::{FeedTask, OutcomeConsumer};
use crate::run::{Feed, RunRecord, RunRequest, RunState, RunView};
use crate::scheduler;
use crate::state::HubCore;
use parking_lot::Mutex;
use rand::SeedableRng;
use rand::rngs::StdRng;
use silk_bus::{Bus, Subject, SubscribeOpts};
use silk_core::{AgentId, Clock, HubId, RunId};
use silk_store::{Level, MetaStore, RunFilter};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use crate::config::HubConfig;

/// Log batches pulled from the bus at once.
const LOGS_BATCH: usize = 64;

/// The bus subscriptions of a ready hub.
const SUBSCRIPTIONS: usize = 6;

/// Starts hubs.
#[derive(Debug)]
pub struct Hub;

/// A running hub.
#[derive(Clone)]
pub struct HubHandle {
    shared: Arc<HubCore>,
}

impl std::fmt::Debug for HubHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubHandle")
            .field("data_dir", &self.shared.config.data_dir)
            .finish()
    }
}

impl Hub {
    /// Opens the data dir, reloads known agents and runs (resuming those that were running
    /// or paused), and starts the hub's tasks on `bus`. Does not wait for the bus: while it
    /// is down the tasks retry forever.
    pub async fn start(
        config: HubConfig,
        bus: Arc<dyn Bus>,
        clock: Arc<dyn Clock>,
    ) -> Result<HubHandle, HubError> {
        let schedule_clock = clock.clone();
        Self::start_with_schedule_clock(config, bus, clock, schedule_clock).await
    }

    /// As [`Hub::start`], with a clock of its own for the job schedule (cron fires and
    /// retries), so that a test can move the schedule's time without moving the agents'
    /// liveness or the runs' timers.
    pub async fn start_with_schedule_clock(
        config: HubConfig,
        bus: Arc<dyn Bus>,
        clock: Arc<dyn Clock>,
        schedule_clock: Arc<dyn Clock>,
    ) -> Result<HubHandle, HubError> {
        config.phi.validate()?;
        if config.tick_ms == 0 || config.allocate_timeout_ms == 0 {
            return Err(HubError::BadConfig(
                "tick_ms and allocate_timeout_ms must be at least 1".into(),
            ));
        }
        let files = HubFiles::open(&config.data_dir)?;
        let hub_id = match &config.hub_id {
            Some(id) => id.clone(),
            None => files.hub_id()?,
        };
        let hub_id = HubId::parse(&hub_id).map_err(HubError::BadConfig)?;
        if config.ownership_ttl_ms < 300 {
            return Err(HubError::BadConfig(
                "ownership_ttl_ms must be at least 300".into(),
            ));
        }
        let store_url = match &config.store_url {
            Some(url) => url.clone(),
            None => format!("sqlite://{}", config.data_dir.join("silk.db").display()),
        };
        let store = silk_store::open(&store_url).await?;
        let secrets = open_secrets(&config, store.as_ref()).await?;
        let mut registry = AgentRegistry::new(config.phi)?;
        let now = clock.now_ms();
        for row in store.list_agents().await? {
            match serde_json::from_value::<KnownAgent>(row.register.clone()) {
                Ok(agent) => {
                    registry.restore(&agent.register, agent.sent_ms, now);
                    registry.set_drained(&agent.register.agent, row.drained);
                }
                Err(e) => {
                    tracing::warn!(agent = %row.id, error = %e, "stored agent unreadable; skipped")
                }
            }
        }
        let (logs, log_rx) = RunLogs::new(clock.clone());
        let log_writer = tokio::spawn(crate::logs::writer(logs.clone(), log_rx, store.clone()));
        let (ended_tx, ended_rx) = mpsc::unbounded_channel();
        let repo = RunRepo::new(store.clone(), hub_id.clone(), config.ownership_ttl_ms);
        let registry = Arc::new(Mutex::new(registry));
        let rng = Arc::new(Mutex::new(StdRng::from_os_rng()));
        let link = AgentLink::new(bus.clone(), config.ttl, clock.clone(), registry.clone());
        let stop = watch::channel(false).0;
        let runs_cx = RunContext {
            hub_id: hub_id.clone(),
            clock: clock.clone(),
            files: files.clone(),
            logs: logs.clone(),
            repo: repo.clone(),
            store: store.clone(),
            agents: link.clone(),
            rng: rng.clone(),
            fair: Arc::default(),
            settings: RunSettings {
                frontier_url: config.frontier_url.clone(),
                // The archive reads the outcome lines too.
                record_outcomes: config.record_outcomes || config.archive_retention_ms > 0,
                poison_after_losses: config.poison_after_losses,
                public_url: config.public_url.clone(),
                secrets: secrets.clone(),
                ownership_ttl_ms: config.ownership_ttl_ms,
            },
            stop: stop.subscribe(),
            job_frontiers: Arc::default(),
        };
        let build_settings = config.builds.clone();
        let shared = Arc::new(HubCore {
            config,
            bus,
            clock,
            schedule_clock,
            files,
            repo,
            store,
            logs,
            registry,
            link,
            runs_cx,
            rng,
            runs: Mutex::new(BTreeMap::new()),
            waiters: Mutex::new(HashMap::new()),
            jobs_lock: tokio::sync::Mutex::new(()),
            ended: ended_tx,
            subscribed: std::sync::atomic::AtomicUsize::new(0),
            schedule_ticks: watch::channel(0).0,
            log_writer: Mutex::new(Some(log_writer)),
            stop,
            live: watch::channel(Vec::new()).0,
            drivers: Mutex::new(Vec::new()),
            feed_lock: tokio::sync::Mutex::new(()),
            runs_started: watch::channel(0).0,
            hub_id,
            starting: Mutex::new(std::collections::HashSet::new()),
            undrivable: Mutex::new(std::collections::HashSet::new()),
            builds: crate::state::Builds::new(secrets, build_settings),
            alerts_wake: tokio::sync::Notify::new(),
            router: std::sync::OnceLock::new(),
            replay_lock: tokio::sync::Mutex::new(()),
            alerts_task: Mutex::new(None),
            pools: Mutex::new(BTreeMap::new()),
        });
        // Per-hub durables: every hub reads every registration, and the results of the
        // downloads it sent (`results.{hub id}`).
        let registrations = format!("hub-registrations-{}", shared.hub_id);
        let own_results = format!("hub-results-{}", shared.hub_id);
        // Subscriptions first, so that replies and results are read before any run acts.
        tokio::spawn(subscription_loop(
            shared.clone(),
            Subject::registrations(),
            SubscribeOpts::durable(registrations),
        ));
        tokio::spawn(subscription_loop(
            shared.clone(),
            Subject::heartbeats(),
            SubscribeOpts::live(),
        ));
        tokio::spawn(subscription_loop(
            shared.clone(),
            Subject::hub_results(shared.hub_id.as_str())
                .map_err(|e| HubError::BadConfig(e.to_string()))?,
            SubscribeOpts::durable(own_results).batch(crate::presence::RESULTS_BATCH),
        ));
        // Results of agents of older builds, which publish them all on `results`.
        tokio::spawn(subscription_loop(
            shared.clone(),
            Subject::results(),
            SubscribeOpts::durable("hub-results").batch(crate::presence::RESULTS_BATCH),
        ));
        tokio::spawn(subscription_loop(
            shared.clone(),
            Subject::allocations(),
            SubscribeOpts::live(),
        ));
        tokio::spawn(subscription_loop(
            shared.clone(),
            Subject::logs(),
            SubscribeOpts::durable("hub-logs").batch(LOGS_BATCH),
        ));
        tokio::spawn(tick_loop(shared.clone()));
        tokio::spawn(beacon_loop(shared.clone()));
        tokio::spawn(crate::presence::drain_sync_loop(shared.clone()));
        tokio::spawn(crate::logs::retention(
            shared.store.clone(),
            shared.clock.clone(),
            crate::logs::Retention {
                logs_ms: shared.config.log_retention_ms,
                router_failures_ms: shared.config.router_failure_retention_ms,
            },
            shared.stop.subscribe(),
        ));
        crate::ownership::adopt(&shared, true).await?;
        tokio::spawn(crate::ownership::ownership_loop(shared.clone()));
        crate::sinks::resume_pending(&shared).await;
        crate::archive::start(&shared);
        tokio::spawn(crate::scheduler::scheduler(shared.clone(), ended_rx));
        tokio::spawn(crate::builds::build_loop(shared.clone()));
        let alerts = tokio::spawn(crate::alerts::alert_loop(shared.clone()));
        *shared.alerts_task.lock() = Some(alerts);
        tokio::spawn(crate::scale::scale_loop(shared.clone()));
        tracing::info!(hub = %shared.hub_id, data_dir = %shared.config.data_dir.display(), store = shared.store.backend(), frontier = if shared.config.frontier_url.is_some() { "redis" } else { "embedded" }, "hub started");
        Ok(HubHandle { shared })
    }
}

/// The hub's secret key (`HubConfig::secret_key`, else the data dir's key file), checked
/// against the store: the first hub of a store leaves a check value there, and a hub whose key
/// does not open it refuses to start (it could not open the store's secrets).
async fn open_secrets(
    config: &HubConfig,
    store: &dyn MetaStore,
) -> Result<silk_projects::secrets::SecretBox, HubError> {
    let secrets =
        silk_projects::secrets::SecretBox::load(&config.data_dir, config.secret_key.as_deref())
            .map_err(|e| HubError::BadConfig(e.to_string()))?;
    let stored = store
        .put_setting_if_absent("secret_key_check", &secrets.check_value())
        .await?;
    secrets
        .check_store(&stored)
        .map_err(|e| HubError::BadConfig(e.to_string()))?;
    Ok(secrets)
}

/// Which runs to list.
#[derive(Debug, Clone, Default)]
pub struct RunQuery {
    /// Only this job's runs.
    pub job_id: Option<String>,
    /// Only this tenant's runs.
    pub tenant: Option<String>,
    /// Only runs in these states (any when empty).
    pub states: Vec<RunState>,
    /// At most this many (newest first); default 100.
    pub limit: Option<u32>,
}

/// What a run token may reach (see [`HubHandle::authenticate_run`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunScope {
    /// The run.
    pub run: RunId,
    /// The run's tenant.
    pub tenant: String,
    /// The project and version its program runs (their artifact may be fetched).
    pub version: Option<(String, String)>,
}

impl HubHandle {
    pub(crate) fn shared(&self) -> &Arc<HubCore> {
        &self.shared
    }

    /// Submits an ad-hoc run of the tenant `default`: allocates it synchronously and
    /// starts it (see the module doc).
    pub async fn submit(&self, request: RunRequest) -> Result<RunView, HubError> {
        self.submit_in(silk_store::DEFAULT_TENANT, request).await
    }

    /// Submits an ad-hoc run of `tenant` (see [`HubHandle::submit`]).
    pub async fn submit_in(&self, tenant: &str, request: RunRequest) -> Result<RunView, HubError> {
        start_run(
            &self.shared,
            NewRun {
                request,
                tenant: tenant.to_owned(),
                job: None,
                attempt: 0,
                restart_of: None,
                args: BTreeMap::new(),
                timeout_ms: None,
                frontier_from: None,
                feed: None,
                job_frontier: false,
            },
        )
        .await
    }

    /// Runs, newest first.
    pub async fn runs(&self, query: &RunQuery) -> Result<Vec<RunView>, HubError> {
        let filter = RunFilter {
            job_id: query.job_id.clone(),
            tenant: query.tenant.clone(),
            states: query.states.iter().map(|s| s.as_str().to_owned()).collect(),
            limit: Some(query.limit.unwrap_or(100).clamp(1, 10_000)),
            newest_first: true,
        };
        let rows = self.shared.store.list_runs(&filter).await?;
        let now = self.shared.clock.now_ms();
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let id = RunId::new(row.id.clone());
            match self.shared.active_run(&id) {
                Some(run) => out.push(run.view(now).await),
                None => match record_of(row) {
                    Ok(record) => out.push(self.stored_view(&record)),
                    Err(e) => tracing::warn!(run = %id, error = %e, "stored run skipped"),
                },
            }
        }
        Ok(out)
    }

    fn stored_view(&self, record: &RunRecord) -> RunView {
        crate::run::run_view(
            record,
            record.final_stats.clone().unwrap_or_default(),
            crate::items::ItemLog::of(record, &self.shared.files)
                .path()
                .map(std::path::Path::to_path_buf),
        )
    }

    /// A page of a run's archived requests (its finished ones), filtered.
    pub async fn run_requests(
        &self,
        id: &RunId,
        params: &silk_api::runs::RequestsParams,
    ) -> Result<silk_api::runs::RequestsPage, HubError> {
        crate::archive::list(&self.shared, id, params).await
    }

    /// Queues a run's archived requests again (its failed ones by default): into the run
    /// while this hub drives it, else into its job's run for fed requests.
    pub async fn requeue_requests(
        &self,
        id: &RunId,
        ask: &silk_api::runs::RequeueRequest,
    ) -> Result<silk_api::runs::Requeued, HubError> {
        crate::archive::requeue(&self.shared, id, ask).await
    }

    /// At most `limit` of a run's items after `cursor`, from its one item log.
    pub async fn run_items(
        &self,
        id: &RunId,
        cursor: u64,
        limit: usize,
    ) -> Result<crate::run::ItemsPage, HubError> {
        let record = self.stored_record(id).await?;
        let log = crate::items::ItemLog::of(&record, &self.shared.files);
        log.read(self.shared.store.as_ref(), id, cursor, limit)
            .await
    }

    /// What a run token may reach: its run, and the version its program runs; `None` when
    /// `token` is not a run token of this hub's key, or its run has ended.
    pub async fn authenticate_run(&self, token: &str) -> Result<Option<RunScope>, HubError> {
        let Some(run) = crate::run::token_run(&self.shared.runs_cx.settings.secrets, token) else {
            return Ok(None);
        };
        let record = match self.stored_record(&run).await {
            Ok(record) => record,
            Err(HubError::NoSuchRun(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        if record.state.is_terminal() {
            return Ok(None);
        }
        Ok(Some(RunScope {
            run,
            tenant: record.tenant,
            version: record.program.map(|p| (p.spec.project, p.version)),
        }))
    }

    /// The token of a program run (`SILK_RUN_TOKEN`), as its workers get it.
    pub fn run_token(&self, run: &RunId) -> String {
        crate::run::run_token(&self.shared.runs_cx.settings.secrets, run)
    }

    /// Writes items a program pushed to its run's item log (the run must be driven here).
    pub async fn push_items(
        &self,
        id: &RunId,
        batch: silk_api::programs::ItemsBatch,
    ) -> Result<silk_api::programs::ItemsAdded, HubError> {
        let run = self.driven_here(id, "take items").await?;
        crate::programs::push_items(&self.shared.runs_cx, &run, batch.items).await
    }

    /// Puts a program's requests in its run's frontier (the run must be driven here).
    pub async fn enqueue_requests(
        &self,
        id: &RunId,
        batch: silk_api::programs::EnqueueBatch,
    ) -> Result<silk_api::programs::Enqueued, HubError> {
        let run = self.driven_here(id, "take requests").await?;
        crate::programs::enqueue(&run, batch).await
    }

    /// Leases requests of a run's frontier to a program (long-poll up to `wait_ms`).
    pub async fn lease_requests(
        &self,
        id: &RunId,
        ask: silk_api::programs::LeaseAsk,
    ) -> Result<silk_api::programs::Leases, HubError> {
        let run = self.driven_here(id, "lease requests").await?;
        crate::programs::lease(&self.shared.runs_cx, &run, ask).await
    }

    /// Acks a program's leases with the requests each gave.
    pub async fn ack_requests(
        &self,
        id: &RunId,
        batch: silk_api::programs::AckBatch,
    ) -> Result<silk_api::programs::Acked, HubError> {
        let run = self.driven_here(id, "take acks").await?;
        crate::programs::ack(&run, batch).await
    }

    /// Fetches one request for a program through the download center (one of the run's
    /// agents, its downloader for the run).
    pub async fn fetch_for_program(
        &self,
        id: &RunId,
        ask: silk_api::programs::FetchAsk,
    ) -> Result<silk_api::programs::Fetched, HubError> {
        let run = self.driven_here(id, "fetch").await?;
        crate::programs::fetch(&self.shared.runs_cx, &run, ask).await
    }

    /// The active run `id` of this hub, or why a program's call cannot be served here.
    async fn driven_here(&self, id: &RunId, action: &str) -> Result<Arc<Run>, HubError> {
        if let Some(run) = self.shared.active_run(id) {
            return Ok(run);
        }
        let record = self.stored_record(id).await?;
        Err(match (&record.hub, record.state.is_terminal()) {
            (_, true) => HubError::WrongState {
                run: id.clone(),
                state: record.state.to_string(),
                action: action.into(),
            },
            (Some(hub), false) if *hub != self.shared.hub_id => HubError::OwnedElsewhere {
                run: id.clone(),
                hub: hub.to_string(),
            },
            _ => HubError::WrongState {
                run: id.clone(),
                state: record.state.to_string(),
                action: format!("{action} (the run is not active on this hub yet)"),
            },
        })
    }

    /// The stored record of a run (active or not).
    pub(crate) async fn stored_record(&self, id: &RunId) -> Result<RunRecord, HubError> {
        if let Some(run) = self.shared.active_run(id) {
            return Ok(run.record());
        }
        self.shared
            .repo
            .get(id)
            .await?
            .ok_or_else(|| HubError::NoSuchRun(id.clone()))
    }

    /// One run.
    pub async fn run(&self, id: &RunId) -> Result<RunView, HubError> {
        if let Some(run) = self.shared.active_run(id) {
            return Ok(run.view(self.shared.clock.now_ms()).await);
        }
        let record = self.stored_record(id).await?;
        Ok(self.stored_view(&record))
    }

    async fn active(&self, id: &RunId) -> Result<Arc<Run>, HubError> {
        if let Some(run) = self.shared.active_run(id) {
            return Ok(run);
        }
        let record = self.stored_record(id).await?;
        if !record.state.is_terminal()
            && let Some(lease) = self
                .shared
                .store
                .get_lease(&crate::repo::run_lease(id))
                .await?
            && lease.holder != self.shared.hub_id.as_str()
        {
            return Err(HubError::OwnedElsewhere {
                run: id.clone(),
                hub: lease.holder,
            });
        }
        Err(HubError::WrongState {
            run: id.clone(),
            state: record.state.to_string(),
            action: "this".into(),
        })
    }

    /// Pauses a running run: no new dispatch, requests out finish.
    pub async fn pause(&self, id: &RunId) -> Result<RunView, HubError> {
        self.control(id, Desired::Pause).await
    }

    /// Resumes a paused run.
    pub async fn resume(&self, id: &RunId) -> Result<RunView, HubError> {
        self.control(id, Desired::Run).await
    }

    /// Cancels a run; returns once it is recorded as cancelled.
    pub async fn cancel(&self, id: &RunId) -> Result<RunView, HubError> {
        let run = self.active(id).await?;
        run.control(&self.shared.runs_cx, Desired::Cancel).await?;
        run.finished().await;
        self.run(id).await
    }

    /// Restarts a run: stops it if it is active (cancel), then starts a new run of the same
    /// spider and settings (and job); with `keep_frontier` the new run takes over the old
    /// run's frontier, so what was fetched is not fetched again and what was left is next.
    pub async fn restart(&self, id: &RunId, keep_frontier: bool) -> Result<RunView, HubError> {
        if let Some(run) = self.shared.active_run(id) {
            match run.control(&self.shared.runs_cx, Desired::Cancel).await {
                Ok(()) | Err(HubError::WrongState { .. }) => {}
                Err(e) => return Err(e),
            }
            run.finished().await;
        }
        let old = self.stored_record(id).await?;
        if !old.state.is_terminal() {
            if let Err(e @ HubError::OwnedElsewhere { .. }) = self.active(id).await {
                return Err(e);
            }
            return Err(HubError::WrongState {
                run: id.clone(),
                state: old.state.to_string(),
                action: "restart".into(),
            });
        }
        let request = RunRequest {
            spider: old.spider.clone(),
            // The same version again.
            program: old.program.as_ref().map(|p| crate::run::ProgramSpec {
                version: p.version.clone(),
                ..p.spec.clone()
            }),
            strategy: Some(old.strategy),
            on_agent_lost: Some(old.on_agent_lost),
            pools: old.pools.clone(),
            max_pending: Some(old.max_pending),
            stall_timeout_ms: Some(old.stall_timeout_ms),
            downloader: Some(old.downloader.clone()),
            sinks: Some(old.sinks.clone()),
            fail_if: old.fail_if.clone(),
        };
        let job = old.job_id.clone().zip(old.job_name.clone());
        let view = start_run(
            &self.shared,
            NewRun {
                request,
                tenant: old.tenant.clone(),
                job,
                attempt: 0,
                restart_of: Some(id.clone()),
                args: old.args.clone(),
                timeout_ms: old.timeout_ms,
                frontier_from: keep_frontier.then(|| id.clone()),
                feed: old.feed.clone(),
                job_frontier: old.job_frontier,
            },
        )
        .await?;
        self.shared
            .logs
            .hub(id, Level::Info, format!("restarted as run {}", view.id));
        if let Some(job_id) = &view.job_id {
            scheduler::note_run(&self.shared, job_id, &view.id, view.state).await;
        }
        Ok(view)
    }

    async fn control(&self, id: &RunId, desired: Desired) -> Result<RunView, HubError> {
        let run = self.active(id).await?;
        run.control(&self.shared.runs_cx, desired).await?;
        Ok(run.view(self.shared.clock.now_ms()).await)
    }

    /// Waits until a run is in a terminal state; its view then.
    pub async fn wait_run(&self, id: &RunId) -> Result<RunView, HubError> {
        if let Some(run) = self.shared.active_run(id) {
            run.finished().await;
        }
        self.run(id).await
    }

    /// Waits until run `id` is driven by this hub (started, resumed after a restart, or
    /// adopted from another hub).
    pub async fn wait_driving(&self, id: &RunId) {
        let mut started = self.shared.runs_started.subscribe();
        while self.shared.active_run(id).is_none() {
            if started.changed().await.is_err() {
                return;
            }
        }
    }

    /// Waits until the scheduler has looked at the jobs `n` more times (after a change of
    /// the schedule clock in a test, two ticks make sure a whole tick saw it).
    pub async fn wait_schedule_ticks(&self, n: u64) {
        let mut ticks = self.shared.schedule_ticks.subscribe();
        let target = *ticks.borrow() + n;
        let _ = ticks.wait_for(|t| *t >= target).await;
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn MetaStore> {
        &self.shared.store
    }

    /// Whether the hub is ready: the store answers and every bus subscription is open.
    pub async fn ready(&self) -> Result<(), String> {
        self.shared
            .store
            .ping()
            .await
            .map_err(|e| format!("store: {e}"))?;
        let open = self
            .shared
            .subscribed
            .load(std::sync::atomic::Ordering::SeqCst);
        if open < SUBSCRIPTIONS {
            return Err(format!("bus: {open} of {SUBSCRIPTIONS} subscriptions open"));
        }
        Ok(())
    }

    /// Every registered agent, sorted by id.
    pub fn agents(&self) -> Vec<AgentView> {
        let now = self.shared.clock.now_ms();
        self.shared.registry.lock().agents(now)
    }

    /// The pools declared in the hub's config, with their live agents and scale hook.
    pub fn pools(&self) -> Vec<silk_api::agents::PoolView> {
        let seen = self.shared.pools.lock().clone();
        self.shared
            .config
            .pools
            .iter()
            .map(|(name, decl)| {
                seen.get(name).cloned().unwrap_or_else(|| {
                    // Not looked at yet (the hub has just started).
                    silk_api::agents::PoolView {
                        name: name.clone(),
                        agents: decl.agents,
                        alive: 0,
                        deficit: decl.agents,
                        scale: silk_api::agents::ScaleView {
                            command: !decl.scale_command.is_empty(),
                            ..Default::default()
                        },
                    }
                })
            })
            .collect()
    }

    /// Tells agent `id` to stop (the bus's `shutdown` command): it stops taking work,
    /// finishes or gives back what it holds within its grace and exits; its runs go on as
    /// for an agent that died (their `on_agent_lost`). The agent must be known to this hub.
    pub async fn shutdown_agent(&self, id: &AgentId) -> Result<AgentView, HubError> {
        let view = self
            .agents()
            .into_iter()
            .find(|a| &a.id == id)
            .ok_or_else(|| HubError::NoSuchAgent(id.to_string()))?;
        self.shared
            .link
            .send_command(id, silk_bus::Command::Shutdown)
            .await
            .map_err(|e| HubError::Bus(e.to_string()))?;
        tracing::info!(agent = %id, "shutdown sent to the agent");
        Ok(view)
    }

    /// Drains agent `id` (`drained: true`: it takes no new work — it is not picked for new
    /// runs or reassignments, `random` runs send it no requests — and finishes the runs that
    /// hold it) or ends its drain. Kept in the store (the agent's `drained`), so every hub of
    /// the store and a restarted hub agree (another hub sees it within a few seconds). The agent
    /// must be known to the store.
    pub async fn drain_agent(&self, id: &AgentId, drained: bool) -> Result<AgentView, HubError> {
        if !self.store().set_agent_drained(id.as_str(), drained).await? {
            return Err(HubError::NoSuchAgent(id.to_string()));
        }
        self.shared.registry.lock().set_drained(id, drained);
        tracing::info!(agent = %id, drained, "agent drain changed");
        self.agents()
            .into_iter()
            .find(|a| &a.id == id)
            .ok_or_else(|| HubError::NoSuchAgent(id.to_string()))
    }

    /// The live agents now (alive or suspect), sorted.
    pub fn live_agents(&self) -> Vec<AgentId> {
        self.shared.link.live_agents()
    }

    /// Waits until at least `n` agents are live (as of the hub's last tick); the live agents
    /// then.
    pub async fn wait_for_live_agents(&self, n: usize) -> Vec<AgentId> {
        let mut live = self.shared.live.subscribe();
        let seen = live.wait_for(|l| l.len() >= n).await;
        seen.map(|l| l.clone()).unwrap_or_default()
    }

    /// Waits until `agent` is dead (as of the hub's last tick).
    pub async fn wait_for_dead(&self, agent: &AgentId) {
        let mut live = self.shared.live.subscribe();
        let _ = live.wait_for(|l| !l.contains(agent)).await;
    }

    /// This hub's id in the cluster.
    pub fn hub_id(&self) -> &HubId {
        &self.shared.hub_id
    }

    /// The data dir.
    pub fn data_dir(&self) -> &std::path::Path {
        &self.shared.config.data_dir
    }

    /// Creates a job of the tenant `default`.
    pub async fn create_job(&self, spec: JobSpec) -> Result<Job, HubError> {
        self.create_job_in(silk_store::DEFAULT_TENANT, spec).await
    }

    /// Creates a job of `tenant` (names are unique within a tenant).
    pub async fn create_job_in(&self, tenant: &str, spec: JobSpec) -> Result<Job, HubError> {
        scheduler::create_job(&self.shared, tenant, spec).await
    }

    /// Every job, by name.
    pub async fn jobs(&self) -> Result<Vec<Job>, HubError> {
        scheduler::jobs(&self.shared).await
    }

    /// A job by id, `TENANT/NAME`, or a name in the tenant `default`.
    pub async fn job(&self, reference: &str) -> Result<Job, HubError> {
        scheduler::load(&self.shared, reference).await
    }

    /// A job of `tenant` by id or name: another tenant's job answers
    /// [`HubError::NoSuchJob`].
    pub async fn job_in(&self, tenant: &str, id_or_name: &str) -> Result<Job, HubError> {
        scheduler::load_in(&self.shared, tenant, id_or_name).await
    }

    /// Changes a job with a JSON merge patch (see [`patch_spec`](crate::jobs::patch_spec)).
    pub async fn update_job(
        &self,
        id_or_name: &str,
        patch: &serde_json::Value,
    ) -> Result<Job, HubError> {
        scheduler::update_job(&self.shared, id_or_name, patch).await
    }

    /// Deletes a job (its runs stay).
    pub async fn delete_job(&self, id_or_name: &str) -> Result<(), HubError> {
        scheduler::delete_job(&self.shared, id_or_name).await
    }

    /// Triggers a job now (whatever its schedule, enabled or not).
    pub async fn trigger(
        &self,
        id_or_name: &str,
        trigger: TriggerRequest,
    ) -> Result<RunView, HubError> {
        scheduler::trigger(&self.shared, id_or_name, trigger).await
    }

    /// The runs of a job, newest first.
    pub async fn job_runs(
        &self,
        id_or_name: &str,
        limit: Option<u32>,
    ) -> Result<Vec<RunView>, HubError> {
        let job = self.job(id_or_name).await?;
        self.runs(&RunQuery {
            job_id: Some(job.id),
            tenant: None,
            states: Vec::new(),
            limit,
        })
        .await
    }

    /// Feeds routed tasks to `job`'s fed run, starting one (allocated as the job says)
    /// when the job has none that takes requests. Per task, `Err` is a refusal for good
    /// (bad URL, host not allowed); the whole call fails when the job does not exist
    /// ([`HubError::NoSuchJob`]), its spider is bad, or no run can take the tasks now.
    pub async fn feed_job(
        &self,
        job: &str,
        feed: Feed,
        tasks: Vec<FeedTask>,
    ) -> Result<Vec<Result<(), String>>, HubError> {
        feeds::feed_job(&self.shared, job, feed, tasks).await
    }

    /// What `job`'s fed run has not finished (0 when it has none, or no such job: the
    /// push then says so).
    pub async fn job_backlog(&self, job: &str) -> Result<u64, HubError> {
        feeds::job_backlog(&self.shared, job).await
    }

    /// Hands every run's final outcomes to `consumer` until it or the hub stops (see
    /// `feeds::consume_outcomes`); fails at once when the hub does not record outcomes.
    pub(crate) async fn consume_outcomes(
        &self,
        consumer: Arc<dyn OutcomeConsumer>,
    ) -> Result<(), HubError> {
        feeds::consume_outcomes(self.shared.clone(), consumer).await
    }

    /// Stops the hub: the runs' loops end (runs stay `running` or `paused` and resume at
    /// the next start), frontiers and item files are synced and closed.
    pub async fn shutdown(&self) {
        self.shared.stop.send_replace(true);
        let drivers: Vec<JoinHandle<()>> = std::mem::take(&mut *self.shared.drivers.lock());
        for d in drivers {
            let _ = d.await;
        }
        // Builds in progress queue their versions again.
        for b in self.shared.builds.take_tasks() {
            let _ = b.await;
        }
        // A send in flight is left to its claim (the delivery is sent again when it runs
        // out: at least once); then the alerts' lease goes back.
        let alerts = self.shared.alerts_task.lock().take();
        if let Some(task) = alerts {
            task.abort();
            let _ = task.await;
        }
        // The runs' leases went back as their loops ended; the scheduler's, the alerts' and
        // the pools' go now (another hub takes them at once).
        crate::scale::release_leases(&self.shared).await;
        for lease in [
            crate::ownership::SCHEDULER_LEASE,
            crate::alerts::ALERTS_LEASE,
        ] {
            if let Err(e) = self
                .shared
                .store
                .release_lease(lease, self.shared.hub_id.as_str())
                .await
            {
                tracing::debug!(lease, error = %e, "lease not released (it expires)");
            }
        }
        self.shared.logs.close();
        let writer = self.shared.log_writer.lock().take();
        if let Some(writer) = writer {
            let _ = writer.await;
        }
        self.shared.store.close().await;
        tracing::info!("hub stopped");
    }
}
