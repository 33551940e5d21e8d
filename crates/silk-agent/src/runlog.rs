//! Run logs: what happened to each run on this agent, as [`LogEntry`] lines that the agent
//! sends to the hubs in [`LogBatch`]es on the bus's `logs` subject (the control plane keeps
//! every run's lines with their time, level and source).
//!
//! One code path: everything run-scoped goes through [`Events`]. [`Events::emit`] broadcasts
//! an [`AgentEvent`] and writes the run log line of that event ([`event_line`]); lines that
//! are not events (one per failed request, trimming problems, robots.txt drops) are written
//! with [`Events::log`] / [`Events::outcome`]. The lines:
//!
//! | what                                                          | level   |
//! |---------------------------------------------------------------|---------|
//! | downloader allocated / reloaded from the allocations file / kept on a repeated `allocate` | info |
//! | downloader built (with its number of proxies)                 | info    |
//! | downloader could not be built (a failing proxy provider), why | error   |
//! | allocation refused (or a stored one no longer valid), why     | error   |
//! | allocation reply sent / dropped                                | debug / warn |
//! | downloader released (command or idle)                         | info    |
//! | a request answered with a status that is not 2xx or 3xx, or failed for good: URL, status, code, reason | warn |
//! | a request that failed without a response and may be retried (timeout, connect, …) | info |
//! | a request dropped by robots.txt; a redirect off the allowed domains | debug |
//! | a result dropped after its publish retries                    | warn    |
//! | a proxy switched out, and why; a proxy refresh that failed    | warn    |
//! | the proxy provider ran (how many proxies)                     | info    |
//! | a redial ran / failed                                         | info / warn |
//! | a trimming rule that failed on a page                         | warn    |
//! | a page where no trimming rule matched                         | info    |
//! | `N log lines dropped (…)`                                     | warn    |
//!
//! **Never blocks the fetch path:** writing a line formats it, cuts it to
//! `log_line_max_bytes` (at a character boundary, marked) and pushes it under a short lock.
//! The queue holds at most `log_queue_lines` lines, all runs together; a line that does not
//! fit is dropped and counted for its run, and the run's next batch carries a line saying how
//! many were lost. The publisher task ([`LogQueue::take`], driven by the agent) sends a run's
//! lines as soon as `log_batch_lines` of them wait, and every `log_flush_ms` anyway; a batch
//! that cannot be published after the agent's retries is dropped and counted the same way.
//! Lines below `log_level` are not written at all.

use crate::stats::{AgentEvent, ReleaseReason};
use parking_lot::{Mutex, MutexGuard};
use silk_bus::{FetchOutcome, LogBatch, LogEntry, LogLevel};
use silk_core::{AgentId, Clock, RunId};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::{Notify, broadcast};

/// The marker at the end of a cut line.
pub(crate) const TRUNCATED: &str = "… [truncated]";

/// How the run logs of an agent are kept (from the agent's config).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LogSettings {
    pub(crate) queue_lines: usize,
    pub(crate) batch_lines: usize,
    pub(crate) line_max_bytes: usize,
    pub(crate) min_level: LogLevel,
}

/// Lines lost for one run since its last batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Dropped {
    /// Because the queue was full.
    pub(crate) full: u64,
    /// Because their batch could not be published.
    pub(crate) unpublished: u64,
}

impl Dropped {
    fn total(self) -> u64 {
        self.full.saturating_add(self.unpublished)
    }

    fn add(&mut self, other: Dropped) {
        self.full = self.full.saturating_add(other.full);
        self.unpublished = self.unpublished.saturating_add(other.unpublished);
    }

    /// The line that reports the loss.
    fn message(self, queue_lines: usize) -> String {
        let n = self.total();
        match (self.full, self.unpublished) {
            (_, 0) => format!(
                "{n} log lines dropped (the agent's log queue of {queue_lines} lines was full)"
            ),
            (0, _) => format!("{n} log lines dropped (they could not be published to the bus)"),
            (full, unpublished) => format!(
                "{n} log lines dropped ({full}: the agent's log queue of {queue_lines} lines was full; {unpublished}: they could not be published to the bus)"
            ),
        }
    }
}

