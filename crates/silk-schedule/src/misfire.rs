//! Misfires: the slots that came due while nobody fired them coalesce into one fire.

use crate::cron::CronSchedule;

/// [`Fire::missed`] counts at most this many slots; past it the count stops (the value means
/// "this many or more") and the latest slot is found by bisection instead.
pub const MISSED_COUNT_CAP: u32 = 10_000;

/// One fire of a job, standing for every slot that came due since the last one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fire {
    /// The slot fired: the latest one at or before `now_ms` (UTC milliseconds). The hub records
    /// it as the job's `last_fire_ms`.
    pub scheduled_ms: u64,
    /// How many earlier slots were coalesced into this one (not run), saturating at
    /// [`MISSED_COUNT_CAP`].
    pub missed: u32,
}

/// What [`due`] decided for a job at `now_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// The fire to run now, if a slot came due.
    pub fire: Option<Fire>,
    /// Slots that came due but whose latest one is older than the misfire grace: they are not
    /// run ([`due_with_grace`] only; `fire` is then `None`).
    pub expired: Option<Fire>,
    /// The first slot strictly after `now_ms` (and after the last fire), when there is one: when
    /// to look again.
    pub next_fire_ms: Option<u64>,
}

impl Due {
    /// The slot the hub records as the job's `last_fire_ms` after acting on this decision (the
    /// fired or expired slot), or `None` when nothing came due and the record stays.
    pub fn last_slot_ms(&self) -> Option<u64> {
        self.fire.or(self.expired).map(|f| f.scheduled_ms)
    }
}

/// The slots of `schedule` strictly after `last_fire_ms` (or `created_ms` when the job never
/// fired) and at or before `now_ms`, coalesced into one [`Fire`] for the latest of them; and the
/// next slot after `now_ms`. With no misfire grace: however old, the latest slot runs.
///
/// A job created after a slot does not fire for it; a `last_fire_ms` (or `created_ms`) after
/// `now_ms` (a clock that went back) fires nothing until the clock passes it, and `next_fire_ms`
/// is then after it too, so a slot never fires twice.
pub fn due(
    schedule: &CronSchedule,
    last_fire_ms: Option<u64>,
    created_ms: u64,
    now_ms: u64,
) -> Due {
    due_with_grace(schedule, last_fire_ms, created_ms, now_ms, None)
}

/// [`due`] with a misfire grace: when the latest due slot is more than `grace_ms` before
/// `now_ms`, it and the slots it coalesces are reported in [`Due::expired`] instead of
/// [`Due::fire`] and nothing runs. `None` is no grace (always run); `Some(0)` runs a slot only
/// when evaluated exactly at it.
pub fn due_with_grace(
    schedule: &CronSchedule,
    last_fire_ms: Option<u64>,
    created_ms: u64,
    now_ms: u64,
    grace_ms: Option<u64>,
) -> Due {
    let anchor = last_fire_ms.unwrap_or(created_ms);
    let next_fire_ms = schedule.next_after(anchor.max(now_ms));
    let Some(fire) = coalesce(schedule, anchor, now_ms) else {
        return Due {
            fire: None,
            expired: None,
            next_fire_ms,
        };
    };
    let late = now_ms - fire.scheduled_ms;
    let (fire, expired) = match grace_ms {
        Some(grace) if late > grace => (None, Some(fire)),
        _ => (Some(fire), None),
    };
    Due {
        fire,
        expired,
        next_fire_ms,
    }
}

/// The latest slot in `(after_ms, now_ms]` and how many others lie there (capped).
fn coalesce(schedule: &CronSchedule, after_ms: u64, now_ms: u64) -> Option<Fire> {
    let mut latest = schedule.next_after(after_ms).filter(|&f| f <= now_ms)?;
    let mut missed = 0;
    loop {
        match schedule.next_after(latest) {
            Some(f) if f <= now_ms => {
                if missed == MISSED_COUNT_CAP {
                    // Too many to walk: find the latest slot by bisection.
                    latest = last_at_or_before(schedule, latest, now_ms);
                    break;
                }
                latest = f;
                missed += 1;
            }
            _ => break,
        }
    }
    Some(Fire {
        scheduled_ms: latest,
        missed,
    })
}

/// The latest slot at or before `now_ms`, given a slot `lo <= now_ms` that has a later one at
/// or before `now_ms`. Bisects on `next_after(t) <= now_ms`, which holds at `lo`, fails at
/// `now_ms` and is monotone in `t`: at most 64 steps.
fn last_at_or_before(schedule: &CronSchedule, mut lo: u64, now_ms: u64) -> u64 {
    let mut hi = now_ms;
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match schedule.next_after(mid) {
            Some(f) if f <= now_ms => lo = mid,
            _ => hi = mid,
        }
    }
    schedule
        .next_after(lo)
        .filter(|&f| f <= now_ms)
        .unwrap_or(lo)
}
