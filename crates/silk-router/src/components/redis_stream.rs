//! `redis_queue.RedisStreamOutbound`: routed tasks (and, in the hub, items of runs with an
//! item sink target of this class) appended to a Redis stream.
//!
//! # Layout
//!
//! Each task is one stream entry with two fields: `id` (the delivery id,
//! `task_uuid:routed_count` for a task, `RUN:ITEM_KEY` for an item) and `field` (default
//! `data`) holding the JSON text. A batch is one script call, so its entries are added in
//! order and at once. The real-time flag does not reorder a stream (entries are read in
//! the order they were added).
//!
//! # Once per delivery id
//!
//! With `dedup_window_s` (default 86400; `0` turns it off) the script adds an entry only
//! when the key `P:dedup:{id}` does not exist, and then sets it (`SET … EX
//! dedup_window_s`), in the same atomic step: a push retried after a lost answer, or an item
//! delivered again after a hub restart, is added once within the window. The key is set
//! after the entry is added, so an error stopping the script (the stream key holding
//! another type) never marks an entry that was not added. `P` is `stream`
//! when it has a Redis Cluster hash tag (`{…}`), else `{stream}`, so every key of a call
//! hashes to the stream's slot.
//!
//! # Length and backlog
//!
//! `maxlen` (default none) trims the stream to about that many entries as it grows
//! (`XADD … MAXLEN ~ n`). The backlog (`max_lag`) is the consumer group `group`'s lag plus
//! its pending entries (`XINFO GROUPS`, Redis ≥ 7), or the stream's length (`XLEN`) when no
//! group is named — right for consumers that delete what they have read.

use std::sync::Arc;

use async_trait::async_trait;

use super::redis::{RedisConn, client, slot_prefix};
use crate::error::RouterError;
use crate::read::InitReader;
use crate::registry::{Outbound, OutboundFactory, Outgoing};

/// Adds the batch: see the module docs. `KEYS[1]` is the stream, `KEYS[1 + j]` entry
/// `j`'s dedup key (when the window is on); `ARGV` is the window, `maxlen`, the field, then
/// each entry's id and payload.
const ADD: &str = r#"
local window = tonumber(ARGV[1])
local maxlen = tonumber(ARGV[2])
local field = ARGV[3]
local n = (#ARGV - 3) / 2
local added = 0
for j = 1, n do
  local id = ARGV[2 + 2 * j]
  local payload = ARGV[3 + 2 * j]
  if window == 0 or redis.call('EXISTS', KEYS[1 + j]) == 0 then
    if maxlen > 0 then
      redis.call('XADD', KEYS[1], 'MAXLEN', '~', maxlen, '*', 'id', id, field, payload)
    else
      redis.call('XADD', KEYS[1], '*', 'id', id, field, payload)
    end
    if window > 0 then
      redis.call('SET', KEYS[1 + j], '1', 'EX', window)
    end
    added = added + 1
  end
end
return added
"#;

/// The longest `dedup_window_s`.
const MAX_WINDOW_S: u64 = 315_360_000;

/// `redis_queue.RedisStreamOutbound`: `url`, `stream`, `field` (default `data`), `maxlen`,
/// `dedup_window_s` (default 86400), `group` (for the backlog), `timeout_ms` (default 5000).
pub(crate) struct RedisStreamOutboundFactory;

impl OutboundFactory for RedisStreamOutboundFactory {
    fn keys(&self) -> &'static [&'static str] {
        &[
            "url",
            "stream",
            "field",
            "maxlen",
            "dedup_window_s",
            "group",
            "timeout_ms",
        ]
    }

    fn build(&self, init: &mut InitReader<'_>) -> Option<Arc<dyn Outbound>> {
        let client = client(init);
        let stream = init.str("stream");
        let field = init.opt_str("field").unwrap_or_else(|| "data".into());
        if field.is_empty() || field == "id" {
            init.error(
                Some("field"),
                "must be a field name other than `id` (which holds the delivery id)",
            );
        }
        let maxlen = init.opt_u64("maxlen").unwrap_or(0);
        if maxlen > i64::MAX as u64 {
            init.error(Some("maxlen"), "too large for Redis");
        }
        let window = init.opt_u64("dedup_window_s").unwrap_or(86_400);
        if window > MAX_WINDOW_S {
            init.error(
                Some("dedup_window_s"),
                format!("at most {MAX_WINDOW_S} (ten years)"),
            );
        }
        let group = init.opt_str("group");
        let timeout_ms = init.opt_u64("timeout_ms").unwrap_or(5000).max(1);
        let ((client, url), stream) = (client?, stream?);
        if field.is_empty() || field == "id" || maxlen > i64::MAX as u64 || window > MAX_WINDOW_S {
            return None;
        }
        let target = format!("{url} stream {stream}");
        Some(Arc::new(RedisStreamOutbound {
            conn: RedisConn::new(client, target, timeout_ms),
            dedup_prefix: format!("{}:dedup:", slot_prefix(&stream)),
            stream,
            field,
            maxlen,
            window,
            group,
            sha: std::sync::OnceLock::new(),
        }))
    }
}

