//! From an `href` as written to the canonical absolute URL the frontier wants, fast.
//!
//! Three paths, cheapest first, all giving exactly `silk_core::canonicalize(base.join(href))`
//! (**Invariant**, property-tested against it):
//! 1. *String fast path*: a path-absolute, path-relative or query-only `href` made of
//!    characters the URL parser copies as they are (no `%`, `;`, dot segments, spaces, …),
//!    with no query or a sorted one without ignored parameters, against a base whose path
//!    is already canonical: the result is a string concatenation, no URL parse at all.
//! 2. *Join fast path*: the `url` crate joins; if the result is canonical but for its
//!    fragment (no `%`, `;`, unsorted or ignored parameters), only the fragment is dropped.
//! 3. Anything else goes through `silk_core::canonicalize`.
//!
//! With canonical rewrites configured only path 3 is taken. Also the per-page link set
//! (dedup in page order). Must not filter by host or depth: the caller does that.

use silk_core::canon::{CanonRules, canonicalize};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use url::{Position, Url};

/// The URL relative links of a page resolve against (the page's, or its `<base href>`),
/// with what the string fast path needs precomputed.
pub(crate) struct Base {
    url: Url,
    /// End of `scheme://host:port` in the serialisation.
    origin_end: usize,
    /// End of the path's directory part (after its last `/`).
    dir_end: usize,
    /// End of the path.
    path_end: usize,
    /// The origin needs no canonicalisation (http(s), no trailing dot on the host).
    origin_ok: bool,
    /// The path needs no canonicalisation either (no `%`, no `;`).
    path_ok: bool,
}

impl Base {
    pub(crate) fn new(url: Url) -> Base {
        let origin_end = url[..Position::BeforePath].len();
        let path_end = url[..Position::AfterPath].len();
        let path = url.path();
        let dir_end = origin_end + path.rfind('/').map_or(0, |i| i + 1);
        let origin_ok = matches!(url.scheme(), "http" | "https")
            && url
                .host_str()
                .is_some_and(|h| !h.is_empty() && !h.ends_with('.'));
        let path_ok = path.starts_with('/') && !path.bytes().any(|b| b == b'%' || b == b';');
        Base {
            url,
            origin_end,
            dir_end,
            path_end,
            origin_ok,
            path_ok,
        }
    }
}

/// Resolves and canonicalises one `href` (raw attribute text with its character references
/// already decoded); `None` for what is not a fetchable link (`javascript:`, `mailto:`,
/// `tel:`, `data:`, fragment-only, empty, unparseable, non-http).
pub(crate) fn canonical_link(
    base: &Base,
    href: &str,
    rules: &CanonRules,
    no_rewrites: bool,
) -> Option<String> {
    let href = href.trim_matches(|c: char| c.is_ascii_whitespace() || c.is_ascii_control());
    if href.is_empty() || href.starts_with('#') || has_skipped_scheme(href) {
        return None;
    }
    if no_rewrites && let Some(s) = concat_fast_path(base, href, rules) {
        return Some(s);
    }
    let mut url = base.url.join(href).ok()?;
    if !matches!(url.scheme(), "http" | "https") || !url.has_host() {
        return None;
    }
    if no_rewrites && is_canonical_but_fragment(&url, rules) {
        url.set_fragment(None);
        return Some(url.into());
    }
    canonicalize(&url, rules).ok().map(String::from)
}

/// Path characters the URL parser copies unchanged (RFC 3986 pchar without `%`, `;`, `'`).
const PLAIN: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b'='
                    | b':'
                    | b'@'
                    | b'/'
                    | b'&'
            );
        b += 1;
    }
    t
};

fn is_plain_path_byte(b: u8) -> bool {
    PLAIN[b as usize]
}

