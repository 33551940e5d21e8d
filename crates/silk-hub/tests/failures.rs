//! Rows of the design's failure matrix (design §4) that need an agent that misbehaves: a
//! fake agent on the in-process bus that registers, heartbeats, reads its command subject and
//! answers `allocate` like a real one, and then does with each `download` what the test asks
//! (nothing, answer twice, answer late). When a test needs real answers, the fake agent is a
//! proxy: it forwards the request to a real `silk-agent` on a private bus of its own and
//! relays (or withholds, or repeats) that agent's result, so items and links are the ones a
//! real agent extracts from the demo site.
//!
//! - no result before `lease_timeout` → re-dispatched up to `max_retries`, then failed;
//! - late and duplicate results → processed once;
//! - the hub cannot publish commands → the run fails naming the bus, its leases go back.
//!
//! The tests whose fake agent answers by itself (silent requests, back-pressure, stall, job
//! timeout) run on paused time (`TokioClock`, `start_paused`): their timings are virtual and
//! exact, whatever the load of the machine. Those that proxy a real agent fetch over real
//! sockets and stay on the system clock.

use parking_lot::Mutex;
use serde_json::Value;
use silk_agent::AgentHandle;
use silk_api::runs::{OnAgentLost, RunRequest, RunState, Strategy};
use silk_bus::faulty::{Fault, Faults, FaultyBus};
use silk_bus::{
    AllocationReply, Bus, BusConfig, Command, FetchOutcome, InProcessBus, LeasedRequest, Message,
    RetryPolicy, RunResult, Subject, SubjectClass, SubscribeOpts, Subscription,
};
use silk_core::{AgentId, Clock, LeaseId, RunId, SystemClock, TokioClock};
use silk_hub::{Hub, HubHandle};
use silk_testkit::demo::DemoSite;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tempfile::TempDir;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

mod common;
use common::*;

fn now_ms() -> u64 {
    SystemClock.now_ms()
}

