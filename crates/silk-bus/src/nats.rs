//! [`NatsBus`]: the bus of the distributed mode, on NATS JetStream (async-nats). It must not
//! hold state of its own beyond a connection: everything durable lives in the NATS server.
//!
//! # JetStream layout (per namespace `ns`, default `silk`)
//!
//! - **One stream** named `NS` (the namespace upper-cased: `SILK`) over
//!   `ns.agent.*.cmd`, `ns.results`, `ns.results.*`, `ns.registrations`, `ns.run.*.control`,
//!   `ns.logs`:
//!   retention **limits** (`max_age_ms`, default 24 h; `max_bytes`, default none; discard
//!   old), file storage, `replicas` copies, `duplicate_window_ms` (2 min) on `Nats-Msg-Id`.
//!   - Why limits, not interest or work-queue: *interest* retention drops a message that no
//!     consumer exists for yet (a registration sent before any hub ever created its durable
//!     would be lost); *work-queue* forbids two consumers with overlapping subjects (every
//!     agent of a run reads `run.{id}.control`; a router may read `results` beside the hub).
//!     Limits keep every message until it ages out, whoever reads it. The price is that acked
//!     messages stay until `max_age`; size `max_bytes` above the traffic of the longest hub
//!     outage you want to survive.
//!   - Why one stream: one place to size and watch; consumers filter by subject. Streams
//!     of different namespaces never overlap, so clusters and tests share a server safely.
//!   - `Nats-Msg-Id` = envelope id: a publish retried after a lost ack is stored once.
//!   - Results: `ns.results.{hub}` carries the results of the downloads hub `{hub}` sent
//!     (their `reply_to`), read by that hub's own durable; `ns.results` stays for downloads
//!     without `reply_to` (agents and hubs of older builds, a single hub). A consumer
//!     filtered on one of them never sees the other's messages.
//!   - The subject list grows with the wire (`ns.logs` came with log batches, `ns.results.*`
//!     with per-hub results): the stream is updated to this build's list on first use. An
//!     older build that updates it back leaves the newer subjects without a stream; a
//!     publish there then fails and is retried, and the retry updates the stream again.
//! - **Durable subscriptions** are durable *pull* consumers on that stream, named by the
//!   durable name, with `filter_subject` = the subscribed subject, explicit acks, `ack_wait`
//!   from the options, unlimited redeliveries. Subscribers pull `SubscribeOpts::batch`
//!   messages at a time: 1 by default, so several subscribers of one durable share the work
//!   and no message waits in a client buffer while its ack timer runs; a high-volume reader
//!   (the hub's results) asks for more, since each pull costs a round trip.
//! - **Plain subscriptions** are core NATS subscriptions (JetStream publishes are also seen
//!   by core subscribers); `Deliver::All` without a durable is an ordered ephemeral consumer.
//! - **Heartbeats** go over core NATS only (`ns.heartbeats`, not in the stream): every hub
//!   replica must see every heartbeat (fan-out), a lost one is harmless (the next follows an
//!   interval later and the failure detector tolerates gaps), and stored ones would be stale
//!   by the time anyone read them after an outage. Publishing one flushes the connection, so
//!   `Ok` means the server has it.
//! - **Hub beacons** go over core NATS the same way (`ns.hubs`): every agent hears every hub,
//!   and a stored beacon would claim a hub alive after it died.
//! - **Allocation replies** go over core NATS the same way (`ns.allocations`, not in the
//!   stream): they are read live by the hub that waits for them (subscribed before it sends
//!   the `allocate` commands), and a reply nobody waits for is worth nothing. `Ok` from a
//!   publish means the server has it, not that a hub read it: the hub treats a reply that
//!   did not come as a failed allocation.
//!
//! # Connection
//!
//! The client connects in the background and reconnects forever, waiting up to
//! `reconnect_backoff_max_ms` between attempts; `connect` fails only on a bad address and
//! waits at most `operation_timeout_ms` for the first connection. A publish or subscribe
//! attempt while disconnected fails at once (retryable) and is retried by the bus's retry
//! policy. An open durable subscription survives server restarts by itself: the client
//! re-issues its pull requests after reconnecting, and if the consumer is gone it is created
//! again (with back-off, forever). The stream is created (or updated to this config) on first
//! use and again whenever the server says it is missing.

