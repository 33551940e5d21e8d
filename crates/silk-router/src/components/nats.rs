//! NATS: `nats.JetStreamInbound` (a durable pull consumer, acknowledged after routing) and
//! `nats.NatsOutbound` (publish to a subject, through JetStream by default).
//!
//! # Inbound
//!
//! `init`: `url`, `stream` (must exist), `subject` (filter; default: the whole stream),
//! `durable` (consumer name; default `silk-router-{inbound}`), `ack_wait_ms` (30000),
//! `deliver` (`all` or `new`, for a consumer created now), `max_ack_pending` (1000). The
//! consumer is created if missing (explicit acks). `threads` messages are routed at once.
//! A message is acked only after `submit` returned `Ok`; while routing waits (an outbound
//! held by `max_lag`), the message is kept alive with "in progress" acks every
//! `ack_wait_ms / 2`; on an error it is nak'ed (redelivered after 1 s). A message that is not
//! a JSON object is recorded in the failure record and acked.
//!
//! # Outbound
//!
//! `init`: `url`, `subject`, `jetstream` (default true), `stream` and `consumer` (backlog
//! for `max_lag`), `timeout_ms` (5000). With JetStream a push is done when the server
//! acknowledged storing it; each message carries `Nats-Msg-Id` = `task_uuid:routed_count`,
//! so a push retried after a lost ack is stored once (within the stream's duplicate
//! window). The backlog is the named consumer's pending + unacknowledged messages, else the
//! stream's message count (right for a work-queue stream); the stream is `stream`, or the
//! one that captures `subject`. With `jetstream: false` it is a core publish (no backlog,
//! delivered to whoever listens now).

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer};
use async_trait::async_trait;
use futures::StreamExt;
use tokio::sync::OnceCell;

use crate::components::redis::backoff_ms;
use crate::error::RouterError;
use crate::read::InitReader;
use crate::redact;
use crate::registry::{
    Inbound, InboundContext, InboundFactory, Outbound, OutboundFactory, Outgoing,
};

fn url(init: &mut InitReader<'_>) -> Option<String> {
    let url = init.str("url")?;
    if url
        .split(',')
        .all(|u| u.parse::<async_nats::ServerAddr>().is_ok())
    {
        Some(url)
    } else {
        init.error(Some("url"), "not a NATS URL (`nats://host:4222`)");
        None
    }
}

async fn connect(url: &str, timeout: Duration) -> Result<async_nats::Client, RouterError> {
    async_nats::ConnectOptions::new()
        .name("silk-router")
        .connection_timeout(timeout)
        .request_timeout(Some(timeout))
        .max_reconnects(None)
        .connect(url)
        .await
        .map_err(|e| RouterError::Nats {
            target: redact(url),
            message: e.to_string(),
        })
}

/// `nats.NatsOutbound`.
pub(crate) struct NatsOutboundFactory;

impl OutboundFactory for NatsOutboundFactory {
    fn keys(&self) -> &'static [&'static str] {
        &[
            "url",
            "subject",
            "jetstream",
            "stream",
            "consumer",
            "timeout_ms",
        ]
    }

    fn build(&self, init: &mut InitReader<'_>) -> Option<Arc<dyn Outbound>> {
        let url = url(init);
        let subject = init.str("subject");
        let use_jetstream = init.opt_bool("jetstream").unwrap_or(true);
        let stream = init.opt_str("stream");
        let consumer = init.opt_str("consumer");
        let timeout_ms = init.opt_u64("timeout_ms").unwrap_or(5000).max(1);
        if !use_jetstream && (stream.is_some() || consumer.is_some()) {
            init.error(Some("stream"), "`stream`/`consumer` need `jetstream: true`");
        }
        let (url, subject) = (url?, subject?);
        Some(Arc::new(NatsOutbound {
            target: format!("{} subject {subject}", redact(&url)),
            url,
            subject,
            use_jetstream,
            stream: OnceCell::new(),
            stream_name: stream,
            consumer,
            timeout: Duration::from_millis(timeout_ms),
            client: OnceCell::new(),
        }))
    }
}

struct NatsOutbound {
    url: String,
    subject: String,
    target: String,
    use_jetstream: bool,
    stream_name: Option<String>,
    stream: OnceCell<String>,
    consumer: Option<String>,
    timeout: Duration,
    client: OnceCell<async_nats::Client>,
}

