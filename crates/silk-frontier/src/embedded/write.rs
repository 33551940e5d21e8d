//! The embedded frontier's [`Storage`]: a write is *staged* into one fjall write batch (data
//! and counters together) and committed with one `write(2)` (`PersistMode::Buffer`, so it
//! survives `kill -9`); reads go to the keyspaces directly. The core ([`crate::generic`])
//! applies a write to memory only after its commit.

use super::{Fjall, FjallState, storage_error};
use crate::error::FrontierError;
use crate::generic::Storage;
use crate::layout::{self, Counters};
use async_trait::async_trait;
use fjall::{OwnedWriteBatch, PersistMode};
use silk_core::Fingerprint;

/// A fjall batch being built, with the seqs of its new requests.
pub(crate) struct FjallBatch {
    batch: OwnedWriteBatch,
    seqs: Vec<u64>,
}

#[async_trait]
impl Storage for Fjall {
    type State = FjallState;
    type Batch = FjallBatch;

    fn location(&self) -> &str {
        &self.location
    }

    fn batch(&self, state: &FjallState, _segment: u64) -> FjallBatch {
        FjallBatch {
            batch: state.db.batch().durability(Some(PersistMode::Buffer)),
            seqs: Vec::new(),
        }
    }

    async fn load_segment(
        &self,
        state: &FjallState,
        segment: u64,
    ) -> Result<Vec<Fingerprint>, FrontierError> {
        super::load_segment(state, segment, &self.location)
    }

    async fn seen(
        &self,
        state: &FjallState,
        segment: u64,
        fps: &[Fingerprint],
    ) -> Result<Vec<bool>, FrontierError> {
        fps.iter()
            .map(|fp| {
                state
                    .seen
                    .contains_key(layout::seen_key(segment, fp))
                    .map_err(|e| self.err("enqueue (seen lookup)", true, e))
            })
            .collect()
    }

    async fn records(
        &self,
        state: &FjallState,
        seqs: &[u64],
    ) -> Result<Vec<Option<Vec<u8>>>, FrontierError> {
        seqs.iter()
            .map(|seq| {
                state
                    .requests
                    .get(layout::request_key(*seq))
                    .map(|v| v.map(|v| v.to_vec()))
                    .map_err(|e| self.err("read request", true, e))
            })
            .collect()
    }

    fn stage_new(
        &self,
        state: &FjallState,
        batch: &mut FjallBatch,
        seq: u64,
        record: Vec<u8>,
        segment: u64,
        fp: &Fingerprint,
    ) {
        let b = &mut batch.batch;
        b.insert(&state.requests, layout::request_key(seq), record);
        b.insert(&state.seen, layout::seen_key(segment, fp), []);
        batch.seqs.push(seq);
    }

    fn stage_rewrite(&self, state: &FjallState, batch: &mut FjallBatch, seq: u64, record: Vec<u8>) {
        batch
            .batch
            .insert(&state.requests, layout::request_key(seq), record);
    }

    fn stage_delete(&self, state: &FjallState, batch: &mut FjallBatch, seq: u64) {
        batch
            .batch
            .remove(&state.requests, layout::request_key(seq));
    }

    async fn commit(
        &self,
        state: &mut FjallState,
        batch: FjallBatch,
        _before: &Counters,
        after: &Counters,
        op: &'static str,
    ) -> Result<Vec<u64>, FrontierError> {
        let FjallBatch { mut batch, seqs } = batch;
        batch.insert(&state.meta, layout::COUNTERS_KEY, after.encode());
        batch.commit().map_err(|e| self.err(op, false, e))?;
        Ok(seqs)
    }

    async fn set_host_delay(
        &self,
        state: &mut FjallState,
        host: &str,
        delay_ms: u64,
        _segment: u64,
    ) -> Result<(), FrontierError> {
        let mut batch = state.db.batch().durability(Some(PersistMode::Buffer));
        let key = layout::delay_key(host);
        if delay_ms == 0 {
            batch.remove(&state.meta, key);
        } else {
            batch.insert(&state.meta, key, delay_ms.to_le_bytes());
        }
        batch
            .commit()
            .map_err(|e| self.err("set host delay", false, e))
    }

    async fn prune_segments(
        &self,
        state: &mut FjallState,
        below: u64,
    ) -> Result<(), FrontierError> {
        // Seen keys start with their segment (big-endian): everything before `below`'s
        // prefix, in batches of bounded size.
        const BATCH: usize = 10_000;
        let end = layout::seen_prefix(below);
        loop {
            let mut keys = Vec::with_capacity(BATCH);
            for kv in state.seen.range(..end).take(BATCH) {
                keys.push(
                    kv.key()
                        .map_err(|e| self.err("prune (scan seen)", true, e))?,
                );
            }
            if keys.is_empty() {
                return Ok(());
            }
            let mut batch = state.db.batch().durability(Some(PersistMode::Buffer));
            for k in keys {
                batch.remove(&state.seen, k);
            }
            batch
                .commit()
                .map_err(|e| self.err("prune seen sets", true, e))?;
        }
    }

    async fn seen_segments(&self, state: &FjallState) -> Result<Vec<u64>, FrontierError> {
        // One seek per stored segment.
        let mut segments = Vec::new();
        let mut from = 0u64;
        loop {
            let Some(kv) = state.seen.range(layout::seen_prefix(from)..).next() else {
                return Ok(segments);
            };
            let k = kv
                .key()
                .map_err(|e| self.err("stats (seen sets)", true, e))?;
            let Some(segment) = layout::seen_key_segment(&k) else {
                return Ok(segments);
            };
            segments.push(segment);
            match segment.checked_add(1) {
                Some(next) => from = next,
                None => return Ok(segments),
            }
        }
    }

    async fn store_bytes(&self, state: &mut FjallState, now_ms: u64) -> Result<u64, FrontierError> {
        // `disk_space()` walks the store's files: read at most once a second, since callers
        // poll `stats` often.
        match state.disk_space {
            Some((at, bytes)) if now_ms.saturating_sub(at) < 1_000 => Ok(bytes),
            _ => {
                let bytes = state
                    .db
                    .disk_space()
                    .map_err(|e| self.err("stats (disk space)", true, e))?;
                state.disk_space = Some((now_ms, bytes));
                Ok(bytes)
            }
        }
    }

    async fn sync(&self, state: &FjallState) -> Result<(), FrontierError> {
        state
            .db
            .persist(PersistMode::SyncAll)
            .map_err(|e| self.err("sync", true, e))
    }

    async fn close(&self, state: FjallState) -> Result<(), FrontierError> {
        self.stop_fsync();
        let r = state
            .db
            .persist(PersistMode::SyncAll)
            .map_err(|e| self.err("close", false, e));
        drop(state);
        r
    }
}

impl Fjall {
    fn err(&self, op: &'static str, retryable: bool, e: fjall::Error) -> FrontierError {
        storage_error(&self.location, op, retryable, e)
    }
}
