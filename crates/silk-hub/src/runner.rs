//! One run on the hub: its frontier, its item sink, the requests out at agents, and the
//! dispatch loop that drives it ([`drive`]).
//!
//! A request's path through the hub: leased from the run's frontier (politeness decides
//! when) → routed by the run's [`Allocation`] to a live agent → sent in a `download` batch on
//! the agent's subject (an `allocate` goes first to an agent that has not had the run's
//! downloader from this hub session) → the agent's result comes back on `results` →
//! [`Run::on_results`], with the other results of the run already waiting there: their items
//! written in one write (idempotent on the item key), then their leases acked and the
//! discovered links enqueued in one frontier call.
//!
//! Guarantees and how they are kept:
//! - **Back-pressure**: at most `max_pending` requests out; the run fails when requests are
//!   out (or no agent is live) and nothing returns for `stall_timeout_ms`.
//! - **Late and duplicate results** are recognised by their lease: a result whose lease is
//!   not out any more (acked, expired, dropped because its agent died, from before a hub
//!   restart) is counted in `late_results` and ignored; the frontier would also refuse it.
//! - **Agent death** ([`Run::on_agent_dead`]): its requests out are released back to the
//!   frontier at once (no retry consumed), so they are dispatched again to live agents;
//!   a `chained` run with `on_agent_lost: fail` fails, naming the agent.
//! - **Chained affinity**: links discovered by agent m carry m (`Request::agent`), and the
//!   allocation routes them back to m.
//! - **Crash safety**: items are written before the ack, and links enqueued atomically with
//!   it, so a hub killed at any point re-dispatches what it had not acked; dedup and the
//!   idempotent sink absorb the repeat.
//! - **Shared frontier** (`RunRecord::shared_frontier`): the frontier is a `RedisFrontier`
//!   and the items also go to the store's items table (idempotent on the key) before the
//!   ack, so another hub that adopts the run (`ownership`) has both. A run whose lease was
//!   taken over ends `Disowned`: nothing is written, no agent is released.

use crate::allocation::{Allocation, Route, Strategy};
use crate::dispatch::{self, Desired, End, Step, Turn};
use crate::error::HubError;
use crate::items::{ItemLog, ItemWriter, WriteError};
use crate::live::{Counters, FeedError, Out, Run, RunContext};
use crate::outcomes::OutcomeLog;
use crate::routed::OutcomeLine;
use crate::run::{RunRecord, RunState, RunStats};
use crate::state::HubCore;
use parking_lot::Mutex;
use silk_bus::{Command, FetchOutcome, LeasedRequest, RunResult};
use silk_core::{AgentId, Request};
use silk_frontier::{AckResult, FrontierConfig, FrontierStore, Lease, LeaseId, Outcome};
use silk_store::Level;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// How often a running run logs its progress, ms.
const PROGRESS_LOG_MS: u64 = 10_000;

/// Most requests in one `download` command.
const MAX_BATCH: usize = 64;

impl Run {
    /// Opens the run's frontier and sink from its record; seeds the start URLs when `seed`.
    pub(crate) async fn open(
        cx: &RunContext,
        record: RunRecord,
        seed: bool,
    ) -> Result<Arc<Run>, HubError> {
        let id = record.id.clone();
        let storage = |e: &dyn std::fmt::Display| HubError::RunStorage {
            run: id.clone(),
            reason: e.to_string(),
        };
        let spider = record.compiled_spider()?;
        let mut frontier_config = FrontierConfig::for_spider(&spider);
        // The hub's defaults for what the spider left out, as they were at the run's start.
        if let Some(lease) = record.lease_timeout_ms {
            frontier_config.lease_timeout_ms = lease.max(spider.spec.timeout_ms.saturating_mul(2));
        }
        if let Some(retries) = record.max_retries {
            frontier_config.max_retries = retries;
        }
        let lease_timeout_ms = frontier_config.lease_timeout_ms;
        let max_retries = frontier_config.max_retries;
        let frontier: Arc<dyn FrontierStore> = match &record.shared_frontier {
            _ if record.job_frontier => {
                cx.job_frontiers
                    .open(&cx.job_frontier_env(), &record, frontier_config)
                    .await?
            }
            None => Arc::new(
                silk_frontier::EmbeddedFrontier::open(
                    cx.files.frontier_dir(&id),
                    frontier_config,
                    cx.clock.clone(),
                )
                .map_err(|e| storage(&e))?,
            ),
            Some(prefix) => {
                let Some(url) = &cx.settings.frontier_url else {
                    return Err(storage(&format!(
                        "its frontier is in Redis (prefix `{prefix}`) and this hub has none (start it with --frontier redis://…)"
                    )));
                };
                Arc::new(
                    silk_frontier::RedisFrontier::open(
                        url,
                        prefix,
                        frontier_config,
                        cx.clock.clone(),
                    )
                    .await
                    .map_err(|e| storage(&e))?,
                )
            }
        };
        // From here on, a failure must give the job frontier's handle back.
        let opened = Self::open_on(
            cx,
            record,
            seed,
            spider,
            frontier.clone(),
            lease_timeout_ms,
            max_retries,
        )
        .await;
        if opened.is_err()
            && let Err(e) = frontier.close().await
        {
            tracing::debug!(run = %id, error = %e, "frontier close failed");
        }
        opened
    }

