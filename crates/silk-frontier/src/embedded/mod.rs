//! [`EmbeddedFrontier`]: the frontier of the embedded mode (`silk up`, `silk crawl`), a
//! crash-safe [`FrontierStore`](crate::FrontierStore) in one directory, on the fjall LSM-tree engine.
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
//! [`FrontierStore::sync`](crate::FrontierStore::sync).
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
//! This module is only the storage (`Fjall`, `write.rs`) and the open; everything else is
//! the frontier core (`generic`). Calls do their work inline behind the core's one mutex
//! (microseconds, one `write(2)` per writing call); apart from waiting for that mutex they
//! do not yield. Duplicates are caught, in order, by an exact cache of recent
//! fingerprints (`RecentSet`, one cache miss), the batch itself, the segment's Bloom filter,
//! and only then a store lookup. A new request adds a URL parse (host key), a JSON encode
//! and two keys to the batch. Measured (`benches/frontier.rs`, loaded 2-vCPU VM): a cached
//! duplicate 0.3–0.5 µs, an uncached one 5–8 µs, a new request 16–22 µs, a whole crawled
//! page (lease + `ack_and_enqueue` of 30 links, 1 new) 21–27 µs. Open rebuilds the
//! scheduler from a scan of the `requests` keyspace (record headers only, no JSON) and the
//! current segment's Bloom filter from a prefix scan of `seen`.

mod write;

use crate::config::FrontierConfig;
use crate::error::{BoxError, FrontierError};
use crate::generic::{Core, Mem, frontier_store_by_core};
use crate::layout::{self, Counters};
use crate::sched::{SchedConfig, Scheduler};
use crate::window::OpenWindow;
use fjall::config::PinningPolicy;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use parking_lot::Mutex;
use silk_core::{Clock, Fingerprint};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Lease ids are `epoch << LEASE_EPOCH_SHIFT | n`, `epoch` counting opens of the store.
const LEASE_EPOCH_SHIFT: u32 = 40;

/// Options of the embedded store that other backends do not have.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EmbeddedOptions {
    /// Also fsync the journal this often, ms, on a background thread (power-loss durability
    /// within that window). `None` (default): only [`FrontierStore::sync`](crate::FrontierStore::sync) and `close` fsync.
    pub fsync_interval_ms: Option<u64>,
    /// fjall block cache size, bytes (`None`: fjall's default).
    pub cache_bytes: Option<u64>,
    /// Fingerprints held by the exact cache of recently met URLs (16 bytes each), which
    /// confirms most duplicates without a store read. `None`: `expected_urls`, between
    /// 1,024 and 1,048,576.
    pub dedup_cache_entries: Option<usize>,
}

/// The options of the keyspaces read by key (seen lookups, requests by seq): their tables'
/// filter and index blocks stay in memory at every level (fjall pins them in the first
/// levels only). Unpinned, a lookup in a large table reads and checksums its whole filter
/// block again: 2,907 seen lookups/s at 10 M URLs (`pending` benchmark, perf: the kernel's
/// copy 52 %, xxh3 36 %). Pinned, they cost about 1.25 bytes per key for the filters.
/// Their memtables are [`MEMTABLE_BYTES`].
fn point_reads() -> KeyspaceCreateOptions {
    KeyspaceCreateOptions::default()
        .filter_block_pinning_policy(PinningPolicy::all(true))
        .index_block_pinning_policy(PinningPolicy::all(true))
        .max_memtable_size(MEMTABLE_BYTES)
}

/// The memtable size of the `requests` and `seen` keyspaces (fjall's default is 64 MiB).
/// Each keyspace holds its active memtable and those sealed until flushed, so memtables were
/// most of a crawl's memory; smaller ones also make lookups in them shorter skiplist walks.
/// Like every keyspace option, it is fixed when the store is created.
const MEMTABLE_BYTES: u64 = 16 << 20;

/// The `meta` keyspace (the counters record, rewritten by every commit, and host delays):
/// every counters version stays in the memtable until it is flushed, and an unflushed
/// memtable keeps the journals it was written in, so a small one keeps both short.
fn meta_options() -> KeyspaceCreateOptions {
    KeyspaceCreateOptions::default().max_memtable_size(2 << 20)
}

