//! The conformance suite of [`FrontierStore`]: every semantic of the trait, written once,
//! run against every backend (the embedded one in `tests/conformance.rs`, Redis in
//! `tests/redis_conformance.rs`).
//!
//! A backend provides a [`FrontierFactory`]: `open(slot, config, clock)` returns an empty
//! store the first time a slot name is used and the same data when the slot is opened again
//! after the previous handle was closed (a directory for the embedded store, a key prefix for
//! Redis). Time is a [`ManualClock`] the suite moves by hand. Then one line instantiates
//! the suite as one `#[tokio::test]` per check:
//!
//! ```ignore
//! silk_frontier::frontier_conformance_tests!(MyFactory::new());
//! ```
//!
//! The module is always compiled (plain code, no extra dependency), so any crate's tests can
//! use it without a feature flag. It must not be called outside tests: it panics on the first
//! violation, with a message saying which check and what differed.

use crate::config::FrontierConfig;
use crate::store::{AckResult, FrontierStats, FrontierStore, Lease, LeaseId, Outcome};
use async_trait::async_trait;
use silk_core::{ManualClock, Request};
use std::sync::Arc;

/// Opens stores for the suite.
#[async_trait]
pub trait FrontierFactory: Send + Sync {
    /// Opens the store named `slot` (empty the first time, the same data when reopened after
    /// `close`) with `config`, reading time from `clock`.
    async fn open(
        &self,
        slot: &str,
        config: FrontierConfig,
        clock: ManualClock,
    ) -> Arc<dyn FrontierStore>;

    /// Removes what the check stored (keys on a shared server), best effort. Runs after the
    /// check, also when it failed.
    async fn cleanup(&self) {}
}

/// Generates one `#[tokio::test]` per conformance check, each with a fresh factory from
/// `$factory` (an expression evaluated per test). With `optional`, `$factory` is an
/// `Option` of a factory and `None` skips the test (the expression prints why), for
/// backends that need a server. The factory's `cleanup` runs after the check, pass or fail.
#[macro_export]
macro_rules! frontier_conformance_tests {
    (optional $factory:expr) => {
        $crate::frontier_conformance_tests!(@all $factory);
    };
    ($factory:expr) => {
        $crate::frontier_conformance_tests!(@all ::std::option::Option::Some($factory));
    };
    (@all $factory:expr) => {
        $crate::__frontier_conformance_checks!(frontier_conformance_tests!(@each $factory;));
    };
    (@sequence $factory:expr; $($check:ident),* $(,)?) => {
        $(
            $crate::conformance::$check($factory).await;
            $crate::conformance::FrontierFactory::cleanup($factory).await;
        )*
    };
    (@each $factory:expr; $($check:ident),* $(,)?) => {
        $(
            #[::tokio::test]
            async fn $check() {
                let ::std::option::Option::Some(factory) = $factory else { return };
                let factory = ::std::sync::Arc::new(factory);
                let check = ::std::sync::Arc::clone(&factory);
                let outcome = ::tokio::spawn(async move {
                    $crate::conformance::$check(&*check).await
                })
                .await;
                $crate::conformance::FrontierFactory::cleanup(&*factory).await;
                if let Err(e) = outcome {
                    match e.try_into_panic() {
                        Ok(panic) => ::std::panic::resume_unwind(panic),
                        Err(e) => panic!("check {} did not finish: {e}", stringify!($check)),
                    }
                }
            }
        )*
    };
}

/// Runs every conformance check in turn on one factory (a `&dyn FrontierFactory`), with
/// its `cleanup` after each: for a backend whose server a test starts for itself (one
/// server for the whole suite). Use it inside an async test; a failing check panics.
#[macro_export]
macro_rules! frontier_conformance_sequence {
    ($factory:expr) => {
        $crate::__frontier_conformance_checks!(frontier_conformance_tests!(@sequence $factory;))
    };
}

/// Calls `$callback!(…, every check)`: the one list of the conformance checks.
#[doc(hidden)]
#[macro_export]
macro_rules! __frontier_conformance_checks {
    ($callback:ident!($($args:tt)*)) => {
        $crate::$callback! { $($args)*
            dedup_within_segment, dedup_in_next_segment, dedup_forever_without_segments,
            dedup_confirms_bloom_false_positives, bloom_only_dedup_trusts_the_filter,
            created_ms_is_set, per_host_concurrency,
            per_host_delay, set_host_delay, priority_order, aging_flips_order,
            aging_does_not_flip_order, lease_expiry_redispatches, retry_backoff_then_failed,
            failed_and_dropped, release_requeues_without_retry, stale_acks_are_harmless,
            ack_many_mixed, ack_and_enqueue_links, ack_many_and_enqueue_batch,
            next_ready_when_idle, reopen_persists,
            old_seen_sets_are_pruned, closed_store_refuses_calls,
            a_small_window_loses_nothing }
    };
}

/// The suite's start time: not 0 (so that "created_ms = 0 means now" is observable), and
/// the start of a day (so that it starts a segment for every segment length used here).
pub const T0: u64 = 20_000 * 86_400_000;

fn config() -> FrontierConfig {
    FrontierConfig {
        per_host_concurrency: 10,
        per_host_delay_ms: 0,
        lease_timeout_ms: 10_000,
        max_retries: 2,
        retry_backoff_ms: 100,
        aging_beta: 0.5,
        segment_ms: None,
        expected_urls: 10_000,
        bloom_fp_rate: 0.01,
        exact_dedup: true,
        segment_retention_ms: 0,
        memory_window: crate::config::DEFAULT_MEMORY_WINDOW,
    }
}

fn req(url: &str) -> Request {
    Request::from_canonical(url.to_owned())
}

fn req_p(url: &str, priority: i32) -> Request {
    let mut r = req(url);
    r.priority = priority;
    r
}

