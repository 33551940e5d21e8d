//! The [`Bus`] seam (in other systems: broker, message queue, message bus, pub/sub): how the
//! hub and the agents talk. Callers hold an `Arc<dyn Bus>`; the embedded mode plugs in the
//! in-process bus, the distributed mode the NATS JetStream one, and both pass
//! `crate::conformance`.
//!
//! What every implementation promises:
//! - `publish` validates (subject kind, no wildcard, size), then tries `retry.retries + 1`
//!   times with exponential back-off on retryable failures; the error after the last try is
//!   [`BusError::Exhausted`]. On persisted subjects it returns once the message is stored
//!   (JetStream ack), and a retry of the same envelope (same `id`) within
//!   `duplicate_window_ms` is stored once. `subscribe` retries the same way.
//! - A plain subscription (`durable: None`, `Deliver::New`) sees what is published from now
//!   on, fan-out: every plain subscriber gets every message; nothing is kept for it while it
//!   is away.
//! - A durable subscription keeps its position under its name: messages published while no
//!   subscriber is attached are kept and delivered later; subscribers that use the same name
//!   share the work (each message goes to one of them); a delivery not acked within
//!   `ack_wait` (or nak'ed) is delivered again (at least once). The first subscriber creates
//!   the durable with its options; later ones join it (a different subject is an error).
//! - Reading decodes and checks every message in one place ([`Subscription::next`]): stale
//!   envelopes are dropped (acked) and counted in `dropped_expired`; malformed ones come out
//!   as errors (and are terminated, never redelivered) and the subscription carries on.
//!
//! This module must not know any backend: backends hand [`Subscription::new`] a stream of
//! raw deliveries and an [`Acknowledge`] per durable delivery.

use crate::error::BusError;
use crate::subject::{Subject, check_durable};
use crate::wire::{Envelope, Kind};
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, Stream, StreamExt};
use serde::{Deserialize, Serialize};
use silk_core::Clock;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The message bus between hub and agents (in other systems: broker, message queue).
#[async_trait]
pub trait Bus: Send + Sync {
    /// The namespace every subject of this bus lives in (`silk` by default).
    fn namespace(&self) -> &str;

    /// Publishes `envelope` on `subject`, retrying retryable failures (see the module doc).
    async fn publish(&self, subject: &Subject, envelope: &Envelope) -> Result<(), BusError>;

    /// Publishes bytes that are not checked (for bridges, tools and tests: readers decode
    /// them like any message). Not de-duplicated. Retries like `publish`.
    async fn publish_raw(&self, subject: &Subject, payload: Bytes) -> Result<(), BusError>;

    /// Subscribes to `subject` (a wildcard is allowed), retrying retryable failures.
    async fn subscribe(
        &self,
        subject: &Subject,
        opts: SubscribeOpts,
    ) -> Result<Subscription, BusError>;
}

/// Where a new subscription starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Deliver {
    /// Only messages published after the subscription (or the durable) was created.
    New,
    /// Every message still stored on the subject, then new ones. For a durable this applies
    /// when it is created; an existing durable resumes where it was.
    All,
}

/// Options of [`Bus::subscribe`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscribeOpts {
    /// Name of a durable subscription: messages published while nobody listens are kept and
    /// delivered later; several subscribers with the same name share the work. `None` = a
    /// plain (fan-out, live) subscription.
    pub durable: Option<String>,
    /// Where to start.
    pub deliver: Deliver,
    /// For a durable being created: how long a delivery may stay unacked before it is
    /// delivered again. `None` = the bus's `ack_wait_ms`.
    pub ack_wait_ms: Option<u64>,
    /// For a durable: how many messages a subscriber may hold unacked at once (a NATS pull
    /// batch). 1 (the default) shares work finest between subscribers of one durable; a
    /// high-volume reader (the hub's results) raises it so that a message does not cost a
    /// round trip. Every held message's ack timer runs, so keep `batch` well below what the
    /// reader handles within `ack_wait`.
    pub batch: usize,
}

