//! The conformance suite of [`Bus`]: every promise of the trait (see `bus`), written once and
//! run against every backend (`tests/in_process.rs`, `tests/nats.rs`).
//!
//! A backend provides a [`BusFactory`]; one line instantiates the suite as one
//! `#[tokio::test]` per check (the expression gives an `Option` of a factory; `None` skips,
//! which is how the NATS tests skip when no server is configured):
//!
//! ```ignore
//! silk_bus::bus_conformance_tests!(Some(MyFactory::new()));
//! ```
//!
//! Each check runs in a fresh namespace (subjects and stream of its own), so checks can run
//! in parallel against one shared server. Staleness is driven by a [`ManualClock`]; waiting
//! is on events (a delivery arriving), with [`WAIT`] only as an upper bound. "Nothing else
//! arrived" is shown with a fence: a marker published afterwards must be the next delivery.
//! The module is plain code (always compiled) and must only be called from tests: it panics
//! on the first violation, saying which check and what differed.

use crate::bus::{Bus, BusConfig, Deliver, Delivery, RetryPolicy, SubscribeOpts, Subscription};
use crate::error::BusError;
use crate::subject::Subject;
use crate::wire::{
    AllocationReply, Command, Control, Envelope, FetchOutcome, Heartbeat, HubBeacon, LeasedRequest,
    LogBatch, LogEntry, LogLevel, Message, Register, RunResult, TtlPolicy,
};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use silk_core::{AgentId, Clock, LeaseId, ManualClock, Request, RunId, SystemClock};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// Opens buses for the suite.
#[async_trait]
pub trait BusFactory: Send + Sync {
    /// A client of the bus under test with `config` (its namespace is fresh per check);
    /// every client opened with the same namespace sees the same messages. `clock` decides
    /// staleness on the reading side.
    async fn open(&self, config: BusConfig, clock: ManualClock) -> Arc<dyn Bus>;

    /// A client whose server cannot be reached: every attempt fails with a retryable error.
    async fn open_unreachable(&self, config: BusConfig) -> Arc<dyn Bus>;

    /// Called at the end of a check with its namespace (drop streams on a shared server).
    async fn cleanup(&self, namespace: &str) {
        let _ = namespace;
    }
}

/// Generates one `#[tokio::test]` per conformance check; `$factory` is an expression of
/// type `Option<impl BusFactory>` evaluated per test (`None` = skip).
#[macro_export]
macro_rules! bus_conformance_tests {
    ($factory:expr) => {
        $crate::bus_conformance_tests!(@each $factory;
            agent_subjects_are_isolated, shared_subjects_fan_out,
            durable_keeps_messages_published_before_subscribing, deliver_all_replays_without_durable,
            hub_results_reach_only_their_hub,
            durable_work_is_shared, unacked_and_naked_are_redelivered,
            stale_messages_are_dropped_registrations_kept,
            allocation_replies_are_live_and_stale_ones_dropped,
            log_batches_are_durable_and_stale_ones_dropped, malformed_payloads_are_errors,
            publishes_and_subscriptions_are_checked, duplicate_publishes_are_stored_once,
            unreachable_bus_fails_after_retries);
    };
    (@each $factory:expr; $($check:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let Some(factory) = $factory else { return };
                $crate::conformance::$check(&factory).await;
            }
        )*
    };
}

/// Upper bound of every wait for an event in the suite.
pub const WAIT: Duration = Duration::from_secs(15);

/// A fresh namespace: `t` + 16 random hex digits.
pub fn fresh_namespace() -> String {
    // The last 16 hex digits of a UUIDv7 are random.
    let id = uuid::Uuid::now_v7().simple().to_string();
    format!("t{}", &id[16..])
}

/// The suite's config: a fresh namespace, quick retries, short stream age.
pub fn suite_config() -> BusConfig {
    BusConfig {
        namespace: fresh_namespace(),
        retry: RetryPolicy {
            retries: 5,
            backoff_initial_ms: 20,
            backoff_max_ms: 200,
        },
        max_age_ms: 600_000,
        reconnect_backoff_max_ms: 500,
        ..BusConfig::default()
    }
}

struct Ctx {
    bus: Arc<dyn Bus>,
    clock: ManualClock,
    ttl: TtlPolicy,
    ns: String,
}

async fn setup<F: BusFactory>(f: &F) -> Ctx {
    setup_with(f, suite_config()).await
}

async fn setup_with<F: BusFactory>(f: &F, config: BusConfig) -> Ctx {
    let clock = ManualClock::new(SystemClock.now_ms());
    let ns = config.namespace.clone();
    let bus = f.open(config, clock.clone()).await;
    Ctx {
        bus,
        clock,
        ttl: TtlPolicy::default(),
        ns,
    }
}

impl Ctx {
    fn env(&self, body: impl Into<Message>) -> Envelope {
        self.ttl.envelope(body, self.clock.now_ms())
    }

    async fn publish(&self, subject: &Subject, envelope: &Envelope) {
        self.bus
            .publish(subject, envelope)
            .await
            .unwrap_or_else(|e| panic!("publish on `{subject}` failed: {e}"));
    }

    async fn subscribe(&self, subject: &Subject, opts: SubscribeOpts) -> Subscription {
        self.bus
            .subscribe(subject, opts.clone())
            .await
            .unwrap_or_else(|e| panic!("subscribe to `{subject}` with {opts:?} failed: {e}"))
    }
}

fn agent(name: &str) -> Subject {
    Subject::agent_commands(&AgentId::new(name)).expect("valid agent id")
}

