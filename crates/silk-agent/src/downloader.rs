//! A run's downloader: one per run on an agent, isolated from every other run — its own
//! `Fetcher` (cookie jar, headers, user agent, timeout, body limit, connection pools), its own
//! proxy rotation and ban handling, its own rate limiter, its own robots.txt cache, its own
//! `Extractor` and trimming rules.
//!
//! [`Downloader::download`] turns one leased request into the `FetchOutcome` of its result:
//! robots.txt → rate limit → fetch (redirects not followed) → ban check (status, body regex)
//! → redirect (the target goes back as the only link, with `redirects` + 1: the hub's
//! frontier dedups it) → status classification → trimming → parsing (links canonical and
//! through the spider's allowed domains and depth; one item with `url` when `item_when`
//! matches) → returned body. When the run reads robots.txt and the host's file gives the
//! run's user agent a `Crawl-delay`, every result of that host carries it (`crawl_delay_ms`):
//! the agent reports it, the hub's frontier applies it.
//!
//! Error codes in results (`error.code`, retryable or not): the fetch error kinds of
//! `silk-fetch` (`timeout`, `connect`, `dns`, `proxy`, `truncated` retryable; `tls`,
//! `body_too_large`, `protocol`, `invalid_url` permanent); `http_{status}` (retryable for the
//! spider's `retry_statuses`); `proxy_banned` (retryable); `too_many_redirects`,
//! `invalid_redirect`, `robots_disallowed` (permanent); `robots_unavailable` (retryable);
//! `parse_budget` (permanent: the page is over the spider's `max_html_depth` or
//! `max_html_elements`, checked before trimming or parsing builds anything).
//!
//! [`Downloader::fetch_raw`] is a program's fetch through the download center: the same
//! robots.txt, rate limit, session (proxies, cookies) and ban handling, then the response as
//! it is — status, headers, body (or the run's trimmed text) — neither judged nor parsed, a
//! redirect not followed.
//!
//! What happens to a run is written to its run log (`runlog`): proxy switches, redials,
//! provider runs and refreshes, redirects dropped off the allowed domains, trimming rules
//! that failed on a page and pages no rule matched (each request's outcome is written by the
//! agent, which sees every outcome).
//!
//! What it must not do: retry (the hub's frontier owns back-off), decide dedup or
//! politeness across agents, or let one run's state (cookies, bans, pauses for a redial)
//! touch another run.

use crate::command::run_command;
use crate::downloader_config::{CompiledConfig, parse_proxy_lines};
use crate::error::AgentError;
use crate::runlog::Events;
use crate::stats::{AgentEvent, RunCounters};
use crate::trim::{Trimmed, Trimmer};
use base64::Engine as _;
use parking_lot::RwLock;
use silk_bus::{BodyEncoding, FetchOutcome, LogLevel, ResultBody, ResultError};
use silk_core::{Clock, OutcomeCode, Request, RunId};
use silk_fetch::robots::{RobotsCache, RobotsVerdict};
use silk_fetch::{FetchError, Fetcher, Response, Retry, Verdict, decode_html_cow};
use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use url::Url;

/// What one fetch goes through: replaced as a whole when a provider gives new proxies.
#[derive(Clone)]
struct Session {
    fetcher: Fetcher,
    robots: Option<Arc<RobotsCache>>,
}

/// Spaces request starts evenly at the run's QPS cap.
#[derive(Debug)]
struct RateLimiter {
    interval: Duration,
    next: parking_lot::Mutex<tokio::time::Instant>,
}

impl RateLimiter {
    fn new(qps: f64) -> Self {
        Self {
            interval: Duration::from_secs_f64(1.0 / qps),
            next: parking_lot::Mutex::new(tokio::time::Instant::now()),
        }
    }

    /// Waits for this request's slot.
    async fn wait(&self) {
        let slot = {
            let mut next = self.next.lock();
            let slot = (*next).max(tokio::time::Instant::now());
            *next = slot + self.interval;
            slot
        };
        tokio::time::sleep_until(slot).await;
    }
}

/// What a fetch is for.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// A crawl's request: judged, parsed, its links and items returned.
    Crawl,
    /// A program's fetch: the response as it is.
    Raw {
        /// The run's trimmed text rather than the body as received.
        trim: bool,
    },
}

