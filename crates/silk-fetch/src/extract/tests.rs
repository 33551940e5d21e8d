//! Table-driven tests of the extractor on a realistic page (no network).

use super::*;
use serde_json::json;

const PAGE: &str = r##"<!doctype html>
<html><head>
<meta charset="utf-8">
<title>Blue Widget &amp; Co</title>
<base href="/shop/">
<script type="application/ld+json">{"@type":"Product","name":"Blue Widget","offers":{"price":"19.99"}}</script>
<script type="Application/LD+JSON ">[{"@type":"BreadcrumbList","name":"crumbs"}]</script>
<script type="application/ld+json">{ not json </script>
<script>var html = "<a href='/from-script'>x</a>";</script>
</head><body>
<h1 class="title">  Blue
   Widget <span>&mdash; Deluxe</span>&nbsp; </h1>
<h1 class="title">Second title</h1>
<p class="price" data-cents="1999">$19.99</p>
<ul id="tags"><li>blue</li><li>small <b>and</b> cheap</li><li>new</li></ul>
<h2>Specs</h2><p>Weight: 2 kg</p>
<a href="item/2">relative to base</a>
<a href="/p/3#reviews">fragment</a>
<a href="/p/4?utm_source=x&amp;id=4">tracking and entity</a>
<a href="/p/3">duplicate of fragment</a>
<a href="javascript:void(0)">js</a><a href="mailto:a@b.c">mail</a><a href="tel:1">tel</a>
<a href="data:text/html,hi">data</a><a href="#top">top</a><a href="">empty</a>
<a href="http://[broken">broken</a><a>no href</a>
<a href="https://other.test/x">offsite</a>
<a href="/login?next=/p/1">login</a>
<div class="pager"><a href="/list?page=2" rel="next">next</a></div>
<img src="/img/1.png" alt="one"><img src="/img/2.png">
<p>SKU: AB-123 and SKU: CD-456</p>
<script>var price = 19.99;</script>
</body></html>"##;

fn spider(yaml_tail: &str) -> Spider {
    let yaml = format!("name: t\nstart_urls: [\"http://h.test/\"]\n{yaml_tail}");
    Spider::from_yaml(&yaml, "t.yaml").unwrap()
}

fn page_url() -> Url {
    Url::parse("http://h.test/shop/item/1?ref=home").unwrap()
}

fn parse(yaml_tail: &str, body: &str, content_type: Option<&str>) -> Page {
    let ex = Extractor::compile(&spider(yaml_tail)).unwrap();
    ex.parse(&page_url(), body.as_bytes(), content_type)
}

#[test]
fn default_links_resolved_canonical_deduplicated_in_order() {
    let page = parse("", PAGE, Some("text/html"));
    assert_eq!(
        page.links,
        [
            "http://h.test/shop/item/2",
            "http://h.test/p/3",
            "http://h.test/p/4?id=4",
            "https://other.test/x",
            "http://h.test/login?next=/p/1",
            "http://h.test/list?page=2",
        ]
    );
    assert!(page.fields.is_empty());
}

#[test]
fn follow_rules_allow_deny_and_css() {
    let cases: &[(&str, &[&str])] = &[
        ("follow: []\n", &[]),
        (
            "follow: [{allow: ['^http://h\\.test/p/']}]\n",
            &["http://h.test/p/3", "http://h.test/p/4?id=4"],
        ),
        (
            "follow: [{deny: ['login', 'other']}]\n",
            &[
                "http://h.test/shop/item/2",
                "http://h.test/p/3",
                "http://h.test/p/4?id=4",
                "http://h.test/list?page=2",
            ],
        ),
        (
            "follow: [{css: 'div.pager a'}]\n",
            &["http://h.test/list?page=2"],
        ),
        (
            "follow: [{css: 'a[rel=next]'}, {allow: ['item']}]\n",
            &["http://h.test/shop/item/2", "http://h.test/list?page=2"],
        ),
        // `+` is not streamable: all links then come from the tree, still in page order.
        (
            "follow: [{css: 'h2 + p + a'}, {allow: ['/p/4']}]\n",
            &["http://h.test/shop/item/2", "http://h.test/p/4?id=4"],
        ),
        (
            "ignore_params: [next]\nfollow: [{allow: ['login']}]\n",
            &["http://h.test/login"],
        ),
        (
            "canonical_rewrites: {'/p/(\\d+)': '/product/$1'}\nfollow: [{allow: ['^http://h\\.test/product']}]\n",
            &["http://h.test/product/3", "http://h.test/product/4?id=4"],
        ),
    ];
    for (yaml, want) in cases {
        let page = parse(yaml, PAGE, Some("text/html"));
        assert_eq!(page.links, *want, "rules {yaml}");
    }
}

#[test]
fn field_kinds_table() {
    let cases: &[(&str, Value)] = &[
        ("{css: h1.title}", json!("Blue Widget — Deluxe")),
        (
            "{css: h1.title, all: true}",
            json!(["Blue Widget — Deluxe", "Second title"]),
        ),
        ("{css: title}", json!("Blue Widget & Co")),
        ("{css: p.price, attr: data-cents}", json!("1999")),
        ("{css: img, attr: alt, all: true}", json!(["one"])),
        (
            "{css: '#tags li', all: true}",
            json!(["blue", "small and cheap", "new"]),
        ),
        ("{css: '#tags > li:nth-child(2)'}", json!("small and cheap")),
        ("{css: 'li:last-child'}", json!("new")),
        ("{css: 'h2 + p'}", json!("Weight: 2 kg")),
        ("{css: 'h2 ~ a', attr: href}", json!("item/2")),
        ("{css: .missing}", Value::Null),
        ("{css: .missing, all: true}", json!([])),
        ("{css: 'div.nothing ~ p'}", Value::Null),
        (
            "{xpath: '//h1[@class=\"title\"]'}",
            json!("Blue Widget — Deluxe"),
        ),
        (
            "{xpath: '//ul[@id=\"tags\"]/li/text()', all: true}",
            json!(["blue", "small", "cheap", "new"]),
        ),
        (
            "{xpath: '//p[@class=\"price\"]/@data-cents'}",
            json!("1999"),
        ),
        (
            "{xpath: '//img', attr: src, all: true}",
            json!(["/img/1.png", "/img/2.png"]),
        ),
        ("{xpath: 'count(//a)'}", json!("15")),
        ("{xpath: '//nothing'}", Value::Null),
        ("{regex: 'SKU: ([A-Z]{2}-\\d+)'}", json!("AB-123")),
        (
            "{regex: 'SKU: [A-Z]{2}-\\d+', all: true}",
            json!(["SKU: AB-123", "SKU: CD-456"]),
        ),
        ("{regex: 'var price = ([\\d.]+)'}", json!("19.99")),
        ("{regex: 'nomatch(\\d)'}", Value::Null),
        ("{json: '$.offers.price'}", json!("19.99")),
        (
            "{json: '$..name', all: true}",
            json!(["Blue Widget", "crumbs"]),
        ),
        ("{json: '$[0][\"@type\"]'}", json!("BreadcrumbList")),
        ("{json: '$.nothing'}", Value::Null),
    ];
    for (rule, want) in cases {
        let page = parse(
            &format!("extract:\n  f: {rule}\n"),
            PAGE,
            Some("text/html; charset=utf-8"),
        );
        assert_eq!(page.fields.get("f"), Some(want), "rule {rule}");
    }
}

#[test]
fn json_body_fields() {
    let body = r#"{"items":[{"id":1,"price":2.5},{"id":2,"price":3}],"next":"/api?page=2"}"#;
    let yaml = "extract:\n  ids: {json: '$.items[*].id', all: true}\n  first: {json: '$.items[0]'}\n  \
                n: {regex: '\"next\":\"([^\"]+)'}\n  title: {css: h1}\n";
    for ct in [
        Some("application/json"),
        Some("application/vnd.api+json; charset=utf-8"),
        None,
    ] {
        let page = parse(yaml, body, ct);
        assert_eq!(page.fields["ids"], json!([1, 2]), "{ct:?}");
        assert_eq!(page.fields["first"], json!({"id": 1, "price": 2.5}));
        assert_eq!(page.fields["n"], json!("/api?page=2"));
        assert_eq!(page.fields["title"], Value::Null);
        assert!(page.links.is_empty());
    }
}

#[test]
fn wants_and_binary_bodies() {
    let ex = Extractor::compile(&spider("extract:\n  t: {css: h1}\n")).unwrap();
    let url = page_url();
    let only_fields = ex.parse_with(
        &url,
        PAGE.as_bytes(),
        None,
        Wants {
            links: false,
            fields: true,
        },
    );
    assert!(only_fields.links.is_empty());
    assert_eq!(only_fields.fields["t"], json!("Blue Widget — Deluxe"));
    let only_links = ex.parse_with(
        &url,
        PAGE.as_bytes(),
        None,
        Wants {
            links: true,
            fields: false,
        },
    );
    assert!(!only_links.links.is_empty());
    assert!(only_links.fields.is_empty());
    let image = ex.parse(&url, b"\x89PNG\r\n<a href='/x'>", Some("image/png"));
    assert!(image.links.is_empty());
    assert_eq!(image.fields["t"], Value::Null);
}

#[test]
fn every_bad_rule_is_reported_at_once() {
    let yaml = "follow: [{css: 'a[[['}]\nextract:\n  price: {css: 'p..x'}\n  path: {xpath: '//a['}\n  \
                j: {json: '$$bad'}\n  ok: {css: h1}\n";
    let err = Extractor::compile(&spider(yaml)).unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::InvalidConfig);
    let msg = err.to_string();
    for needle in [
        "follow[0].css: invalid selector `a[[[`",
        "extract.price.css: invalid selector `p..x`",
        "extract.path.xpath",
        "extract.j.json",
    ] {
        assert!(msg.contains(needle), "{needle} missing in {msg}");
    }
    assert!(!msg.contains("extract.ok"), "{msg}");
}

