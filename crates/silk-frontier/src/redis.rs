//! [`RedisFrontier`]: the frontier of the distributed mode (design §2, "Frontier: Redis
//! (cluster-safe keys)"), a [`FrontierStore`] whose state lives in Redis so that another hub
//! process can take a run over when its owner dies.
//!
//! It mirrors [`crate::EmbeddedFrontier`]: memory holds the scheduler (`sched`: per-host
//! queues, politeness, aging, leases) and dedup (`dedup`: the segment's Bloom filter and the
//! exact cache of recent fingerprints), rebuilt at [`RedisFrontier::open`] from a scan of
//! Redis (`HSCAN` of the requests, `SSCAN` of the current segment's seen set); Redis holds
//! everything that must survive the process. Request records use the embedded record
//! encoding (`layout`: a fixed header with retries, not-before, created, priority
//! and host key, then the request's JSON), so a retry rewrites the header only.
//!
//! # Key layout
//!
//! Every key of the frontier of prefix `P` starts with the hash tag `{silk:frontier:P}`, so
//! all of them sit in one Redis Cluster slot and one Lua script may touch them all.
//!
//! | key                           | type | content                                             |
//! |-------------------------------|------|-----------------------------------------------------|
//! | `{silk:frontier:P}:meta`      | HASH | `format` = `silk-frontier-redis/1`; counters `total`, `success`, `failed`, `dropped`, `duplicates`, `retries`, `corrupt`; `next_seq`; `epoch` (opens); `owner` (epoch of the owning handle) |
//! | `{silk:frontier:P}:requests`  | HASH | `seq` (decimal) → request record (pending or in flight) |
//! | `{silk:frontier:P}:seen:S`    | SET  | 16-byte fingerprints enqueued in segment `S` (exact dedup) |
//! | `{silk:frontier:P}:segments`  | SET  | the segments `S` that have a seen set (for cleanup)   |
//! | `{silk:frontier:P}:delays`    | HASH | host key → own delay, ms (decimal; `set_host_delay`)  |
//!
//! # One owner at a time; adopt = open the same prefix
//!
//! A frontier is driven by one process (the hub that owns the run). `open` claims it: it
//! increments `epoch` and sets `owner` to it, in one script, then rebuilds memory from
//! Redis. Every write is one Lua script that first checks `owner`: once another process has
//! opened the prefix (*adopted* the frontier), the old handle's writes fail with a
//! non-retryable error naming the new owner and change nothing (fencing). Adopting needs no
//! lock and no wait: open the same prefix. Leases are not stored, so the new owner finds
//! every request that was enqueued and not acked pending again (the embedded contract after
//! a crash). Lease ids are `epoch << 40 | n`, unique across owners.
//!
//! # Durability contract
//!
//! Every call that returned `Ok` has its writes applied in Redis by one Lua script (data and
//! counters together; a script runs atomically), before returning. Surviving a crash of the
//! *Redis server* is Redis' persistence (AOF with `appendfsync always`/`everysec`, or
//! replicas); [`FrontierStore::sync`] asks `WAITAOF 1 0 0` (Redis 7.2+) and is a round trip
//! otherwise. A write whose outcome is unknown (the connection failed during the call)
//! *breaks* the handle: its memory may disagree with Redis, so every later call fails with a
//! non-retryable error, and the owner reopens the prefix (adopts it again), which rebuilds
//! memory from Redis. Read failures (lease, dedup lookups) are retryable and change nothing.
//!
//! # Cost
//!
//! A writing call is one round trip (`EVALSHA`) plus, for an enqueue with Bloom "maybe"s,
//! one pipelined `SISMEMBER` round trip; a lease is one `HMGET`; a `Retry` ack reads its
//! record first (one `HMGET` per `ack_many`). `stats`, `next_ready_ms` and `expire` read
//! memory only (`store_bytes` is `MEMORY USAGE` of the keys, read at most once a second).
//!
//! # Known limits
//!
//! - The client is a single-node connection (`ConnectionManager`); the keys are
//!   cluster-safe but a Redis Cluster client is not wired in.
//! - Open transfers every pending record (`HSCAN` returns values): about the size of the
//!   requests' JSON per pending request.
//! - A fenced (adopted) handle can still *lease* (reads are not fenced); its acks fail, so
//!   at worst a request is fetched twice.
//! - Seen sets of past segments are never deleted (as in the embedded store); only
//!   [`RedisFrontier::destroy`] removes them.

use crate::config::FrontierConfig;
use crate::dedup::{Probe, RecentSet, SegmentBlooms};
use crate::error::{BoxError, FrontierError};
use crate::layout::{self, Counters};
use crate::sched::{Entry, LeaseState, SchedConfig, Scheduler};
use crate::shared::{self, Added, Finished};
use crate::store::{
    AckResult, EnqueueOutcome, FrontierStats, FrontierStore, Lease, LeaseId, Outcome,
};
use ::redis::RedisError;
use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use async_trait::async_trait;
use silk_core::{Clock, Fingerprint, Request};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, MutexGuard};

/// The format marker this code writes and reads (`meta` field `format`).
pub const FORMAT: &str = "silk-frontier-redis/1";

/// Lease ids are `epoch << LEASE_EPOCH_SHIFT | n`.
const LEASE_EPOCH_SHIFT: u32 = 40;

/// Reconnection attempts of the connection manager (exponential back-off from 100 ms,
/// at most 1 s apart) before a call fails.
const CONNECT_RETRIES: usize = 3;
/// Longest wait for a TCP connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for a reply. Generous: a reply that times out after the server ran a write
/// is an unknown outcome, which breaks the handle (see the module doc).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

