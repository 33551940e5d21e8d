//! The demo site: a deterministic, synthetic, multi-host shop that Silk's tests, README
//! demo and benchmarks crawl (there is no internet where they run).
//!
//! Host k (1-based) is served on `127.0.0.k`, all hosts on the same port. Each host has:
//!
//! | path | what |
//! |---|---|
//! | `/` | host index: links to `/p/0..3`, page 1 of every search category, other hosts' `/`, and one each of the trap, private, missing and redirect links |
//! | `/p/{i}`, `0 <= i < pages` | a product page, ~3–6 KB, ~30–40 links; any query string and `;params` are ignored, `%XX` is decoded (`/p/%35` is `/p/5`) |
//! | `/s?cat={c}&page={n}` | search pages, c in [`CATEGORIES`], n in `1..=`[`SEARCH_PAGES_PER_CATEGORY`], parameters in any order, tracking parameters ignored, anything else 404 |
//! | `/r/{i}` | `301 Location: /p/{i}` |
//! | `/robots.txt` | `User-agent: *`, `Disallow: /private/`, optional `Crawl-delay` |
//! | `/private/{n}` | 200, but disallowed by robots.txt: a polite crawler never asks |
//! | `/calendar/{year}/{month}` | a spider trap: every month links to the previous and next one, forever; a spider should deny `/calendar/` (it is *not* in robots.txt and *not* in `expected_pages`) |
//! | `/missing/{n}`, anything else | 404 |
//!
//! Product page selectors: `title`, `h1.title` (`Page {host}-{i}`), `span.price`
//! (`123.45`), `span.sku`, `div.tags a.tag` (category names), and
//! `script[type="application/ld+json"]` with `$.name`, `$.sku`, `$.price`. [`PageInfo`]
//! gives the expected values for any page.
//!
//! Links on product pages come in every form a canonicaliser must collapse: relative
//! (`17`, `./17`, `../p/17`), absolute path, absolute same-host and cross-host, `HTTP://`,
//! `#fragment`, tracking parameters (`utm_*`, `fbclid`, `gclid`, `_`), `;jsessionid=`,
//! percent-encoded (`/p/%317`, `/%70/17`), dot segments (`/p/x/../17`), duplicates on the
//! same page, `/r/` redirects; search links with parameters in either order, separated by
//! `&amp;` or a bare `&` (an extractor must decode HTML entities in `href`); plus
//! `mailto:`, `javascript:` and `tel:` links that are not to be fetched.
//!
//! The canonical form of every real page is in `DemoSite::expected_pages`: exactly the set
//! a complete, polite crawl that denies `/calendar/` must fetch.
//!
//! This module must not do anything a test cannot reproduce: no clock or randomness in
//! what is served (timings are only recorded), and nothing bound outside 127.0.0.0/8. It
//! prints nothing.

mod content;
mod stats;

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

pub use content::{CATEGORIES, PageInfo, SEARCH_PAGES_PER_CATEGORY};
pub use stats::DemoStats;

use crate::TestkitError;
use crate::server::{ServerHandle, StopSignal, accept_loop, bind_std};
use content::Content;
use stats::Recorder;

/// Most hosts a demo site can have (`127.0.0.1` to `127.0.0.250`).
pub const MAX_HOSTS: u32 = 250;

/// How to build a demo site. `DemoConfig::default()` is 3 hosts × 200 pages, seed 0, any
/// free port, timings recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoConfig {
    /// Port of every host; 0 picks one port that is free on all of them.
    pub port: u16,
    /// Number of hosts, 1 to [`MAX_HOSTS`]; host k is `127.0.0.k`.
    pub hosts: u32,
    /// Product pages per host (`/p/0` to `/p/{pages-1}`), at least 1.
    pub pages: u32,
    /// Seed of everything pseudo-random on the pages (prices, tags, text, links).
    pub seed: u64,
    /// When set, robots.txt carries `Crawl-delay` (in seconds, e.g. 1500 → `1.5`).
    pub crawl_delay_ms: Option<u64>,
    /// When set, every request waits this long before it is answered (and counts as in
    /// flight meanwhile), so that a crawler's concurrency becomes observable.
    pub latency_ms: Option<u64>,
    /// Record the start time of every request (`DemoStats::per_host_starts`); turn off for
    /// benchmarks. Hit counters and in-flight maxima are always recorded.
    pub record_timings: bool,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig {
            port: 0,
            hosts: 3,
            pages: 200,
            seed: 0,
            crawl_delay_ms: None,
            latency_ms: None,
            record_timings: true,
        }
    }
}

