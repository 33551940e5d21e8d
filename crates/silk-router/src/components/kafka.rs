//! Kafka over librdkafka (`rdkafka`): `kafka.KafkaInbound` (a consumer group, the seed's
//! spider-log inbound) and `kafka.KafkaOutbound` (a producer).
//!
//! # The inbound: commit only what the router took
//!
//! `init.consumer_settings` are librdkafka properties, passed as they are
//! (`bootstrap.servers`, `group.id`, `session.timeout.ms`, …; YAML booleans become
//! `true`/`false`); `auto.offset.reset` is `earliest` unless set, so a partition without a
//! committed offset is read from its start; `init.topics` are subscribed to. Each of the rule's
//! `threads` is one consumer of the group (the seed: no more threads than partitions — a
//! consumer without a partition waits).
//!
//! A consumer handles its messages **one at a time, in order**: it hands a message to the
//! router and, only once the router has taken it (routed, ended, or recorded as failed),
//! stores its offset. Silk sets `enable.auto.offset.store=false` and
//! `enable.auto.commit=true` whatever the config says: librdkafka commits the stored
//! offsets every `auto.commit.interval.ms` (default 5 s), at a rebalance, and the consumer
//! commits them at shutdown. A message the router cannot take now (target down) is offered
//! again, with back-off, and the consumer takes nothing else meanwhile. So a
//! crash re-reads at most the messages since the last commit (**at least once**) and never
//! skips one. A message that is not a JSON object is recorded as failed (`bad_task`) and
//! its offset stored.
//!
//! # The outbound
//!
//! `init.producer_settings` (librdkafka properties; `bootstrap.servers` at least), `topic`,
//! optional `key` (the task key whose value is the message key, so tasks of one key keep
//! their order in one partition; default none), `timeout_ms` (default 30000: how long a
//! push waits for the broker's acknowledgement). Silk sets `enable.idempotence=true`
//! unless the config sets it (no duplicates from the producer's own retries). Each
//! message carries the header `silk-delivery-id` (`task_uuid:routed_count`) for consumers
//! that deduplicate. A message the broker refuses for its size is `refused`. Kafka has no
//! backlog to read here, so `max_lag` does not apply.
//!
//! Only plaintext connections: this build has no TLS or SASL (librdkafka without OpenSSL).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};

use crate::error::RouterError;
use crate::read::InitReader;
use crate::registry::{
    Inbound, InboundContext, InboundFactory, Outbound, OutboundFactory, Outgoing,
};

/// Properties Silk sets on every consumer unless the config does: a group (or a partition)
/// without a committed offset starts at the beginning, so nothing is skipped.
const CONSUMER_DEFAULTS: [(&str, &str); 1] = [("auto.offset.reset", "earliest")];

/// Properties Silk sets on every consumer, over the config's.
const CONSUMER_FORCED: [(&str, &str); 2] = [
    ("enable.auto.offset.store", "false"),
    ("enable.auto.commit", "true"),
];

/// Reads `key` (a mapping of librdkafka properties) into a config, checking every
/// property with librdkafka itself (no connection is made). `required` must be present.
fn client_config(
    init: &mut InitReader<'_>,
    key: &str,
    required: &[&str],
    defaults: &[(&str, &str)],
    forced: &[(&str, &str)],
) -> Option<(ClientConfig, String)> {
    let settings = init.settings(key)?;
    let mut ok = true;
    for name in required {
        if !settings
            .iter()
            .any(|(k, v)| k == name && !v.trim().is_empty())
        {
            init.error(Some(key), format!("needs `{name}`"));
            ok = false;
        }
    }
    let mut config = ClientConfig::new();
    config.set("client.id", "silk-router");
    for (k, v) in defaults {
        config.set(*k, *v);
    }
    for (k, v) in &settings {
        config.set(k, v);
    }
    for (k, v) in forced {
        config.set(*k, *v);
    }
    // Each property on its own, in the config's order, so that every bad one is named;
    // then all of them together.
    for (k, v) in &settings {
        let mut one = ClientConfig::new();
        one.set(k, v);
        if let Err(e) = one.create_native_config() {
            init.error(
                Some(key),
                format!("librdkafka refuses it: {}", describe(&e)),
            );
            ok = false;
        }
    }
    if ok && let Err(e) = config.create_native_config() {
        init.error(
            Some(key),
            format!("librdkafka refuses it: {}", describe(&e)),
        );
        ok = false;
    }
    let servers = settings
        .iter()
        .find(|(k, _)| k == "bootstrap.servers")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    ok.then_some((config, servers))
}

/// A Kafka error in words, without the client's internals.
fn describe(e: &KafkaError) -> String {
    match e {
        // Never the value: it may be a password (`ssl.key.password`, `sasl.password`).
        KafkaError::ClientConfig(_, description, property, value) => {
            // librdkafka's sentence may quote the value: not shown when it does.
            let description = if value.is_empty() || !description.contains(value.as_str()) {
                description.clone()
            } else {
                "not a valid value here (an unknown property, a wrong value, or a feature this build lacks)".to_owned()
            };
            if property.is_empty() {
                description
            } else {
                format!("`{property}`: {description}")
            }
        }
        other => other.to_string(),
    }
}