/// How many fields an `HSCAN`/`SSCAN` page asks for.
const SCAN_COUNT: usize = 1_000;

/// Persisted counter fields of `meta`, in [`Counters`] order (without `next_seq`, `epoch`).
const COUNTER_FIELDS: [&str; 7] = [
    "total",
    "success",
    "failed",
    "dropped",
    "duplicates",
    "retries",
    "corrupt",
];

/// Claims the frontier: checks the format, increments `epoch`, makes it the `owner`.
/// KEYS[1] = meta; ARGV[1] = format, ARGV[2] = fallback epoch if the stored one is garbage.
const CLAIM: &str = r"
local f = redis.call('HGET', KEYS[1], 'format')
if f and f ~= ARGV[1] then
  return redis.error_reply('SILKFORMAT ' .. f)
end
local stored = redis.call('HGET', KEYS[1], 'epoch')
local e
if stored == false then
  e = 1
else
  e = tonumber(stored)
  if e == nil then e = tonumber(ARGV[2]) else e = e + 1 end
end
local es = string.format('%d', e)
redis.call('HSET', KEYS[1], 'format', ARGV[1], 'epoch', es, 'owner', es)
return es
";

/// Applies a list of writes if this handle still owns the frontier; returns the seqs
/// assigned to new records, in order. KEYS: 1 meta, 2 requests, 3 delays, 4 segments,
/// 5 seen set of the call's segment. ARGV[1] = owner; then ops:
/// `H k field value` (HSET), `D k field` (HDEL), `S k member` (SADD),
/// `I field n` (HINCRBY meta), `N record` (new request: seq from `next_seq`).
/// The op list is validated before anything is written.
const APPLY: &str = r"
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner ~= ARGV[1] then
  return redis.error_reply('SILKFENCED frontier adopted by another owner (epoch ' .. tostring(owner) .. ', this handle ' .. ARGV[1] .. ')')
end
local n = #ARGV
local i = 2
while i <= n do
  local op = ARGV[i]
  local w = 0
  if op == 'H' then w = 4 elseif op == 'D' or op == 'S' or op == 'I' then w = 3 elseif op == 'N' then w = 2 end
  if w == 0 or i + w - 1 > n then
    return redis.error_reply('ERR silk frontier: malformed op list')
  end
  if (op == 'H' or op == 'D' or op == 'S') and KEYS[tonumber(ARGV[i + 1]) or 0] == nil then
    return redis.error_reply('ERR silk frontier: bad key index')
  end
  i = i + w
end
local seqs = {}
i = 2
while i <= n do
  local op = ARGV[i]
  if op == 'H' then
    redis.call('HSET', KEYS[tonumber(ARGV[i + 1])], ARGV[i + 2], ARGV[i + 3])
    i = i + 4
  elseif op == 'D' then
    redis.call('HDEL', KEYS[tonumber(ARGV[i + 1])], ARGV[i + 2])
    i = i + 3
  elseif op == 'S' then
    redis.call('SADD', KEYS[tonumber(ARGV[i + 1])], ARGV[i + 2])
    i = i + 3
  elseif op == 'I' then
    redis.call('HINCRBY', KEYS[1], ARGV[i + 1], ARGV[i + 2])
    i = i + 3
  else
    local s = redis.call('HINCRBY', KEYS[1], 'next_seq', 1) - 1
    redis.call('HSET', KEYS[2], string.format('%d', s), ARGV[i + 1])
    seqs[#seqs + 1] = s
    i = i + 2
  end
end
return seqs
";

/// Key indexes of the [`APPLY`] script.
const K_REQUESTS: u8 = 2;
const K_DELAYS: u8 = 3;
const K_SEGMENTS: u8 = 4;
const K_SEEN: u8 = 5;

/// The key names of one frontier.
#[derive(Debug, Clone)]
struct Keys {
    tag: String,
    meta: String,
    requests: String,
    delays: String,
    segments: String,
}

impl Keys {
    /// How errors and logs name the frontier: the server (password redacted) and the tag.
    fn location(&self, url: &str) -> String {
        format!("{} {}", redact(url), self.tag)
    }

    fn new(prefix: &str) -> Self {
        let tag = format!("{{silk:frontier:{prefix}}}");
        Self {
            meta: format!("{tag}:meta"),
            requests: format!("{tag}:requests"),
            delays: format!("{tag}:delays"),
            segments: format!("{tag}:segments"),
            tag,
        }
    }
    fn seen(&self, segment: u64) -> String {
        format!("{}:seen:{segment}", self.tag)
    }
}

/// A URL without its password (`redis://user:secret@host` → `redis://user:***@host`).
fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &rest[..at];
    let user = match userinfo.find(':') {
        Some(colon) => format!("{}:***", &userinfo[..colon]),
        None => "***".to_owned(),
    };
    format!("{}{user}{}", &url[..scheme_end], &rest[at..])
}

/// Checks a frontier prefix: non-empty, no braces (hash tag), no whitespace or controls.
fn check_prefix(prefix: &str) -> Result<(), FrontierError> {
    let bad = |reason: &str| {
        Err(FrontierError::InvalidConfig {
            field: "prefix",
            reason: reason.to_owned(),
        })
    };
    if prefix.is_empty() {
        return bad("must not be empty");
    }
    if prefix
        .chars()
        .any(|c| c == '{' || c == '}' || c.is_whitespace() || c.is_control())
    {
        return bad("must not contain braces, whitespace or control characters");
    }
    Ok(())
}

