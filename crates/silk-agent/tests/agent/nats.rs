//! The agent over a real NATS JetStream (`SILK_TEST_NATS=nats://127.0.0.1:4222`): register,
//! heartbeat, allocate and download the demo site, run log lines on the `logs` stream;
//! allocation replies (over core NATS).
//! Skipped (with a line saying so) when the variable is not set. Each test has a namespace
//! (and stream) of its own.

use crate::support::*;
use silk_agent::{Agent, DownloaderConfig};
use silk_bus::{Bus, BusConfig, LogLevel, NatsBus};
use silk_core::SystemClock;
use std::sync::Arc;

fn nats_url() -> Option<String> {
    match std::env::var("SILK_TEST_NATS") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            println!("skipped: SILK_TEST_NATS not set");
            None
        }
    }
}

#[tokio::test]
async fn allocation_replies_over_nats() {
    let Some(url) = nats_url() else { return };
    let namespace = format!("alloc{}", std::process::id());
    let nats = NatsBus::connect(&url, BusConfig::with_namespace(namespace))
        .await
        .expect("connect to SILK_TEST_NATS");
    let bus: Arc<dyn Bus> = Arc::new(nats.clone());
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(
        crate::allocation::with_scenario_commands(agent_config(dir.path(), "a-nats-alloc")),
        bus.clone(),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    crate::allocation::replies_say_whether_allocation_succeeded(bus, "a-nats-alloc", dir.path())
        .await;
    agent.shutdown().await;
    nats.delete_stream()
        .await
        .expect("clean up the test's stream");
}

#[tokio::test]
async fn allocate_and_download_over_nats() {
    let Some(url) = nats_url() else { return };
    let namespace = format!("agent{}", std::process::id());
    let nats = NatsBus::connect(&url, BusConfig::with_namespace(namespace))
        .await
        .expect("connect to SILK_TEST_NATS");
    let bus: Arc<dyn Bus> = Arc::new(nats.clone());
    let site = small_site().await;
    let dir = tempfile::tempdir().unwrap();
    let mut regs = registrations(bus.as_ref(), "hub-regs").await;
    let mut beats = heartbeats(bus.as_ref()).await;
    let mut logs = log_batches(bus.as_ref(), "hub-logs").await;
    let mut hub = Hub::new(bus.clone(), "a-nats").await;
    let agent = Agent::start(
        agent_config(dir.path(), "a-nats"),
        bus.clone(),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    assert_eq!(next_register(&mut regs).await.agent.as_str(), "a-nats");
    assert_eq!(next_heartbeat(&mut beats).await.agent.as_str(), "a-nats");
    hub.allocate(
        "r1",
        &DownloaderConfig::for_spider_yaml(spider_yaml(
            &site.start_url(),
            "extract:\n  heading: {css: h1.title}\n",
        )),
    )
    .await;
    let r = hub.fetch("r1", &site.page_url(1, 3)).await;
    assert_eq!(r.outcome.status, Some(200));
    assert_eq!(
        r.outcome.items[0]["heading"],
        site.page_info(1, 3).unwrap().heading.as_str()
    );
    assert!(!r.outcome.links.is_empty());
    let missing = format!("{}missing/1", site.base_url(1));
    let r = hub.fetch("r1", &missing).await;
    assert_eq!(r.outcome.status, Some(404));
    let (batch, line) = log_line(&mut logs, "the 404's warning", |_, l| {
        l.message.starts_with(&format!("{missing}: "))
    })
    .await;
    assert_eq!((batch.run.as_str(), batch.agent.as_str()), ("r1", "a-nats"));
    assert_eq!(line.level, LogLevel::Warn);
    assert!(line.message.contains("404"), "{line:?}");
    agent.shutdown().await;
    nats.delete_stream()
        .await
        .expect("clean up the test's stream");
}
