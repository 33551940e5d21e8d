//! The router's classes that need the hub (the router runs in the hub's process; see
//! `docs/router.md`, "Silk's own classes"):
//!
//! - **`silk.JobOutbound`** — a routed task becomes a request in a job's *fed run*. The
//!   task's URL is read from `url_key` (default `url`); the pushed task rides along in the
//!   request's meta, and its delivery id (`task_uuid:routed_count`) salts the dedup key, so
//!   a retry routed again is fetched again while one delivery pushed twice is fetched once.
//!   The job's fed run is started on the first task (no `start_urls`, see [`Feed`]) and
//!   ends after `idle_ms` with nothing to do; the next task starts another. Its backlog
//!   (for `max_lag`) is what the fed run has not finished. A task with no usable URL, for a
//!   host the spider does not allow, or for a job that does not exist is refused for good
//!   (the router records it as failed); a hub that cannot start the run now (no live agent,
//!   stopping) is unavailable and the router tries again.
//! - **`silk.RunResultsInbound`** — each fetched request's final outcome comes back as a
//!   task: the outcome's facts (see `outcomes`) plus a `task_result` code, and under
//!   `task_params` the task that became the request (so `common.ExtractTaskParams` makes it
//!   a returning task of its outbound, as in the seed). Outcomes are read from each run's
//!   `outcomes.jsonl` after a stored offset (`runs/{id}/router-{inbound}.json`), submitted
//!   `threads` at a time, and the offset moves only once they are routed: at least once,
//!   across router and hub restarts.

use crate::error::HubError;
use crate::hub::HubHandle;
use crate::routed::{FeedTask, OutcomeConsumer, OutcomeLine};
use crate::run::Feed;
use futures::StreamExt;
use serde_json::{Map, Value};
use silk_core::RunId;
use silk_router::{
    Config, Inbound, InboundContext, InboundFactory, InitReader, Outbound, OutboundFactory,
    Outgoing, Registry, RouterError,
};
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

/// The class name of the job outbound.
pub const JOB_OUTBOUND: &str = "silk.JobOutbound";
/// The class name of the run results inbound.
pub const RUN_RESULTS_INBOUND: &str = "silk.RunResultsInbound";
pub use crate::run::TASK_META;
/// Default `idle_ms` of a fed run.
pub const DEFAULT_IDLE_MS: u64 = 60_000;
/// Default `task_result` of a request fetched and done.
pub const DEFAULT_SUCCESS_CODE: i64 = 1000;
/// Default `task_result` of a failure without an HTTP status (timeout, DNS, …).
pub const DEFAULT_ERROR_CODE: i64 = 1001;

/// Registers the hub's classes with a router [`Registry`]. The hub is given later, once it
/// has started ([`HubClasses::set_hub`]): loading and checking a config needs none, and a
/// component used before then answers that the hub is not running.
#[derive(Clone, Default)]
pub struct HubClasses {
    hub: Arc<OnceLock<HubHandle>>,
}

impl std::fmt::Debug for HubClasses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubClasses")
            .field("hub_set", &self.hub.get().is_some())
            .finish()
    }
}

impl HubClasses {
    /// Classes with no hub yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `silk.JobOutbound` and `silk.RunResultsInbound` in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register_outbound(
            JOB_OUTBOUND,
            Arc::new(JobOutboundFactory {
                hub: self.hub.clone(),
            }),
        );
        registry.register_inbound(
            RUN_RESULTS_INBOUND,
            Arc::new(RunResultsFactory {
                hub: self.hub.clone(),
            }),
        );
    }

    /// A standard registry with the hub's classes.
    pub fn registry(&self) -> Registry {
        let mut registry = Registry::standard();
        self.register(&mut registry);
        registry
    }

    /// Gives the classes their hub; false if they had one already.
    pub fn set_hub(&self, hub: HubHandle) -> bool {
        self.hub.set(hub).is_ok()
    }

    /// Whether `config` has an enabled `silk.RunResultsInbound` (then the hub must record
    /// outcomes: [`HubConfig::record_outcomes`](crate::HubConfig)).
    pub fn wants_outcomes(config: &Config) -> bool {
        config
            .inbounds
            .iter()
            .any(|i| !i.disable && i.class == RUN_RESULTS_INBOUND)
    }
}

