//! What the demo site answers: routing of a request path to a page, and page rendering.
//!
//! Everything here is a pure function of (`seed`, `hosts`, `pages`, `port`, `crawl_delay_ms`)
//! and the request path: no clock, no I/O, no global state, so that the same config always
//! gives the same bytes. It must not record anything (that is `stats`) nor know about
//! sockets (that is the parent module).
//!
//! Cost matters: a page is rendered per request into one pre-sized `String` (about 5 KB)
//! with no other allocation of note, so that one core serves tens of thousands of pages a
//! second.

use std::fmt::Write as _;

use bytes::Bytes;
use percent_encoding::percent_decode_str;

use crate::rng::{Rng, stream};

/// The categories of the search pages `/s?cat={c}&page={n}` and of the page tags.
pub const CATEGORIES: [&str; 6] = ["books", "games", "garden", "music", "tools", "toys"];
/// Search pages per category: `page` runs from 1 to this, inclusive.
pub const SEARCH_PAGES_PER_CATEGORY: u32 = 2;

const RESULTS_PER_SEARCH_PAGE: u32 = 15;
const RELATED_LINKS_PER_PAGE: u32 = 20;

const WORDS: [&str; 64] = [
    "silk",
    "crawler",
    "frontier",
    "lorem",
    "ipsum",
    "dolor",
    "amet",
    "market",
    "fresh",
    "garden",
    "copper",
    "velvet",
    "harbor",
    "lantern",
    "meadow",
    "orbit",
    "pepper",
    "quartz",
    "river",
    "saddle",
    "timber",
    "umbrella",
    "violet",
    "walnut",
    "yarn",
    "zephyr",
    "anchor",
    "basket",
    "candle",
    "dragon",
    "ember",
    "falcon",
    "glacier",
    "hollow",
    "island",
    "jasmine",
    "kettle",
    "ladder",
    "marble",
    "nectar",
    "olive",
    "pillow",
    "quiver",
    "ribbon",
    "summit",
    "thistle",
    "utopia",
    "vessel",
    "whisper",
    "xylophone",
    "yonder",
    "zenith",
    "café",
    "naïve",
    "über",
    "delivery",
    "warranty",
    "compact",
    "durable",
    "classic",
    "limited",
    "edition",
    "handmade",
    "organic",
];

/// The facts a spider should extract from content page `/p/{index}` of host `host`.
///
/// Selectors: `h1.title` → `heading`, `title` → `title`, `span.price` → `price`,
/// `span.sku` → `sku`, `div.tags a.tag` → `tags` (in order); the JSON-LD block
/// `script[type="application/ld+json"]` holds `$.name` (= `heading`), `$.sku` and `$.price`
/// (a JSON number with the same digits as `price`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageInfo {
    /// Canonical URL, e.g. `http://127.0.0.2:8080/p/17`.
    pub url: String,
    /// Host number k of `127.0.0.k`, from 1.
    pub host: u32,
    /// Page index i of `/p/{i}`, from 0.
    pub index: u32,
    /// Text of `<title>`: `Page {host}-{index} | Silk demo`.
    pub title: String,
    /// Text of `h1.title`: `Page {host}-{index}`.
    pub heading: String,
    /// Text of `span.price`, two decimals, e.g. `123.45`.
    pub price: String,
    /// The price in cents, e.g. `12345`.
    pub price_cents: u32,
    /// Text of `span.sku` and JSON-LD `sku`: `SKU-{host}-{index:05}`.
    pub sku: String,
    /// Texts of `div.tags a.tag`, in page order (1 to 3 of [`CATEGORIES`]).
    pub tags: Vec<&'static str>,
}

/// One HTTP answer, before it becomes a hyper response.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) content_type: &'static str,
    pub(crate) body: Bytes,
    pub(crate) location: Option<String>,
}

pub(crate) const HTML: &str = "text/html; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";

#[derive(Debug)]
pub(crate) struct Content {
    seed: u64,
    hosts: u32,
    pages: u32,
    port: u16,
    robots: Bytes,
}

