//! The frontier core: everything a frontier does apart from storing, written once for every
//! backend — the scheduler (`sched`), dedup (`dedup`: the segments' Bloom filters and the
//! exact cache of recent fingerprints), staging enqueues and acks into one atomic write, the
//! ack plan (`plan`), applying a committed write to memory, the stats, and so the whole
//! [`FrontierStore`] behaviour ([`Core`]). A backend implements only [`Storage`]: reads (seen
//! lookups, records, a segment's fingerprints), staging into its own write and the atomic
//! commit, and its extras (host delays, size, sync, close). Its `open` rebuilds [`Mem`] from
//! what it stores and hands both to [`Core::new`].
//!
//! **Invariant: memory never runs ahead of storage.** Before a commit, staging may only add
//! to the Bloom filters (a stray bit costs a store read later, never a URL), put confirmed
//! duplicates in the recent set (they are stored already), and expire leases (which writes
//! nothing); new requests, finished leases and counters reach memory only after the commit
//! returned `Ok`. A call dropped while it waits on storage leaves memory as it was (leases
//! picked by a dropped `lease` expire as usual).

use crate::config::FrontierConfig;
use crate::dedup::{Probe, RecentSet, SegmentBlooms};
use crate::error::FrontierError;
use crate::layout::{self, Counters};
use crate::plan::{self, Added, Finished};
use crate::sched::{LeaseState, Scheduler};
use crate::store::{AckResult, EnqueueOutcome, FrontierStats, Lease, LeaseId, Outcome};
use crate::window::{self, Window};
use async_trait::async_trait;
use silk_core::{Clock, Fingerprint, Request};
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard};

/// The in-memory state of an open frontier, rebuilt by the backend's `open`.
pub(crate) struct Mem {
    pub sched: Scheduler,
    pub blooms: SegmentBlooms,
    pub recent: RecentSet,
    pub counters: Counters,
    /// Acks that were no-ops (session).
    pub stale_acks: u64,
    /// The seen sets of the segments below this one are pruned (0 at open: the first
    /// write prunes what is due).
    pub pruned_below: u64,
    /// Which pending requests are in `sched` (the backend's `open` sets it with
    /// [`crate::window::OpenWindow`]).
    pub window: Window,
}

impl Mem {
    /// Memory for `sched` and `counters` as stored; empty dedup state sized by `cfg`
    /// (`recent_entries`: the exact cache's size, by default `expected_urls` within
    /// 1,024..=1,048,576 — and 1,024 without `exact_dedup`, where it would save Bloom probes
    /// only, not store reads).
    pub(crate) fn new(
        cfg: &FrontierConfig,
        sched: Scheduler,
        counters: Counters,
        recent_entries: Option<usize>,
    ) -> Self {
        let recent = recent_entries.unwrap_or_else(|| {
            if !cfg.exact_dedup {
                return 1 << 10;
            }
            usize::try_from(cfg.expected_urls)
                .unwrap_or(usize::MAX)
                .clamp(1 << 10, 1 << 20)
        });
        Self {
            sched,
            blooms: SegmentBlooms::new(cfg.expected_urls, cfg.bloom_fp_rate),
            recent: RecentSet::new(recent),
            counters,
            stale_acks: 0,
            pruned_below: 0,
            window: Window::new(cfg.memory_window),
        }
    }
}

