//! Redis lists: `redis_queue.RedisListOutbound` (push) and `redis_queue.RedisListInbound`
//! (blocking pop).
//!
//! # Layout
//!
//! One Redis list per `key` holds task JSON texts. Consumers take tasks from the **head**
//! (`LPOP`/`BLPOP`, or `BLMOVE` as the inbound below does). The outbound appends normal
//! tasks at the tail (`RPUSH`) and puts real-time tasks (`rt` true) at the head (`LPUSH`),
//! so they are taken first; a batch is one pipeline (`RPUSH key t1 t2 …` then
//! `LPUSH key r1 r2 …`, which leaves the last real-time task first, exactly as one `LPUSH`
//! per task would). The backlog (`max_lag`) is `LLEN key`.
//!
//! The inbound runs `threads` consumers, each on its own connection (a blocking pop holds
//! its connection). It is a reliable queue: consumer `n` takes a task with
//! `BLMOVE key P:processing:{inbound}:{n} LEFT LEFT pop_timeout_s` (Redis ≥ 6.2), which
//! moves it from the head of the list to the head of the consumer's **processing list** in
//! one step, so an accepted task is always in Redis. Once the task is routed (in its
//! outbound, ended, or recorded as failed) the consumer removes it with
//! `LREM P:processing:{inbound}:{n} 1 task`. A task the router cannot take (target down,
//! shutting down) is moved back to the head of the list in one transaction
//! (`MULTI; LREM processing 1 task; LPUSH key task; EXEC`), so it is the next one taken.
//!
//! Before a consumer takes anything — at start and after every reconnection — it moves
//! whatever its processing list still holds back to the head of the list
//! (`LMOVE processing key LEFT LEFT` until empty, which leaves the oldest first): tasks a
//! crashed run had taken but not finished are routed again. Delivery is therefore
//! **at least once**: a task routed just before a crash, whose `LREM` did not happen, is
//! routed a second time.
//!
//! `P` is `key` itself when it has a Redis Cluster hash tag (`{…}`), else `{key}`, so the
//! processing lists hash to the same slot as the list. Every processing list a consumer
//! uses is added to the set `P:processing:{inbound}`; at start consumer 0 also empties
//! (into the list) and forgets the lists of that set this run has no consumer for (an
//! earlier run had more `threads`). Two routers consuming one list under the same inbound
//! name share processing lists: the start of one puts the other's tasks in flight back
//! in the list, which routes them twice — never loses them. A pop in flight is not
//! cancelled; shutdown waits for it, at most `pop_timeout_s`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::AsyncCommands;
use silk_core::redis_target::{RedisConnection, RedisTarget, RedisTimeouts};
use tokio::sync::OnceCell;

use crate::error::RouterError;
use crate::read::InitReader;
use crate::redact;
use crate::registry::{
    Inbound, InboundContext, InboundFactory, Outbound, OutboundFactory, Outgoing,
};

/// The server or cluster of `init`'s `url`, and the URL without its password.
pub(super) fn client(init: &mut InitReader<'_>) -> Option<(RedisTarget, String)> {
    let url = init.str("url")?;
    match RedisTarget::open(url.as_str()) {
        Ok(target) => Some((target, redact(&url))),
        Err(e) => {
            init.error(
                Some("url"),
                format!(
                    "not a Redis URL (`redis://host:port/db`, or `redis+cluster://host:port,host:port` for a Redis Cluster): {}",
                    e.kind_str()
                ),
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
            conn: RedisConn::new(client, format!("{url} list {key}"), timeout_ms),
            key,
        }))
    }
}

struct RedisListOutbound {
    conn: RedisConn,
    key: String,
}

/// An outbound's connection to Redis (a server or a cluster): made on first use, shared by
/// every push (it reconnects by itself); a connection that could not be made is tried
/// again at the next push.
pub(super) struct RedisConn {
    redis: RedisTarget,
    target: String,
    timeout: Duration,
    conn: OnceCell<RedisConnection>,
}

