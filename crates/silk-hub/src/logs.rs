//! Run logs: every run's log lines (hub events and the agents' `log` batches) go to the
//! store, with time, level and source (`hub` or `agent:ID`).
//!
//! Writing never blocks a run: [`RunLogs::log`] puts the line on a bounded queue and
//! returns; a writer task stores lines in batches (at most [`BATCH`] lines or every
//! [`FLUSH_MS`] ms). When the queue is full the line is dropped and counted per run, and the
//! next batch carries one line saying how many were dropped. A message longer than
//! [`MAX_MESSAGE_BYTES`] is cut (at a character boundary) and marked. A store that fails is
//! retried with back-off; after [`STORE_ATTEMPTS`] attempts the batch is dropped and counted
//! (lines are never worth stopping a run for).
//!
//! Following: each stored batch bumps a [`watch`] counter, so a follower (the SSE tail) waits
//! for it and then asks the store for lines after the last id it has seen: no polling, and
//! the store stays the only truth. Retention: a task deletes lines older than
//! `log_retention_ms` every hour.

use parking_lot::Mutex;
use silk_core::{Clock, RunId};
use silk_store::{Level, MetaStore, NewLogLine};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Lines queued at most; more are dropped and counted.
pub const QUEUE: usize = 65_536;
/// Lines stored in one batch at most.
pub const BATCH: usize = 512;
pub use crate::config::LOG_FLUSH_MS as FLUSH_MS;
/// Longest message kept, bytes; longer ones are cut and marked.
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024;
/// Attempts to store one batch.
const STORE_ATTEMPTS: u32 = 5;

/// The log queue of a hub.
pub(crate) struct RunLogs {
    /// Taken at shutdown: the writer then drains the queue and ends.
    tx: Mutex<Option<mpsc::Sender<NewLogLine>>>,
    dropped: Mutex<BTreeMap<String, u64>>,
    dropped_total: AtomicU64,
    stored_total: AtomicU64,
    stored: watch::Sender<u64>,
    clock: Arc<dyn Clock>,
}

/// Cuts `message` to [`MAX_MESSAGE_BYTES`] at a character boundary, marking the cut.
pub(crate) fn truncate(mut message: String) -> String {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message;
    }
    let total = message.len();
    silk_core::text::truncate(&mut message, MAX_MESSAGE_BYTES);
    message.push_str(&format!(" … [truncated: {total} bytes]"));
    message
}

impl RunLogs {
    /// The queue, and the receiving end for [`writer`].
    pub(crate) fn new(clock: Arc<dyn Clock>) -> (Arc<Self>, mpsc::Receiver<NewLogLine>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let logs = Arc::new(Self {
            tx: Mutex::new(Some(tx)),
            dropped: Mutex::new(BTreeMap::new()),
            dropped_total: AtomicU64::new(0),
            stored_total: AtomicU64::new(0),
            stored: watch::channel(0).0,
            clock,
        });
        (logs, rx)
    }

    /// Logs a line of a run from the hub.
    pub(crate) fn hub(&self, run: &RunId, level: Level, message: impl Into<String>) {
        self.line(
            run.as_str(),
            self.clock.now_ms(),
            level,
            "hub",
            message.into(),
        );
    }

    /// Queues a line; drops (and counts) it when the queue is full.
    pub(crate) fn line(&self, run: &str, ts_ms: u64, level: Level, source: &str, message: String) {
        let line = NewLogLine {
            run_id: run.to_owned(),
            ts_ms,
            level,
            source: source.to_owned(),
            message: truncate(message),
        };
        let sent = match &*self.tx.lock() {
            Some(tx) => tx.try_send(line).is_ok(),
            None => false,
        };
        if !sent {
            self.dropped_total.fetch_add(1, Ordering::Relaxed);
            let mut dropped = self.dropped.lock();
            *dropped.entry(run.to_owned()).or_insert(0) += 1;
        }
    }

    /// Closes the queue: the writer stores what is queued and ends.
    pub(crate) fn close(&self) {
        self.tx.lock().take();
    }

