//! The agent process: [`Agent::start`] and its [`AgentHandle`].
//!
//! Four tasks run under a supervisor, independent of each other so that a bus outage in one
//! never blocks another:
//! - **presence**: one `Register` (retried forever with back-off while the bus is down),
//!   then a `Heartbeat` every `heartbeat_interval_ms` (CPU %, memory, active downloaders,
//!   requests in flight, QPS over `qps_window_ms`), each failed one followed by a back-off,
//!   forever. Register and heartbeats are separate messages on separate subjects.
//! - **commands**: a durable subscription to `agent.{id}.cmd` (commands sent while the agent
//!   was away are delivered when it is back), re-opened forever with back-off. Commands are
//!   handled in order: `allocate` (then acked; a task builds the downloader and answers),
//!   `download` (acked at once, then one task per request, at most `capacity` fetching at a
//!   time, one `RunResult` each, published on `results.{reply_to}`: back to the hub that
//!   sent the download; on `results` when it names no hub, or with a warning when its
//!   `reply_to` is not a valid hub id), `release`, `shutdown` (acked first, so that a restarted
//!   agent does not stop again). Stale envelopes never get here: the bus drops them when
//!   read.
//! - **sweeper**: releases downloaders idle for longer than `downloader_idle_ms`.
//! - **run logs**: publishes the runs' log lines (`runlog`) in `log` batches on `logs`, a
//!   run's lines as soon as `log_batch_lines` of them wait and every `log_flush_ms` anyway;
//!   on shutdown, once the other tasks are done, what is left (within
//!   `shutdown_grace_ms`).
//!
//! Every publish of a result, an allocation reply or a log batch goes through one path
//! ([`AgentCore::publish_retried`]): tried `result_publish_retries + 1` times with back-off
//! (the same envelope, so a JetStream de-duplicates a retry whose first attempt was stored),
//! then dropped and logged. A dropped result's lease expires at the hub, which re-dispatches
//! the request; a dropped log batch is reported by its run's next batch (`N log lines
//! dropped`); a message too large for the bus is a result sent again without its body, or
//! a log batch split in two. Each request's outcome is written to its run's log before its
//! result is published.
//!
//! Every `allocate` is answered with an [`AllocationReply`] on `allocations` (allocation is
//! synchronous at run start: the hub waits for it): `ok` once the downloader is built (for
//! a repeated `allocate` of a run held here, once the existing one is built: a build that
//! failed before is tried again), or `ok: false` with the refusal (an invalid config) or the
//! build error (a failing proxy provider). The build and the reply run in a task, never in
//! the command loop; the reply is tried `result_publish_retries + 1` times with back-off,
//! then dropped with a warning (the hub counts a missing reply as a failed allocation). A
//! downloader whose build failed stays allocated, and its downloads try the build again.
//!
//! Result error codes added here (beside the downloader's, see `downloader`):
//! `no_downloader` (retryable: the run is not allocated here, the hub re-allocates),
//! `invalid_config` (permanent: the run's allocation was refused; the message says why),
//! `downloader_unavailable` (retryable: its proxy provider failed), `agent_stopping`
//! (retryable: the agent stopped before the request got a slot).

use crate::config::{AgentConfig, durable_name, ensure_data_dir, resolve_id};
use crate::error::AgentError;
use crate::program::{Control, ProgramSettings, Programs, Reporter};
use crate::runlog::{Events, LogQueue, LogSettings, OutBatch};
use crate::runs::{Allocated, Missing, RunTable};
use crate::stats::{AgentCounters, AgentEvent, AgentStats, QpsWindow};
use crate::system::Probe;
use silk_bus::{
    AllocationReply, Bus, BusError, Command, Delivery, Envelope, FetchOutcome, FetchReply,
    Heartbeat, LeasedRequest, Message, ProgramAction, Register, ResultError, RetryPolicy,
    RunResult, Subject, SubscribeOpts, TtlPolicy, WorkerReport,
};

/// How long the workers of a released run have between SIGTERM and SIGKILL.
const RELEASE_GRACE: Duration = Duration::from_secs(2);
use silk_core::{AgentId, Clock, Request, RunId};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, broadcast, oneshot, watch};
use tokio::task::JoinSet;

/// Starts agents. See the module doc for what a running agent does.
#[derive(Debug)]
pub struct Agent;

/// What the agent's tasks share.
struct AgentCore {
    id: AgentId,
    config: AgentConfig,
    bus: Arc<dyn Bus>,
    clock: Arc<dyn Clock>,
    ttl: TtlPolicy,
    registry: RunTable,
    permits: Arc<Semaphore>,
    counters: AgentCounters,
    qps: QpsWindow,
    events: Events,
    programs: Arc<Programs>,
    /// The controls of program runs' workers, applied in order (`Programs::controller`).
    program_control: tokio::sync::mpsc::UnboundedSender<(RunId, Control)>,
    stop: watch::Sender<bool>,
    /// When a hub was last heard (a beacon or a command; the later of its `sent_ms` and
    /// what was heard before, agent clock), for detach mode.
    hub_heard_ms: AtomicU64,
    /// Whether the agent is detached now (see [`AgentConfig::detach_after_ms`]).
    detached: watch::Sender<bool>,
}

