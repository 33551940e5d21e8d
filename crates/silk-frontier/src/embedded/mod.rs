//! [`EmbeddedFrontier`]: the frontier of the embedded mode (`silk up`, `silk crawl`), a
//! crash-safe [`FrontierStore`] in one directory, on the fjall LSM-tree engine.
//!
//! It must not be shared by two processes (fjall locks the directory) and must not hold the
//! requests themselves in memory: memory holds the scheduler's compact entries (about 40
//! bytes per pending request), the Bloom filters, and the leases in flight; requests are read
//! from the store when leased. The storage layout is written down in `layout.rs`.
//!
//! # Why fjall (and not redb)
//!
//! The write pattern is many small atomic batches (an enqueue batch, then one ack per
//! request), each of which must reach the OS before the call returns, so that it survives
//! `kill -9`. fjall appends each batch to its journal and hands it to the OS with one
//! `write(2)` (`PersistMode::Buffer`); redb's only crash-safe commit (`Durability::Immediate`)
//! fsyncs every transaction (its `Durability::None` commits are lost on a crash). Measured by
//! `benches/store_write.rs` (enqueue a batch of 8 new requests, then 8 single acks; requests
//! enqueued and acked per second, two runs, on the project's 2-vCPU ext4 VM under load; see
//! `docs/benchmarks.md`, "Frontier store"):
//!
//! | engine, commit mode                            | requests/s    |
//! |------------------------------------------------|--------------:|
//! | fjall, `Buffer` (to the OS: the contract)      | 56 k, 56 k    |
//! | fjall, `SyncData` (fdatasync each commit)      | 262, 5.4 k    |
//! | redb, `Immediate` (fsync each commit)          | 244, 680      |
//! | redb, `None` (not crash-safe; reference only)  | 49 k, 39 k    |
//!
//! With the guarantee the frontier needs (survive `kill -9`) fjall is ~80 times faster than
//! redb; with an fsync per commit the disk decides. fjall is chosen; power-loss durability is
//! offered as a periodic fsync ([`EmbeddedOptions::fsync_interval_ms`]) and
//! [`FrontierStore::sync`].
//!
//! # Durability contract
//!
//! Every call that returned `Ok` was written to the OS in one atomic fjall batch (data and
//! counters together), so it survives `kill -9` (not a power loss unless synced). After a
//! reopen every stored request is pending again, including those leased at the crash (leases
//! are not stored); acked requests are deleted, so they never come back. A lease expiry
//! re-queues in memory only and does not consume a retry.
//!
//! # Cost
//!
//! Calls do their work inline behind one mutex (microseconds, one `write(2)` per writing
//! call); they do not yield. Duplicates are caught, in order, by the batch itself, an exact
//! cache of recent fingerprints (`RecentSet`, one cache miss), the segment's Bloom filter,
//! and only then a store lookup. A new request adds a URL parse (host key), a JSON encode
//! and two keys to the batch. Measured (`benches/frontier.rs`, loaded 2-vCPU VM): a cached
//! duplicate 0.3–0.5 µs, an uncached one 5–8 µs, a new request 16–22 µs, a whole crawled
//! page (lease + `ack_and_enqueue` of 30 links, 1 new) 21–27 µs. Open rebuilds the
//! scheduler from a scan of the `requests` keyspace (record headers only, no JSON) and the
//! current segment's Bloom filter from a prefix scan of `seen`.

mod write;

use crate::config::FrontierConfig;
use crate::dedup::{RecentSet, SegmentBlooms};
use crate::error::{BoxError, FrontierError};
use crate::layout::{self, Counters};
use crate::sched::{Entry, SchedConfig, Scheduler};
use crate::store::{
    AckResult, EnqueueOutcome, FrontierStats, FrontierStore, Lease, LeaseId, Outcome,
};
use async_trait::async_trait;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use parking_lot::{Mutex, MutexGuard};
use silk_core::{Clock, Request};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;
use write::Staged;

/// Lease ids are `epoch << LEASE_EPOCH_SHIFT | n`, `epoch` counting opens of the store.
const LEASE_EPOCH_SHIFT: u32 = 40;

