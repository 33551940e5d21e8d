//! The one error enum of `silk-router` ([`RouterError`]) and the positioned config error
//! ([`ConfigError`]) that config loading returns all at once.
//!
//! Messages are lower-case, have no trailing period, and name the input and where it is:
//! ``config.d/a.yaml:12:9: outbound `captcha`: selector 2: column 17: expected `]` ``.
//! Nothing here may format a secret: URLs are shown through [`crate::redact`] by callers.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One problem found while loading a config: file, 1-based line and column (0 when the
/// problem is about the whole file), the rule it belongs to (`outbound `captcha``) and
/// what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file the problem is in.
    pub file: Arc<Path>,
    /// 1-based line, 0 for the whole file.
    pub line: usize,
    /// 1-based column, 0 when unknown.
    pub column: usize,
    /// `inbound `name`` or `outbound `name`` when the problem is inside a rule.
    pub rule: Option<String>,
    /// What is wrong, lower-case.
    pub message: String,
}

impl ConfigError {
    /// A problem at `line`:`column` of `file`.
    pub fn new(file: &Arc<Path>, line: usize, column: usize, message: impl Into<String>) -> Self {
        ConfigError {
            file: file.clone(),
            line,
            column,
            rule: None,
            message: message.into(),
        }
    }

    /// The same problem, inside `rule`.
    pub fn in_rule(mut self, rule: Option<&str>) -> Self {
        if self.rule.is_none() {
            self.rule = rule.map(str::to_owned);
        }
        self
    }

    /// The file, as given (relative paths stay relative).
    pub fn path(&self) -> &Path {
        &self.file
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
            if self.column > 0 {
                write!(f, ":{}", self.column)?;
            }
        }
        if let Some(rule) = &self.rule {
            write!(f, ": {rule}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Everything that can go wrong in the router at run time (config problems are
/// [`ConfigError`]s, collected by [`RouterError::Config`]).
#[derive(Debug, Clone, thiserror::Error)]
pub enum RouterError {
    /// The config has problems; every one is listed.
    #[error("{} config error(s):\n{}", .0.len(), join_lines(.0))]
    Config(Vec<ConfigError>),
    /// A task that is not a JSON object, or a body that is not JSON.
    #[error("bad task: {0}")]
    BadTask(String),
    /// `?inbound=` or `/inbound/{name}/` names no inbound of the config.
    #[error("no inbound named `{0}`")]
    UnknownInbound(String),
    /// The inbound exists but is disabled.
    #[error("inbound `{0}` is disabled")]
    InboundDisabled(String),
    /// A Redis command failed (connection refused, timeout, wrong type…). Retryable.
    #[error("redis {target}: {message}")]
    Redis { target: String, message: String },
    /// A NATS operation failed. Retryable.
    #[error("nats {target}: {message}")]
    Nats { target: String, message: String },
    /// A Kafka operation failed (broker unreachable, timeout, …). Retryable.
    #[error("{target}: {message}")]
    Kafka { target: String, message: String },
    /// An HTTP outbound's target answered with an error or could not be reached. Retryable.
    #[error("http {target}: {message}")]
    Http { target: String, message: String },
    /// The outbound's target refused the task for good (it would refuse it again): the
    /// task fails with reason `refused` and is recorded. Not retryable.
    #[error("{target} refused the task: {message}")]
    Refused { target: String, message: String },
    /// A target outside this crate (the hub's job outbound) cannot take tasks now (no live
    /// agent, stopping, its storage failed). Retryable.
    #[error("{target} unavailable: {message}")]
    Unavailable { target: String, message: String },
    /// A convert step failed on the task (a Python convert raised, or every worker that
    /// tried it died): the task fails with reason `convert_failed` and is recorded. Not
    /// retryable.
    #[error("convert `{class}` failed: {message}")]
    ConvertFailed { class: String, message: String },
    /// Writing the failure record failed.
    #[error("failure record {path}: {message}")]
    FailureRecord { path: PathBuf, message: String },
    /// Binding or serving the router's HTTP server failed.
    #[error("server {addr}: {message}")]
    Server { addr: String, message: String },
    /// The router is shutting down and did not deliver the task; the caller keeps it
    /// (an inbound puts it back, `POST /task/` answers 503).
    #[error("router is shutting down; task not delivered")]
    ShuttingDown,
}

impl RouterError {
    /// Whether trying the same thing later may succeed (the backend was unavailable, or
    /// the router was stopping), as opposed to bad input that will fail again.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            RouterError::Redis { .. }
                | RouterError::Nats { .. }
                | RouterError::Kafka { .. }
                | RouterError::Http { .. }
                | RouterError::Unavailable { .. }
                | RouterError::FailureRecord { .. }
                | RouterError::ShuttingDown
        )
    }
}

fn join_lines(errors: &[ConfigError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

impl From<Vec<ConfigError>> for RouterError {
    fn from(errors: Vec<ConfigError>) -> Self {
        RouterError::Config(errors)
    }
}
