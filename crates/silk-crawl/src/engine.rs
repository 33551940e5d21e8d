//! The local crawl engine: one process leases requests from its frontier, fetches them with
//! its downloader, parses pages, writes items and enqueues the links it finds. It is what
//! `silk crawl` runs; the hub's dispatcher is the other driver of the same frontier and
//! downloader, so nothing here knows about terminals, flags or the CLI.
//!
//! A request's path through the engine: lease (frontier politeness decides when) → robots.txt
//! check → fetch → on a redirect, the target goes back through the frontier (dedup) → parse →
//! item written (idempotent on its key) → links enqueued → ack. The ack comes last, so a crash
//! at any point before it means the request is fetched again after restart, and the sink and
//! the frontier's dedup absorb the repeat.

use crate::error::CrawlError;
use serde::Serialize;
use silk_core::expand::Expansion;
use silk_core::spider::Spider;
use silk_core::{Clock, OutcomeCode, Request};
use silk_fetch::robots::RobotsCache;
use silk_fetch::{Extractor, FetchConfig, Fetcher, Retry, Verdict};
use silk_frontier::{
    AckResult, EmbeddedFrontier, ExpandFeed, FrontierConfig, FrontierStats, FrontierStore, Lease,
    Outcome,
};
use silk_items::{JsonlSink, Written};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, Semaphore, watch};
use url::Url;

/// Where a local crawl keeps its state and writes its items.
#[derive(Clone)]
pub struct CrawlOptions {
    /// The frontier lives here; the same directory resumes the crawl.
    pub data_dir: PathBuf,
    /// The JSON Lines item file (appended to).
    pub out: PathBuf,
    /// The clock (tests inject a manual one).
    pub clock: Arc<dyn Clock>,
    /// The values of the spider's `expand` parameters of the form `{arg: NAME}`.
    pub args: BTreeMap<String, String>,
    /// Where the spider's `expand` files (`{file: PATH}`) are read: the spider file's
    /// directory (`None`: a spider with such a parameter is refused).
    pub files_dir: Option<PathBuf>,
}

/// The file in the data dir that holds how far the spider's expansion has been fed.
const EXPAND_CURSOR: &str = "expand.json";

/// The cursor file's contents: the expansion's fingerprint and size (another expansion —
/// a changed spider, other args or file lines — starts over; the frontier's dedup skips
/// what was fed) and the next request to feed.
#[derive(serde::Serialize, serde::Deserialize)]
struct Cursor {
    fingerprint: u64,
    total: u64,
    next: u64,
}

/// Live counters of a crawl, published to whoever watches (the CLI's progress line).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Progress {
    /// Frontier counters (persisted: they include earlier sessions of a resumed crawl).
    pub frontier: FrontierStats,
    /// Pages fetched in this session (any status).
    pub fetched: u64,
    /// Requests finished in this session, whatever the outcome (fetched, failed, dropped).
    pub processed: u64,
    /// Items written in this session.
    pub items: u64,
    /// Items not written because their key was already in the output.
    pub duplicate_items: u64,
    /// Pages dropped by robots.txt in this session.
    pub robots_denied: u64,
    /// Bytes received in this session (decoded bodies).
    pub bytes: u64,
    /// Seconds since this session started.
    pub elapsed_s: f64,
    /// Pages fetched per second over this session.
    pub pages_per_s: f64,
}

/// How a crawl ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Finish {
    /// Nothing left to fetch.
    Complete,
    /// `max_pages` reached.
    MaxPages,
    /// `max_items` reached.
    MaxItems,
    /// `max_duration_ms` reached (resumable).
    MaxDuration,
    /// Stopped on request (Ctrl-C); resumable.
    Stopped,
}

/// The result of [`Crawl::run`].
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Why the crawl ended.
    pub finish: Finish,
    /// The counters at the end.
    pub progress: Progress,
}

/// A crawl ready to run.
pub struct Crawl {
    shared: Arc<CrawlCore>,
    progress_tx: watch::Sender<Progress>,
    /// The spider's expansion and its cursor file (none without `expand`).
    feed: Option<(ExpandFeed, PathBuf)>,
}

struct CrawlCore {
    spider: Spider,
    clock: Arc<dyn Clock>,
    frontier: Arc<dyn FrontierStore>,
    fetcher: Fetcher,
    extractor: Arc<Extractor>,
    robots: Option<RobotsCache>,
    sink: JsonlSink,
    wake: Notify,
    fetched: AtomicU64,
    /// Requests acked as succeeded in this session.
    succeeded: AtomicU64,
    /// Requests acked in this session, any outcome.
    processed: AtomicU64,
    items: AtomicU64,
    duplicate_items: AtomicU64,
    robots_denied: AtomicU64,
    bytes: AtomicU64,
    fatal: parking_lot::Mutex<Option<CrawlError>>,
    failing: AtomicBool,
    gate: HostGate,
}

