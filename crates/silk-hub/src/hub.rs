//! The hub process: [`Hub::start`] and its [`HubHandle`].
//!
//! Tasks, each independent so that an outage of one input never blocks another:
//! - **presence**: a durable subscription to `registrations` (registrations sent while the hub
//!   was away are processed when it is back; they never expire) and a live one to
//!   `heartbeats` (stale ones are dropped by the bus when read), both fed to the
//!   [`AgentRegistry`]. Registered agents are remembered in `agents.json`, so a restarted
//!   hub knows them before they register again.
//! - **ticker**: every `tick_ms`, the registry's state transitions (phi accrual, capped by
//!   `dead_after_ms`); an agent that turns dead is reported to every active run
//!   ([`Run::on_agent_dead`]).
//! - **results**: a durable subscription to `results`; each result goes to its run
//!   ([`Run::on_result`]) and is acked on the bus after the run recorded it. A result of an
//!   unknown or finished run is acked and ignored.
//! - **allocation replies**: a live subscription to `allocations`, handing each reply to the
//!   submit call waiting for it.
//! - one **dispatch loop** per active run (`runner::drive`).
//!
//! Submitting a run ([`HubHandle::submit`]) is synchronous: the allocation is decided from
//! the live agents, the `allocate` commands sent, and their replies awaited (at most
//! `allocate_timeout_ms`); a run that cannot be allocated is stored as `failed` with the
//! reason and the call returns [`HubError::AllocationFailed`].

use crate::allocation::{OnAgentLost, Strategy, allocate};
use crate::error::HubError;
use crate::files::{HubFiles, KnownAgent};
use crate::phi::{AgentState, PhiConfig};
use crate::registry::{AgentRegistry, AgentView, Applied, LabelFilter, RegisterOutcome};
use crate::run::{
    DEFAULT_MAX_PENDING, DEFAULT_STALL_TIMEOUT_MS, RunRecord, RunRequest, RunState, RunView,
};
use crate::runner::{Desired, Run, downloader_config, drive};
use rand::SeedableRng;
use rand::rngs::StdRng;
use silk_bus::{
    AllocationReply, Bus, BusError, Command, Delivery, Message, Subject, SubscribeOpts, TtlPolicy,
};
use silk_core::spider::Spider;
use silk_core::{AgentId, Clock, RunId};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// Results pulled from the bus at once: one pull round trip per this many results (the hub
/// handles a batch in milliseconds, far within the bus's ack wait).
const RESULTS_BATCH: usize = 256;

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
        }
    }
}

/// A run as the hub holds it.
pub(crate) enum Entry {
    Active(Arc<Run>),
    Finished(Box<RunRecord>),
}

/// What the hub's tasks share.
pub(crate) struct Shared {
    pub(crate) config: HubConfig,
    pub(crate) bus: Arc<dyn Bus>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) files: HubFiles,
    pub(crate) registry: Mutex<AgentRegistry>,
    pub(crate) rng: Mutex<StdRng>,
    pub(crate) runs: Mutex<BTreeMap<RunId, Entry>>,
    known: Mutex<BTreeMap<AgentId, KnownAgent>>,
    waiters: Mutex<HashMap<RunId, mpsc::UnboundedSender<AllocationReply>>>,
    pub(crate) stop: watch::Sender<bool>,
    /// The live agents as of the last tick.
    live: watch::Sender<Vec<AgentId>>,
    drivers: Mutex<Vec<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts hubs.
#[derive(Debug)]
pub struct Hub;

