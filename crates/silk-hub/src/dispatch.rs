//! The decisions of a run's dispatch loop, pure: given what one turn of the loop knows (the
//! user's wish, the limits, what is out, the agents, the clock), whether the run ends, fails,
//! waits (and how long), idles (a fed run), or leases (and how many). The loop
//! (`runner::Run::dispatch`) gathers a [`Turn`], asks [`decide`], and does what it says;
//! after a lease that gave nothing it asks [`after_empty_lease`]. No I/O, no clock reads.

/// What a user wants of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Desired {
    Run,
    Pause,
    Cancel,
}

/// How the dispatch loop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum End {
    Succeeded,
    Failed(String),
    Cancelled,
    /// The hub is stopping: the run stays as it is and resumes at the next start.
    HubStopping,
    /// Another hub holds the run's lease now: it drives the run, this hub lets go without
    /// writing anything.
    Disowned(String),
}

/// What one turn of the dispatch loop knows.
#[derive(Debug, Clone)]
pub(crate) struct Turn {
    pub now_ms: u64,
    /// The hub is stopping.
    pub stopping: bool,
    /// Another hub took the run's lease (why).
    pub disowned: Option<String>,
    /// The run met a fatal error (why).
    pub fatal: Option<String>,
    pub desired: Desired,
    /// Pages fetched successfully (before a restart too).
    pub success: u64,
    /// Requests out at agents.
    pub out: usize,
    /// Results back from agents and being applied (off `out`, their success not counted
    /// yet): they count towards `max_pages` as if still out.
    pub applying: usize,
    /// At most this many out at once.
    pub max_pending: usize,
    /// The spider's page limit (none for a fed run).
    pub max_pages: Option<u64>,
    /// Items written (before a restart too).
    pub items: u64,
    /// The spider's item limit (none for a fed run).
    pub max_items: Option<u64>,
    /// When the spider's duration limit ends, ms (none for a fed run).
    pub deadline_ms: Option<u64>,
    /// How long without progress is a stall.
    pub stall_ms: u64,
    /// How long since the last progress.
    pub stalled_for_ms: u64,
    pub live_agents: usize,
    /// A fed run's idle time before it ends (`None`: not fed).
    pub fed_idle_ms: Option<u64>,
    /// A fed run with nothing out and nothing left in its frontier (only looked up when no
    /// agent is live and nothing is out).
    pub fed_drained: bool,
    /// Most requests its quota slice lets it lease besides those out (`None`: no limit).
    pub quota_room: Option<u64>,
    /// Why a quota holds the run (it waits, paused, for the quota to allow again).
    pub quota_blocked: Option<String>,
    /// Most requests out its fair share of the agents' slots allows (`None`: no limit).
    pub fair_cap: Option<u64>,
}

/// What the loop does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// The run ends so.
    End(End),
    /// The run fails with this reason.
    Fail(String),
    /// Wait up to `ms` (or the next result); with `progress`, the wait is not a stall.
    Wait { ms: u64, progress: bool },
    /// A fed run has nothing to do: wait for tasks, or end after this idle time.
    Idle(u64),
    /// Lease up to this many requests and send them.
    Lease(usize),
}

fn wait(ms: u64) -> Step {
    Step::Wait {
        ms,
        progress: false,
    }
}

/// How the reason of a run failed by its stall timeout begins (the alerts tell stalls apart
/// by it).
pub(crate) const STALLED: &str = "stalled: ";