/// A lease id named by a label (FNV-1a of it), so that the cases below read by name.
pub fn lease_id(label: &str) -> LeaseId {
    LeaseId(label.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    }))
}

fn result(lease: &str) -> RunResult {
    RunResult {
        run: RunId::new("r1"),
        agent: AgentId::new("a1"),
        lease_id: lease_id(lease),
        outcome: FetchOutcome {
            status: Some(200),
            ..FetchOutcome::default()
        },
    }
}

fn download(lease: &str) -> Command {
    Command::Download {
        run: RunId::new("r1"),
        batch: vec![LeasedRequest {
            lease_id: lease_id(lease),
            request: Request::from_canonical(format!("https://example.com/{lease}")),
        }],
        reply_to: None,
    }
}

fn heartbeat(seq: u64) -> Heartbeat {
    Heartbeat {
        agent: AgentId::new("a1"),
        cpu_pct: 1.0,
        memory_bytes: 1,
        active_downloaders: 0,
        in_flight: 0,
        qps: 0.0,
        seq,
    }
}

fn register(agent: &str) -> Register {
    Register {
        agent: AgentId::new(agent),
        host: "h".into(),
        version: "0".into(),
        cores: 1,
        memory_bytes: 1,
        labels: Default::default(),
        capacity: 1,
    }
}

fn allocated(run: &str, ok: bool) -> AllocationReply {
    AllocationReply {
        run: RunId::new(run),
        agent: AgentId::new("a1"),
        ok,
        error: (!ok).then(|| format!("run `{run}`: refused")),
    }
}

fn log_batch(run: &str, messages: &[(LogLevel, &str)]) -> LogBatch {
    LogBatch {
        run: RunId::new(run),
        agent: AgentId::new("a1"),
        lines: messages
            .iter()
            .zip(1_000..)
            .map(|((level, message), ts_ms)| LogEntry {
                ts_ms,
                level: *level,
                message: (*message).to_owned(),
            })
            .collect(),
    }
}

/// The next delivery, which must come within [`WAIT`] and be well-formed.
async fn recv(sub: &mut Subscription, what: &str) -> Delivery {
    match tokio::time::timeout(WAIT, sub.next()).await {
        Ok(Some(Ok(d))) => d,
        Ok(Some(Err(e))) => panic!("{what}: expected a delivery, got error: {e}"),
        Ok(None) => panic!("{what}: subscription ended"),
        Err(_) => panic!("{what}: nothing delivered within {WAIT:?}"),
    }
}

/// The next item, which must be an error.
async fn recv_err(sub: &mut Subscription, what: &str) -> BusError {
    match tokio::time::timeout(WAIT, sub.next()).await {
        Ok(Some(Err(e))) => e,
        Ok(Some(Ok(d))) => panic!("{what}: expected an error, got {d:?}"),
        Ok(None) => panic!("{what}: subscription ended"),
        Err(_) => panic!("{what}: nothing within {WAIT:?}"),
    }
}

/// The next delivery must be `want` (by id); returns it (unacked).
async fn expect(sub: &mut Subscription, want: &Envelope, what: &str) -> Delivery {
    let d = recv(sub, what).await;
    assert_eq!(
        d.envelope.id, want.id,
        "{what}: expected {:?}, got {:?}",
        want.body, d.envelope.body
    );
    assert_eq!(d.envelope, *want, "{what}: the envelope changed on the way");
    d
}

async fn ack(d: Delivery, what: &str) {
    d.ack()
        .await
        .unwrap_or_else(|e| panic!("{what}: ack failed: {e}"));
}

/// Per-agent subjects: a subscriber of one agent sees only that agent's commands; a
/// wildcard subscriber sees all, with the concrete subject; bad ids cannot be used.
pub async fn agent_subjects_are_isolated<F: BusFactory>(f: &F) {
    let c = setup(f).await;
    let (a, b) = (agent("a"), agent("b"));
    let mut dur_a = c.subscribe(&a, SubscribeOpts::durable("agent-a")).await;
    let mut dur_b = c.subscribe(&b, SubscribeOpts::durable("agent-b")).await;
    let mut live_a = c.subscribe(&a, SubscribeOpts::live()).await;
    let mut all = c
        .subscribe(&Subject::all_agent_commands(), SubscribeOpts::live())
        .await;

    let to_a1 = c.env(download("l1"));
    let to_b = c.env(Command::Shutdown);
    let to_a2 = c.env(Command::Release {
        run: RunId::new("r1"),
    });
    c.publish(&a, &to_a1).await;
    c.publish(&b, &to_b).await;
    c.publish(&a, &to_a2).await;
    let fence_a = c.env(Command::Release {
        run: RunId::new("fence-a"),
    });
    let fence_b = c.env(Command::Release {
        run: RunId::new("fence-b"),
    });
    c.publish(&b, &fence_b).await;
    c.publish(&a, &fence_a).await;

    for (sub, name) in [
        (&mut dur_a, "durable of a"),
        (&mut live_a, "plain subscriber of a"),
    ] {
        for want in [&to_a1, &to_a2, &fence_a] {
            let d = expect(sub, want, name).await;
            assert_eq!(d.subject, a, "{name}: subject");
            ack(d, name).await;
        }
    }
    for want in [&to_b, &fence_b] {
        let d = expect(&mut dur_b, want, "durable of b").await;
        assert_eq!(d.subject, b);
        ack(d, "durable of b").await;
    }
    for (want, subject) in [
        (&to_a1, &a),
        (&to_b, &b),
        (&to_a2, &a),
        (&fence_b, &b),
        (&fence_a, &a),
    ] {
        let d = expect(&mut all, want, "wildcard subscriber").await;
        assert_eq!(d.subject, *subject, "wildcard subscriber: concrete subject");
        assert!(!d.is_durable());
    }
    for bad in ["a.b", "*", ">", "a b"] {
        assert!(
            Subject::agent_commands(&AgentId::new(bad)).is_err(),
            "agent id `{bad}` must be refused"
        );
    }
    f.cleanup(&c.ns).await;
}