impl DemoConfig {
    fn validate(&self) -> Result<(), TestkitError> {
        if self.hosts == 0 || self.hosts > MAX_HOSTS {
            return Err(TestkitError::InvalidConfig {
                field: "hosts",
                reason: format!("{} is not in 1..={MAX_HOSTS}", self.hosts),
            });
        }
        if self.pages == 0 {
            return Err(TestkitError::InvalidConfig {
                field: "pages",
                reason: "must be at least 1".into(),
            });
        }
        Ok(())
    }
}

/// What the request handlers of all hosts share.
#[derive(Debug)]
struct SiteCore {
    content: Content,
    recorder: Recorder,
    latency: Option<Duration>,
}

/// A running demo site. Dropping it stops every host (without waiting); `shutdown` stops
/// and waits until the ports are free.
#[derive(Debug)]
pub struct DemoSite {
    cfg: DemoConfig,
    port: u16,
    shared: Arc<SiteCore>,
    handle: ServerHandle,
}

fn host_ip(host: u32) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, host as u8)
}

/// Binds one listener per host on one port: `cfg.port`, or with 0 a port that the kernel
/// gave `127.0.0.1` and that is also free on every other host.
fn bind_all(cfg: &DemoConfig) -> Result<(u16, Vec<std::net::TcpListener>), TestkitError> {
    let bind = |host: u32, port: u16| {
        bind_std(host_ip(host), port).map_err(|source| TestkitError::Bind {
            addr: SocketAddr::from((host_ip(host), port)),
            source,
        })
    };
    if cfg.port != 0 {
        let listeners = (1..=cfg.hosts)
            .map(|h| bind(h, cfg.port))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok((cfg.port, listeners));
    }
    const ATTEMPTS: u32 = 64;
    'attempt: for _ in 0..ATTEMPTS {
        let first = bind(1, 0)?;
        let port = first
            .local_addr()
            .map_err(|source| TestkitError::Bind {
                addr: SocketAddr::from((host_ip(1), 0)),
                source,
            })?
            .port();
        let mut listeners = vec![first];
        for h in 2..=cfg.hosts {
            match bind_std(host_ip(h), port) {
                Ok(l) => listeners.push(l),
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue 'attempt,
                Err(source) => {
                    return Err(TestkitError::Bind {
                        addr: SocketAddr::from((host_ip(h), port)),
                        source,
                    });
                }
            }
        }
        return Ok((port, listeners));
    }
    Err(TestkitError::NoCommonPort {
        hosts: cfg.hosts,
        attempts: ATTEMPTS,
    })
}

impl DemoSite {
    /// Starts the site on the current tokio runtime.
    pub async fn start(cfg: DemoConfig) -> Result<DemoSite, TestkitError> {
        let (site, listeners, signal) = Self::prepare(cfg)?;
        for (k, listener) in listeners.into_iter().enumerate() {
            let listener = TcpListener::from_std(listener).map_err(TestkitError::Runtime)?;
            tokio::spawn(serve_host(
                listener,
                k as u32 + 1,
                site.shared.clone(),
                signal.clone(),
            ));
        }
        Ok(site)
    }

