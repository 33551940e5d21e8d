//! Item sinks besides the run's JSON Lines file, and reading that file for the API.
//!
//! The JSON Lines file `runs/{id}/items.jsonl` is always written (idempotent on the item
//! key, before the request is acked): it is the truth — except for a run whose frontier is
//! in the cluster's Redis, whose truth is the store's items table (written before the ack
//! too, by every hub that drives the run); its file then holds this hub's share. The other sinks *tail* it: a task per
//! sink and run reads the complete lines after its offset, delivers them, and then stores the
//! new offset (`runs/{id}/sink-{name}.json`) — the hub's one tailer (`tailer`). So a sink that is slow or down never slows the
//! run and loses nothing: delivery is at least once, in order, resumes after a hub restart
//! (a marker file `sinks.pending` says which runs still have items to deliver), and each
//! item carries its key so that the receiver is idempotent too:
//! - `sql`: `INSERT … ON CONFLICT DO NOTHING` into the store's `items` table on (run, key);
//! - `webhook`: `POST url` with `{"run": ID, "items": [{"key": K, "item": {...}}]}`; any
//!   2xx is a delivery, anything else is retried with back-off (1 s doubling to 60 s).

use crate::error::HubError;
use crate::hub::HubCore;
use crate::run::{RunRecord, WebhookSink};
use crate::runner::Run;
use crate::tailer::{self, Backoff, Page, Tail, Writer};
use serde::{Deserialize, Serialize};
use silk_core::RunId;
use silk_store::Level;
use std::io::{BufRead, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The marker of a run whose sinks have not delivered everything yet.
pub(crate) const PENDING: &str = "sinks.pending";

/// Most bytes of item lines read at once.
const MAX_READ_BYTES: usize = 4 << 20;

/// A page of items read from a run's JSON Lines file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ItemsPage {
    /// The items.
    #[schema(value_type = Vec<Object>)]
    pub items: Vec<serde_json::Value>,
    /// The cursor of the next page (a byte offset in the file).
    pub next_cursor: u64,
    /// Whether the file holds nothing more right now.
    pub done: bool,
}

