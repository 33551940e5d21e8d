//! Cron fires in time zones, across daylight-saving changes, and the errors of bad input.

use chrono::DateTime;
use silk_schedule::{CronSchedule, MAX_EXPR_LEN, ScheduleError, validate_timezone};

/// UTC milliseconds of an RFC 3339 time (the offset says which local time is meant).
fn at(rfc3339: &str) -> u64 {
    let t = DateTime::parse_from_rfc3339(rfc3339).expect(rfc3339);
    u64::try_from(t.timestamp_millis()).unwrap()
}

fn fires(s: &CronSchedule, after_ms: u64, n: usize) -> Vec<u64> {
    let mut out = Vec::new();
    let mut t = after_ms;
    for _ in 0..n {
        t = s.next_after(t).expect("a next fire");
        out.push(t);
    }
    out
}

/// Each row: expression, time zone, after, the next fires.
fn check(table: &[(&str, Option<&str>, &str, &[&str])]) {
    for (expr, tz, after, want) in table {
        let s = CronSchedule::parse(expr, *tz).unwrap();
        let want: Vec<u64> = want.iter().map(|w| at(w)).collect();
        assert_eq!(
            fires(&s, at(after), want.len()),
            want,
            "`{expr}` in {tz:?} after {after}"
        );
    }
}

#[test]
fn fires_in_utc_and_zones() {
    check(&[
        (
            "*/5 * * * *",
            None,
            "2025-01-01T00:02:30Z",
            &[
                "2025-01-01T00:05:00Z",
                "2025-01-01T00:10:00Z",
                "2025-01-01T00:15:00Z",
            ],
        ),
        // Strictly after: a fire at `after` itself is not returned.
        (
            "*/5 * * * *",
            None,
            "2025-01-01T00:05:00Z",
            &["2025-01-01T00:10:00Z"],
        ),
        (
            "*/5 * * * *",
            None,
            "2025-01-01T23:58:00Z",
            &["2025-01-02T00:00:00Z"],
        ),
        // Daily at 02:30: in Shanghai (UTC+8, no DST) and in UTC.
        (
            "30 2 * * *",
            Some("Asia/Shanghai"),
            "2025-06-01T00:00:00Z",
            &["2025-06-02T02:30:00+08:00", "2025-06-03T02:30:00+08:00"],
        ),
        (
            "30 2 * * *",
            None,
            "2025-06-01T00:00:00Z",
            &["2025-06-01T02:30:00Z", "2025-06-02T02:30:00Z"],
        ),
        (
            "30 2 * * *",
            Some("UTC"),
            "2025-06-01T02:30:00Z",
            &["2025-06-02T02:30:00Z"],
        ),
        // Weekdays only, from a Friday morning after 09:00.
        (
            "0 9 * * MON-FRI",
            Some("Europe/Berlin"),
            "2025-06-06T10:00:00+02:00",
            &["2025-06-09T09:00:00+02:00", "2025-06-10T09:00:00+02:00"],
        ),
        (
            "0 9 * * 1-5",
            None,
            "2025-06-06T08:59:59Z",
            &[
                "2025-06-06T09:00:00Z",
                "2025-06-09T09:00:00Z",
                "2025-06-10T09:00:00Z",
            ],
        ),
        // Six fields: seconds first.
        (
            "*/20 * * * * *",
            None,
            "2025-01-01T00:00:00Z",
            &[
                "2025-01-01T00:00:20Z",
                "2025-01-01T00:00:40Z",
                "2025-01-01T00:01:00Z",
            ],
        ),
        // Nicknames (2025-01-01 is a Wednesday).
        (
            "@hourly",
            None,
            "2025-01-01T00:30:00Z",
            &["2025-01-01T01:00:00Z", "2025-01-01T02:00:00Z"],
        ),
        (
            "@daily",
            Some("Asia/Tokyo"),
            "2025-01-01T00:00:00Z",
            &["2025-01-02T00:00:00+09:00"],
        ),
        (
            "@weekly",
            None,
            "2025-01-01T00:00:00Z",
            &["2025-01-05T00:00:00Z", "2025-01-12T00:00:00Z"],
        ),
        (
            "@monthly",
            None,
            "2025-01-01T00:00:00Z",
            &["2025-02-01T00:00:00Z"],
        ),
        (
            "@YEARLY",
            None,
            "2025-01-01T00:00:00Z",
            &["2026-01-01T00:00:00Z"],
        ),
        (
            "@annually",
            None,
            "2025-01-01T00:00:00Z",
            &["2026-01-01T00:00:00Z"],
        ),
        // Croner's extensions: last day of the month; the 1st when it is a Monday.
        (
            "0 0 L 2 *",
            None,
            "2024-01-01T00:00:00Z",
            &["2024-02-29T00:00:00Z", "2025-02-28T00:00:00Z"],
        ),
        (
            "0 0 1 * +MON",
            None,
            "2025-01-01T00:00:00Z",
            &["2025-09-01T00:00:00Z", "2025-12-01T00:00:00Z"],
        ),
        // Vixie: both day fields restricted means either (the 1st, or any Monday).
        (
            "0 0 1 * MON",
            None,
            "2025-01-01T00:00:00Z",
            &[
                "2025-01-06T00:00:00Z",
                "2025-01-13T00:00:00Z",
                "2025-01-20T00:00:00Z",
                "2025-01-27T00:00:00Z",
                "2025-02-01T00:00:00Z",
            ],
        ),
    ]);
}

