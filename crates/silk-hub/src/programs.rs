//! Program runs on the hub: the version a program names resolved at start ([`resolve`]),
//! its workers placed on the run's agents and started there ([`drive`], which stands in for
//! the dispatch loop of spider runs), their reports applied ([`on_worker`]), the user's
//! pause / resume / cancel passed on, an agent's death handled ([`on_agent_dead`]).
//!
//! Workers are placed round-robin over the run's agents (its allocation: `fixed:N` and
//! `chained:N` name them, `random` takes every live agent that confirmed). Each agent gets one
//! `program` command with its workers, the version, the hub's API URL and the run token. A
//! worker's start and end come back as `worker` reports on the hub's results subject and are
//! stored with the run record, so a hub that restarts (or adopts the run) knows them; a
//! `start` sent again is harmless (an agent leaves a worker that runs alone).
//!
//! The run ends when every worker has ended: `succeeded` when all exited 0, else `failed`
//! naming the worker, its exit code or signal and its last output lines. Cancel sends SIGTERM
//! and, after the program's `stop_grace_ms`, SIGKILL; the run is `cancelled` once every
//! worker is over (or the grace period and a margin have passed: the agents kill what is
//! left when the run is released). A worker whose agent dies starts again on another agent of
//! the run when the run may reassign (`random`, or `on_agent_lost: reassign`), else the run
//! fails naming the agent. A worker that its agent stopped on detaching (detach mode: the
//! agent heard from no hub) starts again on that agent when its report comes (the agent is
//! heard again). The spider's limits apply: once `max_pages`, `max_items` or
//! `max_duration_ms` is reached, leases answer `ending`, no item past `max_items` is written,
//! and the workers are stopped as by a cancel; the run is then `succeeded`.
//!
//! A program's requests go through the run's frontier ([`enqueue`], [`lease`], [`ack`]); its
//! fetches through the download center ([`fetch`]): a `fetch` command to one of the run's
//! agents, whose `fetched` reply comes back on this hub's results subject ([`on_fetched`]).

use crate::dispatch::{Desired, End};
use crate::error::HubError;
use crate::live::{Run, RunContext};
use crate::run::{ProgramRun, ProgramSpec, WorkerState, WorkerView, run_token};
use crate::state::HubCore;
use silk_api::programs::{LATEST, Runtime};
use silk_api::projects::Artifact;
use silk_bus::{ArtifactRef, Command, ProgramAction, ProgramStart, WorkerEvent, WorkerReport};
use silk_core::AgentId;
use silk_store::Level;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How long after a cancel's grace period the hub waits for the workers' ends.
const CANCEL_MARGIN_MS: u64 = 5_000;
/// How long a fetch waits for its run's quota room before it is answered `503`, ms.
const FETCH_ROOM_WAIT_MS: u64 = 2_000;

/// The version `spec` names, ready to run: `latest` is the newest `ready` one.
pub(crate) async fn resolve(
    hub: &HubCore,
    tenant: &str,
    spec: &ProgramSpec,
) -> Result<ProgramRun, HubError> {
    let project = hub.store.get_project(&spec.project).await?;
    if project.is_none_or(|p| crate::project::tenant_of(&p.doc) != tenant) {
        return Err(HubError::BadRun(format!(
            "program.project: no project `{}`",
            spec.project
        )));
    }
    let rows = hub.store.list_versions(&spec.project).await?;
    let ready = rows.into_iter().filter(|r| r.state == "ready");
    let row = if spec.version == LATEST {
        ready.max_by_key(|r| r.created_ms).ok_or_else(|| {
            HubError::BadRun(format!(
                "program.version: project `{}` has no ready version yet",
                spec.project
            ))
        })?
    } else {
        ready
            .into_iter()
            .find(|r| r.version == spec.version)
            .ok_or_else(|| {
                HubError::BadRun(format!(
                    "program.version: project `{}` has no ready version `{}`",
                    spec.project, spec.version
                ))
            })?
    };
    let view = crate::project::version_view(&row)?;
    let (artifact, image) = match view.artifact {
        Some(Artifact::Dir { sha256, bytes }) => (
            Some(ArtifactRef {
                sha256,
                size: bytes,
            }),
            None,
        ),
        Some(Artifact::Image { image, .. }) => (None, Some(image)),
        None => (None, None),
    };
    let fits = match spec.runtime {
        Runtime::Process => artifact.is_some(),
        Runtime::Container => image.is_some(),
    };
    if !fits {
        return Err(HubError::BadRun(format!(
            "program.runtime: version {} of project `{}` is {}, so it cannot run with `runtime: {}` (use `runtime: {}`)",
            row.version,
            spec.project,
            if image.is_some() {
                "a container image"
            } else {
                "a packed directory"
            },
            spec.runtime.as_str(),
            if image.is_some() {
                "container"
            } else {
                "process"
            },
        )));
    }
    Ok(ProgramRun {
        spec: spec.clone(),
        version: row.version,
        artifact,
        image,
        workers: Vec::new(),
    })
}

