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

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
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
string_id!(
    /// A hub of the cluster: the holder of its run leases, the name in its results subject
    /// (`results.{id}`) and its durable names. [`HubId::parse`] checks one.
    HubId
);

impl HubId {
    /// A hub id from its text: one bus token of 1 to 40 characters of `A-Z`, `a-z`, `0-9`,
    /// `-` and `_` (it is also part of durable names); the error says what is expected.
    pub fn parse(id: &str) -> Result<HubId, String> {
        let ok = !id.is_empty()
            && id.len() <= 40
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if ok {
            Ok(HubId(id.to_owned()))
        } else {
            Err(format!(
                "hub id `{id}`: expected 1 to 40 characters of A-Z, a-z, 0-9, `-` and `_`"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_ids_are_bus_tokens() {
        for good in ["hub-a", "H_1", &"x".repeat(40)] {
            assert_eq!(HubId::parse(good).unwrap().as_str(), good);
        }
        for bad in ["", "a.b", "a b", "a*", &"x".repeat(41), "é"] {
            let err = HubId::parse(bad).unwrap_err();
            assert!(err.contains("expected 1 to 40 characters"), "{err}");
        }
    }
}