    /// [`Run::open`] once the frontier is open.
    async fn open_on(
        cx: &RunContext,
        mut record: RunRecord,
        seed: bool,
        spider: silk_core::spider::Spider,
        frontier: Arc<dyn FrontierStore>,
        lease_timeout_ms: u64,
        max_retries: u32,
    ) -> Result<Arc<Run>, HubError> {
        let id = record.id.clone();
        let storage = |e: &dyn std::fmt::Display| HubError::RunStorage {
            run: id.clone(),
            reason: e.to_string(),
        };
        let before = frontier.stats().await.map_err(|e| storage(&e))?;
        // A run on its job's frontier counts from the frontier's counters at its first open.
        if record.job_frontier && record.frontier_base.is_none() {
            record.frontier_base = Some(crate::run::FrontierBase::of(&before));
        }
        // The run's one item log (the store's table for a shared frontier, else its file);
        // its count goes on from what the log holds (earlier sessions, other hubs).
        let item_log = ItemLog::of(&record, &cx.files);
        let items = ItemWriter::open(&item_log, &cx.store, &id, &spider.spec.item_key)
            .map_err(|e| storage(&e))?;
        let items_before = items.count().await.map_err(|e| storage(&e))?;
        let counters = Counters::default();
        counters.items.store(items_before, Ordering::Relaxed);
        let outcomes = if cx.settings.record_outcomes {
            Some(
                OutcomeLog::open(&cx.files.run_dir(&id).join(crate::outcomes::FILE))
                    .map_err(|e| storage(&e))?,
            )
        } else {
            None
        };
        // A fed run's requests are the tasks routed to it, not the start URLs.
        if seed && record.feed.is_none() {
            frontier
                .enqueue(spider.seed_requests())
                .await
                .map_err(|e| storage(&e))?;
        }
        // The spider's expansion, from the stored cursor on (a fed run's requests are routed).
        let expansion = match record.feed {
            None => {
                crate::expansion::resolve(
                    &*cx.store,
                    &spider,
                    &record.args,
                    record.program.as_ref(),
                )
                .await?
            }
            Some(_) => None,
        };
        let expand = expansion.map(|e| {
            let batch = silk_frontier::expand::batch_for(record.max_pending.max(1));
            silk_frontier::ExpandFeed::new(e, record.expanded, batch)
        });
        let unexpanded = expand
            .as_ref()
            .map_or(0, |f| f.total().saturating_sub(f.next()));
        let success_before = match &record.frontier_base {
            Some(base) => base.since(before).success,
            None => before.success,
        };
        let quota_paused = record.state == RunState::Paused
            && crate::tenant::quota_paused(record.reason.as_deref());
        let desired = match record.state {
            // Paused by a quota: the run asks again and resumes by itself.
            RunState::Paused if quota_paused => Desired::Run,
            RunState::Paused => Desired::Pause,
            // A cancel the hub did not finish before it stopped.
            RunState::Stopping => Desired::Cancel,
            _ => Desired::Run,
        };
        let now = cx.clock.now_ms();
        let job_id = record.job_id.clone();
        let feed = record.feed.clone();
        let quota = crate::quotas::RunQuota::new(&record, now);
        let record_max_pending = record.max_pending.max(1);
        Ok(Arc::new(Run {
            id,
            record: Mutex::new(record),
            spider,
            frontier,
            items,
            item_log,
            out: Mutex::new(HashMap::new()),
            allocated_on: Mutex::new(BTreeSet::new()),
            delays: Mutex::new(HashSet::new()),
            counters,
            wake: Notify::new(),
            enqueued: Notify::new(),
            fetches: Mutex::new(HashMap::new()),
            fetch_turn: std::sync::atomic::AtomicUsize::new(0),
            desired: watch::channel(desired).0,
            fatal: Mutex::new(None),
            last_progress_ms: AtomicU64::new(now),
            session_start_ms: now,
            success_before,
            closing: std::sync::atomic::AtomicBool::new(false),
            lease_timeout_ms,
            done: watch::channel(false).0,
            version: AtomicU64::new(1),
            persisted: tokio::sync::Mutex::new(0),
            items_written: Notify::new(),
            job_id,
            feed,
            gate: tokio::sync::RwLock::new(true),
            last_fed_ms: AtomicU64::new(now),
            outcomes,
            outcomes_written: Notify::new(),
            max_retries,
            applying: tokio::sync::RwLock::new(()),
            losses: Mutex::new(HashMap::new()),
            disowned: Mutex::new(None),
            quota,
            quota_paused: std::sync::atomic::AtomicBool::new(quota_paused),
            demand: AtomicU64::new(record_max_pending),
            expand: tokio::sync::Mutex::new(expand),
            unexpanded: AtomicU64::new(unexpanded),
            // Set by a program run's driver at its first turn.
            fetch_room: Mutex::new(crate::live::FetchRoom::default()),
            fetch_room_set: Notify::new(),
        }))
    }

    /// Enqueues requests routed to the run (`silk.JobOutbound`); how many were new (the
    /// others were duplicates of requests fed before: the same delivery twice).
    pub(crate) async fn feed(
        &self,
        cx: &RunContext,
        requests: Vec<Request>,
    ) -> Result<u64, FeedError> {
        let open = self.gate.read().await;
        if !*open || self.is_closing() {
            return Err(FeedError::Closed);
        }
        let enqueued = self
            .frontier
            .enqueue(requests)
            .await
            .map_err(|e| FeedError::Frontier(e.to_string()))?;
        self.last_fed_ms.store(cx.clock.now_ms(), Ordering::SeqCst);
        drop(open);
        self.wake.notify_one();
        Ok(enqueued.added)
    }

    /// When the frontier runs short, feeds it the expansion's next batch and stores the
    /// cursor (after the batch is in: a crash feeds it again, and dedup drops the repeat);
    /// whether it fed any.
    pub(crate) async fn expand_more(&self, cx: &RunContext) -> Result<bool, String> {
        let mut feed = self.expand.lock().await;
        let Some(feed) = feed.as_mut() else {
            return Ok(false);
        };
        if !feed
            .top_up(&self.spider, &*self.frontier)
            .await
            .map_err(|e| format!("frontier: {e}"))?
        {
            return Ok(false);
        }
        let next = feed.next();
        self.unexpanded
            .store(feed.total().saturating_sub(next), Ordering::SeqCst);
        // Not stored (the store is away): the next change of the record stores it; a crash
        // before that feeds the batch again, and dedup drops it.
        if let Err(e) = self.update(cx, |r| r.expanded = next).await {
            tracing::warn!(run = %self.id, error = %e, "the expansion's cursor not stored yet");
        }
        self.enqueued.notify_waiters();
        Ok(true)
    }

    /// Changes the record (under its lock: two writers never interleave), then stores it.
    pub(crate) async fn update(
        &self,
        cx: &RunContext,
        f: impl FnOnce(&mut RunRecord),
    ) -> Result<(), HubError> {
        {
            let mut r = self.record.lock();
            f(&mut r);
            self.version.fetch_add(1, Ordering::SeqCst);
        }
        self.persist(cx).await
    }

    /// Stores the latest record unless a newer or equal version is stored already.
    async fn persist(&self, cx: &RunContext) -> Result<(), HubError> {
        let mut stored = self.persisted.lock().await;
        let (record, version) = {
            let r = self.record.lock();
            (r.clone(), self.version.load(Ordering::SeqCst))
        };
        if version <= *stored {
            return Ok(());
        }
        if let Err(e) = cx.repo.save(&record).await {
            if let HubError::OwnedElsewhere { hub: holder, .. } = &e {
                self.disown(format!("its lease is held by {holder}"));
            }
            return Err(e);
        }
        *stored = version;
        Ok(())
    }

    /// Asks the run to pause, resume or cancel. The state check and the change happen under
    /// the record's lock, and a run that is ending refuses, so a control never overwrites a
    /// final state. Cancelling a run that is already being cancelled is not an error.
    pub(crate) async fn control(&self, cx: &RunContext, desired: Desired) -> Result<(), HubError> {
        let action = match desired {
            Desired::Pause => "pause",
            Desired::Run => "resume",
            Desired::Cancel => "cancel",
        };
        {
            let mut r = self.record.lock();
            let state = r.state;
            let closing = self.closing.load(Ordering::SeqCst);
            if desired == Desired::Cancel && state == RunState::Stopping {
                return Ok(());
            }
            let by_quota = self.quota_paused.load(Ordering::SeqCst);
            if desired == Desired::Run && by_quota && !closing {
                // Paused by a quota, not by a user: it resumes by itself when the quota
                // allows.
                return Ok(());
            }
            let ok = !closing
                && match desired {
                    Desired::Pause => state == RunState::Running || by_quota,
                    Desired::Run => state == RunState::Paused,
                    Desired::Cancel => !state.is_terminal(),
                };
            if !ok {
                return Err(HubError::WrongState {
                    run: self.id.clone(),
                    state: if closing && !state.is_terminal() {
                        "ending".into()
                    } else {
                        state.to_string()
                    },
                    action: action.into(),
                });
            }
            r.state = match desired {
                Desired::Pause => RunState::Paused,
                Desired::Run => RunState::Running,
                Desired::Cancel => RunState::Stopping,
            };
            if by_quota {
                // A user's pause or cancel takes over from the quota's.
                self.quota_paused.store(false, Ordering::SeqCst);
                r.reason = None;
            }
            self.version.fetch_add(1, Ordering::SeqCst);
            // Under the lock: a turn that looks at the quota pause sees both or neither.
            self.desired.send_replace(desired);
        }
        self.wake.notify_one();
        let what = match desired {
            Desired::Pause => "paused by a user: no new requests are sent; those out finish",
            Desired::Run => "resumed by a user",
            Desired::Cancel => "cancel requested by a user",
        };
        cx.logs.hub(&self.id, Level::Info, what);
        self.persist(cx).await
    }