/// A running hub.
#[derive(Clone)]
pub struct HubHandle {
    shared: Arc<Shared>,
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
        config.phi.validate()?;
        if config.tick_ms == 0 || config.allocate_timeout_ms == 0 {
            return Err(HubError::BadConfig(
                "tick_ms and allocate_timeout_ms must be at least 1".into(),
            ));
        }
        let files = HubFiles::open(&config.data_dir)?;
        let mut registry = AgentRegistry::new(config.phi)?;
        let now = clock.now_ms();
        let mut known = BTreeMap::new();
        for agent in files.load_agents() {
            registry.register(&agent.register, agent.sent_ms, now);
            known.insert(agent.register.agent.clone(), agent);
        }
        let shared = Arc::new(Shared {
            config,
            bus,
            clock,
            files,
            registry: Mutex::new(registry),
            rng: Mutex::new(StdRng::from_os_rng()),
            runs: Mutex::new(BTreeMap::new()),
            known: Mutex::new(known),
            waiters: Mutex::new(HashMap::new()),
            stop: watch::channel(false).0,
            live: watch::channel(Vec::new()).0,
            drivers: Mutex::new(Vec::new()),
        });
        // Subscriptions first, so that replies and results are read before any run acts.
        tokio::spawn(subscription_loop(
            shared.clone(),
            Subject::registrations(),
            SubscribeOpts::durable("hub-registrations"),
        ));
        tokio::spawn(subscription_loop(
            shared.clone(),
            Subject::heartbeats(),
            SubscribeOpts::live(),
        ));
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
        tokio::spawn(tick_loop(shared.clone()));
        shared.recover().await;
        tracing::info!(data_dir = %shared.config.data_dir.display(), "hub started");
        Ok(HubHandle { shared })
    }
}

impl Shared {
    /// The live agents now.
    pub(crate) fn live_agents(&self) -> Vec<AgentId> {
        let now = self.clock.now_ms();
        lock(&self.registry).live_agents(now, &LabelFilter::any())
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
        let mut runs = lock(&self.runs);
        if record.state.is_terminal() {
            runs.insert(run.id.clone(), Entry::Finished(Box::new(record)));
        }
    }

    fn spawn_driver(self: &Arc<Self>, run: Arc<Run>) {
        lock(&self.runs).insert(run.id.clone(), Entry::Active(run.clone()));
        let handle = tokio::spawn(drive(self.clone(), run));
        let mut drivers = lock(&self.drivers);
        drivers.retain(|h| !h.is_finished());
        drivers.push(handle);
    }

    /// Reloads the stored runs: running and paused ones resume, the others are settled.
    async fn recover(self: &Arc<Self>) {
        for mut record in self.files.load_runs() {
            let id = record.id.clone();
            match record.state {
                RunState::Pending | RunState::Allocating => {
                    record.state = RunState::Failed;
                    record.reason =
                        Some("the hub stopped before the run's allocation completed".into());
                    record.finished_ms = Some(self.clock.now_ms());
                    if let Err(e) = self.files.save_run(&record) {
                        tracing::error!(run = %id, error = %e, "run state not stored");
                    }
                    lock(&self.runs).insert(id, Entry::Finished(Box::new(record)));
                }
                RunState::Running | RunState::Paused | RunState::Stopping => {
                    // A run whose seeds never reached its frontier (a crash right after
                    // the allocation) is seeded again: dedup makes that harmless.
                    match Run::open(self, record.clone(), true).await {
                        Ok(run) => {
                            tracing::info!(run = %id, state = %record.state, "run resumed");
                            self.spawn_driver(run);
                        }
                        Err(e) => {
                            tracing::error!(run = %id, error = %e, "run could not be resumed");
                            record.state = RunState::Failed;
                            record.reason = Some(format!("could not be resumed: {e}"));
                            record.finished_ms = Some(self.clock.now_ms());
                            let _ = self.files.save_run(&record);
                            lock(&self.runs).insert(id, Entry::Finished(Box::new(record)));
                        }
                    }
                }
                RunState::Succeeded | RunState::Failed | RunState::Cancelled => {
                    lock(&self.runs).insert(id, Entry::Finished(Box::new(record)));
                }
            }
        }
    }

    fn on_register(&self, delivery: &Delivery) {
        let now = self.clock.now_ms();
        let envelope = &delivery.envelope;
        let Message::Register(register) = &envelope.body else {
            return;
        };
        let outcome = lock(&self.registry).register(register, envelope.sent_ms, now);
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
        let snapshot: Vec<KnownAgent> = {
            let mut known = lock(&self.known);
            known.insert(
                register.agent.clone(),
                KnownAgent {
                    register: register.clone(),
                    sent_ms: envelope.sent_ms,
                },
            );
            known.values().cloned().collect()
        };
        if let Err(e) = self.files.save_agents(&snapshot) {
            tracing::warn!(error = %e, "known agents not stored");
        }
    }

