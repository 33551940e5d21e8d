//! What an agent counts and tells: counters (agent-wide and per run), the QPS window of the
//! heartbeats, the [`AgentStats`] snapshot of `AgentHandle::stats`, and the [`AgentEvent`]s
//! that tests and the binary can await instead of polling.
//!
//! Counters are relaxed atomics: they are for people and heartbeats, not for decisions.
//! Events are broadcast: a receiver that falls behind loses the oldest ones (never blocks
//! the agent). Every run-scoped event also becomes a line of its run's log (`runlog`).

use parking_lot::Mutex;
use silk_core::{LeaseId, RunId};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Something that happened in an agent.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum AgentEvent {
    /// The registration was published.
    Registered,
    /// A registration attempt failed (it is retried with back-off).
    RegisterFailed {
        /// Why.
        error: String,
    },
    /// A heartbeat was published.
    HeartbeatSent {
        /// Its sequence number.
        seq: u64,
    },
    /// A heartbeat could not be published (the next one follows after a back-off).
    HeartbeatFailed {
        /// Its sequence number.
        seq: u64,
        /// Why.
        error: String,
    },
    /// The command subscription is open.
    Subscribed,
    /// Subscribing failed (it is retried with back-off).
    SubscribeFailed {
        /// Why.
        error: String,
    },
    /// A run's downloader is allocated.
    Allocated {
        /// The run.
        run: RunId,
        /// Reloaded from the allocations file at start (no command).
        reloaded: bool,
        /// It existed already: a repeated `allocate` kept it.
        existing: bool,
    },
    /// A run's downloader was built (at its `allocate`, or at its first download).
    DownloaderBuilt {
        /// The run.
        run: RunId,
        /// How many proxies it rotates through (0: direct).
        proxies: usize,
    },
    /// A run's downloader could not be built (its proxy provider failed); its next download
    /// tries again.
    DownloaderFailed {
        /// The run.
        run: RunId,
        /// Why.
        error: String,
    },
    /// An `allocate` had a bad config (or a stored one no longer compiles).
    AllocationFailed {
        /// The run.
        run: RunId,
        /// What was wrong.
        error: String,
    },
    /// The reply to an `allocate` was published on `allocations`.
    AllocationReplied {
        /// The run.
        run: RunId,
        /// What it said: the downloader is ready (`true`), or the allocation failed.
        ok: bool,
    },
    /// The reply to an `allocate` could not be published after its retries and was dropped
    /// (the hub counts the missing reply as a failed allocation).
    AllocationReplyDropped {
        /// The run.
        run: RunId,
        /// What it would have said.
        ok: bool,
        /// The last error.
        error: String,
    },
    /// A run's downloader was dropped.
    Released {
        /// The run.
        run: RunId,
        /// Why.
        reason: ReleaseReason,
    },
    /// A result was published.
    ResultPublished {
        /// The run.
        run: RunId,
        /// Its lease.
        lease_id: LeaseId,
    },
    /// A result could not be published after its retries and was dropped.
    ResultDropped {
        /// The run.
        run: RunId,
        /// Its lease.
        lease_id: LeaseId,
        /// The last error.
        error: String,
    },
    /// A proxy was taken out of rotation.
    ProxySwitched {
        /// The run.
        run: RunId,
        /// The proxy, without credentials.
        proxy: String,
        /// Why (`status 403`, `body matches switch_on_regex`, `3 failures`).
        reason: String,
    },
    /// The proxy provider was run and gave this many proxies.
    ProxiesRefreshed {
        /// The run.
        run: RunId,
        /// How many proxies it gave.
        count: usize,
    },
    /// The redial command ran.
    Redialed {
        /// The run.
        run: RunId,
        /// Its error, if it failed (the run continues either way).
        error: Option<String>,
    },
    /// The agent detached: it heard from no hub for its `detach_after`; its downloads were
    /// abandoned, its allocations dropped (and the allocations file written), its program
    /// workers told to stop.
    Detached {
        /// How long it had heard from no hub, ms.
        silent_ms: u64,
    },
    /// A hub was heard again after a detach: the agent registers again.
    Reattached,
    /// The agent is stopping.
    Stopping,
}

/// Why a downloader was released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseReason {
    /// A `release` command.
    Command,
    /// Not used for longer than `downloader_idle_ms`.
    Idle,
    /// The agent detached (no hub heard for its `detach_after`).
    Detached,
}

/// A snapshot of an agent's counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentStats {
    /// Whether the registration was published.
    pub registered: bool,
    /// Whether the agent is detached now (no hub heard for its `detach_after`).
    pub detached: bool,
    /// Times it detached.
    pub detaches: u64,
    /// How long since a hub was last heard (a beacon or a command), ms; 0 when detach mode
    /// is off.
    pub hub_silent_ms: u64,
    /// Heartbeats published.
    pub heartbeats_sent: u64,
    /// Heartbeats that could not be published.
    pub heartbeats_failed: u64,
    /// Downloaders allocated now.
    pub active_downloaders: u32,
    /// Requests being fetched now.
    pub in_flight: u32,
    /// Requests finished (any outcome; one given back to be dispatched again, such as
    /// `robots_fetched` or `no_downloader`, is not finished).
    pub requests: u64,
    /// Results published.
    pub results_published: u64,
    /// Results dropped after their retries.
    pub results_dropped: u64,
    /// Body bytes removed by trimming, all runs.
    pub bytes_saved: u64,
    /// Run log batches published.
    pub log_batches_published: u64,
    /// Run log lines lost: the log queue was full, or their batch could not be published.
    pub log_lines_dropped: u64,
    /// Requests per second over the last `qps_window_ms`.
    pub qps: f64,
    /// The runs allocated now.
    pub runs: BTreeMap<RunId, RunStats>,
}

