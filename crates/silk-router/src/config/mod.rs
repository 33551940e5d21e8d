//! The router's config: what `silk router --config main.yaml` loads. [`Config`] is the
//! validated, compiled form (selectors parsed, components built but not connected), shared
//! by the running router and by [`crate::explain`].
//!
//! Loading ([`Config::load`]) reads the main file and its `include`s, fills `{placeholder}`s,
//! checks every key and returns *all* problems at once, each with file, line and rule.
//! The format is taskHUB's (see `docs/router.md` for every key and every choice made where
//! the seed is silent). This module must not do network I/O.

mod load;
mod rules;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde_json::{Map, Value};
use silk_selector::SelectorList;

use crate::error::{ConfigError, RouterError};
use crate::plugins::PluginHost;
pub use crate::plugins::PluginSettings;
use crate::registry::{Convert, Inbound, Outbound, Registry};
use crate::vars::Vars;

pub(crate) use load::load;

/// A validated config.
#[derive(Debug, Clone)]
pub struct Config {
    /// `project`: names the router in metrics and the failure file (default: the main
    /// file's stem).
    pub project: String,
    /// `server`: where the HTTP server listens.
    pub server: ServerConfig,
    /// `routing`: limits, terminal codes, failure record.
    pub routing: RoutingConfig,
    /// Inbounds in merged order.
    pub inbounds: Vec<InboundRule>,
    /// Outbounds in merged order: the order rules are tried in.
    pub outbounds: Vec<OutboundRule>,
    /// `logging`.
    pub logging: LoggingConfig,
    /// Every file read, in merge order (the main file first).
    pub files: Vec<PathBuf>,
    /// Things that load but deserve a look (duplicate YAML keys, ignored keys).
    pub warnings: Vec<ConfigError>,
    /// `plugins` (or `--plugins`): where Python converts are loaded from, and the workers
    /// that run them (`None` when the config sets no plugins folder).
    pub(crate) plugins: Option<Arc<PluginHost>>,
    inbound_index: HashMap<String, usize>,
    outbound_index: HashMap<String, usize>,
}

impl Config {
    /// Loads `paths` (the main config first; further paths merge after it as if
    /// included, but may also hold top-level sections) with the standard registry.
    pub fn load<P: AsRef<Path>>(paths: &[P], vars: &Vars) -> Result<Config, Vec<ConfigError>> {
        Self::load_with(paths, vars, &Registry::standard())
    }

    /// Loads with a registry that may hold more classes (the hub's `silk.*` ones).
    pub fn load_with<P: AsRef<Path>>(
        paths: &[P],
        vars: &Vars,
        registry: &Registry,
    ) -> Result<Config, Vec<ConfigError>> {
        let paths: Vec<PathBuf> = paths.iter().map(|p| p.as_ref().to_path_buf()).collect();
        load(&paths, vars, registry)
    }

    /// The index of the inbound named `name`.
    pub fn inbound_index(&self, name: &str) -> Option<usize> {
        self.inbound_index.get(name).copied()
    }

    /// The index of the outbound named `name`.
    pub fn outbound_index(&self, name: &str) -> Option<usize> {
        self.outbound_index.get(name).copied()
    }

    /// The outbound named `name`.
    pub fn outbound(&self, name: &str) -> Option<&OutboundRule> {
        self.outbound_index(name).map(|i| &self.outbounds[i])
    }

    /// The inbound named `name`.
    pub fn inbound(&self, name: &str) -> Option<&InboundRule> {
        self.inbound_index(name).map(|i| &self.inbounds[i])
    }

    /// The plugins folder's settings, when the config has one.
    pub fn plugins(&self) -> Option<&PluginSettings> {
        self.plugins.as_deref().map(PluginHost::settings)
    }