/// The downloader of one run.
pub(crate) struct Downloader {
    run: RunId,
    cfg: Arc<CompiledConfig>,
    session: RwLock<Session>,
    /// Held while a redial (or a proxy refresh) runs; every fetch passes it first, so that
    /// the run's requests wait for the new address.
    gate: tokio::sync::Mutex<()>,
    /// Bumped by each ban handling: a ban seen by a request that started before the last
    /// one was handled does not redial again.
    epoch: AtomicU64,
    limiter: Option<RateLimiter>,
    counters: Arc<RunCounters>,
    events: Events,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Downloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Downloader")
            .field("run", &self.run)
            .finish_non_exhaustive()
    }
}

/// A failed outcome.
fn failure(code: &str, message: impl Into<String>, retryable: bool) -> FetchOutcome {
    FetchOutcome {
        error: Some(ResultError {
            code: code.into(),
            message: message.into(),
            retryable,
        }),
        ..FetchOutcome::default()
    }
}

impl Downloader {
    /// Builds the downloader of `run`: runs the proxy provider if the run has one.
    pub(crate) async fn build(
        run: RunId,
        cfg: Arc<CompiledConfig>,
        counters: Arc<RunCounters>,
        events: Events,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, AgentError> {
        let fetcher = match (&cfg.provider, &cfg.fetcher) {
            (Some(_), _) => provider_fetcher(&run, &cfg, &events).await?,
            (None, Some(f)) => f.clone(),
            (None, None) => {
                Fetcher::new(cfg.fetch.clone()).map_err(|e| AgentError::InvalidConfig {
                    run: run.clone(),
                    problems: vec![e.to_string()],
                })?
            }
        };
        let session = new_session(fetcher, &cfg, &clock);
        Ok(Self {
            limiter: cfg.qps.map(RateLimiter::new),
            run,
            cfg,
            session: RwLock::new(session),
            gate: tokio::sync::Mutex::new(()),
            epoch: AtomicU64::new(0),
            counters,
            events,
            clock,
        })
    }

    fn session(&self) -> Session {
        self.session.read().clone()
    }

    fn emit(&self, event: AgentEvent) {
        self.events.emit(event);
    }

    /// How many proxies the run rotates through now (0: direct).
    pub(crate) fn proxies(&self) -> usize {
        self.session().fetcher.proxies().len()
    }

    /// Fetches and parses one request. Never fails: every problem is an outcome with an
    /// error. `timings.total_ms` is left to the caller.
    pub(crate) async fn download(&self, req: &Request) -> FetchOutcome {
        let (outcome, _) = self.download_inner(req, Mode::Crawl).await;
        self.count(&outcome);
        outcome
    }

    /// Fetches one request for a program and returns the response as it is, with its headers
    /// (see the module doc): the body as received in base64, or, with `trim` and rules for the
    /// run and a text body, the trimmed text; cut to `max_return_body_bytes`.
    pub(crate) async fn fetch_raw(
        &self,
        req: &Request,
        trim: bool,
    ) -> (FetchOutcome, Vec<(String, String)>) {
        let (outcome, headers) = self.download_inner(req, Mode::Raw { trim }).await;
        self.count(&outcome);
        (outcome, headers)
    }

    fn count(&self, outcome: &FetchOutcome) {
        let c = &self.counters;
        if outcome.given_back() {
            // Not finished: it comes again.
            return;
        }
        c.requests.fetch_add(1, Ordering::Relaxed);
        c.bytes.fetch_add(outcome.bytes, Ordering::Relaxed);
        c.bytes_saved
            .fetch_add(outcome.bytes_saved, Ordering::Relaxed);
        if outcome.error.is_some() {
            c.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    async fn download_inner(
        &self,
        req: &Request,
        mode: Mode,
    ) -> (FetchOutcome, Vec<(String, String)>) {
        let url = match Url::parse(&req.url) {
            Ok(u) => u,
            Err(e) => {
                let out = failure(
                    "invalid_url",
                    format!("invalid url `{}`: {e}", req.url),
                    false,
                );
                return (out, Vec::new());
            }
        };
        if let Some(limiter) = &self.limiter {
            limiter.wait().await;
        }
        // Wait for a redial in progress, then note which "address epoch" this request uses.
        drop(self.gate.lock().await);
        let epoch = self.epoch.load(Ordering::SeqCst);
        let session = self.session();
        let mut crawl_delay_ms = None;
        let mut headers = Vec::new();
        let mut out = 'outcome: {
            if let Some(robots) = &session.robots {
                // As the local engine: when the host's robots.txt is not known yet, reading it
                // is the turn at the host of the request that reads it; that request goes back
                // (`robots_fetched`, no retry used) with the crawl-delay, and the hub's
                // frontier gives its page a turn when the host's politeness allows.
                let (verdict, read_here) = robots.check_reading(&url).await;
                if !matches!(verdict, RobotsVerdict::Unavailable { .. }) {
                    // The file is loaded by now: this is a cache lookup.
                    crawl_delay_ms = robots
                        .crawl_delay(&url)
                        .await
                        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                }
                if let Some(Verdict::Ended {
                    code,
                    retryable,
                    detail,
                }) = silk_fetch::robots_verdict(&verdict, read_here, req)
                {
                    break 'outcome failure(&code.as_str(), detail, retryable);
                }
            }
            match (session.fetcher.fetch(req).await, mode) {
                (Ok(resp), Mode::Crawl) => self.on_response(req, &url, resp, &session, epoch).await,
                (Ok(resp), Mode::Raw { trim }) => {
                    headers = resp
                        .headers
                        .iter()
                        .map(|(k, v)| {
                            (
                                k.as_str().to_owned(),
                                String::from_utf8_lossy(v.as_bytes()).into_owned(),
                            )
                        })
                        .collect();
                    self.on_raw_response(req, resp, &session, epoch, trim).await
                }
                (Err(e), _) => self.on_fetch_error(e, &session, epoch).await,
            }
        };
        out.crawl_delay_ms = crawl_delay_ms;
        (out, headers)
    }

    /// A program's response: the ban check (a ban fails it, `proxy_banned`, and switches
    /// the proxy as for a crawl), then the response as it is.
    async fn on_raw_response(
        &self,
        req: &Request,
        resp: Response,
        session: &Session,
        epoch: u64,
        trim: bool,
    ) -> FetchOutcome {
        let proxy = resp
            .proxy
            .map(|i| session.fetcher.proxies().display(i).to_owned());
        let mut out = FetchOutcome {
            status: Some(resp.status),
            bytes: resp.body.len() as u64,
            proxy: proxy.clone(),
            ..FetchOutcome::default()
        };
        out.timings.fetch_ms = resp.elapsed_ms;
        if let Some(message) = self.on_ban(req, &resp, session, epoch, &proxy).await {
            out.error = failure("proxy_banned", message, true).error;
            return out;
        }
        let cfg = &self.cfg;
        let content_type = resp.content_type.as_deref();
        if cfg.trimmer.is_none() || !trim || !is_text(content_type) {
            out.body = Some(binary_body(
                &resp.body,
                content_type,
                cfg.max_return_body_bytes,
            ));
            return out;
        }
        // Trimming builds a tree: a large page on a blocking thread of its own, with the
        // spider's parse deadline, as a crawl's page.
        let job = self.page_job();
        if resp.body.len() <= silk_fetch::extract::budget::INLINE_PARSE_MAX_BYTES {
            job.trim_raw(req, &resp, &mut out);
            return out;
        }
        let timeout_ms = cfg.spider.spec.parse_timeout_ms;
        let before = out.clone();
        let job_req = req.clone();
        let trimming = tokio::task::spawn_blocking(move || {
            let mut out = out;
            job.trim_raw(&job_req, &resp, &mut out);
            out
        });
        match tokio::time::timeout(Duration::from_millis(timeout_ms), trimming).await {
            Ok(Ok(out)) => out,
            _ => {
                let mut out = before;
                self.page_job().over_budget(
                    req,
                    &mut out,
                    format!("trimming took longer than parse_timeout_ms ({timeout_ms} ms)"),
                );
                out
            }
        }
    }

    /// When `resp` looks like a ban: the proxy is taken out, the run redials if it does, and
    /// the message of the failure (`proxy_banned`, retryable) is returned.
    async fn on_ban(
        &self,
        req: &Request,
        resp: &Response,
        session: &Session,
        epoch: u64,
        proxy: &Option<String>,
    ) -> Option<String> {
        let reason = self.ban_reason(resp)?;
        if let Some(i) = resp.proxy {
            session.fetcher.proxies().mark_bad(i);
            self.note_switch(proxy.clone().unwrap_or_default(), reason.clone());
        }
        self.after_ban(epoch).await;
        let via = proxy
            .as_deref()
            .map(|p| format!(" via {p}"))
            .unwrap_or_default();
        Some(format!("{}: banned{via}: {reason}", req.url))
    }

    async fn on_fetch_error(&self, e: FetchError, session: &Session, epoch: u64) -> FetchOutcome {
        if let FetchError::Proxy { proxy, .. } = &e {
            let pool = session.fetcher.proxies();
            // The pool takes a proxy out after `switch_after_failures` proxy errors in a row.
            if let Some(i) = (0..pool.len()).find(|&i| pool.display(i) == proxy)
                && pool.is_bad(i)
            {
                let reason = format!("{} failures in a row", self.cfg.fetch.proxy_max_failures);
                self.note_switch(proxy.clone(), reason);
                self.after_ban(epoch).await;
            }
        }
        tracing::debug!(run = %self.run, error = %e, "fetch failed");
        failure(
            e.kind().as_str(),
            e.to_string(),
            e.retry() != Retry::Permanent,
        )
    }

    fn note_switch(&self, proxy: String, reason: String) {
        self.counters.proxy_switches.fetch_add(1, Ordering::Relaxed);
        tracing::info!(run = %self.run, proxy = %proxy, reason = %reason, "proxy switched");
        self.emit(AgentEvent::ProxySwitched {
            run: self.run.clone(),
            proxy,
            reason,
        });
    }

    /// Why `resp` looks like a ban, if it does.
    fn ban_reason(&self, resp: &Response) -> Option<String> {
        let ban = &self.cfg.ban;
        if !ban.active {
            return None;
        }
        if ban.statuses.contains(&resp.status) {
            return Some(format!("status {}", resp.status));
        }
        let regex = ban.regex.as_ref()?;
        let text = decode_html_cow(&resp.body, resp.content_type.as_deref());
        regex
            .is_match(&text)
            .then(|| "body matches switch_on_regex".to_owned())
    }

    /// After a ban (or a proxy taken out for failures): refresh the proxies if every one is
    /// out and a provider exists, then redial, once per epoch; the run's requests wait.
    async fn after_ban(&self, epoch: u64) {
        if self.cfg.redial.is_none() && self.cfg.provider.is_none() {
            return;
        }
        let _gate = self.gate.lock().await;
        if self
            .epoch
            .compare_exchange(epoch, epoch + 1, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return;
        }
        let pool_all_bad = {
            let session = self.session();
            let pool = session.fetcher.proxies();
            !pool.is_empty() && (0..pool.len()).all(|i| pool.is_bad(i))
        };
        if pool_all_bad && self.cfg.provider.is_some() {
            match provider_fetcher(&self.run, &self.cfg, &self.events).await {
                Ok(fetcher) => {
                    // The new fetcher has a new cookie jar: sessions do not survive a proxy
                    // refresh (a new address is a new visitor anyway).
                    let session = new_session(fetcher, &self.cfg, &self.clock);
                    *self.session.write() = session;
                }
                Err(e) => {
                    tracing::warn!(run = %self.run, error = %e, "proxy refresh failed");
                    self.events.log(&self.run, LogLevel::Warn, || {
                        format!("proxy refresh failed (the proxies stay out of rotation): {e}")
                    });
                }
            }
        }
        if let Some(redial) = &self.cfg.redial {
            self.counters.redials.fetch_add(1, Ordering::Relaxed);
            let result = run_command(&self.run, "redial", redial).await;
            let error = result.err().map(|e| e.to_string());
            match &error {
                None => tracing::info!(run = %self.run, "redial done"),
                Some(e) => tracing::warn!(run = %self.run, error = %e, "redial failed; continuing"),
            }
            self.emit(AgentEvent::Redialed {
                run: self.run.clone(),
                error,
            });
        }
    }

    async fn on_response(
        &self,
        req: &Request,
        url: &Url,
        resp: Response,
        session: &Session,
        epoch: u64,
    ) -> FetchOutcome {
        let status = resp.status;
        let proxy = resp
            .proxy
            .map(|i| session.fetcher.proxies().display(i).to_owned());
        let mut out = FetchOutcome {
            status: Some(status),
            bytes: resp.body.len() as u64,
            proxy: proxy.clone(),
            ..FetchOutcome::default()
        };
        out.timings.fetch_ms = resp.elapsed_ms;
        let with_error = |code: &str, message: String, retryable: bool| FetchOutcome {
            error: failure(code, message, retryable).error,
            status: Some(status),
            bytes: resp.body.len() as u64,
            proxy: proxy.clone(),
            timings: silk_bus::Timings {
                fetch_ms: resp.elapsed_ms,
                ..silk_bus::Timings::default()
            },
            ..FetchOutcome::default()
        };
        if let Some(message) = self.on_ban(req, &resp, session, epoch, &proxy).await {
            return with_error("proxy_banned", message, true);
        }
        let spider = &self.cfg.spider;
        match silk_fetch::judge(spider, req, url, &resp) {
            Verdict::Page => {}
            Verdict::Redirect(next) => {
                // The target goes back as the only link, one hop more: the hub enqueues it
                // (its dedup collapses a redirect to a page fetched anyway).
                out.links = vec![next.url];
                out.redirects = next.redirects;
                return out;
            }
            Verdict::Ended {
                code,
                retryable,
                detail,
            } => {
                if code == OutcomeCode::RedirectOffDomain {
                    // Dropped, as the local engine drops it: nothing was fetched.
                    tracing::debug!(run = %self.run, %detail, "redirect off the allowed domains dropped");
                    self.events.log(&self.run, LogLevel::Debug, || {
                        format!("{detail}: dropped (status {status})")
                    });
                }
                return with_error(&code.as_str(), detail, retryable);
            }
        }
        let parse_started = Instant::now();
        // On a blocking thread of its own, with a deadline: a page that takes longer fails
        // and its thread is abandoned (it ends on its own; the parse budget bounds its work),
        // so neither the runtime nor the run waits for it.
        // Small pages cannot take long (see `INLINE_PARSE_MAX_BYTES`): parsed right here.
        let job = self.page_job();
        let timeout_ms = spider.spec.parse_timeout_ms;
        if resp.body.len() <= silk_fetch::extract::budget::INLINE_PARSE_MAX_BYTES {
            job.parse(req, url, &resp, &mut out);
            out.timings.parse_ms = parse_started.elapsed().as_millis() as u64;
            return out;
        }
        let before = out.clone();
        let (job_req, job_url) = (req.clone(), url.clone());
        let parsing = tokio::task::spawn_blocking(move || {
            let mut out = out;
            job.parse(&job_req, &job_url, &resp, &mut out);
            out
        });
        let mut out = match tokio::time::timeout(Duration::from_millis(timeout_ms), parsing).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => {
                let mut out = before;
                out.error = Some(silk_bus::ResultError {
                    code: OutcomeCode::ParseFailed,
                    message: format!("{}: parsing failed: {e}", req.url),
                    retryable: false,
                });
                out
            }
            Err(_) => {
                let mut out = before;
                self.page_job().over_budget(
                    req,
                    &mut out,
                    format!("parsing took longer than parse_timeout_ms ({timeout_ms} ms)"),
                );
                out
            }
        };
        out.timings.parse_ms = parse_started.elapsed().as_millis() as u64;
        out
    }
}

/// What parsing one page needs, owned: it runs on a blocking thread of its own.
struct PageJob {
    run: RunId,
    cfg: Arc<CompiledConfig>,
    events: Events,
    counters: Arc<RunCounters>,
}

impl Downloader {
    fn page_job(&self) -> PageJob {
        PageJob {
            run: self.run.clone(),
            cfg: self.cfg.clone(),
            events: self.events.clone(),
            counters: self.counters.clone(),
        }
    }
}

impl PageJob {
    /// Trims `text` by the run's rules, after the parse budget (trimming builds a tree too),
    /// logging the rules that failed on the page and a page no rule matched; `Err` says why
    /// the page is over the budget.
    fn trim(&self, req: &Request, trimmer: &Trimmer, text: &str) -> Result<Trimmed, String> {
        if let Some(why) = self.cfg.extractor.over_budget(text) {
            return Err(why);
        }
        let trimmed = trimmer.apply(text);
        for problem in &trimmed.problems {
            self.events.log(&self.run, LogLevel::Warn, || {
                format!("{}: trimming: {problem}", req.url)
            });
        }
        if trimmed.missed {
            self.counters.trim_misses.fetch_add(1, Ordering::Relaxed);
            self.events.log(&self.run, LogLevel::Info, || {
                format!(
                    "{}: trimming: no rule matched; the trimmed body is empty",
                    req.url
                )
            });
        }
        Ok(trimmed)
    }