#[test]
fn sub_second_after_is_respected() {
    let s = CronSchedule::parse("*/5 * * * *", None).unwrap();
    let five = at("2025-01-01T00:05:00Z");
    assert_eq!(s.next_after(five - 1), Some(five));
    assert_eq!(s.next_after(five), Some(five + 300_000));
    assert_eq!(s.next_after(five + 999), Some(five + 300_000));
    assert_eq!(s.next_after(0), Some(300_000));
}

#[test]
fn dst_spring_forward() {
    check(&[
        // Europe/Berlin, 2025-03-30: 02:00 CET jumps to 03:00 CEST. A fixed-time job in the gap
        // moves to 03:00 that day.
        (
            "30 2 * * *",
            Some("Europe/Berlin"),
            "2025-03-29T00:00:00Z",
            &[
                "2025-03-29T02:30:00+01:00",
                "2025-03-30T03:00:00+02:00",
                "2025-03-31T02:30:00+02:00",
            ],
        ),
        // An interval job skips the fires inside the gap (02:00, 02:30).
        (
            "*/30 * * * *",
            Some("Europe/Berlin"),
            "2025-03-30T01:15:00+01:00",
            &[
                "2025-03-30T01:30:00+01:00",
                "2025-03-30T03:00:00+02:00",
                "2025-03-30T03:30:00+02:00",
            ],
        ),
        // America/New_York, 2025-03-09: 02:00 EST jumps to 03:00 EDT.
        (
            "30 2 * * *",
            Some("America/New_York"),
            "2025-03-08T12:00:00Z",
            &["2025-03-09T03:00:00-04:00", "2025-03-10T02:30:00-04:00"],
        ),
        (
            "0 * * * *",
            Some("America/New_York"),
            "2025-03-09T00:30:00-05:00",
            &[
                "2025-03-09T01:00:00-05:00",
                "2025-03-09T03:00:00-04:00",
                "2025-03-09T04:00:00-04:00",
            ],
        ),
    ]);
    // The same in raw UTC milliseconds.
    let berlin = CronSchedule::parse("30 2 * * *", Some("Europe/Berlin")).unwrap();
    assert_eq!(
        fires(&berlin, 1_743_206_400_000, 2),
        [1_743_211_800_000, 1_743_296_400_000]
    );
    let ny = CronSchedule::parse("30 2 * * *", Some("America/New_York")).unwrap();
    assert_eq!(
        ny.next_after(at("2025-03-08T12:00:00Z")),
        Some(1_741_503_600_000)
    );
}