#[test]
fn broken_html_never_panics() {
    let ex = Extractor::compile(&spider(
        "extract:\n  a: {css: p}\n  b: {xpath: '//p'}\n  c: {css: 'p:last-child'}\n  d: {json: '$.x'}\n",
    ))
    .unwrap();
    let url = page_url();
    let bodies: &[&[u8]] = &[
        b"",
        b"<",
        b"<a href=",
        b"<a href='/x",
        b"<p>unclosed <b>bold <i>both</b> end</i><p>second",
        b"<script>never closed <a href='/no'>",
        b"<!-- unterminated comment <a href='/no'>",
        b"\xff\xfe\x00<\x00a\x00",
        b"<table><tr><td>1<td>2</table><select><option>x<script>\"</select>",
        b"<svg><a href='/svg-link'>s</a></svg><math><mi>x</mi></math>",
        b"<a href='/ok'>\xc3\x28 invalid utf8</a>",
    ];
    for body in bodies {
        let _ = ex.parse(&url, body, Some("text/html"));
        let _ = ex.parse(&url, body, None);
        let _ = ex.parse(&url, body, Some("application/json"));
    }
    let page = ex.parse(&url, b"<p>cut short &amp", None);
    assert_eq!(page.fields["a"], json!("cut short &"));
    let page = ex.parse(&url, b"<p>one<p>two", None);
    assert_eq!(page.fields["a"], json!("one"));
    assert_eq!(page.fields["c"], json!("two"));
    let page = ex.parse(&url, b"<a href='/ok'>\xc3\x28</a>", Some("text/html"));
    assert_eq!(page.links, ["http://h.test/ok"]);
}

#[test]
fn latin1_page_decoded_before_parsing() {
    let body = b"<html><head><meta charset=iso-8859-1></head><body><h1>Caf\xe9 cr\xe8me</h1><a href='/caf\xe9'>x</a>";
    let page = Extractor::compile(&spider("extract:\n  t: {css: h1}\n"))
        .unwrap()
        .parse(&page_url(), body, Some("text/html"));
    assert_eq!(page.fields["t"], json!("Café crème"));
    assert_eq!(page.links, ["http://h.test/caf%C3%A9"]);
}

#[test]
fn extractor_is_shareable() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Extractor>();
    send_sync::<Page>();
}

#[test]
fn whitespace_collapse() {
    assert_eq!(collapse_whitespace("  a \n\t b\u{a0}c  "), "a b c");
    assert_eq!(collapse_whitespace(""), "");
}