/// Drives a program run until its workers are over (or the hub stops, or lets the run go).
pub(crate) async fn drive(cx: &RunContext, run: &Arc<Run>) -> Result<End, String> {
    let Some(public_url) = cx.settings.public_url.clone() else {
        return Err("this hub has no API URL to give programs (start it with --public-url)".into());
    };
    place(cx, run).await?;
    start_all(cx, run, &public_url).await;
    let grace_ms = program(run).map(|p| p.spec.stop_grace_ms()).unwrap_or(0);
    let mut cancel_by: Option<u64> = None;
    // Set when a limit of the spider was reached: the workers were told to stop by then.
    let mut limited_by: Option<u64> = None;
    // Whether the workers were last told to run (they start running).
    let mut workers_running = true;
    loop {
        if *cx.stop.borrow() {
            return Ok(End::HubStopping);
        }
        let disowned = run.disowned.lock().clone();
        if let Some(why) = disowned {
            return Ok(End::Disowned(why));
        }
        let desired = *run.desired.borrow();
        if desired == Desired::Cancel && cancel_by.is_none() {
            cancel_by = Some(cx.clock.now_ms() + grace_ms + CANCEL_MARGIN_MS);
            tell_all(cx, run, ProgramAction::Stop { grace_ms }).await;
        }
        let fatal = run.fatal.lock().take();
        if let Some(reason) = fatal {
            tell_all(cx, run, ProgramAction::Stop { grace_ms }).await;
            return Err(reason);
        }
        let going = desired == Desired::Run && limited_by.is_none();
        let pages_per_run = quota_turn(cx, run, going).await?;
        // The workers run while the user wants the run to and no quota holds it (a quota
        // shows the run `paused` with its reason, and lets it go on when it allows again).
        let quota_paused = run.quota_paused.load(std::sync::atomic::Ordering::SeqCst);
        let should_run = desired == Desired::Run && !quota_paused;
        if desired != Desired::Cancel && limited_by.is_none() && should_run != workers_running {
            let action = if should_run {
                ProgramAction::Resume
            } else {
                ProgramAction::Pause
            };
            tell_all(cx, run, action).await;
            workers_running = should_run;
        }
        if limited_by.is_none() && desired != Desired::Cancel {
            let success = match run.spider.spec.max_pages {
                Some(_) => run.frontier_stats().await.ok().map(|s| s.success),
                None => None,
            };
            let fetched = run.session_counts().0;
            let limit = limit_reached(cx, run, success).or_else(|| {
                pages_per_run
                    .filter(|m| fetched >= *m)
                    .map(|m| format!("the tenant's pages_per_run reached ({m} fetches)"))
            });
            if let Some(why) = limit {
                cx.logs
                    .hub(&run.id, Level::Info, format!("{why}: stopping the workers"));
                tell_all(cx, run, ProgramAction::Stop { grace_ms }).await;
                limited_by = Some(cx.clock.now_ms() + grace_ms + CANCEL_MARGIN_MS);
            }
        }
        let workers = program(run).map(|p| p.workers).unwrap_or_default();
        let over = workers.iter().all(|w| w.state.is_final());
        let past = |by: Option<u64>| by.is_some_and(|at| cx.clock.now_ms() >= at);
        if over || past(cancel_by) || past(limited_by) {
            if desired == Desired::Cancel {
                return Ok(End::Cancelled);
            }
            if limited_by.is_some() {
                // Stopped for a limit: however the workers took the stop, the run is done.
                return Ok(End::Succeeded);
            }
            return match failure(&workers) {
                Some(reason) => Err(reason),
                None => Ok(End::Succeeded),
            };
        }
        let mut desired_rx = run.desired.subscribe();
        let mut stop = cx.stop.clone();
        tokio::select! {
            () = run.wake.notified() => {}
            _ = desired_rx.changed() => {}
            _ = stop.changed() => {}
            () = tokio::time::sleep(Duration::from_millis(1_000)) => {}
        }
    }
}

/// One quota turn of a program run (`going`: it runs and may fetch): its fetches through
/// the download center are its pages; what its slice allows is the fetch route's room.
/// Paused (or ending), it gives back what it holds. The tenant's `pages_per_run`.
async fn quota_turn(cx: &RunContext, run: &Arc<Run>, going: bool) -> Result<Option<u64>, String> {
    let now = cx.clock.now_ms();
    // One snapshot: every fetch is out or counted, once.
    let (taken, out, session) = {
        let r = run.fetch_room.lock();
        (r.taken, r.out, run.session_counts())
    };
    let (room, blocked, pages_per_run) = if going {
        let dispatching = run.state() == crate::run::RunState::Running;
        match run
            .quota
            .turn(&*cx.store, run.id.as_str(), now, session, out, dispatching)
            .await
        {
            // Held (by `concurrent_runs` too): no new fetch.
            Ok(t) if t.blocked.is_some() => (0, t.blocked, t.pages_per_run),
            Ok(t) => (t.room.unwrap_or(u64::MAX), t.blocked, t.pages_per_run),
            Err(e) => {
                // The store is away: no new fetch this turn, the next one asks again.
                tracing::warn!(run = %run.id, error = %e, "quotas not read: no new fetch this turn");
                (0, None, None)
            }
        }
    } else {
        if let Err(e) = run.quota.release(&*cx.store, now, session, out).await {
            tracing::warn!(run = %run.id, error = %e, "quota slice not given back (it is at the next turn)");
        }
        (0, None, None)
    };
    {
        let mut r = run.fetch_room.lock();
        let since = r.taken.saturating_sub(taken);
        r.room = if room == u64::MAX {
            room
        } else {
            room.saturating_sub(since)
        };
    }
    run.fetch_room_set.notify_waiters();
    run.quota_changes(cx, going, blocked.as_deref())
        .await
        .map_err(|e| e.to_string())?;
    Ok(pages_per_run)
}

