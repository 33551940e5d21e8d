//! [`RedisFrontier`]: the frontier of the distributed mode (design §2, "Frontier: Redis
//! (cluster-safe keys)"), a [`FrontierStore`](crate::FrontierStore) whose state lives in Redis so that another hub
//! process can take a run over when its owner dies.
//!
//! It is the frontier core (`generic`, as [`crate::EmbeddedFrontier`] is) over Redis storage
//! (`RedisStorage`): memory holds the scheduler (`sched`: per-host queues, politeness,
//! aging, leases) and dedup (`dedup`: the segment's Bloom filter and the exact cache of
//! recent fingerprints), rebuilt at [`RedisFrontier::open`] from a scan of Redis (`HSCAN` of
//! the requests, `SSCAN` of the current segment's seen set); Redis holds everything that
//! must survive the process. Request records use the neutral record encoding (`layout`: a
//! fixed header with retries, not-before, created, priority and host key, then the
//! request's JSON), so a retry rewrites the header only.
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
//! replicas); [`FrontierStore::sync`](crate::FrontierStore::sync) asks `WAITAOF 1 0 0`
//! (Redis 7.2+) and is a round trip otherwise. When the master that holds the frontier has
//! a replica at open (as a Redis Cluster set up for failover does), every write also waits
//! (`WAIT 1`, at most [`REPLICA_WAIT`]) until a replica has it, so a failover to that
//! replica loses no call that returned `Ok`; a write no replica confirmed in time breaks the
//! handle (its durability is unknown), and reopening looks at the replicas again. A write
//! whose outcome is unknown (the connection failed during the call) *breaks* the handle:
//! its memory may disagree with Redis, so every later call fails with a non-retryable
//! error, and the owner reopens the prefix (adopts it again), which rebuilds memory from
//! Redis. Read failures (lease, dedup lookups) are retryable and change nothing.
//!
//! # Redis Cluster
//!
//! `url` is one server (`redis://…`) or a Redis Cluster
//! (`redis+cluster://host:port[,host:port…]`, see [`silk_core::redis_target`]). In a
//! cluster every key of one frontier is in the slot of its hash tag, so each call goes to
//! the master of that slot, and the client follows slot moves and failovers.
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
//! - Open transfers every pending record (`HSCAN` returns values): about the size of the
//!   requests' JSON per pending request.
//! - A fenced (adopted) handle can still *lease* (reads are not fenced); its acks fail, so
//!   at worst a request is fetched twice.
//! - Seen sets of past segments are deleted once past `segment_retention_ms` (at the next
//!   write), as in the embedded store; [`RedisFrontier::destroy`] removes everything.

use crate::config::FrontierConfig;
use crate::error::{BoxError, FrontierError};
use crate::generic::{Core, Mem, Storage, frontier_store_by_core};
use crate::layout::{self, Counters};
use crate::sched::{SchedConfig, Scheduler};
use crate::window::OpenWindow;
use ::redis::RedisError;
use async_trait::async_trait;
use silk_core::redis_target::{RedisConnection, RedisTarget, RedisTimeouts};
use silk_core::{Clock, Fingerprint};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

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
/// Longest wait for a replica to confirm a write, when the master has one (see the module
/// doc).
pub const REPLICA_WAIT: Duration = Duration::from_secs(5);

const TIMEOUTS: RedisTimeouts = RedisTimeouts {
    connect: CONNECT_TIMEOUT,
    response: RESPONSE_TIMEOUT,
};

/// How many replicas the frontier's writes wait for: 1 when the master that holds `key`
/// has a replica now (`ROLE`), else 0 (also when `ROLE` is refused: some managed servers
/// do).
async fn replicas_of(conn: &mut RedisConnection, key: &str, location: &str) -> u64 {
    use ::redis::Value;
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    match conn.query_at(&::redis::cmd("ROLE"), key).await {
        Ok(Value::Array(role)) => {
            let replicas = match (role.first().and_then(text).as_deref(), role.get(2)) {
                (Some("master"), Some(Value::Array(replicas))) => replicas.len(),
                _ => 0,
            };
            if replicas > 0 {
                tracing::info!(store = %location, replicas, "the frontier's master has replicas: every write waits for one");
            }
            u64::from(replicas > 0)
        }
        Ok(_) => 0,
        Err(e) => {
            tracing::debug!(store = %location, error = %e, "ROLE refused: writes do not wait for replicas");
            0
        }
    }
}

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
const CLAIM: &str = include_str!("redis/claim.lua");