impl NatsOutbound {
    fn error(&self, message: impl std::fmt::Display) -> RouterError {
        RouterError::Nats {
            target: self.target.clone(),
            message: message.to_string(),
        }
    }

    async fn client(&self) -> Result<&async_nats::Client, RouterError> {
        self.client
            .get_or_try_init(|| connect(&self.url, self.timeout))
            .await
    }
}

#[async_trait]
impl Outbound for NatsOutbound {
    fn target(&self) -> String {
        self.target.clone()
    }

    fn has_backlog(&self) -> bool {
        self.use_jetstream
    }

    async fn push(&self, batch: &[Outgoing]) -> Vec<Result<(), RouterError>> {
        let client = match self.client().await {
            Ok(c) => c.clone(),
            Err(e) => return batch.iter().map(|_| Err(e.clone())).collect(),
        };
        if !self.use_jetstream {
            let mut results: Vec<Result<(), RouterError>> = Vec::with_capacity(batch.len());
            for out in batch {
                results.push(
                    client
                        .publish(self.subject.clone(), out.payload.clone())
                        .await
                        .map_err(|e| self.error(e)),
                );
            }
            if let Err(e) = client.flush().await {
                return batch.iter().map(|_| Err(self.error(&e))).collect();
            }
            return results;
        }
        let js = jetstream::new(client);
        let mut pending = Vec::with_capacity(batch.len());
        for out in batch {
            // A header value cannot hold a line break (the client would panic on it); a
            // task's `task_uuid` or an item's key comes from outside.
            if out.delivery_id.contains(['\r', '\n']) {
                pending.push(Err(RouterError::Refused {
                    target: self.target.clone(),
                    message:
                        "its delivery id holds a line break, which a Nats-Msg-Id header cannot"
                            .into(),
                }));
                continue;
            }
            let message = jetstream::message::PublishMessage::build()
                .payload(out.payload.clone())
                .message_id(&out.delivery_id);
            let sent = js.send_publish(self.subject.clone(), message).await;
            pending.push(sent.map_err(|e| self.error(e)));
        }
        let mut results = Vec::with_capacity(batch.len());
        for sent in pending {
            results.push(match sent {
                Ok(ack) => match tokio::time::timeout(self.timeout, ack).await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(self.error(e)),
                    Err(_) => Err(self.error("no acknowledgement from JetStream in time")),
                },
                Err(e) => Err(e),
            });
        }
        results
    }

    async fn backlog(&self) -> Result<Option<u64>, RouterError> {
        if !self.use_jetstream {
            return Ok(None);
        }
        let js = jetstream::new(self.client().await?.clone());
        let name = self
            .stream
            .get_or_try_init(|| async {
                match &self.stream_name {
                    Some(name) => Ok(name.clone()),
                    None => js
                        .stream_by_subject(self.subject.clone())
                        .await
                        .map_err(|e| self.error(e)),
                }
            })
            .await?;
        let stream = js.get_stream(name).await.map_err(|e| self.error(e))?;
        match &self.consumer {
            Some(consumer) => {
                let info = stream
                    .consumer_info(consumer)
                    .await
                    .map_err(|e| self.error(e))?;
                Ok(Some(info.num_pending + info.num_ack_pending as u64))
            }
            None => {
                let info = stream.get_info().await.map_err(|e| self.error(e))?;
                Ok(Some(info.state.messages))
            }
        }
    }
}

/// `nats.JetStreamInbound`.
pub(crate) struct JetStreamInboundFactory;