fn urls(leases: &[Lease]) -> Vec<&str> {
    leases.iter().map(|l| l.request.url.as_str()).collect()
}

struct Case {
    store: Arc<dyn FrontierStore>,
    clock: ManualClock,
    name: &'static str,
}

impl Case {
    async fn new(f: &dyn FrontierFactory, name: &'static str, config: FrontierConfig) -> Self {
        let clock = ManualClock::new(T0);
        let store = f.open(name, config, clock.clone()).await;
        Self { store, clock, name }
    }

    async fn enqueue(&self, requests: Vec<Request>) -> (u64, u64) {
        let o = self
            .store
            .enqueue(requests)
            .await
            .unwrap_or_else(|e| panic!("{}: enqueue: {e}", self.name));
        (o.added, o.duplicates)
    }

    async fn lease(&self, max: usize) -> Vec<Lease> {
        self.store
            .lease(max)
            .await
            .unwrap_or_else(|e| panic!("{}: lease: {e}", self.name))
    }

    async fn ack(&self, id: LeaseId, outcome: Outcome) -> AckResult {
        self.store
            .ack(id, outcome)
            .await
            .unwrap_or_else(|e| panic!("{}: ack: {e}", self.name))
    }

    async fn next_ready(&self) -> Option<u64> {
        self.store
            .next_ready_ms()
            .await
            .unwrap_or_else(|e| panic!("{}: next_ready_ms: {e}", self.name))
    }

    /// The stats, after checking the invariants that hold at every step.
    async fn stats(&self) -> FrontierStats {
        let s = self
            .store
            .stats()
            .await
            .unwrap_or_else(|e| panic!("{}: stats: {e}", self.name));
        let finished = s.success + s.failed + s.dropped;
        assert_eq!(
            s.left,
            s.total - finished,
            "{}: left = total - finished: {s:?}",
            self.name
        );
        assert_eq!(
            s.left,
            s.pending + s.in_flight,
            "{}: left = pending + in_flight: {s:?}",
            self.name
        );
        assert!(
            s.delayed <= s.pending,
            "{}: delayed <= pending: {s:?}",
            self.name
        );
        assert!(
            s.in_memory <= s.pending,
            "{}: in_memory <= pending: {s:?}",
            self.name
        );
        s
    }

    /// Checks `(total, left, in_flight, success, failed, dropped, duplicates)`.
    async fn expect(&self, step: &str, want: [u64; 7]) -> FrontierStats {
        let s = self.stats().await;
        let got = [
            s.total,
            s.left,
            s.in_flight,
            s.success,
            s.failed,
            s.dropped,
            s.duplicates,
        ];
        assert_eq!(
            got, want,
            "{}: {step}: (total, left, in_flight, success, failed, dropped, duplicates)",
            self.name
        );
        s
    }

    async fn close(&self) {
        self.store
            .close()
            .await
            .unwrap_or_else(|e| panic!("{}: close: {e}", self.name));
    }
}

/// Same URL twice in one batch and again in a later batch: one added, the rest duplicates.
pub async fn dedup_within_segment(f: &dyn FrontierFactory) {
    let c = Case::new(
        f,
        "dedup_within_segment",
        FrontierConfig {
            segment_ms: Some(60_000),
            ..config()
        },
    )
    .await;
    assert_eq!(
        c.enqueue(vec![
            req("https://a.test/1"),
            req("https://a.test/1"),
            req("https://a.test/2")
        ])
        .await,
        (2, 1)
    );
    c.expect("first batch", [2, 2, 0, 0, 0, 0, 1]).await;
    c.clock.advance(59_999);
    assert_eq!(c.enqueue(vec![req("https://a.test/2")]).await, (0, 1));
    // A POST with a body is a different request from the GET of the same URL.
    let mut post = req("https://a.test/2");
    post.method = silk_core::Method::Post;
    post.body = Some(b"x=1".to_vec());
    assert_eq!(c.enqueue(vec![post.clone(), post]).await, (1, 1));
    c.expect("same segment", [3, 3, 0, 0, 0, 0, 3]).await;
    // Finished requests stay seen.
    let leases = c.lease(10).await;
    for l in &leases {
        assert_eq!(c.ack(l.id, Outcome::Done).await, AckResult::Succeeded);
    }
    assert_eq!(c.enqueue(vec![req("https://a.test/1")]).await, (0, 1));
    c.expect("after acks", [3, 0, 0, 3, 0, 0, 4]).await;
}

/// The same URL is new again in the next segment, and a duplicate again within it.
pub async fn dedup_in_next_segment(f: &dyn FrontierFactory) {
    let c = Case::new(
        f,
        "dedup_in_next_segment",
        FrontierConfig {
            segment_ms: Some(1_000),
            ..config()
        },
    )
    .await;
    assert_eq!(c.enqueue(vec![req("https://a.test/x")]).await, (1, 0));
    let l = c.lease(1).await;
    assert_eq!(c.ack(l[0].id, Outcome::Done).await, AckResult::Succeeded);
    c.clock.advance(999);
    assert_eq!(
        c.enqueue(vec![req("https://a.test/x")]).await,
        (0, 1),
        "same segment"
    );
    c.clock.advance(1);
    assert_eq!(
        c.enqueue(vec![req("https://a.test/x")]).await,
        (1, 0),
        "next segment"
    );
    assert_eq!(
        c.enqueue(vec![req("https://a.test/x")]).await,
        (0, 1),
        "again in the next segment"
    );
    c.expect("two segments", [2, 1, 0, 1, 0, 0, 2]).await;
    // Pending in an old segment and re-enqueued in a new one: both are kept.
    c.clock.advance(1_000);
    assert_eq!(c.enqueue(vec![req("https://a.test/x")]).await, (1, 0));
    assert_eq!(
        urls(&c.lease(10).await),
        vec!["https://a.test/x", "https://a.test/x"]
    );
    c.expect("third segment", [3, 2, 2, 1, 0, 0, 2]).await;
}