/// A batch ready to publish, with the losses its last line reports (so that they can be
/// counted again if the batch is lost too).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OutBatch {
    pub(crate) batch: LogBatch,
    /// Non-zero when the batch's last line is the `N log lines dropped` line.
    pub(crate) carried: Dropped,
}

impl OutBatch {
    /// The lines written by the run (not the line about dropped ones).
    pub(crate) fn run_lines(&self) -> usize {
        self.batch.lines.len() - usize::from(self.carried.total() > 0)
    }

    /// Splits a batch in two halves (for a batch too large for the bus); `None` for a
    /// single line.
    pub(crate) fn split(mut self) -> Option<(OutBatch, OutBatch)> {
        if self.batch.lines.len() < 2 {
            return None;
        }
        let tail = self.batch.lines.split_off(self.batch.lines.len() / 2);
        let second = OutBatch {
            batch: LogBatch {
                run: self.batch.run.clone(),
                agent: self.batch.agent.clone(),
                lines: tail,
            },
            carried: self.carried,
        };
        self.carried = Dropped::default();
        Some((self, second))
    }
}

#[derive(Default)]
struct RunLines {
    lines: Vec<LogEntry>,
    dropped: Dropped,
}

#[derive(Default)]
struct QueueState {
    runs: HashMap<RunId, RunLines>,
    queued: usize,
}

/// The agent's run log lines waiting to be published, bounded all runs together.
pub(crate) struct LogQueue {
    agent: AgentId,
    settings: LogSettings,
    clock: Arc<dyn Clock>,
    state: Mutex<QueueState>,
    ready: Notify,
    /// Lines lost (queue full or batch unpublished), for the agent's stats.
    pub(crate) lines_dropped: AtomicU64,
    /// Batches published, for the agent's stats.
    pub(crate) batches_published: AtomicU64,
}

