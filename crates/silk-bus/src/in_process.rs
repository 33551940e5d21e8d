//! [`InProcessBus`]: the bus of the embedded mode (`silk up`), in memory, with the same
//! semantics as the JetStream layout of `nats` so that the one conformance suite holds for
//! both. It must not be used across processes, and keeps nothing across restarts.
//!
//! Model (a small JetStream): one broker holds a log of the messages of persisted subjects
//! (sequence numbers, limits `max_age_ms` / `max_bytes`, oldest removed first), a
//! de-duplication window on envelope ids, plain live subscribers (bounded channels, fan-out,
//! a full channel drops the message for that subscriber), and consumers: a durable is a
//! cursor into the log plus its pending (delivered, unacked) messages with their ack
//! deadlines and a redelivery queue; subscribers pull from it one message at a time, so
//! several subscribers of one durable share the work. A non-durable `Deliver::All`
//! subscription is an ephemeral consumer without acks, removed when it is dropped.
//!
//! Payloads are stored encoded (JSON bytes), so that decoding, unknown fields and malformed
//! messages behave as on NATS. Clones of an [`InProcessBus`] share the broker;
//! [`InProcessBus::attach`] makes another client (own config and clock) on the same broker.
//! [`InProcessBus::set_available`] switches the broker off and on, for failure tests.

use crate::bus::{Acknowledge, Bus, BusConfig, Deliver, RawDelivery, SubscribeOpts, Subscription};
use crate::error::BusError;
use crate::subject::{Subject, check_namespace};
use crate::wire::{Envelope, MessageId};
use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::{Mutex, MutexGuard};
use silk_core::{Clock, SystemClock};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

/// The in-process bus. Cheap to clone; clones share the broker.
#[derive(Clone)]
pub struct InProcessBus {
    broker: Arc<Broker>,
    config: BusConfig,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for InProcessBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcessBus")
            .field("config", &self.config)
            .finish()
    }
}

struct Broker {
    state: Mutex<State>,
    /// Woken on every change a waiting consumer may care about.
    changed: Notify,
    available: AtomicBool,
    next_ephemeral: AtomicU64,
    /// Stream limits and de-duplication window, from the config of the first client.
    max_age: Duration,
    max_bytes: Option<u64>,
    duplicate_window: Duration,
}

struct Stored {
    seq: u64,
    subject: Subject,
    payload: Bytes,
    stored_at: Instant,
}

struct Live {
    filter: Subject,
    tx: mpsc::Sender<(Subject, Bytes)>,
}

struct Pending {
    deadline: Instant,
    delivered: u32,
}

struct Consumer {
    filter: Subject,
    ack_wait: Duration,
    /// False for ephemeral replay consumers: a delivery is done when handed out.
    acks: bool,
    /// Next log sequence to look at.
    cursor: u64,
    pending: BTreeMap<u64, Pending>,
    /// Ready to be delivered again, with the deliveries so far.
    redeliver: BTreeMap<u64, u32>,
}

#[derive(Default)]
struct State {
    log: VecDeque<Stored>,
    /// Sequence of the next stored message (the first is 1).
    next_seq: u64,
    log_bytes: u64,
    live: Vec<Live>,
    consumers: HashMap<String, Consumer>,
    seen_ids: HashMap<MessageId, Instant>,
    seen_order: VecDeque<(Instant, MessageId)>,
}

enum Take {
    Got(RawDelivery),
    /// Nothing now; something may become due at this instant (an ack deadline).
    Wait(Option<Instant>),
    /// The consumer no longer exists.
    Gone,
}

impl State {
    fn first_seq(&self) -> u64 {
        self.log.front().map_or(self.next_seq, |m| m.seq)
    }

    fn get(&self, seq: u64) -> Option<&Stored> {
        let first = self.first_seq();
        seq.checked_sub(first)
            .and_then(|i| self.log.get(i as usize))
    }

    /// Removes what the limits no longer allow (oldest first), as JetStream's discard-old.
    fn enforce_limits(&mut self, now: Instant, max_age: Duration, max_bytes: Option<u64>) {
        while let Some(front) = self.log.front() {
            let too_old = now.duration_since(front.stored_at) > max_age;
            let too_big = max_bytes.is_some_and(|max| self.log_bytes > max);
            if !(too_old || too_big) {
                break;
            }
            self.log_bytes -= front.payload.len() as u64;
            self.log.pop_front();
        }
        let first = self.first_seq();
        for c in self.consumers.values_mut() {
            c.cursor = c.cursor.max(first);
            c.pending.retain(|seq, _| *seq >= first);
            c.redeliver.retain(|seq, _| *seq >= first);
        }
    }