/// Options of the embedded store that other backends do not have.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EmbeddedOptions {
    /// Also fsync the journal this often, ms, on a background thread (power-loss durability
    /// within that window). `None` (default): only [`FrontierStore::sync`] and `close` fsync.
    pub fsync_interval_ms: Option<u64>,
    /// fjall block cache size, bytes (`None`: fjall's default).
    pub cache_bytes: Option<u64>,
    /// Fingerprints held by the exact cache of recently met URLs (16 bytes each), which
    /// confirms most duplicates without a store read. `None`: `expected_urls / 4`, between
    /// 1,024 and 1,048,576.
    pub dedup_cache_entries: Option<usize>,
}

struct Inner {
    db: Database,
    requests: Keyspace,
    seen: Keyspace,
    meta: Keyspace,
    sched: Scheduler,
    blooms: SegmentBlooms,
    recent: RecentSet,
    counters: Counters,
    stale_acks: u64,
    /// `disk_space()` walks the store's files: read at most once a second (by the clock),
    /// since callers poll `stats` often. `(read at ms, bytes)`.
    disk_space: Option<(u64, u64)>,
}

struct Fsync {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

/// The embedded, crash-safe frontier (see the module doc).
pub struct EmbeddedFrontier {
    location: String,
    cfg: FrontierConfig,
    clock: Arc<dyn Clock>,
    inner: Mutex<Option<Inner>>,
    fsync: Mutex<Option<Fsync>>,
}

impl std::fmt::Debug for EmbeddedFrontier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedFrontier")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl EmbeddedFrontier {
    /// Opens (or creates) the frontier stored in `dir`.
    pub fn open(
        dir: impl AsRef<Path>,
        config: FrontierConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, FrontierError> {
        Self::open_with(dir, config, clock, EmbeddedOptions::default())
    }

    /// Opens (or creates) the frontier stored in `dir`, with embedded-only options.
    pub fn open_with(
        dir: impl AsRef<Path>,
        config: FrontierConfig,
        clock: Arc<dyn Clock>,
        options: EmbeddedOptions,
    ) -> Result<Self, FrontierError> {
        config.validate()?;
        let dir: PathBuf = dir.as_ref().to_path_buf();
        let location = dir.display().to_string();
        let err = |op: &'static str, e: fjall::Error| match e {
            fjall::Error::Locked => FrontierError::Locked { dir: dir.clone() },
            e => storage_error(&location, op, false, e),
        };
        std::fs::create_dir_all(&dir).map_err(|e| FrontierError::Storage {
            location: location.clone(),
            op: "create directory",
            retryable: false,
            source: Box::new(e),
        })?;
        let mut builder = Database::builder(&dir);
        if let Some(bytes) = options.cache_bytes {
            builder = builder.cache_size(bytes);
        }
        let db = builder.open().map_err(|e| err("open", e))?;
        let requests = db
            .keyspace(layout::REQUESTS, KeyspaceCreateOptions::default)
            .map_err(|e| err("open requests", e))?;
        let seen = db
            .keyspace(layout::SEEN, KeyspaceCreateOptions::default)
            .map_err(|e| err("open seen", e))?;
        let meta = db
            .keyspace(layout::META, KeyspaceCreateOptions::default)
            .map_err(|e| err("open meta", e))?;

        match meta
            .get(layout::FORMAT_KEY)
            .map_err(|e| err("read format", e))?
        {
            Some(f) if &*f != layout::FORMAT => {
                return Err(FrontierError::Incompatible {
                    location: location.clone(),
                    reason: format!(
                        "format `{}`, expected `{}`",
                        String::from_utf8_lossy(&f),
                        String::from_utf8_lossy(layout::FORMAT)
                    ),
                });
            }
            _ => {}
        }
        let (mut counters, counters_ok) = match meta
            .get(layout::COUNTERS_KEY)
            .map_err(|e| err("read counters", e))?
        {
            None => (Counters::default(), true),
            Some(v) => match Counters::decode(&v) {
                Some(c) => (c, true),
                None => {
                    tracing::error!(store = %location, "corrupt counters record; rebuilding from the data (success/failed/dropped/duplicates restart at 0)");
                    (Counters::default(), false)
                }
            },
        };
        counters.epoch = if counters_ok {
            counters.epoch + 1
        } else {
            // The open count is lost; an epoch from the clock (high bit set, unlike counted
            // ones) keeps new lease ids apart from those issued before.
            (1 << 23) | ((clock.now_ms() / 1_000) % (1 << 23))
        };

        let now = clock.now_ms();
        let mut sched = Scheduler::new(
            SchedConfig::from(&config),
            counters.epoch << LEASE_EPOCH_SHIFT,
        );
        let mut corrupt_keys = Vec::new();
        let mut stored = 0u64;
        let mut max_seq = None;
        for kv in requests.iter() {
            let (k, v) = kv.into_inner().map_err(|e| err("scan requests", e))?;
            let parsed = layout::decode_request_key(&k).zip(layout::decode_header(&v));
            let Some((seq, h)) = parsed else {
                tracing::error!(store = %location, key = ?&*k, "corrupt request record skipped and counted failed");
                corrupt_keys.push(k);
                continue;
            };
            stored += 1;
            max_seq = max_seq.max(Some(seq));
            let host = sched.host_id(h.host);
            let entry = Entry {
                seq,
                host,
                priority: h.priority,
                created_ms: h.created_ms,
            };
            sched.push(entry, h.not_before_ms, now);
        }
        if let Some(m) = max_seq {
            counters.next_seq = counters.next_seq.max(m + 1);
        }
        if !counters_ok {
            counters.total = stored;
        }
        for kv in meta.prefix(layout::DELAY_PREFIX) {
            let (k, v) = kv.into_inner().map_err(|e| err("scan host delays", e))?;
            let host = std::str::from_utf8(&k[layout::DELAY_PREFIX.len()..]).ok();
            let delay = v
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes);
            match host.zip(delay) {
                Some((host, delay)) => {
                    let id = sched.host_id(host);
                    sched.set_host_delay(id, delay, now);
                }
                None => tracing::error!(store = %location, "corrupt host delay record skipped"),
            }
        }

