//! Model test of every frontier backend (the embedded store always; Redis on the server named
//! by `SILK_TEST_REDIS`, each case under its own key prefix, deleted after it; Redis again on
//! a 3-master Redis Cluster the test starts): random sequences of enqueue (random hosts, URLs with
//! duplicates, priorities), lease, ack (Done / Retry / Failed / Dropped, stale ids too),
//! clock advances, host delays, explicit expiry and reopen, checked step by step against a
//! simple in-memory model:
//!
//! - enqueue and ack outcomes are exactly the model's;
//! - every leased request is pending in the model (never leased twice at once), out of its
//!   back-off, on a host below its concurrency limit and past its delay, and has the highest
//!   effective priority (design §3 aging) among the requests that could be leased at that
//!   point; a lease that returns fewer than asked leaves no leasable request behind;
//! - the counters equal the model's after every step;
//! - at the end, leasing and acking everything finishes every request exactly as the model
//!   says, and every request was leased at least once.

use proptest::prelude::*;
use silk_core::{ManualClock, Request};
use silk_frontier::{
    AckResult, EmbeddedFrontier, FrontierConfig, FrontierStats, FrontierStore, Lease, LeaseId,
    Outcome, RedisFrontier,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const HOSTS: [&str; 4] = ["a.test", "b.test", "c.test:8080", "d.test"];
const T0: u64 = 20_000 * 86_400_000;

#[derive(Debug, Clone)]
enum Op {
    Enqueue(Vec<(usize, u8, i32)>),
    Lease(usize),
    Ack(usize, u8),
    Advance(u64),
    SetDelay(usize, u64),
    Expire,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop::collection::vec((0..HOSTS.len(), 0u8..12, -2i32..4), 1..8).prop_map(Op::Enqueue),
        4 => (1usize..6).prop_map(Op::Lease),
        4 => (any::<usize>(), 0u8..5).prop_map(|(i, k)| Op::Ack(i, k)),
        3 => prop_oneof![Just(0u64), 1u64..60, 60u64..400, 400u64..3_000].prop_map(Op::Advance),
        1 => (0..HOSTS.len(), prop_oneof![Just(0u64), 1u64..300]).prop_map(|(h, d)| Op::SetDelay(h, d)),
        1 => Just(Op::Expire),
        1 => Just(Op::Reopen),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Pending { not_before: u64 },
    InFlight { lease: u64, deadline: u64 },
    Finished(Fin),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Fin {
    Success,
    Failed,
    Dropped,
}

#[derive(Debug, Clone)]
struct MReq {
    host: usize,
    priority: i32,
    created: u64,
    retries: u32,
    state: State,
    leased_once: bool,
}

struct Model {
    cfg: FrontierConfig,
    seen: HashSet<(u64, String)>,
    reqs: BTreeMap<(String, u64), MReq>,
    last_start: HashMap<usize, u64>,
    host_delay: HashMap<usize, u64>,
    leases: Vec<u64>,
    duplicates: u64,
    retries: u64,
}

impl Model {
    fn in_flight(&self, host: usize) -> u32 {
        self.reqs
            .values()
            .filter(|r| r.host == host && matches!(r.state, State::InFlight { .. }))
            .count() as u32
    }

    fn expire_all(&mut self, now: u64) -> usize {
        let mut n = 0;
        for r in self.reqs.values_mut() {
            if let State::InFlight { deadline, .. } = r.state
                && deadline <= now
            {
                r.state = State::Pending { not_before: 0 };
                n += 1;
            }
        }
        n
    }

    fn host_ready(&self, host: usize, now: u64) -> bool {
        let delay = self
            .cfg
            .per_host_delay_ms
            .max(self.host_delay.get(&host).copied().unwrap_or(0));
        self.in_flight(host) < self.cfg.per_host_concurrency
            && self.last_start.get(&host).is_none_or(|s| s + delay <= now)
    }

    fn eligible(&self, now: u64) -> Vec<(String, u64)> {
        self.reqs
            .iter()
            .filter(|(_, r)| matches!(r.state, State::Pending { not_before } if not_before <= now))
            .filter(|(_, r)| self.host_ready(r.host, now))
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn effective(&self, r: &MReq, now: u64) -> f64 {
        let oldest = self
            .reqs
            .values()
            .filter(|r| matches!(r.state, State::Pending { .. }))
            .map(|r| r.created)
            .min()
            .unwrap_or(now);
        let p = f64::from(r.priority);
        let span = now.saturating_sub(oldest);
        if span == 0 {
            return p;
        }
        let alpha = (now.saturating_sub(r.created) as f64 / span as f64).min(1.0);
        if alpha > self.cfg.aging_beta {
            p * alpha.exp2()
        } else {
            p
        }
    }

    fn counts(&self) -> [u64; 9] {
        let mut c = [0u64; 9];
        for r in self.reqs.values() {
            c[0] += 1;
            match r.state {
                State::Pending { .. } => c[2] += 1,
                State::InFlight { .. } => c[1] += 1,
                State::Finished(Fin::Success) => c[3] += 1,
                State::Finished(Fin::Failed) => c[4] += 1,
                State::Finished(Fin::Dropped) => c[5] += 1,
            }
        }
        c[6] = self.duplicates;
        c[7] = self.retries;
        c[8] = c[1] + c[2];
        c
    }
}

fn store_counts(s: &FrontierStats) -> [u64; 9] {
    [
        s.total,
        s.in_flight,
        s.pending,
        s.success,
        s.failed,
        s.dropped,
        s.duplicates,
        s.retries,
        s.left,
    ]
}

fn config() -> FrontierConfig {
    FrontierConfig {
        per_host_concurrency: 2,
        per_host_delay_ms: 20,
        lease_timeout_ms: 1_000,
        max_retries: 2,
        retry_backoff_ms: 100,
        aging_beta: 0.5,
        segment_ms: Some(5_000),
        expected_urls: 64,
        bloom_fp_rate: 0.1,
        exact_dedup: true,
        // Past seen sets are pruned as soon as their segment is over: pruning must not
        // change what the model sees.
        segment_retention_ms: 0,
        // Every pending request in memory: the model picks among all of them (the window
        // has its own conformance check, `a_small_window_loses_nothing`).
        memory_window: silk_frontier::DEFAULT_MEMORY_WINDOW,
    }
}

/// Where a case's frontier lives.
enum Backend {
    Embedded(tempfile::TempDir),
    Redis { url: String, prefix: String },
}

impl Backend {
    async fn open(&self, clock: &ManualClock) -> Arc<dyn FrontierStore> {
        let clock = Arc::new(clock.clone());
        match self {
            Backend::Embedded(dir) => {
                Arc::new(EmbeddedFrontier::open(dir.path(), config(), clock).expect("open"))
            }
            Backend::Redis { url, prefix } => Arc::new(
                RedisFrontier::open(url, prefix, config(), clock)
                    .await
                    .expect("open"),
            ),
        }
    }
}

struct Run {
    backend: Backend,
    clock: ManualClock,
    store: Arc<dyn FrontierStore>,
    model: Model,
}

impl Run {
    async fn open(&mut self) {
        self.store = self.backend.open(&self.clock).await;
    }

    fn now(&self) -> u64 {
        use silk_core::Clock;
        self.clock.now_ms()
    }

    async fn check_stats(&self, step: &str) -> Result<(), TestCaseError> {
        let s = self.store.stats().await.expect("stats");
        prop_assert_eq!(
            store_counts(&s),
            self.model.counts(),
            "after {}: {:?}",
            step,
            s
        );
        Ok(())
    }

    fn take(&mut self, lease: &Lease, now: u64) -> Result<(), TestCaseError> {
        let key = (lease.request.url.clone(), lease.request.created_ms);
        let eligible = self.model.eligible(now);
        prop_assert!(
            eligible.contains(&key),
            "leased {:?} which is not leasable now",
            key
        );
        let best = eligible
            .iter()
            .map(|k| self.model.effective(&self.model.reqs[k], now))
            .fold(f64::NEG_INFINITY, f64::max);
        let mine = self.model.effective(&self.model.reqs[&key], now);
        prop_assert!(
            mine >= best - 1e-9,
            "leased {:?} with effective priority {} < best {}",
            key,
            mine,
            best
        );
        let r = self.model.reqs.get_mut(&key).expect("eligible");
        prop_assert_eq!(lease.request.retries, r.retries);
        prop_assert_eq!(lease.request.priority, r.priority);
        r.state = State::InFlight {
            lease: lease.id.0,
            deadline: lease.deadline_ms,
        };
        r.leased_once = true;
        let host = r.host;
        self.model.last_start.insert(host, now);
        self.model.leases.push(lease.id.0);
        Ok(())
    }

    async fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let now = self.now();
        match op {
            Op::Enqueue(items) => {
                let mut batch = Vec::new();
                let mut want = (0, 0);
                let segment = now / 5_000;
                for &(h, path, priority) in items {
                    let url = format!("https://{}/p{path}", HOSTS[h]);
                    let mut r = Request::from_canonical(url.clone());
                    r.priority = priority;
                    batch.push(r);
                    if self.model.seen.insert((segment, url.clone())) {
                        want.0 += 1;
                        let m = MReq {
                            host: h,
                            priority,
                            created: now,
                            retries: 0,
                            state: State::Pending { not_before: 0 },
                            leased_once: false,
                        };
                        self.model.reqs.insert((url, now), m);
                    } else {
                        want.1 += 1;
                        self.model.duplicates += 1;
                    }
                }
                let got = self.store.enqueue(batch).await.expect("enqueue");
                prop_assert_eq!((got.added, got.duplicates), want);
            }
            Op::Lease(max) => {
                self.model.expire_all(now);
                let leases = self.store.lease(*max).await.expect("lease");
                prop_assert!(leases.len() <= *max);
                for l in &leases {
                    self.take(l, now)?;
                }
                if leases.len() < *max {
                    let left = self.model.eligible(now);
                    prop_assert!(
                        left.is_empty(),
                        "lease returned {} < {} but {:?} could go",
                        leases.len(),
                        max,
                        left
                    );
                }
                for h in 0..HOSTS.len() {
                    prop_assert!(self.model.in_flight(h) <= 2);
                }
            }
            Op::Ack(i, kind) => {
                if self.model.leases.is_empty() {
                    return Ok(());
                }
                let lease = self.model.leases[i % self.model.leases.len()];
                let outcome = match kind {
                    0 => Outcome::Done,
                    1 => Outcome::Retry { reason: "r".into() },
                    2 => Outcome::Failed { reason: "f".into() },
                    3 => Outcome::Dropped { reason: "d".into() },
                    _ => Outcome::Release { reason: "l".into() },
                };
                let want = self.model_ack(lease, &outcome, now);
                let got = self.store.ack(LeaseId(lease), outcome).await.expect("ack");
                prop_assert_eq!(got, want);
            }
            Op::Advance(ms) => self.clock.advance(*ms),
            Op::SetDelay(h, d) => {
                self.store
                    .set_host_delay(HOSTS[*h], *d)
                    .await
                    .expect("set_host_delay");
                self.model.host_delay.insert(*h, *d);
            }
            Op::Expire => {
                let want = self.model.expire_all(now);
                prop_assert_eq!(self.store.expire().await.expect("expire"), want);
            }
            Op::Reopen => {
                self.store.close().await.expect("close");
                self.open().await;
                for r in self.model.reqs.values_mut() {
                    if let State::InFlight { .. } = r.state {
                        r.state = State::Pending { not_before: 0 };
                    }
                }
                self.model.last_start.clear();
            }
        }
        self.check_stats(&format!("{op:?}")).await
    }

    fn model_ack(&mut self, lease: u64, outcome: &Outcome, now: u64) -> AckResult {
        let cfg = self.model.cfg.clone();
        let Some(r) = self
            .model
            .reqs
            .values_mut()
            .find(|r| matches!(r.state, State::InFlight { lease: l, .. } if l == lease))
        else {
            return AckResult::Unknown;
        };
        let State::InFlight { deadline, .. } = r.state else {
            unreachable!()
        };
        if now >= deadline {
            r.state = State::Pending { not_before: 0 };
            return AckResult::Expired;
        }
        match outcome {
            Outcome::Done => {
                r.state = State::Finished(Fin::Success);
                AckResult::Succeeded
            }
            Outcome::Failed { .. } => {
                r.state = State::Finished(Fin::Failed);
                AckResult::Failed
            }
            Outcome::Dropped { .. } => {
                r.state = State::Finished(Fin::Dropped);
                AckResult::Dropped
            }
            Outcome::Release { .. } => {
                r.state = State::Pending { not_before: 0 };
                AckResult::Released
            }
            Outcome::Retry { .. } if r.retries >= cfg.max_retries => {
                r.state = State::Finished(Fin::Failed);
                AckResult::Failed
            }
            Outcome::Retry { .. } => {
                let not_before = now + cfg.retry_backoff(r.retries);
                r.retries += 1;
                r.state = State::Pending { not_before };
                self.model.retries += 1;
                AckResult::Requeued {
                    retries: r.retries,
                    not_before_ms: not_before,
                }
            }
        }
    }

    /// Leases and acks `Done` until nothing is left, jumping the clock as needed.
    async fn drain(&mut self) -> Result<(), TestCaseError> {
        for _ in 0..10_000 {
            let Some(at) = self.store.next_ready_ms().await.expect("next_ready_ms") else {
                break;
            };
            let now = self.now();
            if at > now {
                self.clock.advance(at - now);
            }
            let now = self.now();
            self.model.expire_all(now);
            let leases = self.store.lease(16).await.expect("lease");
            for l in &leases {
                self.take(l, now)?;
            }
            for l in leases {
                let want = self.model_ack(l.id.0, &Outcome::Done, now);
                prop_assert_eq!(
                    self.store.ack(l.id, Outcome::Done).await.expect("ack"),
                    want
                );
            }
        }
        self.check_stats("drain").await?;
        for (k, r) in &self.model.reqs {
            prop_assert!(
                matches!(r.state, State::Finished(_)),
                "{:?} not finished: {:?}",
                k,
                r
            );
            prop_assert!(r.leased_once, "{:?} never leased", k);
        }
        let s = self.store.stats().await.expect("stats");
        prop_assert_eq!(s.left, 0);
        prop_assert_eq!(s.total, self.model.reqs.len() as u64);
        Ok(())
    }
}

async fn run(backend: Backend, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let clock = ManualClock::new(T0);
    let store = backend.open(&clock).await;
    let model = Model {
        cfg: config(),
        seen: HashSet::new(),
        reqs: BTreeMap::new(),
        last_start: HashMap::new(),
        host_delay: HashMap::new(),
        leases: Vec::new(),
        duplicates: 0,
        retries: 0,
    };
    let mut run = Run {
        backend,
        clock,
        store,
        model,
    };
    for op in &ops {
        run.step(op).await?;
    }
    run.drain().await?;
    run.store.close().await.expect("close");
    Ok(())
}

/// Runs a case on Redis under a fresh prefix, and deletes the prefix (pass or fail).
async fn run_on_redis(url: &str, ops: Vec<Op>) -> Result<(), TestCaseError> {
    static CASE: AtomicU64 = AtomicU64::new(0);
    let prefix = format!(
        "model-{}-{}",
        std::process::id(),
        CASE.fetch_add(1, Ordering::Relaxed)
    );
    let backend = Backend::Redis {
        url: url.to_owned(),
        prefix: prefix.clone(),
    };
    let result = run(backend, ops).await;
    RedisFrontier::destroy(url, &prefix)
        .await
        .expect("destroy the case's keys");
    result
}

fn redis_url() -> Option<String> {
    match std::env::var("SILK_TEST_REDIS") {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run this test: set SILK_TEST_REDIS"
            );
            println!("skipped: SILK_TEST_REDIS not set");
            None
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn frontier_matches_model(ops in prop::collection::vec(op(), 1..80)) {
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let dir = tempfile::tempdir().expect("tempdir");
        rt.block_on(run(Backend::Embedded(dir), ops))?;
    }
}

#[test]
fn redis_frontier_matches_model() {
    let Some(url) = redis_url() else { return };
    redis_matches_model(&url, 96);
}

/// The same on a Redis Cluster of the test's own (3 masters).
#[test]
fn redis_cluster_frontier_matches_model() {
    let Some(cluster) = silk_testkit::redis_cluster_for_test(3, 0) else {
        return;
    };
    redis_matches_model(&cluster.url(), 48);
}

fn redis_matches_model(url: &str, cases: u32) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        ..ProptestConfig::default()
    });
    let result = runner.run(&prop::collection::vec(op(), 1..80), |ops| {
        rt.block_on(run_on_redis(url, ops))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