/// Doubling waits between attempts, from `backoff_initial_ms` up to `backoff_max_ms`.
struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    fn new(config: &AgentConfig) -> Self {
        let initial = Duration::from_millis(config.backoff_initial_ms);
        Self {
            initial,
            max: Duration::from_millis(config.backoff_max_ms),
            next: initial,
        }
    }

    fn next(&mut self) -> Duration {
        let wait = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        wait
    }

    fn reset(&mut self) {
        self.next = self.initial;
    }
}

/// A failed outcome.
fn failure(code: &str, message: String, retryable: bool) -> FetchOutcome {
    FetchOutcome {
        error: Some(ResultError {
            code: code.into(),
            message,
            retryable,
        }),
        ..FetchOutcome::default()
    }
}

impl Agent {
    /// Starts an agent on `bus`: checks the config, creates the data dir, settles the id,
    /// reloads the allocations file, and starts registering, heartbeating and reading
    /// commands in the background. Returns without waiting for the bus (a bus that is down
    /// is waited for, forever). `clock` stamps messages and measures idleness.
    pub async fn start(
        config: AgentConfig,
        bus: Arc<dyn Bus>,
        clock: Arc<dyn Clock>,
    ) -> Result<AgentHandle, AgentError> {
        config.validate()?;
        ensure_data_dir(&config.data_dir)?;
        let id = resolve_id(&config)?;
        let subject = Subject::agent_commands(&id)?;
        let (events, _) = broadcast::channel(1_024);
        let logs = LogQueue::new(
            id.clone(),
            LogSettings {
                queue_lines: config.log_queue_lines,
                batch_lines: config.log_batch_lines,
                line_max_bytes: config.log_line_max_bytes,
                min_level: config.log_level,
            },
            clock.clone(),
        );
        let events = Events::new(events, Arc::new(logs));
        let (stop, _) = watch::channel(false);
        let programs = Arc::new(Programs::new(
            ProgramSettings {
                allow: config.allow_programs,
                dir: config.data_dir.join("programs"),
                cache_bytes: config.program_cache_bytes,
                container_cli: config.container_cli.clone(),
                container_args: config.container_args.clone(),
            },
            id.clone(),
            events.clone(),
        ));
        let program_control = programs.controller();
        let shared = Arc::new(AgentCore {
            programs,
            program_control,
            ttl: TtlPolicy {
                heartbeat_interval_ms: config.heartbeat_interval_ms,
                allocate_ttl_ms: config.allocated_ttl_ms,
                log_ttl_ms: config.log_ttl_ms,
                ..TtlPolicy::default()
            },
            registry: RunTable::new(
                &config.data_dir,
                clock.clone(),
                events.clone(),
                config.command_policy(),
                config.address_policy(),
            ),
            permits: Arc::new(Semaphore::new(config.capacity as usize)),
            counters: AgentCounters::default(),
            qps: QpsWindow::new(config.qps_window_ms, clock.now_ms()),
            hub_heard_ms: AtomicU64::new(clock.now_ms()),
            detached: watch::channel(false).0,
            id,
            config,
            bus,
            clock,
            events,
            stop,
        });
        shared.registry.reload().await;
        let commands: Vec<&str> = shared.config.commands.keys().map(String::as_str).collect();
        tracing::info!(
            agent = %shared.id,
            data_dir = %shared.config.data_dir.display(),
            downloaders = shared.registry.len(),
            commands = %commands.join(","),
            raw_commands = if shared.config.allow_raw_commands { "allowed" } else { "refused" },
            "agent starting"
        );
        let (done_tx, done) = watch::channel(false);
        tokio::spawn(supervise(shared.clone(), subject, done_tx));
        Ok(AgentHandle { shared, done })
    }
}

/// A running agent. Dropping the handle asks the agent to stop (without waiting);
/// [`AgentHandle::shutdown`] stops it and waits.
pub struct AgentHandle {
    shared: Arc<AgentCore>,
    done: watch::Receiver<bool>,
}

impl std::fmt::Debug for AgentHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentHandle")
            .field("id", &self.shared.id)
            .finish_non_exhaustive()
    }
}

impl AgentHandle {
    /// The agent's id.
    pub fn id(&self) -> &AgentId {
        &self.shared.id
    }

    /// The agent's data dir.
    pub fn data_dir(&self) -> &Path {
        &self.shared.config.data_dir
    }