/// Aborts the fake agent's tasks when the test ends.
struct Tasks(Vec<JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// One request of a `download` command, as the fake agent received it.
#[derive(Debug, Clone)]
struct Download {
    run: RunId,
    leased: LeasedRequest,
}

impl Download {
    fn url(&self) -> &str {
        &self.leased.request.url
    }
}

/// A real agent on a private bus that the fake agent forwards requests to.
struct Backend {
    bus: InProcessBus,
    agent: AgentId,
    waiting: Arc<Mutex<HashMap<LeaseId, oneshot::Sender<RunResult>>>>,
    _handle: AgentHandle,
    _results: Tasks,
}

impl Backend {
    async fn start(dir: &Path) -> Backend {
        let bus = InProcessBus::new(BusConfig {
            retry: RetryPolicy {
                retries: 2,
                backoff_initial_ms: 10,
                backoff_max_ms: 50,
            },
            ..BusConfig::with_namespace("backend")
        })
        .expect("private bus");
        let handle = start_agent(dir, &bus, "real").await;
        let waiting: Arc<Mutex<HashMap<LeaseId, oneshot::Sender<RunResult>>>> = Arc::default();
        let mut results = bus
            .subscribe(&Subject::results(), SubscribeOpts::durable("fake-results"))
            .await
            .expect("subscribe to the real agent's results");
        let routes = waiting.clone();
        let task = tokio::spawn(async move {
            while let Some(next) = results.next().await {
                let Ok(delivery) = next else { continue };
                if let Message::Result(result) = &delivery.envelope.body
                    && let Some(tx) = routes.lock().remove(&result.lease_id)
                {
                    let _ = tx.send(result.clone());
                }
                let _ = delivery.ack().await;
            }
        });
        Backend {
            bus,
            agent: AgentId::new("real"),
            waiting,
            _handle: handle,
            _results: Tasks(vec![task]),
        }
    }

    async fn command(&self, command: Command) {
        let subject = Subject::agent_commands(&self.agent).unwrap();
        self.bus
            .publish(&subject, &ttl().envelope(command, now_ms()))
            .await
            .expect("command to the real agent");
    }

    /// Gives the real agent the run's downloader; returns once it confirmed.
    async fn allocate(&self, run: &RunId, config: Value) {
        let mut replies = self
            .bus
            .subscribe(&Subject::allocations(), SubscribeOpts::live())
            .await
            .expect("subscribe to allocation replies");
        self.command(Command::Allocate {
            run: run.clone(),
            config,
            allow_networks: Vec::new(),
        })
        .await;
        let reply = within("the real agent's allocation reply", 10, async {
            loop {
                if let Some(Ok(d)) = replies.next().await
                    && let Message::Allocated(reply) = d.envelope.body
                    && &reply.run == run
                {
                    return reply;
                }
            }
        })
        .await;
        assert!(
            reply.ok,
            "the real agent refused the run: {:?}",
            reply.error
        );
    }

    /// The real agent's result for one leased request.
    async fn fetch(&self, download: &Download) -> RunResult {
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().insert(download.leased.lease_id, tx);
        self.command(Command::Download {
            run: download.run.clone(),
            batch: vec![download.leased.clone()],
            reply_to: None,
        })
        .await;
        within("the real agent's result", 20, rx)
            .await
            .expect("the real agent answers")
    }
}

/// The misbehaving agent: registers and heartbeats like a real one, answers `allocate` with
/// `ok` (after its backend, if any, has the downloader), records every download it is sent
/// and hands it to the test, which decides what (if anything) goes back.
struct FakeAgent {
    id: AgentId,
    bus: InProcessBus,
    /// Its clock (the hub's): envelopes are stamped with it.
    clock: Arc<dyn Clock>,
    backend: Option<Backend>,
    /// Lease ids of every download received, by URL, in order.
    seen: Mutex<BTreeMap<String, Vec<LeaseId>>>,
    /// Results published to the hub.
    published: AtomicU64,
}

impl FakeAgent {
    /// Starts the fake agent `id` on `bus`; the downloads it receives come out of the
    /// receiver. With `backend`, a real agent stands behind it ([`FakeAgent::fetch`]).
    async fn start(
        bus: &InProcessBus,
        clock: Arc<dyn Clock>,
        id: &str,
        backend: Option<Backend>,
    ) -> (Arc<FakeAgent>, mpsc::UnboundedReceiver<Download>, Tasks) {
        let fake = Arc::new(FakeAgent {
            id: AgentId::new(id),
            bus: bus.clone(),
            clock,
            backend,
            seen: Mutex::default(),
            published: AtomicU64::new(0),
        });
        // Subscribe (durable, like the real agent) before registering: no command is missed.
        let commands = bus
            .subscribe(
                &Subject::agent_commands(&fake.id).unwrap(),
                SubscribeOpts::durable(format!("agent-{id}")).batch(8),
            )
            .await
            .expect("subscribe to commands");
        let (tx, rx) = mpsc::unbounded_channel();
        let presence = tokio::spawn(fake.clone().presence());
        let reader = tokio::spawn(fake.clone().commands(commands, tx));
        (fake, rx, Tasks(vec![presence, reader]))
    }

    async fn presence(self: Arc<Self>) {
        fake_presence(self.bus.clone(), self.clock.clone(), self.id.clone()).await;
    }

    async fn commands(self: Arc<Self>, mut sub: Subscription, tx: mpsc::UnboundedSender<Download>) {
        while let Some(next) = sub.next().await {
            let Ok(delivery) = next else { continue };
            if let Message::Command(command) = &delivery.envelope.body {
                match command.clone() {
                    Command::Allocate { run, config, .. } => {
                        if let Some(backend) = &self.backend {
                            backend.allocate(&run, config).await;
                        }
                        let reply = AllocationReply {
                            run,
                            agent: self.id.clone(),
                            ok: true,
                            error: None,
                        };
                        self.bus
                            .publish(
                                &Subject::allocations(),
                                &ttl().envelope(reply, self.clock.now_ms()),
                            )
                            .await
                            .expect("allocation reply");
                    }
                    Command::Download { run, batch, .. } => {
                        for leased in batch {
                            self.seen
                                .lock()
                                .entry(leased.request.url.clone())
                                .or_default()
                                .push(leased.lease_id);
                            let _ = tx.send(Download {
                                run: run.clone(),
                                leased,
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

    /// The real agent's result for `download` (not sent to the hub).
    async fn fetch(&self, download: &Download) -> RunResult {
        self.backend
            .as_ref()
            .expect("a fake agent with a backend")
            .fetch(download)
            .await
    }

    /// Publishes `result` to the hub as this agent's, in a fresh envelope (a new message
    /// id: the bus does not de-duplicate it).
    async fn answer(&self, result: &RunResult) {
        let mut result = result.clone();
        result.agent = self.id.clone();
        self.bus
            .publish(
                &Subject::results(),
                &ttl().envelope(result, self.clock.now_ms()),
            )
            .await
            .expect("result to the hub");
        self.published.fetch_add(1, Ordering::SeqCst);
    }

    /// How many downloads of each URL were received.
    fn dispatches(&self) -> BTreeMap<String, usize> {
        self.seen
            .lock()
            .iter()
            .map(|(url, leases)| (url.clone(), leases.len()))
            .collect()
    }
}

/// How the hub's command publishes fail once the test breaks the bus: as a bus that is down
/// (retryable failures until the retries are used up).
fn broken_commands() -> Fault {
    Fault::Unavailable(RetryPolicy {
        retries: 2,
        backoff_initial_ms: 10,
        backoff_max_ms: 50,
    })
}

/// The spider of these tests: the demo site from `start_urls`, leases of `lease_ms`
/// (`timeout_ms` is a third of it, so the lease timeout is what the spider says), one retry.
/// robots.txt is not read (the spider denies its one rule, `/private/`, itself): these tests
/// count dispatches and results exactly, and the request that reads a host's robots.txt on an
/// agent is given back (`robots_fetched`) and sent again.
fn spider(site: &DemoSite, start_urls: &[String], lease_ms: u64) -> String {
    let hosts: Vec<String> = site.host_ips().iter().map(|ip| ip.to_string()).collect();
    let starts: Vec<String> = start_urls.iter().map(|u| format!("'{u}'")).collect();
    format!(
        "name: failures\nstart_urls: [{}]\nallowed_domains: [{}]\n\
         follow: [{{deny: ['/calendar/', '/private/']}}]\nrobots: false\n\
         item_when: '/p/\\d+$'\nextract: {{title: {{css: 'h1.title'}}}}\n\
         per_host_concurrency: 8\nper_host_delay_ms: 0\n\
         lease_timeout_ms: {lease_ms}\ntimeout_ms: {}\nmax_retries: 1\nretry_backoff_ms: 50\n",
        starts.join(", "),
        hosts.join(", "),
        lease_ms / 3,
    )
}

fn request(spider: String, max_pending: u64) -> RunRequest {
    RunRequest {
        spider,
        program: None,
        strategy: Some(Strategy::Fixed(1)),
        on_agent_lost: Some(OnAgentLost::Fail),
        pools: Vec::new(),
        max_pending: Some(max_pending),
        stall_timeout_ms: Some(20_000),
        downloader: None,
        sinks: None,
        fail_if: None,
    }
}

fn content_pages(site: &DemoSite) -> BTreeSet<String> {
    site.expected_pages()
        .into_iter()
        .filter(|u| u.contains("/p/"))
        .collect()
}

/// A hub, its fake agent, the downloads sent to it and its tasks.
type FakeWorld = (
    HubHandle,
    Arc<FakeAgent>,
    mpsc::UnboundedReceiver<Download>,
    Tasks,
);

/// A hub and a fake agent `f1` that it sees live.
/// A clock for a test on paused time (`#[tokio::test(start_paused = true)]`) and the test bus
/// on it.
fn paused() -> (Arc<dyn Clock>, InProcessBus) {
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::new());
    let bus = bus_on(clock.clone());
    (clock, bus)
}

async fn hub_with_fake(
    dir: &Path,
    bus: &InProcessBus,
    clock: Arc<dyn Clock>,
    backend: bool,
) -> FakeWorld {
    hub_with_fake_as(hub_config(dir), dir, bus, clock, backend).await
}

/// [`hub_with_fake`] with the hub's `config`.
async fn hub_with_fake_as(
    config: silk_hub::HubConfig,
    dir: &Path,
    bus: &InProcessBus,
    clock: Arc<dyn Clock>,
    backend: bool,
) -> FakeWorld {
    let hub = Hub::start(config, Arc::new(bus.clone()), clock.clone())
        .await
        .expect("hub starts");
    let backend = match backend {
        true => Some(Backend::start(dir).await),
        false => None,
    };
    let (fake, downloads, tasks) = FakeAgent::start(bus, clock, "f1", backend).await;
    within("the fake agent live", 10, hub.wait_for_live_agents(1)).await;
    (hub, fake, downloads, tasks)
}

/// Failure matrix: "no result for a request after `lease_timeout` → re-dispatch, up to
/// `max_retries`; then failed". The hub acks a silent request `Retry` (`lease_timeout`) just
/// before its lease deadline, so each silent dispatch uses up a retry; a run whose requests
/// all failed has nothing left and ends `failed` by its health (`fail_if.all_failed`).
///
/// With `hub_retries`, the spider sets neither its lease timeout nor its retries: the hub's
/// defaults (`runs.lease_timeout` = `lease_ms`, `runs.max_retries` = `hub_retries`) do.
async fn silent_requests_are_retried_then_failed(lease_ms: u64, hub_retries: Option<u32>) {
    let dir = TempDir::new().unwrap();
    let (clock, bus) = paused();
    let site = site(10, 0).await;
    let mut config = hub_config(dir.path());
    let mut max_retries = 1;
    if let Some(retries) = hub_retries {
        config.run_defaults.lease_timeout_ms = lease_ms;
        config.run_defaults.max_retries = retries;
        max_retries = retries as usize;
    }
    let (hub, fake, _downloads, _tasks) =
        hub_with_fake_as(config, dir.path(), &bus, clock, false).await;
    let starts: Vec<String> = (1..=3)
        .flat_map(|h| [site.page_url(h, 0), site.page_url(h, 1)])
        .collect();
    let mut spider = spider(&site, &starts, lease_ms);
    if hub_retries.is_some() {
        spider = spider
            .replace(&format!("lease_timeout_ms: {lease_ms}\n"), "")
            .replace("max_retries: 1\n", "");
        assert!(!spider.contains("lease_timeout_ms") && !spider.contains("max_retries"));
    }
    let run = hub.submit(request(spider, 32)).await.expect("run starts");
    assert_eq!(run.agents, [AgentId::new("f1")]);
    // A few dispatches of about a lease each: the run is over well within 15 s.
    let done = tokio::time::timeout(Duration::from_secs(15), hub.wait_run(&run.id)).await;

    let expected: BTreeMap<String, usize> = starts
        .iter()
        .map(|u| (u.clone(), max_retries + 1))
        .collect();
    assert_eq!(
        fake.dispatches(),
        expected,
        "every request is dispatched max_retries + 1 times, no more"
    );
    let done = done.expect("the run ends").unwrap();
    let n = starts.len() as u64;
    assert_eq!(done.state, RunState::Failed, "{:?}", done.reason);
    assert_eq!(
        done.reason.as_deref(),
        Some(format!("fail_if.all_failed: every request failed ({n} of {n})").as_str())
    );
    let s = &done.stats;
    assert_eq!(
        (s.total, s.failed, s.success, s.left),
        (n, n, 0, 0),
        "{s:?}"
    );
    assert_eq!(s.retries, n * max_retries as u64, "{s:?}");
    assert_eq!(s.in_flight, 0, "{s:?}");
    assert_eq!(s.sent, n * (max_retries as u64 + 1), "{s:?}");
    assert_eq!((s.returned, s.late_results), (0, 0), "{s:?}");
    assert_eq!(site.stats().total_requests, 0, "nothing was fetched");
    hub.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn silent_requests_are_dispatched_max_retries_plus_one_times_then_failed() {
    // 2 s: the hub's silent-expiry margin (a tenth of the lease) is then as long as the
    // dispatch loop's longest sleep, so the loop cannot sleep past it (see the next test).
    silent_requests_are_retried_then_failed(2_000, None).await;
}

/// The hub's `runs.lease_timeout` and `runs.max_retries` apply to a spider that sets neither.
#[tokio::test(start_paused = true)]
async fn the_hubs_lease_timeout_and_retries_apply_when_the_spider_sets_none() {
    silent_requests_are_retried_then_failed(2_000, Some(2)).await;
}

/// The same with a lease of 1.6 s. The dispatch loop sleeps 200 ms at a time, or until the
/// frontier's next event, which for requests out is the lease *deadline*; the hub's silent
/// expiry window is [deadline − lease/10, deadline) = 160 ms here. With the loop waking
/// ~1.4 s after the lease (7 × 200 ms), 200 ms before the deadline, it sleeps until the
/// deadline itself, and its `Retry` ack arrives when the frontier already counts the lease
/// expired: the request is re-queued without using a retry, and dispatched again forever.
#[tokio::test(start_paused = true)]
async fn silent_requests_are_retried_then_failed_whatever_the_lease_timeout() {
    silent_requests_are_retried_then_failed(1_600, None).await;
}

/// Failure matrix: "results arrive late (after a re-dispatch) → processed once". The fake
/// agent answers every download twice, and holds the result of the first product page it is
/// sent until that page's lease has expired and the page was sent again; then it publishes
/// the stale result (twice) before answering the new dispatch.
/// "A request that keeps coming back is given up": a page whose agent dies while fetching
/// it (as if the page crashed it) goes back to the frontier after each death without using
/// a retry, and after `poison_after_losses` (3) deaths it fails as poison instead of being
/// sent again; the run, with nothing else to fetch, then fails by its health.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_page_that_kills_its_agent_every_time_is_given_up_as_poison() {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = site(10, 0).await;
    let hub = start_hub(dir.path(), &bus).await;
    let poison = site.page_url(1, 0);
    let (_fake, mut downloads, mut tasks) =
        FakeAgent::start(&bus, Arc::new(SystemClock), "f1", None).await;
    within("the fake agent live", 10, hub.wait_for_live_agents(1)).await;
    let mut request = request(spider(&site, std::slice::from_ref(&poison), 60_000), 8);
    request.strategy = Some(Strategy::Random);
    let run = hub.submit(request).await.expect("run starts");
    for death in 1..=3 {
        let d = within("the page dispatched", 20, downloads.recv())
            .await
            .expect("a download");
        assert_eq!(d.url(), poison, "death {death}");
        // The agent dies with the page; the hub finds it dead, then it restarts.
        drop(tasks);
        within(
            "the agent seen dead",
            20,
            hub.wait_for_dead(&AgentId::new("f1")),
        )
        .await;
        (_, downloads, tasks) = FakeAgent::start(&bus, Arc::new(SystemClock), "f1", None).await;
        within("the agent live again", 10, hub.wait_for_live_agents(1)).await;
    }
    let done = within("the run ends", 30, hub.wait_run(&run.id))
        .await
        .expect("the run's view");
    assert_eq!(done.state, RunState::Failed, "{:?}", done.reason);
    assert_eq!(
        done.reason.as_deref(),
        Some("fail_if.all_failed: every request failed (1 of 1)")
    );
    let s = &done.stats;
    assert_eq!(
        (s.poisoned, s.failed, s.success, s.left),
        (1, 1, 0, 0),
        "{s:?}"
    );
    assert!(
        downloads.try_recv().is_err(),
        "the poison page was sent again after its last loss"
    );
    drop(tasks);
    hub.shutdown().await;
}

/// `n` content pages of the demo site's first host.
fn pages(site: &DemoSite, n: u32) -> Vec<String> {
    (0..n).map(|i| site.page_url(1, i)).collect()
}

/// Asserts that no download arrives for a while (there is no event for "nothing happened":
/// the window is long against the dispatch loop's 100 ms wait at `max_pending`).
async fn no_more_downloads(downloads: &mut mpsc::UnboundedReceiver<Download>) {
    let more = tokio::time::timeout(Duration::from_millis(600), downloads.recv()).await;
    assert!(
        more.is_err(),
        "a download went out: {:?}",
        more.ok().flatten().map(|d| d.url().to_owned())
    );
}

/// Back-pressure: at most `max_pending` requests are out at once; each result that comes
/// back lets exactly one more go.
#[tokio::test(start_paused = true)]
async fn no_more_than_max_pending_requests_are_out() {
    let dir = TempDir::new().unwrap();
    let (clock, bus) = paused();
    let site = site(20, 0).await;
    let (hub, fake, mut downloads, _tasks) = hub_with_fake(dir.path(), &bus, clock, false).await;
    let run = hub
        .submit(request(spider(&site, &pages(&site, 12), 60_000), 3))
        .await
        .expect("run starts");
    let mut out = Vec::new();
    for _ in 0..3 {
        out.push(within("a download", 10, downloads.recv()).await.unwrap());
    }
    no_more_downloads(&mut downloads).await;
    let view = hub.run(&run.id).await.unwrap();
    assert_eq!(
        (view.stats.sent, view.stats.in_flight),
        (3, 3),
        "{:?}",
        view.stats
    );
    // One result: one more goes out, and no other.
    let first = out.remove(0);
    fake.answer(&RunResult {
        run: first.run.clone(),
        agent: AgentId::new("f1"),
        lease_id: first.leased.lease_id,
        outcome: FetchOutcome {
            status: Some(200),
            ..FetchOutcome::default()
        },
    })
    .await;
    within("one more download", 10, downloads.recv())
        .await
        .unwrap();
    no_more_downloads(&mut downloads).await;
    let view = hub.run(&run.id).await.unwrap();
    let s = &view.stats;
    assert_eq!(
        (s.sent, s.returned, s.in_flight, s.success),
        (4, 1, 3, 1),
        "{s:?}"
    );
    hub.cancel(&run.id).await.unwrap();
    hub.shutdown().await;
}

/// Stall: a run with requests left and no live agent fails once nothing has moved for
/// `stall_timeout_ms` (never less than the lease timeout + 1 s), naming the timeout.
#[tokio::test(start_paused = true)]
async fn a_run_left_without_live_agents_fails_after_its_stall_timeout() {
    let dir = TempDir::new().unwrap();
    let (clock, bus) = paused();
    let site = site(20, 0).await;
    let (hub, _fake, mut downloads, tasks) = hub_with_fake(dir.path(), &bus, clock, false).await;
    let mut request = request(spider(&site, &pages(&site, 12), 1_000), 2);
    request.stall_timeout_ms = Some(1_000);
    let run = hub.submit(request).await.expect("run starts");
    within("a download", 10, downloads.recv()).await.unwrap();
    // The only agent goes away with requests still to fetch.
    drop(tasks);
    let done = within("the run to stall", 20, hub.wait_run(&run.id))
        .await
        .unwrap();
    assert_eq!(done.state, RunState::Failed, "{:?}", done.reason);
    assert_eq!(
        done.reason.as_deref(),
        Some("stalled: no live agent for 2 s (stall_timeout)")
    );
    assert!(done.stats.left > 0, "{:?}", done.stats);
    hub.shutdown().await;
}

/// A job's `timeout_ms`: its run still active that long after it started is failed,
/// naming the timeout (the fake agent never answers, and leases last a minute).
#[tokio::test(start_paused = true)]
async fn a_job_run_past_its_timeout_is_failed() {
    let dir = TempDir::new().unwrap();
    let (clock, bus) = paused();
    let site = site(20, 0).await;
    let (hub, _fake, _downloads, _tasks) = hub_with_fake(dir.path(), &bus, clock, false).await;
    let spec = serde_json::from_value(serde_json::json!({
        "name": "slow",
        "spider": spider(&site, &pages(&site, 4), 60_000),
        "timeout_ms": 1_000,
    }))
    .unwrap();
    hub.create_job(spec).await.expect("job");
    let view = hub
        .trigger("slow", silk_api::jobs::TriggerRequest::default())
        .await
        .expect("run starts");
    let done = within("the run to time out", 20, hub.wait_run(&view.id))
        .await
        .unwrap();
    assert_eq!(done.state, RunState::Failed, "{:?}", done.reason);
    let reason = done.reason.unwrap_or_default();
    assert!(
        reason.starts_with("timed out: still active") && reason.ends_with("(timeout_ms 1000)"),
        "{reason}"
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn late_and_duplicate_results_are_processed_once() {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let site = site(20, 0).await;
    let (hub, fake, mut downloads, tasks) =
        hub_with_fake(dir.path(), &bus, Arc::new(SystemClock), true).await;
    // A lease of 3 s: the hub retries a silent request 300 ms before its deadline, more than
    // its dispatch loop ever sleeps (200 ms).
    let run = hub
        .submit(request(spider(&site, &[site.start_url()], 3_000), 32))
        .await
        .expect("run starts");

    let behaviour = {
        let fake = fake.clone();
        tokio::spawn(async move {
            // The held page: its URL, and its first result once fetched.
            let mut held: Option<(String, JoinHandle<RunResult>)> = None;
            let mut held_url = None;
            // URLs whose result had no error: the pages the hub should count as success.
            let fetched: Arc<Mutex<BTreeSet<String>>> = Arc::default();
            while let Some(d) = downloads.recv().await {
                if held_url.is_none() && d.url().contains("/p/") {
                    held_url = Some(d.url().to_owned());
                    let (fake, first) = (fake.clone(), d.clone());
                    let fetch = tokio::spawn(async move { fake.fetch(&first).await });
                    held = Some((d.url().to_owned(), fetch));
                    continue;
                }
                if held.as_ref().is_some_and(|(url, _)| url == d.url()) {
                    // Sent again: its first lease expired. Now the stale result comes back.
                    let (_, fetch) = held.take().unwrap();
                    let stale = fetch.await.expect("held fetch");
                    fake.answer(&stale).await;
                    fake.answer(&stale).await;
                }
                let (fake, fetched) = (fake.clone(), fetched.clone());
                tokio::spawn(async move {
                    let result = fake.fetch(&d).await;
                    if result.outcome.error.is_none() {
                        fetched.lock().insert(d.url().to_owned());
                    }
                    fake.answer(&result).await;
                    fake.answer(&result).await;
                });
            }
            (held_url, fetched)
        })
    };
    let done = within("the run", 60, hub.wait_run(&run.id)).await.unwrap();
    hub.shutdown().await;
    drop(tasks);
    let (held_url, fetched) = behaviour.await.expect("the fake agent's behaviour");
    let held_url = held_url.expect("a product page was held");
    let fetched = fetched.lock().clone();

    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    let s = &done.stats;
    // The held page was sent twice (its lease expired, one retry); every other page once.
    let dispatches = fake.dispatches();
    assert_eq!(dispatches[&held_url], 2, "{dispatches:?}");
    let again: Vec<_> = dispatches
        .iter()
        .filter(|(url, n)| **n != 1 && **url != held_url)
        .collect();
    assert!(again.is_empty(), "sent more than once: {again:?}");
    assert_eq!(s.retries, 1, "{s:?}");
    // Every result published was applied once or counted late: the duplicate of each
    // applied result, and both copies of the stale one.
    let published = fake.published.load(Ordering::SeqCst);
    assert_eq!(s.returned + s.late_results, published, "{s:?}");
    assert_eq!(s.late_results, s.returned + 2, "{s:?}");
    assert_eq!(s.returned, s.sent - 1, "{s:?}");
    // Processed once: every page counted once, every item written once.
    assert_eq!(s.success, fetched.len() as u64, "{s:?}");
    assert!(s.success >= site.expected_pages().len() as u64, "{s:?}");
    assert_eq!(s.success + s.failed + s.dropped, s.total, "{s:?}");
    assert_eq!(items_once(&done), content_pages(&site));
    assert_eq!(s.items, content_pages(&site).len() as u64, "{s:?}");
    assert_eq!(
        s.duplicate_items, 0,
        "ignored results never reach the sink: {s:?}"
    );
    assert_eq!(s.in_flight, 0, "{s:?}");
}

/// Starts a hub on a bus whose command publishes can be broken, and the fake agent `f1`
/// with a real agent behind it.
async fn breakable_hub(
    dir: &Path,
) -> (
    HubHandle,
    Faults,
    Arc<FakeAgent>,
    mpsc::UnboundedReceiver<Download>,
    Tasks,
) {
    let bus = bus();
    let faults = Faults::default();
    let hub_bus = FaultyBus::new(bus.clone(), faults.clone());
    let hub = Hub::start(hub_config(dir), Arc::new(hub_bus), Arc::new(SystemClock))
        .await
        .expect("hub starts");
    let backend = Backend::start(dir).await;
    let (fake, downloads, tasks) =
        FakeAgent::start(&bus, Arc::new(SystemClock), "f1", Some(backend)).await;
    within("the fake agent live", 10, hub.wait_for_live_agents(1)).await;
    (hub, faults, fake, downloads, tasks)
}

/// Failure matrix: "bus publish from the hub → retry N times, then the run fails with the
/// reason". The bus breaks while the agent fetches the seed; the hub cannot send the next
/// request: the run fails naming the bus and the agent, and that request's lease is given
/// back to the frontier. Nothing is lost: restarted on the same frontier, the run fetches
/// every other page and writes every item once, without fetching the seed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bus_that_cannot_carry_commands_fails_the_run_and_loses_nothing() {
    let dir = TempDir::new().unwrap();
    let site = site(20, 0).await;
    let (hub, faults, fake, mut downloads, _tasks) = breakable_hub(dir.path()).await;
    // One request out at a time: when the seed's result is in, nothing else is out.
    let run = hub
        .submit(request(spider(&site, &[site.start_url()], 1_500), 1))
        .await
        .expect("run starts");

    let behaviour = {
        let (fake, faults) = (fake.clone(), faults.clone());
        tokio::spawn(async move {
            let mut first = true;
            while let Some(d) = downloads.recv().await {
                let result = fake.fetch(&d).await;
                if std::mem::take(&mut first) {
                    faults.set(SubjectClass::AgentCommands, broken_commands());
                }
                fake.answer(&result).await;
            }
        })
    };
    let failed = within("the run", 30, hub.wait_run(&run.id)).await.unwrap();
    assert_eq!(failed.state, RunState::Failed);
    let reason = failed.reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with("bus:") && reason.contains("`f1`"),
        "the reason names the bus and the agent: {reason}"
    );
    let s = &failed.stats;
    assert_eq!(
        fake.dispatches().len(),
        1,
        "only the seed reached the agent"
    );
    assert_eq!((s.success, s.sent, s.returned), (1, 1, 1), "{s:?}");
    assert!(s.total > 1, "the seed's links are in the frontier: {s:?}");
    assert_eq!(
        s.in_flight, 0,
        "the unsent request's lease was given back: {s:?}"
    );
    assert_eq!(s.pending, s.left, "{s:?}");
    assert_eq!(s.success + s.failed + s.dropped + s.left, s.total, "{s:?}");

    // Nothing lost: the bus works again, and a restart on the same frontier finishes it.
    faults.heal(SubjectClass::AgentCommands);
    let again = hub.restart(&run.id, true).await.expect("restart");
    let done = within("the restarted run", 60, hub.wait_run(&again.id))
        .await
        .unwrap();
    assert_eq!(done.state, RunState::Succeeded, "{:?}", done.reason);
    assert_eq!(items_once(&done), content_pages(&site));
    let dispatches = fake.dispatches();
    let twice: Vec<_> = dispatches.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "fetched again: {twice:?}");
    assert_eq!(done.stats.left, 0);
    hub.shutdown().await;
    behaviour.abort();
}

/// The same row with requests out at the agent when the bus breaks: the agent holds the
/// first request it is sent (no answer yet) and answers the second once the bus is broken;
/// the hub fails the run when it cannot send the next one. Every lease of the run should be
/// given back when it fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_failed_by_the_bus_gives_back_the_leases_out_at_agents() {
    let dir = TempDir::new().unwrap();
    let site = site(20, 0).await;
    let (hub, faults, fake, mut downloads, _tasks) = breakable_hub(dir.path()).await;
    let starts: Vec<String> = (0..4).map(|i| site.page_url(1, i)).collect();
    let run = hub
        .submit(request(spider(&site, &starts, 1_500), 2))
        .await
        .expect("run starts");

    let behaviour = {
        let (fake, faults) = (fake.clone(), faults.clone());
        tokio::spawn(async move {
            let _held = downloads.recv().await.expect("a first download");
            let d = downloads.recv().await.expect("a second download");
            let result = fake.fetch(&d).await;
            faults.set(SubjectClass::AgentCommands, broken_commands());
            fake.answer(&result).await;
            // Keep the receiver (and the held request) until the test ends.
            while downloads.recv().await.is_some() {}
        })
    };
    let failed = within("the run", 30, hub.wait_run(&run.id)).await.unwrap();
    assert_eq!(failed.state, RunState::Failed);
    let reason = failed.reason.clone().unwrap_or_default();
    assert!(reason.starts_with("bus:"), "{reason}");
    let s = &failed.stats;
    assert_eq!((s.sent, s.returned, s.success), (2, 1, 1), "{s:?}");
    assert_eq!(
        s.in_flight, 0,
        "every lease is given back when the run fails: {s:?}"
    );
    assert_eq!(s.pending, s.left, "{s:?}");
    hub.shutdown().await;
    behaviour.abort();
}