impl SubscribeOpts {
    /// A plain live subscription: fan-out, from now on, no acks.
    pub fn live() -> Self {
        SubscribeOpts {
            durable: None,
            deliver: Deliver::New,
            ack_wait_ms: None,
            batch: 1,
        }
    }

    /// A durable subscription named `name`, starting (when created) with every stored message.
    pub fn durable(name: impl Into<String>) -> Self {
        SubscribeOpts {
            durable: Some(name.into()),
            deliver: Deliver::All,
            ack_wait_ms: None,
            batch: 1,
        }
    }

    /// Sets where to start.
    pub fn deliver(mut self, deliver: Deliver) -> Self {
        self.deliver = deliver;
        self
    }

    /// Sets the ack wait of a durable being created.
    pub fn ack_wait_ms(mut self, ms: u64) -> Self {
        self.ack_wait_ms = Some(ms);
        self
    }

    /// Sets the pull batch of a durable (at least 1).
    pub fn batch(mut self, batch: usize) -> Self {
        self.batch = batch.max(1);
        self
    }

    /// Checks the options against a subject, the same way for every bus.
    pub fn check(&self, subject: &Subject) -> Result<(), BusError> {
        if let Some(name) = &self.durable {
            check_durable(name)?;
        }
        if !subject.is_persisted() && (self.durable.is_some() || self.deliver == Deliver::All) {
            return Err(BusError::NotPersisted {
                subject: subject.to_string(),
            });
        }
        Ok(())
    }
}

/// Retries of `publish` and `subscribe`: `retries` more attempts after the first, waiting
/// `backoff_initial_ms`, then twice as long each time, at most `backoff_max_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RetryPolicy {
    /// Attempts after the first (N of the failure matrix).
    pub retries: u32,
    /// First wait.
    pub backoff_initial_ms: u64,
    /// Longest wait.
    pub backoff_max_ms: u64,
}

/// The default tries for about 11 s (waits of 0.1, 0.2, 0.4, 0.8, 1.6, 3.2 and 5 s): long
/// enough to ride out a restart of the bus server, after which a hub's run would fail
/// ("bus publish from the hub" in the failure matrix).
impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            retries: 7,
            backoff_initial_ms: 100,
            backoff_max_ms: 5_000,
        }
    }
}

impl RetryPolicy {
    /// The wait after failed attempt number `attempt` (1-based).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u64
            .checked_shl(attempt.saturating_sub(1))
            .unwrap_or(u64::MAX);
        Duration::from_millis(
            self.backoff_initial_ms
                .saturating_mul(factor)
                .min(self.backoff_max_ms),
        )
    }

    /// Runs `attempt` until it succeeds, fails permanently, or `retries + 1` attempts failed.
    pub async fn run<T, F, Fut>(
        &self,
        operation: &'static str,
        subject: &str,
        mut attempt: F,
    ) -> Result<T, BusError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, BusError>>,
    {
        let attempts = self.retries.saturating_add(1);
        let mut n = 0;
        loop {
            n += 1;
            match attempt().await {
                Ok(v) => return Ok(v),
                Err(e) if !e.is_retryable() => return Err(e),
                Err(e) if n >= attempts => {
                    return Err(BusError::Exhausted {
                        operation,
                        subject: subject.to_owned(),
                        attempts: n,
                        last: Box::new(e),
                    });
                }
                Err(e) => {
                    tracing::debug!(operation, subject, attempt = n, error = %e, "bus operation failed, retrying");
                    tokio::time::sleep(self.backoff(n)).await;
                }
            }
        }
    }
}

