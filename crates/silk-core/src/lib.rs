//! Silk's shared vocabulary: ids, the [`Request`] that flows through the frontier, canonical
//! URL keys and fingerprints, the declarative [`spider::SpiderSpec`], and the [`Clock`] seam.
//!
//! This crate does no I/O (no sockets, no files, no async): every other crate depends on it,
//! so it stays small, pure and fast to compile. Parsing a spider file from a string lives here;
//! reading the file from disk does not.

pub mod canon;
pub mod clock;
pub mod command;
pub mod error;
pub mod expand;
pub mod ids;
pub mod net;
pub mod outcome;
#[cfg(feature = "redis")]
pub mod redis_target;
pub mod request;
pub mod spider;
pub mod text;

pub use canon::{CanonRules, Fingerprint, canonicalize, fingerprint, fingerprint_salted};
pub use clock::{Clock, ManualClock, SystemClock, TokioClock};
pub use command::CommandSpec;
pub use error::CoreError;
pub use ids::{AgentId, HubId, JobId, LeaseId, RunId, TenantId};
pub use outcome::{Disposition, OutcomeCode};
pub use request::{Method, Request};
pub use spider::SpiderSpec;
