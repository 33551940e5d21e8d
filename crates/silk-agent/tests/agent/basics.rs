//! Registration, heartbeats, allocate + download on the demo site, isolation between runs,
//! unknown runs, release, bad configs, capacity and the shutdown command.

use crate::support::*;
use axum::http::HeaderMap;
use axum::routing::get;
use silk_agent::{AgentEvent, DownloaderConfig, ReleaseReason};
use silk_bus::{Bus, Command};
use silk_core::RunId;
use silk_testkit::{DemoConfig, DemoSite};
use std::sync::Arc;

fn demo_config() -> DemoConfig {
    DemoConfig {
        hosts: 2,
        pages: 20,
        ..DemoConfig::default()
    }
}

fn demo_spider(site: &DemoSite) -> DownloaderConfig {
    DownloaderConfig::for_spider_yaml(spider_yaml(
        &site.start_url(),
        "extract:\n  heading: {css: h1.title}\n  price: {css: span.price}\n",
    ))
}

#[tokio::test]
async fn registers_once_then_heartbeats_separately() {
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let mut regs = registrations(&bus, "hub-regs").await;
    let mut beats = heartbeats(&bus).await;
    let agent = start(agent_config(dir.path(), "a-hb"), &bus).await;
    let reg = next_register(&mut regs).await;
    assert_eq!(reg.agent.as_str(), "a-hb");
    assert!(!reg.host.is_empty());
    assert!(reg.cores >= 1 && reg.memory_bytes > 0, "{reg:?}");
    assert_eq!(reg.capacity, 8);
    assert_eq!(reg.labels.get("pool").map(String::as_str), Some("test"));
    assert_eq!(reg.version, env!("CARGO_PKG_VERSION"));
    let first = next_heartbeat(&mut beats).await;
    let second = next_heartbeat(&mut beats).await;
    for hb in [&first, &second] {
        assert_eq!(hb.agent.as_str(), "a-hb");
        assert!((0.0..=100.0).contains(&hb.cpu_pct), "{hb:?}");
        assert!(
            hb.memory_bytes > 0 && hb.memory_bytes <= reg.memory_bytes,
            "{hb:?}"
        );
        assert_eq!((hb.active_downloaders, hb.in_flight), (0, 0));
        assert!(hb.qps >= 0.0 && hb.qps.is_finite());
    }
    assert!(second.seq > first.seq);
    let stats = agent.stats();
    assert!(stats.registered && stats.heartbeats_sent >= 2, "{stats:?}");
    agent.shutdown().await;
    // One registration only.
    let more = tokio::time::timeout(std::time::Duration::from_millis(50), regs.next()).await;
    assert!(more.is_err(), "a second registration arrived");
}

