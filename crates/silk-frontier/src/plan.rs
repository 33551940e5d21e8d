//! The pure parts of the frontier core (`generic`): what an ack does to a leased request and
//! its counters ([`AckCtx::plan`]), how a committed write is applied to the in-memory
//! scheduler and dedup cache ([`apply_committed`]), and the stats built from the counters
//! and that in-memory state ([`stats`]). No storage, no I/O.

use crate::config::FrontierConfig;
use crate::dedup::{RecentSet, SegmentBlooms};
use crate::layout::{self, Counters};
use crate::sched::{Entry, Scheduler};
use crate::store::{AckResult, FrontierStats, Outcome};
use crate::window::Window;
use silk_core::Fingerprint;

/// Leases finished by a write; `Some` = re-queue with this not-before time.
pub(crate) type Finished = Vec<(u64, Option<(Entry, u64)>)>;

/// A new request staged by a write, to schedule once the write is committed.
pub(crate) struct Added {
    pub host: String,
    pub priority: i32,
    pub created_ms: u64,
    pub fp: Fingerprint,
}

/// Applies a committed write to memory: finishes its leases (re-queueing those with a
/// not-before time), then records its new requests (`(seq, request)`) as seen in
/// `segment` and schedules them, ready now, those the window admits; the others
/// are spilled (stored only).
pub(crate) fn apply_committed(
    sched: &mut Scheduler,
    recent: &mut RecentSet,
    window: &mut Window,
    segment: u64,
    now_ms: u64,
    finished: Finished,
    added: impl IntoIterator<Item = (u64, Added)>,
) {
    for (lease, requeue) in finished {
        sched.finish(lease, now_ms);
        if let Some((entry, not_before_ms)) = requeue {
            sched.push(entry, not_before_ms, now_ms);
        }
    }
    for (seq, a) in added {
        // Only what is stored may confirm a duplicate.
        recent.insert(segment, &a.fp);
        if !window.admit(seq, sched.pending()) {
            continue;
        }
        let host = sched.host_id(&a.host);
        sched.push(
            Entry {
                seq,
                host,
                priority: a.priority,
                created_ms: a.created_ms,
            },
            0,
            now_ms,
        );
    }
}

/// What to do with a live lease's stored request once its ack is decided.
#[derive(Debug)]
pub(crate) struct AckPlan {
    /// What the ack reports.
    pub result: AckResult,
    /// `Some(not_before_ms)`: keep the request and push it back to the scheduler, ready
    /// then; `None`: delete the stored request.
    pub requeue_at: Option<u64>,
    /// The request's new stored record (only with `requeue_at`).
    pub rewrite: Option<Vec<u8>>,
}

impl AckPlan {
    fn finish(result: AckResult) -> Self {
        Self {
            result,
            requeue_at: None,
            rewrite: None,
        }
    }
}

/// Whether [`AckCtx::plan`] needs the stored record for `outcome` (only a retry reads it).
pub(crate) fn needs_record(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::Retry { .. })
}

/// What [`AckCtx::plan`] decides with: the config, the time of the acks, and the store's
/// name for error logs.
pub(crate) struct AckCtx<'a> {
    pub cfg: &'a FrontierConfig,
    pub now: u64,
    pub location: &'a str,
}

impl AckCtx<'_> {
    /// Decides the ack of the live lease on request `seq` and stages its counter changes
    /// in `c`. `record` is the request's stored record, read only when [`needs_record`]
    /// (`None` otherwise, and when it is missing from the store). A retry under
    /// `max_retries` is re-queued with its record rewritten (retries + 1, back-off from
    /// `now`); exhausted, missing, corrupt or not rewritable, it fails (a missing record
    /// is not counted, a corrupt one is also counted `corrupt`). A release re-queues at
    /// `now` and changes no counter.
    pub(crate) fn plan(
        &self,
        outcome: Outcome,
        seq: u64,
        record: Option<&[u8]>,
        c: &mut Counters,
    ) -> AckPlan {
        let result = match outcome {
            Outcome::Done => {
                c.success += 1;
                AckResult::Succeeded
            }
            Outcome::Release { reason } => {
                tracing::debug!(seq, %reason, "request released");
                return AckPlan {
                    result: AckResult::Released,
                    requeue_at: Some(self.now),
                    rewrite: None,
                };
            }
            Outcome::Dropped { reason } => {
                tracing::debug!(seq, %reason, "request dropped");
                c.dropped += 1;
                AckResult::Dropped
            }
            Outcome::Failed { reason } => {
                tracing::debug!(seq, %reason, "request failed");
                c.failed += 1;
                AckResult::Failed
            }
            Outcome::Retry { reason } => {
                match record.and_then(layout::decode_header).map(|h| h.retries) {
                    Some(retries) if retries < self.cfg.max_retries => {
                        let not_before_ms =
                            self.now.saturating_add(self.cfg.retry_backoff(retries));
                        let value = record
                            .and_then(|v| layout::rewrite_retry(v, retries + 1, not_before_ms));
                        if let Some(value) = value {
                            tracing::debug!(seq, %reason, retries = retries + 1, "request re-queued");
                            c.retries += 1;
                            return AckPlan {
                                result: AckResult::Requeued {
                                    retries: retries + 1,
                                    not_before_ms,
                                },
                                requeue_at: Some(not_before_ms),
                                rewrite: Some(value),
                            };
                        }
                        c.failed += 1;
                        AckResult::Failed
                    }
                    Some(_) => {
                        tracing::debug!(seq, %reason, "request failed: retries exhausted");
                        c.failed += 1;
                        AckResult::Failed
                    }
                    None if record.is_none() => {
                        tracing::error!(store = %self.location, seq, "leased request missing from the store");
                        AckResult::Failed
                    }
                    None => {
                        tracing::error!(store = %self.location, seq, "corrupt request record counted failed");
                        c.corrupt += 1;
                        c.failed += 1;
                        AckResult::Failed
                    }
                }
            }
        };
        AckPlan::finish(result)
    }
}

/// The frontier's stats from its counters and in-memory state; `store_bytes` is the
/// backend's own measure of its storage.
pub(crate) fn stats(
    c: &Counters,
    sched: &Scheduler,
    blooms: &SegmentBlooms,
    recent: &RecentSet,
    stale_acks: u64,
    store_bytes: u64,
    spilled: u64,
) -> FrontierStats {
    FrontierStats {
        total: c.total,
        left: c.left(),
        in_flight: sched.in_flight(),
        pending: sched.pending() + spilled,
        delayed: sched.delayed(),
        success: c.success,
        failed: c.failed,
        dropped: c.dropped,
        duplicates: c.duplicates,
        retries: c.retries,
        lease_expiries: sched.lease_expiries(),
        stale_acks,
        corrupt: c.corrupt,
        hosts: sched.hosts(),
        bloom_bytes: blooms.bytes(),
        dedup_cache_bytes: recent.bytes(),
        seen_urls: blooms.urls(),
        store_bytes,
        seen_segments: 0,
        in_memory: sched.pending(),
    }
}
