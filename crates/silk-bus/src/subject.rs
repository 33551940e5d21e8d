//! Bus addresses: every subject Silk uses is built here and nowhere else, so the layout can be
//! read in one place and no caller can build a subject out of unchecked text.
//!
//! A [`Subject`] is *relative* to the bus's namespace; the bus puts `{namespace}.` in front
//! (default namespace `silk`, so the full subjects are the ones below). The namespace lets
//! several Silk clusters (and every test) share one NATS server without seeing each other.
//!
//! | subject (relative)     | full (namespace `silk`)   | kind carried | persisted | readers |
//! |------------------------|---------------------------|--------------|-----------|---------|
//! | `agent.{id}.cmd`       | `silk.agent.{id}.cmd`     | `command`    | yes       | the agent `{id}` (durable) |
//! | `results.{hub}`        | `silk.results.{hub}`      | `result`, `worker` | yes       | the hub `{hub}` that sent the downloads (its own durable): the results of its runs |
//! | `results`              | `silk.results`            | `result`, `worker` | yes       | hubs (one durable, work shared): results of downloads without `reply_to` (older hubs) |
//! | `registrations`        | `silk.registrations`      | `register`   | yes       | hubs (one durable, work shared) |
//! | `run.{id}.control`     | `silk.run.{id}.control`   | `control`    | yes       | the agents and programs of run `{id}` |
//! | `heartbeats`           | `silk.heartbeats`         | `heartbeat`  | **no**    | every hub (fan-out, each runs its failure detector) |
//! | `allocations`          | `silk.allocations`        | `allocated`  | **no**    | every hub (fan-out; a hub waiting for a run's allocation replies is subscribed while it waits) |
//! | `logs`                 | `silk.logs`               | `log`        | yes       | hubs (one durable, `hub-logs`, work shared): every run's log lines, from every agent |
//! | `hubs`                 | `silk.hubs`               | `beacon`     | **no**    | every agent (fan-out: an agent that hears no hub for its `detach_after` detaches) |
//!
//! Wildcards for readers: `agent.*.cmd`, `results.*` and `run.*.control` (`results.*`
//! matches `results.{hub}`, not `results`).
//!
//! Design constraints:
//! - **Ids are single tokens.** An agent or run id goes into a subject as one token, so it
//!   must match `[A-Za-z0-9_-]{1,128}`: a `.` would add tokens, `*`/`>` would subscribe to
//!   other agents' commands, spaces would break the protocol line. Ids that do not match are
//!   refused ([`BusError::InvalidName`]), never escaped, so one id has one subject.
//! - **Namespaces** match `[a-z][a-z0-9_-]{0,31}`; the JetStream stream of a namespace is
//!   its upper-cased name (`silk` → `SILK`), so two namespaces never share a stream.
//! - **Durable names** match `[A-Za-z0-9_-]{1,64}` (they are JetStream consumer names).
//! - Heartbeats are not persisted: a heartbeat is worth nothing once the next one is sent,
//!   every hub replica needs every heartbeat (fan-out, not work sharing), and storing one per
//!   agent per second would write to disk for nothing. See `nats` for the stream layout.
//! - Allocation replies are not persisted either: only the hub that is starting the run
//!   waits for them, and it subscribes before it sends the `allocate` commands; a reply that
//!   nobody waits for any more is worth nothing (the hub counts a missing reply as a failed
//!   allocation), and a stored one would be stale by the time anyone read it.
//! - **Results go back to the hub that asked.** Several hubs share one bus and each run is
//!   owned by one hub, so a `download` names its hub (`reply_to`, see `wire`) and the agent
//!   publishes that batch's results on `results.{hub}`, which only that hub reads (one
//!   durable per hub; a hub's replicas, if any, share it). A hub id is a single token like
//!   agent ids. `results` stays for downloads without `reply_to` (hubs of older builds, a
//!   single hub), and a `download` whose `reply_to` is not a valid token also gets its
//!   results there (the agent logs a warning). A durable on `results` does not see
//!   `results.{hub}`, nor the other way round.
//! - Log batches are persisted on one shared subject (not one per run): the hub stores every
//!   run's lines, so it reads them all through one durable, and lines sent during a short
//!   hub outage are kept for it (until their TTL, see `wire`).
//! - Hub beacons are not persisted, like heartbeats the other way round: every agent needs
//!   every beacon (any one hub alive is enough), a lost one is harmless, and a stored one
//!   would say a hub is alive when it no longer is.

use crate::error::BusError;
use crate::wire::Kind;
use silk_core::{AgentId, RunId};
use std::fmt;

