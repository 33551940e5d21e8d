//! The one error type of `silk-agent`. Messages are lower-case, name the run, file or
//! command they are about, and say what was wrong. Errors about one run (a bad downloader
//! configuration, a failing proxy provider) never stop the agent: they are logged and
//! reported in that run's results; only [`crate::Agent::start`] returns errors to its
//! caller.

use silk_bus::BusError;
use silk_core::RunId;
use std::path::PathBuf;
use thiserror::Error;

/// Everything that can go wrong in the agent runtime.
#[derive(Debug, Error)]
pub enum AgentError {
    /// The agent's own configuration is invalid; every problem is listed.
    #[error("agent config: {}", problems.join("; "))]
    InvalidAgentConfig {
        /// `key: reason` lines.
        problems: Vec<String>,
    },
    /// An agent id that cannot be used (it becomes one bus subject token).
    #[error("invalid agent id `{id}`: {reason}")]
    InvalidId {
        /// The id given or read from the data dir.
        id: String,
        /// Why it is refused.
        reason: String,
    },
    /// The `config` of an `allocate` command is not a valid downloader configuration;
    /// every problem is listed, each naming its key.
    #[error("run `{run}`: invalid downloader config: {}", problems.join("; "))]
    InvalidConfig {
        /// The run the allocation was for.
        run: RunId,
        /// `key: reason` lines.
        problems: Vec<String>,
    },
    /// A file or directory of the data dir could not be read or written.
    #[error("{what} `{}`: {source}", path.display())]
    Io {
        /// What the file is (`data dir`, `allocations file`, `agent id file`).
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// The allocations file exists but does not parse.
    #[error("allocations file `{}`: {reason}", path.display())]
    CorruptAllocations {
        /// Where.
        path: PathBuf,
        /// What serde said (with line and column).
        reason: String,
    },
    /// An external command of a run (proxy provider, redial) failed: it could not be
    /// started, timed out, exited with a failure, or printed nothing usable.
    #[error("run `{run}`: {what} command {command}: {reason}")]
    Command {
        /// The run whose command it is.
        run: RunId,
        /// `proxy provider` or `redial`.
        what: &'static str,
        /// The command as logs may show it: its name, or its program (never its arguments).
        command: String,
        /// What went wrong.
        reason: String,
    },
    /// The bus refused something permanently (an invalid subject or durable name).
    #[error("bus: {0}")]
    Bus(#[from] BusError),
}

impl AgentError {
    /// The short code of this error in a result's `error.code`.
    pub fn code(&self) -> &'static str {
        match self {
            AgentError::InvalidAgentConfig { .. } | AgentError::InvalidId { .. } => "agent_config",
            AgentError::InvalidConfig { .. } => "invalid_config",
            AgentError::Io { .. } | AgentError::CorruptAllocations { .. } => "agent_io",
            AgentError::Command { .. } => "downloader_unavailable",
            AgentError::Bus(_) => "bus",
        }
    }
}
