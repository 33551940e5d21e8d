//! The downloader: [`Fetcher::fetch`] turns one [`Request`] into a [`Response`] or a
//! [`FetchError`], with connection pooling, HTTP/1.1 and HTTP/2 (ALPN over rustls), one cookie
//! jar per fetcher, proxies in rotation, a total time budget and a hard body limit.
//!
//! What it must not do: follow redirects (a 3xx comes back with `location` resolved, so the
//! caller sends the target through the frontier's dedup and counts the hops), retry (the
//! frontier owns back-off), parse pages (see [`crate::extract`]), or hold more than
//! `max_body_bytes` of any body in memory. Every network misbehaviour (garbage, truncation,
//! hangs, slow drips, bombs) must end in a clear error within the time budget, never in a
//! panic or a hang.
//!
//! Bodies are read as a stream and decoded here (gzip, deflate, br; see `coding`), so that
//! `wire_bytes` counts what crossed the wire and the limit applies to decoded bytes too.

use crate::coding::{CodingError, ContentDecoder};
use crate::config::FetchConfig;
use crate::error::{FetchError, Retry};
use crate::proxy::ProxyPool;
use bytes::Bytes;
use futures::future::BoxFuture;
use reqwest::header::{self, HeaderMap, HeaderName, HeaderValue};
use silk_core::net::{Denied, GuardedResolver};
use silk_core::{Method, Request};
use std::error::Error as _;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use url::Url;

/// One HTTP answer, whatever its status.
#[derive(Debug, Clone)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// The URL that was fetched (redirects are not followed, so it is the request's URL).
    pub url: String,
    /// HTTP version the server answered with.
    pub version: reqwest::Version,
    /// Response headers as received (`Content-Encoding` describes the wire, not `body`).
    pub headers: HeaderMap,
    /// The `Content-Type` header, if any.
    pub content_type: Option<String>,
    /// For a 3xx with a `Location` header: its target, resolved to an absolute URL.
    pub location: Option<String>,
    /// The `Retry-After` header (seconds or an HTTP date), as a delay from now.
    pub retry_after: Option<Duration>,
    /// The decoded body (empty for HEAD).
    pub body: Bytes,
    /// Time from sending the request to the last body byte, ms.
    pub elapsed_ms: u64,
    /// Body bytes that crossed the wire, before content decoding (headers not counted).
    pub wire_bytes: u64,
    /// The proxy used, as an index into [`Fetcher::proxies`]; `None` = direct.
    pub proxy: Option<usize>,
}

impl Response {
    /// Whether this is a redirect with a usable target.
    pub fn is_redirect(&self) -> bool {
        (300..400).contains(&self.status) && self.location.is_some()
    }

    /// Whether and how to retry, given the spider's `retry_statuses` (see
    /// [`Retry::for_status`]); `None` for a success or a redirect.
    pub fn retry(&self, retry_statuses: &[u16]) -> Option<Retry> {
        Retry::for_status(self.status, self.retry_after, retry_statuses)
    }
}

/// The download seam (in other systems: downloader, HTTP client, spider middleware stack):
/// what a crawl loop or an agent calls, so that their tests can stand in a fake. Used as
/// `Arc<dyn Fetch>`; [`Fetcher`] is the real one.
pub trait Fetch: Send + Sync {
    /// Fetches `req` once (see [`Fetcher::fetch`]).
    fn fetch<'a>(&'a self, req: &'a Request) -> BoxFuture<'a, Result<Response, FetchError>>;
}

impl Fetch for Fetcher {
    fn fetch<'a>(&'a self, req: &'a Request) -> BoxFuture<'a, Result<Response, FetchError>> {
        Box::pin(Fetcher::fetch(self, req))
    }
}

/// The downloader of one crawl (or of one run on an agent). Cloning is cheap and clones
/// share the connection pools, the cookie jar and the proxy rotation.
#[derive(Clone)]
pub struct Fetcher {
    inner: Arc<Inner>,
}

struct Inner {
    config: FetchConfig,
    /// One client per proxy (same index), or one direct client.
    clients: Vec<reqwest::Client>,
    proxies: ProxyPool,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher")
            .field("user_agent", &self.inner.config.user_agent)
            .field("proxies", &self.inner.proxies)
            .finish_non_exhaustive()
    }
}

/// How a fetch treats a body over its limit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyLimit {
    pub(crate) max_bytes: u64,
    /// Keep the first `max_bytes` instead of failing (robots.txt is read that way).
    pub(crate) truncate: bool,
}

const ACCEPT_HTML: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
const ACCEPT_ENCODING: &str = "gzip, deflate, br";

