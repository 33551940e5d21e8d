//! Item sinks besides the run's JSON Lines file, and reading that file for the API.
//!
//! The JSON Lines file `runs/{id}/items.jsonl` is always written (idempotent on the item
//! key, before the request is acked): it is the truth — except for a run whose frontier is
//! in the cluster's Redis, whose truth is the store's items table (written before the ack
//! too, by every hub that drives the run); its file then holds this hub's share. The other sinks *tail* it: a task per
//! sink and run reads the complete lines after its offset, delivers them, and then stores the
//! new offset (`runs/{id}/sink-{name}.json`) — the hub's one tailer (`tailer`). So a sink that is slow or down never slows the
//! run and loses nothing: delivery is at least once, in order, resumes after a hub restart
//! (a marker file `sinks.pending` says which runs still have items to deliver), and each
//! item carries its key so that the receiver is idempotent too:
//! - `sql`: `INSERT … ON CONFLICT DO NOTHING` into the store's `items` table on (run, key);
//! - `webhook`: `POST url` with `{"run": ID, "items": [{"key": K, "item": {...}}]}`; any
//!   2xx is a delivery, anything else is retried with back-off (1 s doubling to 60 s).
//! - `targets`: each named item sink target the admin declared (`sink_targets`: a NATS
//!   subject, Redis stream, Kafka topic, …) gets one message per item,
//!   `{"run": ID, "tenant": T, "job": NAME, "key": K, "item": {...}}`, with the delivery id
//!   `RUN:K` (`delivery_id`; JetStream's `Nats-Msg-Id`, the Redis stream's dedup key,
//!   Kafka's `silk-delivery-id` header), in batches of the target's `batch_size`. A batch is delivered again whole
//!   after any retryable error; an item the target refuses for good (too large for it) is
//!   skipped and said in the run log.

use crate::error::HubError;
use crate::items::{ItemLog, item_key};
use crate::live::Run;
use crate::run::{RunRecord, WebhookSink};
use crate::sink_targets::SinkTarget;
use crate::state::HubCore;
use crate::tailer::{self, Backoff, Page, Tail, Writer};
use serde::{Deserialize, Serialize};
use silk_core::RunId;
use silk_store::Level;
use std::sync::Arc;
use std::time::Duration;

/// The marker of a run whose sinks have not delivered everything yet.
pub(crate) const PENDING: &str = "sinks.pending";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Offset {
    offset: u64,
    delivered: u64,
}

/// One sink of one run.
enum Target {
    Sql,
    /// The sink, its client, and the private ranges the run's tenant may reach.
    Webhook(WebhookSink, reqwest::Client, Vec<silk_core::net::IpNet>),
    /// A declared item sink target: its name, the target, and the run's tenant and job.
    Declared(String, SinkTarget, (String, Option<String>)),
}

impl Target {
    /// Its name in logs (`sql`, `webhook`, `target NAME`).
    fn name(&self) -> String {
        match self {
            Target::Sql => "sql".into(),
            Target::Webhook(..) => "webhook".into(),
            Target::Declared(name, ..) => format!("target {name}"),
        }
    }

    /// The file of its offset in the run's folder.
    fn state_file(&self) -> String {
        match self {
            Target::Declared(name, ..) => format!("sink-target-{name}.json"),
            other => format!("sink-{}.json", other.name()),
        }
    }

    fn batch(&self) -> usize {
        match self {
            Target::Sql => 500,
            Target::Webhook(w, ..) => w.batch.unwrap_or(100).max(1) as usize,
            Target::Declared(_, t, _) => t.batch.max(1),
        }
    }