/// What a backend stores and how. Every method that reads may fail retryably and changes
/// nothing; [`Storage::commit`] is all or nothing.
#[async_trait]
pub(crate) trait Storage: Send + Sync + 'static {
    /// What the backend keeps per open handle (its database handle, its caches), under the
    /// frontier's lock with [`Mem`]; dropped at close.
    type State: Send + Sync;
    /// A write being built.
    type Batch: Send;

    /// Where the frontier is, for errors and logs (no secrets).
    fn location(&self) -> &str;
    /// Fails when the handle must not be used any more (Redis: fenced, or a write of
    /// unknown outcome).
    fn usable(&self, _state: &Self::State) -> Result<(), FrontierError> {
        Ok(())
    }
    /// A new, empty write for a call at `segment`.
    fn batch(&self, state: &Self::State, segment: u64) -> Self::Batch;
    /// The fingerprints stored in the seen set of `segment`.
    async fn load_segment(
        &self,
        state: &Self::State,
        segment: u64,
    ) -> Result<Vec<Fingerprint>, FrontierError>;
    /// Which of `fps` the seen set of `segment` holds, in order.
    async fn seen(
        &self,
        state: &Self::State,
        segment: u64,
        fps: &[Fingerprint],
    ) -> Result<Vec<bool>, FrontierError>;
    /// The stored records of `seqs`, in order (`None`: not stored).
    async fn records(
        &self,
        state: &Self::State,
        seqs: &[u64],
    ) -> Result<Vec<Option<Vec<u8>>>, FrontierError>;
    /// Stages a new request: its `record` (under `seq`, or under the seq the store assigns at
    /// commit) and its fingerprint in the seen set of `segment`.
    fn stage_new(
        &self,
        state: &Self::State,
        batch: &mut Self::Batch,
        seq: u64,
        record: Vec<u8>,
        segment: u64,
        fp: &Fingerprint,
    );
    /// Stages a stored request's new record.
    fn stage_rewrite(
        &self,
        state: &Self::State,
        batch: &mut Self::Batch,
        seq: u64,
        record: Vec<u8>,
    );
    /// Stages the deletion of a stored request.
    fn stage_delete(&self, state: &Self::State, batch: &mut Self::Batch, seq: u64);
    /// Writes `batch` and the counters going from `before` to `after`, atomically. Returns
    /// the seqs the new requests are stored under, in the order they were staged.
    async fn commit(
        &self,
        state: &mut Self::State,
        batch: Self::Batch,
        before: &Counters,
        after: &Counters,
        op: &'static str,
    ) -> Result<Vec<u64>, FrontierError>;
    /// Stores a host's own delay (0: removes it).
    async fn set_host_delay(
        &self,
        state: &mut Self::State,
        host: &str,
        delay_ms: u64,
        segment: u64,
    ) -> Result<(), FrontierError>;
    /// Deletes the seen sets of the segments below `below` (their segments are over and past
    /// their retention). Not part of any call's atomic write: a crash in between leaves
    /// sets that the next prune deletes.
    async fn prune_segments(
        &self,
        state: &mut Self::State,
        below: u64,
    ) -> Result<(), FrontierError>;
    /// The segments whose seen sets are stored.
    async fn seen_segments(&self, state: &Self::State) -> Result<Vec<u64>, FrontierError>;
    /// Bytes the frontier uses in storage (may be cached for a second by `now_ms`).
    async fn store_bytes(&self, state: &mut Self::State, now_ms: u64)
    -> Result<u64, FrontierError>;
    /// Makes completed writes durable against power loss.
    async fn sync(&self, state: &Self::State) -> Result<(), FrontierError>;
    /// Syncs and releases the handle's resources.
    async fn close(&self, state: Self::State) -> Result<(), FrontierError>;
}

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

/// Most records one read of a window load asks for.
const REFILL_CHUNK: u64 = 8_192;

/// One write being built, and what to apply to memory once it is committed.
struct Staged<B> {
    batch: B,
    /// The counters after the write.
    counters: Counters,
    now_ms: u64,
    segment: u64,
    /// Whether the write must reach storage (something was staged or counted).
    dirty: bool,
    /// New requests, in staging order.
    added: Vec<Added>,
    finished: Finished,
    stale: u64,
}

/// The frontier of one run over a [`Storage`]: the whole [`crate::FrontierStore`]
/// behaviour (the backends' public types forward to it).
pub(crate) struct Core<S: Storage> {
    storage: S,
    cfg: FrontierConfig,
    clock: Arc<dyn Clock>,
    inner: Mutex<Option<(Mem, S::State)>>,
}

type Guard<'a, S> = MappedMutexGuard<'a, (Mem, <S as Storage>::State)>;

impl<S: Storage> Core<S> {
    /// A frontier over `storage`, with the memory and state its `open` rebuilt.
    pub(crate) fn new(
        storage: S,
        cfg: FrontierConfig,
        clock: Arc<dyn Clock>,
        mem: Mem,
        state: S::State,
    ) -> Self {
        Self {
            storage,
            cfg,
            clock,
            inner: Mutex::new(Some((mem, state))),
        }
    }

    pub(crate) fn location(&self) -> &str {
        self.storage.location()
    }