impl RedisConn {
    /// `target` names the Redis and what is written there, without credentials.
    pub(super) fn new(redis: RedisTarget, target: String, timeout_ms: u64) -> RedisConn {
        RedisConn {
            redis,
            target,
            timeout: Duration::from_millis(timeout_ms),
            conn: OnceCell::new(),
        }
    }

    pub(super) fn target(&self) -> &str {
        &self.target
    }

    /// `e` as the router's error, naming the target (never the URL's password).
    pub(super) fn error(&self, e: redis::RedisError) -> RouterError {
        RouterError::Redis {
            target: self.target.clone(),
            message: format!("{:?}: {}", e.kind(), e.detail().unwrap_or("")),
        }
    }

    /// The shared connection.
    pub(super) async fn get(&self) -> Result<RedisConnection, RouterError> {
        let timeouts = RedisTimeouts {
            connect: self.timeout,
            response: self.timeout,
        };
        self.conn
            .get_or_try_init(|| self.redis.shared(timeouts, 3))
            .await
            .cloned()
            .map_err(|e| self.error(e))
    }
}

#[async_trait]
impl Outbound for RedisListOutbound {
    fn target(&self) -> String {
        self.conn.target().to_owned()
    }

    fn has_backlog(&self) -> bool {
        true
    }

    async fn push(&self, batch: &[Outgoing]) -> Vec<Result<(), RouterError>> {
        let all = |r: Result<(), RouterError>| batch.iter().map(|_| r.clone()).collect();
        let mut conn = match self.conn.get().await {
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
            .map_err(|e| self.conn.error(e)))
    }

    async fn backlog(&self) -> Result<Option<u64>, RouterError> {
        let mut conn = self.conn.get().await?;
        let len: u64 = conn.llen(&self.key).await.map_err(|e| self.conn.error(e))?;
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
        let ((redis, url), key) = (client?, key?);
        Some(Arc::new(RedisListInbound {
            source: format!("{url} list {key}"),
            redis,
            key,
            pop_timeout_s,
        }))
    }
}

struct RedisListInbound {
    redis: RedisTarget,
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
        ctx.run_consumers(|n, ctx| {
            let this = self.clone();
            async move { this.consume(n, ctx).await }
        })
        .await;
        Ok(())
    }
}

/// What a consumer does after routing one task.
enum Next {
    /// Take the next task on the same connection.
    Pop,
    /// The connection failed: reconnect (and recover) before taking another task.
    Reconnect,
    /// The task was routed but could not be removed from the processing list: remove it
    /// after reconnecting.
    Forget(Vec<u8>),
}

/// Whether Redis Cluster hashes `key` by a hash tag: the text between its first `{` and
/// the first `}` after it, when that text is not empty.
fn has_hash_tag(key: &str) -> bool {
    key.find('{')
        .and_then(|open| key[open + 1..].find('}'))
        .is_some_and(|close| close > 0)
}

/// The start of the keys an inbound on `key` keeps beside its list: `key` itself when it
/// already has a hash tag, else `{key}`. Either way they hash to the same cluster slot
/// as `key`, so the moves between them are allowed in a cluster.
pub(super) fn slot_prefix(key: &str) -> String {
    if has_hash_tag(key) {
        key.to_owned()
    } else {
        format!("{{{key}}}")
    }
}

/// The processing list of consumer `n` of inbound `inbound` on list `key`.
fn processing_key(key: &str, inbound: &str, n: usize) -> String {
    format!("{}:processing:{inbound}:{n}", slot_prefix(key))
}

/// The set naming every processing list the inbound `inbound` on `key` has used.
fn processing_set(key: &str, inbound: &str) -> String {
    format!("{}:processing:{inbound}", slot_prefix(key))
}

impl RedisListInbound {
    async fn connect(&self) -> Result<RedisConnection, redis::RedisError> {
        self.redis
            .dedicated(RedisTimeouts {
                connect: Duration::from_secs(5),
                response: Duration::from_secs(self.pop_timeout_s + 5),
            })
            .await
    }

