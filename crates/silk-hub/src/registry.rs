//! The [`AgentRegistry`]: who the agents are, how they are doing, which are live.
//!
//! Fed by the bus's [`Register`] and [`Heartbeat`] messages with their envelope `sent_ms`
//! (agent clock, for ordering) and the hub's `now_ms` when they were read (hub clock, for
//! the failure detector). Asked with a `now_ms`; reports state changes from
//! [`AgentRegistry::tick`]. Pure: no clock, no bus, no tasks.
//!
//! Rules:
//! - A **register** is always processed: it creates the agent's record or refreshes it
//!   (host, version, cores, memory, labels, capacity). It counts as a sign of life for a new
//!   agent and for one the detector holds dead (the agent restarted); for a live agent it
//!   only refreshes the record. A register older (`sent_ms`) than the one the record holds
//!   does not overwrite it.
//! - A **heartbeat** of an unknown agent is not an agent: it is recorded as *needs register*
//!   ([`AgentRegistry::needs_register`]) so the hub can ask the agent to register again
//!   (the hub restarted and forgot it).
//! - Heartbeats are ordered by `(sent_ms, seq)`: one not newer than the last accepted is a
//!   duplicate or arrived out of order and is ignored. `sent_ms` comes first so a restarted
//!   agent process, whose `seq` starts again at 0, is still heard.
//! - Stale envelopes (past their TTL) are dropped by the bus before they get here.

use crate::error::HubError;
use crate::phi::{AgentState, PhiConfig, PhiDetector};
use serde::{Deserialize, Serialize};
pub use silk_api::agents::AgentView;
use silk_bus::{Envelope, Heartbeat, Message, Register};
use silk_core::AgentId;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// What [`AgentRegistry::register`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterOutcome {
    /// A new agent.
    New,
    /// A known, live agent: its record was refreshed.
    Refreshed,
    /// A known agent the detector held dead: refreshed and alive again.
    Revived,
    /// Older than the registration the record holds: ignored.
    Outdated,
}

/// What [`AgentRegistry::heartbeat`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeartbeatOutcome {
    /// Recorded.
    Accepted,
    /// Not newer than the last accepted heartbeat of that agent: ignored.
    Stale,
    /// The agent has not registered: recorded in [`AgentRegistry::needs_register`].
    NeedsRegister,
}

/// What [`AgentRegistry::apply`] did with an envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// It was a register.
    Register(RegisterOutcome),
    /// It was a heartbeat.
    Heartbeat(HeartbeatOutcome),
    /// Neither: not the registry's business.
    Ignored,
}

/// A change of an agent's state, reported once by [`AgentRegistry::tick`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transition {
    /// The agent.
    pub agent: AgentId,
    /// The state the previous tick reported; `None` for an agent new since then.
    pub from: Option<AgentState>,
    /// The state now.
    pub to: AgentState,
    /// The tick's `now_ms`.
    pub at_ms: u64,
    /// phi at that time.
    pub phi: f64,
    /// When the agent sent the last registration or heartbeat this hub took from the bus
    /// (agent clock): none if this hub has not heard from it since it started (an agent
    /// restored from the store).
    pub last_heard_ms: Option<u64>,
}

/// Labels an agent must all carry (`pool=cn,net=adsl`); empty matches every agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LabelFilter(pub BTreeMap<String, String>);

impl LabelFilter {
    /// Matches every agent.
    pub fn any() -> Self {
        Self::default()
    }

    /// Whether `labels` carry every `key=value` of the filter.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|(k, v)| labels.get(k) == Some(v))
    }
}

impl FromStr for LabelFilter {
    type Err = HubError;