use crate::bus::{Acknowledge, Bus, BusConfig, Deliver, RawDelivery, SubscribeOpts, Subscription};
use crate::error::BusError;
use crate::subject::{Subject, check_namespace};
use crate::wire::{Envelope, MessageId};
use async_nats::connection::State;
use async_nats::jetstream::{self, consumer, stream};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use silk_core::{Clock, SystemClock};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// The NATS JetStream bus. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct NatsBus {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for NatsBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsBus")
            .field("stream", &self.inner.stream_name)
            .field("config", &self.inner.config)
            .finish()
    }
}

struct Inner {
    client: async_nats::Client,
    js: jetstream::Context,
    config: BusConfig,
    clock: Arc<dyn Clock>,
    stream_name: String,
    stream_ready: AtomicBool,
    stream_lock: tokio::sync::Mutex<()>,
    connected: watch::Receiver<bool>,
}

impl NatsBus {
    /// Connects to `url` (e.g. `nats://127.0.0.1:4222`) with the system clock.
    pub async fn connect(url: &str, config: BusConfig) -> Result<NatsBus, BusError> {
        Self::connect_with_clock(url, config, Arc::new(SystemClock)).await
    }

    /// Connects to `url`; `clock` decides message staleness.
    pub async fn connect_with_clock(
        url: &str,
        config: BusConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<NatsBus, BusError> {
        check_namespace(&config.namespace)?;
        let op_timeout = Duration::from_millis(config.operation_timeout_ms);
        let max_delay_ms = config.reconnect_backoff_max_ms;
        let (connected_tx, connected) = watch::channel(false);
        let connected_tx = Arc::new(connected_tx);
        let client = async_nats::ConnectOptions::new()
            .name(format!("silk-bus/{}", config.namespace))
            .retry_on_initial_connect()
            .max_reconnects(None)
            .reconnect_delay_callback(move |attempts| reconnect_delay(attempts, max_delay_ms))
            .connection_timeout(op_timeout)
            .request_timeout(Some(op_timeout))
            .event_callback(move |event| {
                let connected_tx = connected_tx.clone();
                async move {
                    match &event {
                        async_nats::Event::Connected => {
                            tracing::info!("bus connected");
                            connected_tx.send_replace(true);
                        }
                        async_nats::Event::Disconnected => {
                            tracing::warn!("bus disconnected, reconnecting");
                            connected_tx.send_replace(false);
                        }
                        other => tracing::info!(event = %other, "bus event"),
                    }
                }
            })
            .connect(url)
            .await
            .map_err(|e| BusError::Refused {
                operation: "connect",
                subject: url.to_owned(),
                reason: e.to_string(),
            })?;
        let mut js = jetstream::new(client.clone());
        js.set_timeout(op_timeout);
        let bus = NatsBus {
            inner: Arc::new(Inner {
                client,
                js,
                stream_name: config.namespace.to_uppercase(),
                config,
                clock,
                stream_ready: AtomicBool::new(false),
                stream_lock: tokio::sync::Mutex::new(()),
                connected,
            }),
        };
        bus.wait_connected(op_timeout).await;
        Ok(bus)
    }

    /// Waits until the client is connected, at most `timeout`; returns whether it is.
    pub async fn wait_connected(&self, timeout: Duration) -> bool {
        let mut rx = self.inner.connected.clone();
        let connected = tokio::time::timeout(timeout, rx.wait_for(|c| *c)).await;
        matches!(connected, Ok(Ok(_))) || self.inner.client.connection_state() == State::Connected
    }

    /// The JetStream stream of this namespace.
    pub fn stream_name(&self) -> &str {
        &self.inner.stream_name
    }

    /// Deletes the namespace's stream and with it every stored message and durable (for
    /// tests and for decommissioning a cluster).
    pub async fn delete_stream(&self) -> Result<(), BusError> {
        let name = &self.inner.stream_name;
        self.inner.stream_ready.store(false, Ordering::SeqCst);
        match self.inner.js.delete_stream(name).await {
            Ok(_) => Ok(()),
            Err(e) => Err(BusError::unavailable("delete stream", name.as_str(), e)),
        }
    }
}

/// 0 ms for the first attempt, then 50 ms doubling, at most `max_ms`.
fn reconnect_delay(attempts: usize, max_ms: u64) -> Duration {
    if attempts <= 1 {
        return Duration::ZERO;
    }
    let exp = u32::try_from(attempts - 2).unwrap_or(u32::MAX).min(20);
    Duration::from_millis((50u64 << exp).min(max_ms))
}

impl Inner {
    fn full(&self, subject: &Subject) -> String {
        subject.full(&self.config.namespace)
    }

