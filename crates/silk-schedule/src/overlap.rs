//! Overlap: what a fire does when a run of the same job is still active.

use serde::{Deserialize, Serialize};

/// The overlap policy of a job (serde: `"skip"`, `"queue"`, `"replace"`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Overlap {
    /// Drop the fire while a run is active (the default).
    #[default]
    Skip,
    /// Keep the fire waiting (at most one per job; later fires while one waits are coalesced
    /// into it) and start it when the active run ends.
    Queue,
    /// Cancel the active run(s) and start a new one.
    Replace,
}

/// What the hub does with a fire (see [`on_fire`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FireAction {
    /// Start a run now (no run is active). Any queued fire is superseded by it: the hub sets
    /// the job's queue to 0.
    Start,
    /// Drop the fire.
    Skip,
    /// Keep the fire waiting: the hub sets the job's queue to 1 and starts it when the active
    /// run ends ([`on_run_end`]).
    Queue,
    /// Cancel the active run(s), then start a run.
    ReplaceThenStart,
}

/// What a fire does under `policy` when `active_runs` runs of the job are active and `queued`
/// fires wait. With no active run every policy starts; otherwise `skip` skips, `queue` queues
/// the first waiting fire and skips (coalesces) the rest, and `replace` replaces.
pub fn on_fire(policy: Overlap, active_runs: usize, queued: u32) -> FireAction {
    if active_runs == 0 {
        return FireAction::Start;
    }
    match policy {
        Overlap::Skip => FireAction::Skip,
        Overlap::Queue if queued == 0 => FireAction::Queue,
        Overlap::Queue => FireAction::Skip,
        Overlap::Replace => FireAction::ReplaceThenStart,
    }
}

/// Whether the end of a run starts a queued fire (one is waiting). The hub then decrements
/// its queue.
pub fn on_run_end(queued: u32) -> bool {
    queued > 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use FireAction::*;
    use Overlap::{Queue as Q, Replace as R, Skip as S};

    #[test]
    fn on_fire_table() {
        let table: &[(Overlap, usize, u32, FireAction)] = &[
            // No active run: every policy starts, a stale queue is superseded.
            (S, 0, 0, Start),
            (Q, 0, 0, Start),
            (R, 0, 0, Start),
            (Q, 0, 1, Start),
            (S, 0, 3, Start),
            // A run is active.
            (S, 1, 0, Skip),
            (S, 1, 1, Skip),
            (Q, 1, 0, Queue),
            (Q, 1, 1, Skip),
            (Q, 1, u32::MAX, Skip),
            (R, 1, 0, ReplaceThenStart),
            (R, 1, 1, ReplaceThenStart),
            // Several active runs (after a replace that has not finished cancelling).
            (S, 2, 0, Skip),
            (Q, 2, 0, Queue),
            (Q, usize::MAX, 1, Skip),
            (R, usize::MAX, 0, ReplaceThenStart),
        ];
        for &(policy, active, queued, want) in table {
            assert_eq!(
                on_fire(policy, active, queued),
                want,
                "{policy:?} active={active} queued={queued}"
            );
        }
    }

    #[test]
    fn on_run_end_starts_a_queued_fire() {
        assert!(!on_run_end(0));
        assert!(on_run_end(1));
        assert!(on_run_end(u32::MAX));
    }

    #[test]
    fn serde_is_lowercase_and_default_is_skip() {
        assert_eq!(Overlap::default(), S);
        for (p, s) in [(S, "\"skip\""), (Q, "\"queue\""), (R, "\"replace\"")] {
            assert_eq!(serde_json::to_string(&p).unwrap(), s);
            assert_eq!(serde_json::from_str::<Overlap>(s).unwrap(), p);
        }
        assert!(serde_json::from_str::<Overlap>("\"Skip\"").is_err());
    }
}