/// Reads at most `limit` complete lines of `path` from byte `cursor`. A line that is not
/// JSON (a torn last line after a crash is never complete, so this is damage) is skipped.
pub(crate) fn read_items(path: &Path, cursor: u64, limit: usize) -> Result<ItemsPage, String> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(ItemsPage {
                items: Vec::new(),
                next_cursor: cursor,
                done: true,
            });
        }
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let len = file
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    if cursor >= len {
        return Ok(ItemsPage {
            items: Vec::new(),
            next_cursor: cursor.min(len),
            done: true,
        });
    }
    let mut reader = std::io::BufReader::new(file);
    reader
        .seek(SeekFrom::Start(cursor))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut items = Vec::new();
    let mut pos = cursor;
    let mut read = 0usize;
    let mut line = Vec::new();
    while items.len() < limit && read < MAX_READ_BYTES {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if n == 0 || line.last() != Some(&b'\n') {
            break; // end, or a line still being written
        }
        pos += n as u64;
        read += n;
        match serde_json::from_slice::<serde_json::Value>(&line) {
            Ok(v) => items.push(v),
            Err(e) => {
                tracing::warn!(file = %path.display(), offset = pos - n as u64, error = %e, "unreadable item line skipped")
            }
        }
    }
    Ok(ItemsPage {
        items,
        next_cursor: pos,
        done: pos >= len,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Offset {
    offset: u64,
    delivered: u64,
}

/// One sink of one run.
enum Target {
    Sql,
    Webhook(WebhookSink, reqwest::Client),
}

impl Target {
    fn name(&self) -> &'static str {
        match self {
            Target::Sql => "sql",
            Target::Webhook(..) => "webhook",
        }
    }

    fn batch(&self) -> usize {
        match self {
            Target::Sql => 500,
            Target::Webhook(w, _) => w.batch.unwrap_or(100).max(1) as usize,
        }
    }

    async fn deliver(
        &self,
        shared: &HubCore,
        run: &RunId,
        key_field: &str,
        items: &[serde_json::Value],
    ) -> Result<(), String> {
        let keyed: Vec<(String, &serde_json::Value)> = items
            .iter()
            .map(|item| (item_key(item, key_field), item))
            .collect();
        match self {
            Target::Sql => {
                let now = shared.clock.now_ms();
                let rows: Vec<(String, u64, serde_json::Value)> = keyed
                    .into_iter()
                    .map(|(k, v)| (k, now, v.clone()))
                    .collect();
                shared
                    .store
                    .insert_items(run.as_str(), &rows)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
            Target::Webhook(w, client) => {
                let body = serde_json::json!({
                    "run": run,
                    "items": keyed.iter().map(|(k, v)| serde_json::json!({"key": k, "item": v})).collect::<Vec<_>>(),
                });
                let body = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
                let mut request = client
                    .post(&w.url)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body);
                for (k, v) in &w.headers {
                    request = request.header(k, v);
                }
                let answer = request.send().await.map_err(|e| {
                    // reqwest's error names the URL, never the headers.
                    format!("POST failed: {e}")
                })?;
                if answer.status().is_success() {
                    Ok(())
                } else {
                    Err(format!("answered HTTP {}", answer.status().as_u16()))
                }
            }
        }
    }
}

/// A page of a run's items from the store's items table (a run with a shared frontier keeps
/// them there): at most `limit` after the item sequence `cursor`.
pub(crate) async fn read_stored_items(
    store: &dyn silk_store::MetaStore,
    run: &RunId,
    cursor: u64,
    limit: usize,
) -> Result<ItemsPage, HubError> {
    let after = i64::try_from(cursor).unwrap_or(i64::MAX);
    let limit = limit.clamp(1, silk_store::MAX_PAGE as usize);
    let rows = store.list_items(run.as_str(), after, limit as u32).await?;
    let done = rows.len() < limit;
    let next_cursor = rows
        .last()
        .map_or(cursor, |r| u64::try_from(r.seq).unwrap_or(cursor));
    Ok(ItemsPage {
        items: rows.into_iter().map(|r| r.data).collect(),
        next_cursor,
        done,
    })
}

/// The item's key as a string (the sink writes only items that have one).
pub(crate) fn item_key(item: &serde_json::Value, field: &str) -> String {
    match item.get(field) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

/// Starts the sink tasks of a run that has sinks (new, resumed, or ended with items not yet
/// delivered). Each ends once the run is over and every item is delivered.
pub(crate) fn start(shared: &Arc<HubCore>, record: &RunRecord) -> Result<(), HubError> {
    let mut targets = Vec::new();
    // A run with a shared frontier writes its items to the store's table itself.
    let in_store = record.shared_frontier.is_some();
    if record.sinks.sql && !in_store {
        targets.push(Target::Sql);
    }
    if let Some(w) = &record.sinks.webhook {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| HubError::BadRun(format!("sinks.webhook: {e}")))?;
        targets.push(Target::Webhook(w.clone(), client));
    }
    if targets.is_empty() {
        return Ok(());
    }
    let key_field = silk_core::spider::Spider::from_yaml(&record.spider, "spider")
        .map(|s| s.spec.item_key.clone())
        .map_err(|e| HubError::BadRun(e.to_string()))?;
    shared.files.write_state(&record.id, PENDING, &true)?;
    let remaining = Arc::new(std::sync::atomic::AtomicUsize::new(targets.len()));
    for target in targets {
        tokio::spawn(tail(
            shared.clone(),
            record.id.clone(),
            key_field.clone(),
            target,
            remaining.clone(),
            in_store,
        ));
    }
    Ok(())
}

/// Restarts the sinks of runs that ended with items not yet delivered (hub restart).
pub(crate) async fn resume_pending(shared: &Arc<HubCore>) {
    for id in shared.files.runs_with_state(PENDING) {
        if shared.active_run(&id).is_some() {
            continue; // started with its run
        }
        let record = match shared.store.get_run(id.as_str()).await {
            Ok(Some(row)) => match crate::hub::record_of(row) {
                Ok(r) => r,
                Err(_) => continue,
            },
            _ => continue,
        };
        if let Err(e) = start(shared, &record) {
            tracing::warn!(run = %id, error = %e, "item sinks not resumed");
        }
    }
}

/// One sink of one run, as a consumer of the run's item log.
struct SinkTail {
    shared: Arc<HubCore>,
    run: RunId,
    key_field: String,
    target: Target,
    remaining: Arc<std::sync::atomic::AtomicUsize>,
    /// The run's items are in the store's table (a shared frontier), not its file.
    in_store: bool,
    path: std::path::PathBuf,
    state_file: String,
    at: Offset,
}

impl Tail for SinkTail {
    type Entry = serde_json::Value;
    type Waker = Arc<Run>;

    fn writer(&self) -> Writer<Arc<Run>> {
        match self.shared.active_run(&self.run) {
            Some(run) => Writer::Active(run),
            None => Writer::Over,
        }
    }

    async fn written(run: &Arc<Run>) {
        run.items_written.notified().await;
    }

    async fn read(&mut self, offset: u64) -> Result<Page<serde_json::Value>, String> {
        // A run with a shared frontier is tailed in the store (every hub that drove it wrote
        // there; the offset is then the item sequence, and a hub that adopts the run
        // delivers from its own offset: at least once).
        let page = if self.in_store {
            let store = self.shared.store.as_ref();
            read_stored_items(store, &self.run, offset, self.target.batch())
                .await
                .map_err(|e| e.to_string())?
        } else {
            read_items(&self.path, offset, self.target.batch())?
        };
        Ok(Page {
            entries: page.items,
            next: page.next_cursor,
        })
    }

    async fn deliver(&mut self, todo: &mut Vec<serde_json::Value>) -> Result<(), String> {
        let (shared, run) = (&self.shared, &self.run);
        self.target
            .deliver(shared, run, &self.key_field, todo)
            .await?;
        todo.clear();
        Ok(())
    }

    fn advanced(&mut self, next: u64, delivered: u64) {
        self.at.offset = next;
        self.at.delivered += delivered;
        if let Err(e) = self
            .shared
            .files
            .write_state(&self.run, &self.state_file, &self.at)
        {
            tracing::warn!(run = %self.run, sink = self.target.name(), error = %e, "sink offset not stored (items may be delivered again)");
        }
    }

    fn read_failed(&mut self, error: &str) {
        tracing::warn!(run = %self.run, sink = self.target.name(), error = %error, "items not readable for the sink");
    }

    fn failing(&mut self, error: &str, first: bool) {
        let name = self.target.name();
        if first {
            self.shared.logs.hub(
                &self.run,
                Level::Warn,
                format!("item sink `{name}`: {error}; retrying with back-off (items wait in items.jsonl)"),
            );
        }
        tracing::warn!(run = %self.run, sink = name, error = %error, "item sink delivery failed; retrying");
    }

    fn recovered(&mut self) {
        let name = self.target.name();
        let text = format!("item sink `{name}` delivers again");
        self.shared.logs.hub(&self.run, Level::Info, text);
    }

    fn finished(&mut self) {
        if self
            .remaining
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst)
            == 1
        {
            self.shared.files.remove_state(&self.run, PENDING);
        }
        let (name, n) = (self.target.name(), self.at.delivered);
        let text = format!("item sink `{name}`: all {n} item(s) delivered");
        self.shared.logs.hub(&self.run, Level::Info, text);
    }
}

