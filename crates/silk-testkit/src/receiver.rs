//! A webhook receiver for tests: an HTTP server on loopback that records every request it
//! gets (path, headers, body) and answers each with the status the test sets (200 at
//! first), so a test can see what was sent and make the sender retry.

use crate::TestkitError;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};

/// One request the receiver got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// `POST`, `PUT`, …
    pub method: String,
    /// The path and query.
    pub path: String,
    /// Header names (lowercase) and values (lossy UTF-8; the last of repeated names).
    pub headers: BTreeMap<String, String>,
    /// The body.
    pub body: Vec<u8>,
    /// The status it was answered with.
    pub status: u16,
}

impl Received {
    /// The body as JSON (`Null` if it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

#[derive(Clone, Default)]
struct Shared {
    got: Arc<Mutex<Vec<Received>>>,
    status: Arc<AtomicU16>,
}

/// The receiver; stopped when dropped.
pub struct Receiver {
    base: String,
    shared: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Starts a receiver on a free port of 127.0.0.1.
    pub async fn start() -> Result<Receiver, TestkitError> {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| TestkitError::Bind { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| TestkitError::Bind { addr, source })?;
        let shared = Shared::default();
        shared.status.store(200, Ordering::SeqCst);
        let app = axum::Router::new()
            .fallback(receive)
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Receiver {
            base: format!("http://{local}"),
            shared,
            task,
        })
    }

    /// The URL of `path` (which starts with `/`) on the receiver.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Answers the next requests with `status`.
    pub fn set_status(&self, status: u16) {
        self.shared.status.store(status, Ordering::SeqCst);
    }

    /// Every request so far, in the order they came.
    pub fn received(&self) -> Vec<Received> {
        self.shared.got.lock().clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn receive(State(shared): State<Shared>, request: Request) -> StatusCode {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 16 << 20)
        .await
        .map(|b| b.to_vec())
        .unwrap_or_default();
    let status = shared.status.load(Ordering::SeqCst);
    shared.got.lock().push(Received {
        method: parts.method.to_string(),
        path: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_owned(), |p| p.as_str().to_owned()),
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body,
        status,
    });
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}