/// Applies a list of writes if this handle still owns the frontier; returns the seqs
/// assigned to new records, in order. KEYS: 1 meta, 2 requests, 3 delays, 4 segments,
/// 5 seen set of the call's segment. ARGV[1] = owner; then ops:
/// `H k field value` (HSET), `D k field` (HDEL), `S k member` (SADD),
/// `I field n` (HINCRBY meta), `N record` (new request: seq from `next_seq`).
/// The op list is validated before anything is written.
const APPLY: &str = include_str!("redis/apply.lua");

/// Key indexes of the [`APPLY`] script, as its ops write them (decimal).
const K_META: &[u8] = b"1";
const K_REQUESTS: &[u8] = b"2";
const K_DELAYS: &[u8] = b"3";
const K_SEGMENTS: &[u8] = b"4";
const K_SEEN: &[u8] = b"5";

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

/// What a handle keeps besides the core's memory.
pub(crate) struct RedisState {
    /// The `owner` value of this handle (its epoch).
    owner: String,
    /// Segments known to be listed in `segments`.
    segments: HashSet<u64>,
    /// Set when the handle must not be used any more (fenced, or a write of unknown outcome).
    broken: Option<String>,
    /// `(read at ms, bytes)` of `MEMORY USAGE`.
    store_bytes: Option<(u64, u64)>,
}

/// The Redis storage of the frontier core: one server, one prefix.
pub(crate) struct RedisStorage {
    location: String,
    keys: Keys,
    conn: RedisConnection,
    /// SHA1 of [`APPLY`] as the server loaded it.
    apply_sha: String,
    /// How many replicas confirm every write (`WAIT`): 1 when the master had one at open.
    replicas: u64,
}

/// The Redis frontier (see the module doc): the frontier core over Redis.
pub struct RedisFrontier {
    core: Core<RedisStorage>,
}

frontier_store_by_core!(RedisFrontier);

/// A write being built: the script's ops.
pub(crate) struct RedisBatch {
    ops: Vec<Vec<u8>>,
    /// New requests staged (the script assigns their seqs).
    new: usize,
    segment: u64,
    /// Whether `segments` is known to list `segment` already.
    segment_known: bool,
}

impl RedisBatch {
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
        let target = RedisTarget::open(url).map_err(|e| err("open (url)", e))?;
        let mut conn = target
            .shared(TIMEOUTS, CONNECT_RETRIES)
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
        let mut window = OpenWindow::new(config.memory_window);
        let mut corrupt_fields: Vec<Vec<u8>> = Vec::new();
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
                // HSCAN may return a field twice: the window keeps it once.
                window.offer(&mut sched, seq, &h);
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        corrupt_fields.sort();
        corrupt_fields.dedup();
        // Counted by the server (HSCAN may return a field twice); no writer meanwhile, the
        // handle owns the frontier.
        let fields: u64 = ::redis::cmd("HLEN")
            .arg(&keys.requests)
            .query_async(&mut conn)
            .await
            .map_err(|e| err("count requests", e))?;
        let stored = fields.saturating_sub(corrupt_fields.len() as u64);
        let max_seq = window.max_seq();

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
            ops.extend([b"D".to_vec(), K_REQUESTS.to_vec(), f.clone()]);
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
                    K_META.to_vec(),
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
                K_META.to_vec(),
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
        let replicas = replicas_of(&mut conn, &keys.meta, &location).await;
        let storage = RedisStorage {
            apply_sha,
            location,
            keys,
            conn,
            replicas,
        };
        if !ops.is_empty() {
            storage
                .apply(&owner, ops, 0)
                .await
                .map_err(|e| storage.err("open (repair)", e))?;
        }
        let state = RedisState {
            owner,
            segments: segments.iter().filter_map(|s| s.parse().ok()).collect(),
            broken: None,
            store_bytes: None,
        };
        let window = window.finish(&mut sched, stored, now);
        let mut mem = Mem::new(&config, sched, counters, None);
        mem.window = window;
        let segment = config.segment_of(now);
        let fps = storage.load_segment(&state, segment).await?;
        mem.blooms.load(segment, fps);
        Ok(Self {
            core: Core::new(storage, config, clock, mem, state),
        })
    }

    /// Deletes every key of the frontier `prefix` (its requests, seen sets, counters,
    /// delays). The frontier must not be open anywhere.
    pub async fn destroy(url: &str, prefix: &str) -> Result<(), FrontierError> {
        check_prefix(prefix)?;
        let keys = Keys::new(prefix);
        let location = keys.location(url);
        let err = |op: &'static str, e: RedisError| redis_err(&location, op, e);
        let target = RedisTarget::open(url).map_err(|e| err("destroy (url)", e))?;
        let mut conn = target
            .dedicated(TIMEOUTS)
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
}

impl RedisStorage {
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

