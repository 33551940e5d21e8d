//! The embedded frontier's write paths: enqueue and ack are *staged* into one fjall write
//! batch (data and counters together), committed with one `write(2)`, and only then applied
//! to the in-memory scheduler and dedup cache, so that memory never runs ahead of the disk.
//! `ack_and_enqueue` stages both into the same batch: a page's links are stored if and only
//! if its ack is.
//!
//! This module must not touch memory state that a failed commit would leave wrong: before
//! the commit it may only add to the Bloom filters (a stray bit costs a store read later,
//! never a URL) and process lease expiries (which write nothing).

use super::{EmbeddedFrontier, Inner};
use crate::config::FrontierConfig;
use crate::dedup::Probe;
use crate::error::FrontierError;
use crate::layout;
use crate::sched::LeaseState;
use crate::shared::{self, Added, Finished};
use crate::store::{AckResult, EnqueueOutcome, LeaseId, Outcome};
use fjall::{OwnedWriteBatch, PersistMode};
use layout::Counters;
use silk_core::{Fingerprint, Request};
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

/// A hasher for fingerprints, which are already uniform hashes.
#[derive(Default)]
struct FpHasher(u64);

impl Hasher for FpHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.0 ^= u64::from_le_bytes(b);
        }
    }
}

type FpSet = HashSet<[u8; 16], BuildHasherDefault<FpHasher>>;

/// One write batch being built, and what to apply to memory once it is committed.
pub(super) struct Staged {
    batch: OwnedWriteBatch,
    counters: Counters,
    now_ms: u64,
    segment: u64,
    /// Whether the batch must be written (the counters changed).
    dirty: bool,
    /// New requests, by seq.
    added: Vec<(u64, Added)>,
    /// Leases finished by this batch; `Some` = re-queue with this not-before time.
    finished: Finished,
    stale: u64,
}

impl Staged {
    pub(super) fn new(inner: &Inner, now_ms: u64, cfg: &FrontierConfig) -> Self {
        Self {
            batch: inner.db.batch().durability(Some(PersistMode::Buffer)),
            counters: inner.counters,
            now_ms,
            segment: cfg.segment_of(now_ms),
            dirty: false,
            added: Vec::new(),
            finished: Vec::new(),
            stale: 0,
        }
    }
}

impl EmbeddedFrontier {
    /// Stages new requests; duplicates are counted and dropped.
    pub(super) fn stage_enqueue(
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
            super::load_segment(inner, segment, &self.location)?;
        }
        let mut in_batch = FpSet::default();
        // Known duplicates first (exact, one cache line each; probed in a tight loop so that
        // the cache misses overlap), then the Bloom filter (one miss per hash function),
        // then the store.
        let fps: Vec<Fingerprint> = requests.iter().map(Request::fingerprint).collect();
        let recent: Vec<bool> = fps
            .iter()
            .map(|fp| inner.recent.contains(segment, fp))
            .collect();
        for ((mut request, fp), recent) in requests.into_iter().zip(fps).zip(recent) {
            if request.created_ms == 0 {
                request.created_ms = st.now_ms;
            }
            let known = recent || in_batch.contains(&fp.0);
            let new = !known
                && match inner.blooms.probe_insert(segment, &fp) {
                    Probe::New => true,
                    Probe::Maybe => {
                        let key = layout::seen_key(segment, &fp);
                        let seen = inner
                            .seen
                            .contains_key(key)
                            .map_err(|e| self.err("enqueue (seen lookup)", true, e))?;
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
            in_batch.insert(fp.0);
            let host = request.host_key();
            let seq = st.counters.next_seq;
            st.counters.next_seq += 1;
            let value =
                layout::encode_record(&request, &host, 0).map_err(|e| FrontierError::Storage {
                    location: self.location.clone(),
                    op: "enqueue (encode request)",
                    retryable: false,
                    source: Box::new(e),
                })?;
            st.batch
                .insert(&inner.requests, layout::request_key(seq), value);
            st.batch
                .insert(&inner.seen, layout::seen_key(segment, &fp), []);
            st.added.push((
                seq,
                Added {
                    host,
                    priority: request.priority,
                    created_ms: request.created_ms,
                    fp,
                },
            ));
            outcome.added += 1;
        }
        st.counters.total += outcome.added;
        st.counters.duplicates += outcome.duplicates;
        st.dirty = true;
        Ok(outcome)
    }

    /// Stages acks; stale ones are reported and change nothing.
    pub(super) fn stage_acks(
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
        let mut results = Vec::with_capacity(acks.len());
        for (id, outcome) in acks {
            let state = inner.sched.check(id.0, now);
            let entry = match state {
                _ if st.finished.iter().any(|(l, _)| *l == id.0) => None,
                LeaseState::Live(entry) => Some(entry),
                LeaseState::Expired => {
                    st.stale += 1;
                    results.push(AckResult::Expired);
                    continue;
                }
                LeaseState::Unknown => None,
            };
            let Some(entry) = entry else {
                st.stale += 1;
                results.push(AckResult::Unknown);
                continue;
            };
            st.dirty = true;
            let key = layout::request_key(entry.seq);
            let record = if shared::needs_record(&outcome) {
                inner
                    .requests
                    .get(key)
                    .map_err(|e| self.err("ack (read request)", true, e))?
            } else {
                None
            };
            let plan = ctx.plan(outcome, entry.seq, record.as_deref(), &mut st.counters);
            if let Some(value) = plan.rewrite {
                st.batch.insert(&inner.requests, key, value);
            } else if plan.requeue_at.is_none() {
                st.batch.remove(&inner.requests, key);
            }
            st.finished
                .push((id.0, plan.requeue_at.map(|at| (entry, at))));
            results.push(plan.result);
        }
        Ok(results)
    }

    /// Writes the batch (if anything changed) and applies it to memory.
    pub(super) fn commit(
        &self,
        inner: &mut Inner,
        st: Staged,
        op: &'static str,
    ) -> Result<(), FrontierError> {
        let Staged {
            mut batch,
            counters,
            now_ms,
            segment,
            dirty,
            added,
            finished,
            stale,
        } = st;
        inner.stale_acks += stale;
        if !dirty {
            return Ok(());
        }
        batch.insert(&inner.meta, layout::COUNTERS_KEY, counters.encode());
        batch.commit().map_err(|e| self.err(op, false, e))?;
        inner.counters = counters;
        let (sched, recent) = (&mut inner.sched, &mut inner.recent);
        shared::apply_committed(sched, recent, segment, now_ms, finished, added);
        Ok(())
    }
}