    /// Starts the site on its own OS thread with a single-threaded tokio runtime, so that it
    /// uses at most one core and does not compete with the caller's runtime (benchmarks).
    /// Callable from sync or async code.
    pub fn start_dedicated(cfg: DemoConfig) -> Result<DemoSite, TestkitError> {
        let (site, listeners, signal) = Self::prepare(cfg)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(TestkitError::Runtime)?;
        let shared = site.shared.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("silk-demo-site".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let mut hosts = tokio::task::JoinSet::new();
                    for (k, listener) in listeners.into_iter().enumerate() {
                        match TcpListener::from_std(listener) {
                            Ok(l) => {
                                hosts.spawn(serve_host(
                                    l,
                                    k as u32 + 1,
                                    shared.clone(),
                                    signal.clone(),
                                ));
                            }
                            Err(err) => tracing::debug!(%err, "demo listener lost"),
                        }
                    }
                    drop(signal);
                    drop(ready_tx);
                    while hosts.join_next().await.is_some() {}
                });
            })
            .map_err(TestkitError::Runtime)?;
        // Disconnects once every listener is registered with the thread's runtime.
        let _ = ready_rx.recv();
        Ok(site)
    }

    fn prepare(
        cfg: DemoConfig,
    ) -> Result<(DemoSite, Vec<std::net::TcpListener>, StopSignal), TestkitError> {
        cfg.validate()?;
        let (port, listeners) = bind_all(&cfg)?;
        let content = Content::new(cfg.seed, cfg.hosts, cfg.pages, port, cfg.crawl_delay_ms);
        let origins = (1..=cfg.hosts).map(|h| content.origin(h)).collect();
        let shared = Arc::new(SiteCore {
            content,
            recorder: Recorder::new(origins, cfg.record_timings),
            latency: cfg.latency_ms.map(Duration::from_millis),
        });
        let (handle, signal) = ServerHandle::new();
        Ok((
            DemoSite {
                cfg,
                port,
                shared,
                handle,
            },
            listeners,
            signal,
        ))
    }

    /// The config it was started with (`port` as given, possibly 0; see [`Self::port`]).
    pub fn config(&self) -> &DemoConfig {
        &self.cfg
    }

    /// The port every host listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The IPs of the hosts, `127.0.0.1` first.
    pub fn host_ips(&self) -> Vec<Ipv4Addr> {
        (1..=self.cfg.hosts).map(host_ip).collect()
    }

    /// `http://127.0.0.k:PORT/` for every host, host 1 first.
    pub fn base_urls(&self) -> Vec<String> {
        (1..=self.cfg.hosts).map(|h| self.base_url(h)).collect()
    }

    /// `http://127.0.0.{host}:PORT/`.
    pub fn base_url(&self, host: u32) -> String {
        format!("{}/", self.shared.content.origin(host))
    }

    /// Where a crawl starts: host 1's `/`.
    pub fn start_url(&self) -> String {
        self.base_url(1)
    }

    /// Canonical URL of product page `i` of `host`: `http://127.0.0.{host}:PORT/p/{i}`.
    pub fn page_url(&self, host: u32, i: u32) -> String {
        format!("{}/p/{i}", self.shared.content.origin(host))
    }

    /// Canonical URLs (scheme and host lower case, no fragment, no tracking parameters,
    /// search parameters sorted: `?cat=books&page=1`) of every page a complete crawl must
    /// fetch: each host's `/`, every `/p/{i}` and every search page. Redirects, robots-denied
    /// pages, 404s and calendar pages are not in it.
    pub fn expected_pages(&self) -> BTreeSet<String> {
        self.shared.content.expected_pages()
    }

    /// What a spider should extract from `/p/{i}` of `host`; `None` if there is no such page.
    pub fn page_info(&self, host: u32, i: u32) -> Option<PageInfo> {
        self.shared.content.page_info(host, i)
    }

    /// A snapshot of the hit counters.
    pub fn stats(&self) -> DemoStats {
        self.shared.recorder.snapshot()
    }

    /// Returns once the site has received at least `n` requests in all (since start or the
    /// last `reset_stats`): what a test awaits instead of sleeping.
    pub async fn wait_for_requests(&self, n: u64) {
        self.shared.recorder.wait_for_requests(n).await;
    }

    /// Forgets every hit and timing so far (in-flight maxima restart from the current
    /// in-flight count).
    pub fn reset_stats(&self) {
        self.shared.recorder.reset();
    }

    /// Stops every host and waits until their listeners and connections are closed.
    pub async fn shutdown(mut self) {
        self.handle.stopped().await;
    }
}

async fn serve_host(listener: TcpListener, host: u32, shared: Arc<SiteCore>, signal: StopSignal) {
    accept_loop(listener, signal, move |stream| {
        serve_connection(stream, host, shared.clone())
    })
    .await;
}

async fn serve_connection(stream: TcpStream, host: u32, shared: Arc<SiteCore>) {
    let service = service_fn(move |req| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(handle(&shared, host, req).await) }
    });
    if let Err(err) = http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(%err, host, "demo connection ended with an error");
    }
}

async fn handle(shared: &SiteCore, host: u32, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path_and_query = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
    let _in_flight = shared.recorder.start(host, path_and_query);
    if let Some(latency) = shared.latency {
        tokio::time::sleep(latency).await;
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut resp = Response::new(Full::new(Bytes::new()));
        *resp.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        resp.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return resp;
    }
    let reply = shared.content.respond(host, path_and_query);
    let mut resp = Response::new(Full::new(reply.body));
    *resp.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(reply.content_type),
    );
    if let Some(value) = reply.location.and_then(|l| HeaderValue::from_str(&l).ok()) {
        headers.insert(header::LOCATION, value);
    }
    resp
}
