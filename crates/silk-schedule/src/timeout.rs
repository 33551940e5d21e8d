//! Run timeouts.

/// When a run started at `started_ms` with a timeout of `timeout_ms` times out (saturating), or
/// `None` when it has not started or has no timeout.
pub fn deadline_ms(started_ms: Option<u64>, timeout_ms: Option<u64>) -> Option<u64> {
    Some(started_ms?.saturating_add(timeout_ms?))
}

/// Whether a run started at `started_ms` with a timeout of `timeout_ms` has timed out at
/// `now_ms`: at and after its [`deadline_ms`]. A run not started (`None`) or without a timeout
/// never times out; a timeout of 0 times out at once.
pub fn timed_out(started_ms: Option<u64>, timeout_ms: Option<u64>, now_ms: u64) -> bool {
    deadline_ms(started_ms, timeout_ms).is_some_and(|deadline| now_ms >= deadline)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timed_out_table() {
        let table: &[(Option<u64>, Option<u64>, u64, bool)] = &[
            (None, None, 10, false),
            (None, Some(5), 10, false),
            (Some(0), None, u64::MAX, false),
            (Some(100), Some(50), 149, false),
            (Some(100), Some(50), 150, true),
            (Some(100), Some(50), 151, true),
            (Some(100), Some(0), 100, true),
            // A clock that went back: not timed out.
            (Some(100), Some(50), 10, false),
            // Saturates instead of overflowing.
            (Some(u64::MAX - 1), Some(10), u64::MAX - 1, false),
            (Some(u64::MAX - 1), Some(10), u64::MAX, true),
        ];
        for &(started, timeout, now, want) in table {
            assert_eq!(
                timed_out(started, timeout, now),
                want,
                "started={started:?} timeout={timeout:?} now={now}"
            );
        }
        assert_eq!(deadline_ms(Some(100), Some(50)), Some(150));
        assert_eq!(deadline_ms(Some(u64::MAX), Some(1)), Some(u64::MAX));
        assert_eq!(deadline_ms(None, Some(1)), None);
    }
}
