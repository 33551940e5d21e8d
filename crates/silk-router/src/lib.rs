//! The task router — the seeds' taskHUB. Tasks (JSON objects) arrive at **inbounds** (HTTP
//! `POST /task/`, Redis lists, NATS JetStream, Kafka), pass the inbound's convert chain
//! (built-in steps, or the project's Python classes) and Python-style selectors, and go to
//! the first **outbound** (Redis list, NATS subject, Kafka topic, HTTP)
//! whose selectors match. Tasks that come back with a `task_result` are retried, sent to a
//! failback, routed again or ended, as configured; failures are recorded.
//!
//! A config written for taskHUB loads and routes the same way (see `docs/router.md` for
//! every key and every choice made where the seed is silent).
//!
//! ```no_run
//! # async fn run() -> Result<(), silk_router::RouterError> {
//! use silk_router::{Vars, check, serve};
//! let mut vars = Vars::new();
//! vars.set("redis_url", "redis://127.0.0.1:6379/0");
//! let config = check(&["main.yaml"], &vars).map_err(silk_router::RouterError::Config)?;
//! serve(config, async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```
//!
//! Layout: [`config`] loads and validates (YAML with positions in `yaml`, placeholders in
//! [`vars`]); [`decide`](explain) is the pure routing decision; [`Router`] runs senders
//! (queue, `max_lag`, token buckets) and inbounds; [`registry`] holds the component seams
//! ([`Inbound`], [`Outbound`], [`Convert`]) looked up by class name; `server` is the HTTP
//! API. This crate must not depend on the hub: the hub plugs `silk.JobOutbound` and
//! `silk.RunResultsInbound` in through [`Registry`].

#![forbid(unsafe_code)]

mod bucket;
mod components;
pub mod config;
mod decide;
mod error;
mod failure;
mod metrics;
mod outcome;
mod payload;
mod plugins;
mod read;
pub mod registry;
mod router;
mod sender;
mod server;
mod task;
pub mod vars;
mod yaml;

use std::future::Future;
use std::path::Path;

pub use bucket::TokenBucket;
pub use config::Config;
pub use decide::{CheckTaskAnswer, explain, explain_at};
pub use error::{ConfigError, RouterError};
pub use failure::{FailureRecord, FailureSink};
pub use outcome::{Decision, Outcome, REASONS, Reason};
pub use read::InitReader;
pub use registry::{
    Convert, ConvertFactory, Inbound, InboundContext, InboundFactory, NEEDS_HUB, Outbound,
    OutboundFactory, Outgoing, Registry,
};
pub use router::{InboundStatus, OutboundStatus, Router};
pub use server::{ApiError, ErrorCode, app};
pub use task::{BUILTIN_KEYS, SUBMITTER, format_time};
pub use vars::Vars;

/// Loads and validates the config in `paths` (the main file first), filling placeholders
/// from `vars`. Returns every problem at once.
pub fn check<P: AsRef<Path>>(paths: &[P], vars: &Vars) -> Result<Config, Vec<ConfigError>> {
    Config::load(paths, vars)
}

/// Runs the router from `config`: its HTTP server on `server.bind`:`server.port`, its
/// inbounds and outbounds, until `shutdown` resolves; then stops gracefully (see
/// [`Router::shutdown`]).
pub async fn serve<F>(config: Config, shutdown: F) -> Result<(), RouterError>
where
    F: Future<Output = ()> + Send + 'static,
{
    let addr = format!("{}:{}", config.server.bind, config.server.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| RouterError::Server {
            addr: addr.clone(),
            message: e.to_string(),
        })?;
    let router = Router::start(config).await?;
    tracing::info!(%addr, project = %router.config().project, "router listening");
    serve_on(router, listener, shutdown).await
}

/// Serves `router` on `listener` until `shutdown` resolves, then shuts it down.
pub async fn serve_on<F>(
    router: Router,
    listener: tokio::net::TcpListener,
    shutdown: F,
) -> Result<(), RouterError>
where
    F: Future<Output = ()> + Send + 'static,
{
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let (stop_http, http_stopped) = tokio::sync::oneshot::channel::<()>();
    use axum::serve::ListenerExt;
    // Answers are small and written whole; don't let Nagle hold them back.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let server = axum::serve(listener, app(router.clone())).with_graceful_shutdown(async move {
        let _ = http_stopped.await;
    });
    let server = tokio::spawn(async move { server.await });
    shutdown.await;
    tracing::info!("router shutting down");
    let _ = stop_http.send(());
    router.shutdown().await;
    match server.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(RouterError::Server {
            addr,
            message: e.to_string(),
        }),
        Err(e) => Err(RouterError::Server {
            addr,
            message: e.to_string(),
        }),
    }
}

/// A URL with its password replaced by `***`, for logs, errors and `GET /outbound/`.
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        Ok(_) => url.to_owned(),
        Err(_) => match (url.find("://"), url.rfind('@')) {
            (Some(scheme), Some(at)) if at > scheme => {
                format!("{}***{}", &url[..scheme + 3], &url[at..])
            }
            _ => url.to_owned(),
        },
    }
}