    /// The pages it fetched (by agents for a spider run, through the download center for a
    /// program run) and the bytes it downloaded in this hub session: what its quota counts.
    pub(crate) fn session_counts(&self) -> (u64, u64) {
        (
            self.counters.succeeded.load(Ordering::Relaxed)
                + self.counters.fetched.load(Ordering::Relaxed),
            self.counters.bytes.load(Ordering::Relaxed),
        )
    }

    /// Shows the quotas in the run's record: the slice it holds, and `paused` with the reason
    /// while a quota holds it (`running` again when it does not).
    /// `goes_on`: the turn dispatches (only such a turn pauses or resumes the run).
    pub(crate) async fn quota_changes(
        &self,
        cx: &RunContext,
        goes_on: bool,
        blocked: Option<&str>,
    ) -> Result<(), HubError> {
        let slice = self.quota.changed_slice().await;
        let mut said = None;
        let changed = {
            let mut r = self.record.lock();
            // Under the record's lock, like `control`, which clears it there.
            let was = self.quota_paused.load(Ordering::SeqCst);
            let mut changed = false;
            if let Some(slice) = slice {
                r.quota = slice;
                changed = true;
            }
            let running = goes_on && *self.desired.borrow() == Desired::Run && !self.is_closing();
            match blocked {
                Some(reason) if running && r.state == RunState::Running => {
                    r.state = RunState::Paused;
                    r.reason = Some(reason.to_owned());
                    self.quota_paused.store(true, Ordering::SeqCst);
                    said = Some((Level::Warn, format!("paused: {reason}")));
                    changed = true;
                }
                None if was && running && r.state == RunState::Paused => {
                    r.state = RunState::Running;
                    r.reason = None;
                    self.quota_paused.store(false, Ordering::SeqCst);
                    said = Some((Level::Info, "resumed: the quota allows again".to_owned()));
                    changed = true;
                }
                _ => {}
            }
            if changed {
                self.version.fetch_add(1, Ordering::SeqCst);
            }
            changed
        };
        if let Some((level, text)) = said {
            tracing::info!(run = %self.id, "{text}");
            cx.logs.hub(&self.id, level, text);
        }
        if changed {
            self.persist(cx).await?;
        }
        Ok(())
    }

    /// Applies a result of one of the run's requests (see [`Run::on_results`]).
    pub(crate) async fn on_result(&self, cx: &RunContext, result: &RunResult) {
        self.on_results(cx, &[result]).await;
    }