    /// Waits until `self.replicas` replicas have the writes made so far (`WAIT`): `seqs`
    /// back, or an error when fewer confirmed them in [`REPLICA_WAIT`].
    async fn replicated(&self, seqs: Vec<u64>, op: &'static str) -> Result<Vec<u64>, RedisError> {
        let mut conn = self.conn.clone();
        let mut wait = ::redis::cmd("WAIT");
        let ms = u64::try_from(REPLICA_WAIT.as_millis()).unwrap_or(u64::MAX);
        wait.arg(self.replicas).arg(ms);
        match conn.query_at(&wait, &self.keys.meta).await? {
            ::redis::Value::Int(n) if u64::try_from(n).is_ok_and(|n| n >= self.replicas) => {
                Ok(seqs)
            }
            other => Err(RedisError::from((
                ::redis::ErrorKind::Client,
                "a write was not confirmed by a replica in time",
                format!(
                    "{op}: WAIT {} {ms} answered {other:?} (the master lost its replica, or it lags)",
                    self.replicas
                ),
            ))),
        }
    }

    /// Runs [`APPLY`] for a writing call. Any failure breaks the handle (the script may or
    /// may not have run, or this handle was fenced); so does a call dropped while waiting for
    /// the reply (the handle is marked broken before the wait and cleared after it).
    async fn write(
        &self,
        state: &mut RedisState,
        ops: Vec<Vec<u8>>,
        segment: u64,
        op: &'static str,
    ) -> Result<Vec<u64>, FrontierError> {
        state.broken = Some(format!(
            "a write ({op}) was cancelled before its outcome was known"
        ));
        let r = self.apply(&state.owner, ops, segment).await;
        let r = match r {
            Ok(seqs) if self.replicas > 0 => self.replicated(seqs, op).await,
            r => r,
        };
        state.broken = None;
        r.map_err(|e| {
            let why = if e.code() == Some("SILKFENCED") {
                format!("fenced: {}", e.detail().unwrap_or_default())
            } else {
                format!("a write ({op}) failed with an unknown outcome: {e}")
            };
            tracing::error!(store = %self.location, %why, "frontier handle broken");
            state.broken = Some(why);
            storage(&self.location, op, false, Box::new(e))
        })
    }
}

#[async_trait]
impl Storage for RedisStorage {
    type State = RedisState;
    type Batch = RedisBatch;

    fn location(&self) -> &str {
        &self.location
    }

    fn usable(&self, state: &RedisState) -> Result<(), FrontierError> {
        match &state.broken {
            None => Ok(()),
            Some(why) => Err(storage(
                &self.location,
                "use",
                false,
                format!("handle unusable: {why}; reopen the frontier to adopt its state").into(),
            )),
        }
    }

    fn batch(&self, state: &RedisState, segment: u64) -> RedisBatch {
        RedisBatch {
            ops: Vec::new(),
            new: 0,
            segment,
            segment_known: state.segments.contains(&segment),
        }
    }

    async fn load_segment(
        &self,
        _state: &RedisState,
        segment: u64,
    ) -> Result<Vec<Fingerprint>, FrontierError> {
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
        Ok(fps)
    }

    async fn seen(
        &self,
        _state: &RedisState,
        segment: u64,
        fps: &[Fingerprint],
    ) -> Result<Vec<bool>, FrontierError> {
        let key = self.keys.seen(segment);
        let mut pipe = ::redis::pipe();
        for fp in fps {
            pipe.cmd("SISMEMBER").arg(&key).arg(&fp.0[..]);
        }
        let mut conn = self.conn.clone();
        pipe.query_async::<Vec<bool>>(&mut conn)
            .await
            .map_err(|e| self.err("enqueue (seen lookup)", e))
    }

    async fn records(
        &self,
        _state: &RedisState,
        seqs: &[u64],
    ) -> Result<Vec<Option<Vec<u8>>>, FrontierError> {
        let mut conn = self.conn.clone();
        ::redis::cmd("HMGET")
            .arg(&self.keys.requests)
            .arg(seqs.iter().map(u64::to_string).collect::<Vec<_>>())
            .query_async(&mut conn)
            .await
            .map_err(|e| self.err("read requests", e))
    }

    fn stage_new(
        &self,
        _state: &RedisState,
        batch: &mut RedisBatch,
        _seq: u64,
        record: Vec<u8>,
        _segment: u64,
        fp: &Fingerprint,
    ) {
        // The script assigns the seq (`next_seq`), so that two writers never share one.
        batch.ops.push(b"N".to_vec());
        batch.ops.push(record);
        batch.op(&[b"S", K_SEEN, &fp.0]);
        batch.new += 1;
    }

    fn stage_rewrite(
        &self,
        _state: &RedisState,
        batch: &mut RedisBatch,
        seq: u64,
        record: Vec<u8>,
    ) {
        let field = seq.to_string();
        batch.op(&[b"H", K_REQUESTS, field.as_bytes(), &record]);
    }

