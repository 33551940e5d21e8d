//! [`FrontierConfig`]: the knobs of one frontier (one run's), shared by every backend.
//!
//! This module holds values and their validation only; it must not read files or
//! environment variables (the spider file and the hub's config map onto it elsewhere).

use crate::error::FrontierError;
use serde::{Deserialize, Serialize};

/// Longest retry back-off: `retry_backoff_ms * 2^retries` is capped at five minutes.
pub const MAX_RETRY_BACKOFF_MS: u64 = 5 * 60 * 1000;

/// Configuration of a frontier. Units are in the names; the defaults match the spider's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FrontierConfig {
    /// At most this many requests of one host (`Request::host_key`) in flight. At least 1.
    pub per_host_concurrency: u32,
    /// At least this long between two lease starts on one host, ms (robots.txt crawl-delay
    /// can raise it per host: [`crate::FrontierStore::set_host_delay`]).
    pub per_host_delay_ms: u64,
    /// A lease not acked within this time expires and its request is dispatched again, ms.
    /// At least 1.
    pub lease_timeout_ms: u64,
    /// A request acked with `Retry` this many times is recorded as failed at the next one.
    pub max_retries: u32,
    /// Base of the retry back-off: the n-th retry (n from 0) waits
    /// `retry_backoff_ms * 2^n`, capped at [`MAX_RETRY_BACKOFF_MS`].
    pub retry_backoff_ms: u64,
    /// Priority aging threshold `beta` in `[0, 1]` (design §3).
    pub aging_beta: f64,
    /// Re-crawl segment length, ms: a URL is unique within `floor(now / segment_ms)`.
    /// `None` = one segment forever (dedup forever).
    pub segment_ms: Option<u64>,
    /// How many URLs a segment's Bloom filter is sized for (past it the false-positive rate
    /// grows; false positives cost a store read, never a lost URL).
    pub expected_urls: u64,
    /// Target false-positive rate of the Bloom filter, in `(0, 1)`.
    pub bloom_fp_rate: f64,
    /// Confirm a Bloom filter's "maybe seen" against the store's seen set, so that no new URL
    /// is ever taken for a seen one (a false positive costs a store read). `false`: the Bloom
    /// filter decides alone (seed 002): a duplicate costs no store read, and about
    /// `bloom_fp_rate` of the new URLs are counted as duplicates and dropped.
    pub exact_dedup: bool,
    /// How long the seen set of a segment is kept after the segment ended, ms; then it is
    /// pruned (at the next write), so that the store does not grow from segment to
    /// segment. Dedup reads only the current segment's set. Ignored without segments.
    pub segment_retention_ms: u64,
    /// The scheduler's window: about this many pending requests are kept in memory (twice as
    /// many when the ones in it cannot be leased now for politeness); the others stay in the
    /// store only and are loaded in batches as the window empties, in the order they were
    /// enqueued. So memory depends on this, the hosts and the requests in flight, not on how
    /// many are pending. At least 1.
    pub memory_window: u64,
}

/// The default [`FrontierConfig::memory_window`]: half a million pending requests (about
/// 30 MB of scheduler); the spider key `memory_window` sets it.
pub const DEFAULT_MEMORY_WINDOW: u64 = silk_core::spider::DEFAULT_MEMORY_WINDOW;

/// The default [`FrontierConfig::segment_retention_ms`]: one day.
pub const DEFAULT_SEGMENT_RETENTION_MS: u64 = 24 * 60 * 60 * 1000;

impl Default for FrontierConfig {
    fn default() -> Self {
        Self {
            per_host_concurrency: 2,
            per_host_delay_ms: 250,
            lease_timeout_ms: 120_000,
            max_retries: 3,
            retry_backoff_ms: 1_000,
            aging_beta: 0.5,
            segment_ms: Some(24 * 60 * 60 * 1000),
            expected_urls: 1_000_000,
            bloom_fp_rate: 0.01,
            exact_dedup: true,
            segment_retention_ms: DEFAULT_SEGMENT_RETENTION_MS,
            memory_window: DEFAULT_MEMORY_WINDOW,
        }
    }
}

impl FrontierConfig {
    /// The settings a spider asks for (politeness, leases, retries, aging, segments, dedup
    /// sizing): one mapping for the local engine and the hub's runs. The lease timeout is at
    /// least twice the fetch timeout, so that a slow answer is not dispatched twice.
    pub fn for_spider(spider: &silk_core::spider::Spider) -> FrontierConfig {
        let spec = &spider.spec;
        FrontierConfig {
            per_host_concurrency: spec.per_host_concurrency,
            per_host_delay_ms: spec.per_host_delay_ms,
            lease_timeout_ms: spec.lease_timeout_ms.max(spec.timeout_ms.saturating_mul(2)),
            max_retries: spec.max_retries,
            retry_backoff_ms: spec.retry_backoff_ms,
            aging_beta: spec.aging_beta,
            segment_ms: spec.segment().map(|d| d.as_millis() as u64),
            expected_urls: spec.expected_urls,
            bloom_fp_rate: spec.bloom_fp_rate,
            exact_dedup: spec.exact_dedup,
            segment_retention_ms: u64::try_from(spec.segment_retention().as_millis())
                .unwrap_or(u64::MAX),
            memory_window: spec.memory_window,
        }
    }