/// The seen set of a segment is pruned at the first write once it ended
/// `segment_retention_ms` ago, and stays pruned after a reopen; requests enqueued in it are
/// not touched, and dedup in the current segment goes on.
pub async fn old_seen_sets_are_pruned(f: &dyn FrontierFactory) {
    let name = "old_seen_sets_are_pruned";
    let cfg = FrontierConfig {
        segment_ms: Some(1_000),
        segment_retention_ms: 1_500,
        ..config()
    };
    let c = Case::new(f, name, cfg.clone()).await;
    let segments = async |c: &Case| c.stats().await.seen_segments;
    assert_eq!(c.enqueue(vec![req("https://a.test/0")]).await, (1, 0));
    assert_eq!(segments(&c).await, 1);
    c.clock.advance(1_000);
    assert_eq!(c.enqueue(vec![req("https://a.test/1")]).await, (1, 0));
    c.clock.advance(1_000);
    assert_eq!(c.enqueue(vec![req("https://a.test/2")]).await, (1, 0));
    assert_eq!(segments(&c).await, 3, "segment 0 ended 1,000 ms ago: kept");
    c.clock.advance(500);
    assert_eq!(c.enqueue(vec![req("https://a.test/3")]).await, (1, 0));
    assert_eq!(
        segments(&c).await,
        2,
        "segment 0 ended 1,500 ms ago: pruned"
    );
    assert_eq!(
        c.enqueue(vec![req("https://a.test/2")]).await,
        (0, 1),
        "the current segment's set is intact"
    );
    let s = c.stats().await;
    assert_eq!((s.total, s.pending), (4, 4), "requests are not pruned");
    c.close().await;
    drop(c);

    let clock = ManualClock::new(T0 + 2_500);
    let store = f.open(name, cfg, clock.clone()).await;
    let c = Case { store, clock, name };
    assert_eq!(segments(&c).await, 2, "pruned for good");
    assert_eq!(
        c.enqueue(vec![req("https://a.test/1")]).await,
        (1, 0),
        "segment 1's set does not dedup segment 2"
    );
    c.clock.advance(1_000);
    assert_eq!(c.enqueue(vec![req("https://a.test/4")]).await, (1, 0));
    assert_eq!(segments(&c).await, 2, "segment 1 pruned, segment 3 added");
    assert_eq!(c.lease(10).await.len(), 6);
    c.close().await;
}

/// Without segments a URL is a duplicate forever.
pub async fn dedup_forever_without_segments(f: &dyn FrontierFactory) {
    let c = Case::new(
        f,
        "dedup_forever_without_segments",
        FrontierConfig {
            segment_ms: None,
            ..config()
        },
    )
    .await;
    assert_eq!(c.enqueue(vec![req("https://a.test/x")]).await, (1, 0));
    c.clock.advance(400 * 24 * 3_600_000);
    assert_eq!(c.enqueue(vec![req("https://a.test/x")]).await, (0, 1));
    c.expect("a year later", [1, 1, 0, 0, 0, 0, 1]).await;
}

/// `exact_dedup: false`: the Bloom filter decides alone. Every duplicate is still caught,
/// and with a filter far too small, new URLs are taken for seen ones (what the mode trades
/// for its speed); what is taken is stored and leased as usual.
pub async fn bloom_only_dedup_trusts_the_filter(f: &dyn FrontierFactory) {
    let cfg = FrontierConfig {
        expected_urls: 10,
        bloom_fp_rate: 0.5,
        exact_dedup: false,
        ..config()
    };
    let c = Case::new(f, "bloom_only_dedup_trusts_the_filter", cfg).await;
    let batch: Vec<Request> = (0..500)
        .map(|i| req(&format!("https://a.test/{i}")))
        .collect();
    let (added, dropped) = c.enqueue(batch.clone()).await;
    assert_eq!(added + dropped, 500);
    assert!(
        added > 10 && dropped > 0,
        "a saturated filter drops some new URLs: {added} added, {dropped} dropped"
    );
    assert_eq!(c.enqueue(batch).await, (0, 500), "every duplicate caught");
    c.expect("stored", [added, added, 0, 0, 0, 0, dropped + 500])
        .await;
    assert_eq!(c.lease(1_000).await.len() as u64, added.min(10));
}

/// A Bloom filter far too small answers "maybe" for nearly everything: no new URL may be lost.
pub async fn dedup_confirms_bloom_false_positives(f: &dyn FrontierFactory) {
    let cfg = FrontierConfig {
        expected_urls: 1,
        bloom_fp_rate: 0.5,
        ..config()
    };
    let c = Case::new(f, "dedup_confirms_bloom_false_positives", cfg).await;
    let batch: Vec<Request> = (0..500)
        .map(|i| req(&format!("https://a.test/{i}")))
        .collect();
    assert_eq!(c.enqueue(batch.clone()).await, (500, 0));
    let more: Vec<Request> = (250..750)
        .map(|i| req(&format!("https://a.test/{i}")))
        .collect();
    assert_eq!(c.enqueue(more).await, (250, 250));
    assert_eq!(c.enqueue(batch).await, (0, 500));
    let s = c
        .expect("saturated bloom", [750, 750, 0, 0, 0, 0, 750])
        .await;
    assert_eq!(s.pending, 750);
}

/// `created_ms == 0` is set to now at enqueue; a given one is kept.
pub async fn created_ms_is_set(f: &dyn FrontierFactory) {
    let c = Case::new(f, "created_ms_is_set", config()).await;
    let mut given = req_p("https://b.test/", 1);
    given.created_ms = T0 - 5;
    c.enqueue(vec![req_p("https://a.test/", 2), given]).await;
    let l = c.lease(2).await;
    assert_eq!(urls(&l), vec!["https://a.test/", "https://b.test/"]);
    assert_eq!(l[0].request.created_ms, T0);
    assert_eq!(l[1].request.created_ms, T0 - 5);
    assert_eq!(l[0].deadline_ms, T0 + 10_000);
}