/// Shared subjects: every plain subscriber gets every message, in order, and only the
/// subject's own messages.
pub async fn shared_subjects_fan_out<F: BusFactory>(f: &F) {
    let c = setup(f).await;
    let mut r1 = c
        .subscribe(&Subject::results(), SubscribeOpts::live())
        .await;
    let mut r2 = c
        .subscribe(&Subject::results(), SubscribeOpts::live())
        .await;
    let mut h1 = c
        .subscribe(&Subject::heartbeats(), SubscribeOpts::live())
        .await;
    let mut h2 = c
        .subscribe(&Subject::heartbeats(), SubscribeOpts::live())
        .await;
    let results: Vec<Envelope> = (0..3).map(|i| c.env(result(&format!("l{i}")))).collect();
    let beats: Vec<Envelope> = (0..2).map(|i| c.env(heartbeat(i))).collect();
    for (i, r) in results.iter().enumerate() {
        c.publish(&Subject::results(), r).await;
        if let Some(hb) = beats.get(i) {
            c.publish(&Subject::heartbeats(), hb).await;
        }
    }
    let fence = c.env(heartbeat(99));
    c.publish(&Subject::heartbeats(), &fence).await;
    for (sub, name) in [
        (&mut r1, "results subscriber 1"),
        (&mut r2, "results subscriber 2"),
    ] {
        for want in &results {
            expect(sub, want, name).await;
        }
    }
    for (sub, name) in [
        (&mut h1, "heartbeat subscriber 1"),
        (&mut h2, "heartbeat subscriber 2"),
    ] {
        for want in beats.iter().chain([&fence]) {
            expect(sub, want, name).await;
        }
    }

    // Hub beacons: every agent hears every hub.
    let mut a1 = c.subscribe(&Subject::hubs(), SubscribeOpts::live()).await;
    let mut a2 = c.subscribe(&Subject::hubs(), SubscribeOpts::live()).await;
    let beacons: Vec<Envelope> = ["hub-a", "hub-b"]
        .iter()
        .map(|hub| {
            c.env(HubBeacon {
                hub: (*hub).into(),
                seq: 1,
            })
        })
        .collect();
    for b in &beacons {
        c.publish(&Subject::hubs(), b).await;
    }
    for (sub, name) in [
        (&mut a1, "beacon subscriber 1"),
        (&mut a2, "beacon subscriber 2"),
    ] {
        for want in &beacons {
            expect(sub, want, name).await;
        }
    }

    // Run control: every agent of a run reads it through its own durable; other runs' do not.
    let (r1, r2) = (RunId::new("r1"), RunId::new("r2"));
    let s1 = Subject::run_control(&r1).expect("run subject");
    let s2 = Subject::run_control(&r2).expect("run subject");
    let mut agents_of_r1 = Vec::new();
    for name in ["agent-x-r1", "agent-y-r1"] {
        agents_of_r1.push((c.subscribe(&s1, SubscribeOpts::durable(name)).await, name));
    }
    let mut agent_of_r2 = c.subscribe(&s2, SubscribeOpts::durable("agent-x-r2")).await;
    let pause = c.env(Control::Pause { run: r1.clone() });
    let stop2 = c.env(Control::Stop { run: r2.clone() });
    let resume = c.env(Control::Resume { run: r1.clone() });
    c.publish(&s1, &pause).await;
    c.publish(&s2, &stop2).await;
    c.publish(&s1, &resume).await;
    for (sub, name) in &mut agents_of_r1 {
        ack(expect(sub, &pause, name).await, name).await;
        ack(expect(sub, &resume, name).await, name).await;
    }
    ack(
        expect(&mut agent_of_r2, &stop2, "agent of r2").await,
        "agent of r2",
    )
    .await;
    let mut every_run = c
        .subscribe(
            &Subject::all_run_controls(),
            SubscribeOpts::live().deliver(Deliver::All),
        )
        .await;
    for want in [&pause, &stop2, &resume] {
        expect(&mut every_run, want, "replay of every run's control").await;
    }
    f.cleanup(&c.ns).await;
}