    /// Starts a Python worker and instantiates every Python convert step's class with its
    /// `init`: one error per step that does not load, at the step's place in the config.
    /// Nothing to do (and `Ok`) without Python converts. `silk router check` and every
    /// router start call it.
    pub async fn verify_plugins(&self) -> Result<(), Vec<ConfigError>> {
        let Some(host) = &self.plugins else {
            return Ok(());
        };
        let errors = host.verify().await;
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// The first enabled HTTP inbound, which `POST /task/` without `?inbound=` uses.
    pub fn default_http_inbound(&self) -> Option<usize> {
        self.inbounds
            .iter()
            .position(|i| !i.disable && i.component.0.is_http())
    }
}

/// `server:` — the router's HTTP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// `bind` (default `127.0.0.1`).
    pub bind: String,
    /// `port` (default 8526, the seed's example).
    pub port: u16,
    /// `shutdown_grace_ms` (Silk; default 10000): how long a shutdown waits for tasks in
    /// flight before handing them back to their inbounds.
    pub shutdown_grace_ms: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: "127.0.0.1".into(),
            port: 8526,
            shutdown_grace_ms: 10_000,
        }
    }
}

/// `routing:`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RoutingConfig {
    /// `limits`: most pushes per task (`routed_count`); `-1` or `0` = no limit.
    pub limits: i64,
    /// `terminal_codes`: `task_result` values that end a returning task as succeeded.
    pub terminal_codes: Vec<i64>,
    /// `failure`: where failed tasks are recorded; `None` = only counted and logged.
    pub failure: Option<FailureConfig>,
}

/// `routing.failure:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureConfig {
    /// `path`: a file (JSON Lines), or an existing folder (then
    /// `{project}-failure.jsonl[.gz]` inside it).
    pub path: PathBuf,
    /// `compress`: gzip (one gzip member per batch of records; `zcat` reads the file).
    pub compress: bool,
}

/// `logging:` — only `level` is used (`trace`…`error`); the binary applies it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LoggingConfig {
    pub level: Option<String>,
}

/// Where a rule was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub file: Arc<Path>,
    pub line: usize,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// A shared component; `Debug` shows nothing of it.
pub(crate) struct Opaque<T: ?Sized>(pub Arc<T>);

impl<T: ?Sized> Clone for Opaque<T> {
    fn clone(&self) -> Self {
        Opaque(self.0.clone())
    }
}

impl<T: ?Sized> std::fmt::Debug for Opaque<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("..")
    }
}

/// One `inbound:` entry.
#[derive(Debug, Clone)]
pub struct InboundRule {
    pub name: String,
    pub disable: bool,
    /// `weight` (default 1): the inbound's share of an outbound's capacity when tasks
    /// from several inbounds wait for it (token bucket or `max_lag`).
    pub weight: u32,
    /// `selector`: `None` (key absent or empty) accepts every task.
    pub selector: Option<SelectorList>,
    pub class: String,
    /// `threads` (default 1): consumers of a Redis list or JetStream consumer.
    pub threads: usize,
    /// The convert chain, in order.
    pub converts: Vec<ConvertStep>,
    pub origin: Origin,
    pub(crate) component: Opaque<dyn Inbound>,
    pub(crate) logged: Arc<[AtomicBool]>,
}

impl InboundRule {
    /// The component (for the hub to inspect).
    pub fn component(&self) -> &Arc<dyn Inbound> {
        &self.component.0
    }
}

/// One step of a convert chain.
#[derive(Debug, Clone)]
pub struct ConvertStep {
    /// The class name, or `set` / `rename` / `remove`.
    pub class: String,
    pub(crate) step: Opaque<dyn Convert>,
}

impl ConvertStep {
    pub(crate) async fn apply(&self, task: &mut Map<String, Value>) -> Result<(), RouterError> {
        self.step.0.apply(task).await
    }

    /// What the step does.
    pub fn describe(&self) -> String {
        self.step.0.describe()
    }
}

