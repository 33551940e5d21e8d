//! The archive of finished requests (seed 002's "finish → archive"): every request of a
//! spider run that reached its final outcome (done, failed for good, dropped) becomes a row
//! of the store's `run_requests` table — canonical URL, outcome, HTTP status, error code,
//! attempts, agent, time — listed and filtered per run (`GET /api/v1/runs/{id}/requests`),
//! kept `HubConfig::archive_retention_ms`, and queued again from there (`requeue`).
//!
//! The runner writes a request's final outcome line (`outcomes`) before its ack, as it
//! writes items; the [`Archiver`] is an [`OutcomeConsumer`] that tails every run's outcome
//! lines from a stored offset (`runs/{id}/archive.json`) and writes them to the store in
//! batches of a page, so the archive costs the run one line append per request and the
//! store one write per page. A line written twice (a hub killed between the line and the
//! ack) is one row: a row's key is a hash of the request's URL and dedup salt, unique in
//! its run. A hub whose process dies loses no row (the file and the offset stay); a hub
//! whose machine dies loses the rows of the lines it had not written to the store yet
//! (about a page), while its requests are safe in the frontier.

use crate::error::HubError;
use crate::feeds;
use crate::routed::{FeedTask, OutcomeConsumer, OutcomeLine};
use crate::run::Feed;
use crate::state::HubCore;
use serde_json::{Map, Value};
use silk_api::runs::{
    ArchivedRequestView, RequestOutcome, RequestsPage, RequestsParams, RequeueRequest, Requeued,
};
use silk_core::RunId;
use silk_store::{ArchiveFilter, ArchivedRequest, MetaStore};
use std::sync::Arc;
use std::time::Duration;

/// The offset file of the archive in each run's directory.
const STATE_FILE: &str = "archive.json";
/// Outcome lines read and written to the store at once.
const PAGE: usize = 1000;
/// How long lines gather after a page that was not full: a run at thousands of requests a
/// second then costs the store a write per page, not one per few lines.
const LINGER: Duration = Duration::from_millis(250);
/// Rows deleted at once by the retention (so that no write holds the store for long).
const DELETE_STEP: u32 = 10_000;
/// Most requests queued again by one call.
pub(crate) const MAX_REQUEUE: u32 = 10_000;
/// The name a run started for requeued requests shows as its feed.
const REQUEUE_FEED: &str = "requeue";
/// How long a run started for requeued requests waits idle for more before it ends, ms.
const REQUEUE_IDLE_MS: u64 = 60_000;

/// How long rows are kept when the archive is off (those written while it was on).
const OFF_RETENTION_MS: u64 = 30 * 24 * 3600 * 1000;

/// Starts the archive: the consumer of every run's outcome lines (when it is on), and its
/// retention (also when it is off, for the rows of before).
pub(crate) fn start(shared: &Arc<HubCore>) {
    let keep_ms = match shared.config.archive_retention_ms {
        0 => OFF_RETENTION_MS,
        on => {
            let archiver = Arc::new(Archiver {
                store: shared.store.clone(),
                stop: shared.stop.subscribe(),
            });
            let consumer = shared.clone();
            tokio::spawn(async move {
                if let Err(e) = feeds::consume_outcomes(consumer, archiver).await {
                    tracing::error!(error = %e, "the archive of finished requests stopped");
                }
            });
            on
        }
    };
    let (store, clock) = (shared.store.clone(), shared.clock.clone());
    let mut stop = shared.stop.subscribe();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(3600));
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = tick.tick() => {}
            }
            retention_pass(&*store, clock.now_ms().saturating_sub(keep_ms)).await;
        }
    });
}

/// Deletes the archived requests older than `before_ms`, a step at a time.
pub(crate) async fn retention_pass(store: &dyn MetaStore, before_ms: u64) {
    let mut total = 0;
    loop {
        match store.delete_archived_before(before_ms, DELETE_STEP).await {
            Ok(n) => {
                total += n;
                if n < u64::from(DELETE_STEP) {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "archive retention failed; retrying in an hour");
                break;
            }
        }
    }
    if total > 0 {
        tracing::info!(
            requests = total,
            "old archived requests deleted (retention)"
        );
    }
}

/// Writes the runs' outcome lines to the store's archive.
struct Archiver {
    store: Arc<dyn MetaStore>,
    stop: tokio::sync::watch::Receiver<bool>,
}

#[async_trait::async_trait]
impl OutcomeConsumer for Archiver {
    fn name(&self) -> &str {
        "archive"
    }

    fn page_size(&self) -> usize {
        PAGE
    }

    fn state_file(&self) -> Option<String> {
        Some(STATE_FILE.to_owned())
    }

    fn linger(&self) -> Duration {
        LINGER
    }

    fn task(&self, line: OutcomeLine) -> Option<Value> {
        serde_json::to_value(row_of(line)).ok()
    }