        let mut batch = db.batch().durability(Some(PersistMode::Buffer));
        for k in &corrupt_keys {
            batch.remove(&requests, k.clone());
        }
        counters.corrupt += corrupt_keys.len() as u64;
        counters.failed += corrupt_keys.len() as u64;
        if counters.left() != stored {
            tracing::warn!(store = %location, counted = counters.left(), stored, "counters disagree with the stored requests");
        }
        batch.insert(&meta, layout::FORMAT_KEY, layout::FORMAT);
        batch.insert(&meta, layout::COUNTERS_KEY, counters.encode());
        batch.commit().map_err(|e| err("write counters", e))?;

        let mut inner = Inner {
            db,
            requests,
            seen,
            meta,
            sched,
            blooms: SegmentBlooms::new(config.expected_urls, config.bloom_fp_rate),
            recent: RecentSet::new(options.dedup_cache_entries.unwrap_or_else(|| {
                usize::try_from(config.expected_urls / 4)
                    .unwrap_or(usize::MAX)
                    .clamp(1 << 10, 1 << 20)
            })),
            counters,
            stale_acks: 0,
            disk_space: None,
        };
        load_segment(&mut inner, config.segment_of(now), &location)?;

        let fsync = options.fsync_interval_ms.filter(|ms| *ms > 0).map(|ms| {
            let (stop, rx) = mpsc::channel::<()>();
            let db = inner.db.clone();
            let loc = location.clone();
            let thread = std::thread::spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) =
                    rx.recv_timeout(Duration::from_millis(ms))
                {
                    if let Err(e) = db.persist(PersistMode::SyncData) {
                        tracing::error!(store = %loc, error = %e, "periodic fsync failed");
                    }
                }
            });
            Fsync { stop, thread }
        });

        Ok(Self {
            location,
            cfg: config,
            clock,
            inner: Mutex::new(Some(inner)),
            fsync: Mutex::new(fsync),
        })
    }

    fn lock(&self) -> Result<MutexGuard<'_, Option<Inner>>, FrontierError> {
        let guard = self.inner.lock();
        if guard.is_none() {
            return Err(FrontierError::Closed);
        }
        Ok(guard)
    }

    fn err(&self, op: &'static str, retryable: bool, e: fjall::Error) -> FrontierError {
        storage_error(&self.location, op, retryable, e)
    }

    fn stop_fsync(&self) {
        let fsync = self.fsync.lock().take();
        if let Some(f) = fsync {
            drop(f.stop);
            if f.thread.join().is_err() {
                tracing::error!(store = %self.location, "fsync thread panicked");
            }
        }
    }

    fn lease_sync(&self, max: usize) -> Result<Vec<Lease>, FrontierError> {
        let mut guard = self.lock()?;
        let Some(inner) = guard.as_mut() else {
            return Err(FrontierError::Closed);
        };
        let now = self.clock.now_ms();
        let picks = inner.sched.lease(max, now);
        let mut out = Vec::with_capacity(picks.len());
        let mut corrupt = Vec::new();
        let mut read_error = None;
        for p in picks {
            if read_error.is_some() {
                inner.sched.release(p.lease_id, now);
                continue;
            }
            let key = layout::request_key(p.entry.seq);
            match inner.requests.get(key) {
                Ok(Some(v)) => match layout::decode_record(&v) {
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
                Ok(None) => {
                    tracing::error!(store = %self.location, seq = p.entry.seq, "scheduled request missing from the store; skipped");
                    inner.sched.discard(p.lease_id, now);
                }
                Err(e) => {
                    inner.sched.release(p.lease_id, now);
                    read_error = Some(self.err("lease (read request)", true, e));
                }
            }
        }
        if !corrupt.is_empty() {
            let mut counters = inner.counters;
            let mut batch = inner.db.batch().durability(Some(PersistMode::Buffer));
            for p in &corrupt {
                batch.remove(&inner.requests, layout::request_key(p.entry.seq));
            }
            counters.corrupt += corrupt.len() as u64;
            counters.failed += corrupt.len() as u64;
            batch.insert(&inner.meta, layout::COUNTERS_KEY, counters.encode());
            match batch.commit() {
                Ok(()) => {
                    inner.counters = counters;
                    for p in &corrupt {
                        inner.sched.discard(p.lease_id, now);
                    }
                }
                // Left in flight: they expire and are met again.
                Err(e) => {
                    tracing::error!(store = %self.location, error = %e, "could not drop corrupt records")
                }
            }
        }
        match read_error {
            Some(e) if out.is_empty() => Err(e),
            _ => Ok(out),
        }
    }
}