    /// Lines dropped so far (queue full or store down).
    pub(crate) fn dropped_total(&self) -> u64 {
        self.dropped_total.load(Ordering::Relaxed)
    }

    /// Lines stored so far.
    pub(crate) fn stored_total(&self) -> u64 {
        self.stored_total.load(Ordering::Relaxed)
    }

    /// A receiver that changes after every stored batch.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.stored.subscribe()
    }

    fn take_dropped(&self) -> Vec<NewLogLine> {
        let dropped = std::mem::take(&mut *self.dropped.lock());
        let now = self.clock.now_ms();
        dropped
            .into_iter()
            .map(|(run, n)| NewLogLine {
                run_id: run,
                ts_ms: now,
                level: Level::Warn,
                source: "hub".into(),
                message: format!(
                    "{n} log lines dropped (the hub's log queue was full or the store was down)"
                ),
            })
            .collect()
    }
}

/// Stores queued lines in batches until the queue closes and is drained.
pub(crate) async fn writer(
    logs: Arc<RunLogs>,
    mut rx: mpsc::Receiver<NewLogLine>,
    store: Arc<dyn MetaStore>,
) {
    let mut batch: Vec<NewLogLine> = Vec::with_capacity(BATCH);
    loop {
        let first = rx.recv().await;
        let closed = first.is_none();
        batch.extend(first);
        if !closed {
            let deadline = tokio::time::Instant::now() + Duration::from_millis(FLUSH_MS);
            while batch.len() < BATCH {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(line)) => batch.push(line),
                    Ok(None) | Err(_) => break,
                }
            }
        }
        batch.extend(logs.take_dropped());
        if !batch.is_empty() {
            store_batch(&logs, &store, &batch).await;
            batch.clear();
        }
        if closed {
            return;
        }
    }
}

async fn store_batch(logs: &RunLogs, store: &Arc<dyn MetaStore>, batch: &[NewLogLine]) {
    let mut wait = Duration::from_millis(100);
    for attempt in 1..=STORE_ATTEMPTS {
        match store.append_logs(batch).await {
            Ok(()) => {
                logs.stored_total
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
                logs.stored.send_modify(|n| *n += 1);
                return;
            }
            Err(e) if attempt < STORE_ATTEMPTS => {
                tracing::warn!(error = %e, attempt, "run log lines not stored yet; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(5));
            }
            Err(e) => {
                tracing::error!(error = %e, lines = batch.len(), "run log lines dropped: the store keeps failing");
                logs.dropped_total
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
                let mut dropped = logs.dropped.lock();
                for line in batch {
                    *dropped.entry(line.run_id.clone()).or_insert(0) += 1;
                }
            }
        }
    }
}

/// How long the store keeps what the hub writes and nobody deletes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retention {
    /// Run and build log lines (a job's `log_retention_ms` may shorten it for its runs).
    pub logs_ms: u64,
    /// The router's failure records.
    pub router_failures_ms: u64,
}

/// Deletes log lines older than `retention.logs_ms` (and lines of a job's runs older than
/// the job's `log_retention_ms`), and router failure records older than
/// `retention.router_failures_ms`, now and then every hour, until `stop`.
pub(crate) async fn retention(
    store: Arc<dyn MetaStore>,
    clock: Arc<dyn Clock>,
    retention: Retention,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(3600));
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => {}
        }
        let now = clock.now_ms();
        match store
            .delete_router_failures_before(now.saturating_sub(retention.router_failures_ms))
            .await
        {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                records = n,
                "old router failure records deleted (retention)"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "router failure retention failed; retrying in an hour")
            }
        }
        retention_pass(&*store, now, retention.logs_ms).await;
    }
}

