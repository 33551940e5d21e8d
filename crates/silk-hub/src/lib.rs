//! `silk-hub`: the hub of the download center (design §4): the agent registry with its
//! failure detector, allocation strategies, runs dispatched to agents over the bus, and the
//! HTTP API.
//!
//! Map:
//! - [`hub`] — [`Hub::start`] / [`HubHandle`]: the hub's tasks (registrations, heartbeats,
//!   results, allocation replies, ticker) and run submission with synchronous allocation.
//! - `runner` — one active run: frontier, item sink, requests out, dispatch loop,
//!   back-pressure, results, agent death.
//! - [`run`] — what a run is on the wire and on disk: [`RunRequest`], [`RunRecord`],
//!   [`RunState`], [`RunStats`], [`RunView`].
//! - `files` — the hub's data dir (run records, known agents; atomic JSON files).
//! - `api` — the axum router of the REST API ([`HubHandle::router`]).
//! - [`phi`] — a phi accrual failure detector per agent ([`PhiDetector`]), capped by
//!   `dead_after`, giving each agent an [`AgentState`]: `alive`, `suspect` or `dead`.
//! - [`registry`] — the [`AgentRegistry`], fed by the bus's [`Register`](silk_bus::Register)
//!   and [`Heartbeat`](silk_bus::Heartbeat) messages; state changes come out of
//!   [`tick`](AgentRegistry::tick) as [`Transition`]s.
//! - [`allocation`] — the allocation strategies (`random`, `fixed:N`, `chained:N`) and the
//!   `on_agent_lost` policy: [`allocate`] at run start, then [`Allocation::route`] per
//!   request.
//! - [`error`] — [`HubError`], the one error type of the crate.
//! - [`taskhub`] — the router's classes that need the hub: `silk.JobOutbound` (routed tasks
//!   feed a job's run, [`HubHandle::feed_job`]) and `silk.RunResultsInbound` (each fetched
//!   request's final outcome, from `outcomes`, comes back as a task), registered with
//!   [`HubClasses`].
//! - `outcomes` — the per-run `outcomes.jsonl` those come from.
//!
//! # Invariants
//!
//! `phi`, `registry` and `allocation` are pure: no I/O, no clock reads, no tasks, no locks
//! (time comes in as `now_ms`, randomness as `&mut impl Rng`), so they are deterministic under
//! test. The hub talks to agents only through `silk-bus` messages. A result is applied to
//! the frontier only if its lease is still out (late and duplicate results are ignored), and
//! its items are written before its ack.

pub mod allocation;
pub mod api;
pub mod auth;
mod dispatch;
pub mod error;
mod files;
pub mod health;
pub mod hub;
mod items;
pub mod jobs;
mod logs;
mod outcomes;
mod ownership;
pub mod phi;
pub mod registry;
pub mod run;
mod runner;
mod scheduler;
mod sinks;
mod tailer;
pub mod taskhub;
mod ui;

pub use allocation::{Allocation, AllocationError, OnAgentLost, Route, Strategy, allocate};
pub use api::{ApiOptions, openapi};
pub use auth::{ADMIN_TOKEN_FILE, NewToken, TokenView};
pub use error::HubError;
pub use files::KnownAgent;
pub use health::FailIf;
pub use hub::{Hub, HubConfig, HubHandle, RunQuery};
pub use items::ItemsPage;
pub use jobs::{Job, JobSpec};
pub use phi::{AgentState, PhiConfig, PhiDetector};
pub use registry::{
    AgentRegistry, AgentView, Applied, HeartbeatOutcome, LabelFilter, RegisterOutcome, Transition,
};
pub use run::{Feed, RunRequest, RunState, RunStats, RunView, Sinks, WebhookSink};
pub use scheduler::TriggerRequest;
pub use taskhub::{FeedTask, HubClasses};
