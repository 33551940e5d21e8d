//! Detach mode: an agent that hears from no hub for its `detach_after` abandons the requests
//! it is fetching, drops its allocations and says so (stats, events); when a hub is heard
//! again it registers again, and the restarted hub finishes the run with every page once.
//! The site is a real HTTP server on loopback whose pages hang until the test lets them go,
//! so that "abandoned" is observable as closed connections.

mod common;

use axum::extract::{Path as UrlPath, State};
use common::*;
use silk_agent::AgentEvent;
use silk_api::runs::{OnAgentLost, RunRequest, RunState, Strategy};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tempfile::TempDir;
use tokio::sync::{broadcast, watch};

const PAGES: u32 = 5;

/// Pages that hang until `open_gate` is set; `open` counts the requests being answered (a
/// request's handler is dropped when its connection closes).
#[derive(Clone)]
struct Site {
    gate: watch::Sender<bool>,
    open: watch::Sender<u64>,
    served: Arc<AtomicU64>,
}

/// Counts a request as open while its handler lives.
struct Open(watch::Sender<u64>);

impl Open {
    fn new(open: &watch::Sender<u64>) -> Self {
        open.send_modify(|n| *n += 1);
        Self(open.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

async fn index() -> axum::response::Html<String> {
    let links: String = (0..PAGES)
        .map(|i| format!("<a href=\"/h/{i}\">page {i}</a>"))
        .collect();
    axum::response::Html(format!("<html><body>{links}</body></html>"))
}

async fn page(State(site): State<Site>, UrlPath(i): UrlPath<u32>) -> axum::response::Html<String> {
    let _open = Open::new(&site.open);
    let mut gate = site.gate.subscribe();
    let _ = gate.wait_for(|open| *open).await;
    site.served.fetch_add(1, Ordering::SeqCst);
    axum::response::Html(format!(
        "<html><body><h1 class=\"title\">page {i}</h1></body></html>"
    ))
}

async fn start_site() -> (String, Site) {
    let site = Site {
        gate: watch::channel(false).0,
        open: watch::channel(0).0,
        served: Arc::new(AtomicU64::new(0)),
    };
    let app = axum::Router::new()
        .route("/", axum::routing::get(index))
        .route("/h/{i}", axum::routing::get(page))
        .with_state(site.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, site)
}

/// Waits for the first event that `pick` accepts.
async fn event(events: &mut broadcast::Receiver<AgentEvent>, pick: impl Fn(&AgentEvent) -> bool) {
    loop {
        match events.recv().await {
            Ok(e) if pick(&e) => return,
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => panic!("the agent's events ended"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_that_hears_no_hub_detaches_and_the_run_goes_on_when_a_hub_is_back() {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let (base, site) = start_site().await;
    let hub = start_hub(dir.path(), &bus).await;
    let agent = start_agent_with(
        silk_agent::AgentConfig {
            detach_after_ms: 1_000,
            ..agent_config(dir.path(), "a1")
        },
        &bus,
    )
    .await;
    let mut events = agent.events();
    within("a live agent", 10, hub.wait_for_live_agents(1)).await;
    // A run whose pages hang: the agent is fetching all of them when the hub goes.
    let spider = format!(
        "name: detach\nstart_urls: ['{base}/']\nrobots: false\nitem_when: '/h/\\d+$'\n\
         extract: {{title: {{css: 'h1.title'}}}}\ntimeout_ms: 600000\nper_host_delay_ms: 0\n\
         per_host_concurrency: 8\n"
    );
    let run = hub
        .submit(RunRequest {
            strategy: Some(Strategy::Fixed(1)),
            on_agent_lost: Some(OnAgentLost::Fail),
            stall_timeout_ms: Some(120_000),
            ..RunRequest::spider(spider)
        })
        .await
        .unwrap();
    let mut open = site.open.subscribe();
    within(
        "every page being fetched",
        30,
        open.wait_for(|n| *n == u64::from(PAGES)),
    )
    .await
    .unwrap();
    assert_eq!(agent.stats().active_downloaders, 1);

    hub.shutdown().await;
    within(
        "the detach",
        30,
        event(&mut events, |e| matches!(e, AgentEvent::Detached { .. })),
    )
    .await;
    // The requests are abandoned (their connections closed), though the pages still hang
    // and the spider's timeout is ten minutes.
    within("the requests abandoned", 30, open.wait_for(|n| *n == 0))
        .await
        .unwrap();
    let stats = agent.stats();
    assert!(stats.detached);
    assert_eq!(stats.detaches, 1);
    assert_eq!(stats.active_downloaders, 0, "the allocation is dropped");
    until("nothing in flight", async || {
        (agent.stats().in_flight == 0).then_some(())
    })
    .await;
    let allocations = std::fs::read_to_string(agent.allocations_file()).unwrap_or_default();
    assert!(
        !allocations.contains(run.id.as_str()),
        "the allocations file still holds the run: {allocations}"
    );
    assert_eq!(site.served.load(Ordering::SeqCst), 0);

    // A hub again: the agent registers again and the run is finished, every page once.
    site.gate.send_replace(true);
    let hub = start_hub(dir.path(), &bus).await;
    within(
        "the agent hears the hub",
        30,
        event(&mut events, |e| matches!(e, AgentEvent::Reattached)),
    )
    .await;
    within(
        "the agent registers again",
        30,
        event(&mut events, |e| matches!(e, AgentEvent::Registered)),
    )
    .await;
    assert!(!agent.stats().detached);
    let done = within("the run", 120, hub.wait_run(&run.id)).await.unwrap();
    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    let urls = items_once(&done);
    let expected: std::collections::BTreeSet<String> =
        (0..PAGES).map(|i| format!("{base}/h/{i}")).collect();
    assert_eq!(urls, expected);
    assert_eq!(agent.stats().detaches, 1);
    hub.shutdown().await;
    agent.shutdown().await;
}