impl Fetcher {
    /// Builds the clients for `config`; every invalid value (header, proxy, timeout, extra
    /// root certificate) is reported at once.
    pub fn new(config: FetchConfig) -> Result<Self, FetchError> {
        let mut problems = Vec::new();
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_static(ACCEPT_HTML));
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static(ACCEPT_ENCODING),
        );
        match HeaderValue::from_str(&config.user_agent) {
            Ok(v) => {
                headers.insert(header::USER_AGENT, v);
            }
            Err(_) => problems.push(format!(
                "user_agent: invalid header value `{}`",
                config.user_agent
            )),
        }
        for (name, value) in &config.headers {
            match (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                (Ok(n), Ok(v)) => {
                    headers.insert(n, v);
                }
                (Err(_), _) => problems.push(format!("headers.{name}: invalid header name")),
                (_, Err(_)) => problems.push(format!("headers.{name}: invalid header value")),
            }
        }
        if config.timeout_ms == 0 {
            problems.push("timeout_ms: must be at least 1".into());
        }
        if config.max_body_bytes == 0 {
            problems.push("max_body_bytes: must be at least 1".into());
        }
        let proxies = match ProxyPool::new(
            &config.proxies,
            config.proxy_max_failures,
            config.proxy_cooldown_ms,
        ) {
            Ok(p) => Some(p),
            Err(FetchError::InvalidConfig { problems: p }) => {
                problems.extend(p);
                None
            }
            Err(e) => {
                problems.push(e.to_string());
                None
            }
        };
        let mut roots = Vec::new();
        for (i, pem) in config.extra_root_certs_pem.iter().enumerate() {
            match reqwest::Certificate::from_pem_bundle(pem.as_bytes()) {
                Ok(certs) if !certs.is_empty() => roots.extend(certs),
                Ok(_) => problems.push(format!(
                    "extra_root_certs_pem[{i}]: no PEM certificate (`-----BEGIN CERTIFICATE-----`) found"
                )),
                Err(e) => problems.push(format!(
                    "extra_root_certs_pem[{i}]: invalid PEM certificate: {}",
                    chain(&e)
                )),
            }
        }
        let proxies = match proxies {
            Some(p) if problems.is_empty() => p,
            _ => return Err(FetchError::InvalidConfig { problems }),
        };
        let jar = config
            .cookies
            .then(|| Arc::new(reqwest::cookie::Jar::default()));
        let timeout = Duration::from_millis(config.timeout_ms);
        let connect_timeout =
            Duration::from_millis(config.connect_timeout_ms.clamp(1, config.timeout_ms));
        let builder = || {
            let b = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .no_gzip()
                .no_brotli()
                .no_deflate()
                .default_headers(headers.clone())
                .timeout(timeout)
                .connect_timeout(connect_timeout)
                .pool_max_idle_per_host(config.pool_max_idle_per_host)
                .pool_idle_timeout(Duration::from_millis(config.pool_idle_timeout_ms))
                .tcp_nodelay(true)
                .tls_certs_merge(roots.clone());
            let b = match &config.address_policy {
                Some(policy) => b.dns_resolver(GuardedResolver::new(policy.clone())),
                None => b,
            };
            match &jar {
                Some(jar) => b.cookie_provider(jar.clone()),
                None => b,
            }
        };
        let mut clients = Vec::with_capacity(proxies.len().max(1));
        let mut build_problems = Vec::new();
        if proxies.is_empty() {
            match builder().no_proxy().build() {
                Ok(c) => clients.push(c),
                Err(e) => build_problems.push(format!("http client: {}", chain(&e))),
            }
        }
        for i in 0..proxies.len() {
            let client = reqwest::Proxy::all(proxies.url(i).as_str())
                .and_then(|p| builder().proxy(p).build());
            match client {
                Ok(c) => clients.push(c),
                Err(e) => build_problems.push(format!("proxy[{i}]: {}", chain(&e))),
            }
        }
        if !build_problems.is_empty() {
            return Err(FetchError::InvalidConfig {
                problems: build_problems,
            });
        }
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                clients,
                proxies,
            }),
        })
    }

    /// The configuration this fetcher was built from.
    pub fn config(&self) -> &FetchConfig {
        &self.inner.config
    }

    /// The proxy rotation (empty when requests go direct): mark a proxy bad here when a
    /// response says it is banned.
    pub fn proxies(&self) -> &ProxyPool {
        &self.inner.proxies
    }

    /// Fetches `req` once: any HTTP status is a [`Response`]; a failure to get a complete
    /// answer within `timeout_ms` and `max_body_bytes` is a [`FetchError`].
    pub async fn fetch(&self, req: &Request) -> Result<Response, FetchError> {
        let limit = BodyLimit {
            max_bytes: self.inner.config.max_body_bytes,
            truncate: false,
        };
        self.fetch_with(req, limit).await
    }

    pub(crate) async fn fetch_with(
        &self,
        req: &Request,
        limit: BodyLimit,
    ) -> Result<Response, FetchError> {
        let url = Url::parse(&req.url).map_err(|e| FetchError::InvalidUrl {
            url: req.url.clone(),
            reason: e.to_string(),
        })?;
        if !matches!(url.scheme(), "http" | "https") || !url.has_host() {
            return Err(FetchError::InvalidUrl {
                url: req.url.clone(),
                reason: format!(
                    "only http and https urls with a host can be fetched (`{}`)",
                    url.scheme()
                ),
            });
        }
        let proxy = self.inner.proxies.pick();
        let client = &self.inner.clients[proxy.unwrap_or(0)];
        let budget_ms = self.inner.config.timeout_ms;
        let started = Instant::now();
        let attempt = async {
            if let Some(policy) = &self.inner.config.address_policy {
                let refused = |d: Denied| FetchError::PrivateAddress {
                    url: req.url.clone(),
                    reason: d.to_string(),
                };
                match proxy {
                    // The proxy connects to the site: its address is checked (a name by the
                    // resolver, as it is connected to), the site's here.
                    Some(i) => {
                        silk_core::net::check_literal(policy, self.inner.proxies.url(i))
                            .map_err(refused)?;
                        silk_core::net::check_host(policy, &url)
                            .await
                            .map_err(refused)?;
                    }
                    None => silk_core::net::check_literal(policy, &url).map_err(refused)?,
                }
            }
            self.fetch_inner(client, req, url, proxy, limit, started)
                .await
        };
        let result = match tokio::time::timeout(Duration::from_millis(budget_ms), attempt).await {
            Ok(r) => r,
            Err(_) => Err(FetchError::Timeout {
                url: req.url.clone(),
                after_ms: budget_ms,
            }),
        };
        if let Some(i) = proxy {
            match &result {
                Ok(_) => self.inner.proxies.record_success(i),
                Err(FetchError::Proxy { .. }) => {
                    self.inner.proxies.record_failure(i);
                }
                Err(_) => {}
            }
        }
        result
    }

    async fn fetch_inner(
        &self,
        client: &reqwest::Client,
        req: &Request,
        url: Url,
        proxy: Option<usize>,
        limit: BodyLimit,
        started: Instant,
    ) -> Result<Response, FetchError> {
        let method = match req.method {
            Method::Get => reqwest::Method::GET,
            Method::Head => reqwest::Method::HEAD,
            Method::Post => reqwest::Method::POST,
        };
        let mut builder = client.request(method, url.clone());
        if let Some(body) = &req.body {
            builder = builder.body(body.clone());
        }
        let budget_ms = self.inner.config.timeout_ms;
        let proxy_name = proxy.map(|i| self.inner.proxies.display(i));
        let mut resp = builder
            .send()
            .await
            .map_err(|e| classify(&e, &req.url, proxy_name, budget_ms, 0))?;
        let status = resp.status().as_u16();
        let headers = std::mem::take(resp.headers_mut());
        let version = resp.version();
        let content_type = header_str(&headers, header::CONTENT_TYPE);
        let location = if (300..400).contains(&status) {
            headers
                .get(header::LOCATION)
                .and_then(|v| resolve_location(&url, v))
        } else {
            None
        };
        let retry_after = headers
            .get(header::RETRY_AFTER)
            .and_then(|v| parse_retry_after(v, SystemTime::now()));
        let announced = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let is_head = req.method == Method::Head;
        if let Some(n) = announced
            && n > limit.max_bytes
            && !limit.truncate
            && !is_head
        {
            return Err(FetchError::BodyTooLarge {
                url: req.url.clone(),
                limit: limit.max_bytes,
                announced: Some(n),
            });
        }
        let coding = header_str(&headers, header::CONTENT_ENCODING);
        let capacity = usize::try_from(announced.unwrap_or(16 * 1024).min(4 << 20)).unwrap_or(0);
        let coding_err = |e: CodingError, received: u64| match e {
            CodingError::TooLarge => FetchError::BodyTooLarge {
                url: req.url.clone(),
                limit: limit.max_bytes,
                announced: None,
            },
            CodingError::Incomplete(reason) => FetchError::Truncated {
                url: req.url.clone(),
                received,
                reason,
            },
            CodingError::Corrupt(reason) | CodingError::Unsupported(reason) => {
                FetchError::Protocol {
                    url: req.url.clone(),
                    reason,
                }
            }
        };
        let mut decoder =
            ContentDecoder::new(coding.as_deref(), limit.max_bytes, capacity, limit.truncate)
                .map_err(|e| coding_err(e, 0))?;
        let mut wire_bytes = 0u64;
        if !is_head {
            loop {
                let chunk = match resp.chunk().await {
                    Ok(Some(chunk)) => chunk,
                    Ok(None) => break,
                    Err(e) => {
                        return Err(classify(&e, &req.url, proxy_name, budget_ms, wire_bytes));
                    }
                };
                wire_bytes += chunk.len() as u64;
                if wire_bytes > limit.max_bytes && !limit.truncate {
                    return Err(FetchError::BodyTooLarge {
                        url: req.url.clone(),
                        limit: limit.max_bytes,
                        announced: None,
                    });
                }
                decoder
                    .push(&chunk)
                    .map_err(|e| coding_err(e, wire_bytes))?;
                if decoder.is_cut() {
                    break;
                }
            }
        }
        let body = decoder.finish().map_err(|e| coding_err(e, wire_bytes))?;
        Ok(Response {
            status,
            url: req.url.clone(),
            version,
            headers,
            content_type,
            location,
            retry_after,
            body: Bytes::from(body),
            elapsed_ms: started.elapsed().as_millis() as u64,
            wire_bytes,
            proxy,
        })
    }
}

