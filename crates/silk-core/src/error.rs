//! The one error type of `silk-core`. Messages are lower-case and name the input and where.

use thiserror::Error;

/// Everything that can go wrong in `silk-core`: all of it is bad input.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CoreError {
    /// A URL that does not parse, or that Silk cannot fetch.
    #[error("invalid url `{url}`: {reason}")]
    InvalidUrl { url: String, reason: String },
    /// A spider file that is not valid YAML or does not match the spider schema
    /// (unknown keys included); the message carries serde's line and column.
    #[error("{file}: {message}")]
    SpiderSyntax { file: String, message: String },
    /// A spider file that parses but has invalid values; every problem is listed.
    #[error("{file}: {}", problems.join("; "))]
    SpiderInvalid { file: String, problems: Vec<String> },
    /// A spider's `expand` that cannot be resolved (a file, an argument, too many values);
    /// every problem is listed.
    #[error("{}", problems.join("; "))]
    ExpandInvalid { problems: Vec<String> },
    /// A regular expression that does not compile.
    #[error("{at}: invalid regex `{pattern}`: {reason}")]
    InvalidRegex {
        at: String,
        pattern: String,
        reason: String,
    },
    /// A duration such as `7d` that does not parse.
    #[error("{at}: invalid duration `{value}`: {reason}")]
    InvalidDuration {
        at: String,
        value: String,
        reason: String,
    },
}
