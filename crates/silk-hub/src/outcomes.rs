//! Each fetched request's final outcome, for the router's `silk.RunResultsInbound` and the
//! archive of finished requests (`archive`).
//!
//! With [`HubConfig::record_outcomes`](crate::HubConfig) or the archive on, a run appends one JSON line per
//! request that reached a final outcome (fetched and done, failed for good, or dropped) to
//! `runs/{id}/outcomes.jsonl`, **before** the frontier ack, as items are written: a hub
//! killed in between writes the line again when the request is fetched again, so a reader
//! sees every outcome at least once. A request that is retried by the run's own
//! `max_retries` writes nothing until its last attempt; a redirect hop writes a line marked
//! `redirect` that only the archive reads (its target, which keeps the request's router task,
//! is the outcome the router sees).
//!
//! The line holds facts, not codes: the inbound turns them into a task with a
//! `task_result` by its own settings (see `taskhub`). Fields (version 1):
//!
//! | field | |
//! |---|---|
//! | `v` | 1 |
//! | `ok` | fetched and done (2xx, or a page the spider accepted) |
//! | `http_code` | the HTTP status, or `null` when no response arrived |
//! | `error_code` | Silk's error code (`http_503`, `timeout`, `dns`, `robots_disallowed`, …), or `null` |
//! | `error_msg` | the error for people, `""` when ok |
//! | `url`, `method`, `depth`, `retries` | the request (retries used by the run) |
//! | `items`, `links`, `bytes`, `fetch_ms` | what the page gave |
//! | `agent`, `run`, `job`, `job_id`, `spider_name` | who fetched it, for which run |
//! | `time_ms` | when the hub received the result, ms since the epoch |
//! | `task` | the router task that became this request (`silk.JobOutbound`), or absent |
//! | `outcome` | `done`, `failed` or `dropped` (absent in lines of older hubs) |
//! | `salt` | the request's dedup salt, or absent |
//! | `redirect` | `true` for a redirect hop (read by the archive only), else absent |

use crate::routed::OutcomeLine;
use parking_lot::Mutex;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The file name of a run's outcomes.
pub(crate) const FILE: &str = "outcomes.jsonl";

/// The append-only outcomes file of one run.
pub(crate) struct OutcomeLog {
    path: PathBuf,
    file: Mutex<File>,
}

impl OutcomeLog {
    /// Opens (or creates) `path`. A torn last line (a crash mid-write) is cut off, so that
    /// the next line starts on a line of its own.
    pub(crate) fn open(path: &Path) -> Result<OutcomeLog, String> {
        let err = |e: std::io::Error| format!("{}: {e}", path.display());
        let mut file = silk_items::open_append(path).map_err(err)?;
        let len = file.metadata().map_err(err)?.len();
        if len > 0 {
            let keep = complete_len(&mut file, len).map_err(err)?;
            if keep < len {
                tracing::warn!(file = %path.display(), cut = len - keep, "torn last outcome line cut off");
                file.set_len(keep).map_err(err)?;
            }
        }
        Ok(OutcomeLog {
            path: path.to_owned(),
            file: Mutex::new(file),
        })
    }

    /// Appends one line.
    pub(crate) fn append(&self, line: &OutcomeLine) -> Result<(), String> {
        let mut bytes = serde_json::to_vec(line).map_err(|e| e.to_string())?;
        bytes.push(b'\n');
        let mut file = self.file.lock();
        file.write_all(&bytes)
            .map_err(|e| format!("{}: {e}", self.path.display()))
    }

    /// Flushes to disk (at the run's end).
    pub(crate) fn sync(&self) -> Result<(), String> {
        let file = self.file.lock();
        file.sync_data()
            .map_err(|e| format!("{}: {e}", self.path.display()))
    }
}

/// The length of the file up to and including its last newline.
fn complete_len(file: &mut File, len: u64) -> std::io::Result<u64> {
    let mut end = len;
    let mut buf = vec![0u8; 4096];
    while end > 0 {
        let start = end.saturating_sub(buf.len() as u64);
        let n = (end - start) as usize;
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut buf[..n])?;
        if let Some(i) = buf[..n].iter().rposition(|b| *b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    fn line(url: &str) -> OutcomeLine {
        OutcomeLine {
            v: 1,
            ok: true,
            http_code: Some(200),
            error_code: None,
            error_msg: String::new(),
            url: url.into(),
            method: "GET".into(),
            depth: 0,
            retries: 0,
            items: 1,
            links: 0,
            bytes: 10,
            fetch_ms: 1,
            agent: "a1".into(),
            run: "r".into(),
            tenant: "default".into(),
            job: None,
            job_id: None,
            spider_name: "s".into(),
            time_ms: 1,
            task: None,
            outcome: "done".into(),
            salt: None,
            redirect: false,
        }
    }

    #[test]
    fn a_torn_last_line_is_cut_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        let log = OutcomeLog::open(&path).unwrap();
        log.append(&line("http://h/1")).unwrap();
        drop(log);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"v\":1,\"ok\":tr").unwrap();
        drop(f);
        let log = OutcomeLog::open(&path).unwrap();
        log.append(&line("http://h/2")).unwrap();
        let page = crate::items::read_items(&path, 0, 10).unwrap();
        let urls: Vec<&str> = page
            .items
            .iter()
            .map(|v| v["url"].as_str().unwrap())
            .collect();
        assert_eq!(urls, ["http://h/1", "http://h/2"]);
    }
}