    fn check_connected(&self, operation: &'static str, subject: &str) -> Result<(), BusError> {
        match self.client.connection_state() {
            State::Connected => Ok(()),
            state => Err(BusError::unavailable(
                operation,
                subject,
                format!("not connected ({state:?})"),
            )),
        }
    }

    fn stream_config(&self) -> stream::Config {
        let ns = &self.config.namespace;
        stream::Config {
            name: self.stream_name.clone(),
            description: Some(format!("silk bus, namespace `{ns}`")),
            subjects: [
                Subject::all_agent_commands(),
                Subject::results(),
                Subject::all_hub_results(),
                Subject::registrations(),
                Subject::all_run_controls(),
                Subject::logs(),
            ]
            .iter()
            .map(|s| s.full(ns))
            .collect(),
            retention: stream::RetentionPolicy::Limits,
            storage: stream::StorageType::File,
            discard: stream::DiscardPolicy::Old,
            max_age: Duration::from_millis(self.config.max_age_ms),
            max_bytes: self
                .config
                .max_bytes
                .and_then(|b| i64::try_from(b).ok())
                .unwrap_or(-1),
            max_messages: -1,
            max_message_size: i32::try_from(self.config.max_message_bytes).unwrap_or(i32::MAX),
            duplicate_window: Duration::from_millis(self.config.duplicate_window_ms),
            num_replicas: self.config.replicas.max(1),
            ..Default::default()
        }
    }

    /// Creates or updates the stream once; again after `stream_ready` was reset.
    async fn ensure_stream(&self) -> Result<(), BusError> {
        if self.stream_ready.load(Ordering::SeqCst) {
            return Ok(());
        }
        let _guard = self.stream_lock.lock().await;
        if self.stream_ready.load(Ordering::SeqCst) {
            return Ok(());
        }
        match self.js.create_or_update_stream(self.stream_config()).await {
            Ok(_) => {
                self.stream_ready.store(true, Ordering::SeqCst);
                Ok(())
            }
            Err(e) => Err(match e.kind() {
                // A server-side failure (status 500, e.g. "error creating store for stream":
                // nats-server 2.9 removes an account's directory with its last stream, and a
                // stream created at that moment fails) is worth another try.
                jetstream::context::CreateStreamErrorKind::JetStream(js) if js.code() >= 500 => {
                    BusError::unavailable("create stream", self.stream_name.as_str(), js)
                }
                jetstream::context::CreateStreamErrorKind::JetStream(js) => BusError::Refused {
                    operation: "create stream",
                    subject: self.stream_name.clone(),
                    reason: js.to_string(),
                },
                _ => BusError::unavailable("create stream", self.stream_name.as_str(), e),
            }),
        }
    }

