//! The hub process: [`Hub::start`] and its [`HubHandle`].
//!
//! Tasks, each independent so that an outage of one input never blocks another:
//! - **presence**: a durable subscription to `registrations` (registrations sent while the hub
//!   was away are processed when it is back; they never expire) and a live one to
//!   `heartbeats` (stale ones are dropped by the bus when read), both fed to the
//!   [`AgentRegistry`]. Registered agents are remembered in the metadata store (its agent
//!   documents), so a restarted hub knows them before they register again.
//! - **ticker**: every `tick_ms`, the registry's state transitions (phi accrual, capped by
//!   `dead_after_ms`); an agent that turns dead is reported to every active run
//!   ([`Run::on_agent_dead`]).
//! - **results**: a durable subscription to the hub's own `results.{hub id}` (the agents
//!   answer the hub that sent the download) and a shared one to `results` (downloads that
//!   named no hub: agents of older builds); each result goes to its run
//!   ([`Run::on_result`]) and is acked on the bus after the run recorded it. A result of an
//!   unknown or finished run is acked and ignored.
//! - **allocation replies**: a live subscription to `allocations`, handing each reply to the
//!   submit call waiting for it.
//! - one **dispatch loop** per active run (`runner::drive`).
//!
//! - **logs**: a durable subscription to `logs` (the agents' run log batches), queued to the
//!   store with the hub's own run events (`logs`).
//! - **scheduler**: jobs' cron fires, retries, timeouts, queued fires (`scheduler`).
//!
//! What must survive a restart is in the metadata store (`silk-store`: runs, jobs, agents,
//! allocations, logs, tokens); each run's frontier and items are files of the data dir
//! (`files`).
//!
//! Submitting a run ([`HubHandle::submit`]) is synchronous: the allocation is decided from
//! the live agents, the `allocate` commands sent, and their replies awaited (at most
//! `allocate_timeout_ms`); a run that cannot be allocated is stored as `failed` with the
//! reason and the call returns [`HubError::AllocationFailed`].

use crate::allocation::{OnAgentLost, Strategy, allocate};
use crate::error::HubError;
use crate::files::{HubFiles, KnownAgent};
use crate::logs::RunLogs;
use crate::phi::{AgentState, PhiConfig};
use crate::registry::{AgentRegistry, AgentView, Applied, LabelFilter, RegisterOutcome};
use crate::run::{
    DEFAULT_MAX_PENDING, DEFAULT_STALL_TIMEOUT_MS, RunRecord, RunRequest, RunState, RunView,
};
use crate::runner::{Desired, Run, downloader_config, drive};
use parking_lot::Mutex;
use rand::SeedableRng;
use rand::rngs::StdRng;
use silk_bus::{
    AllocationReply, Bus, BusError, Command, Delivery, Message, Subject, SubscribeOpts, TtlPolicy,
};
use silk_core::spider::Spider;
use silk_core::{AgentId, Clock, RunId};
use silk_store::{AgentRow, AllocationRow, Level, MetaStore, RunFilter, RunRow};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// Results pulled from the bus at once: one pull round trip per this many results (the hub
/// handles a batch in milliseconds, far within the bus's ack wait).
const RESULTS_BATCH: usize = 256;

/// Log batches pulled from the bus at once.
const LOGS_BATCH: usize = 64;

/// The bus subscriptions of a ready hub.
const SUBSCRIPTIONS: usize = 6;