    async fn deliver(&self, run: &RunId, todo: &mut Vec<Value>) -> Result<(), String> {
        use serde::Deserialize;
        let rows: Vec<ArchivedRequest> = todo
            .iter()
            .filter_map(|v| ArchivedRequest::deserialize(v).ok())
            .collect();
        match self.store.archive_requests(&rows).await {
            Ok(_) => {
                todo.clear();
                Ok(())
            }
            Err(e) => {
                tracing::warn!(run = %run, error = %e, "finished requests not archived yet; retrying");
                Err(e.to_string())
            }
        }
    }

    async fn stopped(&self) {
        let mut stop = self.stop.clone();
        let _ = stop.wait_for(|s| *s).await;
    }
}

/// A request's key in its run's archive: a hash of its method, URL and dedup salt.
pub(crate) fn key_of(method: &str, url: &str, salt: Option<&str>) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    if method != "GET" {
        h.update(method.as_bytes());
        h.update(b" ");
    }
    h.update(url.as_bytes());
    if let Some(salt) = salt {
        h.update(b"\n");
        h.update(salt.as_bytes());
    }
    h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The archive row of an outcome line.
fn row_of(line: OutcomeLine) -> ArchivedRequest {
    let mut doc = Map::new();
    doc.insert("method".into(), line.method.clone().into());
    doc.insert("depth".into(), line.depth.into());
    doc.insert("error_msg".into(), line.error_msg.clone().into());
    doc.insert("bytes".into(), line.bytes.into());
    doc.insert("fetch_ms".into(), line.fetch_ms.into());
    doc.insert("items".into(), line.items.into());
    doc.insert("links".into(), line.links.into());
    if let Some(salt) = &line.salt {
        doc.insert("salt".into(), salt.clone().into());
    }
    if line.redirect {
        doc.insert("redirect".into(), true.into());
    }
    ArchivedRequest {
        key: key_of(&line.method, &line.url, line.salt.as_deref()),
        outcome: line.outcome().to_owned(),
        run: line.run,
        time_ms: line.time_ms,
        url: line.url,
        status: line.http_code,
        error_code: line.error_code,
        attempts: line.retries.saturating_add(1),
        agent: Some(line.agent).filter(|a| !a.is_empty()),
        doc: Value::Object(doc),
        requeued_ms: None,
    }
}

/// The API's view of an archive row.
fn view_of(row: ArchivedRequest) -> ArchivedRequestView {
    let doc = |k: &str| row.doc.get(k);
    let num = |k: &str| doc(k).and_then(Value::as_u64).unwrap_or(0);
    ArchivedRequestView {
        method: doc("method")
            .and_then(Value::as_str)
            .unwrap_or("GET")
            .to_owned(),
        error_msg: doc("error_msg")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        depth: u32::try_from(num("depth")).unwrap_or(u32::MAX),
        bytes: num("bytes"),
        items: num("items"),
        outcome: row.outcome.parse().unwrap_or(RequestOutcome::Failed),
        key: row.key,
        url: row.url,
        status: row.status,
        error_code: row.error_code,
        attempts: row.attempts,
        agent: row.agent,
        time_ms: row.time_ms,
        requeued_ms: row.requeued_ms,
    }
}

/// A page cursor: `TIME_MS:KEY`.
fn parse_after(after: &str) -> Result<(u64, String), HubError> {
    after
        .split_once(':')
        .and_then(|(t, k)| Some((t.parse().ok()?, k.to_owned())))
        .filter(|(_, k)| !k.is_empty())
        .ok_or_else(|| {
            HubError::BadRun(format!(
                "`after`: `{after}` is not a cursor of this list (give the `next` of a page)"
            ))
        })
}

/// A page of `run`'s archived requests.
pub(crate) async fn list(
    shared: &HubCore,
    run: &RunId,
    params: &RequestsParams,
) -> Result<RequestsPage, HubError> {
    let limit = params.limit.unwrap_or(100).clamp(1, 1000);
    let filter = ArchiveFilter {
        run: run.to_string(),
        outcome: params.outcome.map(|o| o.as_str().to_owned()),
        error_code: params.error_code.clone(),
        status: params.status,
        requeued: params.requeued,
        after: params.after.as_deref().map(parse_after).transpose()?,
        limit: Some(limit),
        ..ArchiveFilter::default()
    };
    let rows = shared.store.list_archived(&filter).await?;
    // Counted on the first page only: a count reads every row that matches.
    let counts = match filter.after {
        None => Some(shared.store.count_archived(&filter).await?),
        Some(_) => None,
    };
    let next = (rows.len() == limit as usize)
        .then(|| rows.last().map(|r| format!("{}:{}", r.time_ms, r.key)))
        .flatten();
    Ok(RequestsPage {
        requests: rows.into_iter().map(view_of).collect(),
        counts,
        next,
    })
}