/// Path 1 of the module docs; `None` = take a slower path.
fn concat_fast_path(base: &Base, href: &str, rules: &CanonRules) -> Option<String> {
    if !base.origin_ok {
        return None;
    }
    let base_str = base.url.as_str();
    let origin = &base_str[..base.origin_end];
    let without_fragment = href.split_once('#').map_or(href, |(h, _)| h);
    let (mut path, query) = match without_fragment.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (without_fragment, None),
    };
    // An absolute URL of the base's own origin (`HTTP://Host:8080/x` on that origin) is a
    // path-absolute reference to it.
    let mut absolute = false;
    if path.len() >= origin.len()
        && path.as_bytes()[..origin.len()].eq_ignore_ascii_case(origin.as_bytes())
    {
        let rest = &path[origin.len()..];
        if rest.is_empty() {
            path = "/";
        } else if rest.starts_with('/') {
            path = rest;
        } else {
            return None;
        }
        absolute = true;
    } else if path.starts_with("//")
        || path
            .split('/')
            .next()
            .is_some_and(|first| first.contains(':'))
    {
        // Another host, or a scheme: the parser decides.
        return None;
    }
    if !path.bytes().all(is_plain_path_byte) {
        return None;
    }
    let query = match query {
        Some(q) => Some(canonical_query(q, rules)?),
        None => None,
    };
    let dir: &str = if absolute || path.starts_with('/') {
        ""
    } else if !base.path_ok {
        return None;
    } else if path.is_empty() {
        &base_str[base.origin_end..base.path_end]
    } else {
        &base_str[base.origin_end..base.dir_end]
    };
    let mut out = String::with_capacity(origin.len() + dir.len() + without_fragment.len());
    out.push_str(origin);
    let has_dots = |p: &str| p.split('/').any(|seg| seg == "." || seg == "..");
    if has_dots(dir) || has_dots(path) {
        if dir.contains(':') || path.contains(':') {
            // The parser keeps a drive-letter-like segment (`A:`) on `..`: not worth mirroring.
            return None;
        }
        let mut full = String::with_capacity(dir.len() + path.len());
        full.push_str(dir);
        full.push_str(path);
        push_without_dot_segments(&full, &mut out);
    } else {
        out.push_str(dir);
        out.push_str(path);
    }
    if let Some(q) = query.as_deref().filter(|q| !q.is_empty()) {
        out.push('?');
        out.push_str(q);
    }
    Some(out)
}

/// RFC 3986 `remove_dot_segments` as the URL parser applies it to a path starting with `/`:
/// `.` is dropped, `..` drops the segment before it (never the root), and a trailing `.` or
/// `..` leaves a trailing slash.
fn push_without_dot_segments(path: &str, out: &mut String) {
    let mut kept: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.strip_prefix('/').unwrap_or(path).split('/').collect();
    let n = segments.len();
    for (i, seg) in segments.into_iter().enumerate() {
        let last = i + 1 == n;
        match seg {
            "." => {}
            ".." => {
                kept.pop();
            }
            s => {
                kept.push(s);
                continue;
            }
        }
        if last {
            kept.push("");
        }
    }
    for seg in kept {
        out.push('/');
        out.push_str(seg);
    }
}

/// The query as `silk_core::canonicalize` writes it (ignored and empty parameters dropped,
/// the rest sorted), for a query of plain characters; `None` for anything else. Borrowed
/// when it is already canonical.
fn canonical_query<'q>(q: &'q str, rules: &CanonRules) -> Option<std::borrow::Cow<'q, str>> {
    if !q.bytes().all(|b| is_plain_path_byte(b) || b == b'?') {
        return None;
    }
    if !q.is_empty() && sorted_and_kept(q, rules) {
        return Some(std::borrow::Cow::Borrowed(q));
    }
    let mut pieces: Vec<(&str, &str)> = q
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| (p.split_once('=').map_or(p, |(n, _)| n), p))
        .filter(|(name, _)| !rules.is_ignored(name))
        .collect();
    pieces.sort_unstable();
    let mut out = String::with_capacity(q.len());
    for (i, (_, piece)) in pieces.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(piece);
    }
    Some(std::borrow::Cow::Owned(out))
}

