//! Token buckets for `token_per_second`: one bucket per `token_scope` (outbounds naming the
//! same scope share it; `*` or no scope = a bucket per outbound). A bucket holds at most one
//! second of tokens (at least one), starts full, and refills continuously from the injected
//! [`Clock`], so tests drive it with a `ManualClock` and no sleeps.
//!
//! It must not sleep: it says how long to wait ([`TokenBucket::wait_ms`]) and the sender
//! decides how to wait.

use parking_lot::Mutex;
use std::sync::Arc;

use silk_core::Clock;

/// A token bucket refilled at `rate_per_second`.
pub struct TokenBucket {
    rate_per_ms: f64,
    capacity: f64,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
}

impl std::fmt::Debug for TokenBucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenBucket")
            .field("rate_per_second", &(self.rate_per_ms * 1000.0))
            .field("capacity", &self.capacity)
            .finish()
    }
}

struct State {
    tokens: f64,
    last_ms: u64,
}

impl TokenBucket {
    /// A full bucket of `max(1, rate)` tokens refilled at `rate_per_second` (> 0).
    pub fn new(rate_per_second: f64, clock: Arc<dyn Clock>) -> TokenBucket {
        let capacity = rate_per_second.max(1.0);
        let now = clock.now_ms();
        TokenBucket {
            rate_per_ms: rate_per_second / 1000.0,
            capacity,
            clock,
            state: Mutex::new(State {
                tokens: capacity,
                last_ms: now,
            }),
        }
    }

    fn refill(&self, state: &mut State) {
        let now = self.clock.now_ms();
        if now > state.last_ms {
            let elapsed = (now - state.last_ms) as f64;
            state.tokens = (state.tokens + elapsed * self.rate_per_ms).min(self.capacity);
            state.last_ms = now;
        }
    }

    /// Takes up to `n` whole tokens; returns how many it took.
    pub fn take_up_to(&self, n: usize) -> usize {
        let mut state = self.state.lock();
        self.refill(&mut state);
        let whole = state.tokens.floor().max(0.0) as usize;
        let taken = whole.min(n);
        state.tokens -= taken as f64;
        taken
    }

    /// Milliseconds until one whole token is available (0 when one is).
    pub fn wait_ms(&self) -> u64 {
        let mut state = self.state.lock();
        self.refill(&mut state);
        if state.tokens >= 1.0 {
            return 0;
        }
        ((1.0 - state.tokens) / self.rate_per_ms).ceil().max(1.0) as u64
    }

    /// The refill rate.
    pub fn rate_per_second(&self) -> f64 {
        self.rate_per_ms * 1000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use silk_core::ManualClock;

    #[test]
    fn rate_over_a_window_matches_the_configured_rate() {
        let clock = ManualClock::new(1_000_000);
        let bucket = TokenBucket::new(10.0, Arc::new(clock.clone()));
        // Starts full: one second's worth.
        assert_eq!(bucket.take_up_to(100), 10);
        assert_eq!(bucket.take_up_to(1), 0);
        assert_eq!(bucket.wait_ms(), 100);
        // Over 60 s of 50 ms steps, a greedy taker gets 10/s.
        let mut taken = 0;
        for _ in 0..1200 {
            clock.advance(50);
            taken += bucket.take_up_to(1000);
        }
        assert_eq!(taken, 600);
    }

    #[test]
    fn fractional_rates_and_idle_cap() {
        let clock = ManualClock::new(0);
        let bucket = TokenBucket::new(0.5, Arc::new(clock.clone()));
        assert_eq!(bucket.take_up_to(5), 1);
        assert_eq!(bucket.wait_ms(), 2000);
        clock.advance(1999);
        assert_eq!(bucket.take_up_to(1), 0);
        clock.advance(1);
        assert_eq!(bucket.take_up_to(1), 1);
        // A long idle time does not bank more than the capacity.
        clock.advance(3_600_000);
        assert_eq!(bucket.take_up_to(100), 1);
    }
}
