//! The seam: the [`FrontierStore`] trait (in other systems: URL queue, scheduler, seed
//! manager, scrapy-redis' scheduler + dupefilter) and the values that cross it.
//!
//! Every backend (the embedded one in [`crate::embedded`], Redis in [`crate::redis`]) implements the
//! whole trait with the same semantics, checked by [`crate::conformance`]. Callers hold an
//! `Arc<dyn FrontierStore>`. This module defines behaviour only; it must not contain backend
//! code or anything that assumes a backend is in-process.

use crate::error::FrontierError;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
pub use silk_core::LeaseId;
use silk_core::Request;

/// A request handed out for fetching. It must be acked with its `id` before `deadline_ms`,
/// or it is dispatched again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    /// Pass it back to [`FrontierStore::ack`].
    pub id: LeaseId,
    /// The request; `retries` says how many retryable failures it already had.
    pub request: Request,
    /// When the lease expires, ms since the epoch (frontier clock).
    pub deadline_ms: u64,
}

/// What happened to a leased request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// Fetched (whatever the status, if the spider accepted it): counted as success.
    Done,
    /// A retryable failure: re-queued after `retry_backoff_ms * 2^retries` (capped at 5 min),
    /// or counted failed when it already had `max_retries` retries.
    Retry {
        /// Why (logged).
        reason: String,
    },
    /// A permanent failure: counted failed.
    Failed {
        /// Why (logged).
        reason: String,
    },
    /// Not fetched on purpose (robots.txt, off-domain after a redirect, a quota):
    /// counted as dropped, neither success nor failure.
    Dropped {
        /// Why (logged).
        reason: String,
    },
    /// Not attempted, through no fault of the request (robots.txt had to be fetched first,
    /// the run was paused before the request was sent): pending again at once, no retry
    /// consumed, nothing counted. The lease's start still counts for its host's politeness,
    /// so the next start on that host waits the host's delay.
    Release {
        /// Why (logged).
        reason: String,
    },
}

impl Outcome {
    /// The outcome of a request that ended with `code` (the reason is the code's text): one
    /// mapping, [`silk_core::OutcomeCode::disposition`], for the local engine and the hub.
    /// `retryable` is what the part that saw the failure said.
    pub fn ended(code: &silk_core::OutcomeCode, retryable: bool) -> Outcome {
        use silk_core::Disposition;
        let reason = code.to_string();
        match code.disposition(retryable) {
            Disposition::Retry => Outcome::Retry { reason },
            Disposition::Failed => Outcome::Failed { reason },
            Disposition::Dropped => Outcome::Dropped { reason },
            Disposition::Released => Outcome::Release { reason },
        }
    }
}

/// What an ack did. Acks never fail for lease reasons: late and duplicate results are normal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum AckResult {
    /// `Done` applied: the request is finished and counted as success.
    Succeeded,
    /// `Retry` applied: re-queued; it may be leased again from `not_before_ms`.
    Requeued {
        /// Retries so far, this one included.
        retries: u32,
        /// When it becomes leasable again, ms.
        not_before_ms: u64,
    },
    /// `Failed`, or `Retry` past `max_retries`, applied: finished, counted as failed.
    Failed,
    /// `Dropped` applied: finished, counted as dropped.
    Dropped,
    /// `Release` applied: pending again.
    Released,
    /// No-op: the lease was past its deadline. Its request is pending again (or was already
    /// dispatched again); the result must be discarded by the caller.
    Expired,
    /// No-op: no such lease (never issued, already acked, or expired and reclaimed).
    Unknown,
}

impl AckResult {
    /// Whether the ack changed the frontier (false for `Expired` and `Unknown`).
    pub fn applied(self) -> bool {
        !matches!(self, AckResult::Expired | AckResult::Unknown)
    }
}

/// What an enqueue did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnqueueOutcome {
    /// New requests stored (first time in their segment).
    pub added: u64,
    /// Requests already seen in their segment (within the batch too), dropped.
    pub duplicates: u64,
}