/// One `outbound:` entry.
#[derive(Debug, Clone)]
pub struct OutboundRule {
    pub name: String,
    pub disable: bool,
    /// `selector`: absent or empty matches nothing (a failback-only outbound).
    pub selector: SelectorList,
    pub class: String,
    pub settings: OutboundSettings,
    pub origin: Origin,
    pub(crate) component: Opaque<dyn Outbound>,
    pub(crate) failback_index: Option<usize>,
    /// `task_params` without duplicates, built-ins and fixed params (what the payload
    /// copies from the task).
    pub(crate) copy_keys: Arc<[String]>,
    pub(crate) logged: Arc<[AtomicBool]>,
}

impl OutboundRule {
    /// The component (for the hub to inspect).
    pub fn component(&self) -> &Arc<dyn Outbound> {
        &self.component.0
    }
}

/// The routing keys of an outbound (the seed's RedisListOutbound table, plus Silk's).
#[derive(Debug, Clone, PartialEq)]
pub struct OutboundSettings {
    /// `task_params`: top-level keys copied into the pushed task; `None` = all keys
    /// except `task_result`.
    pub task_params: Option<Vec<String>>,
    /// `task_params_wrapped`: push `{"task_params": {...}}` instead of the flat object.
    pub task_params_wrapped: bool,
    /// `retry_limits` (default 0): retries on this outbound; negative = unlimited.
    pub retry_limits: i64,
    /// `priority`: built-in `priority` of normal tasks.
    pub priority: Option<i64>,
    /// `rt_priority`: built-in `priority` of real-time tasks.
    pub rt_priority: Option<i64>,
    /// `dont_retry_status`: codes routed again by the rules (never to this outbound).
    pub dont_retry_status: Vec<i64>,
    /// `direct_failback_status`: codes sent straight to `failback`.
    pub direct_failback_status: Vec<i64>,
    /// `failback`: the outbound that takes tasks this one gives up on.
    pub failback: Option<String>,
    /// `token_scope`: the token bucket this outbound draws from; outbounds with the same
    /// scope share one. `None` or `*` = a bucket of its own.
    pub token_scope: Option<String>,
    /// `token_per_second`: the bucket's rate; `None` or ≤ 0 = unlimited.
    pub token_per_second: Option<f64>,
    /// `reset_retry_times`: a task entering this outbound from elsewhere starts at
    /// `retry_times` 0.
    pub reset_retry_times: bool,
    /// `max_lag`: most tasks waiting at the target; `-1`/`0` = no cap.
    pub max_lag: i64,
    /// Fixed task parameters: `params:` and the extra keys written beside `class` or in
    /// `init` (the seed's `task_src: 3`, `task_type: 破码`).
    pub params: Map<String, Value>,
    /// `queue_capacity` (Silk; default 10000): tasks held in memory for this outbound
    /// before submitters wait.
    pub queue_capacity: usize,
    /// `batch_size` (Silk; default 500): most tasks per push.
    pub batch_size: usize,
    /// `max_lag_check_ms` (Silk; default 500): how often a held outbound reads the backlog.
    pub max_lag_check_ms: u64,
}

impl Default for OutboundSettings {
    fn default() -> Self {
        OutboundSettings {
            task_params: None,
            task_params_wrapped: false,
            retry_limits: 0,
            priority: None,
            rt_priority: None,
            dont_retry_status: Vec::new(),
            direct_failback_status: Vec::new(),
            failback: None,
            token_scope: None,
            token_per_second: None,
            reset_retry_times: false,
            max_lag: -1,
            params: Map::new(),
            queue_capacity: 10_000,
            batch_size: 500,
            max_lag_check_ms: 500,
        }
    }
}

impl OutboundSettings {
    /// The bucket key of this outbound: its scope, or its own name for `*`/unset.
    pub(crate) fn bucket_key(&self, outbound: &str) -> Option<String> {
        self.token_per_second.filter(|r| *r > 0.0)?;
        Some(match self.token_scope.as_deref() {
            None | Some("*") | Some("") => format!("outbound:{outbound}"),
            Some(scope) => format!("scope:{scope}"),
        })
    }
}