fn hub_of(
    cell: &OnceLock<HubHandle>,
    target: impl FnOnce() -> String,
) -> Result<&HubHandle, RouterError> {
    cell.get().ok_or_else(|| RouterError::Unavailable {
        target: target(),
        message: "the hub is not running".into(),
    })
}

// ---------------------------------------------------------------------------------------
// silk.JobOutbound

struct JobOutboundFactory {
    hub: Arc<OnceLock<HubHandle>>,
}

impl OutboundFactory for JobOutboundFactory {
    fn keys(&self) -> &'static [&'static str] {
        &["job", "url_key", "idle_ms"]
    }

    fn build(&self, init: &mut InitReader<'_>) -> Option<Arc<dyn Outbound>> {
        let job = init.str("job");
        let url_key = init.opt_str("url_key").unwrap_or_else(|| "url".into());
        if url_key.is_empty() {
            init.error(Some("url_key"), "must not be empty");
        }
        let idle_ms = init.opt_u64("idle_ms").unwrap_or(DEFAULT_IDLE_MS);
        if idle_ms == 0 {
            init.error(Some("idle_ms"), "must be at least 1");
        }
        let job = job.filter(|j| !j.is_empty())?;
        Some(Arc::new(JobOutbound {
            hub: self.hub.clone(),
            outbound: init.rule_name().to_owned(),
            job,
            url_key,
            idle_ms: idle_ms.max(1),
        }))
    }
}

struct JobOutbound {
    hub: Arc<OnceLock<HubHandle>>,
    outbound: String,
    job: String,
    url_key: String,
    idle_ms: u64,
}

impl JobOutbound {
    fn refused(&self, message: impl Into<String>) -> RouterError {
        RouterError::Refused {
            target: self.target(),
            message: message.into(),
        }
    }

    /// The task of a push: the payload, unwrapped when the outbound wraps it.
    fn task_of(&self, out: &Outgoing) -> Result<FeedTask, RouterError> {
        let value: Value = serde_json::from_slice(&out.payload)
            .map_err(|e| self.refused(format!("the task is not JSON: {e}")))?;
        let Value::Object(mut task) = value else {
            return Err(self.refused("the task is not a JSON object"));
        };
        if task.len() == 1
            && let Some(Value::Object(inner)) = task.remove("task_params")
        {
            task = inner;
        }
        let url = match task.get(&self.url_key) {
            Some(Value::String(u)) if !u.trim().is_empty() => u.trim().to_owned(),
            Some(other) if !other.is_null() => {
                return Err(self.refused(format!(
                    "the task's `{}` is not text: {other}",
                    self.url_key
                )));
            }
            _ => {
                return Err(self.refused(format!(
                    "the task has no `{}` (the URL to fetch; set `url_key` to read another key)",
                    self.url_key
                )));
            }
        };
        let priority = task
            .get("priority")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            .clamp(i64::from(i32::MIN), i64::from(i32::MAX));
        Ok(FeedTask {
            url,
            priority: priority as i32,
            task,
            delivery_id: out.delivery_id.clone(),
            depth: 0,
        })
    }
}

#[async_trait::async_trait]
impl Outbound for JobOutbound {
    fn target(&self) -> String {
        format!("job:{}", self.job)
    }

    fn has_backlog(&self) -> bool {
        true
    }

    async fn push(&self, batch: &[Outgoing]) -> Vec<Result<(), RouterError>> {
        let hub = match hub_of(&self.hub, || self.target()) {
            Ok(h) => h,
            Err(e) => return vec![Err(e); batch.len()],
        };
        let mut answers: Vec<Option<Result<(), RouterError>>> = Vec::with_capacity(batch.len());
        let mut tasks = Vec::new();
        let mut slots = Vec::new();
        for out in batch {
            match self.task_of(out) {
                Ok(t) => {
                    slots.push(answers.len());
                    answers.push(None);
                    tasks.push(t);
                }
                Err(e) => answers.push(Some(Err(e))),
            }
        }
        if !tasks.is_empty() {
            let feed = Feed {
                outbound: self.outbound.clone(),
                idle_ms: self.idle_ms,
            };
            match hub.feed_job(&self.job, feed, tasks).await {
                Ok(results) => {
                    for (slot, r) in slots.into_iter().zip(results) {
                        answers[slot] = Some(r.map_err(|m| self.refused(m)));
                    }
                }
                Err(e) => {
                    let error = match e {
                        HubError::NoSuchJob(job) => self.refused(format!("no job `{job}`")),
                        HubError::BadRun(m) => self.refused(format!("the job's spider: {m}")),
                        other => RouterError::Unavailable {
                            target: self.target(),
                            message: other.to_string(),
                        },
                    };
                    for slot in slots {
                        answers[slot] = Some(Err(error.clone()));
                    }
                }
            }
        }
        answers.into_iter().map(|a| a.unwrap_or(Ok(()))).collect()
    }