    async fn on_delivery(&self, delivery: Delivery) {
        match &delivery.envelope.body {
            Message::Register(_) => self.on_register(&delivery),
            Message::Heartbeat(_) => {
                let now = self.clock.now_ms();
                if let Applied::Heartbeat(crate::registry::HeartbeatOutcome::NeedsRegister) =
                    lock(&self.registry).apply(&delivery.envelope, now)
                {
                    tracing::debug!("heartbeat of an agent that has not registered yet");
                }
            }
            Message::Result(result) => {
                let run = match lock(&self.runs).get(&result.run) {
                    Some(Entry::Active(run)) => Some(run.clone()),
                    _ => None,
                };
                match run {
                    Some(run) => run.on_result(self, result).await,
                    None => {
                        tracing::debug!(run = %result.run, "result of a run that is not active here ignored")
                    }
                }
            }
            Message::Allocated(reply) => {
                let waiter = lock(&self.waiters).get(&reply.run).cloned();
                if let Some(tx) = waiter {
                    let _ = tx.send(reply.clone());
                }
            }
            Message::Command(_) | Message::Control(_) => {}
            Message::Log(_) => {}
        }
        if delivery.is_durable()
            && let Err(e) = delivery.ack().await
        {
            tracing::debug!(error = %e, "bus ack failed (the message may come again)");
        }
    }

    /// Decides, confirms and stores the allocation of a new run; then starts it.
    async fn submit(self: &Arc<Self>, request: RunRequest) -> Result<RunView, HubError> {
        if *self.stop.borrow() {
            return Err(HubError::ShuttingDown);
        }
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
        let now = self.clock.now_ms();
        let id = RunId::new(uuid::Uuid::now_v7().simple().to_string());
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
        };
        self.files.save_run(&record)?;
        match self.allocate_run(&mut record).await {
            Ok(()) => {}
            Err(reason) => {
                record.state = RunState::Failed;
                record.reason = Some(reason.clone());
                record.finished_ms = Some(self.clock.now_ms());
                self.files.save_run(&record)?;
                lock(&self.runs).insert(id.clone(), Entry::Finished(Box::new(record)));
                tracing::warn!(run = %id, reason = %reason, "run could not be allocated");
                return Err(HubError::AllocationFailed { run: id, reason });
            }
        }
        // Open and seed the frontier while the run is still `allocating`: a crash before it
        // is `running` fails the run at the next start instead of leaving it empty.
        let run = match Run::open(self, record.clone(), true).await {
            Ok(run) => run,
            Err(e) => {
                record.state = RunState::Failed;
                record.reason = Some(format!("could not open the run's storage: {e}"));
                record.finished_ms = Some(self.clock.now_ms());
                self.files.save_run(&record)?;
                for agent in &record.agents {
                    let release = Command::Release { run: id.clone() };
                    let _ = self.send_command(agent, release).await;
                }
                lock(&self.runs).insert(id.clone(), Entry::Finished(Box::new(record)));
                return Err(e);
            }
        };
        let started = self.clock.now_ms();
        run.update(self, |r| {
            r.state = RunState::Running;
            r.started_ms = Some(started);
        })?;
        record.started_ms = Some(started);
        run.mark_allocated(&record.agents);
        tracing::info!(run = %id, spider = %record.spider_name, strategy = %record.strategy, agents = ?record.agents, "run started");
        let view = run.view(self.clock.now_ms()).await;
        self.spawn_driver(run);
        Ok(view)
    }

    /// Picks the run's agents and gets their confirmation; the reason when it cannot.
    async fn allocate_run(&self, record: &mut RunRecord) -> Result<(), String> {
        let live = self.live_agents();
        let allocation = {
            let mut rng = lock(&self.rng);
            allocate(record.strategy, record.on_agent_lost, &live, &mut *rng)
                .map_err(|e| e.to_string())?
        };
        let targets: Vec<AgentId> = if allocation.agents().is_empty() {
            live
        } else {
            allocation.agents().to_vec()
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        lock(&self.waiters).insert(record.id.clone(), tx);
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
        lock(&self.waiters).remove(&record.id);
        let agents = result?;
        record.agents = agents;
        record.allocation = Some(allocation);
        Ok(())
    }
}