/// At most `per_host_concurrency` leases per host in flight; others hosts are not held back.
pub async fn per_host_concurrency(f: &dyn FrontierFactory) {
    let c = Case::new(
        f,
        "per_host_concurrency",
        FrontierConfig {
            per_host_concurrency: 2,
            ..config()
        },
    )
    .await;
    let mut batch: Vec<Request> = (0..5)
        .map(|i| req(&format!("https://a.test/{i}")))
        .collect();
    batch.push(req("https://b.test/0"));
    batch.push(req("http://a.test:8080/0"));
    c.enqueue(batch).await;
    let l = c.lease(100).await;
    assert_eq!(
        urls(&l),
        vec![
            "https://a.test/0",
            "https://a.test/1",
            "https://b.test/0",
            "http://a.test:8080/0"
        ]
    );
    c.expect("two of a in flight", [7, 7, 4, 0, 0, 0, 0]).await;
    assert!(c.lease(100).await.is_empty(), "a is at its limit");
    assert_eq!(c.ack(l[0].id, Outcome::Done).await, AckResult::Succeeded);
    assert_eq!(urls(&c.lease(100).await), vec!["https://a.test/2"]);
    assert!(c.lease(100).await.is_empty());
    c.expect("after one ack", [7, 6, 4, 1, 0, 0, 0]).await;
}

/// At least `per_host_delay_ms` between two lease starts on a host, by the clock.
pub async fn per_host_delay(f: &dyn FrontierFactory) {
    let c = Case::new(
        f,
        "per_host_delay",
        FrontierConfig {
            per_host_delay_ms: 100,
            ..config()
        },
    )
    .await;
    c.enqueue(
        (0..3)
            .map(|i| req(&format!("https://a.test/{i}")))
            .chain([req("https://b.test/")])
            .collect(),
    )
    .await;
    assert_eq!(
        urls(&c.lease(10).await),
        vec!["https://a.test/0", "https://b.test/"]
    );
    assert_eq!(c.next_ready().await, Some(T0 + 100));
    c.clock.advance(99);
    assert!(c.lease(10).await.is_empty(), "99 ms after the last start");
    c.clock.advance(1);
    assert_eq!(c.next_ready().await, Some(T0 + 100));
    assert_eq!(urls(&c.lease(10).await), vec!["https://a.test/1"]);
    c.clock.advance(250);
    assert_eq!(
        urls(&c.lease(10).await),
        vec!["https://a.test/2"],
        "one per lease start, not per elapsed delay"
    );
    c.expect("three starts on a", [4, 4, 4, 0, 0, 0, 0]).await;
}

/// `set_host_delay` raises one host's delay: effective delay = max(config, host); 0 removes it.
pub async fn set_host_delay(f: &dyn FrontierFactory) {
    let c = Case::new(
        f,
        "set_host_delay",
        FrontierConfig {
            per_host_delay_ms: 100,
            ..config()
        },
    )
    .await;
    c.store
        .set_host_delay("a.test", 1_000)
        .await
        .expect("set_host_delay");
    c.store
        .set_host_delay("b.test", 10)
        .await
        .expect("set_host_delay");
    c.enqueue(
        (0..3)
            .flat_map(|i| {
                [
                    req(&format!("https://a.test/{i}")),
                    req(&format!("https://b.test/{i}")),
                ]
            })
            .collect(),
    )
    .await;
    assert_eq!(c.lease(10).await.len(), 2);
    c.clock.advance(100);
    assert_eq!(
        urls(&c.lease(10).await),
        vec!["https://b.test/1"],
        "b: config delay wins over 10 ms"
    );
    assert_eq!(c.next_ready().await, Some(T0 + 200));
    c.clock.advance(900);
    assert_eq!(
        urls(&c.lease(10).await),
        vec!["https://a.test/1", "https://b.test/2"]
    );
    c.store
        .set_host_delay("a.test", 0)
        .await
        .expect("set_host_delay");
    c.clock.advance(100);
    assert_eq!(
        urls(&c.lease(10).await),
        vec!["https://a.test/2"],
        "a back to the config delay"
    );
}

/// Highest priority first across hosts; FIFO within a level.
pub async fn priority_order(f: &dyn FrontierFactory) {
    let c = Case::new(f, "priority_order", config()).await;
    c.enqueue(vec![
        req_p("https://a.test/low", 1),
        req_p("https://b.test/high", 5),
        req_p("https://c.test/mid", 3),
        req_p("https://a.test/high", 5),
        req_p("https://b.test/neg", -2),
        req_p("https://c.test/zero", 0),
    ])
    .await;
    assert_eq!(urls(&c.lease(1).await), vec!["https://b.test/high"]);
    assert_eq!(
        urls(&c.lease(10).await),
        vec![
            "https://a.test/high",
            "https://c.test/mid",
            "https://a.test/low",
            "https://c.test/zero",
            "https://b.test/neg"
        ]
    );
}

/// Aging (design §3) lets an old low-priority request overtake a new higher one.
pub async fn aging_flips_order(f: &dyn FrontierFactory) {
    let c = Case::new(f, "aging_flips_order", config()).await;
    c.enqueue(vec![req_p("https://old.test/", 3)]).await;
    c.clock.advance(1_000);
    c.enqueue(vec![req_p("https://new.test/", 5)]).await;
    // old: alpha = 1000/1000 = 1 > 0.5, effective 3 * 2 = 6 > 5.
    assert_eq!(urls(&c.lease(1).await), vec!["https://old.test/"]);
}