/// The hub's settings.
#[derive(Debug, Clone)]
pub struct HubConfig {
    /// Where runs, frontiers, items and known agents are kept.
    pub data_dir: PathBuf,
    /// Failure detection (phi threshold, `dead_after_ms`, …).
    pub phi: PhiConfig,
    /// Message TTLs (must match the agents' heartbeat interval).
    pub ttl: TtlPolicy,
    /// How often agent states are re-evaluated, ms.
    pub tick_ms: u64,
    /// How long a run start waits for its agents' allocation replies, ms.
    pub allocate_timeout_ms: u64,
    /// Wait between attempts to (re)subscribe while the bus is down, ms (doubling up to
    /// 5 s).
    pub resubscribe_initial_ms: u64,
    /// The metadata store: `sqlite://PATH` or `postgres://…`; default the SQLite file
    /// `DATA_DIR/silk.db`.
    pub store_url: Option<String>,
    /// Run log lines older than this are deleted, ms (default 30 days).
    pub log_retention_ms: u64,
    /// How often the scheduler looks at jobs, ms (default 1000).
    pub schedule_tick_ms: u64,
    /// Write each fetched request's final outcome to `runs/{id}/outcomes.jsonl`, for the
    /// router's `silk.RunResultsInbound` (default false; `silk hub --router` sets it when
    /// the router config has such an inbound).
    pub record_outcomes: bool,
    /// This hub's id in the cluster (a single token of at most 40 `[A-Za-z0-9_-]`
    /// characters): the holder of its run leases, its results subject `results.{id}` and its
    /// durable names. Default: the id kept in `DATA_DIR/hub.id`, made at first start.
    pub hub_id: Option<String>,
    /// The cluster's Redis (`redis://…`) for run frontiers: new runs keep their frontier
    /// there (`RedisFrontier`, prefix `{frontier_prefix}:{run id}`), so another hub can
    /// adopt them when this one dies; their items go to the store before each ack. `None`:
    /// frontiers are embedded stores in the data dir.
    pub frontier_url: Option<String>,
    /// The first part of the Redis key prefix of run frontiers (default `silk`).
    pub frontier_prefix: String,
    /// How long a run's lease in the store lasts without renewal, ms (default 15 s): a hub
    /// that dies loses its runs to the other hubs this long after its last renewal. Renewed
    /// every third of it.
    pub ownership_ttl_ms: u64,
    /// A request whose agent is lost while fetching it this many times is given up as
    /// poison (failed, reason `poison`) instead of being sent to another agent again: a
    /// page that crashes its agent would otherwise take the fleet down one agent at a time,
    /// forever. Default 3. (A request whose lease expires uses up a retry each time, so
    /// `max_retries` bounds that case.)
    pub poison_after_losses: u32,
}

impl HubConfig {
    /// Defaults (`dead_after` 11 s, heartbeats every 1 s) with `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            phi: PhiConfig::default(),
            ttl: TtlPolicy::default(),
            tick_ms: 250,
            allocate_timeout_ms: 10_000,
            resubscribe_initial_ms: 100,
            store_url: None,
            log_retention_ms: 30 * 24 * 3600 * 1000,
            schedule_tick_ms: 1000,
            record_outcomes: false,
            hub_id: None,
            frontier_url: None,
            frontier_prefix: "silk".into(),
            ownership_ttl_ms: 15_000,
            poison_after_losses: 3,
        }
    }
}

