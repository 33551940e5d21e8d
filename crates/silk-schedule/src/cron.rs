//! Cron expressions evaluated in an IANA time zone (see the crate doc for the accepted syntax
//! and the daylight-saving rules).

use chrono::{DateTime, TimeZone};
use chrono_tz::Tz;
use croner::Cron;
use croner::errors::CronError;
use croner::parser::{CronParser, Seconds, Year};
use serde::{Deserialize, Serialize};

use crate::error::{ScheduleError, shown};

/// The longest cron expression accepted, in bytes (after trimming).
pub const MAX_EXPR_LEN: usize = 256;

/// The nicknames croner expands (`@weekly` is Sunday 00:00).
const NICKNAMES: [&str; 6] = [
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@hourly",
];

/// What a 5- or 6-field expression looks like, for error messages.
const EXPECTED: &str = "expected 5 fields `minute hour day-of-month month day-of-week`, 6 with a \
                        leading seconds field, or a nickname such as `@daily`";

/// A parsed cron expression with the time zone its fields are read in.
///
/// Its serde form is `{"cron": "<expr>", "timezone": "<IANA name>"}` (`timezone` may be left
/// out on input and means `UTC`); deserializing parses and validates like [`Self::parse`].
#[derive(Clone, Serialize, Deserialize)]
#[serde(into = "CronScheduleRepr", try_from = "CronScheduleRepr")]
pub struct CronSchedule {
    expr: String,
    tz: Tz,
    cron: Cron,
}

/// The serde form of [`CronSchedule`].
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CronScheduleRepr {
    cron: String,
    #[serde(default)]
    timezone: Option<String>,
}

impl From<CronSchedule> for CronScheduleRepr {
    fn from(s: CronSchedule) -> Self {
        CronScheduleRepr {
            timezone: Some(s.timezone().to_owned()),
            cron: s.expr,
        }
    }
}

impl TryFrom<CronScheduleRepr> for CronSchedule {
    type Error = ScheduleError;

    fn try_from(r: CronScheduleRepr) -> Result<Self, Self::Error> {
        CronSchedule::parse(&r.cron, r.timezone.as_deref())
    }
}

impl std::fmt::Debug for CronSchedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CronSchedule")
            .field("expr", &self.expr)
            .field("timezone", &self.timezone())
            .finish()
    }
}

impl PartialEq for CronSchedule {
    fn eq(&self, other: &Self) -> bool {
        self.expr == other.expr && self.tz == other.tz
    }
}

impl Eq for CronSchedule {}

impl CronSchedule {
    /// Parses `expr` (5 fields, 6 with seconds first, or a nickname such as `@hourly`) to be
    /// read in `timezone` (an IANA name such as `Europe/Berlin`; `None` is `UTC`).
    ///
    /// Refuses, naming the input: an unknown zone, an empty or over-long expression, a wrong
    /// number of fields, an unknown nickname, a field croner rejects, and an expression that
    /// never fires (such as `0 0 30 2 *`).
    pub fn parse(expr: &str, timezone: Option<&str>) -> Result<CronSchedule, ScheduleError> {
        let tz = match timezone {
            None => Tz::UTC,
            Some(name) => parse_tz(name)?,
        };
        let err = |reason: String| ScheduleError::Cron {
            expr: shown(expr),
            reason,
        };
        let trimmed = expr.trim();
        if trimmed.is_empty() {
            return Err(err(format!("the expression is empty; {EXPECTED}")));
        }
        if trimmed.len() > MAX_EXPR_LEN {
            return Err(err(format!(
                "the expression is {} bytes long, more than {MAX_EXPR_LEN}",
                trimmed.len()
            )));
        }
        if trimmed.starts_with('@') {
            if !NICKNAMES.iter().any(|n| n.eq_ignore_ascii_case(trimmed)) {
                return Err(err(format!(
                    "unknown nickname; known are {}",
                    NICKNAMES.join(", ")
                )));
            }
        } else {
            let fields = trimmed.split_whitespace().count();
            if fields != 5 && fields != 6 {
                return Err(err(format!("{fields} fields; {EXPECTED}")));
            }
        }
        let cron = parser()
            .parse(trimmed)
            .map_err(|e| err(explain(trimmed, &e)))?;
        let schedule = CronSchedule {
            expr: trimmed.to_owned(),
            tz,
            cron,
        };
        if schedule.next_after(0).is_none() {
            return Err(err("never fires (no date matches it)".to_owned()));
        }
        Ok(schedule)
    }