    /// The allocations file.
    pub fn allocations_file(&self) -> PathBuf {
        self.shared
            .config
            .data_dir
            .join(crate::store::ALLOCATIONS_FILE)
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> AgentStats {
        let s = &self.shared;
        let c = &s.counters;
        AgentStats {
            registered: c.registered.load(Ordering::Relaxed),
            detached: *s.detached.borrow(),
            detaches: c.detaches.load(Ordering::Relaxed),
            hub_silent_ms: if s.config.detach_after_ms == 0 {
                0
            } else {
                s.clock
                    .now_ms()
                    .saturating_sub(s.hub_heard_ms.load(Ordering::SeqCst))
            },
            heartbeats_sent: c.heartbeats_sent.load(Ordering::Relaxed),
            heartbeats_failed: c.heartbeats_failed.load(Ordering::Relaxed),
            active_downloaders: u32::try_from(s.registry.len()).unwrap_or(u32::MAX),
            in_flight: c.in_flight.load(Ordering::Relaxed),
            requests: c.requests.load(Ordering::Relaxed),
            results_published: c.results_published.load(Ordering::Relaxed),
            results_dropped: c.results_dropped.load(Ordering::Relaxed),
            bytes_saved: c.bytes_saved.load(Ordering::Relaxed),
            log_batches_published: s.events.logs().batches_published.load(Ordering::Relaxed),
            log_lines_dropped: s.events.logs().lines_dropped.load(Ordering::Relaxed),
            qps: s.qps.qps(s.clock.now_ms()),
            runs: s.registry.stats(),
        }
    }

    /// The agent's events from now on.
    pub fn events(&self) -> broadcast::Receiver<AgentEvent> {
        self.shared.events.subscribe()
    }

    /// Releases the downloaders idle for longer than `downloader_idle_ms` now (the sweeper
    /// does this every `idle_check_ms`); returns their runs.
    pub async fn release_idle(&self) -> Vec<RunId> {
        self.shared
            .registry
            .release_idle(self.shared.config.downloader_idle_ms)
            .await
    }

    /// Stops the agent gracefully and waits until it has stopped: no more commands are
    /// read, requests being fetched finish (within `shutdown_grace_ms`) and publish their
    /// results, requests waiting for a slot are answered `agent_stopping`. Allocations stay
    /// in the allocations file for the next start.
    pub async fn shutdown(&self) {
        self.shared.request_stop();
        self.stopped().await;
    }

    /// Waits until the agent has stopped (after [`AgentHandle::shutdown`] or a `shutdown`
    /// command).
    pub async fn stopped(&self) {
        let mut done = self.done.clone();
        let _ = done.wait_for(|d| *d).await;
    }

    /// Whether the agent has stopped.
    pub fn is_stopped(&self) -> bool {
        *self.done.borrow()
    }
}

impl Drop for AgentHandle {
    fn drop(&mut self) {
        self.shared.stop.send_replace(true);
    }
}

/// Runs the agent's tasks until it is told to stop, then waits for them; the run logs last,
/// so that they get the lines of the requests that finished while stopping.
async fn supervise(shared: Arc<AgentCore>, subject: Subject, done: watch::Sender<bool>) {
    let (finish_logs, logs_finish) = oneshot::channel();
    let mut logs = tokio::spawn(log_loop(shared.clone(), logs_finish));
    let presence = tokio::spawn(presence_loop(shared.clone()));
    let sweeper = tokio::spawn(sweep_loop(shared.clone()));
    let commands = tokio::spawn(command_loop(shared.clone(), subject));
    let hubs = tokio::spawn(hubs_loop(shared.clone()));
    let detach = tokio::spawn(detach_loop(shared.clone()));
    for (name, task) in [
        ("commands", commands),
        ("presence", presence),
        ("sweeper", sweeper),
        ("hub beacons", hubs),
        ("detach", detach),
    ] {
        if let Err(e) = task.await {
            tracing::error!(agent = %shared.id, task = name, error = %e, "agent task failed");
            shared.request_stop();
        }
    }
    let grace = Duration::from_millis(shared.config.shutdown_grace_ms);
    // Program workers end with the agent (their log lines go out below).
    shared.programs.stop_all(grace).await;
    let _ = finish_logs.send(());
    match tokio::time::timeout(grace, &mut logs).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::error!(agent = %shared.id, task = "run logs", error = %e, "agent task failed");
        }
        Err(_) => {
            tracing::warn!(agent = %shared.id, "run log lines not published within the shutdown grace period were abandoned");
            logs.abort();
        }
    }
    tracing::info!(agent = %shared.id, "agent stopped");
    done.send_replace(true);
}

impl AgentCore {
    fn emit(&self, event: AgentEvent) {
        self.events.emit(event);
    }

    fn request_stop(&self) {
        if !self.stop.send_replace(true) {
            tracing::info!(agent = %self.id, "agent stopping");
            self.emit(AgentEvent::Stopping);
        }
    }

    /// Waits `wait`, or until the agent stops: whether it is still running.
    async fn pause(&self, wait: Duration) -> bool {
        let mut stop = self.stop.subscribe();
        tokio::select! {
            biased;
            () = stopped(&mut stop) => false,
            () = tokio::time::sleep(wait) => true,
        }
    }

    /// A hub was heard: a beacon or a command it sent at `sent_ms` (its clock). News older than
    /// `detach_after` (a command left on the bus) says nothing about now. Ends a detach.
    fn heard_hub(&self, sent_ms: u64) {
        let after = self.config.detach_after_ms;
        if after == 0 {
            return;
        }
        let now = self.clock.now_ms();
        let at = sent_ms.min(now);
        if now - at > after {
            return;
        }
        self.hub_heard_ms.fetch_max(at, Ordering::SeqCst);
        if self.detached.send_replace(false) {
            tracing::info!(agent = %self.id, "a hub is heard again: registering again");
            self.emit(AgentEvent::Reattached);
            self.programs.reattached();
        }
    }

