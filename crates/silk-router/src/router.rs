//! The running router: one [`OutboundSender`] per outbound, the inbounds' consumer tasks,
//! the failure record, the counters, and [`Router::submit`], the path every task takes
//! (convert → inbound selectors → decision → push / record / count).
//!
//! **Invariant**: `submit` returns `Ok` only when the task is delivered to its outbound,
//! ended as succeeded, recorded as failed, or rejected by the inbound's selectors; an
//! inbound acknowledges a task at its source only then. Any `Err` leaves the task with its
//! inbound (pushed back, nak'ed, or answered with 503). A push the target refuses for good
//! ([`RouterError::Refused`]) is the one push error that does not propagate: the task is
//! recorded as failed (`refused`), since offering it again would loop forever.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Map, Value};
use silk_core::{Clock, SystemClock};
use silk_selector::{EvalError, Selector};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::bucket::TokenBucket;
use crate::config::Config;
use crate::decide::{self, CheckTaskAnswer, RuleRef};
use crate::error::RouterError;
use crate::failure::{FailureRecord, FailureSink, FailureWriter, SinkWriter};
use crate::metrics::Metrics;
use crate::outcome::{Decision, Outcome, Reason};
use crate::payload::Payload;
use crate::registry::{InboundContext, Intake, Outgoing};
use crate::sender::OutboundSender;
use crate::task;

/// The running router. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Router {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("project", &self.inner.config.project)
            .finish_non_exhaustive()
    }
}

struct Inner {
    config: Arc<Config>,
    clock: Arc<dyn Clock>,
    senders: Vec<Arc<OutboundSender>>,
    metrics: Metrics,
    failure: Option<FailureWriter>,
    failure_sink: Option<SinkWriter>,
    stop_inbounds: watch::Sender<bool>,
    stop_senders: watch::Sender<bool>,
    inbound_tasks: Mutex<Vec<JoinHandle<()>>>,
    sender_tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Woken after every `submit`, for [`Router::wait_until`].
    settled: Notify,
}

/// One inbound as the hub's Router page shows it.
pub use silk_api::router::InboundView as InboundStatus;
/// One outbound as `GET /outbound/{prefix}` (and the hub's API) shows it.
pub use silk_api::router::OutboundView as OutboundStatus;

#[async_trait::async_trait]
impl Intake for Router {
    async fn submit(&self, inbound: usize, task: Value) -> Result<Outcome, RouterError> {
        Router::submit(self, Some(inbound), task).await
    }

    async fn submit_bytes(&self, inbound: usize, message: &[u8]) -> Result<Outcome, RouterError> {
        Router::submit_bytes(self, Some(inbound), message).await
    }
}

impl Router {
    /// Starts the router (senders, failure record, non-HTTP inbounds) with the system clock.
    pub async fn start(config: Config) -> Result<Router, RouterError> {
        Self::start_with_clock(config, Arc::new(SystemClock)).await
    }

    /// Starts with `clock` driving token buckets, `submit_time` and rates.
    pub async fn start_with_clock(
        config: Config,
        clock: Arc<dyn Clock>,
    ) -> Result<Router, RouterError> {
        Self::start_with(config, clock, None).await
    }

    /// Starts with `clock`, and with `sink` keeping every failure record (besides the
    /// config's file, if any): the hub's store.
    pub async fn start_with(
        config: Config,
        clock: Arc<dyn Clock>,
        sink: Option<Arc<dyn FailureSink>>,
    ) -> Result<Router, RouterError> {
        config.verify_plugins().await.map_err(RouterError::Config)?;
        let failure = match &config.routing.failure {
            Some(f) => Some(FailureWriter::start(f, &config.project).await?),
            None => None,
        };
        let mut weights: Vec<u32> = config.inbounds.iter().map(|i| i.weight).collect();
        weights.push(1);
        let mut buckets: HashMap<String, Arc<TokenBucket>> = HashMap::new();
        let mut senders = Vec::with_capacity(config.outbounds.len());
        for rule in &config.outbounds {
            let bucket = match (
                rule.settings.bucket_key(&rule.name),
                rule.settings.token_per_second,
            ) {
                (Some(key), Some(rate)) => Some(
                    buckets
                        .entry(key)
                        .or_insert_with(|| Arc::new(TokenBucket::new(rate, clock.clone())))
                        .clone(),
                ),
                _ => None,
            };
            senders.push(Arc::new(OutboundSender::new(
                rule.name.clone(),
                rule.component.0.clone(),
                rule.settings.clone(),
                &weights,
                bucket,
                clock.clone(),
            )));
        }
        let (stop_inbounds, _) = watch::channel(false);
        let (stop_senders, _) = watch::channel(false);
        let sender_tasks = senders
            .iter()
            .map(|s| tokio::spawn(s.clone().run(stop_senders.subscribe())))
            .collect();
        let router = Router {
            inner: Arc::new(Inner {
                metrics: Metrics::new(&config),
                config: Arc::new(config),
                clock,
                senders,
                failure,
                failure_sink: sink.map(SinkWriter::start),
                stop_inbounds,
                stop_senders,
                inbound_tasks: Mutex::new(Vec::new()),
                sender_tasks: Mutex::new(sender_tasks),
                settled: Notify::new(),
            }),
        };
        router.start_inbounds();
        Ok(router)
    }