/// Per-hub results: durables of two hubs on `results.hubA` and `results.hubB` each receive
/// only their own hub's results, a durable on `results` receives none of them (and they none
/// of its), `results.*` sees every hub's but not `results`'s, and `results.hubA` is
/// persisted: a durable keeps what was published before it existed and while nobody read it.
pub async fn hub_results_reach_only_their_hub<F: BusFactory>(f: &F) {
    let c = setup(f).await;
    let hub_a = Subject::hub_results("hubA").expect("valid hub id");
    let hub_b = Subject::hub_results("hubB").expect("valid hub id");
    let shared = Subject::results();
    let before = c.env(result("a-before"));
    c.publish(&hub_a, &before).await;

    let mut dur_a = c
        .subscribe(&hub_a, SubscribeOpts::durable("hubA-results"))
        .await;
    let mut dur_b = c
        .subscribe(&hub_b, SubscribeOpts::durable("hubB-results"))
        .await;
    let mut dur_shared = c
        .subscribe(&shared, SubscribeOpts::durable("hub-results"))
        .await;
    let mut every_hub = c
        .subscribe(&Subject::all_hub_results(), SubscribeOpts::live())
        .await;

    let a1 = c.env(result("a1"));
    let b1 = c.env(result("b1"));
    let s1 = c.env(result("s1"));
    let a2 = c.env(result("a2"));
    c.publish(&hub_a, &a1).await;
    c.publish(&hub_b, &b1).await;
    c.publish(&shared, &s1).await;
    c.publish(&hub_a, &a2).await;
    let fence_a = c.env(result("fence-a"));
    let fence_b = c.env(result("fence-b"));
    let fence_s = c.env(result("fence-s"));
    c.publish(&hub_b, &fence_b).await;
    c.publish(&shared, &fence_s).await;
    c.publish(&hub_a, &fence_a).await;

    for want in [&before, &a1, &a2, &fence_a] {
        let d = expect(&mut dur_a, want, "durable of hubA").await;
        assert_eq!(d.subject, hub_a, "durable of hubA: subject");
        assert!(d.is_durable());
        ack(d, "durable of hubA").await;
    }
    for want in [&b1, &fence_b] {
        let d = expect(&mut dur_b, want, "durable of hubB").await;
        assert_eq!(d.subject, hub_b, "durable of hubB: subject");
        ack(d, "durable of hubB").await;
    }
    for want in [&s1, &fence_s] {
        let d = expect(
            &mut dur_shared,
            want,
            "durable on `results` (no hub's results)",
        )
        .await;
        assert_eq!(d.subject, shared, "durable on `results`: subject");
        ack(d, "durable on `results`").await;
    }
    for (want, subject) in [
        (&a1, &hub_a),
        (&b1, &hub_b),
        (&a2, &hub_a),
        (&fence_b, &hub_b),
        (&fence_a, &hub_a),
    ] {
        let d = expect(&mut every_hub, want, "`results.*` subscriber").await;
        assert_eq!(
            d.subject, *subject,
            "`results.*` subscriber: concrete subject"
        );
    }

    // Persisted: what is published while hubA reads nothing waits for its durable.
    drop(dur_a);
    let while_away = c.env(result("a-while-away"));
    c.publish(&hub_a, &while_away).await;
    let fence_b2 = c.env(result("fence-b2"));
    c.publish(&hub_b, &fence_b2).await;
    let mut dur_a = c
        .subscribe(&hub_a, SubscribeOpts::durable("hubA-results"))
        .await;
    let d = expect(
        &mut dur_a,
        &while_away,
        "durable of hubA resumed after its last ack",
    )
    .await;
    assert_eq!(d.delivered, 1);
    ack(d, "durable of hubA").await;
    ack(
        expect(
            &mut dur_b,
            &fence_b2,
            "durable of hubB, after hubA's absence",
        )
        .await,
        "durable of hubB",
    )
    .await;

    // A hub's durable stays bound to its subject; only results go there.
    match c
        .bus
        .subscribe(&hub_b, SubscribeOpts::durable("hubA-results"))
        .await
    {
        Err(BusError::DurableMismatch { .. }) => {}
        other => panic!("hubA's durable on results.hubB: expected DurableMismatch, got {other:?}"),
    }
    match c.bus.publish(&hub_a, &c.env(heartbeat(1))).await {
        Err(BusError::WrongSubject { .. }) => {}
        other => panic!("a heartbeat on results.hubA: expected WrongSubject, got {other:?}"),
    }
    for bad in ["a.b", "*", ">", "a b", ""] {
        assert!(
            Subject::hub_results(bad).is_err(),
            "hub id `{bad}` must be refused"
        );
    }
    f.cleanup(&c.ns).await;
}

/// Durables keep what was published before anyone subscribed, resume after the last ack,
/// and independent durables each get every message.
pub async fn durable_keeps_messages_published_before_subscribing<F: BusFactory>(f: &F) {
    let c = setup(f).await;
    let results = Subject::results();
    let early: Vec<Envelope> = (0..3)
        .map(|i| c.env(result(&format!("early{i}"))))
        .collect();
    for e in &early {
        c.publish(&results, e).await;
    }
    let reg = c.env(register("a1"));
    c.publish(&Subject::registrations(), &reg).await;

    let mut hub = c.subscribe(&results, SubscribeOpts::durable("hub")).await;
    for want in &early {
        let d = expect(&mut hub, want, "durable created after the publishes").await;
        assert!(d.is_durable());
        assert_eq!(d.delivered, 1);
        ack(d, "hub").await;
    }
    drop(hub);
    let mut regs = c
        .subscribe(
            &Subject::registrations(),
            SubscribeOpts::durable("hub-registrations"),
        )
        .await;
    ack(
        expect(&mut regs, &reg, "registrations durable").await,
        "registrations",
    )
    .await;

    let while_away = c.env(result("while-away"));
    c.publish(&results, &while_away).await;
    let mut hub = c.subscribe(&results, SubscribeOpts::durable("hub")).await;
    ack(
        expect(&mut hub, &while_away, "durable resumed after its last ack").await,
        "hub",
    )
    .await;

    let mut late = c
        .subscribe(
            &results,
            SubscribeOpts::durable("late").deliver(Deliver::New),
        )
        .await;
    let fresh = c.env(result("fresh"));
    c.publish(&results, &fresh).await;
    ack(
        expect(
            &mut late,
            &fresh,
            "durable with Deliver::New skips the backlog",
        )
        .await,
        "late",
    )
    .await;
    ack(
        expect(&mut hub, &fresh, "the first durable also gets it").await,
        "hub",
    )
    .await;
    f.cleanup(&c.ns).await;
}