impl std::fmt::Debug for LogQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogQueue")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl LogQueue {
    pub(crate) fn new(agent: AgentId, settings: LogSettings, clock: Arc<dyn Clock>) -> Self {
        Self {
            agent,
            settings,
            clock,
            state: Mutex::new(QueueState::default()),
            ready: Notify::new(),
            lines_dropped: AtomicU64::new(0),
            batches_published: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock()
    }

    /// Whether a line at `level` would be written.
    pub(crate) fn enabled(&self, level: LogLevel) -> bool {
        level >= self.settings.min_level
    }

    /// Writes a line of `run` (never blocks: a line that does not fit is dropped and counted).
    pub(crate) fn push(&self, run: &RunId, level: LogLevel, message: String) {
        if !self.enabled(level) {
            return;
        }
        let message = truncate(message, self.settings.line_max_bytes);
        let entry = LogEntry {
            ts_ms: self.clock.now_ms(),
            level,
            message,
        };
        let mut state = self.lock();
        let full = state.queued >= self.settings.queue_lines;
        if !state.runs.contains_key(run) {
            state.runs.insert(run.clone(), RunLines::default());
        }
        let Some(lines) = state.runs.get_mut(run) else {
            return;
        };
        if full {
            lines.dropped.full = lines.dropped.full.saturating_add(1);
            drop(state);
            self.lines_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        lines.lines.push(entry);
        let batch_ready = lines.lines.len() == self.settings.batch_lines;
        state.queued += 1;
        drop(state);
        if batch_ready {
            self.ready.notify_one();
        }
    }

    /// Resolves when a run has `batch_lines` lines waiting (or had, since the last call).
    pub(crate) async fn batch_ready(&self) {
        self.ready.notified().await;
    }

    /// Takes what is to be published now: with `all`, every run's lines and losses; without,
    /// only the runs with at least `batch_lines` lines waiting. Each run's lines come in
    /// batches of at most `batch_lines`; its losses are reported by a line at the end of its
    /// last batch (a batch of that line alone when no line waits).
    pub(crate) fn take(&self, all: bool) -> Vec<OutBatch> {
        let batch_lines = self.settings.batch_lines.max(1);
        let taken: Vec<(RunId, RunLines)> = {
            let mut state = self.lock();
            let runs: Vec<RunId> = state
                .runs
                .iter()
                .filter(|(_, r)| all || r.lines.len() >= batch_lines)
                .map(|(run, _)| run.clone())
                .collect();
            let mut taken = Vec::with_capacity(runs.len());
            for run in runs {
                if let Some(lines) = state.runs.remove(&run) {
                    state.queued -= lines.lines.len();
                    taken.push((run, lines));
                }
            }
            taken
        };
        let now = self.clock.now_ms();
        let mut out = Vec::new();
        for (run, RunLines { mut lines, dropped }) in taken {
            let mut chunks = Vec::new();
            while lines.len() > batch_lines {
                let rest = lines.split_off(batch_lines);
                chunks.push(std::mem::replace(&mut lines, rest));
            }
            if !lines.is_empty() || dropped.total() > 0 {
                chunks.push(lines);
            }
            let last = chunks.len().saturating_sub(1);
            for (i, mut chunk) in chunks.into_iter().enumerate() {
                let carried = if i == last && dropped.total() > 0 {
                    chunk.push(LogEntry {
                        ts_ms: now,
                        level: LogLevel::Warn,
                        message: dropped.message(self.settings.queue_lines),
                    });
                    dropped
                } else {
                    Dropped::default()
                };
                out.push(OutBatch {
                    batch: LogBatch {
                        run: run.clone(),
                        agent: self.agent.clone(),
                        lines: chunk,
                    },
                    carried,
                });
            }
        }
        out
    }

    /// A batch could not be published: its run's next batch reports its lines as lost
    /// (and the losses it reported itself).
    pub(crate) fn lost(&self, batch: &OutBatch) {
        let lines = batch.run_lines() as u64;
        let mut lost = batch.carried;
        lost.add(Dropped {
            full: 0,
            unpublished: lines,
        });
        self.lines_dropped.fetch_add(lines, Ordering::Relaxed);
        let mut state = self.lock();
        state
            .runs
            .entry(batch.batch.run.clone())
            .or_default()
            .dropped
            .add(lost);
    }
}

/// Cuts `message` to at most `max` bytes (at a character boundary), ending with
/// [`TRUNCATED`] when it was cut.
pub(crate) fn truncate(mut message: String, max: usize) -> String {
    if message.len() <= max {
        return message;
    }
    let marked = TRUNCATED.len() <= max;
    silk_core::text::truncate(
        &mut message,
        if marked { max - TRUNCATED.len() } else { max },
    );
    if marked {
        message.push_str(TRUNCATED);
    }
    message
}

/// Where run-scoped things are told: the agent's event broadcast and the run logs. Cheap
/// to clone.
#[derive(Clone)]
pub(crate) struct Events {
    tx: broadcast::Sender<AgentEvent>,
    logs: Arc<LogQueue>,
}

impl Events {
    pub(crate) fn new(tx: broadcast::Sender<AgentEvent>, logs: Arc<LogQueue>) -> Self {
        Self { tx, logs }
    }

    /// The run logs.
    pub(crate) fn logs(&self) -> &Arc<LogQueue> {
        &self.logs
    }

    /// Events from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<AgentEvent> {
        self.tx.subscribe()
    }

    /// Writes the event's run log line (if it has one), then broadcasts it.
    pub(crate) fn emit(&self, event: AgentEvent) {
        if let Some((run, level, message)) = event_line(&event) {
            self.logs.push(run, level, message);
        }
        let _ = self.tx.send(event);
    }

    /// Writes a line of `run`; `message` is only built when the level is written.
    pub(crate) fn log(&self, run: &RunId, level: LogLevel, message: impl FnOnce() -> String) {
        if self.logs.enabled(level) {
            self.logs.push(run, level, message());
        }
    }

    /// Writes the line of a request's outcome, if it deserves one ([`outcome_line`]).
    pub(crate) fn outcome(&self, run: &RunId, url: &str, outcome: &FetchOutcome) {
        if let Some((level, message)) = outcome_line(url, outcome)
            && self.logs.enabled(level)
        {
            self.logs.push(run, level, message);
        }
    }
}

