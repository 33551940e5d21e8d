//! The decisions of Silk's job scheduler, as pure functions: when a cron schedule fires in its
//! time zone, what to do about fires missed while the hub was down, what to do when a fire
//! finds the previous run still going, when to retry a failed run, and when a run has timed out.
//!
//! Nothing here does I/O, reads a clock or spawns a task: time comes in as `now_ms`, a `u64` of
//! milliseconds since the Unix epoch (UTC), and every answer is a value the hub acts on. Nothing
//! panics on any input; bad input is a [`ScheduleError`] that names the input.
//!
//! # Cron ([`CronSchedule`])
//!
//! An expression has 5 fields (`minute hour day-of-month month day-of-week`), or 6 with a
//! leading seconds field, or is one of the nicknames `@yearly`, `@annually`, `@monthly`,
//! `@weekly`, `@daily`, `@hourly`. Parsing and evaluation are [croner]'s (POSIX/Vixie cron,
//! with its extensions `L`, `W`, `#` and the `+` prefix that ANDs day-of-month with
//! day-of-week; names `JAN`…`DEC` and `SUN`…`SAT`; day-of-week `0` and `7` are Sunday). As in
//! Vixie cron, when both day fields are restricted a day matching *either* one fires. The
//! 7-field form with years is not accepted.
//!
//! The fields are read on the wall clock of the schedule's time zone (an IANA name, default
//! `UTC`; the zone database is compiled in from `chrono-tz`). Fires are whole seconds and
//! [`CronSchedule::next_after`] returns them in UTC milliseconds.
//!
//! ## Daylight saving time
//!
//! We follow croner, which follows the Open Cron Pattern Specification and Vixie cron. A job is
//! *fixed-time* when its second, minute and hour fields are each one plain value (`30 2 * * *`),
//! and *interval* otherwise (`*/5 * * * *`, `0 * * * *`, `@hourly`).
//!
//! - **Spring forward** (a local time that does not exist, e.g. 02:30 in `Europe/Berlin` on the
//!   last Sunday of March): a fixed-time job is *moved* to the first instant after the gap
//!   (03:00 local) on that same day, so a daily job still runs once that day; an interval job's
//!   fires inside the gap are *skipped* (they never existed on the wall clock).
//! - **Fall back** (a local time that occurs twice): a fixed-time job fires *once*, at the first
//!   occurrence; an interval job fires in both passes (an hourly job still runs every real
//!   hour: 01:00 summer time and then 01:00 winter time).
//!
//! Fires are strictly increasing in real time: `next_after(f)` is after `f`, also across the
//! repeated hour.
//!
//! # Misfires ([`due`])
//!
//! The hub keeps, per job, the slot it last fired (`last_fire_ms`) and when the job was created.
//! [`due`] looks at the slots strictly after `last_fire_ms` (or `created_ms` for a job that never
//! fired) and at or before `now_ms`, and *coalesces* them into one [`Fire`]: the latest slot is
//! the one run, and [`Fire::missed`] counts the others. A hub down for three hours with an hourly
//! job runs it once at start, with `missed = 2`. A job created after a slot does not fire for
//! that slot. The hub then records the fire's `scheduled_ms` as the new `last_fire_ms`, so a slot
//! never fires twice. The scan is bounded: counting stops at [`MISSED_COUNT_CAP`] and the latest
//! slot is then found by bisection, so a job down for years costs a bounded number of steps.
//!
//! [`due_with_grace`] adds a misfire grace (as Kubernetes' `startingDeadlineSeconds` or Quartz's
//! misfire threshold): when the latest due slot is older than the grace, nothing runs and the
//! slots are reported in [`Due::expired`] (the hub records them as fired all the same).
//!
//! # Overlap ([`Overlap`], [`on_fire`], [`on_run_end`])
//!
//! When a fire finds a run of the same job still active: `skip` (the default) drops the fire,
//! `queue` keeps at most one fire waiting and starts it when the active run ends (further fires
//! while one waits are coalesced into it), `replace` cancels the active run and starts anew.
//!
//! # Retries ([`RetryPolicy`]) and timeouts ([`timed_out`])
//!
//! A failed run is retried up to `max_retries` times, after `delay_ms` growing by `backoff` per
//! attempt (capped by `max_delay_ms`). A run times out once `timeout_ms` have passed since it
//! started.

mod cron;
mod error;
mod misfire;
mod overlap;
mod retry;
mod timeout;

pub use cron::{CronSchedule, MAX_EXPR_LEN, day_at, validate_timezone};
pub use error::ScheduleError;
pub use misfire::{Due, Fire, MISSED_COUNT_CAP, due, due_with_grace};
pub use overlap::{FireAction, Overlap, on_fire, on_run_end};
pub use retry::{MAX_BACKOFF, MAX_RETRIES_LIMIT, RetryPolicy};
pub use timeout::{deadline_ms, timed_out};
