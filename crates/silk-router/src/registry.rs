//! The component seams and the class registry: a rule's `class` key (`redis_queue.RedisListOutbound`)
//! is looked up here, Vector-style, and its factory validates `init` at config load and
//! builds the component, which connects lazily when the router starts.
//!
//! - [`Inbound`] (in other systems: source, consumer): where tasks come from.
//! - [`Outbound`] (in other systems: sink, producer, queue writer): where routed tasks go.
//! - [`Convert`] (in other systems: transform, filter): reshapes a task before selectors see it.
//!
//! Some classes are known but cannot work outside the hub: `silk.JobOutbound` /
//! `silk.RunResultsInbound` need the Silk hub —
//! the hub registers real factories for them with [`Registry::register_inbound`] /
//! [`Registry::register_outbound`] before loading a config. Loading a config that uses one
//! while it is unavailable is a config error naming why.
//!
//! Factories must not do I/O: a config is loaded (and `silk router check` runs) without
//! any server being reachable.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{Map, Value};

use crate::error::RouterError;
use crate::outcome::Outcome;
use crate::read::InitReader;
use tokio::sync::watch;

/// The router as an inbound's consumers reach it ([`Router`](crate::Router) implements it).
#[async_trait]
pub(crate) trait Intake: Send + Sync + 'static {
    /// Routes one task for inbound `inbound`.
    async fn submit(&self, inbound: usize, task: Value) -> Result<Outcome, RouterError>;
    /// Routes one message (JSON text of a task) for inbound `inbound`.
    async fn submit_bytes(&self, inbound: usize, message: &[u8]) -> Result<Outcome, RouterError>;
}

/// What an inbound's consumer tasks get: the way into the router and the stop signal.
#[derive(Clone)]
pub struct InboundContext {
    intake: Arc<dyn Intake>,
    index: usize,
    name: String,
    threads: usize,
    stop: watch::Receiver<bool>,
}

impl std::fmt::Debug for InboundContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboundContext")
            .field("inbound", &self.name())
            .finish()
    }
}

impl InboundContext {
    pub(crate) fn new(
        intake: Arc<dyn Intake>,
        index: usize,
        name: String,
        threads: usize,
        stop: watch::Receiver<bool>,
    ) -> Self {
        Self {
            intake,
            index,
            name,
            threads,
            stop,
        }
    }

    /// The inbound's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many consumers to run (`threads`).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Whether the router is shutting down (stop taking new tasks).
    pub fn is_stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Resolves when the router starts shutting down.
    pub async fn stopping(&self) {
        let mut stop = self.stop.clone();
        let _ = stop.wait_for(|s| *s).await;
    }

    /// Runs `ctx.threads()` consumers, `consume(n, ctx)` each on a task of its own, and
    /// returns when all of them have.
    pub async fn run_consumers<F, Fut>(&self, consume: F)
    where
        F: Fn(usize, InboundContext) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let tasks = (0..self.threads()).map(|n| tokio::spawn(consume(n, self.clone())));
        futures::future::join_all(tasks).await;
    }

    /// Routes one task; see [`Router::submit`](crate::Router::submit).
    pub async fn submit(&self, task: Value) -> Result<Outcome, RouterError> {
        self.intake.submit(self.index, task).await
    }

    /// Routes one message: JSON text of a task. A message that is not a JSON object is
    /// recorded in the failure record (reason `bad_task`, with the raw text) and counted,
    /// and the result is `Ok` so that the inbound drops it.
    pub async fn submit_bytes(&self, message: &[u8]) -> Result<Outcome, RouterError> {
        self.intake.submit_bytes(self.index, message).await
    }
}

/// One routed task on its way out.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// The task as JSON text (what is pushed).
    pub payload: Bytes,
    /// Whether the task is real-time (built-in `rt`): a Redis list puts it at the head.
    pub rt: bool,
    /// A stable id of this delivery (`task_uuid:routed_count`), for targets that
    /// deduplicate (JetStream's `Nats-Msg-Id`).
    pub delivery_id: String,
}

