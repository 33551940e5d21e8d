//! Canonical URL keys and request fingerprints (design §3).
//!
//! Two URLs that name the same resource must get the same key, or the frontier fetches a page
//! twice; two that name different resources must not, or a page is lost. The canonical form:
//! lower-case scheme and host (no trailing dot), default port removed, fragment removed, dot
//! segments resolved, percent-encoding normalised (unreserved characters decoded, other escapes
//! upper-cased), query parameters sorted, ignored parameters removed from the query and from
//! `;name=value` path parameters, then the spider's regex rewrites.
//!
//! **Invariant**: without rewrites, `canonicalize(canonicalize(u)) == canonicalize(u)`
//! (property-tested). With rewrites it holds when the rewrites themselves are idempotent.
//!
//! The fingerprint is a 128-bit xxh3 of method, canonical URL and body; it is the dedup key,
//! and its byte layout is part of the frontier's storage format: do not change it lightly.

use crate::error::CoreError;
use regex::Regex;
use std::fmt;
use url::Url;

/// Query / path parameters removed by default, whatever the spider says (`*` = prefix match).
pub const DEFAULT_IGNORE_PARAMS: &[&str] =
    &["utm_*", "callback", "_", "jsessionid", "fbclid", "gclid"];

/// How a spider canonicalises: which parameters to drop and which rewrites to apply.
#[derive(Debug, Clone)]
pub struct CanonRules {
    exact: Vec<String>,
    prefixes: Vec<String>,
    rewrites: Vec<(Regex, String)>,
}

impl Default for CanonRules {
    fn default() -> Self {
        Self::new(&[], &[]).expect("default canon rules are valid")
    }
}

impl CanonRules {
    /// Rules with the default ignored parameters, plus `extra_ignore` (names, or `prefix*`)
    /// and `rewrites` (regex, replacement) applied in order to the canonical string.
    pub fn new(extra_ignore: &[String], rewrites: &[(String, String)]) -> Result<Self, CoreError> {
        let mut exact = Vec::new();
        let mut prefixes = Vec::new();
        let names = DEFAULT_IGNORE_PARAMS
            .iter()
            .map(|s| s.to_string())
            .chain(extra_ignore.iter().cloned());
        for name in names {
            let name = name.to_ascii_lowercase();
            match name.strip_suffix('*') {
                Some(prefix) => prefixes.push(prefix.to_owned()),
                None => exact.push(name),
            }
        }
        let mut compiled = Vec::with_capacity(rewrites.len());
        for (i, (pattern, replacement)) in rewrites.iter().enumerate() {
            let re = Regex::new(pattern).map_err(|e| CoreError::InvalidRegex {
                at: format!("canonical_rewrites[{i}]"),
                pattern: pattern.clone(),
                reason: e.to_string(),
            })?;
            compiled.push((re, replacement.clone()));
        }
        Ok(Self {
            exact,
            prefixes,
            rewrites: compiled,
        })
    }

    /// Whether a (decoded) parameter name is ignored. Names compare case-insensitively.
    pub fn is_ignored(&self, name: &str) -> bool {
        self.exact.iter().any(|e| e.eq_ignore_ascii_case(name))
            || self.prefixes.iter().any(|p| {
                name.len() >= p.len()
                    && name.is_char_boundary(p.len())
                    && name[..p.len()].eq_ignore_ascii_case(p)
            })
    }

    /// Whether the rules rewrite URLs with regexes (callers with a faster path for plain
    /// rules need to know).
    pub fn has_rewrites(&self) -> bool {
        !self.rewrites.is_empty()
    }
}

/// Parses `raw` (absolute, or relative to `base`) and canonicalises it.
pub fn canonicalize_str(
    raw: &str,
    base: Option<&Url>,
    rules: &CanonRules,
) -> Result<Url, CoreError> {
    let parsed = match base {
        Some(b) => b.join(raw.trim()),
        None => Url::parse(raw.trim()),
    }
    .map_err(|e| CoreError::InvalidUrl {
        url: raw.to_owned(),
        reason: e.to_string(),
    })?;
    canonicalize(&parsed, rules)
}

