//! `silk-hub`: the hub of the download center (design §4): the agent registry with its
//! failure detector, allocation strategies, runs dispatched to agents over the bus, jobs and
//! their schedule, and the HTTP API.
//!
//! # Layers
//!
//! Dependencies point down, never up (`crates/silk/tests/layering.rs` checks every `crate::`
//! path against this table):
//!
//! - **edge** — `api` (the axum routes and OpenAPI document, [`HubHandle::router`]), `auth`
//!   (API tokens), `ui` (the embedded web UI), [`taskhub`] (the router's classes that need
//!   the hub: `silk.JobOutbound`, `silk.RunResultsInbound`, registered with [`HubClasses`]).
//!   The edge names only the facade and the model.
//! - **facade** — [`hub`]: [`Hub::start`] wires the services; [`HubHandle`] is what the edge
//!   and the binary call (runs, jobs, agents, items, shutdown). Its methods are thin.
//! - **services** — tasks and operations over the shared state: `presence` (the bus inputs:
//!   registrations, heartbeats, results, allocation replies, log batches; the ticker of agent
//!   states), `launch` (a run's start: checked, leased, stored, allocated, seeded, driven),
//!   `runner` (one active run's dispatch loop and result handling, given a `RunContext` of
//!   exactly what a driver may use, not the hub), `ownership` (run leases
//!   among hubs, adoption, restart recovery), `scheduler` (cron fires, retries, timeouts,
//!   queued fires; the job operations), `sinks` (SQL, webhook and target sinks tailing item logs),
//!   `feeds` (the runs the router feeds, and every run's outcomes handed to a consumer).
//! - **state** — `state` (`HubCore`: what the services share — registry, the table of active
//!   runs, store, run repository, bus, clock, files, logs — with the small operations every
//!   service uses; it spawns nothing and drives nothing) and `live` (`Run`: one active run's
//!   shared state and the reads on it, and `RunContext`).
//! - **adapters** — `repo` (run records in the store, written only under the run's lease),
//!   `link` (the agents over the bus: who is live, commands to one),
//!   `files` (the data dir), `logs` (the run log queue into the store), `items` (a run's one
//!   item log: its file or the store's table), `outcomes` (the per-run final outcomes file),
//!   `tailer` (the one tailer of a run's append-only logs).
//! - **model** — pure: [`run`] (a run's stored record, request checks, its API view),
//!   `routed` (what the router and the hub exchange: [`FeedTask`], outcome lines, the
//!   outcome consumer trait),
//!   [`jobs`] (job checks, args, patches, store rows), `dispatch` (a dispatch turn's
//!   decision), [`phi`] ([`PhiDetector`]), [`registry`] ([`AgentRegistry`]
//!   fed by [`Register`](silk_bus::Register) and [`Heartbeat`](silk_bus::Heartbeat); state
//!   changes come out of [`tick`](AgentRegistry::tick) as [`Transition`]s), [`allocation`]
//!   (`random`, `fixed:N`, `chained:N`, `on_agent_lost`: [`allocate`] at run start, then
//!   [`Allocation::route`] per request), [`error`] ([`HubError`]), `config` ([`HubConfig`]), `sink_targets` ([`SinkTargets`]: the
//!   item sink targets an admin declared).
//!
//! # Invariants
//!
//! The model is pure: no I/O, no clock reads, no tasks, no locks (time comes in as `now_ms`,
//! randomness as `&mut impl Rng`), so it is deterministic under test. `state` knows no
//! service; a service never names the facade or the edge. The hub talks to agents only
//! through `silk-bus` messages. A run record is stored only under the run's lease (`repo`). A
//! result is applied to the frontier only if its lease is still out (late and duplicate
//! results are ignored), and its items are written before its ack.

mod alert;
mod alerts;
pub mod allocation;
pub mod api;
mod archive;
pub mod auth;
mod builds;
mod config;
mod dispatch;
pub mod error;
mod expansion;
mod fair;
mod feeds;
mod files;
pub mod hub;
mod hub_alerts;
mod hub_projects;
mod hub_router;
mod hub_tenants;
mod items;
mod job_frontier;
pub mod jobs;
mod launch;
mod link;
mod live;
mod logs;
mod outcomes;
mod ownership;
pub mod phi;
mod presence;
mod programs;
mod project;
mod quotas;
pub mod registry;
mod repo;
mod routed;
pub mod run;
mod runner;
mod scale;
mod scheduler;
pub mod sdk;
mod sink_targets;
mod sinks;
mod state;
mod tailer;
pub mod taskhub;
mod tenant;
mod ui;

pub use allocation::{Allocation, AllocationError, Route, allocate};
pub use api::{ApiOptions, openapi};
pub use auth::ADMIN_TOKEN_FILE;
pub use config::{AlertSettings, BuildSettings};
pub use config::{HubConfig, MAX_SCALE_BACKOFF_MS, PoolDecl, RunDefaults};
pub use error::HubError;
pub use files::KnownAgent;
pub use hub::{Hub, HubHandle, RunQuery, RunScope};
pub use hub_projects::WebhookAnswer;
pub use phi::{PhiConfig, PhiDetector};
pub use registry::{
    AgentRegistry, Applied, HeartbeatOutcome, LabelFilter, RegisterOutcome, Transition,
};
pub use routed::FeedTask;
pub use sink_targets::SinkTargets;
pub use taskhub::HubClasses;