/// Where routed tasks go (in other systems: sink, producer). Implementations are
/// `Send + Sync` and shared; the router calls [`push`](Outbound::push) from one sender task
/// per outbound, with batches of up to `batch_size` tasks. The hub also uses outbounds as
/// item sink targets, whose pushes come from every run's sink at once: `push` must be safe
/// to call concurrently.
#[async_trait]
pub trait Outbound: Send + Sync + 'static {
    /// Where tasks go, for people; must not contain credentials (see [`crate::redact`]).
    fn target(&self) -> String;

    /// Whether [`backlog`](Outbound::backlog) can say how many tasks wait at the target;
    /// `max_lag` needs it.
    fn has_backlog(&self) -> bool;

    /// Delivers a batch. The result has one entry per task, in order (a target that is
    /// all-or-nothing repeats its one result). An error is retryable unless it says not.
    /// A task the target will never take (bad input for it) gets
    /// [`RouterError::Refused`]: it is not tried again, and the router ends it as failed
    /// (`refused`) and records it instead of handing it back to its inbound.
    async fn push(&self, batch: &[Outgoing]) -> Vec<Result<(), RouterError>>;

    /// How many tasks wait at the target (`LLEN` of a Redis list), or `None` when the
    /// target cannot say.
    async fn backlog(&self) -> Result<Option<u64>, RouterError>;
}

/// Where tasks come from (in other systems: source, consumer). HTTP inbounds run nothing:
/// the router's own server hands their tasks over.
#[async_trait]
pub trait Inbound: Send + Sync + 'static {
    /// Where tasks come from, for people; no credentials.
    fn source(&self) -> String;

    /// Whether this is an HTTP inbound (fed by `POST /task/`).
    fn is_http(&self) -> bool {
        false
    }

    /// Consumes tasks until `ctx` says the router is shutting down, handing each to
    /// [`InboundContext::submit`] with `ctx.threads()` consumers, and acknowledging a task
    /// at its source only after `submit` returned `Ok`. Returns when it has stopped.
    async fn run(self: Arc<Self>, ctx: InboundContext) -> Result<(), RouterError>;
}

/// Reshapes a task in an inbound's `convert` chain, before the inbound's selectors.
#[async_trait]
pub trait Convert: Send + Sync + 'static {
    /// What the step does, for `check_task` answers and logs.
    fn describe(&self) -> String;
    /// Applies the step. [`RouterError::ConvertFailed`] fails the task (recorded, reason
    /// `convert_failed`); a retryable error leaves it with its inbound.
    async fn apply(&self, task: &mut Map<String, Value>) -> Result<(), RouterError>;
}

/// Builds an [`Outbound`] from its `init` keys (no I/O).
pub trait OutboundFactory: Send + Sync + 'static {
    /// The keys this class reads. For outbounds these may be written in `init` or beside
    /// `class` (as the seed's table lists `url` and `key` with the routing keys).
    fn keys(&self) -> &'static [&'static str];
    /// Validates and builds; records problems in `init` and returns `None` on any.
    fn build(&self, init: &mut InitReader<'_>) -> Option<Arc<dyn Outbound>>;
}

/// Builds an [`Inbound`] from its `init` keys (no I/O).
pub trait InboundFactory: Send + Sync + 'static {
    /// The keys this class reads in `init`.
    fn keys(&self) -> &'static [&'static str];
    /// Validates and builds; records problems in `init` and returns `None` on any.
    fn build(&self, init: &mut InitReader<'_>) -> Option<Arc<dyn Inbound>>;
}

/// Builds a [`Convert`] step from its `init` keys.
pub trait ConvertFactory: Send + Sync + 'static {
    /// The keys this class reads in `init`.
    fn keys(&self) -> &'static [&'static str];
    /// Validates and builds.
    fn build(&self, init: &mut InitReader<'_>) -> Option<Arc<dyn Convert>>;
}

