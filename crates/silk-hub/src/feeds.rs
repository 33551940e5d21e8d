//! The runs the router feeds and the outcomes it reads back (the services behind
//! `taskhub`'s classes):
//!
//! - [`feed_job`]: routed tasks become requests in a job's *fed run*, started on the first
//!   task (allocated as the job says, checked against the live agents first) and ended
//!   after `idle_ms` with nothing to do; a fed run that failed or was cancelled with
//!   requests it had accepted hands its frontier to the next one.
//! - [`consume_outcomes`]: every run's final outcomes (`outcomes`), tailed from stored
//!   offsets and handed to an [`OutcomeConsumer`] at least once, across hub restarts.

use crate::error::HubError;
use crate::items::read_items;
use crate::live::{FeedError, Run};
use crate::outcomes;
use crate::routed::{FeedTask, OutcomeConsumer, OutcomeLine};
use crate::run::{Feed, TASK_META};
use crate::scheduler::load;
use crate::state::HubCore;
use crate::tailer::{self, Backoff, Page, Tail, Writer};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use silk_core::{Request, RunId};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// Feeds routed tasks to `job`'s fed run, starting one (allocated as the job says)
/// when the job has none that takes requests. Per task, `Err` is a refusal for good
/// (bad URL, host not allowed); the whole call fails when the job does not exist
/// ([`HubError::NoSuchJob`]), its spider is bad, or no run can take the tasks now.
pub(crate) async fn feed_job(
    shared: &Arc<HubCore>,
    job: &str,
    feed: Feed,
    tasks: Vec<FeedTask>,
) -> Result<Vec<Result<(), String>>, HubError> {
    let job = load(shared, job).await?;
    let request = crate::jobs::run_request(&job.spec, &BTreeMap::new())?;
    let spider = crate::run::check_request(&request)?;
    let (requests, answers) = requests_of(&spider, tasks, shared.clock.now_ms());
    if requests.is_empty() {
        return Ok(answers);
    }
    // The common case: the job's fed run is open.
    if let Some(run) = shared.fed_run_of(&job.id) {
        match run.feed(&shared.runs_cx, requests.clone()).await {
            Ok(_) => return Ok(answers),
            Err(FeedError::Closed) => {}
            Err(FeedError::Frontier(reason)) => {
                return Err(HubError::RunStorage {
                    run: run.id.clone(),
                    reason,
                });
            }
        }
    }
    // Start one (one at a time: two outbounds of this hub feeding one job get one run;
    // routers in two hubs of a cluster each start their own). A run found
    // open may close before it takes the requests: then another is started.
    let _one_at_a_time = shared.feed_lock.lock().await;
    for _ in 0..3 {
        let run = match shared.fed_run_of(&job.id) {
            Some(run) => run,
            None => match start_fed_run(shared, &job, &request, &feed).await? {
                Some(run) => run,
                None => continue, // ended already
            },
        };
        match run.feed(&shared.runs_cx, requests.clone()).await {
            Ok(_) => return Ok(answers),
            Err(FeedError::Closed) => continue,
            Err(FeedError::Frontier(reason)) => {
                return Err(HubError::RunStorage {
                    run: run.id.clone(),
                    reason,
                });
            }
        }
    }
    Err(HubError::Conflict(format!(
        "job `{}`: its fed runs kept ending; try again",
        job.spec.name
    )))
}

/// The requests `tasks` become under `spider` (canonicalised, allowed hosts only, salted by
/// their delivery id, made at `now_ms`), and per task `Ok`, or why it was refused for good.
pub(crate) fn requests_of(
    spider: &silk_core::spider::Spider,
    tasks: Vec<FeedTask>,
    now_ms: u64,
) -> (Vec<Request>, Vec<Result<(), String>>) {
    let mut answers = Vec::with_capacity(tasks.len());
    let mut requests = Vec::with_capacity(tasks.len());
    for task in tasks {
        let mut r = match Request::get(&task.url, None, &spider.canon) {
            Ok(r) => r,
            Err(e) => {
                answers.push(Err(format!("bad URL `{}`: {e}", task.url)));
                continue;
            }
        };
        if !spider.canonical_host_allowed(&r.url) {
            answers.push(Err(format!(
                "the host of `{}` is not allowed by the spider (`allowed_domains`)",
                r.url
            )));
            continue;
        }
        r.priority = task.priority;
        r.depth = task.depth;
        r.created_ms = now_ms;
        r.dedup_salt = Some(task.delivery_id);
        if !task.task.is_empty() {
            r.meta.insert(TASK_META.into(), Value::Object(task.task));
        }
        requests.push(r);
        answers.push(Ok(()));
    }
    (requests, answers)
}