    /// A program's response trimmed (see [`Downloader::fetch_raw`]): the trimmed text as the
    /// body, or the parse budget's error.
    fn trim_raw(&self, req: &Request, resp: &Response, out: &mut FetchOutcome) {
        let Some(trimmer) = &self.cfg.trimmer else {
            return;
        };
        let content_type = resp.content_type.as_deref();
        let text = decode_html_cow(&resp.body, content_type);
        match self.trim(req, trimmer, &text) {
            Ok(trimmed) => {
                out.bytes_saved =
                    (resp.body.len() as u64).saturating_sub(trimmed.text.len() as u64);
                out.body = Some(text_body(
                    trimmed.text,
                    content_type,
                    self.cfg.max_return_body_bytes,
                ));
            }
            Err(why) => self.over_budget(req, out, why),
        }
    }

    /// Fails a page over the parse budget (`parse_budget`, permanent: the same page would
    /// fail again), keeping its status.
    fn over_budget(&self, req: &Request, out: &mut FetchOutcome, why: String) {
        let message = format!("{}: not parsed, over the parse budget: {why}", req.url);
        self.events
            .log(&self.run, LogLevel::Warn, || message.clone());
        out.error = Some(silk_bus::ResultError {
            code: OutcomeCode::ParseBudget,
            message,
            retryable: false,
        });
    }

