//! The tests' stand-in for the hub: it publishes commands to an agent's subject and reads
//! registrations, heartbeats, allocation replies, results and run log batches from the bus,
//! as the hub will. Also small local
//! HTTP servers, agent configs with short intervals, and waiting for agent events.
//!
//! Every wait here awaits a message or an event; the timeouts only turn a hang into a
//! failure.

#![allow(dead_code)]

use silk_agent::{Agent, AgentConfig, AgentEvent, AgentHandle, DownloaderConfig};
use silk_bus::{
    AllocationReply, Bus, BusConfig, Command, Deliver, Heartbeat, InProcessBus, LeasedRequest,
    LogBatch, LogEntry, Message, Register, RetryPolicy, RunResult, Subject, SubscribeOpts,
    Subscription, TtlPolicy,
};
pub use silk_core::LeaseId;
use silk_core::{AgentId, Clock, OutcomeCode, Request, RunId, SystemClock};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, broadcast, mpsc};

/// The longest any single wait may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(20);

/// Awaits `f`, failing the test after [`WAIT`].
pub async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT, f).await {
        Ok(v) => v,
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

/// An in-process bus whose own retries are quick (bus-down tests stay short).
pub fn bus() -> InProcessBus {
    bus_with_clock(Arc::new(SystemClock))
}

/// [`bus`] with a clock.
pub fn bus_with_clock(clock: Arc<dyn Clock>) -> InProcessBus {
    let config = BusConfig {
        retry: RetryPolicy {
            retries: 1,
            backoff_initial_ms: 10,
            backoff_max_ms: 20,
        },
        ..BusConfig::with_namespace("t")
    };
    InProcessBus::with_clock(config, clock).expect("in-process bus")
}

/// An agent config with short intervals.
pub fn agent_config(dir: &Path, id: &str) -> AgentConfig {
    AgentConfig {
        id: Some(AgentId::new(id)),
        labels: [("pool".to_owned(), "test".to_owned())].into(),
        capacity: 8,
        heartbeat_interval_ms: 100,
        idle_check_ms: 20,
        backoff_initial_ms: 10,
        backoff_max_ms: 100,
        shutdown_grace_ms: 5_000,
        // The test sites are on loopback, which agents do not reach unless allowed.
        allow_networks: vec!["127.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()],
        ..AgentConfig::new(dir)
    }
}

/// Starts an agent with the system clock.
pub async fn start(config: AgentConfig, bus: &InProcessBus) -> AgentHandle {
    Agent::start(config, Arc::new(bus.clone()), Arc::new(SystemClock))
        .await
        .expect("agent starts")
}

/// Waits for the first event that `pick` maps to `Some`.
pub async fn event<T>(
    rx: &mut broadcast::Receiver<AgentEvent>,
    what: &str,
    mut pick: impl FnMut(&AgentEvent) -> Option<T>,
) -> T {
    within(what, async {
        loop {
            match rx.recv().await {
                Ok(e) => {
                    if let Some(v) = pick(&e) {
                        return v;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => panic!("events closed: {what}"),
            }
        }
    })
    .await
}

/// The hub's side of the bus, for one agent.
pub struct Hub {
    pub bus: Arc<dyn Bus>,
    pub clock: Arc<dyn Clock>,
    pub agent: AgentId,
    results: Subscription,
    next_lease: u64,
    /// Every request sent, by lease: what a released one is sent again as.
    sent: HashMap<LeaseId, (RunId, Request, Option<String>)>,
    /// The lease a request was sent again under → the lease it was first sent under.
    first_lease: HashMap<LeaseId, LeaseId>,
}

impl Hub {
    /// Reads results (durably, so none is missed) for commands it sends to `agent`.
    pub async fn new(bus: Arc<dyn Bus>, agent: &str) -> Hub {
        Self::with_clock(bus, agent, Arc::new(SystemClock)).await
    }

    /// [`Hub::new`] stamping commands with `clock`.
    pub async fn with_clock(bus: Arc<dyn Bus>, agent: &str, clock: Arc<dyn Clock>) -> Hub {
        let results = bus
            .subscribe(
                &Subject::results(),
                SubscribeOpts::durable(format!("hub-results-{agent}")).deliver(Deliver::New),
            )
            .await
            .expect("subscribe results");
        Hub {
            bus,
            clock,
            agent: AgentId::new(agent),
            results,
            next_lease: 0,
            sent: HashMap::new(),
            first_lease: HashMap::new(),
        }
    }

    /// Publishes a command to the agent.
    pub async fn send(&self, command: Command) {
        let subject = Subject::agent_commands(&self.agent).unwrap();
        let envelope = TtlPolicy::default().envelope(command, self.clock.now_ms());
        self.bus
            .publish(&subject, &envelope)
            .await
            .expect("publish command");
    }

    /// Allocates `config` for `run`.
    pub async fn allocate(&self, run: &str, config: &DownloaderConfig) {
        self.send(Command::Allocate {
            run: RunId::new(run),
            config: config.to_json(),
            allow_networks: Vec::new(),
        })
        .await;
    }

    /// Sends a download of `urls` for `run` (without `reply_to`: results on `results`);
    /// returns the lease ids in order.
    pub async fn download(&mut self, run: &str, urls: &[String]) -> Vec<LeaseId> {
        self.download_replying_to(run, urls, None).await
    }

    /// Sends a download of `urls` for `run` whose results go to `results.{reply_to}` (or
    /// `results` when `None`); returns the lease ids in order.
    pub async fn download_replying_to(
        &mut self,
        run: &str,
        urls: &[String],
        reply_to: Option<&str>,
    ) -> Vec<LeaseId> {
        let requests: Vec<Request> = urls
            .iter()
            .map(|u| Request::from_canonical(u.clone()))
            .collect();
        self.send_batch(&RunId::new(run), requests, reply_to).await
    }

    /// Sends `requests` under new leases; the leases in order.
    async fn send_batch(
        &mut self,
        run: &RunId,
        requests: Vec<Request>,
        reply_to: Option<&str>,
    ) -> Vec<LeaseId> {
        let batch: Vec<LeasedRequest> = requests
            .into_iter()
            .map(|request| {
                self.next_lease += 1;
                LeasedRequest {
                    lease_id: LeaseId(self.next_lease),
                    request,
                }
            })
            .collect();
        let leases = batch.iter().map(|l| l.lease_id).collect();
        for l in &batch {
            let reply_to = reply_to.map(str::to_owned);
            self.sent
                .insert(l.lease_id, (run.clone(), l.request.clone(), reply_to));
        }
        self.send(Command::Download {
            run: run.clone(),
            batch,
            reply_to: reply_to.map(str::to_owned),
        })
        .await;
        leases
    }

    /// The next result that is not `robots_fetched` (use [`Hub::raw_result`] to see those).
    /// As a hub does, a request the agent gives back because reading its host's robots.txt
    /// was its turn (`robots_fetched`) is sent again; its result comes back under the lease
    /// it was first sent under.
    pub async fn result(&mut self) -> RunResult {
        loop {
            let mut r = self.raw_result().await;
            let released = r
                .outcome
                .error
                .as_ref()
                .is_some_and(|e| e.code == OutcomeCode::RobotsFetched);
            let first = self.first_lease.get(&r.lease_id).copied();
            if released {
                let (run, request, reply_to) = self.sent[&r.lease_id].clone();
                let again = self
                    .send_batch(&run, vec![request], reply_to.as_deref())
                    .await;
                self.first_lease
                    .insert(again[0], first.unwrap_or(r.lease_id));
                continue;
            }
            if let Some(first) = first {
                r.lease_id = first;
            }
            return r;
        }
    }

    /// The next result, as the agent sent it.
    pub async fn raw_result(&mut self) -> RunResult {
        within("a result", async {
            loop {
                let d = self
                    .results
                    .next()
                    .await
                    .expect("results subscription open")
                    .expect("a readable result");
                let body = d.envelope.body.clone();
                let _ = d.ack().await;
                if let Message::Result(r) = body {
                    return r;
                }
            }
        })
        .await
    }

    /// The results of `leases`, by lease id.
    pub async fn results(&mut self, leases: &[LeaseId]) -> BTreeMap<LeaseId, RunResult> {
        let mut out = BTreeMap::new();
        while out.len() < leases.len() {
            let r = self.result().await;
            if leases.contains(&r.lease_id) {
                out.insert(r.lease_id, r);
            }
        }
        out
    }

    /// Downloads one URL and returns its result.
    pub async fn fetch(&mut self, run: &str, url: &str) -> RunResult {
        let leases = self.download(run, &[url.to_owned()]).await;
        self.results(&leases).await.remove(&leases[0]).unwrap()
    }
}

/// Results on `results.{hub}` (a hub's own durable `name`), from the start of the subject.
pub async fn hub_results(bus: &dyn Bus, hub: &str, name: &str) -> Subscription {
    bus.subscribe(
        &Subject::hub_results(hub).expect("valid hub id"),
        SubscribeOpts::durable(name),
    )
    .await
    .expect("subscribe hub results")
}

/// The next delivery of `sub`, which must be a result: its subject and the result (acked).
pub async fn next_result(sub: &mut Subscription) -> (Subject, RunResult) {
    within("a result", async {
        let d = sub
            .next()
            .await
            .expect("results subscription open")
            .expect("a readable result");
        let subject = d.subject.clone();
        let body = d.envelope.body.clone();
        let _ = d.ack().await;
        match body {
            Message::Result(r) => (subject, r),
            other => panic!("not a result: {other:?}"),
        }
    })
    .await
}

/// Registrations, from the start of the subject.
pub async fn registrations(bus: &dyn Bus, name: &str) -> Subscription {
    bus.subscribe(&Subject::registrations(), SubscribeOpts::durable(name))
        .await
        .expect("subscribe registrations")
}

/// The next registration.
pub async fn next_register(sub: &mut Subscription) -> Register {
    within("a registration", async {
        loop {
            let d = sub.next().await.unwrap().unwrap();
            let body = d.envelope.body.clone();
            let _ = d.ack().await;
            if let Message::Register(r) = body {
                return r;
            }
        }
    })
    .await
}

/// Heartbeats from now on (plain: heartbeats are not stored).
pub async fn heartbeats(bus: &dyn Bus) -> Subscription {
    bus.subscribe(&Subject::heartbeats(), SubscribeOpts::live())
        .await
        .expect("subscribe heartbeats")
}

/// The next heartbeat.
pub async fn next_heartbeat(sub: &mut Subscription) -> Heartbeat {
    within("a heartbeat", async {
        loop {
            let d = sub.next().await.unwrap().unwrap();
            if let Message::Heartbeat(h) = d.envelope.body {
                return h;
            }
        }
    })
    .await
}

/// Allocation replies from now on (plain: they are not stored; subscribe before allocating).
pub async fn allocation_replies(bus: &dyn Bus) -> Subscription {
    bus.subscribe(&Subject::allocations(), SubscribeOpts::live())
        .await
        .expect("subscribe allocations")
}

/// The next allocation reply.
pub async fn next_allocation_reply(sub: &mut Subscription) -> AllocationReply {
    within("an allocation reply", async {
        loop {
            let d = sub.next().await.unwrap().unwrap();
            if let Message::Allocated(r) = d.envelope.body {
                return r;
            }
        }
    })
    .await
}

/// Run log batches, durably (as the hub reads them), from the start of the subject.
pub async fn log_batches(bus: &dyn Bus, name: &str) -> Subscription {
    bus.subscribe(&Subject::logs(), SubscribeOpts::durable(name))
        .await
        .expect("subscribe logs")
}

/// The next run log batch.
pub async fn next_log_batch(sub: &mut Subscription) -> LogBatch {
    within("a log batch", async {
        loop {
            let d = sub.next().await.unwrap().unwrap();
            let body = d.envelope.body.clone();
            let _ = d.ack().await;
            if let Message::Log(b) = body {
                return b;
            }
        }
    })
    .await
}

/// The first run log line (with its batch) for which `pick` is true, skipping the others.
pub async fn log_line(
    sub: &mut Subscription,
    what: &str,
    mut pick: impl FnMut(&LogBatch, &LogEntry) -> bool,
) -> (LogBatch, LogEntry) {
    within(what, async {
        loop {
            let batch = next_log_batch(sub).await;
            if let Some(line) = batch.lines.iter().find(|l| pick(&batch, l)).cloned() {
                return (batch, line);
            }
        }
    })
    .await
}

/// Serves `app` on `127.0.0.1:0`; returns its address. The server lives as long as the
/// test's runtime.
pub async fn serve(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// A spider YAML for `start` with the given extra lines.
pub fn spider_yaml(start: &str, extra: &str) -> String {
    format!("name: test\nstart_urls: [\"{start}\"]\n{extra}")
}

/// A page that answers only when `release` is notified; each request is announced on
/// `arrived` first.
pub async fn gated_site() -> (String, mpsc::UnboundedReceiver<()>, Arc<Notify>) {
    let (tx, arrived) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let gate = release.clone();
    let app = axum::Router::new().route(
        "/slow",
        axum::routing::get(move || {
            let tx = tx.clone();
            let gate = gate.clone();
            async move {
                let opened = gate.notified();
                let _ = tx.send(());
                opened.await;
                axum::response::Html("<h1>late</h1>")
            }
        }),
    );
    (format!("http://{}", serve(app).await), arrived, release)
}

/// The demo site on one host with 10 pages.
pub async fn small_site() -> silk_testkit::DemoSite {
    silk_testkit::DemoSite::start(silk_testkit::DemoConfig {
        hosts: 1,
        pages: 10,
        ..silk_testkit::DemoConfig::default()
    })
    .await
    .expect("demo site")
}