fn retryable(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.code(),
            Some("TRYAGAIN" | "LOADING" | "BUSY" | "CLUSTERDOWN")
        )
}

/// A Redis error as a storage error of the frontier at `location`.
fn redis_err(location: &str, op: &'static str, e: RedisError) -> FrontierError {
    let r = retryable(&e);
    storage(location, op, r, Box::new(e))
}

fn storage(location: &str, op: &'static str, retryable: bool, source: BoxError) -> FrontierError {
    FrontierError::Storage {
        location: location.to_owned(),
        op,
        retryable,
        source,
    }
}

struct Inner {
    sched: Scheduler,
    blooms: SegmentBlooms,
    recent: RecentSet,
    counters: Counters,
    stale_acks: u64,
    /// The `owner` value of this handle (its epoch).
    owner: String,
    /// Segments known to be listed in `segments`.
    segments: HashSet<u64>,
    /// Set when the handle must not be used any more (fenced, or a write of unknown outcome).
    broken: Option<String>,
    /// `(read at ms, bytes)` of `MEMORY USAGE`.
    store_bytes: Option<(u64, u64)>,
}

/// The Redis frontier (see the module doc).
pub struct RedisFrontier {
    location: String,
    keys: Keys,
    cfg: FrontierConfig,
    clock: Arc<dyn Clock>,
    conn: ConnectionManager,
    /// SHA1 of [`APPLY`] as the server loaded it.
    apply_sha: String,
    inner: Mutex<Option<Inner>>,
}

impl std::fmt::Debug for RedisFrontier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisFrontier")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

/// A write being built: the script's ops and what to apply to memory once it ran.
struct Staged {
    ops: Vec<Vec<u8>>,
    counters: Counters,
    now_ms: u64,
    segment: u64,
    added: Vec<Added>,
    /// Leases finished; `Some` = re-queue with this not-before time.
    finished: Finished,
    stale: u64,
    new_segment: Option<u64>,
}

impl Staged {
    fn new(inner: &Inner, now_ms: u64, cfg: &FrontierConfig) -> Self {
        Self {
            ops: Vec::new(),
            counters: inner.counters,
            now_ms,
            segment: cfg.segment_of(now_ms),
            added: Vec::new(),
            finished: Vec::new(),
            stale: 0,
            new_segment: None,
        }
    }
    fn op(&mut self, parts: &[&[u8]]) {
        self.ops.extend(parts.iter().map(|p| p.to_vec()));
    }
}

fn counter_values(c: &Counters) -> [u64; 7] {
    [
        c.total,
        c.success,
        c.failed,
        c.dropped,
        c.duplicates,
        c.retries,
        c.corrupt,
    ]
}