/// Queues `run`'s archived requests that `ask` names again, once each (a row already
/// requeued is not taken again; its requeued fetch has a row of its own): into the run while
/// this hub drives it, else (the run is over) into its job's run for fed requests, started
/// for them when the job has none open. A run with no job that is over, or one another hub
/// drives, is `409`.
pub(crate) async fn requeue(
    shared: &Arc<HubCore>,
    run: &RunId,
    ask: &RequeueRequest,
) -> Result<Requeued, HubError> {
    let limit = ask.limit.unwrap_or(MAX_REQUEUE);
    if limit == 0 || limit > MAX_REQUEUE {
        return Err(HubError::BadRun(format!(
            "`limit`: {limit} is not between 1 and {MAX_REQUEUE}"
        )));
    }
    if ask
        .keys
        .as_ref()
        .is_some_and(|k| k.len() > MAX_REQUEUE as usize)
    {
        return Err(HubError::BadRun(format!(
            "`keys`: more than {MAX_REQUEUE} at once"
        )));
    }
    // Named keys are taken whatever their outcome unless one is asked; else failed ones.
    let outcome = match (&ask.keys, ask.outcome) {
        (_, Some(o)) => Some(o),
        (Some(_), None) => None,
        (None, None) => Some(RequestOutcome::Failed),
    };
    let filter = ArchiveFilter {
        run: run.to_string(),
        keys: ask.keys.clone(),
        outcome: outcome.map(|o| o.as_str().to_owned()),
        error_code: ask.error_code.clone(),
        status: ask.status,
        requeued: Some(false),
        after: None,
        limit: Some(limit),
    };
    let target = target_of(shared, run).await?;
    let rows = shared.store.list_archived(&filter).await?;
    let mut refused = Vec::new();
    if let Some(keys) = &ask.keys {
        let found: std::collections::HashSet<&str> = rows.iter().map(|r| r.key.as_str()).collect();
        for key in keys.iter().filter(|k| !found.contains(k.as_str())) {
            refused.push(format!(
                "{key}: no such finished request of the run, or queued again already, or not of the outcome asked"
            ));
        }
    }
    // What goes: GET requests (a body is not archived), each with its depth, salted so
    // that the run's dedup lets each through once.
    let mut tasks = Vec::with_capacity(rows.len());
    let mut keys = Vec::with_capacity(rows.len());
    for row in rows {
        let method = row
            .doc
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or("GET");
        if method != "GET" {
            refused.push(format!(
                "{method} {}: only GET requests are queued again (a body is not archived)",
                row.url
            ));
            continue;
        }
        let depth = row
            .doc
            .get("depth")
            .and_then(Value::as_u64)
            .and_then(|d| u32::try_from(d).ok())
            .unwrap_or(0);
        tasks.push(FeedTask {
            url: row.url,
            priority: 0,
            task: Map::new(),
            delivery_id: requeue_salt(run, &row.key),
            depth,
        });
        keys.push(row.key);
    }
    let now = shared.clock.now_ms();
    let urls: Vec<String> = tasks.iter().map(|t| t.url.clone()).collect();
    let (into, answers) = if tasks.is_empty() {
        (None, Vec::new())
    } else {
        match target {
            Target::Run(active) => {
                let (requests, answers) = feeds::requests_of(&active.spider, tasks, now);
                if !requests.is_empty() {
                    active
                        .feed(&shared.runs_cx, requests)
                        .await
                        .map_err(|e| match e {
                            crate::live::FeedError::Closed => HubError::WrongState {
                                run: run.clone(),
                                state: active.state().to_string(),
                                action: "requeue (the run is ending: try again once it is over, and they go to a run of its job)".into(),
                            },
                            crate::live::FeedError::Frontier(reason) => HubError::RunStorage {
                                run: run.clone(),
                                reason,
                            },
                        })?;
                }
                (Some(run.clone()), answers)
            }
            Target::Job(job) => {
                let feed = Feed {
                    outbound: REQUEUE_FEED.into(),
                    idle_ms: REQUEUE_IDLE_MS,
                };
                let answers = feeds::feed_job(shared, &job, feed, tasks).await?;
                (shared.fed_run_of(&job).map(|r| r.id.clone()), answers)
            }
        }
    };
    let mut taken = Vec::with_capacity(keys.len());
    for ((key, url), answer) in keys.into_iter().zip(urls).zip(answers) {
        match answer {
            Ok(()) => taken.push(key),
            Err(why) => refused.push(format!("{url}: {why}")),
        }
    }
    let requeued = taken.len() as u64;
    if !taken.is_empty() {
        // They are queued: a mark that fails only lets a later requeue offer them again (and
        // a run's dedup drops what it has already).
        if let Err(e) = shared
            .store
            .mark_archived_requeued(run.as_str(), &taken, now)
            .await
        {
            tracing::warn!(run = %run, error = %e, "requeued requests not marked; a later requeue offers them again");
        }
        shared.logs.hub(
            run,
            silk_store::Level::Info,
            match &into {
                Some(to) if to != run => {
                    format!("{requeued} finished request(s) queued again, into run `{to}`")
                }
                _ => format!("{requeued} finished request(s) queued again"),
            },
        );
    }
    Ok(Requeued {
        requeued,
        run: into.filter(|_| requeued > 0),
        refused,
    })
}