    /// Applies results of the run's requests pulled from the bus together: the items of all
    /// of them in one write (one transaction in the store), their final outcomes, then one
    /// frontier call that acks every lease and enqueues every discovered link (one write,
    /// one Redis script). Items are written before the ack as for a single result: a crash in
    /// between re-dispatches the batch, and the idempotent sink absorbs the repeat. A result
    /// whose lease is not out any more (late, duplicate) is counted and ignored.
    pub(crate) async fn on_results(&self, cx: &RunContext, results: &[&RunResult]) {
        let _applying = self.applying.read().await;
        // Counted as applying from before they leave the requests out until this call
        // returns, after their success is counted: the quota never sees one in neither.
        let n = results.len() as u64;
        self.counters.applying.fetch_add(n, Ordering::SeqCst);
        let _applied = Applied(&self.counters.applying, n);
        let closing = self.closing.load(Ordering::SeqCst);
        let mut taken: Vec<(LeaseId, Out, &RunResult)> = Vec::with_capacity(results.len());
        for &result in results {
            let out = Some(result.lease_id)
                .filter(|_| !closing)
                .and_then(|l| self.out.lock().remove(&l).map(|o| (l, o)));
            let Some((lease, out)) = out else {
                self.counters.late.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(run = %self.id, lease = %result.lease_id, agent = %result.agent, "late or duplicate result ignored");
                continue;
            };
            self.count_returned(&out, result);
            taken.push((lease, out, result));
        }
        if taken.is_empty() {
            return;
        }
        self.last_progress_ms
            .store(cx.clock.now_ms(), Ordering::Relaxed);
        let items: std::borrow::Cow<'_, [serde_json::Value]> = match &taken[..] {
            [(_, _, one)] => std::borrow::Cow::Borrowed(&one.outcome.items),
            many => many
                .iter()
                .flat_map(|(_, _, r)| r.outcome.items.iter().cloned())
                .collect(),
        };
        match self
            .items
            .write(&items, cx.clock.now_ms(), self.max_items())
            .await
        {
            Ok(wrote) => {
                let c = &self.counters;
                c.items.fetch_add(wrote.new, Ordering::Relaxed);
                c.duplicate_items
                    .fetch_add(wrote.duplicates, Ordering::Relaxed);
                if wrote.no_key > 0 {
                    tracing::warn!(run = %self.id, key = %self.spider.spec.item_key, n = wrote.no_key, "items without a key; not written");
                }
            }
            Err(WriteError::File(reason)) => {
                // The items file failed: the leases stay out and expire; stop the run
                // rather than ack pages whose items were lost.
                self.set_fatal(reason);
                return;
            }
            Err(WriteError::Store(e)) => {
                // Not acked: the leases expire and the pages are fetched again.
                for (_, out, _) in &taken {
                    tracing::warn!(run = %self.id, url = %out.request.url, error = %e, "items not stored; the page will be fetched again");
                }
                let what = match &taken[..] {
                    [(_, out, _)] => out.request.url.to_string(),
                    many => format!("{} pages ({} …)", many.len(), many[0].1.request.url),
                };
                cx.logs.hub(
                    &self.id,
                    Level::Warn,
                    format!("items of {what} not stored ({e}); fetched again"),
                );
                return;
            }
        }
        if !items.is_empty() {
            // After the write: a sink woken now reads the new lines.
            self.items_written.notify_waiters();
        }
        let chained = matches!(self.record.lock().strategy, Strategy::Chained(_));
        let mut acks = Vec::with_capacity(taken.len());
        let mut discovered = Vec::new();
        for (lease, out, result) in &taken {
            let o = &result.outcome;
            if let (Some(delay), Some(key)) = (o.crawl_delay_ms, out_host(&out.request)) {
                let new = self.delays.lock().insert(key.clone());
                if new && let Err(e) = self.frontier.set_host_delay(&key, delay).await {
                    tracing::warn!(run = %self.id, host = %key, error = %e, "crawl-delay not recorded");
                }
            }
            if o.error.as_ref().is_some_and(|e| e.code == "no_downloader") {
                // The agent lost the run's downloader (released it when idle): allocate
                // again.
                self.allocated_on.lock().remove(&result.agent);
            }
            let (outcome, links) = classify(&out.request, o, &result.agent, chained);
            if self.outcomes.is_some() && self.is_final(&out.request, &outcome) {
                // Before the ack, as items are: a crash in between writes it again.
                if let Err(reason) =
                    self.write_outcome(cx, &out.request, &result.agent, o, &outcome)
                {
                    self.set_fatal(reason);
                    return;
                }
            }
            acks.push((*lease, outcome));
            discovered.extend(links);
        }
        match self.frontier.ack_many_and_enqueue(acks, discovered).await {
            Ok((acked, _)) => {
                let succeeded = acked.iter().filter(|a| **a == AckResult::Succeeded).count() as u64;
                self.counters
                    .succeeded
                    .fetch_add(succeeded, Ordering::Relaxed);
            }
            Err(e) => self.set_fatal(format!("frontier: {e}")),
        }
        self.wake.notify_one();
    }

    /// Counts a result that came back for a request out (by agent, affinity, bytes, bans).
    fn count_returned(&self, out: &Out, result: &RunResult) {
        self.counters.returned.fetch_add(1, Ordering::Relaxed);
        *self
            .counters
            .by_agent
            .lock()
            .entry(result.agent.to_string())
            .or_insert(0) += 1;
        match &out.request.agent {
            Some(bound) if bound == &result.agent => {
                self.counters.affinity_kept.fetch_add(1, Ordering::Relaxed);
            }
            Some(bound) => {
                self.counters
                    .affinity_broken
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(run = %self.id, url = %out.request.url, bound = %bound, fetched_by = %result.agent, "a request bound to one agent was fetched by another");
            }
            None => {}
        }
        let o = &result.outcome;
        if o.error.as_ref().is_some_and(|e| e.code == "proxy_banned") {
            self.counters.blocked.fetch_add(1, Ordering::Relaxed);
        }
        self.counters.bytes.fetch_add(o.bytes, Ordering::Relaxed);
        self.counters
            .bytes_saved
            .fetch_add(o.bytes_saved, Ordering::Relaxed);
    }

    /// Whether `outcome` finishes the request: done (a redirect hop too, whose target is
    /// another request that carries on), failed, dropped, or a retry past `max_retries`.
    fn is_final(&self, request: &Request, outcome: &Outcome) -> bool {
        match outcome {
            Outcome::Done | Outcome::Failed { .. } | Outcome::Dropped { .. } => true,
            Outcome::Retry { .. } => request.retries >= self.max_retries,
            Outcome::Release { .. } => false,
        }
    }

    /// Writes a request's final outcome line (with `record_outcomes`: for the router, and
    /// for the archive of finished requests).
    fn write_outcome(
        &self,
        cx: &RunContext,
        request: &Request,
        agent: &AgentId,
        o: &FetchOutcome,
        outcome: &Outcome,
    ) -> Result<(), String> {
        let ok = matches!(outcome, Outcome::Done);
        let verdict = match outcome {
            Outcome::Done => "done",
            Outcome::Dropped { .. } => "dropped",
            Outcome::Failed { .. } | Outcome::Retry { .. } | Outcome::Release { .. } => "failed",
        };
        let Some(log) = &self.outcomes else {
            return Ok(());
        };
        let (tenant, job, job_id, spider_name) = {
            let r = self.record.lock();
            (
                r.tenant.clone(),
                r.job_name.clone(),
                r.job_id.clone(),
                r.spider_name.clone(),
            )
        };
        let line = OutcomeLine {
            v: 1,
            ok,
            http_code: o.status,
            error_code: o.error.as_ref().map(|e| e.code.to_string()),
            error_msg: o
                .error
                .as_ref()
                .map(|e| e.message.clone())
                .unwrap_or_default(),
            url: request.url.clone(),
            method: request.method.as_str().to_owned(),
            depth: request.depth,
            retries: request.retries,
            items: o.items.len() as u64,
            links: o.links.len() as u64,
            bytes: o.bytes,
            fetch_ms: o.timings.fetch_ms,
            agent: agent.to_string(),
            run: self.id.to_string(),
            tenant,
            job,
            job_id,
            spider_name,
            time_ms: cx.clock.now_ms(),
            task: request
                .meta
                .get(crate::run::TASK_META)
                .and_then(|t| t.as_object())
                .cloned(),
            outcome: verdict.to_owned(),
            salt: request.dedup_salt.clone(),
            redirect: ok && o.error.is_none() && o.redirects > request.redirects,
        };
        log.append(&line)
            .map_err(|reason| format!("outcomes file: {reason}"))?;
        self.outcomes_written.notify_waiters();
        Ok(())
    }

    /// Writes the final outcome of a request that ended with no result from its agent
    /// (its last lease expired, or its agent was lost), when it was its last attempt.
    fn write_lost_outcome(&self, cx: &RunContext, out: &Out, code: &str, retry: bool) {
        if self.outcomes.is_none() || (retry && out.request.retries < self.max_retries) {
            return;
        }
        let o = FetchOutcome {
            error: Some(silk_bus::ResultError {
                code: code.into(),
                message: format!(
                    "{}: no result from agent `{}` ({code})",
                    out.request.url, out.agent
                ),
                retryable: retry,
            }),
            ..FetchOutcome::default()
        };
        let failed = Outcome::Failed {
            reason: code.into(),
        };
        if let Err(reason) = self.write_outcome(cx, &out.request, &out.agent, &o, &failed) {
            self.set_fatal(reason);
        }
    }

    /// An agent was declared dead: release its requests out (they go to live agents), or
    /// fail the run when it is chained with `on_agent_lost: fail` and the agent was one of
    /// its own.
    pub(crate) async fn on_agent_dead(self: &Arc<Self>, cx: &RunContext, agent: &AgentId) {
        self.allocated_on.lock().remove(agent);
        if self.record.lock().is_program() {
            crate::programs::on_agent_dead(cx, self, agent).await;
        }
        let (strategy, policy, allocated) = {
            let r = self.record.lock();
            let allocated = r
                .allocation
                .as_ref()
                .is_some_and(|a| a.agents().contains(agent));
            (r.strategy, r.on_agent_lost, allocated)
        };
        // A request whose agent keeps dying while fetching it is poison (it may be what
        // kills them): after `poison_after_losses` losses it fails instead of going back.
        let bound = cx.settings.poison_after_losses.max(1);
        let poisoned: Mutex<Vec<String>> = Mutex::default();
        let lost = self.take_out(
            |o| &o.agent == agent,
            |o| {
                let key = format!(
                    "{}#{}",
                    o.request.url,
                    o.request.dedup_salt.as_deref().unwrap_or("")
                );
                let losses = {
                    let mut counts = self.losses.lock();
                    let n = counts.entry(key).or_insert(0);
                    *n += 1;
                    *n
                };
                if losses >= bound {
                    self.counters.poisoned.fetch_add(1, Ordering::Relaxed);
                    self.write_lost_outcome(cx, o, "poison", false);
                    poisoned.lock().push(o.request.url.clone());
                    Outcome::Failed {
                        reason: "poison".into(),
                    }
                } else {
                    Outcome::Release {
                        reason: "agent_lost".into(),
                    }
                }
            },
            |_| {},
        );
        for url in poisoned.into_inner() {
            tracing::warn!(run = %self.id, url = %url, losses = bound, "poison request given up: its agent was lost while fetching it every time");
            cx.logs.hub(
                &self.id,
                Level::Error,
                format!(
                    "{url} failed as poison: its agent was lost while fetching it {bound} times (poison_after_losses)"
                ),
            );
        }
        if !lost.is_empty() {
            tracing::info!(run = %self.id, agent = %agent, requests = lost.len(), "agent dead: its requests go back to the frontier");
            cx.logs.hub(
                &self.id,
                Level::Warn,
                format!(
                    "agent `{agent}` is dead: its {} request(s) out go back to the frontier",
                    lost.len()
                ),
            );
            if let Err(e) = self.frontier.ack_many(lost).await {
                self.set_fatal(format!("frontier: {e}"));
            }
        }
        if allocated
            && matches!(strategy, Strategy::Chained(_))
            && policy == crate::allocation::OnAgentLost::Fail
        {
            self.set_fatal(format!(
                "agent `{agent}` was lost and the run is {strategy} with on_agent_lost: fail"
            ));
        }
        self.wake.notify_one();
    }

    /// Requests out whose lease is about to expire with no result: acked `Retry`
    /// (`lease_timeout`) just before the deadline, so that each silent dispatch uses up one of
    /// the request's retries (after `max_retries` it fails) instead of being re-dispatched
    /// forever. A result that comes later is late.
    /// Removes the requests out that match `which`, paired with the ack each gets.
    /// `each` sees every request taken, before its ack.
    fn take_out(
        &self,
        which: impl Fn(&Out) -> bool,
        outcome: impl Fn(&Out) -> Outcome,
        mut each: impl FnMut(&Out),
    ) -> Vec<(LeaseId, Outcome)> {
        let mut out = self.out.lock();
        let ids: Vec<LeaseId> = out
            .iter()
            .filter(|(_, o)| which(o))
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| out.remove(&id).map(|o| (id, o)))
            .map(|(id, o)| {
                each(&o);
                (id, outcome(&o))
            })
            .collect()
    }

    /// How long before its lease deadline a silent request is retried.
    fn expiry_margin_ms(&self) -> u64 {
        (self.lease_timeout_ms / 10).clamp(1, 1_000)
    }

    async fn expire_silent(&self, cx: &RunContext, now_ms: u64) -> Result<(), String> {
        let margin = self.expiry_margin_ms();
        let expired = self.take_out(
            |o| o.deadline_ms.saturating_sub(margin) <= now_ms,
            |_| Outcome::Retry {
                reason: "lease_timeout".into(),
            },
            // Its last attempt: the run's outcome for it is this.
            |o| self.write_lost_outcome(cx, o, "lease_timeout", true),
        );
        if expired.is_empty() {
            return Ok(());
        }
        tracing::debug!(run = %self.id, expired = expired.len(), "requests out with no result before their lease timeout are retried");
        self.last_progress_ms
            .store(cx.clock.now_ms(), Ordering::Relaxed);
        self.frontier
            .ack_many(expired)
            .await
            .map(|_| ())
            .map_err(|e| format!("frontier: {e}"))
    }

    /// Waits for a result, a control change, `timeout`, or the hub stopping — and never past
    /// the moment the first silent request out must be retried (a wait that overslept into
    /// its lease deadline would let the frontier re-queue it without using a retry).
    async fn wait(&self, cx: &RunContext, timeout: Duration) {
        let margin = self.expiry_margin_ms();
        let first_expiry = self
            .out
            .lock()
            .values()
            .map(|o| o.deadline_ms.saturating_sub(margin))
            .min();
        let timeout = match first_expiry {
            Some(at) => timeout.min(Duration::from_millis(
                at.saturating_sub(cx.clock.now_ms()).max(1),
            )),
            None => timeout,
        };
        let mut desired = self.desired.subscribe();
        let mut stop = cx.stop.clone();
        tokio::select! {
            () = self.wake.notified() => {}
            _ = desired.changed() => {}
            _ = stop.changed() => {}
            () = tokio::time::sleep(timeout) => {}
        }
    }

    async fn dispatch(&self, cx: &RunContext) -> Result<End, String> {
        let (max_pending, stall_ms) = {
            let r = self.record.lock();
            // A silent request is retried at its lease timeout; the stall timeout is about
            // nothing coming back at all, so it is never shorter than that.
            (
                r.max_pending.max(1) as usize,
                r.stall_timeout_ms.max(self.lease_timeout_ms + 1_000),
            )
        };
        // A fed run's volume is the router's to decide: no page or time limit.
        let fed_idle_ms = self.feed.as_ref().map(|f| f.idle_ms);
        let max_pages = self.spider.spec.max_pages.filter(|_| fed_idle_ms.is_none());
        let max_items = self.max_items();
        let deadline = self
            .spider
            .spec
            .max_duration_ms
            .filter(|_| fed_idle_ms.is_none())
            .map(|ms| {
                self.record
                    .lock()
                    .started_ms
                    .unwrap_or(0)
                    .saturating_add(ms)
            });
        let mut progress_logged_ms = cx.clock.now_ms();
        loop {
            let now = cx.clock.now_ms();
            let stopping = *cx.stop.borrow();
            let disowned = self.disowned.lock().clone();
            let fatal = self.fatal.lock().take();
            let desired = *self.desired.borrow();
            // Only a run that goes on logs progress, expires silent requests and asks its
            // frontier; the others only end or wait.
            let goes_on =
                !stopping && disowned.is_none() && fatal.is_none() && desired == Desired::Run;
            if goes_on && now.saturating_sub(progress_logged_ms) >= PROGRESS_LOG_MS {
                progress_logged_ms = now;
                let s = self.stats(now).await;
                cx.logs.hub(
                    &self.id,
                    Level::Info,
                    format!(
                        "progress: success {}, failed {}, left {} of {}, in flight {}, items {}, {:.1} pages/s",
                        s.success, s.failed, s.left, s.total, s.in_flight, s.items, s.pages_per_s
                    ),
                );
            }
            if goes_on {
                self.expire_silent(cx, now).await?;
            }
            let out = self.out.lock().len();
            // Read in this order (out, applying, successes), a result moving from one to
            // the next is counted twice rather than not at all: the quota's room is never
            // too large.
            let applying = self.counters.applying.load(Ordering::SeqCst) as usize;
            let session = self.session_counts();
            let still_out = (out + applying) as u64;
            let quota = if goes_on {
                let dispatching = self.state() == RunState::Running;
                match self
                    .quota
                    .turn(
                        &*cx.store,
                        self.id.as_str(),
                        now,
                        session,
                        still_out,
                        dispatching,
                    )
                    .await
                {
                    Ok(turn) => turn,
                    Err(e) => {
                        // The store is away: nothing new this turn, the next one asks again.
                        tracing::warn!(run = %self.id, error = %e, "quotas not read: no new request this turn");
                        crate::quotas::QuotaTurn {
                            room: Some(0),
                            ..crate::quotas::QuotaTurn::default()
                        }
                    }
                }
            } else {
                // Paused or ending: the slice it holds goes back, but for what is still out.
                // A run another hub took carries its slice there: nothing goes back here.
                let taken = self.disowned.lock().is_some();
                if !taken
                    && let Err(e) = self
                        .quota
                        .release(&*cx.store, now, session, still_out)
                        .await
                {
                    tracing::warn!(run = %self.id, error = %e, "quota slice not given back (it is at the next turn)");
                }
                crate::quotas::QuotaTurn::default()
            };
            self.quota_changes(cx, goes_on, quota.blocked.as_deref())
                .await
                .map_err(|e| e.to_string())?;
            let max_pages = match (max_pages, quota.pages_per_run) {
                (Some(a), Some(b)) if fed_idle_ms.is_none() => Some(a.min(b)),
                (None, Some(b)) if fed_idle_ms.is_none() => Some(b),
                (a, _) => a,
            };
            let (allocated, pools) = {
                let r = self.record.lock();
                let allocated: Vec<AgentId> = r
                    .allocation
                    .as_ref()
                    .map(|a| a.agents().to_vec())
                    .unwrap_or_default();
                (allocated, r.pools.clone())
            };
            let live = cx.agents.agents_for_run(&allocated, &pools);
            let fed_drained = goes_on
                && fed_idle_ms.is_some()
                && live.is_empty()
                && out == 0
                && self.left().await? == 0;
            // The fair share of the slots of the agents it may use, between the runs (of
            // every tenant) that want them.
            let fair_cap = if goes_on && quota.blocked.is_none() && !live.is_empty() {
                let want = crate::fair::Want {
                    run: self.id.to_string(),
                    tenant: self.record.lock().tenant.clone(),
                    weight: quota.weight,
                    demand: self.demand.load(Ordering::Relaxed).max(out as u64),
                    agents: live.iter().map(|a| a.to_string()).collect(),
                    tenant_slots: quota.agent_slots,
                };
                cx.fair.cap(want, cx.agents.capacity(&live), now)
            } else {
                cx.fair.leave(self.id.as_str());
                None
            };
            let turn = Turn {
                now_ms: now,
                stopping,
                disowned,
                fatal,
                desired,
                success: self.success_before + self.counters.succeeded.load(Ordering::Relaxed),
                out,
                applying,
                max_pending,
                max_pages,
                items: self.counters.items.load(Ordering::Relaxed),
                max_items,
                deadline_ms: deadline,
                stall_ms,
                stalled_for_ms: now.saturating_sub(self.last_progress_ms.load(Ordering::Relaxed)),
                live_agents: live.len(),
                fed_idle_ms,
                fed_drained,
                quota_room: quota.room,
                quota_blocked: quota.blocked,
                fair_cap,
            };
            let step = match dispatch::decide(&turn) {
                Step::Lease(room) => {
                    let leases = self
                        .frontier
                        .lease(room)
                        .await
                        .map_err(|e| format!("frontier: {e}"))?;
                    // What it wants: all it may have out while the frontier gives all it
                    // asks for; once it gives less (politeness, nothing left), twice what
                    // it has and one more, so that it can grow again.
                    let has = (out + leases.len()) as u64;
                    let demand = if leases.len() >= room {
                        max_pending as u64
                    } else {
                        (has * 2 + 1).min(max_pending as u64)
                    };
                    self.demand.store(demand, Ordering::Relaxed);
                    // The frontier runs short: the expansion's next batch goes in.
                    if leases.len() < room && self.expand_more(cx).await? && leases.is_empty() {
                        continue;
                    }
                    if !leases.is_empty() {
                        if out == 0 {
                            self.last_progress_ms.store(now, Ordering::Relaxed);
                        }
                        self.send(cx, leases, &live).await?;
                        continue;
                    }
                    let next = if out == 0 {
                        self.frontier
                            .next_ready_ms()
                            .await
                            .map_err(|e| format!("frontier: {e}"))?
                    } else {
                        self.frontier.next_ready_ms().await.ok().flatten()
                    };
                    let step = dispatch::after_empty_lease(now, out, next, fed_idle_ms);
                    if matches!(step, Step::End(End::Succeeded)) {
                        // Nothing left: the gate closes under its write lock once that
                        // still holds, so requests fed meanwhile (a requeue) are fetched.
                        let mut open = self.gate.write().await;
                        let fed = self
                            .frontier
                            .next_ready_ms()
                            .await
                            .map_err(|e| format!("frontier: {e}"))?;
                        if fed.is_some() {
                            continue;
                        }
                        *open = false;
                    }
                    step
                }
                step => step,
            };
            match step {
                Step::End(end) => {
                    // Nothing is fed into a run that ends (a limit, a deadline, a stop):
                    // what a feed put in before this is in the frontier the run keeps.
                    *self.gate.write().await = false;
                    return Ok(end);
                }
                Step::Fail(reason) => {
                    *self.gate.write().await = false;
                    return Err(reason);
                }
                Step::Wait { ms, progress } => {
                    if progress {
                        self.last_progress_ms.store(now, Ordering::Relaxed);
                    }
                    self.wait(cx, Duration::from_millis(ms)).await;
                }
                Step::Idle(idle_ms) => {
                    if let Some(end) = self.idle(cx, idle_ms).await? {
                        return Ok(end);
                    }
                }
                // (`after_empty_lease` never asks for a lease: the next turn decides.)
                Step::Lease(_) => {}
            }
        }
    }

    /// A fed run with nothing queued or out: waits for more tasks, or ends (closing its
    /// gate under the write lock, once nothing is left) after `idle_ms` without any.
    async fn idle(&self, cx: &RunContext, idle_ms: u64) -> Result<Option<End>, String> {
        let now = cx.clock.now_ms();
        let since = self
            .last_fed_ms
            .load(Ordering::SeqCst)
            .max(self.last_progress_ms.load(Ordering::Relaxed));
        let idle_for = now.saturating_sub(since);
        if idle_for < idle_ms {
            let wait = (idle_ms - idle_for).clamp(1, 1_000);
            self.wait(cx, Duration::from_millis(wait)).await;
            return Ok(None);
        }
        let mut open = self.gate.write().await;
        if self.left().await? == 0 && self.out.lock().is_empty() {
            *open = false;
            // Nothing is out, so no result can come late; the feeder looks for another run.
            self.closing.store(true, Ordering::SeqCst);
            cx.logs.hub(
                &self.id,
                Level::Info,
                format!(
                    "nothing fed for {:.1} s: the run ends (the next routed task starts a new run)",
                    idle_ms as f64 / 1000.0
                ),
            );
            return Ok(Some(End::Succeeded));
        }
        Ok(None)
    }

    /// Routes leases to agents and sends them.
    async fn send(
        &self,
        cx: &RunContext,
        leases: Vec<Lease>,
        live: &[AgentId],
    ) -> Result<(), String> {
        let mut allocation: Allocation = match self.record.lock().allocation.clone() {
            Some(a) => a,
            None => return Err("the run has no allocation".into()),
        };
        let generation = allocation.generation();
        let mut batches: BTreeMap<AgentId, Vec<LeasedRequest>> = BTreeMap::new();
        let mut acks = Vec::new();
        let mut lost = None;
        {
            let mut rng = cx.rng.lock();
            let mut out = self.out.lock();
            for lease in leases {
                match allocation.route(&lease.request, live, &mut *rng) {
                    Route::To(agent) => {
                        let mut request = lease.request.clone();
                        if request.agent.as_ref().is_some_and(|bound| bound != &agent) {
                            // Its agent was lost and the policy is reassign: bound to the
                            // new one from now on.
                            self.counters.reassigned.fetch_add(1, Ordering::Relaxed);
                            request.agent = Some(agent.clone());
                        }
                        out.insert(
                            lease.id,
                            Out {
                                agent: agent.clone(),
                                request,
                                deadline_ms: lease.deadline_ms,
                            },
                        );
                        batches.entry(agent).or_default().push(LeasedRequest {
                            lease_id: lease.id,
                            request: lease.request,
                        });
                    }
                    Route::Lost(agent) => {
                        let lost_out = Out {
                            agent: agent.clone(),
                            request: lease.request.clone(),
                            deadline_ms: lease.deadline_ms,
                        };
                        self.write_lost_outcome(cx, &lost_out, "agent_lost", false);
                        acks.push((
                            lease.id,
                            Outcome::Failed {
                                reason: "agent_lost".into(),
                            },
                        ));
                        lost.get_or_insert(agent);
                    }
                    Route::Unavailable => acks.push((
                        lease.id,
                        Outcome::Release {
                            reason: "no_live_agent".into(),
                        },
                    )),
                }
            }
        }
        if allocation.generation() != generation {
            tracing::info!(run = %self.id, agents = %silk_core::ids::list(allocation.agents()), "agents reassigned");
            let agents = allocation.agents().to_vec();
            cx.logs.hub(
                &self.id,
                Level::Warn,
                format!("agents reassigned: now {:?}", allocation.agents()),
            );
            self.update(cx, |r| r.allocation = Some(allocation.clone()))
                .await
                .map_err(|e| e.to_string())?;
            self.allocated_on.lock().retain(|a| agents.contains(a));
        }
        if !acks.is_empty() {
            self.frontier
                .ack_many(acks)
                .await
                .map_err(|e| format!("frontier: {e}"))?;
        }
        if let Some(agent) = lost {
            return Err(format!(
                "agent `{agent}` was lost and the run's on_agent_lost policy is fail"
            ));
        }
        for (agent, batch) in batches {
            self.ensure_allocated(cx, &agent).await?;
            let count = batch.len() as u64;
            let mut chunks = batch.into_iter().peekable();
            while chunks.peek().is_some() {
                let chunk: Vec<LeasedRequest> = chunks.by_ref().take(MAX_BATCH).collect();
                let leases: Vec<LeaseId> = chunk.iter().map(|l| l.lease_id).collect();
                let command = Command::Download {
                    run: self.id.clone(),
                    batch: chunk,
                    // Its results come back on this hub's own subject, `results.{hub id}`.
                    reply_to: Some(cx.hub_id.to_string()),
                };
                if let Err(e) = cx.agents.send_command(&agent, command).await {
                    // Give the leases back before failing: nothing accepted is lost.
                    let back: Vec<(LeaseId, Outcome)> = {
                        let mut out = self.out.lock();
                        leases
                            .iter()
                            .filter(|l| out.remove(l).is_some())
                            .map(|l| {
                                (
                                    *l,
                                    Outcome::Release {
                                        reason: "bus_unavailable".into(),
                                    },
                                )
                            })
                            .collect()
                    };
                    let _ = self.frontier.ack_many(back).await;
                    return Err(format!("bus: cannot send requests to agent `{agent}`: {e}"));
                }
            }
            self.counters.sent.fetch_add(count, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Sends the run's `allocate` to an agent that has not had it in this hub session (the
    /// bus keeps the order of one agent's commands, so it is there before the downloads).
    async fn ensure_allocated(&self, cx: &RunContext, agent: &AgentId) -> Result<(), String> {
        if self.allocated_on.lock().contains(agent) {
            return Ok(());
        }
        let record = self.record();
        let config = downloader_config(&record);
        cx.agents
            .send_command(
                agent,
                Command::Allocate {
                    run: self.id.clone(),
                    config,
                    allow_networks: record.allow_networks,
                },
            )
            .await
            .map_err(|e| format!("bus: cannot allocate agent `{agent}`: {e}"))?;
        self.allocated_on.lock().insert(agent.clone());
        let known = self.record.lock().agents.contains(agent);
        if !known {
            let _ = self
                .update(cx, |r| {
                    r.agents.push(agent.clone());
                    r.agents.sort();
                })
                .await;
        }
        Ok(())
    }

    /// Why a run that reached its end counts as failed (its `fail_if`, see `health`), if it
    /// does. A fed run is not judged: it ends when the router stops feeding it, and each of
    /// its requests' outcomes goes back to the router.
    async fn unhealthy(&self, cx: &RunContext) -> Option<String> {
        if self.feed.is_some() {
            return None;
        }
        let fail_if = self.record.lock().fail_if.clone().unwrap_or_default();
        let stats = self.final_stats(cx, cx.clock.now_ms()).await;
        let figures = silk_api::health::Figures {
            success: stats.success,
            failed: stats.failed,
            items: stats.items,
            returned: stats.returned,
            blocked: stats.blocked,
        };
        fail_if.verdict(&figures)
    }

    /// The counters of a run that ends: its items counted in the store when that is its item
    /// log (a shared frontier: every hub that drove it wrote there).
    async fn final_stats(&self, cx: &RunContext, now_ms: u64) -> RunStats {
        let mut stats = self.stats(now_ms).await;
        if self.item_log == ItemLog::Store {
            match cx.store.count_items(self.id.as_str()).await {
                Ok(n) => stats.items = n,
                Err(e) => tracing::warn!(run = %self.id, error = %e, "items not counted"),
            }
        }
        stats
    }

    /// Records the end, tells the agents to release the downloader, syncs and closes.
    async fn finish(&self, cx: &RunContext, end: End) {
        // No request is fed from here on (the frontier closes below).
        *self.gate.write().await = false;
        // The final state is stored only by the holder of the run's lease: a hub that lost
        // it (away longer than the lease; its frontier handle fenced) lets go instead.
        let end = match end {
            End::Succeeded | End::Failed(_) | End::Cancelled => {
                match cx.repo.hold(&self.id).await {
                    Ok(true) => end,
                    Ok(false) => End::Disowned("its lease is held by another hub".into()),
                    Err(e) => End::Disowned(format!(
                        "its lease could not be confirmed ({e}); it stays as stored, and the holder of its lease carries it on"
                    )),
                }
            }
            other => other,
        };
        if let End::Disowned(why) = &end {
            self.closing.store(true, Ordering::SeqCst);
            self.disowned.lock().get_or_insert_with(|| why.clone());
            drop(self.applying.write().await);
            tracing::warn!(run = %self.id, reason = %why, "run let go to another hub");
            cx.logs.hub(
                &self.id,
                Level::Warn,
                format!("hub `{}` stops driving the run: {why}", cx.hub_id),
            );
            if let Err(e) = self.frontier.close().await {
                tracing::debug!(run = %self.id, error = %e, "frontier close failed");
            }
            return;
        }
        if !matches!(end, End::HubStopping) {
            self.closing.store(true, Ordering::SeqCst);
            // Results being applied finish first; later ones see `closing` and are late.
            drop(self.applying.write().await);
            // Give back the leases of requests still out: the run's frontier holds them as
            // pending (a restart that keeps the frontier fetches them), and its counters
            // show nothing in flight.
            let out = self.take_out(
                |_| true,
                |_| Outcome::Release {
                    reason: "run_ended".into(),
                },
                |_| {},
            );
            if !out.is_empty()
                && let Err(e) = self.frontier.ack_many(out).await
            {
                tracing::warn!(run = %self.id, error = %e, "leases out not given back (they expire)");
            }
        }
        let now = cx.clock.now_ms();
        let (state, reason) = match &end {
            End::Succeeded => (RunState::Succeeded, None),
            End::Failed(reason) => (RunState::Failed, Some(reason.clone())),
            End::Cancelled => (RunState::Cancelled, Some("cancelled by a user".into())),
            End::HubStopping | End::Disowned(_) => (self.state(), None),
        };
        if let Err(e) = self.frontier.sync().await {
            tracing::warn!(run = %self.id, error = %e, "frontier sync failed");
        }
        if let Err(e) = self.items.sync() {
            tracing::warn!(run = %self.id, error = %e, "items sync failed");
        }
        if let Some(log) = &self.outcomes
            && let Err(e) = log.sync()
        {
            tracing::warn!(run = %self.id, error = %e, "outcomes sync failed");
        }
        if state.is_terminal() {
            let stats = self.final_stats(cx, now).await;
            let agents: Vec<AgentId> = self.allocated_on.lock().iter().cloned().collect();
            for agent in agents {
                let release = Command::Release {
                    run: self.id.clone(),
                };
                if let Err(e) = cx.agents.send_command(&agent, release).await {
                    tracing::warn!(run = %self.id, agent = %agent, error = %e, "release not sent (the agent frees idle downloaders itself)");
                }
            }
            if let Err(e) = self
                .update(cx, |r| {
                    r.state = state;
                    r.reason = reason.clone();
                    r.finished_ms = Some(now);
                    r.final_stats = Some(stats.clone());
                })
                .await
            {
                tracing::error!(run = %self.id, error = %e, "final state not stored");
            }
            let summary = format!(
                "total {}, success {}, failed {}, items {}, {:.1} pages/s",
                stats.total, stats.success, stats.failed, stats.items, stats.pages_per_s
            );
            match &reason {
                Some(reason) if state == RunState::Failed => {
                    tracing::warn!(run = %self.id, reason = %reason, "run failed");
                    cx.logs.hub(
                        &self.id,
                        Level::Error,
                        format!("run failed: {reason} ({summary})"),
                    );
                }
                _ => {
                    tracing::info!(run = %self.id, state = %state, success = stats.success, failed = stats.failed, "run ended");
                    cx.logs
                        .hub(&self.id, Level::Info, format!("run {state}: {summary}"));
                }
            }
            self.items_written.notify_waiters();
            self.outcomes_written.notify_waiters();
        }
        if let Err(e) = self.frontier.close().await {
            tracing::warn!(run = %self.id, error = %e, "frontier close failed");
        }
        // What it fetched is counted and the slice it holds goes back (a hub that stops
        // too: the hub that resumes it asks for a slice of its own). After the frontier
        // closed, so that no result is counted by the frontier and not here.
        cx.fair.leave(self.id.as_str());
        let session = self.session_counts();
        match self
            .quota
            .release(&*cx.store, cx.clock.now_ms(), session, 0)
            .await
        {
            Ok(()) => {
                if let Some(slice) = self.quota.changed_slice().await
                    && let Err(e) = self.update(cx, |r| r.quota = slice).await
                {
                    tracing::warn!(run = %self.id, error = %e, "the run's quota slice not stored");
                }
            }
            Err(e) => {
                tracing::warn!(run = %self.id, error = %e, "quota usage not counted (the slice held stays reserved for the day)");
            }
        }
        // Ended, or the hub stops: another hub may take the run from now on.
        cx.repo.release(&self.id).await;
    }
}

/// Takes one off a run's count of results being applied when dropped.
struct Applied<'a>(&'a AtomicU64, u64);

impl Drop for Applied<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(self.1, Ordering::SeqCst);
    }
}