/// Counters of a frontier, read from counters (never by scanning).
///
/// Invariants: `left = total - success - failed - dropped = pending + in_flight`;
/// `delayed <= pending`. Persisted counters survive restarts; those marked *session* restart
/// at zero with the process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrontierStats {
    /// Unique requests ever enqueued (a URL in two segments counts twice).
    pub total: u64,
    /// Not finished yet: `total - success - failed - dropped`.
    pub left: u64,
    /// Leased, not acked, not expired.
    pub in_flight: u64,
    /// Waiting to be leased (ready, waiting for their host, or in retry back-off).
    pub pending: u64,
    /// The part of `pending` in retry back-off.
    pub delayed: u64,
    /// Acked `Done`.
    pub success: u64,
    /// Acked `Failed`, or `Retry` past `max_retries`, or found corrupt.
    pub failed: u64,
    /// Acked `Dropped`.
    pub dropped: u64,
    /// Duplicate requests rejected by enqueue.
    pub duplicates: u64,
    /// `Retry` acks that re-queued a request.
    pub retries: u64,
    /// Leases that expired and were re-queued (*session*).
    pub lease_expiries: u64,
    /// Acks that were no-ops (`Expired` or `Unknown`) (*session*).
    pub stale_acks: u64,
    /// Stored records that could not be decoded; skipped and counted in `failed` too.
    pub corrupt: u64,
    /// Hosts known to the scheduler.
    pub hosts: u64,
    /// Memory held by the dedup Bloom filters.
    pub bloom_bytes: u64,
    /// Fingerprints held by the in-memory Bloom filters (current segments).
    pub seen_urls: u64,
    /// Memory of the exact cache of recent fingerprints in front of the store (0 if the
    /// backend has none).
    pub dedup_cache_bytes: u64,
    /// Bytes the backend uses for the frontier (disk for the embedded store).
    pub store_bytes: u64,
    /// Segments whose seen sets are stored (the current one, and past ones within
    /// `segment_retention_ms`).
    #[serde(default)]
    pub seen_segments: u64,
    /// The part of `pending` held in memory (the scheduler's window,
    /// `FrontierConfig::memory_window`); the rest is in the store only (*session*).
    #[serde(default)]
    pub in_memory: u64,
}

impl FrontierStats {
    /// Bloom memory per URL, bytes (`bloom_bytes / seen_urls`); 0 when nothing was seen.
    pub fn bloom_bytes_per_url(&self) -> f64 {
        if self.seen_urls == 0 {
            0.0
        } else {
            self.bloom_bytes as f64 / self.seen_urls as f64
        }
    }
    /// Store bytes per URL ever enqueued (`store_bytes / total`); 0 when empty.
    pub fn store_bytes_per_url(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.store_bytes as f64 / self.total as f64
        }
    }
}