    fn stage_delete(&self, _state: &RedisState, batch: &mut RedisBatch, seq: u64) {
        let field = seq.to_string();
        batch.op(&[b"D", K_REQUESTS, field.as_bytes()]);
    }

    async fn commit(
        &self,
        state: &mut RedisState,
        batch: RedisBatch,
        before: &Counters,
        after: &Counters,
        op: &'static str,
    ) -> Result<Vec<u64>, FrontierError> {
        let RedisBatch {
            mut ops,
            new,
            segment,
            segment_known,
        } = batch;
        for ((name, old), new) in COUNTER_FIELDS
            .iter()
            .zip(counter_values(before))
            .zip(counter_values(after))
        {
            if new > old {
                ops.extend([
                    b"I".to_vec(),
                    name.as_bytes().to_vec(),
                    (new - old).to_string().into_bytes(),
                ]);
            }
        }
        let new_segment = new > 0 && !segment_known;
        if new_segment {
            ops.extend([
                b"S".to_vec(),
                K_SEGMENTS.to_vec(),
                segment.to_string().into_bytes(),
            ]);
        }
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        let seqs = self.write(state, ops, segment, op).await?;
        if seqs.len() != new {
            let why = format!(
                "the write script assigned {} seqs for {new} new requests",
                seqs.len()
            );
            state.broken = Some(why.clone());
            return Err(storage(&self.location, op, false, why.into()));
        }
        if new_segment {
            state.segments.insert(segment);
        }
        Ok(seqs)
    }

    async fn set_host_delay(
        &self,
        state: &mut RedisState,
        host: &str,
        delay_ms: u64,
        segment: u64,
    ) -> Result<(), FrontierError> {
        let k = K_DELAYS.to_vec();
        let ops = if delay_ms == 0 {
            vec![b"D".to_vec(), k, host.as_bytes().to_vec()]
        } else {
            vec![
                b"H".to_vec(),
                k,
                host.as_bytes().to_vec(),
                delay_ms.to_string().into_bytes(),
            ]
        };
        self.write(state, ops, segment, "set host delay")
            .await
            .map(drop)
    }

    async fn prune_segments(
        &self,
        state: &mut RedisState,
        below: u64,
    ) -> Result<(), FrontierError> {
        let old: Vec<u64> = state
            .segments
            .iter()
            .copied()
            .filter(|s| *s < below)
            .collect();
        if old.is_empty() {
            return Ok(());
        }
        // UNLINK frees a big set in the background; the list of segments follows.
        let mut pipe = ::redis::pipe();
        for s in &old {
            pipe.cmd("UNLINK").arg(self.keys.seen(*s)).ignore();
            pipe.cmd("SREM").arg(&self.keys.segments).arg(s).ignore();
        }
        let mut conn = self.conn.clone();
        pipe.query_async::<()>(&mut conn)
            .await
            .map_err(|e| self.err("prune seen sets", e))?;
        for s in old {
            state.segments.remove(&s);
        }
        Ok(())
    }

    async fn seen_segments(&self, state: &RedisState) -> Result<Vec<u64>, FrontierError> {
        let mut segments: Vec<u64> = state.segments.iter().copied().collect();
        segments.sort_unstable();
        Ok(segments)
    }

    async fn store_bytes(&self, state: &mut RedisState, now_ms: u64) -> Result<u64, FrontierError> {
        if let Some((at, bytes)) = state.store_bytes
            && now_ms.saturating_sub(at) < 1_000
        {
            return Ok(bytes);
        }
        let mut pipe = ::redis::pipe();
        for k in [
            &self.keys.meta,
            &self.keys.requests,
            &self.keys.delays,
            &self.keys.segments,
        ] {
            pipe.cmd("MEMORY").arg("USAGE").arg(k);
        }
        for s in &state.segments {
            pipe.cmd("MEMORY").arg("USAGE").arg(self.keys.seen(*s));
        }
        let mut conn = self.conn.clone();
        // Some managed servers refuse MEMORY: then 0, not an error.
        let bytes = match pipe.query_async::<Vec<Option<u64>>>(&mut conn).await {
            Ok(v) => v.into_iter().flatten().sum(),
            Err(e) if retryable(&e) => return Err(self.err("stats (memory usage)", e)),
            Err(_) => 0,
        };
        state.store_bytes = Some((now_ms, bytes));
        Ok(bytes)
    }

    async fn sync(&self, _state: &RedisState) -> Result<(), FrontierError> {
        let mut conn = self.conn.clone();
        let mut waitaof = ::redis::cmd("WAITAOF");
        waitaof.arg(1).arg(0).arg(0);
        let r = conn.query_at(&waitaof, &self.keys.meta).await;
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

    async fn close(&self, _state: RedisState) -> Result<(), FrontierError> {
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
