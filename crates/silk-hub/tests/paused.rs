//! The runner on paused time, from the start: the hub's clock is tokio's (`TokioClock`), the
//! store holds the clock still while its calls run (`silk_store`'s `held`), and the agent is a
//! synthetic one on the in-process bus that answers from a page graph in memory (no sockets,
//! whose waits would let the clock jump). Virtual time then moves only when every task waits,
//! so the run's timings are exact whatever the load of the machine.

mod common;

use common::*;
use silk_api::jobs::JobSpec;
use silk_api::runs::{RunRequest, RunState};
use silk_bus::{
    AllocationReply, Bus, Command, FetchOutcome, InProcessBus, Message, RunResult, Subject,
    SubscribeOpts,
};
use silk_core::{AgentId, Clock, TokioClock};
use silk_hub::{Hub, HubHandle};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tempfile::TempDir;

/// The synthetic site: `/` links to `/p/1` … `/p/PAGES`; `/p/i` links to `/` and `/p/i+1`
/// and is an item.
const PAGES: u64 = 40;
const BASE: &str = "http://synth.test";
/// How long the synthetic agent takes per request (virtual time).
const LATENCY_MS: u64 = 20;

/// An agent on the bus that answers downloads from the page graph (but for one URL's first
/// download, when told to), with heartbeats.
struct Synthetic {
    id: AgentId,
    bus: InProcessBus,
    clock: Arc<TokioClock>,
    /// Results published.
    results: AtomicU64,
    /// A URL whose first download gets no answer.
    ignore_once: parking_lot::Mutex<Option<String>>,
    /// When each URL was received (hub clock, ms), in order.
    received: parking_lot::Mutex<BTreeMap<String, Vec<u64>>>,
}

impl Synthetic {
    async fn start(bus: &InProcessBus, clock: Arc<TokioClock>) -> Arc<Synthetic> {
        let agent = Arc::new(Synthetic {
            id: AgentId::new("s1"),
            bus: bus.clone(),
            clock,
            results: AtomicU64::new(0),
            ignore_once: parking_lot::Mutex::new(None),
            received: parking_lot::Mutex::default(),
        });
        let commands = bus
            .subscribe(
                &Subject::agent_commands(&agent.id).unwrap(),
                SubscribeOpts::durable("agent-s1").batch(16),
            )
            .await
            .expect("subscribe to commands");
        tokio::spawn(fake_presence(
            bus.clone(),
            agent.clock.clone(),
            agent.id.clone(),
        ));
        tokio::spawn(agent.clone().serve(commands));
        agent
    }

    fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// When `url` was received, in order.
    fn dispatched(&self, url: &str) -> Vec<u64> {
        self.received.lock().get(url).cloned().unwrap_or_default()
    }

    async fn serve(self: Arc<Self>, mut commands: silk_bus::Subscription) {
        while let Some(next) = commands.next().await {
            let Ok(delivery) = next else { continue };
            if let Message::Command(command) = &delivery.envelope.body {
                match command.clone() {
                    Command::Allocate { run, .. } => {
                        let reply = AllocationReply {
                            run,
                            agent: self.id.clone(),
                            ok: true,
                            error: None,
                        };
                        let envelope = ttl().envelope(reply, self.now());
                        self.bus
                            .publish(&Subject::allocations(), &envelope)
                            .await
                            .expect("allocation reply");
                    }
                    Command::Download { run, batch, .. } => {
                        for leased in batch {
                            let url = leased.request.url.clone();
                            self.received
                                .lock()
                                .entry(url.clone())
                                .or_default()
                                .push(self.now());
                            {
                                let mut ignore = self.ignore_once.lock();
                                if ignore.as_deref() == Some(url.as_str()) {
                                    *ignore = None;
                                    continue;
                                }
                            }
                            let me = self.clone();
                            let run = run.clone();
                            tokio::spawn(async move {
                                tokio::time::sleep(Duration::from_millis(LATENCY_MS)).await;
                                let result = RunResult {
                                    run,
                                    agent: me.id.clone(),
                                    lease_id: leased.lease_id,
                                    outcome: page(&leased.request.url),
                                };
                                let envelope = ttl().envelope(result, me.now());
                                me.bus
                                    .publish(&Subject::results(), &envelope)
                                    .await
                                    .expect("result");
                                me.results.fetch_add(1, Ordering::SeqCst);
                            });
                        }
                    }
                    Command::Release { .. }
                    | Command::Shutdown
                    | Command::Program { .. }
                    | Command::Fetch { .. } => {}
                }
            }
            let _ = delivery.ack().await;
        }
    }
}