/// The last line of politeness: the frontier spaces *lease* starts by the host's delay, but a
/// task can start a few ms late under load, which would bring two requests on the wire closer
/// than the delay. The gate spaces the actual sends: each send to a host reserves the next
/// slot (`max(now, previous + delay)`) and waits for it. With no delay it costs nothing.
struct HostGate {
    default_delay: Duration,
    hosts: parking_lot::Mutex<std::collections::HashMap<String, HostSlot>>,
}

/// One host's send schedule.
struct HostSlot {
    /// The next free slot.
    next: Instant,
    /// The host's delay.
    delay: Duration,
    /// When a send last actually went.
    last_sent: Option<Instant>,
}

impl HostSlot {
    fn new(next: Instant, delay: Duration) -> Self {
        Self {
            next,
            delay,
            last_sent: None,
        }
    }
}

impl HostGate {
    fn new(default_delay: Duration) -> Self {
        Self {
            default_delay,
            hosts: Default::default(),
        }
    }

    /// Raises a host's delay (robots.txt crawl-delay).
    fn set_delay(&self, host: &str, delay: Duration) {
        let mut hosts = self.hosts.lock();
        let now = Instant::now();
        let slot = hosts
            .entry(host.to_owned())
            .or_insert_with(|| HostSlot::new(now, self.default_delay));
        slot.delay = slot.delay.max(delay);
    }

    /// Waits until `req` may be sent to its host: its reserved slot, and then at least the
    /// host's delay after the send before it actually went (a task that woke late on a loaded
    /// machine pushes the sends after it back instead of crowding them).
    async fn wait(&self, req: &Request) {
        let key = req.host_key();
        let start = {
            let mut hosts = self.hosts.lock();
            if self.default_delay.is_zero() && hosts.is_empty() {
                return;
            }
            let now = Instant::now();
            match hosts.get_mut(key.as_str()) {
                Some(slot) => {
                    if slot.delay.is_zero() {
                        return;
                    }
                    let start = slot.next.max(now);
                    slot.next = start + slot.delay;
                    start
                }
                None if self.default_delay.is_zero() => return,
                None => {
                    hosts.insert(
                        key.clone(),
                        HostSlot::new(now + self.default_delay, self.default_delay),
                    );
                    now
                }
            }
        };
        let mut until = start;
        loop {
            tokio::time::sleep_until(until.into()).await;
            let mut hosts = self.hosts.lock();
            let Some(slot) = hosts.get_mut(key.as_str()) else {
                return;
            };
            let now = Instant::now();
            match slot.last_sent {
                Some(last) if now < last + slot.delay => until = last + slot.delay,
                _ => {
                    slot.last_sent = Some(now);
                    slot.next = slot.next.max(now + slot.delay);
                    return;
                }
            }
        }
    }
}

impl Crawl {
    /// Opens the frontier in `opts.data_dir`, the item file, and seeds the start URLs (a
    /// resumed crawl's dedup ignores them).
    pub async fn open(spider: Spider, opts: CrawlOptions) -> Result<Self, CrawlError> {
        // What the spider asks for is compiled first: a bad rule is reported before anything
        // is written (see `CrawlError::is_bad_spider`).
        let spec = &spider.spec;
        let extractor = Arc::new(Extractor::compile(&spider)?);
        let expansion = spider.expansion(&opts.args, &mut |file| match &opts.files_dir {
            Some(dir) => std::fs::read_to_string(dir.join(file)).map_err(|e| e.to_string()),
            None => Err("this crawl reads no files".into()),
        })?;
        let fetcher = Fetcher::new(FetchConfig::from_spider(spec))?;
        std::fs::create_dir_all(&opts.data_dir).map_err(|e| CrawlError::DataDir {
            path: opts.data_dir.clone(),
            reason: e.to_string(),
        })?;
        let robots = spec
            .robots
            .then(|| RobotsCache::new(fetcher.clone(), &spec.user_agent));
        let config = FrontierConfig::for_spider(&spider);
        let frontier: Arc<dyn FrontierStore> = Arc::new(EmbeddedFrontier::open(
            opts.data_dir.join("frontier"),
            config,
            opts.clock.clone(),
        )?);
        let sink = JsonlSink::open(&opts.out, &spec.item_key)?;
        let seeds = spider.seed_requests();
        frontier.enqueue(seeds).await?;
        let feed = match expansion {
            None => None,
            Some(expansion) => {
                let path = opts.data_dir.join(EXPAND_CURSOR);
                let next = read_cursor(&path, &expansion)?;
                let batch = silk_frontier::expand::batch_for(u64::from(spec.concurrency));
                Some((ExpandFeed::new(expansion, next, batch), path))
            }
        };
        let per_host_delay = Duration::from_millis(spider.spec.per_host_delay_ms);
        let shared = Arc::new(CrawlCore {
            spider,
            clock: opts.clock.clone(),
            frontier,
            fetcher,
            extractor,
            robots,
            sink,
            wake: Notify::new(),
            fetched: AtomicU64::new(0),
            succeeded: AtomicU64::new(0),
            processed: AtomicU64::new(0),
            items: AtomicU64::new(0),
            duplicate_items: AtomicU64::new(0),
            robots_denied: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            fatal: parking_lot::Mutex::new(None),
            failing: AtomicBool::new(false),
            gate: HostGate::new(per_host_delay),
        });
        let (progress_tx, _) = watch::channel(Progress::default());
        Ok(Self {
            shared,
            progress_tx,
            feed,
        })
    }

