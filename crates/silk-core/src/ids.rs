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

/// The id of one lease: one dispatch of one request by a frontier. Unique within the
/// frontier's life, across restarts, so that a result for a lease from before a crash can never
/// ack a new lease. Written as 16 lowercase hex digits, in text and on the bus
/// (`"lease_id": "00000000000000a3"`); an agent gives it back with the request's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId(pub u64);

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl std::str::FromStr for LeaseId {
    type Err = String;

    /// A lease id from 1 to 16 hex digits (any case).
    fn from_str(text: &str) -> Result<Self, String> {
        let ok =
            !text.is_empty() && text.len() <= 16 && text.bytes().all(|b| b.is_ascii_hexdigit());
        ok.then(|| u64::from_str_radix(text, 16).ok())
            .flatten()
            .map(LeaseId)
            .ok_or_else(|| format!("lease id `{text}`: expected 1 to 16 hex digits"))
    }
}

impl Serialize for LeaseId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for LeaseId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Ids as people read them in a log line: `a1,a2` (`-` for none), never `[AgentId("a1")]`.
pub fn list<T: fmt::Display>(ids: &[T]) -> String {
    if ids.is_empty() {
        return "-".into();
    }
    ids.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_lists_read_as_plain_text() {
        assert_eq!(list(&[AgentId::new("a1"), AgentId::new("a2")]), "a1,a2");
        assert_eq!(list::<RunId>(&[]), "-");
    }

    #[test]
    fn lease_ids_are_sixteen_hex_digits_on_the_wire() {
        let id = LeaseId(0xa3);
        assert_eq!(id.to_string(), "00000000000000a3");
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, r#""00000000000000a3""#);
        assert_eq!(serde_json::from_str::<LeaseId>(&json).unwrap(), id);
        assert_eq!("FF".parse::<LeaseId>(), Ok(LeaseId(255)));
        assert_eq!("ffffffffffffffff".parse::<LeaseId>(), Ok(LeaseId(u64::MAX)));
        for bad in ["", "l1", "lease-1", "+1", "-1", "1ffffffffffffffff", "0x1"] {
            let err = bad.parse::<LeaseId>().unwrap_err();
            assert!(err.contains("expected 1 to 16 hex digits"), "{bad}: {err}");
        }
        let err = serde_json::from_str::<LeaseId>(r#""l1""#).unwrap_err();
        assert!(err.to_string().contains("lease id `l1`"), "{err}");
        assert!(
            serde_json::from_str::<LeaseId>("7").is_err(),
            "a string, not a number"
        );
    }

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