/// Takes one fetch from the run's quota room, waiting up to [`FETCH_ROOM_WAIT_MS`] for its
/// driver to get more; `503` (the SDK tries again) while the quota holds the run.
async fn take_fetch_room(run: &Run) -> Result<FetchTicket<'_>, HubError> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(FETCH_ROOM_WAIT_MS);
    loop {
        let set = run.fetch_room_set.notified();
        tokio::pin!(set);
        set.as_mut().enable();
        {
            let mut r = run.fetch_room.lock();
            if r.room > 0 {
                if r.room != u64::MAX {
                    r.room -= 1;
                }
                r.taken += 1;
                r.out += 1;
                return Ok(FetchTicket {
                    run,
                    fetched: false,
                });
            }
        }
        // Used up: the driver asks for the next slice now.
        run.wake.notify_one();
        if tokio::time::timeout_at(deadline, set).await.is_err() {
            let why = run
                .record
                .lock()
                .reason
                .clone()
                .filter(|r| crate::tenant::quota_paused(Some(r)))
                .unwrap_or_else(|| {
                    format!(
                        "{}: waiting for the tenant's quota",
                        crate::tenant::QUOTA_EXHAUSTED
                    )
                });
            return Err(HubError::FetchUnanswered(format!(
                "run `{}` may not fetch now: {why}",
                run.id
            )));
        }
    }
}

/// A fetch taken from the room, settled when dropped: counted as a page when
/// [`FetchTicket::end`] said an agent fetched it, else given back to the room (also when the
/// call went away mid-fetch).
struct FetchTicket<'a> {
    run: &'a Run,
    fetched: bool,
}

impl FetchTicket<'_> {
    fn end(mut self, fetched: bool) {
        self.fetched = fetched;
    }
}

impl Drop for FetchTicket<'_> {
    fn drop(&mut self) {
        let mut r = self.run.fetch_room.lock();
        r.out = r.out.saturating_sub(1);
        if self.fetched {
            self.run
                .counters
                .fetched
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        } else if r.room != u64::MAX {
            r.room = r.room.saturating_add(1);
        }
    }
}

/// Which of the spider's limits the run has reached, if one: `max_pages` (with the
/// frontier's successes when known), `max_items`, `max_duration_ms`.
fn limit_reached(cx: &RunContext, run: &Run, success: Option<u64>) -> Option<String> {
    use std::sync::atomic::Ordering;
    let spec = &run.spider.spec;
    if let (Some(m), Some(s)) = (spec.max_pages, success)
        && s >= m
    {
        return Some(format!("max_pages reached ({m})"));
    }
    if let Some(m) = run.max_items()
        && run.counters.items.load(Ordering::Relaxed) >= m
    {
        return Some(format!("max_items reached ({m})"));
    }
    let started = run.record.lock().started_ms;
    if let (Some(ms), Some(started)) = (spec.max_duration_ms, started)
        && cx.clock.now_ms() >= started.saturating_add(ms)
    {
        return Some(format!("max_duration_ms reached ({ms} ms)"));
    }
    None
}

fn program(run: &Run) -> Option<ProgramRun> {
    run.record.lock().program.clone()
}

/// Why a run whose workers are all over failed, if it did.
fn failure(workers: &[WorkerView]) -> Option<String> {
    let failed: Vec<String> = workers
        .iter()
        .filter(|w| w.state != WorkerState::Succeeded)
        .map(|w| {
            format!(
                "worker {} on agent `{}`: {}",
                w.worker,
                w.agent,
                w.reason.as_deref().unwrap_or("failed")
            )
        })
        .collect();
    match failed.len() {
        0 => None,
        n => Some(format!(
            "{n} of {} worker(s) failed: {}",
            workers.len(),
            failed.join("; ")
        )),
    }
}

/// Places the workers of a run that has none placed: round-robin over its agents.
async fn place(cx: &RunContext, run: &Arc<Run>) -> Result<(), String> {
    let (placed, agents, total) = {
        let r = run.record.lock();
        let Some(p) = &r.program else {
            return Err("not a program run".into());
        };
        (!p.workers.is_empty(), r.run_agents(), p.spec.workers)
    };
    if placed {
        return Ok(());
    }
    if agents.is_empty() {
        return Err("no agent to run the program's workers on".into());
    }
    let workers: Vec<WorkerView> = (0..total)
        .map(|w| WorkerView {
            worker: w,
            agent: agents[w as usize % agents.len()].clone(),
            state: WorkerState::Starting,
            exit_code: None,
            signal: None,
            reason: None,
        })
        .collect();
    let summary: Vec<String> = workers
        .iter()
        .map(|w| format!("{}→{}", w.worker, w.agent))
        .collect();
    run.update(cx, |r| {
        if let Some(p) = &mut r.program {
            p.workers = workers;
        }
    })
    .await
    .map_err(|e| e.to_string())?;
    cx.logs.hub(
        &run.id,
        Level::Info,
        format!("program workers placed: {}", summary.join(", ")),
    );
    Ok(())
}

/// Sends each agent the `start` of its workers that are not over.
async fn start_all(cx: &RunContext, run: &Arc<Run>, public_url: &str) {
    let Some(p) = program(run) else { return };
    let placed: Vec<(u32, AgentId)> = p
        .workers
        .iter()
        .filter(|w| !w.state.is_final())
        .map(|w| (w.worker, w.agent.clone()))
        .collect();
    send_starts(cx, run, &p, placed, public_url).await;
}

/// Sends each agent the `start` of its workers among `placed` (worker → agent).
async fn send_starts(
    cx: &RunContext,
    run: &Arc<Run>,
    p: &ProgramRun,
    placed: Vec<(u32, AgentId)>,
    public_url: &str,
) {
    let mut by_agent: BTreeMap<AgentId, Vec<u32>> = BTreeMap::new();
    for (w, a) in placed {
        by_agent.entry(a).or_default().push(w);
    }
    for (agent, workers) in by_agent {
        send_start(cx, run, p, &agent, workers, public_url).await;
    }
}

