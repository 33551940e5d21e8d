//! End-to-end crawls of the testkit's sites over real loopback sockets, through the library
//! engine (the process-level tests, with SIGKILL, are in the `silk` crate).

use serde_json::Value;
use silk_core::SystemClock;
use silk_core::spider::Spider;
use silk_crawl::{Crawl, CrawlOptions, Finish, Summary};
use silk_testkit::demo::{DemoConfig, DemoSite};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use tokio::sync::watch;

fn spider(yaml: &str) -> Spider {
    Spider::from_yaml(yaml, "test.yaml").unwrap_or_else(|e| panic!("{e}"))
}

async fn crawl(spider: Spider, dir: &Path) -> Summary {
    let (_stop_tx, stop_rx) = watch::channel(false);
    let opts = CrawlOptions {
        data_dir: dir.join("data"),
        out: dir.join("items.jsonl"),
        clock: Arc::new(SystemClock),
        args: BTreeMap::new(),
        files_dir: None,
    };
    Crawl::open(spider, opts)
        .await
        .expect("crawl opens")
        .run(stop_rx)
        .await
        .expect("crawl runs")
}

fn items(dir: &Path) -> Vec<serde_json::Map<String, Value>> {
    let text = std::fs::read_to_string(dir.join("items.jsonl")).unwrap_or_default();
    text.lines()
        .map(|l| {
            serde_json::from_str::<Value>(l)
                .unwrap()
                .as_object()
                .unwrap()
                .clone()
        })
        .collect()
}

