//! `silk-items`: the item log of a crawl or a run, as a JSON Lines file.
//!
//! The local engine (`silk crawl`) and the hub's runs write their items through
//! [`JsonlSink`]; the hub's other append-only files (a run's outcomes) open theirs with
//! [`open_append`]. This crate knows files and JSON, nothing of spiders, frontiers or HTTP,
//! so that both the engine and the hub can depend on it without depending on each other.

pub mod error;
pub mod file;

pub use error::ItemsError;
pub use file::{JsonlSink, Written, open_append};