/// Settings shared by both buses. Durations are in ms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BusConfig {
    /// Prefix of every subject, and (upper-cased) the JetStream stream name. One per Silk
    /// cluster; tests use a fresh one each.
    pub namespace: String,
    /// Retries of publish and subscribe.
    pub retry: RetryPolicy,
    /// Default ack wait of durables.
    pub ack_wait_ms: u64,
    /// How long one attempt waits for the server (JetStream ack, API reply) before it counts
    /// as failed (retryable).
    pub operation_timeout_ms: u64,
    /// A publish retried with the same envelope id within this window is stored once.
    pub duplicate_window_ms: u64,
    /// Stream limit: messages older than this are removed (acked or not).
    pub max_age_ms: u64,
    /// Stream limit: above this many bytes the oldest messages are removed. `None` = no limit.
    pub max_bytes: Option<u64>,
    /// Largest accepted message (NATS' default `max_payload` is 1 MiB).
    pub max_message_bytes: usize,
    /// NATS: longest wait between reconnect attempts (the client reconnects forever).
    pub reconnect_backoff_max_ms: u64,
    /// NATS: copies of the stream in a JetStream cluster (1 on a single server).
    pub replicas: usize,
    /// In-process: messages buffered per plain subscriber before new ones are dropped for it
    /// (a slow plain subscriber loses messages, as on NATS; durables never do).
    pub live_buffer: usize,
}

impl Default for BusConfig {
    fn default() -> Self {
        Self {
            namespace: "silk".into(),
            retry: RetryPolicy::default(),
            ack_wait_ms: 30_000,
            operation_timeout_ms: 5_000,
            duplicate_window_ms: 120_000,
            max_age_ms: 24 * 3_600_000,
            max_bytes: None,
            max_message_bytes: 1 << 20,
            reconnect_backoff_max_ms: 4_000,
            replicas: 1,
            live_buffer: 4_096,
        }
    }
}

impl BusConfig {
    /// The default config with another namespace.
    pub fn with_namespace(namespace: impl Into<String>) -> Self {
        BusConfig {
            namespace: namespace.into(),
            ..BusConfig::default()
        }
    }

    /// Checks a publish against the subject and size limit, the same way for every bus.
    pub fn check_publish(
        &self,
        subject: &Subject,
        kind: Option<Kind>,
        size_bytes: usize,
    ) -> Result<(), BusError> {
        if subject.is_wildcard() {
            return Err(BusError::WrongSubject {
                subject: subject.full(&self.namespace),
                kind: "wildcard".into(),
            });
        }
        if let Some(kind) = kind
            && !subject.class().carries(kind)
        {
            return Err(BusError::WrongSubject {
                subject: subject.full(&self.namespace),
                kind: kind.as_str().into(),
            });
        }
        if size_bytes > self.max_message_bytes {
            return Err(BusError::TooLarge {
                subject: subject.full(&self.namespace),
                size_bytes,
                max_bytes: self.max_message_bytes,
            });
        }
        Ok(())
    }
}

/// Acknowledges one durable delivery (implemented by each backend).
#[async_trait]
pub trait Acknowledge: Send + Sync {
    /// Done: never deliver again.
    async fn ack(&self) -> Result<(), BusError>;
    /// Not done: deliver again now.
    async fn nak(&self) -> Result<(), BusError>;
    /// Unreadable: never deliver again (used for malformed messages).
    async fn term(&self) -> Result<(), BusError>;
}

/// A delivery as a backend produces it, before decoding.
pub struct RawDelivery {
    /// The subject, relative to the namespace.
    pub subject: String,
    /// The payload.
    pub payload: Bytes,
    /// 1 for the first delivery, 2 for the first redelivery, …
    pub delivered: u32,
    /// `Some` for durable deliveries.
    pub acker: Option<Box<dyn Acknowledge>>,
}

/// Counters of one subscription; clones share them.
#[derive(Debug, Clone, Default)]
pub struct SubscriptionStats {
    dropped_expired: Arc<AtomicU64>,
    malformed: Arc<AtomicU64>,
}

