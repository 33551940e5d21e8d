//! robots.txt's `Crawl-delay` reported with results (`crawl_delay_ms`): the agent reads
//! robots.txt, the hub's frontier decides politeness.

use crate::support::*;
use axum::routing::get;
use silk_agent::DownloaderConfig;
use std::sync::Arc;

/// A site with `robots` as its robots.txt, a page at `/page` and 404 elsewhere.
async fn site(robots: &'static str) -> String {
    let app = axum::Router::new()
        .route("/robots.txt", get(move || async move { robots }))
        .route(
            "/page",
            get(|| async { axum::response::Html("<h1>page</h1>") }),
        );
    format!("http://{}", serve(app).await)
}

#[tokio::test]
async fn results_carry_the_crawl_delay_of_their_host() {
    let polite = site(
        "User-agent: slowbot\nCrawl-delay: 9\n\nUser-agent: *\nCrawl-delay: 2\nDisallow: /private/\n",
    )
    .await;
    let plain = site("User-agent: *\nDisallow: /private/\n").await;
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let agent = start(agent_config(dir.path(), "a-robots"), &bus).await;
    let mut hub = Hub::new(Arc::new(bus.clone()), "a-robots").await;
    let spider =
        |extra: &str| DownloaderConfig::for_spider_yaml(spider_yaml(&format!("{polite}/"), extra));
    hub.allocate("r-default", &spider("")).await;
    hub.allocate("r-slowbot", &spider("user_agent: slowbot/1.0\n"))
        .await;
    hub.allocate("r-no-robots", &spider("robots: false\n"))
        .await;

    // Every result of the polite host carries its delay for the run's user agent: pages,
    // errors and robots refusals alike.
    let page = hub
        .fetch("r-default", &format!("{polite}/page"))
        .await
        .outcome;
    assert_eq!((page.status, &page.error), (Some(200), &None), "{page:?}");
    assert_eq!(page.crawl_delay_ms, Some(2_000));
    let missing = hub
        .fetch("r-default", &format!("{polite}/missing"))
        .await
        .outcome;
    assert_eq!(
        missing.error.map(|e| e.code.to_string()),
        Some("http_404".to_owned())
    );
    assert_eq!(missing.crawl_delay_ms, Some(2_000));
    let private = hub
        .fetch("r-default", &format!("{polite}/private/x"))
        .await
        .outcome;
    assert_eq!(
        private.error.map(|e| e.code.to_string()),
        Some("robots_disallowed".to_owned())
    );
    assert_eq!(private.crawl_delay_ms, Some(2_000));

    // Another user agent gets its own group's delay.
    let slow = hub
        .fetch("r-slowbot", &format!("{polite}/page"))
        .await
        .outcome;
    assert_eq!(slow.status, Some(200));
    assert_eq!(slow.crawl_delay_ms, Some(9_000));

    // A host without a delay, and a run that does not read robots.txt, report none.
    let other = hub
        .fetch("r-default", &format!("{plain}/page"))
        .await
        .outcome;
    assert_eq!((other.status, other.crawl_delay_ms), (Some(200), None));
    let unread = hub
        .fetch("r-no-robots", &format!("{polite}/page"))
        .await
        .outcome;
    assert_eq!((unread.status, unread.crawl_delay_ms), (Some(200), None));
    agent.shutdown().await;
}

/// The first-contact rule, as in the local engine: the request whose turn at a host went to
/// reading its robots.txt is given back (`robots_fetched`, retryable, no retry used, with the
/// crawl-delay) without its page being fetched; requests that only waited for that read go
/// on, and so does the request when the hub sends it again.
#[tokio::test]
async fn the_request_that_reads_robots_txt_is_given_back_with_the_delay() {
    let pages = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = pages.clone();
    let app = axum::Router::new()
        .route(
            "/robots.txt",
            get(|| async { "User-agent: *\nCrawl-delay: 3\n" }),
        )
        .route(
            "/page/{n}",
            get(move || {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async { axum::response::Html("<h1>page</h1>") }
            }),
        );
    let base = format!("http://{}", serve(app).await);
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let agent = start(agent_config(dir.path(), "a-first"), &bus).await;
    let mut hub = Hub::new(Arc::new(bus.clone()), "a-first").await;
    hub.allocate(
        "r1",
        &DownloaderConfig::for_spider_yaml(spider_yaml(&format!("{base}/"), "")),
    )
    .await;

    let urls: Vec<String> = (0..3).map(|n| format!("{base}/page/{n}")).collect();
    let leases = hub.download("r1", &urls).await;
    let mut given_back = Vec::new();
    let mut fetched = Vec::new();
    for _ in 0..urls.len() {
        let r = hub.raw_result().await;
        assert!(leases.contains(&r.lease_id), "{r:?}");
        assert_eq!(r.outcome.crawl_delay_ms, Some(3_000), "{r:?}");
        match &r.outcome.error {
            Some(e) => {
                assert_eq!(
                    (e.code.as_str().as_ref(), e.retryable),
                    ("robots_fetched", true),
                    "{r:?}"
                );
                assert!(r.outcome.given_back() && r.outcome.status.is_none());
                given_back.push(r.lease_id);
            }
            None => {
                assert_eq!(r.outcome.status, Some(200), "{r:?}");
                fetched.push(r.lease_id);
            }
        }
    }
    assert_eq!(given_back.len(), 1, "one request read robots.txt");
    assert_eq!(pages.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(agent.stats().runs[&silk_core::RunId::new("r1")].requests, 2);

    // Sent again (as a hub does), it is fetched: the file is known now.
    let i = leases.iter().position(|l| *l == given_back[0]).unwrap();
    let again = hub.fetch("r1", &urls[i]).await.outcome;
    assert_eq!(
        (again.status, &again.error),
        (Some(200), &None),
        "{again:?}"
    );
    assert_eq!(pages.load(std::sync::atomic::Ordering::SeqCst), 3);
    agent.shutdown().await;
}
