//! The allocations file: kept across restarts, rewritten on release, and idle downloaders
//! released by the clock.

use crate::support::*;
use silk_agent::{ALLOCATIONS_FILE, Agent, AgentEvent, DownloaderConfig, ReleaseReason};
use silk_bus::Command;
use silk_core::{ManualClock, RunId};
use silk_testkit::{DemoConfig, DemoSite};
use std::sync::Arc;

fn small_site() -> DemoConfig {
    DemoConfig {
        hosts: 1,
        pages: 10,
        ..DemoConfig::default()
    }
}

fn stored_runs(dir: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join(ALLOCATIONS_FILE)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["allocations"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect()
}

#[tokio::test]
async fn allocations_survive_a_restart() {
    let site = DemoSite::start(small_site()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let spider = DownloaderConfig::for_spider_yaml(spider_yaml(
        &site.start_url(),
        "extract:\n  heading: {css: h1.title}\n",
    ));
    let agent = start(agent_config(dir.path(), "a-keep"), &bus).await;
    let mut events = agent.events();
    let mut hub = Hub::new(Arc::new(bus.clone()), "a-keep").await;
    hub.allocate("r1", &spider).await;
    hub.allocate("r2", &spider).await;
    for _ in 0..2 {
        event(&mut events, "allocated", |e| {
            matches!(e, AgentEvent::Allocated { .. }).then_some(())
        })
        .await;
    }
    assert_eq!(stored_runs(dir.path()), ["r1", "r2"]);
    hub.send(Command::Release {
        run: RunId::new("r2"),
    })
    .await;
    event(&mut events, "released", |e| {
        matches!(e, AgentEvent::Released { .. }).then_some(())
    })
    .await;
    assert_eq!(stored_runs(dir.path()), ["r1"]);
    agent.shutdown().await;

    // While the agent is away, a download is sent: the durable subscription keeps it.
    let leases = hub.download("r1", &[site.page_url(1, 2)]).await;
    let agent = start(agent_config(dir.path(), "a-keep"), &bus).await;
    assert_eq!(
        agent
            .stats()
            .runs
            .keys()
            .map(RunId::as_str)
            .collect::<Vec<_>>(),
        ["r1"],
        "reloaded from the file"
    );
    let result = hub.results(&leases).await.remove(&leases[0]).unwrap();
    assert_eq!(result.outcome.status, Some(200), "{:?}", result.outcome);
    assert_eq!(
        result.outcome.items[0]["heading"],
        site.page_info(1, 2).unwrap().heading.as_str()
    );
    agent.shutdown().await;
}

#[tokio::test]
async fn a_generated_id_is_kept_in_the_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let config = silk_agent::AgentConfig {
        id: None,
        ..agent_config(dir.path(), "unused")
    };
    let first = start(config.clone(), &bus).await;
    let id = first.id().clone();
    first.shutdown().await;
    let second = start(config, &bus).await;
    assert_eq!(second.id(), &id);
    second.shutdown().await;
}

#[tokio::test]
async fn a_corrupt_allocations_file_does_not_stop_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(ALLOCATIONS_FILE),
        b"{\"version\":1,\"allocations\":{\"r\":",
    )
    .unwrap();
    let bus = bus();
    let agent = start(agent_config(dir.path(), "a-corrupt"), &bus).await;
    assert_eq!(agent.stats().active_downloaders, 0);
    agent.shutdown().await;
    // An entry that no longer compiles is dropped, the others are kept.
    let good = DownloaderConfig::for_spider_yaml(spider_yaml("http://127.0.0.1:1/", "")).to_json();
    let file = serde_json::json!({"version": 1, "allocations": {
        "good": {"config": good, "allocated_ms": 1},
        "bad": {"config": {"spider": "name: [", "x": 1}, "allocated_ms": 1}
    }});
    std::fs::write(dir.path().join(ALLOCATIONS_FILE), file.to_string()).unwrap();
    let agent = start(agent_config(dir.path(), "a-corrupt"), &bus).await;
    assert_eq!(
        agent
            .stats()
            .runs
            .keys()
            .map(RunId::as_str)
            .collect::<Vec<_>>(),
        ["good"]
    );
    assert_eq!(stored_runs(dir.path()), ["good"]);
    agent.shutdown().await;
}

#[tokio::test]
async fn idle_downloaders_are_released() {
    let clock = ManualClock::new(1_000_000);
    let bus = bus_with_clock(Arc::new(clock.clone()));
    let dir = tempfile::tempdir().unwrap();
    let config = silk_agent::AgentConfig {
        downloader_idle_ms: 60_000,
        ..agent_config(dir.path(), "a-idle")
    };
    let agent = Agent::start(config, Arc::new(bus.clone()), Arc::new(clock.clone()))
        .await
        .unwrap();
    let mut events = agent.events();
    let hub = Hub::with_clock(Arc::new(bus.clone()), "a-idle", Arc::new(clock.clone())).await;
    let spider = DownloaderConfig::for_spider_yaml(spider_yaml("http://127.0.0.1:1/", ""));
    hub.allocate("r-idle", &spider).await;
    hub.allocate("r-busy", &spider).await;
    for _ in 0..2 {
        event(&mut events, "allocated", |e| {
            matches!(e, AgentEvent::Allocated { .. }).then_some(())
        })
        .await;
    }
    clock.advance(59_000);
    assert!(agent.release_idle().await.is_empty(), "not idle yet");
    // r-busy is used (a repeated allocate counts as use); r-idle is not.
    hub.allocate("r-busy", &spider).await;
    event(&mut events, "touched", |e| {
        matches!(e, AgentEvent::Allocated { existing: true, .. }).then_some(())
    })
    .await;
    clock.advance(2_000);
    // The sweeper (every idle_check_ms) finds it without being asked.
    let (run, reason) = event(&mut events, "idle release", |e| match e {
        AgentEvent::Released { run, reason } => Some((run.clone(), *reason)),
        _ => None,
    })
    .await;
    assert_eq!((run.as_str(), reason), ("r-idle", ReleaseReason::Idle));
    assert_eq!(stored_runs(dir.path()), ["r-busy"]);
    assert_eq!(agent.stats().active_downloaders, 1);
    agent.shutdown().await;
}
