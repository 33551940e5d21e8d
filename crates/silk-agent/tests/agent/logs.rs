//! Run logs: the lines an agent writes for each run (downloader allocated and built, failed
//! requests with their URL and status, lines dropped when the log queue is full) arrive in
//! `log` batches on the `logs` subject, read durably as the hub reads them.

use crate::support::*;
use axum::http::StatusCode;
use axum::routing::get;
use silk_agent::{AgentConfig, DownloaderConfig};
use silk_bus::LogLevel;
use silk_core::{Clock, SystemClock};
use std::sync::Arc;

/// `/missing` answers 404, `/broken` 500, `/ok` a page.
async fn site() -> String {
    let app = axum::Router::new()
        .route(
            "/missing",
            get(|| async { (StatusCode::NOT_FOUND, "gone") }),
        )
        .route(
            "/broken",
            get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "oops") }),
        )
        .route("/ok", get(|| async { axum::response::Html("<h1>ok</h1>") }));
    format!("http://{}", serve(app).await)
}

fn spider(site: &str) -> DownloaderConfig {
    DownloaderConfig::for_spider_yaml(spider_yaml(&format!("{site}/"), "robots: false\n"))
}

#[tokio::test]
async fn allocation_and_failed_requests_are_logged_for_the_run() {
    let site = site().await;
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let mut logs = log_batches(&bus, "hub-logs").await;
    let agent = start(agent_config(dir.path(), "a-logs"), &bus).await;
    let mut hub = Hub::new(Arc::new(bus.clone()), "a-logs").await;
    let started = SystemClock.now_ms();
    hub.allocate("r-logs", &spider(&site)).await;

    let (batch, line) = log_line(&mut logs, "the allocation's line", |_, l| {
        l.message == "downloader allocated"
    })
    .await;
    assert_eq!(
        (batch.run.as_str(), batch.agent.as_str(), line.level),
        ("r-logs", "a-logs", LogLevel::Info)
    );
    assert!(
        line.ts_ms >= started && line.ts_ms <= SystemClock.now_ms(),
        "{line:?}"
    );

    let missing = format!("{site}/missing");
    let broken = format!("{site}/broken");
    let ok = format!("{site}/ok");
    let leases = hub
        .download("r-logs", &[missing.clone(), broken.clone(), ok.clone()])
        .await;
    let results = hub.results(&leases).await;
    assert_eq!(results[&leases[0]].outcome.status, Some(404));
    assert_eq!(results[&leases[1]].outcome.status, Some(500));
    assert_eq!(results[&leases[2]].outcome.status, Some(200));

    let mut warned = Vec::new();
    while warned.len() < 2 {
        let (batch, _) = log_line(&mut logs, "a warning of a failed request", |_, l| {
            l.level == LogLevel::Warn
        })
        .await;
        assert_eq!(batch.run.as_str(), "r-logs");
        for l in batch.lines.iter().filter(|l| l.level == LogLevel::Warn) {
            warned.push(l.message.clone());
        }
    }
    let named = |url: &str, status: &str| {
        warned
            .iter()
            .any(|m| m.starts_with(&format!("{url}: ")) && m.contains(status))
    };
    assert!(named(&missing, "404"), "{warned:?}");
    assert!(named(&broken, "500"), "{warned:?}");
    assert!(
        !warned.iter().any(|m| m.contains(&ok)),
        "a page that answered 200 is no warning: {warned:?}"
    );
    agent.shutdown().await;
    let stats = agent.stats();
    assert!(stats.log_batches_published >= 2, "{stats:?}");
    assert_eq!(stats.log_lines_dropped, 0);
}

#[tokio::test]
async fn a_full_log_queue_drops_lines_and_the_next_batch_says_how_many() {
    let site = site().await;
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let mut logs = log_batches(&bus, "hub-logs").await;
    // Two lines fit; nothing is published before the agent stops (the flush period is far
    // away and a batch would need more lines than fit).
    let config = AgentConfig {
        log_queue_lines: 2,
        log_batch_lines: 1_000,
        log_flush_ms: 3_600_000,
        ..agent_config(dir.path(), "a-logfull")
    };
    let agent = start(config, &bus).await;
    let mut hub = Hub::new(Arc::new(bus.clone()), "a-logfull").await;
    hub.allocate("r-full", &spider(&site)).await;
    let urls: Vec<String> = (0..3).map(|i| format!("{site}/missing?i={i}")).collect();
    let leases = hub.download("r-full", &urls).await;
    let results = hub.results(&leases).await;
    assert!(
        results.values().all(|r| r.outcome.status == Some(404)),
        "{results:?}"
    );
    // Stopping publishes what is left: the two lines that fit and the count of the others
    // (at least the three requests' warnings did not fit).
    agent.shutdown().await;
    let batch = next_log_batch(&mut logs).await;
    assert_eq!(batch.run.as_str(), "r-full");
    assert_eq!(batch.lines.len(), 3, "{batch:?}");
    let last = batch.lines.last().unwrap();
    assert_eq!(last.level, LogLevel::Warn);
    let (n, rest) = last
        .message
        .split_once(' ')
        .expect("a count, then the text");
    let n: u64 = n.parse().expect("a count");
    assert!(n >= 3, "{last:?}");
    assert_eq!(
        rest,
        "log lines dropped (the agent's log queue of 2 lines was full)"
    );
    assert_eq!(agent.stats().log_lines_dropped, n);
}