/// What `job`'s fed run has not finished (0 when it has none, or no such job: the
/// push then says so).
pub(crate) async fn job_backlog(shared: &HubCore, job: &str) -> Result<u64, HubError> {
    let job = match load(shared, job).await {
        Ok(job) => job,
        Err(HubError::NoSuchJob(_)) => return Ok(0),
        Err(e) => return Err(e),
    };
    match shared.fed_run_of(&job.id) {
        Some(run) => run.left().await.map_err(|reason| HubError::RunStorage {
            run: run.id.clone(),
            reason,
        }),
        None => Ok(0),
    }
}

/// Starts a fed run of `job`: checked against the live agents first (no run is recorded
/// while none could be allocated: the router tries again), taking over the frontier of the
/// job's last fed run if that one failed or was cancelled with requests it had accepted.
async fn start_fed_run(
    shared: &Arc<HubCore>,
    job: &crate::jobs::Job,
    request: &crate::run::RunRequest,
    feed: &Feed,
) -> Result<Option<Arc<Run>>, HubError> {
    {
        let pools =
            crate::launch::run_pools(shared, &job.tenant, &request.pools, request.sinks.as_ref())
                .await?;
        let live = shared.link.open_agents(&pools);
        let mut rng = shared.rng.lock();
        crate::allocation::allocate(
            request
                .strategy
                .unwrap_or(crate::allocation::Strategy::Random),
            request
                .on_agent_lost
                .unwrap_or(crate::allocation::OnAgentLost::Fail),
            &live,
            &mut *rng,
        )?;
    }
    let frontier_from = stranded_fed_run(shared, &job.id).await?;
    let view = crate::launch::start_run(
        shared,
        crate::launch::NewRun {
            request: request.clone(),
            tenant: job.tenant.clone(),
            job: Some((job.id.clone(), job.spec.name.clone())),
            attempt: 0,
            restart_of: None,
            args: job.spec.merged_args(&BTreeMap::new()),
            // It lives as long as tasks come; `idle_ms` ends it.
            timeout_ms: None,
            frontier_from,
            feed: Some(feed.clone()),
            job_frontier: job.spec.frontier == silk_api::jobs::FrontierScope::Job,
        },
    )
    .await?;
    shared.logs.hub(
        &view.id,
        silk_store::Level::Info,
        format!(
            "started by the router: outbound `{}` feeds it",
            feed.outbound
        ),
    );
    Ok(shared.active_run(&view.id))
}

/// The job's latest fed run if it ended failed or cancelled and its frontier is still there
/// (on disk and not moved by a takeover yet, or in the cluster's Redis): the requests it had accepted and not finished go on in the
/// next fed run.
async fn stranded_fed_run(shared: &HubCore, job_id: &str) -> Result<Option<RunId>, HubError> {
    let filter = silk_store::RunFilter {
        job_id: Some(job_id.to_owned()),
        tenant: None,
        states: Vec::new(),
        limit: Some(20),
        newest_first: true,
    };
    for row in shared.store.list_runs(&filter).await? {
        let Ok(record) = crate::repo::record_of(row) else {
            continue;
        };
        if record.feed.is_none() {
            continue;
        }
        let stranded = matches!(
            record.state,
            crate::run::RunState::Failed | crate::run::RunState::Cancelled
        ) && shared.active_run(&record.id).is_none()
            && match &record.shared_frontier {
                Some(_) => shared.config.frontier_url.is_some(),
                None => shared.files.frontier_dir_of(&record).exists(),
            };
        return Ok(stranded.then_some(record.id));
    }
    Ok(None)
}