    /// The open frontier's memory and storage state, locked; `Closed` after `close`.
    async fn lock(&self) -> Result<Guard<'_, S>, FrontierError> {
        let guard = MutexGuard::try_map(self.inner.lock().await, Option::as_mut)
            .map_err(|_| FrontierError::Closed)?;
        self.storage.usable(&guard.1)?;
        Ok(guard)
    }

    fn staged(&self, mem: &Mem, state: &S::State) -> Staged<S::Batch> {
        let now_ms = self.clock.now_ms();
        let segment = self.cfg.segment_of(now_ms);
        Staged {
            batch: self.storage.batch(state, segment),
            counters: mem.counters,
            now_ms,
            segment,
            dirty: false,
            added: Vec::new(),
            finished: Vec::new(),
            stale: 0,
        }
    }

    fn storage_error(&self, op: &'static str, why: String) -> FrontierError {
        FrontierError::Storage {
            location: self.location().to_owned(),
            op,
            retryable: false,
            source: why.into(),
        }
    }

    /// Stages new requests; duplicates (in the batch, in the recent set, or confirmed by
    /// the store after a Bloom "maybe") are counted and dropped.
    async fn stage_enqueue(
        &self,
        mem: &mut Mem,
        state: &S::State,
        st: &mut Staged<S::Batch>,
        requests: Vec<Request>,
    ) -> Result<EnqueueOutcome, FrontierError> {
        let mut outcome = EnqueueOutcome::default();
        if requests.is_empty() {
            return Ok(outcome);
        }
        let segment = st.segment;
        if !mem.blooms.has(segment) {
            let fps = self.storage.load_segment(state, segment).await?;
            mem.blooms.load(segment, fps);
        }
        enum Verdict {
            Dup,
            New,
            Check,
        }
        // Known duplicates first (exact, one cache line each; probed in a tight loop so that
        // the cache misses overlap), then the batch itself, then the Bloom filter (one miss
        // per hash function), then the store, for the Bloom's "maybe"s only, in one read.
        let fps: Vec<Fingerprint> = requests.iter().map(Request::fingerprint).collect();
        let recent: Vec<bool> = fps
            .iter()
            .map(|fp| mem.recent.contains(segment, fp))
            .collect();
        let mut in_batch = FpSet::default();
        let mut checks: Vec<Fingerprint> = Vec::new();
        let verdicts: Vec<Verdict> = fps
            .iter()
            .zip(recent)
            .map(|(fp, recent)| {
                // A fingerprint enters the batch's set at its first occurrence, whatever the
                // store says of it: a second occurrence is a duplicate either way.
                if recent || !in_batch.insert(fp.0) {
                    return Verdict::Dup;
                }
                match mem.blooms.probe_insert(segment, fp) {
                    Probe::New => Verdict::New,
                    // The segment's filter is loaded (above): its "maybe" is the answer.
                    Probe::Maybe if !self.cfg.exact_dedup => Verdict::Dup,
                    Probe::Maybe => {
                        checks.push(*fp);
                        Verdict::Check
                    }
                }
            })
            .collect();
        let seen = if checks.is_empty() {
            Vec::new()
        } else {
            self.storage.seen(state, segment, &checks).await?
        };
        if seen.len() != checks.len() {
            let why = format!("{} seen answers for {} lookups", seen.len(), checks.len());
            return Err(self.storage_error("enqueue (seen lookup)", why));
        }
        let mut seen = seen.into_iter();
        for ((mut request, fp), verdict) in requests.into_iter().zip(fps).zip(verdicts) {
            let new = match verdict {
                Verdict::Dup => false,
                Verdict::New => true,
                Verdict::Check => {
                    let stored = seen.next().unwrap_or(true);
                    if stored {
                        mem.recent.insert(segment, &fp);
                    } else {
                        mem.blooms.confirm_new(segment);
                    }
                    !stored
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
            let record =
                layout::encode_record(&request, &host, 0).map_err(|e| FrontierError::Storage {
                    location: self.location().to_owned(),
                    op: "enqueue (encode request)",
                    retryable: false,
                    source: Box::new(e),
                })?;
            let seq = st.counters.next_seq;
            st.counters.next_seq += 1;
            self.storage
                .stage_new(state, &mut st.batch, seq, record, segment, &fp);
            st.added.push(Added {
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

    /// Stages acks; stale ones (expired, unknown, or a lease acked twice in the batch) are
    /// reported and change nothing.
    async fn stage_acks(
        &self,
        mem: &mut Mem,
        state: &S::State,
        st: &mut Staged<S::Batch>,
        acks: Vec<(LeaseId, Outcome)>,
    ) -> Result<Vec<AckResult>, FrontierError> {
        let now = st.now_ms;
        // Pass 1: the leases' states, in order.
        let mut taken: HashSet<u64> = st.finished.iter().map(|(l, _)| *l).collect();
        let states: Vec<LeaseState> = acks
            .iter()
            .map(|(id, _)| {
                if taken.contains(&id.0) {
                    return LeaseState::Unknown;
                }
                let state = mem.sched.check(id.0, now);
                if matches!(state, LeaseState::Live(_)) {
                    taken.insert(id.0);
                }
                state
            })
            .collect();
        // The records of live retries, in one read.
        let retry_seqs: Vec<u64> = acks
            .iter()
            .zip(&states)
            .filter_map(
                |((_, outcome), state)| match (state, plan::needs_record(outcome)) {
                    (LeaseState::Live(entry), true) => Some(entry.seq),
                    _ => None,
                },
            )
            .collect();
        let mut records = if retry_seqs.is_empty() {
            Vec::new()
        } else {
            self.storage.records(state, &retry_seqs).await?
        };
        if records.len() != retry_seqs.len() {
            let why = format!("{} records for {} reads", records.len(), retry_seqs.len());
            return Err(self.storage_error("ack (read request)", why));
        }
        records.reverse(); // popped in order below
        let ctx = plan::AckCtx {
            cfg: &self.cfg,
            now,
            location: self.location(),
        };
        let mut results = Vec::with_capacity(acks.len());
        for ((id, outcome), state_of) in acks.into_iter().zip(states) {
            let entry = match state_of {
                LeaseState::Live(entry) => entry,
                LeaseState::Expired => {
                    st.stale += 1;
                    results.push(AckResult::Expired);
                    continue;
                }
                LeaseState::Unknown => {
                    st.stale += 1;
                    results.push(AckResult::Unknown);
                    continue;
                }
            };
            st.dirty = true;
            let record = if plan::needs_record(&outcome) {
                records.pop().flatten()
            } else {
                None
            };
            let plan = ctx.plan(outcome, entry.seq, record.as_deref(), &mut st.counters);
            if let Some(value) = plan.rewrite {
                self.storage
                    .stage_rewrite(state, &mut st.batch, entry.seq, value);
            } else if plan.requeue_at.is_none() {
                self.storage.stage_delete(state, &mut st.batch, entry.seq);
            }
            st.finished
                .push((id.0, plan.requeue_at.map(|at| (entry, at))));
            results.push(plan.result);
        }
        Ok(results)
    }

    /// Commits a staged write (if anything changed) and applies it to memory.
    async fn commit(
        &self,
        mem: &mut Mem,
        state: &mut S::State,
        st: Staged<S::Batch>,
        op: &'static str,
    ) -> Result<(), FrontierError> {
        mem.stale_acks += st.stale;
        if !st.dirty {
            return Ok(());
        }
        let seqs = self
            .storage
            .commit(state, st.batch, &mem.counters, &st.counters, op)
            .await?;
        if seqs.len() != st.added.len() {
            let why = format!(
                "the write stored {} seqs for {} new requests",
                seqs.len(),
                st.added.len()
            );
            return Err(self.storage_error(op, why));
        }
        let mut counters = st.counters;
        if let Some(last) = seqs.iter().max() {
            counters.next_seq = counters.next_seq.max(last + 1);
        }
        mem.counters = counters;
        let added = seqs.into_iter().zip(st.added);
        plan::apply_committed(
            &mut mem.sched,
            &mut mem.recent,
            &mut mem.window,
            st.segment,
            st.now_ms,
            st.finished,
            added,
        );
        self.prune(mem, state, st.now_ms).await;
        Ok(())
    }

    /// Loads spilled requests, lowest seqs first, until `target` are pending in memory or
    /// none is spilled (reads only: memory then holds what the store holds).
    async fn refill(
        &self,
        mem: &mut Mem,
        state: &S::State,
        target: u64,
    ) -> Result<(), FrontierError> {
        let now = self.clock.now_ms();
        while mem.window.spilled > 0 && mem.sched.pending() < target {
            let from = mem.window.loaded_below;
            let end = mem.counters.next_seq;
            if from >= end {
                tracing::warn!(store = %self.location(), spilled = mem.window.spilled, "spilled requests counted but none stored past the window; counted none");
                mem.window.spilled = 0;
                break;
            }
            let want = (target - mem.sched.pending())
                .min(REFILL_CHUNK)
                .min(end - from);
            let seqs: Vec<u64> = (from..from + want).collect();
            let records = self.storage.records(state, &seqs).await?;
            if records.len() != seqs.len() {
                let why = format!("{} records for {} reads", records.len(), seqs.len());
                return Err(self.storage_error("load the window", why));
            }
            for (seq, record) in seqs.into_iter().zip(records) {
                // None: a gap (a corrupt record removed at open).
                let Some(record) = record else { continue };
                let header = layout::decode_header(&record);
                let (entry, not_before) =
                    window::entry_of(&mut mem.sched, seq, header.as_ref(), now);
                mem.sched.push(entry, not_before, now);
                mem.window.spilled = mem.window.spilled.saturating_sub(1);
            }
            mem.window.loaded_below = from + want;
        }
        Ok(())
    }

    /// Prunes the seen sets that are past their retention at `now_ms`, once per segment.
    /// A failure is logged and tried again at the next write: the call it follows is done.
    async fn prune(&self, mem: &mut Mem, state: &mut S::State, now_ms: u64) {
        let below = self.cfg.prune_below(now_ms);
        if below <= mem.pruned_below {
            return;
        }
        match self.storage.prune_segments(state, below).await {
            Ok(()) => mem.pruned_below = below,
            Err(e) => {
                tracing::warn!(store = %self.location(), below, error = %e, "old seen sets not pruned; trying again at the next write")
            }
        }
    }

    pub(crate) async fn enqueue(
        &self,
        requests: Vec<Request>,
    ) -> Result<EnqueueOutcome, FrontierError> {
        let mut guard = self.lock().await?;
        let (mem, state) = &mut *guard;
        let mut st = self.staged(mem, state);
        let outcome = self.stage_enqueue(mem, state, &mut st, requests).await?;
        self.commit(mem, state, st, "enqueue").await?;
        Ok(outcome)
    }

    pub(crate) async fn lease(&self, max: usize) -> Result<Vec<Lease>, FrontierError> {
        let mut guard = self.lock().await?;
        let (mem, state) = &mut *guard;
        let now = self.clock.now_ms();
        let cap = mem.window.cap;
        if mem.window.spilled > 0 && mem.sched.pending() < cap - cap / 4 {
            // One chunk per call: the window fills back up over the next calls, no call
            // reads much.
            let target = (mem.sched.pending() + REFILL_CHUNK).min(cap);
            self.refill(mem, state, target).await?;
        }
        let mut picks = mem.sched.lease(max, now);
        if picks.len() < max && mem.window.spilled > 0 && mem.sched.pending() < 2 * cap {
            // What is in memory cannot all be leased now (politeness): up to twice the
            // window, so that other hosts' requests get in.
            let target = (mem.sched.pending() + REFILL_CHUNK).min(2 * cap);
            match self.refill(mem, state, target).await {
                Ok(()) => picks.extend(mem.sched.lease(max - picks.len(), now)),
                Err(e) => {
                    tracing::warn!(store = %self.location(), error = %e, "window not loaded; leasing what is in memory")
                }
            }
        }
        if picks.is_empty() {
            return Ok(Vec::new());
        }
        let seqs: Vec<u64> = picks.iter().map(|p| p.entry.seq).collect();
        let values = match self.storage.records(state, &seqs).await {
            Ok(v) if v.len() == picks.len() => v,
            other => {
                for p in &picks {
                    mem.sched.release(p.lease_id, now);
                }
                return Err(match other {
                    Err(e) => e,
                    Ok(v) => FrontierError::Storage {
                        location: self.location().to_owned(),
                        op: "lease (read requests)",
                        retryable: true,
                        source: format!("{} records for {} reads", v.len(), picks.len()).into(),
                    },
                });
            }
        };
        let mut out = Vec::with_capacity(picks.len());
        let mut corrupt = Vec::new();
        for (p, value) in picks.into_iter().zip(values) {
            match value {
                Some(v) => match layout::decode_record(&v) {
                    Ok(request) => out.push(Lease {
                        id: LeaseId(p.lease_id),
                        request,
                        deadline_ms: p.deadline_ms,
                    }),
                    Err(reason) => {
                        tracing::error!(store = %self.location(), seq = p.entry.seq, %reason, "corrupt request record skipped and counted failed");
                        corrupt.push(p);
                    }
                },
                None => {
                    tracing::error!(store = %self.location(), seq = p.entry.seq, "scheduled request missing from the store; skipped");
                    mem.sched.discard(p.lease_id, now);
                }
            }
        }
        if !corrupt.is_empty() {
            let mut st = self.staged(mem, state);
            for p in &corrupt {
                self.storage.stage_delete(state, &mut st.batch, p.entry.seq);
                st.finished.push((p.lease_id, None));
            }
            st.counters.corrupt += corrupt.len() as u64;
            st.counters.failed += corrupt.len() as u64;
            st.dirty = true;
            // Left in flight when this fails: they expire and are met again.
            if let Err(e) = self
                .commit(mem, state, st, "lease (drop corrupt records)")
                .await
            {
                tracing::error!(store = %self.location(), error = %e, "could not drop corrupt records");
            }
        }
        Ok(out)
    }

    pub(crate) async fn next_ready_ms(&self) -> Result<Option<u64>, FrontierError> {
        let mut guard = self.lock().await?;
        let (mem, state) = &mut *guard;
        if mem.sched.pending() == 0 && mem.window.spilled > 0 {
            let target = REFILL_CHUNK.min(mem.window.cap);
            self.refill(mem, state, target).await?;
        }
        Ok(mem.sched.next_ready_ms(self.clock.now_ms()))
    }

    pub(crate) async fn ack_many(
        &self,
        acks: Vec<(LeaseId, Outcome)>,
    ) -> Result<Vec<AckResult>, FrontierError> {
        let mut guard = self.lock().await?;
        let (mem, state) = &mut *guard;
        let mut st = self.staged(mem, state);
        let results = self.stage_acks(mem, state, &mut st, acks).await?;
        self.commit(mem, state, st, "ack").await?;
        Ok(results)
    }

    pub(crate) async fn ack(
        &self,
        lease: LeaseId,
        outcome: Outcome,
    ) -> Result<AckResult, FrontierError> {
        Ok(self
            .ack_many(vec![(lease, outcome)])
            .await?
            .pop()
            .unwrap_or(AckResult::Unknown))
    }

    pub(crate) async fn ack_and_enqueue(
        &self,
        lease: LeaseId,
        outcome: Outcome,
        discovered: Vec<Request>,
    ) -> Result<(AckResult, EnqueueOutcome), FrontierError> {
        let (mut results, enqueued) = self
            .ack_many_and_enqueue(vec![(lease, outcome)], discovered)
            .await?;
        Ok((results.pop().unwrap_or(AckResult::Unknown), enqueued))
    }

    pub(crate) async fn ack_many_and_enqueue(
        &self,
        acks: Vec<(LeaseId, Outcome)>,
        discovered: Vec<Request>,
    ) -> Result<(Vec<AckResult>, EnqueueOutcome), FrontierError> {
        let mut guard = self.lock().await?;
        let (mem, state) = &mut *guard;
        let mut st = self.staged(mem, state);
        let results = self.stage_acks(mem, state, &mut st, acks).await?;
        let enqueued = self.stage_enqueue(mem, state, &mut st, discovered).await?;
        self.commit(mem, state, st, "ack and enqueue").await?;
        Ok((results, enqueued))
    }

    pub(crate) async fn expire(&self) -> Result<usize, FrontierError> {
        let mut guard = self.lock().await?;
        let (mem, _) = &mut *guard;
        Ok(mem.sched.advance(self.clock.now_ms()))
    }

    pub(crate) async fn set_host_delay(
        &self,
        host: &str,
        delay_ms: u64,
    ) -> Result<(), FrontierError> {
        let mut guard = self.lock().await?;
        let (mem, state) = &mut *guard;
        let now = self.clock.now_ms();
        let segment = self.cfg.segment_of(now);
        self.storage
            .set_host_delay(state, host, delay_ms, segment)
            .await?;
        let id = mem.sched.host_id(host);
        mem.sched.set_host_delay(id, delay_ms, now);
        Ok(())
    }

    pub(crate) async fn stats(&self) -> Result<FrontierStats, FrontierError> {
        let mut guard = self.lock().await?;
        let (mem, state) = &mut *guard;
        let store_bytes = self.storage.store_bytes(state, self.clock.now_ms()).await?;
        let segments = self.storage.seen_segments(state).await?.len() as u64;
        let mut stats = plan::stats(
            &mem.counters,
            &mem.sched,
            &mem.blooms,
            &mem.recent,
            mem.stale_acks,
            store_bytes,
            mem.window.spilled,
        );
        stats.seen_segments = segments;
        Ok(stats)
    }

    pub(crate) async fn sync(&self) -> Result<(), FrontierError> {
        let guard = self.lock().await?;
        let (_, state) = &*guard;
        self.storage.sync(state).await
    }

    pub(crate) async fn close(&self) -> Result<(), FrontierError> {
        let taken = self.inner.lock().await.take();
        match taken {
            None => Ok(()),
            Some((_, state)) => self.storage.close(state).await,
        }
    }
}

/// Implements [`crate::FrontierStore`] for a backend's public type by forwarding to its
/// `core` field (a [`Core`]).
macro_rules! frontier_store_by_core {
    ($t:ty) => {
        #[async_trait::async_trait]
        impl $crate::store::FrontierStore for $t {
            async fn enqueue(
                &self,
                requests: Vec<silk_core::Request>,
            ) -> Result<$crate::store::EnqueueOutcome, $crate::FrontierError> {
                self.core.enqueue(requests).await
            }
            async fn lease(
                &self,
                max: usize,
            ) -> Result<Vec<$crate::store::Lease>, $crate::FrontierError> {
                self.core.lease(max).await
            }
            async fn next_ready_ms(&self) -> Result<Option<u64>, $crate::FrontierError> {
                self.core.next_ready_ms().await
            }
            async fn ack(
                &self,
                lease: $crate::store::LeaseId,
                outcome: $crate::store::Outcome,
            ) -> Result<$crate::store::AckResult, $crate::FrontierError> {
                self.core.ack(lease, outcome).await
            }
            async fn ack_many(
                &self,
                acks: Vec<($crate::store::LeaseId, $crate::store::Outcome)>,
            ) -> Result<Vec<$crate::store::AckResult>, $crate::FrontierError> {
                self.core.ack_many(acks).await
            }
            async fn ack_and_enqueue(
                &self,
                lease: $crate::store::LeaseId,
                outcome: $crate::store::Outcome,
                discovered: Vec<silk_core::Request>,
            ) -> Result<
                ($crate::store::AckResult, $crate::store::EnqueueOutcome),
                $crate::FrontierError,
            > {
                self.core.ack_and_enqueue(lease, outcome, discovered).await
            }
            async fn ack_many_and_enqueue(
                &self,
                acks: Vec<($crate::store::LeaseId, $crate::store::Outcome)>,
                discovered: Vec<silk_core::Request>,
            ) -> Result<
                (Vec<$crate::store::AckResult>, $crate::store::EnqueueOutcome),
                $crate::FrontierError,
            > {
                self.core.ack_many_and_enqueue(acks, discovered).await
            }
            async fn expire(&self) -> Result<usize, $crate::FrontierError> {
                self.core.expire().await
            }
            async fn set_host_delay(
                &self,
                host: &str,
                delay_ms: u64,
            ) -> Result<(), $crate::FrontierError> {
                self.core.set_host_delay(host, delay_ms).await
            }
            async fn stats(&self) -> Result<$crate::store::FrontierStats, $crate::FrontierError> {
                self.core.stats().await
            }
            async fn sync(&self) -> Result<(), $crate::FrontierError> {
                self.core.sync().await
            }
            async fn close(&self) -> Result<(), $crate::FrontierError> {
                self.core.close().await
            }
        }
        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($t))
                    .field("location", &self.core.location())
                    .finish_non_exhaustive()
            }
        }
    };
}
pub(crate) use frontier_store_by_core;
