//! A spider's expansion (`silk_core::expand`) fed into a frontier in batches from a cursor:
//! the frontier holds at most about two batches of them at a time, whatever the expansion's
//! size, and the cursor is the only state to keep.
//!
//! The caller stores the cursor ([`ExpandFeed::next`]) after each batch that moved it: the
//! batch is in the frontier before the cursor says so, so after a crash the batch is enqueued
//! again and the frontier's dedup drops what it already had (nothing is lost, nothing is
//! fetched twice). A run is not done while [`ExpandFeed::done`] is false.

use crate::error::FrontierError;
use crate::store::FrontierStore;
use silk_core::expand::Expansion;
use silk_core::spider::Spider;

/// The cursor of an expansion being fed to a frontier.
#[derive(Debug, Clone)]
pub struct ExpandFeed {
    expansion: Expansion,
    next: u64,
    batch: u64,
}

/// The batch for a consumer with at most `max_out` requests out: four times that, between
/// 1,000 and 10,000.
pub fn batch_for(max_out: u64) -> u64 {
    max_out.saturating_mul(4).clamp(1_000, 10_000)
}

impl ExpandFeed {
    /// Feeds `expansion` from request `next` on (0, or a stored cursor), `batch` at a time.
    pub fn new(expansion: Expansion, next: u64, batch: u64) -> Self {
        let total = expansion.total();
        Self {
            expansion,
            next: next.min(total),
            batch: batch.max(1),
        }
    }

    /// The index of the next request to feed (what to store).
    pub fn next(&self) -> u64 {
        self.next
    }

    /// How many requests the expansion gives.
    pub fn total(&self) -> u64 {
        self.expansion.total()
    }

    /// The expansion's fingerprint (see `silk_core::expand::Expansion::fingerprint`).
    pub fn fingerprint(&self) -> u64 {
        self.expansion.fingerprint()
    }

    /// Whether every request has been fed.
    pub fn done(&self) -> bool {
        self.next >= self.expansion.total()
    }

    /// When fewer than one batch of requests wait in `frontier`, enqueues the next batch
    /// (synced) and moves the cursor; whether it moved (store [`ExpandFeed::next`] then).
    pub async fn top_up(
        &mut self,
        spider: &Spider,
        frontier: &dyn FrontierStore,
    ) -> Result<bool, FrontierError> {
        if self.done() || frontier.stats().await?.pending >= self.batch {
            return Ok(false);
        }
        let requests = spider.expanded_requests(&self.expansion, self.next, self.batch);
        frontier.enqueue(requests).await?;
        // On disk before the cursor that counts it is.
        frontier.sync().await?;
        self.next = self
            .next
            .saturating_add(self.batch)
            .min(self.expansion.total());
        Ok(true)
    }
}