#[tokio::test]
async fn allocate_and_download_demo_pages() {
    let site = DemoSite::start(demo_config()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let agent = start(agent_config(dir.path(), "a-demo"), &bus).await;
    let mut events = agent.events();
    let mut hub = Hub::new(Arc::new(bus.clone()), "a-demo").await;
    hub.allocate("r1", &demo_spider(&site)).await;
    event(&mut events, "allocated", |e| {
        matches!(
            e,
            AgentEvent::Allocated {
                existing: false,
                ..
            }
        )
        .then_some(())
    })
    .await;
    let base = site.base_url(1);
    let urls: Vec<String> = ["p/3", "r/5", "missing/1", "private/1", ""]
        .iter()
        .map(|p| format!("{base}{p}"))
        .collect();
    let leases = hub.download("r1", &urls).await;
    let results = hub.results(&leases).await;
    let by_url = |i: usize| &results[&leases[i]];

    let page = by_url(0);
    assert_eq!(page.agent.as_str(), "a-demo");
    assert_eq!(page.run, RunId::new("r1"));
    let o = &page.outcome;
    assert_eq!((o.status, &o.error), (Some(200), &None), "{o:?}");
    let info = site.page_info(1, 3).unwrap();
    assert_eq!(o.items.len(), 1);
    let item = &o.items[0];
    assert_eq!(item["url"], info.url.as_str());
    assert_eq!(item["heading"], info.heading.as_str());
    assert_eq!(item["price"], info.price.as_str());
    assert!(o.links.len() > 5, "{:?}", o.links);
    for link in &o.links {
        assert!(link.starts_with("http://127.0.0."), "{link}");
        assert!(
            !link.contains('#') && !link.contains("utm_"),
            "not canonical: {link}"
        );
    }
    assert!(o.bytes > 1_000 && o.timings.total_ms >= o.timings.fetch_ms);
    assert!(o.body.is_none(), "bodies only when asked");

    let redirect = &by_url(1).outcome;
    assert_eq!(redirect.status, Some(301));
    assert_eq!(redirect.links, vec![site.page_url(1, 5)]);
    assert_eq!(redirect.redirects, 1);
    assert!(redirect.items.is_empty() && redirect.error.is_none());

    let missing = by_url(2).outcome.error.as_ref().unwrap();
    assert_eq!(
        (missing.code.to_string().as_str(), missing.retryable),
        ("http_404", false)
    );
    assert_eq!(by_url(2).outcome.status, Some(404));

    let robots = by_url(3).outcome.error.as_ref().unwrap();
    assert_eq!(
        (robots.code.to_string().as_str(), robots.retryable),
        ("robots_disallowed", false)
    );
    assert_eq!(site.stats().hits_under("/private/"), 0);

    let index = &by_url(4).outcome;
    assert_eq!(index.status, Some(200));
    assert!(
        index.links.iter().any(|l| l.contains("127.0.0.2")),
        "other host linked"
    );

    let stats = agent.stats();
    assert_eq!(stats.requests, 5);
    assert_eq!(stats.runs[&RunId::new("r1")].requests, 5);
    agent.shutdown().await;
}

#[tokio::test]
async fn capacity_bounds_requests_in_flight() {
    let site = DemoSite::start(DemoConfig {
        hosts: 1,
        pages: 20,
        latency_ms: Some(50),
        ..DemoConfig::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let config = silk_agent::AgentConfig {
        capacity: 2,
        ..agent_config(dir.path(), "a-cap")
    };
    let agent = start(config, &bus).await;
    let mut hub = Hub::new(Arc::new(bus.clone()), "a-cap").await;
    let spider =
        DownloaderConfig::for_spider_yaml(spider_yaml(&site.start_url(), "robots: false\n"));
    hub.allocate("r1", &spider).await;
    let urls: Vec<String> = (0..8).map(|i| site.page_url(1, i)).collect();
    let leases = hub.download("r1", &urls).await;
    let results = hub.results(&leases).await;
    assert!(results.values().all(|r| r.outcome.status == Some(200)));
    let max = site.stats().per_host_max_in_flight.values().copied().max();
    assert_eq!(max, Some(2), "capacity 2");
    agent.shutdown().await;
}

/// A site that sets a cookie on `/set?v=…` and echoes the Cookie and User-Agent headers on
/// `/echo`.
async fn cookie_site() -> String {
    let app = axum::Router::new()
        .route(
            "/set",
            get(
                |q: axum::extract::Query<std::collections::HashMap<String, String>>| async move {
                    let v = q.get("v").cloned().unwrap_or_default();
                    (
                        [(axum::http::header::SET_COOKIE, format!("sid={v}; Path=/"))],
                        axum::response::Html("<p>set</p>".to_owned()),
                    )
                },
            ),
        )
        .route(
            "/echo",
            get(|headers: HeaderMap| async move {
                let h = |n: &str| {
                    headers
                        .get(n)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_owned()
                };
                axum::response::Html(format!(
                    "<html><body><p id=\"c\">cookie={}</p><p id=\"ua\">{}</p></body></html>",
                    h("cookie"),
                    h("user-agent")
                ))
            }),
        );
    format!("http://{}", serve(app).await)
}

#[tokio::test]
async fn runs_are_isolated() {
    let site = cookie_site().await;
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let agent = start(agent_config(dir.path(), "a-iso"), &bus).await;
    let mut hub = Hub::new(Arc::new(bus.clone()), "a-iso").await;
    let spider = |ua: &str| {
        DownloaderConfig::for_spider_yaml(spider_yaml(
            &format!("{site}/"),
            &format!(
                "robots: false\nuser_agent: {ua}\nextract:\n  cookie: {{css: \"p#c\"}}\n  ua: {{css: \"p#ua\"}}\n"
            ),
        ))
    };
    hub.allocate("run-a", &spider("agent-a/1")).await;
    hub.allocate("run-b", &spider("agent-b/1")).await;
    let set = hub.fetch("run-a", &format!("{site}/set?v=A")).await;
    assert_eq!(set.outcome.status, Some(200));
    let a = hub.fetch("run-a", &format!("{site}/echo")).await;
    let b = hub.fetch("run-b", &format!("{site}/echo")).await;
    let field =
        |r: &silk_bus::RunResult, f: &str| r.outcome.items[0][f].as_str().unwrap_or("").to_owned();
    assert_eq!(field(&a, "cookie"), "cookie=sid=A");
    assert_eq!(
        field(&b, "cookie"),
        "cookie=",
        "run B must not send run A's cookie"
    );
    assert_eq!(field(&a, "ua"), "agent-a/1");
    assert_eq!(field(&b, "ua"), "agent-b/1");
    agent.shutdown().await;
}

#[tokio::test]
async fn unknown_runs_release_and_bad_configs() {
    let site = DemoSite::start(demo_config()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let agent = start(agent_config(dir.path(), "a-rel"), &bus).await;
    let mut events = agent.events();
    let mut hub = Hub::new(Arc::new(bus.clone()), "a-rel").await;
    let url = site.page_url(1, 1);

    let r = hub.fetch("nobody", &url).await;
    let e = r.outcome.error.unwrap();
    assert_eq!(
        (e.code.to_string().as_str(), e.retryable),
        ("no_downloader", true)
    );
    assert!(e.message.contains("nobody"), "{}", e.message);

    hub.allocate("r1", &demo_spider(&site)).await;
    assert_eq!(hub.fetch("r1", &url).await.outcome.status, Some(200));
    // A repeated allocate keeps the downloader (and its counters).
    hub.allocate("r1", &demo_spider(&site)).await;
    event(&mut events, "repeated allocate", |e| {
        matches!(e, AgentEvent::Allocated { existing: true, .. }).then_some(())
    })
    .await;
    assert_eq!(agent.stats().runs[&RunId::new("r1")].requests, 1);

    hub.send(Command::Release {
        run: RunId::new("r1"),
    })
    .await;
    let reason = event(&mut events, "released", |e| match e {
        AgentEvent::Released { run, reason } if run.as_str() == "r1" => Some(*reason),
        _ => None,
    })
    .await;
    assert_eq!(reason, ReleaseReason::Command);
    assert_eq!(agent.stats().active_downloaders, 0);
    let e = hub.fetch("r1", &url).await.outcome.error.unwrap();
    assert_eq!(e.code, "no_downloader");

    // A bad config is refused, named, and the run's downloads say why.
    hub.send(Command::Allocate {
        run: RunId::new("bad"),
        config: serde_json::json!({"spider": "name: x\nstart_urls: [\"http://127.0.0.1:1/\"]\nextract: {p: {css: \"[[\"}}\n", "qps": -1}),
        allow_networks: Vec::new(),
    })
    .await;
    let why = event(&mut events, "allocation refused", |e| match e {
        AgentEvent::AllocationFailed { run, error } if run.as_str() == "bad" => Some(error.clone()),
        _ => None,
    })
    .await;
    assert!(
        why.contains("extract.p.css") && why.contains("qps"),
        "{why}"
    );
    let e = hub.fetch("bad", &url).await.outcome.error.unwrap();
    assert_eq!(
        (e.code.to_string().as_str(), e.retryable),
        ("invalid_config", false)
    );
    assert!(e.message.contains("extract.p.css"), "{}", e.message);
    // Nonsense configs are refused the same way.
    for config in [
        serde_json::json!(null),
        serde_json::json!({"spider": 1}),
        serde_json::json!([1, 2]),
    ] {
        hub.send(Command::Allocate {
            run: RunId::new("worse"),
            config,
            allow_networks: Vec::new(),
        })
        .await;
        event(&mut events, "refused", |e| {
            matches!(e, AgentEvent::AllocationFailed { run, .. } if run.as_str() == "worse")
                .then_some(())
        })
        .await;
    }
    assert_eq!(agent.stats().active_downloaders, 0);
    agent.shutdown().await;
}

#[tokio::test]
async fn shutdown_command_stops_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let agent = start(agent_config(dir.path(), "a-stop"), &bus).await;
    let hub = Hub::new(Arc::new(bus.clone()), "a-stop").await;
    hub.send(Command::Shutdown).await;
    within("the agent to stop", agent.stopped()).await;
    assert!(agent.is_stopped());
    // Malformed commands on its subject were never a reason to stop: check with a new agent.
    let agent = start(agent_config(dir.path(), "a-stop2"), &bus).await;
    let mut events = agent.events();
    let subject = silk_bus::Subject::agent_commands(&silk_core::AgentId::new("a-stop2")).unwrap();
    bus.publish_raw(&subject, bytes_of("{not json"))
        .await
        .unwrap();
    let hub = Hub::new(Arc::new(bus.clone()), "a-stop2").await;
    hub.allocate(
        "r",
        &DownloaderConfig::for_spider_yaml(spider_yaml("http://127.0.0.1:1/", "")),
    )
    .await;
    event(&mut events, "allocated after garbage", |e| {
        matches!(e, AgentEvent::Allocated { .. }).then_some(())
    })
    .await;
    assert!(!agent.is_stopped());
    agent.shutdown().await;
}

fn bytes_of(s: &str) -> bytes::Bytes {
    bytes::Bytes::copy_from_slice(s.as_bytes())
}

#[tokio::test]
async fn graceful_shutdown_finishes_fetches_and_answers_waiting_requests() {
    let (site, mut arrived, release) = gated_site().await;
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let config = silk_agent::AgentConfig {
        capacity: 1,
        ..agent_config(dir.path(), "a-grace")
    };
    let agent = Arc::new(start(config, &bus).await);
    let mut events = agent.events();
    let mut hub = Hub::new(Arc::new(bus.clone()), "a-grace").await;
    hub.allocate(
        "r1",
        &DownloaderConfig::for_spider_yaml(spider_yaml(&format!("{site}/"), "robots: false\n")),
    )
    .await;
    let slow = format!("{site}/slow");
    let leases = hub.download("r1", &[slow.clone(), slow]).await;
    within("the first request", arrived.recv()).await;
    let stopping = tokio::spawn({
        let agent = agent.clone();
        async move { agent.shutdown().await }
    });
    event(&mut events, "stopping", |e| {
        matches!(e, AgentEvent::Stopping).then_some(())
    })
    .await;
    release.notify_one();
    let results = hub.results(&leases).await;
    let codes: Vec<Option<String>> = leases
        .iter()
        .map(|l| {
            results[l]
                .outcome
                .error
                .as_ref()
                .map(|e| e.code.to_string())
        })
        .collect();
    assert!(
        codes.contains(&None),
        "the fetch in flight finished: {codes:?}"
    );
    assert!(
        codes.contains(&Some("agent_stopping".to_owned())),
        "the waiting one was answered: {codes:?}"
    );
    within("shutdown", stopping).await.unwrap();
    assert!(agent.is_stopped());
}