/// Per-page facts drawn from the `FACTS` stream.
struct Facts {
    price_cents: u32,
    tags: [u8; 3],
    tag_count: usize,
}

fn facts(seed: u64, host: u32, index: u32) -> Facts {
    let mut rng = Rng::for_page(seed, host, index, stream::FACTS);
    let price_cents = 100 + rng.below(99_900);
    let mut order: [u8; CATEGORIES.len()] = [0, 1, 2, 3, 4, 5];
    for k in (1..order.len()).rev() {
        let j = rng.below(k as u32 + 1) as usize;
        order.swap(k, j);
    }
    let tag_count = 1 + rng.below(3) as usize;
    Facts {
        price_cents,
        tags: [order[0], order[1], order[2]],
        tag_count,
    }
}

fn price_text(cents: u32) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}

/// Which shape a generated link takes; each resolves to a content page (or to its redirect).
#[derive(Debug, Clone, Copy)]
enum Form {
    /// `17` (relative to `/p/i`)
    Sibling,
    /// `./17`
    DotSlash,
    /// `../p/17`
    DotDot,
    /// `/p/17`
    AbsPath,
    /// `http://127.0.0.h:P/p/17`
    AbsSameHost,
    /// `http://127.0.0.o:P/p/17`, o ≠ h
    CrossHost,
    /// `/p/17#section-3`
    Fragment,
    /// `/p/17?utm_source=x&utm_medium=y`
    Utm,
    /// `/p/17?fbclid=…`
    Fbclid,
    /// `/p/17?gclid=…`
    Gclid,
    /// `/p/17;jsessionid=…`
    JSessionId,
    /// `/p/17?_=…` (jQuery cache buster)
    CacheBuster,
    /// `HTTP://127.0.0.h:P/p/17`
    UpperScheme,
    /// `/p/%317` (first digit percent-encoded)
    PercentDigit,
    /// `/%70/17` (`p` percent-encoded)
    PercentLetter,
    /// `/p/x/../17` (dot segments in an absolute path)
    DotSegments,
    /// `/r/17`, a 301 to `/p/17`
    Redirect,
}

const FORMS: [Form; 17] = [
    Form::Sibling,
    Form::DotSlash,
    Form::DotDot,
    Form::AbsPath,
    Form::AbsSameHost,
    Form::CrossHost,
    Form::Fragment,
    Form::Utm,
    Form::Fbclid,
    Form::Gclid,
    Form::JSessionId,
    Form::CacheBuster,
    Form::UpperScheme,
    Form::PercentDigit,
    Form::PercentLetter,
    Form::DotSegments,
    Form::Redirect,
];

fn not_found_body() -> Bytes {
    Bytes::from_static(
        b"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Not found</title></head>\
<body><h1 class=\"title\">404 Not Found</h1><p><a href=\"/\">Home</a></p></body></html>\n",
    )
}

/// `path` without `;params` in any segment (`/p/5;jsessionid=A` → `/p/5`).
fn strip_path_params(path: &str) -> std::borrow::Cow<'_, str> {
    if !path.contains(';') {
        return path.into();
    }
    let mut out = String::with_capacity(path.len());
    for (n, segment) in path.split('/').enumerate() {
        if n > 0 {
            out.push('/');
        }
        out.push_str(segment.split(';').next().unwrap_or(""));
    }
    out.into()
}

/// A canonical decimal (no sign, no leading zero unless `0`).
fn parse_index(s: &str) -> Option<u32> {
    if s.is_empty() || (s.len() > 1 && s.starts_with('0')) || !s.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    s.parse().ok()
}

fn is_tracking_param(name: &str) -> bool {
    name.starts_with("utm_") || matches!(name, "fbclid" | "gclid" | "_" | "callback" | "jsessionid")
}