/// The crawl frontier of one run: dedup, per-host politeness, priority with aging, leases,
/// retries, counters. In other systems: URL queue, scheduler, seed manager.
///
/// All times come from the frontier's [`silk_core::Clock`]. Semantics (every backend):
///
/// - **enqueue**: a request is new if its fingerprint was not seen in its segment
///   (`floor(now / segment_ms)`, or 0 without segments); `created_ms == 0` is set to now.
/// - **lease**: up to `max` requests that may start now: per host at most
///   `per_host_concurrency` in flight and at least the host's delay between lease starts;
///   among the hosts that may be hit now, highest *effective* priority first
///   (design §3 aging: `alpha = (now - created) / (now - oldest pending created)`, and when
///   `alpha > beta` the priority becomes `priority * 2^alpha`; ties: higher base priority,
///   then, for priorities >= 0, older `created_ms`, then enqueue order; the order of equal
///   effective priorities below 0 is unspecified). Expired leases are re-queued first,
///   without consuming a retry.
/// - **ack**: see [`Outcome`] and [`AckResult`]; unknown/expired leases are reported no-ops.
/// - **durability** (persistent backends): a call that returned `Ok` survives a crash of
///   the process; after a restart, leases that were in flight are pending again.
#[async_trait]
pub trait FrontierStore: Send + Sync + 'static {
    /// Adds requests, dropping those already seen in their segment.
    async fn enqueue(&self, requests: Vec<Request>) -> Result<EnqueueOutcome, FrontierError>;

    /// Leases up to `max` requests that may be fetched now (possibly none).
    async fn lease(&self, max: usize) -> Result<Vec<Lease>, FrontierError>;

    /// When a lease could next succeed, ms (`<= now` means now): the earliest of a host
    /// becoming allowed, a back-off ending, a lease expiring. `None` when nothing is pending
    /// or in flight. A caller waiting on it should also wake up on its own acks.
    async fn next_ready_ms(&self) -> Result<Option<u64>, FrontierError>;

    /// Records the outcome of a lease.
    async fn ack(&self, lease: LeaseId, outcome: Outcome) -> Result<AckResult, FrontierError>;

    /// Records several outcomes at once (one write for the embedded store). Results are in
    /// the order of `acks`.
    async fn ack_many(
        &self,
        acks: Vec<(LeaseId, Outcome)>,
    ) -> Result<Vec<AckResult>, FrontierError> {
        let mut out = Vec::with_capacity(acks.len());
        for (id, outcome) in acks {
            out.push(self.ack(id, outcome).await?);
        }
        Ok(out)
    }

    /// Acks a lease and enqueues the links discovered by it, atomically (a persistent
    /// backend stores both or neither, so a crash cannot record a page as done and lose its
    /// links). The links are enqueued whatever the ack's result: a late result's links are
    /// still links, and dedup makes them harmless.
    async fn ack_and_enqueue(
        &self,
        lease: LeaseId,
        outcome: Outcome,
        discovered: Vec<Request>,
    ) -> Result<(AckResult, EnqueueOutcome), FrontierError> {
        let enqueued = self.enqueue(discovered).await?;
        Ok((self.ack(lease, outcome).await?, enqueued))
    }

    /// Acks several leases and enqueues the links discovered by them, atomically (one
    /// write, like [`FrontierStore::ack_and_enqueue`] for one lease): what a driver that
    /// applies a batch of results calls once. Results are in the order of `acks`; a lease
    /// twice in `acks` is applied once (the second is `Unknown`).
    async fn ack_many_and_enqueue(
        &self,
        acks: Vec<(LeaseId, Outcome)>,
        discovered: Vec<Request>,
    ) -> Result<(Vec<AckResult>, EnqueueOutcome), FrontierError> {
        let enqueued = self.enqueue(discovered).await?;
        Ok((self.ack_many(acks).await?, enqueued))
    }

    /// Re-queues the leases past their deadline now; returns how many. (`lease` and
    /// `next_ready_ms` do it too; this is for callers that want it on a timer.)
    async fn expire(&self) -> Result<usize, FrontierError>;

    /// Sets a host's own minimum delay between lease starts (robots.txt crawl-delay), ms;
    /// the effective delay is `max(per_host_delay_ms, delay_ms)`. 0 removes it. `host` is a
    /// politeness key as `Request::host_key` returns it (`example.com`, `10.0.0.1:8080`).
    /// It is persisted with the frontier.
    async fn set_host_delay(&self, host: &str, delay_ms: u64) -> Result<(), FrontierError>;

    /// The counters.
    async fn stats(&self) -> Result<FrontierStats, FrontierError>;

    /// Makes every completed call durable against power loss (fsync), not only against a
    /// crash of the process.
    async fn sync(&self) -> Result<(), FrontierError>;

    /// Syncs and closes; later calls fail with [`FrontierError::Closed`]. Idempotent.
    async fn close(&self) -> Result<(), FrontierError>;
}
