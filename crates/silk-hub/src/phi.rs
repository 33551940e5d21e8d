//! The phi accrual failure detector (Hayashibara, Défago, Yared, Katayama, 2004), one per
//! agent, with a hard cap.
//!
//! Instead of a yes/no timeout, the detector keeps a bounded window of heartbeat
//! inter-arrival times (hub clock) and says how surprising the current silence is:
//! `phi = -log10(P(a heartbeat arrives later than now))`. phi 1 means a 10% chance that the
//! agent is merely late, phi 8 a 10⁻⁸ chance.
//!
//! # The formula
//!
//! Like Akka's `PhiAccrualFailureDetector`, the inter-arrival times are taken as normally
//! distributed with mean `μ + acceptable_heartbeat_pause_ms` and standard deviation
//! `max(σ, min_std_dev_ms)`, and the normal CDF is replaced by Akka's **logistic
//! approximation** `F(y) ≈ 1 / (1 + e^(-k(y)))` with `k(y) = y·(1.5976 + 0.070566·y²)` and
//! `y = (silence - mean) / std_dev`. Then `1 - F(y) = 1 / (1 + e^k)`, so
//! `phi = log10(1 + e^k)`, computed as a numerically stable softplus: phi is finite,
//! continuous and strictly increasing with the silence (no `-log10(0) = ∞` as in the naive
//! form), which makes it safe to serialise and compare.
//!
//! The window starts with two samples, `first_heartbeat_estimate_ms ± ¼ of it` (as Akka), so
//! the detector is useful from the first heartbeat. An interval of `dead_after_ms` or more is
//! not recorded: that gap was an outage, not the agent's heartbeat rhythm, and recording it
//! would make the detector blind for the next `window` heartbeats after the agent resumes.
//!
//! # States
//!
//! - [`AgentState::Dead`] when `phi >= threshold`, **or** when no heartbeat arrived for
//!   `dead_after_ms` (the hard cap, whatever phi says: a jittery history cannot keep a
//!   silent agent alive for longer than that).
//! - [`AgentState::Suspect`] when `phi >= threshold / 2`: late enough to show, not enough to
//!   act on. Suspect agents still count as live (they keep their work; if they do die, their
//!   leases expire and are re-dispatched).
//! - [`AgentState::Alive`] otherwise, and before any heartbeat (no evidence either way).
//!
//! With the defaults (threshold 8, pause 3 s, minimum σ 500 ms) and steady 1 s heartbeats, a
//! silent agent turns suspect after about 5.8 s and dead after about 6.6 s; the cap makes
//! it dead after 11 s at the latest.

use crate::error::HubError;
use serde::{Deserialize, Serialize};
pub use silk_api::agents::AgentState;
use std::collections::VecDeque;

/// Settings of the failure detector.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PhiConfig {
    /// phi at or above which an agent is dead; suspect from half of it. Default 8.
    pub threshold: f64,
    /// How many inter-arrival times are kept. Default 100.
    pub max_sample_size: usize,
    /// Floor of the standard deviation, so a very regular agent is not declared dead for a
    /// small delay. Default 500 ms.
    pub min_std_dev_ms: f64,
    /// Pause tolerated on top of the mean interval (GC, a slow bus). Default 3,000 ms.
    pub acceptable_heartbeat_pause_ms: u64,
    /// Expected interval before any has been seen (the heartbeat interval). Default 1,000 ms.
    pub first_heartbeat_estimate_ms: u64,
    /// No heartbeat for this long means dead, whatever phi says. Default 11,000 ms.
    pub dead_after_ms: u64,
}

impl Default for PhiConfig {
    fn default() -> Self {
        Self {
            threshold: 8.0,
            max_sample_size: 100,
            min_std_dev_ms: 500.0,
            acceptable_heartbeat_pause_ms: 3_000,
            first_heartbeat_estimate_ms: 1_000,
            dead_after_ms: 11_000,
        }
    }
}

impl PhiConfig {
    /// Checks the values are usable: positive threshold, window, estimate and cap, and a
    /// finite, non-negative minimum standard deviation.
    pub fn validate(&self) -> Result<(), HubError> {
        let bad = |what: String| Err(HubError::BadConfig(what));
        if !(self.threshold.is_finite() && self.threshold > 0.0) {
            return bad(format!(
                "phi threshold must be a positive number, got {}",
                self.threshold
            ));
        }
        if self.max_sample_size == 0 {
            return bad("phi max_sample_size must be at least 1".into());
        }
        if !(self.min_std_dev_ms.is_finite() && self.min_std_dev_ms >= 0.0) {
            return bad(format!(
                "phi min_std_dev_ms must be a non-negative number, got {}",
                self.min_std_dev_ms
            ));
        }
        if self.first_heartbeat_estimate_ms == 0 {
            return bad("phi first_heartbeat_estimate_ms must be at least 1".into());
        }
        if self.dead_after_ms == 0 {
            return bad("dead_after_ms must be at least 1".into());
        }
        Ok(())
    }
}