/// The step of one turn, before any lease.
pub(crate) fn decide(t: &Turn) -> Step {
    if t.stopping {
        return Step::End(End::HubStopping);
    }
    if let Some(reason) = &t.disowned {
        return Step::End(End::Disowned(reason.clone()));
    }
    if let Some(reason) = &t.fatal {
        return Step::End(End::Failed(reason.clone()));
    }
    match t.desired {
        Desired::Cancel => return Step::End(End::Cancelled),
        // A paused run is not stalled.
        Desired::Pause => {
            return Step::Wait {
                ms: 500,
                progress: true,
            };
        }
        Desired::Run => {}
    }
    let limit_reached = t.max_pages.is_some_and(|m| t.success >= m)
        || t.max_items.is_some_and(|m| t.items >= m)
        || t.deadline_ms.is_some_and(|d| t.now_ms >= d);
    if limit_reached {
        // Done once what is out is back.
        return if t.out == 0 {
            Step::End(End::Succeeded)
        } else {
            wait(100)
        };
    }
    if t.quota_blocked.is_some() {
        // Paused by a quota: what is out comes back; waiting for the quota is not a stall.
        return Step::Wait {
            ms: 1_000,
            progress: true,
        };
    }
    if let Some(idle_ms) = t.fed_idle_ms
        && t.fed_drained
        && t.live_agents == 0
        && t.out == 0
    {
        // Nothing to fetch: no agent is needed, so this is idleness, not a stall.
        return Step::Idle(idle_ms);
    }
    if t.live_agents == 0 {
        if t.stalled_for_ms > t.stall_ms {
            return Step::Fail(format!(
                "{STALLED}no live agent for {} s (stall_timeout)",
                t.stall_ms / 1000
            ));
        }
        return wait(200);
    }
    if t.out > 0 && t.stalled_for_ms > t.stall_ms {
        return Step::Fail(format!(
            "{STALLED}{} requests out and no result for {} s (stall_timeout)",
            t.out,
            t.stall_ms / 1000
        ));
    }
    let max_out = match t.fair_cap {
        Some(cap) => t
            .max_pending
            .min(usize::try_from(cap).unwrap_or(usize::MAX)),
        None => t.max_pending,
    };
    if t.out >= max_out {
        return wait(100);
    }
    let mut room = max_out - t.out;
    if let Some(m) = t.max_pages {
        let counted = t
            .success
            .saturating_add(t.out as u64)
            .saturating_add(t.applying as u64);
        room = room.min(usize::try_from(m.saturating_sub(counted)).unwrap_or(usize::MAX));
    }
    if let Some(q) = t.quota_room {
        room = room.min(usize::try_from(q).unwrap_or(usize::MAX));
    }
    if room == 0 {
        // The last requests that count towards max_pages (or the quota slice) are out:
        // wait for them.
        return wait(200);
    }
    Step::Lease(room)
}