struct RedisStreamOutbound {
    conn: RedisConn,
    stream: String,
    field: String,
    maxlen: u64,
    window: u64,
    group: Option<String>,
    dedup_prefix: String,
    /// The script's SHA1, as the server named it when it was loaded.
    sha: std::sync::OnceLock<String>,
}

impl RedisStreamOutbound {
    /// `verb script` (`EVALSHA sha` or `EVAL text`) with the keys and arguments of `batch`.
    fn call(&self, verb: &str, script: &str, batch: &[Outgoing]) -> redis::Cmd {
        let mut cmd = redis::cmd(verb);
        let dedup = self.window > 0;
        cmd.arg(script)
            .arg(if dedup { 1 + batch.len() } else { 1 })
            .arg(&self.stream);
        if dedup {
            for out in batch {
                cmd.arg(format!("{}{}", self.dedup_prefix, out.delivery_id));
            }
        }
        cmd.arg(self.window).arg(self.maxlen).arg(&self.field);
        for out in batch {
            cmd.arg(&out.delivery_id).arg(out.payload.as_ref());
        }
        cmd
    }

    /// Runs the script by its SHA once the server has it, else as text (which also loads
    /// it).
    async fn add(&self, batch: &[Outgoing]) -> Result<(), RouterError> {
        let mut conn = self.conn.get().await?;
        if let Some(sha) = self.sha.get() {
            match self
                .call("EVALSHA", sha, batch)
                .query_async::<u64>(&mut conn)
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if e.code() == Some("NOSCRIPT") => {}
                Err(e) => return Err(self.conn.error(e)),
            }
        }
        self.call("EVAL", ADD, batch)
            .query_async::<u64>(&mut conn)
            .await
            .map_err(|e| self.conn.error(e))?;
        if self.sha.get().is_none() {
            let sha: Result<String, _> = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(ADD)
                .query_async(&mut conn)
                .await;
            if let Ok(sha) = sha {
                let _ = self.sha.set(sha);
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Outbound for RedisStreamOutbound {
    fn target(&self) -> String {
        self.conn.target().to_owned()
    }

    fn has_backlog(&self) -> bool {
        true
    }

    async fn push(&self, batch: &[Outgoing]) -> Vec<Result<(), RouterError>> {
        let result = if batch.is_empty() {
            Ok(())
        } else {
            self.add(batch).await
        };
        batch.iter().map(|_| result.clone()).collect()
    }

    async fn backlog(&self) -> Result<Option<u64>, RouterError> {
        let mut conn = self.conn.get().await?;
        let Some(group) = &self.group else {
            let len: u64 = redis::cmd("XLEN")
                .arg(&self.stream)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.conn.error(e))?;
            return Ok(Some(len));
        };
        let groups: Vec<redis::Value> = match redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(&self.stream)
            .query_async(&mut conn)
            .await
        {
            Ok(g) => g,
            // No stream yet: nothing waits.
            Err(e) if e.detail().is_some_and(|d| d.contains("no such key")) => return Ok(Some(0)),
            Err(e) => return Err(self.conn.error(e)),
        };
        for g in groups {
            let fields = map_of(&g);
            if text(fields.iter().find(|(k, _)| k == "name").map(|(_, v)| *v)) != Some(group) {
                continue;
            }
            let number = |name: &str| {
                fields
                    .iter()
                    .find(|(k, _)| k == name)
                    .and_then(|(_, v)| match v {
                        redis::Value::Int(i) => u64::try_from(*i).ok(),
                        _ => None,
                    })
            };
            let pending = number("pending").unwrap_or(0);
            let lag = number("lag").ok_or_else(|| RouterError::Redis {
                target: self.conn.target().to_owned(),
                message: format!(
                    "the lag of group `{group}` is unknown (Redis ≥ 7 reports it, unless entries were deleted)"
                ),
            })?;
            return Ok(Some(lag + pending));
        }
        Err(RouterError::Redis {
            target: self.conn.target().to_owned(),
            message: format!("no consumer group `{group}` on the stream"),
        })
    }
}

/// The (name, value) pairs of a RESP2 flat array or a RESP3 map.
fn map_of(value: &redis::Value) -> Vec<(String, &redis::Value)> {
    match value {
        redis::Value::Array(items) => items
            .chunks(2)
            .filter_map(|kv| match kv {
                [k, v] => text(Some(k)).map(|k| (k.to_owned(), v)),
                _ => None,
            })
            .collect(),
        redis::Value::Map(pairs) => pairs
            .iter()
            .filter_map(|(k, v)| text(Some(k)).map(|k| (k.to_owned(), v)))
            .collect(),
        _ => Vec::new(),
    }
}

fn text(value: Option<&redis::Value>) -> Option<&str> {
    match value? {
        redis::Value::BulkString(b) => std::str::from_utf8(b).ok(),
        redis::Value::SimpleString(s) => Some(s),
        _ => None,
    }
}
