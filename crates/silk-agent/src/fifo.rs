//! The line protocol of programs without an SDK: a named pipe in the worker's home, named by
//! `SILK_FIFO_PATH` (and `SHUB_FIFO_PATH`, as Scrapy Cloud's custom images know it), on which
//! the program writes one message per line: a three-letter type, a space, a JSON object.
//!
//! | line | what Silk does |
//! |---|---|
//! | `ITM {"url": …, …}` | an item: pushed to the run's item log (batched; idempotent on the run's item key) |
//! | `LOG {"level": 20, "message": "…"}` | a run log line (`level`: Python's numbers 10–50, or a name) |
//! | `REQ {"url": …, "status": 200, "method": "GET", "duration": 12, …}` | a request the program made: a debug log line |
//! | `STA {"stats": {…}}` | the program's stats: a debug log line |
//! | `FIN {"outcome": "finished"}` | how the program ended: logged (its exit status decides the worker's state) |
//!
//! A line that does not parse is logged as a warning naming the line's start; nothing panics.

use crate::runlog::Events;
use silk_bus::LogLevel;
use silk_core::RunId;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

/// Items per push to the hub.
const ITEM_BATCH: usize = 100;

/// Longest line read.
const MAX_LINE_BYTES: u64 = 1 << 20;

/// Where a worker's items go: the hub's items route, with the run token.
pub(crate) struct ItemSink {
    pub http: reqwest::Client,
    pub url: String,
    pub token: String,
}

impl ItemSink {
    async fn push(&self, run: &RunId, events: &Events, items: &mut Vec<serde_json::Value>) {
        if items.is_empty() {
            return;
        }
        let body = serde_json::json!({ "items": std::mem::take(items) }).to_string();
        let mut delay = Duration::from_millis(200);
        let mut attempts = 0;
        // Connection failures and server errors are tried again, 5 times in all.
        let failure = loop {
            let sent = self
                .http
                .post(&self.url)
                .bearer_auth(&self.token)
                .header("Content-Type", "application/json")
                .body(body.clone())
                .send()
                .await;
            let why = match sent {
                Ok(r) if r.status().is_success() => return,
                Ok(r) if r.status().is_client_error() => {
                    let status = r.status();
                    let text = r.text().await.unwrap_or_default();
                    events.log(run, LogLevel::Error, || {
                        format!("items from the line protocol refused by the hub: {status} {text}")
                    });
                    return;
                }
                Ok(r) => format!("HTTP {}", r.status()),
                Err(e) => e.to_string(),
            };
            attempts += 1;
            if attempts == 5 {
                break why;
            }
            tokio::time::sleep(delay).await;
            delay *= 2;
        };
        events.log(run, LogLevel::Error, || {
            format!("items from the line protocol not delivered: {failure}")
        });
    }
}

/// Makes the pipe at `path` (mode 0600).
pub(crate) fn make(path: &Path) -> std::io::Result<()> {
    let _ = std::fs::remove_file(path);
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .map_err(std::io::Error::from)
}

/// Reads the pipe until `done` resolves (the worker ended), then what is left in it.
pub(crate) async fn read(
    path: &Path,
    run: &RunId,
    worker: u32,
    events: &Events,
    sink: &ItemSink,
    done: impl std::future::Future<Output = ()>,
) {
    // Opened read-write, so that the pipe never reads as closed between two writers.
    let pipe = match tokio::net::unix::pipe::OpenOptions::new()
        .read_write(true)
        .open_receiver(path)
    {
        Ok(p) => p,
        Err(e) => {
            events.log(run, LogLevel::Warn, || {
                format!("worker {worker}: the line protocol's pipe could not be opened: {e}")
            });
            done.await;
            return;
        }
    };
    let mut reader = BufReader::new(pipe);
    let mut items = Vec::new();
    let mut buf = Vec::new();
    tokio::pin!(done);
    let mut ended = false;
    loop {
        buf.clear();
        let mut limited = (&mut reader).take(MAX_LINE_BYTES);
        let read = limited.read_until(b'\n', &mut buf);
        let n = if ended {
            // The worker is gone: only what is already in the pipe.
            match tokio::time::timeout(Duration::from_millis(50), read).await {
                Ok(Ok(n)) => n,
                _ => 0,
            }
        } else {
            tokio::select! {
                r = read => r.unwrap_or(0),
                () = &mut done => {
                    ended = true;
                    continue;
                }
            }
        };
        if n == 0 {
            if ended {
                break;
            }
            continue;
        }
        let line = String::from_utf8_lossy(&buf);
        handle(line.trim_end(), run, worker, events, &mut items);
        if items.len() >= ITEM_BATCH {
            sink.push(run, events, &mut items).await;
        }
    }
    sink.push(run, events, &mut items).await;
}

fn handle(
    line: &str,
    run: &RunId,
    worker: u32,
    events: &Events,
    items: &mut Vec<serde_json::Value>,
) {
    if line.is_empty() {
        return;
    }
    let (kind, payload) = line.split_once(' ').unwrap_or((line, ""));
    let value: serde_json::Value = match serde_json::from_str(payload) {
        Ok(v) => v,
        Err(e) => {
            let start = silk_core::text::prefix(line, 60).to_owned();
            events.log(run, LogLevel::Warn, || {
                format!("[worker {worker}] line protocol: `{start}…` is not TYPE + JSON ({e})")
            });
            return;
        }
    };
    match kind {
        "ITM" if value.is_object() => items.push(value),
        "LOG" => {
            let level = match value.get("level") {
                Some(serde_json::Value::Number(n)) => match n.as_u64().unwrap_or(20) {
                    0..=10 => LogLevel::Debug,
                    11..=20 => LogLevel::Info,
                    21..=30 => LogLevel::Warn,
                    _ => LogLevel::Error,
                },
                Some(serde_json::Value::String(s)) => match s.to_ascii_lowercase().as_str() {
                    "debug" | "trace" => LogLevel::Debug,
                    "warn" | "warning" => LogLevel::Warn,
                    "error" | "critical" | "fatal" => LogLevel::Error,
                    _ => LogLevel::Info,
                },
                _ => LogLevel::Info,
            };
            let message = value
                .get("message")
                .or_else(|| value.get("msg"))
                .and_then(|m| m.as_str())
                .unwrap_or("")
                .to_owned();
            events.log(run, level, || format!("[worker {worker}] {message}"));
        }
        "REQ" | "STA" | "FIN" => {
            let level = if kind == "FIN" {
                LogLevel::Info
            } else {
                LogLevel::Debug
            };
            events.log(run, level, || format!("[worker {worker}] {kind} {value}"));
        }
        _ => {
            let start = silk_core::text::prefix(line, 60).to_owned();
            events.log(run, LogLevel::Warn, || {
                format!("[worker {worker}] line protocol: unknown line `{start}…` (ITM, LOG, REQ, STA, FIN)")
            });
        }
    }
}
