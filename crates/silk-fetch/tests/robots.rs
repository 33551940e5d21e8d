//! The robots.txt cache against real servers: the demo site's robots.txt, and an axum app
//! whose robots.txt answer the test changes (status, body, redirects) while a manual clock
//! drives expiry.

mod common;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use silk_core::ManualClock;
use silk_fetch::{FetchConfig, Fetcher, RobotsCache, RobotsVerdict};
use silk_testkit::{DemoConfig, DemoSite};
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use url::Url;

fn u(s: &str) -> Url {
    Url::parse(s).unwrap()
}

fn cache(user_agent: &str) -> RobotsCache {
    let f = Fetcher::new(FetchConfig {
        user_agent: user_agent.into(),
        timeout_ms: 5_000,
        ..FetchConfig::default()
    })
    .unwrap();
    RobotsCache::new(f, user_agent)
}

#[tokio::test]
async fn demo_robots_allow_deny_and_crawl_delay_fetched_once() {
    let site = DemoSite::start(DemoConfig {
        hosts: 2,
        pages: 10,
        crawl_delay_ms: Some(1500),
        ..DemoConfig::default()
    })
    .await
    .unwrap();
    let robots = cache("silk/0.1");
    let base = site.base_url(1);
    let page = u(&site.page_url(1, 3));
    let private = u(&format!("{base}private/4"));
    // Many concurrent first callers for one host: one fetch.
    let checks: Vec<_> = (0..16)
        .map(|k| {
            if k % 2 == 0 {
                robots.check(&page)
            } else {
                robots.check(&private)
            }
        })
        .collect();
    let verdicts = futures::future::join_all(checks).await;
    for (k, v) in verdicts.iter().enumerate() {
        let want = if k % 2 == 0 {
            RobotsVerdict::Allowed
        } else {
            RobotsVerdict::Disallowed
        };
        assert_eq!(*v, want, "call {k}");
    }
    assert_eq!(
        robots.crawl_delay(&page).await,
        Some(Duration::from_millis(1500))
    );
    assert_eq!(robots.cached(&private), Some(RobotsVerdict::Disallowed));
    assert_eq!(
        robots.cached(&u(&site.page_url(2, 1))),
        None,
        "host 2 not loaded yet"
    );
    assert!(robots.allowed(&u(&site.page_url(2, 1))).await);
    let stats = site.stats();
    assert_eq!(stats.hits_on(&format!("{base}robots.txt")), 1);
    assert_eq!(stats.hits_on(&format!("{}robots.txt", site.base_url(2))), 1);
    assert_eq!(stats.total_requests, 2, "robots checks fetch nothing else");
}

/// A robots.txt endpoint whose status and body the test sets, counting hits.
#[derive(Default)]
struct Control {
    status: AtomicU16,
    body: Mutex<String>,
    hits: AtomicUsize,
}

async fn robots_handler(State(c): State<Arc<Control>>) -> impl IntoResponse {
    c.hits.fetch_add(1, Ordering::SeqCst);
    let status = StatusCode::from_u16(c.status.load(Ordering::SeqCst)).unwrap();
    let mut resp = (status, c.body.lock().unwrap().clone()).into_response();
    if status.is_redirection() {
        resp.headers_mut()
            .insert(header::LOCATION, "/real-robots.txt".parse().unwrap());
    }
    resp
}

async fn controlled() -> (Arc<Control>, String) {
    let control = Arc::new(Control {
        status: AtomicU16::new(200),
        ..Control::default()
    });
    let app = Router::new()
        .route("/robots.txt", get(robots_handler))
        .route(
            "/real-robots.txt",
            get(|| async { "User-agent: *\nDisallow: /via-redirect\n" }),
        )
        .with_state(control.clone());
    let addr = common::serve(app).await;
    (control, format!("http://{addr}"))
}

#[tokio::test]
async fn status_rules_and_expiry() {
    let (control, origin) = controlled().await;
    let clock = ManualClock::new(1_000_000);
    let robots = cache("silk/1")
        .with_clock(Arc::new(clock.clone()))
        .with_ttl(Duration::from_secs(3600), Duration::from_secs(60));
    let page = u(&format!("{origin}/a/page"));

    // 5xx: unavailable, everything disallowed until error_retry has passed.
    control.status.store(503, Ordering::SeqCst);
    assert_eq!(
        robots.check(&page).await,
        RobotsVerdict::Unavailable {
            retry_in: Duration::from_secs(60)
        }
    );
    assert!(!robots.allowed(&page).await);
    clock.advance(59_000);
    assert_eq!(
        robots.check(&page).await,
        RobotsVerdict::Unavailable {
            retry_in: Duration::from_secs(1)
        }
    );
    assert_eq!(
        control.hits.load(Ordering::SeqCst),
        1,
        "no refetch before error_retry"
    );

    // Then it is fetched again: now a 404, which allows everything for the ttl.
    control.status.store(404, Ordering::SeqCst);
    clock.advance(1_000);
    assert!(robots.allowed(&page).await);
    assert_eq!(control.hits.load(Ordering::SeqCst), 2);

    // After the ttl: a real file.
    *control.body.lock().unwrap() = "User-agent: silk\nDisallow: /a/\nCrawl-delay: 3\n".into();
    control.status.store(200, Ordering::SeqCst);
    clock.advance(3_600_000);
    assert!(!robots.allowed(&page).await);
    assert!(robots.allowed(&u(&format!("{origin}/b"))).await);
    assert_eq!(
        robots.crawl_delay(&page).await,
        Some(Duration::from_secs(3))
    );
    assert_eq!(control.hits.load(Ordering::SeqCst), 3);

    // 429 is "come back later", not "no file".
    control.status.store(429, Ordering::SeqCst);
    clock.advance(3_600_000);
    assert!(matches!(
        robots.check(&page).await,
        RobotsVerdict::Unavailable { .. }
    ));
}

#[tokio::test]
async fn redirects_followed_and_network_errors_disallow() {
    let (control, origin) = controlled().await;
    control.status.store(301, Ordering::SeqCst);
    let robots = cache("silk/1");
    assert!(!robots.allowed(&u(&format!("{origin}/via-redirect"))).await);
    assert!(robots.allowed(&u(&format!("{origin}/elsewhere"))).await);

    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/x", l.local_addr().unwrap())
    };
    assert!(matches!(
        robots.check(&u(&dead)).await,
        RobotsVerdict::Unavailable { .. }
    ));
}

#[tokio::test]
async fn oversized_and_garbage_files() {
    let (control, origin) = controlled().await;
    // A 2 MB file: the first 512 KiB are read, the rules in them apply.
    let mut big = String::from("User-agent: *\nDisallow: /early\n");
    while big.len() < 2 << 20 {
        big.push_str("# padding padding padding padding padding padding padding\n");
    }
    big.push_str("Disallow: /late\n");
    *control.body.lock().unwrap() = big;
    let robots = cache("silk/1");
    assert!(!robots.allowed(&u(&format!("{origin}/early"))).await);
    assert!(robots.allowed(&u(&format!("{origin}/late"))).await);

    let (control, origin) = controlled().await;
    *control.body.lock().unwrap() = "<html><body>\u{0}\u{fffd} Not a robots file".into();
    assert!(robots.allowed(&u(&format!("{origin}/anything"))).await);
}
