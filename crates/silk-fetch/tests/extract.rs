//! Fetch and parse the demo site's pages for real: every field kind against the values the
//! site says it serves, and links in every form collapsed to the site's canonical URLs.

use serde_json::{Value, json};
use silk_core::Request;
use silk_core::spider::Spider;
use silk_fetch::{Extractor, FetchConfig, Fetcher, Page};
use silk_testkit::hostile::{self, LATIN1_TITLE};
use silk_testkit::{DemoConfig, DemoSite};
use url::Url;

fn spider(site_start: &str, tail: &str) -> Spider {
    Spider::from_yaml(
        &format!("name: t\nstart_urls: [\"{site_start}\"]\n{tail}"),
        "t.yaml",
    )
    .unwrap()
}

async fn fetch_parse(f: &Fetcher, ex: &Extractor, url: &str) -> Page {
    let resp = f
        .fetch(&Request::from_canonical(url.to_owned()))
        .await
        .unwrap();
    assert_eq!(resp.status, 200, "{url}");
    ex.parse(
        &Url::parse(url).unwrap(),
        &resp.body,
        resp.content_type.as_deref(),
    )
}

#[tokio::test]
async fn field_kinds_on_demo_product_pages() {
    let site = DemoSite::start(DemoConfig {
        hosts: 2,
        pages: 60,
        ..DemoConfig::default()
    })
    .await
    .unwrap();
    let rules = "extract:\n\
        \x20 heading: {css: h1.title}\n\
        \x20 title: {xpath: '//title/text()'}\n\
        \x20 price: {css: span.price}\n\
        \x20 sku_xpath: {xpath: '//span[@class=\"sku\"]'}\n\
        \x20 sku_json: {json: '$.sku'}\n\
        \x20 price_json: {json: '$.price'}\n\
        \x20 tags: {css: 'div.tags a.tag', all: true}\n\
        \x20 tag_hrefs: {css: 'div.tags a.tag', attr: href, all: true}\n\
        \x20 first_tag_xpath: {xpath: '//div[@class=\"tags\"]/a', attr: class}\n\
        \x20 price_regex: {regex: 'class=\"price\">([0-9.]+)<'}\n\
        \x20 missing: {css: 'div.nope'}\n\
        \x20 missing_all: {xpath: '//nope', all: true}\n";
    let ex = Extractor::compile(&spider(&site.start_url(), rules)).unwrap();
    let f = Fetcher::new(FetchConfig::default()).unwrap();
    for (host, i) in [(1, 0), (1, 7), (2, 59), (2, 31)] {
        let info = site.page_info(host, i).unwrap();
        let page = fetch_parse(&f, &ex, &info.url).await;
        let fields = &page.fields;
        let table: &[(&str, Value)] = &[
            ("heading", json!(info.heading)),
            ("title", json!(info.title)),
            ("price", json!(info.price)),
            ("sku_xpath", json!(info.sku)),
            ("sku_json", json!(info.sku)),
            ("price_json", json!(info.price_cents as f64 / 100.0)),
            ("tags", json!(info.tags)),
            ("first_tag_xpath", json!("tag")),
            ("price_regex", json!(info.price)),
            ("missing", Value::Null),
            ("missing_all", json!([])),
        ];
        for (name, want) in table {
            let got = &fields[*name];
            if *name == "price_json" {
                assert_eq!(got.as_f64(), want.as_f64(), "{} {name}", info.url);
            } else {
                assert_eq!(got, want, "{} {name}", info.url);
            }
        }
        let hrefs = fields["tag_hrefs"].as_array().unwrap();
        assert_eq!(hrefs.len(), info.tags.len());
        assert!(
            hrefs.iter().all(|h| h.as_str().unwrap().contains("cat=")),
            "{hrefs:?}"
        );
    }
}

