//! The JSON Lines item file of a crawl or a run: appends one item per line, and never writes two
//! items with the same item key, across restarts too.
//!
//! **Invariant**: an item is written with one `write` call on an `O_APPEND` file before the
//! request that produced it is acked, so after `kill -9` the file holds every acked item
//! and the set of keys is rebuilt from the file itself at open (the file is the truth; no
//! second record can disagree with it). A torn last line (no trailing newline) is cut off.
//! Opening costs one read of the file; that is the price of having no second source of truth.

use crate::error::ItemsError;
use parking_lot::Mutex;
use serde_json::{Map, Value};
use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use xxhash_rust::xxh3::xxh3_128;

/// What happened to an item offered to the sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Appended.
    New,
    /// An item with the same key is already in the file.
    Duplicate,
    /// The item has no usable key (the key field is missing or null); not written.
    NoKey,
    /// The file holds the most items allowed ([`JsonlSink::write_within`]); not written.
    Full,
}

/// An append-only JSON Lines file, idempotent on the item key.
#[derive(Debug)]
pub struct JsonlSink {
    path: PathBuf,
    key_field: String,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    file: File,
    keys: HashSet<u128>,
    line: Vec<u8>,
}

/// Opens (or creates, with its folders) an append-only file for reading and appending: the
/// JSON Lines files of a run (items here, the hub's outcomes).
pub fn open_append(path: &Path) -> std::io::Result<File> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)
}

impl JsonlSink {
    /// Opens (or creates) `path`; `key_field` names the field that identifies an item.
    pub fn open(path: &Path, key_field: &str) -> Result<Self, ItemsError> {
        let err = |source| ItemsError {
            path: path.to_owned(),
            source,
        };
        let mut file = open_append(path).map_err(err)?;
        let mut keys = HashSet::new();
        let mut good_len = 0u64;
        {
            let mut reader = BufReader::new(&mut file);
            reader.seek(SeekFrom::Start(0)).map_err(err)?;
            let mut buf = Vec::new();
            loop {
                buf.clear();
                let n = reader.read_until(b'\n', &mut buf).map_err(err)?;
                if n == 0 || buf.last() != Some(&b'\n') {
                    break;
                }
                good_len += n as u64;
                if let Ok(Value::Object(item)) = serde_json::from_slice::<Value>(&buf)
                    && let Some(k) = key_of(&item, key_field)
                {
                    keys.insert(k);
                }
            }
        }
        if file.metadata().map_err(err)?.len() != good_len {
            // A torn last line from a crash mid-write: the item was never acked, so it will be
            // produced again; cut it so the file stays valid JSON Lines.
            file.set_len(good_len).map_err(err)?;
        }
        Ok(Self {
            path: path.to_owned(),
            key_field: key_field.to_owned(),
            inner: Mutex::new(Inner {
                file,
                keys,
                line: Vec::with_capacity(1024),
            }),
        })
    }

    /// Appends `item` unless its key is already in the file.
    pub fn write(&self, item: &Map<String, Value>) -> Result<Written, ItemsError> {
        self.write_within(item, None)
    }

    /// Appends `item` unless its key is already in the file, or the file already holds `max`
    /// items (checked under the file's lock, so concurrent writers never pass it).
    pub fn write_within(
        &self,
        item: &Map<String, Value>,
        max: Option<u64>,
    ) -> Result<Written, ItemsError> {
        let Some(key) = key_of(item, &self.key_field) else {
            return Ok(Written::NoKey);
        };
        let mut inner = self.inner.lock();
        if inner.keys.contains(&key) {
            return Ok(Written::Duplicate);
        }
        if max.is_some_and(|m| inner.keys.len() as u64 >= m) {
            return Ok(Written::Full);
        }
        let Inner { file, keys, line } = &mut *inner;
        line.clear();
        serde_json::to_writer(&mut *line, item).map_err(|e| ItemsError {
            path: self.path.clone(),
            source: e.into(),
        })?;
        line.push(b'\n');
        file.write_all(line).map_err(|source| ItemsError {
            path: self.path.clone(),
            source,
        })?;
        keys.insert(key);
        Ok(Written::New)
    }

    /// How many distinct items the file holds.
    pub fn len(&self) -> usize {
        self.inner.lock().keys.len()
    }

    /// Whether the file holds no item.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Flushes the file to disk (fsync).
    pub fn sync(&self) -> Result<(), ItemsError> {
        let inner = self.inner.lock();
        inner.file.sync_data().map_err(|source| ItemsError {
            path: self.path.clone(),
            source,
        })
    }
}

fn key_of(item: &Map<String, Value>, field: &str) -> Option<u128> {
    match item.get(field)? {
        Value::Null => None,
        Value::String(s) => Some(xxh3_128(s.as_bytes())),
        other => Some(xxh3_128(other.to_string().as_bytes())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn item(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn idempotent_across_reopen_and_torn_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("items.jsonl");
        let sink = JsonlSink::open(&path, "url").unwrap();
        assert_eq!(
            sink.write(&item(json!({"url": "a", "x": 1}))).unwrap(),
            Written::New
        );
        assert_eq!(
            sink.write(&item(json!({"url": "a", "x": 2}))).unwrap(),
            Written::Duplicate
        );
        assert_eq!(sink.write(&item(json!({"x": 2}))).unwrap(), Written::NoKey);
        drop(sink);
        // A crash mid-write leaves a torn line.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"url\": \"b\", \"x\"").unwrap();
        drop(f);
        let sink = JsonlSink::open(&path, "url").unwrap();
        assert_eq!(sink.len(), 1);
        assert_eq!(
            sink.write(&item(json!({"url": "a"}))).unwrap(),
            Written::Duplicate
        );
        assert_eq!(
            sink.write(&item(json!({"url": "b"}))).unwrap(),
            Written::New
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(
            text.lines()
                .all(|l| serde_json::from_str::<Value>(l).is_ok())
        );
    }
}