impl Content {
    pub(crate) fn new(
        seed: u64,
        hosts: u32,
        pages: u32,
        port: u16,
        crawl_delay_ms: Option<u64>,
    ) -> Self {
        let mut robots = String::from("User-agent: *\nDisallow: /private/\n");
        if let Some(ms) = crawl_delay_ms {
            let secs = if ms % 1000 == 0 {
                format!("{}", ms / 1000)
            } else {
                let frac = format!("{:03}", ms % 1000);
                format!("{}.{}", ms / 1000, frac.trim_end_matches('0'))
            };
            let _ = writeln!(robots, "Crawl-delay: {secs}");
        }
        Content {
            seed,
            hosts,
            pages,
            port,
            robots: Bytes::from(robots),
        }
    }

    pub(crate) fn origin(&self, host: u32) -> String {
        format!("http://127.0.0.{host}:{}", self.port)
    }

    fn push_origin(&self, out: &mut String, host: u32) {
        let _ = write!(out, "http://127.0.0.{host}:{}", self.port);
    }

    /// Canonical URLs of every page a complete crawl must fetch, sorted.
    pub(crate) fn expected_pages(&self) -> std::collections::BTreeSet<String> {
        let mut set = std::collections::BTreeSet::new();
        for host in 1..=self.hosts {
            let origin = self.origin(host);
            set.insert(format!("{origin}/"));
            for i in 0..self.pages {
                set.insert(format!("{origin}/p/{i}"));
            }
            for cat in CATEGORIES {
                for n in 1..=SEARCH_PAGES_PER_CATEGORY {
                    set.insert(format!("{origin}/s?cat={cat}&page={n}"));
                }
            }
        }
        set
    }

    pub(crate) fn page_info(&self, host: u32, index: u32) -> Option<PageInfo> {
        if host == 0 || host > self.hosts || index >= self.pages {
            return None;
        }
        let f = facts(self.seed, host, index);
        Some(PageInfo {
            url: format!("{}/p/{index}", self.origin(host)),
            host,
            index,
            title: format!("Page {host}-{index} | Silk demo"),
            heading: format!("Page {host}-{index}"),
            price: price_text(f.price_cents),
            price_cents: f.price_cents,
            sku: format!("SKU-{host}-{index:05}"),
            tags: f.tags[..f.tag_count]
                .iter()
                .map(|&t| CATEGORIES[t as usize])
                .collect(),
        })
    }