impl RedisFrontier {
    /// Opens (claims) the frontier `prefix` on the Redis server at `url`: empty the first
    /// time, the stored state otherwise (adoption: a previous owner is fenced from now on).
    pub async fn open(
        url: &str,
        prefix: &str,
        config: FrontierConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, FrontierError> {
        config.validate()?;
        check_prefix(prefix)?;
        let keys = Keys::new(prefix);
        let location = keys.location(url);
        let err = |op: &'static str, e: RedisError| redis_err(&location, op, e);
        let client = ::redis::Client::open(url).map_err(|e| err("open (url)", e))?;
        let manager = ConnectionManagerConfig::new()
            .set_number_of_retries(CONNECT_RETRIES)
            .set_max_delay(Duration::from_secs(1))
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        let mut conn = client
            .get_connection_manager_with_config(manager)
            .await
            .map_err(|e| err("connect", e))?;

        let now = clock.now_ms();
        let fallback_epoch = (1u64 << 23) | ((now / 1_000) % (1 << 23));
        let owner: String = ::redis::cmd("EVAL")
            .arg(CLAIM)
            .arg(1)
            .arg(&keys.meta)
            .arg(FORMAT)
            .arg(fallback_epoch)
            .query_async(&mut conn)
            .await
            .map_err(|e| match e.code() {
                Some("SILKFORMAT") => FrontierError::Incompatible {
                    location: location.clone(),
                    reason: format!(
                        "format `{}`, expected `{FORMAT}`",
                        e.detail().unwrap_or_default()
                    ),
                },
                _ => err("open (claim)", e),
            })?;
        let epoch: u64 = owner.parse().unwrap_or(fallback_epoch);

        let raw: Vec<Option<String>> = ::redis::cmd("HMGET")
            .arg(&keys.meta)
            .arg(&COUNTER_FIELDS[..])
            .arg("next_seq")
            .query_async(&mut conn)
            .await
            .map_err(|e| err("read counters", e))?;
        let parsed: Vec<Option<u64>> = raw
            .iter()
            .map(|v| match v {
                None => Some(0),
                Some(s) => s.parse().ok(),
            })
            .collect();
        let counters_ok = parsed.iter().all(Option::is_some);
        let v = |i: usize| parsed.get(i).copied().flatten().unwrap_or(0);
        let mut counters = Counters {
            total: v(0),
            success: v(1),
            failed: v(2),
            dropped: v(3),
            duplicates: v(4),
            retries: v(5),
            corrupt: v(6),
            next_seq: v(7),
            epoch,
        };
        if !counters_ok {
            tracing::error!(store = %location, "corrupt counters; rebuilding from the data (success/failed/dropped/duplicates restart at 0)");
            counters = Counters {
                next_seq: counters.next_seq,
                epoch,
                ..Counters::default()
            };
        }

        let mut sched = Scheduler::new(SchedConfig::from(&config), epoch << LEASE_EPOCH_SHIFT);
        let mut seen_seqs: HashSet<u64> = HashSet::new();
        let mut corrupt_fields: Vec<Vec<u8>> = Vec::new();
        let mut max_seq = None;
        let mut cursor = 0u64;
        loop {
            let (next, page): (u64, Vec<Vec<u8>>) = ::redis::cmd("HSCAN")
                .arg(&keys.requests)
                .arg(cursor)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .query_async(&mut conn)
                .await
                .map_err(|e| err("scan requests", e))?;
            for pair in page.chunks(2) {
                let [field, value] = pair else { continue };
                let seq = std::str::from_utf8(field)
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok());
                let parsed = seq.zip(layout::decode_header(value));
                let Some((seq, h)) = parsed else {
                    tracing::error!(store = %location, field = ?String::from_utf8_lossy(field), "corrupt request record skipped and counted failed");
                    corrupt_fields.push(field.clone());
                    continue;
                };
                if !seen_seqs.insert(seq) {
                    continue; // HSCAN may return a field twice
                }
                max_seq = max_seq.max(Some(seq));
                let host = sched.host_id(h.host);
                sched.push(
                    Entry {
                        seq,
                        host,
                        priority: h.priority,
                        created_ms: h.created_ms,
                    },
                    h.not_before_ms,
                    now,
                );
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        corrupt_fields.sort();
        corrupt_fields.dedup();
        let stored = seen_seqs.len() as u64;
        drop(seen_seqs);

        let delays: HashMap<String, String> = ::redis::cmd("HGETALL")
            .arg(&keys.delays)
            .query_async(&mut conn)
            .await
            .map_err(|e| err("read host delays", e))?;
        for (host, delay) in delays {
            match delay.parse::<u64>() {
                Ok(d) => {
                    let id = sched.host_id(&host);
                    sched.set_host_delay(id, d, now);
                }
                Err(_) => tracing::error!(store = %location, %host, "corrupt host delay skipped"),
            }
        }
        let segments: Vec<String> = ::redis::cmd("SMEMBERS")
            .arg(&keys.segments)
            .query_async(&mut conn)
            .await
            .map_err(|e| err("read segments", e))?;

        // The open's own writes: corrupt records out, counters fixed.
        let mut ops: Vec<Vec<u8>> = Vec::new();
        let before = counter_values(&counters);
        if !counters_ok {
            counters.total = stored;
        }
        counters.corrupt += corrupt_fields.len() as u64;
        counters.failed += corrupt_fields.len() as u64;
        for f in &corrupt_fields {
            ops.extend([
                b"D".to_vec(),
                K_REQUESTS.to_string().into_bytes(),
                f.clone(),
            ]);
        }
        if counters_ok {
            for ((name, old), new) in COUNTER_FIELDS
                .iter()
                .zip(before)
                .zip(counter_values(&counters))
            {
                if new != old {
                    ops.extend([
                        b"I".to_vec(),
                        name.as_bytes().to_vec(),
                        (new - old).to_string().into_bytes(),
                    ]);
                }
            }
        } else {
            for (name, value) in COUNTER_FIELDS.iter().zip(counter_values(&counters)) {
                ops.extend([
                    b"H".to_vec(),
                    b"1".to_vec(),
                    name.as_bytes().to_vec(),
                    value.to_string().into_bytes(),
                ]);
            }
        }
        if let Some(m) = max_seq
            && m + 1 > counters.next_seq
        {
            counters.next_seq = m + 1;
            ops.extend([
                b"H".to_vec(),
                b"1".to_vec(),
                b"next_seq".to_vec(),
                counters.next_seq.to_string().into_bytes(),
            ]);
        }
        if counters.left() != stored {
            tracing::warn!(store = %location, counted = counters.left(), stored, "counters disagree with the stored requests");
        }

        let apply_sha: String = ::redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(APPLY)
            .query_async(&mut conn)
            .await
            .map_err(|e| err("open (load script)", e))?;
        let me = Self {
            apply_sha,
            location,
            keys,
            cfg: config.clone(),
            clock,
            conn,
            inner: Mutex::new(None),
        };
        if !ops.is_empty() {
            me.apply(&owner, ops, 0)
                .await
                .map_err(|e| me.err("open (repair)", e))?;
        }
        let mut inner = Inner {
            sched,
            blooms: SegmentBlooms::new(config.expected_urls, config.bloom_fp_rate),
            recent: RecentSet::new(
                usize::try_from(config.expected_urls / 4)
                    .unwrap_or(usize::MAX)
                    .clamp(1 << 10, 1 << 20),
            ),
            counters,
            stale_acks: 0,
            owner,
            segments: segments.iter().filter_map(|s| s.parse().ok()).collect(),
            broken: None,
            store_bytes: None,
        };
        me.load_segment(&mut inner, config.segment_of(now)).await?;
        *me.inner.lock().await = Some(inner);
        Ok(me)
    }

    /// Deletes every key of the frontier `prefix` (its requests, seen sets, counters,
    /// delays). The frontier must not be open anywhere.
    pub async fn destroy(url: &str, prefix: &str) -> Result<(), FrontierError> {
        check_prefix(prefix)?;
        let keys = Keys::new(prefix);
        let location = keys.location(url);
        let err = |op: &'static str, e: RedisError| redis_err(&location, op, e);
        let client = ::redis::Client::open(url).map_err(|e| err("destroy (url)", e))?;
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| err("connect", e))?;
        let segments: Vec<String> = ::redis::cmd("SMEMBERS")
            .arg(&keys.segments)
            .query_async(&mut conn)
            .await
            .map_err(|e| err("destroy (read segments)", e))?;
        let mut del = ::redis::cmd("DEL");
        del.arg(&keys.meta)
            .arg(&keys.requests)
            .arg(&keys.delays)
            .arg(&keys.segments);
        for s in segments.iter().filter_map(|s| s.parse::<u64>().ok()) {
            del.arg(keys.seen(s));
        }
        del.query_async::<()>(&mut conn)
            .await
            .map_err(|e| err("destroy", e))
    }

    async fn lock(&self) -> Result<MutexGuard<'_, Option<Inner>>, FrontierError> {
        let guard = self.inner.lock().await;
        match guard.as_ref() {
            None => Err(FrontierError::Closed),
            Some(inner) => match &inner.broken {
                Some(why) => Err(storage(
                    &self.location,
                    "use",
                    false,
                    format!("handle unusable: {why}; reopen the frontier to adopt its state")
                        .into(),
                )),
                None => Ok(guard),
            },
        }
    }

