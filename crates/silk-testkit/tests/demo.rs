//! The demo site over real sockets, with a plain HTTP client.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use percent_encoding::percent_decode_str;
use regex::Regex;
use silk_testkit::demo::{CATEGORIES, MAX_HOSTS, SEARCH_PAGES_PER_CATEGORY};
use silk_testkit::{DemoConfig, DemoSite, TestkitError, free_port};
use url::Url;

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn no_redirect_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

async fn get(c: &reqwest::Client, url: &str) -> (u16, String) {
    let resp = c.get(url).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap())
}

fn small(seed: u64) -> DemoConfig {
    DemoConfig {
        hosts: 2,
        pages: 40,
        seed,
        ..DemoConfig::default()
    }
}

const TRACKING: [&str; 5] = ["fbclid", "gclid", "_", "callback", "jsessionid"];

/// What Silk's canonicaliser is specified to do (design §3), minimally, for this site.
fn canonical(base: &Url, href: &str) -> Option<Url> {
    let href = href.replace("&amp;", "&");
    let mut url = base.join(&href).ok()?;
    if url.scheme() != "http" {
        return None;
    }
    url.set_fragment(None);
    let path: Vec<String> = url
        .path()
        .split('/')
        .map(|seg| seg.split(';').next().unwrap_or("").to_owned())
        .collect();
    let path = percent_decode_str(&path.join("/"))
        .decode_utf8()
        .ok()?
        .into_owned();
    url.set_path(&path);
    let mut params: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(k, _)| !k.starts_with("utm_") && !TRACKING.contains(&k.as_ref()))
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    params.sort();
    if params.is_empty() {
        url.set_query(None);
    } else {
        let q: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        url.set_query(Some(&q.join("&")));
    }
    Some(url)
}

#[tokio::test]
async fn same_config_gives_same_bytes_and_another_seed_does_not() {
    let cfg = DemoConfig {
        port: free_port(),
        ..small(7)
    };
    let paths = [
        "/",
        "/p/0",
        "/p/39",
        "/s?cat=books&page=1",
        "/robots.txt",
        "/calendar/2024/3",
        "/missing/1",
    ];
    let c = client();
    let mut runs = Vec::new();
    for seed in [7, 7, 8] {
        let site = DemoSite::start(DemoConfig {
            seed,
            ..cfg.clone()
        })
        .await
        .unwrap();
        assert_eq!(site.port(), cfg.port);
        let mut bodies = Vec::new();
        for host_url in site.base_urls() {
            for path in paths {
                bodies.push(get(&c, &format!("{}{}", host_url.trim_end_matches('/'), path)).await);
            }
        }
        site.shutdown().await;
        runs.push(bodies);
    }
    assert_eq!(runs[0], runs[1]);
    assert_ne!(runs[0], runs[2]);
}