/// The counters of one allocated run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Requests finished (not counting those given back: see [`AgentStats::requests`]).
    pub requests: u64,
    /// Of which ended with an error.
    pub errors: u64,
    /// Body bytes received.
    pub bytes: u64,
    /// Body bytes removed by trimming.
    pub bytes_saved: u64,
    /// Pages where no trimming rule matched.
    pub trim_misses: u64,
    /// Proxies taken out of rotation.
    pub proxy_switches: u64,
    /// Redial commands run.
    pub redials: u64,
    /// Requests being fetched now.
    pub in_flight: u32,
    /// When it was last used, ms since the epoch (agent clock).
    pub last_used_ms: u64,
}

/// Live counters of one run.
#[derive(Debug, Default)]
pub(crate) struct RunCounters {
    pub(crate) requests: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) bytes_saved: AtomicU64,
    pub(crate) trim_misses: AtomicU64,
    pub(crate) proxy_switches: AtomicU64,
    pub(crate) redials: AtomicU64,
    pub(crate) in_flight: AtomicU32,
}

impl RunCounters {
    pub(crate) fn snapshot(&self, last_used_ms: u64) -> RunStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RunStats {
            requests: get(&self.requests),
            errors: get(&self.errors),
            bytes: get(&self.bytes),
            bytes_saved: get(&self.bytes_saved),
            trim_misses: get(&self.trim_misses),
            proxy_switches: get(&self.proxy_switches),
            redials: get(&self.redials),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            last_used_ms,
        }
    }
}

/// Live agent-wide counters.
#[derive(Debug, Default)]
pub(crate) struct AgentCounters {
    pub(crate) registered: std::sync::atomic::AtomicBool,
    pub(crate) heartbeats_sent: AtomicU64,
    pub(crate) heartbeats_failed: AtomicU64,
    pub(crate) in_flight: AtomicU32,
    pub(crate) requests: AtomicU64,
    pub(crate) results_published: AtomicU64,
    pub(crate) results_dropped: AtomicU64,
    pub(crate) bytes_saved: AtomicU64,
    pub(crate) detaches: AtomicU64,
}

/// Finished requests per time bucket, for the QPS over a sliding window (agent clock).
#[derive(Debug)]
pub(crate) struct QpsWindow {
    window_ms: u64,
    bucket_ms: u64,
    started_ms: u64,
    buckets: Mutex<VecDeque<(u64, u64)>>,
}

impl QpsWindow {
    pub(crate) fn new(window_ms: u64, now_ms: u64) -> Self {
        let window_ms = window_ms.max(1);
        Self {
            window_ms,
            bucket_ms: (window_ms / 20).max(1),
            started_ms: now_ms,
            buckets: Mutex::new(VecDeque::new()),
        }
    }

    /// Counts one finished request at `now_ms`.
    pub(crate) fn record(&self, now_ms: u64) {
        let bucket = now_ms / self.bucket_ms;
        let mut b = self.buckets.lock();
        match b.back_mut() {
            Some((at, n)) if *at == bucket => *n += 1,
            _ => b.push_back((bucket, 1)),
        }
        let oldest = (now_ms.saturating_sub(self.window_ms)) / self.bucket_ms;
        while b.front().is_some_and(|(at, _)| *at < oldest) {
            b.pop_front();
        }
    }

    /// Requests per second over the window ending at `now_ms` (over the time since start
    /// while that is shorter than the window).
    pub(crate) fn qps(&self, now_ms: u64) -> f64 {
        let oldest = (now_ms.saturating_sub(self.window_ms)) / self.bucket_ms;
        let count: u64 = self
            .buckets
            .lock()
            .iter()
            .filter(|(at, _)| *at >= oldest)
            .map(|(_, n)| n)
            .sum();
        let span_ms = now_ms
            .saturating_sub(self.started_ms)
            .clamp(1, self.window_ms);
        count as f64 * 1_000.0 / span_ms as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qps_over_the_window() {
        let w = QpsWindow::new(10_000, 0);
        for t in 0..100 {
            w.record(t * 100);
        }
        // 100 requests in the first 10 s.
        assert!((w.qps(10_000) - 10.0).abs() < 0.6, "{}", w.qps(10_000));
        // Half the window later, about half of them are still in it.
        let later = w.qps(15_000);
        assert!((4.0..6.5).contains(&later), "{later}");
        assert_eq!(w.qps(40_000), 0.0);
        // Early on, the rate is over the time since start.
        let w = QpsWindow::new(10_000, 1_000);
        for _ in 0..5 {
            w.record(1_500);
        }
        assert!((w.qps(2_000) - 5.0).abs() < 0.01);
    }
}