    fn err(&self, op: &'static str, e: RedisError) -> FrontierError {
        redis_err(&self.location, op, e)
    }

    /// Runs [`APPLY`]; returns the seqs of new records.
    /// (`EVALSHA` of the script loaded at open; `EVAL` if the server lost it, which ran
    /// nothing.)
    async fn apply(
        &self,
        owner: &str,
        ops: Vec<Vec<u8>>,
        segment: u64,
    ) -> Result<Vec<u64>, RedisError> {
        let mut conn = self.conn.clone();
        let seen = self.keys.seen(segment);
        let call = |cmd: &str, script: &str| {
            let mut c = ::redis::cmd(cmd);
            c.arg(script)
                .arg(5)
                .arg(&self.keys.meta)
                .arg(&self.keys.requests)
                .arg(&self.keys.delays)
                .arg(&self.keys.segments)
                .arg(&seen)
                .arg(owner)
                .arg(&ops);
            c
        };
        match call("EVALSHA", &self.apply_sha)
            .query_async(&mut conn)
            .await
        {
            Err(e) if e.code() == Some("NOSCRIPT") => {
                call("EVAL", APPLY).query_async(&mut conn).await
            }
            r => r,
        }
    }

    /// Runs [`APPLY`] for a writing call. Any failure breaks the handle (the script may or
    /// may not have run, or this handle was fenced); so does a call dropped while waiting for
    /// the reply (the handle is marked broken before the wait and cleared after it).
    async fn write(
        &self,
        inner: &mut Inner,
        ops: Vec<Vec<u8>>,
        segment: u64,
        op: &'static str,
    ) -> Result<Vec<u64>, FrontierError> {
        inner.broken = Some(format!(
            "a write ({op}) was cancelled before its outcome was known"
        ));
        let r = self.apply(&inner.owner, ops, segment).await;
        inner.broken = None;
        r.map_err(|e| {
            let why = if e.code() == Some("SILKFENCED") {
                format!("fenced: {}", e.detail().unwrap_or_default())
            } else {
                format!("a write ({op}) failed with an unknown outcome: {e}")
            };
            tracing::error!(store = %self.location, %why, "frontier handle broken");
            inner.broken = Some(why);
            storage(&self.location, op, false, Box::new(e))
        })
    }

    /// Runs a staged write ([`Self::write`]) and applies it to memory.
    async fn commit(
        &self,
        inner: &mut Inner,
        st: Staged,
        op: &'static str,
    ) -> Result<(), FrontierError> {
        let Staged {
            mut ops,
            counters,
            now_ms,
            segment,
            added,
            finished,
            stale,
            new_segment,
        } = st;
        inner.stale_acks += stale;
        for ((name, old), new) in COUNTER_FIELDS
            .iter()
            .zip(counter_values(&inner.counters))
            .zip(counter_values(&counters))
        {
            if new > old {
                ops.extend([
                    b"I".to_vec(),
                    name.as_bytes().to_vec(),
                    (new - old).to_string().into_bytes(),
                ]);
            }
        }
        if let Some(s) = new_segment {
            ops.extend([
                b"S".to_vec(),
                K_SEGMENTS.to_string().into_bytes(),
                s.to_string().into_bytes(),
            ]);
        }
        let seqs = if ops.is_empty() {
            Vec::new()
        } else {
            self.write(inner, ops, segment, op).await?
        };
        if seqs.len() != added.len() {
            let why = format!(
                "the write script assigned {} seqs for {} new requests",
                seqs.len(),
                added.len()
            );
            inner.broken = Some(why.clone());
            return Err(storage(&self.location, op, false, why.into()));
        }
        inner.counters = Counters {
            next_seq: inner.counters.next_seq,
            epoch: inner.counters.epoch,
            ..counters
        };
        if let Some(s) = new_segment {
            inner.segments.insert(s);
        }
        let added = seqs.into_iter().zip(added);
        let (sched, recent) = (&mut inner.sched, &mut inner.recent);
        shared::apply_committed(sched, recent, segment, now_ms, finished, added);
        Ok(())
    }