/// What a subject carries; decides which message kind may be published on it and whether it
/// is persisted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubjectClass {
    /// `agent.{id}.cmd`: commands to one agent.
    AgentCommands,
    /// `results`: results of downloads.
    Results,
    /// `registrations`: agent registrations.
    Registrations,
    /// `heartbeats`: agent heartbeats (not persisted).
    Heartbeats,
    /// `allocations`: agents' replies to `allocate` commands (not persisted).
    Allocations,
    /// `run.{id}.control`: pause / resume / stop of one run.
    RunControl,
    /// `logs`: batches of runs' log lines.
    Logs,
    /// `hubs`: hub beacons (not persisted).
    Hubs,
}

impl SubjectClass {
    /// The message kind this class carries.
    pub fn kind(self) -> Kind {
        match self {
            SubjectClass::AgentCommands => Kind::Command,
            SubjectClass::Results => Kind::Result,
            SubjectClass::Registrations => Kind::Register,
            SubjectClass::Heartbeats => Kind::Heartbeat,
            SubjectClass::RunControl => Kind::Control,
            SubjectClass::Allocations => Kind::Allocated,
            SubjectClass::Logs => Kind::Log,
            SubjectClass::Hubs => Kind::Beacon,
        }
    }

    /// Whether a message of `kind` may go on a subject of this class: its [`kind`](Self::kind),
    /// and on `results` subjects also `worker` reports and `fetched` replies (they go to the
    /// hub that drives the run or asked, as results do).
    pub fn carries(self, kind: Kind) -> bool {
        kind == self.kind()
            || (self == SubjectClass::Results && matches!(kind, Kind::Worker | Kind::Fetched))
    }

    /// Whether messages of this class are stored (JetStream) and can be read durably.
    pub fn is_persisted(self) -> bool {
        !matches!(
            self,
            SubjectClass::Heartbeats | SubjectClass::Allocations | SubjectClass::Hubs
        )
    }
}

/// A validated subject, relative to the bus namespace. Build one with the constructors; a
/// wildcard subject can be subscribed to but not published to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Subject {
    text: String,
    class: SubjectClass,
}

impl Subject {
    /// `agent.{id}.cmd`: commands to one agent.
    pub fn agent_commands(agent: &AgentId) -> Result<Subject, BusError> {
        check_token("agent id", agent.as_str())?;
        Ok(Subject {
            text: format!("agent.{agent}.cmd"),
            class: SubjectClass::AgentCommands,
        })
    }

    /// `agent.*.cmd`: commands to every agent (for tools and tests; an agent reads its own).
    pub fn all_agent_commands() -> Subject {
        Subject {
            text: "agent.*.cmd".into(),
            class: SubjectClass::AgentCommands,
        }
    }

    /// `results`: results of downloads that name no hub (`reply_to` absent: hubs of older
    /// builds, a single hub).
    pub fn results() -> Subject {
        Subject {
            text: "results".into(),
            class: SubjectClass::Results,
        }
    }

    /// `results.{hub}`: results of the downloads sent by hub `{hub}` (their `reply_to`).
    /// The hub id must be a single token (`[A-Za-z0-9_-]{1,128}`), like agent ids.
    pub fn hub_results(hub: &str) -> Result<Subject, BusError> {
        check_token("hub id", hub)?;
        Ok(Subject {
            text: format!("results.{hub}"),
            class: SubjectClass::Results,
        })
    }

    /// `results.*`: the results of every hub's downloads (for tools and tests; a hub reads
    /// its own). Does not match `results`.
    pub fn all_hub_results() -> Subject {
        Subject {
            text: "results.*".into(),
            class: SubjectClass::Results,
        }
    }

    /// `registrations`.
    pub fn registrations() -> Subject {
        Subject {
            text: "registrations".into(),
            class: SubjectClass::Registrations,
        }
    }

    /// `heartbeats` (not persisted).
    pub fn heartbeats() -> Subject {
        Subject {
            text: "heartbeats".into(),
            class: SubjectClass::Heartbeats,
        }
    }

    /// `allocations`: replies to `allocate` commands (not persisted).
    pub fn allocations() -> Subject {
        Subject {
            text: "allocations".into(),
            class: SubjectClass::Allocations,
        }
    }

    /// `logs`: batches of runs' log lines, from every agent.
    pub fn logs() -> Subject {
        Subject {
            text: "logs".into(),
            class: SubjectClass::Logs,
        }
    }

    /// `hubs`: the hubs' beacons (not persisted).
    pub fn hubs() -> Subject {
        Subject {
            text: "hubs".into(),
            class: SubjectClass::Hubs,
        }
    }

    /// `run.{id}.control`: control messages of one run.
    pub fn run_control(run: &RunId) -> Result<Subject, BusError> {
        check_token("run id", run.as_str())?;
        Ok(Subject {
            text: format!("run.{run}.control"),
            class: SubjectClass::RunControl,
        })
    }