#[tokio::test]
async fn demo_links_are_canonical_and_known() {
    let site = DemoSite::start(DemoConfig {
        hosts: 3,
        pages: 80,
        ..DemoConfig::default()
    })
    .await
    .unwrap();
    let expected = site.expected_pages();
    let ex = Extractor::compile(&spider(&site.start_url(), "")).unwrap();
    let f = Fetcher::new(FetchConfig::default()).unwrap();
    let origin = |h: u32| site.base_url(h).trim_end_matches('/').to_owned();
    let mut seen_search = false;
    for (host, i) in [(1, 0), (1, 5), (2, 40), (3, 79)] {
        let url = site.page_url(host, i);
        let page = fetch_parse(&f, &ex, &url).await;
        assert!(page.links.len() >= 10, "{url}: {:?}", page.links);
        let mut unique = page.links.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), page.links.len(), "duplicates on {url}");
        for link in &page.links {
            assert!(
                !link.contains('#') && !link.contains("utm_") && !link.contains("jsessionid"),
                "{link}"
            );
            assert!(
                !link.starts_with("mailto:")
                    && !link.starts_with("javascript:")
                    && !link.starts_with("tel:")
            );
            let known = expected.contains(link)
                || ["/r/", "/private/", "/missing/", "/calendar/"]
                    .iter()
                    .any(|p| (1..=3).any(|h| link.starts_with(&format!("{}{p}", origin(h)))));
            assert!(known, "{url} links to unknown {link}");
            seen_search |= link.contains("/s?cat=");
        }
    }
    assert!(
        seen_search,
        "search links with &amp; must be decoded and sorted"
    );
}

#[tokio::test]
async fn follow_rules_on_demo_pages() {
    let site = DemoSite::start(DemoConfig {
        hosts: 1,
        pages: 50,
        ..DemoConfig::default()
    })
    .await
    .unwrap();
    let start = site.start_url();
    let f = Fetcher::new(FetchConfig::default()).unwrap();
    let url = site.page_url(1, 3);
    type Check = fn(&str) -> bool;
    let cases: &[(&str, Check)] = &[
        ("follow: [{allow: ['/p/\\d+$']}]\n", |l| l.contains("/p/")),
        (
            "follow: [{deny: ['/calendar/', '/private/', '/s\\?']}]\n",
            |l| !l.contains("/calendar/") && !l.contains("/s?"),
        ),
        ("follow: [{css: 'nav.children a'}]\n", |l| l.contains("/p/")),
        ("follow: [{css: 'div.tags a.tag'}]\n", |l| {
            l.contains("/s?cat=")
        }),
    ];
    for (rules, ok) in cases {
        let ex = Extractor::compile(&spider(&start, rules)).unwrap();
        let page = fetch_parse(&f, &ex, &url).await;
        assert!(!page.links.is_empty(), "{rules}");
        assert!(
            page.links.iter().all(|l| ok(l)),
            "{rules}: {:?}",
            page.links
        );
    }
    let none = Extractor::compile(&spider(&start, "follow: []\n")).unwrap();
    assert!(fetch_parse(&f, &none, &url).await.links.is_empty());
}

#[tokio::test]
async fn hostile_encodings_parse() {
    let ex = Extractor::compile(&spider(
        "http://127.0.0.1/",
        "extract:\n  h: {css: h1.title}\n",
    ))
    .unwrap();
    let f = Fetcher::new(FetchConfig::default()).unwrap();
    let latin1 = hostile::latin1().await.unwrap();
    let page = fetch_parse(&f, &ex, &latin1.url("/")).await;
    assert_eq!(page.fields["h"], json!(LATIN1_TITLE));
    assert_eq!(page.links, [latin1.url("/next")]);
    let bad = hostile::invalid_utf8().await.unwrap();
    let page = fetch_parse(&f, &ex, &bad.url("/")).await;
    assert_eq!(page.fields["h"], json!("Invalid \u{fffd}( UTF-8"));
    assert_eq!(page.links, [bad.url("/next")]);
}