    /// Builds the Bloom filter of `segment` from its stored seen set.
    async fn load_segment(&self, inner: &mut Inner, segment: u64) -> Result<(), FrontierError> {
        let mut conn = self.conn.clone();
        let key = self.keys.seen(segment);
        let mut fps: Vec<Fingerprint> = Vec::new();
        let mut cursor = 0u64;
        loop {
            let (next, page): (u64, Vec<Vec<u8>>) = ::redis::cmd("SSCAN")
                .arg(&key)
                .arg(cursor)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.err("scan seen", e))?;
            for m in page {
                match <[u8; 16]>::try_from(m.as_slice()) {
                    Ok(fp) => fps.push(Fingerprint(fp)),
                    Err(_) => {
                        tracing::error!(store = %self.location, "corrupt seen member skipped")
                    }
                }
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        fps.sort_unstable_by_key(|f| f.0);
        fps.dedup();
        inner.blooms.load(segment, fps);
        Ok(())
    }

    async fn stage_enqueue(
        &self,
        inner: &mut Inner,
        st: &mut Staged,
        requests: Vec<Request>,
    ) -> Result<EnqueueOutcome, FrontierError> {
        let mut outcome = EnqueueOutcome::default();
        if requests.is_empty() {
            return Ok(outcome);
        }
        let segment = st.segment;
        if !inner.blooms.has(segment) {
            self.load_segment(inner, segment).await?;
        }
        enum Verdict {
            Dup,
            New,
            Check,
        }
        let mut in_batch: HashSet<[u8; 16]> = HashSet::new();
        let mut verdicts = Vec::with_capacity(requests.len());
        let mut checks: Vec<Fingerprint> = Vec::new();
        let mut fps = Vec::with_capacity(requests.len());
        for request in &requests {
            let fp = request.fingerprint();
            let v = if inner.recent.contains(segment, &fp) || in_batch.contains(&fp.0) {
                Verdict::Dup
            } else {
                in_batch.insert(fp.0);
                match inner.blooms.probe_insert(segment, &fp) {
                    Probe::New => Verdict::New,
                    Probe::Maybe => {
                        checks.push(fp);
                        Verdict::Check
                    }
                }
            };
            verdicts.push(v);
            fps.push(fp);
        }
        let mut seen_in_store = Vec::new();
        if !checks.is_empty() {
            let key = self.keys.seen(segment);
            let mut pipe = ::redis::pipe();
            for fp in &checks {
                pipe.cmd("SISMEMBER").arg(&key).arg(&fp.0[..]);
            }
            let mut conn = self.conn.clone();
            seen_in_store = pipe
                .query_async::<Vec<bool>>(&mut conn)
                .await
                .map_err(|e| self.err("enqueue (seen lookup)", e))?;
        }
        let mut checked = seen_in_store.into_iter();
        let seen_key_index = K_SEEN.to_string().into_bytes();
        for ((mut request, fp), v) in requests.into_iter().zip(fps).zip(verdicts) {
            let new = match v {
                Verdict::Dup => false,
                Verdict::New => true,
                Verdict::Check => {
                    let seen = checked.next().unwrap_or(true);
                    if seen {
                        inner.recent.insert(segment, &fp);
                    } else {
                        inner.blooms.confirm_new(segment);
                    }
                    !seen
                }
            };
            if !new {
                outcome.duplicates += 1;
                continue;
            }
            if request.created_ms == 0 {
                request.created_ms = st.now_ms;
            }
            let host = request.host_key();
            let value = layout::encode_record(&request, &host, 0).map_err(|e| {
                storage(
                    &self.location,
                    "enqueue (encode request)",
                    false,
                    Box::new(e),
                )
            })?;
            st.ops.push(b"N".to_vec());
            st.ops.push(value);
            st.op(&[b"S", &seen_key_index, &fp.0]);
            st.added.push(Added {
                host,
                priority: request.priority,
                created_ms: request.created_ms,
                fp,
            });
            outcome.added += 1;
        }
        if outcome.added > 0 && !inner.segments.contains(&segment) {
            st.new_segment = Some(segment);
        }
        st.counters.total += outcome.added;
        st.counters.duplicates += outcome.duplicates;
        Ok(outcome)
    }

    async fn stage_acks(
        &self,
        inner: &mut Inner,
        st: &mut Staged,
        acks: Vec<(LeaseId, Outcome)>,
    ) -> Result<Vec<AckResult>, FrontierError> {
        let now = st.now_ms;
        let ctx = shared::AckCtx {
            cfg: &self.cfg,
            now,
            location: &self.location,
        };
        // Pass 1: lease states (in order, duplicates within the batch are Unknown).
        let mut live: Vec<Option<Entry>> = Vec::with_capacity(acks.len());
        let mut states = Vec::with_capacity(acks.len());
        let mut taken: HashSet<u64> = HashSet::new();
        for (id, _) in &acks {
            let state = if taken.contains(&id.0) {
                LeaseState::Unknown
            } else {
                inner.sched.check(id.0, now)
            };
            if let LeaseState::Live(e) = state {
                taken.insert(id.0);
                live.push(Some(e));
            } else {
                live.push(None);
            }
            states.push(state);
        }
        // The records of live retries, in one read.
        let retry_seqs: Vec<u64> = acks
            .iter()
            .zip(&live)
            .filter_map(|((_, o), e)| match (o, e) {
                (Outcome::Retry { .. }, Some(e)) => Some(e.seq),
                _ => None,
            })
            .collect();
        let mut records: HashMap<u64, Option<Vec<u8>>> = HashMap::new();
        if !retry_seqs.is_empty() {
            let mut conn = self.conn.clone();
            let values: Vec<Option<Vec<u8>>> = ::redis::cmd("HMGET")
                .arg(&self.keys.requests)
                .arg(retry_seqs.iter().map(u64::to_string).collect::<Vec<_>>())
                .query_async(&mut conn)
                .await
                .map_err(|e| self.err("ack (read request)", e))?;
            records.extend(retry_seqs.into_iter().zip(values));
        }
        let req_index = K_REQUESTS.to_string().into_bytes();
        let mut results = Vec::with_capacity(acks.len());
        for (((id, outcome), state), entry) in acks.into_iter().zip(states).zip(live) {
            let Some(entry) = entry else {
                st.stale += 1;
                results.push(if state == LeaseState::Expired {
                    AckResult::Expired
                } else {
                    AckResult::Unknown
                });
                continue;
            };
            let field = entry.seq.to_string().into_bytes();
            let record = if shared::needs_record(&outcome) {
                records.get(&entry.seq).cloned().flatten()
            } else {
                None
            };
            let plan = ctx.plan(outcome, entry.seq, record.as_deref(), &mut st.counters);
            if let Some(value) = plan.rewrite {
                st.op(&[b"H", &req_index, &field, &value]);
            } else if plan.requeue_at.is_none() {
                st.op(&[b"D", &req_index, &field]);
            }
            st.finished
                .push((id.0, plan.requeue_at.map(|at| (entry, at))));
            results.push(plan.result);
        }
        Ok(results)
    }
}

#[async_trait]
impl FrontierStore for RedisFrontier {
    async fn enqueue(&self, requests: Vec<Request>) -> Result<EnqueueOutcome, FrontierError> {
        let mut guard = self.lock().await?;
        let Some(inner) = guard.as_mut() else {
            return Err(FrontierError::Closed);
        };
        let mut st = Staged::new(inner, self.clock.now_ms(), &self.cfg);
        let outcome = self.stage_enqueue(inner, &mut st, requests).await?;
        self.commit(inner, st, "enqueue").await?;
        Ok(outcome)
    }

