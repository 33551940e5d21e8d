//! The fuzz targets of `fuzz/` (one per parser of outside input: URL canonicalisation, spider
//! YAML, bus messages, robots.txt, HTML pages, API bodies) on stable, on every `cargo test`:
//! each body runs over its seed corpus (`fuzz/seeds/<target>/`, and the seeds built here
//! from the examples and the wire format) and over deterministic mutations of it. A body
//! must never panic; a failure shows the input. `bench/fuzz.sh` runs the same bodies under
//! libFuzzer for a set time. The router's config loader and the selector parser have their
//! own targets (`crates/silk-router/fuzz`, `crates/silk-selector/fuzz`).
//!
//! `SILK_WRITE_SEEDS=1 cargo test -p silk --test fuzz_bodies` rewrites the built seeds into
//! `fuzz/seeds/` (for libFuzzer's first corpus).

#[path = "../../../fuzz/body/api_body.rs"]
mod api_body;
#[path = "../../../fuzz/body/bus_message.rs"]
mod bus_message;
#[path = "../../../fuzz/body/canon_url.rs"]
mod canon_url;
#[path = "../../../fuzz/body/html_page.rs"]
mod html_page;
#[path = "../../../fuzz/body/robots_txt.rs"]
mod robots_txt;
#[path = "../../../fuzz/body/spider_yaml.rs"]
mod spider_yaml;

use silk_testkit::mutate::{Rng, mutate};
use std::path::{Path, PathBuf};

/// Mutations per target and seed sweep (each a few edits of a random seed).
const MUTATIONS: usize = 3_000;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The seed files of `target`, by name.
fn seed_files(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = root().join("fuzz/seeds").join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, Vec<u8>)> = entries
        .filter_map(Result::ok)
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).expect("seed"))
        })
        .collect();
    out.sort();
    out
}

/// Runs `body` on the seeds (files and `built`), then on mutations with `tokens`.
fn sweep(target: &str, body: fn(&[u8]), built: Vec<(String, Vec<u8>)>, tokens: &[&str]) {
    if std::env::var_os("SILK_WRITE_SEEDS").is_some() {
        let dir = root().join("fuzz/seeds").join(target);
        std::fs::create_dir_all(&dir).expect("seeds dir");
        for (name, data) in &built {
            std::fs::write(dir.join(name), data).expect("write seed");
        }
    }
    let mut seeds = seed_files(target);
    for (name, data) in built {
        if !seeds.iter().any(|(_, d)| *d == data) {
            seeds.push((name, data));
        }
    }
    assert!(!seeds.is_empty(), "{target}: no seeds");
    let run = |what: &str, data: &[u8]| {
        if std::panic::catch_unwind(|| body(data)).is_err() {
            panic!(
                "{target} panicked on {what}:\n{}",
                String::from_utf8_lossy(data).escape_debug()
            );
        }
    };
    for (name, data) in &seeds {
        run(name, data);
    }
    let mut rng = Rng::new(0x5111_c0de ^ target.len() as u64);
    for i in 0..MUTATIONS {
        let (name, seed) = &seeds[rng.below(seeds.len())];
        let data = mutate(&mut rng, seed, tokens);
        run(&format!("mutation {i} of {name}"), &data);
    }
}

fn text(name: &str, s: &str) -> (String, Vec<u8>) {
    (name.to_owned(), s.as_bytes().to_vec())
}

#[test]
fn canon_url() {
    let built = [
        "http://Example.COM:80/a/./b/../c?b=2&a=1&utm_source=x#frag",
        "https://user:pw@[::1]:8443/%7Efoo/%e4%bd%a0?q=%20&jsessionid=1",
        "HTTP://xn--fsq.com/路径?中=文",
        "//example.com/protocol-relative",
        "../relative/path?x",
        "http://127.0.0.1:9/?a=1&a=2&_=3&callback=f",
        "mailto:someone@example.com",
    ]
    .iter()
    .enumerate()
    .map(|(i, u)| text(&format!("url_{i}"), u))
    .collect();
    sweep(
        "canon_url",
        canon_url::run,
        built,
        &[
            "%", "%2", "%00", "..", "/./", "?", "#", ":", "@", "[", "]", "\\", "&", "=",
        ],
    );
}

#[test]
fn spider_yaml() {
    let mut built: Vec<(String, Vec<u8>)> = ["demo.yaml", "full.yaml", "polite.yaml"]
        .iter()
        .map(|f| {
            let data = std::fs::read(root().join("examples").join(f)).expect("example spider");
            (format!("example_{f}"), data)
        })
        .collect();
    built.push(text(
        "small.yaml",
        "name: s\nstart_urls: ['http://127.0.0.1:9/']\nfollow: [{css: 'a.next', allow: ['/p/']}]\n\
         extract: {t: {xpath: '//h1'}, p: {regex: 'price: (\\d+)'}, j: {json: '$.a[0]'}}\n",
    ));
    sweep(
        "spider_yaml",
        spider_yaml::run,
        built,
        &[
            "&a ", "*a", "<<: *a\n", "- ", ": ", "!!int ", "~", "[[[[", "{{", "//", "(?<", "$..",
            "::",
        ],
    );
}

