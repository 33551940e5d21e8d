//! The one error type of `silk-items`.

use std::path::PathBuf;
use thiserror::Error;

/// An item file could not be read or written.
#[derive(Debug, Error)]
#[error("items file {path}: {source}")]
pub struct ItemsError {
    /// The file.
    pub path: PathBuf,
    /// What the operating system (or the JSON writer) said.
    pub source: std::io::Error,
}
