//! The bus goes down: registration and heartbeats are retried until it is back, results are
//! retried `result_publish_retries` times and then dropped, and nothing crashes.

use crate::support::*;
use silk_agent::{AgentConfig, AgentEvent, DownloaderConfig};
use std::sync::Arc;

#[tokio::test]
async fn heartbeats_resume_and_results_are_dropped_while_the_bus_is_down() {
    let (site, mut arrived, release) = gated_site().await;
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let mut beats = heartbeats(&bus).await;
    let config = AgentConfig {
        result_publish_retries: 2,
        ..agent_config(dir.path(), "a-down")
    };
    let agent = start(config, &bus).await;
    let mut events = agent.events();
    let mut hub = Hub::new(Arc::new(bus.clone()), "a-down").await;
    next_heartbeat(&mut beats).await;
    hub.allocate(
        "r1",
        &DownloaderConfig::for_spider_yaml(spider_yaml(&format!("{site}/"), "robots: false\n")),
    )
    .await;
    hub.download("r1", &[format!("{site}/slow")]).await;
    within("the request to reach the site", arrived.recv()).await;

    bus.set_available(false);
    release.notify_one();
    let lease = event(&mut events, "the result dropped", |e| match e {
        AgentEvent::ResultDropped {
            lease_id, error, ..
        } => {
            assert!(error.contains("unavailable"), "{error}");
            Some(*lease_id)
        }
        _ => None,
    })
    .await;
    assert_eq!(lease, silk_core::LeaseId(1));
    let stats = agent.stats();
    assert_eq!((stats.results_dropped, stats.results_published), (1, 0));
    event(&mut events, "a failed heartbeat", |e| {
        matches!(e, AgentEvent::HeartbeatFailed { .. }).then_some(())
    })
    .await;
    assert!(!agent.is_stopped());

    bus.set_available(true);
    let seq = event(&mut events, "heartbeats again", |e| match e {
        AgentEvent::HeartbeatSent { seq } => Some(*seq),
        _ => None,
    })
    .await;
    // The hub sees them again (gaps in `seq` are the lost ones).
    let hb = loop {
        let hb = next_heartbeat(&mut beats).await;
        if hb.seq >= seq {
            break hb;
        }
    };
    assert!(agent.stats().heartbeats_failed >= 1);
    assert_eq!(hb.active_downloaders, 1);
    // Commands flow again too.
    let r = hub.fetch("r1", "http://127.0.0.1:9/x").await;
    assert!(r.outcome.error.is_some(), "nothing listens on port 9");
    agent.shutdown().await;
}

#[tokio::test]
async fn registration_is_retried_until_the_bus_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let mut regs = registrations(&bus, "hub-regs-down").await;
    bus.set_available(false);
    let agent = start(agent_config(dir.path(), "a-late"), &bus).await;
    let mut events = agent.events();
    event(&mut events, "a failed registration", |e| {
        matches!(e, AgentEvent::RegisterFailed { .. }).then_some(())
    })
    .await;
    assert!(!agent.stats().registered);
    bus.set_available(true);
    event(&mut events, "registered", |e| {
        matches!(e, AgentEvent::Registered).then_some(())
    })
    .await;
    assert_eq!(next_register(&mut regs).await.agent.as_str(), "a-late");
    // Commands sent now reach it: its subscription was retried as well.
    let hub = Hub::new(Arc::new(bus.clone()), "a-late").await;
    hub.allocate(
        "r1",
        &DownloaderConfig::for_spider_yaml(spider_yaml("http://127.0.0.1:1/", "")),
    )
    .await;
    event(&mut events, "allocated", |e| {
        matches!(e, AgentEvent::Allocated { .. }).then_some(())
    })
    .await;
    agent.shutdown().await;
}
