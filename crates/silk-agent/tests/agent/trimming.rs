//! Trimming: bodies cut by CSS, XPath and regex rules, bytes saved counted per result, per
//! run and per agent; parsing from the whole page unless `parse_trimmed`.

use crate::support::*;
use silk_agent::{DownloaderConfig, TrimConfig, TrimRule};
use silk_bus::BodyEncoding;
use silk_core::RunId;
use std::sync::Arc;

fn rule(css: Option<&str>, xpath: Option<&str>, regex: Option<&str>) -> TrimRule {
    TrimRule {
        css: css.map(Into::into),
        xpath: xpath.map(Into::into),
        regex: regex.map(Into::into),
    }
}

#[tokio::test]
async fn trimming_saves_bytes_and_counts_them() {
    let site = small_site().await;
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let agent = start(agent_config(dir.path(), "a-trim"), &bus).await;
    let mut hub = Hub::new(Arc::new(bus.clone()), "a-trim").await;
    let yaml = spider_yaml(
        &site.start_url(),
        "extract:\n  heading: {css: h1.title}\n  price: {css: span.price}\n",
    );
    let trimmed = DownloaderConfig {
        trim: TrimConfig {
            rules: vec![
                rule(Some("h1.title"), None, None),
                rule(None, Some("//span[@class='price']"), None),
                rule(None, None, Some("SKU-[0-9-]+")),
            ],
            parse_trimmed: false,
        },
        return_body: true,
        ..DownloaderConfig::for_spider_yaml(yaml.clone())
    };
    let parse_trimmed = DownloaderConfig {
        trim: TrimConfig {
            rules: vec![rule(Some("h1.title"), None, None)],
            parse_trimmed: true,
        },
        ..DownloaderConfig::for_spider_yaml(yaml.clone())
    };
    let whole = DownloaderConfig {
        return_body: true,
        ..DownloaderConfig::for_spider_yaml(yaml)
    };
    hub.allocate("trim", &trimmed).await;
    hub.allocate("parse-trimmed", &parse_trimmed).await;
    hub.allocate("whole", &whole).await;
    let info = site.page_info(1, 4).unwrap();
    let url = site.page_url(1, 4);

    let r = hub.fetch("trim", &url).await.outcome;
    let body = r.body.as_ref().expect("a body");
    assert_eq!(body.encoding, BodyEncoding::Text);
    assert!(!body.truncated);
    // The SKU is on the page twice: in `span.sku` and in the JSON-LD.
    let want = format!(
        "<h1 class=\"title\">{}</h1>\n<span class=\"price\">{}</span>\n{}\n{}",
        info.heading, info.price, info.sku, info.sku
    );
    assert_eq!(body.data, want);
    assert_eq!(r.bytes_saved, r.bytes - body.data.len() as u64);
    assert!(r.bytes_saved > 1_000, "{}", r.bytes_saved);
    // Links and fields still come from the whole page.
    assert!(r.links.len() > 5);
    assert_eq!(r.items[0]["price"], info.price.as_str());

    let p = hub.fetch("parse-trimmed", &url).await.outcome;
    assert!(p.body.is_none(), "not asked for");
    assert!(
        p.links.is_empty(),
        "the trimmed page has no links: {:?}",
        p.links
    );
    assert_eq!(p.items[0]["heading"], info.heading.as_str());
    assert!(p.items[0]["price"].is_null());
    assert!(p.bytes_saved > 1_000);

    let w = hub.fetch("whole", &url).await.outcome;
    assert_eq!(w.bytes_saved, 0);
    assert_eq!(w.body.unwrap().data.len() as u64, w.bytes);

    let stats = agent.stats();
    assert_eq!(stats.bytes_saved, r.bytes_saved + p.bytes_saved);
    assert_eq!(stats.runs[&RunId::new("trim")].bytes_saved, r.bytes_saved);
    assert_eq!(stats.runs[&RunId::new("whole")].bytes_saved, 0);

    // A page where nothing matches trims to nothing, and is counted as a miss.
    let nothing = DownloaderConfig {
        trim: TrimConfig {
            rules: vec![rule(Some("table.none"), None, None)],
            parse_trimmed: false,
        },
        return_body: true,
        ..DownloaderConfig::for_spider_yaml(spider_yaml(&site.start_url(), ""))
    };
    hub.allocate("nothing", &nothing).await;
    let miss = hub.fetch("nothing", &url).await.outcome;
    assert_eq!(miss.status, Some(200));
    assert_eq!(miss.body.unwrap().data, "");
    assert_eq!(miss.bytes_saved, miss.bytes);
    assert_eq!(agent.stats().runs[&RunId::new("nothing")].trim_misses, 1);
    agent.shutdown().await;
}