    /// Parses `key=value[,key=value…]`; blank means no filter.
    fn from_str(input: &str) -> Result<Self, HubError> {
        let bad = |reason: String| HubError::BadLabelFilter {
            input: input.to_owned(),
            reason,
        };
        let mut map = BTreeMap::new();
        for part in input.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("`{part}` has no `=`")))?;
            let (k, v) = (k.trim(), v.trim());
            if k.is_empty() {
                return Err(bad(format!("`{part}` has an empty key")));
            }
            if let Some(prev) = map.insert(k.to_owned(), v.to_owned())
                && prev != v
            {
                return Err(bad(format!("`{k}` is given twice")));
            }
        }
        Ok(Self(map))
    }
}

impl fmt::Display for LabelFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
        f.write_str(&parts.join(","))
    }
}

#[derive(Debug, Clone)]
struct AgentRecord {
    info: Register,
    register_sent_ms: u64,
    last: Option<Heartbeat>,
    /// `(sent_ms, seq)` of the last accepted heartbeat.
    last_key: Option<(u64, u64)>,
    /// When the last accepted heartbeat was read (hub clock).
    last_read_ms: Option<u64>,
    /// When the agent sent the last registration or heartbeat this registry took from the
    /// bus (agent clock); none for an agent restored from the store and silent since.
    heard_ms: Option<u64>,
    detector: PhiDetector,
    /// The state the last tick reported; `None` until the first tick that saw the agent.
    reported: Option<AgentState>,
}

/// The agents known to the hub. See the module docs for the rules.
#[derive(Debug, Clone)]
pub struct AgentRegistry {
    config: PhiConfig,
    agents: BTreeMap<AgentId, AgentRecord>,
    /// Agents heard from without a registration, with when they were last heard (hub clock).
    unregistered: BTreeMap<AgentId, u64>,
    /// Agents being drained: no new work (not picked for new runs or reassignments, no
    /// requests of `random` runs); the runs that hold them keep them until they end. Kept in
    /// the store (`AgentRow::drained`), read again every few seconds, so every hub agrees.
    drained: std::collections::BTreeSet<AgentId>,
    /// Counts the drains set here (`set_drained`), so that a set read from the store before
    /// one of them does not undo it (`replace_drained`).
    drain_changes: u64,
}

impl AgentRegistry {
    /// An empty registry whose agents use the failure detector settings `config`.
    pub fn new(config: PhiConfig) -> Result<Self, HubError> {
        config.validate()?;
        Ok(Self {
            config,
            agents: BTreeMap::new(),
            unregistered: BTreeMap::new(),
            drained: std::collections::BTreeSet::new(),
            drain_changes: 0,
        })
    }

    /// Marks an agent drained (or not); whether that changed anything.
    pub fn set_drained(&mut self, id: &AgentId, drained: bool) -> bool {
        self.drain_changes += 1;
        if drained {
            self.drained.insert(id.clone())
        } else {
            self.drained.remove(id)
        }
    }

    /// Where the drains set here stand: pass it to [`replace_drained`](Self::replace_drained)
    /// with a set read from the store after this call.
    pub fn drain_changes(&self) -> u64 {
        self.drain_changes
    }

    /// Replaces the drained set with one read from the store, unless a drain was set here
    /// since `changes` (then the set read may predate it; the next read will not). Whether it
    /// was replaced.
    pub fn replace_drained(
        &mut self,
        drained: std::collections::BTreeSet<AgentId>,
        changes: u64,
    ) -> bool {
        if self.drain_changes != changes {
            return false;
        }
        self.drained = drained;
        true
    }

    /// The live agents at `now_ms` of `pools` (any agent when empty) that may take new work
    /// (not drained), sorted.
    pub fn open_agents(&self, now_ms: u64, pools: &[String]) -> Vec<AgentId> {
        let mut live = self.live_agents(now_ms, &LabelFilter::any());
        live.retain(|a| self.is_open(a, pools));
        live
    }

    /// The slots (`capacity`) of the known agents among `ids`, together.
    pub fn capacity(&self, ids: &[AgentId]) -> u64 {
        ids.iter()
            .filter_map(|id| self.agents.get(id))
            .map(|r| u64::from(r.info.capacity))
            .sum()
    }