/// The politeness key of a request, as the frontier keys hosts.
fn out_host(req: &Request) -> Option<String> {
    Some(req.host_key()).filter(|k| !k.is_empty())
}

/// The `allocate` config of a run: its downloader settings with the spider.
pub(crate) fn downloader_config(record: &RunRecord) -> serde_json::Value {
    let mut config = record.downloader.clone();
    config.insert(
        "spider".into(),
        serde_json::Value::String(record.spider.clone()),
    );
    serde_json::Value::Object(config)
}

/// Turns an agent's outcome into the frontier's outcome and the requests it discovered.
fn classify(
    req: &Request,
    o: &FetchOutcome,
    agent: &AgentId,
    chained: bool,
) -> (Outcome, Vec<Request>) {
    if let Some(e) = &o.error {
        return (Outcome::ended(&e.code, e.retryable), Vec::new());
    }
    let affinity = chained.then(|| agent.clone());
    let redirect = o.redirects > req.redirects;
    let links = o
        .links
        .iter()
        .map(|url| {
            // The agent followed the redirect as its verdict says (one hop per result).
            let mut r = if redirect {
                req.redirect_target(url.clone())
            } else {
                req.link(url.clone())
            };
            r.agent = affinity.clone();
            r
        })
        .collect();
    (Outcome::Done, links)
}