/// The run log line of an event: its run, level and text; `None` for agent-wide events.
pub(crate) fn event_line(event: &AgentEvent) -> Option<(&RunId, LogLevel, String)> {
    use LogLevel::{Debug, Error, Info, Warn};
    Some(match event {
        AgentEvent::Allocated {
            run,
            reloaded,
            existing,
        } => {
            let text = if *reloaded {
                "downloader allocation reloaded from the allocations file"
            } else if *existing {
                "allocate repeated: the existing downloader allocation is kept"
            } else {
                "downloader allocated"
            };
            (run, Info, text.to_owned())
        }
        AgentEvent::AllocationFailed { run, error } => {
            (run, Error, format!("allocation refused: {error}"))
        }
        AgentEvent::DownloaderBuilt { run, proxies } => {
            let via = match proxies {
                0 => "direct, no proxy".to_owned(),
                1 => "1 proxy".to_owned(),
                n => format!("{n} proxies"),
            };
            (run, Info, format!("downloader built ({via})"))
        }
        AgentEvent::DownloaderFailed { run, error } => (
            run,
            Error,
            format!("downloader could not be built: {error}"),
        ),
        AgentEvent::AllocationReplied { run, ok } => {
            let said = if *ok { "ready" } else { "refused" };
            (run, Debug, format!("allocation reply sent ({said})"))
        }
        AgentEvent::AllocationReplyDropped { run, error, .. } => (
            run,
            Warn,
            format!("allocation reply could not be published: {error}"),
        ),
        AgentEvent::Released { run, reason } => {
            let why = match reason {
                ReleaseReason::Command => "release command",
                ReleaseReason::Idle => "idle for longer than downloader_idle_ms",
                ReleaseReason::Detached => "the agent heard from no hub for its detach_after",
            };
            (run, Info, format!("downloader released ({why})"))
        }
        AgentEvent::ResultDropped {
            run,
            lease_id,
            error,
        } => (
            run,
            Warn,
            format!(
                "result of lease {lease_id} dropped after its publish retries (the request will be dispatched again): {error}"
            ),
        ),
        AgentEvent::ProxySwitched { run, proxy, reason } => (
            run,
            Warn,
            format!("proxy {proxy} switched out of rotation: {reason}"),
        ),
        AgentEvent::ProxiesRefreshed { run, count } => {
            (run, Info, format!("proxy provider ran: {count} proxies"))
        }
        AgentEvent::Redialed { run, error: None } => (run, Info, "redial done".to_owned()),
        AgentEvent::Redialed {
            run,
            error: Some(e),
        } => (run, Warn, format!("redial failed (the run continues): {e}")),
        AgentEvent::Registered
        | AgentEvent::RegisterFailed { .. }
        | AgentEvent::HeartbeatSent { .. }
        | AgentEvent::HeartbeatFailed { .. }
        | AgentEvent::Subscribed
        | AgentEvent::SubscribeFailed { .. }
        | AgentEvent::ResultPublished { .. }
        | AgentEvent::Detached { .. }
        | AgentEvent::Reattached
        | AgentEvent::Stopping => return None,
    })
}

