//! Helpers shared by the hub's integration tests: an in-process bus, a hub and agents with
//! fast heartbeats, the demo site, deadlines.
#![allow(dead_code)]

use silk_agent::{Agent, AgentConfig, AgentHandle};
use silk_bus::{
    Bus, BusConfig, Heartbeat, InProcessBus, Register, RetryPolicy, Subject, TtlPolicy,
};
use silk_core::{AgentId, Clock, SystemClock};
use silk_hub::{Hub, HubConfig, HubHandle, PhiConfig};
use silk_testkit::demo::{DemoConfig, DemoSite};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub const HEARTBEAT_MS: u64 = 100;

pub fn bus() -> InProcessBus {
    bus_on(Arc::new(SystemClock))
}

/// The test bus on `clock` (a `TokioClock` for tests on paused time: its TTLs and retry
/// back-offs then move with virtual time).
pub fn bus_on(clock: Arc<dyn Clock>) -> InProcessBus {
    let config = BusConfig {
        retry: RetryPolicy {
            retries: 2,
            backoff_initial_ms: 10,
            backoff_max_ms: 50,
        },
        ..BusConfig::with_namespace("hubtest")
    };
    InProcessBus::with_clock(config, clock).expect("bus")
}

/// The TTLs of the hub of [`hub_config`].
pub fn ttl() -> TtlPolicy {
    TtlPolicy {
        heartbeat_interval_ms: HEARTBEAT_MS,
        ..TtlPolicy::default()
    }
}

/// Registers the fake agent `agent` (capacity 16), stamped with `clock`.
pub async fn register_fake(bus: &InProcessBus, clock: &dyn Clock, agent: &AgentId) {
    let register = Register {
        agent: agent.clone(),
        host: "fake-host".into(),
        version: "test".into(),
        cores: 1,
        memory_bytes: 1 << 30,
        labels: BTreeMap::new(),
        capacity: 16,
    };
    bus.publish(
        &Subject::registrations(),
        &ttl().envelope(register, clock.now_ms()),
    )
    .await
    .expect("register");
}

/// What a fake agent does to be live: registers `agent`, then heartbeats every
/// `HEARTBEAT_MS` of tokio's time, stamped with `clock`, until its task is aborted.
pub async fn fake_presence(bus: InProcessBus, clock: Arc<dyn Clock>, agent: AgentId) {
    register_fake(&bus, &*clock, &agent).await;
    let mut tick = tokio::time::interval(Duration::from_millis(HEARTBEAT_MS));
    for seq in 1.. {
        tick.tick().await;
        let heartbeat = Heartbeat {
            agent: agent.clone(),
            cpu_pct: 1.0,
            memory_bytes: 1 << 20,
            active_downloaders: 1,
            in_flight: 0,
            qps: 0.0,
            seq,
        };
        let _ = bus
            .publish(
                &Subject::heartbeats(),
                &ttl().envelope(heartbeat, clock.now_ms()),
            )
            .await;
    }
}

