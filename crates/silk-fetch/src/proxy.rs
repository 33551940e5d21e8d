//! [`ProxyPool`]: the proxies of one fetcher, used round-robin, one per request, with a way
//! to take a failing proxy out of rotation for a while.
//!
//! The pool decides only *which* proxy is next and remembers which are bad; the policy of
//! *when* a proxy is bad beyond "N network failures in a row" (a captcha regex, a 403/429,
//! a redial command) belongs to the agent's per-run pool, which calls [`ProxyPool::mark_bad`].
//! It must not do I/O. Proxy URLs may carry credentials: only [`ProxyPool::display`] (which
//! strips them) may reach logs and errors.

use crate::error::FetchError;
use silk_core::{Clock, SystemClock};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use url::Url;

struct Entry {
    url: Url,
    display: String,
    failures: AtomicU32,
    bad_until_ms: AtomicU64,
}

/// Proxies in rotation. Cheap to share (`Sync`); indices are stable for the pool's life.
pub struct ProxyPool {
    entries: Vec<Entry>,
    next: AtomicUsize,
    max_failures: u32,
    cooldown_ms: u64,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for ProxyPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|e| &e.display))
            .finish()
    }
}

impl ProxyPool {
    /// A pool of `urls` (http, https, socks5, socks5h); every invalid one is reported, with its
    /// index, at once. `max_failures` consecutive network failures (0 = never) take a proxy
    /// out of rotation for `cooldown_ms`.
    pub fn new(urls: &[String], max_failures: u32, cooldown_ms: u64) -> Result<Self, FetchError> {
        let mut entries = Vec::with_capacity(urls.len());
        let mut problems = Vec::new();
        for (i, raw) in urls.iter().enumerate() {
            match Url::parse(raw.trim()) {
                Ok(url) if matches!(url.scheme(), "http" | "https" | "socks5" | "socks5h") && url.has_host() => {
                    let display = display_of(&url);
                    entries.push(Entry { url, display, failures: AtomicU32::new(0), bad_until_ms: AtomicU64::new(0) });
                }
                Ok(url) => problems.push(format!(
                    "proxy[{i}]: unsupported proxy `{}` (http, https, socks5 or socks5h with a host)",
                    display_of(&url)
                )),
                Err(e) => problems.push(format!("proxy[{i}]: invalid url: {e}")),
            }
        }
        if !problems.is_empty() {
            return Err(FetchError::InvalidConfig { problems });
        }
        Ok(Self {
            entries,
            next: AtomicUsize::new(0),
            max_failures,
            cooldown_ms,
            clock: Arc::new(SystemClock),
        })
    }

    /// The same pool reading time from `clock` (tests drive the cooldown by hand).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// How many proxies the pool holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the pool is empty (requests go direct).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The proxy for the next request: the next one in turn that is not out of rotation;
    /// when all are out, the one that comes back first (a crawl never stalls on its pool).
    /// `None` when the pool is empty.
    pub fn pick(&self) -> Option<usize> {
        let n = self.entries.len();
        if n == 0 {
            return None;
        }
        let now = self.clock.now_ms();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut soonest = start % n;
        for step in 0..n {
            let i = (start + step) % n;
            let until = self.entries[i].bad_until_ms.load(Ordering::Relaxed);
            if until <= now {
                if step > 0 {
                    // Skip the bad ones for the following picks as well.
                    self.next.store(start + step + 1, Ordering::Relaxed);
                }
                return Some(i);
            }
            if until < self.entries[soonest].bad_until_ms.load(Ordering::Relaxed) {
                soonest = i;
            }
        }
        Some(soonest)
    }

    /// The proxy URL (with credentials) of `index`, for building clients.
    pub(crate) fn url(&self, index: usize) -> &Url {
        &self.entries[index].url
    }

    /// The proxy of `index` without credentials, for logs and errors.
    pub fn display(&self, index: usize) -> &str {
        self.entries.get(index).map_or("", |e| e.display.as_str())
    }