/// A class name's entry: a factory, or the reason it cannot be used in this build.
pub(crate) enum Entry<F: ?Sized> {
    Available(Arc<F>),
    Unavailable(String),
}

impl<F: ?Sized> Clone for Entry<F> {
    fn clone(&self) -> Self {
        match self {
            Entry::Available(f) => Entry::Available(f.clone()),
            Entry::Unavailable(r) => Entry::Unavailable(r.clone()),
        }
    }
}

/// Class name → factory, for inbounds, outbounds and convert steps.
#[derive(Clone)]
pub struct Registry {
    pub(crate) inbounds: HashMap<String, Entry<dyn InboundFactory>>,
    pub(crate) outbounds: HashMap<String, Entry<dyn OutboundFactory>>,
    pub(crate) converts: HashMap<String, Entry<dyn ConvertFactory>>,
    /// `--plugins`: the folder Python converts are loaded from, over the config's `plugins`.
    pub(crate) plugins_dir: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |m: Vec<&String>| {
            let mut v: Vec<String> = m.into_iter().cloned().collect();
            v.sort();
            v
        };
        f.debug_struct("Registry")
            .field("inbounds", &names(self.inbounds.keys().collect()))
            .field("outbounds", &names(self.outbounds.keys().collect()))
            .field("converts", &names(self.converts.keys().collect()))
            .finish()
    }
}

/// The reason `silk.*` classes are unavailable outside the hub.
pub const NEEDS_HUB: &str =
    "needs the Silk hub: run the router inside it (`silk up --router` or `silk hub --router`)";

impl Registry {
    /// A registry with no class (see `components` for the standard one).
    pub(crate) fn empty() -> Registry {
        Registry {
            inbounds: HashMap::new(),
            outbounds: HashMap::new(),
            converts: HashMap::new(),
            plugins_dir: None,
        }
    }

    /// Sets the folder Python converts are loaded from (`--plugins`), for every config
    /// loaded with this registry; it wins over a config's `plugins`.
    pub fn set_plugins_dir(&mut self, dir: impl Into<std::path::PathBuf>) -> &mut Registry {
        self.plugins_dir = Some(dir.into());
        self
    }

    /// Registers (or replaces) an inbound class.
    pub fn register_inbound(
        &mut self,
        class: &str,
        factory: Arc<dyn InboundFactory>,
    ) -> &mut Registry {
        self.inbounds
            .insert(class.into(), Entry::Available(factory));
        self
    }

    /// Registers (or replaces) an outbound class.
    pub fn register_outbound(
        &mut self,
        class: &str,
        factory: Arc<dyn OutboundFactory>,
    ) -> &mut Registry {
        self.outbounds
            .insert(class.into(), Entry::Available(factory));
        self
    }

    /// Registers (or replaces) a convert class.
    pub fn register_convert(
        &mut self,
        class: &str,
        factory: Arc<dyn ConvertFactory>,
    ) -> &mut Registry {
        self.converts
            .insert(class.into(), Entry::Available(factory));
        self
    }

    pub(crate) fn inbound(&self, class: &str) -> Option<&Entry<dyn InboundFactory>> {
        self.inbounds.get(class)
    }

    pub(crate) fn outbound(&self, class: &str) -> Option<&Entry<dyn OutboundFactory>> {
        self.outbounds.get(class)
    }

    pub(crate) fn convert(&self, class: &str) -> Option<&Entry<dyn ConvertFactory>> {
        self.converts.get(class)
    }

    /// Class names of one kind, sorted (for "unknown class" messages).
    pub(crate) fn names(&self, kind: &str) -> Vec<String> {
        let mut names: Vec<String> = match kind {
            "inbound" => self.inbounds.keys().cloned().collect(),
            "outbound" => self.outbounds.keys().cloned().collect(),
            _ => self.converts.keys().cloned().collect(),
        };
        names.sort();
        names
    }
}