/// fjall's journals, at most (its default is 512 MiB): past this, it flushes the memtables
/// that hold the oldest journal so that it can be deleted.
const MAX_JOURNAL_BYTES: u64 = 128 << 20;

/// The embedded storage of the frontier core: where it is, and the periodic fsync.
pub(crate) struct Fjall {
    location: String,
    fsync: Mutex<Option<Fsync>>,
}

/// The open database, dropped at close (which releases fjall's directory lock).
pub(crate) struct FjallState {
    db: Database,
    requests: Keyspace,
    seen: Keyspace,
    meta: Keyspace,
    /// `disk_space()` walks the store's files: read at most once a second (by the clock),
    /// since callers poll `stats` often. `(read at ms, bytes)`.
    disk_space: Option<(u64, u64)>,
}

struct Fsync {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

/// The embedded, crash-safe frontier (see the module doc): the frontier core over fjall.
pub struct EmbeddedFrontier {
    core: Core<Fjall>,
}

frontier_store_by_core!(EmbeddedFrontier);

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
        let mut builder = Database::builder(&dir).max_journaling_size(MAX_JOURNAL_BYTES);
        if let Some(bytes) = options.cache_bytes {
            builder = builder.cache_size(bytes);
        }
        let db = builder.open().map_err(|e| err("open", e))?;
        let requests = db
            .keyspace(layout::REQUESTS, point_reads)
            .map_err(|e| err("open requests", e))?;
        let seen = db
            .keyspace(layout::SEEN, point_reads)
            .map_err(|e| err("open seen", e))?;
        let meta = db
            .keyspace(layout::META, meta_options)
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
        let mut window = OpenWindow::new(config.memory_window);
        for kv in requests.iter() {
            let (k, v) = kv.into_inner().map_err(|e| err("scan requests", e))?;
            let parsed = layout::decode_request_key(&k).zip(layout::decode_header(&v));
            let Some((seq, h)) = parsed else {
                tracing::error!(store = %location, key = ?&*k, "corrupt request record skipped and counted failed");
                corrupt_keys.push(k);
                continue;
            };
            stored += 1;
            window.offer(&mut sched, seq, &h);
        }
        if let Some(m) = window.max_seq() {
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

        let state = FjallState {
            db,
            requests,
            seen,
            meta,
            disk_space: None,
        };
        let window = window.finish(&mut sched, stored, now);
        let mut mem = Mem::new(&config, sched, counters, options.dedup_cache_entries);
        mem.window = window;
        let segment = config.segment_of(now);
        mem.blooms
            .load(segment, load_segment(&state, segment, &location)?);

        let fsync = options.fsync_interval_ms.filter(|ms| *ms > 0).map(|ms| {
            let (stop, rx) = mpsc::channel::<()>();
            let db = state.db.clone();
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
        let storage = Fjall {
            location,
            fsync: Mutex::new(fsync),
        };
        Ok(Self {
            core: Core::new(storage, config, clock, mem, state),
        })
    }
}

impl Fjall {
    fn stop_fsync(&self) {
        let fsync = self.fsync.lock().take();
        if let Some(f) = fsync {
            drop(f.stop);
            if f.thread.join().is_err() {
                tracing::error!(store = %self.location, "fsync thread panicked");
            }
        }
    }
}

impl Drop for Fjall {
    fn drop(&mut self) {
        self.stop_fsync();
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

/// The fingerprints of the stored seen set of `segment`.
fn load_segment(
    state: &FjallState,
    segment: u64,
    location: &str,
) -> Result<Vec<Fingerprint>, FrontierError> {
    let mut fps = Vec::new();
    for kv in state.seen.prefix(layout::seen_prefix(segment)) {
        let k = kv
            .key()
            .map_err(|e| storage_error(location, "scan seen", true, e))?;
        match layout::decode_seen_key(&k) {
            Some(fp) => fps.push(fp),
            None => tracing::error!(store = %location, "corrupt seen key skipped"),
        }
    }
    Ok(fps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FrontierStore;
    use silk_core::ManualClock;
    use silk_core::Request;

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