    async fn deliver(
        &self,
        shared: &HubCore,
        run: &RunId,
        key_field: &str,
        items: &[serde_json::Value],
    ) -> Result<(), String> {
        let keyed: Vec<(String, &serde_json::Value)> = items
            .iter()
            .map(|item| (item_key(item, key_field), item))
            .collect();
        match self {
            Target::Sql => {
                let now = shared.clock.now_ms();
                let rows: Vec<(String, u64, serde_json::Value)> = keyed
                    .into_iter()
                    .map(|(k, v)| (k, now, v.clone()))
                    .collect();
                shared
                    .store
                    .insert_items(run.as_str(), &rows)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
            Target::Webhook(w, client, allow) => {
                let body = serde_json::json!({
                    "run": run,
                    "items": keyed.iter().map(|(k, v)| serde_json::json!({"key": k, "item": v})).collect::<Vec<_>>(),
                });
                let body = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
                // An IP literal is connected to without a lookup: checked here, on every
                // delivery (also of a run started before this hub's allow_networks changed).
                check_webhook(&shared.config, allow, &w.url).map_err(|e| e.to_string())?;
                let mut request = client
                    .post(&w.url)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body);
                for (k, v) in &w.headers {
                    request = request.header(k, v);
                }
                let answer = request.send().await.map_err(|e| {
                    match silk_core::net::denied_in(&e) {
                        Some(denied) => format!(
                            "POST refused: {denied} (not allowed for runs of this hub and tenant: allow_networks)"
                        ),
                        // reqwest's error names the URL, never the headers.
                        None => format!("POST failed: {e}"),
                    }
                })?;
                if answer.status().is_success() {
                    Ok(())
                } else {
                    Err(format!("answered HTTP {}", answer.status().as_u16()))
                }
            }
            Target::Declared(name, target, (tenant, job)) => {
                let mut batch = Vec::with_capacity(keyed.len());
                for (key, item) in &keyed {
                    let message = serde_json::json!({"run": run, "tenant": tenant, "job": job, "key": key, "item": item});
                    batch.push(silk_router::Outgoing {
                        payload: serde_json::to_vec(&message)
                            .map_err(|e| e.to_string())?
                            .into(),
                        rt: false,
                        delivery_id: delivery_id(run, key),
                    });
                }
                let results = target.outbound.push(&batch).await;
                if results.len() != batch.len() {
                    return Err(format!(
                        "the target answered {} results for {} items",
                        results.len(),
                        batch.len()
                    ));
                }
                let mut refused = Vec::new();
                for (result, (key, _)) in results.into_iter().zip(&keyed) {
                    match result {
                        Ok(()) => {}
                        Err(e @ silk_router::RouterError::Refused { .. }) => {
                            refused.push(format!("item `{key}`: {e}"))
                        }
                        Err(e) => return Err(e.to_string()),
                    }
                }
                for why in refused {
                    shared.logs.hub(
                        run,
                        Level::Warn,
                        format!("item sink `target {name}` refuses an item for good, skipped (it stays in the run's items): {why}"),
                    );
                }
                Ok(())
            }
        }
    }
}

/// The delivery id of item `key` of `run`: `RUN:KEY`, or `RUN:sha256:HEX` of the key when
/// it is longer than 512 bytes or holds a control character (a header could not carry it).
fn delivery_id(run: &RunId, key: &str) -> String {
    if key.len() <= 512 && !key.chars().any(char::is_control) {
        return format!("{run}:{key}");
    }
    use sha2::Digest;
    let hash = sha2::Sha256::digest(key.as_bytes());
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("{run}:sha256:{hex}")
}

/// The addresses a run's webhook sink may reach: the hub's `allow_networks` and those of the
/// run's tenant (`tenant`).
fn webhook_policy(
    config: &crate::HubConfig,
    tenant: &[silk_core::net::IpNet],
) -> silk_core::net::AddressPolicy {
    silk_core::net::AddressPolicy::new(config.allow_networks.clone()).widened(tenant)
}