fn sorted_and_kept(q: &str, rules: &CanonRules) -> bool {
    let mut prev: Option<(&str, &str)> = None;
    for piece in q.split('&') {
        if piece.is_empty() {
            return false;
        }
        let name = piece.split_once('=').map_or(piece, |(n, _)| n);
        if rules.is_ignored(name) || prev.is_some_and(|p| p > (name, piece)) {
            return false;
        }
        prev = Some((name, piece));
    }
    true
}

fn has_skipped_scheme(href: &str) -> bool {
    const SKIPPED: [&str; 4] = ["javascript:", "mailto:", "tel:", "data:"];
    let head = href.as_bytes();
    SKIPPED
        .iter()
        .any(|s| head.len() >= s.len() && head[..s.len()].eq_ignore_ascii_case(s.as_bytes()))
}

/// Whether `silk_core::canonicalize` would change nothing but the fragment (without rewrites).
fn is_canonical_but_fragment(url: &Url, rules: &CanonRules) -> bool {
    if url.host_str().is_none_or(|h| h.ends_with('.')) {
        return false;
    }
    if url.path().bytes().any(|b| b == b'%' || b == b';') {
        return false;
    }
    match url.query() {
        None => true,
        Some(q) if q.is_empty() || q.contains('%') => false,
        Some(q) => sorted_and_kept(q, rules),
    }
}

/// Hashes one u64 (already an xxh3 hash) as itself.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// The links of one page, deduplicated, in the order first seen.
pub(crate) struct LinkSet {
    links: Vec<String>,
    /// xxh3 of a link → its index; a collision falls back to comparing strings.
    seen: HashMap<u64, u32, BuildHasherDefault<PassThrough>>,
}

impl Default for LinkSet {
    fn default() -> Self {
        // A typical page has a few dozen links: no rehash on the way there.
        Self {
            links: Vec::with_capacity(64),
            seen: HashMap::with_capacity_and_hasher(64, Default::default()),
        }
    }
}

impl LinkSet {
    pub(crate) fn push(&mut self, url: String) {
        let s = url.as_str();
        let h = xxhash_rust::xxh3::xxh3_64(s.as_bytes());
        match self.seen.get(&h) {
            Some(&i) if self.links[i as usize] == s => {}
            Some(_) => {
                if !self.links.iter().any(|l| l == s) {
                    self.links.push(url);
                }
            }
            None => {
                self.seen.insert(h, self.links.len() as u32);
                self.links.push(url);
            }
        }
    }