    /// Detaches: no hub heard for `silent_ms` (more than `detach_after`). Stops the requests
    /// being fetched (the command loop aborts them when it sees the change), drops every
    /// allocation and stops the program workers.
    async fn detach(&self, silent_ms: u64) {
        if self.detached.send_replace(true) {
            return;
        }
        tracing::warn!(agent = %self.id, silent_ms, "no hub heard for detach_after: detached (downloads and program workers stopped, allocations dropped) until a hub is heard");
        self.counters.detaches.fetch_add(1, Ordering::Relaxed);
        self.registry.release_all().await;
        self.programs.detach_all(RELEASE_GRACE).await;
        self.emit(AgentEvent::Detached { silent_ms });
    }

    /// Handles one command; `false` when the agent is to stop.
    async fn handle(self: &Arc<Self>, delivery: Delivery, tasks: &mut JoinSet<()>) -> bool {
        let received = Instant::now();
        self.heard_hub(delivery.envelope.sent_ms);
        let Message::Command(command) = &delivery.envelope.body else {
            ack(delivery).await;
            return true;
        };
        match command.clone() {
            Command::Allocate {
                run,
                config,
                allow_networks,
            } => {
                let allocated = self.registry.allocate(&run, config, allow_networks).await;
                let shared = self.clone();
                tasks.spawn(async move {
                    let error = match allocated {
                        // Build it now (a proxy provider runs up front), then answer; a
                        // failure here is tried again by the first download.
                        Allocated::New(alloc) | Allocated::Existing(alloc) => alloc
                            .downloader(&shared.events, &shared.clock)
                            .await
                            .err()
                            .map(|e| {
                                tracing::warn!(run = %run, error = %e, "downloader not ready");
                                e.to_string()
                            }),
                        Allocated::Refused(reason) => Some(reason),
                    };
                    shared.reply_allocation(run, error).await;
                });
                ack(delivery).await;
            }
            Command::Download {
                run,
                batch,
                reply_to,
            } => {
                ack(delivery).await;
                let results = results_subject(&run, reply_to.as_deref());
                for leased in batch {
                    let shared = self.clone();
                    let run = run.clone();
                    let results = results.clone();
                    tasks.spawn(async move {
                        shared.fetch_one(run, leased, received, results).await;
                    });
                }
            }
            Command::Fetch {
                run,
                id,
                request,
                trim,
                reply_to,
            } => {
                ack(delivery).await;
                let results = results_subject(&run, reply_to.as_deref());
                let shared = self.clone();
                tasks.spawn(async move {
                    shared
                        .fetch_for_program(run, id, request, trim, received, results)
                        .await;
                });
            }
            Command::Release { run } => {
                if !self.registry.release(&run).await {
                    tracing::debug!(run = %run, "release of a run that is not allocated here");
                }
                // A run that ended leaves no worker behind.
                self.programs.release(&run);
                self.control_program(run, Control::Stop(RELEASE_GRACE));
                ack(delivery).await;
            }
            Command::Program {
                run,
                action,
                reply_to,
            } => {
                ack(delivery).await;
                match action {
                    ProgramAction::Start(start) => {
                        let reporter = self.reporter(results_subject(&run, reply_to.as_deref()));
                        self.programs.start(run, *start, reporter);
                    }
                    ProgramAction::Pause => self.control_program(run, Control::Pause),
                    ProgramAction::Resume => self.control_program(run, Control::Resume),
                    ProgramAction::Stop { grace_ms } => {
                        self.control_program(run, Control::Stop(Duration::from_millis(grace_ms)));
                    }
                }
            }
            Command::Shutdown => {
                ack(delivery).await;
                tracing::info!(agent = %self.id, "shutdown command");
                return false;
            }
        }
        true
    }

    /// Fetches one leased request and publishes its result on `results` (the subject of its
    /// download's `reply_to`, see [`results_subject`]).
    async fn fetch_one(
        self: Arc<Self>,
        run: RunId,
        leased: LeasedRequest,
        received: Instant,
        results: Subject,
    ) {
        let (mut outcome, _) = self.outcome(&run, &leased.request, None).await;
        outcome.timings.total_ms = received.elapsed().as_millis() as u64;
        self.events.outcome(&run, &leased.request.url, &outcome);
        if !outcome.given_back() {
            self.counters.requests.fetch_add(1, Ordering::Relaxed);
            self.qps.record(self.clock.now_ms());
        }
        self.counters
            .bytes_saved
            .fetch_add(outcome.bytes_saved, Ordering::Relaxed);
        let result = RunResult {
            run,
            agent: self.id.clone(),
            lease_id: leased.lease_id,
            outcome,
        };
        self.publish_result(result, &results).await;
    }