    async fn lease(&self, max: usize) -> Result<Vec<Lease>, FrontierError> {
        let mut guard = self.lock().await?;
        let Some(inner) = guard.as_mut() else {
            return Err(FrontierError::Closed);
        };
        let now = self.clock.now_ms();
        let picks = inner.sched.lease(max, now);
        if picks.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.conn.clone();
        let values: Result<Vec<Option<Vec<u8>>>, RedisError> = ::redis::cmd("HMGET")
            .arg(&self.keys.requests)
            .arg(
                picks
                    .iter()
                    .map(|p| p.entry.seq.to_string())
                    .collect::<Vec<_>>(),
            )
            .query_async(&mut conn)
            .await;
        let values = match values {
            Ok(v) if v.len() == picks.len() => v,
            Ok(_) => {
                for p in &picks {
                    inner.sched.release(p.lease_id, now);
                }
                return Err(storage(
                    &self.location,
                    "lease (read requests)",
                    true,
                    "HMGET returned a wrong number of values".into(),
                ));
            }
            Err(e) => {
                for p in &picks {
                    inner.sched.release(p.lease_id, now);
                }
                return Err(self.err("lease (read requests)", e));
            }
        };
        let mut out = Vec::with_capacity(picks.len());
        let mut corrupt = Vec::new();
        for (p, v) in picks.into_iter().zip(values) {
            match v {
                Some(v) => match layout::decode_record(&v) {
                    Ok(request) => out.push(Lease {
                        id: LeaseId(p.lease_id),
                        request,
                        deadline_ms: p.deadline_ms,
                    }),
                    Err(reason) => {
                        tracing::error!(store = %self.location, seq = p.entry.seq, %reason, "corrupt request record skipped and counted failed");
                        corrupt.push(p);
                    }
                },
                None => {
                    tracing::error!(store = %self.location, seq = p.entry.seq, "scheduled request missing from the store; skipped");
                    inner.sched.discard(p.lease_id, now);
                }
            }
        }
        if !corrupt.is_empty() {
            let mut st = Staged::new(inner, now, &self.cfg);
            let req_index = K_REQUESTS.to_string().into_bytes();
            for p in &corrupt {
                st.op(&[b"D", &req_index, p.entry.seq.to_string().as_bytes()]);
                st.finished.push((p.lease_id, None));
            }
            st.counters.corrupt += corrupt.len() as u64;
            st.counters.failed += corrupt.len() as u64;
            self.commit(inner, st, "lease (drop corrupt records)")
                .await?;
        }
        Ok(out)
    }

    async fn next_ready_ms(&self) -> Result<Option<u64>, FrontierError> {
        let mut guard = self.lock().await?;
        let Some(inner) = guard.as_mut() else {
            return Err(FrontierError::Closed);
        };
        Ok(inner.sched.next_ready_ms(self.clock.now_ms()))
    }

    async fn ack(&self, lease: LeaseId, outcome: Outcome) -> Result<AckResult, FrontierError> {
        Ok(self
            .ack_many(vec![(lease, outcome)])
            .await?
            .pop()
            .unwrap_or(AckResult::Unknown))
    }

    async fn ack_many(
        &self,
        acks: Vec<(LeaseId, Outcome)>,
    ) -> Result<Vec<AckResult>, FrontierError> {
        let mut guard = self.lock().await?;
        let Some(inner) = guard.as_mut() else {
            return Err(FrontierError::Closed);
        };
        let mut st = Staged::new(inner, self.clock.now_ms(), &self.cfg);
        let results = self.stage_acks(inner, &mut st, acks).await?;
        self.commit(inner, st, "ack").await?;
        Ok(results)
    }

