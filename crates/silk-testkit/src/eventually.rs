//! [`eventually`]: the one polling helper of the tests, for what no event announces (another
//! process's HTTP answers, a browser's page). Where the code under test has an event (a
//! `watch`, a `Notify`, a method such as `wait_for_live_agents`), tests await that instead.

use std::time::Duration;
use tokio::time::Instant;

/// How often [`eventually`] probes unless told otherwise.
pub const POLL_EVERY: Duration = Duration::from_millis(50);

/// Calls `probe` every `every` until it gives a value, for at most `within` (the first call is
/// at once). `None` when the time ran out: the caller fails with what it was waiting for and
/// whatever context it has (logs, the last answer, a screenshot).
pub async fn eventually<T>(
    within: Duration,
    every: Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = probe().await {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(every).await;
    }
}

/// [`eventually`] for synchronous tests and threads (a child process's exit, a CLI's answer):
/// the same contract, sleeping the thread between probes.
pub fn eventually_blocking<T>(
    within: Duration,
    every: Duration,
    mut probe: impl FnMut() -> Option<T>,
) -> Option<T> {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(v) = probe() {
            return Some(v);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(every);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn gives_the_first_value_or_none_at_the_deadline() {
        let mut calls = 0;
        let got = eventually(Duration::from_secs(1), POLL_EVERY, async || {
            calls += 1;
            (calls == 3).then_some(calls)
        })
        .await;
        assert_eq!(got, Some(3));

        let start = Instant::now();
        let never: Option<()> = eventually(
            Duration::from_secs(2),
            Duration::from_millis(500),
            async || None,
        )
        .await;
        assert_eq!(never, None);
        // Paused time: the deadline is exact, four sleeps of 500 ms.
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }

    #[test]
    fn blocking_gives_the_first_value_or_none() {
        let mut calls = 0;
        let got = eventually_blocking(Duration::from_secs(10), Duration::ZERO, || {
            calls += 1;
            (calls == 3).then_some(calls)
        });
        assert_eq!(got, Some(3));
        let never: Option<()> = eventually_blocking(Duration::ZERO, Duration::ZERO, || None);
        assert_eq!(never, None);
    }
}