fn header_str(headers: &HeaderMap, name: HeaderName) -> Option<String> {
    headers
        .get(name)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

/// A `Location` value resolved against the request URL; `None` when it does not parse or is
/// not http(s).
fn resolve_location(base: &Url, value: &HeaderValue) -> Option<String> {
    let raw = String::from_utf8_lossy(value.as_bytes());
    let target = base.join(raw.trim()).ok()?;
    matches!(target.scheme(), "http" | "https").then(|| target.into())
}

/// `Retry-After`: delay-seconds or an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`). A date
/// in the past is a zero delay.
pub(crate) fn parse_retry_after(value: &HeaderValue, now: SystemTime) -> Option<Duration> {
    let s = value.to_str().ok()?.trim();
    if let Ok(secs) = s.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = parse_http_date(s)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Parses an IMF-fixdate (RFC 9110 §5.6.7), the only format servers are required to send.
fn parse_http_date(s: &str) -> Option<SystemTime> {
    // "Sun, 06 Nov 1994 08:49:37 GMT"
    let rest = s.split_once(", ")?.1;
    let mut parts = rest.split(' ');
    let day: u32 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = parts.next()?.parse().ok()?;
    let mut hms = parts.next()?.split(':').map(|p| p.parse::<u64>().ok());
    let (h, m, sec) = (hms.next()??, hms.next()??, hms.next()??);
    if parts.next()? != "GMT" || day == 0 || day > 31 || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (i64::from(month) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = u64::try_from(days).ok()? * 86_400 + h * 3600 + m * 60 + sec;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
}

/// The error and its sources, joined: reqwest's own message is too vague to act on.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = String::new();
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        let msg = err.to_string();
        // hyper-util's wrapper (`client error (Connect)`) says nothing its source does not.
        if !msg.starts_with("client error (") && !out.contains(&msg) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&msg);
        }
        next = err.source();
    }
    if out.is_empty() { e.to_string() } else { out }
}