    /// Checks every value; the first invalid one is returned.
    pub fn validate(&self) -> Result<(), FrontierError> {
        let bad = |field, reason: &str| {
            Err(FrontierError::InvalidConfig {
                field,
                reason: reason.to_owned(),
            })
        };
        if self.per_host_concurrency == 0 {
            return bad("per_host_concurrency", "must be at least 1");
        }
        if self.memory_window == 0 {
            return bad("memory_window", "must be at least 1");
        }
        if self.lease_timeout_ms == 0 {
            return bad("lease_timeout_ms", "must be at least 1");
        }
        if !(0.0..=1.0).contains(&self.aging_beta) {
            return bad("aging_beta", "must be between 0 and 1");
        }
        if self.segment_ms == Some(0) {
            return bad("segment_ms", "must be at least 1 (or none)");
        }
        if !(self.bloom_fp_rate > 0.0 && self.bloom_fp_rate < 1.0) {
            return bad("bloom_fp_rate", "must be between 0 and 1 (exclusive)");
        }
        Ok(())
    }

    /// The dedup segment of a request enqueued at `now_ms`.
    pub fn segment_of(&self, now_ms: u64) -> u64 {
        match self.segment_ms {
            Some(ms) if ms > 0 => now_ms / ms,
            _ => 0,
        }
    }

    /// The segments whose seen sets may be pruned at `now_ms`: those below the returned one
    /// (they ended at least `segment_retention_ms` ago). 0 without segments.
    pub fn prune_below(&self, now_ms: u64) -> u64 {
        match self.segment_ms {
            Some(ms) if ms > 0 => now_ms.saturating_sub(self.segment_retention_ms) / ms,
            _ => 0,
        }
    }

    /// The back-off before the retry of a request that has been retried `retries` times.
    pub fn retry_backoff(&self, retries: u32) -> u64 {
        let factor = 1u64.checked_shl(retries.min(63)).unwrap_or(u64::MAX);
        self.retry_backoff_ms
            .saturating_mul(factor)
            .min(MAX_RETRY_BACKOFF_MS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        let c = FrontierConfig {
            retry_backoff_ms: 1_000,
            ..Default::default()
        };
        assert_eq!(c.retry_backoff(0), 1_000);
        assert_eq!(c.retry_backoff(1), 2_000);
        assert_eq!(c.retry_backoff(3), 8_000);
        assert_eq!(c.retry_backoff(9), MAX_RETRY_BACKOFF_MS);
        assert_eq!(c.retry_backoff(200), MAX_RETRY_BACKOFF_MS);
    }

    #[test]
    fn segments() {
        let c = FrontierConfig {
            segment_ms: Some(1_000),
            ..Default::default()
        };
        assert_eq!(c.segment_of(999), 0);
        assert_eq!(c.segment_of(1_000), 1);
        let c = FrontierConfig {
            segment_ms: None,
            ..Default::default()
        };
        assert_eq!(c.segment_of(u64::MAX), 0);
        assert_eq!(
            c.prune_below(u64::MAX),
            0,
            "without segments nothing is pruned"
        );
        let c = FrontierConfig {
            segment_ms: Some(1_000),
            segment_retention_ms: 1_500,
            ..Default::default()
        };
        // Segment 0 ends at 1,000 and is kept until 2,500.
        assert_eq!(c.prune_below(2_499), 0);
        assert_eq!(c.prune_below(2_500), 1);
        assert_eq!(c.prune_below(0), 0);
    }

    #[test]
    fn validation_names_the_field() {
        let c = FrontierConfig {
            per_host_concurrency: 0,
            ..Default::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("per_host_concurrency"), "{e}");
        assert!(FrontierConfig::default().validate().is_ok());
    }

    #[test]
    fn the_spider_sets_the_window() {
        let yaml = "name: w\nstart_urls: ['http://127.0.0.1:1/']\n";
        let spider = silk_core::spider::Spider::from_yaml(yaml, "w.yaml").expect("spider");
        assert_eq!(
            FrontierConfig::for_spider(&spider).memory_window,
            DEFAULT_MEMORY_WINDOW
        );
        let spider =
            silk_core::spider::Spider::from_yaml(&format!("{yaml}memory_window: 1000\n"), "w.yaml")
                .expect("spider");
        assert_eq!(FrontierConfig::for_spider(&spider).memory_window, 1_000);
        let e =
            silk_core::spider::Spider::from_yaml(&format!("{yaml}memory_window: 0\n"), "w.yaml")
                .expect_err("a window of 0")
                .to_string();
        assert!(e.contains("w.yaml") && e.contains("memory_window"), "{e}");
    }
}
