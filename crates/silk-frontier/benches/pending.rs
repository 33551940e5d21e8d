//! A frontier with millions of pending URLs (issue 16, item 3): how fast it takes them in,
//! how fast it hands them out, and what it holds in memory and in the store. One run, not
//! criterion samples: filling ten million URLs is the measurement, and it is done once.
//! Figures and the command are in `docs/benchmarks.md` ("Millions pending").
//!
//! ```text
//! cargo bench -p silk-frontier --bench pending            # 10,000,000 URLs, 10,000 hosts
//! N=1000000 HOSTS=1000 cargo bench -p silk-frontier --bench pending
//! FRONTIER=redis://127.0.0.1:6379 N=1000000 cargo bench -p silk-frontier --bench pending
//! EXACT=0 cargo bench -p silk-frontier --bench pending   # exact_dedup: false (Bloom alone)
//! ```
//!
//! Phases, each timed on its own (the requests are built outside the timed calls):
//! 1. `fill`: N new URLs over HOSTS hosts in batches of `BATCH` (default 10,000): every one
//!    dedup-checked (recent cache, batch, Bloom filter, the store for a Bloom "maybe") and
//!    stored;
//! 2. `duplicates`: 2,000,000 URLs already stored (200,000 with exact dedup; `DUPS`), in the
//!    same batches (the common case of a crawl: most links are known);
//! 3. `crawl mix`: batches of 29 known links and 1 new one, 30,000 batches;
//! 4. `lease+ack`: `lease(512)` and `ack_many(Done)` of 1,000,000 requests;
//! 5. `reopen`: close and open again with what is left pending.
//!
//! Memory is the process's resident set (`VmRSS`, `VmHWM` from `/proc/self/status`);
//! dedup memory is the Bloom filter's (`bloom_bytes`) and the recent-fingerprint cache's.

