//! Per-request cost of the embedded frontier on the crawler's hot paths (figures in
//! `docs/benchmarks.md`, "Frontier store"):
//!
//! - `enqueue_new`: batches of 30 new URLs over 1,000 hosts (Bloom miss, host key, JSON,
//!   two keys each, one write per batch);
//! - `enqueue_duplicates`: batches of 30 URLs among 100,000 already seen, all in the
//!   recent-fingerprint cache (Bloom "maybe" confirmed in memory);
//! - `enqueue_duplicates_uncached`: the same with a 1,024-entry cache (most confirmed by a
//!   store lookup: the worst case);
//! - `page_cycle`: what the crawler does per fetched page: lease 1, then `ack_and_enqueue`
//!   with 30 links of which 1 is new (throughput in pages).

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use silk_core::{ManualClock, Request};
use silk_frontier::{EmbeddedFrontier, EmbeddedOptions, FrontierConfig, FrontierStore, Outcome};
use std::sync::Arc;
use std::time::Duration;

const LINKS: u64 = 30;

fn config() -> FrontierConfig {
    FrontierConfig {
        per_host_concurrency: 1_000,
        per_host_delay_ms: 0,
        expected_urls: 10_000_000,
        ..FrontierConfig::default()
    }
}

fn url(i: u64) -> Request {
    Request::from_canonical(format!(
        "https://site{}.example.com/section/{}/page-{i}.html",
        i % 1_000,
        i % 17
    ))
}

fn open() -> (tempfile::TempDir, EmbeddedFrontier) {
    open_with(0)
}

fn open_with(dedup_cache_entries: usize) -> (tempfile::TempDir, EmbeddedFrontier) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let options = EmbeddedOptions {
        dedup_cache_entries: (dedup_cache_entries > 0).then_some(dedup_cache_entries),
        ..EmbeddedOptions::default()
    };
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let f = EmbeddedFrontier::open_with(dir.path(), config(), clock, options).expect("open");
    (dir, f)
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut g = c.benchmark_group("frontier");
    g.measurement_time(Duration::from_secs(5));
    g.warm_up_time(Duration::from_secs(1));

    g.throughput(Throughput::Elements(LINKS));
    let (_d, f) = open();
    let mut next = 0u64;
    g.bench_function("enqueue_new", |b| {
        b.iter_batched(
            || {
                let batch: Vec<Request> = (next..next + LINKS).map(url).collect();
                next += LINKS;
                batch
            },
            |batch| rt.block_on(f.enqueue(batch)).expect("enqueue"),
            BatchSize::SmallInput,
        )
    });
    drop(f);

    // Duplicates of 100,000 stored URLs.
    let (_d1, f) = open();
    let seen = 100_000u64;
    for chunk in (0..seen).collect::<Vec<_>>().chunks(1_000) {
        rt.block_on(f.enqueue(chunk.iter().copied().map(url).collect()))
            .expect("seed");
    }
    let mut k = 0u64;
    g.bench_function("enqueue_duplicates", |b| {
        b.iter_batched(
            || {
                let batch: Vec<Request> = (0..LINKS)
                    .map(|j| url((k * 7919 + j * 104_729) % seen))
                    .collect();
                k += 1;
                batch
            },
            |batch| rt.block_on(f.enqueue(batch)).expect("enqueue"),
            BatchSize::SmallInput,
        )
    });
    drop(f);

    // The same with a dedup cache far smaller than the seen set: most duplicates are
    // confirmed by a store lookup.
    let (_d3, f) = open_with(1_024);
    for chunk in (0..seen).collect::<Vec<_>>().chunks(1_000) {
        rt.block_on(f.enqueue(chunk.iter().copied().map(url).collect()))
            .expect("seed");
    }
    g.bench_function("enqueue_duplicates_uncached", |b| {
        b.iter_batched(
            || {
                let batch: Vec<Request> = (0..LINKS)
                    .map(|j| url((k * 7919 + j * 104_729) % seen))
                    .collect();
                k += 1;
                batch
            },
            |batch| rt.block_on(f.enqueue(batch)).expect("enqueue"),
            BatchSize::SmallInput,
        )
    });
    drop(f);

    g.throughput(Throughput::Elements(1));
    let (_d2, f) = open();
    let seed: Vec<Request> = (0..10_000).map(url).collect();
    rt.block_on(f.enqueue(seed)).expect("seed");
    let mut fresh = 10_000u64;
    g.bench_function("page_cycle", |b| {
        b.iter_batched(
            || {
                let mut links: Vec<Request> = (0..LINKS - 1)
                    .map(|j| url((fresh * 31 + j * 977) % fresh))
                    .collect();
                links.push(url(fresh));
                fresh += 1;
                links
            },
            |links| {
                rt.block_on(async {
                    let l = f.lease(1).await.expect("lease");
                    let id = l[0].id;
                    f.ack_and_enqueue(id, Outcome::Done, links)
                        .await
                        .expect("ack_and_enqueue")
                })
            },
            BatchSize::SmallInput,
        )
    });
    let s = rt.block_on(f.stats()).expect("stats");
    eprintln!(
        "page_cycle end: total {} left {} bloom {} B for {} urls ({:.2} B/url), store {} B ({:.1} B/url)",
        s.total,
        s.left,
        s.bloom_bytes,
        s.seen_urls,
        s.bloom_bytes_per_url(),
        s.store_bytes,
        s.store_bytes_per_url()
    );
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
