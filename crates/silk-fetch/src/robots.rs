//! robots.txt: [`Robots`] is one parsed file (via `texting_robots`, tested against millions of
//! real files) for one user agent; [`RobotsCache`] holds one per origin (scheme, host, port)
//! for a crawl, fetched once with the crawl's [`Fetcher`] while concurrent callers for the same
//! origin wait on that one fetch.
//!
//! The rules of the cache (after RFC 9309 and Google's documented behaviour):
//! - 2xx: the file's rules, kept for `ttl` (24 h by default), at most 512 KiB read.
//! - 3xx: followed, up to 5 hops (to any host); more is treated as "no file" (allow all).
//! - 4xx except 429: no usable file, everything allowed, kept for `ttl`.
//! - 429, 5xx, or a network error: the origin is *unavailable*; everything is disallowed for
//!   `error_retry` (60 s by default), then the next caller fetches again. [`RobotsVerdict`]
//!   tells "unavailable" from "disallowed" so that a caller can put the request back instead
//!   of dropping it.
//! - A file that does not parse: everything allowed (it is usually an HTML error page).
//!
//! The agent name matched against `User-agent:` lines is the product token of the spider's
//! User-Agent (`silk` for `silk/0.1`, `Mybot` for `Mozilla/5.0 (compatible; Mybot/2.1)`).
//! This module must not decide what happens to a disallowed URL, nor sleep for crawl-delay:
//! it reports both, the frontier acts.

use crate::fetcher::{BodyLimit, Fetcher};
use parking_lot::Mutex;
use silk_core::{Clock, Request, SystemClock};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use url::{Position, Url};

/// Bytes of a robots.txt that are read; the rest is ignored (RFC 9309 asks for ≥ 500 KiB).
pub const MAX_ROBOTS_BYTES: u64 = 512 * 1024;
/// Redirects followed to reach a robots.txt.
const MAX_ROBOTS_REDIRECTS: u32 = 5;

/// One origin's robots.txt, for one agent.
#[derive(Debug)]
pub struct Robots {
    rules: Rules,
    crawl_delay: Option<Duration>,
    sitemaps: Vec<String>,
}

#[derive(Debug)]
enum Rules {
    AllowAll,
    DisallowAll,
    File(Box<texting_robots::Robot>),
}

impl Robots {
    /// Parses `txt` for `agent` (a product token such as `silk`); a file that does not parse
    /// allows everything.
    pub fn parse(agent: &str, txt: &[u8]) -> Robots {
        match texting_robots::Robot::new(agent, txt) {
            Ok(robot) => Robots {
                crawl_delay: robot
                    .delay
                    .filter(|d| d.is_finite() && *d > 0.0)
                    .map(|d| Duration::from_secs_f32(d.min(86_400.0))),
                sitemaps: robot.sitemaps.clone(),
                rules: Rules::File(Box::new(robot)),
            },
            Err(e) => {
                tracing::debug!(error = %e, "robots.txt does not parse; allowing all");
                Robots::allow_all()
            }
        }
    }

    /// No restrictions (no robots.txt).
    pub fn allow_all() -> Robots {
        Robots {
            rules: Rules::AllowAll,
            crawl_delay: None,
            sitemaps: Vec::new(),
        }
    }

    /// Everything forbidden (robots.txt unavailable).
    pub fn disallow_all() -> Robots {
        Robots {
            rules: Rules::DisallowAll,
            crawl_delay: None,
            sitemaps: Vec::new(),
        }
    }

    /// Whether `url` (its path and query) may be fetched.
    pub fn allowed(&self, url: &Url) -> bool {
        match &self.rules {
            Rules::AllowAll => true,
            Rules::DisallowAll => url.path() == "/robots.txt",
            Rules::File(robot) => robot.allowed(&url[Position::BeforePath..Position::AfterQuery]),
        }
    }

    /// The `Crawl-delay` for this agent, if the file sets one.
    pub fn crawl_delay(&self) -> Option<Duration> {
        self.crawl_delay
    }

    /// The `Sitemap:` URLs of the file.
    pub fn sitemaps(&self) -> &[String] {
        &self.sitemaps
    }
}

/// The product token robots.txt groups are matched against (see the module docs).
pub fn robots_agent(user_agent: &str) -> String {
    let ua = user_agent.trim();
    let token = |s: &str| {
        s.split(|c: char| c == '/' || c == ';' || c == ')' || c.is_whitespace())
            .next()
            .unwrap_or("")
            .to_owned()
    };
    if let Some(pos) = ua.to_ascii_lowercase().find("compatible;") {
        let t = token(ua[pos + "compatible;".len()..].trim_start());
        if !t.is_empty() {
            return t;
        }
    }
    let t = token(ua);
    if t.is_empty() { "*".to_owned() } else { t }
}

