//! The failure record (`routing.failure`): every task that ends as failed is appended as one
//! JSON line
//!
//! ```json
//! {"time":"2024-05-01 08:00:00.000","time_ms":1714550400000,"project":"ic","inbound":"spider_log",
//!  "outbound":"captcha","reason":"retries_exhausted","why":"…","task":{…}}
//! ```
//!
//! (`raw` instead of `task` for a message that was not a JSON object). `jq -c .task` turns
//! the file back into tasks to resubmit. With `compress: true` the file is gzip: each batch
//! of records is one complete gzip member, so the file is valid after every batch (a crash
//! loses no acknowledged record) and `zcat`/`gzip -dc` read all members.
//!
//! One writer task owns the file; routing awaits the write of its record before the
//! inbound acknowledges the task, so a failed task is never lost between the two.
//!
//! A [`FailureSink`] is the other place records may go: the hub gives one that keeps them
//! in its store (queryable and replayable through its API). Records reach it in batches
//! through a writer task of the same kind, and routing awaits it the same way.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::write::GzEncoder;
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};

use crate::config::FailureConfig;
use crate::error::RouterError;
use crate::outcome::Reason;

type Request = (Vec<u8>, oneshot::Sender<Result<(), String>>);

/// One task that ended as failed, as a [`FailureSink`] gets it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FailureRecord {
    /// When it failed (the router's clock).
    pub time_ms: u64,
    /// The config's `project`.
    pub project: String,
    /// The inbound it came from (`None`: straight to the rules).
    pub inbound: Option<String>,
    /// The outbound it was for, if any.
    pub outbound: Option<String>,
    /// Why it failed, as a counter label.
    pub reason: Reason,
    /// Why, for people.
    pub why: String,
    /// The task (as it arrived, for `convert_failed`; as routed otherwise).
    pub task: Option<Value>,
    /// The message's text, when it was not a JSON object.
    pub raw: Option<String>,
}

/// Where failure records are kept besides (or instead of) the file: the hub's store.
#[async_trait::async_trait]
pub trait FailureSink: Send + Sync + 'static {
    /// Keeps `records` for good, or says why not (the tasks then stay with their inbounds:
    /// retryable).
    async fn record(&self, records: &[FailureRecord]) -> Result<(), String>;
}

type SinkRequest = (FailureRecord, oneshot::Sender<Result<(), String>>);

/// A handle to the writer task of a [`FailureSink`]. Cheap to clone.
#[derive(Clone)]
pub(crate) struct SinkWriter {
    tx: mpsc::Sender<SinkRequest>,
}

impl SinkWriter {
    /// Starts the writer task.
    pub(crate) fn start(sink: std::sync::Arc<dyn FailureSink>) -> SinkWriter {
        let (tx, mut rx) = mpsc::channel::<SinkRequest>(1024);
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut batch = vec![first];
                while batch.len() < 500 {
                    match rx.try_recv() {
                        Ok(next) => batch.push(next),
                        Err(_) => break,
                    }
                }
                let (records, waiters): (Vec<FailureRecord>, Vec<_>) = batch.into_iter().unzip();
                let result = sink.record(&records).await;
                if let Err(e) = &result {
                    tracing::error!(error = %e, records = records.len(), "cannot keep failure records");
                }
                for done in waiters {
                    let _ = done.send(result.clone());
                }
            }
        });
        SinkWriter { tx }
    }

    /// Hands one record over and waits until it is kept.
    pub(crate) async fn write(&self, record: FailureRecord) -> Result<(), RouterError> {
        let fail = |message: String| RouterError::Unavailable {
            target: "the failure store".into(),
            message,
        };
        let (done, wait) = oneshot::channel();
        self.tx
            .send((record, done))
            .await
            .map_err(|_| fail("the writer has stopped".into()))?;
        wait.await
            .map_err(|_| fail("the writer has stopped".into()))?
            .map_err(fail)
    }
}

/// A handle to the failure record's writer task. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct FailureWriter {
    tx: mpsc::Sender<Request>,
    path: PathBuf,
}

/// The file the records go to: `path`, or `{project}-failure.jsonl[.gz]` inside it when
/// it is an existing folder.
pub(crate) fn resolve_path(config: &FailureConfig, project: &str) -> PathBuf {
    if config.path.is_dir() {
        let ext = if config.compress { "jsonl.gz" } else { "jsonl" };
        config.path.join(format!("{project}-failure.{ext}"))
    } else {
        config.path.clone()
    }
}

impl FailureWriter {
    /// Opens (creating folders) the file for appending and starts the writer task.
    pub(crate) async fn start(
        config: &FailureConfig,
        project: &str,
    ) -> Result<FailureWriter, RouterError> {
        let path = resolve_path(config, project);
        let fail = |e: std::io::Error| RouterError::FailureRecord {
            path: path.clone(),
            message: e.to_string(),
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            tokio::fs::create_dir_all(dir).await.map_err(fail)?;
        }
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .await
            .map_err(fail)?;
        let (tx, rx) = mpsc::channel(1024);
        tokio::spawn(run(file, rx, config.compress));
        Ok(FailureWriter { tx, path })
    }

    /// The file written to.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record and waits until it is written.
    pub(crate) async fn write(&self, record: &Value) -> Result<(), RouterError> {
        let fail = |message: String| RouterError::FailureRecord {
            path: self.path.clone(),
            message,
        };
        let mut line = serde_json::to_vec(record).map_err(|e| fail(e.to_string()))?;
        line.push(b'\n');
        let (done, wait) = oneshot::channel();
        self.tx
            .send((line, done))
            .await
            .map_err(|_| fail("the writer has stopped".into()))?;
        wait.await
            .map_err(|_| fail("the writer has stopped".into()))?
            .map_err(fail)
    }
}

async fn run(mut file: tokio::fs::File, mut rx: mpsc::Receiver<Request>, compress: bool) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < 1000 {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let mut bytes: Vec<u8> = batch
            .iter()
            .flat_map(|(line, _)| line.iter().copied())
            .collect();
        let result: Result<(), String> = async {
            if compress {
                let mut gz = GzEncoder::new(Vec::new(), Compression::default());
                gz.write_all(&bytes).map_err(|e| e.to_string())?;
                bytes = gz.finish().map_err(|e| e.to_string())?;
            }
            file.write_all(&bytes).await.map_err(|e| e.to_string())?;
            file.flush().await.map_err(|e| e.to_string())
        }
        .await;
        if let Err(e) = &result {
            tracing::error!(error = %e, "cannot write the failure record");
        }
        for (_, done) in batch {
            let _ = done.send(result.clone());
        }
    }
    let _ = file.sync_all().await;
}