/// One pass of [`retention`] at `now_ms`.
pub(crate) async fn retention_pass(store: &dyn MetaStore, now_ms: u64, retention_ms: u64) {
    match store
        .delete_logs_before(now_ms.saturating_sub(retention_ms))
        .await
    {
        Ok(0) => {}
        Ok(n) => tracing::info!(lines = n, "old run log lines deleted (retention)"),
        Err(e) => tracing::warn!(error = %e, "log retention failed; retrying in an hour"),
    }
    let jobs = match store.list_jobs().await {
        Ok(jobs) => jobs,
        Err(e) => {
            return tracing::warn!(error = %e, "job log retention failed; retrying in an hour");
        }
    };
    for row in jobs {
        let name = row.name.clone();
        let Ok(job) = crate::jobs::job_from_row(row) else {
            continue;
        };
        let Some(keep) = job.spec.log_retention_ms.filter(|k| *k < retention_ms) else {
            continue;
        };
        match store
            .delete_job_logs_before(&job.id, now_ms.saturating_sub(keep))
            .await
        {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(job = %name, lines = n, "old log lines of the job's runs deleted (its retention)")
            }
            Err(e) => {
                tracing::warn!(job = %name, error = %e, "job log retention failed; retrying in an hour")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A retention pass: the hub's retention for every line, a job's shorter one for its
    /// runs' lines; a job's longer one changes nothing.
    #[tokio::test]
    async fn a_jobs_retention_deletes_its_runs_old_lines_sooner() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("s.db").display());
        let store = silk_store::open(&url).await.unwrap();
        let job = |id: &str, keep: Option<u64>| {
            let mut doc = serde_json::json!({
                "id": id, "name": id, "spider": "name: s\nstart_urls: ['http://127.0.0.1:1/']\n",
                "spider_name": "s", "created_ms": 0, "updated_ms": 0, "next_fire_ms": null,
                "last_fire_ms": null, "schedule_from_ms": 0, "last_run": null, "queued": 0,
                "retry_pending": null,
            });
            if let Some(keep) = keep {
                doc["log_retention_ms"] = keep.into();
            }
            let job: silk_api::jobs::Job = serde_json::from_value(doc).unwrap();
            crate::jobs::job_row(&job).unwrap()
        };
        for row in [
            job("short", Some(1_000)),
            job("long", Some(1_000_000)),
            job("plain", None),
        ] {
            store.create_job(&row).await.unwrap();
        }
        for (run, job_id) in [
            ("r-short", "short"),
            ("r-long", "long"),
            ("r-plain", "plain"),
        ] {
            let row = silk_store::RunRow {
                id: run.into(),
                job_id: Some(job_id.into()),
                tenant: silk_store::DEFAULT_TENANT.into(),
                state: "succeeded".into(),
                created_ms: 0,
                finished_ms: None,
                record: serde_json::json!({}),
            };
            store.put_run(&row).await.unwrap();
        }
        let now = 100_000;
        let lines: Vec<NewLogLine> = ["r-short", "r-long", "r-plain"]
            .iter()
            .flat_map(|run| {
                [(now - 50_000, "old"), (now - 500, "new")].map(|(ts_ms, what)| NewLogLine {
                    run_id: (*run).into(),
                    ts_ms,
                    level: Level::Info,
                    source: "hub".into(),
                    message: format!("{run} {what}"),
                })
            })
            .collect();
        store.append_logs(&lines).await.unwrap();
        retention_pass(&*store, now, 60_000).await;
        let left = store
            .search_logs(&silk_store::LogSearch {
                limit: 100,
                ..Default::default()
            })
            .await
            .unwrap();
        let mut texts: Vec<String> = left.into_iter().map(|l| l.message).collect();
        texts.sort();
        assert_eq!(
            texts,
            [
                "r-long new",
                "r-long old",
                "r-plain new",
                "r-plain old",
                "r-short new"
            ]
        );
    }

    #[test]
    fn long_messages_are_cut_at_a_char_boundary_and_marked() {
        let short = "é".repeat(10);
        assert_eq!(truncate(short.clone()), short);
        let long = "é".repeat(MAX_MESSAGE_BYTES); // 2 bytes each
        let cut = truncate(long);
        assert!(cut.len() < MAX_MESSAGE_BYTES + 64);
        assert!(cut.ends_with(&format!("[truncated: {} bytes]", 2 * MAX_MESSAGE_BYTES)));
    }
}
