//! The `Clock` seam: every timeout, delay, lease and aging computation asks a clock, so tests
//! drive time by hand instead of sleeping. Time is milliseconds since the Unix epoch.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    /// Now, in ms since the epoch.
    fn now_ms(&self) -> u64;
}

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to; clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock that reads `start_ms`.
    pub fn new(start_ms: u64) -> Self {
        Self(Arc::new(AtomicU64::new(start_ms)))
    }
    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
    /// Sets the clock to `ms`.
    pub fn set(&self, ms: u64) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A clock on tokio's time: the epoch time when it was made, plus the tokio time elapsed
/// since. Timers (`tokio::time::sleep`, `interval`, `timeout`) and clock reads then agree, and
/// under a paused runtime (`#[tokio::test(start_paused = true)]`) both move only when every
/// task waits, straight to the next timer: time-driven logic runs on virtual time, exactly,
/// whatever the machine's load. Clones share the same start.
#[derive(Debug, Clone)]
pub struct TokioClock {
    base_ms: u64,
    start: tokio::time::Instant,
}

impl TokioClock {
    /// A clock that reads the system time now, then moves with tokio's time.
    pub fn new() -> Self {
        Self::starting_at(SystemClock.now_ms())
    }

    /// A clock that reads `base_ms` now, then moves with tokio's time.
    pub fn starting_at(base_ms: u64) -> Self {
        Self {
            base_ms,
            start: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> u64 {
        let elapsed = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.base_ms.saturating_add(elapsed)
    }
}
