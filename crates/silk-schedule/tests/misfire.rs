//! Misfires: missed slots coalesce into one fire, no slot fires twice, and the grace.

use chrono::DateTime;
use silk_schedule::{CronSchedule, Due, Fire, MISSED_COUNT_CAP, due, due_with_grace};

fn at(rfc3339: &str) -> u64 {
    let t = DateTime::parse_from_rfc3339(rfc3339).expect(rfc3339);
    u64::try_from(t.timestamp_millis()).unwrap()
}

fn fire(scheduled: &str, missed: u32) -> Option<Fire> {
    Some(Fire {
        scheduled_ms: at(scheduled),
        missed,
    })
}

const MIN: u64 = 60_000;

#[test]
fn hub_down_three_hours_runs_an_hourly_job_once() {
    let hourly = CronSchedule::parse("0 * * * *", None).unwrap();
    let d = due(
        &hourly,
        Some(at("2025-06-01T10:00:00Z")),
        at("2025-01-01T00:00:00Z"),
        at("2025-06-01T13:00:30Z"),
    );
    assert_eq!(
        d,
        Due {
            fire: fire("2025-06-01T13:00:00Z", 2),
            expired: None,
            next_fire_ms: Some(at("2025-06-01T14:00:00Z")),
        }
    );
    assert_eq!(d.last_slot_ms(), Some(at("2025-06-01T13:00:00Z")));
}

#[test]
fn due_table() {
    let hourly = CronSchedule::parse("0 * * * *", None).unwrap();
    // last fire, created, now, grace, fire, expired, next
    type Row<'a> = (
        Option<&'a str>,
        &'a str,
        &'a str,
        Option<u64>,
        Option<Fire>,
        Option<Fire>,
        &'a str,
    );
    let table: &[Row] = &[
        // Created after the 10:00 slot: no fire until 11:00.
        (
            None,
            "2025-06-01T10:20:00Z",
            "2025-06-01T10:40:00Z",
            None,
            None,
            None,
            "2025-06-01T11:00:00Z",
        ),
        // Created exactly at a slot: that slot is not its own.
        (
            None,
            "2025-06-01T10:00:00Z",
            "2025-06-01T10:00:00Z",
            None,
            None,
            None,
            "2025-06-01T11:00:00Z",
        ),
        // Its first slot comes: it fires, on the dot.
        (
            None,
            "2025-06-01T10:20:00Z",
            "2025-06-01T11:00:00Z",
            None,
            fire("2025-06-01T11:00:00Z", 0),
            None,
            "2025-06-01T12:00:00Z",
        ),
        // Same slot again after it fired: nothing.
        (
            Some("2025-06-01T11:00:00Z"),
            "2025-06-01T10:20:00Z",
            "2025-06-01T11:00:00Z",
            None,
            None,
            None,
            "2025-06-01T12:00:00Z",
        ),
        (
            Some("2025-06-01T11:00:00Z"),
            "2025-06-01T10:20:00Z",
            "2025-06-01T11:59:59.999Z",
            None,
            None,
            None,
            "2025-06-01T12:00:00Z",
        ),
        // A clock that went back behind the last fire: nothing, and the next slot is after the
        // last fire, not the 12:00 already fired.
        (
            Some("2025-06-01T12:00:00Z"),
            "2025-06-01T10:20:00Z",
            "2025-06-01T11:30:00Z",
            None,
            None,
            None,
            "2025-06-01T13:00:00Z",
        ),
        // Grace: the latest slot within it runs (coalescing the older ones) ...
        (
            Some("2025-06-01T10:00:00Z"),
            "2025-06-01T00:00:00Z",
            "2025-06-01T13:05:00Z",
            Some(10 * MIN),
            fire("2025-06-01T13:00:00Z", 2),
            None,
            "2025-06-01T14:00:00Z",
        ),
        (
            Some("2025-06-01T10:00:00Z"),
            "2025-06-01T00:00:00Z",
            "2025-06-01T13:10:00Z",
            Some(10 * MIN),
            fire("2025-06-01T13:00:00Z", 2),
            None,
            "2025-06-01T14:00:00Z",
        ),
        // ... and past it nothing runs; the slots are reported expired.
        (
            Some("2025-06-01T10:00:00Z"),
            "2025-06-01T00:00:00Z",
            "2025-06-01T13:10:00.001Z",
            Some(10 * MIN),
            None,
            fire("2025-06-01T13:00:00Z", 2),
            "2025-06-01T14:00:00Z",
        ),
        (
            Some("2025-06-01T12:00:00Z"),
            "2025-06-01T00:00:00Z",
            "2025-06-01T13:00:00Z",
            Some(0),
            fire("2025-06-01T13:00:00Z", 0),
            None,
            "2025-06-01T14:00:00Z",
        ),
        (
            Some("2025-06-01T12:00:00Z"),
            "2025-06-01T00:00:00Z",
            "2025-06-01T13:00:00.001Z",
            Some(0),
            None,
            fire("2025-06-01T13:00:00Z", 0),
            "2025-06-01T14:00:00Z",
        ),
    ];
    for (i, (last, created_at, now, grace, want_fire, want_expired, next)) in
        table.iter().enumerate()
    {
        let d = due_with_grace(&hourly, last.map(at), at(created_at), at(now), *grace);
        let want = Due {
            fire: *want_fire,
            expired: *want_expired,
            next_fire_ms: Some(at(next)),
        };
        assert_eq!(
            d, want,
            "row {i}: last {last:?} created {created_at} now {now}"
        );
        if grace.is_none() {
            assert_eq!(d, due(&hourly, last.map(at), at(created_at), at(now)));
        }
    }
}