/// The canonical form of `url` (see the module docs). Only `http` and `https` are accepted.
pub fn canonicalize(url: &Url, rules: &CanonRules) -> Result<Url, CoreError> {
    let out = normalize(url, rules)?;
    if rules.rewrites.is_empty() {
        return Ok(out);
    }
    let mut s = String::from(out.as_str());
    for (re, replacement) in &rules.rewrites {
        if let std::borrow::Cow::Owned(new) = re.replace_all(&s, replacement.as_str()) {
            s = new;
        }
    }
    let rewritten = Url::parse(&s).map_err(|e| CoreError::InvalidUrl {
        url: s.clone(),
        reason: format!("after rewrites: {e}"),
    })?;
    normalize(&rewritten, rules)
}

fn normalize(url: &Url, rules: &CanonRules) -> Result<Url, CoreError> {
    let bad = |reason: &str| CoreError::InvalidUrl {
        url: url.as_str().to_owned(),
        reason: reason.to_owned(),
    };
    match url.scheme() {
        "http" | "https" => {}
        other => return Err(bad(&format!("unsupported scheme `{other}`"))),
    }
    let host = url.host_str().ok_or_else(|| bad("no host"))?;
    let mut out = url.clone();
    out.set_fragment(None);
    if host.ends_with('.') && host.len() > 1 {
        let trimmed = host.trim_end_matches('.').to_owned();
        out.set_host(Some(&trimmed))
            .map_err(|e| bad(&e.to_string()))?;
    }
    let path = normalize_path(out.path(), rules);
    if path != out.path() {
        out.set_path(&path);
    }
    let query = out.query().map(|q| normalize_query(q, rules));
    match query {
        Some(q) if !q.is_empty() => {
            if out.query() != Some(q.as_str()) {
                out.set_query(Some(&q));
            }
        }
        _ => out.set_query(None),
    }
    Ok(out)
}

fn normalize_path(path: &str, rules: &CanonRules) -> String {
    let mut out = String::with_capacity(path.len());
    for (i, segment) in path.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        let mut parts = segment.split(';');
        normalize_percent_into(parts.next().unwrap_or(""), &mut out);
        for param in parts {
            let name = param.split('=').next().unwrap_or("");
            if !rules.is_ignored(&percent_decode_lossy(name)) {
                out.push(';');
                normalize_percent_into(param, &mut out);
            }
        }
    }
    out
}

fn normalize_query(query: &str, rules: &CanonRules) -> String {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for piece in query.split('&') {
        if piece.is_empty() {
            continue;
        }
        let (name, value) = match piece.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (piece, None),
        };
        if rules.is_ignored(&percent_decode_lossy(name)) {
            continue;
        }
        let mut n = String::with_capacity(name.len());
        normalize_percent_into(name, &mut n);
        let mut full = n.clone();
        if let Some(v) = value {
            full.push('=');
            normalize_percent_into(v, &mut full);
        }
        pairs.push((n, full));
    }
    pairs.sort();
    let mut out = String::with_capacity(query.len());
    for (i, (_, full)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(full);
    }
    out
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Decodes escapes of unreserved characters, upper-cases the hex of the others, and escapes
/// a `%` that starts no escape (`%25`): left bare, it could form an escape with the
/// characters after it once those are decoded, and a second pass would give another URL.
fn normalize_percent_into(s: &str, out: &mut String) {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex_val(bytes[i + 1]), hex_val(bytes[i + 2]))
        {
            let b = h * 16 + l;
            if is_unreserved(b) {
                out.push(b as char);
            } else {
                out.push('%');
                out.push(char::from(b"0123456789ABCDEF"[(b >> 4) as usize]));
                out.push(char::from(b"0123456789ABCDEF"[(b & 15) as usize]));
            }
            i += 3;
            continue;
        }
        if bytes[i] == b'%' {
            out.push_str("%25");
            i += 1;
            continue;
        }
        // `i` is always at a char boundary: escapes are ASCII and we step whole chars.
        let ch_len = utf8_len(bytes[i]);
        out.push_str(&s[i..(i + ch_len).min(s.len())]);
        i += ch_len;
    }
}