/// Maps a client error to its kind. reqwest exposes only coarse predicates, so DNS and TLS
/// failures are told apart by the messages of the source chain (hyper-util says `dns error`,
/// rustls names certificates and handshakes).
fn classify(
    e: &reqwest::Error,
    url: &str,
    proxy: Option<&str>,
    budget_ms: u64,
    received: u64,
) -> FetchError {
    let url = url.to_owned();
    if let Some(denied) = silk_core::net::denied_in(e) {
        return FetchError::PrivateAddress {
            url,
            reason: denied.to_string(),
        };
    }
    if e.is_timeout() {
        return FetchError::Timeout {
            url,
            after_ms: budget_ms,
        };
    }
    let plain = reqwest::Error::source(e)
        .map(chain)
        .unwrap_or_else(|| e.to_string());
    let lower = plain.to_ascii_lowercase();
    if let Some(proxy) = proxy
        && (e.is_connect() || lower.contains("proxy") || lower.contains("socks"))
    {
        return FetchError::Proxy {
            url,
            proxy: proxy.to_owned(),
            reason: plain,
        };
    }
    if e.is_connect() {
        if lower.contains("dns error")
            || lower.contains("failed to lookup")
            || lower.contains("name or service")
        {
            return FetchError::Dns { url, reason: plain };
        }
        // hyper-util reports its own TCP failures as `tcp connect error`; what else fails
        // while connecting to an https URL is the TLS handshake (rustls' errors are varied:
        // certificates, alerts, corrupt messages from a plain-HTTP port, …).
        let tcp = lower.contains("tcp connect error") || lower.contains("connection refused");
        if !tcp
            && (url.starts_with("https:") || lower.contains("certificate") || lower.contains("tls"))
        {
            return FetchError::Tls { url, reason: plain };
        }
        return FetchError::Connect { url, reason: plain };
    }
    if e.is_body() || e.is_decode() {
        return FetchError::Truncated {
            url,
            received,
            reason: plain,
        };
    }
    if lower.contains("connection closed before message completed")
        || lower.contains("connection reset")
        || lower.contains("broken pipe")
    {
        return FetchError::Connect { url, reason: plain };
    }
    FetchError::Protocol { url, reason: plain }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_770); // 1994-11-06 08:49:30
        let v = |s: &str| parse_retry_after(&HeaderValue::from_str(s).unwrap(), now);
        assert_eq!(v("120"), Some(Duration::from_secs(120)));
        assert_eq!(v(" 7 "), Some(Duration::from_secs(7)));
        assert_eq!(
            v("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(Duration::from_secs(7))
        );
        assert_eq!(v("Sun, 06 Nov 1994 08:49:00 GMT"), Some(Duration::ZERO));
        assert_eq!(v("Thu, 01 Jan 1970 00:00:00 GMT"), Some(Duration::ZERO));
        assert_eq!(v("soon"), None);
        assert_eq!(v("Sun, 06 Foo 1994 08:49:37 GMT"), None);
        assert_eq!(v("-5"), None);
    }

    #[test]
    fn http_date_epoch_offsets() {
        let d = parse_http_date("Tue, 29 Feb 2000 12:00:00 GMT").unwrap();
        assert_eq!(
            d.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs(),
            951_825_600
        );
    }

    #[test]
    fn location_is_resolved_and_only_http() {
        let base = Url::parse("http://h:8080/a/b?x=1").unwrap();
        let r = |s: &str| resolve_location(&base, &HeaderValue::from_str(s).unwrap());
        assert_eq!(r("../c").as_deref(), Some("http://h:8080/c"));
        assert_eq!(r("/d?y").as_deref(), Some("http://h:8080/d?y"));
        assert_eq!(r("https://o/").as_deref(), Some("https://o/"));
        assert_eq!(r("//o2/p").as_deref(), Some("http://o2/p"));
        assert_eq!(r("mailto:x@y"), None);
    }

    #[test]
    fn invalid_config_lists_every_problem() {
        let mut c = FetchConfig {
            timeout_ms: 0,
            proxies: vec!["ftp://p".into()],
            ..FetchConfig::default()
        };
        c.headers.insert("bad name".into(), "v".into());
        c.user_agent = "bad\nagent".into();
        let msg = Fetcher::new(c).unwrap_err().to_string();
        for needle in ["timeout_ms", "proxy[0]", "headers.bad name", "user_agent"] {
            assert!(msg.contains(needle), "{needle} missing in {msg}");
        }
    }

    #[test]
    fn futures_and_types_can_cross_threads() {
        fn send_sync<T: Send + Sync>(_: &T) {}
        fn send<T: Send>(_: T) {}
        let f = Fetcher::new(FetchConfig::default()).unwrap();
        let req = Request::from_canonical("http://127.0.0.1:9/".into());
        send(f.fetch(&req));
        send(Fetch::fetch(&f, &req));
        let robots = crate::RobotsCache::new(f.clone(), "silk");
        let url = Url::parse("http://127.0.0.1:9/").unwrap();
        send(robots.check(&url));
        send_sync(&robots);
        send_sync(&f);
        let _: std::sync::Arc<dyn Fetch> = std::sync::Arc::new(f);
    }

    #[tokio::test]
    async fn non_http_urls_are_refused() {
        let f = Fetcher::new(FetchConfig::default()).unwrap();
        for bad in ["ftp://h/x", "not a url", "data:text/plain,hi"] {
            let err = f
                .fetch(&Request::from_canonical(bad.into()))
                .await
                .unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidUrl, "{bad}: {err}");
        }
    }
}