    /// True when `id` was stored within the window (and records it otherwise).
    fn is_duplicate(&mut self, id: &MessageId, now: Instant, window: Duration) -> bool {
        while let Some((at, old)) = self.seen_order.front() {
            if now.duration_since(*at) <= window {
                break;
            }
            if self.seen_ids.get(old) == Some(at) {
                self.seen_ids.remove(old);
            }
            self.seen_order.pop_front();
        }
        if self.seen_ids.contains_key(id) {
            return true;
        }
        self.seen_ids.insert(id.clone(), now);
        self.seen_order.push_back((now, id.clone()));
        false
    }

    fn take(&mut self, name: &str, now: Instant, broker: &Arc<Broker>) -> Take {
        let first = self.first_seq();
        let Some(c) = self.consumers.get_mut(name) else {
            return Take::Gone;
        };
        let due: Vec<u64> = c
            .pending
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(s, _)| *s)
            .collect();
        for seq in due {
            if let Some(p) = c.pending.remove(&seq) {
                c.redeliver.insert(seq, p.delivered);
            }
        }
        let mut next = c.redeliver.pop_first().map(|(seq, n)| (seq, n + 1));
        if next.is_none() {
            c.cursor = c.cursor.max(first);
            let skip = (c.cursor - first) as usize;
            if let Some(m) = self
                .log
                .range(skip..)
                .find(|m| c.filter.matches(&m.subject))
            {
                next = Some((m.seq, 1));
                c.cursor = m.seq + 1;
            } else {
                c.cursor = self.next_seq;
            }
        }
        let Some((seq, delivered)) = next else {
            return Take::Wait(c.pending.values().map(|p| p.deadline).min());
        };
        let acks = c.acks;
        if acks {
            c.pending.insert(
                seq,
                Pending {
                    deadline: now + c.ack_wait,
                    delivered,
                },
            );
        }
        let Some(m) = self.get(seq) else {
            return Take::Wait(None);
        };
        let acker: Option<Box<dyn Acknowledge>> = acks.then(|| {
            Box::new(InProcessAck {
                broker: broker.clone(),
                consumer: name.to_owned(),
                seq,
            }) as _
        });
        Take::Got(RawDelivery {
            subject: m.subject.as_str().to_owned(),
            payload: m.payload.clone(),
            delivered,
            acker,
        })
    }
}

impl Broker {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the state half-updated in a way that
        // matters more than losing the bus, so a poisoned lock is used as is.
        self.state.lock()
    }

    fn check_available(&self, operation: &'static str, subject: &str) -> Result<(), BusError> {
        if self.available.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(BusError::unavailable(
                operation,
                subject,
                "in-process bus switched off",
            ))
        }
    }
}

impl InProcessBus {
    /// A new broker and a client on it, with the system clock.
    pub fn new(config: BusConfig) -> Result<Self, BusError> {
        Self::with_clock(config, Arc::new(SystemClock))
    }

    /// A new broker and a client on it; `clock` decides message staleness.
    pub fn with_clock(config: BusConfig, clock: Arc<dyn Clock>) -> Result<Self, BusError> {
        check_namespace(&config.namespace)?;
        let broker = Broker {
            state: Mutex::new(State {
                next_seq: 1,
                ..State::default()
            }),
            changed: Notify::new(),
            available: AtomicBool::new(true),
            next_ephemeral: AtomicU64::new(0),
            max_age: Duration::from_millis(config.max_age_ms),
            max_bytes: config.max_bytes,
            duplicate_window: Duration::from_millis(config.duplicate_window_ms),
        };
        Ok(InProcessBus {
            broker: Arc::new(broker),
            config,
            clock,
        })
    }

    /// Another client on the same broker, with its own retry/ack settings and clock (the
    /// stream limits stay those of the broker).
    pub fn attach(&self, config: BusConfig, clock: Arc<dyn Clock>) -> Result<Self, BusError> {
        check_namespace(&config.namespace)?;
        Ok(InProcessBus {
            broker: self.broker.clone(),
            config,
            clock,
        })
    }

    /// Switches the broker off (every publish and subscribe attempt fails with a retryable
    /// error, subscriptions wait) or on again. For failure tests.
    pub fn set_available(&self, available: bool) {
        self.broker.available.store(available, Ordering::SeqCst);
        self.broker.changed.notify_waiters();
    }