/// The hub of the tests: 100 ms heartbeats, a 50 ms tick. The failure detector forgives a
/// heartbeat about a second late (a loaded machine's real-clock tests must not see a live
/// agent die) and declares a silent agent dead within 2.5 s; `presence.rs` checks its exact
/// behaviour on paused time.
pub fn hub_config(dir: &Path) -> HubConfig {
    HubConfig {
        phi: PhiConfig {
            acceptable_heartbeat_pause_ms: 1_000,
            first_heartbeat_estimate_ms: HEARTBEAT_MS,
            min_std_dev_ms: 50.0,
            dead_after_ms: 2_500,
            ..PhiConfig::default()
        },
        ttl: ttl(),
        tick_ms: 50,
        allocate_timeout_ms: 5_000,
        // Webhook receivers of the tests are on loopback.
        allow_networks: vec!["127.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()],
        ..HubConfig::new(dir.join("hub"))
    }
}

pub async fn start_hub(dir: &Path, bus: &InProcessBus) -> HubHandle {
    start_hub_on(dir, bus, Arc::new(SystemClock)).await
}

/// A hub with `config` on the system clock.
pub async fn start_hub_with(config: HubConfig, bus: &InProcessBus) -> HubHandle {
    Hub::start(config, Arc::new(bus.clone()), Arc::new(SystemClock))
        .await
        .expect("hub starts")
}

/// [`start_hub`] with the hub on `clock`.
pub async fn start_hub_on(dir: &Path, bus: &InProcessBus, clock: Arc<dyn Clock>) -> HubHandle {
    Hub::start(hub_config(dir), Arc::new(bus.clone()), clock)
        .await
        .expect("hub starts")
}

/// The config of a test agent `id` with its data under `dir`.
pub fn agent_config(dir: &Path, id: &str) -> AgentConfig {
    AgentConfig {
        id: Some(AgentId::new(id)),
        capacity: 16,
        heartbeat_interval_ms: HEARTBEAT_MS,
        shutdown_grace_ms: 0,
        // The test sites are on loopback, which agents do not reach unless allowed.
        allow_networks: vec!["127.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()],
        ..AgentConfig::new(dir.join(id))
    }
}

pub async fn start_agent(dir: &Path, bus: &InProcessBus, id: &str) -> AgentHandle {
    start_agent_with(agent_config(dir, id), bus).await
}

pub async fn start_agent_with(config: AgentConfig, bus: &InProcessBus) -> AgentHandle {
    Agent::start(config, Arc::new(bus.clone()), Arc::new(SystemClock))
        .await
        .expect("agent starts")
}

/// Polls `check` until it gives a value (60 s at most); fails naming `what` if it never does.
pub async fn until<T>(what: &str, check: impl AsyncFnMut() -> Option<T>) -> T {
    silk_testkit::eventually(Duration::from_secs(60), silk_testkit::POLL_EVERY, check)
        .await
        .unwrap_or_else(|| panic!("timed out waiting for {what}"))
}

/// Serves the hub's API on a free loopback port: its base URL and a client with the admin
/// token (a restarted hub's is read from its data dir).
pub async fn serve(hub: &HubHandle) -> (String, silk_api::client::Client) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let router = hub.router();
    tokio::spawn(async move { axum::serve(listener, router).await });
    let token = match hub.ensure_admin_token().await.unwrap() {
        Some(token) => token,
        None => std::fs::read_to_string(hub.data_dir().join(silk_hub::ADMIN_TOKEN_FILE))
            .unwrap()
            .trim()
            .to_owned(),
    };
    let url = reqwest::Url::parse(&base).unwrap();
    let client = silk_api::client::Client::new(url, Some(token)).unwrap();
    (base, client)
}

/// A client of the hub at `base` with a new token that is not an admin's, made by `admin`.
pub async fn member(admin: &silk_api::client::Client, base: &str) -> silk_api::client::Client {
    let made = admin
        .create_token(&silk_api::tokens::TokenRequest {
            name: "member".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    silk_api::client::Client::new(reqwest::Url::parse(base).unwrap(), Some(made.token)).unwrap()
}

pub async fn within<T>(what: &str, secs: u64, f: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(Duration::from_secs(secs), f).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {secs} s waiting for {what}"),
    }
}

pub async fn site(pages: u32, latency_ms: u64) -> DemoSite {
    DemoSite::start(DemoConfig {
        hosts: 3,
        pages,
        latency_ms: (latency_ms > 0).then_some(latency_ms),
        ..DemoConfig::default()
    })
    .await
    .expect("demo site")
}

/// The URLs of the run's items file, asserting none is there twice.
pub fn items_once(view: &silk_api::runs::RunView) -> std::collections::BTreeSet<String> {
    let path = view
        .items_path
        .as_ref()
        .expect("a run whose item log is a file");
    let text = std::fs::read_to_string(path).expect("items file");
    let urls: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("json line")["url"]
                .as_str()
                .expect("url")
                .to_owned()
        })
        .collect();
    let unique: std::collections::BTreeSet<String> = urls.iter().cloned().collect();
    assert_eq!(urls.len(), unique.len(), "an item is in the output twice");
    unique
}

/// One API call: the status and JSON body of the hub's answer, success or not (fails the
/// test when there is no answer at all).
pub async fn call(
    client: &silk_api::client::Client,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    match client.request(method, path, body.as_ref()).await {
        Ok(answer) => (answer.status, answer.value),
        Err(e) => match (e.status(), e.body()) {
            (Some(status), Some(body)) => (status, body),
            _ => panic!("no API answer from {path}: {e}"),
        },
    }
}
