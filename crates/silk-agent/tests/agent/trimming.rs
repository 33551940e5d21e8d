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