/// Aging that is not enough, or not past beta, does not change the order.
pub async fn aging_does_not_flip_order(f: &dyn FrontierFactory) {
    let c = Case::new(f, "aging_does_not_flip_order", config()).await;
    c.enqueue(vec![req_p("https://old.test/", 2)]).await;
    c.clock.advance(1_000);
    c.enqueue(vec![req_p("https://new.test/", 5)]).await;
    // old: effective 2 * 2 = 4 < 5.
    assert_eq!(urls(&c.lease(1).await), vec!["https://new.test/"]);

    let c = Case::new(f, "aging_does_not_flip_order_beta", config()).await;
    c.enqueue(vec![req_p("https://oldest.test/", 0)]).await;
    c.clock.advance(600);
    c.enqueue(vec![req_p("https://mid.test/", 3)]).await;
    c.clock.advance(400);
    c.enqueue(vec![req_p("https://new.test/", 4)]).await;
    // mid: alpha = 400/1000 = 0.4 <= beta: effective 3 < 4; had it aged it would be 3.96.
    assert_eq!(
        urls(&c.lease(3).await),
        vec![
            "https://new.test/",
            "https://mid.test/",
            "https://oldest.test/"
        ]
    );
}

/// A lease not acked by its deadline is dispatched again, without consuming a retry.
pub async fn lease_expiry_redispatches(f: &dyn FrontierFactory) {
    let c = Case::new(
        f,
        "lease_expiry_redispatches",
        FrontierConfig {
            lease_timeout_ms: 1_000,
            ..config()
        },
    )
    .await;
    c.enqueue(vec![req("https://a.test/1"), req("https://a.test/2")])
        .await;
    let first = c.lease(10).await;
    assert_eq!(first.len(), 2);
    assert_eq!(
        c.next_ready().await,
        Some(T0 + 1_000),
        "next chance: the expiry"
    );
    c.clock.advance(999);
    assert!(c.lease(10).await.is_empty());
    assert_eq!(c.store.expire().await.expect("expire"), 0);
    c.clock.advance(1);
    assert_eq!(
        c.store.expire().await.expect("expire"),
        2,
        "explicit expire"
    );
    let s = c.expect("expired", [2, 2, 0, 0, 0, 0, 0]).await;
    assert_eq!((s.pending, s.lease_expiries, s.retries), (2, 2, 0));
    let again = c.lease(1).await;
    assert_eq!(urls(&again), vec!["https://a.test/1"]);
    assert_eq!(again[0].request.retries, 0, "an expiry is not a retry");
    assert_ne!(again[0].id, first[0].id);
    c.clock.advance(1_000);
    // Lazy expiry inside lease: a.test/1 again, then a.test/2.
    let third = c.lease(10).await;
    assert_eq!(urls(&third), vec!["https://a.test/1", "https://a.test/2"]);
    assert!(
        !c.ack(again[0].id, Outcome::Done).await.applied(),
        "ack of an expired lease"
    );
    assert_eq!(
        c.ack(third[0].id, Outcome::Done).await,
        AckResult::Succeeded
    );
    let s = c.expect("one done", [2, 1, 1, 1, 0, 0, 0]).await;
    assert_eq!(s.lease_expiries, 3);
}

/// `Retry` re-queues with back-off `base * 2^retries` until `max_retries`, then fails.
pub async fn retry_backoff_then_failed(f: &dyn FrontierFactory) {
    let c = Case::new(f, "retry_backoff_then_failed", config()).await;
    c.enqueue(vec![req("https://a.test/")]).await;
    let l = c.lease(1).await;
    let retry = || Outcome::Retry {
        reason: "503".into(),
    };
    assert_eq!(
        c.ack(l[0].id, retry()).await,
        AckResult::Requeued {
            retries: 1,
            not_before_ms: T0 + 100
        }
    );
    let s = c.expect("first retry", [1, 1, 0, 0, 0, 0, 0]).await;
    assert_eq!((s.pending, s.delayed, s.retries), (1, 1, 1));
    assert_eq!(c.next_ready().await, Some(T0 + 100));
    c.clock.advance(99);
    assert!(c.lease(1).await.is_empty(), "in back-off");
    c.clock.advance(1);
    let l = c.lease(1).await;
    assert_eq!(l[0].request.retries, 1);
    assert_eq!(
        c.ack(l[0].id, retry()).await,
        AckResult::Requeued {
            retries: 2,
            not_before_ms: T0 + 300
        }
    );
    c.clock.advance(199);
    assert!(c.lease(1).await.is_empty(), "second back-off is 200 ms");
    c.clock.advance(1);
    let l = c.lease(1).await;
    assert_eq!(l[0].request.retries, 2);
    assert_eq!(
        c.ack(l[0].id, retry()).await,
        AckResult::Failed,
        "max_retries = 2 reached"
    );
    let s = c.expect("failed", [1, 0, 0, 0, 1, 0, 0]).await;
    assert_eq!((s.pending, s.delayed, s.retries), (0, 0, 2));
    assert_eq!(c.next_ready().await, None);
}

/// `Failed` and `Dropped` finish a request and are counted apart from success.
pub async fn failed_and_dropped(f: &dyn FrontierFactory) {
    let c = Case::new(f, "failed_and_dropped", config()).await;
    c.enqueue(vec![
        req("https://a.test/1"),
        req("https://a.test/2"),
        req("https://a.test/3"),
    ])
    .await;
    let l = c.lease(3).await;
    assert_eq!(
        c.ack(
            l[0].id,
            Outcome::Failed {
                reason: "404".into()
            }
        )
        .await,
        AckResult::Failed
    );
    assert_eq!(
        c.ack(
            l[1].id,
            Outcome::Dropped {
                reason: "robots.txt".into()
            }
        )
        .await,
        AckResult::Dropped
    );
    assert_eq!(c.ack(l[2].id, Outcome::Done).await, AckResult::Succeeded);
    c.expect("all finished", [3, 0, 0, 1, 1, 1, 0]).await;
    assert!(c.lease(3).await.is_empty());
}

