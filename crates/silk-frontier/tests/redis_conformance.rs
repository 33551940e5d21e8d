//! The frontier conformance suite (`silk_frontier::conformance`) against [`RedisFrontier`],
//! on the Redis server named by `SILK_TEST_REDIS` (e.g. `redis://127.0.0.1:6379`). Each
//! test uses its own key prefixes (`t<pid>-<n>-<slot>`), deleted after the check (pass or
//! fail). Without the variable, every test prints `skipped: SILK_TEST_REDIS not set` and
//! passes.

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
        Some(Self {
            url: redis_url()?,
            base: unique("c"),
            used: Mutex::new(Vec::new()),
        })
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
