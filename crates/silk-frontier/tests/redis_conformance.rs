//! The frontier conformance suite (`silk_frontier::conformance`) against [`RedisFrontier`],
//! on the Redis server named by `SILK_TEST_REDIS` (e.g. `redis://127.0.0.1:6379`). Each
//! test uses its own key prefixes (`t<pid>-<n>-<slot>`), deleted after the check (pass or
//! fail). Without the variable, every test prints `skipped: SILK_TEST_REDIS not set` and
//! passes.
//!
//! The same suite also runs on a Redis Cluster of the test's own (3 masters with a replica
//! each, `silk_testkit::RedisCluster`), and a failover of the master that holds a frontier
//! loses nothing that was acked.

use async_trait::async_trait;
use silk_core::{Clock, ManualClock, Request};
use silk_frontier::conformance::{self, FrontierFactory, T0};
use silk_frontier::{AckResult, FrontierConfig, FrontierStore, Outcome, RedisFrontier};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

fn redis_url() -> Option<String> {
    match std::env::var("SILK_TEST_REDIS") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            println!("skipped: SILK_TEST_REDIS not set");
            None
        }
    }
}

/// A prefix unique to this process and call.
fn unique(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "t{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

struct Redis {
    url: String,
    base: String,
    used: Mutex<Vec<String>>,
}

impl Redis {
    fn new() -> Option<Self> {
        Some(Self::at(redis_url()?))
    }

    fn at(url: String) -> Self {
        Self {
            url,
            base: unique("c"),
            used: Mutex::new(Vec::new()),
        }
    }
}

#[async_trait]
impl FrontierFactory for Redis {
    async fn open(
        &self,
        slot: &str,
        config: FrontierConfig,
        clock: ManualClock,
    ) -> Arc<dyn FrontierStore> {
        let prefix = format!("{}-{slot}", self.base);
        {
            let mut used = self.used.lock().expect("lock");
            if !used.contains(&prefix) {
                used.push(prefix.clone());
            }
        }
        Arc::new(
            RedisFrontier::open(&self.url, &prefix, config, Arc::new(clock))
                .await
                .expect("open redis frontier"),
        )
    }

    async fn cleanup(&self) {
        let used = std::mem::take(&mut *self.used.lock().expect("lock"));
        for prefix in used {
            if let Err(e) = RedisFrontier::destroy(&self.url, &prefix).await {
                eprintln!("cleanup of {prefix}: {e}");
            }
        }
    }
}

silk_frontier::frontier_conformance_tests!(optional Redis::new());

fn config() -> FrontierConfig {
    FrontierConfig {
        per_host_concurrency: 10,
        per_host_delay_ms: 0,
        segment_ms: Some(3_600_000),
        expected_urls: 10_000,
        ..FrontierConfig::default()
    }
}

fn reqs(n: usize) -> Vec<Request> {
    (0..n)
        .map(|i| Request::from_canonical(format!("https://h{}.test/{i}", i % 3)))
        .collect()
}

/// The owner dies with leases out (dropped without close or ack); a new process opens the
/// same prefix: every request is pending again, counters intact, old URLs still refused;
/// the dead owner's handle, if it were still running, is fenced.
#[tokio::test]
async fn a_new_owner_adopts_the_frontier_of_a_dead_one() {
    let Some(url) = redis_url() else { return };
    let prefix = unique("adopt");
    let clock = ManualClock::new(T0);
    let first = RedisFrontier::open(&url, &prefix, config(), Arc::new(clock.clone()))
        .await
        .expect("open");
    assert_eq!(first.enqueue(reqs(12)).await.expect("enqueue").added, 12);
    first
        .set_host_delay("h1.test", 50)
        .await
        .expect("set_host_delay");
    let leased = first.lease(6).await.expect("lease");
    assert_eq!(leased.len(), 6);
    assert_eq!(
        first.ack(leased[0].id, Outcome::Done).await.expect("ack"),
        AckResult::Succeeded
    );
    assert!(matches!(
        first
            .ack(
                leased[1].id,
                Outcome::Retry {
                    reason: "503".into()
                }
            )
            .await
            .expect("ack"),
        AckResult::Requeued { retries: 1, .. }
    ));
    let before = first.stats().await.expect("stats");
    assert_eq!(
        (
            before.total,
            before.left,
            before.in_flight,
            before.success,
            before.retries
        ),
        (12, 11, 4, 1, 1)
    );

    // The new owner, while the old handle still exists (a hub that is only partitioned).
    clock.advance(1_000);
    let second = RedisFrontier::open(&url, &prefix, config(), Arc::new(clock.clone()))
        .await
        .expect("adopt");
    let s = second.stats().await.expect("stats");
    assert_eq!(
        (
            s.total,
            s.left,
            s.in_flight,
            s.pending,
            s.success,
            s.retries
        ),
        (12, 11, 0, 11, 1, 1),
        "every request not acked is pending again; counters intact"
    );
    let dup = second.enqueue(reqs(12)).await.expect("enqueue");
    assert_eq!((dup.added, dup.duplicates), (0, 12), "dedup survives");

    // The old owner is fenced: its writes fail, change nothing, and it stays unusable.
    let fenced = first.ack(leased[2].id, Outcome::Done).await;
    let e = fenced.expect_err("fenced ack");
    assert!(!e.is_retryable(), "{e}");
    assert!(e.to_string().contains(&prefix), "{e}");
    assert!(first.stats().await.is_err(), "a fenced handle is unusable");
    drop(first);

    let mut all = Vec::new();
    while all.len() < 11 {
        let l = second.lease(100).await.expect("lease");
        if l.is_empty() {
            let t = second
                .next_ready_ms()
                .await
                .expect("next_ready")
                .expect("requests left");
            assert!(t > clock.now_ms(), "nothing leased although ready");
            clock.set(t);
        }
        all.extend(l);
    }
    assert_eq!(all.len(), 11);
    let retried = all
        .iter()
        .filter(|l| l.request.url == leased[1].request.url)
        .collect::<Vec<_>>();
    assert_eq!(retried.len(), 1);
    assert_eq!(retried[0].request.retries, 1, "retry count persisted");
    let acks = all.iter().map(|l| (l.id, Outcome::Done)).collect();
    let results = second.ack_many(acks).await.expect("ack_many");
    assert!(results.iter().all(|r| *r == AckResult::Succeeded));
    let s = second.stats().await.expect("stats");
    assert_eq!((s.total, s.left, s.success, s.duplicates), (12, 0, 12, 12));
    second.close().await.expect("close");

    // A third open sees the drained frontier.
    let third = RedisFrontier::open(&url, &prefix, config(), Arc::new(clock.clone()))
        .await
        .expect("reopen");
    let s = third.stats().await.expect("stats");
    assert_eq!((s.total, s.left, s.pending, s.success), (12, 0, 0, 12));
    third.close().await.expect("close");
    RedisFrontier::destroy(&url, &prefix)
        .await
        .expect("destroy");
}

/// Errors name the server without its password; a bad prefix is refused before connecting.
#[tokio::test]
async fn errors_name_the_server_without_password() {
    let clock = Arc::new(ManualClock::new(T0));
    let e = RedisFrontier::open(
        "redis://user:hunter2@127.0.0.1:1/0",
        "p",
        config(),
        clock.clone(),
    )
    .await
    .expect_err("nothing listens on port 1");
    let msg = e.to_string();
    assert!(!msg.contains("hunter2"), "{msg}");
    assert!(msg.contains("127.0.0.1:1"), "{msg}");
    assert!(e.is_retryable(), "{msg}");
    let e = RedisFrontier::open("redis://127.0.0.1:1/0", "a}b", config(), clock)
        .await
        .expect_err("bad prefix");
    assert!(e.to_string().contains("prefix"), "{e}");
}

/// Bad data in Redis is reported, skipped and counted, never a panic: a garbage record
/// (found at open), a record with broken JSON (found at lease), a seen member of the wrong
/// length, a host delay that is not a number.
#[tokio::test]
async fn corrupt_records_are_skipped_and_counted() {
    let Some(url) = redis_url() else { return };
    let prefix = unique("corrupt");
    let clock = Arc::new(ManualClock::new(T0));
    let cfg = FrontierConfig {
        segment_ms: None,
        ..config()
    };
    let f = RedisFrontier::open(&url, &prefix, cfg.clone(), clock.clone())
        .await
        .expect("open");
    let batch = (0..4)
        .map(|i| Request::from_canonical(format!("https://a.test/{i}")))
        .collect();
    assert_eq!(f.enqueue(batch).await.expect("enqueue").added, 4);
    f.close().await.expect("close");

    let client = redis::Client::open(url.as_str()).expect("client");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let tag = format!("{{silk:frontier:{prefix}}}");
    let requests = format!("{tag}:requests");
    let good: Vec<u8> = redis::cmd("HGET")
        .arg(&requests)
        .arg("1")
        .query_async(&mut conn)
        .await
        .expect("read record 1");
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(&requests)
        .arg("0")
        .arg(&b"\x09garbage"[..])
        .cmd("HSET")
        .arg(&requests)
        .arg("1")
        .arg(&good[..good.len() - 5])
        .cmd("SADD")
        .arg(format!("{tag}:seen:0"))
        .arg(&b"short"[..])
        .cmd("HSET")
        .arg(format!("{tag}:delays"))
        .arg("a.test")
        .arg("x")
        .query_async(&mut conn)
        .await
        .expect("corrupt the data");

    let f = RedisFrontier::open(&url, &prefix, cfg.clone(), clock.clone())
        .await
        .expect("reopen");
    conformance::corrupt_records_are_skipped(&f).await;
    f.close().await.expect("close");

    let f = RedisFrontier::open(&url, &prefix, cfg, clock)
        .await
        .expect("reopen");
    conformance::corrupt_records_were_removed(&f).await;
    f.close().await.expect("close");
    RedisFrontier::destroy(&url, &prefix)
        .await
        .expect("destroy");
}

/// The whole conformance suite on a Redis Cluster (3 masters, a replica each, so every
/// write also waits for a replica).
#[tokio::test]
async fn conformance_on_a_redis_cluster() {
    let Some(cluster) = silk_testkit::redis_cluster_for_test(3, 1) else {
        return;
    };
    let factory = Redis::at(cluster.url());
    silk_frontier::frontier_conformance_sequence!(&factory);
}

/// The master that holds a frontier dies (SIGKILL) after calls returned `Ok`; its replica
/// takes over; the frontier opened again through the cluster has every acked outcome,
/// retry and seen URL, and what was not acked is pending.
#[tokio::test]
async fn a_cluster_failover_loses_no_acked_state() {
    let Some(mut cluster) = silk_testkit::redis_cluster_for_test(3, 1) else {
        return;
    };
    let url = cluster.url();
    let prefix = "failover";
    let clock = ManualClock::new(T0);
    let reqs: Vec<Request> = (0..200)
        .map(|i| Request::from_canonical(format!("https://h{}.test/{i}", i % 20)))
        .collect();
    let f = RedisFrontier::open(&url, prefix, config(), Arc::new(clock.clone()))
        .await
        .expect("open on the cluster");
    assert_eq!(f.enqueue(reqs.clone()).await.expect("enqueue").added, 200);
    let leased = f.lease(100).await.expect("lease");
    assert_eq!(leased.len(), 100);
    let mut acks = Vec::new();
    for (i, l) in leased.iter().enumerate() {
        let outcome = match i {
            0..60 => Outcome::Done,
            60..80 => Outcome::Retry {
                reason: "503".into(),
            },
            _ => continue, // still in flight when the master dies
        };
        acks.push((l.id, outcome));
    }
    let results = f.ack_many(acks).await.expect("ack_many");
    assert_eq!(results.len(), 80);
    let done: Vec<&str> = leased[..60]
        .iter()
        .map(|l| l.request.url.as_str())
        .collect();

    let meta = format!("{{silk:frontier:{prefix}}}:meta");
    let (old, new) = cluster
        .kill_master_of(&meta)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(old, new);
    drop(f);

    clock.advance(10_000); // past the retry back-off
    let g = RedisFrontier::open(&cluster.url(), prefix, config(), Arc::new(clock.clone()))
        .await
        .expect("adopt after the failover");
    let s = g.stats().await.expect("stats");
    assert_eq!(
        (
            s.total,
            s.success,
            s.retries,
            s.left,
            s.pending,
            s.in_flight
        ),
        (200, 60, 20, 140, 140, 0),
        "every acked outcome survived the failover"
    );
    let dup = g.enqueue(reqs).await.expect("enqueue again");
    assert_eq!(
        (dup.added, dup.duplicates),
        (0, 200),
        "the seen set survived"
    );
    let mut all = Vec::new();
    while all.len() < 140 {
        let l = g.lease(100).await.expect("lease");
        assert!(!l.is_empty(), "{} of 140 leased, then nothing", all.len());
        all.extend(l);
    }
    assert!(
        all.iter().all(|l| !done.contains(&l.request.url.as_str())),
        "a request acked done before the failover came back"
    );
    let retried = all.iter().filter(|l| l.request.retries == 1).count();
    assert_eq!(retried, 20, "the retries survived");
    let acks = all.iter().map(|l| (l.id, Outcome::Done)).collect();
    g.ack_many(acks).await.expect("ack the rest");
    let s = g.stats().await.expect("stats");
    assert_eq!((s.success, s.left), (200, 0));
    g.close().await.expect("close");
}

/// A write that no replica confirms in time (the replica is stopped) fails for good and
/// breaks the handle, since a failover could lose it; the frontier opened again has it
/// (the master applied it).
#[tokio::test]
async fn a_write_no_replica_confirms_breaks_the_handle() {
    let Some(cluster) = silk_testkit::redis_cluster_for_test(3, 1) else {
        return;
    };
    let url = cluster.url();
    let prefix = "unconfirmed";
    let clock = Arc::new(ManualClock::new(T0));
    let f = RedisFrontier::open(&url, prefix, config(), clock.clone())
        .await
        .expect("open on the cluster");
    assert_eq!(f.enqueue(reqs(6)).await.expect("enqueue").added, 6);

    let meta = format!("{{silk:frontier:{prefix}}}:meta");
    let paused = cluster
        .pause_replicas_of(&meta)
        .unwrap_or_else(|e| panic!("{e}"));
    let more = (0..4)
        .map(|i| Request::from_canonical(format!("https://more.test/{i}")))
        .collect();
    let e = f.enqueue(more).await.expect_err("no replica confirms");
    cluster.resume(&paused).unwrap_or_else(|e| panic!("{e}"));
    assert!(!e.is_retryable(), "{e}");
    assert!(e.to_string().contains("replica"), "{e}");
    assert!(f.stats().await.is_err(), "the handle is broken");

    let g = RedisFrontier::open(&url, prefix, config(), clock)
        .await
        .expect("reopen");
    let s = g.stats().await.expect("stats");
    assert_eq!(
        (s.total, s.pending),
        (10, 10),
        "the master applied the write"
    );
    g.close().await.expect("close");
}