/// `Release` puts a request back at once without consuming a retry or counting anything,
/// and its lease start still holds the host back for the host's delay.
pub async fn release_requeues_without_retry(f: &dyn FrontierFactory) {
    let c = Case::new(
        f,
        "release_requeues_without_retry",
        FrontierConfig {
            per_host_delay_ms: 100,
            max_retries: 0,
            ..config()
        },
    )
    .await;
    c.enqueue(vec![req("https://a.test/1")]).await;
    let l = c.lease(1).await;
    assert_eq!(urls(&l), vec!["https://a.test/1"]);
    let released = Outcome::Release {
        reason: "robots.txt first".into(),
    };
    assert_eq!(c.ack(l[0].id, released.clone()).await, AckResult::Released);
    c.expect("released", [1, 1, 0, 0, 0, 0, 0]).await;
    assert!(c.lease(1).await.is_empty(), "the host's delay still runs");
    assert_eq!(c.next_ready().await, Some(T0 + 100));
    c.clock.advance(100);
    let again = c.lease(1).await;
    assert_eq!(urls(&again), vec!["https://a.test/1"]);
    assert_eq!(again[0].request.retries, 0, "a release is not a retry");
    assert_eq!(
        c.ack(again[0].id, released).await,
        AckResult::Released,
        "released again even with max_retries 0"
    );
    c.clock.advance(100);
    let third = c.lease(1).await;
    assert_eq!(
        c.ack(third[0].id, Outcome::Done).await,
        AckResult::Succeeded
    );
    c.expect("done", [1, 0, 0, 1, 0, 0, 0]).await;
}

/// Unknown, repeated and late acks change nothing but are reported.
pub async fn stale_acks_are_harmless(f: &dyn FrontierFactory) {
    let c = Case::new(
        f,
        "stale_acks_are_harmless",
        FrontierConfig {
            lease_timeout_ms: 1_000,
            ..config()
        },
    )
    .await;
    assert_eq!(
        c.ack(LeaseId(424_242), Outcome::Done).await,
        AckResult::Unknown
    );
    c.enqueue(vec![req("https://a.test/1"), req("https://a.test/2")])
        .await;
    let l = c.lease(2).await;
    assert_eq!(c.ack(l[0].id, Outcome::Done).await, AckResult::Succeeded);
    assert_eq!(
        c.ack(l[0].id, Outcome::Done).await,
        AckResult::Unknown,
        "second ack"
    );
    assert_eq!(
        c.ack(
            l[0].id,
            Outcome::Failed {
                reason: "late".into()
            }
        )
        .await,
        AckResult::Unknown
    );
    c.clock.advance(1_000);
    let late = c.ack(l[1].id, Outcome::Done).await;
    assert!(
        matches!(late, AckResult::Expired | AckResult::Unknown),
        "late ack: {late:?}"
    );
    let s = c.expect("late ack ignored", [2, 1, 0, 1, 0, 0, 0]).await;
    assert_eq!((s.pending, s.stale_acks), (1, 4));
    let again = c.lease(2).await;
    assert_eq!(urls(&again), vec!["https://a.test/2"]);
    assert_eq!(
        c.ack(l[1].id, Outcome::Done).await,
        AckResult::Unknown,
        "old lease, new dispatch"
    );
    assert_eq!(
        c.ack(again[0].id, Outcome::Done).await,
        AckResult::Succeeded
    );
    c.expect("done", [2, 0, 0, 2, 0, 0, 0]).await;
}

/// `ack_many` applies each ack in order, reporting duplicates within the batch.
pub async fn ack_many_mixed(f: &dyn FrontierFactory) {
    let c = Case::new(f, "ack_many_mixed", config()).await;
    c.enqueue(
        (0..4)
            .map(|i| req(&format!("https://a.test/{i}")))
            .collect(),
    )
    .await;
    let l = c.lease(4).await;
    let results = c
        .store
        .ack_many(vec![
            (l[0].id, Outcome::Done),
            (
                l[1].id,
                Outcome::Retry {
                    reason: "timeout".into(),
                },
            ),
            (l[0].id, Outcome::Done),
            (LeaseId(7), Outcome::Done),
            (
                l[2].id,
                Outcome::Dropped {
                    reason: "robots".into(),
                },
            ),
        ])
        .await
        .expect("ack_many");
    assert_eq!(
        results,
        vec![
            AckResult::Succeeded,
            AckResult::Requeued {
                retries: 1,
                not_before_ms: T0 + 100
            },
            AckResult::Unknown,
            AckResult::Unknown,
            AckResult::Dropped,
        ]
    );
    c.expect("after ack_many", [4, 2, 1, 1, 0, 1, 0]).await;
}

/// `ack_and_enqueue` records the ack and the discovered links; a stale ack still enqueues.
pub async fn ack_and_enqueue_links(f: &dyn FrontierFactory) {
    let c = Case::new(f, "ack_and_enqueue_links", config()).await;
    c.enqueue(vec![req("https://a.test/")]).await;
    let l = c.lease(1).await;
    let links = vec![
        req("https://a.test/"),
        req("https://a.test/1"),
        req("https://b.test/1"),
    ];
    let (ack, enq) = c
        .store
        .ack_and_enqueue(l[0].id, Outcome::Done, links)
        .await
        .expect("ack_and_enqueue");
    assert_eq!(
        (ack, enq.added, enq.duplicates),
        (AckResult::Succeeded, 2, 1)
    );
    c.expect("page done, links in", [3, 2, 0, 1, 0, 0, 1]).await;
    let links = vec![req("https://a.test/1"), req("https://c.test/1")];
    let (ack, enq) = c
        .store
        .ack_and_enqueue(l[0].id, Outcome::Done, links)
        .await
        .expect("ack_and_enqueue");
    assert_eq!(
        (ack, enq.added, enq.duplicates),
        (AckResult::Unknown, 1, 1),
        "duplicate result"
    );
    c.expect("second result", [4, 3, 0, 1, 0, 0, 2]).await;
    assert_eq!(c.lease(10).await.len(), 3);
}

