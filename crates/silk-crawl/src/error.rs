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
    /// The item output file could not be read or written (its message names the file).
    #[error(transparent)]
    Items(#[from] silk_items::ItemsError),
    /// The data directory could not be created or locked.
    #[error("data dir {path}: {reason}")]
    DataDir { path: PathBuf, reason: String },
}

impl CrawlError {
    /// Whether the error is the spider file's fault (an invalid value, a CSS / XPath / JSON
    /// path rule or a proxy / header that does not compile), as opposed to the machine's.
    pub fn is_bad_spider(&self) -> bool {
        matches!(
            self,
            CrawlError::Spider(_) | CrawlError::Fetch(silk_fetch::FetchError::InvalidConfig { .. })
        )
    }
}
