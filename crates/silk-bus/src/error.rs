//! The one error type of `silk-bus`. Each variant says whether trying again can help
//! ([`BusError::is_retryable`]): the retry loops inside the buses and the callers above them
//! (the hub fails a run, an agent backs off and tries forever) decide from that alone.
//! Messages are lower-case and name the subject (or name) and what was wrong.

use thiserror::Error;

/// Everything that can go wrong on the bus.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BusError {
    /// **Retryable.** One attempt failed because the bus could not be reached or did not
    /// answer in time (not connected, timeout, no JetStream, the in-process bus switched off).
    #[error("bus unavailable: {operation} `{subject}`: {reason}")]
    Unavailable {
        /// `publish`, `subscribe`, `ack`, …
        operation: &'static str,
        /// The subject (or durable name) the operation was about.
        subject: String,
        /// What the bus or the client said.
        reason: String,
    },
    /// **Retryable (later).** The bus already retried `attempts` times with back-off and
    /// every attempt failed; `last` is the last failure. The hub fails the run with this
    /// reason; an agent's heartbeat loop waits and calls again.
    #[error("{operation} `{subject}` failed after {attempts} attempts: {last}")]
    Exhausted {
        /// `publish` or `subscribe`.
        operation: &'static str,
        /// The subject the operation was about.
        subject: String,
        /// How many attempts were made (retries + 1).
        attempts: u32,
        /// The failure of the last attempt.
        last: Box<BusError>,
    },
    /// **Permanent.** A payload that is not a valid envelope or whose body does not match its
    /// kind. The reader skips it (a durable one is terminated, never redelivered).
    #[error("subject `{subject}`: malformed message: {reason}")]
    Malformed {
        /// The subject the message was read from.
        subject: String,
        /// What was wrong, with serde's position where it has one.
        reason: String,
    },
    /// **Permanent.** An envelope of a wire version this build does not read.
    #[error(
        "subject `{subject}`: unsupported message version {version} (this build reads version {supported})"
    )]
    UnsupportedVersion {
        /// The subject the message was read from.
        subject: String,
        /// The version found in the message.
        version: u16,
        /// The version this build reads.
        supported: u16,
    },
    /// **Permanent.** A name that cannot be used: an agent or run id that would inject
    /// subject tokens, a bad namespace or durable name, an unknown subject.
    #[error("invalid {what} `{value}`: {reason}")]
    InvalidName {
        /// `agent id`, `run id`, `namespace`, `durable name`, `subject`.
        what: &'static str,
        /// The offending value.
        value: String,
        /// Why it is refused.
        reason: String,
    },
    /// **Permanent.** A message published on a subject that does not carry its kind
    /// (a heartbeat on the results subject, a wildcard as a publish target, …).
    #[error("subject `{subject}` does not carry `{kind}` messages")]
    WrongSubject {
        /// The subject published to.
        subject: String,
        /// The kind of the message (or `wildcard` for a wildcard publish).
        kind: String,
    },
    /// **Permanent.** A durable subscription, or a replay of old messages, asked on a subject
    /// that is not persisted (heartbeats and allocation replies travel as plain messages, see
    /// `subject`).
    #[error(
        "subject `{subject}` is not persisted: durable subscriptions and replay are not available on it"
    )]
    NotPersisted {
        /// The subject asked for.
        subject: String,
    },
    /// **Permanent.** A durable name already bound to another subject filter.
    #[error("durable `{name}` already exists for subject `{existing}`, not `{requested}`")]
    DurableMismatch {
        /// The durable name.
        name: String,
        /// The filter it was created with.
        existing: String,
        /// The filter asked for now.
        requested: String,
    },
    /// **Permanent.** A message larger than the bus accepts.
    #[error(
        "subject `{subject}`: message of {size_bytes} bytes is over the limit of {max_bytes} bytes"
    )]
    TooLarge {
        /// The subject published to.
        subject: String,
        /// Encoded size.
        size_bytes: usize,
        /// The bus's limit.
        max_bytes: usize,
    },
    /// **Permanent.** A message that cannot be encoded (should not happen with the typed
    /// messages; kept so that it is an error, not a panic).
    #[error("encoding a `{kind}` message: {reason}")]
    Encode {
        /// The kind of the message.
        kind: String,
        /// What serde said.
        reason: String,
    },
    /// **Permanent.** The bus (or the subscription) was closed.
    #[error("bus closed")]
    Closed,
    /// **Permanent.** The bus refused an operation for a reason that trying again will not
    /// change (a stream configuration conflict, a permission error, …).
    #[error("bus refused {operation} `{subject}`: {reason}")]
    Refused {
        /// `publish`, `subscribe`, `create stream`, …
        operation: &'static str,
        /// The subject (or stream) the operation was about.
        subject: String,
        /// What the bus said.
        reason: String,
    },
}

impl BusError {
    /// Whether the same call may succeed later. `Exhausted` is retryable: the bus gave up
    /// after its own retries, but the cause (an unreachable server) is transient.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            BusError::Unavailable { .. } | BusError::Exhausted { .. }
        )
    }

    /// Shorthand for a retryable failure of one attempt.
    pub fn unavailable(
        operation: &'static str,
        subject: impl Into<String>,
        reason: impl ToString,
    ) -> Self {
        BusError::Unavailable {
            operation,
            subject: subject.into(),
            reason: reason.to_string(),
        }
    }

    /// Shorthand for a malformed message.
    pub fn malformed(subject: impl Into<String>, reason: impl Into<String>) -> Self {
        BusError::Malformed {
            subject: subject.into(),
            reason: reason.into(),
        }
    }
}
