//! A run's health: when a run that reached its end (nothing left, `max_pages`,
//! `max_duration`) counts as `failed` rather than `succeeded` — every request failed, too
//! many failed, too few items, too many blocked pages. The thresholds are the run's
//! [`FailIf`] (the job's or the run request's `fail_if`, with defaults); the reason of a
//! failed verdict names the threshold and the figures.
//!
//! Pure: no I/O, no clock. The runner feeds it the run's final counters.

use serde::{Deserialize, Serialize};

/// When a run that ran to its end counts as failed (the `fail_if` of a job or run request).
/// Every key has a default; `null` turns a ratio off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FailIf {
    /// Fail when every request that finished failed (at least one finished). Default `true`.
    #[serde(default = "yes")]
    pub all_failed: bool,
    /// Fail when more than this share (0–1) of the finished requests failed. Default 0.5.
    #[serde(default = "half")]
    pub failed_ratio: Option<f64>,
    /// Fail with fewer items than this. Default 0.
    #[serde(default)]
    pub min_items: u64,
    /// Fail when more than this share (0–1) of the pages the agents returned were blocked
    /// (a ban status or the ban regex of `downloader.proxies.switch_on_*`: `proxy_banned`).
    /// Default 0.5.
    #[serde(default = "half")]
    pub blocked_ratio: Option<f64>,
    /// The ratios are judged once at least this many requests finished (or pages came
    /// back); a smaller run is judged by `all_failed` and `min_items` only. Default 10.
    #[serde(default = "ten")]
    pub min_requests: u64,
}

fn yes() -> bool {
    true
}
fn half() -> Option<f64> {
    Some(0.5)
}
fn ten() -> u64 {
    10
}

impl Default for FailIf {
    fn default() -> Self {
        Self {
            all_failed: yes(),
            failed_ratio: half(),
            min_items: 0,
            blocked_ratio: half(),
            min_requests: ten(),
        }
    }
}

/// The counters a verdict reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Figures {
    /// Requests fetched.
    pub success: u64,
    /// Requests failed for good.
    pub failed: u64,
    /// Items written.
    pub items: u64,
    /// Results the agents returned (every attempt).
    pub returned: u64,
    /// Of those, pages found blocked (`proxy_banned`).
    pub blocked: u64,
}

impl FailIf {
    /// Every invalid value, each naming its key (`fail_if.failed_ratio: …`).
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        for (key, ratio) in [
            ("failed_ratio", self.failed_ratio),
            ("blocked_ratio", self.blocked_ratio),
        ] {
            if let Some(r) = ratio
                && !(r.is_finite() && (0.0..=1.0).contains(&r))
            {
                p.push(format!("fail_if.{key}: a share between 0 and 1, not {r}"));
            }
        }
        p
    }

    /// Why a run with these figures failed, or `None` when it is healthy. The first
    /// threshold crossed is named, in the order of the fields.
    pub fn verdict(&self, f: &Figures) -> Option<String> {
        let finished = f.success.saturating_add(f.failed);
        if self.all_failed && finished > 0 && f.failed == finished {
            return Some(format!(
                "fail_if.all_failed: every request failed ({} of {finished})",
                f.failed
            ));
        }
        if let Some(bound) = self.failed_ratio
            && finished >= self.min_requests.max(1)
            && share(f.failed, finished) > bound
        {
            return Some(format!(
                "fail_if.failed_ratio: {} of requests failed ({} of {finished}), above {}",
                percent(share(f.failed, finished)),
                f.failed,
                percent(bound)
            ));
        }
        if f.items < self.min_items {
            return Some(format!(
                "fail_if.min_items: {} items, fewer than {}",
                f.items, self.min_items
            ));
        }
        if let Some(bound) = self.blocked_ratio
            && f.returned >= self.min_requests.max(1)
            && share(f.blocked, f.returned) > bound
        {
            return Some(format!(
                "fail_if.blocked_ratio: {} of the pages returned were blocked ({} of {}), above {}",
                percent(share(f.blocked, f.returned)),
                f.blocked,
                f.returned,
                percent(bound)
            ));
        }
        None
    }
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

fn percent(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(success: u64, failed: u64, items: u64, returned: u64, blocked: u64) -> Figures {
        Figures {
            success,
            failed,
            items,
            returned,
            blocked,
        }
    }

    #[test]
    fn verdicts_name_the_threshold_and_the_figures() {
        let defaults = FailIf::default();
        let strict = FailIf {
            failed_ratio: Some(0.1),
            min_items: 5,
            blocked_ratio: Some(0.2),
            min_requests: 3,
            ..FailIf::default()
        };
        let off = FailIf {
            all_failed: false,
            failed_ratio: None,
            min_items: 0,
            blocked_ratio: None,
            min_requests: 0,
        };
        let table: &[(&FailIf, Figures, Option<&str>)] = &[
            // Nothing finished (all dropped by robots.txt, say): not "all failed".
            (&defaults, figures(0, 0, 0, 0, 0), None),
            (
                &defaults,
                figures(0, 2, 0, 0, 0),
                Some("fail_if.all_failed: every request failed (2 of 2)"),
            ),
            (&off, figures(0, 2, 0, 0, 0), None),
            // Ratios wait for min_requests finished.
            (&defaults, figures(3, 6, 0, 9, 0), None),
            (
                &defaults,
                figures(4, 6, 0, 10, 0),
                Some("fail_if.failed_ratio: 60.0% of requests failed (6 of 10), above 50.0%"),
            ),
            (&defaults, figures(5, 5, 0, 10, 0), None),
            // At the bound is not above it.
            (&strict, figures(9, 1, 9, 10, 0), None),
            (
                &strict,
                figures(8, 1, 4, 9, 0),
                Some("fail_if.failed_ratio: 11.1% of requests failed (1 of 9), above 10.0%"),
            ),
            (
                &strict,
                figures(9, 0, 4, 9, 0),
                Some("fail_if.min_items: 4 items, fewer than 5"),
            ),
            (
                &strict,
                figures(9, 0, 9, 12, 3),
                Some(
                    "fail_if.blocked_ratio: 25.0% of the pages returned were blocked (3 of 12), above 20.0%",
                ),
            ),
            (&defaults, figures(100, 0, 0, 300, 150), None),
            (
                &defaults,
                figures(100, 0, 0, 300, 151),
                Some(
                    "fail_if.blocked_ratio: 50.3% of the pages returned were blocked (151 of 300), above 50.0%",
                ),
            ),
        ];
        for (i, (fail_if, f, want)) in table.iter().enumerate() {
            assert_eq!(
                fail_if.verdict(f).as_deref(),
                *want,
                "row {i}: {f:?} under {fail_if:?}"
            );
        }
    }

    #[test]
    fn defaults_and_bad_values() {
        let parsed: FailIf = serde_json::from_str("{}").unwrap();
        assert_eq!(parsed, FailIf::default());
        let parsed: FailIf =
            serde_json::from_str(r#"{"failed_ratio": null, "min_items": 3}"#).unwrap();
        assert_eq!((parsed.failed_ratio, parsed.min_items), (None, 3));
        let bad = FailIf {
            failed_ratio: Some(1.5),
            blocked_ratio: Some(f64::NAN),
            ..FailIf::default()
        };
        let p = bad.problems();
        assert!(
            p.len() == 2 && p[0].starts_with("fail_if.failed_ratio") && p[1].contains("blocked"),
            "{p:?}"
        );
        assert!(serde_json::from_str::<FailIf>(r#"{"min_itemz": 3}"#).is_err());
    }
}