    /// `run.*.control`: control messages of every run.
    pub fn all_run_controls() -> Subject {
        Subject {
            text: "run.*.control".into(),
            class: SubjectClass::RunControl,
        }
    }

    /// Parses a relative subject (as received, with the namespace already removed).
    pub fn parse(text: &str) -> Result<Subject, BusError> {
        let tokens: Vec<&str> = text.split('.').collect();
        let bad = || BusError::InvalidName {
            what: "subject",
            value: text.to_owned(),
            reason: "not a silk subject".into(),
        };
        let token_or_star = |what, t: &str| {
            if t == "*" {
                Ok(())
            } else {
                check_token(what, t)
            }
        };
        match tokens.as_slice() {
            ["agent", id, "cmd"] => {
                token_or_star("agent id", id)?;
                Ok(Subject {
                    text: text.to_owned(),
                    class: SubjectClass::AgentCommands,
                })
            }
            ["run", id, "control"] => {
                token_or_star("run id", id)?;
                Ok(Subject {
                    text: text.to_owned(),
                    class: SubjectClass::RunControl,
                })
            }
            ["results"] => Ok(Subject::results()),
            ["results", hub] => {
                token_or_star("hub id", hub)?;
                Ok(Subject {
                    text: text.to_owned(),
                    class: SubjectClass::Results,
                })
            }
            ["registrations"] => Ok(Subject::registrations()),
            ["heartbeats"] => Ok(Subject::heartbeats()),
            ["allocations"] => Ok(Subject::allocations()),
            ["logs"] => Ok(Subject::logs()),
            ["hubs"] => Ok(Subject::hubs()),
            _ => Err(bad()),
        }
    }

    /// The relative subject text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// What the subject carries.
    pub fn class(&self) -> SubjectClass {
        self.class
    }

    /// Whether the subject contains a wildcard token.
    pub fn is_wildcard(&self) -> bool {
        self.text.split('.').any(|t| t == "*")
    }

    /// Whether messages on this subject are stored (see [`SubjectClass::is_persisted`]).
    pub fn is_persisted(&self) -> bool {
        self.class.is_persisted()
    }

    /// Whether a concrete subject is matched by this (possibly wildcard) filter.
    pub fn matches(&self, concrete: &Subject) -> bool {
        let mut filter = self.text.split('.');
        let mut subject = concrete.text.split('.');
        loop {
            match (filter.next(), subject.next()) {
                (None, None) => return true,
                (Some(f), Some(s)) if f == "*" || f == s => {}
                _ => return false,
            }
        }
    }

    /// The full subject on the wire: `{namespace}.{subject}`.
    pub fn full(&self, namespace: &str) -> String {
        format!("{namespace}.{}", self.text)
    }