/// What the hub's tasks share.
pub(crate) struct HubCore {
    pub(crate) config: HubConfig,
    pub(crate) bus: Arc<dyn Bus>,
    pub(crate) clock: Arc<dyn Clock>,
    /// The clock of cron fires and retries (the hub's clock unless a test injects one).
    pub(crate) schedule_clock: Arc<dyn Clock>,
    pub(crate) files: HubFiles,
    pub(crate) store: Arc<dyn MetaStore>,
    pub(crate) logs: Arc<RunLogs>,
    pub(crate) registry: Mutex<AgentRegistry>,
    pub(crate) rng: Mutex<StdRng>,
    /// The runs active on this hub (terminal ones are in the store only).
    pub(crate) runs: Mutex<BTreeMap<RunId, Arc<Run>>>,
    waiters: Mutex<HashMap<RunId, mpsc::UnboundedSender<AllocationReply>>>,
    /// Job changes are serialised (the scheduler and the API).
    pub(crate) jobs_lock: tokio::sync::Mutex<()>,
    /// Ended runs, for the scheduler (last run, retries, queued fires).
    pub(crate) ended: mpsc::UnboundedSender<RunRecord>,
    /// Scheduler ticks done (tests wait for them).
    pub(crate) schedule_ticks: watch::Sender<u64>,
    /// Subscriptions open now (readiness).
    pub(crate) subscribed: std::sync::atomic::AtomicUsize,
    /// The log writer, awaited at shutdown so that the last lines are stored.
    log_writer: Mutex<Option<JoinHandle<()>>>,
    pub(crate) stop: watch::Sender<bool>,
    /// The live agents as of the last tick.
    live: watch::Sender<Vec<AgentId>>,
    drivers: Mutex<Vec<JoinHandle<()>>>,
    /// Finding or starting a job's fed run is serialised (two outbounds feeding one job
    /// get one run).
    pub(crate) feed_lock: tokio::sync::Mutex<()>,
    /// Bumped whenever a run's driver starts (outcome readers look for new runs).
    pub(crate) runs_started: watch::Sender<u64>,
    /// This hub's id in the cluster (`HubConfig::hub_id`).
    pub(crate) hub_id: String,
    /// Runs this hub is creating (not active yet): adoption leaves them alone.
    pub(crate) starting: Mutex<std::collections::HashSet<RunId>>,
    /// Runs seen open in the store that this hub cannot drive (logged once).
    pub(crate) undrivable: Mutex<std::collections::HashSet<RunId>>,
}

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
        crate::ownership::check_hub_id(&hub_id)?;
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
        let mut registry = AgentRegistry::new(config.phi)?;
        let now = clock.now_ms();
        for row in store.list_agents().await? {
            match serde_json::from_value::<KnownAgent>(row.register.clone()) {
                Ok(agent) => {
                    registry.register(&agent.register, agent.sent_ms, now);
                }
                Err(e) => {
                    tracing::warn!(agent = %row.id, error = %e, "stored agent unreadable; skipped")
                }
            }
        }
        let (logs, log_rx) = RunLogs::new(clock.clone());
        let log_writer = tokio::spawn(crate::logs::writer(logs.clone(), log_rx, store.clone()));
        let (ended_tx, ended_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(HubCore {
            config,
            bus,
            clock,
            schedule_clock,
            files,
            store,
            logs,
            registry: Mutex::new(registry),
            rng: Mutex::new(StdRng::from_os_rng()),
            runs: Mutex::new(BTreeMap::new()),
            waiters: Mutex::new(HashMap::new()),
            jobs_lock: tokio::sync::Mutex::new(()),
            ended: ended_tx,
            subscribed: std::sync::atomic::AtomicUsize::new(0),
            schedule_ticks: watch::channel(0).0,
            log_writer: Mutex::new(Some(log_writer)),
            stop: watch::channel(false).0,
            live: watch::channel(Vec::new()).0,
            drivers: Mutex::new(Vec::new()),
            feed_lock: tokio::sync::Mutex::new(()),
            runs_started: watch::channel(0).0,
            hub_id,
            starting: Mutex::new(std::collections::HashSet::new()),
            undrivable: Mutex::new(std::collections::HashSet::new()),
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
            Subject::hub_results(&shared.hub_id).map_err(|e| HubError::BadConfig(e.to_string()))?,
            SubscribeOpts::durable(own_results).batch(RESULTS_BATCH),
        ));
        // Results of agents of older builds, which publish them all on `results`.
        tokio::spawn(subscription_loop(
            shared.clone(),
            Subject::results(),
            SubscribeOpts::durable("hub-results").batch(RESULTS_BATCH),
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
        tokio::spawn(crate::logs::retention(
            shared.store.clone(),
            shared.clock.clone(),
            shared.config.log_retention_ms,
            shared.stop.subscribe(),
        ));
        crate::ownership::adopt(&shared, true).await?;
        tokio::spawn(crate::ownership::ownership_loop(shared.clone()));
        crate::sinks::resume_pending(&shared).await;
        tokio::spawn(crate::scheduler::scheduler(shared.clone(), ended_rx));
        tracing::info!(hub = %shared.hub_id, data_dir = %shared.config.data_dir.display(), store = shared.store.backend(), frontier = if shared.config.frontier_url.is_some() { "redis" } else { "embedded" }, "hub started");
        Ok(HubHandle { shared })
    }
}

/// What a new run is made of besides its request.
#[derive(Debug, Clone)]
pub(crate) struct NewRun {
    pub(crate) request: RunRequest,
    /// The job (id, name).
    pub(crate) job: Option<(String, String)>,
    pub(crate) attempt: u32,
    pub(crate) restart_of: Option<RunId>,
    pub(crate) args: BTreeMap<String, String>,
    pub(crate) timeout_ms: Option<u64>,
    /// Take over this (ended) run's frontier.
    pub(crate) frontier_from: Option<RunId>,
    /// Fed by the router instead of seeded.
    pub(crate) feed: Option<crate::run::Feed>,
}

/// Checks a run request; the compiled spider.
pub(crate) fn check_request(request: &RunRequest) -> Result<Spider, HubError> {
    let spider = Spider::from_yaml(&request.spider, "spider")
        .map_err(|e| HubError::BadRun(e.to_string()))?;
    if request.max_pending == Some(0) {
        return Err(HubError::BadRun("max_pending must be at least 1".into()));
    }
    if request.stall_timeout_ms == Some(0) {
        return Err(HubError::BadRun(
            "stall_timeout_ms must be at least 1".into(),
        ));
    }
    if let Some(d) = &request.downloader
        && d.contains_key("spider")
    {
        return Err(HubError::BadRun(
            "downloader.spider is not allowed: the run's spider is sent to the agents".into(),
        ));
    }
    if let Some(sinks) = &request.sinks {
        sinks.validate().map_err(HubError::BadRun)?;
    }
    if let Some(fail_if) = &request.fail_if {
        let problems = fail_if.problems();
        if !problems.is_empty() {
            return Err(HubError::BadRun(problems.join("; ")));
        }
    }
    Ok(spider)
}

/// The store row of a run record.
pub(crate) fn run_row(record: &RunRecord) -> Result<RunRow, HubError> {
    Ok(RunRow {
        id: record.id.to_string(),
        job_id: record.job_id.clone(),
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

impl HubCore {
    /// The live agents now.
    pub(crate) fn live_agents(&self) -> Vec<AgentId> {
        let now = self.clock.now_ms();
        self.registry.lock().live_agents(now, &LabelFilter::any())
    }

    /// Stores a run record (and its allocation), only while this hub holds the run's lease
    /// (`ownership`): a hub that lost the run to another hub gets
    /// [`HubError::OwnedElsewhere`] and writes nothing.
    pub(crate) async fn save_run(&self, record: &RunRecord) -> Result<(), HubError> {
        let lease = crate::ownership::run_lease(&record.id);
        if self
            .store
            .put_run_held(&run_row(record)?, &lease, &self.hub_id)
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

    /// Sends a command to one agent (the bus retries per its policy).
    pub(crate) async fn send_command(
        &self,
        agent: &AgentId,
        command: Command,
    ) -> Result<(), BusError> {
        let subject = Subject::agent_commands(agent)?;
        let envelope = self.config.ttl.envelope(command, self.clock.now_ms());
        self.bus.publish(&subject, &envelope).await
    }

    /// Called by a run's driver when it has ended.
    pub(crate) fn run_finished(&self, run: &Run) {
        let record = run.record();
        if record.state.is_terminal() {
            self.runs.lock().remove(&run.id);
            let _ = self.ended.send(record);
        } else if run.is_disowned() {
            // Another hub drives it now.
            self.runs.lock().remove(&run.id);
        }
    }

    /// The writer of a run's logs (items, outcomes), for a tailer: the run while it is
    /// active here, over once it is not.
    pub(crate) fn run_writer(&self, id: &RunId) -> crate::tailer::Writer<Arc<Run>> {
        match self.active_run(id) {
            Some(run) => crate::tailer::Writer::Active(run),
            None => crate::tailer::Writer::Over,
        }
    }

    /// The active run `id`.
    pub(crate) fn active_run(&self, id: &RunId) -> Option<Arc<Run>> {
        self.runs.lock().get(id).cloned()
    }

    /// The active runs of a job that its schedule or a user started (not the run the
    /// router feeds: that one lives beside them and overlap rules ignore it).
    pub(crate) fn active_runs_of(&self, job_id: &str) -> Vec<Arc<Run>> {
        self.runs
            .lock()
            .values()
            .filter(|r| r.job_id() == Some(job_id) && !r.is_fed())
            .cloned()
            .collect()
    }

    /// The job's run that the router feeds and that still takes requests.
    pub(crate) fn fed_run_of(&self, job_id: &str) -> Option<Arc<Run>> {
        self.runs
            .lock()
            .values()
            .find(|r| r.job_id() == Some(job_id) && r.is_fed() && !r.is_closing())
            .cloned()
    }

    /// The ids of the runs active now.
    pub(crate) fn runs_now(&self) -> Vec<RunId> {
        self.runs.lock().keys().cloned().collect()
    }

    pub(crate) fn spawn_driver(self: &Arc<Self>, run: Arc<Run>) {
        self.runs.lock().insert(run.id.clone(), run.clone());
        let handle = tokio::spawn(drive(self.clone(), run));
        {
            let mut drivers = self.drivers.lock();
            drivers.retain(|h| !h.is_finished());
            drivers.push(handle);
        }
        self.runs_started.send_modify(|n| *n += 1);
    }

    /// Stores a run as failed (it never ran, or could not resume) and tells the scheduler.
    pub(crate) async fn fail_stored(&self, mut record: RunRecord, reason: String) -> RunRecord {
        record.state = RunState::Failed;
        record.reason = Some(reason.clone());
        record.finished_ms = Some(self.clock.now_ms());
        if let Err(e) = self.save_run(&record).await {
            tracing::error!(run = %record.id, error = %e, "run state not stored");
        }
        self.logs
            .hub(&record.id, Level::Error, format!("run failed: {reason}"));
        self.release_run(&record.id).await;
        let _ = self.ended.send(record.clone());
        record
    }

    async fn on_register(&self, delivery: &Delivery) {
        let now = self.clock.now_ms();
        let envelope = &delivery.envelope;
        let Message::Register(register) = &envelope.body else {
            return;
        };
        let outcome = self
            .registry
            .lock()
            .register(register, envelope.sent_ms, now);
        match outcome {
            RegisterOutcome::Outdated => return,
            RegisterOutcome::New => {
                tracing::info!(agent = %register.agent, host = %register.host, capacity = register.capacity, "agent registered")
            }
            RegisterOutcome::Revived => {
                tracing::info!(agent = %register.agent, "agent registered again after it was dead")
            }
            RegisterOutcome::Refreshed => {}
        }
        let known = KnownAgent {
            register: register.clone(),
            sent_ms: envelope.sent_ms,
        };
        let row = serde_json::to_value(&known).map(|register| AgentRow {
            id: known.register.agent.to_string(),
            register,
            sent_ms: envelope.sent_ms,
            updated_ms: now,
        });
        match row {
            Ok(row) => {
                if let Err(e) = self.store.put_agent(&row).await {
                    tracing::warn!(agent = %row.id, error = %e, "known agent not stored");
                }
            }
            Err(e) => tracing::warn!(error = %e, "known agent not stored"),
        }
    }

    async fn on_delivery(&self, delivery: Delivery) {
        match &delivery.envelope.body {
            Message::Register(_) => self.on_register(&delivery).await,
            Message::Heartbeat(_) => {
                let now = self.clock.now_ms();
                if let Applied::Heartbeat(crate::registry::HeartbeatOutcome::NeedsRegister) =
                    self.registry.lock().apply(&delivery.envelope, now)
                {
                    tracing::debug!("heartbeat of an agent that has not registered yet");
                }
            }
            Message::Result(result) => match self.active_run(&result.run) {
                Some(run) => run.on_result(self, result).await,
                None => {
                    tracing::debug!(run = %result.run, "result of a run that is not active here ignored")
                }
            },
            Message::Allocated(reply) => {
                let waiter = self.waiters.lock().get(&reply.run).cloned();
                if let Some(tx) = waiter {
                    let _ = tx.send(reply.clone());
                }
            }
            Message::Command(_) | Message::Control(_) => {}
            Message::Log(batch) => {
                let source = format!("agent:{}", batch.agent);
                for line in &batch.lines {
                    let level = line.level.as_str().parse().unwrap_or(Level::Info);
                    self.logs.line(
                        batch.run.as_str(),
                        line.ts_ms,
                        level,
                        &source,
                        line.message.clone(),
                    );
                }
            }
        }
        if delivery.is_durable()
            && let Err(e) = delivery.ack().await
        {
            tracing::debug!(error = %e, "bus ack failed (the message may come again)");
        }
    }

    /// Decides, confirms and stores the allocation of a new run; then starts it.
    pub(crate) async fn start_run(self: &Arc<Self>, new: NewRun) -> Result<RunView, HubError> {
        if *self.stop.borrow() {
            return Err(HubError::ShuttingDown);
        }
        let request = new.request;
        let spider = check_request(&request)?;
        let now = self.clock.now_ms();
        let id = RunId::new(uuid::Uuid::now_v7().simple().to_string());
        let (job_id, job_name) = new.job.unzip();
        // Adoption leaves the run alone while it is being created; its lease is taken
        // before it is stored, so no other hub takes it.
        let _starting = crate::ownership::Starting::new(self, id.clone());
        // A takeover keeps the frontier where it is; a new frontier goes where this hub keeps
        // them.
        let shared_frontier = match &new.frontier_from {
            Some(from) => match self.store.get_run(from.as_str()).await? {
                Some(row) => record_of(row)?.shared_frontier,
                None => None,
            },
            None => self
                .config
                .frontier_url
                .as_ref()
                .map(|_| format!("{}:{id}", self.config.frontier_prefix)),
        };
        if let (Some(from), Some(prefix)) = (&new.frontier_from, &shared_frontier) {
            // A Redis frontier is not moved by a takeover: one open run at a time may use it.
            if let Some(user) = self.open_run_on_frontier(prefix).await? {
                return Err(HubError::Conflict(format!(
                    "the frontier of run `{from}` is in use by run `{user}`, which has not ended"
                )));
            }
        }
        let mut record = RunRecord {
            id: id.clone(),
            spider: request.spider,
            spider_name: spider.spec.name.clone(),
            strategy: request.strategy.unwrap_or(Strategy::Random),
            on_agent_lost: request.on_agent_lost.unwrap_or(OnAgentLost::Fail),
            max_pending: request.max_pending.unwrap_or(DEFAULT_MAX_PENDING),
            stall_timeout_ms: request.stall_timeout_ms.unwrap_or(DEFAULT_STALL_TIMEOUT_MS),
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
            hub: Some(self.hub_id.clone()),
            fail_if: request.fail_if,
        };
        if !self.hold_run(&id).await? {
            return Err(HubError::Store(format!(
                "the lease of the new run `{id}` is held by another hub"
            )));
        }
        if let Err(e) = self.save_run(&record).await {
            self.release_run(&id).await;
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
        self.logs.hub(
            &id,
            Level::Info,
            format!(
                "run created ({what}): spider `{}`, strategy {}, allocating agents",
                record.spider_name, record.strategy
            ),
        );
        if let Err(reason) = self.allocate_run(&mut record).await {
            tracing::warn!(run = %id, reason = %reason, "run could not be allocated");
            self.fail_stored(record, reason.clone()).await;
            return Err(HubError::AllocationFailed { run: id, reason });
        }
        let allocations: Vec<AllocationRow> = record
            .agents
            .iter()
            .map(|a| AllocationRow {
                run_id: id.to_string(),
                agent_id: a.to_string(),
                confirmed_ms: self.clock.now_ms(),
            })
            .collect();
        if let Err(e) = self.store.put_allocations(id.as_str(), &allocations).await {
            tracing::warn!(run = %id, error = %e, "allocations not stored (the run record has them)");
        }
        if let Some(from) = &new.frontier_from {
            // A frontier in Redis stays under its prefix (the record names it); an embedded
            // one moves to the new run's directory.
            let moved = match record.shared_frontier {
                Some(_) => Ok(()),
                None => self.files.take_frontier(from, &id),
            };
            if let Err(e) = moved {
                self.release_agents(&record).await;
                self.fail_stored(
                    record,
                    format!("could not take over the frontier of run {from}: {e}"),
                )
                .await;
                return Err(e);
            }
            self.logs.hub(
                &id,
                Level::Info,
                format!("took over the frontier of run {from} (what it had fetched is not fetched again)"),
            );
        }
        // Open and seed the frontier while the run is still `allocating`: a crash before it
        // is `running` fails the run at the next start instead of leaving it empty.
        let run = match Run::open(self, record.clone(), true).await {
            Ok(run) => run,
            Err(e) => {
                self.release_agents(&record).await;
                self.fail_stored(record, format!("could not open the run's storage: {e}"))
                    .await;
                return Err(e);
            }
        };
        let started = self.clock.now_ms();
        run.update(self, |r| {
            r.state = RunState::Running;
            r.started_ms = Some(started);
        })
        .await?;
        record.started_ms = Some(started);
        run.mark_allocated(&record.agents);
        tracing::info!(run = %id, spider = %record.spider_name, strategy = %record.strategy, agents = ?record.agents, "run started");
        let names: Vec<&str> = record.agents.iter().map(AgentId::as_str).collect();
        self.logs.hub(
            &id,
            Level::Info,
            format!(
                "run started on {} agent(s): {}",
                names.len(),
                names.join(", ")
            ),
        );
        let view = run.view(self.clock.now_ms()).await;
        self.spawn_driver(run);
        if let Err(e) = crate::sinks::start(self, &record) {
            self.logs
                .hub(&id, Level::Error, format!("item sinks not started: {e}"));
        }
        Ok(view)
    }

    /// A run that has not ended and uses the Redis frontier `prefix`.
    async fn open_run_on_frontier(&self, prefix: &str) -> Result<Option<RunId>, HubError> {
        for row in self
            .store
            .list_runs(&crate::ownership::open_runs(None))
            .await?
        {
            if let Ok(record) = record_of(row)
                && record.shared_frontier.as_deref() == Some(prefix)
            {
                return Ok(Some(record.id));
            }
        }
        Ok(None)
    }

    async fn release_agents(&self, record: &RunRecord) {
        for agent in &record.agents {
            let release = Command::Release {
                run: record.id.clone(),
            };
            let _ = self.send_command(agent, release).await;
        }
    }

    /// Picks the run's agents and gets their confirmation; the reason when it cannot.
    async fn allocate_run(&self, record: &mut RunRecord) -> Result<(), String> {
        let live = self.live_agents();
        let allocation = {
            let mut rng = self.rng.lock();
            allocate(record.strategy, record.on_agent_lost, &live, &mut *rng)
                .map_err(|e| e.to_string())?
        };
        let targets: Vec<AgentId> = if allocation.agents().is_empty() {
            live
        } else {
            allocation.agents().to_vec()
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        self.waiters.lock().insert(record.id.clone(), tx);
        let result = async {
            let config = downloader_config(record);
            for agent in &targets {
                let command = Command::Allocate {
                    run: record.id.clone(),
                    config: config.clone(),
                };
                self.send_command(agent, command)
                    .await
                    .map_err(|e| format!("cannot send the allocation to agent `{agent}`: {e}"))?;
            }
            let deadline = tokio::time::Instant::now()
                + Duration::from_millis(self.config.allocate_timeout_ms);
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
                        self.config.allocate_timeout_ms,
                        silent.join(", ")
                    ));
                }
                return Err(why.join("; "));
            }
            Ok(ok)
        }
        .await;
        self.waiters.lock().remove(&record.id);
        let agents = result?;
        record.agents = agents;
        record.allocation = Some(allocation);
        Ok(())
    }
}

/// Counts an open subscription down when it ends.
struct Decrement<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Decrement<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Reads one subject forever (re-subscribing with back-off while the bus is down).
async fn subscription_loop(shared: Arc<HubCore>, subject: Subject, opts: SubscribeOpts) {
    let mut stop = shared.stop.subscribe();
    let initial = Duration::from_millis(shared.config.resubscribe_initial_ms.max(1));
    let mut backoff = initial;
    loop {
        if *stop.borrow() {
            return;
        }
        let subscribed = tokio::select! {
            _ = stop.changed() => return,
            r = shared.bus.subscribe(&subject, opts.clone()) => r,
        };
        match subscribed {
            Ok(mut subscription) => {
                tracing::debug!(subject = %subject, "hub subscribed");
                backoff = initial;
                shared
                    .subscribed
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _open = Decrement(&shared.subscribed);
                loop {
                    let next = tokio::select! {
                        _ = stop.changed() => return,
                        n = subscription.next() => n,
                    };
                    match next {
                        Some(Ok(delivery)) => shared.on_delivery(delivery).await,
                        Some(Err(
                            e @ (BusError::Malformed { .. } | BusError::UnsupportedVersion { .. }),
                        )) => {
                            tracing::warn!(subject = %subject, error = %e, "unreadable message skipped")
                        }
                        Some(Err(e)) => {
                            tracing::warn!(subject = %subject, error = %e, "subscription failed; subscribing again");
                            break;
                        }
                        None => {
                            tracing::warn!(subject = %subject, "subscription closed; subscribing again");
                            break;
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(subject = %subject, error = %e, "subscribe failed; retrying");
            }
        }
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Re-evaluates agent states and tells the runs about dead agents.
async fn tick_loop(shared: Arc<HubCore>) {
    let mut stop = shared.stop.subscribe();
    let mut tick = tokio::time::interval(Duration::from_millis(shared.config.tick_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => {}
        }
        let now = shared.clock.now_ms();
        let (transitions, live) = {
            let mut registry = shared.registry.lock();
            (
                registry.tick(now),
                registry.live_agents(now, &LabelFilter::any()),
            )
        };
        shared.live.send_if_modified(|old| {
            let changed = *old != live;
            *old = live;
            changed
        });
        for t in transitions {
            match (t.from, t.to) {
                (None, to) => {
                    tracing::debug!(agent = %t.agent, state = %to.as_str(), "agent state")
                }
                (Some(from), to) => {
                    tracing::info!(agent = %t.agent, from = from.as_str(), to = to.as_str(), phi = t.phi, "agent state changed")
                }
            }
            if t.to == AgentState::Dead {
                let runs: Vec<Arc<Run>> = shared.runs.lock().values().cloned().collect();
                for run in runs {
                    run.on_agent_dead(&shared, &t.agent).await;
                }
            }
        }
    }
}

/// Which runs to list.
#[derive(Debug, Clone, Default)]
pub struct RunQuery {
    /// Only this job's runs.
    pub job_id: Option<String>,
    /// Only runs in these states (any when empty).
    pub states: Vec<RunState>,
    /// At most this many (newest first); default 100.
    pub limit: Option<u32>,
}

impl HubHandle {
    pub(crate) fn shared(&self) -> &Arc<HubCore> {
        &self.shared
    }

    /// Submits an ad-hoc run: allocates it synchronously and starts it (see the module doc).
    pub async fn submit(&self, request: RunRequest) -> Result<RunView, HubError> {
        self.shared
            .start_run(NewRun {
                request,
                job: None,
                attempt: 0,
                restart_of: None,
                args: BTreeMap::new(),
                timeout_ms: None,
                frontier_from: None,
                feed: None,
            })
            .await
    }

    /// Runs, newest first.
    pub async fn runs(&self, query: &RunQuery) -> Result<Vec<RunView>, HubError> {
        let filter = RunFilter {
            job_id: query.job_id.clone(),
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
        RunView::new(
            record,
            record.final_stats.clone().unwrap_or_default(),
            self.shared.files.items_path(&record.id),
        )
    }

    /// At most `limit` of a run's items after `cursor`, from its one item log.
    pub async fn run_items(
        &self,
        id: &RunId,
        cursor: u64,
        limit: usize,
    ) -> Result<crate::items::ItemsPage, HubError> {
        let record = self.stored_record(id).await?;
        let log = crate::items::ItemLog::of(&record, &self.shared.files);
        log.read(self.shared.store.as_ref(), id, cursor, limit)
            .await
    }

    /// The stored record of a run (active or not).
    pub(crate) async fn stored_record(&self, id: &RunId) -> Result<RunRecord, HubError> {
        if let Some(run) = self.shared.active_run(id) {
            return Ok(run.record());
        }
        match self.shared.store.get_run(id.as_str()).await? {
            Some(row) => record_of(row),
            None => Err(HubError::NoSuchRun(id.clone())),
        }
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
                .get_lease(&crate::ownership::run_lease(id))
                .await?
            && lease.holder != self.shared.hub_id
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
        run.control(&self.shared, Desired::Cancel).await?;
        run.finished().await;
        self.run(id).await
    }

    /// Restarts a run: stops it if it is active (cancel), then starts a new run of the same
    /// spider and settings (and job); with `keep_frontier` the new run takes over the old
    /// run's frontier, so what was fetched is not fetched again and what was left is next.
    pub async fn restart(&self, id: &RunId, keep_frontier: bool) -> Result<RunView, HubError> {
        if let Some(run) = self.shared.active_run(id) {
            match run.control(&self.shared, Desired::Cancel).await {
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
            strategy: Some(old.strategy),
            on_agent_lost: Some(old.on_agent_lost),
            max_pending: Some(old.max_pending),
            stall_timeout_ms: Some(old.stall_timeout_ms),
            downloader: Some(old.downloader.clone()),
            sinks: Some(old.sinks.clone()),
            fail_if: old.fail_if.clone(),
        };
        let job = old.job_id.clone().zip(old.job_name.clone());
        let view = self
            .shared
            .start_run(NewRun {
                request,
                job,
                attempt: 0,
                restart_of: Some(id.clone()),
                args: old.args.clone(),
                timeout_ms: old.timeout_ms,
                frontier_from: keep_frontier.then(|| id.clone()),
                feed: old.feed.clone(),
            })
            .await?;
        self.shared
            .logs
            .hub(id, Level::Info, format!("restarted as run {}", view.id));
        if let Some(job_id) = &view.job_id {
            crate::scheduler::note_run(&self.shared, job_id, &view.id, view.state).await;
        }
        Ok(view)
    }

    async fn control(&self, id: &RunId, desired: Desired) -> Result<RunView, HubError> {
        let run = self.active(id).await?;
        run.control(&self.shared, desired).await?;
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

    /// The live agents now (alive or suspect), sorted.
    pub fn live_agents(&self) -> Vec<AgentId> {
        self.shared.live_agents()
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
    pub fn hub_id(&self) -> &str {
        &self.shared.hub_id
    }

    /// The data dir.
    pub fn data_dir(&self) -> &std::path::Path {
        &self.shared.config.data_dir
    }

    /// The HTTP app (API with bearer-token auth, web UI, health, metrics; see `api`).
    pub fn router(&self) -> axum::Router {
        crate::api::router(self.clone(), crate::api::ApiOptions::default())
    }

    /// The HTTP app with `options` (e.g. without auth).
    pub fn router_with(&self, options: crate::api::ApiOptions) -> axum::Router {
        crate::api::router(self.clone(), options)
    }

    /// Stops the hub: the runs' loops end (runs stay `running` or `paused` and resume at
    /// the next start), frontiers and item files are synced and closed.
    pub async fn shutdown(&self) {
        self.shared.stop.send_replace(true);
        let drivers: Vec<JoinHandle<()>> = std::mem::take(&mut *self.shared.drivers.lock());
        for d in drivers {
            let _ = d.await;
        }
        // The runs' leases went back as their loops ended; the scheduler's goes now.
        if let Err(e) = self
            .shared
            .store
            .release_lease(crate::ownership::SCHEDULER_LEASE, &self.shared.hub_id)
            .await
        {
            tracing::debug!(error = %e, "scheduler lease not released (it expires)");
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