fn storage_error(
    location: &str,
    op: &'static str,
    retryable: bool,
    e: fjall::Error,
) -> FrontierError {
    let retryable = retryable && !matches!(e, fjall::Error::Poisoned);
    FrontierError::Storage {
        location: location.to_owned(),
        op,
        retryable,
        source: BoxError::from(e),
    }
}

/// Builds the Bloom filter of `segment` from the stored seen set.
fn load_segment(inner: &mut Inner, segment: u64, location: &str) -> Result<(), FrontierError> {
    let mut fps = Vec::new();
    for kv in inner.seen.prefix(layout::seen_prefix(segment)) {
        let k = kv
            .key()
            .map_err(|e| storage_error(location, "scan seen", true, e))?;
        match layout::decode_seen_key(&k) {
            Some(fp) => fps.push(fp),
            None => tracing::error!(store = %location, "corrupt seen key skipped"),
        }
    }
    inner.blooms.load(segment, fps);
    Ok(())
}

#[async_trait]
impl FrontierStore for EmbeddedFrontier {
    async fn enqueue(&self, requests: Vec<Request>) -> Result<EnqueueOutcome, FrontierError> {
        let mut guard = self.lock()?;
        let Some(inner) = guard.as_mut() else {
            return Err(FrontierError::Closed);
        };
        let now = self.clock.now_ms();
        let mut staged = Staged::new(inner, now, &self.cfg);
        let outcome = self.stage_enqueue(inner, &mut staged, requests)?;
        self.commit(inner, staged, "enqueue")?;
        Ok(outcome)
    }

    async fn lease(&self, max: usize) -> Result<Vec<Lease>, FrontierError> {
        self.lease_sync(max)
    }