use silk_core::{Clock, Request, SystemClock};
use silk_frontier::{
    EmbeddedFrontier, FrontierConfig, FrontierStats, FrontierStore, Outcome, RedisFrontier,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn url(i: u64, hosts: u64) -> Request {
    Request::from_canonical(format!(
        "https://site{}.example.com/section/{}/page-{i}.html",
        i % hosts,
        i % 17
    ))
}

/// `VmRSS` and `VmHWM` of this process, MB.
fn rss_mb() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map_or(0, |kb| kb / 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn report(phase: &str, n: u64, took: Duration) {
    let (rss, hwm) = rss_mb();
    println!(
        "{phase:>12}: {n:>10} in {:>7.2} s = {:>10.0} /s   RSS {rss} MB (peak {hwm} MB)",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64().max(1e-9)
    );
}

fn stats_line(s: &FrontierStats) {
    println!(
        "       stats: total {} pending {} (in memory {}) in_flight {} success {} duplicates {} hosts {}",
        s.total, s.pending, s.in_memory, s.in_flight, s.success, s.duplicates, s.hosts
    );
    println!(
        "      memory: Bloom {:.2} MB = {:.2} B/URL; recent cache {:.2} MB; store {:.1} MB = {:.0} B/URL",
        s.bloom_bytes as f64 / 1e6,
        s.bloom_bytes as f64 / s.total.max(1) as f64,
        s.dedup_cache_bytes as f64 / 1e6,
        s.store_bytes as f64 / 1e6,
        s.store_bytes as f64 / s.total.max(1) as f64,
    );
}

async fn open(
    target: &Option<String>,
    dir: &std::path::Path,
    prefix: &str,
    config: FrontierConfig,
) -> Arc<dyn FrontierStore> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    match target {
        None => Arc::new(EmbeddedFrontier::open(dir, config, clock).expect("open")),
        Some(url) => Arc::new(
            RedisFrontier::open(url, prefix, config, clock)
                .await
                .expect("open redis"),
        ),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the command line.
    let n = env_u64("N", 10_000_000);
    let hosts = env_u64("HOSTS", 10_000).max(1);
    let batch = env_u64("BATCH", 10_000).max(1);
    let target = std::env::var("FRONTIER").ok().filter(|s| !s.is_empty());
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let prefix = format!("silk-bench-pending-{}", std::process::id());
    let config = FrontierConfig {
        per_host_concurrency: 8,
        per_host_delay_ms: 0,
        expected_urls: n,
        bloom_fp_rate: 0.001,
        exact_dedup: env_u64("EXACT", 1) != 0,
        ..FrontierConfig::default()
    };
    println!(
        "pending benchmark: N {n}, hosts {hosts}, batches of {batch}, store {}, memory_window {}, exact_dedup {}",
        target.as_deref().unwrap_or("embedded"),
        config.memory_window,
        config.exact_dedup
    );
    let f = open(&target, dir.path(), &prefix, config.clone()).await;

    // 1. fill
    let mut took = Duration::ZERO;
    let mut i = 0u64;
    while i < n {
        let end = (i + batch).min(n);
        let requests: Vec<Request> = (i..end).map(|k| url(k, hosts)).collect();
        let t = Instant::now();
        let o = f.enqueue(requests).await.expect("enqueue");
        took += t.elapsed();
        if config.exact_dedup {
            assert_eq!(o.added, end - i, "new URLs taken as duplicates");
        }
        i = end;
    }
    report("fill", n, took);
    let s = f.stats().await.expect("stats");
    stats_line(&s);
    if !config.exact_dedup {
        println!(
            "  false positives: {} of {n} new URLs taken as seen ({:.3} %)",
            n - s.total,
            (n - s.total) as f64 * 100.0 / n as f64
        );
    }

    // 2. duplicates (fewer with exact dedup: most of them are store reads)
    let dups = env_u64(
        "DUPS",
        if config.exact_dedup {
            200_000
        } else {
            2_000_000
        },
    )
    .min(n);
    let mut took = Duration::ZERO;
    let mut k = 0u64;
    while k < dups {
        let end = (k + batch).min(dups);
        let requests: Vec<Request> = (k..end)
            .map(|j| url((j * 7_919 + 104_729) % n, hosts))
            .collect();
        let t = Instant::now();
        let o = f.enqueue(requests).await.expect("enqueue");
        took += t.elapsed();
        assert_eq!(o.added, 0, "known URLs taken as new");
        k = end;
    }
    report("duplicates", dups, took);

    // 3. crawl mix: 29 known links and 1 new one per page.
    let pages = 30_000u64;
    let mut took = Duration::ZERO;
    for p in 0..pages {
        let mut requests: Vec<Request> = (0..29)
            .map(|j| url((p * 31 + j * 977) % n, hosts))
            .collect();
        requests.push(url(n + p, hosts));
        let t = Instant::now();
        f.enqueue(requests).await.expect("enqueue");
        took += t.elapsed();
    }
    report("crawl mix", pages * 30, took);

    // 4. lease + ack
    let cycles = 1_000_000u64.min(n);
    let mut took = Duration::ZERO;
    let mut done = 0u64;
    while done < cycles {
        let t = Instant::now();
        let leases = f.lease(512).await.expect("lease");
        assert!(!leases.is_empty(), "nothing to lease after {done}");
        let acks = leases.iter().map(|l| (l.id, Outcome::Done)).collect();
        f.ack_many(acks).await.expect("ack");
        took += t.elapsed();
        done += leases.len() as u64;
    }
    report("lease+ack", done, took);
    let s = f.stats().await.expect("stats");
    stats_line(&s);

    // 5. reopen
    f.close().await.expect("close");
    drop(f);
    let t = Instant::now();
    let f = open(&target, dir.path(), &prefix, config).await;
    let took = t.elapsed();
    let again = f.stats().await.expect("stats");
    report("reopen", again.pending, took);
    stats_line(&again);
    assert_eq!(again.pending, s.pending);
    let leases = f.lease(512).await.expect("lease after reopen");
    assert!(!leases.is_empty());
    f.close().await.expect("close");
    if let Some(url) = &target {
        RedisFrontier::destroy(url, &prefix).await.expect("destroy");
    }
}