    /// The relative subject of a full one, if it lies in `namespace`.
    pub fn from_full(namespace: &str, full: &str) -> Result<Subject, BusError> {
        full.strip_prefix(namespace)
            .and_then(|rest| rest.strip_prefix('.'))
            .ok_or_else(|| BusError::InvalidName {
                what: "subject",
                value: full.to_owned(),
                reason: format!("not in namespace `{namespace}`"),
            })
            .and_then(Subject::parse)
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Checks an id that becomes one subject token.
fn check_token(what: &'static str, value: &str) -> Result<(), BusError> {
    let reason = if value.is_empty() {
        "empty"
    } else if value.len() > 128 {
        "longer than 128 bytes"
    } else if !value.chars().all(is_token_char) {
        "only ASCII letters, digits, `_` and `-` are allowed (it becomes one subject token)"
    } else {
        return Ok(());
    };
    Err(BusError::InvalidName {
        what,
        value: value.to_owned(),
        reason: reason.into(),
    })
}

/// Checks a namespace: `[a-z][a-z0-9_-]{0,31}`.
pub fn check_namespace(namespace: &str) -> Result<(), BusError> {
    let mut chars = namespace.chars();
    let ok = namespace.len() <= 32
        && chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(BusError::InvalidName {
            what: "namespace",
            value: namespace.to_owned(),
            reason: "must match [a-z][a-z0-9_-]{0,31}".into(),
        })
    }
}

/// Checks a durable name: `[A-Za-z0-9_-]{1,64}`.
pub fn check_durable(name: &str) -> Result<(), BusError> {
    if !name.is_empty() && name.len() <= 64 && name.chars().all(is_token_char) {
        Ok(())
    } else {
        Err(BusError::InvalidName {
            what: "durable name",
            value: name.to_owned(),
            reason: "must match [A-Za-z0-9_-]{1,64}".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_cannot_inject_tokens() {
        for bad in ["a.b", "*", ">", "a b", "", "a\r\nPUB x", "é"] {
            let err = Subject::agent_commands(&AgentId::new(bad)).unwrap_err();
            assert!(
                matches!(
                    err,
                    BusError::InvalidName {
                        what: "agent id",
                        ..
                    }
                ),
                "{bad}: {err}"
            );
            assert!(Subject::run_control(&RunId::new(bad)).is_err(), "{bad}");
        }
        assert_eq!(
            Subject::agent_commands(&AgentId::new("a-1_B"))
                .unwrap()
                .as_str(),
            "agent.a-1_B.cmd"
        );
        assert!(Subject::agent_commands(&AgentId::new("x".repeat(129))).is_err());
    }

    #[test]
    fn parse_round_trips_and_refuses_strangers() {
        for s in [
            Subject::agent_commands(&AgentId::new("a1")).unwrap(),
            Subject::all_agent_commands(),
            Subject::results(),
            Subject::hub_results("hub-a_1").unwrap(),
            Subject::all_hub_results(),
            Subject::registrations(),
            Subject::heartbeats(),
            Subject::allocations(),
            Subject::logs(),
            Subject::run_control(&RunId::new("r1")).unwrap(),
            Subject::all_run_controls(),
        ] {
            assert_eq!(Subject::parse(s.as_str()).unwrap(), s);
            assert_eq!(Subject::from_full("silk", &s.full("silk")).unwrap(), s);
        }
        for bad in [
            "",
            "agent.a.b.cmd",
            "agent.>.cmd",
            "results.x.y",
            "results.>",
            "results.a b",
            "results.",
            "logs.r1",
            "foo",
            "agent..cmd",
        ] {
            assert!(Subject::parse(bad).is_err(), "{bad}");
        }
        assert!(Subject::from_full("silk", "other.results").is_err());
        assert!(Subject::from_full("silk", "silkx.results").is_err());
    }

    #[test]
    fn hub_results_subjects() {
        let a = Subject::hub_results("hubA").unwrap();
        let b = Subject::hub_results("hub-b").unwrap();
        assert_eq!(a.as_str(), "results.hubA");
        assert_eq!(a.full("silk"), "silk.results.hubA");
        assert_eq!(a.class(), SubjectClass::Results);
        assert_eq!(a.class().kind(), Kind::Result);
        assert!(a.is_persisted() && !a.is_wildcard());
        assert_eq!(Subject::parse("results.hubA").unwrap(), a);
        let all = Subject::all_hub_results();
        assert!(all.is_wildcard() && all.is_persisted());
        assert!(all.matches(&a) && all.matches(&b));
        assert!(!all.matches(&Subject::results()));
        assert!(!Subject::results().matches(&a) && !a.matches(&Subject::results()));
        assert!(!a.matches(&b));
        for bad in ["a.b", "*", ">", "a b", "", "a\r\nPUB x", "é"] {
            let err = Subject::hub_results(bad).unwrap_err();
            assert!(
                matches!(err, BusError::InvalidName { what: "hub id", .. }),
                "{bad}: {err}"
            );
        }
        assert!(Subject::hub_results(&"h".repeat(128)).is_ok());
        assert!(Subject::hub_results(&"h".repeat(129)).is_err());
    }

    #[test]
    fn wildcard_matching() {
        let a = Subject::agent_commands(&AgentId::new("a")).unwrap();
        let b = Subject::agent_commands(&AgentId::new("b")).unwrap();
        assert!(Subject::all_agent_commands().matches(&a));
        assert!(a.matches(&a) && !a.matches(&b));
        assert!(!Subject::all_agent_commands().matches(&Subject::results()));
        assert!(Subject::all_agent_commands().is_wildcard() && !a.is_wildcard());
        assert!(!Subject::heartbeats().is_persisted() && Subject::results().is_persisted());
        assert!(!Subject::hubs().is_persisted());
        assert_eq!(Subject::parse("hubs").unwrap(), Subject::hubs());
        assert!(!Subject::allocations().is_persisted());
        assert_eq!(Subject::allocations().class().kind(), Kind::Allocated);
        assert!(Subject::logs().is_persisted());
        assert_eq!(Subject::logs().class().kind(), Kind::Log);
    }

    #[test]
    fn namespaces_and_durables() {
        for ok in ["silk", "t1", "a_b-c"] {
            check_namespace(ok).unwrap();
        }
        for bad in ["", "Silk", "1a", "a.b", "a*", &"a".repeat(33)] {
            assert!(check_namespace(bad).is_err(), "{bad}");
        }
        check_durable("hub-results_1").unwrap();
        for bad in ["", "a.b", "a b", "*", &"a".repeat(65)] {
            assert!(check_durable(bad).is_err(), "{bad}");
        }
    }
}