    /// The expression, trimmed, as given to [`Self::parse`].
    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// The IANA name of the time zone (`UTC` when none was given).
    pub fn timezone(&self) -> &str {
        self.tz.name()
    }

    /// The first fire strictly after `after_ms` (UTC milliseconds; fires are whole seconds), or
    /// `None` when there is none that croner can find (it searches up to the year 5000) or
    /// `after_ms` is beyond the calendar. Daylight-saving changes are handled as the crate doc
    /// says (a fixed time in a spring-forward gap moves past it; fall-back fires it once).
    pub fn next_after(&self, after_ms: u64) -> Option<u64> {
        // Fires are whole seconds, so the first fire after the whole second `floor(after_ms)`
        // is also the first one after `after_ms`.
        let secs = i64::try_from(after_ms / 1000).ok()?;
        let from = DateTime::from_timestamp(secs, 0)?.with_timezone(&self.tz);
        let next = self.cron.find_next_occurrence(&from, false).ok()?;
        to_ms(&next).filter(|&ms| ms > after_ms)
    }
}

/// Checks that `tz` is an IANA time zone name (exact spelling, such as `America/New_York`).
pub fn validate_timezone(tz: &str) -> Result<(), ScheduleError> {
    parse_tz(tz).map(|_| ())
}

/// The calendar day at `now_ms` in time zone `tz` (IANA; `None`: UTC) as `YYYY-MM-DD`, and
/// when the next day begins there, ms since the epoch (a daily quota's period and reset).
pub fn day_at(now_ms: u64, tz: Option<&str>) -> Result<(String, u64), ScheduleError> {
    let tz = match tz {
        Some(name) => parse_tz(name)?,
        None => Tz::UTC,
    };
    let beyond = || ScheduleError::TimeZone {
        tz: format!("{tz}: {now_ms} ms is beyond the calendar"),
    };
    let secs = i64::try_from(now_ms / 1000).map_err(|_| beyond())?;
    let now = DateTime::from_timestamp(secs, 0)
        .ok_or_else(beyond)?
        .with_timezone(&tz);
    let today = now.date_naive();
    let tomorrow = today.succ_opt().ok_or_else(beyond)?;
    // The first instant of tomorrow there (midnight, or the first time after a gap).
    let start = (0..=3)
        .find_map(|h| {
            tomorrow
                .and_hms_opt(h, 0, 0)
                .and_then(|t| tz.from_local_datetime(&t).earliest())
        })
        .ok_or_else(beyond)?;
    let reset = to_ms(&start).ok_or_else(beyond)?;
    Ok((today.format("%Y-%m-%d").to_string(), reset))
}

fn parse_tz(name: &str) -> Result<Tz, ScheduleError> {
    name.parse::<Tz>()
        .map_err(|_| ScheduleError::TimeZone { tz: shown(name) })
}

fn to_ms<Z: TimeZone>(t: &DateTime<Z>) -> Option<u64> {
    u64::try_from(t.timestamp()).ok()?.checked_mul(1000)
}

/// The parser: seconds optional, no year field.
fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
}

/// The fields of a 5-field expression, with what each allows.
const FIELDS_5: [(&str, &str); 5] = [
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31, L, W"),
    ("month", "1-12 or JAN-DEC"),
    ("day-of-week", "0-7 or SUN-SAT, #, L, leading +"),
];

/// Croner's error, prefixed with the field at fault when one field alone fails (found by
/// parsing each field with `*` in the others).
fn explain(expr: &str, e: &CronError) -> String {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    let names: Vec<(&str, &str)> = match fields.len() {
        5 => FIELDS_5.to_vec(),
        6 => std::iter::once(("second", "0-59"))
            .chain(FIELDS_5)
            .collect(),
        _ => return reason_of(e),
    };
    for (i, (field, (name, allowed))) in fields.iter().zip(names).enumerate() {
        let probe: Vec<&str> = (0..fields.len())
            .map(|j| if j == i { *field } else { "*" })
            .collect();
        if let Err(e) = parser().parse(&probe.join(" ")) {
            return format!(
                "{name} field `{}`: {} (allowed: {allowed})",
                shown(field),
                reason_of(&e)
            );
        }
    }
    reason_of(e)
}

/// Croner's error as the tail of our message.
fn reason_of(e: &CronError) -> String {
    let reason = match e {
        CronError::EmptyPattern => format!("the expression is empty; {EXPECTED}"),
        CronError::InvalidPattern(m)
        | CronError::IllegalCharacters(m)
        | CronError::ComponentError(m) => m.clone(),
        other => other.to_string(),
    };
    reason.trim_end_matches('.').to_owned()
}
