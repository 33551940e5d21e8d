//! The durability contract under `kill -9`: a child process (this test binary, re-run with
//! `SILK_FRONTIER_CRASH_DIR` set) enqueues, leases and acks in a loop, printing each call
//! after it returned `Ok`; the parent kills it with SIGKILL at a random point, reopens the
//! store and checks that every reported enqueue is pending or was acked, that nothing
//! reported acked comes back, and that the counters agree with the data.

use silk_core::{Clock, ManualClock, Request, SystemClock};
use silk_frontier::{AckResult, EmbeddedFrontier, FrontierConfig, FrontierStore, Outcome};
use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

const DIR_ENV: &str = "SILK_FRONTIER_CRASH_DIR";

fn config() -> FrontierConfig {
    FrontierConfig {
        per_host_concurrency: 64,
        per_host_delay_ms: 0,
        lease_timeout_ms: 60_000,
        max_retries: 5,
        retry_backoff_ms: 1,
        segment_ms: None,
        ..FrontierConfig::default()
    }
}

/// The child: runs only when the parent sets the env var.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(DIR_ENV) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let store = EmbeddedFrontier::open(&dir, config(), Arc::new(SystemClock)).expect("open");
        let mut n = 0u64;
        loop {
            let batch: Vec<Request> = (0..6)
                .map(|i| {
                    // Every third URL repeats an earlier one.
                    let k = if i % 3 == 2 { n / 2 } else { n + i };
                    Request::from_canonical(format!("https://h{}.test/{k}", k % 7))
                })
                .collect();
            n += 6;
            let urls: Vec<String> = batch.iter().map(|r| r.url.clone()).collect();
            store.enqueue(batch).await.expect("enqueue");
            for u in urls {
                println!("E {u}");
            }
            let leases = store.lease(4).await.expect("lease");
            for (i, l) in leases.into_iter().enumerate() {
                if i == 0 {
                    // A page with links: ack and links in one atomic write.
                    let links = vec![
                        Request::from_canonical(format!("https://h{}.test/link{n}", n % 7)),
                        Request::from_canonical(format!("https://h{}.test/{}", n % 7, n / 3)),
                    ];
                    let urls: Vec<String> = links.iter().map(|r| r.url.clone()).collect();
                    let (ack, _) = store
                        .ack_and_enqueue(l.id, Outcome::Done, links)
                        .await
                        .expect("ack_and_enqueue");
                    assert_eq!(ack, AckResult::Succeeded);
                    println!("D {}", l.request.url);
                    for u in urls {
                        println!("E {u}");
                    }
                    continue;
                }
                let outcome = if i == 3 {
                    Outcome::Retry { reason: "x".into() }
                } else {
                    Outcome::Done
                };
                match store.ack(l.id, outcome).await.expect("ack") {
                    AckResult::Succeeded => println!("D {}", l.request.url),
                    AckResult::Failed => println!("F {}", l.request.url),
                    _ => {}
                }
            }
        }
    });
}

#[test]
fn kill_9_loses_nothing_acked_or_enqueued() {
    if std::env::var(DIR_ENV).is_ok() {
        return;
    }
    for round in 0..3u64 {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut child = Command::new(std::env::current_exe().expect("current exe"))
            .args(["crash_child", "--exact", "--nocapture", "--test-threads=1"])
            .env(DIR_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("stdout");
        let mut enqueued = HashSet::new();
        let mut done = HashSet::new(); // acked Done or Failed
        let stop_after = 3_000 + round * 4_000 + (SystemClock.now_ms() % 1_000);
        let mut lines = BufReader::new(stdout).lines();
        let mut seen = 0;
        let mut killed = false;
        // Read until EOF: lines still in the pipe after the kill were printed, so their
        // calls returned Ok.
        while let Some(Ok(line)) = lines.next() {
            if let Some(u) = line.strip_prefix("E ") {
                enqueued.insert(u.to_owned());
            } else if let Some(u) = line.strip_prefix("D ").or_else(|| line.strip_prefix("F ")) {
                done.insert(u.to_owned());
            } else {
                continue;
            }
            seen += 1;
            if seen >= stop_after && !killed {
                child.kill().expect("kill -9");
                killed = true;
            }
        }
        child.wait().expect("wait");
        assert!(killed, "child stopped early after {seen} lines");

        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let clock = ManualClock::new(SystemClock.now_ms() + 3_600_000);
            let store =
                EmbeddedFrontier::open(dir.path(), config(), Arc::new(clock)).expect("reopen");
            let s = store.stats().await.expect("stats");
            assert!(
                s.success >= done.len() as u64,
                "success {} < reported {}",
                s.success,
                done.len()
            );
            assert_eq!(
                s.left, s.pending,
                "nothing in flight after a restart: {s:?}"
            );
            let mut pending = HashSet::new();
            loop {
                let leases = store.lease(10_000).await.expect("lease");
                if leases.is_empty() {
                    break;
                }
                for l in leases {
                    assert!(
                        pending.insert(l.request.url.clone()),
                        "{} twice",
                        l.request.url
                    );
                    store.ack(l.id, Outcome::Done).await.expect("ack");
                }
            }
            assert_eq!(
                pending.len() as u64,
                s.left,
                "stored requests = counted left"
            );
            for u in &done {
                assert!(!pending.contains(u), "acked {u} came back");
            }
            // Every reported enqueue is pending or was acked; the only acks the parent may not
            // have heard of are those of the last lease batch (killed before printing).
            let unreported: Vec<_> = enqueued
                .iter()
                .filter(|u| !pending.contains(*u) && !done.contains(*u))
                .collect();
            assert!(unreported.len() <= 4, "lost: {unreported:?}; {s:?}");
            let finished = s.success + s.failed + s.dropped;
            assert!(finished >= (done.len() + unreported.len()) as u64);
            store.close().await.expect("close");
        });
    }
}