    fn start_inbounds(&self) {
        let mut tasks = self.inner.inbound_tasks.lock();
        for (index, rule) in self.inner.config.inbounds.iter().enumerate() {
            if rule.disable || rule.component.0.is_http() {
                continue;
            }
            let ctx = InboundContext::new(
                Arc::new(self.clone()),
                index,
                rule.name.clone(),
                rule.threads,
                self.inner.stop_inbounds.subscribe(),
            );
            let component = rule.component.0.clone();
            let name = rule.name.clone();
            let source = component.source();
            tracing::info!(inbound = %name, %source, threads = rule.threads, "inbound starting");
            tasks.push(tokio::spawn(async move {
                if let Err(e) = component.run(ctx).await {
                    tracing::error!(inbound = %name, error = %e, "inbound stopped with an error");
                }
            }));
        }
    }

    /// The config the router runs.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Where the failure record is written, if anywhere.
    pub fn failure_path(&self) -> Option<&std::path::Path> {
        self.inner.failure.as_ref().map(FailureWriter::path)
    }

    fn on_eval_error(&self, rule: RuleRef, j: usize, selector: &Selector, error: &EvalError) {
        let config = &self.inner.config;
        let (kind, name, flags, inbound) = match rule {
            RuleRef::Inbound(i) => (
                "inbound",
                &config.inbounds[i].name,
                &config.inbounds[i].logged,
                Some(i),
            ),
            RuleRef::Outbound(i) => (
                "outbound",
                &config.outbounds[i].name,
                &config.outbounds[i].logged,
                None,
            ),
        };
        let index = match rule {
            RuleRef::Inbound(i) | RuleRef::Outbound(i) => i,
        };
        self.inner.metrics.selector_error(inbound.is_some(), index);
        if flags
            .get(j)
            .is_some_and(|f| !f.swap(true, Ordering::Relaxed))
        {
            tracing::warn!(
                rule = %format!("{kind} `{name}`"),
                selector = j + 1,
                source = %selector.source(),
                error = %error,
                "selector failed to evaluate and counts as not matching (logged once per selector)"
            );
        }
    }

    /// Routes one task arriving at inbound `inbound` (`None`: no inbound, straight to the
    /// rules). See the module's invariant.
    pub async fn submit(
        &self,
        inbound: Option<usize>,
        task: Value,
    ) -> Result<Outcome, RouterError> {
        let result = self.route(inbound, task).await;
        self.inner.settled.notify_waiters();
        result
    }