async fn send_start(
    cx: &RunContext,
    run: &Arc<Run>,
    p: &ProgramRun,
    agent: &AgentId,
    workers: Vec<u32>,
    public_url: &str,
) {
    let start = ProgramStart {
        project: p.spec.project.clone(),
        version: p.version.clone(),
        runtime: p.spec.runtime.as_str().into(),
        artifact: p.artifact.clone(),
        image: p.image.clone(),
        command: p.spec.command.clone(),
        env: p.spec.env.clone(),
        workers: workers.clone(),
        workers_total: p.spec.workers,
        api_url: public_url.to_owned(),
        token: run_token(&cx.settings.secrets, &run.id),
    };
    let command = Command::Program {
        run: run.id.clone(),
        action: ProgramAction::Start(Box::new(start)),
        reply_to: Some(cx.hub_id.to_string()),
    };
    if let Err(e) = cx.agents.send_command(agent, command).await {
        run.set_fatal(format!(
            "the start of workers {workers:?} could not be sent to agent `{agent}`: {e}"
        ));
    }
}

/// Sends `action` to every agent with a worker of the run that is not over.
async fn tell_all(cx: &RunContext, run: &Arc<Run>, action: ProgramAction) {
    let Some(p) = program(run) else { return };
    let mut agents: Vec<AgentId> = p
        .workers
        .iter()
        .filter(|w| !w.state.is_final())
        .map(|w| w.agent.clone())
        .collect();
    agents.sort();
    agents.dedup();
    for agent in agents {
        tell(cx, run, &agent, action.clone()).await;
    }
}

/// Sends `action` on the run's workers to one agent (logged when it cannot be sent).
async fn tell(cx: &RunContext, run: &Run, agent: &AgentId, action: ProgramAction) {
    let command = Command::Program {
        run: run.id.clone(),
        action,
        reply_to: Some(cx.hub_id.to_string()),
    };
    if let Err(e) = cx.agents.send_command(agent, command).await {
        tracing::warn!(run = %run.id, agent = %agent, error = %e, "program control not sent");
    }
}

/// A worker report from an agent: the worker's state is stored with the run.
pub(crate) async fn on_worker(cx: &RunContext, run: &Arc<Run>, report: &WorkerReport) {
    if matches!(report.event, WorkerEvent::Exited { detached: true, .. })
        && restart_detached(cx, run, report).await
    {
        return;
    }
    let (state, exit_code, signal, reason) = match &report.event {
        WorkerEvent::Started => (WorkerState::Running, None, None, None),
        WorkerEvent::Exited {
            code, signal, tail, ..
        } => {
            let ok = *code == Some(0);
            let how = match (code, signal) {
                (Some(c), _) => format!("exit code {c}"),
                (None, Some(s)) => format!("killed by signal {s}"),
                (None, None) => "ended".into(),
            };
            let reason = (!ok).then(|| {
                if tail.is_empty() {
                    how.clone()
                } else {
                    format!("{how}; last lines: {}", tail.join(" | "))
                }
            });
            let state = if ok {
                WorkerState::Succeeded
            } else {
                WorkerState::Failed
            };
            (state, *code, *signal, reason)
        }
        WorkerEvent::Failed { error } => (WorkerState::Failed, None, None, Some(error.clone())),
    };
    let mut applied = false;
    let result = run
        .update(cx, |r| {
            let Some(p) = &mut r.program else { return };
            let Some(w) = p
                .workers
                .iter_mut()
                .find(|w| w.worker == report.worker && w.agent == report.agent)
            else {
                return;
            };
            // An end is final; a late `started` does not undo it.
            if w.state.is_final() {
                return;
            }
            w.state = state;
            w.exit_code = exit_code;
            w.signal = signal;
            w.reason = reason.clone();
            applied = true;
        })
        .await;
    if let Err(e) = result {
        tracing::warn!(run = %run.id, error = %e, "worker state not stored");
    }
    if applied && state == WorkerState::Failed {
        cx.logs.hub(
            &run.id,
            Level::Warn,
            format!(
                "worker {} on agent `{}` failed: {}",
                report.worker,
                report.agent,
                reason.as_deref().unwrap_or("?")
            ),
        );
    }
    run.wake.notify_one();
}

/// A worker that its agent stopped on detaching (it heard from no hub) starts again on that
/// agent — which is heard again, since its report came — unless the run is ending (cancel,
/// a limit, the run closing): then the end counts as any other. A paused run's worker is
/// started and paused at once. Whether it was started again (or was not this agent's any
/// more, or over already: a report applied before).
async fn restart_detached(cx: &RunContext, run: &Arc<Run>, report: &WorkerReport) -> bool {
    let desired = *run.desired.borrow();
    if desired == Desired::Cancel || run.is_closing() || limit_reached(cx, run, None).is_some() {
        return false;
    }
    let mut restart = false;
    let result = run
        .update(cx, |r| {
            let Some(p) = &mut r.program else { return };
            if let Some(w) = p
                .workers
                .iter_mut()
                .find(|w| w.worker == report.worker && w.agent == report.agent)
                && !w.state.is_final()
            {
                w.state = WorkerState::Starting;
                restart = true;
            }
        })
        .await;
    if let Err(e) = result {
        tracing::warn!(run = %run.id, error = %e, "worker state not stored");
    }
    if !restart {
        return true;
    }
    cx.logs.hub(
        &run.id,
        Level::Warn,
        format!(
            "worker {} was stopped by agent `{}` when it detached (it heard from no hub): started again",
            report.worker, report.agent
        ),
    );
    let (Some(p), Some(public_url)) = (program(run), cx.settings.public_url.clone()) else {
        return true;
    };
    send_start(cx, run, &p, &report.agent, vec![report.worker], &public_url).await;
    if desired == Desired::Pause {
        tell(cx, run, &report.agent, ProgramAction::Pause).await;
    }
    run.wake.notify_one();
    true
}