fn utf8_len(first: u8) -> usize {
    match first {
        0x00..=0x7F => 1,
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF7 => 4,
        _ => 1,
    }
}

fn percent_decode_lossy(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// The politeness key of a URL: host plus explicit non-default port (`example.com`,
/// `127.0.0.2:8080`). Requests with the same key share one per-host queue.
pub fn host_key(url: &Url) -> String {
    let host = url.host_str().unwrap_or("");
    match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    }
}

/// The politeness key of a URL that is already canonical, sliced from the string without
/// parsing it (the hot path of link filtering): the authority without user info, which for a
/// canonical URL is exactly what [`host_key`] returns. `None` if it has no `scheme://`.
pub fn host_key_str(canonical: &str) -> Option<&str> {
    let rest = &canonical[canonical.find("://")? + 3..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    Some(authority.rsplit_once('@').map_or(authority, |(_, a)| a))
}

/// Splits a politeness key into host and port (`[::1]:80` → (`[::1]`, Some(`80`))).
pub fn split_host_key(key: &str) -> (&str, Option<&str>) {
    match key.rfind(':') {
        Some(i) if !key[i..].contains(']') => (&key[..i], Some(&key[i + 1..])),
        _ => (key, None),
    }
}

/// A request's dedup key: xxh3-128 of method, canonical URL and body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(pub [u8; 16]);

impl Fingerprint {
    /// The fingerprint as a u128 (big-endian bytes).
    pub fn as_u128(&self) -> u128 {
        u128::from_be_bytes(self.0)
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// The fingerprint of a request: `method`, the canonical URL string and the body.
pub fn fingerprint(method: &str, canonical_url: &str, body: Option<&[u8]>) -> Fingerprint {
    fingerprint_hasher(method, canonical_url, body).finish()
}

/// As [`fingerprint`], with `salt` mixed in after the body: the same request with another
/// salt is another key (see `Request::dedup_salt`).
pub fn fingerprint_salted(
    method: &str,
    canonical_url: &str,
    body: Option<&[u8]>,
    salt: &str,
) -> Fingerprint {
    let mut h = fingerprint_hasher(method, canonical_url, body);
    // A marker byte that no unsalted key has after its body, then the length, so that
    // (body, salt) pairs never collide by shifting bytes between the two.
    h.0.update(&[1]);
    h.0.update(&(salt.len() as u64).to_be_bytes());
    h.0.update(salt.as_bytes());
    h.finish()
}

struct FingerprintHasher(xxhash_rust::xxh3::Xxh3);

impl FingerprintHasher {
    fn finish(self) -> Fingerprint {
        Fingerprint(self.0.digest128().to_be_bytes())
    }
}

fn fingerprint_hasher(method: &str, canonical_url: &str, body: Option<&[u8]>) -> FingerprintHasher {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(method.as_bytes());
    h.update(&[0]);
    h.update(canonical_url.as_bytes());
    h.update(&[0]);
    if let Some(b) = body {
        h.update(b);
    }
    FingerprintHasher(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> String {
        canonicalize_str(s, None, &CanonRules::default())
            .unwrap()
            .to_string()
    }

    #[test]
    fn collapses_common_variants() {
        let cases = [
            (
                "HTTP://Example.COM:80/a/./b/../c#frag",
                "http://example.com/a/c",
            ),
            (
                "https://example.com:443/?b=2&a=1",
                "https://example.com/?a=1&b=2",
            ),
            (
                "http://example.com/p?utm_source=x&utm_medium=y&id=3",
                "http://example.com/p?id=3",
            ),
            (
                "http://example.com/p?fbclid=1&gclid=2&_=3&callback=f",
                "http://example.com/p",
            ),
            (
                "http://example.com/p;jsessionid=ABC?x=1",
                "http://example.com/p?x=1",
            ),
            ("http://example.com/%70/%7e%2f", "http://example.com/p/~%2F"),
            ("http://example.com./x", "http://example.com/x"),
            ("http://example.com", "http://example.com/"),
            ("http://example.com/?", "http://example.com/"),
            ("http://example.com/a?&&b=1&", "http://example.com/a?b=1"),
        ];
        for (input, want) in cases {
            assert_eq!(c(input), want, "input {input}");
        }
    }

    /// Found by the `canon_url` fuzz target: a bare `%` before an escape of an unreserved
    /// character used to stay bare, and form a new escape once that one was decoded.
    #[test]
    fn a_bare_percent_is_escaped_so_that_canonical_urls_stay_canonical() {
        let once = c("http://example.com/a/o%%33%333x?q=%%41&r=100%");
        assert_eq!(once, "http://example.com/a/o%25333x?q=%25A&r=100%25");
        assert_eq!(c(&once), once);
    }

    #[test]
    fn keeps_meaningful_differences() {
        assert_ne!(c("http://example.com/a"), c("http://example.com/A"));
        assert_ne!(c("http://example.com/a?x=1"), c("http://example.com/a?x=2"));
        assert_ne!(c("http://example.com:8080/a"), c("http://example.com/a"));
        assert_ne!(c("https://example.com/a"), c("http://example.com/a"));
    }

    #[test]
    fn extra_ignore_and_rewrites() {
        let rules = CanonRules::new(
            &["sessionid".into(), "ref*".into()],
            &[(r"^http://m\.".into(), "http://www.".into())],
        )
        .unwrap();
        let u = canonicalize_str(
            "http://m.example.com/x?sessionid=1&refsrc=2&k=v",
            None,
            &rules,
        )
        .unwrap();
        assert_eq!(u.as_str(), "http://www.example.com/x?k=v");
    }

    #[test]
    fn rejects_non_http() {
        for bad in [
            "mailto:a@b.c",
            "javascript:void(0)",
            "ftp://x/y",
            "not a url",
            "http://",
        ] {
            assert!(
                canonicalize_str(bad, None, &CanonRules::default()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn relative_join() {
        let base = Url::parse("http://h/p/1").unwrap();
        let u = canonicalize_str("../p/5#x", Some(&base), &CanonRules::default()).unwrap();
        assert_eq!(u.as_str(), "http://h/p/5");
    }

    #[test]
    fn host_key_str_matches_host_key() {
        for raw in [
            "http://example.com/a?b#c",
            "http://user:pw@example.com:8080/a",
            "https://127.0.0.2:9000",
            "http://[::1]:8080/x",
            "http://[::1]/x",
            "HTTP://EXAMPLE.com:80/",
        ] {
            let u = canonicalize_str(raw, None, &CanonRules::default()).unwrap();
            assert_eq!(
                host_key_str(u.as_str()),
                Some(host_key(&u).as_str()),
                "{raw}"
            );
        }
        assert_eq!(host_key_str("no scheme"), None);
        assert_eq!(split_host_key("[::1]:80"), ("[::1]", Some("80")));
        assert_eq!(split_host_key("[::1]"), ("[::1]", None));
        assert_eq!(split_host_key("a.test:1"), ("a.test", Some("1")));
    }

    #[test]
    fn fingerprint_depends_on_method_and_body() {
        let a = fingerprint("GET", "http://h/", None);
        assert_eq!(a, fingerprint("GET", "http://h/", None));
        assert_ne!(a, fingerprint("POST", "http://h/", None));
        assert_ne!(
            fingerprint("POST", "http://h/", Some(b"x")),
            fingerprint("POST", "http://h/", Some(b"y"))
        );
    }

    #[test]
    fn a_salt_makes_another_key_and_the_same_salt_the_same_key() {
        let plain = fingerprint("GET", "http://h/", None);
        let a = fingerprint_salted("GET", "http://h/", None, "task-1:1");
        assert_ne!(plain, a);
        assert_eq!(a, fingerprint_salted("GET", "http://h/", None, "task-1:1"));
        assert_ne!(a, fingerprint_salted("GET", "http://h/", None, "task-1:2"));
        assert_ne!(
            fingerprint_salted("GET", "http://h/", None, ""),
            plain,
            "an empty salt is still a salt"
        );
        let mut r = crate::Request::from_canonical("http://h/".into());
        assert_eq!(r.fingerprint(), plain);
        r.dedup_salt = Some("task-1:1".into());
        assert_eq!(r.fingerprint(), a);
    }
}