    async fn publish_once(
        &self,
        subject: &Subject,
        payload: Bytes,
        id: Option<&MessageId>,
    ) -> Result<(), BusError> {
        let full = self.full(subject);
        let size_bytes = payload.len();
        self.check_connected("publish", &full)?;
        if !subject.is_persisted() {
            self.client
                .publish(full.clone(), payload)
                .await
                .map_err(|e| BusError::unavailable("publish", full.as_str(), e))?;
            let timeout = Duration::from_millis(self.config.operation_timeout_ms);
            return match tokio::time::timeout(timeout, self.client.flush()).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(BusError::unavailable("publish", full, e)),
                Err(_) => Err(BusError::unavailable("publish", full, "flush timed out")),
            };
        }
        self.ensure_stream().await?;
        let mut message = jetstream::message::PublishMessage::build().payload(payload);
        if let Some(id) = id {
            message = message.message_id(id.as_str());
        }
        let result = match self.js.send_publish(full.clone(), message).await {
            Ok(ack) => ack.await.map(|_| ()),
            Err(e) => Err(e),
        };
        result.map_err(|e| {
            use jetstream::context::PublishErrorKind as K;
            match e.kind() {
                K::MaxPayloadExceeded => BusError::TooLarge {
                    subject: full.clone(),
                    size_bytes,
                    max_bytes: self.client.server_info().max_payload,
                },
                K::StreamNotFound => {
                    self.stream_ready.store(false, Ordering::SeqCst);
                    BusError::unavailable("publish", full.as_str(), e)
                }
                _ => BusError::unavailable("publish", full.as_str(), e),
            }
        })
    }

    /// Finds or creates the durable consumer `name` for `filter` (one attempt).
    async fn open_durable(
        &self,
        name: &str,
        filter: &str,
        opts: &SubscribeOpts,
    ) -> Result<consumer::PullConsumer, BusError> {
        self.check_connected("subscribe", filter)?;
        self.ensure_stream().await?;
        let stream = self
            .js
            .get_stream_no_info(&self.stream_name)
            .await
            .map_err(|e| BusError::unavailable("subscribe", filter, e))?;
        let existing = stream.consumer_info(name).await;
        match existing {
            Ok(info) => {
                if info.config.filter_subject != filter {
                    return Err(BusError::DurableMismatch {
                        name: name.to_owned(),
                        existing: info.config.filter_subject.clone(),
                        requested: filter.to_owned(),
                    });
                }
                // Join it as it is: the first subscriber's options stay (as in-process).
                return stream
                    .get_consumer::<consumer::pull::Config>(name)
                    .await
                    .map_err(|e| BusError::unavailable("subscribe", filter, e));
            }
            Err(e) if e.kind() == jetstream::context::ConsumerInfoErrorKind::NotFound => {}
            Err(e) if e.kind() == jetstream::context::ConsumerInfoErrorKind::StreamNotFound => {
                self.stream_ready.store(false, Ordering::SeqCst);
                return Err(BusError::unavailable("subscribe", filter, e));
            }
            Err(e) => return Err(BusError::unavailable("subscribe", filter, e)),
        }
        let config = consumer::pull::Config {
            durable_name: Some(name.to_owned()),
            description: Some("silk-bus durable".into()),
            filter_subject: filter.to_owned(),
            deliver_policy: match opts.deliver {
                Deliver::All => consumer::DeliverPolicy::All,
                Deliver::New => consumer::DeliverPolicy::New,
            },
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: Duration::from_millis(opts.ack_wait_ms.unwrap_or(self.config.ack_wait_ms)),
            max_deliver: -1,
            ..Default::default()
        };
        // Two subscribers creating the same durable at once: the server treats an identical
        // create as a no-op, so both get it.
        stream
            .create_consumer(config)
            .await
            .map_err(|e| match e.kind() {
                jetstream::stream::ConsumerErrorKind::JetStream(js) if js.code() != 503 => {
                    BusError::Refused {
                        operation: "subscribe",
                        subject: filter.to_owned(),
                        reason: js.to_string(),
                    }
                }
                _ => BusError::unavailable("subscribe", filter, e),
            })
    }

