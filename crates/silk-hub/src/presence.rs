//! Presence: the hub's bus inputs. One task per subscription ([`subscription_loop`]:
//! registrations, heartbeats, results, allocation replies, log batches), each re-subscribing
//! with back-off while the bus is down, so that an outage of one input never blocks another;
//! the ticker ([`tick_loop`]) that re-evaluates agent states and tells the runs about the
//! agents that died; and the beacon ([`beacon_loop`]) that tells the agents this hub is alive.

use crate::files::KnownAgent;
use crate::live::Run;
use crate::phi::AgentState;
use crate::registry::{Applied, LabelFilter, RegisterOutcome};
use crate::state::HubCore;
use futures::FutureExt;
use silk_bus::{BusError, Delivery, HubBeacon, Message, Subject, SubscribeOpts};
use silk_store::{AgentRow, Level};
use std::sync::Arc;
use std::time::Duration;

async fn on_register(hub: &HubCore, delivery: &Delivery) {
    let now = hub.clock.now_ms();
    let envelope = &delivery.envelope;
    let Message::Register(register) = &envelope.body else {
        return;
    };
    let outcome = hub
        .registry
        .lock()
        .register(register, envelope.sent_ms, now);
    match outcome {
        RegisterOutcome::Outdated => return,
        RegisterOutcome::New => {
            tracing::info!(agent = %register.agent, host = %register.host, capacity = register.capacity, "agent registered")
        }
        RegisterOutcome::Revived => {
            tracing::info!(agent = %register.agent, "agent registered again after it was dead")
        }
        RegisterOutcome::Refreshed => {}
    }
    // The stored agent's drain is its own column, which storing a registration keeps.
    let known = KnownAgent {
        register: register.clone(),
        sent_ms: envelope.sent_ms,
    };
    let row = serde_json::to_value(&known).map(|register| AgentRow {
        id: known.register.agent.to_string(),
        register,
        sent_ms: envelope.sent_ms,
        updated_ms: now,
        drained: false,
    });
    match row {
        Ok(row) => {
            if let Err(e) = hub.store.put_agent(&row).await {
                tracing::warn!(agent = %row.id, error = %e, "known agent not stored");
            }
        }
        Err(e) => tracing::warn!(error = %e, "known agent not stored"),
    }
}

/// Results pulled from the bus at once: one pull round trip per this many results (the hub
/// handles a batch in milliseconds, far within the bus's ack wait); also the most results
/// applied together ([`on_batch`]).
pub(crate) const RESULTS_BATCH: usize = 256;

async fn on_delivery(hub: &HubCore, delivery: Delivery) {
    apply(hub, &delivery).await;
    ack(delivery).await;
}

/// Deliveries that were ready together: the results of each run applied in one call
/// ([`Run::on_results`]: one items write, one frontier write), anything else one by one;
/// then every delivery acked, after what it carried was applied.
async fn on_batch(hub: &HubCore, batch: Vec<Delivery>) {
    let mut runs: Vec<(&silk_core::RunId, Vec<&silk_bus::RunResult>)> = Vec::new();
    for delivery in &batch {
        match &delivery.envelope.body {
            Message::Result(result) => match runs.iter_mut().find(|(id, _)| **id == result.run) {
                Some((_, results)) => results.push(result),
                None => runs.push((&result.run, vec![result])),
            },
            _ => apply(hub, delivery).await,
        }
    }
    for (id, results) in runs {
        match hub.active_run(id) {
            Some(run) => run.on_results(&hub.runs_cx, &results).await,
            None => {
                tracing::debug!(run = %id, n = results.len(), "results of a run that is not active here ignored")
            }
        }
    }
    for delivery in batch {
        ack(delivery).await;
    }
}

async fn ack(delivery: Delivery) {
    if delivery.is_durable()
        && let Err(e) = delivery.ack().await
    {
        tracing::debug!(error = %e, "bus ack failed (the message may come again)");
    }
}

