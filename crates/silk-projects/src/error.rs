//! The crate's one error type.

/// What went wrong with a project, a webhook, a checkout or a build. Messages never hold a
/// password, a token or a secret: a git error is reported with the URL's credentials removed.
#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    /// A field of a project, a pattern, a version or a ref is invalid.
    #[error("{what}: {reason}")]
    Invalid {
        /// The field (`name`, `tag_pattern`, `build.command`, …).
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// A webhook delivery is not signed with the project's secret (or not signed at all).
    #[error("webhook refused: {0}")]
    Signature(String),
    /// A webhook delivery cannot be read.
    #[error("webhook: {0}")]
    Delivery(String),
    /// The secret key cannot be read, or does not open what the store holds.
    #[error("secret key: {0}")]
    Key(String),
    /// Fetching or checking out the repository failed.
    #[error("git: {0}")]
    Git(String),
    /// The build failed (its log has the detail).
    #[error("{0}")]
    Build(String),
    /// A file or directory of the build could not be read or written.
    #[error("{path}: {reason}")]
    Io {
        /// The path.
        path: std::path::PathBuf,
        /// What failed.
        reason: String,
    },
}

impl ProjectError {
    /// An [`ProjectError::Io`] for `path`.
    pub(crate) fn io(path: &std::path::Path, e: impl std::fmt::Display) -> Self {
        ProjectError::Io {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }
    }
}