/// Asserts the item file holds every content page of `site` exactly once; returns the items.
fn assert_every_page_once(dir: &Path, site: &DemoSite) -> Vec<serde_json::Map<String, Value>> {
    let items = items(dir);
    let keys: BTreeSet<String> = items
        .iter()
        .map(|i| i["url"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(keys.len(), items.len(), "an item was written twice");
    let expected: BTreeSet<String> = site
        .expected_pages()
        .into_iter()
        .filter(|u| u.contains("/p/"))
        .collect();
    assert_eq!(keys, expected, "items differ from the site's content pages");
    items
}

fn demo_spider(site: &DemoSite, extra: &str) -> String {
    let hosts: Vec<String> = site.host_ips().iter().map(|ip| ip.to_string()).collect();
    format!(
        "name: t\nstart_urls: ['{}']\nallowed_domains: [{}]\nfollow: [{{deny: ['/calendar/']}}]\nitem_when: '/p/\\d+$'\n\
         extract:\n  title: {{css: 'h1.title'}}\n  sku: {{json: '$.sku'}}\n{extra}",
        site.start_url(),
        hosts.join(", ")
    )
}

/// Every content page of the site ends up in the output exactly once, each fetched exactly
/// once: fragments, tracking variants, percent-encoding variants and redirect targets collapse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_crawl_fetches_every_page_exactly_once() {
    let site = DemoSite::start(DemoConfig {
        port: 0,
        hosts: 3,
        pages: 150,
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let yaml = demo_spider(
        &site,
        "concurrency: 32\nper_host_concurrency: 8\nper_host_delay_ms: 0\n",
    );
    let summary = crawl(spider(&yaml), dir.path()).await;
    assert_eq!(summary.finish, Finish::Complete);

    let items = assert_every_page_once(dir.path(), &site);
    for item in &items {
        let url = item["url"].as_str().unwrap();
        assert!(
            item["title"].as_str().is_some_and(|t| !t.is_empty()),
            "no title in {item:?}"
        );
        assert!(item["sku"].as_str().is_some(), "no sku for {url}: {item:?}");
    }

    // Server side: no page was fetched twice, robots.txt was respected.
    let stats = site.stats();
    let mut per_page: BTreeMap<String, u32> = BTreeMap::new();
    for (url, n) in &stats.hits {
        let path_only = url.split(['?', '#']).next().unwrap().to_owned();
        *per_page.entry(path_only).or_default() += n;
    }
    let twice: Vec<_> = per_page
        .iter()
        .filter(|(u, n)| u.contains("/p/") && **n > 1)
        .collect();
    assert!(twice.is_empty(), "pages fetched more than once: {twice:?}");
    assert!(
        !stats.hits.keys().any(|u| u.contains("/private/")),
        "robots.txt disallowed path fetched"
    );
    let f = &summary.progress.frontier;
    assert!(
        f.duplicates > 0,
        "the site has many duplicate links; none were counted"
    );
    assert_eq!(f.left, 0);
    assert_eq!(f.in_flight, 0);
}

/// `per_host_concurrency` and `per_host_delay_ms` hold, measured on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn politeness_holds_per_host() {
    // The site runs on its own thread, so that its arrival times are not skewed by the
    // crawler's work on the test's runtime.
    let site = DemoSite::start_dedicated(DemoConfig {
        port: 0,
        hosts: 2,
        pages: 25,
        latency_ms: Some(30),
        ..Default::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let delay_ms = 100;
    let yaml = demo_spider(
        &site,
        &format!("concurrency: 16\nper_host_concurrency: 2\nper_host_delay_ms: {delay_ms}\n"),
    );
    let summary = crawl(spider(&yaml), dir.path()).await;
    assert_eq!(summary.finish, Finish::Complete);
    let stats = site.stats();
    for (host, max) in &stats.per_host_max_in_flight {
        assert!(*max <= 2, "host {host}: {max} requests in flight at once");
    }
    let mut checked = 0;
    for (host, starts) in &stats.per_host_starts {
        let mut starts = starts.clone();
        starts.sort_unstable();
        let gaps_ms: Vec<f64> = starts
            .windows(2)
            .map(|p| (p[1] - p[0]) as f64 / 1000.0)
            .collect();
        // The crawler spaces its sends by the delay (frontier leases, then the send gate); the
        // server sees arrivals, each shifted by loopback transport and thread scheduling on a
        // loaded 2-core machine. A late arrival shortens one gap and lengthens the one before,
        // so the shifts do not add up: any k consecutive gaps span at least k delays, less
        // one jitter allowance. Requests sent together would fail this at once.
        let jitter_ms = 25.0;
        let starts_ms: Vec<f64> = starts.iter().map(|us| *us as f64 / 1000.0).collect();
        for i in 0..starts_ms.len() {
            for j in i + 1..starts_ms.len() {
                let span = starts_ms[j] - starts_ms[i];
                let least = (j - i) as f64 * delay_ms as f64 - jitter_ms;
                assert!(
                    span >= least,
                    "host {host}: starts {i}..{j} span {span:.1} ms < {least:.1} ms: {gaps_ms:?}"
                );
            }
        }
        let mean = gaps_ms.iter().sum::<f64>() / gaps_ms.len().max(1) as f64;
        assert!(
            mean >= delay_ms as f64,
            "host {host}: mean gap {mean:.1} ms"
        );
        checked += gaps_ms.len();
    }
    assert!(
        checked > 40,
        "too few requests to judge politeness ({checked})"
    );
    assert!(
        !stats.hits.keys().any(|u| u.contains("/private/")),
        "robots.txt disallowed path fetched"
    );
}

/// `per_host_concurrency` holds on the wire: with slow answers the crawler keeps exactly that
/// many requests in flight per host, never more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_host_concurrency_holds_on_the_wire() {
    let site = DemoSite::start_dedicated(DemoConfig {
        port: 0,
        hosts: 2,
        pages: 30,
        latency_ms: Some(60),
        ..Default::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let yaml = demo_spider(
        &site,
        "concurrency: 16\nper_host_concurrency: 3\nper_host_delay_ms: 0\n",
    );
    let summary = crawl(spider(&yaml), dir.path()).await;
    assert_eq!(summary.finish, Finish::Complete);
    let stats = site.stats();
    assert_eq!(stats.per_host_max_in_flight.len(), 2);
    for (host, max) in &stats.per_host_max_in_flight {
        assert_eq!(
            *max, 3,
            "host {host}: at most {max} requests in flight at once"
        );
    }
}

/// Ctrl-C semantics through the library: a stopped crawl resumes from the same data dir, and
/// the output still holds every page exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_crawl_resumes_without_duplicates() {
    let site = DemoSite::start(DemoConfig {
        port: 0,
        hosts: 2,
        pages: 100,
        latency_ms: Some(5),
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let yaml = demo_spider(
        &site,
        "concurrency: 4\nper_host_concurrency: 2\nper_host_delay_ms: 0\n",
    );
    let opts = CrawlOptions {
        data_dir: dir.path().join("data"),
        out: dir.path().join("items.jsonl"),
        clock: Arc::new(SystemClock),
        args: BTreeMap::new(),
        files_dir: None,
    };
    let first = Crawl::open(spider(&yaml), opts.clone()).await.unwrap();
    let (stop_tx, stop_rx) = watch::channel(false);
    let run = tokio::spawn(first.run(stop_rx));
    // Stop once the site has answered a few dozen requests (an event, counted by the site).
    site.wait_for_requests(60).await;
    stop_tx.send(true).expect("the crawl is still running");
    let stopped = run.await.unwrap().unwrap();
    assert_eq!(stopped.finish, Finish::Stopped);
    let partial = items(dir.path()).len();
    assert!(
        (1..200).contains(&partial),
        "{partial} items after the stop"
    );

    let resumed = Crawl::open(spider(&yaml), opts)
        .await
        .unwrap()
        .run(watch::channel(false).1)
        .await
        .unwrap();
    assert_eq!(resumed.finish, Finish::Complete);
    assert_every_page_once(dir.path(), &site);
}

/// A spider whose start requests are expanded from a template (hosts from a file, ports from
/// an argument, an integer range of pages) fetches each of them exactly once, feeds its
/// frontier in batches rather than all at once, and a stopped crawl resumes from its cursor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expanded_start_requests_are_fed_in_batches_and_resume_from_their_cursor() {
    let site = DemoSite::start(DemoConfig {
        port: 0,
        hosts: 3,
        pages: 2_000,
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let hosts: Vec<String> = site.host_ips().iter().map(|ip| ip.to_string()).collect();
    std::fs::write(dir.path().join("hosts.txt"), hosts.join("\n") + "\n\n").unwrap();
    let yaml = format!(
        "name: t\nallowed_domains: [{}]\nfollow: []\nrobots: false\nitem_when: '/p/\\d+$'\n\
         extract:\n  sku: {{json: '$.sku'}}\nconcurrency: 8\nper_host_concurrency: 8\nper_host_delay_ms: 0\n\
         expand:\n  template: 'http://{{+host}}:{{port}}/p/{{i}}'\n  params:\n    host: {{file: hosts.txt}}\n    port: {{arg: port}}\n    i: {{range: [0, 1999]}}\n",
        hosts.join(", ")
    );
    let opts = CrawlOptions {
        data_dir: dir.path().join("data"),
        out: dir.path().join("items.jsonl"),
        clock: Arc::new(SystemClock),
        args: BTreeMap::from([("port".to_string(), site.port().to_string())]),
        files_dir: Some(dir.path().to_owned()),
    };
    let first = Crawl::open(spider(&yaml), opts.clone()).await.unwrap();
    let (stop_tx, stop_rx) = watch::channel(false);
    let run = tokio::spawn(first.run(stop_rx));
    site.wait_for_requests(500).await;
    stop_tx.send(true).expect("the crawl is still running");
    let stopped = run.await.unwrap().unwrap();
    assert_eq!(stopped.finish, Finish::Stopped);
    // Fed in batches of 1,000: a few of them, not the 6,000 requests.
    let cursor: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("data/expand.json")).unwrap(),
    )
    .unwrap();
    let fed = cursor["next"].as_u64().unwrap();
    assert_eq!(cursor["total"], 6_000);
    assert!((1_000..=3_000).contains(&fed), "fed {fed}");
    assert!(stopped.progress.frontier.total <= fed);

    let resumed = Crawl::open(spider(&yaml), opts.clone())
        .await
        .unwrap()
        .run(watch::channel(false).1)
        .await
        .unwrap();
    assert_eq!(resumed.finish, Finish::Complete);
    let items = items(dir.path());
    let keys: BTreeSet<String> = items
        .iter()
        .map(|i| i["url"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(keys.len(), 6_000);
    assert_eq!(items.len(), 6_000, "an item was written twice");
    let stats = site.stats();
    assert!(stats.repeated().is_empty(), "{:?}", stats.repeated());
    assert_eq!(stats.hits_under("/p/"), 6_000);

    // Other file lines of the same count are another expansion: the cursor starts over (the
    // frontier's dedup drops what was fetched) rather than taking the old one's place.
    let cursor = |dir: &Path| -> Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join("data/expand.json")).unwrap())
            .unwrap()
    };
    let before = cursor(dir.path());
    let mut reversed = hosts.clone();
    reversed.reverse();
    std::fs::write(dir.path().join("hosts.txt"), reversed.join("\n")).unwrap();
    let again = Crawl::open(spider(&yaml), opts.clone())
        .await
        .unwrap()
        .run(watch::channel(false).1)
        .await
        .unwrap();
    assert_eq!(again.finish, Finish::Complete);
    let after = cursor(dir.path());
    assert_ne!(after["fingerprint"], before["fingerprint"]);
    assert_eq!(after["next"], 6_000, "fed again from the start");
    assert_eq!(
        site.stats().hits_under("/p/"),
        6_000,
        "nothing fetched twice"
    );

    // A spider whose parameter names a file that is not there is refused before anything.
    let missing = yaml.replace("hosts.txt", "gone.txt");
    let err = match Crawl::open(
        spider(&missing),
        CrawlOptions {
            data_dir: dir.path().join("other"),
            out: dir.path().join("other.jsonl"),
            clock: Arc::new(SystemClock),
            args: BTreeMap::new(),
            files_dir: Some(dir.path().to_owned()),
        },
    )
    .await
    {
        Ok(_) => panic!("a missing file was accepted"),
        Err(e) => e,
    };
    assert!(err.is_bad_spider());
    let msg = err.to_string();
    assert!(
        msg.contains("expand.params.host.file: cannot read `gone.txt`"),
        "{msg}"
    );
    assert!(
        msg.contains("expand.params.port.arg: the run has no argument `port`"),
        "{msg}"
    );
}

/// `max_pages` and `max_items` stop the crawl at their limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_pages_max_items_and_max_depth_bound_the_crawl() {
    let site = DemoSite::start(DemoConfig {
        port: 0,
        hosts: 1,
        pages: 200,
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let yaml = demo_spider(
        &site,
        "max_pages: 40\nconcurrency: 8\nper_host_concurrency: 8\nper_host_delay_ms: 0\n",
    );
    let summary = crawl(spider(&yaml), dir.path()).await;
    assert_eq!(summary.finish, Finish::MaxPages);
    assert_eq!(summary.progress.frontier.success, 40);

    // `max_items` stops it once that many items are written, whatever is in flight, and a
    // resumed crawl has nothing left to write.
    let dir = tempfile::tempdir().unwrap();
    let yaml = demo_spider(
        &site,
        "max_items: 25\nconcurrency: 16\nper_host_concurrency: 16\nper_host_delay_ms: 0\n",
    );
    let summary = crawl(spider(&yaml), dir.path()).await;
    assert_eq!(summary.finish, Finish::MaxItems);
    assert_eq!(items(dir.path()).len(), 25);
    let again = crawl(spider(&yaml), dir.path()).await;
    assert_eq!(again.finish, Finish::MaxItems);
    assert_eq!(items(dir.path()).len(), 25);

    // The calendar trap is infinite: only max_depth bounds it when it is not denied.
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "name: trap\nstart_urls: ['{}calendar/2024/1']\nfollow: [{{allow: ['/calendar/']}}]\nmax_depth: 5\n\
         per_host_delay_ms: 0\nper_host_concurrency: 4\n",
        site.base_url(1)
    );
    let summary = crawl(spider(&yaml), dir.path()).await;
    assert_eq!(summary.finish, Finish::Complete);
    // Five steps either way from 2024-01: 2023-08 … 2024-06, eleven months.
    let calendar_hits = site
        .stats()
        .hits
        .keys()
        .filter(|u| u.contains("/calendar/"))
        .count();
    assert_eq!(
        calendar_hits,
        11,
        "calendar pages fetched: {:?}",
        site.stats().hits.keys().collect::<Vec<_>>()
    );
}

/// Every example spider parses and compiles (CSS, XPath and JSON paths included).
#[test]
fn every_example_spider_compiles() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            let text = std::fs::read_to_string(&path).unwrap();
            let spider = Spider::from_yaml(&text, &path.display().to_string())
                .unwrap_or_else(|e| panic!("{e}"));
            silk_fetch::Extractor::compile(&spider)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            // An `expand` resolves with its files next to the example.
            spider
                .expansion(&BTreeMap::new(), &mut |f| {
                    std::fs::read_to_string(dir.join(f)).map_err(|e| e.to_string())
                })
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            n += 1;
        }
    }
    assert!(n >= 3, "only {n} examples found");
}

/// A crawl over misbehaving servers ends, with every bad response recorded as a failed request
/// (never a panic or a hang), and the decodable pages still produce items.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_servers_end_as_failed_requests() {
    use silk_testkit::hostile::{HostileKind, HostileServer, LATIN1_TITLE};
    let mut servers = Vec::new();
    for kind in HostileKind::ALL {
        servers.push(HostileServer::start(kind).await.unwrap());
    }
    let start_urls: Vec<String> = servers
        .iter()
        .map(|s| match s.kind() {
            HostileKind::Status => s.url("/status/500"),
            _ => s.url("/"),
        })
        .collect();
    let yaml = format!(
        "name: hostile\nstart_urls: {start_urls:?}\nrobots: false\ntimeout_ms: 1500\nmax_retries: 1\n\
         retry_backoff_ms: 10\nmax_body_bytes: 1000000\nmax_redirects: 5\nper_host_delay_ms: 0\n\
         follow: [{{deny: ['/next']}}]\nextract: {{title: {{css: 'h1.title'}}}}\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let summary = crawl(spider(&yaml), dir.path()).await;
    assert_eq!(summary.finish, Finish::Complete);
    let f = &summary.progress.frontier;
    assert_eq!(f.left, 0, "{f:?}");
    // Garbage, truncated, the endless redirect chain, the huge body, the hang, the slow drip
    // and the 500 fail; the Latin-1 and invalid UTF-8 pages and the redirect hops succeed.
    assert!(f.failed >= 7, "{f:?}");
    let items = items(dir.path());
    let titles: Vec<&str> = items.iter().filter_map(|i| i["title"].as_str()).collect();
    assert!(titles.contains(&LATIN1_TITLE), "{titles:?}");
    assert!(items.iter().all(|i| i["url"].is_string()));
}

/// Crawls the deep-nesting page at `deep_path` and one ordinary page, with an XPath field
/// and the spider keys of `extra`; asserts that the deep page failed, the other one gave its
/// item, and the crawl completed (without waiting for an abandoned parse).
async fn crawl_a_deep_page_and_an_ordinary_one(deep_path: &str, extra: &str) {
    use silk_testkit::hostile::{HostileKind, HostileServer};
    let deep = HostileServer::start(HostileKind::DeepNesting)
        .await
        .unwrap();
    let site = DemoSite::start(DemoConfig {
        hosts: 1,
        pages: 3,
        ..DemoConfig::default()
    })
    .await
    .unwrap();
    let yaml = format!(
        "name: deep\nstart_urls: ['{}', '{}']\nrobots: false\nmax_retries: 0\nper_host_delay_ms: 0\n\
         follow: []\nextract: {{title: {{xpath: '//h1'}}}}\n{extra}",
        deep.url(deep_path),
        site.page_url(1, 0),
    );
    let dir = tempfile::tempdir().unwrap();
    let summary = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        crawl(spider(&yaml), dir.path()),
    )
    .await
    .expect("the crawl ends without parsing the deep page to its end");
    assert_eq!(summary.finish, Finish::Complete);
    let f = &summary.progress.frontier;
    assert_eq!((f.success, f.failed, f.left), (1, 1, 0), "{f:?}");
    let items = items(dir.path());
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0]["url"], site.page_url(1, 0));
}

/// The parse budget: a page of 1,000,000 nested `<div>`s with an XPath field (the page that
/// kept a core busy for over an hour) fails at once as `parse_budget`, and the rest of the
/// crawl goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_over_the_parse_budget_fails_and_the_crawl_goes_on() {
    crawl_a_deep_page_and_an_ordinary_one("/", "").await;
}

/// The parse budget's time limit: a page inside the depth and element limits (raised here)
/// whose parsing takes seconds fails after `parse_timeout_ms` as `parse_budget`; its thread
/// is abandoned and the crawl goes on and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_that_parses_too_long_fails_after_parse_timeout_ms() {
    crawl_a_deep_page_and_an_ordinary_one(
        "/levels/25000",
        "max_html_depth: 100000000\nmax_html_elements: 100000000\nparse_timeout_ms: 300\n",
    )
    .await;
}