    async fn ack_and_enqueue(
        &self,
        lease: LeaseId,
        outcome: Outcome,
        discovered: Vec<Request>,
    ) -> Result<(AckResult, EnqueueOutcome), FrontierError> {
        let mut guard = self.lock().await?;
        let Some(inner) = guard.as_mut() else {
            return Err(FrontierError::Closed);
        };
        let mut st = Staged::new(inner, self.clock.now_ms(), &self.cfg);
        let result = self
            .stage_acks(inner, &mut st, vec![(lease, outcome)])
            .await?
            .pop()
            .unwrap_or(AckResult::Unknown);
        let enqueued = self.stage_enqueue(inner, &mut st, discovered).await?;
        self.commit(inner, st, "ack and enqueue").await?;
        Ok((result, enqueued))
    }

    async fn expire(&self) -> Result<usize, FrontierError> {
        let mut guard = self.lock().await?;
        let Some(inner) = guard.as_mut() else {
            return Err(FrontierError::Closed);
        };
        Ok(inner.sched.advance(self.clock.now_ms()))
    }

    async fn set_host_delay(&self, host: &str, delay_ms: u64) -> Result<(), FrontierError> {
        let mut guard = self.lock().await?;
        let Some(inner) = guard.as_mut() else {
            return Err(FrontierError::Closed);
        };
        let now = self.clock.now_ms();
        let mut ops = Vec::new();
        let k = K_DELAYS.to_string().into_bytes();
        if delay_ms == 0 {
            ops.extend([b"D".to_vec(), k, host.as_bytes().to_vec()]);
        } else {
            ops.extend([
                b"H".to_vec(),
                k,
                host.as_bytes().to_vec(),
                delay_ms.to_string().into_bytes(),
            ]);
        }
        self.write(inner, ops, self.cfg.segment_of(now), "set host delay")
            .await?;
        let id = inner.sched.host_id(host);
        inner.sched.set_host_delay(id, delay_ms, now);
        Ok(())
    }

    async fn stats(&self) -> Result<FrontierStats, FrontierError> {
        let mut guard = self.lock().await?;
        let Some(inner) = guard.as_mut() else {
            return Err(FrontierError::Closed);
        };
        let now = self.clock.now_ms();
        let store_bytes = match inner.store_bytes {
            Some((at, bytes)) if now.saturating_sub(at) < 1_000 => bytes,
            _ => {
                let mut pipe = ::redis::pipe();
                for k in [
                    &self.keys.meta,
                    &self.keys.requests,
                    &self.keys.delays,
                    &self.keys.segments,
                ] {
                    pipe.cmd("MEMORY").arg("USAGE").arg(k);
                }
                for s in &inner.segments {
                    pipe.cmd("MEMORY").arg("USAGE").arg(self.keys.seen(*s));
                }
                let mut conn = self.conn.clone();
                // Some managed servers refuse MEMORY: then 0, not an error.
                let bytes = match pipe.query_async::<Vec<Option<u64>>>(&mut conn).await {
                    Ok(v) => v.into_iter().flatten().sum(),
                    Err(e) if retryable(&e) => return Err(self.err("stats (memory usage)", e)),
                    Err(_) => 0,
                };
                inner.store_bytes = Some((now, bytes));
                bytes
            }
        };
        Ok(shared::stats(
            &inner.counters,
            &inner.sched,
            &inner.blooms,
            &inner.recent,
            inner.stale_acks,
            store_bytes,
        ))
    }

    async fn sync(&self) -> Result<(), FrontierError> {
        let _guard = self.lock().await?;
        let mut conn = self.conn.clone();
        let r: Result<::redis::Value, RedisError> = ::redis::cmd("WAITAOF")
            .arg(1)
            .arg(0)
            .arg(0)
            .query_async(&mut conn)
            .await;
        match r {
            Ok(_) => Ok(()),
            // No AOF (or a server before 7.2): durability is the server's configuration.
            Err(e) if !retryable(&e) => {
                tracing::debug!(store = %self.location, error = %e, "WAITAOF not available; sync is a round trip");
                Ok(())
            }
            Err(e) => Err(self.err("sync", e)),
        }
    }

    async fn close(&self) -> Result<(), FrontierError> {
        self.inner.lock().await.take();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_passwords_only() {
        assert_eq!(
            redact("redis://127.0.0.1:6379/0"),
            "redis://127.0.0.1:6379/0"
        );
        assert_eq!(
            redact("redis://user:s3cret@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redact("rediss://:s3cret@host"), "rediss://:***@host");
        assert_eq!(redact("redis://token@host"), "redis://***@host");
        assert_eq!(redact("not a url"), "not a url");
        assert_eq!(redact("redis://host/a@b"), "redis://host/a@b");
    }

    #[test]
    fn keys_share_one_hash_tag() {
        let k = Keys::new("run-1");
        for key in [&k.meta, &k.requests, &k.delays, &k.segments, &k.seen(7)] {
            assert!(key.starts_with("{silk:frontier:run-1}:"), "{key}");
        }
        assert!(check_prefix("").is_err());
        assert!(check_prefix("a}b").is_err());
        assert!(check_prefix("a b").is_err());
        assert!(check_prefix("run-1:x").is_ok());
    }
}