async fn apply(hub: &HubCore, delivery: &Delivery) {
    match &delivery.envelope.body {
        Message::Register(_) => on_register(hub, delivery).await,
        Message::Heartbeat(_) => {
            let now = hub.clock.now_ms();
            if let Applied::Heartbeat(crate::registry::HeartbeatOutcome::NeedsRegister) =
                hub.registry.lock().apply(&delivery.envelope, now)
            {
                tracing::debug!("heartbeat of an agent that has not registered yet");
            }
        }
        Message::Result(result) => match hub.active_run(&result.run) {
            Some(run) => run.on_result(&hub.runs_cx, result).await,
            None => {
                tracing::debug!(run = %result.run, "result of a run that is not active here ignored")
            }
        },
        Message::Worker(report) => match hub.active_run(&report.run) {
            Some(run) => crate::programs::on_worker(&hub.runs_cx, &run, report).await,
            None => {
                tracing::debug!(run = %report.run, worker = report.worker, "worker report of a run that is not active here ignored")
            }
        },
        Message::Fetched(reply) => match hub.active_run(&reply.run) {
            Some(run) => crate::programs::on_fetched(&run, reply),
            None => {
                tracing::debug!(run = %reply.run, fetch = %reply.id, "fetch reply of a run that is not active here ignored")
            }
        },
        Message::Allocated(reply) => {
            let waiter = hub.waiters.lock().get(&reply.run).cloned();
            if let Some(tx) = waiter {
                let _ = tx.send(reply.clone());
            }
        }
        Message::Command(_) | Message::Control(_) | Message::Beacon(_) => {}
        Message::Log(batch) => {
            let source = format!("agent:{}", batch.agent);
            for line in &batch.lines {
                let level = line.level.as_str().parse().unwrap_or(Level::Info);
                hub.logs.line(
                    batch.run.as_str(),
                    line.ts_ms,
                    level,
                    &source,
                    line.message.clone(),
                );
            }
        }
    }
}