/// What the cache says about one URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RobotsVerdict {
    /// The URL may be fetched.
    Allowed,
    /// robots.txt forbids the URL.
    Disallowed,
    /// robots.txt could not be read (5xx, 429, network): ask again after `retry_in`.
    Unavailable {
        /// When the cache will fetch robots.txt again.
        retry_in: Duration,
    },
}

#[derive(Debug)]
struct Entry {
    robots: Arc<Robots>,
    expires_ms: u64,
    unavailable: bool,
}

type Slot = Arc<tokio::sync::OnceCell<Entry>>;

/// robots.txt per origin for one crawl. `Send + Sync`; share it behind an `Arc`.
pub struct RobotsCache {
    fetcher: Fetcher,
    agent: String,
    clock: Arc<dyn Clock>,
    ttl_ms: u64,
    error_retry_ms: u64,
    slots: Mutex<HashMap<String, Slot>>,
}

impl std::fmt::Debug for RobotsCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RobotsCache")
            .field("agent", &self.agent)
            .finish_non_exhaustive()
    }
}

impl RobotsCache {
    /// A cache fetching with `fetcher`, matching rules for `user_agent`'s product token.
    pub fn new(fetcher: Fetcher, user_agent: &str) -> Self {
        Self {
            fetcher,
            agent: robots_agent(user_agent),
            clock: Arc::new(SystemClock),
            ttl_ms: 24 * 3600 * 1000,
            error_retry_ms: 60_000,
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// The same cache reading time from `clock`.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// How long a fetched file (or a 4xx) is kept, and how long an unavailable origin stays
    /// disallowed before the next fetch.
    pub fn with_ttl(mut self, ttl: Duration, error_retry: Duration) -> Self {
        self.ttl_ms = ttl.as_millis() as u64;
        self.error_retry_ms = error_retry.as_millis() as u64;
        self
    }

    /// The agent token rules are matched for.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// The verdict for `url`, fetching its origin's robots.txt first if needed.
    pub async fn check(&self, url: &Url) -> RobotsVerdict {
        let entry = self.entry(url).await;
        self.verdict(&entry, url)
    }

    /// [`RobotsCache::check`], and whether this call is the one that read the origin's
    /// robots.txt (its request's turn at the host went to that read: the first-contact rule
    /// of [`crate::robots_verdict`]). Calls that waited for another's read get `false`.
    pub async fn check_reading(&self, url: &Url) -> (RobotsVerdict, bool) {
        let (entry, read_here) = self.entry_reading(url).await;
        (self.verdict(&entry, url), read_here)
    }

    /// Whether `url` may be fetched now (`false` also while robots.txt is unavailable).
    pub async fn allowed(&self, url: &Url) -> bool {
        self.check(url).await == RobotsVerdict::Allowed
    }

    /// The crawl-delay of `url`'s origin, fetching its robots.txt first if needed.
    pub async fn crawl_delay(&self, url: &Url) -> Option<Duration> {
        self.robots(url).await.crawl_delay()
    }

    /// The robots.txt of `url`'s origin, fetching it first if needed.
    pub async fn robots(&self, url: &Url) -> Arc<Robots> {
        self.entry(url).await.robots.clone()
    }

    /// The verdict from the cache alone, without I/O: `None` when the origin's file is not
    /// loaded (or has expired).
    pub fn cached(&self, url: &Url) -> Option<RobotsVerdict> {
        let key = url.origin().ascii_serialization();
        let slots = self.slots.lock();
        let entry = slots.get(&key)?.get()?;
        (entry.expires_ms > self.clock.now_ms()).then(|| self.verdict(entry, url))
    }

    fn verdict(&self, entry: &Entry, url: &Url) -> RobotsVerdict {
        if entry.unavailable {
            if url.path() == "/robots.txt" {
                return RobotsVerdict::Allowed;
            }
            let retry_in =
                Duration::from_millis(entry.expires_ms.saturating_sub(self.clock.now_ms()));
            return RobotsVerdict::Unavailable { retry_in };
        }
        if entry.robots.allowed(url) {
            RobotsVerdict::Allowed
        } else {
            RobotsVerdict::Disallowed
        }
    }

    async fn entry(&self, url: &Url) -> EntryRef {
        self.entry_reading(url).await.0
    }

    /// The entry of `url`'s origin, loading it first if needed, and whether this call loaded
    /// it.
    async fn entry_reading(&self, url: &Url) -> (EntryRef, bool) {
        let slot = self.slot(url);
        let mut read_here = false;
        slot.get_or_init(|| {
            read_here = true;
            self.load(url)
        })
        .await;
        (EntryRef(slot), read_here)
    }

    /// The slot of `url`'s origin, replaced by an empty one when its entry has expired.
    fn slot(&self, url: &Url) -> Slot {
        let key = url.origin().ascii_serialization();
        let now = self.clock.now_ms();
        let mut slots = self.slots.lock();
        let slot = slots.entry(key).or_default();
        if slot.get().is_some_and(|e| e.expires_ms <= now) {
            *slot = Slot::default();
        }
        slot.clone()
    }

    async fn load(&self, url: &Url) -> Entry {
        let now = self.clock.now_ms();
        let ok = |robots: Robots| Entry {
            robots: Arc::new(robots),
            expires_ms: now.saturating_add(self.ttl_ms),
            unavailable: false,
        };
        let unavailable = || Entry {
            robots: Arc::new(Robots::disallow_all()),
            expires_ms: now.saturating_add(self.error_retry_ms),
            unavailable: true,
        };
        let Ok(mut target) = url.join("/robots.txt") else {
            return ok(Robots::allow_all());
        };
        let limit = BodyLimit {
            max_bytes: MAX_ROBOTS_BYTES,
            truncate: true,
        };
        for _ in 0..=MAX_ROBOTS_REDIRECTS {
            let req = Request::from_canonical(target.to_string());
            match self.fetcher.fetch_with(&req, limit).await {
                Ok(resp) if (200..300).contains(&resp.status) => {
                    return ok(Robots::parse(&self.agent, &resp.body));
                }
                Ok(resp) if resp.is_redirect() => match resp.location.as_deref().map(Url::parse) {
                    Some(Ok(next)) => target = next,
                    _ => return ok(Robots::allow_all()),
                },
                Ok(resp) if resp.status == 429 || resp.status >= 500 => {
                    tracing::info!(url = %target, status = resp.status, "robots.txt unavailable; host disallowed for now");
                    return unavailable();
                }
                Ok(_) => return ok(Robots::allow_all()),
                // Not a site that is down: the request itself will be refused the same way
                // (or its host is fine and only robots.txt redirected somewhere private).
                Err(e) if e.kind() == crate::ErrorKind::PrivateAddress => {
                    return ok(Robots::allow_all());
                }
                Err(e) => {
                    tracing::info!(url = %target, error = %e, "robots.txt unreachable; host disallowed for now");
                    return unavailable();
                }
            }
        }
        ok(Robots::allow_all())
    }
}

/// A loaded slot (its cell is initialised).
struct EntryRef(Slot);

impl std::ops::Deref for EntryRef {
    type Target = Entry;
    fn deref(&self) -> &Entry {
        self.0
            .get()
            .unwrap_or_else(|| unreachable!("entry() returns after the cell is initialised"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn agent_token_from_user_agent() {
        assert_eq!(robots_agent("silk/0.1.0"), "silk");
        assert_eq!(
            robots_agent("Mozilla/5.0 (compatible; Mybot/2.1; +http://x)"),
            "Mybot"
        );
        assert_eq!(robots_agent("plainbot"), "plainbot");
        assert_eq!(robots_agent(""), "*");
    }

    #[test]
    fn groups_rules_and_delay() {
        let txt = b"User-agent: *\nDisallow: /private\nCrawl-delay: 2\n\nUser-agent: silk\nDisallow: /no-silk\nAllow: /no-silk/ok\nCrawl-delay: 0.5\nSitemap: http://h/sitemap.xml\n";
        let r = Robots::parse("silk", txt);
        assert!(!r.allowed(&u("http://h/no-silk/x")));
        assert!(r.allowed(&u("http://h/no-silk/ok/1")));
        assert!(
            r.allowed(&u("http://h/private")),
            "the silk group replaces the * group"
        );
        assert_eq!(r.crawl_delay(), Some(Duration::from_millis(500)));
        assert_eq!(r.sitemaps(), ["http://h/sitemap.xml"]);
        let other = Robots::parse("otherbot", txt);
        assert!(!other.allowed(&u("http://h/private?x=1")));
        assert_eq!(other.crawl_delay(), Some(Duration::from_secs(2)));
    }

    #[test]
    fn query_and_wildcards() {
        let r = Robots::parse(
            "silk",
            b"User-agent: *\nDisallow: /*?sort=\nDisallow: /*.pdf$\n",
        );
        assert!(!r.allowed(&u("http://h/list?sort=price")));
        assert!(r.allowed(&u("http://h/list?page=2")));
        assert!(!r.allowed(&u("http://h/a/b.pdf")));
        assert!(r.allowed(&u("http://h/a/b.pdf?x")));
    }

    #[test]
    fn garbage_allows_all_and_disallow_all_keeps_robots_txt() {
        let r = Robots::parse("silk", b"\x00\xff<html><body>Not found</body></html>");
        assert!(r.allowed(&u("http://h/anything")));
        let d = Robots::disallow_all();
        assert!(!d.allowed(&u("http://h/")));
        assert!(d.allowed(&u("http://h/robots.txt")));
    }
}