/// The synthetic page at `url`.
fn page(url: &str) -> FetchOutcome {
    let path = url.strip_prefix(BASE).unwrap_or("/");
    let n: Option<u64> = path.strip_prefix("/p/").and_then(|n| n.parse().ok());
    let (links, items) = match n {
        None => (
            (1..=PAGES).map(|i| format!("{BASE}/p/{i}")).collect(),
            vec![],
        ),
        Some(i) => (
            vec![format!("{BASE}/"), format!("{BASE}/p/{}", (i % PAGES) + 1)],
            vec![serde_json::json!({"url": url, "n": i})],
        ),
    };
    FetchOutcome {
        status: Some(200),
        links,
        items,
        bytes: 1_000,
        ..FetchOutcome::default()
    }
}

/// A run of the synthetic site with leases of `lease_ms`.
fn request(lease_ms: u64) -> RunRequest {
    RunRequest {
        program: None,
        spider: format!(
            "name: synth\nstart_urls: ['{BASE}/']\nallowed_domains: [synth.test]\nrobots: false\n\
             per_host_concurrency: 4\nper_host_delay_ms: 0\ntimeout_ms: 1000\n\
             lease_timeout_ms: {lease_ms}\n"
        ),
        strategy: None,
        on_agent_lost: None,
        pools: Vec::new(),
        max_pending: Some(4),
        stall_timeout_ms: None,
        downloader: None,
        sinks: None,
        fail_if: None,
    }
}

/// A hub on tokio's clock and an in-process bus on the same clock, with the synthetic agent
/// live.
async fn paused_hub(dir: &TempDir) -> (HubHandle, Arc<Synthetic>, Arc<TokioClock>, u64) {
    paused_hub_at(dir, TokioClock::new()).await
}

/// [`paused_hub`] on `clock`.
async fn paused_hub_at(
    dir: &TempDir,
    clock: TokioClock,
) -> (HubHandle, Arc<Synthetic>, Arc<TokioClock>, u64) {
    paused_hub_with(clock, hub_config(dir.path())).await
}

/// [`paused_hub`] on `clock`, with `config`.
async fn paused_hub_with(
    clock: TokioClock,
    config: silk_hub::HubConfig,
) -> (HubHandle, Arc<Synthetic>, Arc<TokioClock>, u64) {
    let clock = Arc::new(clock);
    let bus = bus_on(clock.clone());
    let tick_ms = config.tick_ms;
    let hub = Hub::start(config, Arc::new(bus.clone()), clock.clone())
        .await
        .expect("hub starts on paused time");
    let agent = Synthetic::start(&bus, clock.clone()).await;
    hub.wait_for_live_agents(1).await;
    (hub, agent, clock, tick_ms)
}

