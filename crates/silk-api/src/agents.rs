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