/// A plain subscription with `Deliver::All` replays what is stored, then goes live; it is
/// refused on subjects that are not persisted.
pub async fn deliver_all_replays_without_durable<F: BusFactory>(f: &F) {
    let c = setup(f).await;
    let results = Subject::results();
    let stored: Vec<Envelope> = (0..2).map(|i| c.env(result(&format!("s{i}")))).collect();
    for e in &stored {
        c.publish(&results, e).await;
    }
    let mut replay = c
        .subscribe(&results, SubscribeOpts::live().deliver(Deliver::All))
        .await;
    for want in &stored {
        let d = expect(&mut replay, want, "replay").await;
        assert!(!d.is_durable(), "a replay is not durable");
    }
    let live = c.env(result("live"));
    c.publish(&results, &live).await;
    expect(&mut replay, &live, "replay goes live").await;

    let hb = Subject::heartbeats();
    for opts in [
        SubscribeOpts::durable("hb"),
        SubscribeOpts::live().deliver(Deliver::All),
    ] {
        match c.bus.subscribe(&hb, opts.clone()).await {
            Err(BusError::NotPersisted { .. }) => {}
            other => panic!("{opts:?} on heartbeats: expected NotPersisted, got {other:?}"),
        }
    }
    f.cleanup(&c.ns).await;
}

/// Two subscribers of one durable share the work: each message goes to one of them.
pub async fn durable_work_is_shared<F: BusFactory>(f: &F) {
    let c = setup(f).await;
    let results = Subject::results();
    let opts = SubscribeOpts::durable("workers").ack_wait_ms(60_000);
    let mut w1 = c.subscribe(&results, opts.clone()).await;
    let mut w2 = c.subscribe(&results, opts).await;
    let sent: Vec<Envelope> = (0..4).map(|i| c.env(result(&format!("w{i}")))).collect();
    for e in &sent {
        c.publish(&results, e).await;
    }
    // Each worker holds its delivery unacked while the other takes the next one.
    let mut held = Vec::new();
    for round in 0..2 {
        held.push(recv(&mut w1, &format!("worker 1, round {round}")).await);
        held.push(recv(&mut w2, &format!("worker 2, round {round}")).await);
    }
    let ids: HashSet<_> = held.iter().map(|d| d.envelope.id.clone()).collect();
    let want: HashSet<_> = sent.iter().map(|e| e.id.clone()).collect();
    assert_eq!(
        ids, want,
        "every message exactly once across the two workers"
    );
    for d in held {
        ack(d, "worker").await;
    }
    drop(w2);
    let fence = c.env(result("fence"));
    c.publish(&results, &fence).await;
    ack(
        expect(&mut w1, &fence, "nothing left after the acks").await,
        "worker 1",
    )
    .await;
    f.cleanup(&c.ns).await;
}

/// A delivery not acked within `ack_wait` comes again, a nak'ed one comes again at once,
/// `delivered` counts, and an acked one does not come again.
pub async fn unacked_and_naked_are_redelivered<F: BusFactory>(f: &F) {
    let c = setup(f).await;
    let results = Subject::results();
    let mut sub = c
        .subscribe(
            &results,
            SubscribeOpts::durable("redeliver").ack_wait_ms(1_000),
        )
        .await;
    let m1 = c.env(result("m1"));
    c.publish(&results, &m1).await;
    let d = expect(&mut sub, &m1, "first delivery").await;
    assert_eq!(d.delivered, 1);
    drop(d); // neither acked nor nak'ed
    let d = expect(&mut sub, &m1, "redelivery after ack_wait").await;
    assert_eq!(d.delivered, 2, "second delivery");
    d.nak().await.expect("nak");
    let d = expect(&mut sub, &m1, "redelivery after nak").await;
    assert_eq!(d.delivered, 3, "third delivery");
    ack(d, "m1").await;

    // m2 is held past ack_wait: had m1's ack been lost, m1 (due earlier) would come first.
    let m2 = c.env(result("m2"));
    c.publish(&results, &m2).await;
    drop(expect(&mut sub, &m2, "m2").await);
    let d = expect(&mut sub, &m2, "m2 redelivered, m1 not").await;
    assert_eq!(d.delivered, 2);
    ack(d, "m2").await;
    f.cleanup(&c.ns).await;
}