    async fn backlog(&self) -> Result<Option<u64>, RouterError> {
        let hub = hub_of(&self.hub, || self.target())?;
        hub.job_backlog(&self.job)
            .await
            .map(Some)
            .map_err(|e| RouterError::Unavailable {
                target: self.target(),
                message: e.to_string(),
            })
    }
}

// ---------------------------------------------------------------------------------------
// silk.RunResultsInbound

/// The keys an outcome task has besides `url` and `task_params`; the routed task under
/// `task_params` never carries them (see `docs/router.md`).
pub const OUTCOME_KEYS: &[&str] = &[
    "task_result",
    "http_code",
    "error_code",
    "error_msg",
    "method",
    "depth",
    "retries",
    "items",
    "links",
    "bytes",
    "fetch_ms",
    "agent",
    "run",
    "tenant",
    "job",
    "spider_name",
    "spider_end_time",
];

/// Which requests' outcomes an inbound takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    /// Every fetched request.
    All,
    /// Only requests that routed tasks became.
    Tasks,
}

/// How outcomes become tasks.
#[derive(Debug, Clone)]
struct ResultsSettings {
    jobs: Option<Vec<String>>,
    which: Which,
    success_code: i64,
    error_code: i64,
    http_status_as_code: bool,
    codes: BTreeMap<String, i64>,
}

/// Whether `reference` (`TENANT/NAME`, or a name of the tenant `default`) names the job of
/// `line`'s run.
fn names_job(reference: &str, line: &OutcomeLine) -> bool {
    let (tenant, name) = reference
        .split_once('/')
        .unwrap_or((silk_store::DEFAULT_TENANT, reference));
    line.tenant == tenant && line.job.as_deref() == Some(name)
}

impl ResultsSettings {
    fn wants(&self, line: &OutcomeLine) -> bool {
        // A redirect hop's target carries the request on (and its task): only the archive
        // reads it.
        if line.redirect {
            return false;
        }
        if self.which == Which::Tasks && line.task.is_none() {
            return false;
        }
        match &self.jobs {
            None => true,
            Some(jobs) => jobs
                .iter()
                .any(|j| line.job_id.as_deref() == Some(j) || names_job(j, line)),
        }
    }

    /// The `task_result` of an outcome: a `codes` entry for its error code, else the
    /// success code, the HTTP status, or the error code.
    fn code(&self, line: &OutcomeLine) -> i64 {
        if let Some(code) = line.error_code.as_ref().and_then(|c| self.codes.get(c)) {
            return *code;
        }
        if line.ok {
            return self.success_code;
        }
        match line.http_code {
            Some(status) if self.http_status_as_code => i64::from(status),
            _ => self.error_code,
        }
    }

    /// The task an outcome becomes.
    fn task(&self, line: OutcomeLine) -> Value {
        let task_result = self.code(&line);
        let mut t = Map::new();
        t.insert("task_result".into(), task_result.into());
        t.insert("http_code".into(), line.http_code.into());
        t.insert("error_code".into(), line.error_code.into());
        t.insert("error_msg".into(), line.error_msg.into());
        t.insert("url".into(), line.url.into());
        t.insert("method".into(), line.method.into());
        t.insert("depth".into(), line.depth.into());
        t.insert("retries".into(), line.retries.into());
        t.insert("items".into(), line.items.into());
        t.insert("links".into(), line.links.into());
        t.insert("bytes".into(), line.bytes.into());
        t.insert("fetch_ms".into(), line.fetch_ms.into());
        t.insert("agent".into(), line.agent.into());
        t.insert("run".into(), line.run.into());
        t.insert("tenant".into(), line.tenant.into());
        t.insert("job".into(), line.job.into());
        t.insert("spider_name".into(), line.spider_name.into());
        t.insert(
            "spider_end_time".into(),
            silk_router::format_time(line.time_ms).into(),
        );
        if let Some(mut task) = line.task {
            // A retried task carries the keys of its previous outcome; they are dropped so
            // that `common.ExtractTaskParams` never lifts them over this outcome's.
            for key in OUTCOME_KEYS {
                task.remove(*key);
            }
            t.insert("task_params".into(), Value::Object(task));
        }
        Value::Object(t)
    }
}

