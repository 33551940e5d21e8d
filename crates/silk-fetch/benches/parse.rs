//! Page parsing speed on the demo site's product pages (3–6 KB, ~35 links in every form a
//! canonicaliser must collapse, JSON-LD), as `silk crawl` parses them.
//!
//! `cargo bench -p silk-fetch --bench parse`
//!
//! - `links_2_css`: links + `h1.title` + `span.price` (the crawl benchmark's spider): the
//!   number that must stay well under 100 µs per page on one core.
//! - `links_only`, `fields_only`: the two halves.
//! - `jsonld_regex`: links + a JSON-LD path + a regex (still one streaming pass).
//! - `xpath_slow_path`: links + one XPath field (builds a full tree: the slow path).
//!
//! Time is the benchmark thread's own CPU time (`CLOCK_THREAD_CPUTIME_ID`), so that other
//! work on a shared machine does not count.

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use silk_core::Request;
use silk_core::spider::Spider;
use silk_fetch::{Extractor, FetchConfig, Fetcher, Wants};
use silk_testkit::{DemoConfig, DemoSite};
use std::hint::black_box;
use url::Url;

/// CPU time of the calling thread, in ns.
fn thread_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Criterion measurement of on-CPU time (see the module docs).
struct OnCpu;

impl Measurement for OnCpu {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        WallTime.formatter()
    }
}

/// Fetches a few product pages from a demo site (once, before measuring).
fn demo_pages() -> Vec<(Url, bytes::Bytes)> {
    let site = DemoSite::start_dedicated(DemoConfig {
        hosts: 1,
        pages: 400,
        record_timings: false,
        ..DemoConfig::default()
    })
    .expect("demo site starts");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let fetcher = Fetcher::new(FetchConfig::default()).expect("fetcher");
    let pages = rt.block_on(async {
        let mut pages = Vec::new();
        for i in (100..400).step_by(15) {
            let url = site.page_url(1, i);
            let resp = fetcher
                .fetch(&Request::from_canonical(url.clone()))
                .await
                .expect("demo page fetched");
            assert_eq!(resp.status, 200, "{url}");
            pages.push((Url::parse(&url).expect("url"), resp.body));
        }
        pages
    });
    drop(site);
    pages
}

fn extractor(extract: &str) -> Extractor {
    let yaml = format!(
        "name: bench\nstart_urls: [\"http://127.0.0.1/\"]\nfollow: [{{deny: ['/calendar/']}}]\n{extract}"
    );
    Extractor::compile(&Spider::from_yaml(&yaml, "bench.yaml").expect("spider")).expect("rules")
}

fn bench(c: &mut Criterion<OnCpu>) {
    let pages = demo_pages();
    let total: usize = pages.iter().map(|(_, b)| b.len()).sum();
    let links: usize = {
        let ex = extractor("");
        pages
            .iter()
            .map(|(u, b)| ex.parse(u, b, Some("text/html")).links.len())
            .sum()
    };
    eprintln!(
        "{} pages, {} bytes on average, {} links kept on average",
        pages.len(),
        total / pages.len(),
        links / pages.len()
    );
    let two_css = "extract:\n  title: {css: h1.title}\n  price: {css: span.price}\n";
    let cases: [(&str, Extractor, Wants); 5] = [
        ("links_2_css", extractor(two_css), Wants::default()),
        ("links_only", extractor(""), Wants::default()),
        (
            "fields_only",
            extractor(two_css),
            Wants {
                links: false,
                fields: true,
            },
        ),
        (
            "jsonld_regex",
            extractor(
                "extract:\n  sku: {json: '$.sku'}\n  words: {regex: 'Price: <span class=\"price\">([0-9.]+)'}\n",
            ),
            Wants::default(),
        ),
        (
            "xpath_slow_path",
            extractor("extract:\n  title: {xpath: '//h1/text()'}\n"),
            Wants::default(),
        ),
    ];
    let mut group = c.benchmark_group("parse");
    group.throughput(Throughput::Elements(1));
    for (name, ex, wants) in &cases {
        let mut i = 0;
        group.bench_function(*name, |b| {
            b.iter(|| {
                let (url, body) = &pages[i % pages.len()];
                i += 1;
                black_box(ex.parse_with(url, body, Some("text/html; charset=utf-8"), *wants))
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(OnCpu);
    targets = bench
}
criterion_main!(benches);
