//! What a task's visit to the router comes to: its [`Decision`], the [`Reason`] for it (every
//! decision is counted by reason), and the [`Outcome`] that [`Router::submit`](crate::Router::submit)
//! and an inbound's [`InboundContext`](crate::InboundContext) answer. Plain data: no I/O.

use serde::Serialize;

/// How a task's visit to the router ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The inbound's selectors did not accept it.
    Rejected,
    /// Pushed (or, in a dry run, would be pushed) to an outbound.
    Routed,
    /// A returning task with a terminal code.
    Succeeded,
    /// Ended as failed and recorded in the failure record.
    Failed,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Rejected => "rejected",
            Decision::Routed => "routed",
            Decision::Succeeded => "succeeded",
            Decision::Failed => "failed",
        }
    }
}

/// Why; every decision is counted by reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// No selector of the inbound matched.
    NotAccepted,
    /// The inbound named does not exist or is disabled (dry runs only).
    UnknownInbound,
    /// A new task matched an outbound's selector.
    Matched,
    /// A returning task is retried on its outbound.
    Retry,
    /// Retries are exhausted and the outbound has a failback.
    Failback,
    /// The code is in `direct_failback_status`.
    DirectFailback,
    /// The code is in `dont_retry_status`: routed again by the rules.
    DontRetry,
    /// A returning task of an outbound that is gone or disabled, routed by the rules.
    OutboundGone,
    /// The code is a terminal code.
    TerminalCode,
    /// No outbound's selector matched.
    NoRoute,
    /// Retries exhausted and no failback.
    RetriesExhausted,
    /// `routing.limits` reached.
    Limits,
    /// The outbound's target refused the task for good ([`crate::RouterError::Refused`]).
    Refused,
    /// Not a JSON object (or not JSON).
    BadTask,
    /// A step of the inbound's convert chain failed on the task (a Python convert raised).
    ConvertFailed,
}

/// Every reason, for metrics.
pub const REASONS: [Reason; 15] = [
    Reason::NotAccepted,
    Reason::UnknownInbound,
    Reason::Matched,
    Reason::Retry,
    Reason::Failback,
    Reason::DirectFailback,
    Reason::DontRetry,
    Reason::OutboundGone,
    Reason::TerminalCode,
    Reason::NoRoute,
    Reason::RetriesExhausted,
    Reason::Limits,
    Reason::Refused,
    Reason::BadTask,
    Reason::ConvertFailed,
];

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NotAccepted => "not_accepted",
            Reason::UnknownInbound => "unknown_inbound",
            Reason::Matched => "matched",
            Reason::Retry => "retry",
            Reason::Failback => "failback",
            Reason::DirectFailback => "direct_failback",
            Reason::DontRetry => "dont_retry",
            Reason::OutboundGone => "outbound_gone",
            Reason::TerminalCode => "terminal_code",
            Reason::NoRoute => "no_route",
            Reason::RetriesExhausted => "retries_exhausted",
            Reason::Limits => "limits",
            Reason::Refused => "refused",
            Reason::BadTask => "bad_task",
            Reason::ConvertFailed => "convert_failed",
        }
    }

    /// The decision this reason belongs to.
    pub fn decision(self) -> Decision {
        match self {
            Reason::NotAccepted | Reason::UnknownInbound => Decision::Rejected,
            Reason::Matched
            | Reason::Retry
            | Reason::Failback
            | Reason::DirectFailback
            | Reason::DontRetry
            | Reason::OutboundGone => Decision::Routed,
            Reason::TerminalCode => Decision::Succeeded,
            Reason::NoRoute
            | Reason::RetriesExhausted
            | Reason::Limits
            | Reason::Refused
            | Reason::BadTask
            | Reason::ConvertFailed => Decision::Failed,
        }
    }

    pub(crate) fn index(self) -> usize {
        REASONS.iter().position(|r| *r == self).unwrap_or(0)
    }
}

/// What happened to a submitted task.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Outcome {
    pub decision: Decision,
    pub reason: Reason,
    /// The outbound it went to (routed), or came back from (succeeded/failed).
    pub outbound: Option<String>,
    /// The task's `task_uuid` when it was pushed.
    pub task_uuid: Option<String>,
    /// Why, for people.
    pub why: String,
}

impl Outcome {
    /// The outcome of `reason` (its decision follows from it).
    pub fn new(
        reason: Reason,
        outbound: Option<String>,
        task_uuid: Option<String>,
        why: impl Into<String>,
    ) -> Outcome {
        Outcome {
            decision: reason.decision(),
            reason,
            outbound,
            task_uuid,
            why: why.into(),
        }
    }
}