/// The failure detector of one agent. Pure: it is told when heartbeats arrive and asked
/// about a given `now_ms`.
#[derive(Debug, Clone)]
pub struct PhiDetector {
    config: PhiConfig,
    intervals: VecDeque<u64>,
    sum: u128,
    sum_sq: u128,
    last_ms: Option<u64>,
}

impl PhiDetector {
    /// A detector that has seen no heartbeat, its window seeded from
    /// `first_heartbeat_estimate_ms`. The config is assumed valid ([`PhiConfig::validate`]).
    pub fn new(config: PhiConfig) -> Self {
        let mut d = Self {
            config,
            intervals: VecDeque::with_capacity(config.max_sample_size.min(1_024)),
            sum: 0,
            sum_sq: 0,
            last_ms: None,
        };
        let estimate = config.first_heartbeat_estimate_ms;
        d.record(estimate - estimate / 4);
        d.record(estimate + estimate / 4);
        d
    }

    /// The settings.
    pub fn config(&self) -> &PhiConfig {
        &self.config
    }

    /// A heartbeat arrived at `now_ms` (hub clock). Records the interval since the previous
    /// one unless it reaches `dead_after_ms` (an outage, see the module docs). A time before
    /// the previous arrival (a clock set back) records nothing and keeps the later time.
    pub fn heartbeat(&mut self, now_ms: u64) {
        if let Some(last) = self.last_ms {
            if now_ms <= last {
                return;
            }
            let interval = now_ms - last;
            if interval < self.config.dead_after_ms {
                self.record(interval);
            }
        }
        self.last_ms = Some(now_ms);
    }

    fn record(&mut self, interval: u64) {
        if self.intervals.len() >= self.config.max_sample_size
            && let Some(old) = self.intervals.pop_front()
        {
            self.sum -= u128::from(old);
            self.sum_sq -= u128::from(old) * u128::from(old);
        }
        self.intervals.push_back(interval);
        self.sum += u128::from(interval);
        self.sum_sq += u128::from(interval) * u128::from(interval);
    }

    /// When the last heartbeat arrived, if any.
    pub fn last_heartbeat_ms(&self) -> Option<u64> {
        self.last_ms
    }

    /// How long the agent has been silent at `now_ms` (0 before any heartbeat).
    pub fn silence_ms(&self, now_ms: u64) -> u64 {
        self.last_ms.map_or(0, |last| now_ms.saturating_sub(last))
    }

    /// Inter-arrival times in the window (including the two seeds until they are evicted).
    pub fn sample_count(&self) -> usize {
        self.intervals.len()
    }

    /// Mean of the window's inter-arrival times, ms.
    pub fn mean_ms(&self) -> f64 {
        self.sum as f64 / self.intervals.len() as f64
    }

    /// Standard deviation of the window (population), before the floor is applied, ms.
    pub fn std_dev_ms(&self) -> f64 {
        let n = self.intervals.len() as f64;
        let mean = self.mean_ms();
        (self.sum_sq as f64 / n - mean * mean).max(0.0).sqrt()
    }

    /// phi at `now_ms`: 0 before any heartbeat, then finite and non-decreasing with the
    /// silence (see the module docs for the formula).
    pub fn phi(&self, now_ms: u64) -> f64 {
        if self.last_ms.is_none() {
            return 0.0;
        }
        let silence = self.silence_ms(now_ms) as f64;
        let mean = self.mean_ms() + self.config.acceptable_heartbeat_pause_ms as f64;
        let std_dev = self.std_dev_ms().max(self.config.min_std_dev_ms).max(1e-3);
        let y = (silence - mean) / std_dev;
        let k = y * (1.5976 + 0.070566 * y * y);
        // phi = log10(1 + e^k), as a softplus that neither overflows nor underflows to 0.
        let softplus = if k > 0.0 {
            k + (-k).exp().ln_1p()
        } else {
            k.exp().ln_1p()
        };
        softplus / std::f64::consts::LN_10
    }