    /// Fetches `request` with the run's downloader: a crawl's download (`raw: None`) or a
    /// program's fetch (`Some(trim)`, with the response's headers).
    async fn outcome(
        &self,
        run: &RunId,
        request: &Request,
        raw: Option<bool>,
    ) -> (FetchOutcome, Vec<(String, String)>) {
        let guard = match self.registry.begin_use(run) {
            Ok(g) => g,
            Err(Missing::Unknown) => {
                let out = failure(
                    "no_downloader",
                    format!("agent `{}` has no downloader for run `{run}`", self.id),
                    true,
                );
                return (out, Vec::new());
            }
            Err(Missing::Refused(reason)) => {
                return (failure("invalid_config", reason, false), Vec::new());
            }
        };
        // Build (or wait for) the run's downloader before taking a slot, so that a slow
        // proxy provider of one run does not hold slots the other runs could use.
        let downloader = match guard.allocation.downloader(&self.events, &self.clock).await {
            Ok(d) => d,
            Err(e) => {
                let retryable = !matches!(e, AgentError::InvalidConfig { .. });
                return (failure(e.code(), e.to_string(), retryable), Vec::new());
            }
        };
        let mut stop = self.stop.subscribe();
        let permit = tokio::select! {
            biased;
            () = stopped(&mut stop) => None,
            p = self.permits.clone().acquire_owned() => p.ok(),
        };
        let Some(_permit) = permit else {
            let out = failure(
                "agent_stopping",
                format!(
                    "agent `{}` stopped before fetching {}",
                    self.id, request.url
                ),
                true,
            );
            return (out, Vec::new());
        };
        // Counted down also when the task is aborted (a detach).
        let in_flight = InFlight::new(&self.counters.in_flight);
        let fetched = match raw {
            None => (downloader.download(request).await, Vec::new()),
            Some(trim) => downloader.fetch_raw(request, trim).await,
        };
        drop(in_flight);
        drop(guard);
        fetched
    }

    /// A program's fetch through the download center: fetched with the run's downloader, the
    /// response as it is published as a `fetched` reply on `results`. A reply too large for
    /// the bus goes without its body, failed `body_too_large`; one that cannot be published
    /// is dropped (the hub's wait for it ends in a timeout).
    async fn fetch_for_program(
        self: Arc<Self>,
        run: RunId,
        id: String,
        request: Request,
        trim: bool,
        received: Instant,
        results: Subject,
    ) {
        let (mut outcome, headers) = self.outcome(&run, &request, Some(trim)).await;
        outcome.timings.total_ms = received.elapsed().as_millis() as u64;
        self.events.outcome(&run, &request.url, &outcome);
        if !outcome.given_back() {
            self.counters.requests.fetch_add(1, Ordering::Relaxed);
            self.qps.record(self.clock.now_ms());
        }
        let mut reply = FetchReply {
            run,
            agent: self.id.clone(),
            id,
            outcome,
            headers,
        };
        loop {
            let envelope = self.ttl.envelope(reply, self.clock.now_ms());
            let published = self.publish_retried(&results, &envelope).await;
            let Message::Fetched(back) = envelope.body else {
                return;
            };
            reply = back;
            match published {
                Ok(()) => return,
                Err(e @ BusError::TooLarge { .. }) if reply.outcome.body.is_some() => {
                    reply.outcome.body = None;
                    reply.outcome.error = Some(ResultError {
                        code: "body_too_large".into(),
                        message: format!(
                            "{}: the response is too large for the bus ({e}); lower the run's max_return_body_bytes",
                            request.url
                        ),
                        retryable: false,
                    });
                }
                Err(e) => {
                    tracing::warn!(run = %reply.run, fetch = %reply.id, error = %e, "fetch reply dropped");
                    return;
                }
            }
        }
    }

    /// Queues a control of a run's program workers (applied in order, off this loop).
    fn control_program(&self, run: RunId, control: Control) {
        if self.program_control.send((run, control)).is_err() {
            tracing::warn!("the program controller is gone; control dropped");
        }
    }

    /// How the program workers' starts and ends reach the hub: published on `subject` with
    /// retries, in the background.
    fn reporter(self: &Arc<Self>, subject: Subject) -> Reporter {
        let shared = self.clone();
        Arc::new(move |run, worker, event| {
            let shared = shared.clone();
            let subject = subject.clone();
            tokio::spawn(async move {
                let report = WorkerReport {
                    run: run.clone(),
                    agent: shared.id.clone(),
                    worker,
                    event,
                };
                let envelope = shared.ttl.envelope(report, shared.clock.now_ms());
                if let Err(e) = shared.publish_retried(&subject, &envelope).await {
                    tracing::error!(run = %run, worker, error = %e, "worker report lost");
                }
            });
        })
    }

    /// Publishes the reply to an `allocate` (`error: None` = ok), retrying
    /// `result_publish_retries` times with back-off, then drops it.
    async fn reply_allocation(&self, run: RunId, error: Option<String>) {
        let ok = error.is_none();
        let reply = AllocationReply {
            run: run.clone(),
            agent: self.id.clone(),
            ok,
            error,
        };
        // One envelope for every attempt (one id; the reply is not stored, so nothing is
        // de-duplicated, but a hub reading it twice sees the same message).
        let envelope = self.ttl.envelope(reply, self.clock.now_ms());
        match self
            .publish_retried(&Subject::allocations(), &envelope)
            .await
        {
            Ok(()) => {
                tracing::info!(run = %run, ok, "allocation reply sent");
                self.emit(AgentEvent::AllocationReplied { run, ok });
            }
            Err(e) => {
                tracing::warn!(run = %run, ok, error = %e, "allocation reply dropped: the hub will count the allocation as failed");
                self.emit(AgentEvent::AllocationReplyDropped {
                    run,
                    ok,
                    error: e.to_string(),
                });
            }
        }
    }

