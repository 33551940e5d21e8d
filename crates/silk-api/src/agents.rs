//! Agents on the wire: [`AgentView`] (`GET /api/v1/agents`) and [`AgentState`], the failure
//! detector's verdict on an agent.

use serde::{Deserialize, Serialize};
use silk_core::AgentId;
use std::collections::BTreeMap;
use std::fmt;

/// The liveness of an agent, as the failure detector sees it.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum AgentState {
    /// Heartbeats arrive as expected.
    Alive,
    /// Late: `phi >= threshold / 2`. Still live.
    Suspect,
    /// `phi >= threshold` or silent for `dead_after_ms`: its work goes elsewhere.
    Dead,
}

impl AgentState {
    /// `alive`, `suspect` or `dead`.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentState::Alive => "alive",
            AgentState::Suspect => "suspect",
            AgentState::Dead => "dead",
        }
    }

    /// Whether the agent may be given work (alive or suspect).
    pub fn is_live(self) -> bool {
        self != AgentState::Dead
    }
}

impl fmt::Display for AgentState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One agent as `silk agents` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AgentView {
    /// The agent.
    #[schema(value_type = String)]
    pub id: AgentId,
    /// Its state at the time asked.
    pub state: AgentState,
    /// CPU use, percent (last heartbeat; 0 before any).
    pub cpu_pct: f64,
    /// Memory in use (last heartbeat; 0 before any).
    pub memory_bytes: u64,
    /// Downloaders allocated on it (last heartbeat).
    pub active_downloaders: u32,
    /// Requests it is fetching (last heartbeat).
    pub in_flight: u32,
    /// Requests per second (last heartbeat).
    pub qps: f64,
    /// When its last heartbeat was read, hub clock, ms since the epoch; `None` before any.
    pub last_heartbeat_ms: Option<u64>,
    /// phi at the time asked (`null` when infinite: JSON has no infinity).
    #[serde(deserialize_with = "null_is_infinite")]
    pub phi: f64,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Requests it accepts in flight at once.
    pub capacity: u32,
    /// Host name.
    pub host: String,
    /// Silk version.
    pub version: String,
    /// CPU cores.
    pub cores: u32,
    /// Physical memory.
    pub total_memory_bytes: u64,
    /// Being drained (`silk agents drain`): it takes no new work (no new runs, no requests
    /// of `random` runs) and finishes the runs that hold it.
    #[serde(default)]
    pub draining: bool,
}

/// A float, `null` read as infinity (serde_json writes a non-finite float as `null`).
fn null_is_infinite<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
}

/// A pool that declares the agents it needs (`silk hub --pools FILE`), as `GET
/// /api/v1/pools` shows it. The scale command itself is never shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PoolView {
    /// The pool: agents labelled `pool=NAME`.
    pub name: String,
    /// Live agents it needs.
    pub agents: u32,
    /// Live agents it has (labelled, not drained).
    pub alive: u32,
    /// `agents - alive` (0 when it has enough).
    pub deficit: u32,
    /// Its scale command's state.
    pub scale: ScaleView,
}

/// What a pool's scale command did last and does next.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScaleView {
    /// Whether the pool has a scale command (without one the deficit is only reported).
    pub command: bool,
    /// Whether it is running now.
    pub running: bool,
    /// Runs since the pool last had enough agents.
    pub attempts: u32,
    /// When the last run ended, ms since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_ms: Option<u64>,
    /// Whether the last run exited with status 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_ok: Option<bool>,
    /// The last run's output (its stdout, or why it failed), at most 500 characters; shown
    /// to admins only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_message: Option<String>,
    /// The deficit the last run was told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_deficit: Option<u32>,
    /// When the deficit is checked again and the command run if it stays, ms since the
    /// epoch (absent while the pool has enough agents or the command runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_ms: Option<u64>,
}
