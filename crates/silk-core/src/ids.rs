//! Newtype ids. Every id is a string on the wire and in stores; the newtypes keep a run id
//! from being passed where an agent id is expected.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl $name {
            /// Wraps an id.
            pub fn new(id: impl Into<String>) -> Self {
                Self(id.into())
            }
            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.to_owned())
            }
        }
    };
}

string_id!(
    /// One execution of a job (or of a `silk crawl`).
    RunId
);
string_id!(
    /// A job: a schedule plus what to run.
    JobId
);
string_id!(
    /// A downloader agent (one machine or process of the download center).
    AgentId
);
string_id!(
    /// A tenant: the owner of jobs, runs and quotas.
    TenantId
);