/// Counts an open subscription down when it ends.
struct Decrement<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Decrement<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Reads one subject forever (re-subscribing with back-off while the bus is down).
pub(crate) async fn subscription_loop(shared: Arc<HubCore>, subject: Subject, opts: SubscribeOpts) {
    let mut stop = shared.stop.subscribe();
    let initial = Duration::from_millis(shared.config.resubscribe_initial_ms.max(1));
    let mut backoff = initial;
    loop {
        if *stop.borrow() {
            return;
        }
        let subscribed = tokio::select! {
            _ = stop.changed() => return,
            r = shared.bus.subscribe(&subject, opts.clone()) => r,
        };
        match subscribed {
            Ok(mut subscription) => {
                tracing::debug!(subject = %subject, "hub subscribed");
                backoff = initial;
                shared
                    .subscribed
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _open = Decrement(&shared.subscribed);
                // What ended a batch: handled as the next delivery.
                let mut carried = None;
                loop {
                    let next = match carried.take() {
                        Some(next) => next,
                        None => tokio::select! {
                            _ = stop.changed() => return,
                            n = subscription.next() => n,
                        },
                    };
                    match next {
                        // Results already waiting behind this one are applied with it.
                        Some(Ok(delivery))
                            if matches!(delivery.envelope.body, Message::Result(_)) =>
                        {
                            let mut batch = vec![delivery];
                            while batch.len() < RESULTS_BATCH {
                                match subscription.next().now_or_never() {
                                    Some(Some(Ok(more))) => batch.push(more),
                                    Some(other) => {
                                        carried = Some(other);
                                        break;
                                    }
                                    None => break,
                                }
                            }
                            on_batch(&shared, batch).await;
                        }
                        Some(Ok(delivery)) => on_delivery(&shared, delivery).await,
                        Some(Err(
                            e @ (BusError::Malformed { .. } | BusError::UnsupportedVersion { .. }),
                        )) => {
                            tracing::warn!(subject = %subject, error = %e, "unreadable message skipped")
                        }
                        Some(Err(e)) => {
                            tracing::warn!(subject = %subject, error = %e, "subscription failed; subscribing again");
                            break;
                        }
                        None => {
                            tracing::warn!(subject = %subject, "subscription closed; subscribing again");
                            break;
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(subject = %subject, error = %e, "subscribe failed; retrying");
            }
        }
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// How often the drained agents are read again from the store (another hub may have changed
/// them).
const DRAIN_SYNC: Duration = Duration::from_secs(2);

/// Reads the drained agents from the store every [`DRAIN_SYNC`], so that a drain made through
/// another hub of the store holds here too.
pub(crate) async fn drain_sync_loop(shared: Arc<HubCore>) {
    let mut stop = shared.stop.subscribe();
    let mut tick = tokio::time::interval(DRAIN_SYNC);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => {}
        }
        let changes = shared.registry.lock().drain_changes();
        match shared.store.list_drained_agents().await {
            Ok(ids) => {
                let drained = ids.into_iter().map(silk_core::AgentId::new).collect();
                shared.registry.lock().replace_drained(drained, changes);
            }
            Err(e) => tracing::debug!(error = %e, "drained agents not read from the store"),
        }
    }
}

/// Tells the agents this hub is alive: a beacon on `hubs` every heartbeat interval, until the
/// hub stops. An agent that hears no hub for its `detach_after` detaches (stops fetching); a
/// failed beacon is only logged (the next one follows an interval later).
pub(crate) async fn beacon_loop(shared: Arc<HubCore>) {
    let mut stop = shared.stop.subscribe();
    let interval = Duration::from_millis(shared.config.ttl.heartbeat_interval_ms.max(1));
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let subject = Subject::hubs();
    let mut failing = false;
    for seq in 1u64.. {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => {}
        }
        let beacon = HubBeacon {
            hub: shared.hub_id.to_string(),
            seq,
        };
        let envelope = shared.config.ttl.envelope(beacon, shared.clock.now_ms());
        let published = tokio::select! {
            _ = stop.changed() => return,
            r = shared.bus.publish(&subject, &envelope) => r,
        };
        match published {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("hub beacons sent again");
            }
            Ok(()) => {}
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "hub beacon not sent; agents detach if no hub is heard for their detach_after");
            }
            Err(_) => {}
        }
    }
}

/// Re-evaluates agent states and tells the runs about dead agents.
pub(crate) async fn tick_loop(shared: Arc<HubCore>) {
    let mut stop = shared.stop.subscribe();
    let mut tick = tokio::time::interval(Duration::from_millis(shared.config.tick_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => {}
        }
        let now = shared.clock.now_ms();
        let (transitions, live) = {
            let mut registry = shared.registry.lock();
            (
                registry.tick(now),
                registry.live_agents(now, &LabelFilter::any()),
            )
        };
        shared.live.send_if_modified(|old| {
            let changed = *old != live;
            *old = live;
            changed
        });
        for t in transitions {
            match (t.from, t.to) {
                (None, to) => {
                    tracing::debug!(agent = %t.agent, state = %to.as_str(), "agent state")
                }
                (Some(from), to) => {
                    tracing::info!(agent = %t.agent, from = from.as_str(), to = to.as_str(), phi = t.phi, "agent state changed")
                }
            }
            if t.to == AgentState::Dead {
                // Only an agent this hub heard alive dies: one restored from the store and
                // silent since (decommissioned, or dead before this hub started) is no news.
                // Every hub of a store hears the same last message, so the event's key
                // (agent, when it sent that) is the same on each: one delivery per rule.
                if t.from.is_some_and(|from| from != AgentState::Dead)
                    && let Some(last) = t.last_heard_ms
                {
                    let h = crate::alert::agent_dead(t.agent.as_str(), last, t.at_ms, t.phi);
                    let shared = shared.clone();
                    tokio::spawn(async move { crate::alerts::emit(&shared, h).await });
                }
                let runs: Vec<Arc<Run>> = shared.runs.lock().values().cloned().collect();
                for run in runs {
                    run.on_agent_dead(&shared.runs_cx, &t.agent).await;
                }
            }
        }
    }
}