struct RunResultsFactory {
    hub: Arc<OnceLock<HubHandle>>,
}

impl InboundFactory for RunResultsFactory {
    fn keys(&self) -> &'static [&'static str] {
        &[
            "jobs",
            "requests",
            "success_code",
            "error_code",
            "http_status_as_code",
            "codes",
        ]
    }

    fn build(&self, init: &mut InitReader<'_>) -> Option<Arc<dyn Inbound>> {
        let jobs = init.opt_str_list("jobs");
        let which = match init.opt_str("requests").as_deref() {
            None | Some("all") => Which::All,
            Some("tasks") => Which::Tasks,
            Some(other) => {
                init.error(
                    Some("requests"),
                    format!("expected `all` or `tasks`, found `{other}`"),
                );
                Which::All
            }
        };
        let code = |init: &mut InitReader<'_>, key: &str, default: i64| {
            init.opt_u64(key)
                .map_or(default, |c| i64::try_from(c).unwrap_or(i64::MAX))
        };
        let success_code = code(init, "success_code", DEFAULT_SUCCESS_CODE);
        let error_code = code(init, "error_code", DEFAULT_ERROR_CODE);
        let http_status_as_code = init.opt_bool("http_status_as_code").unwrap_or(true);
        let mut codes = BTreeMap::new();
        for (k, v) in init.opt_str_map("codes").unwrap_or_default() {
            match v.trim().parse::<i64>() {
                Ok(c) => {
                    codes.insert(k, c);
                }
                Err(_) => init.error(
                    Some("codes"),
                    format!("`{k}`: expected an integer code, found `{v}`"),
                ),
            }
        }
        Some(Arc::new(RunResultsInbound {
            hub: self.hub.clone(),
            name: init.rule_name().to_owned(),
            settings: ResultsSettings {
                jobs,
                which,
                success_code,
                error_code,
                http_status_as_code,
                codes,
            },
        }))
    }
}

struct RunResultsInbound {
    hub: Arc<OnceLock<HubHandle>>,
    name: String,
    settings: ResultsSettings,
}

#[async_trait::async_trait]
impl Inbound for RunResultsInbound {
    fn source(&self) -> String {
        "hub:run results".into()
    }

    async fn run(self: Arc<Self>, ctx: InboundContext) -> Result<(), RouterError> {
        let hub = hub_of(&self.hub, || self.source())?.clone();
        let consumer = Arc::new(Routing {
            inbound: self.clone(),
            ctx,
        });
        hub.consume_outcomes(consumer)
            .await
            .map_err(|e| RouterError::Unavailable {
                target: self.source(),
                message: e.to_string(),
            })
    }
}

/// The inbound as the hub's outcome consumer: each outcome it wants becomes a task routed
/// through its context, `threads` at a time.
struct Routing {
    inbound: Arc<RunResultsInbound>,
    ctx: InboundContext,
}

#[async_trait::async_trait]
impl OutcomeConsumer for Routing {
    fn name(&self) -> &str {
        &self.inbound.name
    }

    fn page_size(&self) -> usize {
        (self.ctx.threads().max(1) * 16).clamp(64, 1024)
    }

    fn task(&self, line: OutcomeLine) -> Option<Value> {
        let settings = &self.inbound.settings;
        settings.wants(&line).then(|| settings.task(line))
    }

