//! The embedded frontier's write paths: enqueue and ack are *staged* into one fjall write
//! batch (data and counters together), committed with one `write(2)`, and only then applied
//! to the in-memory scheduler and dedup cache, so that memory never runs ahead of the disk.
//! `ack_and_enqueue` stages both into the same batch: a page's links are stored if and only
//! if its ack is.
//!
//! This module must not touch memory state that a failed commit would leave wrong: before
//! the commit it may only add to the Bloom filters (a stray bit costs a store read later,
//! never a URL) and process lease expiries (which write nothing).

use super::{EmbeddedFrontier, Inner, layout};
use crate::config::FrontierConfig;
use crate::dedup::Probe;
use crate::error::FrontierError;
use crate::sched::{Entry, LeaseState};
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

struct Added {
    seq: u64,
    host: String,
    priority: i32,
    created_ms: u64,
    fp: Fingerprint,
}

/// One write batch being built, and what to apply to memory once it is committed.
pub(super) struct Staged {
    batch: OwnedWriteBatch,
    counters: Counters,
    now_ms: u64,
    segment: u64,
    /// Whether the batch must be written (the counters changed).
    dirty: bool,
    added: Vec<Added>,
    /// Leases finished by this batch; `Some` = re-queue with this not-before time.
    finished: Vec<(u64, Option<(Entry, u64)>)>,
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
            st.added.push(Added {
                seq,
                host,
                priority: request.priority,
                created_ms: request.created_ms,
                fp,
            });
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
            let c = &mut st.counters;
            let result = match outcome {
                Outcome::Done => {
                    c.success += 1;
                    AckResult::Succeeded
                }
                Outcome::Release { reason } => {
                    tracing::debug!(seq = entry.seq, %reason, "request released");
                    st.finished.push((id.0, Some((entry, now))));
                    results.push(AckResult::Released);
                    continue;
                }
                Outcome::Dropped { reason } => {
                    tracing::debug!(seq = entry.seq, %reason, "request dropped");
                    c.dropped += 1;
                    AckResult::Dropped
                }
                Outcome::Failed { reason } => {
                    tracing::debug!(seq = entry.seq, %reason, "request failed");
                    c.failed += 1;
                    AckResult::Failed
                }
                Outcome::Retry { reason } => {
                    let v = inner
                        .requests
                        .get(key)
                        .map_err(|e| self.err("ack (read request)", true, e))?;
                    match v
                        .as_deref()
                        .and_then(layout::decode_header)
                        .map(|h| h.retries)
                    {
                        Some(retries) if retries < self.cfg.max_retries => {
                            let not_before_ms = now.saturating_add(self.cfg.retry_backoff(retries));
                            let value = v
                                .as_deref()
                                .and_then(|v| layout::rewrite_retry(v, retries + 1, not_before_ms));
                            if let Some(value) = value {
                                tracing::debug!(seq = entry.seq, %reason, retries = retries + 1, "request re-queued");
                                st.batch.insert(&inner.requests, key, value);
                                c.retries += 1;
                                st.finished.push((id.0, Some((entry, not_before_ms))));
                                results.push(AckResult::Requeued {
                                    retries: retries + 1,
                                    not_before_ms,
                                });
                                continue;
                            }
                            c.failed += 1;
                            AckResult::Failed
                        }
                        Some(_) => {
                            tracing::debug!(seq = entry.seq, %reason, "request failed: retries exhausted");
                            c.failed += 1;
                            AckResult::Failed
                        }
                        None if v.is_none() => {
                            tracing::error!(store = %self.location, seq = entry.seq, "leased request missing from the store");
                            AckResult::Failed
                        }
                        None => {
                            tracing::error!(store = %self.location, seq = entry.seq, "corrupt request record counted failed");
                            c.corrupt += 1;
                            c.failed += 1;
                            AckResult::Failed
                        }
                    }
                }
            };
            st.batch.remove(&inner.requests, key);
            st.finished.push((id.0, None));
            results.push(result);
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
        for (lease, requeue) in finished {
            inner.sched.finish(lease, now_ms);
            if let Some((entry, not_before_ms)) = requeue {
                inner.sched.push(entry, not_before_ms, now_ms);
            }
        }
        for a in added {
            // Only what is stored may confirm a duplicate.
            inner.recent.insert(segment, &a.fp);
            let host = inner.sched.host_id(&a.host);
            inner.sched.push(
                Entry {
                    seq: a.seq,
                    host,
                    priority: a.priority,
                    created_ms: a.created_ms,
                },
                0,
                now_ms,
            );
        }
        Ok(())
    }
}