    fn publish_once(
        &self,
        subject: &Subject,
        payload: &Bytes,
        id: Option<&MessageId>,
    ) -> Result<(), BusError> {
        let b = &self.broker;
        b.check_available("publish", &subject.full(&self.config.namespace))?;
        let now = Instant::now();
        {
            let mut st = b.lock();
            if subject.is_persisted() {
                if let Some(id) = id
                    && st.is_duplicate(id, now, b.duplicate_window)
                {
                    return Ok(());
                }
                let seq = st.next_seq;
                st.next_seq += 1;
                st.log_bytes += payload.len() as u64;
                st.log.push_back(Stored {
                    seq,
                    subject: subject.clone(),
                    payload: payload.clone(),
                    stored_at: now,
                });
                st.enforce_limits(now, b.max_age, b.max_bytes);
            }
            st.live.retain(|l| {
                if !l.filter.matches(subject) {
                    return !l.tx.is_closed();
                }
                match l.tx.try_send((subject.clone(), payload.clone())) {
                    Ok(()) => true,
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        tracing::warn!(subject = %subject, "slow plain subscriber: message dropped for it");
                        true
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => false,
                }
            });
        }
        b.changed.notify_waiters();
        Ok(())
    }

    fn subscribe_once(
        &self,
        subject: &Subject,
        opts: &SubscribeOpts,
    ) -> Result<Subscription, BusError> {
        let b = &self.broker;
        b.check_available("subscribe", &subject.full(&self.config.namespace))?;
        let ns = self.config.namespace.clone();
        if opts.durable.is_none() && opts.deliver == Deliver::New {
            let (tx, mut rx) = mpsc::channel(self.config.live_buffer.max(1));
            b.lock().live.push(Live {
                filter: subject.clone(),
                tx,
            });
            let source = futures::stream::poll_fn(move |cx| {
                rx.poll_recv(cx).map(|m| {
                    m.map(|(subject, payload)| {
                        Ok(RawDelivery {
                            subject: subject.as_str().to_owned(),
                            payload,
                            delivered: 1,
                            acker: None,
                        })
                    })
                })
            });
            return Ok(Subscription::new(ns, source, self.clock.clone()));
        }
        let (name, ephemeral) = match &opts.durable {
            Some(name) => (name.clone(), false),
            None => (
                format!(
                    "_ephemeral-{}",
                    b.next_ephemeral.fetch_add(1, Ordering::Relaxed)
                ),
                true,
            ),
        };
        {
            let mut st = b.lock();
            let next_seq = st.next_seq;
            let first = st.first_seq();
            match st.consumers.get(&name) {
                Some(c) if c.filter != *subject => {
                    return Err(BusError::DurableMismatch {
                        name,
                        existing: c.filter.full(&ns),
                        requested: subject.full(&ns),
                    });
                }
                Some(_) => {}
                None => {
                    let cursor = if opts.deliver == Deliver::All {
                        first
                    } else {
                        next_seq
                    };
                    let ack_wait =
                        Duration::from_millis(opts.ack_wait_ms.unwrap_or(self.config.ack_wait_ms));
                    st.consumers.insert(
                        name.clone(),
                        Consumer {
                            filter: subject.clone(),
                            ack_wait,
                            acks: !ephemeral,
                            cursor,
                            pending: BTreeMap::new(),
                            redeliver: BTreeMap::new(),
                        },
                    );
                }
            }
        }
        let pull = Puller {
            broker: b.clone(),
            name,
            ephemeral,
        };
        let source = futures::stream::unfold(pull, |pull| async move {
            let item = pull.next().await?;
            Some((Ok(item), pull))
        });
        Ok(Subscription::new(ns, source, self.clock.clone()))
    }
}

/// Pulls from one consumer; removes an ephemeral consumer when dropped.
struct Puller {
    broker: Arc<Broker>,
    name: String,
    ephemeral: bool,
}

impl Puller {
    async fn next(&self) -> Option<RawDelivery> {
        let b = &self.broker;
        loop {
            let changed = b.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let wait = if b.available.load(Ordering::SeqCst) {
                match b.lock().take(&self.name, Instant::now(), b) {
                    Take::Got(raw) => return Some(raw),
                    Take::Gone => return None,
                    Take::Wait(deadline) => deadline,
                }
            } else {
                None
            };
            match wait {
                Some(deadline) => {
                    tokio::select! {
                        () = &mut changed => {}
                        () = tokio::time::sleep_until(deadline) => {}
                    }
                }
                None => changed.await,
            }
        }
    }
}

impl Drop for Puller {
    fn drop(&mut self) {
        if self.ephemeral {
            self.broker.lock().consumers.remove(&self.name);
        }
    }
}