#[test]
fn bus_message() {
    use silk_bus::{Command, Envelope, Heartbeat, LeasedRequest, Message, Register};
    let request = silk_core::Request::from_canonical("https://example.com/a".into());
    let messages: Vec<Message> = vec![
        Register {
            agent: "a1".into(),
            host: "h1".into(),
            version: "0.1.0".into(),
            cores: 8,
            memory_bytes: 1 << 34,
            labels: [("pool".to_owned(), "cn".to_owned())].into(),
            capacity: 64,
        }
        .into(),
        Heartbeat {
            agent: "a1".into(),
            cpu_pct: 12.5,
            memory_bytes: 1 << 27,
            active_downloaders: 2,
            in_flight: 17,
            qps: 40.0,
            seq: 812,
        }
        .into(),
        Command::Allocate {
            run: "r1".into(),
            config: serde_json::json!({"spider": "name: x", "proxies": {"provider": {"command": "p"}}}),
            allow_networks: Vec::new(),
        }
        .into(),
        Command::Download {
            run: "r1".into(),
            batch: vec![LeasedRequest {
                lease_id: silk_core::LeaseId(1),
                request,
            }],
            reply_to: Some("hub-a".into()),
        }
        .into(),
        Command::Release { run: "r1".into() }.into(),
    ];
    let built = messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let bytes = Envelope::new(m, 1_700_000_000_000, Some(30_000))
                .encode()
                .expect("encode");
            (format!("message_{i}.json"), bytes.to_vec())
        })
        .collect();
    sweep(
        "bus_message",
        bus_message::run,
        built,
        &[
            "null",
            "1e999",
            "-0",
            "\"\"",
            "[]",
            "{}",
            "\"v\": 2",
            "\"kind\": \"x\"",
            "18446744073709551616",
        ],
    );
}

#[test]
fn robots_txt() {
    let built = vec![
        text(
            "robots.txt",
            "User-agent: *\nDisallow: /private/\nAllow: /private/ok\nCrawl-delay: 2.5\n\n\
             User-agent: silk\nDisallow: /*x$\nSitemap: http://example.com/s.xml\n",
        ),
        text("empty", ""),
        text("bom_crlf", "\u{feff}User-agent: *\r\nDisallow: /\r\n"),
    ];
    sweep(
        "robots_txt",
        robots_txt::run,
        built,
        &[
            "User-agent: ",
            "Disallow: ",
            "Allow: ",
            "Crawl-delay: ",
            "*",
            "$",
            "\n",
            "#",
            "%",
        ],
    );
}

#[test]
fn html_page() {
    let built = vec![
        text(
            "page.html",
            "<html><head><base href='/b/'><meta charset='gbk'><title>t</title>\
             <script type='application/ld+json'>{\"sku\": \"s1\"}</script></head><body>\
             <h1 class='title'>One</h1><h2>two</h2><ul><li>a<li>b</ul><p>price: 42</p>\
             <a class='next' href='/p/2'>n</a><a href='../p/3#x'>3</a></body></html>",
        ),
        text("json", "{\"sku\": \"s2\", \"a\": [1, 2]}"),
        text("deep", &"<div>".repeat(100)),
        (
            "latin1".into(),
            b"<meta charset=iso-8859-1><h1 class=title>Caf\xe9</h1>".to_vec(),
        ),
    ];
    sweep(
        "html_page",
        html_page::run,
        built,
        &[
            "<div>",
            "</div>",
            "<a href='",
            "<!--",
            "-->",
            "<script>",
            "</script>",
            "<base href=",
            "&amp;",
            "<![CDATA[",
            "<h1 class='title'>",
        ],
    );
}

#[test]
fn api_body() {
    let built = vec![
        text(
            "job.json",
            r#"{"name": "shop", "spider": "name: shop\nstart_urls: ['http://127.0.0.1:9/']\n", "cron": "*/5 * * * *", "timezone": "Asia/Shanghai", "args": {"k": 1}, "overlap": "queue", "retry": {"max_retries": 2, "delay_ms": 1000}, "strategy": "fixed:2", "fail_if": {"min_items": 1}, "sinks": {"webhook": {"url": "http://127.0.0.1:9/h", "headers": {"a": "b"}}}}"#,
        ),
        text(
            "run.json",
            r#"{"spider": "name: x\nstart_urls: ['http://127.0.0.1:9/']\n", "max_pending": 5, "downloader": {"qps": 2, "trim": {"rules": [{"css": "main"}]}, "proxies": {"provider": {"command": "p"}, "switch_on_regex": "captcha"}, "redial": {"command": ["pppoe-start"]}}}"#,
        ),
    ];
    sweep(
        "api_body",
        api_body::run,
        built,
        &[
            "null",
            "{}",
            "[]",
            "\"\"",
            "1e999",
            "-1",
            "\"command\"",
            "\"fixed:0\"",
            "\"61 * * * *\"",
            "${args.x}",
        ],
    );
}