    /// Takes proxy `index` out of rotation for the cooldown (a captcha page, a ban, …).
    pub fn mark_bad(&self, index: usize) {
        if let Some(e) = self.entries.get(index) {
            e.bad_until_ms.store(
                self.clock.now_ms().saturating_add(self.cooldown_ms),
                Ordering::Relaxed,
            );
            e.failures.store(0, Ordering::Relaxed);
            tracing::info!(proxy = %e.display, cooldown_ms = self.cooldown_ms, "proxy taken out of rotation");
        }
    }

    /// Whether proxy `index` is out of rotation now.
    pub fn is_bad(&self, index: usize) -> bool {
        self.entries
            .get(index)
            .is_some_and(|e| e.bad_until_ms.load(Ordering::Relaxed) > self.clock.now_ms())
    }

    /// Records a request through `index` that reached the target (any HTTP status).
    pub fn record_success(&self, index: usize) {
        if let Some(e) = self.entries.get(index) {
            e.failures.store(0, Ordering::Relaxed);
        }
    }

    /// Records a network failure through `index`; returns whether it took the proxy out of
    /// rotation (after `max_failures` in a row).
    pub fn record_failure(&self, index: usize) -> bool {
        let Some(e) = self.entries.get(index) else {
            return false;
        };
        let failures = e.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if self.max_failures > 0 && failures >= self.max_failures {
            self.mark_bad(index);
            return true;
        }
        false
    }
}

/// The URL without user name and password.
fn display_of(url: &Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use silk_core::ManualClock;

    fn pool(n: usize) -> (ProxyPool, ManualClock) {
        let urls: Vec<String> = (0..n)
            .map(|i| format!("http://user:secret@127.0.0.1:{}", 3000 + i))
            .collect();
        let clock = ManualClock::new(1_000);
        (
            ProxyPool::new(&urls, 2, 500)
                .unwrap()
                .with_clock(Arc::new(clock.clone())),
            clock,
        )
    }

    #[test]
    fn round_robin_and_display_hides_credentials() {
        let (p, _) = pool(3);
        let picks: Vec<_> = (0..6).map(|_| p.pick().unwrap()).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
        assert_eq!(p.display(1), "http://127.0.0.1:3001/");
        assert!(!format!("{p:?}").contains("secret"));
    }

    #[test]
    fn bad_proxy_is_skipped_until_cooldown_ends() {
        let (p, clock) = pool(3);
        p.mark_bad(1);
        let picks: Vec<_> = (0..4).map(|_| p.pick().unwrap()).collect();
        assert!(!picks.contains(&1), "{picks:?}");
        clock.advance(500);
        assert!(!p.is_bad(1));
        assert!((0..3).any(|_| p.pick() == Some(1)));
    }

    #[test]
    fn failures_in_a_row_mark_bad_and_success_resets() {
        let (p, _) = pool(2);
        assert!(!p.record_failure(0));
        p.record_success(0);
        assert!(!p.record_failure(0));
        assert!(p.record_failure(0));
        assert!(p.is_bad(0));
    }

    #[test]
    fn all_bad_picks_the_first_to_return() {
        let (p, clock) = pool(2);
        p.mark_bad(1);
        clock.advance(10);
        p.mark_bad(0);
        assert_eq!(p.pick(), Some(1));
        assert_eq!(p.pick(), Some(1));
    }

    #[test]
    fn invalid_proxies_all_reported() {
        let err = ProxyPool::new(&["ftp://x".into(), "http://ok:1".into(), "::".into()], 3, 1)
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("proxy[0]") && msg.contains("proxy[2]") && !msg.contains("proxy[1]"),
            "{msg}"
        );
    }

    #[test]
    fn empty_pool_picks_none() {
        let p = ProxyPool::new(&[], 3, 1).unwrap();
        assert!(p.is_empty());
        assert_eq!(p.pick(), None);
    }
}