/// The run log line of a request's outcome: none for a success or a redirect; `debug` for a
/// request dropped by robots.txt; `warn` for a response that is not a success (with its
/// status) and for a failure that is not retryable; `info` for a failure without a response
/// that may be retried. The text names the URL, the status, the error code and the reason.
pub(crate) fn outcome_line(url: &str, outcome: &FetchOutcome) -> Option<(LogLevel, String)> {
    let error = outcome.error.as_ref()?;
    let level = if error.code == "robots_disallowed" {
        LogLevel::Debug
    } else if outcome.status.is_some() || !error.retryable {
        LogLevel::Warn
    } else {
        LogLevel::Info
    };
    let reason = error
        .message
        .strip_prefix(url)
        .and_then(|rest| rest.strip_prefix(": "))
        .unwrap_or(&error.message);
    let code_text = error.code.as_str();
    let reason = if reason.is_empty() {
        &*code_text
    } else {
        reason
    };
    let kind = if error.retryable {
        "retryable"
    } else {
        "permanent"
    };
    let code = &error.code;
    let text = match outcome.status {
        Some(status) if reason != format!("http status {status}") => {
            format!("{url}: {reason} (status {status}; {code}; {kind})")
        }
        Some(status) => format!("{url}: http status {status} ({code}; {kind})"),
        None => format!("{url}: {reason} ({code}; {kind})"),
    };
    Some((level, text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use silk_bus::ResultError;
    use silk_core::ManualClock;

    fn queue(queue_lines: usize, batch_lines: usize) -> (LogQueue, ManualClock) {
        let clock = ManualClock::new(1_000);
        let q = LogQueue::new(
            AgentId::new("a1"),
            LogSettings {
                queue_lines,
                batch_lines,
                line_max_bytes: 64,
                min_level: LogLevel::Debug,
            },
            Arc::new(clock.clone()),
        );
        (q, clock)
    }

    fn texts(b: &OutBatch) -> Vec<&str> {
        b.batch.lines.iter().map(|l| l.message.as_str()).collect()
    }

    #[test]
    fn long_lines_are_cut_at_a_char_boundary_and_marked() {
        assert_eq!(truncate("short".into(), 64), "short");
        let cut = truncate("é".repeat(100), 64);
        assert!(cut.len() <= 64, "{}", cut.len());
        assert!(cut.ends_with(TRUNCATED) && cut.starts_with("éé"), "{cut}");
        let exact = "x".repeat(64);
        assert_eq!(truncate(exact.clone(), 64), exact);
        assert_eq!(
            truncate("abcdef".into(), 3),
            "abc",
            "no room for the marker"
        );
        let (q, _) = queue(10, 10);
        q.push(&RunId::new("r"), LogLevel::Info, "y".repeat(1_000));
        let b = q.take(true);
        assert!(b[0].batch.lines[0].message.ends_with(TRUNCATED));
        assert!(b[0].batch.lines[0].message.len() <= 64);
    }

    #[test]
    fn batches_per_run_with_time_and_level() {
        let (q, clock) = queue(100, 2);
        let (r1, r2) = (RunId::new("r1"), RunId::new("r2"));
        q.push(&r1, LogLevel::Info, "a".into());
        clock.advance(5);
        q.push(&r2, LogLevel::Warn, "b".into());
        q.push(&r1, LogLevel::Error, "c".into());
        q.push(&r1, LogLevel::Trace, "below the level".into());
        // r1 has a full batch, r2 not.
        let ready = q.take(false);
        assert_eq!(ready.len(), 1);
        assert_eq!(ready[0].batch.run, r1);
        assert_eq!(ready[0].batch.agent.as_str(), "a1");
        assert_eq!(texts(&ready[0]), ["a", "c"]);
        assert_eq!(
            ready[0].batch.lines[1],
            LogEntry {
                ts_ms: 1_005,
                level: LogLevel::Error,
                message: "c".into()
            }
        );
        let rest = q.take(true);
        assert_eq!(rest.len(), 1);
        assert_eq!(
            (rest[0].batch.run.as_str(), texts(&rest[0])),
            ("r2", vec!["b"])
        );
        assert!(q.take(true).is_empty(), "nothing left");
        for i in 0..5 {
            q.push(&r1, LogLevel::Info, format!("{i}"));
        }
        let taken = q.take(true);
        let chunks: Vec<Vec<&str>> = taken.iter().map(texts).collect();
        assert_eq!(chunks, [vec!["0", "1"], vec!["2", "3"], vec!["4"]]);
    }

    #[test]
    fn a_full_queue_drops_and_the_next_batch_says_how_many() {
        let (q, _) = queue(3, 100);
        let (r1, r2) = (RunId::new("r1"), RunId::new("r2"));
        for i in 0..5 {
            q.push(&r1, LogLevel::Info, format!("r1 {i}"));
        }
        q.push(&r2, LogLevel::Info, "r2 lost".into());
        assert_eq!(q.lines_dropped.load(Ordering::Relaxed), 3);
        let mut batches = q.take(true);
        batches.sort_by(|a, b| a.batch.run.cmp(&b.batch.run));
        assert_eq!(
            texts(&batches[0]),
            [
                "r1 0",
                "r1 1",
                "r1 2",
                "2 log lines dropped (the agent's log queue of 3 lines was full)"
            ]
        );
        assert_eq!(batches[0].batch.lines[3].level, LogLevel::Warn);
        assert_eq!(batches[0].run_lines(), 3);
        assert_eq!(
            texts(&batches[1]),
            ["1 log lines dropped (the agent's log queue of 3 lines was full)"],
            "a run whose every line was lost still hears of it"
        );
        // Room again.
        q.push(&r1, LogLevel::Info, "after".into());
        assert_eq!(texts(&q.take(true)[0]), ["after"]);
    }

    #[test]
    fn a_lost_batch_is_reported_by_the_next_one() {
        let (q, _) = queue(2, 100);
        let r = RunId::new("r");
        for i in 0..3 {
            q.push(&r, LogLevel::Info, format!("{i}"));
        }
        let lost = q.take(true).remove(0);
        assert_eq!(
            lost.carried,
            Dropped {
                full: 1,
                unpublished: 0
            }
        );
        q.lost(&lost);
        q.push(&r, LogLevel::Info, "next".into());
        let next = q.take(true).remove(0);
        assert_eq!(
            texts(&next),
            [
                "next",
                "3 log lines dropped (1: the agent's log queue of 2 lines was full; 2: they could not be published to the bus)"
            ]
        );
        assert_eq!(q.lines_dropped.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn split_keeps_the_dropped_line_with_its_count() {
        let (q, _) = queue(3, 100);
        let r = RunId::new("r");
        for i in 0..4 {
            q.push(&r, LogLevel::Info, format!("{i}"));
        }
        let b = q.take(true).remove(0);
        assert_eq!(b.batch.lines.len(), 4);
        let (first, second) = b.split().unwrap();
        assert_eq!((first.run_lines(), first.carried.total()), (2, 0));
        assert_eq!((second.run_lines(), second.carried.total()), (1, 1));
        let (one, _) = second.split().unwrap();
        assert!(one.split().is_none());
    }

    fn failed(status: Option<u16>, code: &str, message: &str, retryable: bool) -> FetchOutcome {
        FetchOutcome {
            status,
            error: Some(ResultError {
                code: code.into(),
                message: message.into(),
                retryable,
            }),
            ..FetchOutcome::default()
        }
    }

    #[test]
    fn outcome_lines() {
        let url = "http://h/x";
        let ok = FetchOutcome {
            status: Some(200),
            ..FetchOutcome::default()
        };
        assert_eq!(outcome_line(url, &ok), None);
        let cases = [
            (
                failed(Some(404), "http_404", "http://h/x: http status 404", false),
                LogLevel::Warn,
                "http://h/x: http status 404 (http_404; permanent)",
            ),
            (
                failed(Some(503), "http_503", "http://h/x: http status 503", true),
                LogLevel::Warn,
                "http://h/x: http status 503 (http_503; retryable)",
            ),
            (
                failed(
                    Some(403),
                    "proxy_banned",
                    "http://h/x: banned via http://p:1/: status 403",
                    true,
                ),
                LogLevel::Warn,
                "http://h/x: banned via http://p:1/: status 403 (status 403; proxy_banned; retryable)",
            ),
            (
                failed(None, "timeout", "http://h/x: timed out after 10 ms", true),
                LogLevel::Info,
                "http://h/x: timed out after 10 ms (timeout; retryable)",
            ),
            (
                failed(None, "tls", "http://h/x: tls failed: bad cert", false),
                LogLevel::Warn,
                "http://h/x: tls failed: bad cert (tls; permanent)",
            ),
            (
                failed(
                    None,
                    "robots_disallowed",
                    "http://h/x: disallowed by robots.txt",
                    false,
                ),
                LogLevel::Debug,
                "http://h/x: disallowed by robots.txt (robots_disallowed; permanent)",
            ),
            (
                failed(None, "no_downloader", "", true),
                LogLevel::Info,
                "http://h/x: no_downloader (no_downloader; retryable)",
            ),
        ];
        for (outcome, level, text) in cases {
            assert_eq!(
                outcome_line(url, &outcome),
                Some((level, text.to_owned())),
                "{outcome:?}"
            );
        }
    }

    #[test]
    fn run_events_have_lines_agent_events_none() {
        let run = RunId::new("r");
        let refused = AgentEvent::AllocationFailed {
            run: run.clone(),
            error: "qps: must be positive".into(),
        };
        let (r, level, text) = event_line(&refused).unwrap();
        assert_eq!(
            (r, level, text.as_str()),
            (
                &run,
                LogLevel::Error,
                "allocation refused: qps: must be positive"
            )
        );
        let (_, level, text) = event_line(&AgentEvent::Allocated {
            run: run.clone(),
            reloaded: false,
            existing: false,
        })
        .unwrap();
        assert_eq!(
            (level, text.as_str()),
            (LogLevel::Info, "downloader allocated")
        );
        assert!(event_line(&AgentEvent::HeartbeatSent { seq: 1 }).is_none());
        assert!(event_line(&AgentEvent::Stopping).is_none());
    }
}