/// An agent of a program run died: its workers that were not over start again on another
/// live agent of the run when the run may reassign, else they fail (and so does the run).
pub(crate) async fn on_agent_dead(cx: &RunContext, run: &Arc<Run>, agent: &AgentId) {
    let (may_move, lost, candidates, pools) = {
        let r = run.record.lock();
        let Some(p) = &r.program else { return };
        let lost: Vec<u32> = p
            .workers
            .iter()
            .filter(|w| &w.agent == agent && !w.state.is_final())
            .map(|w| w.worker)
            .collect();
        let may_move = matches!(r.strategy, crate::allocation::Strategy::Random)
            || r.on_agent_lost == crate::allocation::OnAgentLost::Reassign;
        (may_move, lost, r.run_agents(), r.pools.clone())
    };
    if lost.is_empty() {
        return;
    }
    // A drained agent takes no worker that moves.
    let live = cx.agents.open_agents(&pools);
    let targets: Vec<AgentId> = candidates
        .into_iter()
        .filter(|a| a != agent && live.contains(a))
        .collect();
    if !may_move || targets.is_empty() {
        let why = if may_move {
            "no other agent of the run is live"
        } else {
            "the run may not move workers (on_agent_lost: fail)"
        };
        let _ = run
            .update(cx, |r| {
                if let Some(p) = &mut r.program {
                    for w in p.workers.iter_mut().filter(|w| lost.contains(&w.worker)) {
                        w.state = WorkerState::Failed;
                        w.reason = Some(format!("agent `{agent}` was lost ({why})"));
                    }
                }
            })
            .await;
        run.set_fatal(format!(
            "agent `{agent}` was lost with worker(s) {lost:?} and {why}"
        ));
        return;
    }
    let moves: Vec<(u32, AgentId)> = lost
        .iter()
        .enumerate()
        .map(|(i, w)| (*w, targets[i % targets.len()].clone()))
        .collect();
    let _ = run
        .update(cx, |r| {
            if let Some(p) = &mut r.program {
                for (worker, to) in &moves {
                    if let Some(w) = p.workers.iter_mut().find(|w| w.worker == *worker) {
                        w.agent = to.clone();
                        w.state = WorkerState::Starting;
                    }
                }
            }
        })
        .await;
    cx.logs.hub(
        &run.id,
        Level::Warn,
        format!(
            "agent `{agent}` is dead: worker(s) {lost:?} start again on {}",
            moves
                .iter()
                .map(|(w, a)| format!("{w}→{a}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    let Some(p) = program(run) else { return };
    let Some(public_url) = cx.settings.public_url.clone() else {
        return;
    };
    send_starts(cx, run, &p, moves, &public_url).await;
    run.wake.notify_one();
}

/// Writes items a program pushed to the run's item log (idempotent on the run's item key);
/// every item must have the key.
pub(crate) async fn push_items(
    cx: &RunContext,
    run: &Arc<Run>,
    items: Vec<serde_json::Map<String, serde_json::Value>>,
) -> Result<silk_api::programs::ItemsAdded, HubError> {
    use std::sync::atomic::Ordering;
    if items.len() > silk_api::programs::MAX_ITEMS_PER_BATCH {
        return Err(HubError::BadRun(format!(
            "items: {} in one batch; at most {}",
            items.len(),
            silk_api::programs::MAX_ITEMS_PER_BATCH
        )));
    }
    let key = &run.spider.spec.item_key;
    if let Some(i) = items
        .iter()
        .position(|item| item.get(key).is_none_or(serde_json::Value::is_null))
    {
        return Err(HubError::BadRun(format!(
            "items[{i}]: no `{key}` field (the run's item key)"
        )));
    }
    let values: Vec<serde_json::Value> = items.into_iter().map(serde_json::Value::Object).collect();
    let wrote = match run
        .items
        .write(&values, cx.clock.now_ms(), run.max_items())
        .await
    {
        Ok(wrote) => wrote,
        Err(crate::items::WriteError::File(reason)) => {
            // The run cannot go on without losing items.
            run.set_fatal(reason.clone());
            return Err(HubError::Store(reason));
        }
        Err(crate::items::WriteError::Store(e)) => return Err(HubError::Store(e.to_string())),
    };
    let c = &run.counters;
    c.items.fetch_add(wrote.new, Ordering::Relaxed);
    c.duplicate_items
        .fetch_add(wrote.duplicates, Ordering::Relaxed);
    if wrote.new > 0 {
        run.items_written.notify_waiters();
    }
    if wrote.over_limit > 0 || limit_reached(cx, run, None).is_some() {
        // The drive loop stops the workers.
        run.wake.notify_one();
    }
    Ok(silk_api::programs::ItemsAdded {
        added: wrote.new,
        duplicates: wrote.duplicates,
        over_limit: wrote.over_limit,
    })
}

/// A program's request as the frontier keeps it; `at` names it in errors.
fn to_request(
    run: &Run,
    new: silk_api::programs::NewRequest,
    at: &str,
) -> Result<silk_core::Request, HubError> {
    let bad = |what: String| HubError::BadRun(format!("{at}.{what}"));
    let mut request = silk_core::Request::get(&new.url, None, &run.spider.canon)
        .map_err(|e| bad(format!("url: {e}")))?;
    request.method = method(new.method.as_deref()).map_err(bad)?;
    request.body = body(new.body.as_deref()).map_err(bad)?;
    request.headers = new.headers;
    request.priority = new.priority;
    request.depth = new.depth;
    request.meta = new.meta.into_iter().collect();
    if new.dont_filter {
        request.dedup_salt = Some(format!("dont_filter:{}", uuid::Uuid::now_v7().simple()));
    } else if let Some(from) = &new.redirect_from {
        let same = silk_core::Request::get(from, None, &run.spider.canon)
            .is_ok_and(|parent| parent.url == request.url);
        if same {
            request.dedup_salt = Some("redirect".into());
        }
    }
    Ok(request)
}

/// A request's method as a program names it (`GET` when it names none); the error names the
/// field.
fn method(name: Option<&str>) -> Result<silk_core::request::Method, String> {
    use silk_core::request::Method;
    match name.map(str::to_ascii_uppercase).as_deref() {
        None | Some("GET") => Ok(Method::Get),
        Some("HEAD") => Ok(Method::Head),
        Some("POST") => Ok(Method::Post),
        Some(other) => Err(format!("method: `{other}` is not one of GET, HEAD, POST")),
    }
}

/// A request's body as a program gives it (base64); the error names the field.
fn body(b64: Option<&str>) -> Result<Option<Vec<u8>>, String> {
    use base64::Engine;
    b64.map(|b| {
        base64::engine::general_purpose::STANDARD
            .decode(b)
            .map_err(|e| format!("body: not base64 ({e})"))
    })
    .transpose()
}

fn to_requests(
    run: &Run,
    news: Vec<silk_api::programs::NewRequest>,
    at: &str,
) -> Result<Vec<silk_core::Request>, HubError> {
    news.into_iter()
        .enumerate()
        .map(|(i, n)| to_request(run, n, &format!("{at}[{i}]")))
        .collect()
}

fn too_many(what: &str, n: usize) -> Result<(), HubError> {
    let max = silk_api::programs::MAX_REQUESTS_PER_CALL;
    if n > max {
        return Err(HubError::BadRun(format!(
            "{what}: {n} in one call; at most {max}"
        )));
    }
    Ok(())
}

fn frontier_error(run: &Run, e: silk_frontier::FrontierError) -> HubError {
    HubError::RunStorage {
        run: run.id.clone(),
        reason: format!("frontier: {e}"),
    }
}

/// Puts a program's requests in its run's frontier (deduplicated on Silk's key).
pub(crate) async fn enqueue(
    run: &Arc<Run>,
    batch: silk_api::programs::EnqueueBatch,
) -> Result<silk_api::programs::Enqueued, HubError> {
    too_many("requests", batch.requests.len())?;
    let requests = to_requests(run, batch.requests, "requests")?;
    let done = run
        .frontier
        .enqueue(requests)
        .await
        .map_err(|e| frontier_error(run, e))?;
    if done.added > 0 {
        run.enqueued.notify_waiters();
    }
    Ok(silk_api::programs::Enqueued {
        added: done.added,
        duplicates: done.duplicates,
    })
}

/// Leases requests to a program: what may start now under the run's politeness, waiting up to
/// `wait_ms` for one; nothing while the run is paused or ending.
pub(crate) async fn lease(
    cx: &RunContext,
    run: &Arc<Run>,
    ask: silk_api::programs::LeaseAsk,
) -> Result<silk_api::programs::Leases, HubError> {
    use base64::Engine;
    use std::sync::atomic::Ordering;
    let max = (ask.max as usize).clamp(1, silk_api::programs::MAX_REQUESTS_PER_CALL);
    let wait_ms = ask.wait_ms.min(silk_api::programs::MAX_LEASE_WAIT_MS);
    let until = cx.clock.now_ms().saturating_add(wait_ms);
    loop {
        // Registered before the frontier is asked, so an enqueue in between is not missed.
        let enqueued = run.enqueued.notified();
        tokio::pin!(enqueued);
        enqueued.as_mut().enable();
        let mut desired_rx = run.desired.subscribe();
        let desired = *desired_rx.borrow_and_update();
        // Read before the frontier's count: a batch fed in between counts twice, not never.
        let unexpanded = run.unexpanded.load(Ordering::SeqCst);
        let stats = run
            .frontier
            .stats()
            .await
            .map_err(|e| frontier_error(run, e))?;
        let limit = limit_reached(cx, run, Some(stats.success));
        let ending = desired == Desired::Cancel || run.is_closing() || limit.is_some();
        let paused = desired == Desired::Pause;
        let mut leases = Vec::new();
        if !ending && !paused {
            leases = run
                .frontier
                .lease(max)
                .await
                .map_err(|e| frontier_error(run, e))?;
            // The frontier runs short: the expansion's next batch goes in.
            if leases.len() < max
                && run.expand_more(cx).await.map_err(HubError::Store)?
                && leases.is_empty()
            {
                continue;
            }
        }
        let now = cx.clock.now_ms();
        if !leases.is_empty() || ending || now >= until {
            let left = if leases.is_empty() {
                stats.left
            } else {
                run.frontier
                    .stats()
                    .await
                    .map(|s| s.left)
                    .unwrap_or(stats.left)
            };
            // What the expansion had not fed yet is left too.
            let left = left.saturating_add(unexpanded);
            let leases = leases
                .into_iter()
                .map(|l| silk_api::programs::LeasedView {
                    lease_id: l.id.to_string(),
                    deadline_ms: l.deadline_ms,
                    url: l.request.url,
                    method: l.request.method.as_str().to_owned(),
                    headers: l.request.headers,
                    body: l
                        .request
                        .body
                        .map(|b| base64::engine::general_purpose::STANDARD.encode(b)),
                    priority: l.request.priority,
                    meta: l.request.meta.into_iter().collect(),
                    depth: l.request.depth,
                    retries: l.request.retries,
                })
                .collect();
            return Ok(silk_api::programs::Leases {
                leases,
                paused,
                ending,
                left,
            });
        }
        // Nothing may start now: wait for new requests, the next host to be ready, a
        // control change, or the end of the wait.
        let next = if paused {
            None
        } else {
            run.frontier.next_ready_ms().await.ok().flatten()
        };
        let wake_at = next.map_or(until, |n| n.clamp(now + 1, until));
        tokio::select! {
            () = enqueued => {}
            _ = desired_rx.changed() => {}
            () = tokio::time::sleep(Duration::from_millis(wake_at.saturating_sub(now))) => {}
        }
    }
}

/// Acks a program's leases, each with the requests it gave (one atomic write per ack).
pub(crate) async fn ack(
    run: &Arc<Run>,
    batch: silk_api::programs::AckBatch,
) -> Result<silk_api::programs::Acked, HubError> {
    use silk_api::programs::AckOutcome;
    use silk_frontier::Outcome;
    too_many("acks", batch.acks.len())?;
    let mut parsed = Vec::with_capacity(batch.acks.len());
    for (i, a) in batch.acks.into_iter().enumerate() {
        let lease: silk_frontier::LeaseId = a
            .lease_id
            .parse()
            .map_err(|e| HubError::BadRun(format!("acks[{i}].lease_id: {e}")))?;
        let reason = a.reason.unwrap_or_else(|| "program".into());
        let outcome = match a.outcome {
            AckOutcome::Done => Outcome::Done,
            AckOutcome::Retry => Outcome::Retry { reason },
            AckOutcome::Failed => Outcome::Failed { reason },
            AckOutcome::Dropped => Outcome::Dropped { reason },
            AckOutcome::Release => Outcome::Release { reason },
        };
        too_many(&format!("acks[{i}].requests"), a.requests.len())?;
        let requests = to_requests(run, a.requests, &format!("acks[{i}].requests"))?;
        parsed.push((lease, outcome, requests));
    }
    let mut answer = silk_api::programs::Acked {
        acked: 0,
        late: 0,
        added: 0,
        duplicates: 0,
    };
    for (lease, outcome, requests) in parsed {
        let requeues = !matches!(
            outcome,
            Outcome::Done | Outcome::Failed { .. } | Outcome::Dropped { .. }
        );
        let (result, enqueued) = run
            .frontier
            .ack_and_enqueue(lease, outcome, requests)
            .await
            .map_err(|e| frontier_error(run, e))?;
        if result.applied() {
            answer.acked += 1;
        } else {
            answer.late += 1;
        }
        answer.added += enqueued.added;
        answer.duplicates += enqueued.duplicates;
        if enqueued.added > 0 || requeues {
            run.enqueued.notify_waiters();
        }
    }
    Ok(answer)
}

/// A fetch reply from an agent: handed to the fetch waiting for it (none waits any more
/// when it timed out: dropped).
pub(crate) fn on_fetched(run: &Run, reply: &silk_bus::FetchReply) {
    let waiter = run.fetches.lock().remove(&reply.id);
    match waiter {
        Some(tx) => {
            let _ = tx.send(reply.clone());
        }
        None => {
            tracing::debug!(run = %run.id, fetch = %reply.id, agent = %reply.agent, "late fetch reply ignored")
        }
    }
}

/// Removes a fetch's waiter when the fetch ends, however it ends.
struct FetchWaiter<'a> {
    run: &'a Run,
    id: String,
}

impl Drop for FetchWaiter<'_> {
    fn drop(&mut self) {
        self.run.fetches.lock().remove(&self.id);
    }
}

/// How often a fetch the agent gave back unharmed (`robots_fetched`: the host's robots.txt
/// was read first; `no_downloader`, `agent_stopping`) is asked again.
const FETCH_GIVEN_BACK_TRIES: u32 = 3;

/// Fetches one request for a program through the download center: by one of the run's live
/// agents (the one the ask names when it is one of them, else in turn), with that agent's
/// downloader for the run, the response as it is; redirects followed when asked.
pub(crate) async fn fetch(
    cx: &RunContext,
    run: &Arc<Run>,
    ask: silk_api::programs::FetchAsk,
) -> Result<silk_api::programs::Fetched, HubError> {
    let started = cx.clock.now_ms();
    let mut request = fetch_request(&ask)?;
    let agents = fetch_agents(cx, run);
    if agents.is_empty() {
        return Err(HubError::FetchUnanswered(format!(
            "run `{}` has no live agent to fetch {} with",
            run.id, request.url
        )));
    }
    let named = ask
        .agent
        .as_deref()
        .and_then(|a| agents.iter().position(|x| x.as_str() == a));
    let mut turn = named.unwrap_or_else(|| {
        run.fetch_turn
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    });
    let max_redirects = run.spider.spec.max_redirects;
    let mut redirects: Vec<String> = Vec::new();
    let mut given_back = 0;
    loop {
        let agent = &agents[turn % agents.len()];
        let ticket = take_fetch_room(run).await?;
        let reply = ask_agent(cx, run, agent, &request, ask.trim).await?;
        let o = &reply.outcome;
        // Given back (not fetched): the page goes back to the room.
        ticket.end(!o.given_back());
        if o.given_back() && given_back < FETCH_GIVEN_BACK_TRIES {
            given_back += 1;
            if o.error.as_ref().is_some_and(|e| e.code != "robots_fetched") {
                // That agent cannot fetch for the run now: the next one.
                turn += 1;
            }
            continue;
        }
        let location = reply
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("location"))
            .map(|(_, v)| v.clone());
        let status = o.status.unwrap_or(0);
        if ask.follow_redirects
            && o.error.is_none()
            && (300..400).contains(&status)
            && let Some(next) = location
                .and_then(|l| reqwest::Url::parse(&request.url).ok()?.join(&l).ok())
                .filter(|u| matches!(u.scheme(), "http" | "https"))
        {
            if redirects.len() >= max_redirects as usize {
                return Ok(fetched_view(
                    &request.url,
                    reply,
                    redirects,
                    cx.clock.now_ms().saturating_sub(started),
                    Some(silk_api::programs::FetchFailure {
                        code: "too_many_redirects".into(),
                        message: format!(
                            "{}: more than {max_redirects} redirects (the run's max_redirects)",
                            ask.url
                        ),
                        retryable: false,
                    }),
                ));
            }
            redirects.push(std::mem::replace(&mut request.url, next.to_string()));
            // As browsers do: a 303, or a 301/302 of a POST, goes on as a GET without body.
            if status == 303
                || (matches!(status, 301 | 302)
                    && request.method == silk_core::request::Method::Post)
            {
                request.method = silk_core::request::Method::Get;
                request.body = None;
            }
            given_back = 0;
            continue;
        }
        let c = &run.counters;
        c.bytes
            .fetch_add(o.bytes, std::sync::atomic::Ordering::Relaxed);
        if o.error.as_ref().is_some_and(|e| e.code == "proxy_banned") {
            c.blocked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        return Ok(fetched_view(
            &request.url,
            reply,
            redirects,
            cx.clock.now_ms().saturating_sub(started),
            None,
        ));
    }
}

/// The request a fetch asks for: its URL as given (absolute http or https).
fn fetch_request(ask: &silk_api::programs::FetchAsk) -> Result<silk_core::Request, HubError> {
    let url = reqwest::Url::parse(&ask.url).map_err(|e| HubError::BadRun(format!("url: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(HubError::BadRun(format!(
            "url: `{}` is not http or https",
            ask.url
        )));
    }
    let mut request = silk_core::Request::from_canonical(url.to_string());
    request.method = method(ask.method.as_deref()).map_err(HubError::BadRun)?;
    request.body = body(ask.body.as_deref()).map_err(HubError::BadRun)?;
    request.headers = ask.headers.clone();
    Ok(request)
}

/// The run's agents (its allocation) that are alive now.
fn fetch_agents(cx: &RunContext, run: &Run) -> Vec<AgentId> {
    let agents = run.record.lock().run_agents();
    let live = cx.agents.live_agents();
    agents.into_iter().filter(|a| live.contains(a)).collect()
}

/// Sends one fetch to `agent` and waits for its reply: at most the run's request timeout and
/// [`FETCH_MARGIN_MS`](silk_api::programs::FETCH_MARGIN_MS).
async fn ask_agent(
    cx: &RunContext,
    run: &Arc<Run>,
    agent: &AgentId,
    request: &silk_core::Request,
    trim: bool,
) -> Result<silk_bus::FetchReply, HubError> {
    let id = uuid::Uuid::now_v7().simple().to_string();
    let (tx, rx) = tokio::sync::oneshot::channel();
    run.fetches.lock().insert(id.clone(), tx);
    let _waiter = FetchWaiter {
        run,
        id: id.clone(),
    };
    let command = Command::Fetch {
        run: run.id.clone(),
        id,
        request: request.clone(),
        trim,
        reply_to: Some(cx.hub_id.to_string()),
    };
    cx.agents.send_command(agent, command).await.map_err(|e| {
        HubError::Bus(format!(
            "the fetch could not be sent to agent `{agent}`: {e}"
        ))
    })?;
    let wait_ms = run
        .spider
        .spec
        .timeout_ms
        .saturating_add(silk_api::programs::FETCH_MARGIN_MS);
    match tokio::time::timeout(Duration::from_millis(wait_ms), rx).await {
        Ok(Ok(reply)) => Ok(reply),
        _ => Err(HubError::FetchUnanswered(format!(
            "agent `{agent}` did not answer the fetch of {} within {wait_ms} ms",
            request.url
        ))),
    }
}

fn fetched_view(
    url: &str,
    reply: silk_bus::FetchReply,
    redirects: Vec<String>,
    elapsed_ms: u64,
    error: Option<silk_api::programs::FetchFailure>,
) -> silk_api::programs::Fetched {
    use base64::Engine;
    let o = reply.outcome;
    let (body, truncated, trimmed) = match o.body {
        Some(b) => {
            let trimmed = b.encoding == silk_bus::BodyEncoding::Text;
            let data = if trimmed {
                base64::engine::general_purpose::STANDARD.encode(b.data.as_bytes())
            } else {
                b.data
            };
            (Some(data), b.truncated, trimmed)
        }
        None => (None, false, false),
    };
    silk_api::programs::Fetched {
        url: url.to_owned(),
        status: o.status,
        headers: reply.headers,
        body,
        truncated,
        trimmed,
        bytes: o.bytes,
        proxy: o.proxy,
        agent: reply.agent.to_string(),
        elapsed_ms,
        redirects,
        error: error.or_else(|| {
            o.error.map(|e| silk_api::programs::FetchFailure {
                code: e.code.as_str().to_string(),
                message: e.message,
                retryable: e.retryable,
            })
        }),
    }
}