impl InboundFactory for JetStreamInboundFactory {
    fn keys(&self) -> &'static [&'static str] {
        &[
            "url",
            "stream",
            "subject",
            "durable",
            "ack_wait_ms",
            "deliver",
            "max_ack_pending",
        ]
    }

    fn build(&self, init: &mut InitReader<'_>) -> Option<Arc<dyn Inbound>> {
        let url = url(init);
        let stream = init.str("stream");
        let subject = init.opt_str("subject");
        let durable = init.opt_str("durable").unwrap_or_else(|| {
            let name: String = init
                .rule_name()
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            format!("silk-router-{name}")
        });
        let ack_wait_ms = init.opt_u64("ack_wait_ms").unwrap_or(30_000).max(1000);
        let deliver = match init.opt_str("deliver").as_deref() {
            None | Some("all") => consumer::DeliverPolicy::All,
            Some("new") => consumer::DeliverPolicy::New,
            Some(_) => {
                init.error(Some("deliver"), "expected `all` or `new`");
                return None;
            }
        };
        let max_ack_pending = init.opt_u64("max_ack_pending").unwrap_or(1000).max(1);
        let (url, stream) = (url?, stream?);
        Some(Arc::new(JetStreamInbound {
            source: format!(
                "{} stream {stream}{}",
                redact(&url),
                subject
                    .as_ref()
                    .map_or(String::new(), |s| format!(" subject {s}"))
            ),
            url,
            stream,
            subject,
            durable,
            ack_wait: Duration::from_millis(ack_wait_ms),
            deliver,
            max_ack_pending: max_ack_pending as i64,
        }))
    }
}

struct JetStreamInbound {
    url: String,
    source: String,
    stream: String,
    subject: Option<String>,
    durable: String,
    ack_wait: Duration,
    deliver: consumer::DeliverPolicy,
    max_ack_pending: i64,
}

#[async_trait]
impl Inbound for JetStreamInbound {
    fn source(&self) -> String {
        self.source.clone()
    }

    async fn run(self: Arc<Self>, ctx: InboundContext) -> Result<(), RouterError> {
        let mut failures = 0u32;
        while !ctx.is_stopping() {
            match self.consume(&ctx).await {
                Ok(()) => failures = 0,
                Err(e) => {
                    failures += 1;
                    if failures == 1 || failures.is_multiple_of(30) {
                        tracing::warn!(inbound = ctx.name(), source = %self.source, error = %e, "consumer failed; retrying");
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(backoff_ms(failures))) => {}
                        _ = ctx.stopping() => {}
                    }
                }
            }
        }
        Ok(())
    }
}

impl JetStreamInbound {
    fn error(&self, message: impl std::fmt::Display) -> RouterError {
        RouterError::Nats {
            target: self.source.clone(),
            message: message.to_string(),
        }
    }

    /// Opens the consumer and routes messages until shutdown (or an error).
    async fn consume(&self, ctx: &InboundContext) -> Result<(), RouterError> {
        let client = connect(&self.url, Duration::from_secs(5)).await?;
        let js = jetstream::new(client);
        let stream = js
            .get_stream(&self.stream)
            .await
            .map_err(|e| self.error(e))?;
        let config = consumer::pull::Config {
            durable_name: Some(self.durable.clone()),
            filter_subject: self.subject.clone().unwrap_or_default(),
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: self.ack_wait,
            deliver_policy: self.deliver,
            max_ack_pending: self.max_ack_pending,
            ..Default::default()
        };
        let consumer: consumer::PullConsumer = stream
            .get_or_create_consumer(&self.durable, config)
            .await
            .map_err(|e| self.error(e))?;
        let threads = ctx.threads();
        let messages = consumer
            .stream()
            .max_messages_per_batch(threads.max(1) * 2)
            .messages()
            .await
            .map_err(|e| self.error(e))?;
        let progress_every = self.ack_wait / 2;
        messages
            .take_until(ctx.stopping())
            .for_each_concurrent(threads, |message| async move {
                let message = match message {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::warn!(inbound = ctx.name(), error = %e, "message stream error");
                        return;
                    }
                };
                let routed = ctx.submit_bytes(&message.payload);
                tokio::pin!(routed);
                let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + progress_every, progress_every);
                let result = loop {
                    tokio::select! {
                        r = &mut routed => break r,
                        _ = tick.tick() => {
                            let _ = message.ack_with(AckKind::Progress).await;
                        }
                    }
                };
                let ack = match &result {
                    Ok(_) => message.double_ack().await,
                    Err(e) => {
                        if !matches!(e, RouterError::ShuttingDown) {
                            tracing::warn!(inbound = ctx.name(), error = %e, "task not routed; nak (redelivered in 1 s)");
                        }
                        message.ack_with(AckKind::Nak(Some(Duration::from_secs(1)))).await
                    }
                };
                if let Err(e) = ack {
                    tracing::warn!(inbound = ctx.name(), error = %e, "ack failed; the message will be redelivered");
                }
            })
            .await;
        Ok(())
    }
}
