//! A run active on this hub ([`Run`]): the state its driver (`runner`), the API, the
//! presence task and the sinks share — its record, frontier, item sink, requests out,
//! counters and the signals between them — and the reads on it that need nothing of the hub.
//! What drives it is `runner`.

use crate::dispatch::Desired;
use crate::files::HubFiles;
use crate::items::{ItemLog, ItemWriter};
use crate::link::AgentLink;
use crate::logs::RunLogs;
use crate::outcomes::OutcomeLog;
use crate::repo::RunRepo;
use crate::run::{Feed, RunRecord, RunState, RunStats, RunView};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use silk_core::spider::Spider;
use silk_core::{AgentId, Clock, HubId, LeaseId, Request, RunId};
use silk_frontier::FrontierStore;
use silk_store::MetaStore;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::{Notify, watch};

/// What a run's driver may use of the hub, and nothing more: the clock, the data dir, the
/// logs, the run repository and the store's items table, the agents (who is live, commands
/// to them), the randomness of routing, the settings runs share, and the hub's stop signal.
#[derive(Clone)]
pub(crate) struct RunContext {
    /// This hub's id (said in the log when a run is let go).
    pub(crate) hub_id: HubId,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) files: HubFiles,
    pub(crate) logs: Arc<RunLogs>,
    /// Run records, stored under the run's lease.
    pub(crate) repo: RunRepo,
    /// The store, for the items table of runs with a shared frontier.
    pub(crate) store: Arc<dyn MetaStore>,
    pub(crate) agents: AgentLink,
    /// The randomness of routing (`random` runs).
    pub(crate) rng: Arc<Mutex<StdRng>>,
    /// The fair share of slots between the runs of this hub.
    pub(crate) fair: Arc<crate::quotas::FairTable>,
    pub(crate) settings: RunSettings,
    /// Turns true when the hub stops.
    pub(crate) stop: watch::Receiver<bool>,
    /// The job frontiers open here, shared by the runs of each job.
    pub(crate) job_frontiers: Arc<crate::job_frontier::JobFrontiers>,
}

impl RunContext {
    /// What opening or deleting a job frontier takes from the hub.
    pub(crate) fn job_frontier_env(&self) -> crate::job_frontier::Env<'_> {
        crate::job_frontier::Env {
            files: &self.files,
            store: &self.store,
            clock: self.clock.clone(),
            hub_id: self.hub_id.as_str(),
            frontier_url: self.settings.frontier_url.as_deref(),
            lease_ttl_ms: self.settings.ownership_ttl_ms,
        }
    }
}

/// The hub settings every run follows (from [`HubConfig`](crate::HubConfig)).
#[derive(Debug, Clone)]
pub(crate) struct RunSettings {
    /// The cluster's Redis, for runs whose frontier is there.
    pub(crate) frontier_url: Option<String>,
    /// Write each request's final outcome (`outcomes`).
    pub(crate) record_outcomes: bool,
    /// A request whose agent is lost this many times is given up as poison.
    pub(crate) poison_after_losses: u32,
    /// The hub's API as programs reach it (`SILK_API_URL`); none: program runs fail.
    pub(crate) public_url: Option<String>,
    /// The hub's key: run tokens are made and checked with it.
    pub(crate) secrets: silk_projects::secrets::SecretBox,
    /// How long a hub's leases last unrenewed (a job frontier's in Redis too), ms.
    pub(crate) ownership_ttl_ms: u64,
}

/// A request out at an agent.
pub(crate) struct Out {
    pub(crate) agent: AgentId,
    pub(crate) request: Request,
    pub(crate) deadline_ms: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) sent: AtomicU64,
    pub(crate) returned: AtomicU64,
    pub(crate) late: AtomicU64,
    pub(crate) items: AtomicU64,
    pub(crate) duplicate_items: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) bytes_saved: AtomicU64,
    pub(crate) succeeded: AtomicU64,
    pub(crate) affinity_kept: AtomicU64,
    pub(crate) affinity_broken: AtomicU64,
    pub(crate) reassigned: AtomicU64,
    /// Results whose page was blocked (`proxy_banned`).
    pub(crate) blocked: AtomicU64,
    /// Requests given up as poison.
    pub(crate) poisoned: AtomicU64,
    /// A program's fetches through the download center answered (its pages, for quotas).
    pub(crate) fetched: AtomicU64,
    /// Results taken off the requests out and not yet acked (counted in `succeeded` only
    /// once acked): the quota counts them as still out.
    pub(crate) applying: AtomicU64,
    pub(crate) by_agent: Mutex<BTreeMap<String, u64>>,
}