    async fn next_ready_ms(&self) -> Result<Option<u64>, FrontierError> {
        let mut guard = self.lock()?;
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
        let mut guard = self.lock()?;
        let Some(inner) = guard.as_mut() else {
            return Err(FrontierError::Closed);
        };
        let now = self.clock.now_ms();
        let mut staged = Staged::new(inner, now, &self.cfg);
        let results = self.stage_acks(inner, &mut staged, acks)?;
        self.commit(inner, staged, "ack")?;
        Ok(results)
    }

    async fn ack_and_enqueue(
        &self,
        lease: LeaseId,
        outcome: Outcome,
        discovered: Vec<Request>,
    ) -> Result<(AckResult, EnqueueOutcome), FrontierError> {
        let mut guard = self.lock()?;
        let Some(inner) = guard.as_mut() else {
            return Err(FrontierError::Closed);
        };
        let now = self.clock.now_ms();
        let mut staged = Staged::new(inner, now, &self.cfg);
        let result = self
            .stage_acks(inner, &mut staged, vec![(lease, outcome)])?
            .pop()
            .unwrap_or(AckResult::Unknown);
        let enqueued = self.stage_enqueue(inner, &mut staged, discovered)?;
        self.commit(inner, staged, "ack and enqueue")?;
        Ok((result, enqueued))
    }

    async fn expire(&self) -> Result<usize, FrontierError> {
        let mut guard = self.lock()?;
        let Some(inner) = guard.as_mut() else {
            return Err(FrontierError::Closed);
        };
        Ok(inner.sched.advance(self.clock.now_ms()))
    }

    async fn set_host_delay(&self, host: &str, delay_ms: u64) -> Result<(), FrontierError> {
        let mut guard = self.lock()?;
        let Some(inner) = guard.as_mut() else {
            return Err(FrontierError::Closed);
        };
        let mut batch = inner.db.batch().durability(Some(PersistMode::Buffer));
        let key = layout::delay_key(host);
        if delay_ms == 0 {
            batch.remove(&inner.meta, key);
        } else {
            batch.insert(&inner.meta, key, delay_ms.to_le_bytes());
        }
        batch
            .commit()
            .map_err(|e| self.err("set host delay", false, e))?;
        let id = inner.sched.host_id(host);
        inner
            .sched
            .set_host_delay(id, delay_ms, self.clock.now_ms());
        Ok(())
    }

    async fn stats(&self) -> Result<FrontierStats, FrontierError> {
        let mut guard = self.lock()?;
        let Some(inner) = guard.as_mut() else {
            return Err(FrontierError::Closed);
        };
        let now = self.clock.now_ms();
        let store_bytes = match inner.disk_space {
            Some((at, bytes)) if now.saturating_sub(at) < 1_000 => bytes,
            _ => {
                let bytes = inner
                    .db
                    .disk_space()
                    .map_err(|e| self.err("stats (disk space)", true, e))?;
                inner.disk_space = Some((now, bytes));
                bytes
            }
        };
        Ok(crate::shared::stats(
            &inner.counters,
            &inner.sched,
            &inner.blooms,
            &inner.recent,
            inner.stale_acks,
            store_bytes,
        ))
    }

    async fn sync(&self) -> Result<(), FrontierError> {
        let guard = self.lock()?;
        let Some(inner) = guard.as_ref() else {
            return Err(FrontierError::Closed);
        };
        inner
            .db
            .persist(PersistMode::SyncAll)
            .map_err(|e| self.err("sync", true, e))
    }

    async fn close(&self) -> Result<(), FrontierError> {
        self.stop_fsync();
        let inner = self.inner.lock().take();
        match inner {
            None => Ok(()),
            Some(inner) => {
                let r = inner
                    .db
                    .persist(PersistMode::SyncAll)
                    .map_err(|e| self.err("close", false, e));
                drop(inner);
                r
            }
        }
    }
}

