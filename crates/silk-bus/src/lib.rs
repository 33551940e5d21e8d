//! `silk-bus`: how Silk's hub and agents talk. The [`Bus`] trait (in other systems: broker,
//! message queue) with an in-process implementation ([`InProcessBus`], the embedded mode) and
//! a NATS JetStream one ([`NatsBus`], the distributed mode); the versioned wire messages
//! ([`wire`]); the subjects ([`subject`]); and the conformance suite both pass
//! ([`conformance`]).
//!
//! Map:
//! - [`wire`] — the [`Envelope`] (version, id, timestamp, TTL) and the typed messages:
//!   [`Register`], [`Heartbeat`], [`Command`], [`RunResult`], [`Control`],
//!   [`AllocationReply`], [`LogBatch`], [`HubBeacon`], …; TTL defaults.
//! - [`subject`] — every subject, and the validation that keeps ids from injecting tokens.
//! - [`bus`] — the trait, options, retries, [`Subscription`] (decode, drop stale, count).
//! - [`in_process`], [`nats`] — the two backends.
//!
//! This crate knows nothing of runs, frontiers or fetching: it moves typed messages and says
//! how fresh they are. What a message means is the hub's and the agent's business.

pub mod bus;
pub mod conformance;
pub mod error;
pub mod faulty;
pub mod in_process;
pub mod nats;
pub mod subject;
pub mod wire;

pub use bus::{
    Acknowledge, Bus, BusConfig, Deliver, Delivery, RawDelivery, RetryPolicy, SubscribeOpts,
    Subscription, SubscriptionStats,
};
pub use error::BusError;
pub use in_process::InProcessBus;
pub use nats::NatsBus;

pub use subject::{Subject, SubjectClass};
pub use wire::{
    AllocationReply, ArtifactRef, BodyEncoding, Command, Control, Envelope, FetchOutcome,
    FetchReply, Heartbeat, HubBeacon, Kind, LeasedRequest, LogBatch, LogEntry, LogLevel, Message,
    MessageId, ProgramAction, ProgramStart, Register, ResultBody, ResultError, RunResult, Timings,
    TtlPolicy, WIRE_VERSION, WorkerEvent, WorkerReport,
};