/// A run that is active on this hub.
pub(crate) struct Run {
    pub(crate) id: RunId,
    pub(crate) record: Mutex<RunRecord>,
    pub(crate) spider: Spider,
    pub(crate) frontier: Arc<dyn FrontierStore>,
    /// The writer of the run's one item log.
    pub(crate) items: ItemWriter,
    /// Where that log is.
    pub(crate) item_log: ItemLog,
    pub(crate) out: Mutex<HashMap<LeaseId, Out>>,
    /// Agents that were sent the run's `allocate` in this hub session.
    pub(crate) allocated_on: Mutex<BTreeSet<AgentId>>,
    /// Hosts whose robots.txt crawl-delay the frontier already has.
    pub(crate) delays: Mutex<HashSet<String>>,
    pub(crate) counters: Counters,
    pub(crate) wake: Notify,
    /// Woken when requests may have become leasable (a program's enqueue or ack): the
    /// lease calls of programs wait on it.
    pub(crate) enqueued: Notify,
    pub(crate) desired: watch::Sender<Desired>,
    /// A reason to fail the run, set outside the loop (agent lost, a sink error).
    pub(crate) fatal: Mutex<Option<String>>,
    /// When a result last came back, or dispatch last went from idle to busy (hub clock).
    pub(crate) last_progress_ms: AtomicU64,
    /// When this hub session started driving the run, and the successes before it.
    pub(crate) session_start_ms: u64,
    pub(crate) success_before: u64,
    /// Set when the run starts ending: results are late from then on, controls refused.
    pub(crate) closing: std::sync::atomic::AtomicBool,
    /// The frontier's lease timeout, ms.
    pub(crate) lease_timeout_ms: u64,
    /// Turns true when the dispatch loop has ended and the run is recorded.
    pub(crate) done: watch::Sender<bool>,
    /// Bumped (under the record's lock) by every change of the record.
    pub(crate) version: AtomicU64,
    /// The last version stored; held while storing, so stores never go back in time.
    pub(crate) persisted: tokio::sync::Mutex<u64>,
    /// Woken when items are written (the sinks that tail the items file).
    pub(crate) items_written: Notify,
    /// The job it is a run of.
    pub(crate) job_id: Option<String>,
    /// Set when the router feeds the run.
    pub(crate) feed: Option<Feed>,
    /// True while the run takes fed requests. Feeding holds it for reading; the run closes
    /// it for writing, after checking that nothing is left, before it ends — so a request
    /// is never fed into a run that has decided to end.
    pub(crate) gate: tokio::sync::RwLock<bool>,
    /// When requests were last fed (hub clock).
    pub(crate) last_fed_ms: AtomicU64,
    /// Final outcomes for the router (`HubConfig::record_outcomes`).
    pub(crate) outcomes: Option<OutcomeLog>,
    /// Woken when outcome lines are written.
    pub(crate) outcomes_written: Notify,
    /// The frontier's `max_retries` (a `Retry` past it is the request's last outcome).
    pub(crate) max_retries: u32,
    /// Held (read) while a result is applied; `finish` takes it (write) once `closing` is
    /// set, so that no result writes items or outcomes after the run has ended.
    pub(crate) applying: tokio::sync::RwLock<()>,
    /// Set when another hub took the run's lease (`ownership`): the loop lets go.
    pub(crate) disowned: Mutex<Option<String>>,
    /// How often each request's agent was lost while fetching it (this hub session), by
    /// URL and dedup salt: the poison count.
    pub(crate) losses: Mutex<HashMap<String, u32>>,
    /// A program's fetches through the download center waiting for their agent's reply, by
    /// fetch id.
    pub(crate) fetches: Mutex<HashMap<String, tokio::sync::oneshot::Sender<silk_bus::FetchReply>>>,
    /// Whose turn it is among the run's agents for the next fetch that names none.
    pub(crate) fetch_turn: std::sync::atomic::AtomicUsize,
    /// Its share of its tenant's quotas (`quotas`).
    pub(crate) quota: crate::quotas::RunQuota,
    /// Set while the run is paused by a quota (not by a user): the hub resumes it.
    pub(crate) quota_paused: std::sync::atomic::AtomicBool,
    /// How many requests it would have out now if it could (for the fair share).
    pub(crate) demand: AtomicU64,
    /// The spider's expansion and its cursor (none without `expand`, or for a fed run).
    pub(crate) expand: tokio::sync::Mutex<Option<silk_frontier::ExpandFeed>>,
    /// The expanded requests not fed to the frontier yet.
    pub(crate) unexpanded: AtomicU64,
    /// A program run's fetches through the download center under its quota slice: set by
    /// its driver each turn, taken by the fetch route.
    pub(crate) fetch_room: Mutex<FetchRoom>,
    /// Woken when `fetch_room` was set again.
    pub(crate) fetch_room_set: Notify,
}

/// The fetches a program run's quota slice still allows, and those taken: changed under
/// one lock with the run's `fetched` counter, so a quota turn sees every fetch exactly once
/// (out, or counted) and a fetch taken while the turn asked the store is subtracted from
/// the room it sets.
#[derive(Debug, Default)]
pub(crate) struct FetchRoom {
    /// Fetches it may start (`u64::MAX`: no limit).
    pub(crate) room: u64,
    /// Fetches started, ever (the turn subtracts those started meanwhile).
    pub(crate) taken: u64,
    /// Fetches started and not counted yet.
    pub(crate) out: u64,
}