/// Drives a run until it ends, then records the end.
async fn drive(cx: RunContext, run: Arc<Run>) {
    // The loop runs in its own task so that a bug (a panic) in it still ends the run as
    // failed and wakes whoever waits for it.
    let (c, r) = (cx.clone(), run.clone());
    let program = run.record.lock().is_program();
    let end = match tokio::spawn(async move {
        if program {
            crate::programs::drive(&c, &r).await
        } else {
            r.dispatch(&c).await
        }
    })
    .await
    {
        Ok(Ok(end)) => end,
        Ok(Err(reason)) => End::Failed(reason),
        Err(e) => End::Failed(format!("internal error in the run's dispatch loop: {e}")),
    };
    let end = match end {
        End::Succeeded => match run.unhealthy(&cx).await {
            Some(reason) => End::Failed(reason),
            None => End::Succeeded,
        },
        other => other,
    };
    run.finish(&cx, end).await;
}

/// Makes `run` active on this hub and starts its driver; when the driver has ended, the run
/// leaves the table (and the scheduler hears of its end).
pub(crate) fn spawn(hub: &Arc<HubCore>, run: Arc<Run>) {
    // In the table before the driver starts: a driver that ends at once takes it out again.
    hub.runs.lock().insert(run.id.clone(), run.clone());
    let cx = hub.runs_cx.clone();
    let table = hub.clone();
    let handle = tokio::spawn(async move {
        drive(cx, run.clone()).await;
        table.run_finished(&run);
        run.done.send_replace(true);
    });
    hub.driver_started(handle);
}