    /// Publishes `envelope`, trying `result_publish_retries` more times with back-off after a
    /// retryable failure (each try is itself retried by the bus); the error after the last
    /// try, or a permanent one at once. The one publish path of results, allocation replies
    /// and log batches.
    async fn publish_retried(
        &self,
        subject: &Subject,
        envelope: &Envelope,
    ) -> Result<(), BusError> {
        let retry = RetryPolicy {
            retries: self.config.result_publish_retries,
            backoff_initial_ms: self.config.backoff_initial_ms,
            backoff_max_ms: self.config.backoff_max_ms,
        };
        retry
            .run("publish", subject.as_str(), || {
                self.bus.publish(subject, envelope)
            })
            .await
    }

    /// Publishes a result on `subject` (see [`AgentCore::publish_retried`]), without its body if
    /// it is too large for the bus; drops it when that fails.
    async fn publish_result(&self, mut result: RunResult, subject: &Subject) {
        loop {
            let envelope = self.ttl.envelope(result, self.clock.now_ms());
            let published = self.publish_retried(subject, &envelope).await;
            let Message::Result(back) = envelope.body else {
                return;
            };
            result = back;
            let error = match published {
                Ok(()) => {
                    self.counters
                        .results_published
                        .fetch_add(1, Ordering::Relaxed);
                    self.emit(AgentEvent::ResultPublished {
                        run: result.run,
                        lease_id: result.lease_id,
                    });
                    return;
                }
                Err(e) => e,
            };
            if matches!(error, BusError::TooLarge { .. }) && result.outcome.body.is_some() {
                tracing::warn!(run = %result.run, lease = %result.lease_id, error = %error, "result too large for the bus: sent without its body");
                result.outcome.body = None;
                continue;
            }
            tracing::warn!(run = %result.run, lease = %result.lease_id, error = %error, "result dropped: the hub's lease will expire and the request be dispatched again");
            self.counters
                .results_dropped
                .fetch_add(1, Ordering::Relaxed);
            self.emit(AgentEvent::ResultDropped {
                run: result.run,
                lease_id: result.lease_id,
                error: error.to_string(),
            });
            return;
        }
    }

    /// Publishes run log batches (see [`AgentCore::publish_retried`]); a batch too large for the
    /// bus is split in two; a batch that cannot be published is dropped, and its run's next
    /// batch says so.
    async fn publish_logs(&self, batches: Vec<OutBatch>) {
        let subject = Subject::logs();
        let logs = self.events.logs();
        // A stack, so that the halves of a split batch go first, in order.
        let mut todo: Vec<OutBatch> = batches.into_iter().rev().collect();
        while let Some(out) = todo.pop() {
            let OutBatch { batch, carried } = out;
            let envelope = self.ttl.envelope(batch, self.clock.now_ms());
            let published = self.publish_retried(&subject, &envelope).await;
            let Message::Log(batch) = envelope.body else {
                continue;
            };
            let out = OutBatch { batch, carried };
            match published {
                Ok(()) => {
                    logs.batches_published.fetch_add(1, Ordering::Relaxed);
                }
                Err(BusError::TooLarge { .. }) if out.batch.lines.len() > 1 => {
                    if let Some((first, second)) = out.split() {
                        todo.push(second);
                        todo.push(first);
                    }
                }
                Err(e) => {
                    tracing::warn!(run = %out.batch.run, lines = out.run_lines(), error = %e, "run log batch dropped: its run's next batch says so");
                    logs.lost(&out);
                }
            }
        }
    }
}

/// Where the results of a download go: `results.{reply_to}` (the hub that sent it), or
/// `results` when the download names no hub (hubs of older builds). A `reply_to` that is not
/// a valid hub id (a single subject token) cannot be a subject: its results go to `results`,
/// with a warning, so that a hub reading the shared subject may still get them.
fn results_subject(run: &RunId, reply_to: Option<&str>) -> Subject {
    let Some(hub) = reply_to else {
        return Subject::results();
    };
    Subject::hub_results(hub).unwrap_or_else(|e| {
        tracing::warn!(run = %run, reply_to = %hub.escape_debug(), error = %e, "download with an invalid reply_to: its results go to `results`");
        Subject::results()
    })
}

/// One request being fetched, counted in `in_flight` while it lives.
struct InFlight<'a>(&'a AtomicU32);