struct InProcessAck {
    broker: Arc<Broker>,
    consumer: String,
    seq: u64,
}

impl InProcessAck {
    fn settle(&self, redeliver: bool) -> Result<(), BusError> {
        self.broker.check_available("ack", &self.consumer)?;
        {
            let mut st = self.broker.lock();
            let Some(c) = st.consumers.get_mut(&self.consumer) else {
                return Ok(());
            };
            let pending = c.pending.remove(&self.seq);
            if redeliver {
                if let Some(p) = pending {
                    c.redeliver.insert(self.seq, p.delivered);
                }
            } else {
                c.redeliver.remove(&self.seq);
            }
        }
        if redeliver {
            self.broker.changed.notify_waiters();
        }
        Ok(())
    }
}

#[async_trait]
impl Acknowledge for InProcessAck {
    async fn ack(&self) -> Result<(), BusError> {
        self.settle(false)
    }
    async fn nak(&self) -> Result<(), BusError> {
        self.settle(true)
    }
    async fn term(&self) -> Result<(), BusError> {
        self.settle(false)
    }
}

#[async_trait]
impl Bus for InProcessBus {
    fn namespace(&self) -> &str {
        &self.config.namespace
    }

    async fn publish(&self, subject: &Subject, envelope: &Envelope) -> Result<(), BusError> {
        let payload = envelope.encode()?;
        self.config
            .check_publish(subject, Some(envelope.kind()), payload.len())?;
        let full = subject.full(&self.config.namespace);
        self.config
            .retry
            .run("publish", &full, || async {
                self.publish_once(subject, &payload, Some(&envelope.id))
            })
            .await
    }

    async fn publish_raw(&self, subject: &Subject, payload: Bytes) -> Result<(), BusError> {
        self.config.check_publish(subject, None, payload.len())?;
        let full = subject.full(&self.config.namespace);
        self.config
            .retry
            .run("publish", &full, || async {
                self.publish_once(subject, &payload, None)
            })
            .await
    }

    async fn subscribe(
        &self,
        subject: &Subject,
        opts: SubscribeOpts,
    ) -> Result<Subscription, BusError> {
        opts.check(subject)?;
        let full = subject.full(&self.config.namespace);
        self.config
            .retry
            .run("subscribe", &full, || async {
                self.subscribe_once(subject, &opts)
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Control, TtlPolicy};
    use silk_core::RunId;

    fn control(n: u32) -> Envelope {
        TtlPolicy::default().envelope(
            Control::Stop {
                run: RunId::new(format!("r{n}")),
            },
            1,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn limits_remove_oldest_and_move_cursors() {
        let config = BusConfig {
            max_age_ms: 1_000,
            ..BusConfig::default()
        };
        let bus = InProcessBus::new(config).unwrap();
        let subject = Subject::run_control(&RunId::new("r")).unwrap();
        bus.publish(&subject, &control(1)).await.unwrap();
        tokio::time::advance(Duration::from_millis(1_500)).await;
        bus.publish(&subject, &control(2)).await.unwrap();
        let mut sub = bus
            .subscribe(&subject, SubscribeOpts::durable("d"))
            .await
            .unwrap();
        let d = sub.next().await.unwrap().unwrap();
        assert_eq!(
            d.envelope.body,
            control(2).body,
            "the message past max_age is gone"
        );
        assert_eq!(bus.broker.lock().log.len(), 1);
    }

    #[tokio::test]
    async fn duplicate_ids_are_stored_once() {
        let bus = InProcessBus::new(BusConfig::default()).unwrap();
        let subject = Subject::run_control(&RunId::new("r")).unwrap();
        let e = control(1);
        bus.publish(&subject, &e).await.unwrap();
        bus.publish(&subject, &e).await.unwrap();
        bus.publish_raw(&subject, e.encode().unwrap())
            .await
            .unwrap();
        assert_eq!(
            bus.broker.lock().log.len(),
            2,
            "raw publishes are not de-duplicated"
        );
    }

    #[tokio::test]
    async fn ephemeral_consumers_go_away_with_their_subscription() {
        let bus = InProcessBus::new(BusConfig::default()).unwrap();
        let sub = bus
            .subscribe(
                &Subject::results(),
                SubscribeOpts::live().deliver(Deliver::All),
            )
            .await
            .unwrap();
        assert_eq!(bus.broker.lock().consumers.len(), 1);
        drop(sub);
        assert_eq!(bus.broker.lock().consumers.len(), 0);
    }
}