    /// The agent's state at `now_ms` (see the module docs).
    pub fn state(&self, now_ms: u64) -> AgentState {
        if self.last_ms.is_none() {
            return AgentState::Alive;
        }
        let phi = self.phi(now_ms);
        if self.silence_ms(now_ms) >= self.config.dead_after_ms || phi >= self.config.threshold {
            AgentState::Dead
        } else if phi >= self.config.threshold / 2.0 {
            AgentState::Suspect
        } else {
            AgentState::Alive
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use silk_core::{Clock, ManualClock};

    const T0: u64 = 1_700_000_000_000;

    /// A detector fed `n` heartbeats spaced by `gaps` (cycled), on a manual clock.
    fn fed(config: PhiConfig, gaps: &[u64], n: usize) -> (PhiDetector, ManualClock) {
        let clock = ManualClock::new(T0);
        let mut d = PhiDetector::new(config);
        d.heartbeat(clock.now_ms());
        for i in 0..n {
            clock.advance(gaps[i % gaps.len()]);
            d.heartbeat(clock.now_ms());
        }
        (d, clock)
    }

    #[test]
    fn no_heartbeat_yet_is_alive_with_phi_zero() {
        let d = PhiDetector::new(PhiConfig::default());
        assert_eq!(
            (d.phi(T0), d.state(T0), d.silence_ms(T0)),
            (0.0, AgentState::Alive, 0)
        );
        assert_eq!(d.sample_count(), 2);
        assert_eq!(d.mean_ms(), 1_000.0);
        assert_eq!(d.std_dev_ms(), 250.0);
    }

    #[test]
    fn regular_heartbeats_keep_phi_low() {
        let (d, clock) = fed(PhiConfig::default(), &[1_000], 50);
        for late in [0, 500, 1_000, 2_000, 3_000] {
            let now = clock.now_ms() + late;
            assert!(
                d.phi(now) < 1.0,
                "{late} ms after a beat: phi {}",
                d.phi(now)
            );
            assert_eq!(d.state(now), AgentState::Alive, "{late}");
        }
        assert!((d.mean_ms() - 1_000.0).abs() < 10.0, "{}", d.mean_ms());
    }

    #[test]
    fn silence_raises_phi_monotonically_to_suspect_then_dead() {
        let (d, clock) = fed(PhiConfig::default(), &[1_000], 100);
        let start = clock.now_ms();
        let mut prev = -1.0;
        let (mut suspect_at, mut dead_at) = (None, None);
        for silence in (0..=20_000).step_by(50) {
            let phi = d.phi(start + silence);
            assert!(phi.is_finite(), "{silence}: {phi}");
            assert!(phi >= prev, "phi fell at {silence}: {prev} -> {phi}");
            prev = phi;
            match d.state(start + silence) {
                AgentState::Suspect if suspect_at.is_none() => suspect_at = Some(silence),
                AgentState::Dead if dead_at.is_none() => dead_at = Some(silence),
                _ => {}
            }
        }
        let (suspect_at, dead_at) = (suspect_at.unwrap(), dead_at.unwrap());
        assert!(suspect_at < dead_at, "{suspect_at} {dead_at}");
        // The documented figures: suspect after about 5.8 s, dead after about 6.6 s.
        assert!((5_600..=6_000).contains(&suspect_at), "{suspect_at}");
        assert!((6_300..=6_900).contains(&dead_at), "{dead_at}");
        assert!(prev > 100.0, "very long silences give large phi: {prev}");
    }

    #[test]
    fn suspect_boundary_is_half_the_threshold() {
        let (d, clock) = fed(PhiConfig::default(), &[1_000], 100);
        let start = clock.now_ms();
        for silence in (0..10_000).step_by(10) {
            let now = start + silence;
            let phi = d.phi(now);
            let want = if phi >= 8.0 {
                AgentState::Dead
            } else if phi >= 4.0 {
                AgentState::Suspect
            } else {
                AgentState::Alive
            };
            assert_eq!(d.state(now), want, "silence {silence}, phi {phi}");
        }
    }

    #[test]
    fn dead_after_the_cap_whatever_phi_says() {
        // A huge threshold: phi alone would never declare death.
        let config = PhiConfig {
            threshold: 1e9,
            ..PhiConfig::default()
        };
        let (d, clock) = fed(config, &[1_000], 20);
        let start = clock.now_ms();
        assert_eq!(d.state(start + 10_999), AgentState::Alive);
        assert_eq!(d.state(start + 11_000), AgentState::Dead);
        assert_eq!(d.state(start + 60_000), AgentState::Dead);
        // A custom cap.
        let config = PhiConfig {
            threshold: 1e9,
            dead_after_ms: 2_500,
            ..PhiConfig::default()
        };
        let (d, clock) = fed(config, &[1_000], 20);
        assert_eq!(d.state(clock.now_ms() + 2_499), AgentState::Alive);
        assert_eq!(d.state(clock.now_ms() + 2_500), AgentState::Dead);
    }

    #[test]
    fn jittery_heartbeats_widen_the_tolerance() {
        let steady = fed(PhiConfig::default(), &[1_000], 100).0;
        let jittery = fed(PhiConfig::default(), &[200, 1_800, 400, 2_600, 1_000], 100).0;
        assert!(
            (jittery.mean_ms() - 1_200.0).abs() < 1.0,
            "{}",
            jittery.mean_ms()
        );
        assert!(jittery.std_dev_ms() > 800.0, "{}", jittery.std_dev_ms());
        // Their usual gaps never make them suspect …
        let last = jittery.last_heartbeat_ms().unwrap();
        assert_eq!(jittery.state(last + 2_600), AgentState::Alive);
        // … and the same silence worries the detector less than for a steady agent.
        let s_last = steady.last_heartbeat_ms().unwrap();
        for silence in [5_000, 6_000, 7_000] {
            assert!(
                jittery.phi(last + silence) < steady.phi(s_last + silence),
                "{silence}"
            );
        }
        assert_eq!(steady.state(s_last + 7_000), AgentState::Dead);
        assert_ne!(jittery.state(last + 7_000), AgentState::Dead);
        // The cap still holds for the jittery agent.
        assert_eq!(jittery.state(last + 11_000), AgentState::Dead);
    }

    #[test]
    fn window_is_bounded() {
        let config = PhiConfig {
            max_sample_size: 10,
            ..PhiConfig::default()
        };
        let (d, _) = fed(config, &[3_000], 25);
        assert_eq!(d.sample_count(), 10);
        assert_eq!(
            (d.mean_ms(), d.std_dev_ms()),
            (3_000.0, 0.0),
            "seeds evicted"
        );
    }

    #[test]
    fn a_resumed_agent_comes_back_alive_and_the_outage_is_not_learnt() {
        let (mut d, clock) = fed(PhiConfig::default(), &[1_000], 30);
        let mean = d.mean_ms();
        clock.advance(30_000);
        assert_eq!(d.state(clock.now_ms()), AgentState::Dead);
        d.heartbeat(clock.now_ms());
        assert_eq!(d.state(clock.now_ms()), AgentState::Alive);
        assert_eq!(d.mean_ms(), mean, "the 30 s gap is not a sample");
        for _ in 0..5 {
            clock.advance(1_000);
            d.heartbeat(clock.now_ms());
            assert_eq!(d.state(clock.now_ms() + 900), AgentState::Alive);
        }
        // It can die again, as fast as before.
        assert_eq!(d.state(clock.now_ms() + 7_000), AgentState::Dead);
    }

    #[test]
    fn a_clock_set_back_records_nothing() {
        let (mut d, clock) = fed(PhiConfig::default(), &[1_000], 5);
        let (n, last) = (d.sample_count(), d.last_heartbeat_ms());
        d.heartbeat(clock.now_ms() - 500);
        assert_eq!((d.sample_count(), d.last_heartbeat_ms()), (n, last));
        assert_eq!(d.silence_ms(clock.now_ms() - 500), 0);
    }

    #[test]
    fn config_validation_names_the_bad_value() {
        assert_eq!(PhiConfig::default().validate(), Ok(()));
        let cases = [
            (
                PhiConfig {
                    threshold: 0.0,
                    ..PhiConfig::default()
                },
                "threshold",
            ),
            (
                PhiConfig {
                    threshold: f64::NAN,
                    ..PhiConfig::default()
                },
                "threshold",
            ),
            (
                PhiConfig {
                    max_sample_size: 0,
                    ..PhiConfig::default()
                },
                "max_sample_size",
            ),
            (
                PhiConfig {
                    min_std_dev_ms: -1.0,
                    ..PhiConfig::default()
                },
                "min_std_dev_ms",
            ),
            (
                PhiConfig {
                    first_heartbeat_estimate_ms: 0,
                    ..PhiConfig::default()
                },
                "estimate",
            ),
            (
                PhiConfig {
                    dead_after_ms: 0,
                    ..PhiConfig::default()
                },
                "dead_after_ms",
            ),
        ];
        for (config, want) in cases {
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
    }

    #[test]
    fn config_and_state_serde() {
        let config: PhiConfig = serde_json::from_str(r#"{"threshold":10}"#).unwrap();
        assert_eq!(config.threshold, 10.0);
        assert_eq!(config.dead_after_ms, 11_000);
        assert_eq!(
            serde_json::to_string(&AgentState::Suspect).unwrap(),
            r#""suspect""#
        );
        assert_eq!(AgentState::Dead.to_string(), "dead");
        assert!(AgentState::Suspect.is_live() && !AgentState::Dead.is_live());
    }
}