impl Drop for EmbeddedFrontier {
    fn drop(&mut self) {
        self.stop_fsync();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use silk_core::ManualClock;

    fn block<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    fn config() -> FrontierConfig {
        FrontierConfig {
            per_host_concurrency: 10,
            per_host_delay_ms: 0,
            segment_ms: None,
            ..FrontierConfig::default()
        }
    }

    /// Bad bytes on disk are reported, skipped and counted, never a panic.
    #[test]
    fn corrupt_records_are_skipped_and_counted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = Arc::new(ManualClock::new(1_000));
        block(async {
            let f = EmbeddedFrontier::open(dir.path(), config(), clock.clone()).expect("open");
            let reqs = (0..4)
                .map(|i| Request::from_canonical(format!("https://a.test/{i}")))
                .collect();
            assert_eq!(f.enqueue(reqs).await.expect("enqueue").added, 4);
            f.close().await.expect("close");
        });
        {
            let db = Database::builder(dir.path()).open().expect("fjall");
            let requests = db
                .keyspace(layout::REQUESTS, KeyspaceCreateOptions::default)
                .expect("ks");
            let seen = db
                .keyspace(layout::SEEN, KeyspaceCreateOptions::default)
                .expect("ks");
            let meta = db
                .keyspace(layout::META, KeyspaceCreateOptions::default)
                .expect("ks");
            // seq 0: garbage header (found at open); seq 1: valid header, bad JSON (found at
            // lease); a seen key of the wrong length; a host delay with a short value.
            requests
                .insert(layout::request_key(0), b"\x09garbage".as_slice())
                .expect("insert");
            let good = requests
                .get(layout::request_key(1))
                .expect("get")
                .expect("record");
            let h = layout::decode_header(&good).expect("header");
            let mut bad_json = good[..h.json_at].to_vec();
            bad_json.extend_from_slice(b"{not json");
            requests
                .insert(layout::request_key(1), bad_json)
                .expect("insert");
            seen.insert(&[0u8; 5][..], b"".as_slice()).expect("insert");
            meta.insert(layout::delay_key("a.test"), b"\x01".as_slice())
                .expect("insert");
            db.persist(PersistMode::SyncAll).expect("persist");
        }
        block(async {
            let f = EmbeddedFrontier::open(dir.path(), config(), clock.clone()).expect("reopen");
            crate::conformance::corrupt_records_are_skipped(&f).await;
            f.close().await.expect("close");
        });
        block(async {
            let f = EmbeddedFrontier::open(dir.path(), config(), clock.clone()).expect("reopen");
            crate::conformance::corrupt_records_were_removed(&f).await;
        });
    }

    #[test]
    fn a_second_open_of_the_same_dir_is_locked_then_reopens_after_close() {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = Arc::new(ManualClock::new(1_000));
        let f = EmbeddedFrontier::open(dir.path(), config(), clock.clone()).expect("open");
        let again = EmbeddedFrontier::open(dir.path(), config(), clock.clone());
        assert!(
            matches!(again, Err(FrontierError::Locked { .. })),
            "{again:?}"
        );
        block(f.close()).expect("close");
        EmbeddedFrontier::open(dir.path(), config(), clock).expect("reopen after close");
    }

    #[test]
    fn invalid_config_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = FrontierConfig {
            bloom_fp_rate: 0.0,
            ..config()
        };
        let e = EmbeddedFrontier::open(dir.path(), cfg, Arc::new(ManualClock::new(0))).unwrap_err();
        assert!(e.to_string().contains("bloom_fp_rate"), "{e}");
        assert!(!e.is_retryable());
    }

    #[test]
    fn periodic_fsync_thread_stops_on_close() {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = EmbeddedOptions {
            fsync_interval_ms: Some(5),
            ..EmbeddedOptions::default()
        };
        let f = EmbeddedFrontier::open_with(
            dir.path(),
            config(),
            Arc::new(silk_core::SystemClock),
            options,
        )
        .expect("open");
        block(async {
            f.enqueue(vec![Request::from_canonical("https://a.test/".into())])
                .await
                .expect("enqueue");
            std::thread::sleep(Duration::from_millis(20));
            f.sync().await.expect("sync");
            f.close().await.expect("close");
        });
        EmbeddedFrontier::open(dir.path(), config(), Arc::new(ManualClock::new(0)))
            .expect("reopen");
    }
}
