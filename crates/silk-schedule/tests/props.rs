//! Properties: nothing panics on any input, fires are strictly increasing, and `due`'s
//! answers are consistent with `next_after`.

use proptest::prelude::*;
use silk_schedule::{CronSchedule, MISSED_COUNT_CAP, RetryPolicy, due_with_grace, timed_out};

const ZONES: &[&str] = &[
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Asia/Shanghai",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
    "Pacific/Chatham",
    "America/St_Johns",
    "Europe/Pariss",
    "",
];

/// Pieces of cron fields, valid and not.
const TOKENS: &[&str] = &[
    "*",
    "*/5",
    "*/7",
    "0",
    "1",
    "5",
    "15",
    "30",
    "59",
    "60",
    "23",
    "24",
    "31",
    "32",
    "12",
    "13",
    "1-5",
    "5-1",
    "10-20/3",
    "L",
    "W",
    "15W",
    "5#2",
    "5#L",
    "5L",
    "MON",
    "jan",
    "SUN-SAT",
    "+1",
    "+MON",
    "?",
    "-",
    "/",
    ",",
    "1,2,3",
    "#",
    "L#",
    "@daily",
    "@hourly",
    "0/5",
    "/5",
    "-1",
    "99999999999999999999",
    "é",
    "",
    "\t",
    "**",
    "*/",
    "1-",
    "2-L",
    "L-3",
    "#0",
    "7",
    "8",
    "0-7",
];

fn expr_strategy() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(TOKENS), 0..8).prop_map(|parts| parts.join(" "))
}

/// Expressions that parse, to test the fires of.
const VALID: &[&str] = &[
    "*/5 * * * *",
    "0 * * * *",
    "30 2 * * *",
    "0,30 1-3 * * *",
    "0 9 * * MON-FRI",
    "*/20 * * * * *",
    "0 0 L * *",
    "0 0 1 * +MON",
    "15 3 29 2 *",
    "@weekly",
    "0 0 * * 5#L",
    "0 0 15W * *",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parse_never_panics_on_arbitrary_strings(s in any::<String>(), tz in prop::sample::select(ZONES)) {
        let _ = CronSchedule::parse(&s, None);
        let _ = CronSchedule::parse(&s, Some(tz));
        let _ = CronSchedule::parse("* * * * *", Some(&s));
    }

    #[test]
    fn parse_never_panics_on_cron_like_strings(
        s in expr_strategy(),
        tz in prop::sample::select(ZONES),
        after in any::<u64>(),
    ) {
        if let Ok(schedule) = CronSchedule::parse(&s, Some(tz)) {
            if let Some(next) = schedule.next_after(after % 4_000_000_000_000) {
                prop_assert!(next > after % 4_000_000_000_000);
            }
            prop_assert_eq!(CronSchedule::parse(schedule.expr(), Some(schedule.timezone())), Ok(schedule));
        }
    }

    #[test]
    fn next_after_is_strictly_increasing(
        expr in prop::sample::select(VALID),
        tz in prop::sample::select(&ZONES[..8]),
        start in 0u64..4_102_444_800_000, // before 2100
    ) {
        let s = CronSchedule::parse(expr, Some(tz)).unwrap();
        let mut t = start;
        for _ in 0..40 {
            let next = s.next_after(t).unwrap();
            prop_assert!(next > t, "`{}` in {}: {} after {}", expr, tz, next, t);
            prop_assert_eq!(next % 1000, 0);
            // No fire between `t` and `next`: the first fire after any instant in between is
            // `next` itself.
            let mid = t + (next - t) / 2;
            prop_assert_eq!(s.next_after(mid), Some(next));
            t = next;
        }
    }

    #[test]
    fn due_is_consistent_with_next_after(
        expr in prop::sample::select(VALID),
        tz in prop::sample::select(&ZONES[..8]),
        anchor in 1_600_000_000_000u64..1_800_000_000_000,
        gap in prop_oneof![0u64..10_000_000, 0u64..100_000_000_000],
        never_fired in any::<bool>(),
        grace in proptest::option::of(0u64..10_000_000),
    ) {
        let s = CronSchedule::parse(expr, Some(tz)).unwrap();
        let now = anchor + gap;
        let last = (!never_fired).then_some(anchor);
        let d = due_with_grace(&s, last, anchor, now, grace);
        prop_assert!(d.fire.is_none() || d.expired.is_none());
        prop_assert_eq!(d.next_fire_ms, s.next_after(now));
        match d.fire.or(d.expired) {
            None => prop_assert!(s.next_after(anchor).is_none_or(|f| f > now)),
            Some(f) => {
                prop_assert!(f.scheduled_ms > anchor && f.scheduled_ms <= now);
                prop_assert!(s.next_after(f.scheduled_ms).is_none_or(|n| n > now), "the latest slot");
                prop_assert!(f.missed <= MISSED_COUNT_CAP);
                if f.missed == 0 {
                    prop_assert_eq!(s.next_after(anchor), Some(f.scheduled_ms));
                }
                let late = now - f.scheduled_ms;
                prop_assert_eq!(d.expired.is_some(), grace.is_some_and(|g| late > g));
                // Recording it leaves nothing due.
                let again = due_with_grace(&s, Some(f.scheduled_ms), anchor, now, grace);
                prop_assert_eq!(again.fire.or(again.expired), None);
            }
        }
    }

    #[test]
    fn due_never_panics(
        expr in prop::sample::select(VALID),
        last in proptest::option::of(any::<u64>()),
        created in any::<u64>(),
        now in any::<u64>(),
        grace in proptest::option::of(any::<u64>()),
    ) {
        let s = CronSchedule::parse(expr, None).unwrap();
        let _ = due_with_grace(&s, last, created, now, grace);
    }

    #[test]
    fn retry_and_timeout_never_panic(
        max_retries in any::<u32>(),
        delay_ms in any::<u64>(),
        backoff in any::<f64>(),
        max_delay_ms in proptest::option::of(any::<u64>()),
        attempt in any::<u32>(),
        at in any::<u64>(),
        started in proptest::option::of(any::<u64>()),
        timeout in proptest::option::of(any::<u64>()),
    ) {
        let p = RetryPolicy { max_retries, delay_ms, backoff, max_delay_ms };
        let _ = p.validate();
        if let Some(t) = p.retry_at(attempt, at) {
            prop_assert!(t >= at);
        }
        let _ = timed_out(started, timeout, at);
    }
}