    /// Trims, parses and fills links, items, `bytes_saved` and the returned body.
    fn parse(&self, req: &Request, url: &Url, resp: &Response, out: &mut FetchOutcome) {
        let cfg = &self.cfg;
        let content_type = resp.content_type.as_deref();
        let text_page = is_text(content_type);
        let mut parse_body: Cow<'_, [u8]> = Cow::Borrowed(&resp.body);
        let mut parse_type: Option<String> = resp.content_type.clone();
        let mut returned: Option<ResultBody> = None;
        let trim = cfg
            .trimmer
            .as_ref()
            .filter(|_| text_page && (cfg.return_body || cfg.parse_trimmed));
        if let Some(trimmer) = trim {
            let text = decode_html_cow(&resp.body, content_type);
            let trimmed = match self.trim(req, trimmer, &text) {
                Ok(trimmed) => trimmed,
                Err(why) => {
                    self.over_budget(req, out, why);
                    return;
                }
            };
            out.bytes_saved = (resp.body.len() as u64).saturating_sub(trimmed.text.len() as u64);
            if cfg.parse_trimmed {
                // The trimmed text is UTF-8 whatever the page's charset was.
                parse_type = Some(format!("{}; charset=utf-8", essence(content_type)));
                parse_body = Cow::Owned(trimmed.text.clone().into_bytes());
            }
            if cfg.return_body {
                returned = Some(text_body(
                    trimmed.text,
                    content_type,
                    cfg.max_return_body_bytes,
                ));
            }
        } else if cfg.return_body {
            returned = Some(if text_page {
                text_body(
                    decode_html_cow(&resp.body, content_type).into_owned(),
                    content_type,
                    cfg.max_return_body_bytes,
                )
            } else {
                binary_body(&resp.body, content_type, cfg.max_return_body_bytes)
            });
        }
        let wanted = silk_fetch::wants(&cfg.spider, req);
        let mut page = cfg
            .extractor
            .parse_with(url, &parse_body, parse_type.as_deref(), wanted);
        if let Some(why) = page.over_budget.take() {
            self.over_budget(req, out, why);
            return;
        }
        let harvest = silk_fetch::harvest(&cfg.spider, req, page, wanted);
        out.links = harvest.links;
        out.items = harvest
            .item
            .map(serde_json::Value::Object)
            .into_iter()
            .collect();
        out.body = returned;
    }
}

/// Runs the provider and builds a fetcher over its proxies.
async fn provider_fetcher(
    run: &RunId,
    cfg: &CompiledConfig,
    events: &Events,
) -> Result<Fetcher, AgentError> {
    let Some(command) = &cfg.provider else {
        return Fetcher::new(cfg.fetch.clone()).map_err(|e| AgentError::InvalidConfig {
            run: run.clone(),
            problems: vec![e.to_string()],
        });
    };
    let fail = |reason: String| AgentError::Command {
        run: run.clone(),
        what: "proxy provider",
        command: command.label().to_owned(),
        reason,
    };
    let stdout = run_command(run, "proxy provider", command).await?;
    let proxies = parse_proxy_lines(&stdout).map_err(fail)?;
    let count = proxies.len();
    let mut fetch = cfg.fetch.clone();
    fetch.proxies = proxies;
    let fetcher = Fetcher::new(fetch).map_err(|e| fail(e.to_string()))?;
    tracing::info!(run = %run, count, "proxies from the provider");
    events.emit(AgentEvent::ProxiesRefreshed {
        run: run.clone(),
        count,
    });
    Ok(fetcher)
}

fn new_session(fetcher: Fetcher, cfg: &CompiledConfig, clock: &Arc<dyn Clock>) -> Session {
    let spec = &cfg.spider.spec;
    let robots = spec.robots.then(|| {
        Arc::new(RobotsCache::new(fetcher.clone(), &spec.user_agent).with_clock(clock.clone()))
    });
    Session { fetcher, robots }
}

/// The media type of a `Content-Type`, lower-case (`text/html` when there is none).
fn essence(content_type: Option<&str>) -> String {
    let mime = content_type
        .and_then(|c| c.split(';').next())
        .map(|m| m.trim().to_ascii_lowercase())
        .unwrap_or_default();
    if mime.is_empty() {
        "text/html".into()
    } else {
        mime
    }
}

/// Whether a body of this type is text (trimmed and returned as UTF-8) rather than bytes.
fn is_text(content_type: Option<&str>) -> bool {
    let mime = essence(content_type);
    mime.starts_with("text/")
        || ["html", "xml", "json", "javascript", "ecmascript"]
            .iter()
            .any(|t| mime.contains(t))
}

/// A text body, cut at a character boundary to at most `max` bytes.
fn text_body(mut text: String, content_type: Option<&str>, max: usize) -> ResultBody {
    let truncated = silk_core::text::truncate(&mut text, max);
    ResultBody {
        encoding: BodyEncoding::Text,
        data: text,
        content_type: content_type.map(str::to_owned),
        truncated,
    }
}

/// A binary body in base64, cut so that the encoded text is at most `max` bytes.
fn binary_body(bytes: &[u8], content_type: Option<&str>, max: usize) -> ResultBody {
    let keep = (max / 4).saturating_mul(3).min(bytes.len());
    ResultBody {
        encoding: BodyEncoding::Base64,
        data: base64::engine::general_purpose::STANDARD.encode(&bytes[..keep]),
        content_type: content_type.map(str::to_owned),
        truncated: keep < bytes.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_binary_bodies_fit_their_limit() {
        let b = text_body("héllo".into(), Some("text/html"), 2);
        assert_eq!((b.data.as_str(), b.truncated), ("h", true));
        let b = text_body("abc".into(), None, 10);
        assert_eq!((b.data.as_str(), b.truncated), ("abc", false));
        let b = binary_body(&[0, 1, 2, 3, 4, 5, 6], Some("image/png"), 8);
        assert_eq!(b.encoding, BodyEncoding::Base64);
        assert_eq!((b.data.as_str(), b.truncated), ("AAECAwQF", true));
        assert!(b.data.len() <= 8);
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limiter_spaces_request_starts() {
        let limiter = RateLimiter::new(4.0);
        let start = tokio::time::Instant::now();
        let mut starts = Vec::new();
        for _ in 0..5 {
            limiter.wait().await;
            starts.push(start.elapsed().as_millis());
        }
        assert_eq!(starts, [0, 250, 500, 750, 1_000]);
        // Idle time is not saved up for a burst.
        tokio::time::advance(Duration::from_secs(10)).await;
        let before = tokio::time::Instant::now();
        limiter.wait().await;
        limiter.wait().await;
        assert_eq!(before.elapsed().as_millis(), 250);
    }

    #[test]
    fn text_types() {
        for t in [
            None,
            Some("text/html; charset=gbk"),
            Some("application/json"),
            Some("application/xhtml+xml"),
            Some(""),
        ] {
            assert!(is_text(t), "{t:?}");
        }
        for t in [
            Some("image/png"),
            Some("application/octet-stream"),
            Some("application/pdf"),
        ] {
            assert!(!is_text(t), "{t:?}");
        }
        assert_eq!(essence(Some("Text/HTML; charset=x")), "text/html");
    }
}
