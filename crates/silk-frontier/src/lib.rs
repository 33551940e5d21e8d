//! The crawl frontier (in other systems: URL queue, scheduler, seed manager): dedup per
//! re-crawl segment (Bloom filter + exact confirmation), per-host politeness, priority with
//! aging, leases with expiry, retries with back-off, and the run's counters (design §3).
//!
//! - [`FrontierStore`] is the seam. Callers (the `silk crawl` engine, the hub's dispatcher)
//!   hold an `Arc<dyn FrontierStore>` and never know the backend.
//! - [`EmbeddedFrontier`] is the crash-safe embedded backend (fjall), for one process.
//! - [`RedisFrontier`] is the backend of the distributed mode: state in Redis (one hash tag
//!   per frontier, cluster-safe), scheduler and dedup in memory as in the embedded one; one
//!   owner at a time, and another process adopts a frontier by opening the same prefix.
//!   Both pass the same [`conformance`] suite (`frontier_conformance_tests!`).
//! - One core for every backend (`generic`): the scheduler (`sched`: per-host queues,
//!   readiness, aging, leases), dedup (`dedup`: per-segment Bloom filters and an exact cache
//!   of recent fingerprints), staging of enqueues and acks into one atomic write, the ack
//!   plan and the stats (`plan`), and so the whole `FrontierStore` behaviour, over a small
//!   storage trait. A backend implements only reads, the atomic commit, segment loading and
//!   its `open`; the record encoding both write is the neutral `layout`.
//!
//! This crate must not fetch, parse pages, canonicalise URLs (requests arrive canonical,
//! from `silk-core`) or know about runs, agents or the bus.
//!
//! ```ignore
//! let frontier: Arc<dyn FrontierStore> =
//!     Arc::new(EmbeddedFrontier::open(dir, FrontierConfig::default(), Arc::new(SystemClock))?);
//! frontier.enqueue(start_requests).await?;
//! loop {
//!     let leases = frontier.lease(64).await?;
//!     // … fetch; then per page, atomically:
//!     // frontier.ack_and_enqueue(lease.id, Outcome::Done, links).await?;
//!     // when nothing was leased: sleep until frontier.next_ready_ms() (or an ack); stop on None.
//! }
//! ```
//!
//! # Known limits
//!
//! - `seen` keys of a past segment stay `segment_retention_ms` after it ended (24 bytes each
//!   on disk before compression, in Redis a set member); the first write after that deletes
//!   them, inline (one segment of a million URLs: a million deletions, once a segment).
//! - The scheduler keeps every host it has met (about 150 bytes each) until the frontier is
//!   closed.
//! - Aging follows design §3 to the letter, so a negative priority becomes *more* negative
//!   with age (and priority 0 never ages).

pub mod config;
pub mod conformance;
mod dedup;
pub mod embedded;
pub mod error;
pub mod expand;
mod generic;
pub(crate) mod layout;
mod plan;
pub mod redis;
mod sched;
pub mod store;
mod window;

pub use config::{DEFAULT_MEMORY_WINDOW, FrontierConfig, MAX_RETRY_BACKOFF_MS};
pub use embedded::{EmbeddedFrontier, EmbeddedOptions};
pub use error::FrontierError;
pub use expand::ExpandFeed;
pub use redis::RedisFrontier;
pub use store::{AckResult, EnqueueOutcome, FrontierStats, FrontierStore, Lease, LeaseId, Outcome};
