//! The one error type of `silk-frontier`, [`FrontierError`]. Each variant says whether the
//! caller may retry the call ([`FrontierError::is_retryable`]); storage errors name the
//! directory (or backend address) and the operation that failed.
//!
//! This module must not grow variants for conditions that are not errors: an unknown or late
//! ack, a duplicate request, a corrupt record skipped at read time are *reported* (in
//! [`crate::AckResult`], [`crate::EnqueueOutcome`], [`crate::FrontierStats::corrupt`]), never
//! returned as errors, because the hub meets them in normal operation.

use std::path::PathBuf;
use thiserror::Error;

/// A boxed error from a storage engine (fjall, Redis), kept opaque so that the
/// public API does not name a backend's types.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in the frontier.
#[derive(Debug, Error)]
pub enum FrontierError {
    /// The configuration has an invalid value. Permanent.
    #[error("invalid frontier config: {field}: {reason}")]
    InvalidConfig {
        /// The config key (e.g. `per_host_concurrency`).
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The embedded store's directory is used by another open frontier (another process or
    /// an instance not yet closed). Retryable: it goes away when the other one closes.
    #[error("frontier store at {dir}: locked by another open frontier")]
    Locked {
        /// The store directory.
        dir: PathBuf,
    },
    /// A storage engine failed an operation. `retryable` is false when the engine cannot
    /// accept writes any more (e.g. fjall poisons itself after a failed journal write: the
    /// process should restart and recover) and true for transient failures.
    #[error("frontier store at {location}: {op}: {source}")]
    Storage {
        /// Where the store is (a directory, or a backend URL without credentials).
        location: String,
        /// What the frontier was doing (`open`, `enqueue`, `ack`, `lease read`, …).
        op: &'static str,
        /// Whether the call may be retried as is.
        retryable: bool,
        /// The engine's error.
        #[source]
        source: BoxError,
    },
    /// Data on disk that cannot be used at open time (e.g. the store was written by a newer,
    /// incompatible format). Permanent. Corrupt *records* met during operation are skipped and
    /// counted instead (see [`crate::FrontierStats::corrupt`]).
    #[error("frontier store at {location}: incompatible data: {reason}")]
    Incompatible {
        /// Where the store is.
        location: String,
        /// What is wrong.
        reason: String,
    },
    /// The frontier was closed; no call succeeds any more. Permanent.
    #[error("frontier is closed")]
    Closed,
}

impl FrontierError {
    /// Whether the same call may succeed if retried later (possibly after a back-off).
    pub fn is_retryable(&self) -> bool {
        match self {
            FrontierError::Locked { .. } => true,
            FrontierError::Storage { retryable, .. } => *retryable,
            FrontierError::InvalidConfig { .. }
            | FrontierError::Incompatible { .. }
            | FrontierError::Closed => false,
        }
    }
}
