//! A run's one item log, chosen when the run opens ([`ItemLog`]): its JSON Lines file in the
//! hub's data dir, or, for a run with a shared (Redis) frontier that every hub driving it
//! writes, the store's items table. It is the truth for the run's items: the items route and
//! the sinks read it (through [`ItemLog::read`]), nothing else. In the shared mode the hub
//! also writes its own share to its file (a local copy), which nothing reads as the log.
//! Also the JSON Lines page reader that the run-results inbound uses on `outcomes.jsonl`.

use crate::error::HubError;
use crate::files::HubFiles;
use crate::run::{ItemsPage, RunRecord};
use silk_core::RunId;
use std::io::{BufRead, Seek, SeekFrom};
use std::path::{Path, PathBuf};

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