impl SubscriptionStats {
    /// Stale messages dropped when read.
    pub fn dropped_expired(&self) -> u64 {
        self.dropped_expired.load(Ordering::Relaxed)
    }
    /// Malformed messages returned as errors.
    pub fn malformed(&self) -> u64 {
        self.malformed.load(Ordering::Relaxed)
    }
}

/// A stream of [`Delivery`]s. Read it with [`Subscription::next`] or turn it into a
/// [`Stream`] with [`Subscription::into_stream`]. Dropping it unsubscribes (a durable keeps
/// its position and its unacked messages for the next subscriber).
pub struct Subscription {
    namespace: String,
    source: BoxStream<'static, Result<RawDelivery, BusError>>,
    clock: Arc<dyn Clock>,
    stats: SubscriptionStats,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("namespace", &self.namespace)
            .field("stats", &self.stats)
            .finish()
    }
}

impl Subscription {
    /// Wraps a backend's raw deliveries; `clock` decides staleness.
    pub fn new(
        namespace: impl Into<String>,
        source: impl Stream<Item = Result<RawDelivery, BusError>> + Send + 'static,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Subscription {
            namespace: namespace.into(),
            source: source.boxed(),
            clock,
            stats: SubscriptionStats::default(),
        }
    }

    /// The next fresh, well-formed delivery; `Some(Err(_))` for a malformed message (the
    /// subscription goes on) or a backend error; `None` when the bus closed it.
    pub async fn next(&mut self) -> Option<Result<Delivery, BusError>> {
        loop {
            let raw = match self.source.next().await? {
                Ok(raw) => raw,
                Err(e) => return Some(Err(e)),
            };
            let full = format!("{}.{}", self.namespace, raw.subject);
            let decoded = Subject::parse(&raw.subject)
                .map_err(|e| BusError::malformed(&full, e.to_string()))
                .and_then(|subject| Envelope::decode(&full, &raw.payload).map(|env| (subject, env)))
                .and_then(|(subject, env)| {
                    if subject.class().carries(env.kind()) {
                        Ok((subject, env))
                    } else {
                        Err(BusError::malformed(
                            &full,
                            format!(
                                "a `{}` message on a `{}` subject",
                                env.kind(),
                                subject.class().kind()
                            ),
                        ))
                    }
                });
            match decoded {
                Err(e) => {
                    self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                    if let Some(acker) = &raw.acker
                        && let Err(term) = acker.term().await
                    {
                        tracing::debug!(subject = %full, error = %term, "could not terminate a malformed message");
                    }
                    return Some(Err(e));
                }
                Ok((_, envelope)) if envelope.expired(self.clock.now_ms()) => {
                    self.stats.dropped_expired.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(subject = %full, id = %envelope.id, kind = %envelope.kind(), "dropped a stale message");
                    if let Some(acker) = &raw.acker
                        && let Err(e) = acker.ack().await
                    {
                        tracing::debug!(subject = %full, error = %e, "could not ack a stale message");
                    }
                }
                Ok((subject, envelope)) => {
                    return Some(Ok(Delivery {
                        subject,
                        envelope,
                        delivered: raw.delivered,
                        acker: raw.acker,
                    }));
                }
            }
        }
    }

    /// The counters of this subscription (a handle that stays valid after `into_stream`).
    pub fn stats(&self) -> SubscriptionStats {
        self.stats.clone()
    }

    /// Stale messages dropped so far.
    pub fn dropped_expired(&self) -> u64 {
        self.stats.dropped_expired()
    }

    /// Malformed messages seen so far.
    pub fn malformed(&self) -> u64 {
        self.stats.malformed()
    }

    /// The subscription as a [`Stream`].
    pub fn into_stream(self) -> BoxStream<'static, Result<Delivery, BusError>> {
        futures::stream::unfold(
            self,
            |mut sub| async move { sub.next().await.map(|d| (d, sub)) },
        )
        .boxed()
    }
}