/// Several acks and their links in one call: results in order, a lease twice in the batch
/// applied once, the links deduplicated together (against the seen set and each other).
pub async fn ack_many_and_enqueue_batch(f: &dyn FrontierFactory) {
    let c = Case::new(f, "ack_many_and_enqueue_batch", config()).await;
    c.enqueue(vec![
        req("https://a.test/"),
        req("https://b.test/"),
        req("https://c.test/"),
    ])
    .await;
    let l = c.lease(3).await;
    assert_eq!(l.len(), 3);
    let acks = vec![
        (l[0].id, Outcome::Done),
        (
            l[1].id,
            Outcome::Failed {
                reason: "http_404".into(),
            },
        ),
        (l[0].id, Outcome::Done),
    ];
    let links = vec![
        req("https://a.test/1"),
        req("https://b.test/1"),
        req("https://a.test/1"),
        req("https://a.test/"),
    ];
    let (acked, enq) = c
        .store
        .ack_many_and_enqueue(acks, links)
        .await
        .expect("ack_many_and_enqueue");
    assert_eq!(
        acked,
        vec![AckResult::Succeeded, AckResult::Failed, AckResult::Unknown]
    );
    assert_eq!((enq.added, enq.duplicates), (2, 2));
    c.expect("two acked, two links in", [5, 3, 1, 1, 1, 0, 2])
        .await;
    let next = c.lease(10).await;
    let mut got = urls(&next);
    got.sort_unstable();
    assert_eq!(got, ["https://a.test/1", "https://b.test/1"]);
}

/// The scheduler's window (`memory_window`): with room for 8 pending requests in memory and
/// 300 over 30 hosts enqueued, plus links found on the way, every request is leased and
/// finished exactly once, retries and releases included, across a reopen in the middle;
/// what is in memory stays within twice the window and the requests in flight, and the
/// pending count includes what is in the store only.
pub async fn a_small_window_loses_nothing(f: &dyn FrontierFactory) {
    const WINDOW: u64 = 8;
    const MAX: usize = 7;
    let name = "a_small_window_loses_nothing";
    let cfg = FrontierConfig {
        per_host_concurrency: 2,
        memory_window: WINDOW,
        ..config()
    };
    let url = |host: u64, page: u64| format!("https://h{host}.test/p{page}");
    let mut c = Case::new(f, name, cfg.clone()).await;
    let all: Vec<Request> = (0..300).map(|i| req(&url(i % 30, i))).collect();
    for chunk in all.chunks(25) {
        c.enqueue(chunk.to_vec()).await;
    }
    let s = c.expect("enqueued", [300, 300, 0, 0, 0, 0, 0]).await;
    assert_eq!((s.pending, s.in_memory), (300, WINDOW), "{s:?}");
    assert_eq!(c.enqueue(all[..40].to_vec()).await, (0, 40), "dedup");

    let mut done: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut retried: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut expected = 300u64;
    let mut round = 0u64;
    let mut reopened = false;
    loop {
        round += 1;
        assert!(round < 2_000, "{name}: no end after {round} rounds");
        let leases = c.lease(MAX).await;
        if leases.is_empty() {
            match c.next_ready().await {
                None => break,
                Some(at) => {
                    c.clock.set(at.max(silk_core::Clock::now_ms(&c.clock)));
                    continue;
                }
            }
        }
        let mut out: Vec<&str> = urls(&leases);
        out.sort_unstable();
        out.dedup();
        assert_eq!(
            out.len(),
            leases.len(),
            "{name}: a request leased twice at once"
        );
        let mut acks = Vec::new();
        let mut links = Vec::new();
        for (i, l) in leases.iter().enumerate() {
            let u = l.request.url.to_string();
            assert!(!done.contains(&u), "{name}: {u} leased after it was done");
            let outcome = if (round + i as u64).is_multiple_of(9) && retried.insert(u.clone()) {
                Outcome::Retry { reason: "x".into() }
            } else if (round + i as u64).is_multiple_of(11) {
                Outcome::Release { reason: "y".into() }
            } else {
                done.insert(u);
                Outcome::Done
            };
            acks.push((l.id, outcome));
            // Each page links to a new page of another host while there are few of them,
            // and to one already seen.
            if round < 40 {
                links.push(req(&url(
                    (round + i as u64) % 30,
                    1_000 + round * 10 + i as u64,
                )));
            }
            links.push(req(&url(0, 0)));
        }
        let (acked, enq) = c
            .store
            .ack_many_and_enqueue(acks, links)
            .await
            .unwrap_or_else(|e| panic!("{name}: ack_many_and_enqueue: {e}"));
        assert!(acked.iter().all(|a| a.applied()), "{name}: {acked:?}");
        expected += enq.added;
        let s = c.stats().await;
        assert!(
            s.in_memory <= 2 * WINDOW + MAX as u64,
            "{name}: {} in memory: {s:?}",
            s.in_memory
        );
        if !reopened && s.success >= 150 {
            reopened = true;
            c.close().await;
            let clock = c.clock.clone();
            let store = f.open(name, cfg.clone(), clock.clone()).await;
            c = Case { store, clock, name };
            let again = c.stats().await;
            assert_eq!(
                (again.left, again.pending, again.in_flight),
                (s.left, s.left, 0),
                "{name}: after reopen: {again:?}"
            );
            assert!(again.in_memory <= WINDOW, "{name}: after reopen: {again:?}");
        }
        c.clock.advance(50);
    }
    assert!(reopened);
    let s = c.stats().await;
    assert_eq!(
        (s.total, s.left, s.pending, s.success, s.failed, s.in_memory),
        (expected, 0, 0, expected, 0, 0),
        "{name}: {s:?}"
    );
    assert_eq!(
        done.len() as u64,
        expected,
        "{name}: every request done once"
    );
    assert!(!retried.is_empty());
    c.close().await;
}