#[test]
fn dst_fall_back() {
    check(&[
        // Europe/Berlin, 2025-10-26: 03:00 CEST goes back to 02:00 CET. A fixed-time job fires
        // once, at the first 02:30.
        (
            "30 2 * * *",
            Some("Europe/Berlin"),
            "2025-10-25T12:00:00Z",
            &["2025-10-26T02:30:00+02:00", "2025-10-27T02:30:00+01:00"],
        ),
        // An interval job fires in both passes of the repeated hour.
        (
            "0,30 2 * * *",
            Some("Europe/Berlin"),
            "2025-10-26T01:45:00+02:00",
            &[
                "2025-10-26T02:00:00+02:00",
                "2025-10-26T02:30:00+02:00",
                "2025-10-26T02:00:00+01:00",
                "2025-10-26T02:30:00+01:00",
                "2025-10-27T02:00:00+01:00",
            ],
        ),
        // America/New_York, 2025-11-02: 02:00 EDT goes back to 01:00 EST.
        (
            "30 1 * * *",
            Some("America/New_York"),
            "2025-11-01T12:00:00Z",
            &["2025-11-02T01:30:00-04:00", "2025-11-03T01:30:00-05:00"],
        ),
        (
            "0 * * * *",
            Some("America/New_York"),
            "2025-11-02T00:30:00-04:00",
            &[
                "2025-11-02T01:00:00-04:00",
                "2025-11-02T01:00:00-05:00",
                "2025-11-02T02:00:00-05:00",
            ],
        ),
    ]);
    let berlin = CronSchedule::parse("30 2 * * *", Some("Europe/Berlin")).unwrap();
    assert_eq!(
        fires(&berlin, at("2025-10-25T12:00:00Z"), 2),
        [1_761_438_600_000, 1_761_528_600_000]
    );
    let ny = CronSchedule::parse("30 1 * * *", Some("America/New_York")).unwrap();
    assert_eq!(
        fires(&ny, at("2025-11-01T12:00:00Z"), 2),
        [1_762_061_400_000, 1_762_151_400_000]
    );
    let ny_hourly = CronSchedule::parse("0 * * * *", Some("America/New_York")).unwrap();
    assert_eq!(
        fires(&ny_hourly, at("2025-11-02T05:00:00Z"), 1),
        [1_762_063_200_000]
    );
}