#[tokio::test]
async fn every_expected_page_is_reachable_from_the_start_url_within_depth_12() {
    let site = DemoSite::start(DemoConfig::default()).await.unwrap();
    let c = client();
    let href = Regex::new(r#"<a [^>]*href="([^"]*)""#).unwrap();
    let start = Url::parse(&site.start_url()).unwrap();
    let mut seen: BTreeSet<Url> = BTreeSet::from([start.clone()]);
    let mut level = vec![start];
    let mut fetched_ok: BTreeSet<String> = BTreeSet::new();
    let mut statuses: BTreeMap<u16, u32> = BTreeMap::new();
    let mut depth_of_last_new_page = 0;
    for depth in 0..=12 {
        if level.is_empty() {
            break;
        }
        let mut tasks = tokio::task::JoinSet::new();
        for url in level.drain(..) {
            let c = c.clone();
            tasks.spawn(async move {
                let resp = c.get(url.clone()).send().await.unwrap();
                let status = resp.status().as_u16();
                let final_url = resp.url().clone();
                (status, final_url, resp.text().await.unwrap())
            });
        }
        let mut next = Vec::new();
        while let Some(result) = tasks.join_next().await {
            let (status, final_url, body) = result.unwrap();
            *statuses.entry(status).or_default() += 1;
            if status != 200 {
                continue;
            }
            if fetched_ok.insert(final_url.to_string()) {
                depth_of_last_new_page = depth;
            }
            for cap in href.captures_iter(&body) {
                let Some(link) = canonical(&final_url, &cap[1]) else {
                    continue;
                };
                // A polite spider: robots.txt denies /private/, the spider denies /calendar/.
                if link.path().starts_with("/private/") || link.path().starts_with("/calendar/") {
                    continue;
                }
                if seen.insert(link.clone()) {
                    next.push(link);
                }
            }
        }
        level = next;
    }
    let expected = site.expected_pages();
    assert_eq!(
        expected.len(),
        3 * (1 + 200 + CATEGORIES.len() * SEARCH_PAGES_PER_CATEGORY as usize)
    );
    let missing: Vec<_> = expected.difference(&fetched_ok).collect();
    let extra: Vec<_> = fetched_ok.difference(&expected).collect();
    assert!(missing.is_empty(), "not reached: {missing:?}");
    assert!(
        extra.is_empty(),
        "200 pages outside expected_pages: {extra:?}"
    );
    assert!(statuses.get(&404).copied().unwrap_or(0) > 0, "{statuses:?}");
    assert!(depth_of_last_new_page <= 12);
    let stats = site.stats();
    assert_eq!(stats.hits_under("/private/"), 0);
    assert_eq!(stats.hits_under("/calendar/"), 0);
    assert!(stats.hits_under("/r/") > 0, "redirect links were followed");
}

#[tokio::test]
async fn robots_txt_with_and_without_crawl_delay() {
    let c = client();
    let site = DemoSite::start(small(1)).await.unwrap();
    for base in site.base_urls() {
        let resp = c.get(format!("{base}robots.txt")).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        assert!(
            resp.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/plain")
        );
        assert_eq!(
            resp.text().await.unwrap(),
            "User-agent: *\nDisallow: /private/\n"
        );
    }
    let polite = DemoSite::start(DemoConfig {
        crawl_delay_ms: Some(250),
        ..small(1)
    })
    .await
    .unwrap();
    let (_, robots) = get(&c, &format!("{}robots.txt", polite.start_url())).await;
    assert_eq!(
        robots,
        "User-agent: *\nDisallow: /private/\nCrawl-delay: 0.25\n"
    );
}

#[tokio::test]
async fn redirects_404s_and_variants_of_one_page() {
    let site = DemoSite::start(small(3)).await.unwrap();
    let base = site.base_url(2);
    let raw = no_redirect_client();
    let resp = raw.get(format!("{base}r/5")).send().await.unwrap();
    assert_eq!(resp.status(), 301);
    assert_eq!(resp.headers()["location"], "/p/5");

    let c = client();
    let followed = c.get(format!("{base}r/5")).send().await.unwrap();
    assert_eq!(followed.url().as_str(), site.page_url(2, 5));
    let (_, plain) = get(&c, &site.page_url(2, 15)).await;
    for variant in [
        "p/%315",
        "%70/15",
        "p/15;jsessionid=ABC",
        "p/15?utm_source=x&utm_medium=y",
        "p/15?fbclid=1",
        "p/15?gclid=2",
    ] {
        let (status, body) = get(&c, &format!("{base}{variant}")).await;
        assert_eq!((status, &body), (200, &plain), "{variant}");
    }
    for missing in [
        "missing/3",
        "p/40",
        "r/40",
        "nope",
        "s?cat=books&page=9",
        "s?q=1",
    ] {
        assert_eq!(
            get(&c, &format!("{base}{missing}")).await.0,
            404,
            "{missing}"
        );
    }
    let resp = c.get(site.page_url(1, 1)).send().await.unwrap();
    assert_eq!(resp.headers()["content-type"], "text/html; charset=utf-8");
    let post = c.post(site.page_url(1, 1)).send().await.unwrap();
    assert_eq!(post.status(), 405);
}

#[tokio::test]
async fn search_pages_in_either_parameter_order_are_the_same_page() {
    let site = DemoSite::start(small(3)).await.unwrap();
    let c = client();
    let base = site.start_url();
    let (s1, a) = get(&c, &format!("{base}s?cat=toys&page=2")).await;
    let (s2, b) = get(&c, &format!("{base}s?page=2&cat=toys")).await;
    assert_eq!((s1, s2), (200, 200));
    assert_eq!(a, b);
    assert!(
        site.expected_pages()
            .contains(&format!("{base}s?cat=toys&page=2"))
    );
}

#[tokio::test]
async fn pages_carry_the_facts_of_page_info() {
    let site = DemoSite::start(small(11)).await.unwrap();
    let c = client();
    let text = |re: &str, body: &str| -> String {
        Regex::new(re).unwrap().captures(body).unwrap()[1].to_owned()
    };
    let tag_re = Regex::new(r#"<a class="tag" href="[^"]*">([^<]*)</a>"#).unwrap();
    for (host, i) in [(1, 0), (2, 39), (1, 20)] {
        let info = site.page_info(host, i).unwrap();
        let (status, body) = get(&c, &info.url).await;
        assert_eq!(status, 200);
        assert!(
            (3_000..=6_500).contains(&body.len()),
            "{} bytes",
            body.len()
        );
        assert_eq!(text(r"<title>([^<]*)</title>", &body), info.title);
        assert_eq!(
            text(r#"<h1 class="title">([^<]*)</h1>"#, &body),
            info.heading
        );
        assert_eq!(
            text(r#"<span class="price">([^<]*)</span>"#, &body),
            info.price
        );
        assert_eq!(text(r#"<span class="sku">([^<]*)</span>"#, &body), info.sku);
        let tags: Vec<String> = tag_re
            .captures_iter(&body)
            .map(|c| c[1].to_owned())
            .collect();
        assert_eq!(tags, info.tags);
        let json = text(
            r#"<script type="application/ld\+json">([^<]*)</script>"#,
            &body,
        );
        let json: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(json["name"], info.heading.as_str());
        assert_eq!(json["sku"], info.sku.as_str());
        assert_eq!(
            (json["price"].as_f64().unwrap() * 100.0).round() as u32,
            info.price_cents
        );
        let anchors = body.matches("<a ").count();
        assert!((28..=42).contains(&anchors), "{anchors} links");
    }
}

#[tokio::test]
async fn hits_starts_and_in_flight_are_recorded_per_host() {
    let site = DemoSite::start(DemoConfig {
        latency_ms: Some(200),
        ..small(5)
    })
    .await
    .unwrap();
    let c = client();
    let base2 = site.base_url(2);
    let mut tasks = tokio::task::JoinSet::new();
    for path in ["p/1", "p/1", "p/%31", "p/2?utm_source=x", "robots.txt"] {
        let (c, url) = (c.clone(), format!("{base2}{path}"));
        tasks.spawn(async move { c.get(url).send().await.unwrap().status().as_u16() });
    }
    while let Some(status) = tasks.join_next().await {
        assert_eq!(status.unwrap(), 200);
    }
    get(&c, &site.page_url(1, 3)).await;
    let stats = site.stats();
    assert_eq!(stats.hits_on(&format!("{base2}p/1")), 2);
    assert_eq!(stats.hits_on(&format!("{base2}p/%31")), 1);
    assert_eq!(stats.hits_on(&format!("{base2}p/2?utm_source=x")), 1);
    assert_eq!(stats.hits_on(&site.page_url(1, 3)), 1);
    assert_eq!(stats.total_requests, 6);
    assert_eq!(stats.per_host_max_in_flight["127.0.0.2"], 5);
    assert_eq!(stats.per_host_max_in_flight["127.0.0.1"], 1);
    assert_eq!(stats.per_host_starts["127.0.0.2"].len(), 5);
    assert_eq!(stats.per_host_starts["127.0.0.1"].len(), 1);
    assert_eq!(stats.repeated().len(), 1);
    site.reset_stats();
    assert_eq!(site.stats().total_requests, 0);

    let quiet = DemoSite::start(DemoConfig {
        record_timings: false,
        ..small(5)
    })
    .await
    .unwrap();
    get(&c, &quiet.page_url(1, 1)).await;
    let stats = quiet.stats();
    assert_eq!(stats.total_requests, 1);
    assert!(stats.per_host_starts["127.0.0.1"].is_empty());
}

#[tokio::test]
async fn hosts_share_one_port_on_their_own_ip_and_drop_stops_them() {
    let site = DemoSite::start(DemoConfig {
        hosts: 5,
        pages: 3,
        ..DemoConfig::default()
    })
    .await
    .unwrap();
    let port = site.port();
    assert_eq!(
        site.base_urls(),
        (1..=5)
            .map(|k| format!("http://127.0.0.{k}:{port}/"))
            .collect::<Vec<_>>()
    );
    assert_eq!(site.start_url(), format!("http://127.0.0.1:{port}/"));
    let c = client();
    for (k, base) in site.base_urls().iter().enumerate() {
        let (status, body) = get(&c, base).await;
        assert_eq!(status, 200);
        assert!(body.contains(&format!("<h1 class=\"title\">Host {}</h1>", k + 1)));
    }
    drop(site);
    let refused = silk_testkit::eventually(
        Duration::from_secs(1),
        silk_testkit::POLL_EVERY,
        async || {
            let connect = tokio::net::TcpStream::connect(("127.0.0.3", port)).await;
            connect.is_err().then_some(())
        },
    )
    .await
    .is_some();
    assert!(refused, "port {port} still open after drop");
}

#[test]
fn dedicated_thread_serves_and_shutdown_frees_the_ports() {
    let site = DemoSite::start_dedicated(small(9)).unwrap();
    let port = site.port();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (status, _) = get(&client(), &site.page_url(2, 7)).await;
        assert_eq!(status, 200);
        assert_eq!(site.stats().total_requests, 1);
        site.shutdown().await;
    });
    std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    std::net::TcpListener::bind(("127.0.0.2", port)).unwrap();
}

#[tokio::test]
async fn bad_configs_are_refused() {
    for (cfg, field) in [
        (
            DemoConfig {
                hosts: 0,
                ..DemoConfig::default()
            },
            "hosts",
        ),
        (
            DemoConfig {
                hosts: MAX_HOSTS + 1,
                ..DemoConfig::default()
            },
            "hosts",
        ),
        (
            DemoConfig {
                pages: 0,
                ..DemoConfig::default()
            },
            "pages",
        ),
    ] {
        match DemoSite::start(cfg).await {
            Err(TestkitError::InvalidConfig { field: f, .. }) => assert_eq!(f, field),
            other => panic!("expected invalid config, got {other:?}"),
        }
    }
    let taken = DemoSite::start(small(1)).await.unwrap();
    let clash = DemoSite::start(DemoConfig {
        port: taken.port(),
        ..small(1)
    })
    .await;
    assert!(matches!(clash, Err(TestkitError::Bind { .. })), "{clash:?}");
}

#[tokio::test]
async fn calendar_is_an_endless_trap() {
    let site = DemoSite::start(small(1)).await.unwrap();
    let c = client();
    let next = Regex::new(r#"rel="next" href="([^"]*)""#).unwrap();
    let mut url = format!("{}calendar/2024/1", site.start_url());
    for _ in 0..30 {
        let (status, body) = get(&c, &url).await;
        assert_eq!(status, 200);
        url = format!(
            "{}{}",
            site.start_url(),
            &next.captures(&body).unwrap()[1][1..]
        );
    }
    assert!(url.ends_with("/calendar/2026/7"), "{url}");
    assert!(
        !site
            .expected_pages()
            .iter()
            .any(|u| u.contains("/calendar/"))
    );
}

/// `wait_for_requests` returns once the count is reached, not before.
#[tokio::test]
async fn wait_for_requests_is_an_event() {
    let site = DemoSite::start(DemoConfig::default()).await.unwrap();
    let client = reqwest::Client::new();
    let waiter = {
        let url = site.start_url();
        let client = client.clone();
        tokio::spawn(async move {
            for _ in 0..5 {
                client
                    .get(&url)
                    .send()
                    .await
                    .unwrap()
                    .bytes()
                    .await
                    .unwrap();
            }
        })
    };
    site.wait_for_requests(5).await;
    assert!(site.stats().total_requests >= 5);
    waiter.await.unwrap();
}