    /// Whether an agent may take new work of a run of `pools`: not drained, and in one of
    /// `pools` (its `pool` label; any agent when `pools` is empty). Liveness aside.
    pub fn is_open(&self, id: &AgentId, pools: &[String]) -> bool {
        !self.drained.contains(id) && self.in_pools(id, pools)
    }

    /// Whether a registered agent is in one of `pools` (its `pool` label); every agent is when
    /// `pools` is empty.
    fn in_pools(&self, id: &AgentId, pools: &[String]) -> bool {
        pools.is_empty()
            || self
                .agents
                .get(id)
                .and_then(|rec| rec.info.labels.get("pool"))
                .is_some_and(|pool| pools.contains(pool))
    }

    /// The failure detector settings.
    pub fn config(&self) -> &PhiConfig {
        &self.config
    }

    /// Feeds a decoded envelope read at `now_ms`: registers and heartbeats are applied with
    /// the envelope's `sent_ms`, other kinds are [`Applied::Ignored`].
    pub fn apply(&mut self, envelope: &Envelope, now_ms: u64) -> Applied {
        match &envelope.body {
            Message::Register(r) => Applied::Register(self.register(r, envelope.sent_ms, now_ms)),
            Message::Heartbeat(h) => {
                Applied::Heartbeat(self.heartbeat(h, envelope.sent_ms, now_ms))
            }
            _ => Applied::Ignored,
        }
    }

    /// A registration sent at `sent_ms` (agent clock) and read at `now_ms` (hub clock).
    pub fn register(&mut self, msg: &Register, sent_ms: u64, now_ms: u64) -> RegisterOutcome {
        self.unregistered.remove(&msg.agent);
        let Some(rec) = self.agents.get_mut(&msg.agent) else {
            let mut detector = PhiDetector::new(self.config);
            detector.heartbeat(now_ms);
            self.agents.insert(
                msg.agent.clone(),
                AgentRecord {
                    info: msg.clone(),
                    register_sent_ms: sent_ms,
                    last: None,
                    last_key: None,
                    last_read_ms: None,
                    heard_ms: Some(sent_ms),
                    detector,
                    reported: None,
                },
            );
            return RegisterOutcome::New;
        };
        if sent_ms < rec.register_sent_ms {
            return RegisterOutcome::Outdated;
        }
        rec.info = msg.clone();
        rec.register_sent_ms = sent_ms;
        rec.heard_ms = rec.heard_ms.max(Some(sent_ms));
        if rec.detector.state(now_ms) == AgentState::Dead {
            rec.detector.heartbeat(now_ms);
            RegisterOutcome::Revived
        } else {
            RegisterOutcome::Refreshed
        }
    }

    /// A heartbeat sent at `sent_ms` (agent clock) and read at `now_ms` (hub clock).
    pub fn heartbeat(&mut self, msg: &Heartbeat, sent_ms: u64, now_ms: u64) -> HeartbeatOutcome {
        let Some(rec) = self.agents.get_mut(&msg.agent) else {
            let seen = self.unregistered.entry(msg.agent.clone()).or_insert(now_ms);
            *seen = (*seen).max(now_ms);
            return HeartbeatOutcome::NeedsRegister;
        };
        let key = (sent_ms, msg.seq);
        if rec.last_key.is_some_and(|last| key <= last) {
            return HeartbeatOutcome::Stale;
        }
        rec.last_key = Some(key);
        rec.heard_ms = rec.heard_ms.max(Some(sent_ms));
        rec.last = Some(msg.clone());
        rec.last_read_ms = Some(now_ms);
        rec.detector.heartbeat(now_ms);
        HeartbeatOutcome::Accepted
    }