/// The parse budget holds on the agent, before trimming or parsing builds a tree: the page
/// of 1,000,000 nested `<div>`s fails at once as `parse_budget` (permanent, status kept), with
/// an XPath field and with an XPath trimming rule, and the next page of the run is fine.
#[tokio::test]
async fn a_page_over_the_parse_budget_fails_before_trimming_or_parsing() {
    use silk_testkit::hostile::{HostileKind, HostileServer};
    let deep = HostileServer::start(HostileKind::DeepNesting)
        .await
        .unwrap();
    let site = small_site().await;
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let agent = start(agent_config(dir.path(), "a-deep"), &bus).await;
    let mut hub = Hub::new(Arc::new(bus.clone()), "a-deep").await;
    let yaml = spider_yaml(&site.start_url(), "extract:\n  title: {xpath: '//h1'}\n");
    let plain = DownloaderConfig::for_spider_yaml(yaml.clone());
    let trimmed = DownloaderConfig {
        trim: TrimConfig {
            rules: vec![rule(None, Some("//h1"), None)],
            parse_trimmed: true,
        },
        return_body: true,
        ..DownloaderConfig::for_spider_yaml(yaml)
    };
    for (run, config) in [("r-plain", plain), ("r-trim", trimmed)] {
        hub.allocate(run, &config).await;
        let r = within("the deep page", hub.fetch(run, &deep.url("/"))).await;
        let o = r.outcome;
        let e = o.error.as_ref().expect("a parse_budget failure");
        assert_eq!(
            (e.code.to_string().as_str(), e.retryable),
            ("parse_budget", false),
            "{e:?}"
        );
        assert!(
            e.message.contains("nested more than 1024 deep"),
            "{}",
            e.message
        );
        assert_eq!(o.status, Some(200));
        assert!(o.items.is_empty() && o.links.is_empty());
        let r = hub.fetch(run, &site.start_url()).await;
        assert!(r.outcome.error.is_none(), "{:?}", r.outcome.error);
    }
    agent.shutdown().await;
}

/// The parse budget's time limit on the agent: a page inside the (raised) depth and element
/// limits whose parsing takes seconds fails after `parse_timeout_ms` as `parse_budget`, and
/// the run's next page is fine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_that_parses_too_long_fails_after_parse_timeout_ms() {
    use silk_testkit::hostile::{HostileKind, HostileServer};
    let deep = HostileServer::start(HostileKind::DeepNesting)
        .await
        .unwrap();
    let site = small_site().await;
    let dir = tempfile::tempdir().unwrap();
    let bus = bus();
    let agent = start(agent_config(dir.path(), "a-slowparse"), &bus).await;
    let mut hub = Hub::new(Arc::new(bus.clone()), "a-slowparse").await;
    let yaml = spider_yaml(
        &site.start_url(),
        "extract:\n  title: {xpath: '//h1'}\nmax_html_depth: 100000000\nmax_html_elements: 100000000\nparse_timeout_ms: 300\n",
    );
    hub.allocate("r1", &DownloaderConfig::for_spider_yaml(yaml))
        .await;
    let r = within("the slow page", hub.fetch("r1", &deep.url("/levels/25000"))).await;
    let e = r.outcome.error.expect("a parse_budget failure");
    assert_eq!(
        (e.code.to_string().as_str(), e.retryable),
        ("parse_budget", false),
        "{e:?}"
    );
    assert!(
        e.message.contains("parse_timeout_ms (300 ms)"),
        "{}",
        e.message
    );
    let r = within("the next page", hub.fetch("r1", &site.start_url())).await;
    assert!(r.outcome.error.is_none(), "{:?}", r.outcome.error);
    agent.shutdown().await;
}
