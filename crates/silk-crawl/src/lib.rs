//! `silk-crawl`: the engine that runs a declarative spider to completion in one process
//! (`silk crawl`), on the embedded frontier and the downloader of `silk-fetch`.
//!
//! It owns the order of a request's steps and the guarantees that come from that order
//! (see [`engine`]); it must not grow CLI concerns (terminal output, flags, signals): the
//! binary watches [`Crawl::progress`] and sends the stop signal.

pub mod engine;
pub mod error;

pub use engine::{Crawl, CrawlOptions, Finish, Progress, Summary};
pub use error::CrawlError;
