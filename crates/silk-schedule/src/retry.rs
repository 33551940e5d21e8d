//! Retries of a failed run: how many, and when.

use serde::{Deserialize, Serialize};

use crate::error::ScheduleError;

/// The largest `max_retries` [`RetryPolicy::validate`] accepts.
pub const MAX_RETRIES_LIMIT: u32 = 100;

/// The largest `backoff` [`RetryPolicy::validate`] accepts.
pub const MAX_BACKOFF: f64 = 100.0;

/// When a failed run of a job is retried.
///
/// Retry `n` (1 = the first) comes `delay_ms * backoff^(n-1)` milliseconds (rounded, then
/// capped at `max_delay_ms`) after the failure, for `n` up to `max_retries`.
///
/// Serde: every field may be left out (defaults: no retries, 60 s, backoff 1, no cap); unknown
/// fields are errors; deserializing validates like [`Self::validate`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RetryPolicyRepr")]
pub struct RetryPolicy {
    /// How many times a failed run is retried (0, the default: never), at most
    /// [`MAX_RETRIES_LIMIT`].
    pub max_retries: u32,
    /// The delay before the first retry, in milliseconds (default 60 000).
    pub delay_ms: u64,
    /// The factor each further retry's delay grows by: finite, from 1 (the default: a fixed
    /// delay) to [`MAX_BACKOFF`].
    pub backoff: f64,
    /// The longest delay, in milliseconds (default: none); not less than `delay_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delay_ms: Option<u64>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 0,
            delay_ms: 60_000,
            backoff: 1.0,
            max_delay_ms: None,
        }
    }
}

/// The serde input form of [`RetryPolicy`], validated into it.
#[derive(Deserialize)]
#[serde(default, deny_unknown_fields)]
struct RetryPolicyRepr {
    max_retries: u32,
    delay_ms: u64,
    backoff: f64,
    max_delay_ms: Option<u64>,
}

impl Default for RetryPolicyRepr {
    fn default() -> Self {
        let d = RetryPolicy::default();
        RetryPolicyRepr {
            max_retries: d.max_retries,
            delay_ms: d.delay_ms,
            backoff: d.backoff,
            max_delay_ms: d.max_delay_ms,
        }
    }
}

impl TryFrom<RetryPolicyRepr> for RetryPolicy {
    type Error = ScheduleError;

    fn try_from(r: RetryPolicyRepr) -> Result<Self, Self::Error> {
        let p = RetryPolicy {
            max_retries: r.max_retries,
            delay_ms: r.delay_ms,
            backoff: r.backoff,
            max_delay_ms: r.max_delay_ms,
        };
        p.validate()?;
        Ok(p)
    }
}

impl RetryPolicy {
    /// Checks the ranges: `max_retries` at most [`MAX_RETRIES_LIMIT`], `backoff` finite in
    /// `1..=MAX_BACKOFF`, `max_delay_ms` (when set) at least `delay_ms`.
    pub fn validate(&self) -> Result<(), ScheduleError> {
        if self.max_retries > MAX_RETRIES_LIMIT {
            return Err(ScheduleError::Retry {
                field: "max_retries",
                reason: format!("is {}, more than {MAX_RETRIES_LIMIT}", self.max_retries),
            });
        }
        if !(1.0..=MAX_BACKOFF).contains(&self.backoff) {
            return Err(ScheduleError::Retry {
                field: "backoff",
                reason: format!("is {}, not a number from 1 to {MAX_BACKOFF}", self.backoff),
            });
        }
        if let Some(max) = self.max_delay_ms
            && max < self.delay_ms
        {
            return Err(ScheduleError::Retry {
                field: "max_delay_ms",
                reason: format!("is {max}, less than `delay_ms` {}", self.delay_ms),
            });
        }
        Ok(())
    }

    /// When retry number `attempt` (1 = the first retry) of a run that failed at
    /// `failed_at_ms` is due, or `None` when `attempt` is 0 or past `max_retries`. Saturates
    /// instead of overflowing; a `backoff` that does not validate counts as 1.
    pub fn retry_at(&self, attempt: u32, failed_at_ms: u64) -> Option<u64> {
        if attempt == 0 || attempt > self.max_retries {
            return None;
        }
        Some(failed_at_ms.saturating_add(self.delay(attempt)))
    }