/// The step after a lease that gave nothing: `next_ready_ms` is the frontier's answer
/// (`None`: nothing pending or in flight).
pub(crate) fn after_empty_lease(
    now_ms: u64,
    out: usize,
    next_ready_ms: Option<u64>,
    fed_idle_ms: Option<u64>,
) -> Step {
    let until_ready = |at: u64| at.saturating_sub(now_ms).clamp(1, 200);
    if out > 0 {
        return wait(next_ready_ms.map_or(200, until_ready));
    }
    match (next_ready_ms, fed_idle_ms) {
        (None, None) => Step::End(End::Succeeded),
        (None, Some(idle_ms)) => Step::Idle(idle_ms),
        // Waiting for politeness or a back-off: not a stall.
        (Some(at), _) => Step::Wait {
            ms: until_ready(at),
            progress: true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A turn of a running, healthy run with room: 2 agents, 0 of 10 out, no limits.
    fn turn() -> Turn {
        Turn {
            now_ms: 10_000,
            stopping: false,
            disowned: None,
            fatal: None,
            desired: Desired::Run,
            success: 0,
            out: 0,
            applying: 0,
            max_pending: 10,
            max_pages: None,
            items: 0,
            max_items: None,
            deadline_ms: None,
            stall_ms: 30_000,
            stalled_for_ms: 0,
            live_agents: 2,
            fed_idle_ms: None,
            fed_drained: false,
            quota_room: None,
            quota_blocked: None,
            fair_cap: None,
        }
    }

    fn waits(ms: u64) -> Step {
        Step::Wait {
            ms,
            progress: false,
        }
    }

    #[test]
    fn decide_table() {
        let cases: Vec<(&str, Turn, Step)> = vec![
            ("room: lease it all", turn(), Step::Lease(10)),
            (
                "the hub stopping wins over everything",
                Turn {
                    stopping: true,
                    desired: Desired::Cancel,
                    fatal: Some("x".into()),
                    ..turn()
                },
                Step::End(End::HubStopping),
            ),
            (
                "disowned before fatal",
                Turn {
                    disowned: Some("hub b".into()),
                    fatal: Some("x".into()),
                    ..turn()
                },
                Step::End(End::Disowned("hub b".into())),
            ),
            (
                "fatal",
                Turn {
                    fatal: Some("frontier: gone".into()),
                    ..turn()
                },
                Step::End(End::Failed("frontier: gone".into())),
            ),
            (
                "cancel",
                Turn {
                    desired: Desired::Cancel,
                    ..turn()
                },
                Step::End(End::Cancelled),
            ),
            (
                "pause waits without stalling",
                Turn {
                    desired: Desired::Pause,
                    live_agents: 0,
                    stalled_for_ms: 99_999,
                    ..turn()
                },
                Step::Wait {
                    ms: 500,
                    progress: true,
                },
            ),
            (
                "max_pages reached, nothing out: succeeded",
                Turn {
                    max_pages: Some(5),
                    success: 5,
                    ..turn()
                },
                Step::End(End::Succeeded),
            ),
            (
                "max_pages reached, some out: wait for them",
                Turn {
                    max_pages: Some(5),
                    success: 5,
                    out: 2,
                    ..turn()
                },
                waits(100),
            ),
            (
                "max_items reached, nothing out: succeeded",
                Turn {
                    max_items: Some(3),
                    items: 3,
                    ..turn()
                },
                Step::End(End::Succeeded),
            ),
            (
                "max_items reached, some out: wait for them",
                Turn {
                    max_items: Some(3),
                    items: 4,
                    out: 1,
                    ..turn()
                },
                waits(100),
            ),
            (
                "deadline passed",
                Turn {
                    deadline_ms: Some(10_000),
                    ..turn()
                },
                Step::End(End::Succeeded),
            ),
            (
                "deadline ahead",
                Turn {
                    deadline_ms: Some(10_001),
                    ..turn()
                },
                Step::Lease(10),
            ),
            (
                "no agent, not yet stalled",
                Turn {
                    live_agents: 0,
                    stalled_for_ms: 30_000,
                    ..turn()
                },
                waits(200),
            ),
            (
                "no agent past the stall timeout",
                Turn {
                    live_agents: 0,
                    stalled_for_ms: 30_001,
                    ..turn()
                },
                Step::Fail("stalled: no live agent for 30 s (stall_timeout)".into()),
            ),
            (
                "a drained fed run without agents idles, however long",
                Turn {
                    live_agents: 0,
                    stalled_for_ms: 99_999,
                    fed_idle_ms: Some(5_000),
                    fed_drained: true,
                    ..turn()
                },
                Step::Idle(5_000),
            ),
            (
                "a fed run with work and no agent stalls",
                Turn {
                    live_agents: 0,
                    stalled_for_ms: 30_001,
                    fed_idle_ms: Some(5_000),
                    fed_drained: false,
                    ..turn()
                },
                Step::Fail("stalled: no live agent for 30 s (stall_timeout)".into()),
            ),
            (
                "requests out and no result past the stall timeout",
                Turn {
                    out: 3,
                    stalled_for_ms: 30_001,
                    ..turn()
                },
                Step::Fail("stalled: 3 requests out and no result for 30 s (stall_timeout)".into()),
            ),
            (
                "nothing out is not a stall with agents live",
                Turn {
                    stalled_for_ms: 99_999,
                    ..turn()
                },
                Step::Lease(10),
            ),
            (
                "max_pending out: back-pressure",
                Turn { out: 10, ..turn() },
                waits(100),
            ),
            (
                "room is what max_pending leaves",
                Turn { out: 7, ..turn() },
                Step::Lease(3),
            ),
            (
                "room is what max_pages leaves",
                Turn {
                    max_pages: Some(6),
                    success: 2,
                    out: 1,
                    ..turn()
                },
                Step::Lease(3),
            ),
            (
                "the last pages that count are out",
                Turn {
                    max_pages: Some(6),
                    success: 2,
                    out: 4,
                    ..turn()
                },
                waits(200),
            ),
            (
                "results being applied count towards max_pages",
                Turn {
                    max_pages: Some(6),
                    success: 2,
                    out: 1,
                    applying: 2,
                    ..turn()
                },
                Step::Lease(1),
            ),
        ];
        for (name, t, want) in cases {
            assert_eq!(decide(&t), want, "{name}: {t:?}");
        }
    }

    #[test]
    fn after_empty_lease_table() {
        let now = 1_000;
        let cases = [
            (
                "drained, not fed: done",
                0,
                None,
                None,
                Step::End(End::Succeeded),
            ),
            ("drained, fed: idle", 0, None, Some(7), Step::Idle(7)),
            (
                "politeness ahead: wait for it, not a stall",
                0,
                Some(1_050),
                None,
                Step::Wait {
                    ms: 50,
                    progress: true,
                },
            ),
            (
                "ready now: the shortest wait",
                0,
                Some(900),
                None,
                Step::Wait {
                    ms: 1,
                    progress: true,
                },
            ),
            (
                "far ahead: at most 200 ms",
                0,
                Some(60_000),
                Some(7),
                Step::Wait {
                    ms: 200,
                    progress: true,
                },
            ),
            ("requests out, nothing pending", 2, None, None, waits(200)),
            (
                "requests out, politeness ahead",
                2,
                Some(1_020),
                None,
                waits(20),
            ),
        ];
        for (name, out, next, fed, want) in cases {
            assert_eq!(after_empty_lease(now, out, next, fed), want, "{name}");
        }
    }
}