/// Feeds every run's outcomes to `consumer` until it or the hub stops: runs with outcomes not
/// all delivered (ended, or from before a restart) and every run active now, each tailed
/// from its stored offset (`runs/{id}/router-{name}.json`, or the consumer's
/// `state_file`). Runs that ended before the
/// consumer first ran on this hub are not replayed.
pub(crate) async fn consume_outcomes(
    shared: Arc<HubCore>,
    consumer: Arc<dyn OutcomeConsumer>,
) -> Result<(), HubError> {
    if !shared.runs_cx.settings.record_outcomes {
        return Err(HubError::BadConfig(
            "the hub does not record outcomes (HubConfig::record_outcomes)".into(),
        ));
    }
    let state_file = consumer
        .state_file()
        .unwrap_or_else(|| format!("router-{}.json", file_safe(consumer.name())));
    let mut started = shared.runs_started.subscribe();
    let mut tailing: HashSet<RunId> = HashSet::new();
    let mut tails = tokio::task::JoinSet::new();
    let since_ms = first_start(&shared, &state_file);
    loop {
        if *shared.stop.borrow() {
            // The hub is stopping: its runs are read again at its next start.
            consumer.stopped().await;
            break;
        }
        // Scanned at every wake, so a run that started and ended in between is not missed.
        let mut candidates = shared.files.runs_with_state(outcomes::FILE);
        candidates.extend(shared.runs_now());
        for run in candidates {
            if tailing.contains(&run) {
                continue;
            }
            let state: Option<ReadState> =
                shared.files.read_state(&run, &state_file).ok().flatten();
            if state.is_some_and(|s| s.done) {
                continue;
            }
            if state.is_none() && ended_before(&shared, &run, since_ms).await {
                // History from before this consumer existed is not replayed.
                let done = ReadState {
                    done: true,
                    ..ReadState::default()
                };
                let _ = shared.files.write_state(&run, &state_file, &done);
                continue;
            }
            let state = state.unwrap_or_default();
            tailing.insert(run.clone());
            tails.spawn(tail(
                shared.clone(),
                consumer.clone(),
                run,
                state_file.clone(),
                state,
            ));
        }
        tokio::select! {
            () = consumer.stopped() => break,
            changed = started.changed() => {
                if changed.is_err() {
                    break;
                }
            }
            Some(done) = tails.join_next() => {
                if let Ok(run) = done {
                    tailing.remove(&run);
                }
            }
        }
    }
    // Tails stop at the consumer's stop too; let them finish the tasks in hand.
    while tails.join_next().await.is_some() {}
    Ok(())
}

/// How far a consumer has read a run's outcomes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
struct ReadState {
    offset: u64,
    submitted: u64,
    /// The run had ended and every outcome was routed.
    done: bool,
}