    /// An agent known from the store (its last registration, sent at `sent_ms`), at the
    /// hub's start: registered as by [`Self::register`], but not heard from
    /// ([`Transition::last_heard_ms`] stays `None` until it sends something).
    pub fn restore(&mut self, msg: &Register, sent_ms: u64, now_ms: u64) -> RegisterOutcome {
        let outcome = self.register(msg, sent_ms, now_ms);
        if outcome == RegisterOutcome::New
            && let Some(rec) = self.agents.get_mut(&msg.agent)
        {
            rec.heard_ms = None;
        }
        outcome
    }

    /// Agents that sent heartbeats without being registered (sorted). An agent leaves the
    /// list when it registers, or `dead_after_ms` after it was last heard ([`Self::tick`]).
    pub fn needs_register(&self) -> Vec<AgentId> {
        self.unregistered.keys().cloned().collect()
    }

    /// Whether the agent is registered.
    pub fn contains(&self, id: &AgentId) -> bool {
        self.agents.contains_key(id)
    }

    /// Forgets an agent (an operator removed it, or the hub prunes long-dead agents).
    pub fn remove(&mut self, id: &AgentId) -> bool {
        self.agents.remove(id).is_some()
    }

    /// The agent's state at `now_ms`, if it is registered.
    pub fn state(&self, id: &AgentId, now_ms: u64) -> Option<AgentState> {
        self.agents.get(id).map(|r| r.detector.state(now_ms))
    }

    /// Every registered agent at `now_ms`, sorted by id.
    pub fn agents(&self, now_ms: u64) -> Vec<AgentView> {
        self.agents
            .iter()
            .map(|(id, rec)| {
                let mut v = view(id, rec, now_ms);
                v.draining = self.drained.contains(id);
                v
            })
            .collect()
    }

    /// The live agents (alive or suspect) at `now_ms` whose labels match `filter`, sorted.
    pub fn live_agents(&self, now_ms: u64, filter: &LabelFilter) -> Vec<AgentId> {
        self.agents
            .iter()
            .filter(|(_, rec)| {
                rec.detector.state(now_ms).is_live() && filter.matches(&rec.info.labels)
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The state changes since the previous tick, in agent id order: each agent's state at
    /// `now_ms` against the state the last tick reported. A new agent is reported once with
    /// `from: None`. Also forgets unregistered agents not heard from for `dead_after_ms`.
    pub fn tick(&mut self, now_ms: u64) -> Vec<Transition> {
        let dead_after = self.config.dead_after_ms;
        self.unregistered
            .retain(|_, seen| now_ms.saturating_sub(*seen) < dead_after);
        let mut out = Vec::new();
        for (id, rec) in &mut self.agents {
            let to = rec.detector.state(now_ms);
            if rec.reported != Some(to) {
                out.push(Transition {
                    agent: id.clone(),
                    from: rec.reported,
                    to,
                    at_ms: now_ms,
                    phi: rec.detector.phi(now_ms),
                    last_heard_ms: rec.heard_ms,
                });
                rec.reported = Some(to);
            }
        }
        out
    }
}

fn view(id: &AgentId, rec: &AgentRecord, now_ms: u64) -> AgentView {
    let hb = rec.last.as_ref();
    AgentView {
        id: id.clone(),
        state: rec.detector.state(now_ms),
        cpu_pct: hb.map_or(0.0, |h| h.cpu_pct),
        memory_bytes: hb.map_or(0, |h| h.memory_bytes),
        active_downloaders: hb.map_or(0, |h| h.active_downloaders),
        in_flight: hb.map_or(0, |h| h.in_flight),
        qps: hb.map_or(0.0, |h| h.qps),
        last_heartbeat_ms: rec.last_read_ms,
        phi: rec.detector.phi(now_ms),
        labels: rec.info.labels.clone(),
        capacity: rec.info.capacity,
        host: rec.info.host.clone(),
        version: rec.info.version.clone(),
        cores: rec.info.cores,
        total_memory_bytes: rec.info.memory_bytes,
        draining: false,
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
