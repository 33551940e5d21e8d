//! Redis lists: `redis_queue.RedisListOutbound` (push) and `redis_queue.RedisListInbound`
//! (blocking pop).
//!
//! # Layout
//!
//! One Redis list per `key` holds task JSON texts. Consumers take tasks from the **head**
//! (`LPOP`/`BLPOP`). The outbound appends normal tasks at the tail (`RPUSH`) and puts
//! real-time tasks (`rt` true) at the head (`LPUSH`), so they are taken first; a batch is
//! one pipeline (`RPUSH key t1 t2 …` then `LPUSH key r1 r2 …`, which leaves the last
//! real-time task first, exactly as one `LPUSH` per task would). The backlog (`max_lag`) is
//! `LLEN key`.
//!
//! The inbound runs `threads` consumers, each on its own connection (a blocking pop holds
//! its connection), popping with `BLPOP key pop_timeout_s`. A pop in flight is never
//! cancelled (its task would be lost); shutdown waits for it, at most `pop_timeout_s`. A
//! task the router cannot take (target down, shutting down) is pushed back at the head
//! (`LPUSH`), so it is the next one taken and nothing is lost; a popped task is only in the
//! router's memory while it is routed (a crash then loses at most `threads` tasks; Redis
//! has no acknowledgement for plain lists).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use redis::AsyncCommands;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::error::RouterError;
use crate::read::InitReader;
use crate::redact;
use crate::registry::{Inbound, InboundFactory, Outbound, OutboundFactory, Outgoing};
use crate::router::InboundContext;

fn client(init: &mut InitReader<'_>) -> Option<(redis::Client, String)> {
    let url = init.str("url")?;
    match redis::Client::open(url.as_str()) {
        Ok(client) => Some((client, redact(&url))),
        Err(e) => {
            init.error(
                Some("url"),
                format!("not a Redis URL (`redis://host:port/db`): {}", e.kind_str()),
            );
            None
        }
    }
}

trait KindStr {
    fn kind_str(&self) -> String;
}

impl KindStr for redis::RedisError {
    fn kind_str(&self) -> String {
        // The error's text may quote the URL, which may hold a password.
        format!("{:?}", self.kind())
    }
}

/// `redis_queue.RedisListOutbound`: `url`, `key`, `timeout_ms` (default 5000).
pub(crate) struct RedisListOutboundFactory;

impl OutboundFactory for RedisListOutboundFactory {
    fn keys(&self) -> &'static [&'static str] {
        &["url", "key", "timeout_ms"]
    }

    fn build(&self, init: &mut InitReader<'_>) -> Option<Arc<dyn Outbound>> {
        let client = client(init);
        let key = init.str("key");
        let timeout_ms = init.opt_u64("timeout_ms").unwrap_or(5000).max(1);
        let ((client, url), key) = (client?, key?);
        Some(Arc::new(RedisListOutbound {
            target: format!("{url} list {key}"),
            client,
            key,
            timeout: Duration::from_millis(timeout_ms),
            conn: OnceLock::new(),
        }))
    }
}

struct RedisListOutbound {
    client: redis::Client,
    key: String,
    target: String,
    timeout: Duration,
    conn: OnceLock<ConnectionManager>,
}

impl RedisListOutbound {
    fn error(&self, e: redis::RedisError) -> RouterError {
        RouterError::Redis {
            target: self.target.clone(),
            message: format!("{:?}: {}", e.kind(), e.detail().unwrap_or("")),
        }
    }

    /// The shared connection, created on first use (a manager reconnects by itself).
    fn conn(&self) -> Result<ConnectionManager, RouterError> {
        if let Some(c) = self.conn.get() {
            return Ok(c.clone());
        }
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.timeout))
            .set_connection_timeout(Some(self.timeout))
            .set_number_of_retries(3)
            .set_max_delay(Duration::from_secs(2));
        let manager = ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            .map_err(|e| self.error(e))?;
        Ok(self.conn.get_or_init(|| manager).clone())
    }
}

#[async_trait]
impl Outbound for RedisListOutbound {
    fn target(&self) -> String {
        self.target.clone()
    }

    fn has_backlog(&self) -> bool {
        true
    }

    async fn push(&self, batch: &[Outgoing]) -> Vec<Result<(), RouterError>> {
        let all = |r: Result<(), RouterError>| batch.iter().map(|_| r.clone()).collect();
        let mut conn = match self.conn() {
            Ok(c) => c,
            Err(e) => return all(Err(e)),
        };
        let normal: Vec<&[u8]> = batch
            .iter()
            .filter(|o| !o.rt)
            .map(|o| o.payload.as_ref())
            .collect();
        let rt: Vec<&[u8]> = batch
            .iter()
            .filter(|o| o.rt)
            .map(|o| o.payload.as_ref())
            .collect();
        let mut pipe = redis::pipe();
        if !normal.is_empty() {
            pipe.rpush(&self.key, normal).ignore();
        }
        if !rt.is_empty() {
            pipe.lpush(&self.key, rt).ignore();
        }
        all(pipe
            .query_async::<()>(&mut conn)
            .await
            .map_err(|e| self.error(e)))
    }