/// Why a run did not take fed requests.
#[derive(Debug)]
pub(crate) enum FeedError {
    /// The run is ending or has ended: start another.
    Closed,
    /// The frontier failed.
    Frontier(String),
}

impl Run {
    pub(crate) fn record(&self) -> RunRecord {
        self.record.lock().clone()
    }

    pub(crate) fn state(&self) -> RunState {
        self.record.lock().state
    }

    /// The spider's item limit (none for a run the router feeds: its volume is the
    /// router's).
    pub(crate) fn max_items(&self) -> Option<u64> {
        self.spider.spec.max_items.filter(|_| self.feed.is_none())
    }

    /// The job it is a run of.
    pub(crate) fn job_id(&self) -> Option<&str> {
        self.job_id.as_deref()
    }

    /// Whether the router feeds the run.
    pub(crate) fn is_fed(&self) -> bool {
        self.feed.is_some()
    }

    /// Whether the run has started ending (it takes no more fed requests).
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// How many requests the run has not finished (queued or out): a fed run's backlog.
    pub(crate) async fn left(&self) -> Result<u64, String> {
        self.frontier
            .stats()
            .await
            .map(|s| s.left)
            .map_err(|e| format!("frontier: {e}"))
    }

    /// Fails the run with `reason` (a timeout, a sink that cannot go on).
    pub(crate) fn fail(&self, reason: String) {
        self.set_fatal(reason);
    }

    /// Notes that the agents in `agents` hold the run's downloader (after a confirmed
    /// allocation at start).
    pub(crate) fn mark_allocated(&self, agents: &[AgentId]) {
        self.allocated_on.lock().extend(agents.iter().cloned());
    }

    /// Waits until the run has ended and is recorded.
    pub(crate) async fn finished(&self) {
        let mut done = self.done.subscribe();
        let _ = done.wait_for(|d| *d).await;
    }

    /// The frontier's counters, those that count from its creation counted from the run's
    /// start on a job frontier (shared by the job's runs).
    pub(crate) async fn frontier_stats(
        &self,
    ) -> Result<silk_frontier::FrontierStats, silk_frontier::FrontierError> {
        let stats = self.frontier.stats().await?;
        let base = self.record.lock().frontier_base;
        Ok(match base {
            Some(base) => base.since(stats),
            None => stats,
        })
    }

    /// The counters now.
    pub(crate) async fn stats(&self, now_ms: u64) -> RunStats {
        let f = self.frontier_stats().await.unwrap_or_default();
        let c = &self.counters;
        let elapsed_s = now_ms.saturating_sub(self.session_start_ms) as f64 / 1000.0;
        let session_success = f.success.saturating_sub(self.success_before);
        RunStats {
            total: f.total,
            left: f.left,
            in_flight: f.in_flight,
            pending: f.pending,
            success: f.success,
            failed: f.failed,
            dropped: f.dropped,
            duplicates: f.duplicates,
            retries: f.retries,
            items: c.items.load(Ordering::Relaxed),
            duplicate_items: c.duplicate_items.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
            bytes_saved: c.bytes_saved.load(Ordering::Relaxed),
            pages_per_s: if elapsed_s > 0.0 {
                session_success as f64 / elapsed_s
            } else {
                0.0
            },
            sent: c.sent.load(Ordering::Relaxed),
            returned: c.returned.load(Ordering::Relaxed),
            late_results: c.late.load(Ordering::Relaxed),
            affinity_kept: c.affinity_kept.load(Ordering::Relaxed),
            affinity_broken: c.affinity_broken.load(Ordering::Relaxed),
            reassigned: c.reassigned.load(Ordering::Relaxed),
            blocked: c.blocked.load(Ordering::Relaxed),
            poisoned: c.poisoned.load(Ordering::Relaxed),
            by_agent: c.by_agent.lock().clone(),
        }
    }

    pub(crate) async fn view(&self, now_ms: u64) -> RunView {
        let record = self.record();
        let stats = match &record.final_stats {
            Some(s) if record.state.is_terminal() => s.clone(),
            _ => self.stats(now_ms).await,
        };
        crate::run::run_view(&record, stats, self.item_log.path().map(Path::to_path_buf))
    }

    /// Another hub holds the run's lease now: the loop lets go (see [`End::Disowned`]).
    pub(crate) fn disown(&self, reason: String) {
        if self.closing.load(Ordering::SeqCst) {
            return;
        }
        self.disowned.lock().get_or_insert(reason);
        self.wake.notify_one();
    }

    /// Whether the run was let go to another hub.
    pub(crate) fn is_disowned(&self) -> bool {
        self.disowned.lock().is_some()
    }

    pub(crate) fn set_fatal(&self, reason: String) {
        self.fatal.lock().get_or_insert(reason);
        self.wake.notify_one();
    }
}
