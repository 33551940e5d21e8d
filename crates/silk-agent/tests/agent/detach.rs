//! Detach mode on a clock the test moves: an agent that hears no hub (no beacon, no fresh
//! command) for its `detach_after` drops its allocations and says so; a hub's beacon ends the
//! detach and the agent registers again; a command older than `detach_after` (left on the
//! bus) does not count as a hub heard.

use crate::support::*;
use silk_agent::{Agent, AgentEvent, DownloaderConfig, ReleaseReason};
use silk_bus::{Bus, Command, HubBeacon, Subject, TtlPolicy};
use silk_core::{Clock, ManualClock, RunId};
use std::sync::Arc;
use std::time::Duration;

async fn beacon(bus: &dyn Bus, clock: &ManualClock) {
    let envelope = TtlPolicy::default().envelope(
        HubBeacon {
            hub: "hub-a".into(),
            seq: 1,
        },
        clock.now_ms(),
    );
    bus.publish(&Subject::hubs(), &envelope)
        .await
        .expect("beacon");
}

#[tokio::test]
async fn an_agent_that_hears_no_hub_detaches_and_registers_again_when_one_is_heard() {
    let clock = ManualClock::new(1_000_000);
    let bus = bus_with_clock(Arc::new(clock.clone()));
    let dir = tempfile::tempdir().unwrap();
    let config = silk_agent::AgentConfig {
        detach_after_ms: 5_000,
        ..agent_config(dir.path(), "a-detach")
    };
    let agent = Agent::start(config, Arc::new(bus.clone()), Arc::new(clock.clone()))
        .await
        .unwrap();
    let mut events = agent.events();
    event(&mut events, "registered", |e| {
        matches!(e, AgentEvent::Registered).then_some(())
    })
    .await;
    let hub = Hub::with_clock(Arc::new(bus.clone()), "a-detach", Arc::new(clock.clone())).await;
    let spider = DownloaderConfig::for_spider_yaml(spider_yaml("http://127.0.0.1:1/", ""));
    hub.allocate("r1", &spider).await;
    event(&mut events, "allocated", |e| {
        matches!(e, AgentEvent::Allocated { .. }).then_some(())
    })
    .await;

    // A beacon is a hub heard.
    clock.advance(4_000);
    assert_eq!(agent.stats().hub_silent_ms, 4_000);
    beacon(&bus, &clock).await;
    within("the beacon heard", async {
        while agent.stats().hub_silent_ms != 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;

    // Silence past detach_after: detached, the allocation dropped.
    clock.advance(5_001);
    let (run, reason) = event(&mut events, "released", |e| match e {
        AgentEvent::Released { run, reason } => Some((run.clone(), *reason)),
        _ => None,
    })
    .await;
    assert_eq!((run.as_str(), reason), ("r1", ReleaseReason::Detached));
    let silent = event(&mut events, "detached", |e| match e {
        AgentEvent::Detached { silent_ms } => Some(*silent_ms),
        _ => None,
    })
    .await;
    assert!(silent > 5_000, "{silent}");
    let stats = agent.stats();
    assert!(stats.detached);
    assert_eq!(stats.detaches, 1);
    assert_eq!(stats.active_downloaders, 0);
    let allocations = std::fs::read_to_string(agent.allocations_file()).unwrap();
    assert!(!allocations.contains("r1"), "{allocations}");

    // A command sent before the silence is old news: handled, but still detached.
    let old = TtlPolicy::default().envelope(
        Command::Allocate {
            run: RunId::new("r-old"),
            config: spider.to_json(),
            allow_networks: Vec::new(),
        },
        clock.now_ms() - 6_000,
    );
    hub.bus
        .publish(&Subject::agent_commands(&hub.agent).unwrap(), &old)
        .await
        .unwrap();
    event(&mut events, "the old allocate handled", |e| {
        matches!(e, AgentEvent::AllocationReplied { run, .. } if run.as_str() == "r-old")
            .then_some(())
    })
    .await;
    assert!(agent.stats().detached, "an old command ended the detach");
    // A fresh download is a hub heard; r1's allocation is gone: `no_downloader` (the hub
    // allocates again).
    let mut hub = hub;
    let e = hub
        .fetch("r1", "http://127.0.0.1:1/")
        .await
        .outcome
        .error
        .unwrap();
    assert_eq!(e.code, "no_downloader");
    event(&mut events, "reattached by a fresh command", |e| {
        matches!(e, AgentEvent::Reattached).then_some(())
    })
    .await;
    event(&mut events, "registered again", |e| {
        matches!(e, AgentEvent::Registered).then_some(())
    })
    .await;
    assert!(!agent.stats().detached);

    // Silent again, then a beacon: attached again, registered again.
    clock.advance(6_000);
    event(&mut events, "detached again", |e| {
        matches!(e, AgentEvent::Detached { .. }).then_some(())
    })
    .await;
    beacon(&bus, &clock).await;
    event(&mut events, "reattached by a beacon", |e| {
        matches!(e, AgentEvent::Reattached).then_some(())
    })
    .await;
    event(&mut events, "registered again", |e| {
        matches!(e, AgentEvent::Registered).then_some(())
    })
    .await;
    let stats = agent.stats();
    assert!(!stats.detached);
    assert_eq!(stats.detaches, 2);
    agent.shutdown().await;
}

#[test]
fn detach_after_is_zero_or_at_least_two_heartbeat_intervals() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = silk_agent::AgentConfig {
        detach_after_ms: 150,
        ..agent_config(dir.path(), "a-bad")
    };
    // At least two heartbeat intervals (hubs beacon once per interval).
    assert!(
        config
            .problems()
            .iter()
            .any(|p| p.starts_with("detach_after_ms: 0 (never) or at least twice")),
        "{:?}",
        config.problems()
    );
    config.detach_after_ms = 0;
    assert!(config.problems().is_empty(), "{:?}", config.problems());
    config.detach_after_ms = 200;
    assert!(config.problems().is_empty(), "{:?}", config.problems());
}
