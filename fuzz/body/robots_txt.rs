//! A robots.txt file of any bytes: parsed (whatever it holds), then asked about a few paths
//! and its crawl delay; never a panic.

pub fn run(data: &[u8]) {
    let robots = silk_fetch::Robots::parse("silk", data);
    for path in ["/", "/a/b?c=d", "/%E4%BD%A0", "/*x$", "/private/x.html"] {
        if let Ok(url) = url::Url::parse(&format!("http://example.com{path}")) {
            let _ = robots.allowed(&url);
        }
    }
    let _ = robots.crawl_delay();
}
