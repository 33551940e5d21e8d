//! Backend comparison for the embedded frontier store: fjall (LSM) against redb (B-tree) on
//! the frontier's write pattern, each operation durable to the OS before it returns.
//!
//! One iteration = one enqueue batch of `BATCH` new requests (a request record + a seen key
//! each, plus the counters record, in one atomic batch) followed by `BATCH` acks, each its
//! own atomic batch (delete the request record + rewrite the counters). Throughput is in
//! requests (enqueued and acked). The figures and the choice are in the `embedded` module
//! doc and in `docs/benchmarks.md` ("Frontier store").
//!
//! Variants:
//! - `fjall/buffer`: commit with `PersistMode::Buffer` (written to the OS: survives `kill -9`,
//!   the frontier's durability contract);
//! - `fjall/fsync`: commit with `PersistMode::SyncData` (survives power loss);
//! - `redb/immediate`: `Durability::Immediate` — the only redb mode whose commits survive a
//!   crash of the process (it fsyncs every commit);
//! - `redb/none`: `Durability::None`, for reference only: a crash loses every commit since the
//!   last durable one, so it does not meet the contract.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::time::Duration;

const BATCH: u64 = 8;
const VALUE_BYTES: usize = 220;

fn value(seq: u64) -> Vec<u8> {
    let mut v = format!(
        "{{\"url\":\"https://host{}.example.com/some/path/{seq}?a=1&b=2\",\"depth\":3,\"priority\":0,\"created_ms\":1700000000000}}",
        seq % 97
    )
    .into_bytes();
    v.resize(VALUE_BYTES, b' ');
    v
}

fn seen_key(seq: u64) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[8..16].copy_from_slice(&seq.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes());
    k[16..24].copy_from_slice(&seq.to_be_bytes());
    k
}

struct Fjall {
    db: fjall::Database,
    requests: fjall::Keyspace,
    seen: fjall::Keyspace,
    meta: fjall::Keyspace,
    mode: fjall::PersistMode,
    seq: u64,
    _dir: tempfile::TempDir,
}

impl Fjall {
    fn new(mode: fjall::PersistMode) -> Self {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let db = fjall::Database::builder(dir.path())
            .open()
            .expect("open fjall");
        let opts = fjall::KeyspaceCreateOptions::default;
        let requests = db.keyspace("requests", opts).expect("keyspace");
        let seen = db.keyspace("seen", opts).expect("keyspace");
        let meta = db.keyspace("meta", opts).expect("keyspace");
        Self {
            db,
            requests,
            seen,
            meta,
            mode,
            seq: 0,
            _dir: dir,
        }
    }

    fn round(&mut self) {
        let first = self.seq;
        let mut b = self.db.batch().durability(Some(self.mode));
        for s in first..first + BATCH {
            b.insert(&self.requests, s.to_be_bytes(), value(s));
            b.insert(&self.seen, seen_key(s), []);
        }
        self.seq += BATCH;
        b.insert(&self.meta, "counters", self.seq.to_le_bytes().repeat(8));
        b.commit().expect("commit");
        for s in first..first + BATCH {
            let mut b = self.db.batch().durability(Some(self.mode));
            b.remove(&self.requests, s.to_be_bytes());
            b.insert(&self.meta, "counters", s.to_le_bytes().repeat(8));
            b.commit().expect("commit");
        }
    }
}

const REQUESTS: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("requests");
const SEEN: redb::TableDefinition<&[u8], ()> = redb::TableDefinition::new("seen");
const META: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("meta");

struct Redb {
    db: redb::Database,
    durability: redb::Durability,
    seq: u64,
    _dir: tempfile::TempDir,
}

impl Redb {
    fn new(durability: redb::Durability) -> Self {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let db = redb::Database::create(dir.path().join("frontier.redb")).expect("open redb");
        Self {
            db,
            durability,
            seq: 0,
            _dir: dir,
        }
    }

    fn txn(&self) -> redb::WriteTransaction {
        let mut tx = self.db.begin_write().expect("begin");
        tx.set_durability(self.durability).expect("durability");
        tx
    }

    fn round(&mut self) {
        let first = self.seq;
        self.seq += BATCH;
        let tx = self.txn();
        {
            let mut requests = tx.open_table(REQUESTS).expect("table");
            let mut seen = tx.open_table(SEEN).expect("table");
            let mut meta = tx.open_table(META).expect("table");
            for s in first..first + BATCH {
                requests.insert(s, value(s).as_slice()).expect("insert");
                seen.insert(seen_key(s).as_slice(), ()).expect("insert");
            }
            meta.insert("counters", self.seq.to_le_bytes().repeat(8).as_slice())
                .expect("insert");
        }
        tx.commit().expect("commit");
        for s in first..first + BATCH {
            let tx = self.txn();
            {
                let mut requests = tx.open_table(REQUESTS).expect("table");
                let mut meta = tx.open_table(META).expect("table");
                requests.remove(s).expect("remove");
                meta.insert("counters", s.to_le_bytes().repeat(8).as_slice())
                    .expect("insert");
            }
            tx.commit().expect("commit");
        }
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("frontier_store_write");
    g.throughput(Throughput::Elements(BATCH));
    g.measurement_time(Duration::from_secs(5));
    g.warm_up_time(Duration::from_secs(1));

    let mut f = Fjall::new(fjall::PersistMode::Buffer);
    g.bench_function(BenchmarkId::new("fjall", "buffer"), |b| {
        b.iter(|| f.round())
    });
    black_box(&f.seq);
    drop(f);

    let mut r = Redb::new(redb::Durability::None);
    g.bench_function(BenchmarkId::new("redb", "none"), |b| b.iter(|| r.round()));
    drop(r);

    g.sample_size(10);
    let mut f = Fjall::new(fjall::PersistMode::SyncData);
    g.bench_function(BenchmarkId::new("fjall", "fsync"), |b| b.iter(|| f.round()));
    drop(f);

    let mut r = Redb::new(redb::Durability::Immediate);
    g.bench_function(BenchmarkId::new("redb", "immediate"), |b| {
        b.iter(|| r.round())
    });
    drop(r);
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