    async fn deliver(&self, run: &RunId, todo: &mut Vec<Value>) -> Result<(), String> {
        let threads = self.ctx.threads().max(1);
        let ctx = &self.ctx;
        let results: Vec<(Value, Result<_, RouterError>)> =
            futures::stream::iter(std::mem::take(todo))
                .map(|task| async {
                    let result = ctx.submit(task.clone()).await;
                    (task, result)
                })
                .buffered(threads)
                .collect()
                .await;
        // Only the tasks not taken go again.
        let mut first_error = None;
        for (task, result) in results {
            if let Err(e) = result {
                first_error.get_or_insert(e);
                todo.push(task);
            }
        }
        match first_error {
            None => Ok(()),
            Some(e) => {
                // Not taken (a target down, the router stopping): tried again with back-off;
                // a stop leaves the offset where it was (at least once).
                if !matches!(e, RouterError::ShuttingDown) {
                    tracing::warn!(run = %run, inbound = %self.inbound.name, error = %e, left = todo.len(), "outcomes not routed; trying again");
                }
                Err(e.to_string())
            }
        }
    }

    async fn stopped(&self) {
        self.ctx.stopping().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(ok: bool, http: Option<u16>, error: Option<&str>) -> OutcomeLine {
        OutcomeLine {
            v: 1,
            ok,
            http_code: http,
            error_code: error.map(str::to_owned),
            error_msg: String::new(),
            url: "http://h/".into(),
            method: "GET".into(),
            depth: 0,
            retries: 0,
            items: 0,
            links: 0,
            bytes: 0,
            fetch_ms: 0,
            agent: "a".into(),
            run: "r".into(),
            tenant: "default".into(),
            job: Some("j".into()),
            job_id: Some("id1".into()),
            spider_name: "s".into(),
            time_ms: 0,
            task: None,
            outcome: String::new(),
            salt: None,
            redirect: false,
        }
    }

    fn settings() -> ResultsSettings {
        ResultsSettings {
            jobs: None,
            which: Which::All,
            success_code: 1000,
            error_code: 1001,
            http_status_as_code: true,
            codes: BTreeMap::from([("timeout".to_owned(), 1504)]),
        }
    }

    #[test]
    fn codes_follow_the_settings() {
        let s = settings();
        assert_eq!(s.code(&line(true, Some(200), None)), 1000);
        assert_eq!(s.code(&line(false, Some(503), Some("http_503"))), 503);
        assert_eq!(s.code(&line(false, None, Some("dns"))), 1001);
        assert_eq!(s.code(&line(false, None, Some("timeout"))), 1504);
        let s = ResultsSettings {
            http_status_as_code: false,
            ..settings()
        };
        assert_eq!(s.code(&line(false, Some(503), Some("http_503"))), 1001);
    }

    #[test]
    fn filters_by_job_and_by_origin() {
        let mut s = settings();
        assert!(s.wants(&line(true, None, None)));
        s.jobs = Some(vec!["other".into()]);
        assert!(!s.wants(&line(true, None, None)));
        s.jobs = Some(vec!["id1".into()]);
        assert!(s.wants(&line(true, None, None)));
        // A name is of the tenant `default`; another tenant's job is `TENANT/NAME`.
        s.jobs = Some(vec!["j".into()]);
        assert!(s.wants(&line(true, None, None)));
        let mut acme = line(true, None, None);
        acme.tenant = "acme".into();
        assert!(!s.wants(&acme), "default's `j` is not acme's");
        s.jobs = Some(vec!["acme/j".into()]);
        assert!(s.wants(&acme));
        assert!(!s.wants(&line(true, None, None)));
        s.jobs = Some(vec!["id1".into()]);
        s.which = Which::Tasks;
        assert!(!s.wants(&line(true, None, None)));
        let mut with_task = line(true, None, None);
        with_task.task = Some(Map::new());
        assert!(s.wants(&with_task));
    }

    #[test]
    fn the_routed_task_comes_back_under_task_params() {
        let mut l = line(false, Some(404), Some("http_404"));
        let mut task = Map::new();
        task.insert("outbound".into(), "fetch".into());
        // From the previous attempt's outcome.
        task.insert("http_code".into(), 503.into());
        l.task = Some(task);
        let t = settings().task(l);
        assert_eq!(t["task_result"], 404);
        assert_eq!(t["task_params"]["outbound"], "fetch");
        assert!(t["task_params"].get("http_code").is_none(), "{t}");
        let mut keys: Vec<&str> = t
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .filter(|k| !["url", "task_params"].contains(k))
            .collect();
        keys.sort_unstable();
        let mut expected = OUTCOME_KEYS.to_vec();
        expected.sort_unstable();
        assert_eq!(
            keys, expected,
            "OUTCOME_KEYS names every key an outcome adds"
        );
        assert_eq!(t["job"], "j");
    }
}
