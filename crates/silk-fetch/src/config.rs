//! [`FetchConfig`]: everything a [`crate::Fetcher`] is built from (one per crawl, or per run
//! on an agent: its own cookies, proxies and limits), filled from a spider with
//! [`FetchConfig::from_spider`] or by hand.
//!
//! Plain data: building clients and checking values happens in `Fetcher::new`, which reports
//! every invalid value at once.

use silk_core::SpiderSpec;
use std::collections::BTreeMap;

/// How a [`crate::Fetcher`] downloads. Its `Debug` form hides header values and proxy
/// credentials (they may be secrets).
#[derive(Clone, PartialEq)]
pub struct FetchConfig {
    /// The User-Agent header.
    pub user_agent: String,
    /// Extra request headers sent with every request. They may replace the defaults
    /// (`Accept`, `Accept-Encoding: gzip, deflate, br`); a coding other than those three
    /// cannot be decoded and fails as `protocol`.
    pub headers: BTreeMap<String, String>,
    /// Time allowed for one request, connect to last body byte, ms. A slow drip that never
    /// ends fails with `timeout` when this runs out.
    pub timeout_ms: u64,
    /// Time allowed to open a connection (TCP + TLS), ms; at most `timeout_ms` counts.
    pub connect_timeout_ms: u64,
    /// A body larger than this (announced or received, on the wire or decoded) fails the
    /// request with `body_too_large` as soon as it is known; nothing beyond it is buffered.
    pub max_body_bytes: u64,
    /// Proxies (`http://`, `https://`, `socks5://`, `socks5h://`, credentials in the URL),
    /// used in turn, one per request; empty = direct. System proxy variables are ignored.
    pub proxies: Vec<String>,
    /// Keep cookies between the requests of this fetcher (one jar per fetcher).
    pub cookies: bool,
    /// Idle connections kept open per host for reuse.
    pub pool_max_idle_per_host: usize,
    /// An idle pooled connection is closed after this long, ms.
    pub pool_idle_timeout_ms: u64,
    /// Consecutive failures of one proxy (refused, unreachable, tunnel or SOCKS errors)
    /// before it is taken out of rotation; 0 = never.
    pub proxy_max_failures: u32,
    /// How long a proxy marked bad stays out of rotation, ms.
    pub proxy_cooldown_ms: u64,
    /// Extra trusted root certificates, each the PEM text of one or more certificates
    /// (`-----BEGIN CERTIFICATE-----`): for sites behind a private CA (or a self-signed test
    /// server). They are trusted in addition to the system roots, never instead of them. A
    /// value without a parsable certificate makes `Fetcher::new` fail with `invalid_config`.
    pub extra_root_certs_pem: Vec<String>,
    /// Which addresses may be reached (see `silk_core::net`): `None` = any (`silk crawl` on
    /// one's own machine); a policy keeps the fetches off private ranges except those it
    /// allows, checked on the addresses connected to (the site's or the proxy's), so a
    /// refused request fails with `private_address`.
    pub address_policy: Option<silk_core::net::AddressPolicy>,
}

impl std::fmt::Debug for FetchConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let proxies: Vec<String> = self
            .proxies
            .iter()
            .map(|p| match url::Url::parse(p) {
                Ok(mut u) => {
                    let _ = u.set_username("");
                    let _ = u.set_password(None);
                    u.to_string()
                }
                Err(_) => "<invalid>".to_owned(),
            })
            .collect();
        f.debug_struct("FetchConfig")
            .field("user_agent", &self.user_agent)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("timeout_ms", &self.timeout_ms)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("proxies", &proxies)
            .field("cookies", &self.cookies)
            .field("pool_max_idle_per_host", &self.pool_max_idle_per_host)
            .field("pool_idle_timeout_ms", &self.pool_idle_timeout_ms)
            .field("proxy_max_failures", &self.proxy_max_failures)
            .field("proxy_cooldown_ms", &self.proxy_cooldown_ms)
            .field("extra_root_certs_pem", &self.extra_root_certs_pem.len())
            .field("address_policy", &self.address_policy)
            .finish()
    }
}

impl Default for FetchConfig {
    fn default() -> Self {
        Self {
            user_agent: format!("silk/{}", env!("CARGO_PKG_VERSION")),
            headers: BTreeMap::new(),
            timeout_ms: 30_000,
            connect_timeout_ms: 10_000,
            max_body_bytes: 16 * 1024 * 1024,
            proxies: Vec::new(),
            cookies: true,
            pool_max_idle_per_host: 16,
            pool_idle_timeout_ms: 90_000,
            proxy_max_failures: 3,
            proxy_cooldown_ms: 60_000,
            extra_root_certs_pem: Vec::new(),
            address_policy: None,
        }
    }
}

impl FetchConfig {
    /// The fetch settings of a spider: user agent, headers, timeout, body limit, proxies and
    /// cookies from the spec; the connect timeout is the smaller of 10 s and the timeout; the
    /// pool keeps a few more idle connections per host than the spider runs at once.
    pub fn from_spider(spec: &SpiderSpec) -> Self {
        let defaults = Self::default();
        Self {
            user_agent: spec.user_agent.clone(),
            headers: spec.headers.clone(),
            timeout_ms: spec.timeout_ms,
            connect_timeout_ms: defaults.connect_timeout_ms.min(spec.timeout_ms),
            max_body_bytes: spec.max_body_bytes,
            proxies: spec.proxy.clone(),
            cookies: spec.cookies,
            pool_max_idle_per_host: (spec.per_host_concurrency as usize).clamp(2, 256) * 2,
            ..defaults
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_spider_copies_the_fetch_keys() {
        let yaml = "name: t\nstart_urls: [\"http://127.0.0.1/\"]\nuser_agent: bot/1\ntimeout_ms: 500\n\
                    max_body_bytes: 1000\ncookies: false\nproxy: [\"http://127.0.0.1:3128\"]\n\
                    headers: {X-A: b}\nper_host_concurrency: 4\n";
        let spec = SpiderSpec::parse(yaml, "t.yaml").unwrap();
        let c = FetchConfig::from_spider(&spec);
        assert_eq!(c.user_agent, "bot/1");
        assert_eq!(c.timeout_ms, 500);
        assert_eq!(c.connect_timeout_ms, 500);
        assert_eq!(c.max_body_bytes, 1000);
        assert!(!c.cookies);
        assert_eq!(c.proxies, vec!["http://127.0.0.1:3128".to_owned()]);
        assert_eq!(c.headers.get("X-A").map(String::as_str), Some("b"));
        assert_eq!(c.pool_max_idle_per_host, 8);
    }

    #[test]
    fn debug_hides_secrets() {
        let mut c = FetchConfig {
            proxies: vec!["http://u:hunter2@127.0.0.1:3128".into()],
            ..FetchConfig::default()
        };
        c.headers
            .insert("Authorization".into(), "Bearer s3cret".into());
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("s3cret"),
            "{shown}"
        );
        assert!(
            shown.contains("Authorization") && shown.contains("127.0.0.1:3128"),
            "{shown}"
        );
    }
}
