//! The one error type of `silk-crawl`.

use std::path::PathBuf;
use thiserror::Error;

/// What can stop a crawl from starting or finishing.
#[derive(Debug, Error)]
pub enum CrawlError {
    /// The spider is invalid (every problem is in the message).
    #[error(transparent)]
    Spider(#[from] silk_core::CoreError),
    /// A rule the downloader/parser cannot compile, or a client that cannot be built.
    #[error(transparent)]
    Fetch(#[from] silk_fetch::FetchError),
    /// The frontier failed (its message names the directory and operation).
    #[error(transparent)]
    Frontier(#[from] silk_frontier::FrontierError),
    /// The item output file could not be read or written.
    #[error("items file {path}: {source}")]
    Items {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The data directory could not be created or locked.
    #[error("data dir {path}: {reason}")]
    DataDir { path: PathBuf, reason: String },
}