/// Stale heartbeats and downloads are dropped when read (on the reader's clock) and
/// counted; registrations are delivered however old.
pub async fn stale_messages_are_dropped_registrations_kept<F: BusFactory>(f: &F) {
    let c = setup(f).await;
    let now = c.clock.now_ms();
    let old = now - 600_000;

    let mut beats = c
        .subscribe(&Subject::heartbeats(), SubscribeOpts::live())
        .await;
    let stale_hb = c.ttl.envelope(heartbeat(1), old);
    let fresh_hb = c.env(heartbeat(2));
    c.publish(&Subject::heartbeats(), &stale_hb).await;
    c.publish(&Subject::heartbeats(), &fresh_hb).await;
    expect(&mut beats, &fresh_hb, "heartbeats").await;
    assert_eq!(
        beats.dropped_expired(),
        1,
        "the stale heartbeat was dropped"
    );

    let a = agent("a");
    let stale_dl = c.ttl.envelope(download("stale"), old);
    let stale_alloc = c.ttl.envelope(
        Command::Allocate {
            run: RunId::new("r1"),
            config: serde_json::json!({}),
            allow_networks: Vec::new(),
        },
        old,
    );
    let fresh_dl = c.env(download("fresh"));
    for e in [&stale_dl, &stale_alloc, &fresh_dl] {
        c.publish(&a, e).await;
    }
    let ancient = c.ttl.envelope(register("a1"), now - 30 * 86_400_000);
    let mut forged = c.ttl.envelope(register("a2"), now - 30 * 86_400_000);
    forged.ttl_ms = Some(1);
    c.publish(&Subject::registrations(), &ancient).await;
    c.publish(&Subject::registrations(), &forged).await;

    let mut cmds = c.subscribe(&a, SubscribeOpts::durable("agent-a")).await;
    ack(
        expect(&mut cmds, &fresh_dl, "agent commands").await,
        "agent",
    )
    .await;
    assert_eq!(
        cmds.dropped_expired(),
        2,
        "the stale download and allocation were dropped"
    );

    let mut regs = c
        .subscribe(
            &Subject::registrations(),
            SubscribeOpts::durable("hub-registrations"),
        )
        .await;
    for want in [&ancient, &forged] {
        ack(
            expect(&mut regs, want, "old registrations are delivered").await,
            "registrations",
        )
        .await;
    }
    assert_eq!(regs.dropped_expired(), 0);

    // Fresh when published, stale when read: the reader's clock decides.
    let soon_stale = c.env(download("soon-stale"));
    c.publish(&a, &soon_stale).await;
    c.clock.advance(c.ttl.download_ttl_ms + 1);
    let fence = c.env(download("fence"));
    c.publish(&a, &fence).await;
    let stats = cmds.stats();
    let mut stream = cmds.into_stream();
    let d = tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("fence in time")
        .expect("open")
        .expect("ok");
    assert_eq!(
        d.envelope.id, fence.id,
        "the message that went stale in the queue was dropped"
    );
    assert_eq!(stats.dropped_expired(), 3);
    ack(d, "fence").await;
    f.cleanup(&c.ns).await;
}

/// Allocation replies on `allocations` reach every live subscriber (fan-out), carry only
/// `allocated` messages, are not persisted (no durable, no replay), and a stale one (older
/// than `allocate_ttl_ms` on the reader's clock, when sent or when read) is dropped.
pub async fn allocation_replies_are_live_and_stale_ones_dropped<F: BusFactory>(f: &F) {
    let c = setup(f).await;
    let allocations = Subject::allocations();
    let mut hub1 = c.subscribe(&allocations, SubscribeOpts::live()).await;
    let mut hub2 = c.subscribe(&allocations, SubscribeOpts::live()).await;
    let old = c.clock.now_ms() - 600_000;
    let stale = c.ttl.envelope(allocated("r-stale", true), old);
    assert_eq!(
        stale.ttl_ms,
        Some(c.ttl.allocate_ttl_ms),
        "an allocation reply lives as long as an allocate command"
    );
    let ok = c.env(allocated("r1", true));
    let refused = c.env(allocated("r2", false));
    c.publish(&allocations, &stale).await;
    c.publish(&allocations, &ok).await;
    // Other subjects' messages do not show up on `allocations`.
    c.publish(&Subject::heartbeats(), &c.env(heartbeat(1)))
        .await;
    c.publish(&allocations, &refused).await;
    for (sub, name) in [(&mut hub1, "hub 1"), (&mut hub2, "hub 2")] {
        let d = expect(sub, &ok, name).await;
        assert_eq!(d.subject, allocations, "{name}: subject");
        assert!(!d.is_durable(), "{name}: a live delivery");
        let d = expect(sub, &refused, name).await;
        let Message::Allocated(reply) = &d.envelope.body else {
            panic!("{name}: not an allocation reply: {:?}", d.envelope.body);
        };
        assert_eq!(
            (reply.ok, reply.error.as_deref()),
            (false, Some("run `r2`: refused")),
            "{name}"
        );
        assert_eq!(
            sub.dropped_expired(),
            1,
            "{name}: the stale reply was dropped"
        );
    }

    // Fresh when published, stale when read: the reader's clock decides.
    let soon_stale = c.env(allocated("r3", true));
    c.publish(&allocations, &soon_stale).await;
    expect(&mut hub2, &soon_stale, "hub 2 reads it in time").await;
    c.clock.advance(c.ttl.allocate_ttl_ms + 1);
    let fence = c.env(allocated("fence", true));
    c.publish(&allocations, &fence).await;
    expect(&mut hub1, &fence, "hub 1, after the reply went stale").await;
    assert_eq!(
        hub1.dropped_expired(),
        2,
        "the reply that went stale before it was read was dropped"
    );

    // Not persisted: no durable, no replay; and only `allocated` messages go there.
    for opts in [
        SubscribeOpts::durable("hub-allocations"),
        SubscribeOpts::live().deliver(Deliver::All),
    ] {
        match c.bus.subscribe(&allocations, opts.clone()).await {
            Err(BusError::NotPersisted { .. }) => {}
            other => panic!("{opts:?} on allocations: expected NotPersisted, got {other:?}"),
        }
    }
    for (subject, envelope, what) in [
        (
            &allocations,
            c.env(heartbeat(2)),
            "a heartbeat on allocations",
        ),
        (
            &Subject::results(),
            c.env(allocated("r4", true)),
            "an allocation reply on results",
        ),
    ] {
        match c.bus.publish(subject, &envelope).await {
            Err(BusError::WrongSubject { .. }) => {}
            other => panic!("{what}: expected WrongSubject, got {other:?}"),
        }
    }
    f.cleanup(&c.ns).await;
}

