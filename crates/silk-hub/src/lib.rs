//! `silk-hub`: the hub of the download center (design §4). This crate will hold the
//! dispatcher and the HTTP API; for now it holds their pure foundations:
//!
//! - [`phi`] — a phi accrual failure detector per agent ([`PhiDetector`]), capped by
//!   `dead_after`, giving each agent an [`AgentState`]: `alive`, `suspect` or `dead`.
//! - [`registry`] — the [`AgentRegistry`], fed by the bus's [`Register`](silk_bus::Register)
//!   and [`Heartbeat`](silk_bus::Heartbeat) messages; it answers "which agents are there,
//!   how are they, which are live" and reports state changes from
//!   [`tick`](AgentRegistry::tick) as [`Transition`]s for the dispatcher to act on.
//! - [`allocation`] — the allocation strategies (`random`, `fixed:N`, `chained:N`) and the
//!   `on_agent_lost` policy: [`allocate`] at run start, then [`Allocation::route`] per
//!   request.
//! - [`error`] — [`HubError`], the one error type of the crate.
//!
//! # What these modules must not do
//!
//! No I/O, no clock reads, no tasks, no locks: time comes in as `now_ms` arguments (read by
//! the caller from a [`silk_core::Clock`], a [`silk_core::ManualClock`] in tests) and
//! randomness as a `&mut impl rand::Rng`, so every behaviour is deterministic under test.
//! Talking to the bus, storing allocations and timing ticks belong to the layers above.

pub mod allocation;
pub mod error;
pub mod phi;
pub mod registry;

pub use allocation::{Allocation, OnAgentLost, Route, Strategy, allocate};
pub use error::HubError;
pub use phi::{AgentState, PhiConfig, PhiDetector};
pub use registry::{
    AgentRegistry, AgentView, Applied, HeartbeatOutcome, LabelFilter, RegisterOutcome, Transition,
};
