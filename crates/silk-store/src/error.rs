//! The one error type of `silk-store`, [`StoreError`]. Every variant names what failed and
//! where; none carries a secret: URLs go through [`crate::redact_url`] (a password in the
//! userinfo or in a `password=` parameter becomes `***`) and the password is also scrubbed
//! from any driver message quoted in a reason.

use thiserror::Error;

/// Everything that can go wrong in the metadata store.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The store could not be opened: a bad or unsupported URL, an unreachable server, a
    /// refused login, a file that cannot be created. `url` is redacted.
    #[error("cannot open the metadata store at {url}: {reason}")]
    Connect {
        /// The store's URL (or SQLite path), without credentials.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// The schema could not be brought up to date at open.
    #[error("metadata store at {location}: migration {migration}: {reason}")]
    Migrate {
        /// The store's URL (or SQLite path), without credentials.
        location: String,
        /// Which migration (`0001_init`) or step (`lock`, `history`) failed.
        migration: String,
        /// What went wrong.
        reason: String,
    },
    /// A statement failed in the database (lost connection, pool timeout, disk full, …).
    #[error("metadata store: {op} failed: {reason}")]
    Query {
        /// The store operation (`create_job`, `append_logs`, …).
        op: &'static str,
        /// The driver's message.
        reason: String,
    },
    /// A row with the same unique key exists (`job name "nightly"`, `token id "t1"`).
    #[error("metadata store: {what} already exists")]
    Conflict {
        /// The key that clashed.
        what: String,
    },
    /// The row to change does not exist.
    #[error("metadata store: {what} not found")]
    NotFound {
        /// The row that was looked for.
        what: String,
    },
    /// A value cannot be stored or read back: a number out of range, a JSON document that
    /// does not parse, an unknown log level, a row that contradicts its call.
    #[error("metadata store: bad data in {what}: {reason}")]
    BadData {
        /// The value (`job "j1" spec`, `log line 12 level`, …).
        what: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl StoreError {
    /// A [`StoreError::BadData`].
    pub(crate) fn bad(what: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::BadData {
            what: what.into(),
            reason: reason.into(),
        }
    }

    /// A [`StoreError::Query`] from a driver error; decoding errors become
    /// [`StoreError::BadData`].
    pub(crate) fn query(op: &'static str, e: sqlx::Error) -> Self {
        match e {
            sqlx::Error::ColumnDecode { index, source } => Self::BadData {
                what: format!("{op}: column {index}"),
                reason: source.to_string(),
            },
            sqlx::Error::Decode(source) => Self::BadData {
                what: op.to_owned(),
                reason: source.to_string(),
            },
            other => Self::Query {
                op,
                reason: other.to_string(),
            },
        }
    }
}