    /// Answers `path_and_query` (exactly as received) on host `host`.
    pub(crate) fn respond(&self, host: u32, path_and_query: &str) -> Reply {
        let (raw_path, query) = match path_and_query.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path_and_query, None),
        };
        let no_params = strip_path_params(raw_path);
        let Ok(path) = percent_decode_str(&no_params).decode_utf8() else {
            return self.not_found();
        };
        let mut segments = path.strip_prefix('/').unwrap_or(&path).split('/');
        let first = segments.next().unwrap_or("");
        let rest: Vec<&str> = segments.collect();
        match (first, rest.as_slice()) {
            ("", []) => self.html(self.render_index(host)),
            ("robots.txt", []) => Reply {
                status: 200,
                content_type: TEXT,
                body: self.robots.clone(),
                location: None,
            },
            ("p", [n]) => match parse_index(n) {
                Some(i) if i < self.pages => self.html(self.render_page(host, i)),
                _ => self.not_found(),
            },
            ("s", []) => match self.search_params(query) {
                Some((cat, n)) => self.html(self.render_search(host, cat, n)),
                None => self.not_found(),
            },
            ("r", [n]) => match parse_index(n) {
                Some(i) if i < self.pages => Reply {
                    status: 301,
                    content_type: HTML,
                    body: Bytes::from_static(b"<html><body>Moved</body></html>\n"),
                    location: Some(format!("/p/{i}")),
                },
                _ => self.not_found(),
            },
            ("calendar", [y, m]) => match (parse_index(y), parse_index(m)) {
                (Some(year), Some(month)) if (1..=12).contains(&month) => {
                    self.html(render_calendar(year, month))
                }
                _ => self.not_found(),
            },
            ("private", [n]) => match parse_index(n) {
                Some(n) => self.html(render_private(n)),
                None => self.not_found(),
            },
            _ => self.not_found(),
        }
    }

    fn html(&self, body: String) -> Reply {
        Reply {
            status: 200,
            content_type: HTML,
            body: Bytes::from(body),
            location: None,
        }
    }

    fn not_found(&self) -> Reply {
        Reply {
            status: 404,
            content_type: HTML,
            body: not_found_body(),
            location: None,
        }
    }

    /// `Some((category index, page))` when the query names exactly one known category and
    /// one valid page, in any order, ignoring tracking parameters; `None` otherwise.
    fn search_params(&self, query: Option<&str>) -> Option<(usize, u32)> {
        let mut cat = None;
        let mut page = None;
        for pair in query?.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            if is_tracking_param(name) {
                continue;
            }
            match name {
                "cat" if cat.is_none() => cat = Some(CATEGORIES.iter().position(|c| *c == value)?),
                "page" if page.is_none() => {
                    let n = parse_index(value)?;
                    if !(1..=SEARCH_PAGES_PER_CATEGORY).contains(&n) {
                        return None;
                    }
                    page = Some(n);
                }
                _ => return None,
            }
        }
        Some((cat?, page?))
    }

    /// Writes a link to search page (`cat`, `n`) with its two parameters in random order,
    /// sometimes with a tracking parameter, with `&amp;` or a bare `&` between parameters.
    fn push_search_href(&self, out: &mut String, rng: &mut Rng, cat: usize, n: u32) {
        let amp = if rng.chance(1, 2) { "&amp;" } else { "&" };
        let cat = CATEGORIES[cat];
        let mut params = [format!("cat={cat}"), format!("page={n}"), String::new()];
        let mut count = 2;
        if rng.chance(1, 4) {
            params[2] = format!("utm_source=tag{}", rng.below(10));
            count = 3;
        }
        for k in (1..count).rev() {
            let j = rng.below(k as u32 + 1) as usize;
            params.swap(k, j);
        }
        out.push_str("/s?");
        for (k, p) in params[..count].iter().enumerate() {
            if k > 0 {
                out.push_str(amp);
            }
            out.push_str(p);
        }
    }

    fn push_form_href(&self, out: &mut String, rng: &mut Rng, host: u32, form: Form, j: u32) {
        match form {
            Form::Sibling => {
                let _ = write!(out, "{j}");
            }
            Form::DotSlash => {
                let _ = write!(out, "./{j}");
            }
            Form::DotDot => {
                let _ = write!(out, "../p/{j}");
            }
            Form::AbsPath => {
                let _ = write!(out, "/p/{j}");
            }
            Form::AbsSameHost => {
                self.push_origin(out, host);
                let _ = write!(out, "/p/{j}");
            }
            Form::CrossHost => {
                let other = if self.hosts > 1 {
                    (host + rng.below(self.hosts - 1)) % self.hosts + 1
                } else {
                    host
                };
                self.push_origin(out, other);
                let _ = write!(out, "/p/{j}");
            }
            Form::Fragment => {
                let _ = write!(out, "/p/{j}#section-{}", rng.below(5));
            }
            Form::Utm => {
                let amp = if rng.chance(1, 2) { "&amp;" } else { "&" };
                let _ = write!(
                    out,
                    "/p/{j}?utm_source=newsletter{}{amp}utm_medium=email",
                    rng.below(10)
                );
            }
            Form::Fbclid => {
                let _ = write!(out, "/p/{j}?fbclid=IwAR{:012x}", rng.hex());
            }
            Form::Gclid => {
                let _ = write!(out, "/p/{j}?gclid=Cj0KCQ{:012x}", rng.hex());
            }
            Form::JSessionId => {
                let _ = write!(out, "/p/{j};jsessionid={:012X}", rng.hex());
            }
            Form::CacheBuster => {
                let _ = write!(
                    out,
                    "/p/{j}?_={}",
                    1_700_000_000_000u64 + rng.hex() % 1_000_000
                );
            }
            Form::UpperScheme => {
                let _ = write!(out, "HTTP://127.0.0.{host}:{}/p/{j}", self.port);
            }
            Form::PercentDigit => {
                let digits = j.to_string();
                let (first, rest) = digits.split_at(1);
                let _ = write!(out, "/p/%3{first}{rest}");
            }
            Form::PercentLetter => {
                let _ = write!(out, "/%70/{j}");
            }
            Form::DotSegments => {
                let _ = write!(out, "/p/x/../{j}");
            }
            Form::Redirect => {
                let _ = write!(out, "/r/{j}");
            }
        }
    }

    fn head(&self, out: &mut String, title: &str, canonical: Option<(u32, &str)>) {
        out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
        let _ = writeln!(out, "<title>{title}</title>");
        if let Some((host, path)) = canonical {
            out.push_str("<link rel=\"canonical\" href=\"");
            self.push_origin(out, host);
            let _ = writeln!(out, "{path}\">");
        }
    }

    pub(crate) fn render_page(&self, host: u32, i: u32) -> String {
        let mut out = String::with_capacity(7 * 1024);
        let f = facts(self.seed, host, i);
        let price = price_text(f.price_cents);
        let canonical_path = format!("/p/{i}");
        self.head(
            &mut out,
            &format!("Page {host}-{i} | Silk demo"),
            Some((host, &canonical_path)),
        );
        let _ = writeln!(
            out,
            "<script type=\"application/ld+json\">{{\"@context\":\"https://schema.org\",\
\"@type\":\"Product\",\"name\":\"Page {host}-{i}\",\"sku\":\"SKU-{host}-{i:05}\",\"price\":{price}}}</script>"
        );
        out.push_str("</head>\n<body>\n<header id=\"top\"><a href=\"/\">Home</a> | ");
        out.push_str("<a href=\"#content\">Skip to content</a> | ");
        if i == 0 {
            out.push_str("<a href=\"../\">Up</a></header>\n");
        } else {
            let _ = writeln!(out, "<a href=\"../p/{}\">Up</a></header>", (i - 1) / 2);
        }
        let _ = writeln!(
            out,
            "<main id=\"content\">\n<h1 class=\"title\">Page {host}-{i}</h1>\n\
<p class=\"offer\">Price: <span class=\"price\">{price}</span> <span class=\"currency\">USD</span> \
· SKU <span class=\"sku\">SKU-{host}-{i:05}</span></p>"
        );

        let mut links = Rng::for_page(self.seed, host, i, stream::LINKS);
        out.push_str("<div class=\"tags\">");
        for (k, &t) in f.tags[..f.tag_count].iter().enumerate() {
            if k > 0 {
                out.push(' ');
            }
            out.push_str("<a class=\"tag\" href=\"");
            let n = 1 + links.below(SEARCH_PAGES_PER_CATEGORY);
            self.push_search_href(&mut out, &mut links, t as usize, n);
            let _ = write!(out, "\">{}</a>", CATEGORIES[t as usize]);
        }
        out.push_str("</div>\n<section class=\"description\">\n");

        let mut text = Rng::for_page(self.seed, host, i, stream::TEXT);
        let paragraphs = 3 + text.below(3);
        for _ in 0..paragraphs {
            out.push_str("<p>");
            let words = 40 + text.below(40);
            for w in 0..words {
                if w > 0 {
                    out.push(' ');
                }
                out.push_str(WORDS[text.below(WORDS.len() as u32) as usize]);
            }
            out.push_str(".</p>\n");
        }
        out.push_str("</section>\n<nav class=\"children\">");
        for child in [2 * i + 1, 2 * i + 2] {
            if child < self.pages {
                let _ = write!(out, "<a href=\"/p/{child}\">Page {host}-{child}</a> ");
            }
        }
        out.push_str("</nav>\n<h2>Related</h2>\n<ul class=\"related\">\n");

        let mut duplicate_of: Option<(usize, usize)> = None;
        let dup_index = links.below(RELATED_LINKS_PER_PAGE);
        for k in 0..RELATED_LINKS_PER_PAGE {
            let form = FORMS[links.below(FORMS.len() as u32) as usize];
            let j = links.below(self.pages);
            out.push_str("<li><a href=\"");
            let start = out.len();
            self.push_form_href(&mut out, &mut links, host, form, j);
            if k == dup_index {
                duplicate_of = Some((start, out.len()));
            }
            let _ = writeln!(out, "\">Item {j}</a></li>");
        }
        if let Some((start, end)) = duplicate_of {
            let href = out[start..end].to_owned();
            let _ = writeln!(out, "<li><a href=\"{href}\">Same item again</a></li>");
        }
        out.push_str("</ul>\n<p class=\"more\">");
        if links.chance(1, 3) {
            let cat = links.below(CATEGORIES.len() as u32) as usize;
            out.push_str("<a href=\"");
            self.push_search_href(&mut out, &mut links, cat, 1);
            out.push_str("\">Browse more</a> ");
        }
        if links.chance(1, 4) {
            let _ = write!(
                out,
                "<a href=\"/missing/{}\">Old offer</a> ",
                links.below(50)
            );
        }
        if links.chance(1, 3) {
            let _ = write!(
                out,
                "<a href=\"/private/{}\">Members only</a> ",
                links.below(20)
            );
        }
        if links.chance(1, 5) {
            let _ = write!(
                out,
                "<a href=\"/calendar/2024/{}\">Events</a> ",
                1 + links.below(12)
            );
        }
        out.push_str("<a href=\"#top\">Back to top</a></p>\n</main>\n");
        out.push_str(
            "<footer><a href=\"mailto:shop@example.invalid\">Contact</a> \
<a href=\"javascript:void(0)\">Print</a> <a href=\"tel:+10000000000\">Call</a></footer>\n\
</body>\n</html>\n",
        );
        out
    }

    pub(crate) fn render_index(&self, host: u32) -> String {
        let mut out = String::with_capacity(4 * 1024);
        self.head(
            &mut out,
            &format!("Silk demo host {host}"),
            Some((host, "/")),
        );
        let _ = writeln!(
            out,
            "</head>\n<body>\n<main>\n<h1 class=\"title\">Host {host}</h1>\n<ul class=\"start\">"
        );
        let p = |n: u32| n % self.pages;
        let _ = writeln!(out, "<li><a href=\"/p/{}\">Start here</a></li>", p(0));
        let _ = writeln!(out, "<li><a href=\"p/{}\">Second</a></li>", p(1));
        let _ = writeln!(out, "<li><a href=\"./p/{}\">Third</a></li>", p(2));
        let _ = writeln!(out, "<li><a href=\"p/{}#intro\">Fourth</a></li>", p(3));
        out.push_str("</ul>\n<ul class=\"categories\">\n");
        let mut rng = Rng::for_page(self.seed, host, u32::MAX, stream::LINKS);
        for (cat, name) in CATEGORIES.iter().enumerate() {
            out.push_str("<li><a href=\"");
            self.push_search_href(&mut out, &mut rng, cat, 1);
            let _ = writeln!(out, "\">{name}</a></li>");
        }
        out.push_str("</ul>\n<ul class=\"hosts\">\n");
        let others: Vec<u32> = if host == 1 {
            (2..=self.hosts).collect()
        } else {
            let next = host % self.hosts + 1;
            if next == 1 { vec![1] } else { vec![1, next] }
        };
        for other in others {
            out.push_str("<li><a href=\"");
            self.push_origin(&mut out, other);
            let _ = writeln!(out, "/\">Host {other}</a></li>");
        }
        let _ = writeln!(
            out,
            "</ul>\n<p class=\"misc\"><a href=\"/calendar/2024/1\">Events calendar</a> \
<a href=\"/private/0\">Members</a> <a href=\"/missing/0\">Old page</a> \
<a href=\"/r/{}\">Moved page</a></p>\n</main>\n</body>\n</html>",
            p(4)
        );
        out
    }

    fn render_search(&self, host: u32, cat: usize, n: u32) -> String {
        let mut out = String::with_capacity(3 * 1024);
        let name = CATEGORIES[cat];
        let canonical = format!("/s?cat={name}&page={n}");
        self.head(
            &mut out,
            &format!("Search {name} page {n} | Silk demo"),
            Some((host, &canonical.replace('&', "&amp;"))),
        );
        let _ = writeln!(
            out,
            "</head>\n<body>\n<main>\n<h1 class=\"title\">Search {name} page {n}</h1>\n<ul class=\"results\">"
        );
        let mut rng = Rng::for_page(self.seed, host, cat as u32 * 1000 + n, stream::SEARCH);
        for _ in 0..RESULTS_PER_SEARCH_PAGE {
            let j = rng.below(self.pages);
            let _ = writeln!(out, "<li><a href=\"p/{j}\">Page {host}-{j}</a></li>");
        }
        out.push_str("</ul>\n<p class=\"pager\">");
        if n > 1 {
            out.push_str("<a rel=\"prev\" href=\"");
            self.push_search_href(&mut out, &mut rng, cat, n - 1);
            out.push_str("\">Previous</a> ");
        }
        if n < SEARCH_PAGES_PER_CATEGORY {
            out.push_str("<a rel=\"next\" href=\"");
            self.push_search_href(&mut out, &mut rng, cat, n + 1);
            out.push_str("\">Next</a> ");
        }
        out.push_str("<a href=\"/\">Home</a></p>\n</main>\n</body>\n</html>\n");
        out
    }
}

