//! The hub's presence on paused time: the hub's clock is tokio's (`TokioClock`), so its
//! timers and its clock reads move together, and only when every task waits. An agent's
//! states (alive, suspect, dead) then change exactly when the phi detector says, whatever the
//! load of the machine: the test replays the same heartbeats into a `PhiDetector` of its own
//! and compares, millisecond by millisecond of virtual time. Time is paused from the start:
//! the store holds the clock still while its calls run on sqlx's own thread.

mod common;

use common::*;
use silk_api::agents::AgentState;
use silk_bus::{Bus, Subject};
use silk_core::{AgentId, Clock, TokioClock};
use silk_hub::{Hub, PhiDetector};
use std::sync::Arc;
use std::time::Duration;
use tempfile::TempDir;

#[tokio::test(start_paused = true)]
async fn an_agent_that_falls_silent_turns_suspect_then_dead_exactly_when_phi_says() {
    let clock = Arc::new(TokioClock::new());
    let bus = bus_on(clock.clone());
    let dir = TempDir::new().unwrap();
    let config = hub_config(dir.path());
    let (phi, tick_ms, ttl) = (config.phi, config.tick_ms, config.ttl);
    let hub = Hub::start(config, Arc::new(bus.clone()), clock.clone())
        .await
        .expect("hub starts");
    hub.ready().await.expect("subscribed");

    // A fake agent: it registers, then beats with a little jitter, then falls silent.
    let agent = AgentId::new("p1");
    register_fake(&bus, &*clock, &agent).await;
    let mut replica = PhiDetector::new(phi);
    for seq in 1..=30u64 {
        tokio::time::sleep(Duration::from_millis(HEARTBEAT_MS + (seq % 3) * 7)).await;
        let heartbeat = silk_bus::Heartbeat {
            agent: agent.clone(),
            cpu_pct: 1.0,
            memory_bytes: 1 << 20,
            active_downloaders: 0,
            in_flight: 0,
            qps: 0.0,
            seq,
        };
        let sent = clock.now_ms();
        bus.publish(&Subject::heartbeats(), &ttl.envelope(heartbeat, sent))
            .await
            .expect("heartbeat");
        replica.heartbeat(sent);
    }
    let last = clock.now_ms();
    assert_eq!(
        hub.live_agents(),
        vec![agent.clone()],
        "alive while beating"
    );

    // Silent from here: the hub's view agrees with the replica at every millisecond.
    let (mut suspect_at, mut dead_at) = (None, None);
    for _ in 0..=phi.dead_after_ms + 10 {
        let now = clock.now_ms();
        let seen = hub.agents();
        assert_eq!(seen.len(), 1);
        let want = replica.state(now);
        assert_eq!(seen[0].state, want, "at {} ms of silence", now - last);
        match want {
            AgentState::Suspect if suspect_at.is_none() => suspect_at = Some(now - last),
            AgentState::Dead if dead_at.is_none() => dead_at = Some(now - last),
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let suspect_at = suspect_at.expect("suspect before dead");
    let dead_at = dead_at.expect("dead within dead_after_ms");
    assert!(
        suspect_at < dead_at && dead_at <= phi.dead_after_ms,
        "suspect after {suspect_at} ms, dead after {dead_at} ms of silence"
    );

    // The ticker, which tells the runs, has acted on it by its next tick.
    assert!(hub.live_agents().is_empty());
    tokio::time::timeout(Duration::from_millis(tick_ms), hub.wait_for_dead(&agent))
        .await
        .expect("the ticker saw the agent dead within one tick");
    hub.shutdown().await;
}