/// Refuses a webhook sink whose URL is a private IP literal not allowed by the hub or to the
/// run's tenant (`tenant`; a name is checked as it resolves, at each delivery).
pub(crate) fn check_webhook(
    config: &crate::HubConfig,
    tenant: &[silk_core::net::IpNet],
    url: &str,
) -> Result<(), HubError> {
    let Ok(url) = reqwest::Url::parse(url) else {
        return Ok(()); // the request's own check names a bad URL
    };
    silk_core::net::check_literal(&webhook_policy(config, tenant), &url).map_err(|denied| {
        HubError::BadRun(format!(
            "sinks.webhook.url: {denied} (not allowed for runs of this hub and tenant: allow_networks)"
        ))
    })
}

/// Starts the sink tasks of a run that has sinks (new, resumed, or ended with items not yet
/// delivered). Each ends once the run is over and every item is delivered.
pub(crate) fn start(shared: &Arc<HubCore>, record: &RunRecord) -> Result<(), HubError> {
    let mut targets = Vec::new();
    let log = ItemLog::of(record, &shared.files);
    // A run whose item log is the store's table has the SQL sink's rows already.
    if record.sinks.sql && log != ItemLog::Store {
        targets.push(Target::Sql);
    }
    // Targets this hub does not declare (a run adopted from a hub with other targets): the
    // others deliver, and the run stays pending for a hub that has them.
    let mut missing = 0;
    for name in &record.sinks.targets {
        let Some(target) = shared.config.sink_targets.get(name) else {
            missing += 1;
            shared.logs.hub(
                &record.id,
                Level::Error,
                format!(
                    "item sink `target {name}`: this hub has no such item sink target ({}); its items wait for a hub that has it",
                    shared.config.sink_targets.names_text()
                ),
            );
            continue;
        };
        targets.push(Target::Declared(
            name.clone(),
            target.clone(),
            (record.tenant.clone(), record.job_name.clone()),
        ));
    }
    if let Some(w) = &record.sinks.webhook {
        let builder = reqwest::Client::builder().timeout(Duration::from_secs(30));
        let policy = webhook_policy(&shared.config, &record.allow_networks);
        let client = silk_core::net::guard_client(builder, &policy, 5)
            .build()
            .map_err(|e| HubError::BadRun(format!("sinks.webhook: {e}")))?;
        targets.push(Target::Webhook(
            w.clone(),
            client,
            record.allow_networks.clone(),
        ));
    }
    if targets.is_empty() {
        if missing > 0 {
            shared.files.write_state(&record.id, PENDING, &true)?;
        }
        return Ok(());
    }
    let key_field = silk_core::spider::Spider::from_yaml_seedless(&record.spider, "spider")
        .map(|s| s.spec.item_key.clone())
        .map_err(|e| HubError::BadRun(e.to_string()))?;
    shared.files.write_state(&record.id, PENDING, &true)?;
    // A missing target is never done here: the marker stays for the next start.
    let remaining = Arc::new(std::sync::atomic::AtomicUsize::new(targets.len() + missing));
    for target in targets {
        let state_file = target.state_file();
        let at = match shared.files.read_state::<Offset>(&record.id, &state_file) {
            Ok(Some(o)) => o,
            _ => Offset {
                offset: 0,
                delivered: 0,
            },
        };
        let sink = SinkTail {
            shared: shared.clone(),
            run: record.id.clone(),
            key_field: key_field.clone(),
            target,
            remaining: remaining.clone(),
            log: log.clone(),
            state_file,
            at,
        };
        tokio::spawn(sink.run());
    }
    Ok(())
}

/// Restarts the sinks of runs that ended with items not yet delivered (hub restart).
pub(crate) async fn resume_pending(shared: &Arc<HubCore>) {
    for id in shared.files.runs_with_state(PENDING) {
        if shared.active_run(&id).is_some() {
            continue; // started with its run
        }
        let Ok(Some(record)) = shared.repo.get(&id).await else {
            continue;
        };
        if let Err(e) = start(shared, &record) {
            tracing::warn!(run = %id, error = %e, "item sinks not resumed");
        }
    }
}