    /// The delay before retry `attempt` (at least 1).
    fn delay(&self, attempt: u32) -> u64 {
        let backoff = if (1.0..=MAX_BACKOFF).contains(&self.backoff) {
            self.backoff
        } else {
            1.0
        };
        let delay = if backoff == 1.0 {
            self.delay_ms
        } else {
            let exact = self.delay_ms as f64 * backoff.powf(f64::from(attempt - 1));
            // `as` saturates (and the value is finite or +inf, never NaN).
            exact.round() as u64
        };
        match self.max_delay_ms {
            Some(max) => delay.min(max),
            None => delay,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_at_table() {
        let fixed = RetryPolicy {
            max_retries: 3,
            ..RetryPolicy::default()
        };
        let doubling = RetryPolicy {
            max_retries: 5,
            delay_ms: 1_000,
            backoff: 2.0,
            max_delay_ms: Some(10_000),
        };
        let one_and_half = RetryPolicy {
            max_retries: 3,
            delay_ms: 1_000,
            backoff: 1.5,
            max_delay_ms: None,
        };
        let t = 1_700_000_000_000;
        let table: &[(&str, RetryPolicy, u32, u64, Option<u64>)] = &[
            ("default never retries", RetryPolicy::default(), 1, t, None),
            ("attempt 0 is not a retry", fixed, 0, t, None),
            ("fixed 1", fixed, 1, t, Some(t + 60_000)),
            ("fixed 2", fixed, 2, t, Some(t + 60_000)),
            ("fixed 3", fixed, 3, t, Some(t + 60_000)),
            ("fixed exhausted", fixed, 4, t, None),
            ("fixed far past", fixed, u32::MAX, t, None),
            ("doubling 1", doubling, 1, t, Some(t + 1_000)),
            ("doubling 2", doubling, 2, t, Some(t + 2_000)),
            ("doubling 3", doubling, 3, t, Some(t + 4_000)),
            ("doubling 4", doubling, 4, t, Some(t + 8_000)),
            ("doubling 5 capped", doubling, 5, t, Some(t + 10_000)),
            ("doubling exhausted", doubling, 6, t, None),
            ("1.5: 1", one_and_half, 1, t, Some(t + 1_000)),
            ("1.5: 2", one_and_half, 2, t, Some(t + 1_500)),
            ("1.5: 3", one_and_half, 3, t, Some(t + 2_250)),
            (
                "saturates at the end of time",
                fixed,
                1,
                u64::MAX - 5,
                Some(u64::MAX),
            ),
        ];
        for (name, policy, attempt, failed_at, want) in table {
            assert_eq!(policy.retry_at(*attempt, *failed_at), *want, "{name}");
        }
    }

    #[test]
    fn huge_unvalidated_policies_saturate_instead_of_panicking() {
        let p = RetryPolicy {
            max_retries: u32::MAX,
            delay_ms: u64::MAX,
            backoff: MAX_BACKOFF,
            max_delay_ms: None,
        };
        assert_eq!(p.retry_at(u32::MAX, 5), Some(u64::MAX));
        for backoff in [f64::NAN, f64::INFINITY, -3.0, 0.0, 0.5] {
            let p = RetryPolicy {
                max_retries: 2,
                delay_ms: 1_000,
                backoff,
                max_delay_ms: None,
            };
            assert_eq!(
                p.retry_at(2, 0),
                Some(1_000),
                "backoff {backoff} counts as 1"
            );
        }
    }

    #[test]
    fn validate_table() {
        let ok = RetryPolicy::default();
        let table: &[(RetryPolicy, Option<&str>)] = &[
            (ok, None),
            (
                RetryPolicy {
                    max_retries: MAX_RETRIES_LIMIT,
                    backoff: MAX_BACKOFF,
                    max_delay_ms: Some(60_000),
                    ..ok
                },
                None,
            ),
            (
                RetryPolicy {
                    max_retries: MAX_RETRIES_LIMIT + 1,
                    ..ok
                },
                Some("retry policy: `max_retries` is 101, more than 100"),
            ),
            (
                RetryPolicy { backoff: 0.5, ..ok },
                Some("retry policy: `backoff` is 0.5, not a number from 1 to 100"),
            ),
            (
                RetryPolicy {
                    backoff: f64::NAN,
                    ..ok
                },
                Some("retry policy: `backoff` is NaN, not a number from 1 to 100"),
            ),
            (
                RetryPolicy {
                    backoff: f64::INFINITY,
                    ..ok
                },
                Some("retry policy: `backoff` is inf, not a number from 1 to 100"),
            ),
            (
                RetryPolicy {
                    max_delay_ms: Some(59_999),
                    ..ok
                },
                Some("retry policy: `max_delay_ms` is 59999, less than `delay_ms` 60000"),
            ),
        ];
        for (policy, want) in table {
            let got = policy.validate().err().map(|e| e.to_string());
            assert_eq!(got.as_deref(), *want, "{policy:?}");
        }
    }

    #[test]
    fn serde_defaults_round_trip_and_validation() {
        let p: RetryPolicy = serde_json::from_str("{}").unwrap();
        assert_eq!(p, RetryPolicy::default());
        let p: RetryPolicy =
            serde_json::from_str(r#"{"max_retries": 2, "backoff": 2, "max_delay_ms": 90000}"#)
                .unwrap();
        assert_eq!(
            p,
            RetryPolicy {
                max_retries: 2,
                delay_ms: 60_000,
                backoff: 2.0,
                max_delay_ms: Some(90_000),
            }
        );
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(
            json,
            r#"{"max_retries":2,"delay_ms":60000,"backoff":2.0,"max_delay_ms":90000}"#
        );
        assert_eq!(serde_json::from_str::<RetryPolicy>(&json).unwrap(), p);
        assert_eq!(
            serde_json::to_string(&RetryPolicy::default()).unwrap(),
            r#"{"max_retries":0,"delay_ms":60000,"backoff":1.0}"#
        );

        let err = serde_json::from_str::<RetryPolicy>(r#"{"max_retries": 500}"#).unwrap_err();
        assert!(err.to_string().contains("`max_retries` is 500"), "{err}");
        let err = serde_json::from_str::<RetryPolicy>(r#"{"retries": 1}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `retries`"), "{err}");
    }
}