#[test]
fn accessors_and_serde() {
    let s = CronSchedule::parse("  */5 * * * *\n", Some("Europe/Berlin")).unwrap();
    assert_eq!(s.expr(), "*/5 * * * *");
    assert_eq!(s.timezone(), "Europe/Berlin");
    let json = serde_json::to_string(&s).unwrap();
    assert_eq!(json, r#"{"cron":"*/5 * * * *","timezone":"Europe/Berlin"}"#);
    assert_eq!(serde_json::from_str::<CronSchedule>(&json).unwrap(), s);

    let utc: CronSchedule = serde_json::from_str(r#"{"cron":"@daily"}"#).unwrap();
    assert_eq!(utc.timezone(), "UTC");
    assert_eq!(utc, CronSchedule::parse("@daily", None).unwrap());
    assert_eq!(
        serde_json::to_string(&utc).unwrap(),
        r#"{"cron":"@daily","timezone":"UTC"}"#
    );

    let err = serde_json::from_str::<CronSchedule>(r#"{"cron":"* * *"}"#).unwrap_err();
    assert!(
        err.to_string().starts_with("cron `* * *`: 3 fields"),
        "{err}"
    );
    let err = serde_json::from_str::<CronSchedule>(r#"{"cron":"@daily","timezone":"Mars/Base"}"#)
        .unwrap_err();
    assert!(err.to_string().contains("time zone `Mars/Base`"), "{err}");
    let err = serde_json::from_str::<CronSchedule>(r#"{"cron":"@daily","tz":"UTC"}"#).unwrap_err();
    assert!(err.to_string().contains("unknown field `tz`"), "{err}");
}

#[test]
fn bad_input_names_the_input() {
    let expected = "expected 5 fields `minute hour day-of-month month day-of-week`, 6 with a \
                    leading seconds field, or a nickname such as `@daily`";
    let long = "1,".repeat(200) + "1 * * * *";
    let table: Vec<(&str, Option<&str>, String)> =
        vec![
        ("", None, format!("cron ``: the expression is empty; {expected}")),
        ("   ", None, format!("cron `   `: the expression is empty; {expected}")),
        ("*/5 * * *", None, format!("cron `*/5 * * *`: 4 fields; {expected}")),
        (
            "* * * * * * *",
            None,
            format!("cron `* * * * * * *`: 7 fields; {expected}"),
        ),
        (
            "61 * * * *",
            None,
            "cron `61 * * * *`: minute field `61`: Number out of bounds (allowed: 0-59)".into(),
        ),
        (
            "0 24 * * *",
            None,
            "cron `0 24 * * *`: hour field `24`: Number out of bounds (allowed: 0-23)".into(),
        ),
        (
            "0 0 * 13 *",
            None,
            "cron `0 0 * 13 *`: month field `13`: Number out of bounds (allowed: 1-12 or JAN-DEC)"
                .into(),
        ),
        (
            "*/0 * * * *",
            None,
            "cron `*/0 * * * *`: minute field `*/0`: Step cannot be zero (allowed: 0-59)".into(),
        ),
        (
            "60 * * * * *",
            None,
            "cron `60 * * * * *`: second field `60`: Number out of bounds (allowed: 0-59)".into(),
        ),
        (
            "@reboot",
            None,
            "cron `@reboot`: unknown nickname; known are @yearly, @annually, @monthly, @weekly, \
             @daily, @hourly"
                .into(),
        ),
        (
            "0 0 30 2 *",
            None,
            "cron `0 0 30 2 *`: never fires (no date matches it)".into(),
        ),
        (
            "* * * * *",
            Some("Europe/Pariss"),
            "time zone `Europe/Pariss` is not a known IANA zone (such as `UTC` or `Europe/Berlin`)"
                .into(),
        ),
        (
            "* * * * *",
            Some(""),
            "time zone `` is not a known IANA zone (such as `UTC` or `Europe/Berlin`)".into(),
        ),
        (
            "* * * * *",
            Some(" UTC"),
            "time zone ` UTC` is not a known IANA zone (such as `UTC` or `Europe/Berlin`)".into(),
        ),
        (
            &long,
            None,
            format!(
                "cron `{}…`: the expression is {} bytes long, more than {MAX_EXPR_LEN}",
                &long[..80],
                long.len()
            ),
        ),
    ];
    for (expr, tz, want) in table {
        let err = CronSchedule::parse(expr, tz).unwrap_err();
        assert_eq!(err.to_string(), want, "`{expr}` in {tz:?}");
    }
    // Other croner rejections keep croner's reason, after the field.
    for (expr, field) in [
        ("a b c d e", "minute field `a`"),
        ("5/5 * * * *", "minute field `5/5`"),
        ("0 0 * * 8", "day-of-week field `8`"),
        ("0 0 * * MON#6", "day-of-week field `MON#6`"),
        ("0 0 32 * *", "day-of-month field `32`"),
    ] {
        let err = CronSchedule::parse(expr, None).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("cron `{expr}`: {field}: ")),
            "{err}"
        );
    }
    assert!(matches!(
        CronSchedule::parse("x", None),
        Err(ScheduleError::Cron { .. })
    ));
}

#[test]
fn validate_timezone_table() {
    for tz in [
        "UTC",
        "Europe/Berlin",
        "America/New_York",
        "Asia/Shanghai",
        "Etc/GMT+5",
    ] {
        assert_eq!(validate_timezone(tz), Ok(()), "{tz}");
    }
    for tz in [
        "",
        "utc",
        "Europe/Pariss",
        "Berlin",
        "+02:00",
        "Europe/Berlin ",
    ] {
        assert_eq!(
            validate_timezone(tz),
            Err(ScheduleError::TimeZone { tz: tz.to_owned() }),
            "{tz}"
        );
    }
}

/// A daily quota's day: the date in the zone and the next midnight there (UTC by default;
/// a zone ahead of UTC is already on the next day; a spring-forward day is 23 h long).
#[test]
fn day_at_gives_the_local_date_and_the_next_midnight() {
    // 2026-11-28 23:30 UTC.
    let now = 1_795_908_600_000;
    let (day, reset) = silk_schedule::day_at(now, None).expect("utc");
    assert_eq!(day, "2026-11-28");
    assert_eq!(reset, 1_795_910_400_000); // 2026-11-29 00:00 UTC
    let (day, reset) = silk_schedule::day_at(now, Some("Europe/Paris")).expect("paris");
    assert_eq!(day, "2026-11-29");
    assert_eq!(reset, 1_795_993_200_000); // 2026-11-30 00:00 CET = 2026-11-29 23:00 UTC
    // 2026-03-29 is 23 h long in Paris: from 00:00 CET (23:00 UTC the day before).
    let (day, reset) = silk_schedule::day_at(1_774_738_800_000, Some("Europe/Paris")).expect("dst");
    assert_eq!(day, "2026-03-29");
    assert_eq!(reset - 1_774_738_800_000, 23 * 3_600_000);
    let err = silk_schedule::day_at(now, Some("Mars/Olympus")).expect_err("bad zone");
    assert!(err.to_string().contains("Mars/Olympus"), "{err}");
}