#[test]
fn downtime_across_spring_forward_in_a_zone() {
    let daily = CronSchedule::parse("30 2 * * *", Some("Europe/Berlin")).unwrap();
    let d = due(
        &daily,
        Some(at("2025-03-28T02:30:00+01:00")),
        0,
        at("2025-03-31T12:00:00+02:00"),
    );
    // Slots: 29th 02:30 CET, 30th 03:00 CEST (moved out of the gap), 31st 02:30 CEST.
    assert_eq!(d.fire, fire("2025-03-31T02:30:00+02:00", 2));
    assert_eq!(d.next_fire_ms, Some(at("2025-04-01T02:30:00+02:00")));
}

#[test]
fn no_slot_fires_twice_when_polled_repeatedly() {
    // A hub polling every 7 minutes for two days, recording each fire; with a hiccup where it
    // polls far less often.
    let s = CronSchedule::parse("*/15 * * * *", Some("America/New_York")).unwrap();
    let created = at("2025-11-01T12:03:00Z");
    let mut last: Option<u64> = None;
    let mut fired = Vec::new();
    let mut missed_total = 0u64;
    let mut now = created;
    let end = created + 2 * 24 * 60 * MIN;
    while now <= end {
        let d = due(&s, last, created, now);
        if let Some(f) = d.fire {
            assert!(f.scheduled_ms <= now);
            assert!(last.is_none_or(|l| f.scheduled_ms > l));
            fired.push(f.scheduled_ms);
            missed_total += u64::from(f.missed);
            // Calling again with the fire recorded yields nothing more.
            let again = due(&s, Some(f.scheduled_ms), created, now);
            assert_eq!(again.fire, None);
            assert_eq!(again.next_fire_ms, d.next_fire_ms);
        }
        if let Some(slot) = d.last_slot_ms() {
            last = Some(slot);
        }
        let next = d.next_fire_ms.unwrap();
        assert!(next > now);
        // Poll every 7 minutes, but sleep 95 minutes once around the fall-back.
        now += if (at("2025-11-02T05:00:00Z")..at("2025-11-02T05:07:00Z")).contains(&now) {
            95 * MIN
        } else {
            7 * MIN
        };
    }
    // Every slot between the first and the last fire was either fired or counted as missed,
    // once: the slots are every 15 real minutes (the repeated hour included).
    let first = *fired.first().unwrap();
    let last_fired = *fired.last().unwrap();
    assert_eq!(first, at("2025-11-01T12:15:00Z"));
    let slots = (last_fired - first) / (15 * MIN) + 1;
    assert_eq!(fired.len() as u64 + missed_total, slots);
    assert!(missed_total >= 5, "the 95-minute sleep missed slots");
    let mut sorted = fired.clone();
    sorted.dedup();
    assert_eq!(sorted, fired, "strictly increasing, no duplicates");
}

#[test]
fn years_down_is_bounded_and_exact() {
    // Every 7 minutes past the hour (0, 7, …, 56), down for 30 years.
    let s = CronSchedule::parse("*/7 * * * *", None).unwrap();
    let d = due(
        &s,
        None,
        at("1995-01-01T00:00:00Z"),
        at("2025-06-01T12:34:56.789Z"),
    );
    assert_eq!(d.fire, fire("2025-06-01T12:28:00Z", MISSED_COUNT_CAP));
    assert_eq!(d.next_fire_ms, Some(at("2025-06-01T12:35:00Z")));

    let every_second = CronSchedule::parse("* * * * * *", None).unwrap();
    let d = due(&every_second, None, 0, 1_700_000_000_500);
    assert_eq!(
        d.fire,
        Some(Fire {
            scheduled_ms: 1_700_000_000_000,
            missed: MISSED_COUNT_CAP
        })
    );
    assert_eq!(d.next_fire_ms, Some(1_700_000_001_000));

    // Around the cap: CAP + 1 slots count exactly, CAP + 2 saturate.
    let cap = u64::from(MISSED_COUNT_CAP);
    let d = due(&every_second, None, 0, (cap + 1) * 1000);
    assert_eq!(
        d.fire,
        Some(Fire {
            scheduled_ms: (cap + 1) * 1000,
            missed: MISSED_COUNT_CAP
        })
    );
    let d = due(&every_second, None, 0, (cap + 2) * 1000 + 999);
    assert_eq!(
        d.fire,
        Some(Fire {
            scheduled_ms: (cap + 2) * 1000,
            missed: MISSED_COUNT_CAP
        })
    );
    let d = due(&every_second, None, 0, cap * 1000);
    assert_eq!(
        d.fire,
        Some(Fire {
            scheduled_ms: cap * 1000,
            missed: MISSED_COUNT_CAP - 1
        })
    );
}

#[test]
fn the_end_of_time_does_not_panic() {
    let s = CronSchedule::parse("0 0 1 1 *", None).unwrap();
    let d = due(&s, None, 0, u64::MAX);
    // Croner searches up to the year 5000: the last slot is 5000-01-01 and there is no next.
    assert_eq!(
        d.fire.map(|f| f.scheduled_ms),
        Some(at("5000-01-01T00:00:00Z"))
    );
    assert_eq!(d.fire.map(|f| f.missed), Some(5000 - 1971)); // 1971..=5000 (1970-01-01 is not after 0)
    assert_eq!(d.next_fire_ms, None);
    assert_eq!(s.next_after(u64::MAX), None);
    let d = due(&s, Some(u64::MAX), u64::MAX, u64::MAX);
    assert_eq!(
        d,
        Due {
            fire: None,
            expired: None,
            next_fire_ms: None
        }
    );
}