impl<'a> InFlight<'a> {
    fn new(counter: &'a AtomicU32) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        Self(counter)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Returns once the agent is told to stop.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

async fn ack(delivery: Delivery) {
    if let Err(e) = delivery.ack().await {
        tracing::debug!(error = %e, "could not ack a command (it may be delivered again)");
    }
}

/// Registers, then heartbeats until the agent stops.
async fn presence_loop(shared: Arc<AgentCore>) {
    let mut stop = shared.stop.subscribe();
    let mut probe = Probe::new();
    let machine = probe.machine();
    let mut backoff = Backoff::new(&shared.config);
    let register = Register {
        agent: shared.id.clone(),
        host: machine.host,
        version: shared.config.version.clone(),
        cores: machine.cores,
        memory_bytes: machine.memory_bytes,
        labels: shared.config.labels.clone(),
        capacity: shared.config.capacity,
    };
    let registrations = Subject::registrations();
    let heartbeats = Subject::heartbeats();
    let mut detached = shared.detached.subscribe();
    let interval = Duration::from_millis(shared.config.heartbeat_interval_ms);
    let mut seq = 0u64;
    let mut failing = false;
    // Registers again after a detach ends.
    'presence: loop {
        // One envelope for every attempt: a retry whose first attempt was stored is stored once.
        let envelope = shared.ttl.envelope(register.clone(), shared.clock.now_ms());
        loop {
            let published = tokio::select! {
                biased;
                () = stopped(&mut stop) => return,
                r = shared.bus.publish(&registrations, &envelope) => r,
            };
            match published {
                Ok(()) => {
                    shared.counters.registered.store(true, Ordering::Relaxed);
                    tracing::info!(agent = %shared.id, "registered");
                    shared.emit(AgentEvent::Registered);
                    break;
                }
                Err(e) => {
                    tracing::warn!(agent = %shared.id, error = %e, "registration failed, retrying");
                    shared.emit(AgentEvent::RegisterFailed {
                        error: e.to_string(),
                    });
                    if !shared.pause(backoff.next()).await {
                        return;
                    }
                }
            }
        }
        backoff.reset();
        detached.borrow_and_update();
        loop {
            seq += 1;
            let started = tokio::time::Instant::now();
            let usage = probe.usage();
            let now = shared.clock.now_ms();
            let heartbeat = Heartbeat {
                agent: shared.id.clone(),
                cpu_pct: usage.cpu_pct,
                memory_bytes: usage.memory_bytes,
                active_downloaders: u32::try_from(shared.registry.len()).unwrap_or(u32::MAX),
                in_flight: shared.counters.in_flight.load(Ordering::Relaxed),
                qps: shared.qps.qps(now),
                seq,
            };
            let envelope = shared.ttl.envelope(heartbeat, now);
            let published = tokio::select! {
                biased;
                () = stopped(&mut stop) => return,
                r = shared.bus.publish(&heartbeats, &envelope) => r,
            };
            let next = match published {
                Ok(()) => {
                    if std::mem::take(&mut failing) {
                        tracing::info!(agent = %shared.id, seq, "heartbeats resumed");
                    }
                    shared
                        .counters
                        .heartbeats_sent
                        .fetch_add(1, Ordering::Relaxed);
                    shared.emit(AgentEvent::HeartbeatSent { seq });
                    backoff.reset();
                    started + interval
                }
                Err(e) => {
                    if !std::mem::replace(&mut failing, true) {
                        tracing::warn!(agent = %shared.id, seq, error = %e, "heartbeat failed; retrying with back-off");
                    }
                    shared
                        .counters
                        .heartbeats_failed
                        .fetch_add(1, Ordering::Relaxed);
                    shared.emit(AgentEvent::HeartbeatFailed {
                        seq,
                        error: e.to_string(),
                    });
                    tokio::time::Instant::now() + backoff.next()
                }
            };
            loop {
                tokio::select! {
                    biased;
                    () = stopped(&mut stop) => return,
                    changed = detached.changed() => {
                        if changed.is_ok() && !*detached.borrow_and_update() {
                            continue 'presence;
                        }
                    }
                    () = tokio::time::sleep_until(next) => break,
                }
            }
        }
    }
}

/// Reads the hubs' beacons (re-subscribing forever): each one is a hub heard.
async fn hubs_loop(shared: Arc<AgentCore>) {
    if shared.config.detach_after_ms == 0 {
        return;
    }
    let mut stop = shared.stop.subscribe();
    let mut backoff = Backoff::new(&shared.config);
    let subject = Subject::hubs();
    'subscribe: loop {
        let subscribed = tokio::select! {
            biased;
            () = stopped(&mut stop) => return,
            r = shared.bus.subscribe(&subject, SubscribeOpts::live()) => r,
        };
        let mut subscription = match subscribed {
            Ok(s) => {
                backoff.reset();
                s
            }
            Err(e) => {
                tracing::debug!(agent = %shared.id, error = %e, "subscribing to hub beacons failed, retrying");
                if shared.pause(backoff.next()).await {
                    continue;
                }
                return;
            }
        };
        loop {
            let next = tokio::select! {
                biased;
                () = stopped(&mut stop) => return,
                n = subscription.next() => n,
            };
            match next {
                Some(Ok(delivery)) => {
                    if matches!(delivery.envelope.body, Message::Beacon(_)) {
                        shared.heard_hub(delivery.envelope.sent_ms);
                    }
                }
                Some(Err(
                    e @ (BusError::Malformed { .. } | BusError::UnsupportedVersion { .. }),
                )) => {
                    tracing::debug!(agent = %shared.id, error = %e, "unreadable hub beacon skipped");
                }
                Some(Err(_)) | None => {
                    if shared.pause(backoff.next()).await {
                        continue 'subscribe;
                    }
                    return;
                }
            }
        }
    }
}