    async fn backlog(&self) -> Result<Option<u64>, RouterError> {
        let mut conn = self.conn()?;
        let len: u64 = conn.llen(&self.key).await.map_err(|e| self.error(e))?;
        Ok(Some(len))
    }
}

/// `redis_queue.RedisListInbound`: `url`, `key`, `pop_timeout_s` (default 1).
pub(crate) struct RedisListInboundFactory;

impl InboundFactory for RedisListInboundFactory {
    fn keys(&self) -> &'static [&'static str] {
        &["url", "key", "pop_timeout_s"]
    }

    fn build(&self, init: &mut InitReader<'_>) -> Option<Arc<dyn Inbound>> {
        let client = client(init);
        let key = init.str("key");
        let pop_timeout_s = init.opt_u64("pop_timeout_s").unwrap_or(1).clamp(1, 60);
        let ((client, url), key) = (client?, key?);
        Some(Arc::new(RedisListInbound {
            source: format!("{url} list {key}"),
            client,
            key,
            pop_timeout_s,
        }))
    }
}

struct RedisListInbound {
    client: redis::Client,
    key: String,
    source: String,
    pop_timeout_s: u64,
}

#[async_trait]
impl Inbound for RedisListInbound {
    fn source(&self) -> String {
        self.source.clone()
    }

    async fn run(self: Arc<Self>, ctx: InboundContext) -> Result<(), RouterError> {
        let consumers = (0..ctx.threads()).map(|n| {
            let this = self.clone();
            let ctx = ctx.clone();
            tokio::spawn(async move { this.consume(n, ctx).await })
        });
        futures::future::join_all(consumers).await;
        Ok(())
    }
}

impl RedisListInbound {
    async fn connect(&self) -> Result<redis::aio::MultiplexedConnection, redis::RedisError> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(5)))
            .set_response_timeout(Some(Duration::from_secs(self.pop_timeout_s + 5)));
        self.client
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }

    /// Waits `ms` or until shutdown starts.
    async fn pause(ctx: &InboundContext, ms: u64) {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
            _ = ctx.stopping() => {}
        }
    }

    async fn consume(&self, n: usize, ctx: InboundContext) {
        let mut failures = 0u32;
        while !ctx.is_stopping() {
            let mut conn = match self.connect().await {
                Ok(c) => c,
                Err(e) => {
                    failures += 1;
                    if failures == 1 || failures.is_multiple_of(30) {
                        tracing::warn!(inbound = ctx.name(), consumer = n, source = %self.source, error = ?e.kind(), "cannot connect; retrying");
                    }
                    Self::pause(&ctx, backoff_ms(failures)).await;
                    continue;
                }
            };
            failures = 0;
            while !ctx.is_stopping() {
                let popped: Result<Option<(String, Vec<u8>)>, _> = redis::cmd("BLPOP")
                    .arg(&self.key)
                    .arg(self.pop_timeout_s)
                    .query_async(&mut conn)
                    .await;
                match popped {
                    Ok(None) => {}
                    Ok(Some((_, message))) => self.route(&ctx, &mut conn, message).await,
                    Err(e) => {
                        tracing::warn!(inbound = ctx.name(), consumer = n, error = ?e.kind(), "pop failed; reconnecting");
                        Self::pause(&ctx, 500).await;
                        break;
                    }
                }
            }
        }
    }

    /// Routes one popped task; on failure puts it back at the head of the list.
    async fn route(
        &self,
        ctx: &InboundContext,
        conn: &mut redis::aio::MultiplexedConnection,
        message: Vec<u8>,
    ) {
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let error = match ctx.submit_bytes(&message).await {
                Ok(_) => return,
                Err(e) => e,
            };
            let pushed_back: Result<(), _> = conn.lpush(&self.key, &message).await;
            match pushed_back {
                Ok(()) => {
                    if !matches!(error, RouterError::ShuttingDown) {
                        tracing::warn!(inbound = ctx.name(), error = %error, "task not routed; put back at the head of the list");
                        Self::pause(ctx, backoff_ms(attempt)).await;
                    }
                    return;
                }
                Err(e) if attempt < 20 => {
                    tracing::warn!(inbound = ctx.name(), error = %error, push_back_error = ?e.kind(), "task not routed and not put back; retrying");
                    tokio::time::sleep(Duration::from_millis(backoff_ms(attempt))).await;
                }
                Err(e) => {
                    tracing::error!(
                        inbound = ctx.name(),
                        error = %error,
                        push_back_error = ?e.kind(),
                        task = %String::from_utf8_lossy(&message),
                        "task lost: neither routed nor put back after 20 attempts"
                    );
                    return;
                }
            }
        }
    }
}

/// 100 ms doubling to at most 30 s.
pub(crate) fn backoff_ms(attempt: u32) -> u64 {
    (100u64 << attempt.min(9)).min(30_000)
}