/// `kafka.KafkaInbound`: `consumer_settings`, `topics`.
pub(crate) struct KafkaInboundFactory;

impl InboundFactory for KafkaInboundFactory {
    fn keys(&self) -> &'static [&'static str] {
        &["consumer_settings", "topics"]
    }

    fn build(&self, init: &mut InitReader<'_>) -> Option<Arc<dyn Inbound>> {
        let config = client_config(
            init,
            "consumer_settings",
            &["bootstrap.servers", "group.id"],
            &CONSUMER_DEFAULTS,
            &CONSUMER_FORCED,
        );
        let topics = match init.opt_str_list("topics") {
            Some(t) if !t.is_empty() && t.iter().all(|t| !t.trim().is_empty()) => Some(t),
            Some(_) => {
                init.error(Some("topics"), "needs at least one topic name");
                None
            }
            None => {
                init.error(None, "missing `topics` in `init`");
                None
            }
        };
        let ((config, servers), topics) = (config?, topics?);
        let group = config.get("group.id").unwrap_or_default().to_owned();
        Some(Arc::new(KafkaInbound {
            source: format!("kafka {servers} topics {} group {group}", topics.join(",")),
            config,
            topics,
        }))
    }
}

struct KafkaInbound {
    config: ClientConfig,
    topics: Vec<String>,
    source: String,
}

#[async_trait]
impl Inbound for KafkaInbound {
    fn source(&self) -> String {
        self.source.clone()
    }

    async fn run(self: Arc<Self>, ctx: InboundContext) -> Result<(), RouterError> {
        ctx.run_consumers(|n, ctx| {
            let this = self.clone();
            async move { this.consume(n, ctx).await }
        })
        .await;
        Ok(())
    }
}

/// Waits `ms` or until shutdown starts.
async fn pause(ctx: &InboundContext, ms: u64) {
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
        _ = ctx.stopping() => {}
    }
}

impl KafkaInbound {
    fn error(&self, e: &KafkaError) -> RouterError {
        RouterError::Kafka {
            target: self.source.clone(),
            message: describe(e),
        }
    }

    /// Creates consumer `n` and subscribes it; retried with back-off until it works or the
    /// router stops (`None`).
    async fn connect(&self, n: usize, ctx: &InboundContext) -> Option<StreamConsumer> {
        let mut delay = 500;
        loop {
            if ctx.is_stopping() {
                return None;
            }
            let topics: Vec<&str> = self.topics.iter().map(String::as_str).collect();
            let consumer = self
                .config
                .create::<StreamConsumer>()
                .and_then(|c| c.subscribe(&topics).map(|()| c));
            match consumer {
                Ok(c) => return Some(c),
                Err(e) => {
                    let e = self.error(&e);
                    tracing::error!(inbound = ctx.name(), consumer = n, error = %e, "cannot start the Kafka consumer; trying again");
                    pause(ctx, delay).await;
                    delay = (delay * 2).min(30_000);
                }
            }
        }
    }

    async fn consume(&self, n: usize, ctx: InboundContext) {
        let Some(consumer) = self.connect(n, &ctx).await else {
            return;
        };
        let mut errors_logged = 0u32;
        'messages: loop {
            let message = tokio::select! {
                m = consumer.recv() => m,
                _ = ctx.stopping() => break,
            };
            let message = match message {
                Ok(m) => m,
                Err(e) => {
                    // The client reconnects by itself; say so now and then, not per poll.
                    if errors_logged < 3 || errors_logged.is_power_of_two() {
                        tracing::warn!(inbound = ctx.name(), consumer = n, error = %self.error(&e), "Kafka consumer error");
                    }
                    errors_logged = errors_logged.saturating_add(1);
                    pause(&ctx, 200).await;
                    continue;
                }
            };
            errors_logged = 0;
            let payload = message.payload().unwrap_or_default();
            let mut delay = 100;
            loop {
                match ctx.submit_bytes(payload).await {
                    Ok(_) => break,
                    Err(e) => {
                        if ctx.is_stopping() {
                            // Not taken: its offset is not stored, so it is read again.
                            break 'messages;
                        }
                        tracing::warn!(
                            inbound = ctx.name(),
                            topic = message.topic(),
                            partition = message.partition(),
                            offset = message.offset(),
                            error = %e,
                            "the router cannot take the message now; offering it again"
                        );
                        pause(&ctx, delay).await;
                        delay = (delay * 2).min(5_000);
                    }
                }
            }
            if let Err(e) = consumer.store_offset_from_message(&message) {
                // The partition was taken away meanwhile (a rebalance): its next owner
                // reads the message again — at least once.
                tracing::warn!(inbound = ctx.name(), error = %self.error(&e), "cannot store the offset of a routed message");
            }
        }
        // The commit and the close (dropping leaves the group) block: off the runtime.
        let source = self.source.clone();
        let inbound = ctx.name().to_owned();
        let closed = tokio::task::spawn_blocking(move || {
            match consumer.commit_consumer_state(CommitMode::Sync) {
                Ok(()) | Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
                Err(e) => {
                    tracing::warn!(inbound, consumer = n, source, error = %describe(&e), "cannot commit at shutdown; the messages since the last commit will be read again")
                }
            }
            drop(consumer);
        })
        .await;
        if let Err(e) = closed {
            tracing::warn!(inbound = ctx.name(), consumer = n, error = %e, "closing the Kafka consumer failed");
        }
    }
}