    /// A receiver of live progress (updated about every 200 ms and at the end).
    pub fn progress(&self) -> watch::Receiver<Progress> {
        self.progress_tx.subscribe()
    }

    /// Runs until nothing is left, a limit is reached, or `stop` turns true; then waits for
    /// the requests in flight, syncs the frontier and the items, and returns the counters.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) -> Result<Summary, CrawlError> {
        let started = Instant::now();
        let shared = self.shared.clone();
        let spec = &shared.spider.spec;
        let concurrency = spec.concurrency as usize;
        let slots = Arc::new(Semaphore::new(concurrency));
        let deadline = spec
            .max_duration_ms
            .map(|ms| started + Duration::from_millis(ms));
        let mut last_publish = Instant::now();
        // Polling the frontier's stats on every turn would cost more than the turn: count this
        // session's successes here, on top of those of earlier sessions.
        let earlier_success = shared.frontier.stats().await?.success;
        let mut stop_open = true;
        let finish = loop {
            if *stop.borrow() {
                break Finish::Stopped;
            }
            if shared.failing.load(Ordering::Relaxed) {
                break Finish::Stopped;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break Finish::MaxDuration;
            }
            let success = earlier_success + shared.succeeded.load(Ordering::Relaxed);
            if spec.max_pages.is_some_and(|m| success >= m) {
                break Finish::MaxPages;
            }
            if spec
                .max_items
                .is_some_and(|m| shared.sink.len() as u64 >= m)
            {
                break Finish::MaxItems;
            }
            if last_publish.elapsed() >= Duration::from_millis(200) {
                self.publish(shared.frontier.stats().await?, started);
                last_publish = Instant::now();
            }
            let free = slots.available_permits();
            let mut want = free;
            if let Some(m) = spec.max_pages {
                // Do not start more than can still count towards the limit.
                let in_flight = (concurrency - free) as u64;
                want = want.min(m.saturating_sub(success + in_flight) as usize);
            }
            let leases = if want > 0 {
                shared.frontier.lease(want).await?
            } else {
                Vec::new()
            };
            // The frontier runs short: the expansion's next batch goes in.
            if leases.len() < want
                && let Some((feed, path)) = &mut self.feed
                && feed.top_up(&shared.spider, &*shared.frontier).await?
            {
                write_cursor(path, feed)?;
                if leases.is_empty() {
                    continue;
                }
            }
            if !leases.is_empty() {
                for lease in leases {
                    let permit = slots
                        .clone()
                        .acquire_owned()
                        .await
                        .expect("semaphore is never closed");
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        shared.handle(lease).await;
                        drop(permit);
                        shared.wake.notify_one();
                    });
                }
                continue;
            }
            let idle = slots.available_permits() == concurrency;
            let next = shared.frontier.next_ready_ms().await?;
            if idle && next.is_none() {
                if self.feed.as_ref().is_none_or(|(feed, _)| feed.done()) {
                    break Finish::Complete;
                }
                continue;
            }
            // Sleep until a worker finishes, the next host becomes ready, or we are stopped.
            let wait = match next {
                Some(at) => {
                    Duration::from_millis(at.saturating_sub(shared.frontier_now()).clamp(1, 200))
                }
                None => Duration::from_millis(200),
            };
            tokio::select! {
                _ = shared.wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
                changed = stop.changed(), if stop_open => {
                    // A dropped sender can never ask to stop: stop listening rather than spin.
                    stop_open = changed.is_ok();
                }
            }
        };
        // Let the requests in flight finish: their results are acked, not thrown away.
        let _all = slots
            .acquire_many(concurrency as u32)
            .await
            .expect("semaphore is never closed");
        shared.frontier.sync().await?;
        shared.sink.sync()?;
        if let Some(e) = shared.fatal.lock().take() {
            return Err(e);
        }
        let stats = shared.frontier.stats().await?;
        let progress = self.publish(stats, started);
        Ok(Summary { finish, progress })
    }

    fn publish(&self, frontier: FrontierStats, started: Instant) -> Progress {
        let s = &self.shared;
        let elapsed_s = started.elapsed().as_secs_f64();
        let fetched = s.fetched.load(Ordering::Relaxed);
        let p = Progress {
            frontier,
            fetched,
            processed: s.processed.load(Ordering::Relaxed),
            items: s.items.load(Ordering::Relaxed),
            duplicate_items: s.duplicate_items.load(Ordering::Relaxed),
            robots_denied: s.robots_denied.load(Ordering::Relaxed),
            bytes: s.bytes.load(Ordering::Relaxed),
            elapsed_s,
            pages_per_s: if elapsed_s > 0.0 {
                fetched as f64 / elapsed_s
            } else {
                0.0
            },
        };
        self.progress_tx.send_replace(p.clone());
        p
    }
}