/// One message read from a subscription.
pub struct Delivery {
    /// The concrete subject it was published on (relative to the namespace).
    pub subject: Subject,
    /// The message.
    pub envelope: Envelope,
    /// 1 for the first delivery, more for redeliveries (always 1 on plain subscriptions).
    pub delivered: u32,
    acker: Option<Box<dyn Acknowledge>>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("subject", &self.subject)
            .field("envelope", &self.envelope)
            .field("delivered", &self.delivered)
            .field("durable", &self.acker.is_some())
            .finish()
    }
}

impl Delivery {
    /// Whether it came from a durable subscription (acks matter).
    pub fn is_durable(&self) -> bool {
        self.acker.is_some()
    }

    /// Done with it: a durable delivery is not delivered again. A no-op on plain ones.
    pub async fn ack(self) -> Result<(), BusError> {
        match &self.acker {
            Some(a) => a.ack().await,
            None => Ok(()),
        }
    }

    /// Not done: a durable delivery is delivered again at once (to any subscriber of the
    /// durable). A no-op on plain ones.
    pub async fn nak(self) -> Result<(), BusError> {
        match &self.acker {
            Some(a) => a.nak().await,
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = RetryPolicy {
            retries: 10,
            backoff_initial_ms: 100,
            backoff_max_ms: 1_000,
        };
        let waits: Vec<u64> = (1..=6).map(|n| p.backoff(n).as_millis() as u64).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1_000, 1_000]);
        assert_eq!(p.backoff(200).as_millis(), 1_000);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_then_exhausted_and_permanent_errors_are_not_retried() {
        let p = RetryPolicy {
            retries: 2,
            backoff_initial_ms: 10,
            backoff_max_ms: 10,
        };
        let calls = AtomicU32::new(0);
        let err = p
            .run("publish", "s", || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(BusError::unavailable("publish", "s", "down"))
            })
            .await
            .unwrap_err();
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert!(
            matches!(&err, BusError::Exhausted { attempts: 3, .. }),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "publish `s` failed after 3 attempts: bus unavailable: publish `s`: down"
        );

        calls.store(0, Ordering::SeqCst);
        let err = p
            .run("publish", "s", || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(BusError::Closed)
            })
            .await
            .unwrap_err();
        assert_eq!((calls.load(Ordering::SeqCst), err), (1, BusError::Closed));

        calls.store(0, Ordering::SeqCst);
        let ok = p
            .run("publish", "s", || async {
                if calls.fetch_add(1, Ordering::SeqCst) < 2 {
                    Err(BusError::unavailable("publish", "s", "down"))
                } else {
                    Ok(7)
                }
            })
            .await;
        assert_eq!(ok, Ok(7));
    }

    #[test]
    fn publish_checks() {
        let c = BusConfig {
            max_message_bytes: 10,
            ..BusConfig::default()
        };
        assert!(matches!(
            c.check_publish(&Subject::all_agent_commands(), Some(Kind::Command), 1),
            Err(BusError::WrongSubject { .. })
        ));
        let err = c
            .check_publish(&Subject::results(), Some(Kind::Heartbeat), 1)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "subject `silk.results` does not carry `heartbeat` messages"
        );
        assert!(matches!(
            c.check_publish(&Subject::results(), None, 11),
            Err(BusError::TooLarge { .. })
        ));
        c.check_publish(&Subject::results(), Some(Kind::Result), 10)
            .unwrap();
    }

    #[test]
    fn subscribe_checks() {
        let hb = Subject::heartbeats();
        SubscribeOpts::live().check(&hb).unwrap();
        assert!(matches!(
            SubscribeOpts::durable("x").check(&hb),
            Err(BusError::NotPersisted { .. })
        ));
        assert!(
            SubscribeOpts::live()
                .deliver(Deliver::All)
                .check(&hb)
                .is_err()
        );
        assert!(
            SubscribeOpts::durable("a.b")
                .check(&Subject::results())
                .is_err()
        );
    }
}
