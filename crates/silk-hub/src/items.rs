//! A run's one item log, chosen when the run opens ([`ItemLog`]): its JSON Lines file in the
//! hub's data dir, or, for a run with a shared (Redis) frontier that every hub driving it
//! writes, the store's items table. It is the truth for the run's items: the items route and
//! the sinks read it (through [`ItemLog::read`]), the run writes it (through [`ItemWriter`],
//! before each ack), and the run's item count starts from it when the run opens.
//! Also the JSON Lines page reader that the run-results inbound uses on `outcomes.jsonl`.

use crate::error::HubError;
use crate::files::HubFiles;
use crate::run::{ItemsPage, RunRecord};
use silk_core::RunId;
use silk_items::{JsonlSink, Written};
use silk_store::MetaStore;
use std::io::{BufRead, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where a run's items are (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ItemLog {
    /// The run's `items.jsonl`; cursors are byte offsets.
    File(PathBuf),
    /// The store's items table; cursors are the store's item sequence.
    Store,
}

impl ItemLog {
    /// The item log of `record`, as its run opened it.
    pub(crate) fn of(record: &RunRecord, files: &HubFiles) -> Self {
        if record.shared_frontier.is_some() {
            ItemLog::Store
        } else {
            ItemLog::File(files.items_path(&record.id))
        }
    }

    /// The file of a file log.
    pub(crate) fn path(&self) -> Option<&Path> {
        match self {
            ItemLog::File(path) => Some(path),
            ItemLog::Store => None,
        }
    }

    /// At most `limit` items after `cursor` (0 = from the start).
    pub(crate) async fn read(
        &self,
        store: &dyn silk_store::MetaStore,
        run: &RunId,
        cursor: u64,
        limit: usize,
    ) -> Result<ItemsPage, HubError> {
        match self {
            ItemLog::Store => read_stored_items(store, run, cursor, limit).await,
            ItemLog::File(path) => {
                let file = path.clone();
                let page = tokio::task::spawn_blocking(move || read_items(&file, cursor, limit));
                let failed = |reason: String| HubError::Storage {
                    path: path.clone(),
                    reason,
                };
                page.await
                    .map_err(|e| failed(format!("items reader: {e}")))?
                    .map_err(failed)
            }
        }
    }
}

/// The writer of a run's item log: idempotent on the item key, in the file or the store.
pub(crate) enum ItemWriter {
    /// The run's `items.jsonl` (knows the keys it holds).
    File(JsonlSink),
    /// The store's items table (the store refuses a key it holds).
    Store {
        store: Arc<dyn MetaStore>,
        run: RunId,
        key: String,
        /// Held by a write that must not pass a run's `max_items` (count, then insert).
        gate: tokio::sync::Mutex<()>,
    },
}

/// What one write did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Wrote {
    /// Items the log did not have.
    pub(crate) new: u64,
    /// Items whose key the log had already.
    pub(crate) duplicates: u64,
    /// Items without a key (not written).
    pub(crate) no_key: u64,
    /// Items past the run's `max_items` (not written).
    pub(crate) over_limit: u64,
}

/// Why a write failed.
#[derive(Debug)]
pub(crate) enum WriteError {
    /// The file failed: the run cannot go on without losing items.
    File(String),
    /// The store failed: the page is not acked and is fetched again.
    Store(silk_store::StoreError),
}

impl ItemWriter {
    /// Opens the writer of `log` for run `run`, whose items are keyed by `key`.
    pub(crate) fn open(
        log: &ItemLog,
        store: &Arc<dyn MetaStore>,
        run: &RunId,
        key: &str,
    ) -> Result<Self, String> {
        match log {
            ItemLog::File(path) => JsonlSink::open(path, key)
                .map(ItemWriter::File)
                .map_err(|e| e.to_string()),
            ItemLog::Store => Ok(ItemWriter::Store {
                store: store.clone(),
                run: run.clone(),
                key: key.to_owned(),
                gate: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// How many items the log holds now.
    pub(crate) async fn count(&self) -> Result<u64, String> {
        match self {
            ItemWriter::File(sink) => Ok(sink.len() as u64),
            ItemWriter::Store { store, run, .. } => store
                .count_items(run.as_str())
                .await
                .map_err(|e| e.to_string()),
        }
    }

    /// Writes `items` (the JSON objects among them); a key the log has is not written again,
    /// and nothing is written once the log holds `max` items.
    pub(crate) async fn write(
        &self,
        items: &[serde_json::Value],
        now_ms: u64,
        max: Option<u64>,
    ) -> Result<Wrote, WriteError> {
        let mut wrote = Wrote::default();
        match self {
            ItemWriter::File(sink) => {
                for map in items.iter().filter_map(|i| i.as_object()) {
                    match sink.write_within(map, max) {
                        Ok(Written::New) => wrote.new += 1,
                        Ok(Written::Duplicate) => wrote.duplicates += 1,
                        Ok(Written::NoKey) => wrote.no_key += 1,
                        Ok(Written::Full) => wrote.over_limit += 1,
                        Err(e) => return Err(WriteError::File(format!("items file: {e}"))),
                    }
                }
            }
            ItemWriter::Store {
                store,
                run,
                key,
                gate,
            } => {
                let rows: Vec<(String, u64, serde_json::Value)> = items
                    .iter()
                    .filter(|i| i.is_object())
                    .filter(|i| {
                        let keyed = i.get(key).is_some_and(|k| !k.is_null());
                        if !keyed {
                            wrote.no_key += 1;
                        }
                        keyed
                    })
                    .map(|i| (item_key(i, key), now_ms, i.clone()))
                    .collect();
                let Some(max) = max else {
                    if !rows.is_empty() {
                        wrote.new = store
                            .insert_items(run.as_str(), &rows)
                            .await
                            .map_err(WriteError::Store)?;
                        wrote.duplicates = rows.len() as u64 - wrote.new;
                    }
                    return Ok(wrote);
                };
                // Counted and inserted under the gate; a duplicate takes no room, so the rows
                // go in as long as there is room for all of them.
                let _gate = gate.lock().await;
                let held = store
                    .count_items(run.as_str())
                    .await
                    .map_err(WriteError::Store)?;
                let mut room = max.saturating_sub(held);
                let mut rest = &rows[..];
                while !rest.is_empty() && room > 0 {
                    let take = rest.len().min(usize::try_from(room).unwrap_or(usize::MAX));
                    let new = store
                        .insert_items(run.as_str(), &rest[..take])
                        .await
                        .map_err(WriteError::Store)?;
                    wrote.new += new;
                    wrote.duplicates += take as u64 - new;
                    room -= new;
                    rest = &rest[take..];
                }
                wrote.over_limit = rest.len() as u64;
            }
        }
        Ok(wrote)
    }

    /// Makes what was written durable (the store's writes are at once).
    pub(crate) fn sync(&self) -> Result<(), String> {
        match self {
            ItemWriter::File(sink) => sink.sync().map_err(|e| e.to_string()),
            ItemWriter::Store { .. } => Ok(()),
        }
    }
}

/// Most bytes of item lines read at once.
const MAX_READ_BYTES: usize = 4 << 20;

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