/// Log batches on `logs` are stored: a durable created after they were published receives
/// them intact (every line, level and character); they carry `log_ttl_ms`, and a stale one
/// (older than that on the reader's clock, when sent or when read) is dropped and counted;
/// only `log` messages go on `logs`.
pub async fn log_batches_are_durable_and_stale_ones_dropped<F: BusFactory>(f: &F) {
    let c = setup(f).await;
    let logs = Subject::logs();
    let old = c.clock.now_ms() - c.ttl.log_ttl_ms - 1_000;
    let stale = c
        .ttl
        .envelope(log_batch("r1", &[(LogLevel::Info, "stale")]), old);
    assert_eq!(
        stale.ttl_ms,
        Some(c.ttl.log_ttl_ms),
        "a log batch lives log_ttl_ms"
    );
    let batch = c.env(log_batch(
        "r1",
        &[
            (LogLevel::Trace, "t"),
            (
                LogLevel::Debug,
                "http://h/private: disallowed by robots.txt",
            ),
            (LogLevel::Info, "downloader allocated"),
            (LogLevel::Warn, "http://h/x?q=\"é\": http status 404\n\ttab"),
            (LogLevel::Error, "allocation refused: qps: must be positive"),
            (LogLevel::Warn, ""),
        ],
    ));
    let other_run = c.env(log_batch("r2", &[(LogLevel::Info, "other run")]));
    c.publish(&logs, &stale).await;
    c.publish(&logs, &batch).await;
    c.publish(&logs, &other_run).await;

    let mut hub = c.subscribe(&logs, SubscribeOpts::durable("hub-logs")).await;
    let d = expect(
        &mut hub,
        &batch,
        "log batch published before the durable existed",
    )
    .await;
    assert!(d.is_durable());
    assert_eq!(d.subject, logs);
    let Message::Log(got) = &d.envelope.body else {
        panic!("not a log batch: {:?}", d.envelope.body);
    };
    assert_eq!(got.lines.len(), 6, "every line arrived");
    assert_eq!(
        hub.dropped_expired(),
        1,
        "the stale batch was dropped when read"
    );
    ack(d, "hub-logs").await;
    ack(
        expect(&mut hub, &other_run, "batches of every run on one subject").await,
        "hub-logs",
    )
    .await;

    // Fresh when published, stale when read: the reader's clock decides.
    let soon_stale = c.env(log_batch("r1", &[(LogLevel::Info, "soon stale")]));
    c.publish(&logs, &soon_stale).await;
    c.clock.advance(c.ttl.log_ttl_ms + 1);
    let fence = c.env(log_batch("r1", &[(LogLevel::Info, "fence")]));
    c.publish(&logs, &fence).await;
    ack(
        expect(&mut hub, &fence, "the fence, after a batch went stale").await,
        "hub-logs",
    )
    .await;
    assert_eq!(hub.dropped_expired(), 2);

    for (subject, envelope, what) in [
        (&logs, c.env(result("x")), "a result on logs"),
        (
            &Subject::results(),
            c.env(log_batch("r1", &[(LogLevel::Info, "x")])),
            "a log batch on results",
        ),
    ] {
        match c.bus.publish(subject, &envelope).await {
            Err(BusError::WrongSubject { .. }) => {}
            other => panic!("{what}: expected WrongSubject, got {other:?}"),
        }
    }
    f.cleanup(&c.ns).await;
}