/// Reads one subject forever (re-subscribing with back-off while the bus is down).
async fn subscription_loop(shared: Arc<Shared>, subject: Subject, opts: SubscribeOpts) {
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
async fn tick_loop(shared: Arc<Shared>) {
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
            let mut registry = lock(&shared.registry);
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
                let runs: Vec<Arc<Run>> = lock(&shared.runs)
                    .values()
                    .filter_map(|e| match e {
                        Entry::Active(r) => Some(r.clone()),
                        Entry::Finished(_) => None,
                    })
                    .collect();
                for run in runs {
                    run.on_agent_dead(&t.agent).await;
                }
            }
        }
    }
}

impl HubHandle {
    /// Submits a run: allocates it synchronously and starts it (see the module doc).
    pub async fn submit(&self, request: RunRequest) -> Result<RunView, HubError> {
        self.shared.submit(request).await
    }

    /// Every run, oldest first.
    pub async fn runs(&self) -> Vec<RunView> {
        let entries: Vec<(RunId, Option<Arc<Run>>, Option<RunRecord>)> = lock(&self.shared.runs)
            .iter()
            .map(|(id, e)| match e {
                Entry::Active(r) => (id.clone(), Some(r.clone()), None),
                Entry::Finished(rec) => (id.clone(), None, Some((**rec).clone())),
            })
            .collect();
        let now = self.shared.clock.now_ms();
        let mut out = Vec::with_capacity(entries.len());
        for (id, run, record) in entries {
            match (run, record) {
                (Some(run), _) => out.push(run.view(now).await),
                (None, Some(rec)) => out.push(self.finished_view(&id, &rec)),
                _ => {}
            }
        }
        out.sort_by(|a, b| (a.created_ms, &a.id.0).cmp(&(b.created_ms, &b.id.0)));
        out
    }

    fn finished_view(&self, id: &RunId, record: &RunRecord) -> RunView {
        RunView::new(
            record,
            record.final_stats.clone().unwrap_or_default(),
            self.shared.files.items_path(id),
        )
    }

    /// One run.
    pub async fn run(&self, id: &RunId) -> Result<RunView, HubError> {
        let entry = match lock(&self.shared.runs).get(id) {
            Some(Entry::Active(r)) => Ok(r.clone()),
            Some(Entry::Finished(rec)) => Err(Some((**rec).clone())),
            None => Err(None),
        };
        match entry {
            Ok(run) => Ok(run.view(self.shared.clock.now_ms()).await),
            Err(Some(rec)) => Ok(self.finished_view(id, &rec)),
            Err(None) => Err(HubError::NoSuchRun(id.clone())),
        }
    }

    fn active(&self, id: &RunId) -> Result<Arc<Run>, HubError> {
        match lock(&self.shared.runs).get(id) {
            Some(Entry::Active(r)) => Ok(r.clone()),
            Some(Entry::Finished(rec)) => Err(HubError::WrongState {
                run: id.clone(),
                state: rec.state.to_string(),
                action: "this".into(),
            }),
            None => Err(HubError::NoSuchRun(id.clone())),
        }
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
        let run = self.active(id)?;
        run.control(&self.shared, Desired::Cancel)?;
        run.finished().await;
        self.run(id).await
    }

    async fn control(&self, id: &RunId, desired: Desired) -> Result<RunView, HubError> {
        let run = self.active(id)?;
        run.control(&self.shared, desired)?;
        Ok(run.view(self.shared.clock.now_ms()).await)
    }

    /// Waits until a run is in a terminal state; its view then.
    pub async fn wait_run(&self, id: &RunId) -> Result<RunView, HubError> {
        if let Ok(run) = self.active(id) {
            run.finished().await;
        }
        self.run(id).await
    }

    /// Every registered agent, sorted by id.
    pub fn agents(&self) -> Vec<AgentView> {
        let now = self.shared.clock.now_ms();
        lock(&self.shared.registry).agents(now)
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

    /// The data dir.
    pub fn data_dir(&self) -> &std::path::Path {
        &self.shared.config.data_dir
    }

    /// The HTTP API (see `api`).
    pub fn router(&self) -> axum::Router {
        crate::api::router(self.clone())
    }

    /// Stops the hub: the runs' loops end (runs stay `running` or `paused` and resume at
    /// the next start), frontiers and item files are synced and closed.
    pub async fn shutdown(&self) {
        self.shared.stop.send_replace(true);
        let drivers: Vec<JoinHandle<()>> = std::mem::take(&mut *lock(&self.shared.drivers));
        for d in drivers {
            let _ = d.await;
        }
        tracing::info!("hub stopped");
    }
}