/// One sink of one run, as a consumer of the run's item log.
struct SinkTail {
    shared: Arc<HubCore>,
    run: RunId,
    key_field: String,
    target: Target,
    remaining: Arc<std::sync::atomic::AtomicUsize>,
    log: ItemLog,
    state_file: String,
    at: Offset,
}

impl Tail for SinkTail {
    type Entry = serde_json::Value;
    type Waker = Arc<Run>;

    fn writer(&self) -> Writer<Arc<Run>> {
        self.shared.run_writer(&self.run)
    }

    async fn written(run: &Arc<Run>) {
        run.items_written.notified().await;
    }

    async fn read(&mut self, offset: u64) -> Result<Page<serde_json::Value>, String> {
        // In the store, the offset is the item sequence, and a hub that adopts the run
        // delivers from its own offset: at least once.
        let store = self.shared.store.as_ref();
        let page = self.log.read(store, &self.run, offset, self.target.batch());
        let page = page.await.map_err(|e| e.to_string())?;
        Ok(Page {
            entries: page.items,
            next: page.next_cursor,
        })
    }

    async fn deliver(&mut self, todo: &mut Vec<serde_json::Value>) -> Result<(), String> {
        let (shared, run) = (&self.shared, &self.run);
        self.target
            .deliver(shared, run, &self.key_field, todo)
            .await?;
        todo.clear();
        Ok(())
    }

    fn advanced(&mut self, next: u64, delivered: u64) {
        self.at.offset = next;
        self.at.delivered += delivered;
        if let Err(e) = self
            .shared
            .files
            .write_state(&self.run, &self.state_file, &self.at)
        {
            tracing::warn!(run = %self.run, sink = %self.target.name(), error = %e, "sink offset not stored (items may be delivered again)");
        }
    }

    fn read_failed(&mut self, error: &str) {
        tracing::warn!(run = %self.run, sink = %self.target.name(), error = %error, "items not readable for the sink");
    }

    fn failing(&mut self, error: &str, first: bool) {
        let name = self.target.name();
        if first {
            self.shared.logs.hub(
                &self.run,
                Level::Warn,
                format!("item sink `{name}`: {error}; retrying with back-off (items wait in items.jsonl)"),
            );
        }
        tracing::warn!(run = %self.run, sink = %name, error = %error, "item sink delivery failed; retrying");
    }

    fn recovered(&mut self) {
        let name = self.target.name();
        let text = format!("item sink `{name}` delivers again");
        self.shared.logs.hub(&self.run, Level::Info, text);
    }

    fn finished(&mut self) {
        if self
            .remaining
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst)
            == 1
        {
            self.shared.files.remove_state(&self.run, PENDING);
        }
        let (name, n) = (self.target.name(), self.at.delivered);
        let text = format!("item sink `{name}`: all {n} item(s) delivered");
        self.shared.logs.hub(&self.run, Level::Info, text);
    }
}

impl SinkTail {
    /// Delivers the run's items from the stored offset until all are delivered or the hub
    /// stops.
    async fn run(mut self) {
        let mut stop = self.shared.stop.subscribe();
        let backoff = Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(60),
        };
        let stopped = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        let from = self.at.offset;
        tailer::tail(&mut self, from, backoff, stopped).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_id_is_the_run_and_the_key_unless_no_header_could_carry_the_key() {
        let run = RunId::new("r1");
        assert_eq!(delivery_id(&run, "https://a/p/1"), "r1:https://a/p/1");
        for key in ["a\r\nNats-Expected-Stream: x".to_owned(), "k".repeat(513)] {
            let id = delivery_id(&run, &key);
            assert!(id.starts_with("r1:sha256:"), "{id}");
            assert_eq!(id.len(), "r1:sha256:".len() + 64);
            assert_eq!(id, delivery_id(&run, &key), "stable");
        }
        assert_ne!(delivery_id(&run, "a\n"), delivery_id(&run, "b\n"));
    }
}