/// A malformed payload is an error naming the subject, never a panic; the subscription
/// goes on; a durable one is not redelivered.
pub async fn malformed_payloads_are_errors<F: BusFactory>(f: &F) {
    let c = setup(f).await;
    let results = Subject::results();
    let full = results.full(&c.ns);
    let mut durable = c
        .subscribe(&results, SubscribeOpts::durable("m").ack_wait_ms(1_000))
        .await;
    let mut live = c.subscribe(&results, SubscribeOpts::live()).await;
    let wrong_kind = c.env(heartbeat(1)).encode().expect("encode");
    let future_version =
        Bytes::from_static(br#"{"v":9,"id":"x","sent_ms":1,"kind":"result","body":{}}"#);
    for payload in [
        Bytes::from_static(b"not json \xff"),
        wrong_kind,
        future_version,
    ] {
        c.bus
            .publish_raw(&results, payload)
            .await
            .expect("raw publish");
    }
    let good = c.env(result("good"));
    c.publish(&results, &good).await;

    for (sub, name) in [(&mut durable, "durable"), (&mut live, "plain")] {
        let e = recv_err(sub, name).await;
        assert!(matches!(e, BusError::Malformed { .. }), "{name}: {e}");
        assert!(
            e.to_string().contains(&format!("subject `{full}`")),
            "{name}: error names the subject: {e}"
        );
        assert!(e.to_string().contains("not a JSON envelope"), "{name}: {e}");
        let e = recv_err(sub, name).await;
        assert!(
            e.to_string()
                .contains("a `heartbeat` message on a `result` subject"),
            "{name}: {e}"
        );
        let e = recv_err(sub, name).await;
        assert!(
            matches!(e, BusError::UnsupportedVersion { version: 9, .. }),
            "{name}: {e}"
        );
        assert!(!e.is_retryable());
        expect(sub, &good, name).await;
        assert_eq!(sub.malformed(), 3, "{name}: malformed count");
    }
    // `good` is held past ack_wait: had the malformed ones not been terminated, they would
    // come again first.
    let d = expect(&mut durable, &good, "only the good message is redelivered").await;
    assert_eq!(d.delivered, 2);
    ack(d, "good").await;
    f.cleanup(&c.ns).await;
}

/// Publishes and subscriptions are checked before anything is sent: wrong kind, wildcard,
/// size, durable names; a durable bound to one subject refuses another.
pub async fn publishes_and_subscriptions_are_checked<F: BusFactory>(f: &F) {
    let mut config = suite_config();
    config.max_message_bytes = 2_048;
    // Permanent errors must not be retried: with these back-offs a retry would take minutes.
    config.retry = RetryPolicy {
        retries: 3,
        backoff_initial_ms: 60_000,
        backoff_max_ms: 60_000,
    };
    let c = setup_with(f, config).await;
    let bus = &c.bus;
    let check = |r: Result<(), BusError>, what: &str| match r {
        Err(e) if !e.is_retryable() => e,
        other => panic!("{what}: expected a permanent error, got {other:?}"),
    };
    let e = check(
        bus.publish(&Subject::results(), &c.env(heartbeat(1))).await,
        "heartbeat on results",
    );
    assert!(matches!(e, BusError::WrongSubject { .. }), "{e}");
    let e = check(
        bus.publish(&Subject::all_agent_commands(), &c.env(Command::Shutdown))
            .await,
        "wildcard",
    );
    assert!(matches!(e, BusError::WrongSubject { .. }), "{e}");
    let mut big = result("big");
    big.outcome
        .items
        .push(serde_json::json!({ "text": "x".repeat(4_096) }));
    let e = check(
        bus.publish(&Subject::results(), &c.env(big)).await,
        "too large",
    );
    assert!(matches!(e, BusError::TooLarge { .. }), "{e}");

    let sub = |subject: Subject, opts: SubscribeOpts| {
        let bus = bus.clone();
        async move { bus.subscribe(&subject, opts).await.map(|_| ()) }
    };
    let e = check(
        sub(Subject::results(), SubscribeOpts::durable("bad.name")).await,
        "bad durable name",
    );
    assert!(matches!(e, BusError::InvalidName { .. }), "{e}");
    let _bound = c
        .subscribe(&Subject::results(), SubscribeOpts::durable("bound"))
        .await;
    let e = check(
        sub(Subject::registrations(), SubscribeOpts::durable("bound")).await,
        "durable rebinding",
    );
    assert!(matches!(e, BusError::DurableMismatch { .. }), "{e}");
    sub(Subject::results(), SubscribeOpts::durable("bound"))
        .await
        .expect("joining a durable with its subject");
    f.cleanup(&c.ns).await;
}

/// A publish retried with the same envelope (same id) is stored once.
pub async fn duplicate_publishes_are_stored_once<F: BusFactory>(f: &F) {
    let c = setup(f).await;
    let results = Subject::results();
    let once = c.env(result("once"));
    c.publish(&results, &once).await;
    c.publish(&results, &once).await;
    let fence = c.env(result("fence"));
    c.publish(&results, &fence).await;
    let mut sub = c.subscribe(&results, SubscribeOpts::durable("dedup")).await;
    ack(expect(&mut sub, &once, "the message").await, "dedup").await;
    ack(
        expect(
            &mut sub,
            &fence,
            "the fence right after: the copy was not stored",
        )
        .await,
        "dedup",
    )
    .await;
    f.cleanup(&c.ns).await;
}

/// With the server unreachable, publish and subscribe try `retries + 1` times, then fail
/// with `Exhausted` (retryable, carrying the last error).
pub async fn unreachable_bus_fails_after_retries<F: BusFactory>(f: &F) {
    let mut config = suite_config();
    config.retry = RetryPolicy {
        retries: 2,
        backoff_initial_ms: 10,
        backoff_max_ms: 20,
    };
    config.operation_timeout_ms = 500;
    let bus = f.open_unreachable(config).await;
    let clock = ManualClock::new(SystemClock.now_ms());
    let ttl = TtlPolicy::default();
    let attempts = |r: Result<(), BusError>, what: &str| match r {
        Err(BusError::Exhausted { attempts, last, .. }) => {
            assert!(last.is_retryable(), "{what}: last error {last}");
            attempts
        }
        other => panic!("{what}: expected Exhausted, got {other:?}"),
    };
    let r = tokio::time::timeout(
        WAIT,
        bus.publish(
            &Subject::results(),
            &ttl.envelope(result("x"), clock.now_ms()),
        ),
    )
    .await
    .expect("publish gives up in time");
    assert_eq!(attempts(r, "publish result"), 3);
    let r = tokio::time::timeout(
        WAIT,
        bus.publish(
            &Subject::heartbeats(),
            &ttl.envelope(heartbeat(1), clock.now_ms()),
        ),
    )
    .await
    .expect("publish gives up in time");
    assert_eq!(attempts(r, "publish heartbeat"), 3);
    for opts in [SubscribeOpts::durable("d"), SubscribeOpts::live()] {
        let r = tokio::time::timeout(WAIT, bus.subscribe(&Subject::results(), opts.clone()))
            .await
            .expect("subscribe gives up in time")
            .map(|_| ());
        assert_eq!(attempts(r, &format!("subscribe {opts:?}")), 3);
    }
}
