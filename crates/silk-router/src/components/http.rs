//! HTTP: `http.HttpInbound` (tasks arrive by `POST /task/` on the router's own server, so
//! the component runs nothing) and `http.HttpOutbound` (each task is POSTed as JSON).
//!
//! The outbound's `init`: `url` (http or https), `timeout_ms` (default 10000), `headers`
//! (a mapping). A push succeeds on a 2xx answer; other answers and transport errors are
//! retryable errors. The tasks of a batch are posted concurrently, so one slow task does
//! not hold the others. There is no backlog to read, so `max_lag` cannot be used.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::error::RouterError;
use crate::read::InitReader;
use crate::redact;
use crate::registry::{
    Inbound, InboundContext, InboundFactory, Outbound, OutboundFactory, Outgoing,
};

/// `http.HttpInbound`.
pub(crate) struct HttpInboundFactory;

impl InboundFactory for HttpInboundFactory {
    fn keys(&self) -> &'static [&'static str] {
        &[]
    }

    fn build(&self, _init: &mut InitReader<'_>) -> Option<Arc<dyn Inbound>> {
        Some(Arc::new(HttpInbound))
    }
}

struct HttpInbound;

#[async_trait]
impl Inbound for HttpInbound {
    fn source(&self) -> String {
        "POST /task/".into()
    }

    fn is_http(&self) -> bool {
        true
    }

    async fn run(self: Arc<Self>, _ctx: InboundContext) -> Result<(), RouterError> {
        Ok(())
    }
}

/// `http.HttpOutbound`.
pub(crate) struct HttpOutboundFactory;

impl OutboundFactory for HttpOutboundFactory {
    fn keys(&self) -> &'static [&'static str] {
        &["url", "timeout_ms", "headers"]
    }

    fn build(&self, init: &mut InitReader<'_>) -> Option<Arc<dyn Outbound>> {
        let url = init.str("url")?;
        match url::Url::parse(&url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => {}
            _ => {
                init.error(Some("url"), "not an http:// or https:// URL");
                return None;
            }
        }
        let timeout_ms = init.opt_u64("timeout_ms").unwrap_or(10_000).max(1);
        let mut headers = HeaderMap::new();
        for (name, value) in init.opt_str_map("headers").unwrap_or_default() {
            match (
                HeaderName::try_from(name.as_str()),
                HeaderValue::try_from(value.as_str()),
            ) {
                (Ok(n), Ok(v)) => {
                    headers.insert(n, v);
                }
                _ => init.error(Some("headers"), format!("invalid header `{name}`")),
            }
        }
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let client = match reqwest::Client::builder()
            .timeout(Duration::from_millis(timeout_ms))
            .default_headers(headers)
            .build()
        {
            Ok(c) => c,
            Err(e) => {
                init.error(None, format!("cannot build the HTTP client: {e}"));
                return None;
            }
        };
        Some(Arc::new(HttpOutbound {
            target: redact(&url),
            url,
            client,
        }))
    }
}

struct HttpOutbound {
    url: String,
    target: String,
    client: reqwest::Client,
}

#[async_trait]
impl Outbound for HttpOutbound {
    fn target(&self) -> String {
        self.target.clone()
    }

    fn has_backlog(&self) -> bool {
        false
    }

    async fn push(&self, batch: &[Outgoing]) -> Vec<Result<(), RouterError>> {
        let posts = batch.iter().map(|out| async move {
            let error = |message: String| RouterError::Http {
                target: self.target.clone(),
                message,
            };
            let response = self
                .client
                .post(&self.url)
                .body(out.payload.clone())
                .send()
                .await
                .map_err(|e| error(e.without_url().to_string()))?;
            if response.status().is_success() {
                Ok(())
            } else {
                Err(error(format!("answered {}", response.status())))
            }
        });
        futures::future::join_all(posts).await
    }

    async fn backlog(&self) -> Result<Option<u64>, RouterError> {
        Ok(None)
    }
}
