//! The task as the router sees it (a JSON object) and the built-in keys the router writes
//! into every task it pushes, exactly as the seed names them.
//!
//! | key | value |
//! |---|---|
//! | `outbound` | name of the outbound the task is pushed to |
//! | `routed_count` | how many times the task was pushed (this push included) |
//! | `retry_times` | retries on the current outbound (reset on entering an outbound with `reset_retry_times`) |
//! | `group_retry_times` | retries over the task's whole life, never reset |
//! | `submitter` | always `taskhub` (existing rules test `submitter == 'taskhub'`) |
//! | `submit_time` | push time, UTC, `YYYY-MM-DD HH:MM:SS.mmm` (the seed's log time format) |
//! | `retry_limits` | the outbound's `retry_limits` |
//! | `rt` | whether the task is real-time: Python truthiness of the task's `rt` |
//! | `priority` | `rt_priority` for real-time tasks, else `priority`, else the task's own, else 0 |
//! | `task_uuid` | kept when the task has one, else a new UUID (v7) |
//! | `token_scope` | the outbound's `token_scope` (`*` when unset) |
//!
//! The router reads a task's state (`outbound`, `task_result`, the counters) from top-level
//! keys only, as taskHUB did; `common.ExtractTaskParams` lifts them out of `task_params`.
//! This module is pure.

use serde_json::{Map, Value};

/// The built-in keys, in the seed's order.
pub const BUILTIN_KEYS: [&str; 11] = [
    "outbound",
    "routed_count",
    "retry_times",
    "submitter",
    "submit_time",
    "retry_limits",
    "rt",
    "priority",
    "task_uuid",
    "group_retry_times",
    "token_scope",
];

/// The value of the built-in `submitter`.
pub const SUBMITTER: &str = "taskhub";

/// Python truthiness of a JSON value.
pub fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// A status code (`task_result`) as an integer: integers, integral floats, and strings
/// holding an integer (`"1000"`). Anything else is not a code.
pub fn code(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                .map(|f| f as i64)
        }),
        Value::String(s) => s.trim().parse().ok(),
        Value::Bool(_) | Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

fn counter(task: &Map<String, Value>, key: &str) -> u64 {
    match task.get(key) {
        Some(Value::Number(n)) => n.as_u64().unwrap_or(0),
        Some(Value::String(s)) => s.trim().parse().unwrap_or(0),
        _ => 0,
    }
}

/// The state a task carries from earlier routings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Carry {
    pub routed_count: u64,
    pub retry_times: u64,
    pub group_retry_times: u64,
}

impl Carry {
    pub(crate) fn of(task: &Map<String, Value>) -> Carry {
        Carry {
            routed_count: counter(task, "routed_count"),
            retry_times: counter(task, "retry_times"),
            group_retry_times: counter(task, "group_retry_times"),
        }
    }
}

/// Formats `ms` since the epoch as `YYYY-MM-DD HH:MM:SS.mmm` (UTC).
pub fn format_time(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:03}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// A new task UUID (version 7: time-ordered). The random part comes from a per-thread
/// SplitMix64 seeded from the OS's hash keys, not from a system call per task: task UUIDs
/// need uniqueness, not secrecy.
pub(crate) fn new_uuid() -> String {
    use std::cell::Cell;
    use std::hash::{BuildHasher, Hasher};
    thread_local! {
        static STATE: Cell<u64> = Cell::new({
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64));
            h.finish()
        });
    }
    let next = || {
        STATE.with(|s| {
            let z = s.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
            s.set(z);
            let z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        })
    };
    let (a, b) = (next().to_le_bytes(), next().to_le_bytes());
    let mut random = [0u8; 10];
    random[..8].copy_from_slice(&a);
    random[8..].copy_from_slice(&b[..2]);
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    uuid::Builder::from_unix_timestamp_millis(ms, &random)
        .into_uuid()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn truthiness_and_codes() {
        assert!(truthy(&json!(true)) && truthy(&json!("x")) && truthy(&json!(1)));
        assert!(
            !truthy(&json!(0))
                && !truthy(&json!(""))
                && !truthy(&json!(null))
                && !truthy(&json!([]))
        );
        assert_eq!(code(&json!(1000)), Some(1000));
        assert_eq!(code(&json!("1101")), Some(1101));
        assert_eq!(code(&json!(1000.0)), Some(1000));
        assert_eq!(code(&json!("x")), None);
    }

    #[test]
    fn uuids_are_v7_and_distinct() {
        let a = new_uuid();
        let b = new_uuid();
        assert_ne!(a, b);
        let parsed = uuid::Uuid::parse_str(&a).expect("a uuid");
        assert_eq!(parsed.get_version_num(), 7);
    }

    #[test]
    fn time_format() {
        assert_eq!(format_time(0), "1970-01-01 00:00:00.000");
        assert_eq!(format_time(1_634_915_522_145), "2021-10-22 15:12:02.145");
        assert_eq!(format_time(951_782_400_000), "2000-02-29 00:00:00.000");
    }
}