    /// Waits until `done(self)` holds, checking after every settled task, for at most
    /// `timeout`; returns whether it holds. (Tests and tools await this instead of sleeping.)
    pub async fn wait_until(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&Router) -> bool,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Created before the check, so a task settling in between is not missed.
            let settled = self.inner.settled.notified();
            if done(self) {
                return true;
            }
            if tokio::time::timeout_at(deadline, settled).await.is_err() {
                return done(self);
            }
        }
    }

    async fn route(&self, inbound: Option<usize>, mut task: Value) -> Result<Outcome, RouterError> {
        let inner = &self.inner;
        let config = &inner.config;
        inner.metrics.received(inbound);
        if !task.is_object() {
            inner.metrics.bad_input(inbound);
            let raw = task.to_string();
            return self.bad_task(inbound, raw).await;
        }
        // The task as it came, for the failure record of a convert that fails (a replay
        // runs the whole chain again).
        let original = inbound
            .filter(|&i| !config.inbounds[i].converts.is_empty())
            .map(|_| task.clone());
        match decide::convert(config, inbound, &mut task).await {
            Ok(()) => {}
            Err(failed @ RouterError::ConvertFailed { .. }) => {
                let why = failed.to_string();
                let reason = Reason::ConvertFailed;
                tracing::warn!(inbound = ?inbound.map(|i| &config.inbounds[i].name), "{why}");
                self.record(
                    inbound,
                    None,
                    reason,
                    &why,
                    Some(original.unwrap_or(task)),
                    None,
                )
                .await?;
                inner.metrics.decision(inbound, None, reason);
                return Ok(Outcome::new(reason, None, None, why));
            }
            Err(e) => return Err(e),
        }
        let mut on_error =
            |r: RuleRef, j: usize, s: &Selector, e: &EvalError| self.on_eval_error(r, j, s, e);
        if let Err(reason) = decide::accept(config, inbound, &task, &mut on_error) {
            inner.metrics.decision(inbound, None, reason);
            let why = "no selector of the inbound matched";
            return Ok(Outcome::new(reason, None, None, why));
        }
        let verdict = decide::decide(config, &task, &mut on_error);
        let reason = verdict.reason;
        let mut task_uuid = None;
        match (reason.decision(), verdict.outbound, &task) {
            (Decision::Routed, Some(target), Value::Object(map)) => {
                let payload = Payload::new(
                    &config.outbounds[target],
                    map,
                    verdict.retry,
                    inner.clock.now_ms(),
                );
                let bytes = serde_json::to_vec(&payload)
                    .map_err(|e| RouterError::BadTask(e.to_string()))?;
                let out = Outgoing {
                    payload: bytes.into(),
                    rt: payload.rt,
                    delivery_id: format!("{}:{}", payload.task_uuid, payload.routed_count),
                };
                task_uuid = Some(payload.task_uuid.into_owned());
                let lane = inbound.unwrap_or(config.inbounds.len());
                match inner.senders[target].deliver(lane, out).await {
                    Ok(()) => inner.metrics.decision(inbound, Some(target), reason),
                    // The target will never take this task: it ends here, recorded, instead
                    // of going back to its inbound (which would offer it again, forever).
                    Err(refused @ RouterError::Refused { .. }) => {
                        let why = refused.to_string();
                        let reason = Reason::Refused;
                        self.record(inbound, Some(target), reason, &why, Some(task), None)
                            .await?;
                        inner.metrics.decision(inbound, Some(target), reason);
                        let outbound = Some(config.outbounds[target].name.clone());
                        return Ok(Outcome::new(reason, outbound, task_uuid, why));
                    }
                    Err(e) => return Err(e),
                }
            }
            (Decision::Failed, outbound, _) => {
                self.record(inbound, outbound, reason, &verdict.why, Some(task), None)
                    .await?;
                inner.metrics.decision(inbound, outbound, reason);
            }
            (_, outbound, _) => inner.metrics.decision(inbound, outbound, reason),
        }
        let outbound = verdict.outbound.map(|i| config.outbounds[i].name.clone());
        Ok(Outcome::new(reason, outbound, task_uuid, verdict.why))
    }

    /// Routes JSON text; see [`InboundContext::submit_bytes`](crate::InboundContext::submit_bytes).
    pub async fn submit_bytes(
        &self,
        inbound: Option<usize>,
        message: &[u8],
    ) -> Result<Outcome, RouterError> {
        match serde_json::from_slice::<Value>(message) {
            Ok(task) => self.submit(inbound, task).await,
            Err(e) => {
                self.inner.metrics.received(inbound);
                self.inner.metrics.bad_input(inbound);
                tracing::warn!(error = %e, "a message that is not JSON; recorded as failed");
                let result = self
                    .bad_task(inbound, String::from_utf8_lossy(message).into_owned())
                    .await;
                self.inner.settled.notify_waiters();
                result
            }
        }
    }

    async fn bad_task(&self, inbound: Option<usize>, raw: String) -> Result<Outcome, RouterError> {
        let why = "not a JSON object".to_owned();
        self.record(inbound, None, Reason::BadTask, &why, None, Some(raw))
            .await?;
        self.inner.metrics.decision(inbound, None, Reason::BadTask);
        Ok(Outcome::new(Reason::BadTask, None, None, why))
    }

    async fn record(
        &self,
        inbound: Option<usize>,
        outbound: Option<usize>,
        reason: Reason,
        why: &str,
        task: Option<Value>,
        raw: Option<String>,
    ) -> Result<(), RouterError> {
        let config = &self.inner.config;
        let inbound_name = inbound.map(|i| config.inbounds[i].name.clone());
        let outbound_name = outbound.map(|i| config.outbounds[i].name.clone());
        tracing::debug!(inbound = ?inbound_name, outbound = ?outbound_name, reason = reason.as_str(), why, "task failed");
        if self.inner.failure.is_none() && self.inner.failure_sink.is_none() {
            return Ok(());
        }
        let now = self.inner.clock.now_ms();
        let record = FailureRecord {
            time_ms: now,
            project: config.project.clone(),
            inbound: inbound_name,
            outbound: outbound_name,
            reason,
            why: why.to_owned(),
            task,
            raw,
        };
        if let Some(writer) = &self.inner.failure {
            let mut line = Map::new();
            line.insert("time".into(), Value::from(task::format_time(now)));
            line.insert("time_ms".into(), Value::from(now));
            line.insert("project".into(), Value::from(record.project.as_str()));
            let text = |v: &Option<String>| v.as_deref().map_or(Value::Null, Value::from);
            line.insert("inbound".into(), text(&record.inbound));
            line.insert("outbound".into(), text(&record.outbound));
            line.insert("reason".into(), Value::from(reason.as_str()));
            line.insert("why".into(), Value::from(why));
            if let Some(task) = &record.task {
                line.insert("task".into(), task.clone());
            }
            if let Some(raw) = &record.raw {
                line.insert("raw".into(), Value::from(raw.as_str()));
            }
            writer.write(&Value::Object(line)).await?;
        }
        if let Some(sink) = &self.inner.failure_sink {
            sink.write(record).await?;
        }
        self.inner.metrics.failure_record();
        Ok(())
    }

    /// Resolves `?inbound=NAME` for `POST /task/`: the named (enabled) inbound, else the
    /// first enabled HTTP inbound, else none (straight to the rules).
    pub fn http_inbound(&self, name: Option<&str>) -> Result<Option<usize>, RouterError> {
        let config = &self.inner.config;
        match name {
            Some(name) => match config.inbound_index(name) {
                Some(i) if config.inbounds[i].disable => {
                    Err(RouterError::InboundDisabled(name.to_owned()))
                }
                Some(i) => Ok(Some(i)),
                None => Err(RouterError::UnknownInbound(name.to_owned())),
            },
            None => Ok(config.default_http_inbound()),
        }
    }

    /// The dry run of `POST /inbound/{name}/check_task/`.
    pub async fn check_task(&self, inbound: &str, task: &Value) -> CheckTaskAnswer {
        decide::explain_at(&self.inner.config, inbound, task, self.inner.clock.now_ms()).await
    }

    /// Every inbound, in config order, with its counters.
    pub fn inbound_status(&self) -> Vec<InboundStatus> {
        let config = &self.inner.config;
        config
            .inbounds
            .iter()
            .enumerate()
            .map(|(i, rule)| InboundStatus {
                name: rule.name.clone(),
                class: rule.class.clone(),
                source: rule.component.0.source(),
                disabled: rule.disable,
                threads: rule.threads as u64,
                converts: rule.converts.iter().map(|c| c.describe()).collect(),
                received: self.inner.metrics.received_count(i),
                counters: self
                    .inner
                    .metrics
                    .inbound_counts(i)
                    .into_iter()
                    .map(|(r, n)| (r.as_str().to_owned(), n))
                    .collect(),
            })
            .collect()
    }

    /// The outbounds whose name starts with `prefix`, with their backlog read now (each
    /// read waits at most 1 s).
    pub async fn outbound_status(&self, prefix: &str) -> Vec<OutboundStatus> {
        let config = &self.inner.config;
        let picked: Vec<usize> = (0..config.outbounds.len())
            .filter(|&i| config.outbounds[i].name.starts_with(prefix))
            .collect();
        let reads = picked.iter().map(|&i| {
            let component = self.inner.senders[i].component().clone();
            async move {
                if !component.has_backlog() {
                    return Ok(None);
                }
                match tokio::time::timeout(Duration::from_secs(1), component.backlog()).await {
                    Ok(r) => r.map_err(|e| e.to_string()),
                    Err(_) => Err("timed out after 1 s".to_owned()),
                }
            }
        });
        let backlogs = futures::future::join_all(reads).await;
        picked
            .into_iter()
            .zip(backlogs)
            .map(|(i, backlog)| {
                let rule = &config.outbounds[i];
                let sender = &self.inner.senders[i];
                let gauges = sender.gauges();
                let (backlog, backlog_error) = match backlog {
                    Ok(b) => (b, None),
                    Err(e) => (gauges.backlog, Some(e)),
                };
                OutboundStatus {
                    name: rule.name.clone(),
                    class: rule.class.clone(),
                    target: rule.component.0.target(),
                    disabled: rule.disable,
                    selectors: rule
                        .selector
                        .iter()
                        .map(|s| s.source().to_owned())
                        .collect(),
                    backlog,
                    backlog_error,
                    max_lag: rule.settings.max_lag,
                    holding: gauges.holding,
                    queued: gauges.queued,
                    pushed: gauges.pushed,
                    push_errors: gauges.push_errors,
                    rate_per_second: sender.rate_per_second(),
                    token_scope: rule.settings.token_scope.clone(),
                    token_per_second: sender.bucket().map(|b| b.rate_per_second()),
                    retry_limits: rule.settings.retry_limits,
                    failback: rule.settings.failback.clone(),
                    counters: self
                        .inner
                        .metrics
                        .outbound_counts(i)
                        .into_iter()
                        .map(|(r, n)| (r.as_str().to_owned(), n))
                        .collect(),
                }
            })
            .collect()
    }

    /// The Prometheus text of `GET /metrics`.
    pub fn metrics_text(&self) -> String {
        let gauges: Vec<_> = self.inner.senders.iter().map(|s| s.gauges()).collect();
        let mut text = self.inner.metrics.render(&gauges);
        if let Some(host) = &self.inner.config.plugins {
            crate::metrics::render_converts(
                &mut text,
                &self.inner.config.project,
                &host.counters(),
            );
        }
        text
    }

    /// How many decisions of `reason` were counted for `outbound` (any inbound).
    pub fn count(&self, outbound: Option<&str>, reason: Reason) -> u64 {
        let config = &self.inner.config;
        let o = outbound.and_then(|n| config.outbound_index(n));
        (0..=config.inbounds.len())
            .map(|i| {
                let inbound = (i < config.inbounds.len()).then_some(i);
                self.inner.metrics.decision_count(inbound, o, reason)
            })
            .sum()
    }

    /// A counter of `outbound` that moves after each pushed batch and each change of its
    /// `max_lag` holding state; await `changed()` on it instead of sleeping.
    pub fn progress(&self, outbound: &str) -> Option<watch::Receiver<u64>> {
        let i = self.inner.config.outbound_index(outbound)?;
        Some(self.inner.senders[i].progress())
    }

    /// Whether `max_lag` holds `outbound` now, and how many tasks wait for it in memory.
    pub fn holding(&self, outbound: &str) -> Option<(bool, u64)> {
        let i = self.inner.config.outbound_index(outbound)?;
        let g = self.inner.senders[i].gauges();
        Some((g.holding, g.queued))
    }

    /// Stops: inbounds stop taking tasks and finish the ones in hand; after
    /// `server.shutdown_grace_ms` whatever is still queued is handed back to its inbound
    /// (`ShuttingDown`); then the senders drain and stop.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        let grace = Duration::from_millis(inner.config.server.shutdown_grace_ms);
        inner.stop_inbounds.send_replace(true);
        let inbound_tasks = std::mem::take(&mut *inner.inbound_tasks.lock());
        let all = futures::future::join_all(inbound_tasks);
        tokio::pin!(all);
        if tokio::time::timeout(grace, &mut all).await.is_err() {
            tracing::warn!(
                "tasks still in flight after the shutdown grace; handing them back to their inbounds"
            );
            inner.senders.iter().for_each(|s| s.abort());
            all.await;
        }
        inner.stop_senders.send_replace(true);
        let sender_tasks = std::mem::take(&mut *inner.sender_tasks.lock());
        let all = futures::future::join_all(sender_tasks);
        tokio::pin!(all);
        if tokio::time::timeout(grace, &mut all).await.is_err() {
            inner.senders.iter().for_each(|s| s.abort());
            all.await;
        }
        // Late submitters (an HTTP request still in flight) get `ShuttingDown` from now on.
        inner.senders.iter().for_each(|s| s.abort());
    }
}