    async fn subscribe_once(
        self: &Arc<Self>,
        subject: &Subject,
        opts: &SubscribeOpts,
    ) -> Result<Subscription, BusError> {
        let full = self.full(subject);
        self.check_connected("subscribe", &full)?;
        let ns = self.config.namespace.clone();
        let clock = self.clock.clone();
        match (&opts.durable, opts.deliver) {
            (None, Deliver::New) => {
                let subscriber = self
                    .client
                    .subscribe(full.clone())
                    .await
                    .map_err(|e| BusError::unavailable("subscribe", full.as_str(), e))?;
                // A round trip, so that the server has the interest before `subscribe` returns
                // and a publish that follows (from any client) reaches this subscriber.
                let timeout = Duration::from_millis(self.config.operation_timeout_ms);
                match tokio::time::timeout(timeout, self.client.flush()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return Err(BusError::unavailable("subscribe", full, e)),
                    Err(_) => {
                        return Err(BusError::unavailable("subscribe", full, "flush timed out"));
                    }
                }
                let prefix = format!("{ns}.");
                let source = subscriber.map(move |m| Ok(raw(&prefix, m, 1, None)));
                Ok(Subscription::new(ns, source, clock))
            }
            (None, Deliver::All) => {
                self.ensure_stream().await?;
                let stream = self
                    .js
                    .get_stream_no_info(&self.stream_name)
                    .await
                    .map_err(|e| BusError::unavailable("subscribe", full.as_str(), e))?;
                let ordered = stream
                    .create_consumer(consumer::pull::OrderedConfig {
                        filter_subject: full.clone(),
                        deliver_policy: consumer::DeliverPolicy::All,
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| BusError::unavailable("subscribe", full.as_str(), e))?
                    .messages()
                    .await
                    .map_err(|e| BusError::unavailable("subscribe", full.as_str(), e))?;
                let prefix = format!("{ns}.");
                let source = ordered.filter_map(move |m| {
                    let item = match m {
                        Ok(m) => Some(Ok(raw(&prefix, m.message, 1, None))),
                        Err(e) => {
                            tracing::debug!(error = %e, "replay subscription: transient error");
                            None
                        }
                    };
                    futures::future::ready(item)
                });
                Ok(Subscription::new(ns, source, clock))
            }
            (Some(name), _) => {
                let consumer = self.open_durable(name, &full, opts).await?;
                let messages = pull_messages(&consumer, opts.batch)
                    .await
                    .map_err(|e| BusError::unavailable("subscribe", full.as_str(), e))?;
                let durable = DurableSource {
                    inner: self.clone(),
                    name: name.clone(),
                    filter: full,
                    opts: opts.clone(),
                    messages: Some(messages),
                    failures: 0,
                };
                let source = futures::stream::unfold(durable, |mut d| async move {
                    let item = d.next().await;
                    Some((item, d))
                });
                Ok(Subscription::new(ns, source, clock))
            }
        }
    }
}

async fn pull_messages(
    consumer: &consumer::PullConsumer,
    batch: usize,
) -> Result<consumer::pull::Stream, consumer::StreamError> {
    consumer
        .stream()
        .max_messages_per_batch(batch.max(1))
        .expires(Duration::from_secs(30))
        .heartbeat(Duration::from_secs(5))
        .messages()
        .await
}

fn raw(
    prefix: &str,
    m: async_nats::Message,
    delivered: u32,
    acker: Option<Box<dyn Acknowledge>>,
) -> RawDelivery {
    let subject = m.subject.as_str();
    RawDelivery {
        subject: subject.strip_prefix(prefix).unwrap_or(subject).to_owned(),
        payload: m.payload,
        delivered,
        acker,
    }
}

/// A durable subscription's source: pulls, and reopens the consumer when it is lost.
struct DurableSource {
    inner: Arc<Inner>,
    name: String,
    filter: String,
    opts: SubscribeOpts,
    messages: Option<consumer::pull::Stream>,
    failures: u32,
}

impl DurableSource {
    async fn next(&mut self) -> Result<RawDelivery, BusError> {
        let backoff = crate::bus::RetryPolicy {
            retries: 0,
            backoff_initial_ms: 50,
            backoff_max_ms: self.inner.config.reconnect_backoff_max_ms.max(50),
        };
        loop {
            let Some(messages) = self.messages.as_mut() else {
                match self
                    .inner
                    .open_durable(&self.name, &self.filter, &self.opts)
                    .await
                {
                    Ok(consumer) => match pull_messages(&consumer, self.opts.batch).await {
                        Ok(m) => {
                            tracing::info!(durable = %self.name, "durable subscription reopened");
                            self.messages = Some(m);
                            self.failures = 0;
                        }
                        Err(e) => self.fail(&backoff, &e.to_string()).await,
                    },
                    Err(e) if e.is_retryable() => self.fail(&backoff, &e.to_string()).await,
                    Err(e) => {
                        self.fail(&backoff, &e.to_string()).await;
                        return Err(e);
                    }
                }
                continue;
            };
            match messages.next().await {
                Some(Ok(message)) => {
                    self.failures = 0;
                    let delivered = message
                        .info()
                        .map(|i| u32::try_from(i.delivered).unwrap_or(u32::MAX))
                        .unwrap_or(1);
                    let (message, acker) = message.split();
                    let ack = NatsAck {
                        acker,
                        consumer: self.name.clone(),
                    };
                    let prefix = format!("{}.", self.inner.config.namespace);
                    return Ok(raw(&prefix, message, delivered, Some(Box::new(ack))));
                }
                Some(Err(e)) => {
                    // Missed heartbeats, failed pulls, a deleted consumer: start over from the
                    // consumer lookup, which re-creates the stream and the consumer when the
                    // server lost them. A pull in flight on the dropped stream is redelivered
                    // after ack_wait.
                    self.messages = None;
                    self.fail(&backoff, &e.to_string()).await;
                }
                None => self.messages = None,
            }
        }
    }