/// A file-name-safe form of an inbound's name: the name itself when it is made of
/// `[A-Za-z0-9_-]`, else those characters with a hash of the whole name (two names never
/// share a file).
fn file_safe(name: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if !name.is_empty() && name.chars().all(plain) {
        return name.to_owned();
    }
    let kept: String = name.chars().filter(|c| plain(*c)).collect();
    use sha2::Digest;
    let hash = sha2::Sha256::digest(name.as_bytes());
    let hex: String = hash[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("{kept}~{hex}")
}

/// When the inbound whose state files are named `state_file` first ran on this hub (stored
/// in the hub's data dir the first time).
fn first_start(shared: &HubCore, state_file: &str) -> u64 {
    let path = shared
        .config
        .data_dir
        .join(format!("{}.since", state_file.trim_end_matches(".json")));
    if let Some(ms) = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
    {
        return ms;
    }
    let now = shared.clock.now_ms();
    if let Err(e) = std::fs::write(&path, now.to_string()) {
        tracing::warn!(file = %path.display(), error = %e, "inbound start time not stored");
    }
    now
}

/// Whether `run` is not active and ended before `since_ms`.
async fn ended_before(shared: &HubCore, run: &RunId, since_ms: u64) -> bool {
    if shared.active_run(run).is_some() {
        return false;
    }
    match shared.store.get_run(run.as_str()).await {
        Ok(Some(row)) => row.finished_ms.is_some_and(|f| f < since_ms),
        _ => false,
    }
}

/// The outcomes of one run, as a consumer of its outcome log: each line the inbound wants
/// becomes a task submitted to the router.
struct OutcomeTail {
    shared: Arc<HubCore>,
    consumer: Arc<dyn OutcomeConsumer>,
    run: RunId,
    path: std::path::PathBuf,
    page_size: usize,
    state_file: String,
    state: ReadState,
    /// The last page read was not full.
    short: bool,
}

impl Tail for OutcomeTail {
    type Entry = Value;
    type Waker = Arc<Run>;

    fn writer(&self) -> Writer<Arc<Run>> {
        self.shared.run_writer(&self.run)
    }

    async fn written(run: &Arc<Run>) {
        run.outcomes_written.notified().await;
    }

    async fn read(&mut self, offset: u64) -> Result<Page<Value>, String> {
        let linger = self.consumer.linger();
        if self.short && !linger.is_zero() {
            tokio::time::sleep(linger).await;
        }
        let page = read_items(&self.path, offset, self.page_size)?;
        self.short = page.items.len() < self.page_size;
        let run = &self.run;
        let tasks = page
            .items
            .into_iter()
            .filter_map(|v| match serde_json::from_value::<OutcomeLine>(v) {
                Ok(line) => Some(line),
                Err(e) => {
                    tracing::warn!(run = %run, error = %e, "unreadable outcome line skipped");
                    None
                }
            })
            .filter_map(|line| self.consumer.task(line))
            .collect();
        Ok(Page {
            entries: tasks,
            next: page.next_cursor,
        })
    }

    async fn deliver(&mut self, todo: &mut Vec<Value>) -> Result<(), String> {
        self.consumer.deliver(&self.run, todo).await
    }

    fn advanced(&mut self, next: u64, delivered: u64) {
        self.state.offset = next;
        self.state.submitted += delivered;
        if let Err(e) = self
            .shared
            .files
            .write_state(&self.run, &self.state_file, &self.state)
        {
            tracing::warn!(run = %self.run, error = %e, "outcome offset not stored (outcomes may be routed again)");
        }
    }

    fn read_failed(&mut self, error: &str) {
        tracing::warn!(run = %self.run, consumer = %self.consumer.name(), error = %error, "outcomes not readable");
    }

    fn failing(&mut self, _error: &str, _first: bool) {
        // The consumer's `deliver` logged it, knowing whether it is only stopping.
    }

    fn recovered(&mut self) {}

    fn finished(&mut self) {
        self.state.done = true;
        if let Err(e) = self
            .shared
            .files
            .write_state(&self.run, &self.state_file, &self.state)
        {
            tracing::warn!(run = %self.run, error = %e, "outcome offset not stored");
        }
    }
}

/// Delivers the outcomes of one run after `state`, until the run has ended and all are
/// delivered (or the consumer or the hub stops). Returns the run.
async fn tail(
    shared: Arc<HubCore>,
    consumer: Arc<dyn OutcomeConsumer>,
    run: RunId,
    state_file: String,
    state: ReadState,
) -> RunId {
    let offset = state.offset;
    let page_size = consumer.page_size();
    let mut hub_stop = shared.stop.subscribe();
    let stopping = consumer.clone();
    let stopped = async move {
        tokio::select! {
            () = stopping.stopped() => {}
            _ = hub_stop.wait_for(|s| *s) => {}
        }
    };
    let mut log = OutcomeTail {
        path: shared.files.run_dir(&run).join(outcomes::FILE),
        shared,
        consumer,
        run,
        page_size,
        state_file,
        state,
        short: false,
    };
    let backoff = Backoff {
        initial: Duration::from_millis(200),
        max: Duration::from_secs(30),
    };
    tailer::tail(&mut log, offset, backoff, stopped).await;
    log.run
}