/// `next_ready_ms` is `None` only when nothing is pending or in flight.
pub async fn next_ready_when_idle(f: &dyn FrontierFactory) {
    let c = Case::new(f, "next_ready_when_idle", config()).await;
    assert_eq!(c.next_ready().await, None);
    assert!(c.lease(10).await.is_empty());
    c.enqueue(vec![req("https://a.test/")]).await;
    assert!(c.next_ready().await.is_some_and(|t| t <= T0), "ready now");
    let l = c.lease(10).await;
    assert_eq!(
        c.next_ready().await,
        Some(l[0].deadline_ms),
        "only a lease in flight"
    );
    c.ack(l[0].id, Outcome::Done).await;
    assert_eq!(c.next_ready().await, None);
    c.expect("drained", [1, 0, 0, 1, 0, 0, 0]).await;
}

/// Closing and reopening keeps requests, counters, back-offs, host delays and the seen set;
/// leases in flight come back as pending.
pub async fn reopen_persists(f: &dyn FrontierFactory) {
    let name = "reopen_persists";
    let cfg = FrontierConfig {
        per_host_delay_ms: 0,
        segment_ms: Some(3_600_000),
        ..config()
    };
    let c = Case::new(f, name, cfg.clone()).await;
    c.store
        .set_host_delay("slow.test", 5_000)
        .await
        .expect("set_host_delay");
    let batch: Vec<Request> = (0..5)
        .map(|i| req_p(&format!("https://a.test/{i}"), i))
        .chain([req("https://slow.test/1"), req("https://slow.test/2")])
        .collect();
    assert_eq!(c.enqueue(batch.clone()).await, (7, 0));
    let l = c.lease(3).await;
    assert_eq!(
        urls(&l),
        vec!["https://a.test/4", "https://a.test/3", "https://a.test/2"]
    );
    assert_eq!(c.ack(l[0].id, Outcome::Done).await, AckResult::Succeeded);
    assert!(matches!(
        c.ack(l[1].id, Outcome::Retry { reason: "x".into() }).await,
        AckResult::Requeued { .. }
    ));
    // l[2] stays in flight across the restart.
    let before = c.expect("before close", [7, 6, 1, 1, 0, 0, 0]).await;
    c.close().await;
    assert!(c.store.stats().await.is_err(), "closed");
    drop(c);

    let clock = ManualClock::new(T0 + 10);
    let store = f.open(name, cfg.clone(), clock.clone()).await;
    let c = Case { store, clock, name };
    let s = c.expect("after reopen", [7, 6, 0, 1, 0, 0, 0]).await;
    assert_eq!((s.pending, s.delayed, s.retries), (6, 1, before.retries));
    assert_eq!(c.enqueue(batch).await, (0, 7), "seen set survives");
    let l = c.lease(10).await;
    let got = urls(&l);
    assert_eq!(
        got.len(),
        4,
        "a/2 (was in flight), a/1, a/0, one of slow.test: {got:?}"
    );
    assert_eq!(
        &got[..3],
        &["https://a.test/2", "https://a.test/1", "https://a.test/0"]
    );
    assert!(got[3].starts_with("https://slow.test/"));
    c.clock.advance(100);
    let l2 = c.lease(10).await;
    assert_eq!(
        urls(&l2),
        vec!["https://a.test/3"],
        "back-off kept; slow.test's delay kept"
    );
    assert_eq!(l2[0].request.retries, 1);
    c.clock.advance(5_000);
    assert_eq!(
        c.lease(10).await.len(),
        1,
        "the second slow.test request after its delay"
    );
    c.expect("all leased", [7, 6, 6, 1, 0, 0, 7]).await;
    c.close().await;
}

/// After `close` every call fails with an error; `close` is idempotent.
pub async fn closed_store_refuses_calls(f: &dyn FrontierFactory) {
    let c = Case::new(f, "closed_store_refuses_calls", config()).await;
    c.enqueue(vec![req("https://a.test/")]).await;
    c.close().await;
    c.close().await;
    assert!(
        c.store
            .enqueue(vec![req("https://a.test/2")])
            .await
            .is_err()
    );
    assert!(c.store.lease(1).await.is_err());
    assert!(c.store.ack(LeaseId(1), Outcome::Done).await.is_err());
    assert!(c.store.next_ready_ms().await.is_err());
}

/// A backend's own corruption check, first reopen: the store held four requests of
/// `a.test` (seqs 0 to 3), then seq 0's record was made unreadable (found at open) and
/// seq 1's readable only up to its JSON (found at lease). Both are skipped and counted
/// failed and corrupt.
pub async fn corrupt_records_are_skipped(f: &dyn FrontierStore) {
    let s = f.stats().await.expect("stats");
    assert_eq!(
        (s.total, s.left, s.failed, s.corrupt, s.pending),
        (4, 3, 1, 1, 3)
    );
    let leased = f.lease(10).await.expect("lease");
    let urls: Vec<_> = leased.iter().map(|l| l.request.url.as_str()).collect();
    assert_eq!(urls, vec!["https://a.test/2", "https://a.test/3"]);
    let s = f.stats().await.expect("stats");
    assert_eq!(
        (s.total, s.left, s.failed, s.corrupt, s.in_flight),
        (4, 2, 2, 2, 2)
    );
}

/// The same check's second reopen, after [`corrupt_records_are_skipped`]: the corrupt
/// records were removed, the counters kept.
pub async fn corrupt_records_were_removed(f: &dyn FrontierStore) {
    let s = f.stats().await.expect("stats");
    assert_eq!(
        (s.left, s.corrupt, s.pending),
        (2, 2, 2),
        "corrupt records were removed"
    );
}