/// Where a run's requeued requests go.
enum Target {
    /// The run itself, which this hub drives.
    Run(Arc<crate::live::Run>),
    /// The run is over: its job's run for fed requests (the job's id).
    Job(String),
}

/// Where `run`'s requeued requests would go now, or why nowhere.
async fn target_of(shared: &Arc<HubCore>, run: &RunId) -> Result<Target, HubError> {
    if let Some(active) = shared.active_run(run).filter(|r| !r.is_closing()) {
        return Ok(Target::Run(active));
    }
    let record = shared
        .repo
        .get(run)
        .await?
        .ok_or_else(|| HubError::NoSuchRun(run.clone()))?;
    if !record.state.is_terminal() {
        let here = record.hub.as_ref() == Some(&shared.hub_id) || shared.active_run(run).is_some();
        return Err(if here {
            HubError::WrongState {
                run: run.clone(),
                state: record.state.to_string(),
                action:
                    "requeue (the run is ending or not started on this hub: try again in a moment)"
                        .into(),
            }
        } else {
            HubError::Conflict(format!(
                "run `{run}` is {} and another hub drives it{}: ask that hub to queue its requests again",
                record.state,
                record
                    .hub
                    .as_ref()
                    .map(|h| format!(" (`{h}`)"))
                    .unwrap_or_default()
            ))
        });
    }
    match record.job_id {
        Some(job) => Ok(Target::Job(job)),
        None => Err(HubError::WrongState {
            run: run.clone(),
            state: record.state.to_string(),
            action: "requeue (a run that is over and belongs to no job has no run to take its requests: start a new run with them)".into(),
        }),
    }
}

/// The dedup salt of a requeued request: new for each archived request, so the run's
/// dedup lets it through once.
fn requeue_salt(run: &RunId, key: &str) -> String {
    format!("requeue:{run}:{key}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(outcome: &str, salt: Option<&str>) -> OutcomeLine {
        OutcomeLine {
            v: 1,
            ok: outcome == "done",
            http_code: Some(503),
            error_code: Some("http_503".into()),
            error_msg: "503 Service Unavailable".into(),
            url: "http://h/p".into(),
            method: "GET".into(),
            depth: 2,
            retries: 3,
            items: 0,
            links: 0,
            bytes: 10,
            fetch_ms: 4,
            agent: "a1".into(),
            run: "r1".into(),
            tenant: "default".into(),
            job: None,
            job_id: None,
            spider_name: "s".into(),
            time_ms: 77,
            task: None,
            outcome: outcome.into(),
            salt: salt.map(str::to_owned),
            redirect: false,
        }
    }

    #[test]
    fn a_line_becomes_a_row_and_a_view() {
        let row = row_of(line("failed", None));
        assert_eq!(row.outcome, "failed");
        assert_eq!(row.attempts, 4, "retries used + the first attempt");
        assert_eq!(row.key, key_of("GET", "http://h/p", None));
        let view = view_of(row);
        assert_eq!(view.outcome, RequestOutcome::Failed);
        assert_eq!((view.depth, view.bytes, view.status), (2, 10, Some(503)));
        assert_eq!(view.error_msg, "503 Service Unavailable");
        assert_eq!(view.method, "GET");
    }

    #[test]
    fn keys_tell_salted_requests_apart_and_lines_of_older_hubs_read() {
        let get = |salt| key_of("GET", "http://h/p", salt);
        assert_ne!(get(None), get(Some("x")));
        assert_ne!(get(Some("a")), get(Some("b")));
        assert_ne!(get(None), key_of("POST", "http://h/p", None));
        assert_eq!(get(Some("a")).len(), 32);
        let mut old = line("", None);
        old.ok = true;
        assert_eq!(row_of(old).outcome, "done");
        assert_eq!(row_of(line("", None)).outcome, "failed");
        assert_eq!(row_of(line("dropped", None)).outcome, "dropped");
    }

    #[test]
    fn cursors_round_trip_and_bad_ones_are_named() {
        assert_eq!(parse_after("12:abc").unwrap(), (12, "abc".to_owned()));
        for bad in ["", "12", "x:abc", "12:"] {
            let e = parse_after(bad).unwrap_err().to_string();
            assert!(e.contains("`after`"), "{e}");
        }
    }
}