    async fn fail(&mut self, backoff: &crate::bus::RetryPolicy, error: &str) {
        self.failures = self.failures.saturating_add(1);
        tracing::warn!(durable = %self.name, failures = self.failures, error, "durable subscription interrupted, retrying");
        tokio::time::sleep(backoff.backoff(self.failures)).await;
    }
}

struct NatsAck {
    acker: jetstream::message::Acker,
    consumer: String,
}

impl NatsAck {
    async fn send(&self, kind: jetstream::AckKind) -> Result<(), BusError> {
        self.acker
            .ack_with(kind)
            .await
            .map_err(|e| BusError::unavailable("ack", self.consumer.as_str(), e))
    }
}

#[async_trait]
impl Acknowledge for NatsAck {
    async fn ack(&self) -> Result<(), BusError> {
        self.send(jetstream::AckKind::Ack).await
    }
    async fn nak(&self) -> Result<(), BusError> {
        self.send(jetstream::AckKind::Nak(None)).await
    }
    async fn term(&self) -> Result<(), BusError> {
        self.send(jetstream::AckKind::Term).await
    }
}

#[async_trait]
impl Bus for NatsBus {
    fn namespace(&self) -> &str {
        &self.inner.config.namespace
    }

    async fn publish(&self, subject: &Subject, envelope: &Envelope) -> Result<(), BusError> {
        let payload = envelope.encode()?;
        let inner = &self.inner;
        inner
            .config
            .check_publish(subject, Some(envelope.kind()), payload.len())?;
        let full = inner.full(subject);
        inner
            .config
            .retry
            .run("publish", &full, || {
                inner.publish_once(subject, payload.clone(), Some(&envelope.id))
            })
            .await
    }

    async fn publish_raw(&self, subject: &Subject, payload: Bytes) -> Result<(), BusError> {
        let inner = &self.inner;
        inner.config.check_publish(subject, None, payload.len())?;
        let full = inner.full(subject);
        inner
            .config
            .retry
            .run("publish", &full, || {
                inner.publish_once(subject, payload.clone(), None)
            })
            .await
    }

    async fn subscribe(
        &self,
        subject: &Subject,
        opts: SubscribeOpts,
    ) -> Result<Subscription, BusError> {
        opts.check(subject)?;
        let inner = &self.inner;
        let full = inner.full(subject);
        inner
            .config
            .retry
            .run("subscribe", &full, || inner.subscribe_once(subject, &opts))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_delays_grow_to_the_cap() {
        let d: Vec<u64> = (1..=7)
            .map(|n| reconnect_delay(n, 1_000).as_millis() as u64)
            .collect();
        assert_eq!(d, [0, 50, 100, 200, 400, 800, 1_000]);
        assert_eq!(reconnect_delay(usize::MAX, 1_000).as_millis(), 1_000);
    }
}