#[tokio::test(start_paused = true)]
async fn a_run_on_paused_time_takes_exactly_its_virtual_time_and_fetches_every_page_once() {
    let dir = TempDir::new().unwrap();
    let (hub, agent, clock, _) = paused_hub(&dir).await;
    let started = clock.now_ms();
    let run = hub.submit(request(600_000)).await.expect("run starts");
    let done = hub.wait_run(&run.id).await.expect("the run ends");
    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    let s = &done.stats;
    // `/` and every `/p/i`, each once: nothing timed out, nothing was sent again.
    assert_eq!(
        (s.success, s.sent, s.retries),
        (PAGES + 1, PAGES + 1, 0),
        "{s:?}"
    );
    assert_eq!((s.items, s.late_results), (PAGES, 0), "{s:?}");
    assert_eq!(agent.results.load(Ordering::SeqCst), PAGES + 1);
    // At most 4 out at once, LATENCY_MS each: the seed, then the pages in waves of 4. The
    // dispatch loop adds at most a tick per wave.
    let waves = 1 + PAGES.div_ceil(4);
    let took = clock.now_ms() - started;
    assert!(
        took >= waves * LATENCY_MS,
        "{took} ms of virtual time for {waves} waves of {LATENCY_MS} ms"
    );
    hub.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_silent_request_is_sent_again_exactly_at_its_lease_margin() {
    const LEASE_MS: u64 = 2_000;
    let dir = TempDir::new().unwrap();
    let (hub, agent, clock, tick_ms) = paused_hub(&dir).await;
    let silent = format!("{BASE}/p/7");
    *agent.ignore_once.lock() = Some(silent.clone());
    let run = hub.submit(request(LEASE_MS)).await.expect("run starts");

    // Watch, millisecond by millisecond of virtual time, for the hub to give up on the silent
    // lease (the retry is counted then).
    let first = loop {
        if let Some(at) = agent.dispatched(&silent).first() {
            break *at;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let retried_at = loop {
        if hub.run(&run.id).await.unwrap().stats.retries > 0 {
            break clock.now_ms();
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    // The hub retries a silent request a tenth of its lease before the deadline, at its next
    // turn (at most a tick later).
    let due = first + LEASE_MS - LEASE_MS / 10;
    assert!(
        (due..=due + tick_ms).contains(&retried_at),
        "retried {} ms after the lease; due after {} ms (tick {tick_ms} ms)",
        retried_at - first,
        due - first
    );

    let done = hub.wait_run(&run.id).await.expect("the run ends");
    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    let s = &done.stats;
    assert_eq!(
        (s.success, s.retries, s.items),
        (PAGES + 1, 1, PAGES),
        "{s:?}"
    );
    let times = agent.dispatched(&silent);
    assert_eq!(times.len(), 2, "sent twice: {times:?}");
    assert!(times[1] >= retried_at, "{times:?}");
    hub.shutdown().await;
}

/// The scheduler on virtual time: a cron job with a seconds field fires at each of its times,
/// within one schedule tick, and its runs (on the synthetic agent) succeed.
#[tokio::test(start_paused = true)]
async fn a_cron_job_fires_at_each_of_its_times() {
    // 3 s past a 10 s boundary of the epoch.
    const BOUNDARY: u64 = 1_800_000_000_000;
    let dir = TempDir::new().unwrap();
    let (hub, _agent, clock, _) =
        paused_hub_at(&dir, TokioClock::starting_at(BOUNDARY + 3_000)).await;
    let schedule_tick_ms = hub_config(dir.path()).schedule_tick_ms;
    let spec: JobSpec = serde_json::from_value(serde_json::json!({
        "name": "every-10s",
        "spider": request(600_000).spider,
        "cron": "*/10 * * * * *",
    }))
    .unwrap();
    let created = clock.now_ms();
    hub.create_job(spec).await.expect("job");
    tokio::time::sleep(Duration::from_secs(35)).await;
    let end = clock.now_ms();

    let mut fired: Vec<u64> = hub
        .job_runs("every-10s", None)
        .await
        .unwrap()
        .iter()
        .map(|r| r.created_ms)
        .collect();
    fired.sort_unstable();
    let due: Vec<u64> = (1..)
        .map(|k| BOUNDARY + k * 10_000)
        .skip_while(|t| *t <= created)
        .take_while(|t| *t <= end)
        .collect();
    assert_eq!(due.len(), 3, "{due:?}");
    assert_eq!(fired.len(), due.len(), "fired at {fired:?}, due at {due:?}");
    for (at, due) in fired.iter().zip(&due) {
        assert!(
            (*due..=due + schedule_tick_ms).contains(at),
            "fired at {at}, due at {due} (schedule tick {schedule_tick_ms} ms)"
        );
    }
    for run in hub.job_runs("every-10s", None).await.unwrap() {
        let done = hub.wait_run(&run.id).await.expect("the run ends");
        assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    }
    hub.shutdown().await;
}

/// Run ownership on virtual time: when another hub takes a run's lease, the hub lets the run
/// go at its next renewal (a third of `ownership_ttl_ms`) without writing anything, control
/// calls name the other hub; once the lease is free the hub adopts the run at its next round
/// and finishes it, every page once.
#[tokio::test(start_paused = true)]
async fn a_hub_that_loses_a_runs_lease_lets_it_go_and_adopts_it_back_when_it_is_free() {
    let dir = TempDir::new().unwrap();
    let mut config = hub_config(dir.path());
    config.ownership_ttl_ms = 600;
    let round_ms = config.ownership_ttl_ms / 3;
    let (hub, agent, clock, tick_ms) = paused_hub_with(TokioClock::new(), config).await;
    let run = hub.submit(request(600_000)).await.expect("run starts");
    while agent.results.load(Ordering::SeqCst) < 10 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    // Another hub takes the lease.
    let store = hub.store().clone();
    let lease = format!("run:{}", run.id);
    let me = hub.hub_id().as_str().to_owned();
    assert!(store.release_lease(&lease, &me).await.unwrap());
    assert!(
        store
            .acquire_lease(&lease, "hub-other", 60_000)
            .await
            .unwrap()
    );
    let taken_at = clock.now_ms();
    let let_go = hub.wait_run(&run.id).await.unwrap();
    let after = clock.now_ms() - taken_at;
    assert!(
        after <= round_ms + tick_ms,
        "let go {after} ms after the lease was taken (a round is {round_ms} ms)"
    );
    assert_eq!(
        let_go.state,
        RunState::Running,
        "nothing written: {let_go:?}"
    );
    match hub.pause(&run.id).await {
        Err(silk_hub::HubError::OwnedElsewhere { hub: other, .. }) => {
            assert_eq!(other, "hub-other")
        }
        other => panic!("expected owned_elsewhere, got {other:?}"),
    }

    // The lease is free again: adopted at the next round, and finished.
    assert!(store.release_lease(&lease, "hub-other").await.unwrap());
    let freed_at = clock.now_ms();
    hub.wait_driving(&run.id).await;
    let after = clock.now_ms() - freed_at;
    assert!(
        after <= round_ms + tick_ms,
        "adopted {after} ms after the lease was free (a round is {round_ms} ms)"
    );
    let done = hub.wait_run(&run.id).await.unwrap();
    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    assert_eq!(
        (done.stats.items, done.stats.left),
        (PAGES, 0),
        "{:?}",
        done.stats
    );
    assert_eq!(
        store.get_lease(&lease).await.unwrap(),
        None,
        "given back at the end"
    );
    hub.shutdown().await;
}