fn render_calendar(year: u32, month: u32) -> String {
    let (py, pm) = if month == 1 {
        (year.checked_sub(1), 12)
    } else {
        (Some(year), month - 1)
    };
    let (ny, nm) = if month == 12 {
        (year.saturating_add(1), 1)
    } else {
        (year, month + 1)
    };
    let mut out = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Calendar {year}-{month:02}</title></head>\n\
<body><h1 class=\"title\">Calendar {year}-{month:02}</h1>\n<p>No events this month.</p>\n<p>"
    );
    if let Some(py) = py {
        let _ = write!(
            out,
            "<a rel=\"prev\" href=\"/calendar/{py}/{pm}\">Previous month</a> "
        );
    }
    let _ = write!(
        out,
        "<a rel=\"next\" href=\"/calendar/{ny}/{nm}\">Next month</a> <a href=\"/\">Home</a></p>\n</body></html>\n"
    );
    out
}

fn render_private(n: u32) -> String {
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Private {n}</title></head>\n\
<body><h1 class=\"title\">Private {n}</h1>\n<p>Robots may not read this.</p>\n\
<p><a href=\"/private/{}\">More</a> <a href=\"/\">Home</a></p>\n</body></html>\n",
        n.saturating_add(1)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content() -> Content {
        Content::new(42, 3, 200, 8080, None)
    }

    fn body(r: &Reply) -> &str {
        std::str::from_utf8(&r.body).unwrap()
    }

    #[test]
    fn routes_variants_of_a_content_page_to_the_same_bytes() {
        let c = content();
        let plain = c.respond(2, "/p/57");
        assert_eq!(plain.status, 200);
        for variant in [
            "/p/%357",
            "/%70/57",
            "/p/57;jsessionid=ABC",
            "/p/57?utm_source=x&utm_medium=y",
            "/p/57?anything=else",
        ] {
            let r = c.respond(2, variant);
            assert_eq!(r.status, 200, "{variant}");
            assert_eq!(r.body, plain.body, "{variant}");
        }
        for missing in [
            "/p/200",
            "/p/057",
            "/p/-1",
            "/p/",
            "/p/5/",
            "/p/x/../5",
            "/nope",
        ] {
            assert_eq!(c.respond(2, missing).status, 404, "{missing}");
        }
    }

    #[test]
    fn search_pages_accept_either_parameter_order_only() {
        let c = content();
        let a = c.respond(1, "/s?cat=books&page=2");
        let b = c.respond(1, "/s?page=2&utm_source=z&cat=books");
        assert_eq!(a.status, 200);
        assert_eq!(a.body, b.body);
        for bad in [
            "/s",
            "/s?cat=books",
            "/s?cat=books&page=3",
            "/s?cat=boats&page=1",
            "/s?cat=books&page=1&q=x",
            "/s?cat=books&amp;page=1",
            "/s?cat=books&cat=books&page=1",
        ] {
            assert_eq!(c.respond(1, bad).status, 404, "{bad}");
        }
    }

    #[test]
    fn robots_and_redirects_and_traps() {
        let c = Content::new(1, 1, 10, 80, Some(1500));
        let robots = c.respond(1, "/robots.txt");
        assert_eq!(
            body(&robots),
            "User-agent: *\nDisallow: /private/\nCrawl-delay: 1.5\n"
        );
        let r = c.respond(1, "/r/7");
        assert_eq!((r.status, r.location.as_deref()), (301, Some("/p/7")));
        assert_eq!(c.respond(1, "/r/10").status, 404);
        let cal = c.respond(1, "/calendar/2024/12");
        assert!(body(&cal).contains("/calendar/2025/1\""));
        assert!(body(&cal).contains("/calendar/2024/11\""));
        assert_eq!(c.respond(1, "/calendar/2024/13").status, 404);
        assert_eq!(c.respond(1, "/private/3").status, 200);
    }

    #[test]
    fn page_contains_the_facts_of_page_info() {
        let c = content();
        for (h, i) in [(1, 0), (3, 199), (2, 17)] {
            let info = c.page_info(h, i).unwrap();
            let html = c.render_page(h, i);
            assert!(html.contains(&format!("<title>{}</title>", info.title)));
            assert!(html.contains(&format!("<h1 class=\"title\">{}</h1>", info.heading)));
            assert!(html.contains(&format!("<span class=\"price\">{}</span>", info.price)));
            assert!(html.contains(&format!("\"price\":{}}}", info.price)));
            assert!(html.contains(&format!("\"sku\":\"{}\"", info.sku)));
            for tag in &info.tags {
                assert!(html.contains(&format!("\">{tag}</a>")));
            }
        }
        let (mut min_len, mut max_len, mut min_links, mut max_links) =
            (usize::MAX, 0, usize::MAX, 0);
        for h in 1..=3 {
            for i in 0..200 {
                let html = c.render_page(h, i);
                let anchors = html.matches("<a ").count();
                min_len = min_len.min(html.len());
                max_len = max_len.max(html.len());
                min_links = min_links.min(anchors);
                max_links = max_links.max(anchors);
            }
        }
        assert!(
            min_len >= 3000 && max_len <= 6500,
            "{min_len}..{max_len} bytes"
        );
        assert!(
            min_links >= 28 && max_links <= 42,
            "{min_links}..{max_links} links"
        );
        assert!(c.page_info(4, 0).is_none());
        assert!(c.page_info(1, 200).is_none());
    }

    #[test]
    fn every_link_form_occurs_on_host_one() {
        let c = content();
        let all: String = (0..200).map(|i| c.render_page(1, i)).collect();
        for needle in [
            "href=\"../p/",
            "href=\"./",
            "href=\"/p/x/../",
            "href=\"http://127.0.0.1:8080/p/",
            "href=\"http://127.0.0.2:8080/p/",
            "href=\"http://127.0.0.3:8080/p/",
            "href=\"HTTP://127.0.0.1:8080/p/",
            "#section-",
            "?utm_source=",
            "&amp;utm_medium=",
            "?fbclid=",
            "?gclid=",
            ";jsessionid=",
            "?_=",
            "href=\"/p/%3",
            "href=\"/%70/",
            "href=\"/r/",
            "href=\"/missing/",
            "href=\"/private/",
            "href=\"/calendar/",
            "href=\"/s?page=",
            "href=\"/s?cat=",
            "Same item again",
            "mailto:",
        ] {
            assert!(all.contains(needle), "no {needle}");
        }
        // Sibling-relative links: `href="17"`.
        assert!((0..10).any(|d| all.contains(&format!("<li><a href=\"{d}"))));
    }
}