    /// Waits `ms` or until shutdown starts.
    async fn pause(ctx: &InboundContext, ms: u64) {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
            _ = ctx.stopping() => {}
        }
    }

    /// Moves every task in `processing` back to the head of the list, oldest first (the
    /// newest is at the head of `processing`, and each move puts its task in front of the
    /// ones moved before it). Returns how many were moved.
    async fn requeue(
        &self,
        conn: &mut RedisConnection,
        processing: &str,
    ) -> Result<usize, redis::RedisError> {
        let mut moved = 0;
        loop {
            let task: Option<Vec<u8>> = redis::cmd("LMOVE")
                .arg(processing)
                .arg(&self.key)
                .arg("LEFT")
                .arg("LEFT")
                .query_async(conn)
                .await?;
            if task.is_none() {
                return Ok(moved);
            }
            moved += 1;
        }
    }

    /// Before consumer `n` takes tasks (at start and after every reconnection): removes a
    /// routed task it could not remove before (`forget`), registers its processing list
    /// and puts back at the head of the list whatever is left in it — tasks that were
    /// taken but not routed when a previous run crashed or lost its connection. Consumer
    /// 0 also empties the processing lists of consumers this run does not have (an earlier
    /// run had more `threads`).
    async fn recover(
        &self,
        conn: &mut RedisConnection,
        ctx: &InboundContext,
        n: usize,
        forget: &mut Option<Vec<u8>>,
        orphans_done: &mut bool,
    ) -> Result<(), redis::RedisError> {
        let processing = processing_key(&self.key, ctx.name(), n);
        let set = processing_set(&self.key, ctx.name());
        if let Some(message) = forget.as_ref() {
            let _: i64 = conn.lrem(&processing, 1, message).await?;
            *forget = None;
        }
        let _: i64 = conn.sadd(&set, &processing).await?;
        let moved = self.requeue(conn, &processing).await?;
        if moved > 0 {
            tracing::warn!(inbound = ctx.name(), consumer = n, tasks = moved, list = %processing, "tasks taken but not routed by an earlier run put back at the head of the list");
        }
        if n == 0 && !*orphans_done {
            let current: Vec<String> = (0..ctx.threads())
                .map(|i| processing_key(&self.key, ctx.name(), i))
                .collect();
            let known: Vec<String> = conn.smembers(&set).await?;
            for other in known.iter().filter(|k| !current.contains(k)) {
                let moved = self.requeue(conn, other).await?;
                if moved > 0 {
                    tracing::warn!(inbound = ctx.name(), tasks = moved, list = %other, "tasks left by a consumer this run does not have put back at the head of the list");
                }
                let _: i64 = conn.srem(&set, other).await?;
            }
            *orphans_done = true;
        }
        Ok(())
    }

    async fn consume(&self, n: usize, ctx: InboundContext) {
        let processing = processing_key(&self.key, ctx.name(), n);
        let mut failures = 0u32;
        let mut forget: Option<Vec<u8>> = None;
        let mut orphans_done = false;
        let mut refusals = 0u32;
        while !ctx.is_stopping() {
            let connected = match self.connect().await {
                Ok(mut conn) => self
                    .recover(&mut conn, &ctx, n, &mut forget, &mut orphans_done)
                    .await
                    .map(|()| conn),
                Err(e) => Err(e),
            };
            let mut conn = match connected {
                Ok(c) => c,
                Err(e) => {
                    failures += 1;
                    if failures == 1 || failures.is_multiple_of(30) {
                        tracing::warn!(inbound = ctx.name(), consumer = n, source = %self.source, error = ?e.kind(), "cannot connect or recover; retrying");
                    }
                    Self::pause(&ctx, backoff_ms(failures)).await;
                    continue;
                }
            };
            failures = 0;
            while !ctx.is_stopping() {
                // The task moves to this consumer's processing list in the same step, so
                // it is never only in the router's memory.
                let popped: Result<Option<Vec<u8>>, _> = redis::cmd("BLMOVE")
                    .arg(&self.key)
                    .arg(&processing)
                    .arg("LEFT")
                    .arg("LEFT")
                    .arg(self.pop_timeout_s)
                    .query_async(&mut conn)
                    .await;
                let next = match popped {
                    Ok(None) => Next::Pop,
                    Ok(Some(message)) => {
                        self.route(&ctx, &mut conn, &processing, message, &mut refusals)
                            .await
                    }
                    Err(e) => {
                        tracing::warn!(inbound = ctx.name(), consumer = n, error = ?e.kind(), "pop failed; reconnecting");
                        Next::Reconnect
                    }
                };
                match next {
                    Next::Pop => {}
                    Next::Reconnect => {
                        Self::pause(&ctx, 500).await;
                        break;
                    }
                    Next::Forget(message) => {
                        forget = Some(message);
                        Self::pause(&ctx, 500).await;
                        break;
                    }
                }
            }
        }
        if let Some(message) = forget {
            tracing::warn!(
                inbound = ctx.name(),
                consumer = n,
                list = %processing,
                task = %String::from_utf8_lossy(&message),
                "a routed task is still in the processing list; the next start routes it again"
            );
        }
    }

    /// Routes one task taken into `processing`; then removes it from there. When the
    /// router cannot take it, moves it back to the head of the list (in one transaction)
    /// and backs off, longer after each refusal in a row (`refusals`).
    async fn route(
        &self,
        ctx: &InboundContext,
        conn: &mut RedisConnection,
        processing: &str,
        message: Vec<u8>,
        refusals: &mut u32,
    ) -> Next {
        let error = match ctx.submit_bytes(&message).await {
            Ok(_) => {
                *refusals = 0;
                let removed: Result<i64, _> = conn.lrem(processing, 1, &message).await;
                return match removed {
                    Ok(_) => Next::Pop,
                    Err(e) => {
                        tracing::warn!(inbound = ctx.name(), error = ?e.kind(), "task routed but not removed from the processing list; reconnecting");
                        Next::Forget(message)
                    }
                };
            }
            Err(e) => e,
        };
        let pushed_back: Result<(), _> = redis::pipe()
            .atomic()
            .lrem(processing, 1, &message)
            .ignore()
            .lpush(&self.key, &message)
            .ignore()
            .query_async(conn)
            .await;
        match pushed_back {
            Ok(()) => {
                if !matches!(error, RouterError::ShuttingDown) {
                    tracing::warn!(inbound = ctx.name(), error = %error, "task not routed; put back at the head of the list");
                    Self::pause(ctx, backoff_ms(*refusals)).await;
                    *refusals = refusals.saturating_add(1);
                }
                Next::Pop
            }
            Err(e) => {
                // It stays in the processing list; recovery after reconnecting (or the
                // next start) puts it back.
                tracing::warn!(inbound = ctx.name(), error = %error, push_back_error = ?e.kind(), "task not routed and not put back yet; reconnecting");
                Next::Reconnect
            }
        }
    }
}

/// 100 ms doubling to at most 30 s.
pub(crate) fn backoff_ms(attempt: u32) -> u64 {
    (100u64 << attempt.min(9)).min(30_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processing_keys_share_the_lists_slot() {
        assert_eq!(
            processing_key("spider-log", "spider_log", 3),
            "{spider-log}:processing:spider_log:3"
        );
        assert_eq!(
            processing_set("spider-log", "q"),
            "{spider-log}:processing:q"
        );
        // A key with a hash tag keeps it: the slot is the tag's.
        assert_eq!(
            processing_key("{ic}:log", "q", 0),
            "{ic}:log:processing:q:0"
        );
        assert_eq!(
            processing_key("a{b}c{d}", "q", 0),
            "a{b}c{d}:processing:q:0"
        );
        // Braces that are no hash tag: the whole key is the tag.
        assert!(!has_hash_tag("a{}b"));
        assert!(!has_hash_tag("a}b{"));
        assert!(has_hash_tag("x{y}"));
        assert_eq!(slot_prefix("plain"), "{plain}");
    }
}