async fn tail(
    shared: Arc<HubCore>,
    run: RunId,
    key_field: String,
    target: Target,
    remaining: Arc<std::sync::atomic::AtomicUsize>,
    in_store: bool,
) {
    let state_file = format!("sink-{}.json", target.name());
    let at = match shared.files.read_state::<Offset>(&run, &state_file) {
        Ok(Some(o)) => o,
        _ => Offset {
            offset: 0,
            delivered: 0,
        },
    };
    let mut stop = shared.stop.subscribe();
    let mut log = SinkTail {
        path: shared.files.items_path(&run),
        shared,
        run,
        key_field,
        target,
        remaining,
        in_store,
        state_file,
        at,
    };
    let backoff = Backoff {
        initial: Duration::from_secs(1),
        max: Duration::from_secs(60),
    };
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    tailer::tail(&mut log, at.offset, backoff, stopped).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn pages_follow_complete_lines_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("items.jsonl");
        let page = read_items(&path, 0, 10).unwrap();
        assert!(page.items.is_empty() && page.done);
        let mut f = std::fs::File::create(&path).unwrap();
        for i in 0..5 {
            writeln!(f, "{{\"url\": \"u{i}\"}}").unwrap();
        }
        write!(f, "{{\"url\": \"torn").unwrap();
        let a = read_items(&path, 0, 3).unwrap();
        assert_eq!(a.items.len(), 3);
        assert!(!a.done);
        let b = read_items(&path, a.next_cursor, 10).unwrap();
        assert_eq!(b.items.len(), 2);
        assert_eq!(b.items[1]["url"], "u4");
        let c = read_items(&path, b.next_cursor, 10).unwrap();
        assert!(c.items.is_empty());
        assert_eq!(c.next_cursor, b.next_cursor);
        let past = read_items(&path, 1 << 40, 10).unwrap();
        assert!(past.items.is_empty() && past.done);
    }
}
