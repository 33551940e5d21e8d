//! A fetched page of any bytes: charset detection and decoding under several content types,
//! then link and field extraction with every kind of rule (streamed CSS, tree-only CSS,
//! XPath, regex, JSON path), under the parse budget; never a panic.

use std::sync::OnceLock;

const SPIDER: &str = "name: fuzz\nstart_urls: ['http://example.com/']\n\
    follow: [{css: 'a.next'}, {allow: ['/p/']}]\n\
    extract: {title: {css: 'h1.title'}, last: {css: 'li:last-child'}, \
    links: {css: 'a', attr: href, all: true}, heading: {xpath: '//h2/text()'}, \
    price: {regex: 'price: (\\d+)'}, sku: {json: '$.sku'}}\n\
    max_html_depth: 64\nmax_html_elements: 4096\n";

fn extractor() -> &'static silk_fetch::Extractor {
    static EXTRACTOR: OnceLock<silk_fetch::Extractor> = OnceLock::new();
    EXTRACTOR.get_or_init(|| {
        let spider = silk_core::spider::Spider::from_yaml(SPIDER, "fuzz.yaml").expect("spider");
        silk_fetch::Extractor::compile(&spider).expect("extractor")
    })
}

pub fn run(data: &[u8]) {
    let url = url::Url::parse("http://example.com/a/").expect("url");
    for content_type in [
        None,
        Some("text/html; charset=utf-8"),
        Some("text/html; charset=gbk"),
        Some("application/json"),
    ] {
        let _ = silk_fetch::sniff_encoding(data, content_type);
        let _ = silk_fetch::decode_html(data, content_type);
        let _ = extractor().parse(&url, data, content_type);
    }
}