/// The stored cursor of `expansion` (0: none, or another expansion's).
fn read_cursor(path: &Path, expansion: &Expansion) -> Result<u64, CrawlError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => {
            return Err(CrawlError::DataDir {
                path: path.to_owned(),
                reason: e.to_string(),
            });
        }
    };
    match serde_json::from_str::<Cursor>(&text) {
        Ok(c) if c.total == expansion.total() && c.fingerprint == expansion.fingerprint() => {
            Ok(c.next)
        }
        // Another expansion (the spider changed), or a torn file: start over; the frontier's
        // dedup skips what was already fed.
        _ => Ok(0),
    }
}

/// Stores the cursor (after the batch it counts is in the frontier), replacing the file
/// atomically.
fn write_cursor(path: &Path, feed: &ExpandFeed) -> Result<(), CrawlError> {
    let err = |e: std::io::Error| CrawlError::DataDir {
        path: path.to_owned(),
        reason: e.to_string(),
    };
    let cursor = Cursor {
        fingerprint: feed.fingerprint(),
        total: feed.total(),
        next: feed.next(),
    };
    let text = serde_json::to_string(&cursor).unwrap_or_default();
    let tmp = path.with_extension("json.tmp");
    let mut file = std::fs::File::create(&tmp).map_err(err)?;
    std::io::Write::write_all(&mut file, text.as_bytes()).map_err(err)?;
    file.sync_all().map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

impl CrawlCore {
    fn frontier_now(&self) -> u64 {
        self.clock.now_ms()
    }

    fn fatal(&self, e: CrawlError) {
        tracing::error!(error = %e, "fatal error, stopping the crawl");
        self.failing.store(true, Ordering::Relaxed);
        let mut slot = self.fatal.lock();
        slot.get_or_insert(e);
    }

    async fn handle(&self, lease: Lease) {
        let (outcome, links) = match self.process(&lease.request).await {
            Ok(done) => done,
            Err(e) => {
                // Local I/O failed (the items file): the request stays leased and comes back
                // after a restart; stop rather than lose results.
                self.fatal(e);
                return;
            }
        };
        let has_links = !links.is_empty();
        match self
            .frontier
            .ack_and_enqueue(lease.id, outcome, links)
            .await
        {
            Ok((ack, _)) => {
                if ack.applied() {
                    self.processed.fetch_add(1, Ordering::Relaxed);
                }
                if ack == AckResult::Succeeded {
                    self.succeeded.fetch_add(1, Ordering::Relaxed);
                }
                if has_links {
                    self.wake.notify_one();
                }
            }
            Err(e) => self.fatal(e.into()),
        }
    }

    /// Fetches and parses one request: returns its outcome and the requests it discovered
    /// (links, or a redirect target), which the caller acks and enqueues atomically.
    async fn process(&self, req: &Request) -> Result<(Outcome, Vec<Request>), CrawlError> {
        let spec = &self.spider.spec;
        let done = |outcome| Ok((outcome, Vec::new()));
        let Ok(url) = Url::parse(&req.url) else {
            return done(Outcome::ended(&OutcomeCode::InvalidUrl, false));
        };
        if let Some(robots) = &self.robots {
            // robots.txt is a request to the host too. When it is not known yet, fetching it
            // is the start on the host of the lease that reads it, and that request goes back
            // to the frontier: its page then starts only when the host's politeness allows,
            // crawl-delay included.
            if robots.cached(&url).is_none() {
                self.gate.wait(req).await;
            }
            let (verdict, read_here) = robots.check_reading(&url).await;
            if read_here {
                self.apply_crawl_delay(robots, &url, req).await?;
            }
            if let Some(Verdict::Ended {
                code, retryable, ..
            }) = silk_fetch::robots_verdict(&verdict, read_here, req)
            {
                if code == OutcomeCode::RobotsDisallowed {
                    self.robots_denied.fetch_add(1, Ordering::Relaxed);
                }
                return done(Outcome::ended(&code, retryable));
            }
        }
        self.gate.wait(req).await;
        let resp = match self.fetcher.fetch(req).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(url = %req.url, error = %e, "fetch failed");
                let code = OutcomeCode::from(e.kind().as_str());
                return done(Outcome::ended(&code, e.retry() != Retry::Permanent));
            }
        };
        self.fetched.fetch_add(1, Ordering::Relaxed);
        self.bytes
            .fetch_add(resp.body.len() as u64, Ordering::Relaxed);
        match silk_fetch::judge(&self.spider, req, &url, &resp) {
            Verdict::Page => {}
            Verdict::Redirect(next) => return Ok((Outcome::Done, vec![next])),
            Verdict::Ended {
                code, retryable, ..
            } => return done(Outcome::ended(&code, retryable)),
        }
        // On a blocking thread of its own, with a deadline: a page that takes longer than
        // `parse_timeout_ms` fails and its thread is abandoned (the parse budget bounds its
        // work), so neither the runtime nor a stop waits for it.
        // Small pages cannot take long (see `INLINE_PARSE_MAX_BYTES`): parsed right here.
        let extractor = self.extractor.clone();
        let wanted = silk_fetch::wants(&self.spider, req);
        let (page_url, body, content_type) = (url.clone(), resp.body.clone(), resp.content_type);
        let page = if body.len() <= silk_fetch::extract::budget::INLINE_PARSE_MAX_BYTES {
            Ok(Ok(extractor.parse_with(
                &page_url,
                &body,
                content_type.as_deref(),
                wanted,
            )))
        } else {
            let parsing = tokio::task::spawn_blocking(move || {
                extractor.parse_with(&page_url, &body, content_type.as_deref(), wanted)
            });
            let timeout = Duration::from_millis(spec.parse_timeout_ms);
            tokio::time::timeout(timeout, parsing).await
        };
        let page = match page {
            Ok(Ok(page)) => page,
            Ok(Err(e)) => {
                tracing::error!(url = %req.url, error = %e, "parsing failed");
                return done(Outcome::ended(&OutcomeCode::ParseFailed, false));
            }
            Err(_) => silk_fetch::Page {
                over_budget: Some(format!(
                    "parsing took longer than parse_timeout_ms ({} ms)",
                    spec.parse_timeout_ms
                )),
                ..silk_fetch::Page::default()
            },
        };
        if let Some(why) = &page.over_budget {
            tracing::warn!(url = %req.url, reason = %why, "page over the parse budget; not parsed");
            return done(Outcome::ended(&OutcomeCode::ParseBudget, false));
        }
        let harvest = silk_fetch::harvest(&self.spider, req, page, wanted);
        if let Some(item) = harvest.item {
            match self.sink.write_within(&item, spec.max_items)? {
                Written::New => {
                    self.items.fetch_add(1, Ordering::Relaxed);
                }
                Written::Duplicate => {
                    self.duplicate_items.fetch_add(1, Ordering::Relaxed);
                }
                Written::NoKey => {
                    tracing::warn!(url = %req.url, key = %spec.item_key, "item has no key; not written")
                }
                Written::Full => {
                    tracing::debug!(url = %req.url, "max_items reached; item not written");
                    self.wake.notify_one();
                }
            }
        }
        let links = harvest.links.into_iter().map(|l| req.link(l)).collect();
        Ok((Outcome::Done, links))
    }

    /// Tells the frontier (and the send gate) a host's robots.txt crawl-delay; called when
    /// the host's robots.txt has just been read.
    async fn apply_crawl_delay(
        &self,
        robots: &RobotsCache,
        url: &Url,
        req: &Request,
    ) -> Result<(), CrawlError> {
        if let Some(delay) = robots.crawl_delay(url).await {
            let host = req.host_key();
            self.frontier
                .set_host_delay(&host, delay.as_millis() as u64)
                .await?;
            self.gate.set_delay(&host, delay);
        }
        Ok(())
    }
}