/// Detaches the agent once no hub was heard for `detach_after` (checked a few times per
/// `detach_after`, at least once a second).
async fn detach_loop(shared: Arc<AgentCore>) {
    let after = shared.config.detach_after_ms;
    if after == 0 {
        return;
    }
    let mut stop = shared.stop.subscribe();
    let mut tick = tokio::time::interval(Duration::from_millis((after / 4).clamp(10, 1_000)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = stopped(&mut stop) => return,
            _ = tick.tick() => {}
        }
        let silent = shared
            .clock
            .now_ms()
            .saturating_sub(shared.hub_heard_ms.load(Ordering::SeqCst));
        if silent > after && !*shared.detached.borrow() {
            shared.detach(silent).await;
        }
    }
}

/// Publishes the run logs: a run's batch as soon as it is full, every run's lines every
/// `log_flush_ms`; when `finish` fires (the other tasks are done), what is left.
async fn log_loop(shared: Arc<AgentCore>, mut finish: oneshot::Receiver<()>) {
    let logs = shared.events.logs().clone();
    let period = Duration::from_millis(shared.config.log_flush_ms);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let batches = tokio::select! {
            biased;
            _ = &mut finish => break,
            () = logs.batch_ready() => logs.take(false),
            _ = tick.tick() => logs.take(true),
        };
        shared.publish_logs(batches).await;
    }
    shared.publish_logs(logs.take(true)).await;
}

/// Releases idle downloaders every `idle_check_ms` until the agent stops.
async fn sweep_loop(shared: Arc<AgentCore>) {
    let mut stop = shared.stop.subscribe();
    let mut tick = tokio::time::interval(Duration::from_millis(shared.config.idle_check_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = stopped(&mut stop) => return,
            _ = tick.tick() => {
                shared.registry.release_idle(shared.config.downloader_idle_ms).await;
            }
        }
    }
}

/// Reads commands until the agent stops (re-subscribing forever), then lets the running
/// requests finish within the grace period.
async fn command_loop(shared: Arc<AgentCore>, subject: Subject) {
    let mut stop = shared.stop.subscribe();
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut backoff = Backoff::new(&shared.config);
    // A few commands at a time: each download command already carries a batch of requests.
    let opts = SubscribeOpts::durable(durable_name(&shared.id)).batch(8);
    let mut detached = shared.detached.subscribe();
    'subscribe: loop {
        let subscribed = tokio::select! {
            biased;
            () = stopped(&mut stop) => break 'subscribe,
            r = shared.bus.subscribe(&subject, opts.clone()) => r,
        };
        let mut subscription = match subscribed {
            Ok(s) => {
                backoff.reset();
                tracing::info!(agent = %shared.id, subject = %subject, "reading commands");
                shared.emit(AgentEvent::Subscribed);
                s
            }
            Err(e) => {
                tracing::warn!(agent = %shared.id, error = %e, "subscribing to commands failed, retrying");
                shared.emit(AgentEvent::SubscribeFailed {
                    error: e.to_string(),
                });
                if shared.pause(backoff.next()).await {
                    continue;
                }
                break;
            }
        };
        loop {
            tokio::select! {
                biased;
                () = stopped(&mut stop) => break 'subscribe,
                Ok(()) = detached.changed() => {
                    if *detached.borrow_and_update() && !tasks.is_empty() {
                        tracing::warn!(agent = %shared.id, tasks = tasks.len(), "detached: the requests being fetched are abandoned (their leases expire at the hub)");
                        tasks.abort_all();
                    }
                }
                Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                    if let Err(e) = joined && e.is_panic() {
                        tracing::error!(agent = %shared.id, error = %e, "a request task panicked");
                    }
                }
                next = subscription.next() => match next {
                    Some(Ok(delivery)) => {
                        if !shared.handle(delivery, &mut tasks).await {
                            shared.request_stop();
                            break 'subscribe;
                        }
                    }
                    Some(Err(e @ (BusError::Malformed { .. } | BusError::UnsupportedVersion { .. }))) => {
                        tracing::warn!(agent = %shared.id, error = %e, "unreadable command skipped");
                    }
                    Some(Err(e)) => {
                        tracing::warn!(agent = %shared.id, error = %e, "command subscription failed; subscribing again");
                        if shared.pause(backoff.next()).await {
                            continue 'subscribe;
                        }
                        break 'subscribe;
                    }
                    None => {
                        tracing::warn!(agent = %shared.id, "command subscription closed; subscribing again");
                        if shared.pause(backoff.next()).await {
                            continue 'subscribe;
                        }
                        break 'subscribe;
                    }
                },
            }
        }
    }
    let grace = Duration::from_millis(shared.config.shutdown_grace_ms);
    let drained =
        tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!(agent = %shared.id, left = tasks.len(), "requests still running after the shutdown grace period were abandoned");
        tasks.shutdown().await;
    }
}
