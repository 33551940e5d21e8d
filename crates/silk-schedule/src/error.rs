//! The one error type of the crate.

/// Why a schedule, time zone or retry policy was refused. Every message names the input it is
/// about (long inputs are shortened in the message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The cron expression does not parse, or parses but never fires.
    #[error("cron `{expr}`: {reason}")]
    Cron {
        /// The expression as given (shortened when long).
        expr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The time zone is not a name of the IANA time zone database.
    #[error("time zone `{tz}` is not a known IANA zone (such as `UTC` or `Europe/Berlin`)")]
    TimeZone {
        /// The name as given (shortened when long).
        tz: String,
    },
    /// A field of a [`crate::RetryPolicy`] is out of range.
    #[error("retry policy: `{field}` {reason}")]
    Retry {
        /// The field at fault (`max_retries`, `backoff`, `max_delay_ms`).
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// At most this many characters of an input are quoted in a message.
const SHOWN_CHARS: usize = 80;

/// `s` for a message: at most [`SHOWN_CHARS`] characters, then `…`.
pub(crate) fn shown(s: &str) -> String {
    match s.char_indices().nth(SHOWN_CHARS) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_inputs_are_shortened() {
        assert_eq!(shown("abc"), "abc");
        let long = "é".repeat(200);
        let s = shown(&long);
        assert_eq!(s.chars().count(), SHOWN_CHARS + 1);
        assert!(s.ends_with('…'));
    }
}