    pub(crate) fn into_vec(self) -> Vec<String> {
        self.links
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use silk_core::canon::canonicalize_str;

    fn rules() -> CanonRules {
        CanonRules::new(&["sid".into(), "ref*".into()], &[]).unwrap()
    }

    const BASES: &[&str] = &[
        "http://h.test/dir/page.html?q=1",
        "https://Ex.COM:443/a/b/",
        "http://127.0.0.1:8080/",
    ];
    const HREFS: &[&str] = &[
        "/p/1",
        "p/2#frag",
        "../up",
        "./x/./y/../z",
        "?b=2&a=1",
        "?a=1&b=2",
        "?a=1&a=0",
        "?utm_source=x&id=3",
        "?id=3&sid=9",
        "?Ref=1",
        "/q?x=%7e&y=%2f",
        "/caf%C3%a9",
        "/café",
        "/a;jsessionid=1/b",
        "/a;v=1",
        "http://other.test./x",
        "HTTP://OTHER.test:80/Y",
        "https://other.test:443",
        "//cdn.test/lib.js",
        "/sp ace",
        "/?",
        "/?&&a=1",
        "/?a",
        "/?a=",
        "/?a=&a",
        "/?b&a",
        "/p?x=1#a?b",
        "http://[::1]:8000/x",
        "/%2e%2e/x",
        "/a/%2E/b",
        "/?%41=1",
        "/?z=1&y=1&x=1",
        "/tab\there",
        "http://h.test/\u{00e9}?\u{00e9}=1",
        "./17",
        "../p/17",
        "/p/x/../17",
        "/p/./x/..",
        "HTTP://127.0.0.1:8080/p/1#x",
        "http://127.0.0.1:8080",
        "http://127.0.0.1:8080?b&a",
        "http://127.0.0.1:8080.evil/x",
        "HTTP://H.TEST/A/../b?z=1&y=2",
        "/s?page=2&cat=books",
        "/p/1?utm_source=a&b=2&a=1#f",
        "?utm_medium=x",
        "/p/1?",
    ];

    #[test]
    fn fast_path_agrees_with_core_canonicalize() {
        let rules = rules();
        for base in BASES {
            let base = Url::parse(base).unwrap();
            for href in HREFS {
                let fast = canonical_link(&Base::new(base.clone()), href, &rules, true);
                let joined = canonical_link(&Base::new(base.clone()), href, &rules, false);
                let slow = canonicalize_str(href.trim(), Some(&base), &rules)
                    .ok()
                    .map(String::from);
                assert_eq!(fast, slow, "base {base} href {href:?}");
                assert_eq!(
                    joined, slow,
                    "without the fast paths: base {base} href {href:?}"
                );
            }
        }
    }

    proptest::proptest! {
        /// The fast path never disagrees with `silk_core::canonicalize` (the invariant).
        #[test]
        fn fast_path_agrees_on_generated_links(
            segments in proptest::collection::vec("[a-zA-Z0-9._~;=%!$()*+,:@' &\t-]{0,6}|\\.\\.|\\.|%2[eEfF]|caf\u{e9}|[A-Z]:", 0..4),
            params in proptest::collection::vec(("utm_[a-z]|sid|ref[a-z]?|[aAbB_]|x%41|q\\?|", "[a-z0-9%&=;?/]{0,4}"), 0..4),
            fragment in proptest::option::of("[a-z#]{0,3}"),
            prefix in "HTTP://Other\\.Test:80/|/|//h2\\.test/|",
            base in "http://h\\.test(:8080)?/(d(;s=1|%41)?/)?(page)?(\\?q=1)?",
        ) {
            let rules = rules();
            let base = Url::parse(&base).unwrap();
            let mut href = prefix;
            href.push_str(&segments.join("/"));
            if !params.is_empty() {
                href.push('?');
                let pairs: Vec<String> = params.iter().map(|(n, v)| format!("{n}={v}")).collect();
                href.push_str(&pairs.join("&"));
            }
            if let Some(f) = fragment {
                href.push('#');
                href.push_str(&f);
            }
            let fast = canonical_link(&Base::new(base.clone()), &href, &rules, true);
            let trimmed = href.trim_matches(|c: char| c.is_ascii_whitespace() || c.is_ascii_control());
            let slow = if trimmed.is_empty() || trimmed.starts_with('#') {
                None
            } else {
                canonicalize_str(&href, Some(&base), &rules).ok().map(String::from)
            };
            proptest::prop_assert_eq!(fast, slow, "href {:?}", href);
        }
    }

    #[test]
    fn skipped_links() {
        let base = Url::parse("http://h/a").unwrap();
        for href in [
            "",
            "  ",
            "#top",
            "javascript:void(0)",
            " JavaScript:x",
            "mailto:a@b",
            "tel:+1",
            "data:text/html,x",
            "ftp://h/x",
            "http://",
            "http://[bad",
        ] {
            assert_eq!(
                canonical_link(&Base::new(base.clone()), href, &CanonRules::default(), true),
                None,
                "{href:?}"
            );
        }
    }

    #[test]
    fn link_set_keeps_first_order() {
        let mut s = LinkSet::default();
        for u in [
            "http://h/b",
            "http://h/a",
            "http://h/b",
            "http://h/c",
            "http://h/a",
        ] {
            s.push(u.to_owned());
        }
        assert_eq!(s.into_vec(), ["http://h/b", "http://h/a", "http://h/c"]);
    }
}