/// `kafka.KafkaOutbound`: `producer_settings`, `topic`, `key`, `timeout_ms`.
pub(crate) struct KafkaOutboundFactory;

impl OutboundFactory for KafkaOutboundFactory {
    fn keys(&self) -> &'static [&'static str] {
        &["producer_settings", "topic", "key", "timeout_ms"]
    }

    fn build(&self, init: &mut InitReader<'_>) -> Option<Arc<dyn Outbound>> {
        let config = client_config(
            init,
            "producer_settings",
            &["bootstrap.servers"],
            &[("enable.idempotence", "true")],
            &[],
        );
        let topic = init.str("topic");
        let key = init.opt_str("key");
        let timeout_ms = init.opt_u64("timeout_ms").unwrap_or(30_000).max(100);
        let ((mut config, servers), topic) = (config?, topic?);
        config.set("message.timeout.ms", timeout_ms.to_string());
        Some(Arc::new(KafkaOutbound {
            target: format!("kafka {servers} topic {topic}"),
            config,
            topic,
            key,
            timeout: Duration::from_millis(timeout_ms),
            producer: parking_lot::Mutex::new(None),
        }))
    }
}

struct KafkaOutbound {
    config: ClientConfig,
    topic: String,
    key: Option<String>,
    target: String,
    timeout: Duration,
    /// Made on first use; made again after a fatal error (an idempotent producer that
    /// lost its sequence is unusable).
    producer: parking_lot::Mutex<Option<FutureProducer>>,
}

impl KafkaOutbound {
    fn error(&self, e: &KafkaError) -> RouterError {
        RouterError::Kafka {
            target: self.target.clone(),
            message: describe(e),
        }
    }

    /// The producer, created on first use (it connects in the background).
    fn producer(&self) -> Result<FutureProducer, RouterError> {
        let mut slot = self.producer.lock();
        if let Some(p) = slot.as_ref() {
            return Ok(p.clone());
        }
        let producer: FutureProducer = self.config.create().map_err(|e| self.error(&e))?;
        *slot = Some(producer.clone());
        Ok(producer)
    }

    /// Drops the producer if it hit a fatal error, so the next push makes a new one.
    fn check_fatal(&self, producer: &FutureProducer) {
        if let Some((code, reason)) = producer.client().fatal_error() {
            tracing::error!(target = %self.target, ?code, reason, "the Kafka producer hit a fatal error; making a new one");
            *self.producer.lock() = None;
        }
    }

    /// The message key of a task: the text (or JSON) of its `key` field.
    fn key_of(&self, payload: &[u8]) -> Option<String> {
        let field = self.key.as_deref()?;
        let task: serde_json::Value = serde_json::from_slice(payload).ok()?;
        match task.get(field)? {
            serde_json::Value::Null => None,
            serde_json::Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        }
    }
}

#[async_trait]
impl Outbound for KafkaOutbound {
    fn target(&self) -> String {
        self.target.clone()
    }

    fn has_backlog(&self) -> bool {
        false
    }

    async fn push(&self, batch: &[Outgoing]) -> Vec<Result<(), RouterError>> {
        let producer = match self.producer() {
            Ok(p) => p,
            Err(e) => return batch.iter().map(|_| Err(e.clone())).collect(),
        };
        let producer = &producer;
        let sends = batch.iter().map(|out| async move {
            let key = self.key_of(&out.payload);
            let headers = OwnedHeaders::new().insert(Header {
                key: "silk-delivery-id",
                value: Some(out.delivery_id.as_bytes()),
            });
            let mut record = FutureRecord::to(&self.topic)
                .payload(out.payload.as_ref())
                .headers(headers);
            if let Some(key) = &key {
                record = record.key(key.as_bytes());
            }
            match producer.send(record, self.timeout).await {
                Ok(_) => Ok(()),
                Err((
                    e @ KafkaError::MessageProduction(
                        RDKafkaErrorCode::MessageSizeTooLarge
                        | RDKafkaErrorCode::InvalidMessageSize
                        | RDKafkaErrorCode::InvalidMessage,
                    ),
                    _,
                )) => Err(RouterError::Refused {
                    target: self.target.clone(),
                    message: describe(&e),
                }),
                Err((e, _)) => Err(self.error(&e)),
            }
        });
        let results = futures::future::join_all(sends).await;
        if results.iter().any(Result::is_err) {
            self.check_fatal(producer);
        }
        results
    }

    async fn backlog(&self) -> Result<Option<u64>, RouterError> {
        Ok(None)
    }
}
